"""The Hodosh protocol (corpora/protocol.py) on small hand-built corpora and on the real Flickr8k dev split."""
from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image

from corpora.base import Caption, Corpus, CorpusError, CrowdJudgment, MissingImagesError, caption_id
from corpora.flickr8k import load_flickr8k
from corpora.images import PathImageLoader
from corpora.protocol import (
    caption_pools,
    every_caption_pool,
    hodosh_pool,
    relevance_stats,
    select_caption_index,
    skipped_images,
    train_items,
)


def make_corpus(n_images=12, n_caps=5, crowd=(), image_dir=None, present=None, fixed=None) -> Corpus:
    ids = [f"img{i:02d}.jpg" for i in range(n_images)]
    caps = {im: [Caption(caption_id(im, k), im, k, f"caption {k} of {im}") for k in range(n_caps)]
            for im in ids}
    paths = loader = None
    if image_dir is not None:
        paths = {im: image_dir / im for im in ids}
        for im in (ids if present is None else present):
            Image.new("RGB", (8, 6), (10, 20, 30)).save(image_dir / im)
        loader = PathImageLoader(paths, "toy")
    return Corpus(name="toy", image_ids=ids, captions=caps,
                  splits={"train": ids[:6], "dev": ids[6:9], "test": ids[9:]},
                  image_loader=loader, image_paths=paths, crowd=tuple(crowd),
                  fixed_pools={} if fixed is None else {"test": tuple(fixed)})


def test_select_caption_index_is_stable():
    # sha256-based: these values must never change across runs, platforms or Python versions.
    assert [select_caption_index(f"img{i:02d}.jpg", 5, seed=0) for i in range(8)] == [3, 3, 4, 4, 2, 1, 0, 1]
    assert [select_caption_index(f"img{i:02d}.jpg", 5, seed=7) for i in range(8)] == [2, 4, 0, 1, 1, 0, 0, 0]
    import hashlib
    d = hashlib.sha256(b"0\x00img00.jpg").digest()
    assert select_caption_index("img00.jpg", 5, 0) == int.from_bytes(d[:8], "big") % 5
    with pytest.raises(ValueError):
        select_caption_index("x.jpg", 0)


def test_seeded_pool_choice_deterministic_and_seed_dependent():
    c = make_corpus(n_images=400)
    c = c.with_splits(train=c.image_ids[:100], dev=c.image_ids[100:], test=())
    p0, p0b, p1 = hodosh_pool(c, "dev", seed=0), hodosh_pool(c, "dev", seed=0), hodosh_pool(c, "dev", seed=1)
    assert p0.caption_ids == p0b.caption_ids
    assert p0.caption_ids != p1.caption_ids
    ks = np.array([int(cid.rpartition("#")[2]) for cid in p0.caption_ids])
    counts = np.bincount(ks, minlength=5)
    assert counts.min() > 30  # all five positions used, roughly uniformly (300 images)
    # One caption per image, aligned with the images.
    assert [cid.rpartition("#")[0] for cid in p0.caption_ids] == list(p0.image_ids)
    np.testing.assert_array_equal(p0.gold_caption, np.arange(300))
    np.testing.assert_array_equal(p0.gold_image, np.arange(300))
    assert p0.relevance.sum() == 300 and p0.relevance.trace() == 300


def test_relevance_threshold_and_stats():
    ids = [f"img{i:02d}.jpg" for i in range(9, 12)]  # the test split
    crowd = [
        CrowdJudgment(ids[0], caption_id(ids[1], 0), 2 / 3, 2, 1),   # relevant (>= 0.66)
        CrowdJudgment(ids[0], caption_id(ids[2], 0), 0.6, 3, 2),     # not relevant
        CrowdJudgment(ids[2], caption_id(ids[1], 0), 1.0, 3, 0),     # relevant
        CrowdJudgment(ids[1], caption_id(ids[1], 3), 1.0, 3, 0),     # caption not in the pool
    ]
    fixed = [caption_id(im, 0) for im in ids]
    c = make_corpus(crowd=crowd, fixed=fixed)
    p = hodosh_pool(c, "test")
    assert p.caption_ids == tuple(fixed)
    expected = np.eye(3, dtype=bool)
    expected[0, 1] = expected[2, 1] = True
    np.testing.assert_array_equal(p.relevance, expected)
    s = relevance_stats(p)
    assert s["n_relevant_pairs"] == 5 and s["n_original_pairs"] == 3 and s["n_extra_pairs"] == 2
    # caption 1 describes 3 images, captions 0 and 2 one each; image 0 and 2 have 2 captions.
    assert s["captions_by_n_images"] == {"0": 0, "1": 2, "2": 0, "3": 1, ">=4": 0}
    assert s["images_by_n_captions"] == {"0": 0, "1": 1, "2": 2, "3": 0, ">=4": 0}
    assert s["mean_images_per_caption"] == pytest.approx(5 / 3)


