"""KCCA solvers (kcca/solver.py): Hodosh et al. 2013 Eq. 3–4, Hardoon et al. 2004."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from kcca.solver import (
    KCCA, KernelSource, center_gram, center_rows, cosine_affinity, cosine_sweep, incomplete_cholesky,
    log_spaced_ns,
)
from kcca.synthetic import make_two_view, rbf_kernel


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    # 2 shared cores: multi-threaded BLAS on tiny matrices only costs time here.
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


def _linear_cca_reference(X, Y, reg=0.0):
    """Canonical correlations by SVD of the whitened cross-covariance ``Cxx^{-1/2} Cxy Cyy^{-1/2}``
    (ridge ``reg`` on the covariances: the primal form of Eq. 3 with a linear kernel)."""
    Xc, Yc = X - X.mean(0), Y - Y.mean(0)

    def isqrt(C):
        w, V = np.linalg.eigh(C)
        return (V / np.sqrt(w)) @ V.T

    Cxx = Xc.T @ Xc + reg * np.eye(X.shape[1])
    Cyy = Yc.T @ Yc + reg * np.eye(Y.shape[1])
    return np.linalg.svd(isqrt(Cxx) @ Xc.T @ Yc @ isqrt(Cyy), compute_uv=False)


def _linear_data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((n, 2))
    X = np.c_[z, rng.standard_normal((n, 6))] @ rng.standard_normal((8, 8))
    Y = np.c_[z + 0.5 * rng.standard_normal((n, 2)), rng.standard_normal((n, 3))] @ rng.standard_normal((5, 5))
    return X, Y


# ------------------------------------------------------------------------------- correctness
@pytest.mark.parametrize("solver", ["exact", "lowrank"])
def test_linear_kernel_small_kappa_matches_linear_cca(solver):
    X, Y = _linear_data()
    ref = _linear_cca_reference(X, Y)
    m = KCCA(reg=1e-9, solver=solver, eta=0.0).fit(X @ X.T, Y @ Y.T)
    assert m.n_components_ == 5 and m.rank_x_ == 8 and m.rank_y_ == 5
    np.testing.assert_allclose(m.correlations_, ref, atol=1e-6)
    # plain Pearson correlations of the training projections agree too (κ → 0)
    np.testing.assert_allclose(m.train_correlations_, ref, atol=1e-6)
    # sklearn's iterative CCA reaches the same first correlation
    from sklearn.cross_decomposition import CCA

    u, v = CCA(n_components=1, max_iter=2000, tol=1e-12).fit_transform(X, Y)
    assert abs(abs(np.corrcoef(u[:, 0], v[:, 0])[0, 1]) - ref[0]) < 1e-4


def test_kappa_is_eq3_ridge_in_feature_space():
    # Eq. 3's κK term on a linear kernel is a ridge κI on the covariances of the primal problem.
    X, Y = _linear_data(seed=3)
    for kappa in (0.1, 5.0, 100.0):
        m = KCCA(reg=kappa).fit(X @ X.T, Y @ Y.T)
        np.testing.assert_allclose(m.correlations_, _linear_cca_reference(X, Y, reg=kappa), atol=1e-8)


def test_generalised_eigenproblem_holds():
    d = make_two_view(120, seed=2)
    Kx, Ky = d.kx(d.X, d.X), d.ky(d.Y, d.Y)
    kappa = 0.5
    m = KCCA(reg=kappa).fit(Kx, Ky)
    Kxc, Kyc = center_gram(Kx)[0], center_gram(Ky)[0]
    a, b, rho = m.alpha_[:, :5], m.beta_[:, :5], m.correlations_[:5]
    # block equations of Hardoon (2004) with Hodosh's K² + κK regulariser
    lhs_x = Kxc @ Kyc @ b
    rhs_x = (Kxc @ Kxc + kappa * Kxc) @ a * rho
    np.testing.assert_allclose(lhs_x, rhs_x, atol=1e-7 * np.abs(lhs_x).max())
    lhs_y = Kyc @ Kxc @ a
    rhs_y = (Kyc @ Kyc + kappa * Kyc) @ b * rho
    np.testing.assert_allclose(lhs_y, rhs_y, atol=1e-7 * np.abs(lhs_y).max())
    # normalisation α^T (K² + κK) α = I and ρ = α^T Kx Ky β
    np.testing.assert_allclose(a.T @ (Kxc @ Kxc + kappa * Kxc) @ a, np.eye(5), atol=1e-8)
    np.testing.assert_allclose(np.diag(a.T @ Kxc @ Kyc @ b), rho, atol=1e-8)
    # train_correlations_ (computed without forming the variates) = Pearson r of the variates
    u, v = m.train_projections_x_, m.train_projections_y_
    r = [np.corrcoef(u[:, k], v[:, k])[0, 1] for k in range(10)]
    np.testing.assert_allclose(m.train_correlations_[:10], r, atol=1e-10)
    # issue's form: (Kx + κI)^{-1} Ky (Ky + κI)^{-1} Kx α = ρ² α on the range of Kx
    n = Kx.shape[0]
    Mx = np.linalg.solve(Kxc + kappa * np.eye(n), Kyc @ np.linalg.solve(Kyc + kappa * np.eye(n), Kxc @ a))
    np.testing.assert_allclose(Kxc @ Mx, Kxc @ a * rho**2, atol=1e-6 * np.abs(Kxc @ a).max())


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_every_kept_pair_is_normalised(dtype):
    """α'(K² + κK)α = I and β'(K² + κK)β = I for *every* kept pair, not only the leading ones: pairs below
    the core's numerical resolution (10·√eps·ρ₁; ρ² is an eigenvalue of the squared core) are dropped
    instead of returning rounding-noise directions (float32 ones used to be off by up to 50 %)."""
    d = make_two_view(1000, seed=5)
    Kx, Ky = d.kx(d.X, d.X), d.ky(d.Y, d.Y)
    kappa = 5.0
    m = KCCA(reg=kappa, dtype=dtype, jitter="auto").fit(Kx, Ky)
    rho = m.correlations_
    assert rho[-1] > 10 * np.sqrt(np.finfo(dtype).eps) * rho[0]
    for w, v in ((m._wx, m._vx), (m._wy, m._vy)):
        A = w.astype(np.float64) * np.sqrt(v.lam.astype(np.float64) + kappa)[:, None]   # the core's vectors
        G = A.T @ A
        if dtype == "float64":
            np.testing.assert_allclose(G, np.eye(A.shape[1]), atol=1e-8)
        else:   # unit norms to 2 %, orthogonality to 5 % at float32's resolution of ρ (was off by 50 %)
            np.testing.assert_allclose(np.diag(G), 1.0, atol=0.02)
            assert np.abs(G - np.eye(A.shape[1])).max() < 0.05
    if dtype == "float64":      # the dual form on the full kernels for the last pairs too
        Kxc = center_gram(Kx)[0]
        a = m.alpha_[:, -3:]
        np.testing.assert_allclose(a.T @ (Kxc @ Kxc + kappa * Kxc) @ a, np.eye(3), atol=1e-6)


def test_planted_latent_is_recovered():
    d = make_two_view(700, q=1, seed=5, noise=0.2)
    tr, te = slice(0, 500), slice(500, 700)
    m = KCCA(reg=0.5).fit(d.kx(d.X[tr], d.X[tr]), d.ky(d.Y[tr], d.Y[tr]))
    u = m.transform_x(d.kx(d.X[te], d.X[tr]), n=1)[:, 0]
    v = m.transform_y(d.ky(d.Y[te], d.Y[tr]), n=1)[:, 0]
    z = d.Z[te, 0]
    assert m.correlations_[0] > 0.9
    assert abs(np.corrcoef(u, v)[0, 1]) > 0.8            # held-out canonical correlation
    # the first canonical variate is a (monotone) function of the planted latent
    from scipy.stats import spearmanr

    assert abs(spearmanr(u, z)[0]) > 0.8
    assert abs(spearmanr(v, z)[0]) > 0.8
    assert m.score(d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr]), n=1) > 0.8


def test_exact_and_lowrank_agree_on_heldout_projections():
    d = make_two_view(450, seed=7)
    tr, te = slice(0, 300), slice(300, 450)
    Kx, Ky = d.kx(d.X[tr], d.X[tr]), d.ky(d.Y[tr], d.Y[tr])
    Kx_te, Ky_te = d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr])
    ex = KCCA(reg=0.5).fit(Kx, Ky)
    lr = KCCA(reg=0.5, solver="lowrank", eta=1e-12).fit(Kx, Ky)
    k = 8
    np.testing.assert_allclose(lr.correlations_[:k], ex.correlations_[:k], atol=1e-6)
    for Pe, Pl in ((ex.transform_x(Kx_te, k), lr.transform_x(Kx_te, k)),
                   (ex.transform_y(Ky_te, k), lr.transform_y(Ky_te, k))):
        sign = np.sign((Pe * Pl).sum(0))
        np.testing.assert_allclose(Pe * sign, Pl, atol=1e-5 * np.abs(Pe).max())
    np.testing.assert_allclose(ex.affinity(Kx_te, Ky_te, k), lr.affinity(Kx_te, Ky_te, k), atol=1e-4)
    # a truncated low-rank fit (rank 60) is an approximation that still tracks the leading correlation
    lr60 = KCCA(reg=0.5, solver="lowrank", max_rank=60).fit(Kx, Ky)
    assert lr60.rank_x_ <= 60 and len(lr60.pivots_x_) == 60
    assert abs(lr60.correlations_[0] - ex.correlations_[0]) < 0.05


def test_lowrank_pulls_columns_on_demand_and_projects_through_pivots():
    # integer data and a polynomial kernel: kernel values are exact, so the data path and the Gram
    # path make bit-identical pivot choices
    rng = np.random.default_rng(11)
    X = rng.integers(-3, 4, (400, 5)).astype(float)
    Y = np.c_[X[:, :2] ** 2, rng.integers(-3, 4, (400, 3))]
    poly = lambda A, B: (1.0 + np.asarray(A) @ np.asarray(B).T) ** 2  # noqa: E731
    calls = {"cols": 0, "max_cols": 0}

    def kx(A, B):
        calls["cols"] += 1
        calls["max_cols"] = max(calls["max_cols"], len(B))
        return poly(A, B)

    m = KCCA(reg=0.1, solver="lowrank", max_rank=12, kernel_x=kx, kernel_y=poly)
    m.fit(KernelSource(X[:300], kx, diag=lambda A: ((1.0 + (A * A).sum(1)) ** 2)),
          KernelSource(Y[:300], poly))
    assert calls["max_cols"] == 1 and calls["cols"] == 12      # one column per pivot, never N × N
    P_data = m.transform_x(X[300:])
    # the same fit from precomputed Grams: identical pivots, and full rows / pivot-only rows agree
    m2 = KCCA(reg=0.1, solver="lowrank", max_rank=12).fit(poly(X[:300], X[:300]), poly(Y[:300], Y[:300]))
    np.testing.assert_array_equal(m2.pivots_x_, m.pivots_x_)
    np.testing.assert_array_equal(m2.pivots_y_, m.pivots_y_)
    K_full = poly(X[300:], X[:300])
    np.testing.assert_allclose(m2.transform_x(K_full), m2.transform_x(K_full[:, m2.pivots_x_]), atol=1e-10)
    np.testing.assert_allclose(P_data, m2.transform_x(K_full), atol=1e-8)


@pytest.mark.parametrize("solver", ["exact", "lowrank"])
def test_out_of_sample_projection_of_training_point_equals_training_projection(solver):
    d = make_two_view(200, seed=3)
    Kx, Ky = d.kx(d.X, d.X), d.ky(d.Y, d.Y)
    m = KCCA(reg=0.1, solver=solver, eta=1e-10).fit(Kx, Ky)
    np.testing.assert_allclose(m.transform_x(Kx[:20]), m.train_projections_x_[:20], atol=1e-8)
    np.testing.assert_allclose(m.transform_y(Ky[50:70]), m.train_projections_y_[50:70], atol=1e-8)
    if solver == "exact":
        Kxc = center_gram(Kx)[0]
        np.testing.assert_allclose(Kxc @ m.alpha_, m.train_projections_x_, atol=1e-8)


def test_centring_uses_training_statistics():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 4)) + 5.0          # far from the origin: centring matters
    Xn = rng.standard_normal((7, 4)) + 5.0
    K, Kn = X @ X.T, Xn @ X.T
    Kc, col, grand = center_gram(K)
    mu = X.mean(0)
    np.testing.assert_allclose(Kc, (X - mu) @ (X - mu).T, atol=1e-9)
    np.testing.assert_allclose(center_rows(Kn, col, grand), (Xn - mu) @ (X - mu).T, atol=1e-9)
    # the estimator: projections of new points equal the linear-CCA directions applied to x − μ_train
    Y = X @ rng.standard_normal((4, 3)) + 0.3 * rng.standard_normal((60, 3))
    m = KCCA(reg=1e-6).fit(K, Y @ Y.T)
    P_new = m.transform_x(Kn)
    # same as projecting the training-centred features with the primal weights w = (X−μ)^T α
    w = (X - mu).T @ m.alpha_
    np.testing.assert_allclose(P_new, (Xn - mu) @ w, atol=1e-7)
    # without centring a constant offset in the kernel changes the answer; with centring it does not
    m_off = KCCA(reg=1e-6).fit(K + 3.0, Y @ Y.T)
    np.testing.assert_allclose(np.abs(m_off.transform_x(Kn + 3.0)), np.abs(P_new), atol=1e-6)


@pytest.mark.parametrize("solver", ["exact", "lowrank"])
def test_uncentred_kcca_solves_eq3_on_the_raw_kernels(solver):
    """center=False: the same problem on K itself (no H K H); new rows are used as given, so a training
    item passed in again lands on its training projection, and a constant kernel offset now matters."""
    d = make_two_view(150, seed=4)
    Kx, Ky = d.kx(d.X, d.X), d.ky(d.Y, d.Y)
    kappa = 0.5
    m = KCCA(reg=kappa, center=False, solver=solver, eta=1e-12).fit(Kx, Ky)
    np.testing.assert_allclose(m.transform_x(Kx[:15]), m.train_projections_x_[:15], atol=1e-7)
    np.testing.assert_allclose(m.transform_y(Ky[40:55]), m.train_projections_y_[40:55], atol=1e-7)
    if solver == "exact":
        a, b, rho = m.alpha_[:, :4], m.beta_[:, :4], m.correlations_[:4]
        lhs = Kx @ Ky @ b
        np.testing.assert_allclose(lhs, (Kx @ Kx + kappa * Kx) @ a * rho, atol=1e-7 * np.abs(lhs).max())
        np.testing.assert_allclose(a.T @ (Kx @ Kx + kappa * Kx) @ a, np.eye(4), atol=1e-8)
        centred = KCCA(reg=kappa).fit(Kx, Ky)
        assert not np.allclose(m.correlations_[:4], centred.correlations_[:4], atol=1e-4)
        shifted = KCCA(reg=kappa, center=False).fit(Kx + 3.0, Ky)
        assert not np.allclose(shifted.correlations_[:4], m.correlations_[:4], atol=1e-4)


# ---------------------------------------------------------------------------- degenerate input
def test_rank_deficient_kernels_and_n_above_rank_are_finite():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((80, 3))            # linear kernel of rank 3
    Y = X @ rng.standard_normal((3, 2)) + 0.1 * rng.standard_normal((80, 2))
    for kappa in (0.0, 0.1):
        m = KCCA(reg=kappa).fit(X @ X.T, Y @ Y.T)
        assert m.rank_x_ == 3 and m.rank_y_ == 2 and m.n_components_ == 2
        S = m.affinity(X[:10] @ X.T, Y[:12] @ Y.T, n=500)   # n > rank → capped
        assert S.shape == (10, 12) and S.dtype == np.float32 and np.all(np.isfinite(S))
        assert np.all(np.isfinite(m.alpha_))
    # duplicated training items (singular kernel) with κ = 0
    Xd = np.vstack([X, X[:20]])
    Yd = np.vstack([Y, Y[:20]])
    Kx = rbf_kernel(Xd, Xd, 0.5)
    m = KCCA(reg=0.0).fit(Kx, rbf_kernel(Yd, Yd, 0.5))
    assert np.all(np.isfinite(m.correlations_)) and np.all(m.correlations_ <= 1.0)
    assert np.all(np.isfinite(m.transform_x(Kx[:5])))
    # κ = 0 on full-rank kernels: the (overfitting) perfect correlation, still finite
    d = make_two_view(60, seed=0)
    m0 = KCCA(reg=0.0).fit(d.kx(d.X, d.X), d.ky(d.Y, d.Y))
    assert np.all(np.isfinite(m0.correlations_)) and m0.correlations_[0] > 0.999
    # κ = 0 with no eigenvalue floor at all: finite, but the noise directions are whitened -> a warning
    with pytest.warns(RuntimeWarning, match="jitter = 0 keeps the kernels' rounding-noise"):
        m00 = KCCA(reg=0.0, jitter=0.0).fit(X @ X.T, Y @ Y.T)
    assert np.all(np.isfinite(m00.correlations_))


def test_clear_errors():
    K = np.eye(5)
    with pytest.raises(ValueError, match="square"):
        KCCA().fit(np.ones((5, 4)), K)
    with pytest.raises(ValueError, match="NaN"):
        KCCA().fit(np.full((5, 5), np.nan), K)
    with pytest.raises(ValueError, match="same training pairs"):
        KCCA().fit(np.eye(5), np.eye(6))
    with pytest.raises(ValueError, match="reg"):
        KCCA(reg=-1).fit(K, K)
    with pytest.raises(ValueError, match="solver"):
        KCCA(solver="magic").fit(K, K)
    A = np.random.default_rng(0).random((5, 5)) + 5 * np.eye(5)          # a non-symmetric "Gram"
    with pytest.raises(ValueError, match=r"Kx is not symmetric: K\[\d, \d\]"):
        KCCA().fit(A, K)
    with pytest.raises(ValueError, match="zero after centring"):
        KCCA().fit(np.ones((5, 5)), K)
    # an indefinite kernel is projected onto the PSD cone, with a warning
    with pytest.warns(RuntimeWarning, match="positive semidefinite"):
        m_ind = KCCA().fit(np.diag([1.0, -1.0, 2.0, 1.0]), np.eye(4))
    assert np.all(np.isfinite(m_ind.correlations_))
    # positive diagonal, negative eigenvalues: the exact solver drops them, the low-rank solver's incomplete
    # Cholesky meets negative residuals and zeroes them; both warn, neither for the PSD kernel
    z = np.linspace(0.0, 1.0, 40)[:, None]
    K_psd = rbf_kernel(z, z, 2.0)
    for solver in ("exact", "lowrank"):
        with pytest.warns(RuntimeWarning, match="not positive semidefinite"):
            m_ind = KCCA(solver=solver).fit(rbf_kernel(z, z, 5.0), K_psd - 0.3 * np.eye(40))
        assert np.all(np.isfinite(m_ind.correlations_))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            KCCA(solver=solver).fit(rbf_kernel(z, z, 5.0), K_psd)
    with pytest.raises(RuntimeError, match="not fitted"):
        KCCA().transform_x(K)
    x = np.arange(6.0)[:, None]
    m = KCCA(reg=0.1).fit(rbf_kernel(x, x, 1.0), rbf_kernel(x, x, 0.3))
    with pytest.raises(ValueError, match=r"shape \(m, 6\)"):
        m.transform_x(np.ones((2, 5)))


# --------------------------------------------------------------------------------- sweeps
def test_one_decomposition_serves_every_n_and_kappa():
    d = make_two_view(260, seed=4)
    tr, te = slice(0, 200), slice(200, 260)
    Kx, Ky = d.kx(d.X[tr], d.X[tr]), d.ky(d.Y[tr], d.Y[tr])
    Kx_te, Ky_te = d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr])
    m = KCCA(reg=0.1).fit(Kx, Ky)
    ns = [1, 3, 10, 50, 199]
    for n, S in m.affinities(Kx_te, Ky_te, ns):
        np.testing.assert_allclose(S, m.affinity(Kx_te, Ky_te, n), atol=2e-6)
    m5 = m.with_reg(5.0)
    assert m5._vx is m._vx                                  # decompositions shared
    fresh = KCCA(reg=5.0).fit(Kx, Ky)
    np.testing.assert_allclose(m5.correlations_, fresh.correlations_, atol=1e-10)
    np.testing.assert_allclose(m5.affinity(Kx_te, Ky_te, 20), fresh.affinity(Kx_te, Ky_te, 20), atol=1e-5)
    assert m5.correlations_[0] < m.correlations_[0]          # more regularisation, lower ρ


def test_cosine_sweep_matches_direct_cosine():
    rng = np.random.default_rng(0)
    P, Q = rng.standard_normal((13, 40)), rng.standard_normal((9, 40))
    P[3] = 0.0                                                # zero vector → affinity 0, not NaN
    for n, S in cosine_sweep(P, Q, [2, 7, 40]):
        ref = cosine_affinity(P[:, :n], Q[:, :n])
        np.testing.assert_allclose(S, ref, atol=1e-6)
        assert np.all(S[3] == 0)


def test_cosine_affinity_blocks_on_the_tile_grid_hold_the_whole_matrix_bit_for_bit(monkeypatch):
    import kcca.solver as solver

    rng = np.random.default_rng(3)
    P, Q = rng.standard_normal((50, 30)), rng.standard_normal((37, 30))
    one_gemm = (P / np.linalg.norm(P, axis=1, keepdims=True)) @ (Q / np.linalg.norm(Q, axis=1, keepdims=True)).T
    np.testing.assert_allclose(cosine_affinity(P, Q), one_gemm, atol=1e-6)   # default tile: one GEMM here
    monkeypatch.setattr(solver, "AFFINITY_TILE", 16)
    full = cosine_affinity(P, Q)
    assert [(s.start, s.stop) for s in solver.affinity_slices(50)] == [(0, 16), (16, 32), (32, 48), (48, 50)]
    for part in solver.affinity_slices(50):
        np.testing.assert_array_equal(cosine_affinity(P, Q, rows=part), full[part])
    for part in solver.affinity_slices(37):
        np.testing.assert_array_equal(cosine_affinity(P, Q, cols=part), full[:, part])
    np.testing.assert_array_equal(cosine_affinity(P, Q, rows=slice(16, 50), cols=slice(32, 37)),
                                  full[16:, 32:])
    for bad in (slice(8, 24), slice(0, 20), slice(0, 48, 2)):
        with pytest.raises(ValueError, match="tile grid"):
            cosine_affinity(P, Q, rows=bad)


def test_log_spaced_ns():
    ns = log_spaced_ns(6000, 46, 10)
    assert len(ns) == 46 and ns[0] == 10 and ns[-1] == 6000 and ns == sorted(ns)
    capped = log_spaced_ns(6000, 46, 10, cap=300)
    assert capped[-1] == 300 and all(n <= 300 for n in capped)


def test_incomplete_cholesky_exact_at_full_rank_and_tolerance():
    d = make_two_view(150, seed=9)
    K = d.kx(d.X, d.X)
    G, piv = incomplete_cholesky(KernelSource.from_gram(K), eta=0.0)
    np.testing.assert_allclose(G @ G.T, K, atol=1e-8)
    assert np.allclose(np.triu(G[piv], 1), 0.0)             # pivot block lower triangular
    G2, _ = incomplete_cholesky(KernelSource.from_gram(K), eta=1e-3)
    resid = np.trace(K - G2 @ G2.T)
    assert resid <= 1e-3 * np.trace(K) + 1e-9 and G2.shape[1] < 150


def test_float32_precision_agrees_with_float64():
    d = make_two_view(300, seed=8)
    tr, te = slice(0, 220), slice(220, 300)
    Kx, Ky = d.kx(d.X[tr], d.X[tr]), d.ky(d.Y[tr], d.Y[tr])
    a = KCCA(reg=0.5).fit(Kx, Ky)
    b = KCCA(reg=0.5, dtype="float32").fit(Kx, Ky)
    assert b._vx.U.dtype == np.float32
    np.testing.assert_allclose(b.correlations_[:10], a.correlations_[:10], atol=1e-4)
    Sa = a.affinity(d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr]), 10)
    Sb = b.affinity(d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr]), 10)
    np.testing.assert_allclose(Sa, Sb, atol=1e-3)
    with pytest.raises(ValueError, match="dtype"):
        KCCA(dtype="float16").fit(Kx, Ky)
    # the low-rank solver keeps its spectral factor U in the working precision too (half the memory)
    la = KCCA(reg=0.5, solver="lowrank", max_rank=60).fit(Kx, Ky)
    lb = KCCA(reg=0.5, solver="lowrank", max_rank=60, dtype="float32").fit(Kx, Ky)
    assert la._vx.U.dtype == np.float64 and lb._vx.U.dtype == np.float32 and lb._vy.U.dtype == np.float32
    np.testing.assert_allclose(lb.correlations_[:10], la.correlations_[:10], atol=1e-4)
    np.testing.assert_allclose(lb.affinity(d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr]), 10),
                               la.affinity(d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr]), 10), atol=1e-3)


def test_auto_jitter_is_the_numerical_rank_of_the_working_precision():
    d = make_two_view(400, seed=8, dx=4, dy=3)  # few dimensions: a fast-decaying RBF spectrum
    tr, te = slice(0, 320), slice(320, 400)
    Kx, Ky = d.kx(d.X[tr], d.X[tr]), d.ky(d.Y[tr], d.Y[tr])
    full = KCCA(reg=0.5).fit(Kx, Ky)
    auto = KCCA(reg=0.5, dtype="float32", jitter="auto").fit(Kx, Ky)
    floor = 320 * np.finfo(np.float32).eps
    for v, K in ((auto._vx, Kx), (full._vx, Kx), (auto._vy, Ky)):
        lam = np.linalg.eigvalsh(center_gram(K)[0])[::-1]
        expect = int((lam > (floor if v is not full._vx else 1e-10) * lam[0]).sum())
        assert abs(v.lam.size - expect) <= 2, (v.lam.size, expect)  # float32 vs float64 at the boundary
    assert auto.rank_x_ < full.rank_x_ and auto.n_components_ <= min(auto.rank_x_, auto.rank_y_)
    np.testing.assert_allclose(auto.correlations_[:5], full.correlations_[:5], atol=1e-3)
    Sa = full.affinity(d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr]), 10)
    Sb = auto.affinity(d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr]), 10)
    assert np.isfinite(Sb).all() and np.corrcoef(Sa.ravel(), Sb.ravel())[0, 1] > 0.99
    # float64 "auto" is the default floor (N·eps64 < 1e-10)
    assert KCCA(reg=0.5, jitter="auto").fit(Kx, Ky).rank_x_ == full.rank_x_
    with pytest.raises(ValueError, match="jitter"):
        KCCA(jitter="tiny").fit(Kx, Ky)


def test_exact_solver_on_data_with_kernel_callables():
    d = make_two_view(160, seed=12)
    tr, te = slice(0, 120), slice(120, 160)
    m_data = KCCA(reg=0.5, kernel_x=d.kx, kernel_y=d.ky).fit(d.X[tr], d.Y[tr])
    m_gram = KCCA(reg=0.5).fit(d.kx(d.X[tr], d.X[tr]), d.ky(d.Y[tr], d.Y[tr]))
    np.testing.assert_allclose(m_data.correlations_, m_gram.correlations_, atol=1e-10)
    np.testing.assert_allclose(m_data.affinity(d.X[te], d.Y[te], 10),
                               m_gram.affinity(d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr]), 10), atol=1e-6)


def test_log_spaced_ns_are_geometric():
    # Hodosh Sec. 4.1.3: 46 sizes in [10, 6000]; the log spacing n_i = round(10 · 600^(i/45)) is ours
    ns = log_spaced_ns(6000, 46, 10)
    assert len(ns) == 46
    for i, n in enumerate(ns):
        assert abs(n - 10 * 600 ** (i / 45)) <= 0.5 + 1e-9
    ratios = np.array(ns[1:]) / np.array(ns[:-1])
    # constant ratio 600^(1/45) ≈ 1.153 up to the rounding to integers
    assert np.all(np.abs(ratios - 600 ** (1 / 45)) < 0.08)
    assert np.all(np.abs(ratios[len(ratios) // 2:] - 600 ** (1 / 45)) < 0.01)


def test_incomplete_cholesky_pivots_on_the_largest_residual_diagonal():
    rng = np.random.default_rng(3)
    A = rng.standard_normal((12, 12)) * rng.uniform(0.2, 3.0, 12)[:, None]   # rows of different scales
    K = A @ A.T
    assert np.argmax(np.diag(K)) != 0
    G, piv = incomplete_cholesky(KernelSource.from_gram(K), eta=0.0)
    assert piv[0] == np.argmax(np.diag(K))
    for j, p in enumerate(piv):
        resid = np.diag(K - G[:, :j] @ G[:, :j].T).copy()   # residual diagonal before step j
        resid[piv[:j]] = -np.inf
        assert p == np.argmax(resid), f"step {j}"
    np.testing.assert_allclose(G @ G.T, K, atol=1e-8)


def test_incomplete_cholesky_fetches_each_column_beside_its_projection(monkeypatch):
    """Each pivot's projection on the factor so far runs on a helper thread while the caller's thread
    fetches its kernel column — under a lock the caller holds, as a kernel store's decomposition does —
    and the factor is bit for bit the one of fetching, then projecting, one step after the other."""
    import math
    import threading

    import kcca.lowrank as lowrank

    rng = np.random.default_rng(4)
    A = rng.standard_normal((40, 9))
    K = A @ A.T + 1e-3 * np.eye(40)
    lock, threads, projections = threading.RLock(), [], []
    real_projection = lowrank._projection

    def kernel(rows, cols):
        assert lock.acquire(timeout=5), "the column was fetched off the thread holding the store's lock"
        try:
            threads.append(threading.current_thread().name)
            return K[np.ix_(rows, cols)]
        finally:
            lock.release()

    monkeypatch.setattr(lowrank, "_projection",
                        lambda *a: projections.append(threading.current_thread().name) or real_projection(*a))
    with lock:
        G, piv = incomplete_cholesky(KernelSource(np.arange(40), kernel, diag=lambda _: np.diag(K).copy()),
                                     eta=1e-9, max_rank=15)
    assert set(threads) == {threading.current_thread().name}
    assert len(projections) == len(piv) - 1 and all(t.startswith("icd-projection") for t in projections)
    # the plain loop, one step after the other
    d, R, P = np.diag(K).copy(), np.zeros((40, 15), order="F"), []   # the layout of G
    for j in range(len(piv)):
        i = int(np.argmax(d))
        col = K[:, i].copy()
        if j:
            col = col - R[:, :j] @ R[i, :j]
        g = col / math.sqrt(d[i])
        g[P] = 0.0
        g[i] = math.sqrt(d[i])
        R[:, j] = g
        d -= g * g
        d[P] = 0.0
        d[i] = 0.0
        np.maximum(d, 0.0, out=d)
        P.append(i)
    assert list(piv) == P
    np.testing.assert_array_equal(G, R[:, :len(P)])


def test_non_finite_rows_zero_components_and_numpy_reg_are_handled():
    """NaN in new kernel rows or in an affinity is an error (a NaN affinity would count as rank 1 in the
    dev sweep); kernels sharing no direction are refused at fit; a numpy integer κ is a number."""
    from corpora.scoring import affinity_gold_ranks

    d = make_two_view(60, seed=2)
    tr, te = slice(0, 45), slice(45, 60)
    Kx, Ky = d.kx(d.X[tr], d.X[tr]), d.ky(d.Y[tr], d.Y[tr])
    kt = d.kx(d.X[te], d.X[tr])
    kt[3, 7] = np.nan
    for solver in ("exact", "lowrank"):
        m = KCCA(reg=0.1, solver=solver).fit(Kx, Ky)
        with pytest.raises(ValueError, match=r"NaN or infinite values \(rows \[3\]\)"):
            m.transform_x(kt)
    with pytest.raises(ValueError, match="NaN"):
        affinity_gold_ranks(np.full((3, 3), np.nan, np.float32), np.arange(3), np.arange(3))
    Kn = Kx.copy()
    Kn[4, 9] = Kn[9, 4] = np.nan
    with pytest.raises(ValueError, match=r"kernel column \d+ contains NaN"):
        KCCA(solver="lowrank").fit(KernelSource.from_gram(Kn), Ky)
    # centred ranges orthogonal: no canonical correlation at all
    rng = np.random.default_rng(0)
    Q, _ = np.linalg.qr(np.c_[np.ones(10), rng.normal(size=(10, 8))])
    Ka, Kb = Q[:, 1:4] @ Q[:, 1:4].T, Q[:, 4:7] @ Q[:, 4:7].T
    with pytest.raises(ValueError, match="no canonical correlation above min_corr"):
        KCCA().fit(Ka, Kb)
    assert KCCA(reg=np.int64(1)).fit(Kx, Ky).n_components_ > 0


def test_float32_with_a_float64_floor_warns_about_noise_directions():
    """Rank-deficient kernels in float32 with the default jitter keep rounding-noise directions: warned,
    with the fix (jitter='auto', which recovers the float64 rank)."""
    rng = np.random.default_rng(1)
    A, B = rng.normal(size=(30, 5)), rng.normal(size=(30, 4))
    Kx, Ky = A @ A.T, B @ B.T
    ref = KCCA(reg=0.1).fit(Kx, Ky)
    with pytest.warns(RuntimeWarning, match="jitter='auto'"):
        KCCA(reg=0.1, dtype="float32").fit(Kx, Ky)
    auto = KCCA(reg=0.1, dtype="float32", jitter="auto").fit(Kx, Ky)
    assert (auto.rank_x_, auto.rank_y_) == (ref.rank_x_, ref.rank_y_) == (5, 4)
    np.testing.assert_allclose(auto.correlations_, ref.correlations_, atol=1e-4)


def test_lowrank_view_is_the_copying_qr_spectrum_in_one_factor_of_memory():
    """The low-rank view's spectrum (``G_c = QR``, ``R = U_r S W^T``, ``U = Q U_r``, ``λ = s²``) equals the
    copying computation (np.linalg.qr on a centred copy) to rounding, and is built in the factor's own
    memory: the peak allocation of the whole decomposition stays under twice the ``N × r`` float64
    factor (the copying QR held four: ``G``, its centred copy, ``Q`` and ``U``)."""
    import tracemalloc

    from kcca.lowrank import KernelSource, incomplete_cholesky
    from kcca.solver import decompose

    rng = np.random.default_rng(0)
    n, r = 20_000, 120
    X = rng.normal(size=(n, r)) * np.linspace(3.0, 0.1, r)
    src = KernelSource(X, kernel=lambda a, b: a @ b.T, diag=lambda a: np.einsum("ij,ij->i", a, a))
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    view = decompose(src, solver="lowrank", max_rank=r)
    peak = tracemalloc.get_traced_memory()[1] - base
    tracemalloc.stop()
    factor = n * r * 8
    assert peak < 2.0 * factor, (peak / factor)

    G, piv = incomplete_cholesky(src, max_rank=r)
    Gc = G - G.mean(axis=0)
    Q, R = np.linalg.qr(Gc)
    Ur, s, Wt = np.linalg.svd(R)
    np.testing.assert_allclose(view.lam, (s * s)[: view.rank], rtol=1e-9)
    np.testing.assert_array_equal(view.pivots, piv)
    U_old = Q @ Ur[:, : view.rank]
    signs = np.sign(np.einsum("ij,ij->j", view.U, U_old))
    np.testing.assert_allclose(view.U * signs, U_old, atol=1e-9)
    np.testing.assert_allclose(view.U.T @ view.U, np.eye(view.rank), atol=1e-10)
