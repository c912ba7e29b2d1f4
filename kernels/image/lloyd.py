"""k-means whose assignment step runs on several threads and whose centres are scikit-learn's one-thread
``KMeans`` centres, bit for bit, at any thread count.

Why.  A codebook's k-means (:func:`kernels.image.codebook.fit_codebook`) is scikit-learn's Lloyd loop
(``KMeans``, k-means++ initialisation, one initialisation).  Its threaded version adds each thread's
partial centre sums under a lock, in whatever order the threads finish
(``sklearn/cluster/_k_means_lloyd.pyx``), so its centres, and with them every visual word and every
classical number, would depend on the thread count.  On one thread, SIFT's k-means (64,000 × 128
descriptors, 256 words) is the longest single step of the default job's classical stage (8.3 s of 57 on
the development machine), and on a many-core machine it would be most of that stage.

How.  One Lloyd iteration (S. P. Lloyd, "Least squares quantization in PCM", IEEE Trans. Information
Theory 28(2), 1982; the loop of scikit-learn's ``_kmeans_single_lloyd``) is

* the assignment step: ``l_i = argmin_j ‖x_i − c_j‖² = argmin_j (‖c_j‖² − 2 x_i·c_j)``, ties to the lowest
  ``j``, computed by scikit-learn's own ``lloyd_iter_chunked_dense`` (``update_centers=False``) on blocks
  of its 256-sample chunks.  A sample's label depends only on its chunk's matrix product, so blocks of
  whole chunks on any number of threads give the labels of one thread.  This is 99 % of an
  iteration's work;
* the update step, on one thread: ``c_j = (Σ_{i: l_i = j} x_i) / n_j``.  Each sum adds its samples in
  sample order, one float addition each (a sparse one-hot product), as scikit-learn's loop does on one
  thread; the factor ``1/n_j`` is rounded to the data's dtype before it multiplies the sum, as there.
  Empty clusters are relocated to the samples farthest from their centres, and a cluster still empty
  takes the largest cluster's centre (scikit-learn's ``_relocate_empty_clusters_dense`` and
  ``_average_centers``, in numpy).
* the stopping rule: the labels did not change (strict convergence), or ``Σ_j ‖c_j^new − c_j‖² ≤ tol ·
  mean_d Var(x_d)``, with each shift ``‖·‖`` summed four coordinates at a time as scikit-learn's
  ``_euclidean_dense_dense`` does.

The data are centred on their mean first and the centres moved back at the end, and the initial centres
are scikit-learn's public :func:`sklearn.cluster.kmeans_plusplus` with the same seed, as in
``KMeans.fit``, bit for bit, with each seeding step's distances on the same threads
(:func:`kernels.image.kmeanspp.kmeans_plusplus_threaded`; on one thread the seeding took 3.0 s of SIFT's
8.3).  ``tests/test_lloyd.py`` compares the centres with ``KMeans`` on one thread, bit for bit, on the
teaching set's colour, texture and SIFT descriptors at several thread counts, and the update step with
scikit-learn's compiled one; a scikit-learn release that changes its loop fails those tests.
"""
from __future__ import annotations

from concurrent.futures import Executor

import numpy as np
import scipy.sparse as sp

# scikit-learn's compiled assignment step and its chunk size (public names in private modules): the same
# matrix products, chunk by chunk, as its KMeans, which is what makes the labels bit for bit its own.  A
# block of the assignment step always holds whole chunks, so each label comes from the same product.
from sklearn.cluster._k_means_common import CHUNK_SIZE as CHUNK
from sklearn.cluster._k_means_lloyd import lloyd_iter_chunked_dense

from kernels.image.kmeanspp import kmeans_plusplus_threaded

#: Blocks of the assignment step per thread and iteration (whole chunks each): enough for the threads to
#: even out, few enough that submitting them costs little beside the products.
BLOCKS_PER_THREAD = 4


def lloyd_kmeans(X: np.ndarray, n_clusters: int, *, seed: int, max_iter: int, executor: Executor | None,
                 n_threads: int, tol: float = 1e-4) -> np.ndarray:
    """Centres ``(n_clusters, d)`` of k-means on ``X``: ``KMeans(n_clusters, init="k-means++", n_init=1,
    max_iter=max_iter, tol=tol, random_state=seed).fit(X).cluster_centers_`` on one thread, bit for bit
    (module docstring), with the seeding's distance chunks and the assignment step's blocks run on
    ``executor`` (``n_threads`` of them at a time; ``None``: all in this thread).  The centres are float32
    for float32 ``X``, float64 otherwise."""
    # float32 stays float32, anything else becomes float64 (as KMeans converts it)
    X = np.array(X, dtype=np.float32 if np.asarray(X).dtype == np.float32 else np.float64, order="C", copy=True)
    tol_x = float(np.mean(np.var(X, axis=0)) * tol) if tol else 0.0   # on the data as given, as KMeans
    weights = np.ones(len(X), dtype=X.dtype)
    mean = X.mean(axis=0)
    X -= mean
    centres = kmeans_plusplus_threaded(X, n_clusters, seed=seed, executor=executor, n_threads=n_threads)
    centres = np.ascontiguousarray(centres, dtype=X.dtype)
    labels = np.full(len(X), -1, dtype=np.int32)
    previous = labels.copy()
    blocks = chunk_blocks(len(X), BLOCKS_PER_THREAD * max(1, n_threads))
    for _ in range(max_iter):
        assign(executor, X, weights, centres, labels, blocks)
        new, shift = update(X, weights, centres, labels)
        centres = new
        if np.array_equal(labels, previous) or (shift ** 2).sum() <= tol_x:
            break
        previous[:] = labels
    return centres + mean


