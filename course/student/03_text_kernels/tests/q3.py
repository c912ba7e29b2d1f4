from otter.test_files import test_case

import math

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q3"


@test_case(points=1)
def test_features(tri_features):
    f = call(tri_features, ["a", "dog", "runs"])
    assert f[("a", "runs")] == 0.25, "tri_features: the gapped pair ('a', 'runs') should weigh 0.5² = 0.25"
    assert len(f) == 7, f"tri_features: 3 words have 7 subsequences of length 1-3, got {len(f)}"


@test_case(points=1)
def test_gapped_example(tri_kernel):
    A = [["a", "dog", "runs"], ["a", "runs"]]
    K = np.asarray(call(tri_kernel, A, A))
    assert_close(np.diag(K), [1.0, 1.0], what="TRI kernel of a caption with itself")
    # shared: 'a', 'runs' (0.5 each) and the gapped pair ('a', 'runs') (0.25)
    k12, k11, k22 = 0.5 ** 2 * 2 + 0.25 ** 2, 3 * 0.5 ** 2 + 3 * 0.25 ** 2 + 0.125 ** 2, 0.5 ** 2 * 2 + 0.25 ** 2
    assert_close(K[0, 1], k12 / math.sqrt(k11 * k22), what="TRI kernel of 'a dog runs' and 'a runs'")
