from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q2"


@test_case(points=1)
def test_small(intersection_kernel):
    HX = np.array([[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]])
    HY = np.array([[0.2, 0.3, 0.5]])
    assert_close(call(intersection_kernel, HX, HY), [[0.5], [0.2]], what="intersection_kernel")
