from otter.test_files import test_case

import torch

from course import worlds
from course.checks import assert_close, call
from neural.pacs import pacs_loss as reference

OK_FORMAT = False
name = "q2"


@test_case(points=3, hidden=True)
def test_equals_neural_pacs(pacs_loss, env):
    b = worlds.contrastive_batches(env["GRADER_SEED"], "train", n=128)
    v, t, vg, tg = (torch.as_tensor(b[k][:32]) for k in ("v", "t", "v_gen", "t_gen"))
    s = torch.tensor(2.659)
    assert_close(float(call(pacs_loss, v, t, vg, tg, s)), float(reference(v, t, vg, tg, s)[0]), atol=1e-4,
                 what="PAC-S loss on a fixed batch of your world")
