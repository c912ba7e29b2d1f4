from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q1"


@test_case(points=1)
def test_small(clip_s):
    V = np.array([[1.0, 0.0], [1.0, 0.0]])
    C = np.array([[0.6, 0.8], [-0.6, 0.8]])
    assert_close(call(clip_s, V, C), [1.5, 0.0], what="clip_s of a positive and a negative cosine")
