"""BRIDGE: template tokens and slots, text forward from embeddings, ψ shapes, training lowers the loss,
score matrix for the evaluator."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from neural.bridge import BRIDGE, BridgeConfig, MappingModule, image_global_and_grid
from neural.bridge_templates import build_template_tokens, chunk_prompt, l3_targets
from neural.losses import info_nce
from neural.text_tower import encode_text_from_embeddings
from neural.text_units import mask_templates


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs with one torch thread (see conftest.one_torch_thread)."""


@pytest.fixture(scope="module")
def backbone(random_tiny_backbone):
    return random_tiny_backbone


def test_text_forward_from_embeddings_matches_encode_text(backbone):
    m = backbone.model
    tok = backbone.tokenize(["a red circle left of a blue square", "two dogs on the grass"])
    with torch.no_grad():
        ref = m.encode_text(tok)
        out = encode_text_from_embeddings(m, m.token_embedding(tok), tok)
        L = int(tok.argmax(1).max()) + 1  # trailing padding cut: exact under the causal mask
        cut = encode_text_from_embeddings(m, m.token_embedding(tok[:, :L]), tok[:, :L])
    assert torch.allclose(out, ref, atol=1e-5) and torch.allclose(cut, ref, atol=1e-5)


def test_grid_features_and_global_embedding(backbone):
    visual = backbone.model.visual
    size = visual.image_size[0] if isinstance(visual.image_size, (tuple, list)) else visual.image_size
    patch = visual.patch_size[0] if isinstance(visual.patch_size, (tuple, list)) else visual.patch_size
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        g, grid = image_global_and_grid(backbone.model, x)
        assert torch.allclose(g, backbone.model.encode_image(x), atol=1e-5)
    # One grid feature per patch of the tiny ViT, each of the transformer's width.
    assert tuple(grid.shape) == (2, (size // patch) ** 2, visual.transformer.width)


def test_template_tokens_locate_three_slots(backbone):
    text = "A green diamond sits above a big orange box."
    tags = ("DT", "JJ", "NN", "VBZ", "IN", "DT", "JJ", "JJ", "NN", ".")
    tb = build_template_tokens(backbone.tokenizer, [mask_templates(text, tags)])
    assert tb.tokens.shape == (2, backbone.context_length)
    assert tb.slots.sum(1).tolist() == [3, 3]
    assert tb.chunks == ["green diamond", "big orange box"]     # the determiner stays outside the mask
    # slots sit where the chunk was: right after <start> and "A" for the first replica
    assert tb.slots[0, 2:5].all() and not tb.slots[0, :2].any()
    assert chunk_prompt("a big orange box") == "a photo of a big orange box"
    # a replica cut by truncation is dropped; an image left with none gets one masking the whole
    # caption (slots right after <start>, chunk = the caption); the other images keep theirs, in order
    long = " ".join(["word"] * 60) + " a dog"
    tb = build_template_tokens(backbone.tokenizer, [mask_templates(text, tags),
                                                    mask_templates(long, ["VB"] * 60 + ["DT", "NN"])])
    assert tb.owner.tolist() == [0, 0, 1]
    assert tb.chunks == ["green diamond", "big orange box", long]
    assert tb.slots.sum(1).tolist() == [3, 3, 3] and tb.slots[2, 1:4].all()
    assert int(tb.tokens[2, 4]) == int(backbone.tokenizer([""])[0, 1])     # <end> right after the slots
    with pytest.raises(ValueError, match=r"template captions\[0\]: no template"):
        build_template_tokens(backbone.tokenizer, [[]])


def test_mapping_module_shapes_and_only_slots_change():
    psi = MappingModule(text_width=16, vision_width=24, layers=2, heads=4)
    emb = torch.randn(3, 7, 16)
    slots = torch.zeros(3, 7, dtype=torch.bool)
    slots[:, 2:5] = True
    pad = torch.zeros(3, 7, dtype=torch.bool)
    pad[:, 6] = True
    out = psi(emb, torch.zeros(7, 16), slots, pad, torch.randn(3, 10, 24))
    assert out.shape == (3, 7, 16)
    assert torch.equal(out[~slots], emb[~slots]) and not torch.allclose(out[slots], emb[slots])
    assert len(psi.layers) == 2


def test_training_lowers_loss_and_score_matrix_feeds_evaluator(backbone, small_teaching_set, tmp_cache):
    from corpora.protocol import hodosh_pool
    from evaluation import evaluate_pool

    ts = small_teaching_set
    probe = list(ts.split("train"))[:24]
    br = BRIDGE(backbone, BridgeConfig(steps=25, batch_size=16, seed=0))
    before = br.loss_on(ts, probe)
    br.fit(ts, cache=tmp_cache, show_progress=False)
    after = br.loss_on(ts, probe)
    assert after < before
    assert len(br.log) == 25 and np.mean([r[0] for r in br.log[-5:]]) < np.mean([r[0] for r in br.log[:5]])
    # cached refit restores the same ψ
    br2 = BRIDGE(backbone, BridgeConfig(steps=25, batch_size=16, seed=0)).fit(ts, cache=tmp_cache,
                                                                               show_progress=False)
    assert br2.cache_identity() == br.cache_identity()

    pool = hodosh_pool(ts, "test")
    S = br.affinity(ts, pool)
    assert S.shape == (pool.n_images, pool.n_captions) and S.dtype == np.float32
    assert np.all(S >= 0) and np.all(S <= 2.5)
    evaluate_pool(S, pool)
    # affinity_for_pool asks BRIDGE for its own pool affinity (describe() templates, as chosen at fit time),
    # cached under the scorer, the pool and the pool images' signatures
    from neural.base import affinity_for_pool

    np.testing.assert_array_equal(affinity_for_pool(br, ts, pool, cache=tmp_cache), S)
    assert br.cache_identity()["template_source"] == "describe"
    entries = sorted((tmp_cache.root / "neural_affinity").rglob("*.npz"))
    assert len(entries) == 1
    with np.load(entries[0]) as z:
        assert '"images"' in str(z["__key__"])
    np.testing.assert_array_equal(affinity_for_pool(br, ts, pool, cache=tmp_cache), S)   # read back
    # Eq. 4 by hand for one pair: ½ [CLIP-S + 2.5 max(cos(t*, t), 0)]
    from neural.base import with_prompt

    img = [ts.load_image(pool.image_ids[0])]
    tmpl = [ts.describe(pool.image_ids[0])[0]]
    cap = pool.captions[0].text
    v, t_star = br.pseudo_embeddings(img, [tmpl[0].text], [tmpl[0].pos])
    c1 = backbone.encode_texts(with_prompt([cap])).numpy()[0]
    c2 = backbone.encode_texts([cap]).numpy()[0]
    ts_n = t_star[0] / np.linalg.norm(t_star[0])
    expect = 0.5 * (2.5 * max(float(v[0] @ c1), 0) + 2.5 * max(float(ts_n @ c2), 0))
    got = br.score(img, [cap], template_captions=[tmpl[0].text], template_tags=[tmpl[0].pos])
    assert got[0] == pytest.approx(expect, abs=1e-4)
    assert S[0, 0] == pytest.approx(expect, abs=1e-4)
    # fallback templates (nearest training caption) work from pixels alone
    S_fb = br.score_matrix([ts.load_image(i) for i in pool.image_ids[:3]], [c.text for c in pool.captions[:4]])
    assert S_fb.shape == (3, 4) and np.isfinite(S_fb).all()
    with pytest.raises(ValueError, match="grid features"):
        br.score_matrix(np.zeros((2, 128), np.float32), ["a"])


def test_refit_starts_from_the_seed_and_l3_positives_share_a_prompt(backbone, small_teaching_set):
    """Fitting an object again gives exactly what a fresh object gives (ψ and the MLP start from the
    seed, not from the previous fit), and L3 counts chunks with the same prompt as positives."""
    ts = small_teaching_set
    ids = list(ts.split("train"))
    cfg = BridgeConfig(steps=4, batch_size=8, seed=3)
    fresh = BRIDGE(backbone, cfg).fit(ts, image_ids=ids[8:20], show_progress=False)
    again = BRIDGE(backbone, cfg).fit(ts, image_ids=ids[:8], show_progress=False)
    again.fit(ts, image_ids=ids[8:20], show_progress=False)
    assert again.cache_identity()["psi"] == fresh.cache_identity()["psi"]
    assert again.log == fresh.log

    uniq, idx = l3_targets(["A big black cross", "a big black cross", "the red star", "a blue square",
                            "red star"])
    assert uniq == ["a photo of a big black cross", "a photo of a blue square", "a photo of a red star"]
    assert idx.tolist() == [0, 0, 2, 1, 2]

    import neural.bridge as nb

    masks, rows_seen = [], []
    orig_nce, orig_pseudo = nb.info_nce, BRIDGE._pseudo
    mp = pytest.MonkeyPatch()
    mp.setattr(nb, "info_nce", lambda a, b, **kw: masks.append(kw["targets"].cpu().numpy()) or orig_nce(a, b, **kw))
    mp.setattr(BRIDGE, "_pseudo", lambda self, tb, grid, rows: rows_seen.append([tb.chunks[r] for r in rows])
               or orig_pseudo(self, tb, grid, rows))
    try:
        BRIDGE(backbone, BridgeConfig(steps=1, batch_size=8, seed=3)).fit(ts, image_ids=ids[:8],
                                                                         show_progress=False)
    finally:
        mp.undo()
    _, k = l3_targets(rows_seen[0])
    np.testing.assert_array_equal(masks[0], k[:, None] == k[None, :])   # info_nce is L3 only now


def test_captions_file_missing_an_image_names_it_before_training(backbone, small_teaching_set):
    """A template captions file without some training image: fit says which (not a bare KeyError of
    the cache key), before any image is loaded; image_ids= limits the training images."""
    ts = small_teaching_set
    ids = list(ts.split("train"))
    cf = {i: "a dog on the grass" for i in ids[:-1]}
    br = BRIDGE(backbone, BridgeConfig(steps=1, batch_size=4))
    with pytest.raises(KeyError, match=r"template captions file has no caption for 1 image\(s\)") as e:
        br.fit(ts, captions_file=cf, show_progress=False)
    assert ids[-1] in str(e.value)
    br.fit(ts, captions_file=cf, show_progress=False, image_ids=ids[:8])   # the ids the file covers
    assert br.template_source == "captions_file" and len(br.bank_texts) == sum(
        len(ts.captions_of(i)) for i in ids[:8])
    # over a pool, the fit's captions file supplies the templates (affinity_for_pool → BRIDGE.affinity)
    from corpora.protocol import hodosh_pool
    from neural.base import affinity_for_pool

    pool = hodosh_pool(ts, "test")
    cf_pool = {i: ts.captions_of(i)[0].text for i in pool.image_ids}
    br.fit(ts, captions_file={**cf, **cf_pool}, show_progress=False, image_ids=ids[:8])
    S = affinity_for_pool(br, ts, pool)
    np.testing.assert_array_equal(S, br.affinity(ts, pool, captions_file={**cf, **cf_pool}))
    ident = br.cache_identity()
    other_pool = {**cf_pool, pool.image_ids[0]: "a purple star at the top"}
    br.fit(ts, captions_file={**cf, **other_pool}, show_progress=False, image_ids=ids[:8])
    assert ident["captions_file"] is not None and br.cache_identity() != ident   # the pool's templates count
    # explicit files that are temporaries (so CPython may reuse one's address for the next): each call
    # gets its own templates, not the previous file's from the per-image memo
    def file_of(text):
        return {i: text for i in pool.image_ids}

    S1 = br.affinity(ts, pool, captions_file=file_of("a red circle on the left"), template_source="captions_file")
    S2 = br.affinity(ts, pool, captions_file=file_of("two purple stars above a green square"),
                     template_source="captions_file")
    kept = file_of("two purple stars above a green square")
    np.testing.assert_array_equal(S2, br.affinity(ts, pool, captions_file=kept, template_source="captions_file"))
    assert not np.array_equal(S1, S2)


def test_soft_info_nce_spreads_the_target_over_every_positive():
    """Several positives per row (BRIDGE's L1-L3: neural.losses.info_nce with targets): the target of row
    i is uniform over its positives (``same[i]`` / its row count), in both directions; the loss is
    ½ (image→text + text→image) soft cross-entropy."""

    def _soft_info_nce(a, b, same, T):
        return info_nce(a, b, temperature=T, targets=same)

    a = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]]), dim=-1)
    b = torch.nn.functional.normalize(torch.tensor([[1.0, 0.1], [0.2, 1.0], [0.7, 0.7]]), dim=-1)
    same = torch.tensor([[True, False, True],      # row 0: two positives (columns 0 and 2)
                         [False, True, False],
                         [False, True, True]])     # row 2: two positives (columns 1 and 2)
    T = 0.5
    logits = (a @ b.T / T).tolist()

    def soft_ce(L, S):
        total = 0.0
        for row, pos in zip(L, S):
            lse = np.log(np.sum(np.exp(row)))
            k = sum(pos)
            total += -sum((row[j] - lse) / k for j in range(len(row)) if pos[j])
        return total / len(L)

    S = same.tolist()
    S_t = [list(c) for c in zip(*S)]
    L_t = [list(c) for c in zip(*logits)]
    expect = 0.5 * (soft_ce(logits, S) + soft_ce(L_t, S_t))
    assert float(_soft_info_nce(a, b, same, T)) == pytest.approx(expect, rel=1e-5)
    # with one positive per row it is the ordinary symmetric InfoNCE
    eye = torch.eye(3, dtype=torch.bool)
    L = a @ b.T / T
    ref = 0.5 * (torch.nn.functional.cross_entropy(L, torch.arange(3))
                 + torch.nn.functional.cross_entropy(L.T, torch.arange(3)))
    assert float(_soft_info_nce(a, b, eye, T)) == pytest.approx(float(ref), rel=1e-5)