def test_fixed_pool_must_have_one_caption_per_image():
    ids = [f"img{i:02d}.jpg" for i in range(9, 12)]
    c = make_corpus(fixed=[caption_id(ids[0], 0), caption_id(ids[0], 1), caption_id(ids[1], 0)])
    with pytest.raises(CorpusError, match="2 captions for image img09.jpg"):
        hodosh_pool(c, "test")
    c = make_corpus(fixed=[caption_id(im, 0) for im in ids] + ["img00.jpg#0"])
    with pytest.raises(CorpusError, match="outside the split"):
        hodosh_pool(c, "test")


def test_caption_pools_use_every_caption_once():
    ids = [f"img{i:02d}.jpg" for i in range(9, 12)]
    crowd = [CrowdJudgment(ids[0], caption_id(ids[1], 2), 1.0, 3, 0)]
    fixed = [caption_id(im, 0) for im in ids]
    c = make_corpus(crowd=crowd, fixed=fixed)
    c = replace(c, captions={**c.captions, ids[2]: c.captions[ids[2]][:3]})   # fewer captions wrap around
    pools = caption_pools(c, "test")
    assert len(pools) == 5
    for k, p in enumerate(pools):                         # the fixed pool is ignored: caption k of each
        assert p.caption_ids == (caption_id(ids[0], k), caption_id(ids[1], k), caption_id(ids[2], k % 3))
        np.testing.assert_array_equal(p.gold_caption, np.arange(3))
        np.testing.assert_array_equal(p.gold_image, np.arange(3))
        np.testing.assert_array_equal(p.relevance, c.judge_relevance(p.image_ids, p.caption_ids))
        assert p.relevance[0, 1] == (k == 2)              # the crowd judged caption 2 of image 1 for image 0
    allcaps = [cid for p in pools[:3] for cid in p.caption_ids]
    assert len(set(allcaps)) == 9
    assert [p.caption_ids for p in caption_pools(c, "test", n_pools=2)] == [p.caption_ids for p in pools[:2]]
    with pytest.raises(ValueError, match="n_pools"):
        caption_pools(c, "test", n_pools=0)


def test_every_caption_pool_holds_each_test_image_with_all_its_captions():
    """The CLIP_benchmark retrieval set: the split's images, every caption of each in turn, the original
    pairing as relevance (a crowd judgment does not add a positive), gold caption = each image's first."""
    ids = [f"img{i:02d}.jpg" for i in range(9, 12)]
    crowd = [CrowdJudgment(ids[0], caption_id(ids[1], 2), 1.0, 3, 0)]
    c = make_corpus(crowd=crowd, fixed=[caption_id(im, 0) for im in ids])
    c = replace(c, captions={**c.captions, ids[1]: c.captions[ids[1]][:3]})   # 5 + 3 + 5 captions
    p = every_caption_pool(c, "test")
    assert p.image_ids == tuple(ids) and p.n_captions == 13
    assert p.caption_ids == tuple(cap.id for im in ids for cap in c.captions_of(im))
    np.testing.assert_array_equal(p.gold_image, [0] * 5 + [1] * 3 + [2] * 5)
    np.testing.assert_array_equal(p.gold_caption, [0, 5, 8])
    want = np.zeros((3, 13), dtype=bool)
    want[p.gold_image, np.arange(13)] = True
    np.testing.assert_array_equal(p.relevance, want)
    assert not p.relevance[0, 5 + 2]                      # judged relevant by the crowd: not a positive here


