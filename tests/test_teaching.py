"""Tests of the built-in teaching set (corpora.teaching): determinism, exact relevance and grades on
hand-built scenes, the vectorised relevance against brute force, lemma / POS alignment, re-rendering,
paraphrases, detail units and negative units, simulated judgments."""
from __future__ import annotations

import re

import numpy as np
import pytest

from corpora.base import Corpus, split_caption_id
from corpora.teaching import (
    CaptionFacts, Mention, Scene, SceneObject, TeachingSet, facts_holding, grade, make_teaching_set,
    relevant, synonym_sets,
)
from corpora.teaching.facts import FactArrays, SceneArrays, holding_matrix
from corpora.teaching.language import SHAPE_WORDS
from corpora.teaching.scene import BACKGROUNDS, RELATIONS

PENN = {"DT", "JJ", "JJR", "NN", "NNS", "VBZ", "VBP", "VBG", "IN", "TO", "RB", "CC", "EX", ",", "."}


@pytest.fixture(scope="module")
def ts(small_teaching_set) -> TeachingSet:
    return small_teaching_set


def _obj(shape, colour, texture="plain", size="big", x=0.5, y=0.5):
    r = 0.17 if size == "big" else 0.09
    return SceneObject(shape, colour, texture, size, x, y, r)


@pytest.fixture()
def pair_scene() -> Scene:
    """A big red striped circle left of a small blue plain square, on the grass."""
    return Scene("grass", (_obj("circle", "red", "striped", "big", 0.18, 0.5),
                           _obj("square", "blue", "plain", "small", 0.82, 0.5)))


# ------------------------------------------------------------------------------------ hand-built facts
def test_relevance_word_order_and_binding(pair_scene):
    red_c, blue_s = Mention("circle", "red"), Mention("square", "blue")
    assert relevant(CaptionFacts((red_c, blue_s), ((0, "left_of", 1),)), pair_scene)
    assert relevant(CaptionFacts((blue_s, red_c), ((0, "right_of", 1),)), pair_scene)
    # swapped colours across the relation: a different fact, NOT relevant
    swapped = CaptionFacts((Mention("circle", "blue"), Mention("square", "red")), ((0, "left_of", 1),))
    assert not relevant(swapped, pair_scene)
    # wrong direction
    assert not relevant(CaptionFacts((red_c, blue_s), ((0, "right_of", 1),)), pair_scene)
    assert not relevant(CaptionFacts((red_c, blue_s), ((0, "above", 1),)), pair_scene)
    # next to holds for horizontal neighbours only (0.64 apart is not "next to")
    assert not relevant(CaptionFacts((red_c, blue_s), ((0, "next_to", 1),)), pair_scene)
    near = Scene("grass", (_obj("circle", "red", x=0.18), _obj("square", "blue", size="small", x=0.5)))
    assert relevant(CaptionFacts((red_c, blue_s), ((0, "next_to", 1),)), near)
    assert relevant(CaptionFacts((blue_s, red_c), ((0, "next_to", 1),)), near)


def test_relevance_omissions_background_medium(pair_scene):
    # omitted facts never hurt
    assert relevant(CaptionFacts((Mention("circle"),)), pair_scene)
    assert relevant(CaptionFacts((Mention("square", size="small", texture="plain"),), background="grass"),
                    pair_scene)
    assert relevant(CaptionFacts((Mention("circle", "red", "striped", "big"),), medium="land"), pair_scene)
    # wrong attribute / background / medium
    assert not relevant(CaptionFacts((Mention("circle", texture="dotted"),)), pair_scene)
    assert not relevant(CaptionFacts((Mention("circle", size="small"),)), pair_scene)
    assert not relevant(CaptionFacts((Mention("circle"),), background="water"), pair_scene)
    assert not relevant(CaptionFacts((Mention("circle"),), medium="water"), pair_scene)
    assert not relevant(CaptionFacts((Mention("star"),)), pair_scene)
    # mentions go to DISTINCT objects: two red circles need two objects
    assert not relevant(CaptionFacts((Mention("circle", "red"), Mention("circle", "red"))), pair_scene)
    # more mentions than objects
    three = CaptionFacts((Mention("circle"), Mention("square"), Mention("star")))
    assert not relevant(three, pair_scene)