def test_temperature_follows_the_clip_logit_scale_with_a_floor(backbone):
    br = BRIDGE(backbone, BridgeConfig(steps=1, layers=1))
    ls = backbone.model.logit_scale
    saved = ls.detach().clone()
    try:
        with torch.no_grad():
            ls.fill_(float(np.log(1 / 0.07)))          # CLIP's initial temperature 0.07
        assert br._temperature == pytest.approx(0.07, rel=1e-5)
        with torch.no_grad():
            ls.fill_(float(np.log(1 / 0.5)))
        assert br._temperature == pytest.approx(0.5, rel=1e-5)
        with torch.no_grad():
            ls.fill_(float(np.log(1000.0)))            # 1 / 1000 is below the floor 0.01
        assert br._temperature == pytest.approx(0.01)
    finally:
        with torch.no_grad():
            ls.copy_(saved)


def test_score_matrix_is_the_mean_of_clip_s_and_the_pseudo_caption_term(backbone, small_teaching_set):
    """Eq. 4: BRIDGE(I, T) = ½ [CLIP-S(v, prompt + T) + 2.5 max(cos(t*, T), 0)]; the diagonal of
    score_matrix equals score on the matched pairs (an untrained ψ is enough)."""
    from neural.base import with_prompt

    ts = small_teaching_set
    ids = list(ts.split("test"))[:3]
    br = BRIDGE(backbone, BridgeConfig(steps=1, layers=1))
    imgs = [ts.load_image(i) for i in ids]
    tmpl = [ts.describe(i)[0] for i in ids]
    texts, tags = [c.text for c in tmpl], [c.pos for c in tmpl]
    caps = [ts.captions_of(i)[0].text for i in ids]
    S = br.score_matrix(imgs, caps, template_captions=texts, template_tags=tags)
    d = br.score(imgs, caps, template_captions=texts, template_tags=tags)
    np.testing.assert_allclose(np.diag(S), d, atol=1e-5)
    v, t_star = br.pseudo_embeddings(imgs, texts, tags)
    c1 = backbone.encode_texts(with_prompt(caps)).numpy()
    c2 = backbone.encode_texts(caps).numpy()
    tn = t_star / np.linalg.norm(t_star, axis=1, keepdims=True)
    expect = 0.5 * (2.5 * np.maximum(v @ c1.T, 0) + 2.5 * np.maximum(tn @ c2.T, 0))
    assert np.any(expect > 0.05)
    np.testing.assert_allclose(S, expect, atol=1e-4)


