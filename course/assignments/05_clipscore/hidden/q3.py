from otter.test_files import test_case

import numpy as np

from course import worlds
from course.checks import assert_close, call
from evaluation import kendall_tau

OK_FORMAT = False
name = "q3"


@test_case(points=3, hidden=True)
def test_equals_evaluation_with_ties(kendall_tau_c, env):
    for seed in (env["GRADER_SEED"], *worlds.HIDDEN_SEEDS):
        rng = np.random.default_rng(seed)
        x = rng.integers(1, 5, size=60).astype(float)          # grades 1-4: many ties
        y = x + rng.normal(scale=1.5, size=60)
        y[:10] = np.round(y[:10])
        assert_close(call(kendall_tau_c, y, x), kendall_tau(y, x, "c"), atol=1e-9, what="τ-c with tied grades")
