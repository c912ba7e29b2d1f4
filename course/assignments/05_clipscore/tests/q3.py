from otter.test_files import test_case

from course.checks import assert_close, call

OK_FORMAT = False
name = "q3"


@test_case(points=1)
def test_small(kendall_tau_c):
    assert_close(call(kendall_tau_c, [1, 2, 3, 4], [1, 2, 3, 4]), 1.0, what="τ-c of identical rankings")
    assert_close(call(kendall_tau_c, [1, 2, 3, 4], [4, 3, 2, 1]), -1.0, what="τ-c of reversed rankings")
    # ties in x: 4 concordant pairs, 2 pairs tied in x, m = 2 → τ-c = 2·2·4 / (4²·1) = 1 (τ-b would be 0.816)
    assert_close(call(kendall_tau_c, [1, 1, 2, 2], [1, 2, 3, 4]), 1.0, what="τ-c with ties")
