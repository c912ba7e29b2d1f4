"""Training recipes (neural.recipes): each recipe's values, the small recipes equal to the trainers'
defaults, recipe_for's rule, the schedule, the CPU guard of the main job, and the trainers reading a
recipe's batch size and step count."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from experiments import flickr8k_kcca
from experiments import options as options_mod
from experiments.options import OptionError, RunOptions, check_cpu_training
from neural.registry import recipe_for, scorer_names
from neural import bridge as bridge_mod
from neural import lclip as lclip_mod
from neural import pacs as pacs_mod
from neural import specs as specs_mod
from neural.bridge import BRIDGE, BridgeConfig
from neural.lclip import LCLIPConfig, train_lclip_on_corpus
from neural.pacs import PACSFinetuneConfig, PositiveTuples, finetune_pacs
from neural.recipes import (
    Recipe,
    cpu_training_message,
    estimate_cpu_seconds,
    get_recipe,
    is_small_backbone,
)
from neural.specs import SPECSConfig, train_specs
from neural.training import MixedPrecision, lr_schedule


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    """Every test here runs with one torch thread (see conftest.one_torch_thread)."""


# ---------------------------------------------------------------------------- values
def test_paper_recipe_values():
    """The values the papers print, each with its sentence; "ours" only where no paper states one."""
    p = get_recipe("pacs-paper")
    assert (p.batch_size, p.lr, p.optimizer, p.trainable) == (256, 1e-4, "AdamW", ("visual.proj", "text_projection"))
    assert p.patience == 1_500 and "1,500 iterations" in p.source("patience")          # Sec. 4.1
    assert "final projections" in p.source("trainable") and p.eval_every is not None and p.precision == "amp"
    s = get_recipe("specs-paper")
    assert (s.lr, s.weight_decay, s.epochs, s.batch_size, s.grad_accumulation) == (1e-5, 1e-2, 3, 100, 16)
    assert (s.schedule, s.warmup_steps, s.precision, s.effective_batch) == ("cosine", 40, "amp", 1600)
    assert "run_spec.sh" in s.source("epochs") and "Sec. 4" in s.source("epochs")      # the script differs
    lc = get_recipe("lclip-paper")
    assert (lc.lr, lc.batch_size, lc.stage2_lr, lc.stage2_batch_size, lc.precision) == (5e-3, 4096, 1e-4, 2048, "amp")
    assert "mixed precision" in lc.source("precision") and "text tower" in lc.frozen
    assert lc.steps > 0 and lc.stage2_steps > 0
    assert lc.total_samples() == lc.steps * 4096 + lc.stage2_steps * 2048
    b = get_recipe("bridge-paper")
    assert (b.optimizer, b.lr, b.batch_size) == ("AdamW", 1e-4, 256) and b.epochs is not None
    assert all(b.source(f).startswith("Sec. 4.1") for f in ("lr", "batch_size"))
    assert b.source("w").startswith("ours") and "backbone" in b.frozen
    # a value no paper states says "ours"; the others cite a paper, section or the authors' code
    for r in (p, s, lc, b):
        for _, src in r.sources:
            assert src.startswith("ours") or "Sec." in src or "train/" in src, (r.name, src)
            assert "unconfirmed" not in src
    with pytest.raises(KeyError, match="choose from"):
        get_recipe("pacs-huge")
    with pytest.raises(ValueError, match="schedule"):
        Recipe("x", "SPECS", batch_size=1, lr=1.0, weight_decay=0.0, steps=1, schedule="linear")


def test_small_recipes_are_the_trainers_defaults():
    """The main job's small/teaching CLIP numbers cannot change: the small recipes give the configs the
    trainers have always used."""
    assert PACSFinetuneConfig.from_recipe(get_recipe("pacs-small")) == PACSFinetuneConfig()
    assert LCLIPConfig.from_recipe(get_recipe("lclip-small"), seed=4) == LCLIPConfig(seed=4)
    assert BridgeConfig.from_recipe(get_recipe("bridge-small"), seed=4) == BridgeConfig(seed=4)
    assert SPECSConfig.from_recipe(get_recipe("specs-small"), seed=4) == SPECSConfig.for_tiny(seed=4)
    assert SPECSConfig.from_recipe(get_recipe("specs-teaching"), seed=4) == SPECSConfig(seed=4)
    with pytest.raises(ValueError, match="not PAC-S"):
        PACSFinetuneConfig.from_recipe(get_recipe("specs-small"))


def test_total_steps_of_an_epoch_recipe():
    s = get_recipe("specs-paper")
    assert s.total_steps(6000) == 3 * math.ceil(6000 / 1600)
    assert SPECSConfig.from_recipe(s).total_steps(6000) == s.total_steps(6000)
    assert get_recipe("lclip-paper").total_steps() == 25_000
    with pytest.raises(ValueError, match="number of training images"):
        s.total_steps()


# ---------------------------------------------------------------------------- the rule
def test_recipe_for_small_and_real_backbones(random_tiny_backbone):
    for scorer, prefix in (("PAC-S", "pacs"), ("L-CLIPScore", "lclip"), ("BRIDGE", "bridge"), ("SPECS", "specs")):
        assert recipe_for(scorer, None).name == recipe_for(scorer, "teaching").name   # the default backbone
        assert recipe_for(scorer, "tiny").name == f"{prefix}-small"
        assert recipe_for(scorer, "ViT-B-32").name == f"{prefix}-paper"
        assert recipe_for(scorer, "ViT-B-32", "small").name.startswith(prefix + "-small")
        assert recipe_for(scorer, "tiny", "paper").name == f"{prefix}-paper"
    assert recipe_for("SPECS", "teaching").name == "specs-teaching"
    assert recipe_for("RefPAC-S", "teaching").name == "pacs-small"
    # Backbone objects: recognised by their architecture
    assert recipe_for("BRIDGE", random_tiny_backbone).name == "bridge-small"
    assert is_small_backbone(SimpleNamespace(arch="itr-teaching-clip"))
    real_looking = SimpleNamespace(arch="ViT-B-32", name="ViT-B-32/openai")
    assert recipe_for("PAC-S", real_looking).name == "pacs-paper"
    with pytest.raises(ValueError, match="no training recipe"):
        recipe_for("CLIP-S", None)


def test_lr_schedule_warmup_then_cosine():
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=1.0)
    assert lr_schedule(opt) is None   # constant, no warm-up: the optimiser is left as it is
    sched = lr_schedule(opt, "cosine", warmup_steps=2, total_steps=6)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[:2] == pytest.approx([0.5, 1.0])
    assert lrs[2:] == pytest.approx([0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(4)])
    assert not MixedPrecision("cpu", "amp").enabled   # autocast only on CUDA


# ---------------------------------------------------------------------------- the CPU guard
def _real_cpu_options(**kw) -> RunOptions:
    base = dict(clip_model="ViT-B-32", device="cpu", systems=(), neural=scorer_names(), out=None)
    return RunOptions(**{**base, **kw})


def test_cpu_estimate_refuses_without_go_ahead():
    lines = []
    with pytest.raises(OptionError) as err:
        check_cpu_training(_real_cpu_options(), seconds_per_sample=lambda: 0.01, announce=lines.append)
    msg = str(err.value)
    hours = estimate_cpu_seconds(get_recipe("pacs-paper"), 0.01) / 3600    # 20,000 × 256 × 0.01 s
    assert f"PAC-S paper recipe on CPU: ~{hours:.0f} h (20000 steps × batch 256)" in msg
    assert "SPECS paper recipe on CPU" in msg and "--train-on-cpu" in msg and "\n" not in msg
    assert len(lines) == 4 and all(line.endswith("pass --train-on-cpu to go ahead") for line in lines)
    # with the go-ahead: the estimate is printed, nothing is refused
    lines.clear()
    check_cpu_training(_real_cpu_options(train_on_cpu=True), seconds_per_sample=lambda: 0.01,
                       announce=lines.append)
    assert lines[0].startswith("PAC-S paper recipe on CPU: ~")


def test_cpu_guard_is_silent_for_small_recipes_and_untrained_scorers():
    def never():
        raise AssertionError("measured although nothing would train with a paper recipe")

    for opts in (_real_cpu_options(clip_model=None), _real_cpu_options(clip_model="teaching"),
                 _real_cpu_options(recipe="small"), _real_cpu_options(neural=("CLIP-S",)),
                 _real_cpu_options(device="cuda")):
        check_cpu_training(opts, seconds_per_sample=never, announce=print)
    # on Flickr8k without --pacs-positives PAC-S is not fine-tuned: only the other three are estimated
    lines = []
    with pytest.raises(OptionError) as err:
        check_cpu_training(_real_cpu_options(data="/nonexistent"), seconds_per_sample=lambda: 1e-3,
                           announce=lines.append)
    assert "PAC-S" not in str(err.value) and "L-CLIPScore paper recipe" in str(err.value)
    assert cpu_training_message(get_recipe("specs-paper"), 7200.0, 6000) == \
        "SPECS paper recipe on CPU: ~2.0 h (12 steps × batch 1600)"


def test_main_job_refuses_before_any_stage(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(options_mod, "check_neural_options", lambda o: None)   # no weights here
    monkeypatch.setattr(options_mod, "backbone_seconds_per_sample", lambda o: 0.02)

    def no_run(options):
        raise AssertionError("a stage ran")

    monkeypatch.setattr(flickr8k_kcca, "run", no_run)
    argv = ["--clip-model", "ViT-B-32", "--device", "cpu", "--systems", "none", "--out", str(tmp_path / "o"),
            "--cache-dir", str(tmp_path / "c")]
    assert flickr8k_kcca.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: PAC-S paper recipe on CPU: ~")
    opts = flickr8k_kcca.parse_options(argv + ["--train-on-cpu", "--recipe", "paper"])
    assert opts.train_on_cpu and opts.recipe == "paper"
    with pytest.raises(OptionError, match="--recipe"):
        RunOptions(recipe="huge")
    helptext = flickr8k_kcca.build_parser().format_help()
    assert "--train-on-cpu" in helptext and "--recipe" in helptext


def test_measured_seconds_per_sample_is_positive():
    from neural.architectures import create_architecture
    from neural.recipes import measure_seconds_per_sample

    model = create_architecture("itr-tiny-clip")[0]
    size = model.visual.image_size
    s = measure_seconds_per_sample(model, int(size[0] if isinstance(size, (tuple, list)) else size),
                                   model.context_length, batch=2, repeats=1)
    assert 0 < s < 5


# ---------------------------------------------------------------------------- the trainers read the recipe
def _random_tuples(n: int, seed: int = 0) -> PositiveTuples:
    rng = np.random.default_rng(seed)
    imgs = [rng.integers(0, 255, (40, 40, 3), dtype=np.uint8) for _ in range(2 * n)]
    return PositiveTuples(imgs[:n], [f"caption {k}" for k in range(n)], imgs[n:],
                          [f"other caption {k}" for k in range(n)])


def test_pacs_trains_with_the_recipe_batch(random_tiny_backbone, monkeypatch):
    tuples = _random_tuples
    seen = []
    real = pacs_mod.pacs_loss
    monkeypatch.setattr(pacs_mod, "pacs_loss", lambda v, *a, **k: (seen.append(v.shape[0]), real(v, *a, **k))[1])
    recipe = Recipe("pacs-test", "PAC-S", batch_size=3, lr=1e-4, weight_decay=0.0, steps=2, eval_every=1,
                    patience=5, trainable=("visual.proj", "text_projection", "logit_scale"))   # configurable
    out = finetune_pacs(random_tiny_backbone, tuples(7), tuples(4), recipe, show_progress=False)
    assert max(seen) == 3 and [h["iteration"] for h in out.training["history"]] == [0, 1, 2]
    assert out.training["config"]["batch_size"] == 3


def test_pacs_trains_the_two_projections_only(random_tiny_backbone):
    """Sec. 4.1: PAC-S fine-tunes "the visual and textual final projections"; the temperature (trained by
    the former default) stays the backbone's."""
    out = finetune_pacs(random_tiny_backbone, _random_tuples(7), _random_tuples(4),
                        PACSFinetuneConfig(batch_size=3, max_iters=2, eval_every=1, lr=1e-2, restore_best=False),
                        show_progress=False)
    t, s = random_tiny_backbone.model, out.model
    assert torch.equal(t.logit_scale, s.logit_scale)
    assert not torch.equal(t.text_projection, s.text_projection)
    assert not torch.equal(t.visual.proj, s.visual.proj)


