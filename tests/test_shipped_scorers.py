"""The shipped fine-tuned scorers (neural.shipped_scorers, experiments.train_shipped_scorers): the files
verify and stay under the size limit, load on the teaching CLIP and reproduce their model-card figures; a
damaged, missing or mismatched file is one error naming it and the rebuild command; the training set
shares no scene with the evaluation corpus or the pretraining stream; the command writes a loadable set;
the main job's neural stage loads them on the teaching CLIP and trains in the run with --train-scorers."""
from __future__ import annotations

import dataclasses
import json
import shutil
import warnings

import numpy as np
import pytest

from corpora.teaching import (
    SCORER_TRAINING_SEEDS,
    make_teaching_set,
    pretraining_chunk,
    scene_fingerprints,
    scorer_training_set,
)
from experiments import train_shipped_scorers as tss
from experiments.options import RunOptions, uses_shipped_scorers
from neural.registry import recipe_for, shipped_folders

KINDS = {"PAC-S": "PACScore", "L-CLIPScore": "LCLIPScore", "BRIDGE": "BRIDGE", "SPECS": "SPECSScore"}


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


@pytest.fixture(scope="module")
def teaching():
    from neural.teaching_clip import load_teaching_clip

    return load_teaching_clip(device="cpu", show_progress=False)


def test_shipped_files_verify_and_each_is_at_most_10_mb():
    from neural import shipped_scorers as ss

    manifest = ss.read_manifest()
    assert set(manifest["scorers"]) == set(shipped_folders())
    assert manifest["training_set"]["seed"] in SCORER_TRAINING_SEEDS
    assert manifest["storage_dtype"] == "float16"
    for metric in shipped_folders():
        folder = ss.verified_folder(metric, manifest=manifest)
        for f in folder.iterdir():
            assert f.stat().st_size <= ss.MAX_FILE_BYTES, f


@pytest.mark.parametrize("metric", list(KINDS))
def test_shipped_scorer_reproduces_its_model_card_figures(metric, teaching):
    """Each shipped scorer, loaded on the shipped teaching CLIP, gives its manifest's held-out figures
    (the 60-image card pool): R@k within one query, SPECS' specificity rates within one unit."""
    from neural import shipped_scorers as ss

    card = ss.read_manifest()["scorers"][metric]["heldout"]
    scorer = ss.load_shipped_scorer(metric, teaching)
    assert type(scorer).__name__ == KINDS[metric]
    got = ss.heldout_figures(scorer, metric, card["pool_images"])
    n = card["pool_images"]
    for task in ("annotation", "search"):
        for k in ("R@1", "R@5", "R@10"):
            assert abs(got[task][k] - card[task][k]) <= 100.0 / n + 1e-9, (task, k)
    if metric == "SPECS":
        for k in ("SR_pos", "SR_neg"):
            assert abs(got[k] - card[k]) <= 1.0, k
    if metric != "BRIDGE":   # a fine-tune, not the teaching CLIP itself (PAC-S ranks differently from CLIP-S)
        assert scorer.backbone.weights_id != teaching.weights_id


@pytest.fixture()
def copied(tmp_path):
    from neural.shipped_scorers import SCORERS_DIR

    root = tmp_path / "scorers"
    shutil.copytree(SCORERS_DIR, root)
    return root


def test_damaged_or_missing_file_is_one_error_naming_it_and_the_rebuild_command(copied, teaching):
    from neural import shipped_scorers as ss

    w = copied / "pacs" / "weights.safetensors"
    data = bytearray(w.read_bytes())
    data[-1] ^= 0xFF
    w.write_bytes(bytes(data))
    with pytest.raises(ss.ShippedScorerError, match=r"pacs/weights\.safetensors: damaged") as err:
        ss.load_shipped_scorer("PAC-S", teaching, copied)
    assert ss.REBUILD_COMMAND in str(err.value)
    (copied / "specs" / "scorer.json").unlink()
    with pytest.raises(ss.ShippedScorerError, match=r"specs/scorer\.json: missing"):
        ss.load_shipped_scorer("SPECS", teaching, copied)
    (copied / "manifest.json").write_text('{"format": "itr-shipped-scorers",\n "version": 1,,}')
    with pytest.raises(ss.ShippedScorerError, match=r"manifest\.json:2: not valid JSON"):
        ss.read_manifest(copied)
    (copied / "manifest.json").unlink()
    with pytest.raises(ss.ShippedScorerError, match=r"manifest\.json: not found.*train_shipped_scorers"):
        ss.load_shipped_scorer("BRIDGE", teaching, copied)


