"""Histogram-intersection, pyramid-match and combined image kernels (Hodosh et al. 2013, Sec. 3.3).

Equations (``H_i`` a normalised histogram of image ``i`` over ``V`` visual words):

* Eq. 5, histogram intersection: ``K(x_i, x_j) = Σ_v min(H_i(v), H_j(v))`` — :func:`intersection_gram`.
* Eqs. 7–8, spatial pyramid match with levels ``l = 0..L`` (``2^l × 2^l`` cells):
  ``K^PY = I^L + Σ_{l<L} (I^l − I^{l+1}) / 2^{L−l} = Σ_l w_l I^l`` with ``I^l`` the summed intersection of
  corresponding level-``l`` cells — :func:`pyramid_match_gram`, computed as *one* intersection over the
  level-weighted concatenation (``min(αa, αb) = α min(a, b)``, see
  :func:`kernels.image.histograms.pyramid_column_weights`).
* Eq. 6, combined kernel: ``K = [(K_C + K_T + K_S) / 3]^p`` — :func:`combine_kernels`.

Speed.  ``K[i, j] = Σ_v min(x_iv, y_jv)`` only needs the support of row ``x_i`` (``min(a, 0) = 0`` for
non-negative histograms), and cell histograms are sparse (a level-2 cell holds 48–192 descriptors over
128–256 words).  :func:`intersection_gram` cuts the left side into row blocks stored as CSC and, for a
block of 128 columns of the right side, walks the bins ``v``: the slice ``Yᵀ[v, j0:j1]`` is read once
and ``min(a, ·)`` of it is added to the accumulator row of every row of the block with ``x[r, v] = a > 0``
(the accumulator tile stays in L1/L2; the inner loop is a contiguous, vectorisable min-add).  The work
is ``Σ_i nnz(x_i) · m`` instead of ``n · m · D``, halved again for symmetric (train × train) Grams; it
runs on all cores in a thread pool over (row block, column chunk) tasks, and the right side is
transposed one column chunk at a time so that memory stays bounded.  The inner loop is compiled
C when a compiler is available (:mod:`kernels.image.native`), else numpy; :func:`intersection_naive` is
the plain broadcasting implementation used as the reference in tests and benchmarks.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

import kernels.image.native as native
from kernels.image.histograms import N_LEVELS, pyramid_column_weights
from kernels.threads import default_threads


def _as_hist(X, name: str) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of histograms, got shape {X.shape}")
    if X.size and not np.all(np.isfinite(X)):
        raise ValueError(f"{name} contains NaN or infinite values")
    if X.size and float(X.min()) < 0:
        raise ValueError(f"{name} has negative entries; histogram intersection needs non-negative input")
    return X


def intersection_naive(X, Y=None, max_block_bytes: int = 64 << 20) -> np.ndarray:
    """Reference histogram intersection (Eq. 5) by numpy broadcasting:
    ``np.minimum(X[:, None, :], Y[None, :, :]).sum(-1)`` over row blocks; float32 ``(n, m)``."""
    X = _as_hist(X, "X")
    Y = X if Y is None else _as_hist(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X has {X.shape[1]} bins but Y has {Y.shape[1]}")
    n, m, d = X.shape[0], Y.shape[0], X.shape[1]
    K = np.empty((n, m), dtype=np.float32)
    b = max(1, int(max_block_bytes // max(1, 4 * m * d)))
    for s in range(0, n, b):
        K[s:s + b] = np.minimum(X[s:s + b, None, :], Y[None, :, :]).sum(-1, dtype=np.float32)
    return K


def _csc_block(B: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """CSC arrays ``(colptr int64 (D+1,), rows int32, values float32)`` of a dense row block; entries of
    a column sorted by row (``np.nonzero`` on the transpose walks column-major)."""
    BT = B.T
    v, r = np.nonzero(BT)
    colptr = np.zeros(B.shape[1] + 1, dtype=np.int64)
    np.cumsum(np.bincount(v, minlength=B.shape[1]), out=colptr[1:])
    return colptr, r.astype(np.int32), np.ascontiguousarray(BT[v, r], dtype=np.float32)


def _numpy_block(colptr, rows, data, nrows, YT, c0, c1, out) -> None:
    """numpy version of the compiled kernel: per bin ``v``, min-accumulate ``Yᵀ[v, c0:c1]`` into the
    rows of the block that use ``v``."""
    acc = np.zeros((nrows, c1 - c0), dtype=np.float32)
    for v in np.flatnonzero(np.diff(colptr)):
        a, b = colptr[v], colptr[v + 1]
        acc[rows[a:b]] += np.minimum(YT[v, c0:c1][None, :], data[a:b, None])
    out[...] = acc


def intersection_gram(
    X,
    Y=None,
    *,
    backend: str = "auto",
    n_threads: int | None = None,
    row_block: int | None = None,
    col_chunk: int = 2048,
    show_progress: bool = False,
    desc: str = "intersection Gram",
) -> np.ndarray:
    """Histogram-intersection Gram matrix ``K[i, j] = Σ_v min(X[i, v], Y[j, v])`` (Hodosh Eq. 5).

    Parameters
    ----------
    X : array (n, D), non-negative
    Y : array (m, D) or None
        ``None`` → the symmetric ``X × X`` Gram (only blocks on or above the diagonal are computed, then
        mirrored, so the result is exactly symmetric).
    backend : {"auto", "c", "numpy"}
        Inner loop: compiled C (``"auto"`` uses it when it builds) or numpy; both run the sparse
        per-bin algorithm described in the module docstring and agree up to float32 rounding.
    n_threads : int, optional
        Worker threads (default: all usable cores, see :func:`kernels.threads.default_threads`).
    row_block : int, optional
        Rows of ``X`` per task (default 64 for C, 512 for numpy).
    col_chunk : int
        Columns of ``Y`` transposed at a time (extra memory: ``D · col_chunk`` floats).
    show_progress : bool
        tqdm bar over the tasks.

    Returns
    -------
    ndarray, float32, shape (n, m)
    """
    X = _as_hist(X, "X")
    symmetric = Y is None
    Y = X if symmetric else _as_hist(Y, "Y")
    if X.shape[1] != Y.shape[1]:
        raise ValueError(f"X has {X.shape[1]} bins but Y has {Y.shape[1]}")
    fn = _inner_loop(backend)
    n, m, D = X.shape[0], Y.shape[0], X.shape[1]
    K = np.zeros((n, m), dtype=np.float32)
    if n == 0 or m == 0 or D == 0:
        return K
    row_block = row_block or (64 if fn is not None else 512)
    n_threads = n_threads or default_threads()

    blocks = [(r0, min(n, r0 + row_block)) + _csc_block(X[r0:r0 + row_block])
              for r0 in range(0, n, row_block)]
    tasks = _gram_tasks(blocks, m, col_chunk, symmetric)
    _run_gram_tasks(fn, blocks, tasks, Y, K, n_threads, show_progress, desc)
    if symmetric:
        _mirror_upper(K)
    return K


def _inner_loop(backend: str, load=native.load):
    """The compiled inner loop ``load()`` gives for ``backend`` (``None``: the numpy one)."""
    if backend not in ("auto", "c", "numpy"):
        raise ValueError(f"backend={backend!r} must be 'auto', 'c' or 'numpy'")
    fn = None if backend == "numpy" else load()
    if backend == "c" and fn is None:
        raise RuntimeError("backend='c' requested but the compiled kernel is unavailable (see log)")
    return fn


def _gram_tasks(blocks, m: int, col_chunk: int, symmetric: bool) -> list[tuple[int, int, int, int]]:
    """Tasks ``(c0, c1, row block index, first column)`` in column-chunk order; symmetric Grams only get the
    parts on or above the diagonal."""
    tasks = []
    for c0 in range(0, m, col_chunk):
        c1 = min(m, c0 + col_chunk)
        for bi, (r0, r1, *_rest) in enumerate(blocks):
            cs = max(c0, r0) if symmetric else c0
            if cs < c1:
                tasks.append((c0, c1, bi, cs))
    return tasks


def _run_gram_tasks(fn, blocks, tasks, Y: np.ndarray, K: np.ndarray, n_threads: int, show_progress: bool,
                    desc: str) -> None:
    """Fill ``K`` with the ``tasks`` on ``n_threads`` threads, ``Yᵀ`` transposed one column chunk at a time."""
    m, D = K.shape[1], Y.shape[1]
    bar = None
    if show_progress:
        bar = tqdm(total=len(tasks), desc=desc, unit="block", leave=False)

    def run(task, YT):
        c0, c1, bi, cs = task
        r0, r1, colptr, rows, data = blocks[bi]
        if fn is not None:
            rc = fn(colptr, rows, data, D, r1 - r0, YT, YT.shape[1], cs - c0, c1 - c0,
                    K.ctypes.data + (r0 * m + cs) * 4, m)
            if rc != 0:
                raise MemoryError("compiled intersection kernel could not allocate its accumulator")
        else:
            _numpy_block(colptr, rows, data, r1 - r0, YT, cs - c0, c1 - c0, K[r0:r1, cs:c1])

    try:
        with ThreadPoolExecutor(max_workers=n_threads) as pool:
            i = 0
            while i < len(tasks):
                c0, c1 = tasks[i][0], tasks[i][1]
                j = i
                while j < len(tasks) and tasks[j][0] == c0:
                    j += 1
                YT = np.ascontiguousarray(Y[c0:c1].T)
                futures = [pool.submit(run, t, YT) for t in tasks[i:j]]
                for f in futures:
                    f.result()
                    if bar is not None:
                        bar.update(1)
                i = j
    finally:
        if bar is not None:
            bar.close()


def _mirror_upper(K: np.ndarray, block: int = 1024) -> None:
    """In place: copy the upper triangle onto the lower one (exact symmetry)."""
    n = K.shape[0]
    for r0 in range(0, n, block):
        r1 = min(n, r0 + block)
        K[r0:r1, :r0] = K[:r0, r0:r1].T
        d = K[r0:r1, r0:r1]
        d[...] = np.triu(d) + np.triu(d, 1).T


@dataclass(frozen=True)
class BinRows:
    """Histograms ``X`` ``(n, D)`` stored by bin, sparse (:func:`transposed_rows`): for bin ``v``, the rows
    with ``X[i, v] > 0`` in increasing order, ``rows[colptr[v]:colptr[v + 1]]``, and their values
    ``data[...]`` — the CSC form of ``X``.  Held instead of the dense ``(D, n)`` transpose: pyramid
    histograms are mostly zeros (on the teaching images 13–27 % of the bins are used), so this takes about
    0.4 of the dense bytes at COCO size (2.4 GB instead of 6.1 GB for 113,287 images)."""

    colptr: np.ndarray    # int64 (D + 1,)
    rows: np.ndarray      # int32 (nnz,)
    data: np.ndarray      # float32 (nnz,)
    n_rows: int

    @property
    def shape(self) -> tuple[int, int]:
        """``(D, n)``, the shape of the transpose it stands for."""
        return len(self.colptr) - 1, self.n_rows

    @property
    def nbytes(self) -> int:
        return int(self.colptr.nbytes + self.rows.nbytes + self.data.nbytes)

    def self_intersections(self) -> np.ndarray:
        """``(n,)`` float32: ``K(x_i, x_i) = Σ_v min(x_iv, x_iv) = Σ_v x_iv``, added in increasing bin
        order in float32 as the Gram's kernel adds them, so each equals the Gram's diagonal bit for bit."""
        out = np.zeros(self.n_rows, dtype=np.float32)
        np.add.at(out, self.rows, self.data)    # unbuffered: each row's terms in storage (= bin) order
        return out


class BinRowsBuilder:
    """:class:`BinRows` of histograms given a block of rows at a time (:meth:`add`, then :meth:`build`), so
    that the dense histograms of all the rows are never held: each block (times the per-bin ``weights``)
    is kept as sparse rows, and :meth:`build` turns them into one by-bin store."""

    def __init__(self, weights=None):
        self.weights = weights
        self._data: list[np.ndarray] = []
        self._indices: list[np.ndarray] = []
        self._counts: list[np.ndarray] = []
        self._n_bins: int | None = None

    def add(self, X) -> None:
        X = _as_hist(X, "X")
        if self.weights is not None:
            X = _as_hist(X * self.weights, "X")
        if self._n_bins is not None and X.shape[1] != self._n_bins:
            raise ValueError(f"a block has {X.shape[1]} bins, the others {self._n_bins}")
        self._n_bins = X.shape[1]
        B = sp.csr_matrix(X)
        self._data.append(B.data.astype(np.float32, copy=False))
        self._indices.append(B.indices.astype(np.int32, copy=False))
        self._counts.append(np.diff(B.indptr))

    def build(self) -> BinRows:
        """The by-bin store of every row added (in the order added); the blocks are released."""
        if self._n_bins is None:
            raise ValueError("no rows were added")
        counts = np.concatenate(self._counts)
        indptr = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        data, indices = np.concatenate(self._data), np.concatenate(self._indices)
        self._data, self._indices, self._counts = [], [], []
        M = sp.csr_matrix((data, indices, indptr), shape=(len(counts), self._n_bins)).tocsc()
        del data, indices
        M.sort_indices()
        return BinRows(colptr=M.indptr.astype(np.int64), rows=M.indices.astype(np.int32, copy=False),
                       data=M.data.astype(np.float32, copy=False), n_rows=len(counts))


def transposed_rows(X, weights=None, block: int = 4096) -> BinRows:
    """The histograms ``X`` (times the per-bin ``weights``, e.g. the pyramid's ``α``, as
    :func:`pyramid_match_gram` weights them), checked once and stored by bin (:class:`BinRows`): the form in
    which :func:`intersection_columns` reads many rows against a few columns.  Built ``block`` rows at a
    time (:class:`BinRowsBuilder`)."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be a 2-D array of histograms, got shape {X.shape}")
    builder = BinRowsBuilder(weights)
    for lo in range(0, max(X.shape[0], 1), block):
        builder.add(X[lo:lo + block])
    return builder.build()


