"""Ranking metrics, ScoreMatrices, evaluate_pool and Borda fusion (Hodosh et al. 2013, Sec. 4.1.3 / 4.3)."""
from __future__ import annotations

import numpy as np
import pytest

from corpora.base import RankingPool
from evaluation import (
    RankingResult,
    ScoreMatrices,
    borda,
    borda_points,
    evaluate,
    evaluate_pool,
    fuse,
    pessimistic_order,
)


def test_hand_computed_metrics_with_ties():
    # 3 queries × 4 candidates
    S = np.array([
        [0.9, 0.1, 0.5, 0.3],   # gold 0 -> rank 1
        [0.2, 0.8, 0.8, 0.1],   # gold 2, tied with col 1 (non-relevant) -> pessimistic rank 2
        [0.4, 0.4, 0.4, 0.4],   # constant row, gold 3 -> rank 4 (3 ties)
    ], dtype=np.float32)
    gold = np.array([0, 2, 3])
    rel = np.array([
        [1, 0, 1, 0],           # r=2: order 0,2,3,1 -> top2 = {0,2} -> Rprec 1
        [0, 0, 1, 0],           # r=1: order 1,2,... -> top1 = {1} -> 0
        [1, 0, 0, 1],           # r=2: pessimistic order: nonrel 1,2 first -> 0
    ], dtype=bool)
    res = evaluate(S, gold, rel, ks=(1, 2, 3))
    assert isinstance(res, RankingResult)
    np.testing.assert_array_equal(res.ranks, [1, 2, 4])
    np.testing.assert_array_equal(res.tied_with_gold, [0, 1, 3])
    assert res.n_ties == 2
    assert res.metrics["R@1"] == pytest.approx(100 / 3)
    assert res.metrics["R@2"] == pytest.approx(200 / 3)
    assert res.metrics["R@3"] == pytest.approx(200 / 3)
    assert res.metrics["median_rank"] == 2.0
    assert res.metrics["mean_rank"] == pytest.approx(7 / 3)
    # S@k: q0 first relevant at 1; q1 at 2; q2 relevant items after the 2 non-relevant ties -> 3
    np.testing.assert_array_equal(res.success[1], [True, False, False])
    np.testing.assert_array_equal(res.success[2], [True, True, False])
    np.testing.assert_array_equal(res.success[3], [True, True, True])
    assert res.metrics["S@2"] == pytest.approx(200 / 3)
    np.testing.assert_allclose(res.r_precision, [1.0, 0.0, 0.0])
    assert res.metrics["R-precision"] == pytest.approx(100 / 3)
    assert set(res.metrics) == {"R@1", "R@2", "R@3", "median_rank", "mean_rank", "S@1", "S@2", "S@3",
                                "R-precision"}
    np.testing.assert_array_equal(res.per_query("R@2"), res.hits[2])


def test_default_keys_without_relevance():
    S = np.eye(12)
    res = evaluate(S, np.arange(12))
    assert set(res.metrics) == {"R@1", "R@5", "R@10", "median_rank", "mean_rank"}
    assert res.metrics["R@1"] == 100.0 and res.metrics["median_rank"] == 1.0
    assert res.success is None and res.r_precision is None and res.n_ties == 0


def test_rank_matches_bruteforce_random():
    rng = np.random.default_rng(0)
    S = rng.integers(0, 4, size=(50, 30)).astype(np.float32)  # many ties
    S[0, :10] = -np.inf                                        # masked candidates are allowed
    S[1, :] = -np.inf
    gold = rng.integers(0, 30, size=50)
    rel = rng.random((50, 30)) < 0.2
    rel[np.arange(50), gold] = True
    res = evaluate(S, gold, rel, ks=(1, 3, 7))
    for q in range(50):
        # explicit pessimistic ordering: python sort with key (−score, class)
        cls = [2 if j == gold[q] else (1 if rel[q, j] else 0) for j in range(30)]
        order = sorted(range(30), key=lambda j: (-S[q, j], cls[j], j))
        assert pessimistic_order(S[q:q + 1], rel[q:q + 1], gold[q:q + 1])[0].tolist() == order
        assert res.ranks[q] == order.index(gold[q]) + 1
        first_rel = next(i for i, j in enumerate(order) if rel[q, j]) + 1
        for k in (1, 3, 7):
            assert res.success[k][q] == (first_rel <= k)
        r = rel[q].sum()
        assert res.r_precision[q] == pytest.approx(rel[q, order[:r]].mean())


def test_integer_and_boolean_scores_match_float():
    """Any numeric dtype is accepted, so every metric must agree with the same scores as floats
    (negating an unsigned or boolean matrix would wrap around or fail)."""
    rng = np.random.default_rng(7)
    S = rng.integers(0, 4, (40, 12)).astype(np.uint8)
    S[0] = [0, 3, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0]
    gold = rng.integers(0, 12, 40)
    rel = rng.random((40, 12)) < 0.25
    rel[np.arange(40), gold] = True
    ref = evaluate(S.astype(np.float64), gold, rel).metrics
    for dtype in (np.uint8, np.uint16, np.int8, np.int64):
        assert evaluate(S.astype(dtype), gold, rel).metrics == ref
    B = S >= 2
    assert evaluate(B, gold, rel).metrics == evaluate(B.astype(np.float32), gold, rel).metrics
    one = evaluate(np.array([[0, 3, 2, 1]], np.uint8), [1], np.array([[0, 1, 1, 0]], bool)).metrics
    assert one["R-precision"] == 100.0


