"""Image kernels vs brute-force Hodosh et al. (2013) Eqs. 5–8, and their algebraic properties."""
from __future__ import annotations

import numpy as np
import pytest

import kernels.image.native as native
from kernels.image.gram import (
    combine_kernels,
    intersection_gram,
    intersection_naive,
    pyramid_match_gram,
)
import kernels.image.histograms as histograms_module
from kernels.image.histograms import (
    cell_ids,
    global_histogram,
    global_histograms,
    level_slices,
    n_cells,
    pyramid_column_weights,
    pyramid_histogram,
    pyramid_histograms,
    pyramid_level_weights,
)

BACKENDS = ["numpy"] + (["c"] if native.load() is not None else [])


def random_hists(rng, n, V, density=0.3):
    X = rng.random((n, V)) * (rng.random((n, V)) < density)
    X[X.sum(1) == 0, 0] = 1.0
    return (X / X.sum(1, keepdims=True)).astype(np.float32)


def brute_intersection(a, b):
    """Eq. 5 with explicit loops: K = Σ_v min(H_i(v), H_j(v))."""
    return sum(min(float(x), float(y)) for x, y in zip(a, b))


def brute_pyramid(words_a, words_b, shape, V, L=2):
    """Eqs. 7–8 from the words on the grid, Lazebnik style: cell counts / image total,
    I^l = Σ_cells Σ_v min, K = I^L + Σ_{l<L} (I^l − I^{l+1}) / 2^{L−l}."""
    n_y, n_x = shape
    N = n_y * n_x

    def cell_counts(words, l):
        k = 2 ** l
        h = np.zeros((k, k, V))
        for idx, w in enumerate(words):
            gy, gx = divmod(idx, n_x)
            h[gy * k // n_y, gx * k // n_x, w] += 1
        return h / N

    I = []
    for l in range(L + 1):
        ha, hb = cell_counts(words_a, l), cell_counts(words_b, l)
        I.append(sum(brute_intersection(ha[i, j], hb[i, j]) for i in range(2 ** l) for j in range(2 ** l)))
    return I[L] + sum((I[l] - I[l + 1]) / 2 ** (L - l) for l in range(L))


@pytest.mark.parametrize("backend", BACKENDS)
def test_intersection_matches_brute_force(backend):
    rng = np.random.default_rng(0)
    X, Y = random_hists(rng, 13, 40), random_hists(rng, 9, 40)
    ref = np.array([[brute_intersection(a, b) for b in Y] for a in X])
    K = intersection_gram(X, Y, backend=backend, row_block=4, col_chunk=5)
    assert K.dtype == np.float32 and K.shape == (13, 9)
    np.testing.assert_allclose(K, ref, atol=2e-6)
    np.testing.assert_allclose(intersection_naive(X, Y), ref, atol=2e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_symmetric_gram_diag_one_and_psd(backend):
    rng = np.random.default_rng(1)
    X = random_hists(rng, 70, 64, density=0.2)
    K = intersection_gram(X, backend=backend, row_block=16, col_chunk=24)
    assert np.array_equal(K, K.T)
    np.testing.assert_allclose(np.diag(K), 1.0, atol=1e-5)
    np.testing.assert_allclose(K, intersection_naive(X), atol=2e-6)
    assert np.linalg.eigvalsh(K.astype(np.float64)).min() > -1e-4
    assert K.min() >= 0 and K.max() <= 1 + 1e-5


def test_backends_agree_on_larger_sparse_input():
    if len(BACKENDS) < 2:
        pytest.skip("compiled kernel unavailable")
    rng = np.random.default_rng(2)
    X = random_hists(rng, 150, 300, density=0.1)
    Y = random_hists(rng, 90, 300, density=0.1)
    a = intersection_gram(X, Y, backend="c", col_chunk=50)
    b = intersection_gram(X, Y, backend="numpy", col_chunk=50)
    np.testing.assert_allclose(a, b, atol=1e-6)
    np.testing.assert_allclose(a, intersection_naive(X, Y), atol=1e-6)


def test_intersection_rejects_bad_input():
    with pytest.raises(ValueError, match="negative"):
        intersection_gram(-np.ones((2, 3)))
    with pytest.raises(ValueError, match="bins"):
        intersection_gram(np.ones((2, 3)), np.ones((2, 4)))
    with pytest.raises(ValueError, match="backend"):
        intersection_gram(np.ones((2, 3)), backend="gpu")


def test_level_weights_expand_eq8():
    # K = I^2 + (I^1 − I^2)/2 + (I^0 − I^1)/4 = I^0/4 + I^1/4 + I^2/2
    np.testing.assert_allclose(pyramid_level_weights(3), [0.25, 0.25, 0.5])
    # general L: compare coefficients with the telescoping sum of Eq. 8
    for levels in (1, 2, 4):
        L = levels - 1
        coef = np.zeros(levels)
        coef[L] += 1
        for l in range(L):
            coef[l] += 1 / 2 ** (L - l)
            coef[l + 1] -= 1 / 2 ** (L - l)
        np.testing.assert_allclose(pyramid_level_weights(levels), coef)
    assert n_cells(3) == 21
    sl = level_slices(5, 3)
    assert [s.stop - s.start for s in sl] == [5, 20, 80]
    alpha = pyramid_column_weights(5, 3)
    np.testing.assert_allclose(alpha[sl[0]], 0.25)
    np.testing.assert_allclose(alpha[sl[1]], 0.25 / 4)
    np.testing.assert_allclose(alpha[sl[2]], 0.5 / 16)


def test_cell_layout():
    ids = cell_ids((4, 8), 3)
    assert ids.shape == (3, 32)
    assert set(ids[0]) == {0} and set(ids[1]) == {1, 2, 3, 4} and set(ids[2]) == set(range(5, 21))
    # row-major: point (row 0, col 7) is in the top-right cell at each level
    assert ids[1, 7] == 2 and ids[2, 7] == 5 + 3
    # every cell of a level has the same number of points
    for l in range(3):
        assert len(set(np.bincount(ids[l])[ids[l].min():])) == 1
    with pytest.raises(ValueError, match="divisible"):
        cell_ids((6, 8), 3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_pyramid_match_equals_eq8_brute_force(backend):
    rng = np.random.default_rng(3)
    shape, V = (8, 12), 6
    words = [rng.integers(0, V, size=96) for _ in range(6)]
    # spatially coherent images too: blocks of one word
    for _ in range(3):
        w = np.repeat(np.repeat(rng.integers(0, V, size=(2, 3)), 4, axis=0), 4, axis=1).ravel()
        words.append(w)
    P = np.stack([pyramid_histogram(w, shape, V) for w in words])
    # cell-normalised: every cell block sums to 1; level-0 block is the global histogram (Eq. 5)
    np.testing.assert_allclose(P.reshape(len(words), 21, V).sum(-1), 1.0, atol=1e-6)
    np.testing.assert_allclose(P[:, :V], np.stack([global_histogram(w, V) for w in words]), atol=1e-7)
    K = pyramid_match_gram(P, n_words=V, backend=backend)
    ref = np.array([[brute_pyramid(a, b, shape, V) for b in words] for a in words])
    np.testing.assert_allclose(K, ref, atol=2e-6)
    np.testing.assert_allclose(np.diag(K), 1.0, atol=1e-6)
    assert np.linalg.eigvalsh(K.astype(np.float64)).min() > -1e-5
    # rectangular form agrees with the symmetric one
    np.testing.assert_allclose(pyramid_match_gram(P[:4], P, n_words=V, backend=backend), K[:4], atol=1e-6)


def test_concatenated_form_equals_levelwise_sum_on_random_histograms():
    """One intersection over α-weighted concatenations == Σ_l w_l I^l with I^l the mean cell
    intersection of cell-normalised histograms, for arbitrary (not grid-derived) histograms."""
    rng = np.random.default_rng(4)
    V, n = 7, 8
    blocks = [random_hists(rng, n * 4 ** l, V, 0.5).reshape(n, 4 ** l * V) for l in range(3)]
    P = np.concatenate(blocks, axis=1)
    w = pyramid_level_weights(3)
    ref = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            for l in range(3):
                a, b = blocks[l][i].reshape(-1, V), blocks[l][j].reshape(-1, V)
                I_l = sum(brute_intersection(a[c], b[c]) for c in range(4 ** l)) / 4 ** l
                ref[i, j] += w[l] * I_l
    np.testing.assert_allclose(pyramid_match_gram(P, n_words=V), ref, atol=2e-6)


def test_combine_eq6():
    rng = np.random.default_rng(5)
    Ks = {f: rng.random((5, 4)).astype(np.float32) for f in ("color", "texture", "sift")}
    for p in (1, 2, 3):
        ref = ((Ks["color"] + Ks["texture"] + Ks["sift"]) / 3) ** p
        np.testing.assert_allclose(combine_kernels(Ks, p), ref, rtol=1e-5)
    np.testing.assert_allclose(combine_kernels([Ks["color"]], 2), Ks["color"] ** 2, rtol=1e-6)
    # inputs untouched
    assert not np.shares_memory(combine_kernels(Ks, 2), Ks["color"])
    # out may alias any input, not only the first
    for name in ("color", "texture", "sift"):
        for p in (1, 2, 3):
            ref = ((Ks["color"] + Ks["texture"] + Ks["sift"]) / 3) ** p
            mats = {k: v.copy() for k, v in Ks.items()}
            got = combine_kernels(mats, p, out=mats[name])
            assert got is mats[name]
            np.testing.assert_allclose(got, ref, rtol=1e-5)
    with pytest.raises(ValueError, match="power"):
        combine_kernels(Ks, 0)
    with pytest.raises(ValueError, match="shapes"):
        combine_kernels([np.ones((2, 2)), np.ones((2, 3))])
    # squaring a PSD intersection kernel keeps it PSD (Schur product)
    X = random_hists(rng, 30, 20)
    K = combine_kernels([intersection_gram(X), intersection_gram(X[:, ::-1].copy())], 2)
    assert np.linalg.eigvalsh(K.astype(np.float64)).min() > -1e-5


def loop_pyramid_histogram(words, shape, V, levels=3):
    """One image's cell-normalised pyramid histogram counted cell by cell (reference for the batched
    counting): cell counts in float64 divided by the cell's n / 4^l points, then float32."""
    n_y, n_x = shape
    grid = np.asarray(words).reshape(shape)
    blocks = []
    for l in range(levels):
        k = 2 ** l
        for cy in range(k):
            for cx in range(k):
                cell = grid[cy * n_y // k:(cy + 1) * n_y // k, cx * n_x // k:(cx + 1) * n_x // k]
                blocks.append(np.bincount(cell.ravel(), minlength=V).astype(np.float64) / (n_y * n_x / 4 ** l))
    return np.concatenate(blocks).astype(np.float32)


def test_batched_histograms_equal_the_per_image_ones_bit_for_bit(monkeypatch):
    """pyramid_histograms / global_histograms count many images in one bincount, in blocks: every row is
    the one-image histogram exactly (the Grams built on them then do not change), across block edges."""
    monkeypatch.setattr(histograms_module, "HISTOGRAM_BLOCK", 4)
    rng = np.random.default_rng(11)
    for shape, V in (((8, 12), 7), ((12, 8), 5)):
        W = rng.integers(0, V, size=(10, shape[0] * shape[1]))
        W[3] = 0                                       # an image of one word: a count equal to the cell size
        P = pyramid_histograms(W, shape, V)
        assert P.dtype == np.float32 and P.shape == (10, 21 * V)
        ref = np.stack([loop_pyramid_histogram(w, shape, V) for w in W])
        np.testing.assert_array_equal(P, ref)
        np.testing.assert_array_equal(P, np.stack([pyramid_histogram(w, shape, V) for w in W]))
        np.testing.assert_array_equal(global_histograms(W, shape, V), P[:, :V])
        np.testing.assert_array_equal(global_histograms(W, shape, V), np.stack([global_histogram(w, V) for w in W]))
    with pytest.raises(ValueError, match="out of range"):
        pyramid_histograms(np.full((2, 96), 7), (8, 12), 7)
    with pytest.raises(ValueError, match="for a grid of shape"):
        global_histograms(np.zeros((2, 95), int), (8, 12), 7)


def test_non_finite_histograms_and_an_empty_grid_are_refused():
    from kernels.image.gram import intersection_gram
    from kernels.image.histograms import pyramid_histogram

    for bad in ([[np.nan, 1.0]], [[np.inf, 1.0]]):
        with pytest.raises(ValueError, match="NaN or infinite"):
            intersection_gram(np.array(bad), np.array([[1.0, 1.0]]))
    with pytest.raises(ValueError, match="empty grid"):
        pyramid_histogram(np.array([], int), (0, 0), 3)


def test_default_threads_reads_the_environment_and_names_a_bad_value(monkeypatch):
    """One thread-count rule for the image features / Grams and the compiled soft-TRI kernel."""
    import os

    from kernels.threads import default_threads

    monkeypatch.delenv("ITR_NUM_THREADS", raising=False)
    assert default_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("ITR_NUM_THREADS", " 3 ")
    assert default_threads() == 3
    monkeypatch.setenv("ITR_NUM_THREADS", "0")
    assert default_threads() == 1
    monkeypatch.setenv("ITR_NUM_THREADS", "")
    assert default_threads() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("ITR_NUM_THREADS", "all")
    with pytest.raises(ValueError, match=r"ITR_NUM_THREADS='all': expected a whole number"):
        default_threads()
    # the text kernel's compiled kernel follows the same variable unless given a count
    from kernels.text.kernel import TextKernel

    monkeypatch.setenv("ITR_NUM_THREADS", "2")
    assert TextKernel.from_name("TRI5")._native_threads() == 2
    assert TextKernel.from_name("TRI5", native_threads=5)._native_threads() == 5


@pytest.mark.parametrize("backend", ["auto", "numpy"])
def test_intersection_columns_equal_the_gram_bit_for_bit(backend):
    """The low-rank solver's pivot columns (many rows, transposed once, against a few histograms) equal
    the Gram's entries exactly — the same non-zero terms in the same bin order — for Eq. 5 and the
    weighted pyramid (Eqs. 7–8), whichever rows are asked together and on however many threads."""
    from kernels.image.gram import intersection_columns, intersection_gram, pyramid_match_gram, transposed_rows
    from kernels.image.histograms import pyramid_column_weights

    rng = np.random.default_rng(3)
    V = 16
    P = ((rng.random((300, 21 * V)) < 0.3) * rng.random((300, 21 * V))).astype(np.float32)
    pivots = P[[7, 150, 299]]
    alpha = pyramid_column_weights(V, 3)
    for X, Y, w, ref in ((P[:, :V], pivots[:, :V], None, intersection_gram(P[:, :V], pivots[:, :V].copy(),
                                                                           backend=backend, n_threads=1)),
                         (P, pivots, alpha, pyramid_match_gram(P, pivots.copy(), V, 3, backend=backend,
                                                              n_threads=1))):
        XT = transposed_rows(X, w)
        whole = intersection_columns(XT, Y, w, backend=backend)
        assert np.array_equal(whole, ref)
        parts = np.vstack([intersection_columns(XT, Y, w, start=a, stop=b, backend=backend)
                           for a, b in ((0, 101), (101, 102), (102, 300))])
        assert np.array_equal(parts, ref)
        assert np.array_equal(intersection_columns(XT, Y, w, backend=backend, n_threads=3, chunk=64), ref)
        # fewer row chunks than threads: the pivots are split into groups (also a group of one pivot)
        for threads in (2, 3, 5):
            assert np.array_equal(intersection_columns(XT, Y, w, backend=backend, n_threads=threads), ref)
            assert np.array_equal(intersection_columns(XT, Y, w, start=101, stop=300, backend=backend,
                                                       n_threads=threads), ref[101:])
        assert np.array_equal(intersection_columns(XT, Y[1], w, backend=backend)[:, 0], ref[:, 1])
        # stored by bin, sparse: about 0.3 x 2 of the dense bytes at 30 % of the bins used
        assert XT.shape == (X.shape[1], X.shape[0]) and XT.nbytes < 0.7 * X.nbytes
        gram = intersection_gram(X if w is None else X * w, backend=backend, n_threads=1)
        assert np.array_equal(XT.self_intersections(), np.diagonal(gram))
    with pytest.raises(ValueError, match="rows 5:400"):
        intersection_columns(transposed_rows(P), pivots, start=5, stop=400)
    with pytest.raises(ValueError, match="negative"):
        intersection_columns(transposed_rows(P), -pivots)
