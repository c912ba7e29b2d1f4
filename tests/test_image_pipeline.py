"""ImageKernel end to end: teaching-set colour words, caching (reuse, kill-safe writes, corruption)."""
from __future__ import annotations

import os

import numpy as np
import pytest

from corpora.base import Caption, Corpus
from corpora.cache import DiskCache
from kernels.image import ImageKernel

SMALL = {"color": 8, "texture": 8, "sift": 8}


def synthetic_corpus(n: int = 10, name: str = "synthetic") -> Corpus:
    """Deterministic images: a coloured background, a coloured rectangle and a striped patch."""
    ids = [f"img{i:02d}" for i in range(n)]

    def load(image_id: str) -> np.ndarray:
        rng = np.random.default_rng(int(image_id[3:]))
        h, w = 72, 96
        img = np.empty((h, w, 3), np.uint8)
        img[:] = rng.integers(0, 256, 3)
        y, x = rng.integers(0, h // 2), rng.integers(0, w // 2)
        img[y:y + h // 3, x:x + w // 3] = rng.integers(0, 256, 3)
        period = int(rng.integers(3, 9))
        rows = (np.arange(h) // period) % 2 == 0
        img[rows, w // 2:] = rng.integers(0, 256, 3)
        return img

    return Corpus(name=name, image_ids=ids, captions={}, splits={"train": ids[: n - 3], "test": ids[n - 3:]},
                  image_loader=load)


def make_kernel(cache, **kw) -> ImageKernel:
    args = dict(kind="pyramid", power=2, n_words=SMALL, max_side=96, cache=cache, show_progress=False,
                samples_per_image={"sift": 64})
    args.update(kw)
    return ImageKernel(**args)


def test_api_shapes_and_on_demand_extraction(tmp_cache):
    corpus = synthetic_corpus()
    ik = make_kernel(tmp_cache).fit(corpus, corpus.split("train"))
    tr, te = list(corpus.split("train")), list(corpus.split("test"))
    # the codebook images' descriptors are kept and reused for their words: each image extracted once
    assert ik.n_extracted_ == len(tr)
    K = ik.gram(tr)
    assert K.shape == (7, 7) and K.dtype == np.float32 and np.array_equal(K, K.T)
    np.testing.assert_allclose(np.diag(K), 1.0, atol=1e-5)
    Kt = ik.gram(te, tr)                     # test images extracted on demand
    assert Kt.shape == (3, 7) and ik.n_extracted_ == len(tr) + len(te)
    Fg = ik.feature_grams(te, tr)
    assert set(Fg) == {"color", "texture", "sift"}
    np.testing.assert_allclose(Kt, ((Fg["color"] + Fg["texture"] + Fg["sift"]) / 3) ** 2, rtol=1e-5)
    H = ik.histograms(te)
    assert {f: h.shape for f, h in H.items()} == {f: (3, 21 * 8) for f in SMALL}
    hk = make_kernel(tmp_cache, kind="histogram", features=("color", "sift"), power=3).fit(corpus, tr)
    assert {f: h.shape for f, h in hk.histograms(te).items()} == {"color": (3, 8), "sift": (3, 8)}
    # not ik's cache entry (other features fitted with it), but the same sample: colour is drawn first
    assert np.array_equal(hk.codebooks_["color"], ik.codebooks_["color"])
    with pytest.raises(RuntimeError, match="not fitted"):
        make_kernel(None).gram(tr)
    with pytest.raises(ValueError, match="kind"):
        ImageKernel(kind="spm")
    with pytest.raises(ValueError, match="unknown feature"):
        ImageKernel(features=("colour",))


def test_codebooks_deterministic_under_seed():
    corpus = synthetic_corpus(8)
    tr = corpus.split("train")
    a = make_kernel(None, seed=3).fit(corpus, tr).codebooks_
    b = make_kernel(None, seed=3).fit(corpus, tr).codebooks_
    c = make_kernel(None, seed=4).fit(corpus, tr).codebooks_
    serial = make_kernel(None, seed=3, n_jobs=1).fit(corpus, tr).codebooks_   # codebooks fitted one by one
    parallel = make_kernel(None, seed=3, n_jobs=3).fit(corpus, tr).codebooks_  # side by side on threads
    assert all(np.array_equal(a[f], b[f]) for f in a)
    assert all(np.array_equal(serial[f], parallel[f]) and np.array_equal(a[f], serial[f]) for f in a)
    assert any(not np.array_equal(a[f], c[f]) for f in a)


def test_cache_reuse_without_recomputation(tmp_cache, monkeypatch):
    corpus = synthetic_corpus()
    tr = corpus.split("train")
    K1 = make_kernel(tmp_cache).fit(corpus, tr).gram(tr)
    import kernels.image.codebook as cb
    import kernels.image.kernel as km

    def boom(*a, **k):
        raise AssertionError("recomputed although cached")

    monkeypatch.setattr(km, "extract_descriptors", boom)
    monkeypatch.setattr(km, "fit_codebook", boom)
    monkeypatch.setattr(km, "pyramid_match_gram", boom)
    monkeypatch.setattr(cb, "fit_codebook", boom)
    ik2 = make_kernel(tmp_cache).fit(corpus, tr)
    hits = tmp_cache.hits
    K2 = ik2.gram(tr)
    assert ik2.n_extracted_ == 0 and tmp_cache.hits == hits + 3  # three feature Grams read back
    assert np.array_equal(K1, K2)
    # a different parameter is a different key: it must recompute (and here, fail loudly)
    with pytest.raises(AssertionError, match="recomputed"):
        make_kernel(tmp_cache, seed=1).fit(corpus, tr)


def _file_corpus(folder, captions: str) -> Corpus:
    """The synthetic images as PNG files in ``folder`` (written once), with captions ``captions``."""
    import cv2

    base = synthetic_corpus()
    paths = {}
    for im in base.image_ids:
        paths[im] = folder / f"{im}.png"
        if not paths[im].exists():
            assert cv2.imwrite(str(paths[im]), base.load_image(im)[:, :, ::-1])
    caps = {im: (Caption(id=f"{im}#0", image_id=im, index=0, text=f"{captions} {im}"),) for im in base.image_ids}

    def load(image_id):
        return cv2.imread(str(paths[image_id]), cv2.IMREAD_COLOR)[:, :, ::-1].copy()

    return Corpus(name="files", image_ids=base.image_ids, captions=caps, splits=base.splits,
                  image_loader=load, image_paths=paths)


def test_image_cache_keyed_by_the_pixels_not_the_captions(tmp_path, tmp_cache):
    """Editing captions keeps cached image features valid; replacing one image file recomputes that
    image only (its words and the Grams it enters), nothing else."""
    folder = tmp_path / "images"
    folder.mkdir()
    a = _file_corpus(folder, "a dog")
    tr, te = a.split("train"), a.split("test")
    ik = make_kernel(tmp_cache).fit(a, tr)
    K_a = ik.gram(te, tr)
    assert ik.n_extracted_ == len(tr) + len(te)
    b = _file_corpus(folder, "two cats")                      # other captions: other corpus fingerprint
    assert b.fingerprint != a.fingerprint and b.images_fingerprint(tr) == a.images_fingerprint(tr)
    ik_b = make_kernel(tmp_cache).fit(b, tr)
    assert np.array_equal(ik_b.gram(te, tr), K_a) and ik_b.n_extracted_ == 0
    # replace one test image (new pixels, new modification time): only it is extracted again
    import cv2

    target = folder / f"{te[0]}.png"
    img = cv2.imread(str(target))
    cv2.imwrite(str(target), 255 - img)
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    c = _file_corpus(folder, "two cats")
    assert c.image_signature(te[0]) != b.image_signature(te[0])
    assert c.image_signature(te[1]) == b.image_signature(te[1])
    ik_c = make_kernel(tmp_cache).fit(c, tr)
    K_c = ik_c.gram(te, tr)
    assert ik_c.n_extracted_ == 1
    assert np.array_equal(K_c[1:], K_a[1:]) and not np.array_equal(K_c[0], K_a[0])
    # a missing file has its own signature (never a stale hit)
    d = _file_corpus(folder, "x")
    target.unlink()
    assert d.image_signature(te[0]) == f"missing:{target.name}"


def test_interrupted_write_leaves_no_valid_entry_and_corruption_recomputes(tmp_path, monkeypatch):
    import corpora.cache as cache_mod

    corpus = synthetic_corpus()
    tr = corpus.split("train")
    cache = DiskCache(tmp_path / "cache")
    ik = make_kernel(cache).fit(corpus, tr)
    key = ik._gram_key("color", list(tr), None)

    class Killed(BaseException):
        pass

    real_fsync = os.fsync

    def killed_fsync(fd):  # payload partly on disk, process dies before the rename
        raise Killed()

    monkeypatch.setattr(cache_mod.os, "fsync", killed_fsync)
    with pytest.raises(Killed):
        ik.gram(tr)
    monkeypatch.setattr(cache_mod.os, "fsync", real_fsync)
    gram_dir = tmp_path / "cache" / "image_gram"
    assert cache.load("image_gram", key) is None
    assert not list(gram_dir.glob("*.npz")) and not list(gram_dir.glob("*.tmp"))
    # a stray temporary file from a SIGKILL is never read as an entry
    gram_dir.mkdir(parents=True, exist_ok=True)
    (gram_dir / (cache.path("image_gram", key).stem + ".abc.tmp")).write_bytes(b"PK\x03\x04 partial")
    assert cache.load("image_gram", key) is None

    K = ik.gram(tr)                                    # fresh run computes and stores
    path = cache.path("image_gram", key)
    assert path.is_file()
    blob = path.read_bytes()
    path.write_bytes(blob[: len(blob) // 2])           # truncated entry
    misses = cache.misses
    ik2 = make_kernel(cache).fit(corpus, tr)
    K2 = ik2.gram(tr)
    assert np.array_equal(K, K2)
    assert cache.load("image_gram", key) is not None   # rewritten
    assert cache.misses == misses + 1                   # only the corrupted colour Gram was recomputed


def test_teaching_set_colour_words(small_teaching_set):
    ts = small_teaching_set
    ids = list(ts.image_ids)
    ik = ImageKernel(kind="histogram", features=("color",), n_words={"color": 32}, max_side=160,
                     show_progress=False, codebook_images=60).fit(ts, ts.split("train"))
    K = ik.feature_grams(ids)["color"]
    cs = [(ts.scenes[i].background, frozenset(o.colour for o in ts.scenes[i].objects)) for i in ids]
    same, diff = [], []
    for a in range(len(ids)):
        for b in range(a + 1, len(ids)):
            if cs[a] == cs[b]:
                same.append(K[a, b])
            elif cs[a][0] != cs[b][0] and not (cs[a][1] & cs[b][1]):
                diff.append(K[a, b])
    same, diff = np.array(same), np.array(diff)
    assert len(same) >= 10 and len(diff) >= 100
    assert same.mean() > 5 * diff.mean()
    auc = (same[:, None] > diff[None, :]).mean()
    assert auc > 0.9, auc


def test_histogram_kernel_shares_the_pyramid_kernels_words(tmp_cache):
    """Two kinds over the same corpus, descriptors and codebooks reuse one set of visual words in memory;
    the Grams equal those of an independently fitted kernel; different codebooks are never shared."""
    corpus = synthetic_corpus(8)
    tr = corpus.split("train")
    pyr = make_kernel(tmp_cache).fit(corpus, tr)
    hist = make_kernel(tmp_cache, kind="histogram").fit(corpus, tr, share_words_with=pyr)
    alone = make_kernel(None, kind="histogram").fit(corpus, tr)
    assert hist._words is pyr._words
    test = corpus.split("test")
    for f, K in hist.feature_grams(test, tr).items():
        np.testing.assert_array_equal(K, alone.feature_grams(test, tr)[f])
    other = make_kernel(tmp_cache, kind="histogram", seed=5).fit(corpus, tr, share_words_with=pyr)
    assert other._words is not pyr._words


def test_codebook_descriptor_reuse_gives_the_same_words(tmp_path, monkeypatch):
    """Reusing the codebook images' descriptors for their words (ImageKernel.fit) changes nothing but
    the number of extractions: same words, same Gram as with the memo disabled."""
    import kernels.image.kernel as kmod
    from corpora.cache import DiskCache

    corpus = synthetic_corpus()
    tr = list(corpus.split("train"))
    a = make_kernel(DiskCache(tmp_path / "a")).fit(corpus, tr)
    monkeypatch.setattr(kmod, "DESCRIPTOR_MEMO_BYTES", 0)
    b = make_kernel(DiskCache(tmp_path / "b")).fit(corpus, tr)
    assert a.n_extracted_ == len(tr) and b.n_extracted_ == 2 * len(tr)
    assert not a._desc_memo and not b._desc_memo          # nothing held after fit
    for i in tr:
        for f in a.features:
            assert np.array_equal(a._words[i][f][0], b._words[i][f][0]) and a._words[i][f][1] == b._words[i][f][1]
    np.testing.assert_array_equal(a.gram(tr), b.gram(tr))


def test_idle_worker_prefetches_descriptors_during_kmeans(monkeypatch):
    """While the codebooks are fitted, a free worker extracts the other training images' descriptors into
    the memo: every image is still extracted exactly once, and the words equal a serial fit's."""
    import threading
    import time

    import kernels.image.kernel as kmod

    corpus = synthetic_corpus(12)
    tr = list(corpus.split("train"))
    calls, lock = [], threading.Lock()
    real_extract, real_fit = kmod.extract_descriptors, kmod.fit_codebook

    def counting_extract(*args, **kwargs):
        with lock:
            calls.append(threading.current_thread().name)
        return real_extract(*args, **kwargs)

    memo_sizes = []

    def slow_fit(X, k, seed):  # a k-means that lasts until the other training images are in the memo
        deadline = time.monotonic() + 10
        while len(ik._desc_memo) < len(tr) and time.monotonic() < deadline:
            time.sleep(0.01)
        memo_sizes.append(len(ik._desc_memo))
        return real_fit(X, k, seed=seed)

    monkeypatch.setattr(kmod, "extract_descriptors", counting_extract)
    monkeypatch.setattr(kmod, "fit_codebook", slow_fit)
    ik = make_kernel(None, codebook_images=3, n_jobs=4)   # 3 k-means + the prefetch on 4 workers
    ik.fit(corpus, tr)
    assert memo_sizes == [len(tr)] * 3                              # filled while the k-means ran
    assert len(calls) == len(tr) and ik.n_extracted_ == len(tr)   # the 3 codebook images + 6 prefetched
    monkeypatch.setattr(kmod, "fit_codebook", real_fit)
    serial = make_kernel(None, codebook_images=3, n_jobs=1).fit(corpus, tr)
    assert len(calls) == 2 * len(tr)                                 # serial: no prefetch, each image once
    for f in ik.features:
        assert np.array_equal(ik.codebooks_[f], serial.codebooks_[f])
        for i in tr:
            assert np.array_equal(ik._words[i][f][0], serial._words[i][f][0])


def test_many_threads_share_one_assignment_pool_and_give_the_serial_codebooks(monkeypatch):
    """With more threads than codebooks + 1, every codebook's k-means sends its assignment steps to one
    shared pool of n_jobs - 1 threads (the prefetch keeps a thread of its own); the codebooks and words
    are the serial fit's, bit for bit."""
    import kernels.image.kernel as kmod

    corpus = synthetic_corpus(12)
    tr = list(corpus.split("train"))
    seen = []
    real_fit = kmod.fit_codebook

    def recording_fit(X, k, seed, n_threads=1, executor=None):
        seen.append((n_threads, executor))
        return real_fit(X, k, seed=seed, n_threads=n_threads, executor=executor)

    monkeypatch.setattr(kmod, "fit_codebook", recording_fit)
    many = make_kernel(None, n_words={"color": 16, "texture": 16, "sift": 16}, n_jobs=6).fit(corpus, tr)
    assert len(seen) == 3 and {n for n, _ in seen} == {5} and len({id(e) for _, e in seen}) == 1
    assert seen[0][1] is not None and seen[0][1]._max_workers == 5
    seen.clear()
    serial = make_kernel(None, n_words={"color": 16, "texture": 16, "sift": 16}, n_jobs=1).fit(corpus, tr)
    assert seen == [(1, None)] * 3
    for f in many.features:
        assert np.array_equal(many.codebooks_[f], serial.codebooks_[f])
        for i in tr:
            assert np.array_equal(many._words[i][f][0], serial._words[i][f][0])


def test_one_rebuilt_codebook_equals_the_one_fitted_with_the_others(tmp_path):
    """A codebook rebuilt alone (its cache entry lost or corrupt, the others read back) is the one fitted
    together with the other features: each feature's descriptor sample does not depend on which other
    features were being fitted."""
    import json

    corpus = synthetic_corpus()
    tr = corpus.split("train")
    few = {"color": 16, "texture": 16, "sift": 16}   # every feature draws from the per-image generator
    cache = DiskCache(tmp_path / "c")
    first = make_kernel(cache, samples_per_image=few).fit(corpus, tr).codebooks_
    for lost in ("color", "sift"):
        entries = list((tmp_path / "c" / "image_codebook").rglob("*.npz"))
        assert len(entries) == 3
        for p in entries:
            with np.load(p) as z:
                if json.loads(str(z["__key__"]))["feature"] == lost:
                    p.unlink()
        again = make_kernel(cache, samples_per_image=few).fit(corpus, tr).codebooks_
        for f in first:
            np.testing.assert_array_equal(again[f], first[f], err_msg=f"{f} after rebuilding {lost}")


def test_codebook_cache_is_keyed_by_the_features_fitted_together(tmp_path):
    """Each image's descriptors are sampled feature after feature from one generator, so a feature's
    codebook depends on the features fitted with it: a kernel must not be served the codebook another
    feature set left in a shared cache."""
    corpus = synthetic_corpus()
    tr = corpus.split("train")
    alone = make_kernel(None, features=("texture",)).fit(corpus, tr).codebooks_["texture"]
    together = make_kernel(None).fit(corpus, tr).codebooks_["texture"]
    assert not np.array_equal(alone, together)   # the premise: different samples
    cache = DiskCache(tmp_path / "c")
    make_kernel(cache, features=("texture",)).fit(corpus, tr)
    np.testing.assert_array_equal(make_kernel(cache).fit(corpus, tr).codebooks_["texture"], together)
    np.testing.assert_array_equal(make_kernel(cache, features=("texture",)).fit(corpus, tr).codebooks_["texture"],
                                  alone)
    # the features drawn before it: how many rows they take changes the generator's state too
    fewer_colour = {"color": 16, "sift": 64}
    fresh = make_kernel(None, samples_per_image=fewer_colour).fit(corpus, tr).codebooks_["texture"]
    assert not np.array_equal(fresh, together)
    np.testing.assert_array_equal(
        make_kernel(cache, samples_per_image=fewer_colour).fit(corpus, tr).codebooks_["texture"], fresh)


def test_codebooks_cached_tells_a_cold_fit_from_a_warm_one(tmp_cache):
    """``codebooks_cached`` is what the main job's warm-up asks: False before a fit (and with no cache),
    True once the fit has stored its codebooks, False again for another seed."""
    corpus = synthetic_corpus()
    tr = corpus.split("train")
    assert not make_kernel(tmp_cache).codebooks_cached(corpus, tr)
    make_kernel(tmp_cache).fit(corpus, tr)
    assert make_kernel(tmp_cache).codebooks_cached(corpus, tr)
    assert not make_kernel(tmp_cache, seed=1).codebooks_cached(corpus, tr)
    assert not make_kernel(None).codebooks_cached(corpus, tr)


def test_pool_rows_serve_single_image_rows_unchanged(tmp_cache):
    """A pool's Gram rows against the training images give the single-image rows of the KCCA caption
    metric (the human judgments grade the dev and test pool images) without computing them again, and
    they are bit-for-bit the rows computed image by image."""
    from kcca.kernel_store import ImageKernelEntry, RowsKey

    corpus = synthetic_corpus()
    tr, te = list(corpus.split("train")), list(corpus.split("test"))
    ik = make_kernel(tmp_cache).fit(corpus, tr)
    alone = {i: ik.feature_grams([i], tr) for i in te}
    entry = ImageKernelEntry(kernel=ik, train_ids=tuple(tr))
    entry.rows("test", te[:2], 2)
    at_pivots = entry.rows("test", te[:3], 2, columns=[4, 0])   # the low-rank path's rows, two columns only
    whole = entry.rows("test", te[:3], 2)
    assert at_pivots.shape == (3, 2) and np.array_equal(at_pivots, whole[:, [4, 0]])
    entry.feature_grams.pop(RowsKey("test", tuple(te[:3])))            # only the pivot-column rows know te[2]
    calls = []
    real = ik.feature_grams

    def counted(rows, cols=None):
        calls.append(list(rows))
        return real(rows, cols)

    ik.feature_grams = counted
    got = entry.image_feature_rows([te[1], te[2], te[0]])
    assert calls == [[te[2]]]                     # only the image outside the pool is computed
    for k, i in enumerate([te[1], te[2], te[0]]):
        for f in ik.features:
            assert np.array_equal(got[f][k], alone[i][f][0])


def test_gram_rows_are_not_held_up_while_the_kept_rows_are_built(tmp_cache, monkeypatch):
    """One thread storing the training histograms by bin (the nearest-neighbour baseline's kept rows) does
    not stop another from computing a Gram of the same kernel, which needs only the visual words; the
    features' Grams, each computed from its own feature's histograms, are the serial kernel's."""
    import threading

    corpus = synthetic_corpus()
    tr, te = list(corpus.split("train")), list(corpus.split("test"))
    ik = make_kernel(None, n_jobs=2).fit(corpus, tr)
    serial = make_kernel(None, n_jobs=1).fit(corpus, tr)
    inside, release = threading.Event(), threading.Event()
    real_bin_rows = ik._bin_rows

    def slow_bin_rows(rows, features):
        inside.set()
        assert release.wait(30)
        return real_bin_rows(rows, features)

    monkeypatch.setattr(ik, "_bin_rows", slow_bin_rows)
    builder = threading.Thread(target=lambda: ik.feature_grams(te[:1], tr, by_columns=True))
    builder.start()
    try:
        assert inside.wait(30)
        done: dict = {}
        worker = threading.Thread(target=lambda: done.update(t=ik.feature_grams(tr), h=ik.histograms(te)))
        worker.start()
        worker.join(30)
        assert not worker.is_alive(), "the Gram waited for the kept rows"
    finally:
        release.set()
        builder.join(30)
    for got, want in ((done["t"], serial.feature_grams(tr)), (done["h"], serial.histograms(te))):
        assert set(got) == set(want) and all(np.array_equal(got[f], want[f]) for f in want)
