from otter.test_files import test_case

import math

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q2"


@test_case(points=1)
def test_small(bow_kernel):
    weights = {"dog": 1.0, "grass": 2.0}
    K = np.asarray(call(bow_kernel, [["dog", "grass"], ["dog"]], [["grass"], ["dog", "dog"]], weights, 0.5))
    assert_close(K, [[2 / math.sqrt(5), 1 / math.sqrt(5)], [0.0, 1.0]], what="bow_kernel on a small example")