def _per_image_l1(p, owner, v, temperature):
    """The L1 / L2 before the fix: each pseudo-caption term weighted by 1 / N_i, averaged over the B
    images, both directions averaged, unweighted denominators (an image with more chunks weighs less)."""
    z = p @ v.T / temperature
    B = v.shape[0]
    n = torch.bincount(owner, minlength=B).double()
    pos = torch.nn.functional.one_hot(owner, B).bool()
    zp = z[pos]
    rows = torch.logsumexp(z.masked_fill(pos, float("-inf")), 1) - zp
    cols = torch.logsumexp(z.masked_fill(pos, float("-inf")), 0)[owner] - zp
    w = 1.0 / n[owner]
    return float(0.5 * ((w * rows).sum() + (w * cols).sum()) / B)


def test_bridge_pair_loss_supplementary_eqs_5_6_as_printed():
    """L1 / L2 (supplementary Eqs. 5–6) written out term by term on a batch whose images have 3, 1 and 2
    pseudo-captions: 1/M over the M = 6 pseudo-captions, the negative images of the first term weighted
    by their chunk counts N_j, the second term multiplied by N_i, the positive out of both denominators.
    The former per-image form (1 / N_i weights) gives another value on the same batch."""
    import math

    from neural.bridge import bridge_pair_loss

    g = torch.Generator().manual_seed(0)
    p = torch.nn.functional.normalize(torch.randn(6, 5, generator=g, dtype=torch.float64), dim=-1)
    v = torch.nn.functional.normalize(torch.randn(3, 5, generator=g, dtype=torch.float64), dim=-1)
    owner = torch.tensor([0, 0, 0, 1, 2, 2])
    tau = 0.5
    z = (p @ v.T / tau).tolist()
    n = [3, 1, 2]
    total = 0.0
    for r in range(6):
        i = int(owner[r])
        first = z[r][i] - math.log(sum(n[j] * math.exp(z[r][j]) for j in range(3) if j != i))
        second = z[r][i] - math.log(sum(math.exp(z[s][i]) for s in range(6) if int(owner[s]) != i))
        total += first + n[i] * second
    expect = -total / 6
    got = float(bridge_pair_loss(p, owner, v, tau))
    assert got == pytest.approx(expect, abs=1e-9)
    assert abs(got - _per_image_l1(p, owner, v, tau)) > 0.1          # the two forms differ here
    # more chunks, more weight: image 0's second-term rows count N_0 = 3 times
    with pytest.raises(ValueError):
        bridge_pair_loss(p[:2], torch.tensor([0, 0]), v[:2], tau)    # image 1 has no pseudo-caption