def test_relevance_places(pair_scene):
    """Absolute places: the circle (x = 0.18) is on the left, the square (x = 0.82) on the right; both
    are in the middle row, so neither is at the top, the bottom or in the (central) middle."""
    assert relevant(CaptionFacts((Mention("circle", place="left"),)), pair_scene)
    assert relevant(CaptionFacts((Mention("square", "blue", place="right"),)), pair_scene)
    for place in ("right", "top", "bottom", "middle"):
        assert not relevant(CaptionFacts((Mention("circle", place=place),)), pair_scene)
    corner = Scene("sand", (_obj("star", "red", x=0.18, y=0.28),
                            _obj("dog", "black", size="small", x=0.5, y=0.5)))
    assert corner.objects[0].places == ("left", "top")
    assert corner.objects[1].places == ("middle",)
    assert relevant(CaptionFacts((Mention("star", place="top"), Mention("dog", place="middle"))), corner)
    assert not relevant(CaptionFacts((Mention("dog", place="top"),)), corner)
    with pytest.raises(ValueError, match="place"):
        Mention("dog", place="inside")


def test_grades_hand_built(pair_scene):
    red_c, blue_s = Mention("circle", "red"), Mention("square", "blue")
    assert grade(CaptionFacts((red_c, blue_s), ((0, "left_of", 1),), "grass"), pair_scene) == 4
    # swapped colours: best assignment keeps both shapes and the relation: 3 of 5 facts -> 3
    swapped = CaptionFacts((Mention("circle", "blue"), Mention("square", "red")), ((0, "left_of", 1),))
    assert facts_holding(swapped, pair_scene) == 3
    assert grade(swapped, pair_scene) == 3
    # a red small dotted star: only "red" holds (1 of 4) -> 2
    assert grade(CaptionFacts((Mention("star", "red", "dotted", "small"),)), pair_scene) == 2
    # a green star in the snow: nothing holds -> 1
    assert grade(CaptionFacts((Mention("star", "green"),), background="snow"), pair_scene) == 1
    # exactly half -> 3
    assert grade(CaptionFacts((Mention("star", "red"),)), pair_scene) == 3
    assert TeachingSet.grade(CaptionFacts((red_c,)), pair_scene) == 4
    assert TeachingSet.relevant(CaptionFacts((red_c,)), pair_scene)


def test_invalid_facts_rejected():
    with pytest.raises(ValueError, match="shape"):
        Mention("hexagon")
    with pytest.raises(ValueError, match="relation"):
        CaptionFacts((Mention("circle"), Mention("star")), ((0, "inside", 1),))
    with pytest.raises(ValueError, match="indices"):
        CaptionFacts((Mention("circle"),), ((0, "left_of", 1),))
    with pytest.raises(ValueError, match="contradicts"):
        CaptionFacts((Mention("circle"),), background="water", medium="land")
    with pytest.raises(ValueError, match="background"):
        Scene("moon", (_obj("circle", "red"),))


def test_vectorised_matches_brute_force(ts, pair_scene):
    rng = np.random.default_rng(0)
    scenes = [ts.scenes[i] for i in ts.image_ids[:40]] + [pair_scene]
    cids = [c.id for im in ts.image_ids[40:80] for c in ts.captions[im]]
    facts = [ts.facts[c] for c in cids]
    # add random hand-made facts, incl. relations between 3 mentions
    for _ in range(60):
        n = int(rng.integers(1, 4))
        ms = tuple(Mention(str(rng.choice(list(SHAPE_WORDS))), str(rng.choice(["red", "blue", "black"])))
                   for _ in range(n))
        rels = tuple((a, str(rng.choice(RELATIONS)), b) for a in range(n) for b in range(n)
                     if a < b and rng.random() < 0.5)
        facts.append(CaptionFacts(ms, rels, str(rng.choice(BACKGROUNDS)) if rng.random() < 0.5 else None))
    H = holding_matrix(SceneArrays(scenes), FactArrays(facts), chunk=37)
    for s, sc in enumerate(scenes):
        for c, f in enumerate(facts):
            assert H[s, c] == facts_holding(f, sc), (s, c)


