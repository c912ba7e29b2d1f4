from otter.test_files import test_case

import numpy as np

from course.checks import assert_close, call

OK_FORMAT = False
name = "q3"


@test_case(points=1)
def test_training_rows_project_like_training(project, center, G):
    K = G["Kx_train"][:30, :30]
    A = np.random.default_rng(0).normal(size=(30, 3))
    assert_close(call(project, K, K, A), np.asarray(call(center, K)) @ A, atol=1e-8,
                 what="projecting the training rows themselves must give center(K) @ A")
