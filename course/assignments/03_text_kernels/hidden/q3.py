from otter.test_files import test_case

from course import worlds
from course.checks import assert_close, call

OK_FORMAT = False
name = "q3"


@test_case(points=3, hidden=True)
def test_hidden_captions(tri_kernel, env):
    for seed in (env["GRADER_SEED"], worlds.HIDDEN_SEEDS[0]):
        caps = [worlds.tokens(c.text) for c in worlds.pool(seed, "test").captions[:12]]
        swapped = [["a", "green", "diamond", "above", "an", "orange", "square"],
                   ["an", "orange", "diamond", "above", "a", "green", "square"], ["a", "a", "dog"]]
        A = caps + swapped
        assert_close(call(tri_kernel, A, A), worlds.reference_tri_gram(A, A), atol=1e-5, what="TRI kernel on hidden captions")
