"""SPECS: Long-CLIP positional stretching, hinge losses with the dynamic margin, fine-tuning, score
matrix for the evaluator, specificity of CLIP-S vs SPECS on the teaching set."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from neural.specs import (
    SPECSConfig,
    SPECSScore,
    long_context_for,
    shuffle_words,
    specificity_data,
    specificity_on_corpus,
    specs_losses,
    stretch_backbone,
    stretch_positional_embedding,
    train_specs,
    training_negatives,
)


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs with one torch thread (see conftest.one_torch_thread)."""


@pytest.fixture(scope="module")
def backbone(random_tiny_backbone):
    return random_tiny_backbone


def test_stretch_matches_long_clip_77_to_248():
    pos = torch.randn(77, 6)
    new = stretch_positional_embedding(pos, 248, 20)
    assert new.shape == (248, 6)
    assert torch.equal(new[:20], pos[:20])
    # Long-CLIP: new[20 + 4i + j] = ((4 - j) pos[20 + i] + j pos[21 + i]) / 4, extrapolated after 76
    i, j = 10, 3
    assert torch.allclose(new[20 + 4 * i + j], ((4 - j) * pos[20 + i] + j * pos[21 + i]) / 4, atol=1e-6)
    assert torch.allclose(new[20 + 4 * 56], pos[76], atol=1e-6)
    assert torch.allclose(new[247], pos[76] + 3 * (pos[76] - pos[75]) / 4, atol=1e-5)
    assert long_context_for(77) == (248, 20)
    assert long_context_for(32) == (103, 8)  # proportional for the tiny CLIP
    with pytest.raises(ValueError):
        stretch_positional_embedding(pos, 50)


def test_stretched_backbone_reads_long_captions(backbone):
    lb = stretch_backbone(backbone)
    assert lb.context_length == 103 and lb.tokenize(["a"]).shape == (1, 103)
    assert backbone.context_length == 32  # original untouched
    words = " ".join(["a red circle left of a blue square"] * 6)  # ~50 tokens
    longer = words + " on the grass"
    short_a, short_b = backbone.encode_texts([words, longer])
    assert torch.allclose(short_a, short_b)  # both truncated at 32 tokens: the ending is invisible
    long_a, long_b = lb.encode_texts([words, longer])
    assert not torch.allclose(long_a, long_b)  # the stretched context sees it


def _old_specs_losses(s_prev, s_next, s_neg_next, eps_max=0.1):
    """The formula before the fix: hinges on cosines, L_neg on (c_{k+1}, c_{k+1} ⊕ u⁻), ε ≤ 0.1."""
    gain_pos, gain_neg = s_next - s_prev, s_next - s_neg_next
    e_pos, e_neg = gain_pos.mean().clamp(0, eps_max), gain_neg.mean().clamp(0, eps_max)
    return torch.relu(e_pos - gain_pos).mean(), torch.relu(e_neg - gain_neg).mean()


def test_specs_losses_hand_computed_on_logits_against_the_base_caption():
    """SPECS Eqs. 3–4 as the authors' code: both hinges against the base caption c_j, on logits
    (exp(logit_scale) · cos), margin clamped to [0, 1.5].  The old formula (L_neg against c_{j+1}, cosine
    scale, clamp 0.1) gives other values on the same similarities."""
    scale = 100.0
    cos_base = torch.tensor([0.20, 0.30, 0.10])
    cos_pos = torch.tensor([0.25, 0.28, 0.20])
    cos_neg = torch.tensor([0.21, 0.30, 0.05])       # cos(I, c_j ⊕ d⁻)
    l_pos, l_neg, e_pos, e_neg = specs_losses(scale * cos_base, scale * cos_pos, scale * cos_neg)
    gain_pos = [5.0, -2.0, 10.0]                      # z(c_j ⊕ d⁺) − z(c_j)
    gain_neg = [-1.0, 0.0, 5.0]                       # z(c_j) − z(c_j ⊕ d⁻)
    m_pos, m_neg = min(1.5, np.mean(gain_pos)), min(1.5, max(0.0, np.mean(gain_neg)))
    assert float(e_pos) == pytest.approx(1.5) and float(e_neg) == pytest.approx(4 / 3, abs=1e-5)
    assert float(l_pos) == pytest.approx(np.mean([max(0, m_pos - g) for g in gain_pos]), abs=1e-4)
    assert float(l_neg) == pytest.approx(np.mean([max(0, m_neg - g) for g in gain_neg]), abs=1e-4)
    # the margin never drops below eps_min
    _, _, e_pos, _ = specs_losses(scale * cos_base, scale * (cos_pos - 1.0), scale * cos_neg, 0.01)
    assert float(e_pos) == pytest.approx(0.01)
    # the old formula: the negative compared with c_{j+1} (the same unit appended to it), cosine scale
    old_pos, old_neg = _old_specs_losses(cos_base, cos_pos, cos_neg)
    assert abs(float(l_pos) - float(old_pos)) > 0.1 and abs(float(l_neg) - float(old_neg)) > 0.1


