"""Visual-word codebooks (Hodosh et al. 2013, Sec. 3.3): seeded k-means on sampled descriptors, and
nearest-word quantisation.

The paper's vocabulary sizes are 128 colour, 256 texture and 256 SIFT words (:data:`DEFAULT_N_WORDS`).
The paper clusters 1,000 descriptors from each of 200 PASCAL VOC 2008 images
(:data:`PAPER_CODEBOOK_IMAGES`, :data:`PAPER_SAMPLES_PER_IMAGE`); :class:`kernels.image.ImageKernel` does
so from a folder of images (``codebook_dir``, e.g. VOC 2008's ``JPEGImages``) and otherwise, a deviation,
from a seeded sample of the training images.
"""
from __future__ import annotations

import hashlib
import warnings
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

DEFAULT_N_WORDS = {"color": 128, "texture": 256, "sift": 256}
#: Images and descriptors per image (per feature) the paper's codebooks are fitted on (Sec. 3.3).
PAPER_CODEBOOK_IMAGES = 200
PAPER_SAMPLES_PER_IMAGE = 1000
#: File name suffixes taken as images in a codebook folder.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".gif", ".webp")


def codebook_folder_images(folder) -> list[Path]:
    """The image files directly in ``folder`` (by suffix, case-insensitive), sorted by name.

    ``FileNotFoundError`` if ``folder`` is not a directory, ``ValueError`` if it holds no image."""
    d = Path(folder).expanduser()
    if not d.is_dir():
        raise FileNotFoundError(f"codebook folder {str(folder)!r}: no such directory")
    files = sorted(p for p in d.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)
    if not files:
        raise ValueError(f"codebook folder {str(folder)!r} holds no image files ({', '.join(IMAGE_SUFFIXES)})")
    return files


def codebook_folder_identity(folder) -> dict:
    """What a codebook folder is, for cache keys: its absolute path, number of images and a digest of every
    image file's :func:`~corpora.base.file_signature` (name, size, modification time)."""
    from corpora.base import file_signature

    files = codebook_folder_images(folder)
    h = hashlib.sha256("\n".join(file_signature(p) for p in files).encode("utf-8")).hexdigest()[:16]
    return {"folder": str(Path(folder).expanduser().resolve()), "n_images": len(files), "files": h}


def pick_codebook_images(candidates: list, n_images: int, rng: np.random.Generator) -> list:
    """At most ``n_images`` of ``candidates`` drawn without replacement with ``rng`` (kept in their
    order; all of them when there are no more)."""
    if len(candidates) <= n_images:
        return list(candidates)
    return [candidates[i] for i in np.sort(rng.choice(len(candidates), n_images, replace=False))]


def sample_rows(X: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """At most ``n`` rows of ``X`` drawn without replacement (all rows, in order, if ``len(X) <= n``)."""
    if len(X) <= n:
        return X
    return X[np.sort(rng.choice(len(X), size=n, replace=False))]


def fit_codebook(X: np.ndarray, n_words: int, seed: int = 0, max_iter: int = 100,
                 n_threads: int = 1, executor: Executor | None = None) -> np.ndarray:
    """k-means codebook: ``n_words`` centres ``(n_words, d)`` float32 fitted on descriptors ``X``.

    The centres of scikit-learn's ``KMeans`` (Lloyd, k-means++ initialisation, one initialisation,
    ``random_state=seed``) on one thread, so the same descriptors and seed give the same codebook on
    every machine.  Duplicate descriptors are fine; fewer descriptors than words is an error naming
    ``n_words``.

    They are computed by :func:`kernels.image.lloyd.lloyd_kmeans` (the same centres, bit for bit) on
    ``n_threads`` threads, one by default (on ``executor`` when given, which several codebooks may
    share): its seeding makes its float64 chunks once instead of at every step
    (:mod:`kernels.image.kmeanspp`), which made SIFT's k-means about 0.7 s shorter on one thread than
    ``KMeans`` (texture's 0.25 s, colour's 0.15 s).  scikit-learn's ``KMeans`` itself runs only where its
    compiled assignment step cannot be imported (:func:`threaded_lloyd`).  scikit-learn's own threads are
    never used: their centre sums depend on the thread count, and on a machine shared with other jobs its
    spinning OpenMP / BLAS threads made k-means 5–7× *slower* with 2 threads than with 1.  BLAS stays on
    one thread either way.
    """
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"descriptors must be 2-D, got shape {X.shape}")
    if n_words < 1:
        raise ValueError(f"n_words={n_words} must be positive")
    if len(X) < n_words:
        raise ValueError(f"n_words={n_words} exceeds the {len(X)} descriptors sampled for the codebook")
    lloyd = threaded_lloyd()
    if lloyd is not None:
        own = (ThreadPoolExecutor(max_workers=n_threads, thread_name_prefix="k-means")
               if executor is None and n_threads > 1 else None)
        with threadpool_limits(limits=1), own or nullcontext():
            return lloyd(X, n_words, seed=seed, max_iter=max_iter, executor=executor or own,
                         n_threads=n_threads).astype(np.float32, copy=False)
    # heavy (seconds to import) and needed only to fit a codebook, which a cached run never does
    from sklearn.cluster import KMeans

    km = KMeans(n_clusters=n_words, init="k-means++", n_init=1, max_iter=max_iter, random_state=seed)
    with warnings.catch_warnings(), threadpool_limits(limits=1):
        # Flat synthetic images give fewer distinct colours than words; k-means then duplicates centres.
        warnings.filterwarnings("ignore", message="Number of distinct clusters")
        km.fit(X)
    return np.ascontiguousarray(km.cluster_centers_, dtype=np.float32)


def threaded_lloyd():
    """:func:`kernels.image.lloyd.lloyd_kmeans`, or ``None`` for a scikit-learn without the compiled
    assignment step it calls (:func:`fit_codebook` then runs scikit-learn's one-thread ``KMeans``, which
    gives the same centres).  Imported on first use: scikit-learn takes seconds to import, and a cached
    run fits no codebook."""
    try:
        from kernels.image.lloyd import lloyd_kmeans
    except ImportError:
        return None
    return lloyd_kmeans


def quantise(X: np.ndarray, centres: np.ndarray, block: int = 8192) -> np.ndarray:
    """Index of the nearest centre (squared Euclidean) of every row of ``X``, int32 ``(N,)``.

    ``argmin_v ||x − c_v||² = argmin_v (||c_v||² − 2 x·c_v)``, evaluated with one matrix product per
    block of rows; ties go to the lowest index.  The product's array is scaled by −2 and shifted by
    ``||c_v||²`` in place (the same float32 operations as ``||c||² − 2 (x·c)``, so the same bits, without
    two more arrays of its size: an image's colour and texture words are 3,072 × 128 products, and
    fresh temporaries of that size cost more than the product on a busy core).
    """
    X = np.asarray(X, dtype=np.float32)
    C = np.asarray(centres, dtype=np.float32)
    if X.ndim != 2 or C.ndim != 2 or X.shape[1] != C.shape[1]:
        raise ValueError(f"descriptor shape {X.shape} does not match codebook shape {C.shape}")
    cc = np.einsum("ij,ij->i", C, C)
    out = np.empty(len(X), dtype=np.int32)
    for s in range(0, len(X), block):
        d = X[s:s + block] @ C.T
        d *= np.float32(-2.0)
        d += cc
        out[s:s + block] = np.argmin(d, axis=1)
    return out
