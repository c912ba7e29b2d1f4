from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q3"


@test_case(points=1)
def test_layout(pyramid_histogram, images):
    p = np.asarray(call(pyramid_histogram, images[0]))
    assert p.shape == (21 * 64,), f"pyramid_histogram: expected shape (1344,), got {p.shape}"
    assert_close(p.reshape(21, 64).sum(axis=1), np.ones(21), what="each cell's histogram sums to 1")
    assert_close(p[64:320].reshape(4, 64).mean(axis=0), p[:64], what="level 1 averaged over its 4 cells = level 0")
