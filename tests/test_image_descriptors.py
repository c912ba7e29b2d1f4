"""Descriptors (CIELAB, RFS/MR8, dense SIFT), codebooks, and the full extractor on real JPEGs."""
from __future__ import annotations

import math
import threading
from concurrent.futures import ThreadPoolExecutor

import cv2
import numpy as np
import pytest

from kernels.image.codebook import fit_codebook, quantise
from kernels.image.descriptors import (
    DescriptorParams,
    GridSpec,
    dense_sift,
    extract_descriptors,
    lab_descriptors,
    make_rfs_filters,
    mr8_from_rfs,
    mr8_responses,
    rfs_responses,
    texture_descriptors,
    to_gray,
    weber_normalise,
    working_image,
)


def stripes(theta: float, n: int = 160, period: float = 12.0) -> np.ndarray:
    """Sinusoidal stripes varying along v = x sinθ + y cosθ (x right, y up), grey in [0, 1]."""
    r, c = np.mgrid[0:n, 0:n].astype(np.float64)
    x, y = c - n / 2, -(r - n / 2)
    v = math.sin(theta) * x + math.cos(theta) * y
    return (0.5 + 0.5 * np.sin(2 * np.pi * v / period)).astype(np.float32)


def test_rfs_bank_shapes_and_normalisation():
    F = make_rfs_filters()
    assert F.shape == (38, 49, 49) and F.dtype == np.float32
    np.testing.assert_allclose(F.sum(axis=(1, 2)), 0.0, atol=1e-5)        # zero mean
    np.testing.assert_allclose(np.abs(F).sum(axis=(1, 2)), 1.0, atol=1e-4)  # L1-normalised
    edge, bar = F[:18], F[18:36]
    # edge filters odd, bar filters even, Gaussian / LoG isotropic (symmetric under 90° rotation)
    np.testing.assert_allclose(edge, -edge[:, ::-1, ::-1], atol=1e-7)
    np.testing.assert_allclose(bar, bar[:, ::-1, ::-1], atol=1e-7)
    for k in (36, 37):
        np.testing.assert_allclose(F[k], np.rot90(F[k]), atol=1e-7)
    assert F[37][24, 24] < 0 < F[36][24, 24]  # LoG negative, (zero-mean) Gaussian positive at the centre


def test_rfs_orientations():
    F = make_rfs_filters()
    for base in (0, 6, 12, 18, 24, 30):  # each (type, scale): orientation k=3 is the k=0 filter turned 90°
        a, b = F[base], F[base + 3]
        assert np.allclose(b, np.rot90(a), atol=1e-6) or np.allclose(b, -np.rot90(a), atol=1e-6)
    # θ = 0 filters are elongated along x (σ 3× larger than across): second moments of |f|
    r, c = np.mgrid[-24:25, -24:25]
    for s_idx, base in enumerate((0, 6, 12)):
        w = np.abs(F[base].astype(np.float64))
        vx, vy = (w * c ** 2).sum(), (w * r ** 2).sum()
        assert vx > 2 * vy, (s_idx, vx, vy)
    # the filter matched to stripes at θ_k responds most strongly to them
    for k in range(6):
        resp = rfs_responses(stripes(math.pi * k / 6) - 0.5)
        centre = np.abs(resp[:, 50:110, 50:110]).mean(axis=(1, 2))
        assert centre[6:12].argmax() == k      # edge, σ = 2
        assert centre[24:30].argmax() == k     # bar, σ = 2


def test_mr8_rotation_invariance():
    base = stripes(0.3)
    # exact: rotating the image by 90° rotates the MR8 maps (bank orientations are closed under 90°)
    m = mr8_responses(base)
    m90 = mr8_responses(np.ascontiguousarray(np.rot90(base)))
    np.testing.assert_allclose(m90, np.rot90(m), atol=2e-3)
    # stripes turned by multiples of 30°: same mean MR8 response in the centre
    means = [mr8_responses(stripes(math.pi * k / 6, period=20.0))[50:110, 50:110].mean(axis=(0, 1))
             for k in range(6)]
    for k in range(1, 6):
        np.testing.assert_allclose(means[k][:6], means[0][:6], rtol=0.2)
    for k in (2, 4, 5):  # 30° vs 60°/120°/150°: equal up to sampling of the filters
        np.testing.assert_allclose(means[k][:6], means[1][:6], rtol=0.02)
    # without orientation pooling the responses are far from invariant
    raw = [np.abs(rfs_responses(stripes(math.pi * k / 6, period=20.0) - 0.5)[6, 50:110, 50:110]).mean()
           for k in (0, 3)]
    assert raw[0] > 5 * raw[1]


