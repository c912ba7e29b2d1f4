"""The text tower of a CLIP, taken apart: its pieces, and the text features computed from token
*embeddings* or only up to the last end-of-text token.

Used by :class:`neural.backbone.Backbone` (text encoding cut at the batch's last end-of-text token),
BRIDGE (pseudo-tokens fed through the frozen text tower), SPECS (trimmed encoding while training) and the
L-CLIPScore student (pooling and projection).  Works on open_clip ``CLIP`` (text tower on the model),
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
           "encode_text_to_eot"]


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
