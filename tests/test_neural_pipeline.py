"""The neural part of the main job (experiments.neural_stage.run_neural): --skip-missing-images restricts the
trained scorers (L-CLIPScore, BRIDGE, SPECS) to the training images on disk, a missing image is a clear
PipelineError, and every spelling of the tiny CLIP ("tiny", "tiny-clip") gets the same treatment.

Runs on a synthetic Flickr8k-layout folder (a few 32 × 24 JPEGs) with the tiny CLIP architecture at
random weights and a handful of training steps, so the file takes seconds."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from PIL import Image

from experiments import neural_stage as stage
from experiments import provenance
from experiments.corpus_stage import build_pools
from experiments.errors import PipelineError
from experiments.human_stage import cached_row_scores
from experiments.options import RunOptions, uses_tiny_clip
from experiments.outputs import SystemOutput

WORDS = ("dog", "cat", "man", "girl", "boy", "horse", "bird", "car")
PLACES = ("grass", "beach", "street", "snow", "water", "field", "road", "park")
COLOURS = ("red", "blue", "green", "black", "white", "brown", "yellow", "pink")


def _ids(n: int, offset: int) -> list[str]:
    return [f"{1000 + offset + k}_{k:04x}abcd.jpg" for k in range(n)]


def make_flickr8k(root, *, n_train=8, n_dev=3, n_test=3, missing_train=4):
    """A Flickr8k standard-layout folder; the last ``missing_train`` training images have no file."""
    text, imgs = root / "Flickr8k_text", root / "Flicker8k_Dataset"
    text.mkdir(parents=True)
    imgs.mkdir()
    train, dev, test = _ids(n_train, 0), _ids(n_dev, 100), _ids(n_test, 200)
    rng = np.random.default_rng(0)
    lines = []
    for n, im in enumerate(train + dev + test):
        w, p, c = WORDS[n % 8], PLACES[(3 * n) % 8], COLOURS[(5 * n) % 8]
        caps = [f"A {c} {w} runs on the {p} .", f"A {w} is playing in the {p} with a {c} ball .",
                f"The {w} on the {p} .", f"A small {c} {w} near a tree on the {p} .",
                f"A {w} looks at the camera ."]
        lines += [f"{im}#{k}\t{t}" for k, t in enumerate(caps)]
    (text / "Flickr8k.token.txt").write_text("\n".join(lines) + "\n")
    for name, ids in (("train", train), ("dev", dev), ("test", test)):
        (text / f"Flickr_8k.{name}Images.txt").write_text("\n".join(ids) + "\n")
    for im in train[: n_train - missing_train] + dev + test:
        Image.fromarray(rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)).save(imgs / im)
    return train, dev, test


@pytest.fixture(scope="module")
def f8(tmp_path_factory):
    import warnings

    from corpora.flickr8k import load_flickr8k

    root = tmp_path_factory.mktemp("f8")
    train, _, _ = make_flickr8k(root)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        corpus = load_flickr8k(root)
    return root, corpus, train


@pytest.fixture()
def fast_neural(random_tiny_backbone, monkeypatch):
    """The pipeline with the random tiny backbone and a few training steps per scorer (PAC-S's small
    recipe as it is); returns the names of the recipes the stage chose, in order."""
    torch.manual_seed(0)
    monkeypatch.setattr(stage, "load_neural_backbone", lambda corpus, args, cache, *a, **k: random_tiny_backbone)
    made = []
    chosen = stage.training_recipe

    def short(fam, options, bb):
        recipe = chosen(fam, options, bb)
        made.append(recipe.name)
        if recipe.name == "pacs-small":
            return recipe
        return dataclasses.replace(recipe, steps=2, stage2_steps=min(recipe.stage2_steps, 2), epochs=None,
                                   grad_accumulation=1)

    monkeypatch.setattr(stage, "training_recipe", short)
    return made


def _args(**kw):
    base = dict(seed=0, skip_missing_images=True, quick=True, no_progress=True, clip_model=None,
                clip_pretrained=None, clip_steps=None, pacs_positives=None, device="cpu")
    return RunOptions(**{**base, **kw})


def test_skip_missing_images_trains_neural_scorers_on_images_on_disk(f8, fast_neural, tmp_path):
    from corpora.cache import DiskCache

    _, corpus, train = f8
    assert corpus.missing_images(train) == train[4:]
    args = _args()
    pools, _ = build_pools(corpus, args)
    keys = {}

    class RecordingCache(DiskCache):
        def get_or_compute(self, namespace, key, compute):
            keys[namespace] = key
            return super().get_or_compute(namespace, key, compute)

    names = ["L-CLIPScore", "SPECS", "BRIDGE"]
    outputs, pair, _, _ = stage.run_neural(corpus, pools, names, args, RecordingCache(tmp_path / "cache"))
    assert sorted(outputs) == sorted(names)
    assert all(np.isfinite(outputs[n].test.annotation).all() for n in names)
    # the on-disk training ids enter each trained scorer's cache key
    assert keys["lclip_student"]["data"]["ids"] == train[:4]
    assert keys["specs"]["ids"] == train[:4] and keys["bridge"]["ids"] == train[:4]
    assert stage.neural_train_ids(corpus, args) == train[:4]
    assert stage.neural_train_ids(corpus, _args(skip_missing_images=False)) is None


def test_missing_training_images_without_the_flag_are_a_pipeline_error(f8, fast_neural):
    from corpora.cache import NO_CACHE

    _, corpus, train = f8
    args = _args(skip_missing_images=False)
    pools, _ = build_pools(corpus, args)   # dev and test are complete
    for name in ("L-CLIPScore", "SPECS", "BRIDGE"):
        with pytest.raises(PipelineError, match="--skip-missing-images") as e:
            stage.run_neural(corpus, pools, [name], args, NO_CACHE)
        assert train[4] in str(e.value)


def test_main_job_reports_missing_training_images_clearly(f8, fast_neural, tmp_path, capsys):
    from experiments.flickr8k_kcca import main

    root, _, _ = f8
    common = ["--data", str(root), "--systems", "none", "--metrics", "BRIDGE", "--no-cache", "--no-progress",
              "--permutations", "10"]
    assert main(common + ["--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "error:" in err and "--skip-missing-images" in err and "not found" in err
    assert main(common + ["--out", str(tmp_path / "b"), "--skip-missing-images"]) == 0
    assert (tmp_path / "b" / "results.json").is_file()


@pytest.mark.parametrize("model", ["tiny", "tiny-clip", "TINY", "tiny-trained"])
def test_every_tiny_clip_spelling_is_the_tiny_clip(model, monkeypatch):
    import neural.factory as factory
    from neural.names import is_tiny_model

    seen = {}
    monkeypatch.setattr(factory, "backbone_for", lambda *a, **k: seen.update(args=a, kw=k) or "bb")
    stage.load_neural_backbone(None, _args(clip_model=model, clip_steps=5, quick=False), None)
    assert is_tiny_model(seen["args"][1]) and seen["kw"]["steps"] == 5  # --clip-steps reaches training
    seen.clear()
    stage.load_neural_backbone(None, _args(clip_model=model, quick=True), None)
    assert seen["kw"]["steps"] == 40                                      # --quick's shorter training
    with pytest.raises(PipelineError, match="--clip-pretrained"):   # refused by the options themselves
        stage.load_neural_backbone(None, _args(clip_model=model, clip_pretrained="openai"), None)
    assert uses_tiny_clip(_args(clip_model=model))
    assert not uses_tiny_clip(_args(clip_model="ViT-B-32"))


@pytest.mark.parametrize("model", [None, "teaching", "Teaching-CLIP"])
def test_the_default_backbone_is_the_teaching_clip_never_trained(model, monkeypatch):
    import neural.factory as factory

    seen = {}
    monkeypatch.setattr(factory, "backbone_for", lambda *a, **k: seen.update(args=a, kw=k) or "bb")
    stage.load_neural_backbone(None, _args(clip_model=model, quick=True), None)
    from neural.names import is_teaching_model

    assert is_teaching_model(seen["args"][1], default=True) and "steps" not in seen["kw"]
    with pytest.raises(PipelineError, match="--clip-steps"):          # nothing to train
        _args(clip_model=model, clip_steps=5)
    assert not uses_tiny_clip(_args(clip_model=model))


def test_specs_uses_the_tiny_recipe_for_tiny_clip(small_teaching_set, fast_neural, random_tiny_backbone,
                                                  monkeypatch):
    """The recipe follows the loaded backbone's architecture: small for the toolkit's own small CLIPs, the
    paper's for any other."""
    from corpora.cache import NO_CACHE

    corpus = small_teaching_set
    args = _args(clip_model="tiny-clip", skip_missing_images=False)
    pools, _ = build_pools(corpus, args)
    stage.run_neural(corpus, pools, ["SPECS"], args, NO_CACHE)
    assert fast_neural == ["specs-small"]
    fast_neural.clear()
    args = _args(clip_model="ViT-B-32", skip_missing_images=False)
    monkeypatch.setattr(random_tiny_backbone, "arch", "ViT-B-32")   # as a real backbone reports itself
    stage.run_neural(corpus, pools, ["SPECS"], args, NO_CACHE)
    assert fast_neural == ["specs-paper"]          # a real backbone: the paper's recipe


