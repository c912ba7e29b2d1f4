# Size (~700 lines): the exact and low-rank KCCA solvers share the kernel views, centring and n-sweeps of Eq. 3-4.
"""Kernel canonical correlation analysis (KCCA) from scratch: exact and low-rank solvers.

Hodosh, Young & Hockenmaier (2013), Sec. 3.2.1, Eq. 3–4; Hardoon, Szedmak & Shawe-Taylor (2004).

The problem (Hodosh Eq. 3)
--------------------------
Given centred training Gram matrices ``K_X`` (images) and ``K_Y`` (text) over the same ``N`` training
pairs, KCCA finds dual directions ``α, β ∈ R^N`` maximising

.. math::

    ρ = \\max_{α, β} \\frac{α^T K_X K_Y β}
        {\\sqrt{(α^T K_X^2 α + κ\\, α^T K_X α)\\,(β^T K_Y^2 β + κ\\, β^T K_Y β)}} ,

i.e. the regularised kernel-CCA generalised eigenproblem of Hardoon et al. (2004) with the ``κ K`` regulariser

.. math::

    \\begin{pmatrix} 0 & K_X K_Y \\\\ K_Y K_X & 0 \\end{pmatrix}
    \\begin{pmatrix} α \\\\ β \\end{pmatrix}
    = ρ \\begin{pmatrix} K_X^2 + κ K_X & 0 \\\\ 0 & K_Y^2 + κ K_Y \\end{pmatrix}
    \\begin{pmatrix} α \\\\ β \\end{pmatrix}.

Since ``K² + κK = K (K + κI)``, eliminating ``β`` on the range of the kernels gives the form of the
issue, ``(K_X + κI)^{-1} K_Y (K_Y + κI)^{-1} K_X α = ρ² α``.

How we solve it (stable, one decomposition per κ for every n)
-------------------------------------------------------------
Write each centred kernel through its spectral factor ``K = U Λ U^T`` (``U`` is ``N × r``
orthonormal, ``Λ = diag(λ_1..λ_r) > 0``; the *exact* solver gets it from a symmetric
eigendecomposition of ``K``, the *low-rank* solver from an incomplete Cholesky factor
``K ≈ G G^T`` followed by a thin QR/SVD of ``G``).  With the training canonical variates
``u = K α`` the denominator becomes ``α^T K(K+κI) α = u^T U diag((λ+κ)/λ) U^T u``, so with
``D(κ) = diag(\\sqrt{λ/(λ+κ)})`` and unit vectors ``a, b``

.. math::

    ρ_k = σ_k\\bigl(C(κ)\\bigr), \\qquad C(κ) = D_X\\, U_X^T U_Y\\, D_Y \\quad (r_X × r_Y),

the canonical correlations are the singular values of the *core* ``C(κ)``; its singular vectors
``A, B`` give the dual directions

.. math::

    α = U_X \\,\\mathrm{diag}\\bigl(1/\\sqrt{λ_X(λ_X+κ)}\\bigr) A, \\qquad
    β = U_Y \\,\\mathrm{diag}\\bigl(1/\\sqrt{λ_Y(λ_Y+κ)}\\bigr) B,

normalised so that ``α^T (K_X^2 + κ K_X) α = 1`` (likewise for ``β``).  Nothing is inverted except
``λ + κ`` (and, for κ = 0, ``λ`` above the numerical floor), so ill-conditioned kernels give finite
results.  ``U_X^T U_Y`` does not depend on κ and is computed once per fit; :meth:`KCCA.with_reg`
re-solves only the core for another κ.  Every number ``n`` of projection dimensions is a prefix of the
same, correlation-sorted solution (Hodosh Sec. 4.1.3 sweeps n), so no refit is ever needed for n.

Numerical floor ("jitter")
--------------------------
Eigenvalues (squared singular values for the low-rank solver) of a centred kernel below
``jitter · λ_max`` are treated as exact zeros: the kernel is restricted to its numerical range.
Negative eigenvalues of an indefinite input (possible for Hodosh's Eq. 27 max-combined similarities)
are dropped likewise, with a ``RuntimeWarning`` when they exceed ``1e-6 · λ_max`` in magnitude.
``jitter="auto"`` sets the floor to the numerical-rank tolerance of the working precision,
``N · eps(dtype)`` (never below 1e-10): in float32 at N = 6000 that is 7.2e-4, and the eigenpairs below
it are rounding noise (their eigenvalues are perturbed by about ``eps · ‖K‖``, comparable to κ), so the
float32 solver then works on the numerically meaningful range only — which also makes every per-κ core
``rank_X × rank_Y`` instead of ``N × N``.
Centring always creates one such null direction (the constant vector).  Canonical pairs whose
correlation is below ``min_corr`` (default 1e-9) carry no shared signal; their directions are undefined
and they are dropped (``n_components_`` reports what is left: at most ``min(rank_X, rank_Y)``).  So are
pairs below the core's numerical resolution ``10 · √eps(dtype) · ρ₁`` (float64: 1.5e-7 · ρ₁, float32:
3.5e-3 · ρ₁): ρ² is an eigenvalue of the squared core ``C Cᵀ``, accurate to about ``eps · ρ₁²``, so
below that the long-side vectors ``Cᵀa / ρ`` are rounding noise and lose the normalisation
``α'(K² + κK)α = 1`` (in float32 by up to 50 %).

Out-of-sample projection and Eq. 4
----------------------------------
A new image with kernel row ``k(x) ∈ R^N`` against the training items is centred with the *training*
statistics (``k̃ = k − k̄_cols − mean(k) + k̄``) and projected as ``k̃^T α`` (exact).  The low-rank
solver maps a new point through the pivots: ``g(x) = L_P^{-1} k(x, P)`` (forward substitution with
the pivot block of the Cholesky factor), centres it with the training mean of ``G`` and rotates it.
Hodosh's Eq. 4 score is the cosine of the projections onto the top ``n`` directions:
``f_KCCA(i, s) = cos(α_{1..n}^T K_I(i), β_{1..n}^T K_S(s))`` — :meth:`KCCA.affinity`.
"""
from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.linalg as sla
from threadpoolctl import threadpool_limits

