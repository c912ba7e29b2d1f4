from otter.test_files import test_case

from course import worlds
from course.checks import assert_close, call
from kernels.image import pyramid_match_gram

OK_FORMAT = False
name = "q4"


@test_case(points=2, hidden=True)
def test_hidden_pyramids(pyramid_match, env):
    for seed in (env["GRADER_SEED"], worlds.HIDDEN_SEEDS[0]):
        corpus = worlds.world(seed)
        for levels in (2, 3):
            PX = worlds.colour_pyramids(seed, list(corpus.split("train"))[:10], levels)
            PY = worlds.colour_pyramids(seed, list(corpus.split("test"))[:6], levels)
            assert_close(call(pyramid_match, PX, PY, levels), pyramid_match_gram(PX, PY, levels=levels),
                         atol=1e-5, what=f"pyramid match ({levels} levels) on hidden images")
