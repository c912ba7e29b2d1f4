from otter.test_files import test_case

import math

import torch

from course.checks import assert_close, call

OK_FORMAT = False
name = "q2"


@test_case(points=1)
def test_small_batch(pacs_loss):
    eye = torch.eye(4)
    uniform = torch.nn.functional.normalize(torch.ones(4, 4), dim=-1)
    s = torch.tensor(0.0)
    # V = T = V' = the 4 basis vectors: logits = I, each direction log((e + 3) / e);
    # T' all alike: uniform logits, each direction log 4
    l_vt, l_vt_gen = 2 * math.log((math.e + 3) / math.e), 2 * math.log(4)
    assert_close(float(call(pacs_loss, eye, eye, eye, uniform, s)), (1 + 0.05) * l_vt + 0.1 * l_vt_gen, atol=1e-5,
                 what="pacs_loss on a 4-pair batch")
