from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q1"


@test_case(points=1)
def test_rows_sum_to_zero(center, G):
    C = np.asarray(call(center, G["Kx_train"]))
    assert_close(C.sum(axis=0), np.zeros(len(C)), atol=1e-8, what="column sums of a centred Gram matrix")
    assert_close(C, C.T, what="symmetry of the centred Gram matrix")
