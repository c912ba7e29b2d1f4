from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q2"


@test_case(points=1)
def test_small_example(success_at_k):
    scores = np.array([[2.0, 2.0, 1.0], [0.0, 1.0, 2.0]])
    relevance = np.array([[False, True, False], [True, False, False]])
    # query 0: the relevant item ties with a non-relevant one → it comes second
    assert_close(call(success_at_k, scores, relevance, 1), 0.0, what="S@1")
    assert_close(call(success_at_k, scores, relevance, 2), 50.0, what="S@2")
    assert_close(call(success_at_k, scores, relevance, 3), 100.0, what="S@3")
