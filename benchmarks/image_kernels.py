"""Benchmark of the image side (Hodosh et al. 2013, Sec. 3.3): feature extraction and image Grams.

Measured on generated images at Flickr8k resolution (500 × 375; no Flickr8k images ship here):

* ``images_per_s`` – colour + texture (MR8) + dense SIFT extraction **and** quantisation against the
  paper-size codebooks (128 / 256 / 256 words), through ``ImageKernel`` with all threads
  (``images_per_s_1thread`` with one);
* ``pyramid_gram_8000_s`` – the full combined pyramid Gram ``[(K_C + K_T + K_S)/3]^2`` for 8,000 images
  (3 features × 21 cells; train × train, symmetric).  Extracting 8,000 generated images would take
  minutes, so by default the 8,000 word grids are *resampled* from the extracted ones: each synthetic
  image takes a base image's word grid and replaces a random 30–70 % of its grid points by the words
  at the same points of another image, which keeps the sparsity of real cell histograms
  (``--extract-all`` extracts every image instead);
* ``naive_gram_subset_s`` vs ``fast_gram_subset_s`` – plain numpy broadcasting
  (``np.minimum(X[:, None], Y[None]).sum(-1)``) vs :func:`kernels.image.gram.intersection_gram` on the
  same subset of the concatenated level-weighted pyramid histograms (``speedup``), plus the numpy
  fallback of the fast algorithm (``fast_numpy_gram_subset_s``);
* ``peak_rss_mb`` – peak resident memory of the process;
* ``cpu_s_per_image`` and ``images_per_s_idle_estimate`` (= threads / CPU seconds per image): the
  extraction cost independent of other processes sharing the machine (``load_average_at_start``).

``python benchmarks/image_kernels.py --json`` prints one JSON object; ``--quick`` runs a smaller version
(extraction on 24 images, a 4,000-image Gram extrapolated to 8,000, 200-image naive subset) in under
a minute.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import emit, peak_rss_mb  # noqa: E402
from corpora.base import Corpus  # noqa: E402
from kernels.image import ImageKernel  # noqa: E402
from kernels.image.gram import (  # noqa: E402
    combine_kernels,
    intersection_columns,
    intersection_gram,
    intersection_naive,
    pyramid_match_gram,
    transposed_rows,
)
from kernels.image.histograms import pyramid_column_weights, pyramid_histogram  # noqa: E402
from kernels.threads import default_threads  # noqa: E402


def generated_image(seed: int, h: int = 375, w: int = 500) -> np.ndarray:
    """A deterministic 'natural-looking' image: smooth colour field, a few coloured shapes, textured
    patches (stripes, checks, noise) and sensor noise."""
    rng = np.random.default_rng(seed)
    field = rng.integers(0, 256, size=(3, 4, 3)).astype(np.float32)
    img = cv2.resize(field, (w, h), interpolation=cv2.INTER_CUBIC)
    for _ in range(rng.integers(2, 6)):
        colour = rng.integers(0, 256, 3).tolist()
        cx, cy = int(rng.integers(0, w)), int(rng.integers(0, h))
        if rng.random() < 0.5:
            cv2.ellipse(img, (cx, cy), (int(rng.integers(15, 120)), int(rng.integers(15, 90))),
                        float(rng.uniform(0, 180)), 0, 360, colour, -1)
        else:
            cv2.rectangle(img, (cx, cy), (cx + int(rng.integers(20, 160)), cy + int(rng.integers(20, 120))),
                          colour, -1)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for _ in range(rng.integers(1, 4)):
        y0, x0 = int(rng.integers(0, h - 60)), int(rng.integers(0, w - 60))
        ph, pw = int(rng.integers(40, 150)), int(rng.integers(40, 200))
        sl = (slice(y0, y0 + ph), slice(x0, x0 + pw))
        th, period = rng.uniform(0, np.pi), rng.uniform(4, 20)
        kind = rng.integers(0, 3)
        if kind == 0:
            pat = np.sin(2 * np.pi * (np.cos(th) * xx[sl] + np.sin(th) * yy[sl]) / period)
        elif kind == 1:
            pat = np.sign(np.sin(2 * np.pi * xx[sl] / period) * np.sin(2 * np.pi * yy[sl] / period))
        else:
            pat = rng.normal(size=xx[sl].shape).astype(np.float32)
        img[sl] += (40 * pat)[..., None] * rng.uniform(0.5, 1.5, 3).astype(np.float32)
    img += rng.normal(0, 4, size=img.shape).astype(np.float32)
    return np.clip(img, 0, 255).astype(np.uint8)


def make_corpus(n: int, seed0: int = 0) -> Corpus:
    ids = [f"gen_{i:05d}" for i in range(n)]
    return Corpus(name=f"generated-{n}-{seed0}", image_ids=ids, captions={}, splits={"train": ids},
                  image_loader=lambda i: generated_image(seed0 + int(i[4:])))


def resample_words(words: list[dict], n: int, rng: np.random.Generator) -> list[dict]:
    """``n`` synthetic word grids mixing pairs of extracted ones (see module docstring)."""
    out = []
    for _ in range(n):
        a, b = words[rng.integers(len(words))], words[rng.integers(len(words))]
        frac = rng.uniform(0.3, 0.7)
        new = {}
        for f, (wa, shape) in a.items():
            wb, shape_b = b[f]
            if shape_b != shape:
                wb = wb[rng.permutation(len(wb))] if len(wb) == len(wa) else wa
            take = rng.random(len(wa)) < frac
            new[f] = (np.where(take, wb, wa), shape)
        out.append(new)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (< 1 minute)")
    ap.add_argument("--n-gram", type=int, default=None,
                    help="images in the full Gram (default 8000; 4000 with --quick)")
    ap.add_argument("--n-extract", type=int, default=None,
                    help="images whose features are timed (default 200; 24 with --quick)")
    ap.add_argument("--n-naive", type=int, default=None,
                    help="subset size for the naive comparison (default 500; 200 with --quick)")
    ap.add_argument("--extract-all", action="store_true", help="extract every Gram image (slow)")
    ap.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    args = ap.parse_args(argv)

    n_gram = args.n_gram or (4000 if args.quick else 8000)
    n_extract = args.n_extract or (24 if args.quick else 200)
    n_naive = args.n_naive or (200 if args.quick else 500)
    threads = args.threads or default_threads()
    log = (lambda *a: None) if args.json else (lambda *a: print(*a, flush=True))
    res: dict = {"load_average_at_start": [round(x, 2) for x in os.getloadavg()], "threads": threads, "n_gram": n_gram, "n_extract": n_extract, "n_naive": n_naive,
                 "quick": bool(args.quick), "image_size": [500, 375]}

    # ---------------------------------------------------------------- codebooks (paper sizes)
    n_words = {"color": 128, "texture": 256, "sift": 256}
    cb_corpus = make_corpus(40 if args.quick else 120, seed0=10_000_000)
    t = time.perf_counter()
    ik = ImageKernel(kind="pyramid", power=2, n_words=n_words, show_progress=False, n_jobs=threads)
    ik.fit(cb_corpus, cb_corpus.image_ids)
    res["codebook_fit_s"] = round(time.perf_counter() - t, 2)
    log(f"codebooks fitted on {len(cb_corpus.image_ids)} images in {res['codebook_fit_s']} s")

    # ---------------------------------------------------------------- extraction speed
    corpus = make_corpus(n_extract)
    images = {i: corpus.load_image(i) for i in corpus.image_ids}     # generation not timed
    corpus.image_loader = images.__getitem__
    for n_jobs, key in ((1, "images_per_s_1thread"), (threads, "images_per_s")):
        if n_jobs == 1 and args.quick and threads > 1:
            ids = corpus.image_ids[: max(8, n_extract // 3)]
        else:
            ids = corpus.image_ids
        ik.corpus_, ik.n_jobs, ik._words = corpus, n_jobs, {}
        t, c = time.perf_counter(), time.process_time()
        ik._ensure_words(ids)
        dt, cpu = time.perf_counter() - t, time.process_time() - c
        res[key] = round(len(ids) / dt, 2)
        if n_jobs == threads:
            # CPU seconds per image do not depend on how busy the machine is; with the work spread over
            # `threads` otherwise idle cores the rate would be threads / cpu_s_per_image.
            res["cpu_s_per_image"] = round(cpu / len(ids), 4)
            res["images_per_s_idle_estimate"] = round(threads / (cpu / len(ids)), 1)
        log(f"extraction + quantisation, {n_jobs} thread(s): {res[key]} images/s ({len(ids)} images, "
            f"{cpu / len(ids) * 1000:.1f} ms CPU per image)")
    res["flickr8k_8091_extraction_min"] = round(8091 / res["images_per_s"] / 60, 2)
    extracted = [ik._words[i] for i in corpus.image_ids]

    # ---------------------------------------------------------------- histograms for the Gram
    rng = np.random.default_rng(0)
    if args.extract_all:
        big = make_corpus(n_gram, seed0=20_000_000)
        ik.corpus_, ik.n_jobs, ik._words = big, threads, {}
        ik._ensure_words(big.image_ids)
        grids = [ik._words[i] for i in big.image_ids]
        res["gram_histograms"] = "extracted"
    else:
        grids = resample_words(extracted, n_gram, rng)
        res["gram_histograms"] = "resampled from extracted word grids"
    H = {}
    for f, V in n_words.items():
        H[f] = np.stack([pyramid_histogram(g[f][0], g[f][1], V) for g in grids])
    res["mean_nnz_per_image"] = int(sum((h != 0).sum() for h in H.values()) / n_gram)
    res["bins_per_image"] = int(sum(h.shape[1] for h in H.values()))
    log(f"{n_gram} pyramid histograms: {res['bins_per_image']} bins, {res['mean_nnz_per_image']} non-zero")

    # ---------------------------------------------------------------- full combined pyramid Gram
    t = time.perf_counter()
    acc = None
    for f in n_words:
        K = pyramid_match_gram(H[f], n_words=n_words[f], n_threads=threads, show_progress=not args.json)
        if acc is None:
            acc = K
        else:
            acc += K
            del K
    acc *= np.float32(1 / 3)                       # (K_C + K_T + K_S) / 3, summed in place
    Kc = combine_kernels([acc], power=2, out=acc)  # Eq. 6 with p = 2, in place
    dt = time.perf_counter() - t
    res["pyramid_gram_s"] = round(dt, 2)
    if n_gram == 8000:
        res["pyramid_gram_8000_s"] = round(dt, 2)
    else:  # quick runs: quadratic extrapolation, flagged
        res[f"pyramid_gram_{n_gram}_s"] = round(dt, 2)
        res["pyramid_gram_8000_s"] = round(dt * (8000 / n_gram) ** 2, 2)
        res["pyramid_gram_8000_extrapolated"] = True
    res["gram_diag_max_dev"] = float(np.abs(np.diag(Kc) - 1).max())
    log(f"combined pyramid Gram {n_gram} × {n_gram}: {dt:.2f} s (max |diag − 1| {res['gram_diag_max_dev']:.1e})"
        + ("" if n_gram == 8000 else f"; 8000 × 8000 extrapolated (quadratic): {res['pyramid_gram_8000_s']} s"))
    del acc, Kc

    # ---------------------------------------------------------------- low-rank pivot columns
    # one pivot column of the training Gram (the low-rank solver's unit of work) per feature: the rows
    # stored by bin once (transposed_rows, intersection_columns) against the same column through the Gram routine
    t = time.perf_counter()
    XT = {f: transposed_rows(H[f], pyramid_column_weights(n_words[f])) for f in n_words}
    res["columns_transpose_once_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    cols = {f: intersection_columns(XT[f], H[f][[0]], pyramid_column_weights(n_words[f]), n_threads=threads)
            for f in n_words}
    res["pivot_column_s"] = round(time.perf_counter() - t, 4)
    t = time.perf_counter()
    ref = {f: pyramid_match_gram(H[f], H[f][[0]].copy(), n_words=n_words[f], n_threads=threads) for f in n_words}
    res["pivot_column_via_gram_s"] = round(time.perf_counter() - t, 4)
    res["pivot_column_equal"] = all(np.array_equal(cols[f], ref[f]) for f in n_words)
    log(f"one pivot column of {n_gram} rows (3 features): {res['pivot_column_s']} s after a one-off by-bin store "
        f"of {res['columns_transpose_once_s']} s, {res['pivot_column_via_gram_s']} s through the Gram routine, "
        f"equal: {res['pivot_column_equal']}")
    del XT, cols, ref

    # ---------------------------------------------------------------- naive vs fast on a subset
    X = np.concatenate([H[f][:n_naive] * pyramid_column_weights(n_words[f]) for f in n_words], axis=1)
    t = time.perf_counter()
    Kn = intersection_naive(X)
    res["naive_gram_subset_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    Kf = intersection_gram(X, n_threads=threads)
    res["fast_gram_subset_s"] = round(time.perf_counter() - t, 3)
    t = time.perf_counter()
    Kp = intersection_gram(X, n_threads=threads, backend="numpy")
    res["fast_numpy_gram_subset_s"] = round(time.perf_counter() - t, 3)
    res["subset_max_abs_diff"] = float(max(np.abs(Kn - Kf).max(), np.abs(Kn - Kp).max()))
    res["speedup"] = round(res["naive_gram_subset_s"] / max(res["fast_gram_subset_s"], 1e-9), 1)
    res["naive_gram_8000_extrapolated_s"] = round(res["naive_gram_subset_s"] * (8000 / n_naive) ** 2, 1)
    log(f"subset {n_naive} × {n_naive} (3 features concatenated): naive {res['naive_gram_subset_s']} s, "
        f"fast {res['fast_gram_subset_s']} s (×{res['speedup']}), fast/numpy {res['fast_numpy_gram_subset_s']} s, "
        f"max |diff| {res['subset_max_abs_diff']:.1e}")
    from kernels.image import native

    res["compiled_kernel"] = native.load() is not None
    res["peak_rss_mb"] = round(peak_rss_mb(), 1)
    log(f"peak RSS {res['peak_rss_mb']} MB")
    if args.json:
        emit(res, True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
