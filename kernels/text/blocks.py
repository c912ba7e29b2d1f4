"""Text-kernel training Gram columns, Gram rows and query rows as blocks (:class:`corpora.parallel.BlockExecutor`).

Three kinds of work go out in fixed-size blocks, run in this process or on Dask workers and put back in
block order, so the numbers are the same wherever (and on how many workers) the blocks run:

* **Gram columns** (the low-rank KCCA solver reads the training Gram one pivot column at a time,
  :meth:`kernels.text.kernel.TextKernel.gram_columns`): a column is cut into blocks of
  :data:`COLUMN_BLOCK_ITEMS` training items (:meth:`~kernels.text.kernel.TextKernel.column_block`: the
  pivot item's captions against those items' captions, explicit features or the soft-TRI dynamic
  programme of Hodosh et al. 2013, Eqs. 17-21), each cached in ``text_gram_column``;
* **Gram rows** (the exact solver's training Gram of the kernels that are a dynamic programme or a
  caption-pair sum, :func:`gram_on_executor`: TagRank, Eqs. 9-11, in blocks of
  :data:`GRAM_BLOCK_CAPTIONS` training captions; soft TRI, Eqs. 17-21, in blocks of
  :data:`GRAM_BLOCK_ITEMS` training items), each cached in ``text_gram_rows``;
* **query rows** (a pool's captions against the training items, or against a low-rank view's pivots,
  :func:`queries_on_executor`), blocks of :data:`QUERY_BLOCK_CAPTIONS` captions, each cached in
  ``text_query_rows``.

The fitted kernel goes to the cluster once per decomposition (columns) or once per Gram or query call, as
a :class:`~corpora.parallel.Shared` context without its captions
(:meth:`~kernels.text.kernel.TextKernel.column_context`).  The explicit-feature kernels' Grams (BoW, TRI
without similarities) stay one sparse product in the calling process: seconds, where sending the feature
matrix to every worker would cost more.
"""
from __future__ import annotations

import numpy as np

from corpora.cache import DiskCache, cache_key
from corpora.parallel import BlockExecutor, Shared, blocks_of
from kernels.text.items import symmetrise_inplace

__all__ = ["COLUMN_BLOCK_ITEMS", "GRAM_BLOCK_CAPTIONS", "GRAM_BLOCK_ITEMS", "QUERY_BLOCK_CAPTIONS", "column_block",
           "gram_on_executor", "gram_row_block", "queries_on_executor", "query_row_block", "text_columns"]

#: Training items per block of a text Gram column (soft TRI: about five query captions against
#: 40,000 captions, seconds of dynamic programme; explicit features: a sparse product).
COLUMN_BLOCK_ITEMS = 8192
#: Training captions per block of a TagRank Gram's rows (eight of TagRank's own 256-caption blocks,
#: :data:`kernels.text.tagrank.BLOCK`, whose results travel back separately: the Gram adds each in
#: order, as in one process).
GRAM_BLOCK_CAPTIONS = 2048
#: Training items per block of a soft-TRI Gram's rows (each row: the item's captions against every caption
#: from its own on, the compiled dynamic programme; rows do not depend on the block).
GRAM_BLOCK_ITEMS = 256
#: Query captions per block of query rows (a multiple of TagRank's 256-caption blocks).
QUERY_BLOCK_CAPTIONS = 1024


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


def _map_with_kernel(kernel, executor: BlockExecutor, fn, blocks: list, cache: DiskCache, namespace: str,
                     keys: list[dict], what: str) -> list[dict[str, np.ndarray]]:
    """``executor.map_blocks(fn, blocks)`` with ``kernel``'s cluster copy
    (:meth:`~kernels.text.kernel.TextKernel.cluster_context`) sent once for the call and dropped after,
    each block cached in ``namespace`` under its key."""
    context = Shared(kernel.cluster_context())
    try:
        return executor.map_blocks(fn, blocks, context=context, cache=cache, namespace=namespace, keys=keys,
                                   desc=f"{kernel.name} {what}", show_progress=kernel.show_progress)
    finally:
        executor.forget(context)


def gram_row_block(kernel, block, cache: DiskCache) -> dict[str, np.ndarray]:
    """Rows ``lo:hi`` of ``kernel``'s unnormalised training Gram before symmetrising (``block``: ``(lo,
    hi)``; :meth:`~kernels.text.kernel.TextKernel.gram_rows`).  Runs on a Dask worker (or here)."""
    lo, hi = block
    return kernel.gram_rows(int(lo), int(hi))


def gram_spans(kernel) -> list[tuple[int, int]]:
    """The fixed blocks of :func:`gram_on_executor`: training captions for TagRank, items for soft TRI."""
    if kernel.kind == "TagRank":
        return blocks_of(len(kernel.docs), GRAM_BLOCK_CAPTIONS)
    return blocks_of(kernel.n_items, GRAM_BLOCK_ITEMS)


def gram_on_executor(kernel, executor: BlockExecutor, cache: DiskCache) -> np.ndarray:
    """``kernel``'s unnormalised training item Gram ``(n_train, n_train)`` float64, symmetrised, from row
    blocks (:func:`gram_spans`) on ``executor``: the one the kernel computes in one process, bit for bit.
    The kernel goes to the cluster once (:class:`~corpora.parallel.Shared`) and is dropped there after."""
    spans = gram_spans(kernel)
    whole = cache_key(kernel.column_cache_key())
    keys = [{"gram": whole, "rows": [a, b], "version": 1} for a, b in spans]
    parts = _map_with_kernel(kernel, executor, gram_row_block, spans, cache, "text_gram_rows", keys, "Gram rows")
    K = np.zeros((kernel.n_items, kernel.n_items))
    for (a, b), part in zip(spans, parts):
        kernel.add_gram_rows(K, a, b, part)
    return symmetrise_inplace(K)


def query_row_block(kernel, block, cache: DiskCache) -> dict[str, np.ndarray]:
    """``{"Q": ...}``: unnormalised rows of a block of query captions against the training items, or the
    items at positions ``items`` (``block``: ``(query word ids, query scales or None, items or None)``;
    :meth:`~kernels.text.kernel.TextKernel.query_rows`).  Runs on a Dask worker (or here)."""
    qdocs, qscale, items = block
    return {"Q": kernel.query_rows(list(qdocs), qscale, items)}


def queries_on_executor(kernel, qdocs: list[np.ndarray], qscale: np.ndarray | None, items: np.ndarray | None,
                        executor: BlockExecutor, cache: DiskCache, key: dict) -> np.ndarray:
    """Unnormalised rows of the queries ``qdocs`` (word ids; ``qscale``: their soft-TRI scales) against the
    training items (or those at positions ``items``), in blocks of :data:`QUERY_BLOCK_CAPTIONS` captions on
    ``executor``, each cached under ``key`` (what the whole result depends on) and its captions: the rows
    the kernel computes in one process, bit for bit."""
    spans = blocks_of(len(qdocs), QUERY_BLOCK_CAPTIONS)
    whole = cache_key(key)
    blocks = [(qdocs[a:b], None if qscale is None else qscale[a:b], items) for a, b in spans]
    keys = [{"queries": whole, "rows": [a, b], "version": 1} for a, b in spans]
    parts = _map_with_kernel(kernel, executor, query_row_block, blocks, cache, "text_query_rows", keys, "query rows")
    n_cols = kernel.n_items if items is None else len(items)
    return np.concatenate([p["Q"] for p in parts]) if parts else np.zeros((0, n_cols))
