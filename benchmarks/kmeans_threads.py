"""A codebook's k-means on one thread (scikit-learn's ``KMeans``) and on several
(:mod:`kernels.image.lloyd`): wall time, the k-means++ initialisation's share, and whether the centres
are the same bits.

The sample is what the default job's SIFT codebook clusters: descriptors of the built-in teaching set's
images, 500 from each (``--images`` × 500 rows), 256 words, at most 100 iterations, seed 0.  On several
threads the k-means++ initialisation's distance chunks (:mod:`kernels.image.kmeanspp`) and the
assignment steps run on the given threads, each seeding draw and update step on one:

    python benchmarks/kmeans_threads.py                       # 128 images (64,000 × 128), 1 and 2 threads
    python benchmarks/kmeans_threads.py --threads 1,2,4,8,16 --json
    python benchmarks/kmeans_threads.py --feature texture --words 256

Figures: ``wall_s_1`` (scikit-learn's ``KMeans``, the reference, always run), ``init_s`` (its k-means++
initialisation alone), ``iterations``, and for each count above one ``wall_s_<threads>``
(``lloyd_kmeans``), ``speedup_<threads>`` against one thread, ``init_s_<threads>`` (the threaded
initialisation alone) and ``identical_<threads>`` (centres, and the initialisation's seeds, equal to one
thread's bit for bit).  The exit status is 1 when a count's centres differ.
"""
from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from sklearn.cluster import KMeans, kmeans_plusplus
from sklearn.utils.extmath import row_norms
from threadpoolctl import threadpool_limits

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import emit  # noqa: E402
from corpora.teaching import make_teaching_set  # noqa: E402
from kernels.image.codebook import fit_codebook  # noqa: E402
from kernels.image.descriptors import FEATURES, DescriptorParams, extract_descriptors  # noqa: E402
from kernels.image.kmeanspp import kmeans_plusplus_threaded  # noqa: E402


def sample(feature: str, n_images: int, per_image: int = 500, seed: int = 0) -> np.ndarray:
    """``per_image`` seeded descriptors of ``feature`` from each of the first ``n_images`` teaching images."""
    corpus = make_teaching_set()
    rng = np.random.default_rng(seed)
    rows = []
    for image_id in list(corpus.image_ids)[:n_images]:
        x = extract_descriptors(corpus.load_image(image_id), DescriptorParams(), (feature,))[feature][0]
        rows.append(x[rng.choice(len(x), min(len(x), per_image), replace=False)])
    return np.concatenate(rows)


def one_thread(X: np.ndarray, n_words: int, seed: int) -> tuple[np.ndarray, float, float, int]:
    """The reference: scikit-learn's ``KMeans`` on one thread, as :func:`~kernels.image.codebook.fit_codebook`
    runs it (its centres, its seconds, the seconds of its k-means++ initialisation alone on the centred
    data, and its Lloyd iterations)."""
    with threadpool_limits(limits=1):
        t0 = time.perf_counter()
        sklearn_seeds(X, n_words, seed)
        init = time.perf_counter() - t0
        t0 = time.perf_counter()
        km = KMeans(n_clusters=n_words, init="k-means++", n_init=1, max_iter=100, random_state=seed).fit(X)
        wall = time.perf_counter() - t0
    return np.ascontiguousarray(km.cluster_centers_, dtype=np.float32), wall, init, int(km.n_iter_)


def sklearn_seeds(X: np.ndarray, n_words: int, seed: int) -> np.ndarray:
    """scikit-learn's k-means++ seeds of ``X`` centred on its mean, as ``KMeans.fit`` draws them."""
    Xc = X - X.mean(axis=0)
    return kmeans_plusplus(Xc, n_words, x_squared_norms=row_norms(Xc, squared=True), random_state=seed)[0]


def threaded_seeds(X: np.ndarray, n_words: int, seed: int, threads: int) -> tuple[np.ndarray, float]:
    """:func:`~kernels.image.kmeanspp.kmeans_plusplus_threaded` of ``X`` centred on its mean on ``threads``
    threads, and its seconds."""
    Xc = X - X.mean(axis=0)
    with threadpool_limits(limits=1), ThreadPoolExecutor(threads) as pool:
        t0 = time.perf_counter()
        seeds = kmeans_plusplus_threaded(Xc, n_words, seed=seed, executor=pool, n_threads=threads)
        return seeds, time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2",
                    help="comma-separated thread counts (default: 1,2; one thread, the reference, always runs)")
    ap.add_argument("--images", type=int, default=128, help="teaching images sampled, 500 rows each (default: 128)")
    ap.add_argument("--feature", default="sift", choices=FEATURES, help="descriptor (default: sift)")
    ap.add_argument("--words", type=int, default=256, help="codebook size (default: 256)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    X = sample(args.feature, args.images)
    counts = [int(x) for x in args.threads.split(",")]
    want, base, init, iterations = one_thread(X, args.words, seed=0)
    result: dict = {"rows": int(X.shape[0]), "dims": int(X.shape[1]), "words": args.words, "wall_s_1": round(base, 2),
                    "init_s": round(init, 2), "iterations": iterations}
    ok = True
    for t in (c for c in counts if c > 1):
        t0 = time.perf_counter()
        centres = fit_codebook(X, args.words, seed=0, n_threads=t)
        wall = time.perf_counter() - t0
        seeds, init_t = threaded_seeds(X, args.words, 0, t)
        with threadpool_limits(limits=1):
            same = bool(np.array_equal(centres, want)) and bool(np.array_equal(seeds, sklearn_seeds(X, args.words, 0)))
        ok &= same
        result[f"wall_s_{t}"] = round(wall, 2)
        result[f"speedup_{t}"] = round(base / wall, 2)
        result[f"init_s_{t}"] = round(init_t, 2)
        result[f"identical_{t}"] = same
    emit(result, args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
