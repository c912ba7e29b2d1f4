from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call
from kernels.image import pyramid_match_gram

OK_FORMAT = False
name = "q4"


@test_case(points=1)
def test_against_the_toolkit(pyramid_match, pyramid_histogram, images):
    P = np.stack([call(pyramid_histogram, im) for im in images[:3]])
    K = np.asarray(call(pyramid_match, P, P))
    assert_close(np.diag(K), np.ones(3), what="K(x, x) of the pyramid match (should be 1)")
    assert_close(K, pyramid_match_gram(P), atol=1e-5, what="pyramid match of your first three images")
