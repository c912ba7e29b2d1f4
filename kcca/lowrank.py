"""The low-rank KCCA solver's kernel access: kernel values pulled on demand (:class:`KernelSource`, never an
``N × N`` matrix) and the pivoted incomplete Cholesky factor ``K ≈ G G^T`` built from them
(:func:`incomplete_cholesky`; Hardoon, Szedmak & Shawe-Taylor 2004, computational section; Bach & Jordan
2002).  :mod:`kcca.solver` turns the factor into the spectral view its KCCA core solves (Hodosh et al. 2013,
Eq. 3).
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tqdm.auto import tqdm

from kernels.threads import one_blas_thread

__all__ = ["KernelSource", "incomplete_cholesky"]


class KernelSource:
    """Kernel values pulled on demand for the low-rank solver (never an ``N × N`` matrix).

    Parameters
    ----------
    data : array-like or sequence, length N
        Training items in whatever form ``kernel`` understands (indexed with an integer array, or a
        list indexed item by item).
    kernel : callable ``kernel(A, B) -> ndarray (len(A), len(B))``
        The kernel function between two collections of items.
    diag : callable ``diag(A) -> ndarray (len(A),)``, optional
        ``k(a, a)`` for each item; default: computed block-wise from ``kernel``.
    release : callable ``release()``, optional
        Called by the low-rank solver once incomplete Cholesky has read every column it needs, to free
        what ``kernel`` keeps between columns (e.g. the training histograms); ``kernel`` must still work
        afterwards (it may rebuild what it freed).

    Use :meth:`from_gram` to wrap a precomputed (possibly memory-mapped) Gram matrix.
    """

    def __init__(self, data, kernel: Callable, diag: Callable | None = None, release: Callable | None = None):
        self.data = data
        self.kernel = kernel
        self._diag = diag
        self._release = release
        self._gram: np.ndarray | None = None
        self.n = len(data)

    @classmethod
    def from_gram(cls, K) -> "KernelSource":
        K = np.asarray(K)
        if K.ndim != 2 or K.shape[0] != K.shape[1]:
            raise ValueError(f"KernelSource.from_gram: need a square Gram matrix, got shape {K.shape}")
        src = cls(np.arange(K.shape[0]), kernel=lambda a, b: K[np.ix_(a, b)])
        src._gram = K
        return src

    def _take(self, idx: np.ndarray):
        d = self.data
        if isinstance(d, np.ndarray) or hasattr(d, "shape"):
            return d[idx]
        return [d[int(i)] for i in idx]

    def diag(self) -> np.ndarray:
        if self._gram is not None:
            return np.asarray(np.diagonal(self._gram), dtype=np.float64).copy()
        if self._diag is not None:
            return np.asarray(self._diag(self.data), dtype=np.float64).reshape(-1)
        out = np.empty(self.n)
        for lo in range(0, self.n, 512):
            idx = np.arange(lo, min(self.n, lo + 512))
            blk = self._take(idx)
            out[lo:lo + len(idx)] = np.diagonal(np.asarray(self.kernel(blk, blk), dtype=np.float64))
        return out

    def release(self) -> None:
        """Free what the kernel keeps between columns (the ``release`` callable; nothing without one)."""
        if self._release is not None:
            self._release()

    def column(self, i: int) -> np.ndarray:
        """``K[:, i]`` (all training items against item ``i``)."""
        if self._gram is not None:
            return np.asarray(self._gram[:, i], dtype=np.float64)
        col = np.asarray(self.kernel(self.data, self._take(np.array([i]))), dtype=np.float64)
        return col.reshape(-1)

    def rows_against(self, new_data, idx: np.ndarray) -> np.ndarray:
        """Kernel values of new items against training items ``idx``: ``(len(new), len(idx))``."""
        return np.asarray(self.kernel(new_data, self._take(np.asarray(idx))), dtype=np.float64)


def incomplete_cholesky(
    source: KernelSource,
    eta: float = 1e-6,
    max_rank: int | None = None,
    dtype=np.float64,
    label: str | None = None,
    show_progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Pivoted incomplete Cholesky decomposition ``K ≈ G G^T`` (Hardoon et al. 2004, "partial
    Gram–Schmidt orthogonalisation"; Bach & Jordan 2002).

    At step ``j`` the item ``i`` with the largest residual diagonal ``d_i`` becomes pivot ``p_j``; its kernel
    column is pulled from ``source`` and ``G[:, j] = (K[:, i] − G[:, :j] G[i, :j]^T) / \\sqrt{d_i}``;
    ``d ← d − G[:, j]²``.  Stops when the residual trace ``Σ d`` falls to ``eta · trace(K)``, when the
    largest residual is numerically zero, or at ``max_rank`` columns.  Costs ``O(N r²)`` time, ``N r``
    memory and ``r`` kernel columns.  A residual that goes negative (the kernel is not PSD) is set to zero,
    with a ``RuntimeWarning`` when it is below ``−1e-6 · trace(K)`` (well above float32 rounding).

    ``label`` names the kernel in front of the warning (see :func:`kcca.solver.decompose`) and on the
    progress bar (``show_progress``: pivots so far out of ``max_rank``, and the residual trace against
    the stopping point ``eta · trace(K)``).

    Returns
    -------
    G : ndarray (N, r), Fortran order
        ``G[P, :]`` is lower triangular (pivot rows in pivot order).
    pivots : ndarray of int (r,)
    """
    n = source.n
    d = source.diag().astype(np.float64)
    if d.shape != (n,) or not np.all(np.isfinite(d)):
        raise ValueError("incomplete_cholesky: kernel diagonal has the wrong shape or non-finite values")
    if np.any(d < -1e-8 * max(1.0, float(np.abs(d).max()))):
        raise ValueError("incomplete_cholesky: kernel has negative diagonal entries (not PSD)")
    d = np.maximum(d, 0.0)
    total = float(d.sum())
    r_max = n if max_rank is None else max(1, min(n, int(max_rank)))
    G = np.zeros((n, r_max), dtype=dtype, order="F")
    pivots: list[int] = []
    tiny = 1e-12 * max(total / max(n, 1), 1e-300)
    # The loop is BLAS-2 (one GEMV per pivot): extra BLAS threads only add wake-up overhead, which is
    # catastrophic on a loaded machine, so it runs single-threaded.
    bar = tqdm(total=r_max, desc=f"incomplete Cholesky: {label}" if label else "incomplete Cholesky",
               unit="pivot", leave=False, disable=not show_progress)
    with one_blas_thread(), bar:
        most_negative = _icd_loop(source, G, d, pivots, r_max, eta, total, tiny, bar)
    if most_negative < -1e-6 * total:
        # an indefinite kernel (e.g. Hodosh Eq. 27's max of two similarities): the exact solver drops its
        # negative eigenvalues; here the negative residuals are set to zero, so G G^T stays PSD
        message = (f"kernel matrix is not positive semidefinite (incomplete Cholesky residual diagonal "
                   f"{most_negative:.3g} vs trace {total:.3g}); negative residuals are set to zero")
        warnings.warn(f"{label}: {message}" if label else message, RuntimeWarning, stacklevel=3)
    r = len(pivots)
    return np.asfortranarray(G[:, :r]), np.asarray(pivots, dtype=np.int64)



