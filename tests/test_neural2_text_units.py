"""Noun chunks / BRIDGE templates and SPECS detail-unit segmentation on fixed sentences."""
from __future__ import annotations

import pytest

from neural.text_units import cumulative_captions, detail_units, mask_templates, noun_chunks, tokenize

# (text, Penn tags aligned with tokenize(text)) — tags given explicitly so the test is tagger-independent
GREEN = ("A green diamond sits above a big orange box.",
         ("DT", "JJ", "NN", "VBZ", "IN", "DT", "JJ", "JJ", "NN", "."))
SNOW = ("In the snow, a huge orange square rests below a green diamond.",
        ("IN", "DT", "NN", ",", "DT", "JJ", "JJ", "NN", "VBZ", "IN", "DT", "JJ", "NN", "."))
MAN = ("The man in a red shirt climbs a rock while a woman watches from below.",
       ("DT", "NN", "IN", "DT", "JJ", "NN", "VBZ", "DT", "NN", "IN", "DT", "NN", "VBZ", "IN", "IN", "."))
TWO = ("A brown dog and a white cat sit on a sofa. The image shows a sunny room with large windows.",
       ("DT", "JJ", "NN", "CC", "DT", "JJ", "NN", "VBP", "IN", "DT", "NN", ".",
        "DT", "NN", "VBZ", "DT", "JJ", "NN", "IN", "JJ", "NNS", "."))


def test_tags_align_with_tokens():
    for text, tags in (GREEN, SNOW, MAN, TWO):
        assert len(tokenize(text)) == len(tags), text


def test_noun_chunks_and_templates():
    text, tags = GREEN
    assert [c.text for c in noun_chunks(text, tags)] == ["A green diamond", "a big orange box"]
    tpl = mask_templates(text, tags)
    # BRIDGE Fig. 2 ("A [MASK] running with a [MASK]"): the determiner stays outside the mask
    assert [t.render() for t in tpl] == ["A [MASK] [MASK] [MASK] sits above a big orange box.",
                                         "A green diamond sits above a [MASK] [MASK] [MASK] ."]
    assert [t.chunk for t in tpl] == ["green diamond", "big orange box"]
    text, tags = MAN
    assert [c.text for c in noun_chunks(text, tags)] == ["The man", "a red shirt", "a rock", "a woman"]
    assert mask_templates(text, tags, n_pseudo=2)[1].render("X") == \
        "The man in a X X climbs a rock while a woman watches from below."


def test_template_without_chunks_masks_everything():
    tpl = mask_templates("running fast", ("VBG", "RB"))
    assert len(tpl) == 1 and tpl[0].chunk == "running fast" and tpl[0].render() == "[MASK] [MASK] [MASK]"


def test_detail_units_given_tags():
    text, tags = GREEN
    assert [u.text for u in detail_units(text, tags)] == ["A green diamond", "sits above a big orange box."]
    # sentence-initial PP has no verb -> it is its own first segment; the PP after "a huge orange square"
    # would be merged, the VP keeps its PP
    text, tags = SNOW
    assert [u.text for u in detail_units(text, tags)] == [
        "In the snow, a huge orange square", "rests below a green diamond."]
    # rule 1 (initial "The" NP not split), rule 2 (PP stays with its NP), "while" clause separate,
    # "from below" (preposition, no verb) joins the clause
    text, tags = MAN
    assert [u.text for u in detail_units(text, tags)] == [
        "The man in a red shirt climbs a rock", "while a woman watches from below."]
    assert [u.text for u in detail_units(text, tags, merge_initial_the=False)] == [
        "The man in a red shirt", "climbs a rock", "while a woman watches from below."]
    text, tags = TWO
    assert [u.text for u in detail_units(text, tags)] == [
        "A brown dog", "and a white cat sit on a sofa.", "The image shows a sunny room with large windows."]
    # an existential "there" is no detail of its own: it stays with what it introduces
    text = "There is a red circle on the left and there is a dog on the grass."
    tags = ("EX", "VBZ", "DT", "JJ", "NN", "IN", "DT", "NN", "CC", "EX", "VBZ", "DT", "NN", "IN", "DT", "NN", ".")
    assert [u.text for u in detail_units(text, tags)] == [
        "There is a red circle on the left", "and there is a dog on the grass."]
    # also after a fronted phrase, which rule 3 has already joined to the "there"
    text = "On the sand, there is a cross with checks on the left."
    tags = ("IN", "DT", "NN", ",", "EX", "VBZ", "DT", "NN", "IN", "NNS", "IN", "DT", "NN", ".")
    assert [u.text for u in detail_units(text, tags)] == [text]
    # two (or more) sentence-initial PPs wait together for the first unit with content (rule 3)
    text = "In the park on the grass, a dog runs."
    tags = ("IN", "DT", "NN", "IN", "DT", "NN", ",", "DT", "NN", "VBZ", ".")
    assert [u.text for u in detail_units(text, tags)] == ["In the park on the grass, a dog", "runs."]
    text = "In the park on the grass near the lake."
    assert [u.text for u in detail_units(text, ("IN", "DT", "NN", "IN", "DT", "NN", "IN", "DT", "NN", "."))] \
        == [text]
    text = "Is there a cat ?"
    assert [u.text for u in detail_units(text, ("VBZ", "EX", "DT", "NN", "."))] == [text]


def test_units_cover_text_and_cumulative_prefixes():
    text, tags = TWO
    units = detail_units(text, tags)
    assert " ".join(u.text for u in units) == text
    cum = cumulative_captions(text, units)
    assert cum[-1] == text
    assert all(text.startswith(c) for c in cum)
    assert all(len(a) < len(b) for a, b in zip(cum, cum[1:]))


def test_nltk_tagger_path(nltk_data_dir):
    pytest.importorskip("nltk")
    assert [u.text for u in detail_units("A black dog is running on the grass .")] == [
        "A black dog", "is running on the grass ."]
    assert [c.text for c in noun_chunks("Two children playing in the snow next to a red house")] == [
        "Two children", "a red house"]
    assert [u.text for u in detail_units("The man in a red shirt climbs a rock while a woman watches from below.")] \
        == ["The man in a red shirt climbs a rock", "while a woman watches from below."]


def test_teaching_captions_use_their_own_pos(small_teaching_set):
    ts = small_teaching_set
    cap, units = ts.describe(ts.split("train")[0])
    chunks = noun_chunks(cap.text, cap.pos)
    assert chunks and all(c.text in cap.text for c in chunks)
    assert len(mask_templates(cap.text, cap.pos)) == len(chunks)


def test_missing_tagger_is_a_missing_resource_error(monkeypatch):
    """The tagger's resource goes through corpora.nltk_resources, so the main job's handler for missing
    NLTK data prints it as one 'error:' line (and it is downloaded when online)."""
    import corpora.nltk_resources as res
    from neural import text_units

    def missing(path, package):
        raise res.MissingResourceError(f"NLTK resource {path!r} not found (test)")

    text_units._tagger.cache_clear()
    monkeypatch.setattr(res, "nltk_resource", missing)
    try:
        with pytest.raises(res.MissingResourceError, match="averaged_perceptron_tagger_eng.*Caption.pos"):
            detail_units("A dog runs on the grass.")
    finally:
        text_units._tagger.cache_clear()
