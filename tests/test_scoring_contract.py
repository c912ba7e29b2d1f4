"""The scoring contract at the bottom of the import graph (corpora/scoring.py)."""
from __future__ import annotations

import numpy as np
import pytest

from corpora.scoring import (
    FunctionScorer, PairScorer, ScoreMatrices, affinity_gold_ranks, borda, gold_ranks, rank_metrics,
)
from evaluation import evaluate, text_metric


def test_gold_ranks_are_pessimistic_and_count_ties():
    S = np.array([[0.5, 0.5, 0.1], [0.9, 0.2, 0.2], [0.3, 0.3, 0.3]], np.float32)
    ranks, tied = gold_ranks(S, np.array([0, 2, 1]), return_ties=True)
    # row 0: gold tied with one other -> rank 2; row 1: tied with col 1, one above -> 3; row 2: all tied -> 3
    np.testing.assert_array_equal(ranks, [2, 3, 3])
    np.testing.assert_array_equal(tied, [1, 1, 2])


def test_rank_metrics_match_the_evaluator_and_both_tasks_share_one_rank_rule():
    rng = np.random.default_rng(3)
    S = rng.integers(0, 5, (40, 40)).astype(np.float32)        # many ties
    gold = rng.permutation(40)
    res = evaluate(S, gold, ks=(1, 5, 10))
    m = rank_metrics(gold_ranks(S, gold), (1, 5, 10))
    for key in ("R@1", "R@5", "R@10", "median_rank", "mean_rank"):
        assert m[key] == res.metrics[key]
    ra, rs = affinity_gold_ranks(S, gold, np.argsort(gold))
    np.testing.assert_array_equal(ra, res.ranks)
    np.testing.assert_array_equal(rs, evaluate(S.T, np.argsort(gold)).ranks)
    with pytest.raises(ValueError, match="NaN"):
        gold_ranks(np.full((2, 2), np.nan), np.array([0, 1]))


def test_pair_scorer_protocol_and_function_scorer():
    fs = FunctionScorer(lambda ims, c, r: np.arange(len(c), dtype=float), identity={"v": 1}, name="idx")
    assert isinstance(fs, PairScorer)
    np.testing.assert_array_equal(fs(["a", "b"], ["x", "y"], [[], []]), [0.0, 1.0])
    assert fs.identity == {"v": 1}
    tm = text_metric(lambda c, r: np.zeros(len(c)))
    assert isinstance(tm, PairScorer) and tm.identity is None
    assert not isinstance(lambda a, b, c: None, PairScorer)      # a bare function has no identity


def test_borda_keeps_score_matrices_per_task():
    a = ScoreMatrices.from_affinity(np.array([[3.0, 2.0, 1.0]]))
    b = ScoreMatrices.from_affinity(np.array([[1.0, 3.0, 2.0]]))
    fused = borda([a, b])
    np.testing.assert_array_equal(fused.annotation, [[2.0, 3.0, 1.0]])
    assert fused.search.shape == (3, 1)


def test_generated_corpus_protocol_tells_the_teaching_set_from_a_plain_corpus():
    from corpora import GeneratedCorpus
    from corpora.base import Caption, Corpus
    from corpora.teaching import make_teaching_set

    assert isinstance(make_teaching_set(n_images=60, n_train=40, n_dev=10, seed=0), GeneratedCorpus)
    cap = Caption(id="a.jpg#0", image_id="a.jpg", index=0, text="a dog")
    plain = Corpus(name="plain", image_ids=["a.jpg"], captions={"a.jpg": (cap,)},
                   splits={"train": ["a.jpg"], "dev": [], "test": []})
    assert not isinstance(plain, GeneratedCorpus)


def test_jsonable_writes_plain_json_data():
    import json
    from pathlib import Path

    from corpora.jsondata import jsonable

    obj = {1: (np.int64(2), np.float32(0.5), np.bool_(True)), "a": np.arange(3), "p": Path("/x"),
           "bad": [float("nan"), np.float64(np.inf)]}
    out = jsonable(obj)
    assert out["1"] == [2, 0.5, True] and out["a"] == [0, 1, 2] and out["p"] == "/x"
    assert type(out["1"][2]) is bool and type(out["1"][0]) is int
    assert np.isnan(out["bad"][0]) and jsonable(obj, nonfinite_as_null=True)["bad"] == [None, None]
    json.dumps(jsonable(obj, nonfinite_as_null=True), allow_nan=False)      # strict JSON
