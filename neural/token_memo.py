"""Token rows of texts tokenised before, served from memory.

The same texts are tokenised many times in a run: by every backbone that scores them (the CLIP, its PAC-S
fine-tune, the SPECS long-context copy, the L-CLIPScore student share one BPE vocabulary) and by every
SPECS training step.  :func:`tokenize` returns exactly what ``tokenizer(texts)`` returns, keeping each
text's *untruncated* ids (start token, BPE ids, end-of-text token) so that any context length is built
from them as open_clip's ``SimpleTokenizer.__call__`` builds it: ids past the context are cut and the last
kept id becomes the end-of-text token; the rest of the row is 0.

Only a tokenizer whose output is provably a function of the text and of state that the memo's key
holds is memoised: open_clip's ``SimpleTokenizer`` (the CLIP BPE) without a reduction strategy (the
``random_mask`` / ``shuffle`` reductions draw random numbers).  The key is the tokenizer class, its
vocabulary and merge tables (by object, kept alive by the memo so that an id is never reused), its
token pattern and cleaning function and its special ids; the context length is applied per call.  Any
other tokenizer (Hugging Face ones included) is called as it is.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["tokenize", "token_ids", "memo_key", "MEMO_MAX"]

#: Distinct texts kept per tokenizer vocabulary before its table is restarted.
MEMO_MAX = 200_000
#: ``memo_key -> (objects the key refers to by id, {text: untruncated ids})``; at most 8 tables.
_TABLES: dict[tuple, tuple[tuple, dict[str, tuple[int, ...]]]] = {}


def memo_key(tokenizer) -> tuple | None:
    """The identity of everything that decides ``tokenizer``'s ids of a text (before truncation), or
    ``None`` when the tokenizer is not one whose output is known to be deterministic."""
    cls = type(tokenizer)
    if cls.__module__ != "open_clip.tokenizer" or cls.__name__ != "SimpleTokenizer":
        return None
    if getattr(tokenizer, "reduction_fn", None) is not None:
        return None
    try:
        return (cls.__module__, cls.__name__, id(tokenizer.encoder), id(tokenizer.bpe_ranks),
                id(tokenizer.byte_encoder), tokenizer.pat.pattern, tokenizer.clean_fn,
                int(tokenizer.sot_token_id), int(tokenizer.eot_token_id))
    except AttributeError:
        return None


def _table(tokenizer, key: tuple) -> dict[str, tuple[int, ...]]:
    entry = _TABLES.get(key)
    if entry is None or len(entry[1]) > MEMO_MAX:
        if entry is None and len(_TABLES) >= 8:
            _TABLES.pop(next(iter(_TABLES)))
        # the objects whose ids are in the key stay alive as long as the table does
        entry = _TABLES[key] = ((tokenizer.encoder, tokenizer.bpe_ranks, tokenizer.byte_encoder), {})
    return entry[1]


def token_ids(tokenizer, texts: Sequence[str]) -> list[tuple[int, ...]] | None:
    """Untruncated ids (start and end-of-text tokens included) of each text, memoised; ``None`` for a
    tokenizer that :func:`memo_key` does not accept."""
    key = memo_key(tokenizer)
    if key is None:
        return None
    table = _table(tokenizer, key)
    sot, eot = int(tokenizer.sot_token_id), int(tokenizer.eot_token_id)
    out = []
    for t in texts:
        ids = table.get(t)
        if ids is None:
            ids = table[t] = (sot, *tokenizer.encode(t), eot)
        out.append(ids)
    return out


def tokenize(tokenizer, texts: Sequence[str]) -> torch.Tensor:
    """``tokenizer(list(texts))``: ``(N, context_length)`` LongTensor, from memory for the texts seen
    before with the same vocabulary (:func:`memo_key`); any other tokenizer is called directly."""
    texts = list(texts)
    context_length = getattr(tokenizer, "context_length", None)
    rows = token_ids(tokenizer, texts) if context_length else None
    if rows is None:
        return tokenizer(texts)
    L, eot = int(context_length), int(tokenizer.eot_token_id)
    out = np.zeros((len(rows), L), dtype=np.int64)
    for i, ids in enumerate(rows):
        if len(ids) > L:
            out[i] = ids[:L]
            out[i, -1] = eot
        else:
            out[i, :len(ids)] = ids
    return torch.from_numpy(out)