from kcca.lapack import eigh as lapack_eigh
from kcca.lowrank import KernelSource, incomplete_cholesky

__all__ = [
    "KCCA", "KernelSource", "KernelView", "decompose", "incomplete_cholesky", "center_gram", "center_rows", "cosine_sweep",
    "cosine_affinity", "affinity_slices", "AFFINITY_TILE", "log_spaced_ns", "paired_correlations",
]

#: Columns of a dense Gram matrix processed per block when centring/projecting large row sets.
_ROW_CHUNK = 4096
#: Side of the square tiles of :func:`cosine_affinity`'s product (a pool of up to this many images
#: and captions is one GEMM).
AFFINITY_TILE = 1024


# ----------------------------------------------------------------------------------------- helpers
def _check_dtype(dtype):
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype must be 'float64' or 'float32', got {dtype!r}")
    return dt


def _as_gram(K, name: str) -> np.ndarray:
    K = np.asarray(K, dtype=np.float64)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"{name} must be a square training Gram matrix, got shape {K.shape}")
    if not np.all(np.isfinite(K)):
        raise ValueError(f"{name} contains NaN or infinite values")
    # a Gram matrix is symmetric (centring and the eigendecomposition assume it); rounding of float32
    # products is allowed for, a kernel *row* block or a transposed cross-kernel is not.  Row blocks keep
    # the check's memory at O(block · N).
    tol = 1e-5 * float(np.abs(K).max()) if K.size else 0.0
    for lo in range(0, K.shape[0], 1024):
        diff = np.abs(K[lo:lo + 1024] - K[:, lo:lo + 1024].T)
        if diff.max(initial=0.0) > tol:
            i, j = np.unravel_index(int(diff.argmax()), diff.shape)
            raise ValueError(f"{name} is not symmetric: K[{lo + i}, {j}] = {K[lo + i, j]:.6g} but "
                             f"K[{j}, {lo + i}] = {K[j, lo + i]:.6g}; a training Gram matrix must be "
                             f"k(x_i, x_j) over the same training items on both sides")
    return K


