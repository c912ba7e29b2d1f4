"""kernels.image.kmeanspp: scikit-learn's k-means++ seeding bit for bit, its distance chunks made once and
spread over threads."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from sklearn.cluster import kmeans_plusplus
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils.extmath import row_norms
from threadpoolctl import threadpool_limits

from kernels.image.kmeanspp import UpcastChunks, kmeans_plusplus_threaded, upcast_batch


def sklearn_seeds(X, k, seed):
    with threadpool_limits(limits=1):
        return kmeans_plusplus(X, k, sample_weight=np.ones(len(X), X.dtype), x_squared_norms=row_norms(X, squared=True),
                               random_state=seed)[0]


def threaded_seeds(X, k, seed, n_threads):
    with threadpool_limits(limits=1), ThreadPoolExecutor(n_threads) as pool:
        return kmeans_plusplus_threaded(X, k, seed=seed, executor=pool if n_threads > 1 else None,
                                        n_threads=n_threads)


def data_sets():
    rng = np.random.default_rng(5)
    few = rng.integers(0, 4, size=(3000, 3)).astype(np.float32)   # four distinct values per axis: ties
    return {
        "sift-like": rng.random((6000, 128), dtype=np.float32),         # several chunks per step
        "texture-like": rng.normal(size=(20000, 8)).astype(np.float32),
        "duplicates": few - few.mean(axis=0),
    }


@pytest.mark.parametrize("name", ["sift-like", "texture-like", "duplicates"])
@pytest.mark.parametrize("n_threads", [1, 3])
def test_seeds_are_scikit_learns_bit_for_bit(name, n_threads):
    X = data_sets()[name]
    for k, seed in [(64, 0), (5, 11)]:
        assert np.array_equal(threaded_seeds(X, k, seed, n_threads), sklearn_seeds(X, k, seed)), (name, k, seed)


def test_chunk_distances_are_scikit_learns():
    """UpcastChunks.distances against sklearn's euclidean_distances(squared=True) of float32 rows (the
    same chunks, so the same float32 numbers), several chunks spread over two threads."""
    rng = np.random.default_rng(1)
    X = rng.random((5000, 64), dtype=np.float32)
    C = X[[3, 17, 4000]]
    batch = upcast_batch(len(C), len(X), X.shape[1])
    assert batch < len(X)   # more than one chunk
    chunks = UpcastChunks(X.astype(np.float64), batch)
    ref = euclidean_distances(C, X, Y_norm_squared=row_norms(X, squared=True), squared=True)
    with ThreadPoolExecutor(2) as pool:
        assert np.array_equal(chunks.distances(C, pool, 2), ref)
    assert np.array_equal(chunks.distances(C), ref)


def test_other_inputs_go_to_scikit_learn():
    rng = np.random.default_rng(2)
    X64 = rng.random((500, 4))
    assert np.array_equal(kmeans_plusplus_threaded(X64, 8, seed=3), sklearn_seeds(X64, 8, 3))
    Xf = np.asfortranarray(rng.random((500, 4), dtype=np.float32))
    assert np.array_equal(kmeans_plusplus_threaded(Xf, 8, seed=3), sklearn_seeds(Xf, 8, 3))
    with pytest.raises(ValueError, match="n_samples=3"):
        kmeans_plusplus_threaded(np.zeros((3, 2), np.float32), 5, seed=0)