def test_trained_scorer_and_score_caches_follow_the_pixels(fast_neural, tmp_path):
    """Replacing a training image file gives every trained scorer (and the score matrices) a new cache
    key: the corpus fingerprint covers captions and splits, the image signatures cover the files."""
    import os
    import warnings

    from corpora.cache import DiskCache
    from corpora.flickr8k import load_flickr8k

    root = tmp_path / "f8"
    train, _, test = make_flickr8k(root, missing_train=0)
    args = _args(skip_missing_images=False)

    def keys_of_a_run():                                 # a fresh load, as a new run would make
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            corpus = load_flickr8k(root)
        pools, _ = build_pools(corpus, args)
        keys = {}

        class RecordingCache(DiskCache):
            def get_or_compute(self, namespace, key, compute):
                keys.setdefault(namespace, []).append(key)
                return super().get_or_compute(namespace, key, compute)

        stage.run_neural(corpus, pools, ["L-CLIPScore", "SPECS", "BRIDGE"], args,
                            RecordingCache(tmp_path / "cache"))
        return keys

    before = keys_of_a_run()
    for im in (train[0], test[0]):                       # new pixels, new modification time
        target = root / "Flicker8k_Dataset" / im
        Image.fromarray(np.full((24, 32, 3), 7, np.uint8)).save(target)
        st = target.stat()
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    after = keys_of_a_run()
    for namespace in ("lclip_student", "specs", "bridge", "neural_affinity"):
        assert namespace in before, namespace
        assert before[namespace] != after[namespace], namespace


