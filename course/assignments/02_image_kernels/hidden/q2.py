from otter.test_files import test_case

import numpy as np

from course import worlds
from course.checks import assert_close, call
from kernels.image import intersection_gram

OK_FORMAT = False
name = "q2"


@test_case(points=2, hidden=True)
def test_hidden_histograms(intersection_kernel, env):
    corpus = worlds.world(worlds.HIDDEN_SEEDS[1])
    HX = worlds.colour_histograms(worlds.HIDDEN_SEEDS[1], list(corpus.split("train"))[:12])
    HY = worlds.colour_histograms(worlds.HIDDEN_SEEDS[1], list(corpus.split("dev"))[:7])
    assert_close(call(intersection_kernel, HX, HY), intersection_gram(HX, HY), what="intersection Gram", atol=1e-5)
    rng = np.random.default_rng(env["GRADER_SEED"])
    A, B = rng.random((5, 9)), rng.random((4, 9))
    assert_close(call(intersection_kernel, A, B), intersection_gram(A, B), what="intersection Gram", atol=1e-5)
