"""benchmarks/quality_bar.py ``--n-train``: a paired cut of the training split (no systems are trained here)."""
from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def qb(benchmark_module):
    return benchmark_module("quality_bar")


@pytest.fixture(scope="module")
def ts():
    from corpora.teaching import make_teaching_set
    return make_teaching_set(n_images=60, n_train=30, n_dev=15, seed=3)


def test_first_train_cuts_only_the_training_split(qb, ts):
    cut = qb.first_train(ts, 12)
    assert cut.splits["train"] == ts.splits["train"][:12]
    assert cut.splits["dev"] == ts.splits["dev"] and cut.splits["test"] == ts.splits["test"]
    assert cut.fixed_pools == ts.fixed_pools and cut.captions == ts.captions
    # the original is untouched
    assert len(ts.splits["train"]) == 30
    # text caches see the cut, deterministically; image caches do not
    assert cut.fingerprint != ts.fingerprint
    assert cut.fingerprint == qb.first_train(ts, 12).fingerprint != qb.first_train(ts, 13).fingerprint
    im = ts.splits["test"][0]
    assert cut.image_signature(im) == ts.image_signature(im)
    np.testing.assert_array_equal(cut.load_image(im), ts.load_image(im))
    # the ground truth still works on the copy
    caps = [c.id for c in ts.captions[im]]
    np.testing.assert_array_equal(cut.judge_relevance([im], caps), ts.judge_relevance([im], caps))


def test_first_train_whole_split_and_bad_sizes(qb, ts):
    assert qb.first_train(ts, None) is ts
    assert qb.first_train(ts, 30) is ts
    for bad in (0, 31, -1):
        with pytest.raises(ValueError, match="30 images"):
            qb.first_train(ts, bad)


def test_ordering_test_pairs_fixed_queries_and_per_image_pool_means(qb):
    from evaluation.significance import paired_randomization_test

    rng = np.random.default_rng(0)
    n = 40
    base = [rng.random(n) for _ in range(6)]          # fixed pool + 5 caption pools, 40 images
    # a beats b by 0.2 on the fixed pool; on the caption pools only on average over the pools of an image
    a = [base[0] + 0.2] + [x + (0.5 if k % 2 else -0.4) for k, x in enumerate(base[1:])]
    b = [x.copy() for x in base]
    p_fixed, p_mean = qb.ordering_test(a, b, n_resamples=2000, seed=1)
    # the fixed pool: a constant positive difference on every query -> every reassignment is smaller
    assert p_fixed < 0.01
    # the pool mean is tested on per-image means over the five pools (one unit per image), not on 200 queries
    ma, mb = np.mean(a[1:], axis=0), np.mean(b[1:], axis=0)
    assert p_mean == paired_randomization_test(ma, mb, "mean", n_resamples=2000, seed=1).pvalue
    assert p_mean < 0.01                               # per image: +0.5 +(-0.4) +0.5 +(-0.4) +0.5 = +0.14
    # no difference at all -> p = 1; the test is symmetric in a and b
    assert qb.ordering_test(b, b, n_resamples=500) == (1.0, 1.0)
    assert qb.ordering_test(a, b, n_resamples=2000, seed=1) == qb.ordering_test(b, a, n_resamples=2000, seed=1)
    # noise around zero on the fixed pool is not significant
    noisy = [base[0] + rng.normal(0, 0.3, n)] + b[1:]
    assert qb.ordering_test(noisy, b, n_resamples=2000)[1] == 1.0
    with pytest.raises(ValueError, match="caption pool"):
        qb.ordering_test(a[:1], b[:1])
