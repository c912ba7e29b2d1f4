from otter.test_files import test_case

import torch

from course import worlds
from course.checks import assert_close, call
from neural.losses import info_nce as reference

OK_FORMAT = False
name = "q1"


@test_case(points=3, hidden=True)
def test_equals_neural_losses(info_nce, env):
    for seed in (env["GRADER_SEED"], *worlds.HIDDEN_SEEDS):
        g = torch.Generator().manual_seed(seed)
        a = torch.nn.functional.normalize(torch.randn(16, 8, generator=g), dim=-1)
        b = torch.nn.functional.normalize(a + 0.5 * torch.randn(16, 8, generator=g), dim=-1)
        s = torch.tensor(2.3)
        assert_close(float(call(info_nce, a, b, s)), float(reference(a, b, logit_scale=s, reduction="sum")),
                     atol=1e-5, what="info_nce on a hidden batch")