def test_specificity_data_teaching_and_generic(small_teaching_set):
    ts = small_teaching_set
    ids = list(ts.split("test"))[:5]
    units, negs = specificity_data(ts, ids)
    assert all(len(u) == len(n) and len(u) >= 1 for u, n in zip(units, negs))
    assert " ".join(units[0]) == ts.describe(ids[0])[0].text

    class Plain:  # a corpus without describe(): detail units of the longest caption
        def __init__(self, corpus):
            self.c = corpus

        def captions_of(self, i):
            return self.c.captions_of(i)

    units2, negs2 = specificity_data(Plain(ts), ids, seed=1)
    for i, u in zip(ids, units2):
        longest = max(ts.captions_of(i), key=lambda c: len(c.text)).text
        assert " ".join(u) == longest
    for k, ns in enumerate(negs2):  # negatives are units of OTHER images' captions
        others = {x for j, u in enumerate(units2) if j != k for x in u}
        assert len(ns) == len(units2[k]) and all(n in others for n in ns)
    # per_step=False (training): one negative per image, repeated for every step, on either kind of corpus
    for corpus in (ts, Plain(ts)):
        u3, n3 = specificity_data(corpus, ids, seed=1, per_step=False)
        assert [len(n) for n in n3] == [len(u) for u in u3] and all(len(set(n)) == 1 for n in n3)
    assert any(len(set(n)) > 1 for n in negs2)   # per step, they differ


def test_fine_tuning_and_score_matrix(backbone, small_teaching_set, tmp_cache):
    from corpora.protocol import hodosh_pool
    from evaluation import evaluate_pool
    from neural.base import affinity_for_pool

    ts = small_teaching_set
    log: list = []
    cfg = SPECSConfig.for_tiny(steps=8, batch_size=12)
    sb = train_specs(backbone, ts, config=cfg, cache=tmp_cache, show_progress=False, log=log)
    assert len(log) == 8 and all(np.isfinite(e["loss"]) for e in log)
    assert all(0.0 <= e["eps_pos"] <= 1.5 and 0.0 <= e["eps_neg"] <= 1.5 for e in log)
    assert sb.context_length == 103
    changed = [k for k, v in sb.model.state_dict().items()
               if k in backbone.model.state_dict() and v.shape == backbone.model.state_dict()[k].shape
               and not torch.equal(v, backbone.model.state_dict()[k])]
    assert "visual.proj" in changed and "text_projection" in changed
    scorer = SPECSScore(sb)
    pool = hodosh_pool(ts, "test")
    S = affinity_for_pool(scorer, ts, pool)
    assert S.shape == (pool.n_images, pool.n_captions) and S.dtype == np.float32
    assert np.all(S >= 0) and np.all(S <= 1)
    evaluate_pool(S, pool)
    ims = [ts.load_image(i) for i in pool.image_ids[:2]]
    np.testing.assert_allclose(scorer.score(ims, [c.text for c in pool.captions[:2]]),
                               np.diag(scorer.score_matrix(ims, [c.text for c in pool.captions[:2]])), atol=1e-5)
    # the reference code's map of the raw cosine, (cos + 1) / 2 (strictly increasing: no ties at 0)
    from neural.base import image_embeddings
    cos = image_embeddings(sb, ims) @ sb.encode_texts([c.text for c in pool.captions[:3]]).numpy().T
    np.testing.assert_allclose(scorer.score_matrix(ims, [c.text for c in pool.captions[:3]]), (cos + 1) / 2,
                               atol=1e-5)
    np.testing.assert_allclose(scorer._map(np.array([-1.0, -0.4, 0.0, 0.3, 1.0])), [0.0, 0.3, 0.5, 0.65, 1.0],
                               atol=1e-6)
    sr = specificity_on_corpus({"SPECS": scorer}, ts, max_images=6)
    assert set(sr) == {"SPECS"} and 0.0 <= sr["SPECS"]["SR_pos"] <= 1 and 0.0 <= sr["SPECS"]["SR_neg"] <= 1


