def info_nce(a, b, logit_scale):
    """CLIP's mean of the two directions where PAC-S Eq. 2 sums them."""
    logits = logit_scale.exp() * a @ b.T
    target = torch.arange(a.shape[0])
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
