from otter.test_files import test_case

import numpy as np

from course import worlds
from course.checks import assert_close, call
from evaluation import evaluate

OK_FORMAT = False
name = "q3"


@test_case(points=2, hidden=True)
def test_hidden_pools(r_precision, env):
    for seed in (env["GRADER_SEED"], *worlds.HIDDEN_SEEDS):
        rng = np.random.default_rng(seed + 7)
        scores = rng.integers(0, 3, size=(30, 25)).astype(np.float32)
        gold = rng.integers(0, 25, size=30)
        relevance = rng.random((30, 25)) < 0.2
        relevance[np.arange(30), gold] = True
        ref = evaluate(scores, gold, relevance)
        assert_close(call(r_precision, scores, relevance), ref.metrics["R-precision"], what="R-precision")
    p = worlds.pool(env["GRADER_SEED"], "test")
    ref = evaluate(worlds.overlap_scores(env["GRADER_SEED"]), p.gold_caption, p.relevance)
    assert_close(call(r_precision, worlds.overlap_scores(env["GRADER_SEED"]), p.relevance),
                 ref.metrics["R-precision"], what="R-precision on a world's pool")