def test_wrong_parent_and_other_generator_version(copied, teaching, random_tiny_backbone, monkeypatch):
    from neural import shipped_scorers as ss

    with pytest.raises(ss.ShippedScorerError, match="not the parent.*rebuild the shipped scorers") as err:
        ss.load_shipped_scorer("PAC-S", random_tiny_backbone, copied)
    assert str(err.value).count("scorer.json") == 1   # the file is named once
    assert ss.is_shipped_teaching_clip(teaching) and not ss.is_shipped_teaching_clip(random_tiny_backbone)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ss.GeneratorVersionWarning)
        ss.load_shipped_scorer("BRIDGE", teaching, copied)   # same version: silent
    monkeypatch.setattr(ss, "GENERATOR_VERSION", ss.GENERATOR_VERSION + 1)
    with pytest.warns(ss.GeneratorVersionWarning, match="rebuild them with: python -m experiments.train_shipped"):
        ss.load_shipped_scorer("BRIDGE", teaching, copied)


def test_training_set_shares_no_scene_with_evaluation_or_pretraining_data(monkeypatch):
    ts = tss.training_set(0, eval_seed=0)
    assert [len(ts.split(s)) for s in ("train", "dev", "test")] == [1400, 300, 300]
    assert ts.seed == SCORER_TRAINING_SEEDS.start
    assert not scene_fingerprints(ts) & scene_fingerprints(pretraining_chunk(0))
    assert not scene_fingerprints(ts) & scene_fingerprints(make_teaching_set(seed=1))
    # the check can fail: an evaluation corpus that is the training set itself
    monkeypatch.setattr(tss, "make_teaching_set", lambda seed: scorer_training_set(2, 30, 10, 10))
    with pytest.raises(RuntimeError, match="shares 30 scenes"):
        tss.training_set(2, eval_seed=0, n_images=30, n_train=10, n_dev=10)


