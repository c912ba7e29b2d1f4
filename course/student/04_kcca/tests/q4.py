from otter.test_files import test_case

from course.checks import answer

OK_FORMAT = False
name = "q4"


@test_case(points=0)
def test_filled_in(env):
    assert answer(env, "my_kappa") in env.get("KAPPAS", ()), "my_kappa must be one of KAPPAS"
    r10 = float(answer(env, "my_test_r10"))
    assert 0 <= r10 <= 100, f"my_test_r10 is a percentage, got {r10}"