def test_logged_contrastive_term_is_half_the_symmetric_cross_entropy(backbone, small_teaching_set):
    """L_con (CLIP's symmetric InfoNCE) = ½ [CE(image→text) + CE(text→image)] over the batch of full
    captions c_K, with the model's own temperature; the logged total is α L_con + β L_pos + γ L_neg.
    One step on every training image at once (the batch is then a permutation of them, and L_con does
    not depend on its order), computed by hand from the weights before the step."""
    import torch.nn.functional as F

    ts = small_teaching_set
    ids = [i for i in list(ts.split("train"))[:8] if len(ts.describe(i)[1]) >= 2]
    assert len(ids) >= 4
    cfg = SPECSConfig.for_tiny(steps=1, batch_size=64)
    log: list = []
    train_specs(backbone, ts, config=cfg, show_progress=False, log=log, image_ids=ids)
    assert len(log) == 1

    lb = stretch_backbone(backbone, precision="fp32")     # the untrained long-context model
    m = lb.model.train()
    full = [ts.describe(i)[0].text for i in ids]            # the full caption c_K = all units joined
    with torch.no_grad():
        v = F.normalize(m.encode_image(lb.preprocess_images([ts.load_image(i) for i in ids])).float(), dim=-1)
        t = F.normalize(m.encode_text(lb.tokenize(full)).float(), dim=-1)
        logits = m.logit_scale.exp().clamp(max=100.0) * v @ t.T
        ce_it = -torch.log_softmax(logits, 1).diag().mean()
        ce_ti = -torch.log_softmax(logits.T, 1).diag().mean()
    e = log[0]
    assert e["L_con"] == pytest.approx(float(0.5 * (ce_it + ce_ti)), rel=1e-4)
    assert e["loss"] == pytest.approx(cfg.alpha * e["L_con"] + cfg.beta * e["L_pos"] + cfg.gamma * e["L_neg"],
                                      rel=1e-5)


def test_training_negatives_shuffle_ninety_percent_seeded():
    """SPECS: 90 % of the negative details are token-shuffled (a seeded choice of images); the rest are
    kept verbatim; shuffling only reorders the words."""
    negs = [[f"w{i}a w{i}b w{i}c w{i}d w{i}e w{i}f"] * 2 for i in range(50)]
    out = training_negatives(negs, 0.9, seed=3)
    changed = [i for i, (a, b) in enumerate(zip(negs, out)) if a != b]
    assert 40 <= len(changed) <= 45          # 45 chosen; a permutation may rarely be the identity
    assert all(sorted(b[0].split()) == sorted(a[0].split()) for a, b in zip(negs, out))
    assert out == training_negatives(negs, 0.9, seed=3) and out != training_negatives(negs, 0.9, seed=4)
    assert training_negatives(negs, 0.0) == negs
    assert sorted(shuffle_words("a b c", np.random.default_rng(0)).split()) == ["a", "b", "c"]