def test_command_writes_a_loadable_verified_set(monkeypatch, random_tiny_backbone, tmp_path, capsys):
    """The command (tiny random backbone standing in for the teaching CLIP, a few steps each) writes four
    fp16 scorers and a manifest that :func:`load_shipped_scorer` accepts."""
    import neural.families.pacs
    import neural.teaching_clip
    from neural import shipped_scorers as ss
    from neural.family import ScorerFamily

    real = ScorerFamily.recipe

    def short(self, bb, family="auto"):   # a few steps: the test checks the plumbing, not the training
        r = real(self, bb, family)
        return dataclasses.replace(r, steps=2, stage2_steps=min(r.stage2_steps, 2), epochs=None, eval_every=1,
                                   patience=1, batch_size=6, max_images=12, warmup_steps=0)

    monkeypatch.setattr(ScorerFamily, "recipe", short)
    monkeypatch.setattr(neural.teaching_clip, "load_teaching_clip", lambda **kw: random_tiny_backbone)
    monkeypatch.setattr(neural.families.pacs, "PACS_TRAIN_IMAGES", 16)
    monkeypatch.setattr(neural.families.pacs, "PACS_DEV_IMAGES", 6)
    monkeypatch.setattr(tss, "N_IMAGES", 40)
    monkeypatch.setattr(tss, "N_TRAIN", 20)
    monkeypatch.setattr(tss, "N_DEV", 10)
    monkeypatch.setattr(tss, "make_teaching_set", lambda seed: make_teaching_set(40, 20, 10, seed=seed))
    monkeypatch.setattr(ss, "CARD_POOL_IMAGES", 8)
    # the tiny architecture keeps the full 49,408-token embedding: its SPECS file is over the 10 MB limit
    with pytest.raises(RuntimeError, match=r"specs/weights\.safetensors: \d+ bytes, over the 10000000-byte limit"):
        tss.main(["--out", str(tmp_path / "big"), "--index", "5", "--quiet"])
    monkeypatch.setattr(ss, "MAX_FILE_BYTES", 20_000_000)
    assert tss.main(["--out", str(tmp_path), "--index", "5", "--quiet"]) == 0
    out = capsys.readouterr().out
    manifest = ss.read_manifest(tmp_path)
    assert manifest["training_set"]["seed"] == SCORER_TRAINING_SEEDS.start + 5
    assert manifest["training_set"]["splits"] == {"train": 20, "dev": 10, "test": 10}
    for metric in KINDS:
        rec = manifest["scorers"][metric]
        assert rec["files"]["weights.safetensors"]["sha256"] in out
        assert rec["heldout"]["pool_images"] == 8 and 0.0 <= rec["heldout"]["annotation"]["R@10"] <= 100.0
        loaded = ss.load_shipped_scorer(metric, random_tiny_backbone, tmp_path)
        assert type(loaded).__name__ == KINDS[metric]
        assert json.loads((tmp_path / shipped_folders()[metric] / "scorer.json").read_text())["weights"]["dtype"] \
            == "float16"
        assert rec["recipe"] == recipe_for(metric, random_tiny_backbone).name and rec["data"]["source"] == "corpus"
        assert rec["built"]["hardware"]["threads"] >= 1
    # --only: the named scorer is retrained, the others' files and entries stay as they were
    kept = {m: (tmp_path / shipped_folders()[m] / "weights.safetensors").stat().st_mtime_ns for m in KINDS}
    (tmp_path / "pacs" / "weights.safetensors").unlink()
    assert tss.main(["--out", str(tmp_path), "--index", "5", "--quiet", "--only", "PAC-S"]) == 0
    again = ss.read_manifest(tmp_path)
    assert again["scorers"]["PAC-S"]["files"]["weights.safetensors"]["sha256"] \
        == manifest["scorers"]["PAC-S"]["files"]["weights.safetensors"]["sha256"]      # deterministic rebuild
    for metric in set(KINDS) - {"PAC-S"}:
        assert again["scorers"][metric] == manifest["scorers"][metric]
        assert (tmp_path / shipped_folders()[metric] / "weights.safetensors").stat().st_mtime_ns == kept[metric]
    # a damaged file of a scorer that would be kept: refused before any training
    (tmp_path / "specs" / "weights.safetensors").write_bytes(b"x")
    assert tss.main(["--out", str(tmp_path), "--index", "5", "--quiet", "--only", "PAC-S"]) == 2
    assert "--only needs" in capsys.readouterr().err
    assert tss.main(["--out", str(tmp_path), "--index", "4", "--quiet", "--only", "SPECS"]) == 2
    assert "not --index 4" in capsys.readouterr().err


def test_uses_shipped_scorers_only_for_the_shipped_teaching_clip_with_auto_recipes():
    from experiments.backbone_specs import BackboneSpec

    base = RunOptions()
    assert uses_shipped_scorers(base)
    assert uses_shipped_scorers(dataclasses.replace(base, clip_model="teaching"))
    assert not uses_shipped_scorers(dataclasses.replace(base, train_scorers=True))
    assert not uses_shipped_scorers(dataclasses.replace(base, recipe="small"))
    assert not uses_shipped_scorers(dataclasses.replace(base, clip_model="tiny"))
    assert not uses_shipped_scorers(base, BackboneSpec("b", "ViT-B-32", None))
    assert not uses_shipped_scorers(base, BackboneSpec("t", "teaching", "/my/own/teaching.safetensors"))
    assert uses_shipped_scorers(base, BackboneSpec("t", "teaching", None))


class TrainingCalled(Exception):
    pass