def test_int64_scores_beyond_float64_precision_keep_their_order():
    """Above 2^53 float64 rounds neighbouring integers together; ranking, the pessimistic order and
    Borda must still tell 2^53 + 1 from 2^53, as ``evaluate`` does."""
    big = 2 ** 53
    S = np.array([[big + 1, big, big - 7], [big, big + 1, big + 1]], dtype=np.int64)
    assert evaluate(S, [0, 0]).ranks.tolist() == [1, 3]
    np.testing.assert_array_equal(pessimistic_order(S, None, [0, 0]), [[0, 1, 2], [1, 2, 0]])
    np.testing.assert_array_equal(borda([S]), [[3, 2, 1], [1, 3, 3]])
    small = S - (big - 10)                        # the same order where float64 is exact
    np.testing.assert_array_equal(borda([S, S]), borda([small, small]))
    np.testing.assert_array_equal(pessimistic_order(S), pessimistic_order(small))


def test_bad_inputs_give_clear_errors():
    S = np.random.default_rng(0).random((3, 4))
    with pytest.raises(ValueError, match="gold must have shape"):
        evaluate(S, [0, 1])
    with pytest.raises(ValueError, match="gold indices"):
        evaluate(S, [0, 1, 4])
    bad = S.copy()
    bad[1, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        evaluate(bad, [0, 1, 2])
    with pytest.raises(ValueError, match="relevance shape"):
        evaluate(S, [0, 1, 2], relevance=np.ones((3, 5), bool))
    rel = np.zeros((3, 4), bool)
    rel[[0, 1], [0, 1]] = True
    with pytest.raises(ValueError, match="empty relevance set"):
        evaluate(S, [0, 1, 2], relevance=rel)
    rel[2, 3] = True
    with pytest.raises(ValueError, match="gold item is not marked relevant"):
        evaluate(S, [0, 1, 2], relevance=rel)
    with pytest.raises(ValueError, match="2-D"):
        evaluate(S[0], [0])
    with pytest.raises(ValueError, match="ks"):
        evaluate(S, [0, 1, 2], ks=(0,))
    with pytest.raises(ValueError, match="transpose"):
        ScoreMatrices(annotation=np.zeros((2, 3)), search=np.zeros((2, 3)))


def _pool(n=6):
    from corpora.base import Caption
    ids = tuple(f"im{i}" for i in range(n))
    caps = tuple(Caption(id=f"im{i}#0", image_id=f"im{i}", index=0, text=f"cap {i}") for i in range(n))
    rel = np.eye(n, dtype=bool)
    rel[0, 1] = True  # caption 1 also describes image 0
    return RankingPool(split="test", image_ids=ids, caption_ids=tuple(c.id for c in caps), captions=caps,
                       gold_caption=np.arange(n), gold_image=np.arange(n), relevance=rel)


def test_evaluate_pool_uses_both_directions():
    pool = _pool()
    S = np.eye(6, dtype=np.float32)
    S[0, 1] = 2.0           # annotation of image 0: caption 1 above gold (relevant, so S@1 still hits)
    out = evaluate_pool(S, pool)
    ann, sea = out["annotation"], out["search"]
    assert ann.ranks[0] == 2 and sea.ranks[1] == 2  # search: caption 1 ranks image 0 first
    assert ann.success[1][0] and sea.success[1][1]
    assert ann.metrics["R@1"] == pytest.approx(500 / 6)
    # different models per task
    sm = ScoreMatrices(annotation=np.eye(6), search=np.eye(6)[::-1].copy())
    out2 = evaluate_pool(sm, pool)
    assert out2["annotation"].metrics["R@1"] == 100.0 and out2["search"].metrics["R@1"] == 0.0
    assert ScoreMatrices.from_affinity(S).search.shape == (6, 6)
    with pytest.raises(ValueError, match="pool"):
        evaluate_pool(np.zeros((5, 6)), pool)


def test_borda_worked_example_tie_broken_by_median():
    # Items A,B,C,D (columns in the order B, D, A, C to show column order is irrelevant).
    # Ranking 1: A B C D   Ranking 2: A C B D   Ranking 3: B C D A
    # positions: A (0,0,3) B (1,2,0) C (2,1,1) D (3,3,2)
    # points (N − r): A 4+4+1 = 9, B 3+2+4 = 9, C 2+3+3 = 8, D 1+1+2 = 4
    # A and B tie on 9 points; median positions A 0 < B 1  ->  fused order A, B, C, D
    cols = ["B", "D", "A", "C"]
    rankings = [["A", "B", "C", "D"], ["A", "C", "B", "D"], ["B", "C", "D", "A"]]
    mats = [np.array([[-r.index(c) for c in cols]], dtype=np.float32) for r in rankings]
    points, med = borda_points(mats)
    np.testing.assert_array_equal(points[0], [9, 4, 9, 8])
    np.testing.assert_array_equal(med[0], [1, 3, 0, 1])
    fused = borda(mats)
    assert fused.dtype == np.float32
    np.testing.assert_array_equal(fused[0], [3, 1, 4, 2])  # A=4, B=3, C=2, D=1
    assert fuse is borda
    # evaluation of the fused matrix: gold B ranks 2nd
    assert evaluate(fused, [0]).ranks[0] == 2


def test_borda_vectorised_rows_and_full_ties():
    rng = np.random.default_rng(1)
    mats = [rng.random((7, 9)) for _ in range(3)]
    fused = borda(mats)
    for q in range(7):
        row = borda([m[q:q + 1] for m in mats])
        np.testing.assert_array_equal(fused[q], row[0])
    # a single ranking is reproduced exactly
    np.testing.assert_array_equal(np.argsort(-borda([mats[0]])[0]), np.argsort(-mats[0][0]))
    # two opposite rankings of 2 items: same points, same median -> equal fused scores
    f = borda([np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])])
    assert f[0, 0] == f[0, 1] == 2
    # ScoreMatrices in, ScoreMatrices out
    sms = [ScoreMatrices.from_affinity(m[:, :7]) for m in mats]
    out = borda(sms)
    assert isinstance(out, ScoreMatrices) and out.annotation.shape == (7, 7)
    with pytest.raises(ValueError, match="shape"):
        borda([np.zeros((2, 3)), np.zeros((2, 4))])
    with pytest.raises(ValueError, match="at least one"):
        borda([])