# ------------------------------------------------------------------------------------ the corpus
def test_structure(ts):
    assert isinstance(ts, Corpus) and ts.name == "teaching"
    assert [len(ts.split(s)) for s in ("train", "dev", "test")] == [60, 30, 30]
    assert len(set(ts.image_ids)) == 120 and set(ts.split("train")).isdisjoint(ts.split("test"))
    for im in ts.image_ids:
        caps = ts.captions[im]
        assert [c.index for c in caps] == list(range(5))
        assert all(split_caption_id(c.id) == (im, c.index) for c in caps)
        assert all(c.id in ts.facts for c in caps)
    img = ts.load_image(ts.image_ids[3])
    assert img.shape == (120, 160, 3) and img.dtype == np.uint8
    assert ts.has_image(ts.image_ids[3]) and ts.image_path(ts.image_ids[3]) is None
    assert "seed=0" in ts.notes[0] and "160x120" in ts.notes[0]
    assert ts.fixed_pools["test"] and len(ts.fixed_pools["test"]) == 30
    assert [split_caption_id(c)[0] for c in ts.fixed_pools["test"]] == list(ts.split("test"))


def test_seed_outside_32_bits_is_refused():
    """The random streams take 32-bit seeds: 2^32 would silently repeat seed 0's data under another
    fingerprint, and a negative seed would wrap around."""
    for bad in (2 ** 32, -1, 1.5):
        with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\^32\)"):
            make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=bad)
    assert make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=2 ** 31 - 1).image_ids


def test_pretraining_and_heldout_seeds_are_refused():
    """Seeds from 2^31 up belong to the teaching CLIP's pretraining stream and held-out pools: an
    evaluation corpus built from one could overlap the pretraining data."""
    for bad, what in ((2 ** 31, "pretraining stream"), (2 ** 32 - 1, "held-out pools")):
        with pytest.raises(ValueError, match=what):
            make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=bad)


def test_determinism_and_seed():
    a = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=3)
    b = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=3)
    c = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=4)
    d = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=3, image_size=(128, 96))
    ids = a.image_ids
    # render b in reverse order: lazy rendering must not depend on the order of requests
    for im in reversed(ids[:10]):
        b.load_image(im)
    for im in ids[:10]:
        assert a.load_image(im).tobytes() == b.load_image(im).tobytes()
    assert [c_.text for im in ids for c_ in a.captions[im]] == [c_.text for im in ids for c_ in b.captions[im]]
    assert a.fingerprint == b.fingerprint
    assert a.expert == b.expert and a.crowd == b.crowd
    assert [x.text for im in ids for x in a.captions[im]] != [x.text for im in ids for x in c.captions[im]]
    assert any(a.load_image(im).tobytes() != c.load_image(im).tobytes() for im in ids[:5])
    assert len({a.fingerprint, c.fingerprint, d.fingerprint}) == 3
    # the fingerprint also covers the scenes (what the images are rendered from), not only the captions
    from corpora.teaching import scene as scene_mod

    saved = scene_mod._place.__defaults__
    try:
        scene_mod._place.__defaults__ = (scene_mod.PLACE_JITTER / 2,)  # smaller jitter: same facts, other positions
        e = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=3)
    finally:
        scene_mod._place.__defaults__ = saved
    assert [x.text for im in ids for x in e.captions[im]] == [x.text for im in ids for x in a.captions[im]]
    assert e.fingerprint != a.fingerprint
    assert d.load_image(ids[0]).shape == (96, 128, 3)
    # image signatures (image-feature cache keys): what the pixels are rendered from, not the captions
    sig = [a.image_signature(im) for im in ids]
    assert sig == [b.image_signature(im) for im in ids] and len(set(sig)) == len(ids)
    assert all(x != y for x, y in zip(sig, (c.image_signature(im) for im in ids)))
    assert all(x != y for x, y in zip(sig, (d.image_signature(im) for im in ids)))
    assert sum(x != y for x, y in zip(sig, (e.image_signature(im) for im in ids))) >= len(ids) // 2
    a2 = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=3)
    a2.fingerprint = "captions-edited"     # the caption / split hash does not enter the signature
    assert [a2.image_signature(im) for im in ids] == sig
    assert a.images_fingerprint(ids[:5]) == a2.images_fingerprint(ids[:5]) != a.images_fingerprint(ids[1:6])
    with pytest.raises(ValueError, match="n_train"):
        make_teaching_set(n_images=10, n_train=8, n_dev=5)


