# Size (~650 lines): one estimator, ImageKernel, whose codebooks, visual words, histograms and Gram paths (whole, rows, low-rank columns) share its fitted state.
"""``ImageKernel``: image → descriptors → visual words → (pyramid) histograms → Gram matrices.

Hodosh et al. (2013), Sec. 3.3, end to end, with every expensive step cached on disk
(:class:`corpora.cache.DiskCache`, atomic + checksummed writes):

* codebooks (namespace ``image_codebook``), keyed by the training ids and their image signatures,
  descriptor parameters, vocabulary size, seed and sampling parameters;
* visual words of every image (``image_words``, one entry per image), keyed by image id, the image's
  signature, descriptor parameters and the codebooks' content digests;
* per-feature Gram matrices (``image_gram``), keyed by all of the above plus the row / column ids, their
  image signatures and the kernel kind.

An image's signature (:meth:`corpora.base.Corpus.image_signature`) names what its pixels are made from:
file name, size and modification time for an image file; scene, render stream and generator version for
the teaching set.  The keys do not use the corpus fingerprint, which also covers captions and splits:
editing captions or changing a split keeps every cached image feature valid (a new split still refits
the codebooks, which are keyed by the training ids).

>>> ik = ImageKernel(kind="pyramid", power=2)
>>> ik.fit(corpus, corpus.split("train"))
>>> K_train = ik.gram(corpus.split("train"))                          # (n_train, n_train)
>>> K_test = ik.gram(corpus.split("test"), corpus.split("train"))     # (n_test, n_train)
"""
from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from corpora.cache import NO_CACHE, DiskCache, array_bytes, cache_key
from corpora.parallel import BlockExecutor, Shared
from corpora.images import read_image
from kernels.image.blocks import (
    column_weights, columns_on_cluster, gram_on_cluster, is_skinny, shared_rows, words_on_cluster,
)
from kernels.image.codebook import (
    DEFAULT_N_WORDS, PAPER_CODEBOOK_IMAGES, PAPER_SAMPLES_PER_IMAGE, codebook_folder_identity, codebook_folder_images,
    fit_codebook, pick_codebook_images, quantise, sample_rows,
)
from kernels.image.descriptors import FEATURES, DescriptorParams, extract_descriptors, one_opencv_thread
from kernels.image.gram import (
    BinRows, BinRowsBuilder, combine_kernels, intersection_columns, intersection_gram, pyramid_match_gram,
)
from kernels.image.histograms import N_LEVELS, global_histograms, n_cells, pyramid_histograms
from kernels.threads import default_threads

log = logging.getLogger(__name__)

KINDS = ("pyramid", "histogram")
#: Version of the cache-key layout (2: images named by their signatures instead of the corpus fingerprint).
_KEY_VERSION = 2
#: Memory (bytes) that :meth:`ImageKernel.fit` may spend keeping the full descriptors of the codebook
#: images, so that computing their visual words right after k-means does not extract them again.
DESCRIPTOR_MEMO_BYTES = 512 * 2**20
#: Images whose dense histograms are built at a time when the kept rows are stored by bin
#: (:meth:`ImageKernel._kept_rows`): 4,096 × 21 × 640 float32 = 220 MB beside the sparse result.
KEPT_ROWS_BLOCK = 4096
#: Most images per task of :meth:`ImageKernel._map` (each image's work is tens of milliseconds).
MAP_CHUNK = 8

#: Descriptors sampled per codebook image (before the per-feature cap), codebooks from training images.
DEFAULT_SAMPLES_PER_IMAGE = {"color": 256, "texture": 256, "sift": 128}
#: Codebook images and the per-feature cap, codebooks from training images.
DEFAULT_CODEBOOK_IMAGES = 500
DEFAULT_MAX_CODEBOOK_SAMPLES = 100_000


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(array_bytes(a)).hexdigest()[:16]


class _MemoBudget:
    """The codebook images' descriptors kept during :meth:`ImageKernel.fit` (in ``store``), up to
    :data:`DESCRIPTOR_MEMO_BYTES` in all; thread-safe."""

    def __init__(self, store: dict):
        self.store = store
        self.lock = threading.Lock()
        self.used = 0      # bytes kept
        self.largest = 0   # the largest image's descriptors seen so far

    def keep(self, image_id: str, desc) -> bool:
        """Memoise one image's descriptors if the budget allows; False when it does not."""
        nbytes = sum(d.nbytes for d, _ in desc.values())
        with self.lock:
            self.largest = max(self.largest, nbytes)
            if self.used + nbytes > DESCRIPTOR_MEMO_BYTES:
                return False
            self.used += nbytes
            self.store[image_id] = desc
        return True

    def full(self) -> bool:
        """True when one more image (as large as the largest seen) might not fit."""
        return self.used + self.largest > DESCRIPTOR_MEMO_BYTES


def _as_list(ids) -> list:
    """``ids`` as a list, the same object when it is one already."""
    return ids if isinstance(ids, list) else list(ids)


