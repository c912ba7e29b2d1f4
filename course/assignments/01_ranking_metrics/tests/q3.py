from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q3"


@test_case(points=1)
def test_small_example(r_precision):
    scores = np.array([[3.0, 2.0, 2.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    relevance = np.array([[True, False, True, False], [True, False, False, False]])
    # query 0: r = 2, top 2 = {col 0, one of the tied cols 1/2} → non-relevant first → 1/2
    # query 1: r = 1, all tied → a non-relevant item fills the slot → 0
    assert_close(call(r_precision, scores, relevance), 25.0, what="R-precision")
