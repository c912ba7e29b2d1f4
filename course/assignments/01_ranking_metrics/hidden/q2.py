from otter.test_files import test_case

import numpy as np

from course import worlds
from course.checks import assert_close, call
from evaluation import evaluate

OK_FORMAT = False
name = "q2"


@test_case(points=2, hidden=True)
def test_hidden_pools(success_at_k, env):
    for seed in (env["GRADER_SEED"], *worlds.HIDDEN_SEEDS):
        rng = np.random.default_rng(seed)
        scores = rng.integers(0, 3, size=(30, 25)).astype(np.float32)
        gold = rng.integers(0, 25, size=30)
        relevance = rng.random((30, 25)) < 0.15
        relevance[np.arange(30), gold] = True
        ref = evaluate(scores, gold, relevance, ks=(1, 3, 10))
        for k in (1, 3, 10):
            assert_close(call(success_at_k, scores, relevance, k), ref.metrics[f"S@{k}"], what=f"S@{k}")