def test_mr8_shape_and_weber():
    rng = np.random.default_rng(0)
    g = cv2.GaussianBlur(rng.random((64, 80)).astype(np.float32), (0, 0), 1.5)
    m = mr8_responses(g)
    assert m.shape == (64, 80, 8) and m.dtype == np.float32
    raw = mr8_responses(g, weber=False)
    L = np.linalg.norm(raw, axis=-1)
    np.testing.assert_allclose(np.linalg.norm(m, axis=-1), np.log1p(L / 0.03), rtol=1e-4)
    # MR8 of an affine-transformed image is the same (zero-mean unit-variance normalisation)
    np.testing.assert_allclose(mr8_responses(3 * g + 7), m, atol=1e-3)
    assert np.all(weber_normalise(np.zeros((3, 8))) == 0)
    resp = np.arange(38 * 2, dtype=np.float32).reshape(38, 1, 2) - 40
    assert mr8_from_rfs(resp).shape == (8, 1, 2)


def test_sampled_texture_equals_full_mr8_at_grid_points():
    rng = np.random.default_rng(1)
    for h, w in ((192, 256), (256, 170)):   # landscape, portrait with a non-integer grid step
        rgb = cv2.GaussianBlur((rng.random((h, w, 3)) * 255).astype(np.uint8), (0, 0), 1.2)
        d, shape = texture_descriptors(rgb, GridSpec(64, 48))
        iy, ix, _ = GridSpec(64, 48).pixel_index(h, w)
        full = mr8_responses(to_gray(rgb))
        assert d.shape == (64 * 48, 8)
        np.testing.assert_allclose(d, full[iy, ix], atol=1e-5)


def test_texture_scratch_reuse_is_bit_exact():
    """The filter bank's product with an image spectrum lives in a scratch buffer reused on each thread:
    images of other sizes in between, and two threads at once, give the bits of a fresh buffer."""
    rng = np.random.default_rng(2)
    images = [cv2.GaussianBlur((rng.random((h, w, 3)) * 255).astype(np.uint8), (0, 0), 1.2)
              for h, w in ((192, 256), (96, 128), (256, 170), (60, 300), (192, 256))]
    grid = GridSpec(32, 24)

    def on_new_thread(rgb):   # a thread of its own: no scratch buffer yet
        out = []
        t = threading.Thread(target=lambda: out.append(texture_descriptors(rgb, grid)[0]))
        t.start()
        t.join()
        return out[0]

    fresh = [on_new_thread(im) for im in images]
    one_thread = [texture_descriptors(im, grid)[0] for im in images]
    with ThreadPoolExecutor(max_workers=2) as pool:
        two_threads = list(pool.map(lambda im: texture_descriptors(im, grid)[0], images * 3))
    for k, (got, ref) in enumerate(zip(two_threads + one_thread, fresh * 3 + fresh)):
        assert got.shape == ref.shape and np.array_equal(got.view(np.uint32), ref.view(np.uint32)), k


def test_lab_scaling_and_grid():
    img = np.zeros((48, 64, 3), np.uint8)
    img[:, :32] = (255, 255, 255)
    img[:, 32:] = (255, 0, 0)
    lab, shape = lab_descriptors(img, GridSpec(8, 4))
    assert shape == (4, 8) and lab.shape == (32, 3)
    white, red = lab[0], lab[-1]
    np.testing.assert_allclose(white, [100, 0, 0], atol=0.5)
    np.testing.assert_allclose(red, [53.2, 80.1, 67.2], atol=0.7)  # sRGB red in CIELAB (D65)
    # portrait images get the long grid axis vertically
    assert GridSpec(8, 4).shape(64, 48) == (8, 4)
    with pytest.raises(ValueError, match="multiple"):
        GridSpec(10, 4).check(3)


