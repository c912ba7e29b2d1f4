"""The token-row memo (neural.token_memo): exactly the tokenizer's output, for any context length;
tokenizers not known to be deterministic are called as they are."""
from __future__ import annotations

import copy

import numpy as np
import torch

from neural.token_memo import memo_key
from neural.token_memo import tokenize as memo_tokenize


def _mixed_texts() -> list[str]:
    base = ["a", "a red circle", "two blue squares above a green triangle",
            "a small yellow star to the left of a large red circle and a blue square",
            " ".join(["a red circle left of a blue square"] * 6)]   # longer than the context: truncated
    rng = np.random.default_rng(3)
    return [base[k] for k in rng.integers(len(base), size=23)] + ["a green triangle", "one star"]


def test_token_memo_equals_the_tokenizer_and_follows_the_context_length(random_tiny_backbone):
    tok = random_tiny_backbone.tokenizer
    assert memo_key(tok) is not None
    texts = _mixed_texts() + ["", "Ünïcödé, punctuation!? and   spaces"]
    first = memo_tokenize(tok, texts)
    assert torch.equal(first, tok(texts))
    # served from memory: the BPE encoder is not called again for these texts
    calls = []
    tok2 = copy.copy(tok)
    tok2.encode = lambda t: calls.append(t) or type(tok).encode(tok, t)
    assert torch.equal(memo_tokenize(tok2, texts), first) and not calls
    # a shorter and a longer context are built for their own length, not served from the old rows
    for L in (6, 80):
        other = copy.copy(tok)
        other.context_length = L
        got = memo_tokenize(other, texts)
        assert got.shape == (len(texts), L)
        assert torch.equal(got, other(texts))
    assert random_tiny_backbone.token_lengths(["a red circle"]) == [len(tok.encode("a red circle")) + 2]


def test_token_memo_passes_other_tokenizers_through(random_tiny_backbone):
    from open_clip.tokenizer import SimpleTokenizer

    class Counting:                             # e.g. a Hugging Face tokenizer: called every time
        context_length = 5
        calls = 0

        def __call__(self, texts):
            Counting.calls += 1
            return torch.full((len(texts), 5), Counting.calls)

    c = Counting()
    assert memo_key(c) is None
    assert int(memo_tokenize(c, ["a"])[0, 0]) == 1 and int(memo_tokenize(c, ["a"])[0, 0]) == 2
    masked = SimpleTokenizer(context_length=8, reduction_mask="random")   # random reduction: not memoised
    assert memo_key(masked) is None
    assert memo_tokenize(masked, ["a red circle"]).shape == (1, 8)