def test_lclip_trains_with_the_recipe_batch_and_steps(random_tiny_backbone, small_teaching_set, monkeypatch):
    seen = []
    real = lclip_mod.distill_loss
    monkeypatch.setattr(lclip_mod, "distill_loss", lambda r_t, r_s: (seen.append(r_t.shape[0]), real(r_t, r_s))[1])
    recipe = Recipe("lclip-test", "L-CLIPScore", batch_size=4, lr=1e-4, weight_decay=0.0, steps=2, stage2_steps=1,
                    max_images=8, max_texts=16)
    log = []
    train_lclip_on_corpus(random_tiny_backbone, small_teaching_set, config=recipe, show_progress=False, log=log)
    assert seen == [4, 4, 4, 4, 4]                     # stage 1: image + text per step; stage 2: image
    assert [e["stage"] for e in log] == ["stage1", "stage1", "stage2"]


def test_lclip_stages_take_their_own_lr_and_batch(random_tiny_backbone, small_teaching_set, monkeypatch):
    """Sec. IV-B: stage 1 at lr 5e-3 / batch 4,096, stage 2 at 1e-4 / 2,048 — each stage its own values
    (the former config had one lr and one batch for both)."""
    seen, lrs = [], []
    real, real_adamw = lclip_mod.distill_loss, lclip_mod.adamw
    monkeypatch.setattr(lclip_mod, "distill_loss", lambda r_t, r_s: (seen.append(r_t.shape[0]), real(r_t, r_s))[1])
    monkeypatch.setattr(lclip_mod, "adamw", lambda params, lr, **k: (lrs.append(lr), real_adamw(params, lr=lr, **k))[1])
    recipe = Recipe("lclip-test", "L-CLIPScore", batch_size=4, lr=1e-3, stage2_batch_size=3, stage2_lr=1e-5,
                    weight_decay=0.0, steps=1, stage2_steps=1, max_images=8, max_texts=16)
    assert LCLIPConfig.from_recipe(recipe).stage2_batch_size == 3
    train_lclip_on_corpus(random_tiny_backbone, small_teaching_set, config=recipe, show_progress=False)
    assert seen == [4, 4, 3] and lrs == [1e-3, 1e-5]