def test_working_image_and_dense_sift():
    rng = np.random.default_rng(0)
    img = cv2.GaussianBlur((rng.random((375, 500, 3)) * 255).astype(np.uint8), (0, 0), 2)
    w = working_image(img, 256)
    assert w.shape == (192, 256, 3) and w.dtype == np.uint8
    d, shape = dense_sift(w, GridSpec(32, 24))
    assert shape == (24, 32) and d.shape == (768, 128) and d.dtype == np.float32
    assert np.all(d >= 0) and np.all(np.linalg.norm(d, axis=1) > 0)
    with pytest.raises(ValueError, match="RGB"):
        working_image(np.zeros((10, 10), np.uint8))
    all_d = extract_descriptors(img, DescriptorParams())
    assert {f: v[0].shape for f, v in all_d.items()} == {"color": (3072, 3), "texture": (3072, 8),
                                                         "sift": (768, 128)}


def test_codebook_determinism_and_quantisation():
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.1, size=(200, 3)) for c in (0, 5, 10)]).astype(np.float32)
    a = fit_codebook(X, 3, seed=7)
    b = fit_codebook(X, 3, seed=7)
    assert np.array_equal(a, b)
    assert sorted(np.round(a[:, 0]).astype(int)) == [0, 5, 10]
    words = quantise(X, a)
    assert words.dtype == np.int32 and len(np.unique(words)) == 3
    assert all(len(np.unique(words[i * 200:(i + 1) * 200])) == 1 for i in range(3))
    c = fit_codebook(rng.random((300, 4)).astype(np.float32), 8, seed=1)
    d = fit_codebook(rng.random((300, 4)).astype(np.float32), 8, seed=1)
    assert not np.array_equal(c, d)   # different data → different codebook
    with pytest.raises(ValueError, match="n_words=1000"):
        fit_codebook(X, 1000)
    # brute-force nearest centre
    ref = np.argmin(((X[:, None, :] - a[None]) ** 2).sum(-1), axis=1)
    assert np.array_equal(words, ref)


def test_quantise_is_the_argmin_of_centre_norm_minus_twice_the_product():
    """quantise scales and shifts the product in place: the distances are ||c||² − 2 x·c bit for bit,
    so the words are those of the plain expression, ties (repeated centres) to the lowest index."""
    rng = np.random.default_rng(3)
    for n, k, c in [(3072, 3, 128), (3072, 8, 256), (768, 128, 256), (5, 4, 1)]:
        X = rng.random((n, k), dtype=np.float32)
        C = rng.random((c, k), dtype=np.float32)
        if c > 2:
            C[c // 2] = C[1]   # a tie: the lower index wins
            X[0] = C[1]
        cc = np.einsum("ij,ij->i", C, C)
        ref = np.argmin(cc[None, :] - 2.0 * (X @ C.T), axis=1)
        assert np.array_equal(quantise(X, C), ref)
        if c > 2:
            assert quantise(X, C)[0] == 1


def test_real_jpegs_full_extractor(flickr8k_dir, tmp_path):
    from corpora.base import Corpus
    from corpora.cache import DiskCache
    from corpora.images import read_image
    from kernels.image import ImageKernel

    folder = flickr8k_dir / "Flicker8k_Dataset"
    paths = sorted(folder.glob("*.jpg"))
    if len(paths) < 6:
        pytest.skip(f"fewer than 6 JPEGs in {folder}")
    ids = [p.name for p in paths]
    by_id = dict(zip(ids, paths))
    corpus = Corpus(name="jpegs", image_ids=ids, captions={}, splits={"train": ids[:-3], "test": ids[-3:]},
                    image_loader=lambda i: read_image(by_id[i]), image_paths=by_id)
    ik = ImageKernel(kind="pyramid", power=2, n_words={"color": 16, "texture": 16, "sift": 16},
                     cache=DiskCache(tmp_path / "c"), show_progress=False, samples_per_image={"sift": 64})
    ik.fit(corpus, corpus.split("train"))
    K = ik.gram(corpus.split("train"))
    Kt = ik.gram(corpus.split("test"), corpus.split("train"))
    assert K.shape == (len(ids) - 3, len(ids) - 3) and Kt.shape == (3, len(ids) - 3)
    assert K.dtype == np.float32 and np.isfinite(K).all() and np.isfinite(Kt).all()
    np.testing.assert_allclose(np.diag(K), 1.0, atol=1e-4)
    assert (K < 1 - 1e-3)[~np.eye(len(K), dtype=bool)].all() and K.min() > 0
    H = ik.histograms(ids[:2])
    assert H["sift"].shape == (2, 21 * 16)
    img = read_image(paths[0])
    desc = extract_descriptors(img)
    assert desc["sift"][0].shape == (768, 128) and np.isfinite(desc["texture"][0]).all()