def test_own_captions_relevant_and_judge_relevance(ts):
    ids = ts.split("dev")
    cids = [c.id for im in ids for c in ts.captions[im]]
    R = ts.judge_relevance(ids, cids)
    assert R.shape == (30, 150) and R.dtype == bool
    for i in range(30):
        assert R[i, 5 * i: 5 * i + 5].all()
    # exact: equal to the scalar rule everywhere
    for i, im in enumerate(ids):
        for j in range(0, 150, 7):
            assert R[i, j] == relevant(ts.facts[cids[j]], ts.scenes[im])
    G = ts.grade_matrix(ids, cids)
    assert ((G == 4) == R).all() and G.min() >= 1 and G.max() <= 4
    assert 0.0 < R.mean() < 0.3  # relevant pairs exist beyond the originals, but are a minority


def test_lemma_and_pos_aligned(ts):
    for caps in ts.captions.values():
        for c in caps:
            toks = c.lemma.split()
            assert len(toks) == len(c.pos) > 2
            assert set(c.pos) <= PENN, c.pos
            assert toks[-1] == "." and c.text.endswith(".")
            # lemmas: "is" -> "be", plural nouns singular
            assert "is" not in toks and "are" not in toks
            assert not any(t in ("stripes", "dots", "spots", "checks") for t in toks)
            # text tokens correspond one-to-one (punctuation split off)
            assert len(re.findall(r"[\w'-]+|[.,]", c.text)) == len(toks)


def test_synonyms_cooccur_across_annotators(ts):
    """Synonyms of one concept show up among the five captions of the same image."""
    sets = [set(s) for s in synonym_sets()]
    hits = 0
    for caps in ts.captions.values():
        words = [set(c.lemma.lower().split()) for c in caps]
        for s in sets:
            used = {w for ws in words for w in ws & s}
            hits += len(used) >= 2
    assert hits >= 60
    # each caption's shape words belong to the shapes its facts mention
    for cid, f in list(ts.facts.items())[:200]:
        lemmas = set(ts.caption(cid).lemma.lower().split())
        for m in f.mentions:
            assert lemmas & set(SHAPE_WORDS[m.shape])


def test_rerender_keeps_facts(ts):
    for im in ts.image_ids[:12]:
        scene = ts.rerender_scene(im, seed=5)
        assert scene != ts.scenes[im]
        assert np.array_equal(scene.relation_tensor(), ts.scenes[im].relation_tensor())
        for c in ts.captions[im]:
            assert relevant(ts.facts[c.id], scene)
        img = ts.rerender(im, seed=5)
        assert img.shape == ts.load_image(im).shape and img.dtype == np.uint8
        assert not np.array_equal(img, ts.load_image(im))
        assert np.array_equal(img, ts.rerender(im, seed=5))


