"""BRIDGE's template captions as token ids (Sarto et al. 2024, Sec. 3.2): one replica per noun chunk of
a template caption, the chunk replaced by ``n_pseudo`` slots (``*`` tokens) that the mapping module
fills with pseudo-tokens; and the L3 targets, the prompt ``"a photo of a <noun chunk>"`` of each
masked chunk (:mod:`neural.bridge`).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from neural.text_units import MaskTemplate
from neural.token_memo import tokenize as memo_tokenize

__all__ = ["SLOT_WORD", "TemplateBatch", "build_template_tokens", "chunk_prompt", "l3_targets"]

#: The placeholder word of the slots (its token id marks where the pseudo-tokens go).
SLOT_WORD = "*"


def l3_targets(chunks: Sequence[str]) -> tuple[list[str], np.ndarray]:
    """The distinct L3 target prompts (:func:`chunk_prompt`, sorted) and each chunk's index into them.

    Chunks with the same prompt ("A big black cross", "a big black cross", "the big black cross") share
    one target embedding, so L3 treats them as positives of each other, never as negatives."""
    prompts = [chunk_prompt(c) for c in chunks]
    uniq = sorted(set(prompts))
    where = {q: k for k, q in enumerate(uniq)}
    return uniq, np.array([where[q] for q in prompts], dtype=np.int64)


def chunk_prompt(chunk: str) -> str:
    """``"a photo of a <noun chunk>"`` with the chunk's own leading article dropped."""
    words = chunk.strip().split()
    while words and words[0].lower() in {"a", "an", "the"}:
        words = words[1:]
    return "a photo of a " + (" ".join(words) if words else chunk.strip())


@dataclass
class TemplateBatch:
    """Token ids of template replicas with slot positions: ``tokens`` (R, L), ``slots`` (R, L) bool,
    ``owner`` (R,) index of the image, ``chunks`` the masked noun chunk of each replica."""

    tokens: torch.Tensor
    slots: torch.Tensor
    owner: np.ndarray
    chunks: list[str]


def _slot_id(tokenizer) -> int:
    a = tokenizer([SLOT_WORD + " " + SLOT_WORD + " " + SLOT_WORD])[0].tolist()
    b = set(tokenizer([""])[0].tolist())
    cands = [t for t in a if t not in b]
    if not cands:
        raise ValueError("tokenizer: cannot find a token id for the slot placeholder '*'")
    return max(set(cands), key=cands.count)


def build_template_tokens(tokenizer, templates: Sequence[Sequence[MaskTemplate]], n_pseudo: int = 3,
                          max_per_image: int | None = None) -> TemplateBatch:
    """Tokenise every template replica with ``*`` in the slots and locate the slots.

    A replica whose slots were cut by truncation is dropped; an image left without any replica (every
    noun chunk lies beyond the context length) gets one with the whole caption masked, as
    :func:`~neural.text_units.mask_templates` does for a caption without noun chunks: the template is
    the slots alone and its chunk the whole caption.  An image with no template at all is an error.
    """
    slot = _slot_id(tokenizer)
    texts, owner, chunks = [], [], []
    whole: dict[int, str] = {}
    for i, tpls in enumerate(templates):
        tpls = list(tpls)[:max_per_image] if max_per_image else list(tpls)
        if not tpls:
            raise ValueError(f"template captions[{i}]: no template (empty caption?)")
        t0 = tpls[0]
        whole[i] = " ".join(p for p in (t0.prefix.strip(), t0.chunk.strip(), t0.suffix.strip()) if p)
        for t in tpls:
            texts.append(MaskTemplate(t.prefix.replace(SLOT_WORD, " "), t.suffix.replace(SLOT_WORD, " "),
                                      t.chunk, n_pseudo).render(SLOT_WORD))
            owner.append(i)
            chunks.append(t.chunk)
    tokens = memo_tokenize(tokenizer, texts) if texts else torch.zeros((0, 1), dtype=torch.long)
    slots = tokens == slot
    ok = (slots.sum(1) == n_pseudo).numpy()
    owner_a = np.asarray(owner, dtype=np.int64)
    lost = [i for i in range(len(templates)) if not np.any(ok & (owner_a == i))]
    idx = np.flatnonzero(ok)
    tokens, slots, owner_a, chunks = tokens[idx], slots[idx], owner_a[idx], [chunks[k] for k in idx]
    if lost:
        extra = memo_tokenize(tokenizer, [MaskTemplate("", "", whole[i], n_pseudo).render(SLOT_WORD) for i in lost])
        extra_slots = extra == slot
        if tokens.shape[0] == 0:
            tokens, slots = extra, extra_slots
        else:
            tokens, slots = torch.cat([tokens, extra]), torch.cat([slots, extra_slots])
        owner_a = np.concatenate([owner_a, np.asarray(lost, dtype=np.int64)])
        chunks = chunks + [whole[i] for i in lost]
        order = np.argsort(owner_a, kind="stable")         # replicas grouped by image, in image order
        tokens, slots, owner_a = tokens[torch.from_numpy(order)], slots[torch.from_numpy(order)], owner_a[order]
        chunks = [chunks[k] for k in order]
    return TemplateBatch(tokens, slots, owner_a, chunks)
