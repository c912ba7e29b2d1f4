from otter.test_files import test_case

from course import worlds
from course.checks import assert_close, call

OK_FORMAT = False
name = "q1"


@test_case(points=2, hidden=True)
def test_hidden_images(colour_histogram, env):
    for seed in (env["GRADER_SEED"], worlds.HIDDEN_SEEDS[0]):
        corpus = worlds.world(seed)
        ids = list(corpus.split("test"))[:8]
        ref = worlds.colour_histograms(seed, ids)
        for k, i in enumerate(ids):
            assert_close(call(colour_histogram, corpus.load_image(i)), ref[k], what="colour histogram of a hidden image")