def test_training_negative_is_appended_to_the_base_caption(backbone, small_teaching_set, monkeypatch):
    """The negative caption of a training step is c_j ⊕ d⁻ (the base caption c_j, like the positive
    c_j ⊕ d⁺), not c_{j+1} ⊕ d⁻ as before; and most negatives are word-shuffled units."""
    import neural.specs as specs_mod

    seen: list[list[str]] = []
    real = specs_mod.stretch_backbone

    def spying(*a, **kw):
        bb = real(*a, **kw)
        tok = bb.tokenize

        def tokenize(texts):
            seen.append(list(texts))
            return tok(texts)

        bb.tokenize = tokenize
        return bb

    monkeypatch.setattr(specs_mod, "stretch_backbone", spying)
    ts = small_teaching_set
    train_specs(backbone, ts, config=SPECSConfig.for_tiny(steps=2, batch_size=8), show_progress=False)
    texts = [t for t in seen if len(t) == 32]
    assert len(texts) == 2
    for t in texts:
        full, prev, nxt, neg = t[:8], t[8:16], t[16:24], t[24:]
        for p, x, n in zip(prev, nxt, neg):
            assert n.startswith(p) and x.startswith(p) and not n.startswith(x)


class _ReversedScorer:
    """A scorer whose output map is DEcreasing in the cosine: θ must not follow it."""

    def __init__(self, backbone):
        self.backbone = backbone

    def score_matrix(self, images, captions):
        from neural.specs import raw_cosine_matrix
        return -raw_cosine_matrix(self.backbone, images, captions)


def test_specificity_theta_is_the_raw_cosine_for_every_model(backbone, small_teaching_set):
    """SPECS Eqs. 1–2 with θ = the raw image–text cosine: a scorer's output map (here a decreasing one)
    does not change its rates, which equal those of its backbone's cosine.  The old code used each
    scorer's own score_matrix, where the reversed map swaps success and failure."""
    from neural.clipscore import CLIPScore

    ts = small_teaching_set
    sr = specificity_on_corpus({"raw": backbone, "rev": _ReversedScorer(backbone), "clips": CLIPScore(backbone)},
                               ts, max_images=8)
    for k in ("SR_pos", "SR_neg"):
        assert sr["rev"][k] == sr["raw"][k] == sr["clips"][k]
    own = specificity_on_corpus({"rev": _ReversedScorer(backbone)}, ts, max_images=8, theta="score")["rev"]
    assert (own["SR_pos"], own["SR_neg"]) != (sr["raw"]["SR_pos"], sr["raw"]["SR_neg"])
    with pytest.raises(TypeError):
        specificity_on_corpus({"x": object()}, ts, max_images=2)


class _RawScorer:
    """The raw cosine as a scorer's own map (θ = "score" then computes it without any sharing)."""

    def __init__(self, backbone):
        self.backbone = backbone

    def score_matrix(self, images, captions):
        from neural.specs import raw_cosine_matrix
        return raw_cosine_matrix(self.backbone, images, captions)


def test_specificity_encodes_each_backbones_images_once(backbone, small_teaching_set):
    """Scorers sharing a backbone share its θ: the test images are encoded once for all of them, not
    at all when the backbone already holds them in its corpus-image table, and the rates are those of
    the raw cosine computed directly."""
    from neural.clipscore import CLIPScore

    ts = small_teaching_set
    ids = list(ts.split("test"))[:8]
    backbone.clear_image_memo()
    before = backbone.n_image_encodes
    sr = specificity_on_corpus({"a": CLIPScore(backbone), "b": _ReversedScorer(backbone), "c": backbone}, ts,
                               max_images=8)
    assert backbone.n_image_encodes - before == len(ids)
    backbone.encode_corpus_images(ts, ids)          # already in memory: nothing encoded
    again = specificity_on_corpus({"a": CLIPScore(backbone)}, ts, max_images=8)
    assert backbone.n_image_encodes - before == len(ids)
    direct = specificity_on_corpus({"raw": _RawScorer(backbone)}, ts, max_images=8, theta="score")["raw"]
    for r in (sr["a"], sr["b"], sr["c"], again["a"]):
        assert (r["SR_pos"], r["SR_neg"]) == (direct["SR_pos"], direct["SR_neg"])
        assert np.array_equal(r["hits_pos"], direct["hits_pos"]) and np.array_equal(r["hits_neg"], direct["hits_neg"])
