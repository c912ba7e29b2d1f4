"""The text tower of a CLIP, taken apart: its pieces, and the text features computed from token
*embeddings* or only up to the last end-of-text token.

Used by :class:`neural.backbone.Backbone` (text encoding cut at the batch's last end-of-text token),
BRIDGE (pseudo-tokens fed through the frozen text tower), SPECS and the L-CLIPScore distillation
(length-bucketed encoding while training, :func:`encode_text_bucketed`), PAC-S' frozen-tower features and
the L-CLIPScore student (pooling and projection).  Works on open_clip ``CLIP`` (text tower on the model),
``CustomTextCLIP`` (``model.text``) and on any model with its own ``encode_text_from_embeddings``.

Text features (Radford et al. 2021, Sec. 2.4): the transformer output at the end-of-text token
(``argmax`` of the token ids, the highest id in CLIP's vocabulary), after the final LayerNorm, times the
text projection,

.. math:: t = \\mathrm{LN}\\big(\\mathrm{Transformer}(E[x] + P)\\big)_{\\mathrm{eot}(x)}\\, W_t .
"""
from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["text_tower_parts", "token_embedding", "pool_text", "project", "encode_text_from_embeddings",
           "encode_text_to_eot", "length_buckets", "encode_text_bucketed", "TRAINING_BUCKETS"]

#: Buckets of :func:`encode_text_bucketed` in the training loops (SPECS, L-CLIPScore); see there.
TRAINING_BUCKETS = 4


def text_tower_parts(model: nn.Module):
    """The text-tower pieces of an open_clip ``CLIP`` (attributes on the model) or ``CustomTextCLIP``
    (``model.text``): ``(token_embedding, positional_embedding, transformer, ln_final, text_projection,
    attn_mask, pool_type, eos_id)``."""
    t = model.text if hasattr(model, "text") and not hasattr(model, "token_embedding") else model
    if getattr(t, "cls_emb", None) is not None:
        raise NotImplementedError("text towers with a CLS embedding (CoCa) are not supported")
    pool = getattr(t, "text_pool_type", getattr(t, "pool_type", "argmax"))
    eos = getattr(t, "text_eos_id", getattr(t, "eos_id", None))
    return (t.token_embedding, t.positional_embedding, t.transformer, t.ln_final, t.text_projection,
            getattr(t, "attn_mask", None), pool, eos)


def token_embedding(model: nn.Module) -> nn.Module:
    """The token-embedding module of the model's text tower (:func:`text_tower_parts`)."""
    return text_tower_parts(model)[0]


def pool_text(x: torch.Tensor, tokens: torch.Tensor, pool: str, eos_id) -> torch.Tensor:
    """open_clip's text pooling (``text_global_pool``): the output at the end-of-text token for
    ``"argmax"`` (CLIP), at ``eos_id`` for ``"eos"``, the first / last / mean position otherwise."""
    # lazy: open_clip takes seconds to import (torchvision, timm); a model to pool exists only once it is loaded
    from open_clip.transformer import text_global_pool

    return text_global_pool(x, tokens, pool, eos_token_id=eos_id)


def project(x: torch.Tensor, proj) -> torch.Tensor:
    """``x @ W_t`` for a projection matrix, ``proj(x)`` for an ``nn.Linear``, ``x`` for none."""
    if proj is None:
        return x
    return proj(x) if isinstance(proj, nn.Linear) else x @ proj