def intersection_columns(XT: BinRows, Y, weights=None, *, start: int = 0, stop: int | None = None,
                         backend: str = "auto", n_threads: int = 1, chunk: int = 8192) -> np.ndarray:
    """Histogram intersection (Eq. 5; with the pyramid's ``weights``, Eqs. 7–8) of rows ``start:stop`` of
    ``X``, given by bin (:func:`transposed_rows`), against a few histograms ``Y`` (the low-rank solver's
    pivots, a block of pool images): ``(stop − start, len(Y))`` float32.

    For each pivot, the bins it uses are walked in increasing order, and each row with a value in that
    bin gets ``min(x_iv, y_v)`` added: an entry adds the same non-zero terms in the same order as the
    Gram's entry (whose zero terms add exactly nothing), so it **equals it bit for bit**, whichever rows
    are asked together.  The cost is ``Σ_{v ∈ y} nnz(X[:, v])`` per pivot, a fraction of the dense
    ``nnz(y) · n``.  ``n_threads`` split the rows in chunks of ``chunk``, and the pivots into groups when
    there are fewer chunks than threads."""
    D, n = XT.shape
    stop = n if stop is None else stop
    Y = _as_hist(np.atleast_2d(Y), "Y")
    if weights is not None:
        Y = _as_hist(Y * weights, "Y")
    if Y.shape[1] != D:
        raise ValueError(f"the rows have {D} bins but Y has {Y.shape[1]}")
    if not 0 <= start <= stop <= n:
        raise ValueError(f"rows {start}:{stop} are not within the {n} rows")
    fn = _inner_loop(backend, native.load_bin_rows)
    m = Y.shape[0]
    out = np.zeros((m, stop - start), dtype=np.float32)
    spans = [(a, min(stop, a + chunk)) for a in range(start, stop, chunk)]
    # pivots in groups too when the rows are fewer than the threads (a block of pool images against a
    # few thousand training images): every entry is computed alone, so any split gives the same bits
    n_groups = max(1, min(m, -(-n_threads // len(spans)))) if n_threads > 1 else 1
    groups = [(p0, min(m, p0 + -(-m // n_groups))) for p0 in range(0, m, -(-m // n_groups))]
    pivots = [(p0, p1) + _csc_block(Y[p0:p1]) for p0, p1 in groups]

    def run(c0: int, c1: int, p0: int, p1: int, colptr, rows, data) -> None:
        if fn is not None:
            fn(colptr, rows, data, D, XT.colptr, XT.rows, XT.data, c0, c1,
               out.ctypes.data + (p0 * (stop - start) + c0 - start) * 4, stop - start)
        else:
            _numpy_bin_rows(colptr, rows, data, XT, c0, c1, out[p0:p1, c0 - start:c1 - start])

    work = [(a, b, *g) for g in pivots for a, b in spans]
    if n_threads > 1 and len(work) > 1:
        with ThreadPoolExecutor(max_workers=n_threads) as pool:
            for f in [pool.submit(run, *w) for w in work]:
                f.result()
    else:
        for w in work:
            run(*w)
    return np.ascontiguousarray(out.T)


def _numpy_bin_rows(colptr, rows, data, XT: BinRows, c0: int, c1: int, out: np.ndarray) -> None:
    """numpy version of the compiled bin-rows kernel: per bin ``v`` of the pivots (increasing), add
    ``min(x_iv, y_pv)`` to each row ``c0 ≤ i < c1`` stored in that bin (each row once per bin)."""
    for v in np.flatnonzero(np.diff(colptr)):
        a0, a1 = XT.colptr[v], XT.colptr[v + 1]
        lo = a0 + np.searchsorted(XT.rows[a0:a1], c0)
        hi = a0 + np.searchsorted(XT.rows[a0:a1], c1)
        if hi <= lo:
            continue
        r, x = XT.rows[lo:hi] - c0, XT.data[lo:hi]
        for k in range(colptr[v], colptr[v + 1]):
            out[rows[k], r] += np.minimum(x, data[k])


def histogram_intersection_gram(HX, HY=None, **kw) -> np.ndarray:
    """``K^HISTO``: Eq. 5 on global histograms ``(n, V)``."""
    return intersection_gram(HX, HY, **kw)


def pyramid_match_gram(PX, PY=None, n_words: int | None = None, levels: int = N_LEVELS, **kw) -> np.ndarray:
    """``K^PY`` (Eqs. 7–8) on cell-normalised pyramid histograms ``(n, n_cells · V)`` laid out as in
    :mod:`kernels.image.histograms`: one intersection over the level-weighted concatenation."""
    PX = _as_hist(PX, "PX")
    cells = sum(4 ** l for l in range(levels))
    if n_words is None:
        if PX.shape[1] % cells:
            raise ValueError(f"pyramid histograms have {PX.shape[1]} columns, not a multiple of {cells}")
        n_words = PX.shape[1] // cells
    if PX.shape[1] != cells * n_words:
        raise ValueError(f"pyramid histograms have {PX.shape[1]} columns, expected {cells} × {n_words}")
    alpha = pyramid_column_weights(n_words, levels)
    return intersection_gram(PX * alpha, None if PY is None else _as_hist(PY, "PY") * alpha, **kw)


def combine_kernels(grams: Mapping[str, np.ndarray] | Sequence[np.ndarray], power: int = 2,
                    out: np.ndarray | None = None) -> np.ndarray:
    """Eq. 6: ``K = [(K_C + K_T + K_S) / 3]^p`` — the mean of the per-feature Grams to the power ``p``
    (the mean over however many features are given).  float32; ``out`` may alias any input."""
    mats = list(grams.values()) if isinstance(grams, Mapping) else list(grams)
    if not mats:
        raise ValueError("combine_kernels needs at least one Gram matrix")
    if isinstance(power, bool) or not isinstance(power, (int, np.integer)) or power < 1:
        raise ValueError(f"power={power!r} must be a positive integer (the paper uses 2 or 3)")
    shape = mats[0].shape
    for k in mats:
        if k.shape != shape:
            raise ValueError(f"Gram shapes differ: {shape} vs {k.shape}")
    # accumulate in out, unless out is a later input (it would be overwritten before it is added)
    in_place = out is not None and not any(np.shares_memory(out, k) for k in mats[1:])
    acc = out if in_place else np.array(mats[0], dtype=np.float32, copy=True)
    if in_place:
        np.copyto(acc, mats[0])
    for k in mats[1:]:
        acc += k
    acc *= np.float32(1.0 / len(mats))
    if power > 1:
        base = acc.copy() if power > 2 else acc
        if power == 2:
            np.multiply(acc, acc, out=acc)
        else:
            for _ in range(power - 1):
                acc *= base
    if out is not None and not in_place:
        np.copyto(out, acc)
        return out
    return acc