def test_neural_stage_key_covers_images_options_and_code(tmp_path, monkeypatch):
    """The key of the whole neural stage (a warm re-run reads its results without building a backbone)
    is stable across loads and changes with an image file, each option that reaches the scorers and the
    code; with --pacs-positives the stage is not cached as a whole."""
    import os
    import warnings

    from corpora.flickr8k import load_flickr8k

    root = tmp_path / "f8"
    train, _, _ = make_flickr8k(root, missing_train=0)

    def key(names=("CLIP-S", "BRIDGE"), **kw):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            corpus = load_flickr8k(root)
        args = _args(skip_missing_images=False, **kw)
        pools, _ = build_pools(corpus, args)
        return stage.neural_stage_key(corpus, pools, list(names), args)

    base = key()
    assert key() == base
    variants = {"seed": key(seed=1), "quick": key(quick=False), "steps": key(clip_model="tiny", clip_steps=7),
                "model": key(clip_model="ViT-B-32", clip_pretrained="openai"), "device": key(device="cuda"),
                "names": key(names=("CLIP-S",))}
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    auto = key(device="auto")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")                             # GPUs hidden from torch
    variants["visible devices"] = key(device="auto")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert key(device="auto") == auto
    variants["auto"] = auto
    monkeypatch.setenv("ITR_DEVICE", "cuda")                                  # the device "auto" names
    assert key(device="auto") != auto
    monkeypatch.setenv("ITR_DEVICE", "cpu")
    assert key(device="auto") == auto
    for what, k in variants.items():
        assert k != base, what
    weights = tmp_path / "w.safetensors"
    weights.write_bytes(b"x" * 10)
    k1 = key(clip_model="ViT-B-32", clip_pretrained=str(weights))
    weights.write_bytes(b"y" * 11)
    assert key(clip_model="ViT-B-32", clip_pretrained=str(weights)) != k1      # another weights file
    assert key(pacs_positives="tuples.jsonl") is None

    target = root / "Flicker8k_Dataset" / train[0]                            # new pixels in training
    Image.fromarray(np.full((24, 32, 3), 7, np.uint8)).save(target)
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    changed = key()
    assert changed != base and changed["images"] != base["images"]

    code = tmp_path / "code"                                                   # the code digest
    (code / "pkg").mkdir(parents=True)
    (code / "pkg" / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(provenance, "__file__", str(code / "experiments" / "provenance.py"))
    d1 = provenance.source_digest(("pkg",))
    (code / "pkg" / "a.py").write_text("x = 2\n")
    assert provenance.source_digest(("pkg",)) != d1
    assert "experiments/neural_stage.py" in stage.NEURAL_STAGE_SOURCES


def test_deferred_pair_scorers_rebuild_and_warn_when_the_weights_changed(tmp_path, monkeypatch, caplog):
    """A warm neural stage hands out deferred pair scorers with the cached identities; called, they run
    the stage once and answer as the live scorers, warning when the rebuilt scorers' identity differs
    from the cached one (retrained with other weights)."""
    from corpora.cache import DiskCache
    from evaluation import ScoreMatrices

    calls = []

    def fake_run_neural(corpus, pools, names, args, cache, executor=None):
        calls.append(1)

        def pair(ids, cands, refs, _k=len(calls)):
            return np.full(len(ids), float(_k))

        pair.identity = {"weights": "w1" if len(calls) < 3 else "w2"}
        out = {"CLIP-S": SystemOutput("CLIP-S", "neural", ScoreMatrices.from_affinity(np.eye(2)),
                                               {"backbone": "b"})}
        return out, {"CLIP-S": pair}, {"CLIP-S": {"SR_pos": 0.5, "SR_neg": 0.25}}, {"backbone": {"x": 1}}

    monkeypatch.setattr(stage, "run_neural", fake_run_neural)
    monkeypatch.setattr(stage, "neural_stage_key", lambda *a: {"k": 1})
    cache, args = DiskCache(tmp_path / "c"), _args()
    cold = stage.neural_stage(None, {}, ["CLIP-S"], args, cache)
    warm = stage.neural_stage(None, {}, ["CLIP-S"], args, cache)
    assert len(calls) == 1                                            # the warm stage ran nothing
    assert np.array_equal(warm[0]["CLIP-S"].test.annotation, cold[0]["CLIP-S"].test.annotation)
    assert warm[0]["CLIP-S"].config == {"backbone": "b"} and warm[2] == cold[2]
    deferred = warm[1]["CLIP-S"]
    assert deferred.identity == {"weights": "w1"}
    with caplog.at_level("WARNING", logger="experiments.flickr8k_kcca"):
        assert list(deferred(["a", "b"], ["x", "y"], None)) == [2.0, 2.0]   # built once, then answers
        assert list(deferred(["a"], ["x"], None)) == [2.0] and len(calls) == 2
    assert "rebuilt with other weights" not in caplog.text              # same identity: no warning
    again = stage.neural_stage(None, {}, ["CLIP-S"], args, cache)[1]["CLIP-S"]
    with caplog.at_level("WARNING", logger="experiments.flickr8k_kcca"):
        again(["a"], ["x"], None)                                      # third build: weights "w2"
    assert "CLIP-S were rebuilt with other weights" in caplog.text


def test_cached_human_scores_of_image_based_scorers_follow_the_image_files(tmp_path):
    """Human-judgment scores of an image-based scorer are cached under the rows' image signatures too:
    a replaced image file is re-scored, while a text-only scorer's entry stays valid."""
    import os

    from corpora.base import Caption, Corpus
    from corpora.cache import DiskCache
    from evaluation.correlation import JudgmentRows

    folder = tmp_path / "imgs"
    folder.mkdir()
    ids = ["a.png", "b.png"]
    for k, i in enumerate(ids):
        Image.fromarray(np.full((8, 8, 3), 40 * k, np.uint8)).save(folder / i)
    caps = {i: tuple(Caption(f"{i}#{k}", i, k, f"caption {k} of {i}") for k in range(2)) for i in ids}
    corpus = Corpus("files", tuple(ids), caps, {"train": tuple(ids)}, image_paths={i: folder / i for i in ids})
    rows = JudgmentRows("expert", list(ids), ["a.png#0", "b.png#1"], ["x", "y"], [["r"], ["s"]],
                        np.array([1.0, 2.0]), np.array([0, 1]))
    calls = []

    def scorer(image_ids, cands, refs):
        calls.append(len(cands))
        return np.arange(len(cands), dtype=float)

    scorer.identity = {"name": "probe"}
    cache = DiskCache(tmp_path / "c")
    for image_based in (True, False):
        cached_row_scores(cache, corpus, "probe", scorer, "expert", rows, image_based=image_based)
    assert len(calls) == 2
    target = folder / "b.png"
    Image.fromarray(np.full((8, 8, 3), 200, np.uint8)).save(target)
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    corpus = Corpus("files", tuple(ids), caps, {"train": tuple(ids)}, image_paths={i: folder / i for i in ids})
    cached_row_scores(cache, corpus, "probe", scorer, "expert", rows, image_based=False)
    assert len(calls) == 2                                   # text-only: cached entry still valid
    cached_row_scores(cache, corpus, "probe", scorer, "expert", rows, image_based=True)
    assert len(calls) == 3                                   # image-based: the new pixels are scored


def test_no_neural_scorers_import_no_torch():
    """``--metrics none``: the neural stage returns at once, without importing torch (a fresh process)."""
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys\nfrom experiments.neural_stage import run_neural\nfrom experiments.options import RunOptions\n"
            "print(run_neural(None, {}, [], RunOptions(), None), 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["({},", "{},", "{},", "{})", "False"]


def test_bridge_fitted_on_generator_templates_scores_a_corpus_without_a_generator(f8, random_tiny_backbone,
                                                                                  small_teaching_set):
    """A BRIDGE fitted with the teaching set's generator descriptions (as the shipped BRIDGE) scores a
    Flickr8k corpus, which has no generator, with the nearest bank caption as its templates — in retrieval
    and in the human-correlation pair scorer (whose cache identity names that source)."""
    from corpora.protocol import hodosh_pool
    from neural.bridge import BRIDGE, BridgeConfig, BridgePairScorer

    _, corpus, _ = f8
    torch.manual_seed(0)
    br = BRIDGE(random_tiny_backbone, BridgeConfig(steps=2, batch_size=6, max_images=12)).fit(
        small_teaching_set, show_progress=False)
    assert br.template_source == "describe" and br.source_for(small_teaching_set) == "describe"
    assert br.source_for(corpus) == "nearest"
    pool = hodosh_pool(corpus, "test")
    S = br.affinity(corpus, pool)
    assert S.shape == (pool.n_images, pool.n_captions) and np.isfinite(S).all()
    assert np.array_equal(S, br.affinity(corpus, pool, template_source="nearest"))
    with pytest.raises(ValueError, match="has no generator"):
        br.affinity(corpus, pool, template_source="describe")   # asked for explicitly: still an error
    pair = BridgePairScorer(br, corpus)
    assert pair.identity["template_source"] == "nearest"
    ids = list(pool.image_ids)
    assert np.isfinite(pair(ids, [c.text for c in pool.captions], None)).all()


def test_neural_scorers_run_on_one_blas_thread(monkeypatch):
    """Each backbone's scorers run with BLAS held to one thread: a float32 product of image and caption
    features on 2 OpenBLAS threads differs from the one on 1 in the last bits, so the score matrices would
    depend on the machine's cores."""
    from threadpoolctl import threadpool_info

    seen = []

    def fake_run_backbone(*a, **k):
        seen.append({i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"})
        return {}, {}, {}, {"backbone_row": {}, "neural_timings_s": {}}

    monkeypatch.setattr(stage, "run_backbone", fake_run_backbone)
    stage.run_neural(None, {}, ["CLIP-S", "PAC-S"], _args(), None)
    assert seen == [{1}]
