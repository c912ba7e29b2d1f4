from otter.test_files import test_case

from course import worlds
from course.checks import assert_close, call

OK_FORMAT = False
name = "q3"


@test_case(points=2, hidden=True)
def test_hidden_images(pyramid_histogram, env):
    for seed in (env["GRADER_SEED"], worlds.HIDDEN_SEEDS[1]):
        corpus = worlds.world(seed)
        ids = list(corpus.split("dev"))[:5]
        for levels in (2, 3):
            ref = worlds.colour_pyramids(seed, ids, levels)
            for k, i in enumerate(ids):
                assert_close(call(pyramid_histogram, corpus.load_image(i), levels), ref[k], atol=1e-6,
                             what=f"pyramid histogram ({levels} levels) of a hidden image")