def encode_text_from_embeddings(model: nn.Module, x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Text features (projected, un-normalised) of a CLIP text tower fed with token *embeddings*
    ``x`` (B, L, width) instead of token ids; ``tokens`` (B, L) only locate the pooling position.

    Works on open_clip ``CLIP`` / ``CustomTextCLIP`` text towers and on the L-CLIPScore student.  ``L``
    may be shorter than the context length: the causal mask makes the EOT output independent of later
    positions, so trailing padding can be cut.
    """
    if hasattr(model, "encode_text_from_embeddings"):
        return model.encode_text_from_embeddings(x, tokens)
    _, pos, transformer, ln_final, proj, mask, pool, eos = text_tower_parts(model)
    L = x.shape[1]
    cast = transformer.get_cast_dtype() if hasattr(transformer, "get_cast_dtype") else x.dtype
    h = x.to(cast) + pos[:L].to(cast)
    h = transformer(h, attn_mask=None if mask is None else mask[:L, :L])
    h = ln_final(h)
    return project(pool_text(h, tokens, pool, eos), proj)


def encode_text_to_eot(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """``model.encode_text(tokens)`` (projected, un-normalised), computed only up to the batch's last
    end-of-text token when that is exact: a causal text tower pooled at the end-of-text token
    (``argmax`` pooling, as CLIP), where no output at or before that token depends on later positions.
    Any other tower runs the full context."""
    try:
        tok_emb, _, _, _, _, mask, pool, _ = text_tower_parts(model)
    except (AttributeError, NotImplementedError):
        return model.encode_text(tokens)
    L = int(tokens.argmax(dim=1).max().item()) + 1 if len(tokens) else tokens.shape[1]
    if mask is None or pool != "argmax" or L >= tokens.shape[1]:
        return model.encode_text(tokens)
    t = tokens[:, :L]
    return encode_text_from_embeddings(model, tok_emb(t), t)


def length_buckets(lengths: list[int], max_buckets: int) -> list[tuple[int, int]]:
    """Cut ascending ``lengths`` into at most ``max_buckets`` contiguous runs ``[start, stop)`` that
    minimise the padded positions ``Σ_b n_b · max(lengths[b])`` (each run is computed at its own last
    length).  Exact dynamic programme over the distinct lengths (at most ``max_buckets · d²`` steps for
    ``d`` distinct values)."""
    n = len(lengths)
    if n == 0:
        return []
    # run ends: the last index of each distinct length (a cut inside equal lengths never helps)
    ends = [k + 1 for k in range(n) if k + 1 == n or lengths[k + 1] != lengths[k]]
    d, K = len(ends), max(1, min(max_buckets, len(ends)))
    inf = float("inf")
    # best[k][j]: least cost of the first ends[j] rows in k + 1 runs; cut[k][j]: the previous run end
    best = [[(ends[j]) * lengths[ends[j] - 1] for j in range(d)]]
    cut = [[-1] * d]
    for k in range(1, K):
        row, back, prev = [inf] * d, [-1] * d, best[-1]
        for j in range(d):
            top = lengths[ends[j] - 1]
            for i in range(j):
                c = prev[i] + (ends[j] - ends[i]) * top
                if c < row[j]:
                    row[j], back[j] = c, i
        best.append(row)
        cut.append(back)
    k = min(range(K), key=lambda k: (best[k][d - 1], k))
    runs, j = [], d - 1
    while k >= 0 and j >= 0:
        i = cut[k][j]
        runs.append((ends[i] if i >= 0 else 0, ends[j]))
        j, k = i, k - 1
    return runs[::-1]


def encode_text_bucketed(model: nn.Module, tokens: torch.Tensor, max_buckets: int = TRAINING_BUCKETS) -> torch.Tensor:
    """``model.encode_text(tokens)`` (projected, un-normalised, in the rows' order, differentiable), with
    the rows grouped by end-of-text position and each group computed only up to its own last end-of-text
    token.

    Exact for the same towers as :func:`encode_text_to_eot` (causal mask, ``argmax`` pooling: no output
    at or before a row's end-of-text token depends on later positions); any other tower runs the full
    context.  The rows are sorted by end-of-text position (stable), cut into at most ``max_buckets``
    runs that minimise the padded positions (:func:`length_buckets`), each run is encoded trimmed to its
    last end-of-text token, and the results are put back in the original order (an index with autograd).

    The default, :data:`TRAINING_BUCKETS` = 4, was chosen by timing SPECS batches (128 texts of 5–49
    tokens on the teaching CLIP's 103-token stretched tower, forward and backward, CPU time, best of 6):
    against one batch cut at its last end-of-text token, 2 buckets ran 1.7× faster, 3 buckets 2.1×,
    4 buckets 2.2×, and 6 or 8 buckets no faster than 4 (within 3 %, the timing noise): past four the
    padding saved no longer pays for the extra, smaller matrix products.
    """
    try:
        tok_emb, _, _, _, _, mask, pool, _ = text_tower_parts(model)
    except (AttributeError, NotImplementedError):
        return model.encode_text(tokens)
    if mask is None or pool != "argmax" or len(tokens) == 0:
        return model.encode_text(tokens)
    ends = tokens.argmax(dim=1) + 1
    order = torch.argsort(ends, stable=True)
    lengths = ends[order].tolist()
    top = min(lengths[-1], tokens.shape[1])
    # one embedding lookup for the whole batch (one gradient for the table), cut per bucket
    sorted_tokens = tokens[order, :top]
    emb = tok_emb(sorted_tokens)
    parts = []
    for start, stop in length_buckets(lengths, max_buckets):
        L = min(lengths[stop - 1], top)
        parts.append(encode_text_from_embeddings(model, emb[start:stop, :L], sorted_tokens[start:stop, :L]))
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order), device=order.device)
    return torch.cat(parts)[inverse]
