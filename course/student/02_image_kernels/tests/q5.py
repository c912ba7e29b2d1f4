from otter.test_files import test_case

import numpy as np

from course.checks import answer

OK_FORMAT = False
name = "q5"


@test_case(points=0)
def test_filled_in(env):
    for key in ("my_pyramid_gram", "my_histogram_gram"):
        G = np.asarray(answer(env, key), dtype=float)
        assert G.shape == (30, 30), f"{key}: expected a 30 × 30 matrix, got shape {G.shape}"