def test_lclip_stage1_trains_all_but_the_patch_convolution(random_tiny_backbone, small_teaching_set):
    """Sec. IV-B freezes only the patch convolution in stage 1: the class token and the positional
    embeddings (frozen by the former code) train."""
    recipe = Recipe("lclip-test", "L-CLIPScore", batch_size=4, lr=1e-2, weight_decay=0.0, steps=2, stage2_steps=0,
                    max_images=8, max_texts=16)
    student = train_lclip_on_corpus(random_tiny_backbone, small_teaching_set, config=recipe, show_progress=False)
    t, s = random_tiny_backbone.model, student.model
    assert torch.equal(t.visual.conv1.weight, s.visual.conv1.weight)
    assert not torch.equal(t.visual.class_embedding, s.visual.class_embedding)
    assert not torch.equal(t.visual.positional_embedding, s.visual.positional_embedding)
    assert not torch.equal(t.positional_embedding, s.positional_embedding)


def test_bridge_trains_with_the_recipe_batch_and_epochs(random_tiny_backbone, small_teaching_set, monkeypatch):
    seen = []
    real = bridge_mod.sample_replicas
    monkeypatch.setattr(bridge_mod, "sample_replicas",
                        lambda rows_of, images, *a: (seen.append(len(images)), real(rows_of, images, *a))[1])
    recipe = Recipe("bridge-test", "BRIDGE", batch_size=8, lr=1e-3, weight_decay=0.0, steps=0, epochs=1,
                    max_images=24)
    br = BRIDGE(random_tiny_backbone, recipe).fit(small_teaching_set, show_progress=False)
    assert seen == [8, 8, 8] and len(br.log) == 3      # 1 epoch of 24 images in batches of 8


