from otter.test_files import test_case

import numpy as np

from course import worlds
from course.checks import assert_close, call
from evaluation import evaluate

OK_FORMAT = False
name = "q1"


@test_case(points=2, hidden=True)
def test_hidden_tied_matrices(gold_rank, recall_at_k, median_rank):
    for seed in worlds.HIDDEN_SEEDS:
        rng = np.random.default_rng(seed)
        scores = rng.integers(0, 4, size=(40, 30)).astype(np.float32)
        gold = rng.integers(0, 30, size=40)
        ref = evaluate(scores, gold, ks=(1, 5, 10))
        ranks = call(gold_rank, scores, gold)
        assert_close(ranks, ref.ranks, what="gold_rank on a hidden matrix")
        for k in (1, 5, 10):
            assert_close(call(recall_at_k, ranks, k), ref.metrics[f"R@{k}"], what=f"R@{k}")
        assert_close(call(median_rank, ranks), ref.metrics["median_rank"], what="median rank")
