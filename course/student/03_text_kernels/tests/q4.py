from otter.test_files import test_case

import numpy as np

from course.checks import answer

OK_FORMAT = False
name = "q4"


@test_case(points=0)
def test_filled_in(env):
    assert np.asarray(answer(env, "my_bow")).shape == (20, 40), "my_bow: expected a 20 × 40 matrix"
    assert np.asarray(answer(env, "my_tri")).shape == (20, 20), "my_tri: expected a 20 × 20 matrix"