def test_two_chunks_per_template_and_relu_head(backbone, small_teaching_set):
    """Each step draws two distinct noun chunks of every image's template (one when it has only one), and
    the L3 head is C(x) = Linear(ReLU(Linear(x)))."""
    from neural.bridge import sample_replicas

    rows_of = [np.array([0, 1, 2]), np.array([3]), np.array([4, 5])]
    rows, pos = sample_replicas(rows_of, np.array([2, 0, 1]), 2, np.random.default_rng(0))
    assert pos.tolist() == [0, 0, 1, 1, 2]
    assert set(rows[:2]) == {4, 5} and len(set(rows[2:4])) == 2 and set(rows[2:4]) <= {0, 1, 2}
    assert rows[4] == 3
    br = BRIDGE(backbone, BridgeConfig(steps=1, batch_size=4))
    kinds = [type(m).__name__ for m in br.mlp]
    assert kinds == ["Linear", "ReLU", "Linear"]

    import neural.bridge as nb
    seen = []
    orig = BRIDGE._pseudo
    mp = pytest.MonkeyPatch()
    mp.setattr(BRIDGE, "_pseudo", lambda self, tb, grid, r: seen.append((tb.owner[r].tolist(), r.tolist()))
               or orig(self, tb, grid, r))
    try:
        BRIDGE(backbone, BridgeConfig(steps=1, batch_size=6, seed=1)).fit(
            small_teaching_set, image_ids=list(small_teaching_set.split("train"))[:6], show_progress=False)
    finally:
        mp.undo()
    owners, r = seen[0]
    counts = np.bincount(owners)
    assert counts.max() == 2 and len(set(r)) == len(r)
    assert nb.BridgeConfig().chunks_per_image == 2