@pytest.mark.parametrize("train_scorers", [False, True])
def test_neural_stage_loads_the_shipped_scorers_unless_told_to_train(train_scorers, small_teaching_set, teaching,
                                                                    tmp_cache, monkeypatch):
    """Default: the neural stage scores with the shipped scorers (no trainer runs) and says so in the
    provenance; ``--train-scorers``: the in-run trainers are called."""
    import neural.bridge
    import neural.lclip
    import neural.pacs
    import neural.specs
    from corpora.protocol import hodosh_pool
    from experiments import neural_stage as ns
    from experiments.backbone_specs import DEFAULT_BACKBONE, BackboneSpec
    from neural import shipped_scorers as ss
    from neural.base import affinity_for_pool

    def refuse(*a, **k):
        raise TrainingCalled

    for mod, name in ((neural.pacs, "finetune_pacs"), (neural.lclip, "train_lclip_on_corpus"),
                      (neural.specs, "train_specs")):
        monkeypatch.setattr(mod, name, refuse)
    monkeypatch.setattr(neural.bridge.BRIDGE, "fit", refuse)
    monkeypatch.setattr(ns, "load_neural_backbone", lambda *a, **k: teaching)
    corpus = small_teaching_set
    pools = {"test": hodosh_pool(corpus, "test")}
    names = ["CLIP-S", "PAC-S", "RefPAC-S", "L-CLIPScore", "BRIDGE", "SPECS"]
    options = RunOptions(neural=tuple(names), train_scorers=train_scorers, no_progress=True)
    spec = BackboneSpec(DEFAULT_BACKBONE, None, None)
    if train_scorers:
        with pytest.raises(TrainingCalled):
            ns.run_backbone(corpus, pools, names, spec, options, tmp_cache, live=True)
        return
    outputs, pair, specificity, prov = ns.run_backbone(corpus, pools, names, spec, options, tmp_cache, live=True)
    assert prov["backbone_row"]["fine_tuned"] == "shipped"
    assert set(prov["shipped_scorers"]["scorers"]) == set(KINDS)
    assert all(r.startswith("shipped") for r in prov["training_recipes"].values())
    want = affinity_for_pool(ss.load_shipped_scorer("PAC-S", teaching), corpus, pools["test"])
    assert np.allclose(outputs["PAC-S"].test.annotation, want, atol=1e-6)
    assert not np.allclose(outputs["PAC-S"].test.annotation, outputs["CLIP-S"].test.annotation)
    assert {"SPECS", "PAC-S"} <= set(specificity) and "RefPAC-S" in pair


def test_score_command_uses_the_shipped_scorers_on_the_teaching_clip(tmp_path, monkeypatch, capsys,
                                                                     write_score_inputs):
    """``python -m neural.score --clip-model teaching``: PAC-S and SPECS are the shipped ones (the summary
    names the shipped folder); ``--train-scorers`` trains them on the teaching set instead."""
    import neural.pacs
    import neural.train_scorer
    from neural.score import main
    from neural.shipped_scorers import SCORERS_DIR

    imgs, cands = write_score_inputs(tmp_path, 3, "a red circle on grass {k}")
    base = ["--candidates", str(cands), "--images", str(imgs), "--clip-model", "teaching",
            "--device", "cpu", "--no-cache", "--quiet"]
    for metric, folder in (("specs", "specs"), ("pac-s", "pacs")):
        summary = tmp_path / f"{metric}.json"
        assert main(base + ["--metric", metric, "--summary", str(summary)]) == 0
        rec = json.loads(summary.read_text())
        assert rec["scorer"]["path"] == str(SCORERS_DIR / folder) and np.isfinite(rec["mean"])
        assert "the shipped scorer" in capsys.readouterr().err

    def refuse(*a, **k):
        raise TrainingCalled

    monkeypatch.setattr(neural.train_scorer, "train_scorer", refuse)
    monkeypatch.setattr(neural.pacs, "finetune_pacs", refuse)
    for metric in ("specs", "pac-s"):
        with pytest.raises(TrainingCalled):
            main(base + ["--metric", metric, "--train-scorers"])
