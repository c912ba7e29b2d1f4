from otter.test_files import test_case

from course import worlds
from course.checks import answer, assert_close
from evaluation import evaluate

OK_FORMAT = False
name = "q4"


@test_case(points=2, hidden=True)
def test_your_world(env):
    seed = env["GRADER_SEED"]
    p = worlds.pool(seed, "test")
    ref = evaluate(worlds.overlap_scores(seed), p.gold_caption, p.relevance, ks=(1, 10)).metrics
    result = answer(env, "my_annotation")
    for key in ("R@1", "R@10", "median_rank"):
        assert_close(result.get(key), ref[key], what=f"my_annotation[{key!r}] on your world")
