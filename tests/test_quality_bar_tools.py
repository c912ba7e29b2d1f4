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
