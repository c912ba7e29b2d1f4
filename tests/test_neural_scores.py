"""CLIP-S / RefCLIP-S / PAC-S / RefPAC-S formulas on fixed embeddings, prompt, truncation, score
matrices and the pool helper (no training; fast)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from neural.base import (
    PROMPT,
    affinity_for_pool,
    clip_s,
    harmonic_mean,
    max_reference_cosine,
    with_prompt,
)
from neural.clipscore import CLIPScore, RefCLIPScore
from neural.pacs import PACScore, RefPACScore

torch.set_num_threads(2)


class StubBackbone:
    """Texts map to fixed unit vectors; records every text it is asked to encode."""

    name = "stub"
    device = torch.device("cpu")

    def __init__(self, table: dict[str, np.ndarray]):
        self.table = {k: np.asarray(v, np.float32) / np.linalg.norm(v) for k, v in table.items()}
        self.seen: list[str] = []

    def encode_texts(self, texts, batch_size=256):
        self.seen.extend(texts)
        return torch.from_numpy(np.stack([self.table[t] for t in texts]))

    def encode_images(self, images, batch_size=64):  # pragma: no cover - not used with embeddings
        raise AssertionError("images are given as embeddings in these tests")

    def cache_identity(self):
        return {"stub": 1}


def P(t: str) -> str:
    return PROMPT + " " + t


# image embedding e0; candidate embeddings at known angles to it
E = np.eye(3, dtype=np.float32)
COS60 = np.array([0.5, np.sqrt(3) / 2, 0], np.float32)          # cos = 0.5 with e0
COS120 = np.array([-0.5, np.sqrt(3) / 2, 0], np.float32)        # cos = -0.5 with e0
TABLE = {
    P("good"): COS60, P("bad"): COS120, P("exact"): E[0],
    P("ref a"): E[1], P("ref b"): COS60,                          # cos(good, ref a)=0.866, (good, ref b)=1
    P("far"): -COS60,                                             # cos(good, far) = -1
}


def test_with_prompt_joins_with_one_space():
    assert with_prompt(["a dog"]) == ["A photo depicts a dog"]
    assert with_prompt(["x"], "Prefix ") == ["Prefix x"]
    assert with_prompt(["x"], None) == ["x"]
    with pytest.raises(TypeError):
        with_prompt("a dog")


def test_clip_s_formula_and_clipping_at_zero():
    bb = StubBackbone(TABLE)
    s = CLIPScore(bb)
    img = np.stack([E[0], E[0], E[0]])
    out = s.compute(img, ["good", "bad", "exact"])
    np.testing.assert_allclose(out["cos"], [0.5, -0.5, 1.0], atol=1e-6)
    np.testing.assert_allclose(out["CLIP-S"], [2.5 * 0.5, 0.0, 2.5], atol=1e-6)   # w = 2.5, max(cos, 0)
    np.testing.assert_allclose(s.score(img, ["good", "bad", "exact"]), [1.25, 0.0, 2.5], atol=1e-6)
    # the prompt is prepended to every candidate before encoding
    assert bb.seen[:3] == [P("good"), P("bad"), P("exact")]


def test_pac_s_uses_w_2():
    bb = StubBackbone(TABLE)
    np.testing.assert_allclose(PACScore(bb).score(np.stack([E[0], E[0]]), ["good", "exact"]), [1.0, 2.0],
                               atol=1e-6)
    assert PACScore(bb).name == "PAC-S" and RefPACScore(bb).name == "RefPAC-S"


def test_refclip_s_harmonic_mean_with_unscaled_unclipped_reference_term():
    bb = StubBackbone(TABLE)
    img = np.stack([E[0], E[0]])
    refs = [["ref a", "ref b"], ["far"]]
    out = RefCLIPScore(bb).compute(img, ["good", "good"], refs)
    # max_r cos(c, r): max(0.866, 1.0) = 1.0 ; for the second, cos(good, far) = -1 (not clipped)
    np.testing.assert_allclose(out["ref_cos"], [1.0, -1.0], atol=1e-6)
    a = 1.25
    np.testing.assert_allclose(out["RefCLIP-S"], [2 * a * 1.0 / (a + 1.0), 2 * a * -1.0 / (a - 1.0)], atol=1e-5)
    # references are prompted too (reference implementation)
    assert P("ref a") in bb.seen and P("far") in bb.seen
    np.testing.assert_allclose(RefCLIPScore(bb).score(img, ["good", "good"], refs), out["RefCLIP-S"])
    with pytest.raises(ValueError, match="needs references"):
        RefCLIPScore(bb).score(img, ["good", "good"])
    # RefPAC-S: same reference term, w = 2
    rp = RefPACScore(bb).score(img, ["good", "good"], refs)
    np.testing.assert_allclose(rp[0], 2 * 1.0 * 1.0 / 2.0, atol=1e-6)


def test_harmonic_mean_helper():
    np.testing.assert_allclose(harmonic_mean(np.array([1.0, 0.0, 2.0]), np.array([1.0, 0.0, 0.5])),
                               [1.0, 0.0, 0.8], atol=1e-6)
    np.testing.assert_allclose(clip_s(np.array([-0.3, 0.4]), 2.5), [0.0, 1.0], atol=1e-6)


def test_max_reference_cosine_groups_by_owner():
    c = np.eye(2, dtype=np.float32)
    r = np.array([[1, 0], [0.6, 0.8], [0, 1], [-1, 0]], np.float32)
    np.testing.assert_allclose(max_reference_cosine(c, r, np.array([0, 0, 1, 1]), 2), [1.0, 1.0])
    with pytest.raises(ValueError, match="no references"):
        max_reference_cosine(c, r[:2], np.array([0, 0]), 2)


def test_score_matrix_matches_per_instance_scores():
    bb = StubBackbone(TABLE)
    imgs = np.stack([E[0], E[1]])
    S = CLIPScore(bb).score_matrix(imgs, ["good", "bad", "exact"])
    assert S.shape == (2, 3) and S.dtype == np.float32
    np.testing.assert_allclose(S[0], [1.25, 0.0, 2.5], atol=1e-6)
    np.testing.assert_allclose(S[1], 2.5 * np.maximum([np.sqrt(3) / 2, np.sqrt(3) / 2, 0], 0), atol=1e-6)
    R = RefCLIPScore(bb).score_matrix(imgs, ["good", "exact"], references=[["ref b"], ["ref a"]])
    per = RefCLIPScore(bb).score(np.stack([E[0]]), ["good"], [["ref b"]])
    np.testing.assert_allclose(R[0, 0], per[0], atol=1e-6)


def test_mismatched_lengths_are_reported():
    bb = StubBackbone(TABLE)
    with pytest.raises(ValueError, match="2 images but 1 candidates"):
        CLIPScore(bb).score(np.stack([E[0], E[1]]), ["good"])
    with pytest.raises(ValueError, match="reference lists"):
        RefCLIPScore(bb).score(np.stack([E[0]]), ["good"], [["ref a"], ["ref b"]])


# ---------------------------------------------------------------------------- real tokenizer / model
@pytest.fixture(scope="module")
def tiny_random():
    from neural.backbone import load_backbone

    return load_backbone("itr-tiny-clip", None, device="cpu", show_progress=False)


def test_truncation_of_a_200_word_caption(tiny_random):
    import open_clip

    long = " ".join(f"word{i % 17}" for i in range(200))
    tok = tiny_random.tokenize([long])
    assert tok.shape == (1, tiny_random.context_length)
    assert int(tok[0, -1]) == 49407  # end-of-text kept at the last position, as clip.tokenize(truncate=True)
    # 77-token OpenAI tokenizer: same truncation rule
    tok77 = open_clip.get_tokenizer("ViT-B-32")([PROMPT + " " + long])
    assert tok77.shape == (1, 77) and int(tok77[0, -1]) == 49407
    # two captions that agree on their first context_length tokens get the same score
    s = CLIPScore(tiny_random)
    img = [np.full((120, 160, 3), 90, np.uint8)]
    longer = long + " and many more words that fall beyond the context window"
    np.testing.assert_allclose(s.score(img, [long]), s.score(img, [longer]), atol=1e-6)


def test_scores_on_pixels_equal_scores_on_embeddings(tiny_random):
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (120, 160, 3), dtype=np.uint8) for _ in range(3)]
    caps = ["a red circle", "a blue square on the sand", "two green stars"]
    s = CLIPScore(tiny_random)
    emb = tiny_random.encode_images(imgs).numpy()
    np.testing.assert_allclose(s.score(imgs, caps), s.score(emb, caps), atol=1e-6)
    np.testing.assert_allclose(np.diag(s.score_matrix(emb, caps)), s.score(emb, caps), atol=1e-6)


def test_affinity_for_pool_caches_image_features(small_teaching_set, tiny_random, tmp_cache):
    from corpora.protocol import hodosh_pool

    pool = hodosh_pool(small_teaching_set, "test")
    s = CLIPScore(tiny_random)
    n0 = tiny_random.n_image_encodes
    S = affinity_for_pool(s, small_teaching_set, pool, cache=tmp_cache)
    assert S.shape == (pool.n_images, pool.n_captions) and S.dtype == np.float32
    assert tiny_random.n_image_encodes - n0 == pool.n_images
    # a second scorer on the same backbone re-uses the cached image features: zero image encodes
    S2 = affinity_for_pool(PACScore(tiny_random), small_teaching_set, pool, cache=tmp_cache)
    assert tiny_random.n_image_encodes - n0 == pool.n_images
    np.testing.assert_allclose(S2, S * (2.0 / 2.5), atol=1e-5)
    # rerun: the whole matrix comes from the cache
    hits = tmp_cache.hits
    S3 = affinity_for_pool(s, small_teaching_set, pool, cache=tmp_cache)
    assert tmp_cache.hits == hits + 1 and np.array_equal(S3, S)


def test_image_feature_cache_is_keyed_by_the_pixels_not_the_captions(tiny_random, tmp_cache):
    """``encode_corpus_images`` caches by image signature: a caption-only change re-encodes nothing, a
    re-rendered scene (other pixels) is encoded again."""
    from corpora.teaching import make_teaching_set

    ts = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=5)
    ids = list(ts.split("test"))
    n0 = tiny_random.n_image_encodes
    F = tiny_random.encode_corpus_images(ts, ids, cache=tmp_cache)
    assert tiny_random.n_image_encodes - n0 == len(ids)
    same_images = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=5)
    same_images.fingerprint = "captions-edited"
    F2 = tiny_random.encode_corpus_images(same_images, ids, cache=tmp_cache)
    assert tiny_random.n_image_encodes - n0 == len(ids) and np.array_equal(F, F2)
    other = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=5, image_size=(128, 96))
    tiny_random.encode_corpus_images(other, ids, cache=tmp_cache)
    assert tiny_random.n_image_encodes - n0 == 2 * len(ids)


def test_corpus_image_features_are_kept_in_memory_per_weights(random_tiny_backbone, tmp_cache):
    """A later request in another order and grouping (the human-correlation protocols: dev + test images
    in judgment order, after the test pool) encodes only the images not seen yet, although its disk-cache
    chunks differ; an in-place weight update is never served stale features."""
    import copy

    import torch

    from corpora.teaching import make_teaching_set
    from neural.backbone import backbone_from_model

    ts = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=5)
    dev, test = list(ts.split("dev")), list(ts.split("test"))
    bb = random_tiny_backbone
    bb.clear_image_memo()
    n0 = bb.n_image_encodes
    T = bb.encode_corpus_images(ts, test, cache=tmp_cache)
    assert bb.n_image_encodes - n0 == len(test)
    mixed = dev[::-1] + test[::2] + dev + test[1::2]           # other order, repeats, new images
    M = bb.encode_corpus_images(ts, mixed, cache=tmp_cache)
    assert bb.n_image_encodes - n0 == len(test) + len(dev)     # only the dev images were new
    fresh = bb.encode_images([ts.load_image(i) for i in mixed]).numpy()
    np.testing.assert_allclose(M, fresh, atol=1e-6)
    np.testing.assert_array_equal(M[len(dev):len(dev) + len(test[::2])], T[::2])
    n1 = bb.n_image_encodes
    bb.clear_image_memo()
    assert np.array_equal(bb.encode_corpus_images(ts, test, cache=tmp_cache), T)   # the first disk chunk
    assert bb.n_image_encodes == n1
    twin = backbone_from_model(copy.deepcopy(bb.model), bb.preprocess, bb.tokenizer, name="twin",
                               arch=bb.arch, device="cpu", show_progress=False)
    A = twin.encode_corpus_images(ts, test)                  # no disk cache: the memo only
    assert twin.n_image_encodes == len(test) and np.array_equal(twin.encode_corpus_images(ts, test), A)
    with torch.no_grad():
        twin.model.visual.proj.mul_(2.0).add_(0.01)           # in-place update
    B = twin.encode_corpus_images(ts, test)
    assert twin.n_image_encodes == 2 * len(test) and not np.allclose(A, B)


def test_disk_caches_follow_in_place_weight_updates(random_tiny_backbone, tmp_cache):
    """The disk caches (image features, whole affinity matrices, fine-tunes) are keyed by
    ``cache_identity``, whose weights id follows an in-place update (``load_state_dict``, an optimiser
    step): after one they are recomputed for the new weights, never read under the old key."""
    import copy

    import torch

    from corpora.protocol import hodosh_pool
    from corpora.teaching import make_teaching_set
    from neural.backbone import backbone_from_model

    ts = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=5)
    pool = hodosh_pool(ts, "test")
    test = list(ts.split("test"))
    bb = random_tiny_backbone
    bb_model = copy.deepcopy(bb.model)
    twin = backbone_from_model(bb_model, bb.preprocess, bb.tokenizer, name="twin", arch=bb.arch,
                               device="cpu", show_progress=False)
    ident0 = twin.cache_identity()
    assert ident0["weights"] == twin.weights_id == bb.weights_id
    F0 = twin.encode_corpus_images(ts, test, cache=tmp_cache)
    S0 = affinity_for_pool(CLIPScore(twin), ts, pool, cache=tmp_cache)
    other = copy.deepcopy(bb.model)
    with torch.no_grad():
        other.visual.proj.mul_(-1.0)
        other.text_projection.add_(0.05)
    twin.model.load_state_dict(other.state_dict())           # in-place update of every parameter
    ident1 = twin.cache_identity()
    assert ident1["weights"] != ident0["weights"] and twin.cache_identity() == ident1   # hashed once
    twin.clear_image_memo()
    F1 = twin.encode_corpus_images(ts, test, cache=tmp_cache)
    S1 = affinity_for_pool(CLIPScore(twin), ts, pool, cache=tmp_cache)
    truth = twin.encode_images([ts.load_image(i) for i in test]).numpy()
    np.testing.assert_allclose(F1, truth, atol=1e-6)
    assert not np.allclose(F1, F0) and not np.allclose(S1, S0)
    fresh = backbone_from_model(copy.deepcopy(other), bb.preprocess, bb.tokenizer, name="twin", arch=bb.arch,
                                device="cpu", show_progress=False)
    assert fresh.cache_identity() == ident1      # the same weights, however they came about: one key
    import dataclasses                           # the text side is in the key too (affinity caches)
    short = dataclasses.replace(fresh, context_length=fresh.context_length // 2)
    assert {k for k in ident1 if short.cache_identity()[k] != ident1[k]} == {"tokenizer"}
    np.testing.assert_allclose(affinity_for_pool(CLIPScore(fresh), ts, pool), S1, atol=1e-5)


def test_text_encodings_are_memoised_per_weights(random_tiny_backbone):
    """Backbone.encode_texts encodes each distinct text once per set of weights, shares that with a
    backbone of identical weights, and never serves stale embeddings after an in-place update."""
    import copy

    import torch

    from neural.backbone import backbone_from_model

    bb = random_tiny_backbone
    texts = ["a red circle", "a blue star on the left", "a red circle", "a tiny green square"]
    n0 = bb.n_text_encodes
    a = bb.encode_texts(texts)
    assert bb.n_text_encodes - n0 == 3 and torch.equal(a[0], a[2])
    b = bb.encode_texts(texts[::-1])
    assert bb.n_text_encodes - n0 == 3 and torch.equal(b, a.flip(0))
    twin = backbone_from_model(copy.deepcopy(bb.model), bb.preprocess, bb.tokenizer, name="twin",
                               arch=bb.arch, device="cpu", show_progress=False)
    assert twin.weights_id == bb.weights_id
    assert torch.equal(twin.encode_texts(texts), a) and twin.n_text_encodes == 0   # shared table
    with torch.no_grad():
        twin.model.text_projection.mul_(2.0).add_(0.01)   # in-place update: the twin's weights changed
    c = twin.encode_texts(texts)
    assert twin.n_text_encodes == 3 and not torch.allclose(c, a)
    assert torch.equal(bb.encode_texts(texts), a)   # the original's table is untouched