def test_specs_trains_with_the_recipe_batch_and_accumulation(random_tiny_backbone, small_teaching_set,
                                                             monkeypatch):
    seen = []
    real = specs_mod._batch_loss
    monkeypatch.setattr(specs_mod, "_batch_loss",
                        lambda model, bb, X, cum, negs, multi, pick, *a: (seen.append(len(pick)),
                                                                         real(model, bb, X, cum, negs, multi,
                                                                              pick, *a))[1])
    recipe = Recipe("specs-test", "SPECS", batch_size=5, grad_accumulation=2, lr=1e-5, weight_decay=1e-2,
                    steps=3, max_images=20)
    log = []
    train_specs(random_tiny_backbone, small_teaching_set, config=recipe, show_progress=False, log=log)
    assert seen == [5] * 6 and len(log) == 3           # 3 optimiser steps of 2 batches of 5


def test_mixed_precision_paths_run(random_tiny_backbone, small_teaching_set, monkeypatch, every_trainer_under_amp):
    """The ``precision="amp"`` code paths (autocast on CUDA) exercised with CPU bfloat16 autocast: every
    trainer runs and keeps finite losses (no dtype clash between autocast outputs and fp32 targets)."""

    class CpuAutocast(MixedPrecision):
        def __init__(self, device, precision="fp32"):
            super().__init__("cpu")
            self.enabled = precision == "amp"
            self.dtype = torch.bfloat16

    for mod in (pacs_mod, lclip_mod, bridge_mod, specs_mod):
        monkeypatch.setattr(mod, "MixedPrecision", CpuAutocast)
    every_trainer_under_amp(random_tiny_backbone, small_teaching_set)