def test_with_splits_copies_and_refingerprints():
    c = make_corpus()
    cut = c.with_splits(train=c.splits["train"][:4])
    assert cut.splits["train"] == c.splits["train"][:4] and len(c.splits["train"]) == 6
    assert cut.splits["dev"] == c.splits["dev"] and cut.splits["test"] == c.splits["test"]
    assert cut.captions == c.captions and cut.fixed_pools == c.fixed_pools
    assert cut.fingerprint != c.fingerprint
    assert cut.fingerprint == c.with_splits(train=list(c.splits["train"][:4])).fingerprint
    assert cut.fingerprint != c.with_splits(train=c.splits["train"][:5]).fingerprint
    assert train_items(cut).image_ids == c.splits["train"][:4]
    with pytest.raises(KeyError, match="no split"):
        c.with_splits(val=c.splits["dev"])


def test_fingerprint_tells_missing_from_empty_lemma_and_tags():
    """``lemma=None`` (the text side tokenises the text) and ``lemma=""`` (no tokens) are different
    corpora for every cache keyed by the fingerprint; so are ``pos=None`` and ``pos=()``."""
    c = make_corpus()
    first = c.image_ids[0]

    def edited(**kw):
        caps = {**c.captions, first: (replace(c.captions[first][0], **kw), *c.captions[first][1:])}
        return replace(c, captions=caps).fingerprint

    prints = {edited(lemma=None), edited(lemma=""), edited(lemma="caption"), edited(lemma="", pos=()),
              edited(lemma="", pos=("NN",))}
    assert len(prints) == 5 and c.fingerprint == edited(lemma=None)


def test_fingerprinted_fields_cannot_be_reassigned():
    """Reassigning what the fingerprint covers would leave cache keys stale: refused, with the way out."""
    c = make_corpus()
    fp, splits = c.fingerprint, dict(c.splits)
    for name, value in (("splits", {"train": c.image_ids}), ("captions", {}), ("image_ids", ())):
        with pytest.raises(AttributeError, match=rf"Corpus\.{name} cannot be reassigned.*with_splits"):
            setattr(c, name, value)
    assert c.fingerprint == fp and dict(c.splits) == splits
    c.notes = ["fields outside the fingerprint stay assignable"]
    assert replace(c, splits={"train": c.image_ids}).splits["train"] == c.image_ids
    # in-place edits are refused as well (they would bypass the fingerprint the same way)
    first = c.image_ids[0]
    for edit in (lambda: c.splits.__setitem__("train", c.image_ids), lambda: c.splits.update(dev=()),
                 lambda: c.captions.__setitem__(first, ()), lambda: c.captions.pop(first),
                 lambda: c.splits.clear(), lambda: c.captions.setdefault("new.jpg", ())):
        with pytest.raises(TypeError, match="read-only"):
            edit()
    assert c.fingerprint == fp and dict(c.splits) == splits and len(c.captions[first]) == 5
    # every way to a new corpus gets a fingerprint of its own content (replace used to copy the old one)
    edited = {**c.captions, first: (replace(c.captions[first][0], text="a different caption"),)}
    assert replace(c, captions=edited).fingerprint != fp
    assert replace(c, splits={**c.splits, "train": c.splits["train"][:2]}).fingerprint != fp
    assert c.with_splits(train=c.splits["train"][:2]).fingerprint == \
        replace(c, splits={**c.splits, "train": c.splits["train"][:2]}).fingerprint
    assert replace(c).fingerprint == fp and replace(c, notes=["other notes"]).fingerprint == fp
    # pickling and copies keep the content, the fingerprint and the seal; copies' notes are their own
    import copy
    import pickle

    for twin in (pickle.loads(pickle.dumps(c)), copy.deepcopy(c)):
        assert twin.fingerprint == fp and twin.splits == c.splits and twin.captions == c.captions
        with pytest.raises(TypeError, match="read-only"):
            twin.splits["train"] = ()
    cut = c.with_splits(train=c.splits["train"][:2])
    cut.notes.append("only on the copy")
    assert "only on the copy" not in c.notes


def test_train_items_all_captions():
    c = make_corpus()
    ids, caps, skipped = train_items(c)
    assert ids == c.split("train") and skipped == ()
    assert [len(x) for x in caps] == [5] * 6
    idx, flat = train_items(c).pairs()
    assert len(flat) == 30 and idx.tolist() == [i for i in range(6) for _ in range(5)]
    assert all(flat[j].image_id == ids[idx[j]] for j in range(30))


