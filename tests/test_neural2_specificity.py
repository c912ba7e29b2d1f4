"""Specificity rate (SPECS Eqs. 1–2) on a hand-built scorer with hand-computed expected rates."""
from __future__ import annotations

import numpy as np
import pytest

from neural.specificity import build_specificity_texts, pairwise_score_fn, specificity_rate

TRUTH = {0: {"red", "circle", "grass"}, 1: {"blue", "square", "sand"}}
STOP = {"a", "the", "on", "of", "near", "left"}


def _img(k: int) -> np.ndarray:
    return np.full((4, 4, 3), k, dtype=np.uint8)


def word_scorer(images, texts):
    """+1 per content word true of the image, -1 per content word false of it."""
    out = []
    for im, t in zip(images, texts):
        truth = TRUTH[int(im[0, 0, 0])]
        words = [w for w in t.lower().replace(".", " ").split() if w not in STOP]
        out.append(sum(1 if w in truth else -1 for w in words))
    return np.array(out, dtype=np.float32)


UNITS = [["a red circle", "on the grass", "near a tree"], ["a blue square", "on the sand"]]
NEGS = ["left of a blue square", ["on the sand", "of a red circle"]]


def test_texts_are_cumulative():
    owners, texts, steps = build_specificity_texts(UNITS, NEGS)
    assert texts[:3] == ["a red circle", "a red circle on the grass", "a red circle on the grass near a tree"]
    assert texts[3] == "a red circle left of a blue square"
    assert owners.count(0) == 6 and owners.count(1) == 4
    assert sum(1 for s in steps if s[3] == "pos") == 3 and sum(1 for s in steps if s[3] == "neg") == 5


def test_specificity_rate_hand_computed():
    # image 0: scores c1=2, c2=3 (up: ok), c3=2 ("tree" false: down: fail) -> pos 1/2;
    #          negatives add "blue square" (-2) at each of 3 steps -> neg 3/3
    # image 1: c1=2, c2=3 -> pos 1/1; negatives per step: "+sand" 3 > 2 (fail), "+red circle" 1 < 3 (ok) -> 1/2
    calls = []

    def fn(images, texts):
        calls.append(len(texts))
        return word_scorer(images, texts)

    sr = specificity_rate(fn, [_img(0), _img(1)], UNITS, NEGS)
    assert calls == [10]  # one call with every pair
    assert sr["SR_pos"] == pytest.approx(2 / 3)
    assert sr["SR_neg"] == pytest.approx(4 / 5)
    assert sr["SR_pos_macro"] == pytest.approx(0.75)
    assert sr["SR_neg_macro"] == pytest.approx(0.75)
    assert sr["n_pos_steps"] == 3 and sr["n_neg_steps"] == 5


def test_constant_scorer_is_not_specific():
    sr = specificity_rate(lambda ims, ts: np.zeros(len(ts)), [_img(0), _img(1)], UNITS, NEGS)
    assert sr["SR_pos"] == 0.0 and sr["SR_neg"] == 0.0  # ties are failures


def test_bad_inputs():
    with pytest.raises(ValueError, match="negative_units"):
        specificity_rate(word_scorer, [_img(0), _img(1)], UNITS, NEGS[:1])
    with pytest.raises(ValueError, match=r"negative_units\[1\]"):
        specificity_rate(word_scorer, [_img(0), _img(1)], UNITS, ["x", ["a", "b", "c"]])
    with pytest.raises(ValueError, match="returned 1 scores"):
        specificity_rate(lambda i, t: np.zeros(1), [_img(0), _img(1)], UNITS, NEGS)


def test_pairwise_adapter_uses_score_matrix_once_per_distinct_image():
    class MatrixScorer:
        def __init__(self):
            self.shapes = []

        def score_matrix(self, images, captions):
            self.shapes.append((len(images), len(captions)))
            return np.stack([word_scorer([im] * len(captions), captions) for im in images])

    sc = MatrixScorer()
    sr = specificity_rate(pairwise_score_fn(sc), [_img(0), _img(1)], UNITS, NEGS)
    assert sc.shapes == [(2, 10)]
    assert sr["SR_pos"] == pytest.approx(2 / 3) and sr["SR_neg"] == pytest.approx(4 / 5)