def test_borda_ties_inside_one_ranking_get_the_average_position():
    # a ties items 0 and 1 (positions 0 and 1 -> both 0.5), item 2 at position 2;
    # b orders 2, 0, 1 (positions: item0 1, item1 2, item2 0).  N = 3, points = Σ (N − r):
    #   item0 (3 − 0.5) + (3 − 1) = 4.5,  item1 (3 − 0.5) + (3 − 2) = 3.5,  item2 (3 − 2) + (3 − 0) = 4
    # fused order 0, 2, 1  ->  fused scores item0 3, item2 2, item1 1.
    # (With the minimum position for ties, items 1 and 2 would both have 4 points and median 1: a tie.)
    a = np.array([[1.0, 1.0, 0.0]])
    b = np.array([[2.0, 1.0, 3.0]])
    points, med = borda_points([a, b])
    np.testing.assert_array_equal(points[0], [4.5, 3.5, 4.0])
    np.testing.assert_array_equal(med[0], [0.75, 1.25, 1.0])
    np.testing.assert_array_equal(borda([a, b])[0], [3, 1, 2])
    # the result does not depend on the column order of the tied items
    perm = [1, 0, 2]
    np.testing.assert_array_equal(borda([a[:, perm], b[:, perm]])[0], [1, 3, 2])


def _reference_borda(mats):
    """Borda by its definition, with scipy's average ranks, numpy's median and a stable lexsort."""
    from scipy.stats import rankdata

    N = mats[0].shape[1]
    pos = np.stack([rankdata(-np.asarray(m, dtype=np.float64), method="average", axis=1) - 1.0 for m in mats])
    points, med = (N - pos).sum(axis=0), np.median(pos, axis=0)
    out = np.empty(points.shape, dtype=np.float32)
    for q in range(points.shape[0]):
        order = np.lexsort((med[q], -points[q]))
        start = 0
        for j in range(N):
            if j and (points[q, order[j]], med[q, order[j]]) != (points[q, order[j - 1]], med[q, order[j - 1]]):
                start = j
            out[q, order[j]] = N - start
    return points, med, out


@pytest.mark.parametrize("kind", ["float", "few values", "signed zeros", "one decimal"])
def test_borda_matches_its_definition_with_many_ties(kind):
    """The fast paths (unstable sorts with tie averaging, a sort median, one integer key for the fused
    order) give the definition's points, median positions and fused scores bit for bit."""
    rng = np.random.default_rng(len(kind))
    for K in (1, 2, 3, 4, 7):
        Q, N = 13, 57
        if kind == "float":
            mats = [rng.standard_normal((Q, N)).astype(np.float32) for _ in range(K)]
        elif kind == "few values":
            mats = [rng.integers(0, 3, (Q, N)).astype(np.float64) for _ in range(K)]
        elif kind == "signed zeros":
            mats = [rng.integers(-1, 2, (Q, N)).astype(np.float64) * 0.0 for _ in range(K)]
        else:
            mats = [np.round(rng.standard_normal((Q, N)), 1) for _ in range(K)]
        points, med, fused = _reference_borda(mats)
        got_points, got_med = borda_points(mats)
        assert got_points.tobytes() == points.tobytes() and got_med.tobytes() == med.tobytes()
        assert borda(mats).tobytes() == fused.tobytes()
