from otter.test_files import test_case

import numpy as np

from course.checks import call

OK_FORMAT = False
name = "q2"


@test_case(points=1)
def test_shapes_and_order(kcca, G):
    rho, alpha, beta = call(kcca, G["Kx_train"], G["Ky_train"], 0.5, 5)
    assert np.shape(rho) == (5,) and np.shape(alpha) == (200, 5) and np.shape(beta) == (200, 5), \
        "kcca: expected rho (5,), alpha and beta (200, 5)"
    assert np.all(np.diff(rho) <= 1e-12), "kcca: correlations must be in decreasing order"
    assert 0 < rho[0] < 1, f"kcca: a regularised canonical correlation lies in (0, 1), got {rho[0]:.4f}"