def _icd_loop(source, G, d, pivots, r_max, eta, total, tiny, bar=None) -> float:
    """The pivot loop of :func:`incomplete_cholesky`; returns the most negative residual diagonal met
    (0 for a PSD kernel up to rounding), before it is set to zero.

    The kernel column of pivot ``i`` and the projection ``G[:, :j] G[i, :j]^T`` are independent, so the
    projection (a memory-bound GEMV, which releases the GIL) runs on a helper thread while this one
    fetches the column (a Dask cluster's round trip, or the compiled column loop).  The column stays on
    the caller's thread: a kernel store calls its kernel under a lock the caller may hold.  The numbers
    are those of one after the other."""
    most_negative = 0.0
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="icd-projection") as helper:
        for j in range(r_max):
            if total <= 0 or d.sum() <= eta * total:
                break
            i = int(np.argmax(d))
            if d[i] <= tiny:
                break
            pending = helper.submit(_projection, G, i, j) if j else None
            col = source.column(i)
            proj = pending.result() if pending is not None else None
            most_negative = _icd_step(G, d, pivots, j, i, col, proj, most_negative)
            if bar is not None and not bar.disable:
                bar.update(1)
                if j % 16 == 0:
                    bar.set_postfix_str(f"residual trace {d.sum() / total:.2e} (stop at {eta:.0e})", refresh=False)
    return most_negative


def _projection(G: np.ndarray, i: int, j: int) -> np.ndarray:
    """``G[:, :j] G[i, :j]^T``: the part of pivot ``i``'s kernel column the factor so far explains."""
    return G[:, :j] @ G[i, :j]


def _icd_step(G, d, pivots, j, i, col, proj, most_negative) -> float:
    """Step ``j`` of :func:`_icd_loop` with pivot ``i``, its kernel column and its projection on the
    factor so far: the new column of ``G`` and the residual diagonal; returns the most negative residual."""
    if not np.all(np.isfinite(col)):
        raise ValueError(f"incomplete_cholesky: kernel column {i} contains NaN or infinite values")
    if proj is not None:
        col = col - proj
    g = col / math.sqrt(d[i])
    g[pivots] = 0.0  # exact zeros above the diagonal of the pivot block
    g[i] = math.sqrt(d[i])
    G[:, j] = g
    d -= g * g
    d[pivots] = 0.0
    d[i] = 0.0
    most_negative = min(most_negative, float(d.min()))
    np.maximum(d, 0.0, out=d)
    pivots.append(i)
    return most_negative
