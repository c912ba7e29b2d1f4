"""The tiny CLIP trained here (retrieval well above chance, CLIP-S separates correct from wrong captions,
deterministic, cached) and PAC-S positive-augmented fine-tuning (loss goes down, only the trainable
parameters move).  Sizes are small so the file runs in well under a minute on two idle cores."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from neural.clipscore import CLIPScore
from neural.pacs import PACSFinetuneConfig, finetune_pacs, pacs_loss, teaching_tuples
from neural.tiny_clip import retrieval_recall, train_tiny_clip

torch.set_num_threads(2)

TRAIN = dict(steps=60, batch_size=64)


@pytest.fixture(scope="module")
def teaching():
    from corpora.teaching import make_teaching_set

    return make_teaching_set(n_images=500, n_train=400, n_dev=50, seed=1)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("neural-cache")


@pytest.fixture(scope="module")
def tiny(teaching, cache_dir):
    from corpora.cache import DiskCache

    return train_tiny_clip(teaching, seed=0, cache=DiskCache(cache_dir), show_progress=False,
                           num_threads=2, **TRAIN)


def test_training_lowers_the_loss(tiny):
    losses = np.asarray(tiny.training["losses"])
    assert losses.shape == (TRAIN["steps"],)
    assert losses[-10:].mean() < losses[:5].mean() - 0.5
    assert tiny.arch == "itr-tiny-clip" and tiny.name.startswith("tiny-clip(")


def test_tiny_clip_retrieval_beats_chance_widely(tiny, teaching):
    from corpora.protocol import hodosh_pool

    pool = hodosh_pool(teaching, "test")          # 50 images, one caption each: chance R@10 = 20 %
    r = retrieval_recall(tiny, teaching, pool.image_ids, pool.caption_ids, pool.gold_caption)
    chance = 100 * 10 / pool.n_captions           # R@k in percent, as the evaluator's
    assert r["R@10"] >= 2 * chance, r
    assert r["median_rank"] < pool.n_captions / 4, r


def test_clip_s_separates_correct_from_wrong_captions(tiny, teaching):
    ids = list(teaching.split("test"))
    images = tiny.encode_corpus_images(teaching, ids)
    correct = [teaching.captions_of(i)[0].text for i in ids]
    wrong = correct[1:] + correct[:1]             # another image's caption
    rel = teaching.judge_relevance(ids, [teaching.captions_of(i)[0].id for i in ids[1:] + ids[:1]])
    keep = ~np.diag(rel)                          # drop the rare shifted caption that is also true
    s = CLIPScore(tiny)
    good, bad = s.score(images, correct), s.score(images, wrong)
    from scipy.stats import wilcoxon

    assert (good[keep] > bad[keep]).mean() >= 0.6
    assert good.mean() > bad.mean()
    assert wilcoxon(good[keep], bad[keep], alternative="greater").pvalue < 0.05


def test_training_is_cached_and_deterministic(tiny, teaching, cache_dir):
    from corpora.cache import DiskCache

    again = train_tiny_clip(teaching, seed=0, cache=DiskCache(cache_dir), show_progress=False, **TRAIN)
    assert again.training["cache_hit"] and again.weights_id == tiny.weights_id
    sd_a, sd_b = tiny.model.state_dict(), again.model.state_dict()
    assert all(torch.equal(sd_a[k], sd_b[k]) for k in sd_a)


def test_pacs_loss_matches_hand_computation():
    v = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.0, 1.0]]), dim=-1)
    t = torch.nn.functional.normalize(torch.tensor([[1.0, 0.2], [0.1, 1.0]]), dim=-1)
    s = torch.tensor(np.log(10.0))
    total, parts = pacs_loss(v, t, v, t, s, lambda_v=0.05, lambda_t=0.1)
    logits = 10 * v @ t.T
    l_it = -torch.log_softmax(logits, 1).diag().mean()
    l_ti = -torch.log_softmax(logits.T, 1).diag().mean()
    expected = (l_it + l_ti) * (1 + 0.05 + 0.1)    # here v' = v and t' = t
    assert torch.allclose(total, expected, atol=1e-6)
    assert abs(parts["L_VT"] - float(l_it + l_ti)) < 1e-6


def test_pacs_loss_weights_generated_images_and_texts_separately():
    """Sarto et al. 2023, Eq. 3: L = L_{V,T} + λ_v L_{V',T} + λ_t L_{V,T'} with the defaults λ_v = 0.05
    (generated images) and λ_t = 0.1 (generated texts), each L_{A,B} the sum of both cross-entropies."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(0)
    v, t, v_gen, t_gen = (F.normalize(torch.randn(4, 5, generator=g), dim=-1) for _ in range(4))
    s = torch.tensor(np.log(20.0))

    def l_ab(a, b):
        logits = 20.0 * a @ b.T
        return -torch.log_softmax(logits, 1).diag().mean() - torch.log_softmax(logits.T, 1).diag().mean()

    l_vt, l_gv, l_gt = l_ab(v, t), l_ab(v_gen, t), l_ab(v, t_gen)
    assert abs(float(l_gv - l_gt)) > 0.1                     # the two weights are distinguishable
    total, parts = pacs_loss(v, t, v_gen, t_gen, s)
    assert float(total) == pytest.approx(float(l_vt + 0.05 * l_gv + 0.1 * l_gt), rel=1e-5)
    assert parts["L_VT"] == pytest.approx(float(l_vt), rel=1e-5)
    assert parts["L_V'T"] == pytest.approx(float(l_gv), rel=1e-5)
    assert parts["L_VT'"] == pytest.approx(float(l_gt), rel=1e-5)
    total, _ = pacs_loss(v, t, v_gen, t_gen, s, lambda_v=0.3, lambda_t=0.7)
    assert float(total) == pytest.approx(float(l_vt + 0.3 * l_gv + 0.7 * l_gt), rel=1e-5)