def test_missing_images_policy(tmp_path):
    present = [f"img{i:02d}.jpg" for i in (0, 2, 6, 7, 8)]
    c = make_corpus(image_dir=tmp_path, present=present)
    # Without require/skip nothing is checked.
    assert hodosh_pool(c, "dev").n_images == 3
    with pytest.raises(MissingImagesError) as ei:
        train_items(c, require_images=True)
    msg = str(ei.value)
    assert "needs 6 images, 4 are missing" in msg
    assert str(tmp_path / "img01.jpg") in msg and str(tmp_path / "img05.jpg") in msg
    # All dev images exist: require passes, nothing skipped.
    full = hodosh_pool(c, "dev", require_images=True)
    assert full.n_images == 3 and skipped_images(full) == ()
    with pytest.warns(UserWarning, match="skipped 4 of 6"):
        ti = train_items(c, skip_missing_images=True, require_images=True)
    assert ti.image_ids == ("img00.jpg", "img02.jpg") and ti.n_skipped == 4
    assert ti.skipped_image_ids == ("img01.jpg", "img03.jpg", "img04.jpg", "img05.jpg")
    assert c.load_image("img00.jpg").shape == (6, 8, 3)
    with pytest.raises(MissingImagesError, match="img01.jpg"):
        c.load_image("img01.jpg")


def test_skipping_keeps_choices_of_remaining_images(tmp_path):
    c = make_corpus(n_images=40, image_dir=tmp_path, present=[f"img{i:02d}.jpg" for i in range(0, 40, 2)])
    c = c.with_splits(dev=c.image_ids)
    full = dict(zip(hodosh_pool(c, "dev", seed=3).image_ids, hodosh_pool(c, "dev", seed=3).caption_ids))
    with pytest.warns(UserWarning):
        part = hodosh_pool(c, "dev", seed=3, skip_missing_images=True)
    assert part.n_images == 20 and part.n_skipped == 20
    assert all(full[im] == cid for im, cid in zip(part.image_ids, part.caption_ids))


def test_real_dev_pool_is_recorded_and_stable(flickr8k_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = load_flickr8k(flickr8k_dir, with_images=False)
    p = hodosh_pool(c, "dev", seed=0)
    assert p.n_images == p.n_captions == 1000
    assert p.caption_ids == hodosh_pool(c, "dev", seed=0).caption_ids
    # Pinned: the recorded choice of seed 0 (sha256 of "0\0<image id>" mod 5).
    assert p.caption_ids[:3] == ("2090545563_a4e66ec76b.jpg#2", "3393035454_2d2370ffd4.jpg#0",
                                 "3695064885_a6922f06b2.jpg#1")
    # No crowd judgments cover dev images: only the original pairs are relevant.
    assert relevance_stats(p)["n_extra_pairs"] == 0
    assert "test" in c.fixed_pools and "dev" not in c.fixed_pools


def test_corpus_with_images_pickles(tmp_path):
    import pickle

    c = make_corpus(image_dir=tmp_path, present=["img00.jpg"])
    c2 = pickle.loads(pickle.dumps(c))
    assert c2.load_image("img00.jpg").shape == (6, 8, 3)


def test_fingerprint_covers_the_captions_pos_tags():
    """The alignment and Lin similarities read ``Caption.pos``: corpora that differ only in their tags get
    different fingerprints (and so different cache keys); captions without tags hash as before."""
    from corpora.base import Caption, Corpus

    def corpus(pos):
        caps = {"a.jpg": [Caption(id="a.jpg#0", image_id="a.jpg", index=0, text="A dog runs .", lemma="A dog run .",
                                  pos=pos)]}
        return Corpus(name="c", image_ids=["a.jpg"], captions=caps, splits={"train": ["a.jpg"]})

    tagged, retagged, untagged = corpus(("DT", "NN", "VBZ", ".")), corpus(("DT", "VB", "NNS", ".")), corpus(None)
    assert len({tagged.fingerprint, retagged.fingerprint, untagged.fingerprint}) == 3
    assert corpus(("DT", "NN", "VBZ", ".")).fingerprint == tagged.fingerprint
