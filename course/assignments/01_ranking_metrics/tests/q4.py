from otter.test_files import test_case

from course.checks import answer

OK_FORMAT = False
name = "q4"


@test_case(points=0)
def test_filled_in(env):
    result = answer(env, "my_annotation")
    missing = [k for k in ("R@1", "R@10", "median_rank") if result.get(k) in (None, Ellipsis)]
    assert not missing, f"my_annotation: fill in {', '.join(missing)}"