def test_teaching_tuples_are_generated_on_first_use(teaching):
    tup = teaching_tuples(teaching, "dev", seed=3, max_images=6)
    assert len(tup) == 6 and not tup.gen_images._memo and not tup.gen_texts._memo   # nothing made yet
    ids = list(teaching.split("dev"))[:6]
    cid = tup.identity["caption_ids"]
    assert np.array_equal(tup.gen_images[-1], teaching.rerender(ids[-1], 3))
    assert tup.gen_texts[2] == teaching.paraphrase(cid[2], 3).text
    assert np.array_equal(tup.images[1], teaching.load_image(ids[1]))
    assert [len(x) for x in (tup.images[1:4], list(tup.gen_texts))] == [3, 6]
    with pytest.raises(IndexError):
        tup.images[6]


def test_pacs_finetuning_lowers_loss_and_moves_only_trainable_params(tiny, teaching, cache_dir):
    from corpora.cache import DiskCache

    train = teaching_tuples(teaching, "train", seed=0, max_images=200)
    val = teaching_tuples(teaching, "dev", seed=0)
    assert train.gen_texts[0] != train.texts[0]   # a paraphrase, not a copy
    # restore_best=False: return the last iteration, so the parameter check does not depend on early stopping
    cfg = PACSFinetuneConfig(lr=3e-4, batch_size=50, max_iters=16, eval_every=4, patience=16, restore_best=False)
    ft = finetune_pacs(tiny, train, val, cfg, cache=DiskCache(cache_dir), show_progress=False)
    hist = ft.training["history"]
    assert [h["iteration"] for h in hist] == [0, 4, 8, 12, 16]
    # the Eq. 3 objective on the training tuples, evaluated before and after, goes down
    assert ft.training["final_train_loss"] < hist[0]["train_loss"]
    assert all(np.isfinite(h["val_loss"]) for h in hist)
    before, after = tiny.model.state_dict(), ft.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and changed <= set(cfg.trainable)
    assert "visual.proj" in changed and "text_projection" in changed
    assert ft.weights_id != tiny.weights_id and ft.name.endswith("+PAC-S")
    # the original backbone is untouched and the fine-tuned weights come back from the cache
    again = finetune_pacs(tiny, train, val, cfg, cache=DiskCache(cache_dir), show_progress=False)
    assert again.training["cache_hit"] and again.weights_id == ft.weights_id
    # early stopping keeps the best validation evaluation (never worse than the start)
    es = finetune_pacs(tiny, train, val, PACSFinetuneConfig(lr=3e-4, batch_size=50, max_iters=12, eval_every=2,
                                                            patience=2), show_progress=False)
    h = es.training["history"]
    assert es.training["best_iteration"] == h[int(np.argmin([x["val_loss"] for x in h]))]["iteration"]


def test_pacs_recipe_is_sec_4_1_batch_256_patience_in_iterations(tiny, teaching):
    """PAC-S Sec. 4.1: batch 256 and the early-stopping patience counted in iterations.  With 200
    training tuples and batch 50 an epoch is 4 iterations; a patience of 6 iterations with an evaluation
    every iteration stops 6 iterations after the best one — an epoch-counted patience (the old recipe)
    would run 6 epochs = 24 iterations past it."""
    assert PACSFinetuneConfig().batch_size == 256
    train = teaching_tuples(teaching, "train", seed=0, max_images=200)
    val = teaching_tuples(teaching, "dev", seed=0)
    cfg = PACSFinetuneConfig(lr=3e-2, batch_size=50, max_iters=200, eval_every=1, patience=6)
    h = finetune_pacs(tiny, train, val, cfg, show_progress=False).training
    last = h["history"][-1]["iteration"]
    assert last < 200 and last - h["best_iteration"] == 6
    assert [x["iteration"] for x in h["history"]] == list(range(last + 1))


