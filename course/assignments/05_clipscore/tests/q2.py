from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q2"


@test_case(points=1)
def test_small(ref_clip_s):
    V = np.array([[1.0, 0.0], [1.0, 0.0]])
    C = np.array([[0.6, 0.8], [-0.6, 0.8]])
    R = [np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([[0.0, 1.0]])]   # max reference cosines 0.8 and 0.8
    # the second candidate's CLIP-S is clipped to 0, so its harmonic mean is 0
    assert_close(call(ref_clip_s, V, C, R), [2 * 1.5 * 0.8 / 2.3, 0.0], what="ref_clip_s on a small example")
