"""L-CLIPScore on the teaching CLIP distils on the teaching CLIP's own pretraining stream (recipe
``lclip-teaching``, neural.lclip_stream), as Li et al. distil on large data rather than on the evaluation
corpus: the recipe's values and sources, the stream's images and pairs, and the family's dispatch."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from corpora.teaching import PRETRAIN_SEEDS, pretraining_chunk
from neural.family import TrainSettings, TrainingDataError
from neural.recipes import Recipe, get_recipe
from neural.registry import family_for, recipe_for


def test_teaching_recipe_distils_on_the_stream_with_the_printed_stage2_rate():
    r = recipe_for("L-CLIPScore", "teaching")
    assert r.name == "lclip-teaching" and r is get_recipe("lclip-teaching")
    assert recipe_for("RefL-CLIPScore", None).name == "lclip-teaching"     # the default backbone
    assert recipe_for("L-CLIPScore", "tiny").name == "lclip-small"        # the in-run tiny CLIP keeps its own
    assert r.data == "pretraining-stream" and r.max_images == 4_000 and r.max_texts == 20_000
    assert (r.stage2_lr, r.steps, r.stage2_steps, r.schedule) == (1e-4, 1_200, 300, "cosine")
    assert "Sec. IV-B" in r.source("stage2_lr") and r.source("data").startswith("ours")
    assert r.describe()["data"] == "pretraining-stream"
    assert get_recipe("lclip-small").data == "corpus" and get_recipe("lclip-paper").data == "corpus"
    with pytest.raises(ValueError, match="data"):
        Recipe("x", "L-CLIPScore", batch_size=1, lr=1.0, weight_decay=0.0, steps=1, data="web")
    with pytest.raises(ValueError, match="max_images"):
        Recipe("x", "L-CLIPScore", batch_size=1, lr=1.0, weight_decay=0.0, steps=1, data="pretraining-stream")


def test_stream_data_takes_the_first_images_of_the_chunks_in_order():
    """Seven images of 5-image chunks: chunk 0 whole, then the first two of chunk 1; every caption of each
    image, each paired with its image; the description names the chunks' seeds."""
    from neural.lclip_stream import stream_data

    d = stream_data(7, chunk_size=5)
    c0, c1 = pretraining_chunk(0, size=5), pretraining_chunk(1, size=5)
    want = [(c0, i) for i in c0.split("train")] + [(c1, i) for i in c1.split("train")[:2]]
    assert len(d.images) == 7
    for got, (chunk, image_id) in zip(d.images, want):
        assert np.array_equal(got, chunk.load_image(image_id))
    texts = [c.text for chunk, i in want for c in chunk.captions_of(i)]
    assert d.texts == texts and len(d.pairs) == len(texts)
    rows = [k for k, (chunk, i) in enumerate(want) for _ in chunk.captions_of(i)]
    assert [p[0] for p in d.pairs] == rows and [p[1] for p in d.pairs] == list(range(len(texts)))
    assert d.description["seeds"] == [PRETRAIN_SEEDS.start, PRETRAIN_SEEDS.start + 2]
    capped = stream_data(7, max_texts=12, chunk_size=5)
    assert len(capped.texts) == 12 and max(p[1] for p in capped.pairs) == 11 and len(capped.images) == 7


def test_family_trains_on_the_stream_only_from_the_teaching_clip(monkeypatch, random_tiny_backbone):
    """The ``pretraining-stream`` recipe calls the stream trainer with the recipe's config; on a backbone
    that was not pretrained on the stream it is a TrainingDataError naming the recipe."""
    import neural.lclip_stream as ls

    fam = family_for("L-CLIPScore")
    seen = {}

    def fake(teacher, cfg, **kw):
        seen.update(cfg=cfg, teacher=teacher)
        return random_tiny_backbone

    monkeypatch.setattr(ls, "train_lclip_on_stream", fake)
    teaching_like = SimpleNamespace(arch="itr-teaching-clip", name="teaching-clip")
    scorer = fam.train(teaching_like, None, get_recipe("lclip-teaching"), TrainSettings(seed=5, show_progress=False))
    assert seen["teacher"] is teaching_like and scorer.backbone is random_tiny_backbone
    assert (seen["cfg"].max_images, seen["cfg"].stage1_steps, seen["cfg"].seed) == (4_000, 1_200, 5)
    with pytest.raises(TrainingDataError, match="lclip-teaching"):
        fam.train(random_tiny_backbone, None, get_recipe("lclip-teaching"), TrainSettings(show_progress=False))
