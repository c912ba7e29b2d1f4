from otter.test_files import test_case

from course import worlds
from course.checks import answer, assert_close
from kernels.image import histogram_intersection_gram, pyramid_match_gram

OK_FORMAT = False
name = "q5"


@test_case(points=2, hidden=True)
def test_your_world(env):
    seed = env["GRADER_SEED"]
    ids = list(worlds.world(seed).split("train"))[:30]
    P, H = worlds.colour_pyramids(seed, ids), worlds.colour_histograms(seed, ids)
    assert_close(answer(env, "my_pyramid_gram"), pyramid_match_gram(P), atol=1e-5, what="my_pyramid_gram on your world")
    assert_close(answer(env, "my_histogram_gram"), histogram_intersection_gram(H), atol=1e-5,
                 what="my_histogram_gram on your world")
