from otter.test_files import test_case

from course.checks import assert_close, call

name = "q3"


@test_case(points=1)
def test_small(kendall_tau_c):
    assert_close(call(kendall_tau_c, [1, 2, 3, 4], [1, 2, 3, 4]), 1.0, what="τ-c of identical rankings")
    assert_close(call(kendall_tau_c, [1, 2, 3, 4], [4, 3, 2, 1]), -1.0, what="τ-c of reversed rankings")
