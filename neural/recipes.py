"""Named training recipes of the trained CLIP-family scorers (PAC-S, L-CLIPScore, BRIDGE, SPECS), and the
rule that picks one for a backbone.

A :class:`Recipe` is one paper's (or our small-model) training hyper-parameters, frozen: batch size,
learning rate, schedule and warm-up, steps or epochs, early-stopping patience, what trains and what is
frozen, optimiser, precision, and a cap on the training images.  Two families:

* ``*-small``: the constants the trainers use for the small offline CLIPs (the tiny CLIP trained in the
  run, :func:`neural.names.is_tiny_model`, and the shipped teaching CLIP,
  :func:`neural.names.is_teaching_model`); they reproduce the trainers' defaults exactly.  A family may
  declare its own recipe for the teaching CLIP: ``specs-teaching`` (the SPECS trainer's defaults) and
  ``lclip-teaching`` (the paper's two stages scaled to 2 CPU cores, on the teaching CLIP's own
  pretraining stream).
* ``*-paper``: each paper's printed values, for every real backbone (ViT-B/32 …).  Each recipe's
  ``sources`` names, field by field, where a value comes from (paper, section and the sentence); a value
  no paper states says ``"ours: …"`` (our choice, stated as such, never a silent invention).

:meth:`neural.family.ScorerFamily.recipe` is the rule (through :func:`neural.registry.recipe_for`): small
offline CLIP → small recipe, any other backbone → the paper's; each family declares its recipes.
:func:`estimate_cpu_seconds` and :func:`cpu_training_refusal` guard a paper recipe on a CPU: the main job
measures a few forward/backward steps of the actual architecture and refuses without a go-ahead.

Nothing here imports torch at module level (the main job checks its options before importing torch).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from neural.names import is_teaching_model, is_tiny_model

__all__ = ["Recipe", "RECIPES", "RECIPE_FAMILIES", "get_recipe", "small_kind", "is_small_backbone",
           "estimate_cpu_seconds", "cpu_training_message", "measure_seconds_per_sample", "cpu_training_refusal"]

#: ``--recipe`` values: ``auto`` (:meth:`neural.family.ScorerFamily.recipe`'s rule), ``small`` or ``paper``
#: for every scorer.
RECIPE_FAMILIES = ("auto", "small", "paper")
#: Where a recipe's training images come from (:attr:`Recipe.data`).
DATA_SOURCES = ("corpus", "pretraining-stream")


@dataclass(frozen=True)
class Recipe:
    """One training recipe (frozen; the trainers read it through their config's ``from_recipe``).

    Attributes
    ----------
    name, scorer : str
        ``"pacs-paper"`` …; the scorer (a trained family's name, :mod:`neural.registry`).
    batch_size : int
        Samples per forward pass (the contrastive batch).
    lr, weight_decay : float
        AdamW learning rate and decoupled weight decay.
    steps : int
        Optimiser steps (PAC-S: the iteration cap; L-CLIPScore: stage 1), unless ``epochs`` is set.
    stage2_steps : int
        L-CLIPScore stage 2 steps (0 for the other scorers).
    stage2_lr, stage2_batch_size : float or None, int or None
        L-CLIPScore stage 2's learning rate and batch (``None``: stage 1's ``lr`` / ``batch_size``).
    epochs : int or None
        Passes over the training images; then the steps follow from the data (:meth:`total_steps`).
    grad_accumulation : int
        Forward passes whose gradients are summed per optimiser step (effective batch
        ``batch_size × grad_accumulation``).
    schedule : ``"constant"`` | ``"cosine"``
        Learning rate after the warm-up: constant, or cosine decay to 0 at the last step.
    warmup_steps : int
        Linear warm-up steps from 0 to ``lr``.
    eval_every, patience : int or None
        PAC-S early stopping: validation every ``eval_every`` iterations, stop after ``patience``
        iterations without improvement.
    trainable : tuple of str or None
        PAC-S: the parameters that train (``None``: the trainer's default).
    frozen : str
        What stays frozen, in words (the trainers' code decides; this documents it).
    optimizer : str
        Always ``"AdamW"`` here.
    precision : ``"fp32"`` | ``"amp"``
        ``"amp"``: ``torch.autocast`` mixed precision when training on CUDA (fp32 on CPU).
    max_images, max_texts : int or None
        Caps on the training images / texts (``None``: all of the split).
    data : ``"corpus"`` | ``"pretraining-stream"``
        Where the training images come from: the corpus' ``train`` split, or (L-CLIPScore on the teaching
        CLIP, :mod:`neural.lclip_stream`) the parent's own pretraining stream, ``max_images`` images of it.
    sources : tuple of (field, source) pairs
        Where each value comes from; ``"ours: …"`` marks our own choice (no paper states it).
    """

    name: str
    scorer: str
    batch_size: int
    lr: float
    weight_decay: float
    steps: int
    stage2_steps: int = 0
    stage2_lr: float | None = None
    stage2_batch_size: int | None = None
    epochs: int | None = None
    grad_accumulation: int = 1
    schedule: str = "constant"
    warmup_steps: int = 0
    eval_every: int | None = None
    patience: int | None = None
    trainable: tuple[str, ...] | None = None
    frozen: str = ""
    optimizer: str = "AdamW"
    precision: str = "fp32"
    max_images: int | None = None
    max_texts: int | None = None
    data: str = "corpus"
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.schedule not in ("constant", "cosine"):
            raise ValueError(f"recipe {self.name!r}: schedule {self.schedule!r} is not 'constant' or 'cosine'")
        if self.precision not in ("fp32", "amp"):
            raise ValueError(f"recipe {self.name!r}: precision {self.precision!r} is not 'fp32' or 'amp'")
        if self.data not in DATA_SOURCES:
            raise ValueError(f"recipe {self.name!r}: data {self.data!r} is not one of {', '.join(DATA_SOURCES)}")
        if self.data == "pretraining-stream" and not self.max_images:
            raise ValueError(f"recipe {self.name!r}: data from the pretraining stream needs max_images")
        if self.batch_size < 1 or self.grad_accumulation < 1 or self.steps < 0 or self.warmup_steps < 0:
            raise ValueError(f"recipe {self.name!r}: batch, accumulation ≥ 1 and steps, warm-up ≥ 0 needed")

    def optimiser_fields(self, scorer: str) -> dict:
        """The fields every trainer's config takes from a recipe (batch, AdamW lr and weight decay,
        schedule, warm-up, precision), after checking that the recipe is for ``scorer``; each config's
        ``from_recipe`` adds its own (steps or epochs, caps, …)."""
        if self.scorer != scorer:
            raise ValueError(f"recipe {self.name!r} is for {self.scorer}, not {scorer}")
        return {"batch_size": self.batch_size, "lr": self.lr, "weight_decay": self.weight_decay,
                "schedule": self.schedule, "warmup_steps": self.warmup_steps, "precision": self.precision}

    @property
    def effective_batch(self) -> int:
        """Samples per optimiser step: ``batch_size × grad_accumulation``."""
        return self.batch_size * self.grad_accumulation

    def total_samples(self, n_train: int | None = None) -> int:
        """Samples through the model over the whole run: :meth:`total_steps` × effective batch, with
        L-CLIPScore's stage 2 at its own batch (``stage2_batch_size``)."""
        if self.epochs is not None or not self.stage2_steps:
            return self.total_steps(n_train) * self.effective_batch
        stage2 = (self.stage2_batch_size or self.batch_size) * self.grad_accumulation
        return self.steps * self.effective_batch + self.stage2_steps * stage2

    def total_steps(self, n_train: int | None = None) -> int:
        """Optimiser steps of the whole run: ``epochs × ⌈n / effective batch⌉`` (``n`` = the training
        images, capped by ``max_images``) for an epoch recipe, else ``steps + stage2_steps``."""
        if self.epochs is None:
            return self.steps + self.stage2_steps
        if n_train is None:
            raise ValueError(f"recipe {self.name!r} counts epochs: the number of training images is needed")
        n = min(n_train, self.max_images) if self.max_images else n_train
        return self.epochs * max(1, math.ceil(n / self.effective_batch))

    def source(self, name: str) -> str:
        """Where field ``name``'s value comes from (``""`` when not recorded)."""
        return dict(self.sources).get(name, "")

    def describe(self) -> dict:
        """The recipe as a JSON-able dict (for provenance and the report)."""
        return {"name": self.name, "scorer": self.scorer, "batch_size": self.batch_size, "lr": self.lr,
                "weight_decay": self.weight_decay, "steps": self.steps, "stage2_steps": self.stage2_steps,
                "stage2_lr": self.stage2_lr, "stage2_batch_size": self.stage2_batch_size,
                "epochs": self.epochs, "grad_accumulation": self.grad_accumulation, "schedule": self.schedule,
                "warmup_steps": self.warmup_steps, "eval_every": self.eval_every, "patience": self.patience,
                "precision": self.precision, "max_images": self.max_images, "data": self.data}


_SMALL = "the in-run default of the trainer (sized for the small offline CLIP on 2 CPU cores)"
_PACS_PROJ = ("visual.proj", "text_projection")

PACS_SMALL = Recipe(
    "pacs-small", "PAC-S", batch_size=256, lr=1e-4, weight_decay=0.01, steps=400, eval_every=5, patience=50,
    trainable=_PACS_PROJ, frozen="everything but the two final projections (the temperature too)",
    sources=(("*", "neural.pacs.PACSFinetuneConfig defaults: " + _SMALL),))
"""PAC-S for the small offline CLIP: :class:`neural.pacs.PACSFinetuneConfig`'s defaults (AdamW lr 1e-4,
batch 256, at most 400 iterations, validation every 5, patience 50 iterations)."""

PACS_PAPER = Recipe(
    "pacs-paper", "PAC-S", batch_size=256, lr=1e-4, weight_decay=0.01, steps=20_000, eval_every=100,
    patience=1_500, trainable=_PACS_PROJ, precision="amp",
    frozen="everything but the two final projections (the temperature too)",
    sources=(("batch_size", "Sarto et al., CVPR 2023, Sec. 4.1 (batch size 256)"),
             ("lr", "Sarto et al., CVPR 2023, Sec. 4.1 (AdamW, learning rate 1e-4)"),
             ("optimizer", "Sarto et al., CVPR 2023, Sec. 4.1 (AdamW)"),
             ("patience", "Sec. 4.1: early stopping when the validation loss \"stops decreasing for 1,500 "
                          "iterations\""),
             ("trainable", "Sec. 3 (introduction) and Sec. 4.1: \"finetune the visual and textual final "
                           "projections\" (the temperature stays the backbone's)"),
             ("steps", "ours: the paper stops early on COCO; 20,000 iterations is our cap"),
             ("eval_every", "ours: validation every 100 iterations"),
             ("weight_decay", "ours: torch's AdamW default 0.01"),
             ("precision", "ours: mixed precision on CUDA")))
"""PAC-S (Sarto et al., CVPR 2023, Sec. 3 introduction and Sec. 4.1): only the visual and textual final
projections are fine-tuned, AdamW, lr 1e-4, batch 256, early stopping when the validation loss stops
decreasing for 1,500 iterations.  Ours (no paper states them): the iteration cap (20,000), the validation
interval (100), weight decay 0.01 (torch's AdamW default), mixed precision on CUDA."""

LCLIP_SMALL = Recipe(
    "lclip-small", "L-CLIPScore", batch_size=16, lr=5e-4, weight_decay=1e-2, steps=30, stage2_steps=15,
    max_images=256, max_texts=2048,
    frozen="the patch convolution in both stages; stage 2: the text tower",
    sources=(("*", "neural.lclip.LCLIPConfig defaults: " + _SMALL),))
"""L-CLIPScore for the small offline CLIP: :class:`neural.lclip.LCLIPConfig`'s defaults (30 + 15 steps,
batch 16, AdamW lr 5e-4, wd 1e-2, 256 images, 2,048 texts)."""

LCLIP_PAPER = Recipe(
    "lclip-paper", "L-CLIPScore", batch_size=4096, lr=5e-3, stage2_batch_size=2048, stage2_lr=1e-4,
    weight_decay=1e-2, steps=20_000, stage2_steps=5_000, schedule="cosine", warmup_steps=500, precision="amp",
    frozen="the patch convolution in both stages; stage 2: the text tower",
    sources=(("stages", "Li et al., L-CLIPScore, Sec. IV-B: stage 1 single-modal distillation (Eq. 1), "
                        "stage 2 adds the Similarity Regulator (Eq. 2) with the text encoder frozen"),
             ("frozen", "Sec. IV-B: the patch convolution frozen in both stages, the text tower in stage 2"),
             ("batch_size", "Sec. IV-B: single-modal distillation with batch size 4,096"),
             ("lr", "Sec. IV-B: single-modal distillation with learning rate 5e-3"),
             ("stage2_batch_size", "Sec. IV-B: the Similarity Regulator stage with batch size 2,048"),
             ("stage2_lr", "Sec. IV-B: the Similarity Regulator stage with learning rate 1e-4"),
             ("precision", "Sec. IV-B: \"all training processes are carried out with mixed precision\""),
             ("steps", "ours: 20,000 + 5,000 steps (the paper trains on its large image-text data)"),
             ("schedule", "ours: cosine with 500 warm-up steps"),
             ("weight_decay", "ours: 1e-2")))
"""L-CLIPScore (Li et al., Sec. IV-B): two stages — single-modal distillation at lr 5e-3 and batch 4,096,
then the Similarity Regulator with the text tower frozen at lr 1e-4 and batch 2,048, all in mixed
precision; the patch convolution frozen throughout.  Ours (no paper value): 20,000 + 5,000 steps, the
cosine decay after 500 warm-up steps, weight decay 1e-2, the whole training split (no image cap)."""

LCLIP_TEACHING = Recipe(
    "lclip-teaching", "L-CLIPScore", batch_size=128, lr=1e-3, stage2_batch_size=128, stage2_lr=1e-4,
    weight_decay=1e-2, steps=1_200, stage2_steps=300, schedule="cosine", warmup_steps=100,
    max_images=4_000, max_texts=20_000, data="pretraining-stream", precision="amp",
    frozen="the patch convolution in both stages; stage 2: the text tower",
    sources=(("stages", "Li et al., L-CLIPScore, Sec. IV-B: stage 1 single-modal distillation (Eq. 1), "
                        "stage 2 adds the Similarity Regulator (Eq. 2) with the text encoder frozen"),
             ("data", "ours: Sec. IV-B distils on large image-text data, not on the evaluation corpus; the "
                      "teaching CLIP's own pretraining stream stands in for it (chunks 0-3: 4,000 generated "
                      "images, 20,000 captions, seeds no evaluation corpus uses)"),
             ("stage2_lr", "Sec. IV-B: the Similarity Regulator stage with learning rate 1e-4"),
             ("lr", "ours: 1e-3, the printed 5e-3 (Sec. IV-B, batch 4,096) scaled to batch 128 by the square "
                    "root of the batch ratio, 5e-3 x (128 / 4,096)^0.5 = 8.8e-4, rounded"),
             ("batch_size", "ours: 128 in both stages (the paper's 4,096 / 2,048 scaled to 2 CPU cores)"),
             ("steps", "ours: 1,200 + 300 steps (about 25 min on 2 CPU cores)"),
             ("schedule", "ours: cosine with 100 warm-up steps in each stage"),
             ("weight_decay", "ours: 1e-2"),
             ("precision", "Sec. IV-B: mixed precision (on CUDA; fp32 on the CPU)")))
"""L-CLIPScore for the shipped teaching CLIP: the paper's two stages (Li et al., Sec. IV-B) scaled to 2 CPU
cores — 1,200 steps of single-modal distillation at lr 1e-3, then 300 Similarity-Regulator steps at the
printed lr 1e-4, both at batch 128 with a cosine decay after 100 warm-up steps — on 4,000 images of the
teaching CLIP's pretraining stream (:mod:`neural.lclip_stream`), as the paper distils on large
image–text data rather than on the evaluation corpus.  About 25 minutes on 2 CPU cores, resumable."""

BRIDGE_SMALL = Recipe(
    "bridge-small", "BRIDGE", batch_size=16, lr=1e-3, weight_decay=1e-2, steps=60, max_images=512,
    frozen="the CLIP backbone (only ψ and the L3 MLP train)",
    sources=(("*", "neural.bridge.BridgeConfig defaults: " + _SMALL),))
"""BRIDGE for the small offline CLIP: :class:`neural.bridge.BridgeConfig`'s defaults (60 steps, 16
images × 2 noun chunks, AdamW lr 1e-3, wd 1e-2, 512 images)."""

BRIDGE_PAPER = Recipe(
    "bridge-paper", "BRIDGE", batch_size=256, lr=1e-4, weight_decay=1e-2, steps=0, epochs=10,
    schedule="cosine", warmup_steps=500, precision="amp",
    frozen="the CLIP backbone (only ψ and the L3 MLP train)",
    sources=(("frozen", "Sarto et al., ECCV 2024, Sec. 3.3: the backbone frozen, the mapping module trains"),
             ("lambdas", "Sec. 3.3 / supplementary: λ1 = λ3 = 0.01, λ2 = 1 (neural.bridge.BridgeConfig)"),
             ("optimizer", "Sarto et al., ECCV 2024, Sec. 4.1: AdamW"),
             ("lr", "Sec. 4.1: learning rate 1e-4"),
             ("batch_size", "Sec. 4.1: batch size 256"),
             ("w", "ours: Eq. 4's w = 2.5 (the paper gives no value; CLIP-S's w)"),
             ("epochs", "ours: 10 epochs over the training images"),
             ("schedule", "ours: cosine with 500 warm-up steps"),
             ("weight_decay", "ours: 1e-2"),
             ("precision", "ours: mixed precision on CUDA")))
"""BRIDGE (Sarto et al., ECCV 2024, Sec. 3.3, Sec. 4.1 and supplementary): the backbone frozen, ψ and the
L3 MLP trained with λ1 = λ3 = 0.01, λ2 = 1; AdamW, lr 1e-4, batch 256 (Sec. 4.1).  Ours (no paper value):
w = 2.5 in Eq. 4, 10 epochs over the training images, the cosine decay after 500 warm-up steps, weight
decay 1e-2, mixed precision on CUDA."""

SPECS_SMALL = Recipe(
    "specs-small", "SPECS", batch_size=32, lr=1e-5, weight_decay=1e-2, steps=30, max_images=384,
    frozen="nothing (every parameter trains)",
    sources=(("*", "neural.specs.SPECSConfig.for_tiny: " + _SMALL),))
"""SPECS for the in-run tiny CLIP: :meth:`neural.specs.SPECSConfig.for_tiny` (30 steps, batch 32, the
paper's AdamW lr 1e-5 and wd 1e-2, 384 images)."""

SPECS_TEACHING = Recipe(
    "specs-teaching", "SPECS", batch_size=32, lr=1e-5, weight_decay=1e-2, steps=40, max_images=384,
    frozen="nothing (every parameter trains)",
    sources=(("*", "neural.specs.SPECSConfig defaults, which the main job gives the teaching CLIP: " + _SMALL),))
"""SPECS for the shipped teaching CLIP: :class:`neural.specs.SPECSConfig`'s defaults (40 steps, otherwise
as ``specs-small``) — what the main job has always given it."""

SPECS_PAPER = Recipe(
    "specs-paper", "SPECS", batch_size=100, grad_accumulation=16, lr=1e-5, weight_decay=1e-2, steps=0, epochs=3,
    schedule="cosine", warmup_steps=40, precision="amp", frozen="nothing (every parameter trains)",
    sources=(("epochs", "Chen et al. 2025 (SPECS), Sec. 4: the base model is trained for six epochs, then "
                        "fine-tuned with the specificity objective for another three (the authors' "
                        "train/run_spec.sh passes --num_train_epochs 6)"),
             ("batch_size", "Sec. 4: 100 per GPU (train/run_spec.sh: --per_device_train_batch_size 100)"),
             ("grad_accumulation", "Sec. 4: four A40s at 400 per GPU, an effective batch of 1,600 = 100 × 16 "
                                   "on one device (train/run_spec.sh: --gradient_accumulation_steps 4 on "
                                   "torchrun --nproc_per_node=8, i.e. 3,200)"),
             ("lr", "train/run_spec.sh: --learning_rate 1e-5"),
             ("weight_decay", "train/run_spec.sh: --weight_decay 1e-2"),
             ("schedule", "train/train_spec.py: cosine_lr with --warmup_steps 40"),
             ("precision", "train/train_spec.py: torch.cuda.amp.autocast + GradScaler"),
             ("optimizer", "train/train_spec.py: torch.optim.AdamW")))
"""SPECS (Chen et al., EMNLP 2025, Sec. 4): the specificity fine-tune runs three epochs at an effective
batch of 1,600 (100 per GPU, 400 per GPU with accumulation, four A40s); here 100 × 16 accumulation steps
on one device.  The paper's six-epoch base training before it is not repeated: the fine-tune starts from
the given (stretched) backbone.  From the authors' code (mbzuai-nlp/SPECS, ``train/run_spec.sh``,
``train/train_spec.py``): AdamW lr 1e-5, weight decay 1e-2, cosine schedule after 40 warm-up steps, mixed
precision.  Where the script differs from the paper — 6 epochs, 4 accumulation steps on 8 processes
(3,200 per step) — the recipe follows the paper."""

#: Every recipe by name.
RECIPES: Mapping[str, Recipe] = {r.name: r for r in (PACS_SMALL, PACS_PAPER, LCLIP_SMALL, LCLIP_TEACHING,
                                                    LCLIP_PAPER, BRIDGE_SMALL, BRIDGE_PAPER, SPECS_SMALL,
                                                    SPECS_TEACHING, SPECS_PAPER)}


def get_recipe(name: str) -> Recipe:
    """The recipe called ``name`` (``KeyError`` listing the names otherwise)."""
    try:
        return RECIPES[name]
    except KeyError:
        raise KeyError(f"unknown recipe {name!r} (choose from {', '.join(RECIPES)})") from None


def is_small_backbone(backbone) -> bool:
    """Whether ``backbone`` (a :class:`~neural.backbone.Backbone`, or a ``--clip-model`` name; ``None``:
    the default tiny CLIP) is one of the small offline CLIPs: the in-run tiny CLIP or the teaching CLIP.
    A backbone object is recognised by its architecture name (``arch``)."""
    kind = small_kind(backbone)
    return kind is not None


def small_kind(backbone) -> str | None:
    """``"tiny"``, ``"teaching"`` or ``None`` (a real backbone) for a Backbone or a ``--clip-model`` name
    (``None``: the default teaching CLIP)."""
    if backbone is None or isinstance(backbone, str):
        if is_tiny_model(backbone):
            return "tiny"
        return "teaching" if is_teaching_model(backbone, default=True) else None
    arch = str(getattr(backbone, "arch", ""))
    # lazy: the architecture names live with the models (torch); a Backbone object means torch is loaded
    from neural.teaching_clip import TEACHING_ARCH
    from neural.tiny_clip import TINY_ARCH

    if arch == TINY_ARCH:
        return "tiny"
    return "teaching" if arch == TEACHING_ARCH else None


# ---------------------------------------------------------------------------- the CPU guard
def estimate_cpu_seconds(recipe: Recipe, seconds_per_sample: float, n_train: int | None = None) -> float:
    """Estimated CPU time of ``recipe``: samples through the model (:meth:`Recipe.total_samples`) × seconds
    per sample.

    ``seconds_per_sample`` is one forward + backward pass of one image–text pair through the whole
    model (:func:`measure_seconds_per_sample`).  Every step is counted as such a pass per sample: the
    recipes that freeze towers (PAC-S, BRIDGE) spend less per step, SPECS (four texts per image) more."""
    return recipe.total_samples(n_train) * float(seconds_per_sample)


def cpu_training_message(recipe: Recipe, seconds: float, n_train: int | None = None) -> str:
    """``"PAC-S paper recipe on CPU: ~N h (M steps × batch B)"``."""
    hours = seconds / 3600.0
    amount = f"~{hours:.1f} h" if hours < 10 else f"~{hours:.0f} h"
    return (f"{recipe.scorer} {recipe.name.split('-', 1)[1]} recipe on CPU: {amount} "
            f"({recipe.total_steps(n_train)} steps × batch {recipe.effective_batch}"
            + (f", stage 2 × batch {recipe.stage2_batch_size}" if recipe.stage2_batch_size else "") + ")")


def measure_seconds_per_sample(model, image_size: int, context_length: int, *, batch: int = 4,
                               repeats: int = 2) -> float:
    """Seconds per image–text pair of one forward + backward pass of ``model`` (an open_clip-style
    CLIP: ``encode_image``, ``encode_text``) on the CPU: the best of ``repeats`` timed steps on random
    inputs of ``batch`` pairs after one warm-up step, divided by ``batch``."""
    import torch  # lazy: only when a real backbone would train on the CPU

    gen = torch.Generator().manual_seed(0)
    x = torch.randn(batch, 3, image_size, image_size, generator=gen)
    tokens = torch.randint(1, 1000, (batch, context_length), generator=gen)
    model = model.float().cpu().train()
    best = float("inf")
    for k in range(repeats + 1):
        t0 = time.perf_counter()
        v = model.encode_image(x)
        t = model.encode_text(tokens)
        (v.float().pow(2).mean() + t.float().pow(2).mean()).backward()
        model.zero_grad(set_to_none=True)
        if k:
            best = min(best, time.perf_counter() - t0)
    return best / batch


def cpu_training_refusal(recipes, go_ahead: bool, seconds_per_sample: Callable[[], float], n_train: int | None,
                         announce: Callable[[str], None] = print) -> str | None:
    """The main job's up-front guard: with paper recipes on the CPU (``recipes``: those of the scorers
    the run trains), print each one's estimate (``announce``) and return the refusal message unless
    ``go_ahead``; ``None`` when nothing needs refusing (no paper recipe).  ``seconds_per_sample`` is
    called once, only when some paper recipe would run."""
    recipes = [r for r in dict.fromkeys(recipes) if r.name.endswith("-paper")]
    if not recipes:
        return None
    per = seconds_per_sample()
    lines = [cpu_training_message(r, estimate_cpu_seconds(r, per, n_train), n_train) for r in recipes]
    for line in lines:
        announce(line + ("" if go_ahead else "; pass --train-on-cpu to go ahead"))
    if go_ahead:
        return None
    return "; ".join(lines) + "; pass --train-on-cpu to go ahead (or --device cuda, or --recipe small)"