def center_gram(K: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Double-centre a training Gram matrix, ``K̃ = H K H`` with ``H = I − 11^T/N``.

    Returns ``(K̃, column_means, grand_mean)``; the statistics centre new rows (:func:`center_rows`).
    """
    col = K.mean(axis=0)
    grand = float(col.mean())
    Kc = K - col[None, :] - col[:, None] + grand
    Kc = 0.5 * (Kc + Kc.T)
    return Kc, col, grand


def center_rows(K_new: np.ndarray, column_means: np.ndarray, grand_mean: float) -> np.ndarray:
    """Centre kernel rows of new items against the training items with the training statistics:
    ``k̃_ij = k_ij − k̄_j − mean_j(k_i·) + k̄`` (Schölkopf et al. 1998; Hardoon et al. 2004)."""
    K_new = np.asarray(K_new, dtype=np.float64)
    return K_new - column_means[None, :] - K_new.mean(axis=1, keepdims=True) + grand_mean


def log_spaced_ns(n_max: int = 6000, count: int = 46, n_min: int = 10, cap: int | None = None) -> list[int]:
    """``count`` log-spaced integers in ``[n_min, n_max]`` (rounded, unique, ascending), capped by ``cap``
    (the rank) when given (values above it are replaced by ``cap``).  Hodosh Sec. 4.1.3 gives the number
    of values of ``n`` and their range, not their spacing; the log spacing is ours."""
    raw = np.unique(np.rint(np.geomspace(n_min, n_max, count)).astype(int))
    if cap is not None:
        raw = np.unique(np.minimum(raw, max(1, int(cap))))
    return [int(v) for v in raw if v >= 1]


def _normalise_rows(Z: np.ndarray, floor: float = 1e-30) -> np.ndarray:
    nrm = np.sqrt(np.einsum("ij,ij->i", Z, Z))
    return Z / np.maximum(nrm, floor)[:, None]


def affinity_slices(n: int) -> list[slice]:
    """The blocks of :data:`AFFINITY_TILE` consecutive indices (the last one shorter) that cover
    ``range(n)``: the grid of :func:`cosine_affinity`'s tiles along its rows or its columns."""
    t = int(AFFINITY_TILE)
    return [slice(lo, min(n, lo + t)) for lo in range(0, int(n), t)]


def _grid_bounds(part: slice | None, n: int, name: str) -> tuple[int, int]:
    lo, hi, step = (slice(None) if part is None else part).indices(n)
    if step != 1 or lo % AFFINITY_TILE or (hi % AFFINITY_TILE and hi != n) or hi < lo:
        raise ValueError(f"cosine_affinity: {name}={part} is not a block of the {AFFINITY_TILE}-index tile "
                         f"grid of {n} (see affinity_slices)")
    return lo, hi


def cosine_affinity(P: np.ndarray, Q: np.ndarray, rows: slice | None = None,
                    cols: slice | None = None) -> np.ndarray:
    r"""Cosine affinities :math:`\cos(p_i, q_j) = p_i^\top q_j / (\lVert p_i\rVert \lVert q_j\rVert)`
    (Hodosh et al. 2013, Eq. 4), float32.  Zero vectors get affinity 0.

    Parameters
    ----------
    P : ndarray (n_p, d)
        Projections of the images (rows ``i``).
    Q : ndarray (n_q, d)
        Projections of the captions (columns ``j``).
    rows, cols : slice, optional
        Return only this block of the matrix.  Each must be a union of consecutive tiles of
        :func:`affinity_slices` (start on the grid, stop on it or at the end); otherwise ``ValueError``.

    Notes
    -----
    Both sides are normalised in float64 and the product :math:`\hat P \hat Q^\top` is formed tile by
    tile on a fixed grid of :data:`AFFINITY_TILE` × :data:`AFFINITY_TILE` entries from the origin, each
    tile one GEMM.  A tile's entries therefore do not depend on which block was asked for: a block holds
    the whole matrix's entries bit for bit, so a Borda fusion can run over blocks of query rows without
    the whole matrix (:func:`kcca.selection.select_and_ensemble`).  One GEMM over more rows can differ in
    the last bits (the BLAS blocks the product by the operands' shapes), and rankings' ties depend on them.
    """
    Pn = _normalise_rows(np.asarray(P, np.float64))
    Qn = _normalise_rows(np.asarray(Q, np.float64))
    r0, r1 = _grid_bounds(rows, Pn.shape[0], "rows")
    c0, c1 = _grid_bounds(cols, Qn.shape[0], "cols")
    out = np.empty((r1 - r0, c1 - c0), dtype=np.float32)
    t = AFFINITY_TILE
    for i in range(r0, r1, t):
        for j in range(c0, c1, t):
            out[i - r0:i - r0 + t, j - c0:j - c0 + t] = Pn[i:i + t] @ Qn[j:j + t].T
    return out


def cosine_sweep(P: np.ndarray, Q: np.ndarray, ns: Sequence[int]) -> Iterator[tuple[int, np.ndarray]]:
    """Cosine affinities of every prefix ``P[:, :n]`` vs ``Q[:, :n]`` for ``n`` in ``ns`` (ascending).

    Uses cumulative sums: the dot products of prefix ``n_j`` are those of ``n_{j-1}`` plus one GEMM on
    columns ``n_{j-1}:n_j`` and the prefix norms come from ``cumsum`` of squared entries, so the whole
    sweep costs one ``P Q^T`` product.  Yields ``(n, S_n)`` with ``S_n`` float32 of shape
    ``(len(P), len(Q))``; the yielded array is reused — copy it to keep it.
    """
    P = np.asarray(P, np.float64)
    Q = np.asarray(Q, np.float64)
    ns = sorted(set(int(n) for n in ns))
    if ns and (ns[0] < 1 or ns[-1] > P.shape[1] or ns[-1] > Q.shape[1]):
        raise ValueError(f"ns must lie in [1, {min(P.shape[1], Q.shape[1])}], got {ns[0]}..{ns[-1]}")
    cp = np.cumsum(P * P, axis=1)
    cq = np.cumsum(Q * Q, axis=1)
    dot = np.zeros((P.shape[0], Q.shape[0]), dtype=np.float64)
    out = np.empty_like(dot, dtype=np.float32)
    prev = 0
    for n in ns:
        if n > prev:
            dot += P[:, prev:n] @ Q[:, prev:n].T
            prev = n
        ip = 1.0 / np.maximum(np.sqrt(cp[:, n - 1]), 1e-30)
        iq = 1.0 / np.maximum(np.sqrt(cq[:, n - 1]), 1e-30)
        np.multiply(dot * ip[:, None], iq[None, :], out=out, casting="same_kind")
        yield n, out


# ------------------------------------------------------------------------------ BLAS threads
def _blas_threads(n: int | None):
    """Context limiting BLAS/LAPACK threads to ``n`` (``None``: leave the library default)."""
    if n is None:
        return contextlib.nullcontext()
    return threadpool_limits(limits=int(n), user_api="blas")



# ------------------------------------------------------------------------------ spectral views
@dataclass
class _View:
    """One side (X or Y) in spectral form: centred kernel ≈ U diag(lam) U^T, plus the map from new
    items to the feature coordinates ``φ`` with ``K ≈ Φ Φ^T``, ``Φ = U diag(√lam)``."""

    U: np.ndarray | None     # (N, r) orthonormal; None while parked on disk
    lam: np.ndarray          # (r,) positive, descending
    kind: str                # "exact" | "lowrank"
    n_train: int
    center: bool
    col_means: np.ndarray | None = None   # exact: training column means of K
    grand_mean: float = 0.0
    # low-rank only
    pivots: np.ndarray | None = None
    L: np.ndarray | None = None            # (r0, r0) lower-triangular pivot block G[P, :]
    g_mean: np.ndarray | None = None       # (r0,) training mean of G
    W: np.ndarray | None = None            # (r0, r) right singular vectors of centred G
    source: KernelSource | None = None
    parked: Path | None = None             # U's file while it waits on disk (park / unpark)

    def park(self, path: str | Path) -> None:
        """Keep ``U``, the view's one ``N × r`` array (1.8 GB at COCO size), on disk at ``path`` and drop
        it from memory until :meth:`unpark` reads it back, bit for bit.  ``U`` never changes, so it is
        written once (atomically: a ``.part`` file renamed into place); a later park only drops it."""
        if self.U is None:
            return
        if self.parked is None:
            self.parked = write_factor(path, self.U, self.U.dtype)
        self.U = None

    def unpark(self) -> None:
        """Read a parked ``U`` back into memory (nothing to do when it is there)."""
        if self.U is None:
            if self.parked is None:
                raise RuntimeError("this view's U was dropped without being parked")
            self.U = np.load(self.parked, allow_pickle=False)

    @property
    def rank(self) -> int:
        return int(self.lam.shape[0])

    def features(self, K_new, *, from_data: bool = False) -> np.ndarray:
        """Feature coordinates ``φ`` (m, r) of new items.  ``K_new``: kernel rows against all training
        items (exact; or low-rank with N columns), against the pivots (low-rank, r0 columns), or raw
        items when ``from_data``."""
        if self.kind == "exact":
            if from_data:
                K_new = self.source.rows_against(K_new, np.arange(self.n_train))
            K_new = np.asarray(K_new, dtype=np.float64)
            if K_new.ndim != 2 or K_new.shape[1] != self.n_train:
                raise ValueError(f"kernel rows must have shape (m, {self.n_train}), got {K_new.shape}")
            _check_finite_rows(K_new)
            out = np.empty((K_new.shape[0], self.rank))
            scale = 1.0 / np.sqrt(self.lam)
            for lo in range(0, K_new.shape[0], _ROW_CHUNK):
                blk = K_new[lo:lo + _ROW_CHUNK]
                if self.center:
                    blk = center_rows(blk, self.col_means, self.grand_mean)
                out[lo:lo + len(blk)] = (blk.astype(self.U.dtype, copy=False) @ self.U) * scale
            return out
        # low rank: through the pivots
        r0 = len(self.pivots)
        if from_data:
            Kp = self.source.rows_against(K_new, self.pivots)
        else:
            K_new = np.asarray(K_new, dtype=np.float64)
            if K_new.ndim != 2:
                raise ValueError(f"kernel rows must be 2-D, got shape {K_new.shape}")
            # N columns are always read as all training items in training order; with a full-rank
            # factor (r0 == N) rows against the pivots must therefore be given in training order too
            if K_new.shape[1] == self.n_train:
                Kp = K_new[:, self.pivots]
            elif K_new.shape[1] == r0:
                Kp = K_new
            else:
                raise ValueError(
                    f"kernel rows must have {self.n_train} columns (all training items) or {r0} "
                    f"(the pivots, in pivot order), got {K_new.shape[1]}")
        _check_finite_rows(Kp)
        g = sla.solve_triangular(self.L, Kp.T, lower=True, check_finite=False).T
        if self.center:
            g = g - self.g_mean
        return g @ self.W

    def train_features(self) -> np.ndarray:
        return self.U * np.sqrt(self.lam)


def write_factor(path: str | Path, U: np.ndarray, dtype, block: int = 256) -> Path:
    """Write ``U`` as ``dtype`` to the ``.npy`` file ``path``, ``block`` columns at a time, atomically (a
    ``.part`` file renamed into place), in ``U``'s memory order; returns the path.  ``np.load`` gives back
    ``U.astype(dtype)`` bit for bit, without that converted copy ever sitting beside ``U`` in memory."""
    path = Path(path)
    part = path.with_name(path.name + ".part")
    fortran = bool(U.flags.f_contiguous and not U.flags.c_contiguous)
    out = np.lib.format.open_memmap(part, mode="w+", dtype=np.dtype(dtype), shape=U.shape, fortran_order=fortran)
    try:
        if fortran:
            for lo in range(0, U.shape[1], block):
                out[:, lo:lo + block] = U[:, lo:lo + block]
        else:
            for lo in range(0, U.shape[0], block * 64):
                out[lo:lo + block * 64] = U[lo:lo + block * 64]
        out.flush()
    finally:
        del out
    os.replace(part, path)
    return path


def _check_finite_rows(K_new: np.ndarray) -> None:
    if not np.all(np.isfinite(K_new)):
        bad = np.flatnonzero(~np.isfinite(K_new).all(axis=1))
        raise ValueError(f"kernel rows contain NaN or infinite values (rows {bad[:5].tolist()}"
                         f"{', …' if bad.size > 5 else ''})")


def _relative_floor(jitter, n: int, dtype) -> float:
    """The relative eigenvalue floor: ``jitter`` itself, or for ``"auto"`` the standard numerical-rank
    tolerance ``N · eps(dtype)`` (as ``numpy.linalg.matrix_rank``), never below 1e-10."""
    if isinstance(jitter, str):
        if jitter != "auto":
            raise ValueError(f"jitter must be a number in [0, 1) or 'auto', got {jitter!r}")
        return max(1e-10, n * float(np.finfo(dtype).eps))
    return float(jitter)


def _named(label: str | None, message: str) -> str:
    """A warning's text with the kernel it is about in front (``"BoW5 text kernel (d = 1): …"``)."""
    return f"{label}: {message}" if label else message


def _exact_view(K: np.ndarray, center: bool, jitter, dtype=np.float64, label: str | None = None) -> _View:
    n = K.shape[0]
    jitter = _relative_floor(jitter, n, dtype)
    if center:
        Kc, col, grand = center_gram(K)
    else:
        Kc, col, grand = 0.5 * (K + K.T), None, 0.0
    Kc = Kc.astype(dtype, copy=False)
    lam, U = lapack_eigh(Kc, overwrite_a=True)   # = sla.eigh(driver="evd"), other threads run meanwhile
    lam = lam.astype(np.float64)
    lam, U = lam[::-1], U[:, ::-1]
    lmax = float(lam[0]) if lam.size else 0.0
    if not lmax > 0:
        raise ValueError("kernel matrix is zero after centring (all items identical?): no canonical "
                         "directions exist")
    if lam[-1] < -1e-6 * lmax:
        # indefinite (e.g. Hodosh Eq. 27's max of two similarities): KCCA needs a PSD kernel, so the
        # negative part is dropped (projection onto the PSD cone) and the user is told how much it was
        warnings.warn(_named(label, f"kernel matrix is not positive semidefinite (smallest eigenvalue "
                                    f"{lam[-1]:.3g} vs largest {lmax:.3g}); its negative eigenvalues are dropped"),
                      RuntimeWarning, stacklevel=3)
    keep = lam > jitter * lmax
    noise_floor = n * float(np.finfo(dtype).eps)
    n_noise = int(np.sum(keep & (lam <= noise_floor * lmax))) if dtype == np.float32 else 0
    if n_noise:
        warnings.warn(_named(label, f"float32 KCCA keeps {n_noise} eigen-directions "
                      f"below float32's numerical-rank tolerance N·eps = {noise_floor:.2g} (relative floor "
                      f"jitter={jitter:g}); they are rounding noise and can distort the canonical directions: "
                      "pass jitter='auto'"), RuntimeWarning, stacklevel=3)
    v = _View(U=np.ascontiguousarray(U[:, keep]), lam=lam[keep].copy(), kind="exact", n_train=n,
              center=center, col_means=col, grand_mean=grand)
    v.min_eig_ratio = float(lam[-1] / lmax)
    return v


def _lowrank_view(source: KernelSource, center: bool, jitter, eta: float,
                  max_rank: int | None, label: str | None = None, dtype=np.float64,
                  show_progress: bool = False, spill: str | Path | None = None) -> _View:
    """The spectral view of ``K ≈ G G^T`` (incomplete Cholesky): the centred factor ``G_c = G − 1 ḡ^T``
    has the thin QR ``G_c = Q R`` and ``R = U_r diag(s) W^T``, so ``K_c ≈ (Q U_r) diag(s²) (Q U_r)^T``:
    ``U = Q U_r``, ``λ = s²``.  Every ``N × r`` step runs in ``G``'s own memory (centring in place,
    LAPACK's QR overwriting ``G`` with ``Q``, ``U`` written over ``Q`` in row blocks), so the view costs
    one ``N × r`` float64 array at its peak, not the four of a copying QR (docs/scaling.md).  The factor
    and its QR are float64 whatever ``dtype``; ``dtype=float32`` keeps ``U`` in float32 (half the memory
    the view holds: 1.8 GB instead of 3.6 GB at COCO size and rank 4,000), as the exact solver's float32
    eigendecomposition gives it.  ``spill``: a ``.npy`` path to write ``U`` to, converted a block at a
    time (:func:`write_factor`), instead of converting it in memory beside ``G``; the view then comes
    back parked (:meth:`_View.unpark` reads ``U``), and the peak is one ``N × r`` float64 array."""
    jitter = _relative_floor(jitter, source.n, np.float64)
    G, piv = incomplete_cholesky(source, eta=eta, max_rank=max_rank, label=label, show_progress=show_progress)
    source.release()   # every column is read: what the kernel kept for them goes before the QR
    if G.shape[1] == 0:
        raise ValueError("incomplete Cholesky found no pivot: the kernel is zero")
    L = np.ascontiguousarray(G[piv, :])
    g_mean = G.mean(axis=0) if center else np.zeros(G.shape[1])
    if center:
        G -= g_mean          # G is this function's own array (Fortran order, as LAPACK wants it)
    U, lam, Wt = _thin_spectrum_in_place(G, jitter)
    parked = None
    if spill is not None:
        parked, U = write_factor(spill, U, dtype), None
    elif dtype != np.float64:
        U = U.astype(dtype)   # G's memory (U was a view of it) goes when this function returns
    return _View(U=U, lam=lam, kind="lowrank", n_train=source.n, center=center, pivots=piv,
                 L=L, g_mean=g_mean, W=np.ascontiguousarray(Wt.T), source=source, parked=parked)


def _thin_spectrum_in_place(G: np.ndarray, jitter: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(U, λ, W^T)`` of ``G G^T = U diag(λ) U^T`` (``G``: N × r, N ≥ r, Fortran order), keeping
    ``λ > jitter · λ₁``; ``G`` is overwritten (``U`` is a view of its memory)."""
    n = G.shape[0]
    Q, R = sla.qr(G, mode="economic", overwrite_a=True, check_finite=False)
    Ur, s, Wt = np.linalg.svd(R)
    lam = s * s
    keep = lam > jitter * float(lam[0]) if lam.size and lam[0] > 0 else np.zeros(lam.shape, bool)
    if not keep.any():
        raise ValueError("kernel matrix is zero after centring: no canonical directions exist")
    k = int(keep.sum())               # λ descends: the kept ones are the first k
    T = np.ascontiguousarray(Ur[:, :k])
    for lo in range(0, n, _ROW_CHUNK):
        blk = Q[lo:lo + _ROW_CHUNK]
        blk[:, :k] = blk @ T          # the product is formed before the rows are written back
    return Q[:, :k], lam[:k], Wt[:k]


def _solve_core(vx: _View, vy: _View, M: np.ndarray, reg: float, min_corr: float,
                max_components: int | None = None):
    """Canonical correlations and core singular vectors for one κ (see module docstring)."""
    dx = np.sqrt(vx.lam / (vx.lam + reg))
    dy = np.sqrt(vy.lam / (vy.lam + reg))
    C = (dx.astype(M.dtype)[:, None] * M) * dy.astype(M.dtype)[None, :]
    transpose = C.shape[0] > C.shape[1]
    Cs = C.T if transpose else C               # (small, large)
    # eigendecomposition of the smaller Gram Cs Cs^T = A diag(ρ²) A^T (symmetric, cheaper than an SVD)
    if Cs.shape[1] >= 1:
        if Cs.shape[0] > 64:
            syrk = sla.blas.get_blas_funcs("syrk", (Cs,))
            S2 = syrk(1.0, np.asfortranarray(Cs), lower=True)
        else:
            S2 = Cs @ Cs.T
    else:
        S2 = np.zeros((Cs.shape[0], Cs.shape[0]))
    mu, A = lapack_eigh(S2, overwrite_a=True)
    mu, A = mu[::-1], A[:, ::-1]
    rho = np.sqrt(np.clip(mu.astype(np.float64), 0.0, None))
    # ρ² comes from the eigenvalues of the squared core, whose rounding error is about eps·ρ₁²: below
    # ρ ≈ √eps·ρ₁ the pairs are noise and B = Csᵀ A / ρ loses its unit norm (float32: off by up to 50 %
    # at ρ < 1e-3·ρ₁).  Pairs below 10·√eps(dtype)·ρ₁ are dropped with those below min_corr.
    resolution = 10.0 * float(np.sqrt(np.finfo(S2.dtype).eps)) * float(rho[0]) if rho.size else 0.0
    keep = rho > max(min_corr, resolution)
    if max_components is not None:
        keep &= np.arange(rho.size) < max_components
    rho, A = rho[keep], A[:, keep]
    B = (Cs.T @ A) / rho[None, :]
    # deterministic signs: largest-magnitude entry of each small-side vector positive
    sgn = np.sign(A[np.abs(A).argmax(axis=0), np.arange(A.shape[1])])
    sgn[sgn == 0] = 1.0
    A, B = A * sgn, B * sgn
    if transpose:
        A, B = B, A
    return np.minimum(rho, 1.0), A, B


#: Public name of one side's decomposition (what :func:`decompose` returns).
KernelView = _View


def decompose(K, *, center: bool = True, solver: str = "exact", jitter: float | str = 1e-10, eta: float = 1e-6,
              max_rank: int | None = None, dtype="float64", label: str | None = None,
              show_progress: bool = False, spill: str | Path | None = None) -> _View:
    """The κ-independent decomposition of one training kernel (a Gram matrix or a
    :class:`KernelSource`), reusable across fits with :meth:`KCCA.fit_decomposed`: e.g. one image-kernel
    decomposition serves every text kernel and every text diagonal factor in a model-selection grid.
    ``label`` names the kernel in front of its warnings (e.g. ``"TRI5SEM text kernel (d = 1)"``; safe
    when several threads decompose at once, unlike re-issuing caught warnings); ``show_progress``: a
    progress bar over the low-rank solver's pivots (:func:`kcca.lowrank.incomplete_cholesky`); ``spill``
    (low-rank only): write the factor ``U`` to this ``.npy`` file and return the view parked
    (:meth:`KernelView.unpark` reads it back), so that ``U`` is never converted beside the factor."""
    if solver == "exact":
        if isinstance(K, KernelSource):
            K = K._gram if K._gram is not None else K.kernel(K.data, K.data)
        return _exact_view(_as_gram(K, "K"), center, jitter, _check_dtype(dtype), label)
    if solver == "lowrank":
        src = K if isinstance(K, KernelSource) else KernelSource.from_gram(_as_gram(K, "K"))
        return _lowrank_view(src, center, jitter, eta, max_rank, label, _check_dtype(dtype), show_progress,
                             spill)
    raise ValueError(f"solver must be 'exact' or 'lowrank', got {solver!r}")


# ------------------------------------------------------------------------------------ estimator
class KCCA:
    """Regularised kernel CCA (Hodosh et al. 2013, Eq. 3–4; Hardoon et al. 2004), scikit-learn style.

    Parameters
    ----------
    n_components : int, optional
        Default number ``n`` of projection dimensions used by :meth:`transform_x`, :meth:`affinity`
        and :meth:`score` (largest canonical correlations first).  ``None``: all available.  All
        components are always computed, so any ``n`` can be asked for later without refitting.
    reg : float
        κ ≥ 0 of Eq. 3 (denominators ``K² + κK``).  κ = 0 is allowed (finite, but it overfits).
    center : bool
        Centre the kernels in feature space; new rows are centred with the training statistics.
    solver : {"exact", "lowrank"}
        ``"exact"``: dense symmetric eigendecompositions of both ``N × N`` kernels.  ``"lowrank"``:
        pivoted incomplete Cholesky (partial Gram–Schmidt) pulling kernel columns on demand.
    eta : float
        Low-rank stopping tolerance: residual trace ``≤ eta · trace(K)``.
    max_rank : int, optional
        Low-rank: at most this many pivots per side.
    jitter : float or "auto"
        Relative eigenvalue floor: eigenvalues ``≤ jitter · λ_max`` of a centred kernel are treated as 0.
        ``"auto"``: the numerical-rank tolerance of the working precision, ``N · eps(dtype)`` (e.g.
        7.2e-4 for float32 at N = 6000, 1.3e-12 → 1e-10 for float64): eigenpairs below it are rounding
        noise in that precision, and dropping them makes every per-κ core solve ``rank × rank``.
    min_corr : float
        Canonical pairs with correlation ``≤ min_corr`` are dropped (their directions are undefined), as
        are those below the core's numerical resolution ``10 · √eps(dtype) · ρ₁`` (module docstring).
    kernel_x, kernel_y : callable ``kernel(A, B) -> (len(A), len(B))``, optional
        When given, :meth:`fit` and the transforms take *data* instead of kernel matrices (the low-rank
        solver then never forms an ``N × N`` matrix).
    dtype : {"float64", "float32"}
        Precision of the exact solver's dense decompositions and products, and of the low-rank solver's
        stored factor ``U`` and core products (its incomplete Cholesky factor and QR stay float64).  ``"float32"`` is 2–3× faster
        on large N (correlations then agree with float64 to ~1e-5); the default is float64.
    n_threads : int, optional
        BLAS/LAPACK threads during :meth:`fit` / :meth:`with_reg` (via threadpoolctl).  ``None`` keeps
        the library default; ``1`` is much faster on an oversubscribed machine.

    Attributes
    ----------
    correlations_ : ndarray (n_components_,)
        Regularised canonical correlations ``ρ_k`` (the values of Eq. 3), descending.
    train_correlations_ : ndarray
        Plain Pearson correlations of the paired training projections (what pyrcca / cca-zoo report).
    n_components_, rank_x_, rank_y_ : int
    pivots_x_, pivots_y_ : ndarray or None (low-rank)
    alpha_, beta_ : ndarray (N, n_components_) – dual directions (exact solver; computed on access).
    """

    def __init__(self, n_components: int | None = None, reg: float = 0.1, *, center: bool = True,
                 solver: str = "exact", eta: float = 1e-6, max_rank: int | None = None,
                 jitter: float | str = 1e-10, min_corr: float = 1e-9,
                 kernel_x: Callable | None = None, kernel_y: Callable | None = None,
                 n_threads: int | None = None, dtype: str = "float64"):
        self.n_components = n_components
        self.reg = reg
        self.center = center
        self.solver = solver
        self.eta = eta
        self.max_rank = max_rank
        self.jitter = jitter
        self.min_corr = min_corr
        self.kernel_x = kernel_x
        self.kernel_y = kernel_y
        self.n_threads = n_threads
        self.dtype = dtype

    # --------------------------------------------------------------------------------- params
    def get_params(self, deep: bool = True) -> dict:
        return {k: getattr(self, k) for k in ("n_components", "reg", "center", "solver", "eta",
                                              "max_rank", "jitter", "min_corr", "kernel_x", "kernel_y",
                                              "n_threads", "dtype")}

    def set_params(self, **params) -> "KCCA":
        for k, v in params.items():
            if k not in self.get_params():
                raise ValueError(f"KCCA has no parameter {k!r}")
            setattr(self, k, v)
        return self

    def _check_params(self) -> None:
        if self.solver not in ("exact", "lowrank"):
            raise ValueError(f"solver must be 'exact' or 'lowrank', got {self.solver!r}")
        if not (isinstance(self.reg, (int, float, np.integer, np.floating)) and self.reg >= 0
                and math.isfinite(self.reg)):
            raise ValueError(f"reg (κ) must be a finite number ≥ 0, got {self.reg!r}")
        if self.n_components is not None and int(self.n_components) < 1:
            raise ValueError(f"n_components must be ≥ 1 or None, got {self.n_components!r}")
        if isinstance(self.jitter, str):
            _relative_floor(self.jitter, 1, np.float64)   # raises for anything but "auto"
        elif not (0 <= self.jitter < 1):
            raise ValueError(f"jitter must be in [0, 1) or 'auto', got {self.jitter!r}")
        elif self.jitter == 0 and self.reg == 0 and self.solver == "exact":
            warnings.warn("KCCA with reg (κ) = 0 and jitter = 0 keeps the kernels' rounding-noise eigenvalues "
                          "and whitens them at full weight: expect spurious canonical correlations near 1. "
                          "Use jitter='auto' (the working precision's numerical rank) or the default 1e-10.",
                          RuntimeWarning, stacklevel=3)
        if not self.eta >= 0:
            raise ValueError(f"eta must be ≥ 0, got {self.eta!r}")

    # ------------------------------------------------------------------------------------ fit
    def fit(self, Kx, Ky) -> "KCCA":
        """Fit on training Gram matrices ``Kx``, ``Ky`` (``N × N``, rows/columns = the same ``N``
        training pairs), or on training data when ``kernel_x`` / ``kernel_y`` are set.  With
        ``solver="lowrank"`` a :class:`KernelSource` is accepted for either side."""
        self._check_params()
        with _blas_threads(self.n_threads):
            return self._fit(Kx, Ky)

    def _fit(self, Kx, Ky) -> "KCCA":
        self._data_mode = (self.kernel_x is not None, self.kernel_y is not None)
        views = []
        for side, (K, kern) in enumerate(((Kx, self.kernel_x), (Ky, self.kernel_y))):
            name = "Kx" if side == 0 else "Ky"
            if isinstance(K, KernelSource):
                src = K
            elif kern is not None:
                src = KernelSource(K, kern)
            else:
                src = None
            if self.solver == "exact":
                if src is not None and src._gram is None:
                    Kd = np.asarray(src.kernel(src.data, src.data), dtype=np.float64)
                elif src is not None:
                    Kd = src._gram
                else:
                    Kd = K
                v = _exact_view(_as_gram(Kd, name), self.center, self.jitter, _check_dtype(self.dtype))
                v.source = src
            else:
                if src is None:
                    src = KernelSource.from_gram(_as_gram(K, name))
                v = _lowrank_view(src, self.center, self.jitter, self.eta, self.max_rank,
                                  dtype=_check_dtype(self.dtype))
            views.append(v)
        vx, vy = views
        if vx.n_train != vy.n_train:
            raise ValueError(f"Kx and Ky must describe the same training pairs: {vx.n_train} vs "
                             f"{vy.n_train} items")
        self._vx, self._vy = vx, vy
        self._M = vx.U.T @ vy.U
        self._solve()
        return self

    def fit_decomposed(self, vx: _View, vy: _View) -> "KCCA":
        """Fit from two precomputed :func:`decompose` results (kernel rows are then expected by the
        transforms, as for precomputed Gram matrices)."""
        self._check_params()
        if vx.n_train != vy.n_train:
            raise ValueError(f"the two decompositions describe different training sets: {vx.n_train} vs "
                             f"{vy.n_train} items")
        self._data_mode = (False, False)
        self._vx, self._vy = vx, vy
        with _blas_threads(self.n_threads):
            self._M = vx.U.T @ vy.U
            self._solve()
        return self

    def _solve(self) -> None:
        rho, A, B = _solve_core(self._vx, self._vy, self._M, float(self.reg), self.min_corr)
        self.correlations_ = rho
        self._wx = A / np.sqrt(self._vx.lam + self.reg)[:, None]   # directions in φ-coordinates
        self._wy = B / np.sqrt(self._vy.lam + self.reg)[:, None]
        self.n_components_ = int(rho.size)
        if self.n_components_ == 0:
            raise ValueError(f"no canonical correlation above min_corr={self.min_corr:g}: the two kernels share "
                             "no direction (e.g. their centred ranges are orthogonal), so there is nothing to "
                             "project onto")
        self.rank_x_, self.rank_y_ = self._vx.rank, self._vy.rank
        self.n_train_ = self._vx.n_train
        self.pivots_x_, self.pivots_y_ = self._vx.pivots, self._vy.pivots
        self._proj_cache: dict[str, np.ndarray] = {}
        # Pearson correlation of the training variates u = U_X D_X a, v = U_Y D_Y b without forming them:
        # u^T v = ρ, ‖u‖ = ‖D_X a‖ (U orthonormal), and u, v have zero mean when the kernels are centred.
        if self._vx.center and self._vy.center:
            dx = np.sqrt(self._vx.lam / (self._vx.lam + self.reg))[:, None]
            dy = np.sqrt(self._vy.lam / (self._vy.lam + self.reg))[:, None]
            nu = np.linalg.norm(dx * A, axis=0)
            nv = np.linalg.norm(dy * B, axis=0)
            self.train_correlations_ = np.minimum(rho / np.maximum(nu * nv, 1e-300), 1.0)
        else:
            self.train_correlations_ = paired_correlations(self.train_projections_x_, self.train_projections_y_)

    @property
    def train_projections_x_(self) -> np.ndarray:
        """Canonical variates of the training items of view X, ``K̃_X α`` ``(N, n_components_)``
        (computed on first access)."""
        if "x" not in self._proj_cache:
            v = self._vx
            # K̃α = U D A with A = √(λ+κ) w  ⇒  U (√λ w)
            self._proj_cache["x"] = v.U @ (np.sqrt(v.lam)[:, None] * self._wx)
        return self._proj_cache["x"]

    @property
    def train_projections_y_(self) -> np.ndarray:
        if "y" not in self._proj_cache:
            v = self._vy
            self._proj_cache["y"] = v.U @ (np.sqrt(v.lam)[:, None] * self._wy)
        return self._proj_cache["y"]

    def with_reg(self, reg: float) -> "KCCA":
        """A fitted copy for another κ that shares this fit's kernel decompositions (only the
        ``r × r`` core is re-solved)."""
        self._check_fitted()
        new = KCCA(**{**self.get_params(), "reg": reg})
        new._check_params()
        new._data_mode = self._data_mode
        new._vx, new._vy, new._M = self._vx, self._vy, self._M
        with _blas_threads(self.n_threads):
            new._solve()
        return new

    # ------------------------------------------------------------------------------ transform
    def _check_fitted(self) -> None:
        if not hasattr(self, "correlations_"):
            raise RuntimeError("KCCA is not fitted yet; call fit(Kx, Ky) first")

    def _n(self, n: int | None) -> int:
        self._check_fitted()
        n = self.n_components if n is None else n
        if n is None:
            return self.n_components_
        n = int(n)
        if n < 1:
            raise ValueError(f"n (number of projection dimensions) must be ≥ 1, got {n}")
        return min(n, self.n_components_)

    def features_x(self, Kx_new) -> np.ndarray:
        """κ-independent feature coordinates of new images (reusable across :meth:`with_reg` copies)."""
        self._check_fitted()
        return self._vx.features(Kx_new, from_data=self._data_mode[0])

    def features_y(self, Ky_new) -> np.ndarray:
        self._check_fitted()
        return self._vy.features(Ky_new, from_data=self._data_mode[1])

    def project_features_x(self, Fx: np.ndarray, n: int | None = None) -> np.ndarray:
        return Fx @ self._wx[:, :self._n(n)]

    def project_features_y(self, Fy: np.ndarray, n: int | None = None) -> np.ndarray:
        return Fy @ self._wy[:, :self._n(n)]

    def transform_x(self, Kx_new, n: int | None = None) -> np.ndarray:
        """Canonical projections ``k̃(x)^T α_{1..n}`` of new items of view X.

        ``Kx_new``: ``(m, N)`` kernel rows against the training items (low-rank: also ``(m, r)``
        against the pivots in pivot order), or raw items when ``kernel_x`` was given."""
        return self.project_features_x(self.features_x(Kx_new), n)

    def transform_y(self, Ky_new, n: int | None = None) -> np.ndarray:
        """Like :meth:`transform_x` for view Y."""
        return self.project_features_y(self.features_y(Ky_new), n)

    def transform(self, Kx_new, Ky_new, n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        return self.transform_x(Kx_new, n), self.transform_y(Ky_new, n)

    def affinity(self, Kx_new, Ky_new, n: int | None = None) -> np.ndarray:
        """Hodosh Eq. 4: ``f(i, s) = cos(α_{1..n}^T K_I(i), β_{1..n}^T K_S(s))`` for every new image
        ``i`` (rows of ``Kx_new``) and caption ``s`` (rows of ``Ky_new``): float32 ``(m_x, m_y)``."""
        return cosine_affinity(*self.transform(Kx_new, Ky_new, n))

    def affinities(self, Kx_new, Ky_new, ns: Iterable[int]) -> Iterator[tuple[int, np.ndarray]]:
        """Eq. 4 affinities for every ``n`` in ``ns`` from one projection (prefixes; no refit).
        ``n`` above :attr:`n_components_` is capped (duplicates removed)."""
        self._check_fitted()
        ns = sorted({min(int(n), self.n_components_) for n in ns})
        P, Q = self.transform(Kx_new, Ky_new, self.n_components_)
        yield from cosine_sweep(P, Q, ns)

    def score(self, Kx_new, Ky_new, n: int | None = None) -> float:
        """Mean over the first ``n`` components of the Pearson correlation between the paired
        projections of held-out pairs (row ``i`` of ``Kx_new`` pairs with row ``i`` of ``Ky_new``)."""
        P, Q = self.transform(Kx_new, Ky_new, n)
        if P.shape[0] != Q.shape[0]:
            raise ValueError(f"score needs paired rows, got {P.shape[0]} and {Q.shape[0]}")
        return float(np.mean(paired_correlations(P, Q)))

    # -------------------------------------------------------------------------- dual weights
    @property
    def alpha_(self) -> np.ndarray:
        """Dual directions of view X, ``(N, n_components_)`` (exact solver), normalised so that
        ``α^T (K_X² + κ K_X) α = 1`` on the centred kernel."""
        return self._dual(self._vx, self._wx)

    @property
    def beta_(self) -> np.ndarray:
        return self._dual(self._vy, self._wy)

    def _dual(self, v: _View, w: np.ndarray) -> np.ndarray:
        self._check_fitted()
        if v.kind != "exact":
            raise AttributeError("dual directions over all training items exist for the exact solver "
                                 "only; the low-rank solver projects through the pivots")
        return v.U @ (w / np.sqrt(v.lam)[:, None])


def paired_correlations(P: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """Pearson correlation of column j of ``P`` with column j of ``Q``, for every j (0 where a column is
    constant): the canonical correlations of paired projections."""
    Pc = P - P.mean(axis=0)
    Qc = Q - Q.mean(axis=0)
    num = np.einsum("ij,ij->j", Pc, Qc)
    den = np.sqrt(np.einsum("ij,ij->j", Pc, Pc) * np.einsum("ij,ij->j", Qc, Qc))
    return np.where(den > 0, num / np.maximum(den, 1e-300), 0.0)
