from otter.test_files import test_case

from course.checks import answer

OK_FORMAT = False
name = "q3"


@test_case(points=0)
def test_filled_in(env):
    r = answer(env, "my_result")
    for key in ("train_before", "train_after", "heldout_R@1_before", "heldout_R@1_after"):
        assert r.get(key) not in (None, Ellipsis), f"my_result[{key!r}]: fill it in"