def test_adamw_helper_matches_the_reference_update():
    """neural.training.adamw (fused / multi-tensor kernels) follows the same AdamW rule as torch's
    single-tensor loop, with parameter groups and weight decay."""
    from neural.training import adamw

    torch.manual_seed(0)
    a = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 3))
    b = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 3))
    b.load_state_dict(a.state_dict())

    def groups(m):
        return [{"params": [m[0].weight, m[1].weight], "weight_decay": 0.1},
                {"params": [m[1].bias], "weight_decay": 0.0}]

    oa = torch.optim.AdamW(groups(a), lr=1e-2, betas=(0.9, 0.98), eps=1e-6, foreach=False)
    ob = adamw(groups(b), lr=1e-2, betas=(0.9, 0.98), eps=1e-6)
    assert ob.defaults.get("fused") or ob.defaults.get("foreach")
    x = torch.randint(0, 50, (16,))
    for _ in range(5):
        for m, o in ((a, oa), (b, ob)):
            o.zero_grad()
            m(x).pow(2).mean().backward()
            o.step()
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6)


def test_text_encoding_cut_at_end_of_text_equals_full_context(tiny, teaching):
    """encode_texts sorts texts by length and cuts each batch after its last end-of-text token: exact
    under the causal mask (same features as the full-context forward), also for a stretched context."""
    import torch.nn.functional as F

    from neural.specs import stretch_backbone

    texts = [c.text for i in list(teaching.split("test"))[:12] for c in teaching.captions_of(i)[:2]]
    texts += ["a", "a red circle", " ".join(["a red circle left of a blue square"] * 6)]   # short / truncated
    for bb in (tiny, stretch_backbone(tiny, 80, 8, precision="fp32")):
        bb.clear_text_memo()                               # encode afresh, through the cut path
        got = bb.encode_texts(texts, batch_size=5)
        tok = bb.tokenize(texts)
        assert int(tok.argmax(1).max()) + 1 <= tok.shape[1]
        with torch.no_grad():
            ref = F.normalize(bb.model.encode_text(tok).float(), dim=-1)
        torch.testing.assert_close(got, ref, rtol=0, atol=2e-5)
    # the tiny CLIP takes the cut path (causal mask, argmax pooling): its full forward is never called
    from neural.text_tower import encode_text_to_eot

    tok = tiny.tokenize(["a red circle"])
    calls = []
    orig = tiny.model.encode_text
    tiny.model.encode_text = lambda *a, **k: calls.append(1) or orig(*a, **k)
    try:
        with torch.no_grad():
            encode_text_to_eot(tiny.model, tok)
    finally:
        del tiny.model.encode_text
    assert not calls


def test_user_tuples_identity_follows_image_root_and_image_files(tmp_path):
    """The cache identity of --pacs-positives tuples covers the image root and each image file (size +
    mtime), not only the JSON file: otherwise finetune_pacs would return weights fine-tuned on other
    images."""
    import json
    import os

    from PIL import Image

    from neural.pacs import load_tuples

    for sub, val in (("a", 0), ("b", 255)):
        (tmp_path / sub).mkdir()
        for k in range(4):
            Image.fromarray(np.full((8, 8, 3), val, np.uint8)).save(tmp_path / sub / f"{k}.png")
    js = tmp_path / "t.json"
    js.write_text(json.dumps([{"image": f"{k}.png", "caption": f"c{k}", "generated_image": f"{k}.png",
                               "generated_caption": f"g{k}"} for k in range(4)]))
    ta = load_tuples(js, image_root=tmp_path / "a")
    assert load_tuples(js, image_root=tmp_path / "a").identity == ta.identity          # stable
    tb = load_tuples(js, image_root=tmp_path / "b")
    assert not np.array_equal(ta.images[0], tb.images[0])
    assert tb.identity != ta.identity                                                   # other root
    # replace one image file under the same root (same JSON, same name): the identity changes
    f = tmp_path / "a" / "2.png"
    st = f.stat()
    Image.fromarray(np.full((9, 9, 3), 128, np.uint8)).save(f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    tc = load_tuples(js, image_root=tmp_path / "a")
    assert tc.identity != ta.identity and tc.identity["file"] == ta.identity["file"]
    assert tc.identity["sha256"] == ta.identity["sha256"]
