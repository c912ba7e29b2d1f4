from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q1"


@test_case(points=1)
def test_small_example_with_ties(gold_rank, recall_at_k, median_rank):
    scores = np.array([[3.0, 1.0, 3.0, 0.0],     # gold 0 tied with column 2 → rank 2
                       [1.0, 1.0, 1.0, 1.0],     # constant scorer → rank 4
                       [0.0, 5.0, 2.0, 1.0]])    # gold 1 strictly best → rank 1
    gold = np.array([0, 3, 1])
    ranks = call(gold_rank, scores, gold)
    assert_close(ranks, [2, 4, 1], what="gold_rank on a 3 × 4 example with ties")
    assert_close(call(recall_at_k, ranks, 1), 100 / 3, what="recall_at_k(ranks, 1)")
    assert_close(call(median_rank, ranks), 2.0, what="median_rank")
