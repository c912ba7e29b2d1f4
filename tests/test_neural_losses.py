"""neural.losses.info_nce: the one symmetric InfoNCE computes exactly (torch.equal, values and gradients)
what each model's own loss computed before they shared it — the tiny CLIP's, PAC-S Eq. 2's sum, BRIDGE's
several-positives form, SPECS' L_con and the L-CLIPScore helper — so trained weights and scores did not
change; plus the weighted mean, the "none" reduction and the argument checks."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from neural.losses import contrastive_logits, info_nce


# ------------------------------------------------------------------ the implementations info_nce replaced
def old_tiny_clip_loss(img, txt, logit_scale, max_logit_scale=100.0):
    s = logit_scale.exp().clamp(max=max_logit_scale)
    logits = s * img @ txt.T
    target = torch.arange(img.shape[0], device=img.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target))


def old_pacs_info_nce(a, b, logit_scale):
    logits = logit_scale.exp() * a @ b.T
    target = torch.arange(a.shape[0], device=a.device)
    return F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)


def old_lclip_info_nce(a, b, temperature=0.07):
    logits = a @ b.t() / temperature
    target = torch.arange(a.shape[0], device=a.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target))


def old_bridge_soft_info_nce(a, b, same, temperature):
    logits = a @ b.t() / temperature
    tgt = same.float() / same.float().sum(1, keepdim=True)
    tgt_t = same.t().float() / same.t().float().sum(1, keepdim=True)
    return 0.5 * (-(tgt * logits.log_softmax(1)).sum(1).mean() - (tgt_t * logits.t().log_softmax(1)).sum(1).mean())


def old_specs_l_con(v, t_full, logit_scale):
    scale = logit_scale.exp().clamp(max=100.0)
    logits = scale * v @ t_full.t()
    tgt = torch.arange(v.shape[0])
    return 0.5 * (F.cross_entropy(logits, tgt) + F.cross_entropy(logits.t(), tgt))


def _features(seed: int, n: int = 12, d: int = 16):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(n, d, generator=g, requires_grad=True)
    b = torch.randn(n, d, generator=g, requires_grad=True)
    return a, b


def _same_value_and_grads(old, new, leaves):
    """Both losses on copies of the same leaves: equal values and equal gradients, bit for bit."""
    copies_old = [x.detach().clone().requires_grad_(True) for x in leaves]
    copies_new = [x.detach().clone().requires_grad_(True) for x in leaves]
    lo, ln = old(*copies_old), new(*copies_new)
    assert torch.equal(lo, ln), (float(lo), float(ln))
    lo.backward()
    ln.backward()
    for x, y in zip(copies_old, copies_new):
        assert torch.equal(x.grad, y.grad)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("log_scale", [math.log(1 / 0.07), math.log(150.0)])   # below / above the clamp
def test_tiny_clip_and_specs_losses_are_reproduced_exactly(seed, log_scale):
    a, b = _features(seed)
    ls = torch.tensor(log_scale, requires_grad=True)

    def norm(f):
        return lambda x, y, s: f(F.normalize(x, dim=-1), F.normalize(y, dim=-1), s)

    _same_value_and_grads(norm(old_tiny_clip_loss),
                          norm(lambda x, y, s: info_nce(x, y, logit_scale=s, max_logit_scale=100.0)), [a, b, ls])
    _same_value_and_grads(norm(old_specs_l_con),
                          norm(lambda x, y, s: info_nce(x, y, logit_scale=s, max_logit_scale=100.0)), [a, b, ls])


@pytest.mark.parametrize("seed", [0, 3])
def test_pacs_eq2_sum_is_reproduced_exactly(seed):
    a, b = _features(seed)
    ls = torch.tensor(2.7, requires_grad=True)
    _same_value_and_grads(lambda x, y, s: old_pacs_info_nce(F.normalize(x, dim=-1), F.normalize(y, dim=-1), s),
                          lambda x, y, s: info_nce(F.normalize(x, dim=-1), F.normalize(y, dim=-1), logit_scale=s,
                                                   reduction="sum"), [a, b, ls])


@pytest.mark.parametrize("temperature", [0.07, 0.01, torch.tensor(0.05)])
def test_temperature_form_is_reproduced_exactly(temperature):
    a, b = _features(4)
    _same_value_and_grads(lambda x, y: old_lclip_info_nce(F.normalize(x, dim=-1), F.normalize(y, dim=-1), temperature),
                          lambda x, y: info_nce(F.normalize(x, dim=-1), F.normalize(y, dim=-1),
                                                temperature=temperature), [a, b])


@pytest.mark.parametrize("seed", [0, 5])
def test_bridge_several_positives_form_is_reproduced_exactly(seed):
    a, b = _features(seed)
    g = torch.Generator().manual_seed(seed + 10)
    labels = torch.randint(0, 4, (a.shape[0],), generator=g)
    same = labels[:, None] == labels[None, :]
    eye = torch.eye(a.shape[0], dtype=torch.bool)
    for pos in (same, eye):
        _same_value_and_grads(
            lambda x, y: old_bridge_soft_info_nce(F.normalize(x, dim=-1), F.normalize(y, dim=-1), pos, 0.05),
            lambda x, y: info_nce(F.normalize(x, dim=-1), F.normalize(y, dim=-1), temperature=0.05, targets=pos),
            [a, b])


def test_reductions_weights_and_given_logits():
    a, b = _features(6)
    a, b = F.normalize(a.detach(), dim=-1), F.normalize(b.detach(), dim=-1)
    z = contrastive_logits(a, b, temperature=0.1)
    both = info_nce(z, reduction="none")
    assert both.shape == (2,)
    assert torch.equal(info_nce(z), 0.5 * (both[0] + both[1]))
    assert torch.equal(info_nce(z, reduction="sum"), both[0] + both[1])
    assert torch.equal(info_nce(a, b, temperature=0.1), info_nce(z))
    # the two directions are the row-wise and column-wise cross-entropies
    tgt = torch.arange(len(a))
    assert torch.allclose(both, torch.stack([F.cross_entropy(z, tgt), F.cross_entropy(z.t(), tgt)]))
    # weights: the weighted batch mean; equal weights give the plain mean; a zero weight drops a pair
    w = torch.ones(len(a))
    assert torch.allclose(info_nce(z, weights=w), info_nce(z))
    w[0] = 0.0
    per_ab = F.cross_entropy(z, tgt, reduction="none")
    per_ba = F.cross_entropy(z.t(), tgt, reduction="none")
    expect = 0.5 * (per_ab[1:].mean() + per_ba[1:].mean())
    assert torch.allclose(info_nce(z, weights=w), expect)
    # soft targets with the diagonal equal the one-hot loss (up to rounding: other kernels)
    assert torch.allclose(info_nce(z, targets=torch.eye(len(a))), info_nce(z), atol=1e-6)
    assert torch.allclose(info_nce(z, targets=torch.eye(len(a)), weights=w), info_nce(z, weights=w), atol=1e-6)
    # a positive spread over two columns: the target puts ½ on each
    pos = torch.eye(len(a), dtype=torch.bool)
    pos[0, 1] = pos[1, 0] = True
    y = pos.float() / pos.float().sum(1, keepdim=True)
    ab = -(y * z.log_softmax(1)).sum(1).mean()
    ba = -(y.t() * z.t().log_softmax(1)).sum(1).mean()
    assert torch.allclose(info_nce(z, targets=pos), 0.5 * (ab + ba))


def test_argument_checks():
    a, b = _features(7)
    with pytest.raises(ValueError, match="exactly one"):
        info_nce(a, b)
    with pytest.raises(ValueError, match="exactly one"):
        info_nce(a, b, temperature=0.1, logit_scale=torch.tensor(1.0))
    with pytest.raises(ValueError, match="reduction"):
        info_nce(a, b, temperature=0.1, reduction="max")
    with pytest.raises(ValueError, match="square"):
        info_nce(a[:3], b, temperature=0.1)
    with pytest.raises(ValueError, match="not to given logits"):
        info_nce(a @ b.t(), temperature=0.1)
    with pytest.raises(ValueError, match="targets"):
        info_nce(a, b, temperature=0.1, targets=torch.eye(3))
