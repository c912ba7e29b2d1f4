"""The threaded Lloyd loop (kernels.image.lloyd) gives scikit-learn's one-thread KMeans centres bit for bit."""
from __future__ import annotations

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from corpora.teaching import make_teaching_set
from kernels.image.codebook import DEFAULT_N_WORDS, fit_codebook
from kernels.image.descriptors import FEATURES, DescriptorParams, extract_descriptors
from kernels.image.lloyd import CHUNK, chunk_blocks, lloyd_kmeans


def sklearn_centres(X, k, seed, max_iter=100):
    km = KMeans(n_clusters=k, init="k-means++", n_init=1, max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        warnings.simplefilter("ignore")
        km.fit(X)
    return km.cluster_centers_


def threaded_centres(X, k, seed, n_threads, max_iter=100):
    with threadpool_limits(limits=1), ThreadPoolExecutor(n_threads) as pool:
        return lloyd_kmeans(X, k, seed=seed, max_iter=max_iter, executor=pool, n_threads=n_threads)


@pytest.fixture(scope="module")
def teaching_descriptors():
    """Sampled colour, texture and SIFT descriptors of 24 teaching images (as a codebook samples them)."""
    ts = make_teaching_set()
    rng = np.random.default_rng(0)
    out = {f: [] for f in FEATURES}
    for image_id in list(ts.image_ids)[:24]:
        desc = extract_descriptors(ts.load_image(image_id), DescriptorParams(), FEATURES)
        for f in FEATURES:
            x = desc[f][0]
            out[f].append(x[rng.choice(len(x), min(len(x), 400), replace=False)])
    return {f: np.concatenate(v) for f, v in out.items()}


@pytest.mark.parametrize("feature", FEATURES)
def test_teaching_codebooks_equal_one_thread_kmeans_bit_for_bit(teaching_descriptors, feature):
    X = teaching_descriptors[feature]
    k = DEFAULT_N_WORDS[feature]
    want = sklearn_centres(X, k, seed=3)
    for n_threads in (1, 2, 3):
        got = threaded_centres(X, k, seed=3, n_threads=n_threads)
        assert got.dtype == np.float32 and np.array_equal(got, want), (feature, n_threads)


def test_empty_clusters_relocated_as_scikit_learn_does():
    """Few distinct points, many clusters: clusters empty out, are given far samples, or (more clusters
    than distinct points) keep the largest cluster's centre; float64 data stay float64, integers become
    float64."""
    rng = np.random.default_rng(1)
    few = rng.normal(size=(12, 5)).astype(np.float32)
    X = few[rng.integers(0, len(few), 900)] + rng.normal(scale=1e-3, size=(900, 5)).astype(np.float32)
    for data, k in ((X, 40), (few[rng.integers(0, 6, 600)], 10), (X.astype(np.float64), 25),
                    (np.rint(X * 10).astype(np.int32), 20)):   # integers: float64, as KMeans converts them
        want = sklearn_centres(data, k, seed=0)
        for n_threads in (1, 3):
            got = threaded_centres(data, k, seed=0, n_threads=n_threads)
            assert got.dtype == want.dtype == (np.float32 if data.dtype == np.float32 else np.float64)
            assert np.array_equal(got, want), (k, n_threads)


def test_a_max_iter_stop_and_blocks_of_whole_chunks():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(3 * CHUNK + 17, 8)).astype(np.float32)
    assert np.array_equal(threaded_centres(X, 16, seed=5, n_threads=2, max_iter=3),
                          sklearn_centres(X, 16, seed=5, max_iter=3))
    for n, blocks in ((3 * CHUNK + 17, 8), (CHUNK, 4), (10, 3), (5 * CHUNK, 2)):
        got = chunk_blocks(n, blocks)
        assert got[0][0] == 0 and got[-1][1] == n
        assert all(a % CHUNK == 0 and b == c for (a, b), (c, _) in zip(got, got[1:]))


def test_fit_codebook_threads_and_shared_pool_give_the_one_thread_codebook(teaching_descriptors):
    """fit_codebook runs lloyd_kmeans at every thread count, one thread included (no executor: all in the
    calling thread), and gives scikit-learn's one-thread KMeans centres."""
    X = teaching_descriptors["texture"]
    one = fit_codebook(X, 64, seed=1)
    assert np.array_equal(one, np.ascontiguousarray(sklearn_centres(X, 64, seed=1), dtype=np.float32))
    with threadpool_limits(limits=1):
        assert np.array_equal(lloyd_kmeans(X, 64, seed=1, max_iter=100, executor=None, n_threads=1), one)
    assert np.array_equal(fit_codebook(X, 64, seed=1, n_threads=3), one)
    with ThreadPoolExecutor(2) as pool:
        assert np.array_equal(fit_codebook(X, 64, seed=1, n_threads=2, executor=pool), one)


def sklearn_step(X, centres):
    """One iteration of scikit-learn's compiled Lloyd step on one thread: labels, new centres, shifts."""
    from sklearn.cluster._k_means_lloyd import lloyd_iter_chunked_dense

    k = len(centres)
    labels, new = np.full(len(X), -1, np.int32), np.zeros_like(centres)
    shift, counts = np.zeros(k, X.dtype), np.zeros(k, X.dtype)
    lloyd_iter_chunked_dense(X, np.ones(len(X), X.dtype), centres, new, counts, labels, shift, 1)
    return labels, new, shift


@pytest.mark.parametrize("case", ["empty_before_the_largest", "relocated", "plain"])
def test_update_step_equals_scikit_learns_compiled_step(case):
    """The update step (sums in sample order, relocation, 1/n_j, the largest cluster's centre for a
    cluster left empty, the shifts) against scikit-learn's own compiled step on the same labels."""
    from kernels.image.lloyd import update

    rng = np.random.default_rng(4)
    pts = rng.normal(size=(3, 6)).astype(np.float32)
    far = np.full((2, 6), 50.0, np.float32)
    if case == "empty_before_the_largest":   # every sample on a centre: nothing to relocate (distances 0)
        X = pts[np.r_[np.zeros(5, int), np.ones(7, int), np.full(40, 2)]]
        centres = np.concatenate([far, pts])   # clusters 0 and 1 empty, the largest (4) after them
    elif case == "relocated":                  # samples off their centres: far ones move to the empties
        X = (pts[rng.integers(0, 3, 700)] + rng.normal(scale=0.1, size=(700, 6))).astype(np.float32)
        centres = np.concatenate([pts[:1], far, pts[1:]])
    else:
        X = rng.normal(size=(1000, 6)).astype(np.float32)
        centres = X[:9].copy()
    labels, want, want_shift = sklearn_step(X, centres)
    got, shift = update(X, np.ones(len(X), np.float32), centres, labels)
    assert np.array_equal(got, want) and np.array_equal(shift, want_shift)


def test_without_the_compiled_step_fit_codebook_runs_one_thread(teaching_descriptors, monkeypatch):
    import kernels.image.codebook as codebook

    X = teaching_descriptors["color"]
    one = fit_codebook(X, 32, seed=2)
    monkeypatch.setattr(codebook, "threaded_lloyd", lambda: None)
    assert np.array_equal(fit_codebook(X, 32, seed=2, n_threads=3), one)