def test_paraphrase(ts):
    changed = 0
    for im in ts.image_ids[:20]:
        for c in ts.captions[im][:2]:
            p = ts.paraphrase(c.id, seed=1)
            assert p.id == f"{c.id}p1" and p.image_id == im and p.index == c.index
            assert ts.facts_of(p.id) == ts.facts[c.id]
            assert len(p.lemma.split()) == len(p.pos)
            changed += p.text != c.text
            assert ts.judge_relevance([im], [p.id])[0, 0]
    assert changed >= 38
    first = ts.captions[ts.image_ids[0]]
    assert ts.paraphrase(first[0].id, 2).text == ts.paraphrase(first[0].id, 2).text
    assert ts.paraphrase(first[0].id, 2).id != ts.paraphrase(first[1].id, 2).id
    d, _ = ts.describe(ts.image_ids[0])
    pd = ts.paraphrase(d.id, 0)
    assert pd.id == f"{d.id}p0" and relevant(ts.facts_of(pd.id), ts.scenes[ts.image_ids[0]])


def test_describe_units(ts):
    for im in ts.image_ids[:20]:
        cap, units = ts.describe(im, seed=0)
        assert " ".join(units) == cap.text and cap.id == f"{im}#d0"
        assert len(cap.lemma.split()) == len(cap.pos)
        scene = ts.scenes[im]
        assert len(units) == 4 + 3 * (len(scene.objects) - 1)
        prefix = ts.describe_facts(im, seed=0)
        counts = [f.n_facts for f in prefix]
        assert all(b > a for a, b in zip(counts, counts[1:])), counts  # each unit adds a fact
        assert all(relevant(f, scene) for f in prefix)
        assert ts.judge_relevance([im], [cap.id])[0, 0]
        # every fact stated: all objects with all four attributes, a place, and the background
        full = ts.facts_of(cap.id)
        assert full == prefix[-1]
        assert all(m.place is not None for m in full.mentions)
        assert len(full.mentions) == len(scene.objects) and full.background == scene.background
        assert all(None not in m.attrs() for m in full.mentions)


def test_negative_unit_is_false(ts):
    for im in ts.image_ids[:20]:
        for seed in range(3):
            unit = ts.negative_unit(im, seed)
            assert unit and unit[0].islower()
            assert not relevant(ts.negative_unit_facts(im, seed), ts.scenes[im])
        assert ts.negative_unit(im, 0) == ts.negative_unit(im, 0)


def test_twins_are_minimal_pairs(ts):
    twins2 = [(a, b) for a, b in ts.twins.items() if len(ts.scenes[a].objects) == 2]
    assert twins2
    for a, b in twins2:
        assert ts.scenes[a] != ts.scenes[b]
        assert ts.scenes[a].background == ts.scenes[b].background
        cap, _ = ts.describe(a)
        assert not ts.judge_relevance([b], [cap.id])[0, 0]


def test_judgments(ts):
    assert ts.expert and ts.crowd
    own = 0
    dev_test = set(ts.split("dev")) | set(ts.split("test"))
    for j in ts.expert:
        assert j.image_id in dev_test and all(1 <= s <= 4 for s in j.scores)
        true = ts.grade(ts.facts[j.caption_id], ts.scenes[j.image_id])
        assert abs(np.mean(j.scores) - true) <= 1.0
        own += split_caption_id(j.caption_id)[0] == j.image_id
    assert own == 60
    grades = [ts.grade(ts.facts[j.caption_id], ts.scenes[j.image_id]) for j in ts.expert]
    assert set(grades) >= {1, 2, 4}
    for j in ts.crowd:
        assert j.n_yes + j.n_no == 3 and j.fraction_yes == pytest.approx(j.n_yes / 3)
    rel = np.array([relevant(ts.facts[j.caption_id], ts.scenes[j.image_id]) for j in ts.crowd])
    fy = np.array([j.fraction_yes for j in ts.crowd])
    assert fy[rel].mean() > 0.8 and fy[~rel].mean() < 0.2


