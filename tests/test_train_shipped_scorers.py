"""experiments.train_shipped_scorers: the training corpus comes from the pretraining seed range, split
70/15/15, sharing no scene with the evaluation corpus; the command writes four loadable scorers (run on
the tiny random-weight architecture with a few steps, standing in for the teaching CLIP)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from corpora.teaching import PRETRAIN_SEEDS, make_teaching_set, scene_fingerprints
from experiments import train_shipped_scorers as tss


KINDS = {"PAC-S": "PACScore", "L-CLIPScore": "LCLIPScore", "BRIDGE": "BRIDGE", "SPECS": "SPECSScore"}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


def test_training_corpus_is_a_pretraining_chunk_split_like_the_default():
    c = tss.training_corpus(chunk=3, n_images=80, eval_seed=0)
    assert [len(c.split(s)) for s in ("train", "dev", "test")] == [56, 12, 12]
    ev = make_teaching_set(n_images=80, n_train=56, n_dev=12, seed=0)
    assert not scene_fingerprints(c) & scene_fingerprints(ev)
    assert c.fingerprint != tss.training_corpus(chunk=4, n_images=80, eval_seed=None).fingerprint
    assert PRETRAIN_SEEDS.start + 3 in PRETRAIN_SEEDS


def test_command_writes_loadable_scorers(monkeypatch, random_tiny_backbone, tmp_path, capsys):
    import neural.recipes
    import neural.teaching_clip
    from neural.saved import CONFIG_NAME, WEIGHTS_NAME, load_scorer, read_scorer_config

    real = neural.recipes.recipe_for

    def short(scorer, bb, family="auto"):   # a few steps: the test checks the plumbing, not the training
        r = real(scorer, bb, family)
        return dataclasses.replace(r, steps=2, stage2_steps=min(r.stage2_steps, 2), epochs=None, eval_every=1,
                                   patience=1, batch_size=6, max_images=12, warmup_steps=0)

    monkeypatch.setattr(neural.recipes, "recipe_for", short)
    monkeypatch.setattr(neural.teaching_clip, "load_teaching_clip", lambda **kw: random_tiny_backbone)
    monkeypatch.setattr(tss, "PACS_TRAIN_IMAGES", 16)
    monkeypatch.setattr(tss, "PACS_DEV_IMAGES", 6)
    assert tss.main(["--out", str(tmp_path), "--teaching-size", "60", "--quiet"]) == 0
    out = capsys.readouterr().out
    for metric, folder in tss.SCORER_FOLDERS.items():
        f = tmp_path / folder
        assert (f / CONFIG_NAME).is_file() and (f / WEIGHTS_NAME).is_file()
        assert tss.file_digest(f / WEIGHTS_NAME) in out
        assert read_scorer_config(f)["metric"] == metric
        assert type(load_scorer(f, random_tiny_backbone)).__name__ == KINDS[metric]
    scores = load_scorer(tmp_path / "specs", random_tiny_backbone).backbone.model.logit_scale.detach()
    assert np.isfinite(np.asarray(scores)).all()