def chunk_blocks(n: int, n_blocks: int) -> list[tuple[int, int]]:
    """``[start, stop)`` row ranges covering ``n`` rows in about ``n_blocks`` blocks of whole
    :data:`CHUNK`-row chunks (the last chunk may be shorter, as in scikit-learn)."""
    n_chunks = -(-n // CHUNK)
    per = max(1, -(-n_chunks // max(1, n_blocks)))
    return [(c * CHUNK, min(n, (c + per) * CHUNK)) for c in range(0, n_chunks, per)]


def assign(executor: Executor | None, X: np.ndarray, weights: np.ndarray, centres: np.ndarray, labels: np.ndarray,
           blocks: list[tuple[int, int]]) -> None:
    """The assignment step into ``labels``: scikit-learn's ``lloyd_iter_chunked_dense`` with
    ``update_centers=False`` on each block (one OpenMP thread each; it releases the GIL)."""
    def one(block: tuple[int, int]) -> None:
        a, b = block
        lloyd_iter_chunked_dense(X[a:b], weights[a:b], centres, None, None, labels[a:b], None, 1,
                                 update_centers=False)

    if executor is None:   # one thread: the blocks in order, here
        for block in blocks:
            one(block)
        return
    for done in [executor.submit(one, block) for block in blocks]:
        done.result()


def update(X: np.ndarray, weights: np.ndarray, centres: np.ndarray,
           labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The update step: the new centres and each centre's shift ``‖c_j^new − c_j‖`` (module docstring)."""
    k = len(centres)
    # column i of the one-hot matrix holds sample i's weight at row l_i: the product adds the samples of
    # each row in sample order, starting from zero, as one thread of scikit-learn's loop does
    onehot = sp.csc_matrix((weights, labels, np.arange(len(X) + 1)), shape=(k, len(X)))
    sums = np.ascontiguousarray(onehot @ X, dtype=X.dtype)
    counts = np.bincount(labels, weights=weights, minlength=k).astype(X.dtype)   # whole numbers: exact
    relocate_empty(X, weights, centres, sums, counts, labels)
    average(sums, counts)
    return sums, centre_shift(centres, sums)


def relocate_empty(X: np.ndarray, weights: np.ndarray, old: np.ndarray, sums: np.ndarray, counts: np.ndarray,
                   labels: np.ndarray) -> None:
    """Give each empty cluster one of the samples farthest from their centres, taken from its cluster
    (scikit-learn's ``_relocate_empty_clusters_dense``, same choice of samples), in place."""
    empty = np.flatnonzero(counts == 0)
    if not len(empty):
        return
    distances = ((X - old[labels]) ** 2).sum(axis=1)
    far = np.argpartition(distances, -len(empty))[:-len(empty) - 1:-1]
    if np.max(distances) == 0:   # more clusters than distinct samples: nothing to move
        return
    for new_id, i in zip(empty, far):
        w = weights[i]
        old_id = labels[i]
        sums[old_id] -= X[i] * w
        sums[new_id] = X[i] * w
        counts[new_id] = w
        counts[old_id] -= w


def average(sums: np.ndarray, counts: np.ndarray) -> None:
    """Sums to means in place: each sum times ``1/n_j`` rounded to the dtype; a cluster still empty takes
    the largest cluster's centre, scaled or not as it stands when its turn comes (scikit-learn's
    ``_average_centers`` walks the clusters in order)."""
    largest = int(np.argmax(counts))
    before = sums[largest].copy()
    filled = counts > 0
    factors = (1.0 / counts[filled].astype(np.float64)).astype(sums.dtype)
    sums[filled] *= factors[:, None]
    for j in np.flatnonzero(~filled):
        sums[j] = sums[largest] if largest < j else before


def centre_shift(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``‖c_j^new − c_j‖`` for every centre, in the dtype of the centres, summed as scikit-learn's
    ``_euclidean_dense_dense``: four coordinates' squares added left to right, then added to the running
    sum; the remaining coordinates one by one; the square root taken in double precision."""
    d = new - old
    total = np.zeros(len(d), dtype=d.dtype)
    n4 = d.shape[1] // 4
    for g in range(n4):
        q = d[:, 4 * g:4 * g + 4] ** 2
        total += ((q[:, 0] + q[:, 1]) + q[:, 2]) + q[:, 3]
    for c in range(4 * n4, d.shape[1]):
        total += d[:, c] * d[:, c]
    return np.sqrt(total.astype(np.float64)).astype(d.dtype)
