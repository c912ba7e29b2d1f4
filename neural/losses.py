"""The symmetric InfoNCE loss, once for every model trained here.

The tiny CLIP, PAC-S fine-tuning, BRIDGE's mapping module and SPECS' ``L_con`` all contrast a batch of
``B`` matching pairs ``(a_i, b_i)`` (L2-normalised rows) against each other.  With logits
``z_ij = s · cos(a_i, b_j)`` — ``s = exp(logit_scale)`` (optionally clamped at ``max_logit_scale``) or
``s = 1 / τ`` — and target distributions ``y_i`` over the columns,

.. math::

    L_{A \\to B} = -\\frac{1}{B} \\sum_i \\sum_j y_{ij} \\log \\frac{e^{z_{ij}}}{\\sum_k e^{z_{ik}}}, \\qquad
    L_{B \\to A} = -\\frac{1}{B} \\sum_j \\sum_i y^{\\top}_{ji} \\log \\frac{e^{z_{ij}}}{\\sum_k e^{z_{kj}}},

* CLIP (Radford et al. 2021, Fig. 3, the symmetric cross-entropy): one-hot targets ``y_ij = [i = j]``
  and ``L = ½ (L_{A→B} + L_{B→A})`` — ``reduction="mean"`` (the tiny CLIP; SPECS' ``L_con``, Chen et al.
  Eq. 3, is the same loss);
* PAC-S (Sarto et al. 2023, Eq. 2): ``L_{V,T} = L_{V→T} + L_{T→V}``, the *sum* as written in the
  paper — ``reduction="sum"``; Eq. 3's positive-augmented objective combines three of them
  (:func:`neural.pacs.pacs_loss`);
* several positives per row (BRIDGE, Sarto et al. 2024, Sec. 3.3: identical noun-chunk prompts are
  positives of each other): ``targets`` is a non-negative ``(B, B)`` matrix of positive pairs and each
  direction's targets are its rows normalised to sum 1 (``y = T / T·1`` and ``y^⊤ = T^⊤ / T^⊤·1``).

``weights`` (optional, shape ``(B,)``) replaces each direction's plain batch mean by the weighted mean
``Σ_i w_i ℓ_i / Σ_i w_i``.  With ``targets=None`` the one-hot case is computed with
:func:`torch.nn.functional.cross_entropy` (fused log-softmax), otherwise as ``−Σ y · log_softmax``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["contrastive_logits", "info_nce", "REDUCTIONS"]

#: How :func:`info_nce` combines its two directions.
REDUCTIONS = ("mean", "sum", "none")


def contrastive_logits(a: torch.Tensor, b: torch.Tensor, *, logit_scale: torch.Tensor | None = None,
                       max_logit_scale: float | None = None,
                       temperature: float | torch.Tensor | None = None) -> torch.Tensor:
    """The ``(len(a), len(b))`` logits ``z_ij = s · a_i·b_j`` of L2-normalised rows.

    Exactly one of ``logit_scale`` (log inverse temperature, ``s = exp(logit_scale)``, clamped at
    ``max_logit_scale`` when given; computed as ``(s · a) @ bᵀ``) and ``temperature`` (computed as
    ``(a @ bᵀ) / τ``).
    """
    if (logit_scale is None) == (temperature is None):
        raise ValueError("contrastive_logits: give exactly one of logit_scale and temperature")
    if temperature is not None:
        return a @ b.t() / temperature
    s = logit_scale.exp()
    if max_logit_scale is not None:
        s = s.clamp(max=max_logit_scale)
    return s * a @ b.T


def _direction(logits: torch.Tensor, targets: torch.Tensor | None, weights: torch.Tensor | None) -> torch.Tensor:
    """One direction of :func:`info_nce`: rows of ``logits`` are the queries."""
    if targets is None:
        target = torch.arange(logits.shape[0], device=logits.device)
        if weights is None:
            return F.cross_entropy(logits, target)
        per_row = F.cross_entropy(logits, target, reduction="none")
        return (weights * per_row).sum() / weights.sum()
    tgt = targets.float() / targets.float().sum(1, keepdim=True)
    per_row = (tgt * logits.log_softmax(1)).sum(1)
    if weights is None:
        return -per_row.mean()
    return -(weights * per_row).sum() / weights.sum()


def info_nce(a: torch.Tensor, b: torch.Tensor | None = None, *, logit_scale: torch.Tensor | None = None,
             max_logit_scale: float | None = None, temperature: float | torch.Tensor | None = None,
             targets: torch.Tensor | None = None, weights: torch.Tensor | None = None,
             reduction: str = "mean") -> torch.Tensor:
    """Symmetric InfoNCE (module docstring: CLIP, PAC-S Eq. 2, several positives per row).

    Parameters
    ----------
    a, b : Tensor, shape (B, D)
        L2-normalised features; row ``i`` of each is a matching pair.  With ``b=None``, ``a`` is the
        ``(B, B)`` logits matrix itself (rows: queries of ``A``).
    logit_scale, max_logit_scale, temperature
        How features become logits (:func:`contrastive_logits`); not with ``b=None``.
    targets : Tensor, shape (B, B), optional
        Non-negative positive-pair matrix (bool or float): ``targets[i, j] > 0`` when ``b_j`` is a positive
        of ``a_i``; rows are normalised per direction.  ``None``: the diagonal (one positive per row).
    weights : Tensor, shape (B,), optional
        Per-pair weights of each direction's batch mean.
    reduction : ``"mean"`` | ``"sum"`` | ``"none"``
        ``½ (L_{A→B} + L_{B→A})`` (CLIP), ``L_{A→B} + L_{B→A}`` (PAC-S Eq. 2), or both as a
        ``(2,)`` tensor ``[L_{A→B}, L_{B→A}]``.

    Returns
    -------
    Tensor
        A scalar (``"mean"``, ``"sum"``) or shape ``(2,)`` (``"none"``).
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"info_nce: reduction={reduction!r}, expected one of {REDUCTIONS}")
    if b is None:
        if logit_scale is not None or temperature is not None:
            raise ValueError("info_nce: logit_scale / temperature apply to features, not to given logits")
        logits = a
    else:
        logits = contrastive_logits(a, b, logit_scale=logit_scale, max_logit_scale=max_logit_scale,
                                    temperature=temperature)
    if logits.ndim != 2 or logits.shape[0] != logits.shape[1]:
        raise ValueError(f"info_nce: needs a square (B, B) logits matrix, got {tuple(logits.shape)}")
    if targets is not None and tuple(targets.shape) != tuple(logits.shape):
        raise ValueError(f"info_nce: targets {tuple(targets.shape)} do not match logits {tuple(logits.shape)}")
    forward = _direction(logits, targets, weights)
    backward = _direction(logits.t(), None if targets is None else targets.t(), weights)
    if reduction == "mean":
        return 0.5 * (forward + backward)
    if reduction == "sum":
        return forward + backward
    return torch.stack([forward, backward])
