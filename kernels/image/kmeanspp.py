"""scikit-learn's k-means++ seeding, bit for bit, with each step's distances computed chunk by chunk on
several threads.

Why.  The seeding of a codebook's k-means (:func:`kernels.image.lloyd.lloyd_kmeans`) is scikit-learn's
:func:`sklearn.cluster.kmeans_plusplus`, which runs on one thread: on SIFT's 64,000 × 128 descriptors
and 256 words it takes 3–4 s, the longest serial step of the classical stage once the Lloyd iterations'
assignment steps run on every thread.

What it computes (D. Arthur and S. Vassilvitskii, "k-means++: the advantages of careful seeding", SODA
2007, Sec. 2.2, with scikit-learn's greedy local trials).  The first centre is a sample drawn uniformly.
Each further centre: draw ``t = 2 + ⌊ln k⌋`` candidates ``x_c`` with probability proportional to
``D(x)²``, the squared distance of a sample to its closest centre so far; compute every sample's squared
distance to each candidate; keep the candidate whose potential ``Σ_i min(D(x_i)², ‖x_i − x_c‖²)`` is
smallest, and those minima as the new ``D(x)²``.

How it stays scikit-learn's, bit for bit.  For float32 samples scikit-learn computes the distances in
float64 on chunks of ``B`` samples (``_euclidean_distances_upcast``, ``B`` from its memory rule, about
810 for SIFT's descriptors): per chunk, ``d = −2 (x_c · y) + ‖x_c‖² + ‖y‖²`` with the chunk copied to
float64 and its squared norms computed, rounded to float32, then clipped at 0.  Here each chunk gets the
same operations on the same operands (the same matrix-product call on the same shapes and layout), so
every distance is the same number; only

* each chunk's float64 copy and squared norms are made once for all ``k − 1`` steps (they are the same
  at every step), instead of once per step; and
* a step's chunks are computed in contiguous groups on ``n_threads`` threads of an executor (each entry
  by the same operations, whichever thread runs it), while the draws, the sums and the choice stay on
  the calling thread with the same random state, in scikit-learn's order and shapes.

Anything else (float64 or sparse samples, chunks smaller than the candidates) goes to scikit-learn's own
function.  ``tests/test_kmeanspp.py`` compares the centres with :func:`sklearn.cluster.kmeans_plusplus`
on one to three threads; a scikit-learn release that changes its seeding fails it.
"""
from __future__ import annotations

import math
from concurrent.futures import Executor

import numpy as np
from sklearn.cluster import kmeans_plusplus
from sklearn.utils import check_random_state, gen_batches
from sklearn.utils.extmath import row_norms


def upcast_batch(n_x: int, n_y: int, n_features: int) -> int:
    """scikit-learn's chunk size for the float64 distances of ``n_x`` against ``n_y`` dense float32 rows:
    about 10 % more memory than the rows and the distances take, at least 10 MiB
    (``sklearn.metrics.pairwise._euclidean_distances_upcast``)."""
    maxmem = max(((n_x + n_y) * n_features + n_x * n_y) / 10, 10 * 2 ** 17)
    tmp = 2 * n_features
    return max(int((-tmp + math.sqrt(tmp ** 2 + 4 * maxmem)) / 2), 1)


class UpcastChunks:
    """The samples in scikit-learn's float64 chunks of ``batch`` rows, with their squared norms, made once.

    Parameters
    ----------
    X64 : (n, d) float64, C-contiguous
        The samples, upcast.
    batch : int
        Rows per chunk (:func:`upcast_batch`).
    """

    def __init__(self, X64: np.ndarray, batch: int) -> None:
        self.X64 = X64
        self.slices = list(gen_batches(len(X64), batch))
        self.norms = [row_norms(X64[s], squared=True)[None, :] for s in self.slices]

    def distances(self, C: np.ndarray, executor: Executor | None = None, n_threads: int = 1) -> np.ndarray:
        """Squared distances ``(len(C), n)`` float32 of the float32 rows ``C`` (fewer than a chunk's rows)
        to every sample, clipped at 0: scikit-learn's ``_euclidean_distances(C, X, squared=True)`` for
        float32 ``X``, bit for bit; the chunks in ``n_threads`` contiguous groups on ``executor``."""
        C64 = C.astype(np.float64)
        CC = row_norms(C64, squared=True)[:, None]
        out = np.empty((len(C), len(self.X64)), dtype=np.float32)

        def run(chunks) -> None:
            for j in chunks:
                s = self.slices[j]
                d = -2 * (C64 @ self.X64[s].T)
                d += CC
                d += self.norms[j]
                out[:, s] = d   # rounded to float32 as scikit-learn's astype

        groups = [g for g in np.array_split(np.arange(len(self.slices)), max(1, n_threads)) if len(g)]
        if executor is None or len(groups) == 1:
            run(range(len(self.slices)))
        else:
            for done in [executor.submit(run, g) for g in groups]:
                done.result()
        np.maximum(out, np.float32(0), out=out)
        return out


def kmeans_plusplus_threaded(X: np.ndarray, n_clusters: int, *, seed: int, executor: Executor | None = None,
                             n_threads: int = 1) -> np.ndarray:
    """The k-means++ centres ``(n_clusters, d)`` of ``X`` with unit weights: ``kmeans_plusplus(X,
    n_clusters, sample_weight=1, x_squared_norms=row_norms(X, squared=True), random_state=seed)[0]``
    bit for bit (module docstring), each step's distances on ``n_threads`` threads of ``executor``.

    Raises
    ------
    ValueError
        Fewer samples than centres (as scikit-learn).
    """
    n, n_features = np.shape(X)
    trials = 2 + int(np.log(n_clusters))
    batch = upcast_batch(trials, n, n_features)
    if (not isinstance(X, np.ndarray) or X.dtype != np.float32 or not X.flags.c_contiguous
            or batch < trials or n < n_clusters):
        weights = np.ones(n, dtype=np.asarray(X).dtype)
        return kmeans_plusplus(X, n_clusters, sample_weight=weights, x_squared_norms=row_norms(X, squared=True),
                               random_state=seed)[0]
    random_state = check_random_state(seed)
    sample_weight = np.ones(n, dtype=X.dtype)
    X64 = X.astype(np.float64)
    centers = np.empty((n_clusters, n_features), dtype=X.dtype)
    center_id = random_state.choice(n, p=sample_weight / sample_weight.sum())
    centers[0] = X[center_id]
    # the first centre's distances: one row, so scikit-learn's chunks are sized for one row
    closest_dist_sq = UpcastChunks(X64, upcast_batch(1, n, n_features)).distances(centers[0, np.newaxis])
    current_pot = closest_dist_sq @ sample_weight
    chunks = UpcastChunks(X64, batch)
    for c in range(1, n_clusters):
        rand_vals = random_state.uniform(size=trials) * current_pot
        candidate_ids = np.searchsorted(np.cumsum(sample_weight * closest_dist_sq), rand_vals)
        np.clip(candidate_ids, None, closest_dist_sq.size - 1, out=candidate_ids)
        distance_to_candidates = chunks.distances(X[candidate_ids], executor, n_threads)
        np.minimum(closest_dist_sq, distance_to_candidates, out=distance_to_candidates)
        candidates_pot = distance_to_candidates @ sample_weight.reshape(-1, 1)
        best = np.argmin(candidates_pot)
        current_pot = candidates_pot[best]
        closest_dist_sq = distance_to_candidates[best]
        centers[c] = X[candidate_ids[best]]
    return centers
