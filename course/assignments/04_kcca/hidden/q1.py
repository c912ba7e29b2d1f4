from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call
from kcca.solver import center_gram

OK_FORMAT = False
name = "q1"


@test_case(points=1, hidden=True)
def test_hidden_kernel(center, env):
    rng = np.random.default_rng(env["GRADER_SEED"])
    X = rng.normal(size=(25, 4))
    K = (X @ X.T + 1.0) ** 2
    assert_close(call(center, K), center_gram(K)[0], atol=1e-8, what="centred hidden kernel")
