"""Length-bucketed text encoding (neural.text_tower.encode_text_bucketed): the same features and
gradients as the full-context forward, in the rows' order."""
from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch

from neural.text_tower import encode_text_bucketed, length_buckets


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


def _mixed_texts() -> list[str]:
    base = ["a", "a red circle", "two blue squares above a green triangle",
            "a small yellow star to the left of a large red circle and a blue square",
            " ".join(["a red circle left of a blue square"] * 6)]   # longer than the context: truncated
    rng = np.random.default_rng(3)
    return [base[k] for k in rng.integers(len(base), size=23)] + ["a green triangle", "one star"]


def _padded(lengths: list[int], runs: list[tuple[int, int]]) -> int:
    return sum((b - a) * lengths[b - 1] for a, b in runs)


def test_length_buckets_are_optimal_contiguous_runs():
    rng = np.random.default_rng(0)
    for _ in range(40):
        lengths = sorted(rng.integers(2, 30, size=int(rng.integers(1, 11))).tolist())
        for k in (1, 2, 3, 4):
            runs = length_buckets(lengths, k)
            assert 1 <= len(runs) <= k
            assert runs[0][0] == 0 and runs[-1][1] == len(lengths)
            assert all(a < b for a, b in runs) and all(r[1] == s[0] for r, s in zip(runs, runs[1:]))
            # brute force over every set of at most k − 1 cut points
            best = min(_padded(lengths, list(zip((0, *cuts), (*cuts, len(lengths)))))
                       for m in range(min(k, len(lengths)))
                       for cuts in itertools.combinations(range(1, len(lengths)), m))
            assert _padded(lengths, runs) == best
    assert length_buckets([], 4) == []
    assert length_buckets([5, 5, 5], 4) == [(0, 3)]


def _check_same_as_full(model, tokens, buckets):
    """Bucketed vs the full-context forward: values, order and parameter gradients."""
    w = torch.randn(len(tokens), model.text_projection.shape[1], generator=torch.Generator().manual_seed(1))
    model.zero_grad(set_to_none=True)
    ref = model.encode_text(tokens)
    (ref * w).sum().backward()
    ref_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    got = encode_text_bucketed(model, tokens, buckets)
    (got * w).sum().backward()
    torch.testing.assert_close(got, ref, rtol=0, atol=2e-5)
    assert ref_grads
    for n, g in ref_grads.items():
        p = dict(model.named_parameters())[n]
        assert p.grad is not None, n
        scale = float(g.abs().max())         # float rounding of sums over rows and positions
        torch.testing.assert_close(p.grad, g, rtol=0, atol=5e-5 * scale, msg=lambda m, n=n, s=scale: f"{n} (max |grad| {s:.3g}): {m}")
    model.zero_grad(set_to_none=True)


def test_bucketed_encode_equals_full_encode_with_gradients(random_tiny_backbone, monkeypatch):
    from neural import text_tower
    from neural.specs import stretch_backbone

    texts = _mixed_texts()
    for bb in (random_tiny_backbone, stretch_backbone(random_tiny_backbone, 80, 8, precision="fp32")):
        model = copy.deepcopy(bb.model).float().train()
        tokens = bb.tokenize(texts)
        ends = tokens.argmax(1)
        assert len(set(ends.tolist())) >= 4 and not torch.equal(ends, ends.sort().values)   # mixed, unsorted
        widths = []
        real = text_tower.encode_text_from_embeddings
        monkeypatch.setattr(text_tower, "encode_text_from_embeddings",
                            lambda m, x, t: widths.append(x.shape[1]) or real(m, x, t))
        for k in (1, 3, 4):
            widths.clear()
            _check_same_as_full(model, tokens, k)
            assert len(widths) == k and max(widths) == int(ends.max()) + 1   # k runs, none at full context
        monkeypatch.setattr(text_tower, "encode_text_from_embeddings", real)
        # order preserved: each row equals its own single-row encode
        with torch.no_grad():
            got = encode_text_bucketed(model, tokens)
            for i in (0, 7, len(texts) - 1):
                torch.testing.assert_close(got[i], model.encode_text(tokens[i:i + 1])[0], rtol=0, atol=2e-5)


def test_bucketed_encode_on_the_lclip_student(random_tiny_backbone):
    from neural.lclip import MultiplexedCLIP

    torch.manual_seed(0)
    student = MultiplexedCLIP(random_tiny_backbone.model, 1, 2, 1, 2).train()
    _check_same_as_full(student, random_tiny_backbone.tokenize(_mixed_texts()), 4)


def test_bucketed_encode_runs_full_context_without_a_causal_mask(random_tiny_backbone):
    model = copy.deepcopy(random_tiny_backbone.model)
    model.attn_mask = None                      # bidirectional: trimming would not be exact
    tokens = random_tiny_backbone.tokenize(_mixed_texts())
    calls = []
    real = model.encode_text
    model.encode_text = lambda t: calls.append(t.shape) or real(t)
    with torch.no_grad():
        out = encode_text_bucketed(model, tokens)
    assert calls == [tokens.shape] and out.shape[0] == len(tokens)
