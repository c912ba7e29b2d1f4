from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

name = "q3"


@test_case(points=1)
def test_features(tri_features):
    f = call(tri_features, ["a", "dog", "runs"])
    assert f[("a", "runs")] == 0.25, "tri_features: the gapped pair ('a', 'runs') should weigh 0.5² = 0.25"
    assert len(f) == 7, f"tri_features: 3 words have 7 subsequences of length 1-3, got {len(f)}"


@test_case(points=1)
def test_normalised(tri_kernel):
    A = [["a", "dog"], ["a", "red", "dog"]]
    K = np.asarray(call(tri_kernel, A, A))
    assert_close(np.diag(K), [1.0, 1.0], what="TRI kernel of a caption with itself")