# ------------------------------------------------------------------------------------ rendering
def test_colours_separated_in_cielab():
    import cv2

    from corpora.teaching.render import RGB

    names = list(RGB)
    lab = cv2.cvtColor(np.array([[RGB[n] for n in names]], np.uint8), cv2.COLOR_RGB2LAB)[0].astype(float)
    lab[:, 0] *= 100 / 255
    lab[:, 1:] -= 128
    d = np.sqrt(((lab[:, None] - lab[None]) ** 2).sum(-1)) + np.eye(len(names)) * 1e3
    assert d.min() >= 30, d.min()


def test_background_textures_differ_in_statistics():
    """Grass = vertical streaks (more horizontal gradient energy), water = horizontal waves (more vertical
    gradient energy), sand = fine isotropic grain, snow = smooth: the texture kernel has more than
    colour to go on."""
    import cv2

    from corpora.teaching.render import render_background

    stats = {}
    for bg in ("grass", "sand", "water", "snow"):
        img = render_background(bg, 120, 160, np.random.default_rng(0)).mean(-1)
        gx = cv2.Sobel(img, cv2.CV_32F, 1, 0)
        gy = cv2.Sobel(img, cv2.CV_32F, 0, 1)
        stats[bg] = (float((gx ** 2).mean()), float((gy ** 2).mean()))
    ratio = {bg: gx / gy for bg, (gx, gy) in stats.items()}
    energy = {bg: gx + gy for bg, (gx, gy) in stats.items()}
    assert ratio["grass"] > 2.0 and ratio["water"] < 0.5 and 0.6 < ratio["sand"] < 1.6
    assert energy["snow"] < energy["sand"] < energy["water"]


def test_shapes_have_distinct_contours():
    """SIFT sees contours: the outlines of any two shapes (same centre and radius) overlap little."""
    import cv2

    from corpora.teaching.render import silhouette
    from corpora.teaching.scene import SHAPES

    k = np.ones((3, 3), np.uint8)
    edges = {}
    for s in SHAPES:
        m = (silhouette(s, 40, 40, 30, 0.0, False, 80, 80) > 127).astype(np.uint8)
        assert m.sum() > 300
        edges[s] = cv2.dilate(m - cv2.erode(m, k), k).astype(bool)
    for a in SHAPES:
        for b in SHAPES:
            if a < b:
                iou = (edges[a] & edges[b]).sum() / (edges[a] | edges[b]).sum()
                assert iou < 0.5, (a, b, iou)


def test_sky_is_a_nuisance_not_a_fact(ts):
    """The optional sky band repeats ground colours (position tells them apart) and is not a fact."""
    from corpora.teaching.render import BACKGROUND_RGB, SKY_RGB

    assert all(ts.scenes[i].sky is None for i in ts.image_ids)          # off by default
    ts = make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=0, sky=True)
    assert set(SKY_RGB.values()) <= set(BACKGROUND_RGB.values())
    assert {ts.scenes[i].sky for i in ts.image_ids} == {"blue", "overcast", "haze"}
    assert any("sky" in n for n in ts.notes)
    im = ts.image_ids[0]
    sc = ts.scenes[im]
    for c in ts.captions[im]:
        assert relevant(ts.facts[c.id], Scene(sc.background, sc.objects))
    top = ts.load_image(im).astype(float)[: int(0.15 * 120)].mean((0, 1))
    assert np.abs(top - np.array(SKY_RGB[sc.sky])).max() < 30
    with pytest.raises(ValueError, match="sky"):
        Scene("grass", sc.objects, sky="purple")


def test_many_sampled_scenes_are_valid():
    """3000 draws of the scene sampler: valid layouts, predicates away from their thresholds."""
    from corpora.teaching.scene import layout_ok, sample_scene, twin_scene

    rng = np.random.default_rng(11)
    for _ in range(3000):
        sc = sample_scene(rng, sky=bool(rng.random() < 0.5))
        assert layout_ok(sc.objects)
        assert len({o.colour for o in sc.objects}) == len(sc.objects)
        assert all(o.places for o in sc.objects)
        tw = twin_scene(rng, sc)
        if tw is not None:
            assert tw.background == sc.background and tw != sc
