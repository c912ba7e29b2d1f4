"""Text-kernel training Gram columns as blocks (:class:`corpora.parallel.BlockExecutor`).

The low-rank KCCA solver reads the training text Gram one pivot column at a time
(:meth:`kernels.text.kernel.TextKernel.gram_columns`).  A column is cut into blocks of
:data:`COLUMN_BLOCK_ITEMS` training items (:meth:`~kernels.text.kernel.TextKernel.column_block`: the
pivot item's captions against those items' captions, explicit features or the soft-TRI dynamic
programme of Hodosh et al. 2013, Eqs. 17-21), run in this process or on Dask workers and stacked in
item order, so the numbers are the same wherever the blocks run.  The fitted kernel goes to the cluster
once per decomposition, as a :class:`~corpora.parallel.Shared` context; each block is cached in
``text_gram_column`` under the digest of the training Gram's key, the pivot item and the block's items.
"""
from __future__ import annotations

import numpy as np

from corpora.cache import DiskCache, cache_key
from corpora.parallel import BlockExecutor, Shared, blocks_of

__all__ = ["COLUMN_BLOCK_ITEMS", "column_block", "text_columns"]

#: Training items per block of a text Gram column (soft TRI: about five query captions against
#: 40,000 captions, seconds of dynamic programme; explicit features: a sparse product).
COLUMN_BLOCK_ITEMS = 8192


def column_block(kernel, block, cache: DiskCache) -> dict[str, np.ndarray]:
    """``{"K": (hi - lo,)}``: items ``lo:hi`` of the column of ``item`` (``block``: ``(item, lo, hi)``).
    Runs on a Dask worker (or here, in-process)."""
    item, lo, hi = block
    return {"K": kernel.column_block(int(item), int(lo), int(hi))}


def text_columns(kernel, items: list[int], executor: BlockExecutor | None, cache: DiskCache,
                 context: Shared | None = None) -> np.ndarray:
    """Columns ``items`` of ``kernel``'s normalised training Gram ``(n_train, len(items))`` float32 (the
    diagonal entries before the diagonal factor), in blocks of :data:`COLUMN_BLOCK_ITEMS` items on
    ``executor`` (``None``: in this process).  ``context``: the kernel wrapped in :class:`Shared`, to send
    it to the cluster once for every column of a decomposition (default: once per call)."""
    executor = executor if executor is not None else BlockExecutor()
    n = kernel.n_items
    spans = blocks_of(n, COLUMN_BLOCK_ITEMS)
    whole = kernel.__dict__.get("_column_digest")
    if whole is None:    # the digest of 100k training ids takes milliseconds: once per kernel, not per column
        whole = kernel.__dict__["_column_digest"] = cache_key(kernel.column_cache_key())
    out = np.empty((n, len(items)), dtype=np.float32)
    for k, item in enumerate(items):
        blocks = [(item, a, b) for a, b in spans]
        keys = [{"gram": whole, "item": item, "items": [a, b], "version": 2} for a, b in spans]
        parts = executor.map_blocks(column_block, blocks, context=context if context is not None else kernel,
                                    cache=cache, namespace="text_gram_column", keys=keys,
                                    desc=f"{kernel.name} column", show_progress=False)
        out[:, k] = np.concatenate([p["K"] for p in parts]) if parts else np.zeros(0, np.float32)
    return out
