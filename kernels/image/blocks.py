"""Image features and image Gram matrices as Dask blocks (:class:`corpora.parallel.BlockExecutor`).

What :class:`~kernels.image.kernel.ImageKernel` sends to a cluster (``--workers`` / ``--scheduler``,
docs/scaling.md), in fixed-size blocks whose results are put back in block order, so the numbers are
the in-process ones whatever the number of workers (``tests/test_parallel.py`` checks it bit for bit):

* visual words (Hodosh et al. 2013, Sec. 3.3: descriptors quantised against the codebooks), blocks of
  :data:`WORDS_BLOCK_IMAGES` images; each image's words go to their own ``image_words`` cache entry
  (the in-process key), written by the worker as soon as they exist;
* per-feature Gram matrices (Eqs. 5, 7–8), row blocks of :data:`GRAM_BLOCK_ROWS` rows against every
  column, one ``image_gram_rows`` entry per block, keyed by the whole Gram's key and the block's rows;
  a Gram of a few columns (the low-rank solver's pivot columns) in taller blocks
  (:func:`gram_block_rows`), against row histograms sent to the cluster once for all the columns
  (:func:`columns_on_cluster`).

A worker killed or lost mid-run costs only the blocks it had not written (Dask reschedules its tasks,
which then read the written entries back).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from corpora.cache import DiskCache, cache_key
from corpora.parallel import BlockExecutor, Shared, blocks_of
from kernels.image.codebook import quantise
from kernels.image.descriptors import extract_descriptors, one_opencv_thread
from kernels.image.gram import BinRows, intersection_columns, intersection_gram, pyramid_match_gram
from kernels.image.histograms import pyramid_column_weights

#: Images per Dask task for visual words: the task overhead (milliseconds) is small against its work
#: (tens of ms of extraction per image), and a lost worker costs little.
WORDS_BLOCK_IMAGES = 32
#: Gram rows per Dask task (each row against every column); one cache entry per block.
GRAM_BLOCK_ROWS = 256
#: Gram entries per Dask task for a Gram with fewer than :data:`GRAM_BLOCK_ROWS` columns (the low-rank
#: solver's kernel columns: every training image against a few pivots), so that one column is a few
#: tasks of real work rather than hundreds of tiny ones.
SKINNY_BLOCK_ENTRIES = 1 << 15
#: Fewest rows per task of such a Gram, as a fraction of :data:`SKINNY_BLOCK_ENTRIES` (4,096 rows): with
#: many columns (the NN baseline's 128 pool images) a task is that many rows of all of them.  At COCO
#: size, 256-row tasks made 53,000 tasks per pool, whose Dask and cache overhead outweighed their work.
SKINNY_MIN_ROWS_DIVISOR = 8


def is_skinny(n_cols: int) -> bool:
    """Whether a Gram with ``n_cols`` columns is a few columns (the low-rank solver's pivot columns)."""
    return n_cols < GRAM_BLOCK_ROWS


def gram_block_rows(n_cols: int) -> int:
    """Rows per block of a Gram with ``n_cols`` columns: :data:`GRAM_BLOCK_ROWS`, or for fewer columns
    than that, :data:`SKINNY_BLOCK_ENTRIES` entries' worth and at least ``SKINNY_BLOCK_ENTRIES //
    SKINNY_MIN_ROWS_DIVISOR`` rows (a function of the shape only, never of the number of workers)."""
    if not is_skinny(n_cols):
        return GRAM_BLOCK_ROWS
    return max(SKINNY_BLOCK_ENTRIES // SKINNY_MIN_ROWS_DIVISOR, SKINNY_BLOCK_ENTRIES // max(n_cols, 1))


def words_block(context: dict, block, cache: DiskCache) -> dict[str, np.ndarray]:
    """Visual words of one block of images (``block``: ``((image_id, words key), ...)``), each read from
    or written into its ``image_words`` entry: ``{"<k>/<feature>": words, "<k>/<feature>_shape": (h, w)}``
    for the block's ``k``-th image.  Runs on a Dask worker."""
    corpus, dtype = context["corpus"], np.dtype(context["dtype"])

    def compute(image_id: str) -> dict[str, np.ndarray]:
        try:
            pixels = corpus.load_image(image_id)
        except Exception as exc:
            raise type(exc)(f"image {image_id!r} of corpus {corpus.name!r}: {exc}") from exc
        with one_opencv_thread():   # one block per worker thread: OpenCV's own pool would oversubscribe
            desc = extract_descriptors(pixels, context["params"], context["features"])
        arrays = {}
        for f, (d, shape) in desc.items():
            arrays[f] = quantise(d, context["codebooks"][f]).astype(dtype)
            arrays[f + "_shape"] = np.asarray(shape, dtype=np.int64)
        return arrays

    out: dict[str, np.ndarray] = {}
    for k, (image_id, key) in enumerate(block):
        for name, a in cache.get_or_compute("image_words", key, lambda i=image_id: compute(i)).items():
            out[f"{k}/{name}"] = a
    return out


def words_on_cluster(executor: BlockExecutor, context: dict | Shared, keyed_ids: Sequence[tuple[str, dict]],
                     cache: DiskCache, show_progress: bool = True) -> dict[str, dict[str, np.ndarray]]:
    """``{image_id: {feature: words, feature + "_shape": (h, w)}}`` of ``keyed_ids`` (``(id, words
    key)`` pairs), computed on ``executor``'s workers in blocks of :data:`WORDS_BLOCK_IMAGES`.

    ``context``: ``corpus``, descriptor ``params``, ``features``, ``codebooks`` and the words' ``dtype``
    (a dict, or a :class:`~corpora.parallel.Shared` one to send it to the workers once for many calls).
    """
    keyed_ids = list(keyed_ids)
    blocks = [tuple(keyed_ids[a:b]) for a, b in blocks_of(len(keyed_ids), WORDS_BLOCK_IMAGES)]
    results = executor.map_blocks(words_block, blocks, context=context, cache=cache,
                                  desc="image features (blocks)", show_progress=show_progress)
    found: dict[str, dict[str, np.ndarray]] = {}
    for block, arrays in zip(blocks, results):
        for k, (image_id, _) in enumerate(block):
            prefix = f"{k}/"
            found[image_id] = {n[len(prefix):]: a for n, a in arrays.items() if n.startswith(prefix)}
    return found


def gram_rows_block(context: dict, rows: np.ndarray, cache: DiskCache) -> dict[str, np.ndarray]:
    """One row block of a per-feature Gram: ``{"K": (len(rows), n_cols)}``, the histograms ``rows``
    against ``context["cols"]`` on one thread.  Runs on a Dask worker."""
    kw = dict(backend=context["backend"], n_threads=1, show_progress=False)
    if context["kind"] == "pyramid":
        return {"K": pyramid_match_gram(rows, context["cols"], context["n_words"], context["levels"], **kw)}
    return {"K": intersection_gram(rows, context["cols"], **kw)}


def gram_on_cluster(executor: BlockExecutor, HR: np.ndarray, HC: np.ndarray | None, gram_key: dict,
                    cache: DiskCache, *, kind: str, n_words: int, levels: int, backend: str,
                    show_progress: bool = True) -> np.ndarray:
    """One feature's Gram ``(len(HR), len(HC))`` (``HC=None``: ``HR × HR``), row blocks of
    :func:`gram_block_rows` rows on ``executor``'s workers, stacked in row order.

    Each block is cached in namespace ``image_gram_rows`` under the digest of ``gram_key`` (the whole
    Gram's key: rows, columns, their images, codebook, kind) and the block's row range.
    """
    cols = HR if HC is None else HC
    spans = blocks_of(HR.shape[0], gram_block_rows(cols.shape[0]))
    whole = cache_key(gram_key)
    keys = [{"gram": whole, "rows": [a, b], "version": 1} for a, b in spans]
    context = {"cols": cols, "kind": kind, "n_words": n_words, "levels": levels, "backend": backend}
    parts = executor.map_blocks(gram_rows_block, [HR[a:b] for a, b in spans], context=context, cache=cache,
                                namespace="image_gram_rows", keys=keys, desc=f"{kind} Gram (row blocks)",
                                show_progress=show_progress)
    if not parts:
        return np.zeros((0, cols.shape[0]), np.float32)
    return np.concatenate([p["K"] for p in parts], axis=0)


def gram_columns_block(context: dict, block, cache: DiskCache) -> dict[str, np.ndarray]:
    """Rows ``a:b`` of the shared rows against a few columns (``block``: ``(a, b, HC)``):
    :func:`kernels.image.gram.intersection_columns`, one thread; each entry equals the Gram's.  Runs on a
    Dask worker."""
    a, b, HC = block
    return {"K": intersection_columns(context["rows_T"], HC, context["weights"], start=a, stop=b,
                                      backend=context["backend"])}


def column_weights(kind: str, n_words: int, levels: int) -> np.ndarray | None:
    """The per-bin weights of a kernel's histograms: the pyramid's ``α`` (Eqs. 7–8), none for Eq. 5."""
    return pyramid_column_weights(n_words, levels) if kind == "pyramid" else None


def shared_rows(XT: BinRows, *, weights: np.ndarray | None, backend: str,
                rebuild: Callable[[], BinRows] | None = None) -> Shared:
    """The context of :func:`columns_on_cluster`: the rows' weighted histograms stored by bin
    (:func:`kernels.image.gram.transposed_rows`) and the weights the columns take, sent to the cluster
    once for every column computed against them.  With ``rebuild`` (the rows again, from their visual
    words) this process lets go of them once the workers hold them."""
    def again() -> dict:
        return {"rows_T": rebuild(), "weights": weights, "backend": backend}

    return Shared({"rows_T": XT, "weights": weights, "backend": backend},
                  rebuild=None if rebuild is None else again, meta={"n_rows": XT.n_rows})


def columns_on_cluster(executor: BlockExecutor, rows: Shared, HC: np.ndarray, gram_key: dict, cache: DiskCache,
                       show_progress: bool = False) -> np.ndarray:
    """The Gram of the shared row histograms (:func:`shared_rows`) against a few columns ``HC`` (the
    low-rank solver's pivots), in row blocks of :func:`gram_block_rows` on ``executor``'s workers, stacked
    in row order: the numbers and cache entries of :func:`gram_on_cluster`, without sending the rows
    again for every column."""
    n = rows.meta["n_rows"]
    spans = blocks_of(n, gram_block_rows(HC.shape[0]))
    whole = cache_key(gram_key)
    keys = [{"gram": whole, "rows": [a, b], "version": 1} for a, b in spans]
    parts = executor.map_blocks(gram_columns_block, [(a, b, HC) for a, b in spans], context=rows, cache=cache,
                                namespace="image_gram_rows", keys=keys, desc="image kernel columns",
                                show_progress=show_progress)
    if not parts:
        return np.zeros((0, HC.shape[0]), np.float32)
    return np.concatenate([p["K"] for p in parts], axis=0)