class ImageKernel:
    """Image kernels of Hodosh et al. (2013), Sec. 3.3.

    Parameters
    ----------
    kind : {"pyramid", "histogram"}
        ``"pyramid"`` → spatial pyramid match kernel ``K^PY`` (Eqs. 7–8, levels 0–2, 21 cells);
        ``"histogram"`` → histogram intersection ``K^HISTO`` of global histograms (Eq. 5).
    power : int
        ``p`` of the combined kernel ``K = [(K_C + K_T + K_S)/3]^p`` (Eq. 6); the paper uses 2 or 3.
    features : sequence of {"color", "texture", "sift"}
        Which descriptors enter the combination (mean over those given).
    n_words : mapping feature -> int, optional
        Vocabulary sizes; defaults 128 colour / 256 texture / 256 SIFT words (the paper's).
    max_side : int
        Working resolution: longest image side in pixels (see :mod:`kernels.image.descriptors`).
    seed : int
        Seeds the choice of codebook images, descriptor sampling and k-means.
    codebook_dir : path, optional
        A folder of images the codebooks are fitted on, as in the paper (Sec. 3.3: 1,000 descriptors
        from each of 200 PASCAL VOC 2008 images, e.g. VOC2008's ``JPEGImages``): ``codebook_images``
        (default 200) of its images drawn with ``seed``, ``samples_per_image`` (default 1,000 per feature)
        descriptors from each, all of them clustered.  ``None`` (default; a deviation from the paper):
        the codebooks are fitted on a seeded sample of the *training* images (500 images; 256 colour,
        256 texture, 128 SIFT descriptors each; at most 100,000 per feature).
    cache : DiskCache, optional
        Where codebooks, words and Gram matrices are cached (``None`` → no caching).
    show_progress : bool
        tqdm bars for extraction and Gram computation.
    n_jobs : int, optional
        Threads for extraction and Gram computation (default: all usable cores).
    codebook_images : int, optional
        At most this many images (seeded sample of the training images, or of ``codebook_dir``'s) supply
        descriptors for k-means (default 500, or 200 with ``codebook_dir``).
    samples_per_image : mapping feature -> int, optional
        Descriptors drawn per codebook image (defaults: 256 colour, 256 texture, 128 SIFT; 1,000 each
        with ``codebook_dir``).
    max_codebook_samples : int, optional
        Cap on the descriptors per feature given to k-means (default 100,000; with ``codebook_dir``
        every sampled descriptor).
    descriptor_params : DescriptorParams, optional
        Full control over grids and SIFT patch size (``max_side`` is taken from it when given).
    backend : {"auto", "c", "numpy"}
        Gram inner loop, see :func:`kernels.image.gram.intersection_gram`.
    executor : corpora.parallel.BlockExecutor, optional
        Where the visual words (blocks of :data:`kernels.image.blocks.WORDS_BLOCK_IMAGES` images) and the
        Gram matrices (row blocks of :data:`kernels.image.blocks.GRAM_BLOCK_ROWS`) are computed when it is a Dask cluster; ``None`` or an
        in-process executor: this process's ``n_jobs`` threads.  The numbers are the same either way.
    """

    def __init__(
        self,
        kind: str = "pyramid",
        power: int = 2,
        features: Sequence[str] = FEATURES,
        n_words: Mapping[str, int] | None = None,
        max_side: int = 256,
        seed: int = 0,
        cache: DiskCache | None = None,
        show_progress: bool = True,
        n_jobs: int | None = None,
        codebook_images: int | None = None,
        samples_per_image: Mapping[str, int] | None = None,
        max_codebook_samples: int | None = None,
        descriptor_params: DescriptorParams | None = None,
        backend: str = "auto",
        codebook_dir=None,
        executor: BlockExecutor | None = None,
    ):
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r} must be one of {KINDS}")
        if isinstance(power, bool) or not isinstance(power, (int, np.integer)) or power < 1:
            raise ValueError(f"power={power!r} must be a positive integer (the paper uses 2 or 3)")
        features = tuple(features)
        if not features:
            raise ValueError("features must name at least one of " + ", ".join(FEATURES))
        for f in features:
            if f not in FEATURES:
                raise ValueError(f"features: unknown feature {f!r} (expected one of {FEATURES})")
        if len(set(features)) != len(features):
            raise ValueError(f"features has duplicates: {features}")
        words = dict(DEFAULT_N_WORDS)
        for f, v in (n_words or {}).items():
            if f not in FEATURES:
                raise ValueError(f"n_words: unknown feature {f!r}")
            if int(v) < 1:
                raise ValueError(f"n_words[{f!r}]={v} must be positive")
            words[f] = int(v)
        folder = codebook_dir is not None
        spi = {f: PAPER_SAMPLES_PER_IMAGE for f in FEATURES} if folder else dict(DEFAULT_SAMPLES_PER_IMAGE)
        spi.update({f: int(v) for f, v in (samples_per_image or {}).items()})
        self.kind = kind
        self.power = int(power)
        self.features = features
        self.n_words = {f: words[f] for f in features}
        self.descriptor_params = descriptor_params or DescriptorParams(max_side=max_side)
        self.max_side = self.descriptor_params.max_side
        for f in features:
            self.descriptor_params.grid(f).check(N_LEVELS)
        self.seed = int(seed)
        self.cache = cache if cache is not None else NO_CACHE
        self.show_progress = show_progress
        self.n_jobs = n_jobs or default_threads()
        self.codebook_dir = None if codebook_dir is None else str(codebook_dir)
        self.codebook_images = int(codebook_images if codebook_images is not None
                                   else PAPER_CODEBOOK_IMAGES if folder else DEFAULT_CODEBOOK_IMAGES)
        self.samples_per_image = {f: spi[f] for f in features}
        if max_codebook_samples is None:   # a folder: every sampled descriptor (the paper's 200 x 1,000)
            max_codebook_samples = (self.codebook_images * max(self.samples_per_image.values()) if folder
                                    else DEFAULT_MAX_CODEBOOK_SAMPLES)
        self.max_codebook_samples = int(max_codebook_samples)
        self._codebook_source: dict | None = None
        self.backend = backend
        self.executor = executor if executor is not None and executor.distributed else None
        self.levels = N_LEVELS
        self.codebooks_: dict[str, np.ndarray] | None = None
        self._digests: dict[str, str] | None = None
        self.corpus_ = None
        self.train_ids_: tuple[str, ...] = ()
        self._words: dict[str, dict[str, tuple[np.ndarray, tuple[int, int]]]] = {}
        self.n_extracted_ = 0  # images whose descriptors were computed (not read from cache)
        self._desc_memo: dict[str, dict] = {}  # codebook images' descriptors, only during fit
        # held while the visual words change: several threads may ask one fitted kernel for Gram rows at
        # once (kcca.kernel_store computes them outside its entry lock)
        self._state_lock = threading.RLock()
        # held while the kept rows (below) change, before the state lock: Grams, which need only the words,
        # go on while the nearest-neighbour baseline's training histograms are stored by bin
        self._rows_lock = threading.RLock()
        # the last rows' histograms stored by bin, kept for repeated column requests (_kept_rows): (ids,
        # {feature: BinRows}, {feature: Shared on the cluster; its rows leave the dict}, [rows digests])
        self._rows_memo: tuple[tuple[str, ...], dict[str, BinRows], dict, list] | None = None
        self._kept_list: list[str] | None = None   # the list the kept rows came as (_are_kept)
        # what every visual-words block needs (corpus, descriptor parameters, codebooks), sent to the
        # cluster once per fit (_words_on_cluster)
        self._words_context: Shared | None = None

    # ------------------------------------------------------------------ keys
    # Image features depend on the pixels, not on the captions or splits: the keys name the images by
    # their signatures (Corpus.image_signature: file name, size and mtime; the teaching set's scene and
    # render stream), not by the corpus fingerprint.
    def _base_key(self) -> dict:
        return {"descriptors": self.descriptor_params.key(), "keys": _KEY_VERSION}

    def _codebook_key(self, feature: str) -> dict:
        # "features" and "samples_of_features" (all their sample sizes): every feature's descriptors are
        # sampled from one generator per image, in self.features order, so a feature's sample depends on
        # the features fitted with it and on how many rows each of them draws
        key = {**self._base_key(), "stage": "codebook", "feature": feature, "features": list(self.features),
               "samples_of_features": {f: self.samples_per_image[f] for f in self.features},
               "train_ids": list(self.train_ids_), "train_images": self.corpus_.images_fingerprint(self.train_ids_),
               "n_words": self.n_words[feature], "seed": self.seed,
               "codebook_images": self.codebook_images,
               "samples_per_image": self.samples_per_image[feature],
               "max_codebook_samples": self.max_codebook_samples, "version": 1}
        if self.codebook_dir is not None:   # the folder's images, not the training images, are clustered
            del key["train_ids"], key["train_images"]
            key["codebook_source"] = self._codebook_source
        return key

    def _codebook_digests(self) -> dict:
        if self._digests is None:
            self._digests = {f: _digest(self.codebooks_[f]) for f in self.features}
        return self._digests

    def codebook_digests(self) -> dict[str, str]:
        """SHA-256 digest of each fitted codebook (``{feature: digest}``): what anything computed from
        this kernel's visual words (a KCCA run, a cached score) depends on besides pixels and ids."""
        return dict(self._codebook_digests())

    def _words_key(self, image_id: str) -> dict:
        return {**self._base_key(), "stage": "words", "image": image_id,
                "pixels": self.corpus_.image_signature(image_id), "codebooks": self._codebook_digests()}

    def _gram_key(self, feature: str, rows, cols) -> dict:
        return {**self._base_key(), "stage": "gram", "feature": feature, "kind": self.kind,
                "levels": self.levels, "codebook": self._codebook_digests()[feature],
                "rows": list(rows), "cols": None if cols is None else list(cols),
                "row_images": self._rows_fingerprint(rows),
                "col_images": None if cols is None else self.corpus_.images_fingerprint(cols),
                "version": 1}

    def _column_key(self, feature: str, rows, cols) -> dict:
        """The key of a few pivot columns against the kept ``rows`` (the low-rank solver's columns): as
        :meth:`_gram_key`, with the rows named by one digest of their ids and pixels
        (:meth:`_rows_digest`) instead of their ids — at COCO size 10^5 ids, which every column's key
        would hash and every entry store."""
        return {**self._base_key(), "stage": "gram-columns", "feature": feature, "kind": self.kind,
                "levels": self.levels, "codebook": self._codebook_digests()[feature],
                "rows_digest": self._rows_digest(rows), "cols": list(cols),
                "col_images": self.corpus_.images_fingerprint(cols), "version": 1}

    def _rows_digest(self, rows) -> str:
        """One digest of ``rows``' ids and images fingerprint, computed once while they are the kept rows."""
        memo = self._rows_memo
        if not self._are_kept(rows):
            return cache_key({"rows": list(rows), "row_images": self._rows_fingerprint(rows)})
        if len(memo[3]) < 2:
            memo[3][:] = [self._rows_fingerprint(rows)]
            memo[3].append(cache_key({"rows": list(rows), "row_images": memo[3][0]}))
        return memo[3][1]

    def _rows_fingerprint(self, rows) -> str:
        """``images_fingerprint(rows)``, computed once while ``rows`` are the kept rows (the low-rank
        solver's columns: one Gram key per pivot, each over every training image's signature)."""
        memo = self._rows_memo
        if not self._are_kept(rows):
            return self.corpus_.images_fingerprint(rows)
        if not memo[3]:
            memo[3].append(self.corpus_.images_fingerprint(rows))
        return memo[3][0]

    def _check_fitted(self) -> None:
        if self.codebooks_ is None:
            raise RuntimeError("ImageKernel is not fitted: call fit(corpus, train_ids) first")

    # ------------------------------------------------------------------ extraction
    def _load(self, image_id: str) -> np.ndarray:
        try:
            return self.corpus_.load_image(image_id)
        except Exception as exc:
            try:
                wrapped = type(exc)(f"image {image_id!r} of corpus {self.corpus_.name!r}: {exc}")
            except Exception:
                raise exc from None
            raise wrapped from exc

    def _map(self, fn, items, desc: str):
        """``fn`` over ``items`` on ``n_jobs`` threads (OpenCV, numpy and scipy.fft release the GIL), in
        order, with a progress bar.  Parallelism is over images, so BLAS/OpenMP and OpenCV are held to
        one thread per worker (no oversubscription; :func:`~kernels.image.descriptors.one_opencv_thread`).
        The threads take up to :data:`MAP_CHUNK` items per task (at least four tasks per thread): one
        future per image made thousands of futures up front, about half a second of the GIL at the start
        of the visual-words pass."""
        bar = None
        if self.show_progress and len(items) > 1:
            bar = tqdm(total=len(items), desc=desc, unit="img", leave=False)
        out = []
        try:
            with threadpool_limits(limits=1), one_opencv_thread():
                if self.n_jobs == 1 or len(items) <= 1:
                    results = ([fn(item)] for item in items)
                    pool = None
                else:
                    pool = ThreadPoolExecutor(max_workers=self.n_jobs)
                    size = max(1, min(MAP_CHUNK, len(items) // (4 * self.n_jobs)))   # 4+ tasks per thread
                    chunks = [items[i:i + size] for i in range(0, len(items), size)]
                    results = pool.map(lambda chunk: [fn(item) for item in chunk], chunks)
                try:
                    for rs in results:
                        out.extend(rs)
                        if bar is not None:
                            bar.update(len(rs))
                finally:
                    if pool is not None:
                        pool.shutdown(cancel_futures=True)
        finally:
            if bar is not None:
                bar.close()
        return out

    def fit(self, corpus, train_ids: Sequence[str], share_words_with: "ImageKernel | None" = None,
            words_for: Sequence[str] = ()) -> "ImageKernel":
        """Fit the codebooks on descriptors of (a seeded sample of) ``train_ids`` — or of the images of
        ``codebook_dir`` when given (the paper's source, Sec. 3.3) — and compute the training images' words.

        ``share_words_with``: another fitted kernel (e.g. the histogram kernel next to the pyramid one)
        whose in-memory visual words are reused when they are provably the same — same corpus,
        descriptor parameters, features and codebooks — instead of being read back from the cache.

        ``words_for``: more images (e.g. the dev and test pools') whose visual words are computed in the
        same pass as the training images', ``n_jobs`` images at a time, instead of by the first Gram
        rows that need them.  The words are the same either way; a caller that reads those images' rows
        a small block at a time (the nearest-neighbour baseline) would otherwise extract them a block at
        a time, with the cores idle between blocks.

        Up to ``codebook_images`` training (or folder) images are drawn with ``seed``; from each, up to
        ``samples_per_image[f]`` descriptors per feature are sampled (per-image seeds, so the result does
        not depend on thread scheduling); at most ``max_codebook_samples`` of those per feature go to
        seeded k-means (:func:`~kernels.image.codebook.fit_codebook`).
        """
        train_ids = tuple(train_ids)
        if not train_ids:
            raise ValueError("train_ids is empty")
        self.corpus_ = corpus
        self.train_ids_ = train_ids
        self._words = {}
        self.release_rows()
        self._forget_words_context()
        self._desc_memo = {}
        if self.codebook_dir is not None:
            self._codebook_source = codebook_folder_identity(self.codebook_dir)
        books = self._cached_codebooks()
        missing = [f for f in self.features if f not in books]
        if missing:
            books.update(self._fit_missing_codebooks(train_ids, missing))
        self.codebooks_ = {f: books[f] for f in self.features}
        self._digests = None
        self._share_words(corpus, share_words_with)
        try:
            self._ensure_words(train_ids + tuple(words_for))
        finally:
            self._desc_memo = {}
        return self

    def codebooks_cached(self, corpus, train_ids: Sequence[str]) -> bool:
        """Whether :meth:`fit` on ``train_ids`` would find every codebook in the cache (their entries
        present; contents are checked when read), i.e. sample no descriptors and run no k-means.  A caller
        can then tell a cold fit, which keeps the cores busy for a while, from a warm one."""
        if not self.cache.enabled:
            return False
        self.corpus_, self.train_ids_ = corpus, tuple(train_ids)
        if self.codebook_dir is not None:
            self._codebook_source = codebook_folder_identity(self.codebook_dir)
        return all(self.cache.path("image_codebook", self._codebook_key(f)).is_file() for f in self.features)

    def _cached_codebooks(self) -> dict[str, np.ndarray]:
        """The codebooks already in the cache, ``{feature: centres}``."""
        books: dict[str, np.ndarray] = {}
        for f in self.features:
            hit = self.cache.load("image_codebook", self._codebook_key(f))
            if hit is not None:
                self.cache.count(hits=1)
                books[f] = hit["centres"]
        return books

    def _fit_missing_codebooks(self, train_ids: tuple[str, ...], missing: list[str]) -> dict[str, np.ndarray]:
        """Sample the codebook images' descriptors, fit the ``missing`` features' codebooks and cache them."""
        rng = np.random.default_rng(self.seed)
        # the codebook images: a seeded sample of the folder's images, or of the training images
        folder = self.codebook_dir is not None
        pool_ = codebook_folder_images(self.codebook_dir) if folder else list(train_ids)
        pick = tuple(pick_codebook_images(pool_, self.codebook_images, rng))
        seeds = rng.integers(0, 2**63 - 1, size=len(pick))
        # The codebook images' full descriptors (every feature's) are kept up to DESCRIPTOR_MEMO_BYTES
        # and reused by _ensure_words instead of re-extracting them: extraction is
        # deterministic, so the words are identical either way.
        memo = _MemoBudget(self._desc_memo)
        Xs = self._sample_codebook_descriptors(pick, seeds, missing, memo)
        fitted = self._fit_codebooks(Xs, missing, train_ids, memo)
        books: dict[str, np.ndarray] = {}
        for f in missing:
            books[f] = fitted[f]
            self.cache.count(misses=int(self.cache.enabled))
            self.cache.store("image_codebook", self._codebook_key(f), {"centres": books[f]})
        return books

    def _sample_codebook_descriptors(self, pick, seeds, missing: list[str],
                                     memo: "_MemoBudget") -> dict[str, np.ndarray]:
        """The descriptors k-means clusters, ``{feature: (rows, dim)}`` for the ``missing`` features."""
        folder = self.codebook_dir is not None

        def sample(args):
            # Every feature's descriptors are extracted and sampled, in self.features order from one
            # generator per image, and only the missing features' samples kept: a feature's sample
            # (hence its codebook) is then the same whether it is fitted alone (e.g. one cache entry
            # rebuilt) or with the others.
            image_id, s = args
            pixels = read_image(image_id) if folder else self._load(image_id)
            desc = extract_descriptors(pixels, self.descriptor_params, self.features)
            r = np.random.default_rng(int(s))
            if not folder:   # a training image's descriptors give its words below
                memo.keep(image_id, desc)
            drawn = {f: sample_rows(desc[f][0], self.samples_per_image[f], r) for f in self.features}
            return {f: drawn[f] for f in missing}

        samples = self._map(sample, list(zip(pick, seeds)), "codebook descriptors")
        self.n_extracted_ += len(pick)
        return {f: sample_rows(np.concatenate([s[f] for s in samples], axis=0), self.max_codebook_samples,
                               np.random.default_rng(self.seed + 1)) for f in missing}

    def _fit_codebooks(self, Xs: dict[str, np.ndarray], missing: list[str], train_ids: tuple[str, ...],
                       memo: "_MemoBudget") -> dict[str, np.ndarray]:
        """k-means of each missing feature, ``{feature: centres}``: scikit-learn's one-thread centres on
        every machine (:func:`~kernels.image.codebook.fit_codebook`).

        Up to ``len(missing) + 1`` threads: the features' codebooks are fitted side by side, one thread
        each (the Lloyd loop's compiled assignment step releases the GIL), the costliest first (samples × dimension ×
        words; longest-processing-time order): on two threads SIFT's k-means (≈ 8 s on the teaching set)
        starts first and runs beside texture's and colour's (≈ 3 + 0.6 s) on the other thread.  More
        threads: every codebook's seeding chunks and assignment steps share one pool of ``n_jobs − 1``
        threads (:func:`~kernels.image.lloyd.lloyd_kmeans`, the same centres bit for bit), instead of SIFT's
        k-means holding the stage on one thread while the other threads wait.
        A worker left without a k-means (the last codebook still being fitted, or a single missing
        feature; with the shared pool, one thread of its own) extracts the next training images'
        descriptors into the memo meanwhile, until every codebook is done or the memo is full (extraction
        does not depend on the codebooks).
        """
        order = sorted(missing, key=lambda f: -Xs[f].shape[0] * Xs[f].shape[1] * self.n_words[f])
        with threadpool_limits(limits=1), one_opencv_thread():
            if self.n_jobs == 1:
                return {f: fit_codebook(Xs[f], self.n_words[f], seed=self.seed) for f in order}
            with ExitStack() as stack:
                shared = {}   # up to len(order) + 1 threads: one per k-means and the prefetch, nothing shared
                if self.n_jobs > len(order) + 1:
                    shared = {"n_threads": self.n_jobs - 1, "executor": stack.enter_context(
                        ThreadPoolExecutor(max_workers=self.n_jobs - 1, thread_name_prefix="k-means"))}
                pool = stack.enter_context(ThreadPoolExecutor(max_workers=min(self.n_jobs, len(order) + 1)))
                fits = [pool.submit(fit_codebook, Xs[f], self.n_words[f], seed=self.seed, **shared) for f in order]
                pool.submit(self._prefetch_descriptors, train_ids, fits, memo)
                return {f: fu.result() for f, fu in zip(order, fits)}

    def _prefetch_descriptors(self, train_ids: tuple[str, ...], fits, memo: "_MemoBudget") -> None:
        """Extract training images' descriptors into the memo while k-means runs (see :meth:`_fit_codebooks`)."""
        for image_id in dict.fromkeys(train_ids):
            if all(fu.done() for fu in fits) or memo.full():
                return
            if image_id in self._desc_memo:
                continue
            try:
                desc = extract_descriptors(self._load(image_id), self.descriptor_params, self.features)
            except Exception:  # noqa: BLE001 - _ensure_words meets it again and reports it
                return
            self.n_extracted_ += 1
            if not memo.keep(image_id, desc):
                return

    def _share_words(self, corpus, other: "ImageKernel | None") -> None:
        """Reuse ``other``'s in-memory visual words when they are provably this kernel's (same keys)."""
        if (other is not None and other is not self and getattr(other, "codebooks_", None) is not None
                and other.corpus_ is corpus and tuple(other.features) == tuple(self.features)
                and other._base_key() == self._base_key()
                and other._codebook_digests() == self._codebook_digests()):
            self._words = other._words   # the same words keys: shared, not copied

    def _compact(self, words: np.ndarray) -> np.ndarray:
        dt = np.uint16 if max(self.n_words.values()) <= 65536 else np.int32
        return np.asarray(words).astype(dt)

    def _ensure_words(self, ids: Sequence[str]) -> None:
        """The visual words of ``ids`` in memory (read from the cache, else computed), under the state lock."""
        with self._state_lock:
            self._load_or_compute_words(ids)

    def _load_or_compute_words(self, ids: Sequence[str]) -> None:
        todo = []
        unseen = [i for i in dict.fromkeys(ids) if i not in self._words]
        if self.show_progress and self.cache.enabled and len(unseen) > 200:
            unseen = tqdm(unseen, desc="cached image features", unit="img", leave=False)
        for image_id in unseen:
            hit = self.cache.load("image_words", self._words_key(image_id))
            if hit is not None:
                self._words[image_id] = {f: (self._compact(hit[f]), tuple(int(x) for x in hit[f + "_shape"]))
                                         for f in self.features}
            else:
                todo.append(image_id)
        if not todo:
            return
        if self.executor is not None:
            self._words_on_cluster(todo)
            return

        reused = [0]

        def work(image_id):
            desc = self._desc_memo.pop(image_id, None)
            if desc is None:
                desc = extract_descriptors(self._load(image_id), self.descriptor_params, self.features)
            else:
                reused[0] += 1
            words = {f: (quantise(d, self.codebooks_[f]), shape) for f, (d, shape) in desc.items()}
            arrays = {}
            for f, (w, shape) in words.items():
                arrays[f] = self._compact(w)
                arrays[f + "_shape"] = np.asarray(shape, dtype=np.int64)
            self.cache.store("image_words", self._words_key(image_id), arrays)
            return image_id, {f: (self._compact(w), shape) for f, (w, shape) in words.items()}

        for image_id, words in self._map(work, todo, "image features"):
            self._words[image_id] = words
        self.n_extracted_ += len(todo) - reused[0]

    def _words_on_cluster(self, todo: list[str]) -> None:
        """The visual words of ``todo`` on the executor's Dask workers
        (:func:`kernels.image.blocks.words_on_cluster`; each image's words in its ``image_words`` entry,
        under the in-process path's key).  Their context goes to the workers once per fit, not once per
        call: the corpus alone is about 120 MB pickled at COCO size, and the nearest-neighbour baseline
        asks for its pool images' words 128 images at a time."""
        if self._words_context is None:
            self._words_context = Shared({"corpus": self.corpus_, "params": self.descriptor_params,
                                          "features": self.features, "codebooks": self.codebooks_,
                                          "dtype": self._compact(np.zeros(1)).dtype.str})
        found = words_on_cluster(self.executor, self._words_context, [(i, self._words_key(i)) for i in todo],
                                 self.cache, self.show_progress)
        for image_id, arrays in found.items():
            self._words[image_id] = {f: (self._compact(arrays[f]), tuple(int(x) for x in arrays[f + "_shape"]))
                                     for f in self.features}
        self.n_extracted_ += len(todo)

    # ------------------------------------------------------------------ histograms
    def pyramid_histograms(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """Cell-normalised spatial-pyramid histograms ``{feature: (n, 21·V)}`` float32 (layout and
        normalisation: :mod:`kernels.image.histograms`); the first ``V`` columns are the global
        histogram."""
        return self._histograms(ids, pyramid=True)

    def histograms(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The histograms this kernel compares: ``{feature: (n, 21·V)}`` pyramid histograms for
        ``kind="pyramid"``, ``{feature: (n, V)}`` global histograms ``H_i`` (Eq. 5) for
        ``kind="histogram"`` (the pyramid's first ``V`` columns, bit for bit, without its finer levels)."""
        return self._histograms(ids, pyramid=self.kind == "pyramid")

    def _histograms(self, ids: Sequence[str], pyramid: bool,
                    features: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Pyramid (``pyramid``) or global histograms of ``ids`` for ``features`` (default: all), every
        image on the same grid shape counted together (:func:`~kernels.image.histograms.pyramid_histograms`:
        no loop over images)."""
        self._check_fitted()
        ids = list(ids)
        self._ensure_words(ids)
        out = {}
        for f in self.features if features is None else features:
            V = self.n_words[f]
            H = np.empty((len(ids), n_cells(self.levels) * V if pyramid else V), dtype=np.float32)
            by_shape: dict[tuple[int, int], list[int]] = {}
            for i, image_id in enumerate(ids):   # one grid shape per orientation (landscape / portrait)
                by_shape.setdefault(self._words[image_id][f][1], []).append(i)
            for shape, at in by_shape.items():
                W = np.stack([self._words[ids[i]][f][0] for i in at])
                H[at] = (pyramid_histograms(W, shape, V, self.levels) if pyramid
                         else global_histograms(W, shape, V))
            out[f] = H
        return out

    # ------------------------------------------------------------------ Grams
    def feature_grams(self, rows: Sequence[str], cols: Sequence[str] | None = None, *,
                      by_columns: bool = False) -> dict[str, np.ndarray]:
        """Per-feature Gram matrices ``{feature: (len(rows), len(cols))}`` float32 before combination
        (``K_C``, ``K_T``, ``K_S`` of Eq. 6); ``cols=None`` → ``rows × rows``.

        ``by_columns``: a few ``rows`` against many ``cols`` (e.g. a block of pool images against every
        training image) computed as the transpose of ``cols × rows``, the columns' way
        (:meth:`_columns`): the many histograms are stored by bin once and kept for the next call with the
        same ``cols`` — which a Dask cluster then holds once, instead of receiving them with every call —
        and each entry equals the Gram's bit for bit."""
        self._check_fitted()
        if by_columns and cols is not None:
            grams = self._feature_grams(_as_list(cols), list(rows), columns=True)
            return {f: np.ascontiguousarray(g.T) for f, g in grams.items()}
        cols = None if cols is None else list(cols)
        # a few columns: the low-rank solver's pivot columns (against the kept rows: the list is not copied,
        # so that the next column's call is known to be against the same rows without comparing 10^5 ids)
        return self._feature_grams(_as_list(rows), cols, columns=cols is not None and is_skinny(len(cols)))

    def _feature_grams(self, rows: list[str], cols: list[str] | None, columns: bool) -> dict[str, np.ndarray]:
        """:meth:`feature_grams` by row blocks of the Gram routine, or (``columns``) as columns of the
        kept ``rows`` stored by bin (:meth:`_columns`)."""
        hists: dict[str, dict[str, np.ndarray] | None] = {}   # the columns' histograms (_columns)
        pyramid = self.kind == "pyramid"

        def compute(f: str) -> dict[str, np.ndarray]:
            if columns:
                return {"K": self._columns(rows, cols, f, hists)}
            # each feature's own histograms: the features' Grams may be computed side by side (below), and
            # their histograms then are too (1,400 training images' pyramid histograms: about 0.1 s)
            HR = self._histograms(rows, pyramid, (f,))[f]
            HC = None if cols is None else self._histograms(cols, pyramid, (f,))[f]
            if self.executor is not None:
                return {"K": gram_on_cluster(self.executor, HR, HC, self._gram_key(f, rows, cols), self.cache,
                                             kind=self.kind, n_words=self.n_words[f], levels=self.levels,
                                             backend=self.backend, show_progress=self.show_progress)}
            kw = dict(backend=self.backend, n_threads=self.n_jobs, show_progress=self.show_progress,
                      desc=f"{self.kind} Gram ({f})")
            if self.kind == "pyramid":
                return {"K": pyramid_match_gram(HR, HC, self.n_words[f], self.levels, **kw)}
            return {"K": intersection_gram(HR, HC, **kw)}

        if columns and self.executor is not None:
            # on a cluster the columns are cached as their row blocks (image_gram_rows) by whichever worker
            # computed them; the whole would be the same bytes again (at COCO size 5 GB per decomposition).
            # The features' maps go out together (one round trip, every worker busy), after what they share
            # is built here: the columns' histograms, the kept rows and their digest.
            hists["cols"] = self.histograms(cols)
            self._kept_rows(rows)
            self._rows_digest(rows)
            with ThreadPoolExecutor(max_workers=len(self.features), thread_name_prefix="image-columns") as pool:
                return dict(zip(self.features, pool.map(lambda f: compute(f)["K"], self.features)))
        key = self._column_key if columns else self._gram_key

        def one(f: str) -> np.ndarray:
            return self.cache.get_or_compute("image_gram", key(f, rows, cols), lambda: compute(f))["K"]

        if columns or self.executor is not None or self.n_jobs == 1 or len(self.features) == 1:
            return {f: one(f) for f in self.features}
        # The features' Grams side by side, each on n_jobs threads: a Gram's own setup (its rows' sparse
        # blocks, the transposed columns) is serial, and a few hundred rows make few blocks, so one Gram
        # at a time left cores idle (1,400 training images, 2 threads: 0.34 s alone, 0.25 s side by side).
        with ThreadPoolExecutor(max_workers=min(len(self.features), self.n_jobs),
                                thread_name_prefix="image-grams") as pool:
            return dict(zip(self.features, pool.map(one, self.features)))

    def _columns(self, rows: list[str], cols: list[str], f: str, hists: dict) -> np.ndarray:
        """Feature ``f``'s Gram of many ``rows`` against a few ``cols`` (the low-rank solver's pivot
        columns): the kept rows, stored by bin once, against the columns' histograms
        (:func:`kernels.image.gram.intersection_columns`, entries equal to the Gram's bit for bit), on the
        cluster's workers when there is one."""
        if "cols" not in hists:
            hists["cols"] = self.histograms(cols)
        HC = hists["cols"][f]
        if self.executor is not None:
            return columns_on_cluster(self.executor, self._shared_rows(rows, f), HC, self._column_key(f, rows, cols),
                                      self.cache)
        return intersection_columns(self._transposed_rows(rows, f), HC, self._weights(f), backend=self.backend,
                                    n_threads=self.n_jobs)

    def _weights(self, f: str) -> np.ndarray | None:
        """Feature ``f``'s per-bin weights: the pyramid's ``α`` (Eqs. 7–8), none for Eq. 5."""
        return column_weights(self.kind, self.n_words[f], self.levels)

    def _kept_rows(self, rows: list[str]) -> dict[str, BinRows]:
        """Every feature's weighted histograms of ``rows`` stored by bin (:class:`~kernels.image.gram.BinRows`),
        kept for the next call with the same rows: the low-rank solver asks for one training column after
        another (``feature_grams(train_ids, [pivot])``), and the nearest-neighbour baseline for one block
        of pool images after another, so the training images' histograms are built once, not once per
        call (until :meth:`release_rows`).  Built :data:`KEPT_ROWS_BLOCK` images at a time: the dense
        ``n × 21·V`` histograms (6.1 GB at COCO size) are never held, only the sparse ones (2.4 GB)."""
        with self._rows_lock:
            if not self._are_kept(rows):
                self.release_rows()   # free the previous rows' histograms before building the new ones
                self._rows_memo = (tuple(rows), self._bin_rows(rows, self.features), {}, [])
                self._kept_list = rows
            return self._rows_memo[1]

    def _are_kept(self, rows: list[str]) -> bool:
        """Whether ``rows`` are the kept rows: the same list object as last time (the low-rank solver's
        column source passes one list for every column), else compared id by id (10^5 ids at COCO size)."""
        if self._rows_memo is None:
            return False
        return rows is self._kept_list or self._rows_memo[0] == tuple(rows)

    def _bin_rows(self, rows: list[str], features: Sequence[str]) -> dict[str, BinRows]:
        """``features``' weighted histograms of ``rows`` stored by bin, built :data:`KEPT_ROWS_BLOCK`
        images at a time (not kept)."""
        builders = {f: BinRowsBuilder(self._weights(f)) for f in features}
        for lo in range(0, len(rows), KEPT_ROWS_BLOCK):
            H = self.histograms(rows[lo:lo + KEPT_ROWS_BLOCK])
            for f in features:
                builders[f].add(H.pop(f))
        return {f: b.build() for f, b in builders.items()}

    def _transposed_rows(self, rows: list[str], f: str) -> BinRows:
        """Feature ``f``'s histograms of the kept ``rows``, weighted and stored by bin (:meth:`_kept_rows`;
        in-process: a cluster's columns use :meth:`_shared_rows`)."""
        with self._rows_lock:
            kept = self._kept_rows(rows)
            if f not in kept:   # sent to a cluster earlier (an executor given, then taken away)
                kept[f] = self._bin_rows(rows, [f])[f]
            return kept[f]

    def _shared_rows(self, rows: list[str], feature: str):
        """The ``feature`` rows stored by bin as a cluster context sent once for all the columns computed
        against them (:func:`kernels.image.blocks.shared_rows`).  They leave this process's kept rows: once
        the workers hold them, this process keeps no copy (it rebuilds them from the visual words if the
        cluster ever loses every copy, :meth:`_bin_rows`)."""
        kept = self._kept_rows(rows)
        held = self._rows_memo[2]
        if feature not in held:
            held[feature] = shared_rows(kept.pop(feature), weights=self._weights(feature), backend=self.backend,
                                        rebuild=lambda: self._bin_rows(rows, [feature])[feature])
        return held[feature]

    def _forget_words_context(self) -> None:
        """Let the cluster drop the visual words' context of the last fit (:meth:`_words_on_cluster`)."""
        if self._words_context is not None and self.executor is not None:
            self.executor.forget(self._words_context)
        self._words_context = None

    @property
    def holds_rows(self) -> bool:
        """Whether histograms kept for repeated column requests are held (at COCO size the training
        images' take 2.4 GB; :meth:`release_rows` frees them)."""
        return self._rows_memo is not None

    def release_rows(self) -> None:
        """Forget the histograms kept for repeated column requests (and their copies on the cluster)."""
        with self._rows_lock:
            if self._rows_memo is not None and self.executor is not None:
                for shared in self._rows_memo[2].values():
                    self.executor.forget(shared)
            self._rows_memo = None
            self._kept_list = None

    def feature_diagonals(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        """``{feature: (len(ids),)}`` self-similarities ``K_f(x_i, x_i)`` (the diagonal of
        ``feature_grams(ids)``, Eqs. 5, 7–8) without the ``len(ids)²`` Gram: ``Σ_v x_iv`` of the weighted
        histograms, added in bin order as the Gram's kernel adds ``min(x_iv, x_iv)``, so each entry is
        the full Gram's bit for bit (:meth:`~kernels.image.gram.BinRows.self_intersections`).  ``ids``
        become the kept rows (:meth:`_kept_rows`): the low-rank solver asks for the diagonal, then for
        columns against the same images."""
        self._check_fitted()
        ids = list(ids)
        kept = self._kept_rows(ids)
        # a feature whose rows went to the cluster (_shared_rows) is built again for its diagonal
        return {f: (kept[f] if f in kept else self._bin_rows(ids, [f])[f]).self_intersections()
                for f in self.features}

    def gram(self, rows: Sequence[str], cols: Sequence[str] | None = None) -> np.ndarray:
        """Combined kernel ``K = [(1/|F|) Σ_f K_f]^p`` (Hodosh Eq. 6), float32 ``(len(rows), len(cols))``;
        ``cols=None`` → ``rows × rows``.  Ids are corpus image ids; words of images not seen yet are
        extracted on demand (and cached)."""
        return combine_kernels(self.feature_grams(rows, cols), self.power)

    def __repr__(self) -> str:
        return (f"ImageKernel(kind={self.kind!r}, power={self.power}, features={self.features}, "
                f"n_words={self.n_words}, max_side={self.max_side}, seed={self.seed})")

