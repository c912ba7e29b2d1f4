"""SPECS (Chen et al.): specificity-aware fine-tuning of a long-context CLIP, and its score.

* **Long captions** (:func:`stretch_positional_embedding`, :func:`stretch_backbone`): the text context is
  lengthened by *knowledge-preserving stretching* of the positional embeddings, as Long-CLIP does: the
  first ``keep`` positions are kept as they are and positions ``keep … L−1`` are linearly interpolated
  onto ``keep … L'−1`` (ratio ``(L' − keep) / (L − keep)``; the last few new positions, which fall past
  ``L − 1``, are linearly extrapolated from the last two old ones — exactly Long-CLIP's 77 → 248 with
  ``keep = 20``, ratio 4).  The paper's setting is 77 → 248, keep 20; for a backbone with a shorter
  context (the tiny CLIP has 32 positions) the default stretches *proportionally*:
  ``L' = round(248 · L / 77)``, ``keep = round(20 · L / 77)`` (32 → 103, keep 8).  Both are configurable.
* **Fine-tuning** (:func:`train_specs`; L_pos Eq. 3, L_con Eq. 4 and Fig. 2).  For an image I with detail units d_1 … d_K
  (cumulative captions c_j = d_1 ⊕ … ⊕ d_j), a step j, its positive detail d⁺ = d_{j+1} and a negative
  detail d⁻ (a unit of another image, word-shuffled for 90 % of the training images), with the logits
  ``z(I, c) = exp(logit_scale) · cos(I, c)`` (the model's own temperature, clamped at 100)::

      L = α L_con + β L_pos + γ L_neg                                   α = 1, β = 8, γ = 0.8
      L_pos = mean max(0, ε_pos − (z(I, c_j ⊕ d⁺) − z(I, c_j)))         (positive detail must raise z)
      L_neg = mean max(0, ε_neg − (z(I, c_j) − z(I, c_j ⊕ d⁻)))         (negative detail must lower z)
      ε_• = clamp(stop_grad(batch mean of the corresponding gain), ε_min = 0, ε_max = 1.5)

  Both hinges compare against the same base caption c_j, and act on the logit scale α, β, γ were tuned
  for — as the authors' training code does, while the paper's text writes the hinges on the similarity
  itself (mbzuai-nlp/SPECS, ``model/model_spec.py``: ``hinge_loss`` on
  ``logit_scale · cos``, the negative caption ``c_j ⊕ d⁻`` built in ``train/prepare_data.py``, its margin
  clamped to [0, 1.5]).  ``L_con`` is CLIP's symmetric InfoNCE (:func:`neural.losses.info_nce`,
  ``reduction="mean"``) between the images and their full captions c_K.  One step j is drawn per image
  and step.  AdamW, lr 1e-5 and weight decay 1e-2 as in the paper, for every backbone; every parameter
  is trained.  :meth:`SPECSConfig.for_tiny` only shortens the run (30 steps) for the small offline CLIP.
* **Score** (Eq. 5, :class:`SPECSScore`): ``SPECS(I, T) = w · max((cos(v, t) + 1) / 2, 0)`` with
  ``w = 1`` (range [0, 1]), as the authors' reference code computes it (mbzuai-nlp/SPECS, README,
  "Compute SPECS scores"); the paper's text says "cosine similarity, clipped at 0" (``max(cos, 0)``),
  which ties every negative cosine at 0; no prompt prefix — long captions are scored as written, tokenised to the
  stretched context.  The map is strictly increasing in the cosine (negative cosines do not tie at 0);
  it does not enter the specificity rates, whose θ is the raw cosine.
* :func:`specificity_on_corpus` computes SR_pos / SR_neg (Eqs. 1–2, :mod:`neural.specificity`) of any
  scorer on a corpus, with θ = the raw image–text cosine ``cos(v, t)`` of the scorer's backbone for every
  model (the caption as written, no prompt, no output map — the paper's θ), so a score map that clips or
  rescales the cosine (CLIP-S' ``w · max(cos, 0)``, SPECS' ``(cos + 1) / 2``) cannot change the rates.
  Detail units: the teaching set's own (``describe``) and false units (``negative_unit``), or on real
  data the detail units of each image's longest caption (:func:`neural.text_units.detail_units`) with a
  unit of another (seeded) image as the negative; evaluation negatives are not shuffled.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from corpora.base import GeneratedCorpus
from corpora.cache import NO_CACHE
from neural.backbone import backbone_from_model
from neural.base import image_embeddings, l2_normalize, with_prompt
from neural.losses import info_nce
from neural.recipes import Recipe
from neural.specificity import join_unit, pairwise_score_fn, specificity_rate
from neural.text_tower import encode_text_bucketed, text_tower_parts
from neural.text_units import detail_units
from neural.training import (
    MixedPrecision,
    adamw,
    deterministic,
    load_state_arrays,
    lr_schedule,
    progress,
    state_dict_arrays,
    tick,
)

__all__ = [
    "stretch_positional_embedding", "long_context_for", "stretch_backbone", "SPECSConfig", "train_specs",
    "SPECSScore", "specs_losses", "specificity_data", "specificity_on_corpus", "shuffle_words",
    "training_negatives", "raw_cosine_matrix", "SPECIFICITY_THETA",
]

PAPER_CONTEXT, PAPER_LONG_CONTEXT, PAPER_KEEP = 77, 248, 20
#: What θ of the specificity rates is (a cache key for stored rates: bump it when θ changes).
SPECIFICITY_THETA = "raw image-text cosine of the backbone, no prompt (v2)"


# ============================================================================ long context
def stretch_positional_embedding(pos: torch.Tensor, new_len: int, keep: int = PAPER_KEEP) -> torch.Tensor:
    """Long-CLIP's knowledge-preserving stretch of a ``(L, W)`` positional embedding to ``(new_len, W)``.

    New position ``p < keep`` copies old position ``p``; for ``p ≥ keep`` the source coordinate is
    ``u = keep + (p − keep) · (L − keep) / (new_len − keep)`` and the embedding is
    ``(1 − f) · pos[⌊u⌋] + f · pos[⌊u⌋ + 1]`` (``f = u − ⌊u⌋``), extrapolating from the last two old
    positions when ``⌊u⌋ ≥ L − 1``.  With L = 77, new_len = 248, keep = 20 this is Long-CLIP's
    interpolation (ratio 4) exactly.
    """
    L, W = pos.shape
    if new_len < L:
        raise ValueError(f"new_len={new_len} is shorter than the current context {L}")
    if not 0 < keep < L:
        raise ValueError(f"keep={keep} must be in 1..{L - 1}")
    p = pos.detach().float()
    out = torch.empty(new_len, W, dtype=torch.float32)
    out[:keep] = p[:keep]
    ratio = (L - keep) / (new_len - keep)
    q = torch.arange(keep, new_len, dtype=torch.float64)
    u = keep + (q - keep) * ratio
    lo = torch.clamp(torch.floor(u).long(), max=L - 2)
    f = (u - lo.double()).float()[:, None]
    out[keep:] = (1 - f) * p[lo] + f * p[lo + 1]
    return out.to(pos.dtype)


def long_context_for(context_length: int, new_len: int | None = None, keep: int | None = None) -> tuple[int, int]:
    """``(new_len, keep)``: the paper's 248 / 20 for a 77-token CLIP; proportional otherwise."""
    if new_len is None:
        new_len = PAPER_LONG_CONTEXT if context_length == PAPER_CONTEXT else \
            int(round(PAPER_LONG_CONTEXT * context_length / PAPER_CONTEXT))
    if keep is None:
        keep = PAPER_KEEP if context_length == PAPER_CONTEXT else \
            max(1, int(round(PAPER_KEEP * context_length / PAPER_CONTEXT)))
    return int(new_len), int(keep)


def stretch_backbone(backbone, new_len: int | None = None, keep: int | None = None, *, name: str | None = None,
                     precision: str | None = None):
    """A copy of ``backbone`` whose text tower accepts ``new_len`` tokens (positional embedding stretched,
    causal mask rebuilt, tokenizer context raised).  ``new_len == context_length`` returns a plain copy."""
    model = copy.deepcopy(backbone.model).float().cpu()
    L = backbone.context_length
    new_len, keep = long_context_for(L, new_len, keep)
    holder = model.text if hasattr(model, "text") and not hasattr(model, "token_embedding") else model
    if new_len != L:
        pos = text_tower_parts(model)[1]
        holder.positional_embedding = nn.Parameter(stretch_positional_embedding(pos, new_len, keep))
        if getattr(holder, "attn_mask", None) is not None:
            mask = torch.full((new_len, new_len), float("-inf")).triu_(1)
            holder.attn_mask = mask
        holder.context_length = new_len
        if hasattr(holder, "num_pos"):
            holder.num_pos = new_len
        if holder is not model:
            model.context_length = new_len
    tok = copy.copy(backbone.tokenizer)
    if not hasattr(tok, "context_length"):
        raise TypeError("stretch_backbone: the tokenizer has no context_length attribute")
    tok.context_length = new_len
    bb = backbone_from_model(model, backbone.preprocess, tok,
                             name=name or f"{backbone.name} [context {L}->{new_len}, keep {keep}]",
                             arch=backbone.arch, source=f"{backbone.source}; positional embeddings stretched",
                             device=backbone.device, precision=precision or backbone.precision,
                             show_progress=backbone.show_progress)
    bb.stretch = {"from": L, "to": new_len, "keep": keep}  # type: ignore[attr-defined]
    return bb


# ============================================================================ data
def specificity_data(corpus, image_ids: Sequence[str], seed: int = 0,
                     per_step: bool = True) -> tuple[list[list[str]], list[list[str]]]:
    """Detail units and per-step negative units of each image.

    Teaching set: ``describe(image_id)`` units and ``negative_unit(image_id, seed + k)`` for step k.
    Other corpora: the detail units of each image's longest caption; the negative of step k is a detail
    unit of another image's longest caption (seeded draw).  ``per_step=False`` draws one negative per
    image and repeats it for every step (cheaper; used for training).
    """
    units_all, negs_all = [], []
    if isinstance(corpus, GeneratedCorpus):
        for i in image_ids:
            _, units = corpus.describe(i)
            units_all.append(list(units))
            if per_step:
                negs_all.append([corpus.negative_unit(i, seed + k) for k in range(len(units))])
            else:
                negs_all.append([corpus.negative_unit(i, seed)] * len(units))
        return units_all, negs_all
    rng = np.random.default_rng(seed)
    longest = {}
    for i in image_ids:
        caps = corpus.captions_of(i)
        if not caps:
            raise ValueError(f"image {i!r} has no captions")
        c = max(caps, key=lambda c: len(c.text))
        longest[i] = [u.text for u in detail_units(c.text)]
    ids = list(image_ids)
    for n, i in enumerate(ids):
        units_all.append(longest[i])
        negs = []
        for _ in range(len(longest[i]) if per_step else 1):
            j = int(rng.integers(len(ids) - 1)) if len(ids) > 1 else 0
            j = j + 1 if j >= n and len(ids) > 1 else j
            other = longest[ids[j]]
            negs.append(other[int(rng.integers(len(other)))])
        negs_all.append(negs if per_step else negs * len(longest[i]))
    return units_all, negs_all


# ============================================================================ losses
def specs_losses(z_base: torch.Tensor, z_pos: torch.Tensor, z_neg: torch.Tensor, eps_min: float = 0.0,
                 eps_max: float = 1.5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """SPECS Eqs. 3–4: the two hinge terms with the dynamic margin.

    Parameters
    ----------
    z_base, z_pos, z_neg : Tensor, shape (B,)
        Image–text logits ``exp(logit_scale) · cos`` of the base caption ``c_j``, of ``c_j ⊕ d⁺`` and of
        ``c_j ⊕ d⁻`` (the authors' code scores all three on this scale).
    eps_min, eps_max : float
        Clamp of the margin, in logit units ([0, 1.5] as in the authors' ``model/model_spec.py``).

    Returns
    -------
    tuple of Tensor
        ``(L_pos, L_neg, ε_pos, ε_neg)`` with ``L_pos = mean max(0, ε_pos − (z_pos − z_base))``,
        ``L_neg = mean max(0, ε_neg − (z_base − z_neg))`` and ``ε_• = clamp(stop_grad(mean gain))``.
    """
    gain_pos = z_pos - z_base
    gain_neg = z_base - z_neg
    eps_pos = gain_pos.detach().mean().clamp(eps_min, eps_max)
    eps_neg = gain_neg.detach().mean().clamp(eps_min, eps_max)
    return F.relu(eps_pos - gain_pos).mean(), F.relu(eps_neg - gain_neg).mean(), eps_pos, eps_neg


def shuffle_words(text: str, rng: np.random.Generator) -> str:
    """``text`` with its whitespace-separated words in a random (seeded) order."""
    words = text.split()
    return " ".join(words[k] for k in rng.permutation(len(words)))


def training_negatives(negs: Sequence[Sequence[str]], fraction: float = 0.9,
                       seed: int = 0) -> list[list[str]]:
    """The negative details of SPECS training: for ``round(fraction · n)`` of the ``n`` images (a seeded
    choice) every negative unit is word-shuffled (:func:`shuffle_words`), the others are kept as they
    are (SPECS: 90 % of the negatives are token-shuffled; the authors' ``train/prepare_data.py`` shuffles
    a leading portion of the data set, ``--shuffle_first_portion``)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction={fraction} must be in [0, 1]")
    rng = np.random.default_rng([seed, 90])
    chosen = set(rng.permutation(len(negs))[: int(round(fraction * len(negs)))].tolist())
    return [[shuffle_words(u, rng) for u in row] if i in chosen else list(row) for i, row in enumerate(negs)]


@dataclass
class SPECSConfig:
    """SPECS recipe (paper: α = 1, β = 8, γ = 0.8, AdamW lr 1e-5, wd 1e-2, context 248 / keep 20, 90 % of
    the negative details word-shuffled; margin clamp [0, 1.5] in logit units as the authors' code)."""

    alpha: float = 1.0
    beta: float = 8.0
    gamma: float = 0.8
    lr: float = 1e-5
    weight_decay: float = 1e-2
    steps: int = 40
    batch_size: int = 32
    eps_min: float = 0.0
    eps_max: float = 1.5
    neg_shuffle: float = 0.9
    max_logit_scale: float = 100.0
    context_length: int | None = None
    keep: int | None = None
    max_images: int = 384
    seed: int = 0
    #: batches whose gradients are summed per optimiser step; passes over the training images instead of
    #: ``steps`` (``None``: ``steps``); schedule, warm-up, ``"fp32"`` or ``"amp"``: :class:`neural.recipes.Recipe`
    grad_accumulation: int = 1
    epochs: int | None = None
    schedule: str = "constant"
    warmup_steps: int = 0
    precision: str = "fp32"

    @classmethod
    def from_recipe(cls, recipe: Recipe, **overrides) -> "SPECSConfig":
        """The config of a SPECS :class:`~neural.recipes.Recipe` (steps or epochs, batch, accumulation, lr,
        weight decay, schedule, precision, image cap — ``None``: the whole split); ``overrides`` (e.g.
        ``seed``) replace single fields."""
        fields = {**recipe.optimiser_fields("SPECS"), "steps": recipe.steps, "epochs": recipe.epochs,
                  "grad_accumulation": recipe.grad_accumulation, "max_images": recipe.max_images or 10 ** 9}
        return cls(**{**fields, **overrides})

    def total_steps(self, n_images: int) -> int:
        """Optimiser steps on ``n_images`` usable training images: ``steps``, or
        ``epochs × ⌈n / (batch × accumulation)⌉``."""
        if self.epochs is None:
            return self.steps
        return self.epochs * max(1, -(-n_images // (self.batch_size * self.grad_accumulation)))

    @classmethod
    def for_tiny(cls, **kw) -> "SPECSConfig":
        """The small offline CLIP: 30 steps, the paper's lr 1e-5.  (With the hinges on the logit scale
        1e-5 moves it: on the default teaching set SR_pos 0.58 → 0.76, SR_neg 0.73 → 0.72; the former
        1e-4 gave SR_pos 0.96 but SR_neg 0.56 — L_pos swamped L_neg.)"""
        return replace(cls(steps=30), **kw)


def _encode_trimmed(model: nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Normalised text features, the rows grouped by length and each group computed only up to its own
    last end-of-text position (exact under the causal mask; :func:`neural.text_tower.encode_text_bucketed`)."""
    return F.normalize(encode_text_bucketed(model, tokens).float(), dim=-1)


def train_specs(backbone, corpus, split: str = "train", config: SPECSConfig | None = None, *, cache=None,
                show_progress: bool = True, num_threads: int | None = None, log: list | None = None,
                image_ids: Sequence[str] | None = None):
    """Stretch the text context and fine-tune ``backbone`` with the SPECS objective on ``corpus``' split.

    Returns the fine-tuned long-context :class:`Backbone` (``.specs_training`` holds the loss curve, the
    config and the training data; ``.parent`` is ``backbone``).
    The weights are cached (namespace ``"specs"``) under the backbone identity, corpus fingerprint,
    split, training image ids and config.  ``image_ids``: the training images to use instead of the
    whole split (e.g. only those on disk, ``--skip-missing-images``).
    """
    cfg = config or SPECSConfig()
    if isinstance(cfg, Recipe):
        cfg = SPECSConfig.from_recipe(cfg)
    cache = cache if cache is not None else NO_CACHE
    long_bb = stretch_backbone(backbone, cfg.context_length, cfg.keep, precision="fp32")  # train in fp32
    ids = list(corpus.split(split) if image_ids is None else image_ids)[: cfg.max_images]
    key = {"what": "specs", "backbone": backbone.cache_identity(), "corpus": corpus.name,
           "fingerprint": corpus.fingerprint, "split": split, "ids": ids, "config": asdict(cfg),
           "images": corpus.images_fingerprint(ids), "stretch": long_bb.stretch,
           # how detail units and negatives are made (specificity_data, neural.text_units): 2 = one
           # negative per image on every corpus, an existential "there" joined to its unit; 3 = also
           # after a fronted phrase ("On the sand, there is …"); 4 = negatives word-shuffled
           # (cfg.neg_shuffle), appended to the base caption c_j, hinges on logits
           "training_data": 4}
    model = long_bb.model

    def run() -> dict[str, np.ndarray]:
        with deterministic(num_threads):
            return _train(model, long_bb, corpus, ids, cfg, show_progress)

    arrays = cache.get_or_compute("specs", key, run)
    losses = arrays.pop("losses", np.zeros((0, 6), np.float32))
    load_state_arrays(model, arrays)
    model.eval()
    out = backbone_from_model(model, long_bb.preprocess, long_bb.tokenizer,
                              name=f"SPECS({backbone.name}, ctx {long_bb.context_length})", arch=backbone.arch,
                              source=f"SPECS fine-tuned here from {backbone.name} on {corpus.name}/{split}",
                              device=backbone.device, precision=backbone.precision,
                              show_progress=backbone.show_progress)
    out.stretch = long_bb.stretch  # type: ignore[attr-defined]
    out.specs_training = {"losses": losses.tolist(), "config": asdict(cfg),  # type: ignore[attr-defined]
                          "data": {"corpus": corpus.name, "fingerprint": corpus.fingerprint, "split": split,
                                   "n_images": len(ids), "image_ids": ids}}
    out.parent = backbone  # type: ignore[attr-defined]  (recorded by neural.saved.save_scorer)
    if log is not None:
        log.extend({"step": k, "loss": float(r[0]), "L_con": float(r[1]), "L_pos": float(r[2]),
                    "L_neg": float(r[3]), "eps_pos": float(r[4]), "eps_neg": float(r[5])}
                   for k, r in enumerate(losses))
    return out


def _batch_loss(model, bb, X, cum, negs, multi, pick, rng, cfg: SPECSConfig) -> tuple[torch.Tensor, list[float]]:
    """Eqs. 3–4 on the images ``multi[pick]``: one step j per image (drawn with ``rng``), the texts
    ``c_K``, ``c_j``, ``c_j ⊕ d⁺``, ``c_j ⊕ d⁻`` encoded in one pass.  Returns the total loss and
    ``[L_con, L_pos, L_neg, ε_pos, ε_neg]``."""
    dev = X.device
    B = len(pick)
    texts_full, prev, nxt, neg = [], [], [], []
    for j in pick:
        i = multi[j]
        k = int(rng.integers(len(cum[i]) - 1))
        texts_full.append(cum[i][-1])
        prev.append(cum[i][k])
        nxt.append(cum[i][k + 1])
        neg.append(join_unit(cum[i][k], negs[i][k + 1]))     # c_j ⊕ d⁻ (same base as c_j ⊕ d⁺)
    tokens = bb.tokenize(texts_full + prev + nxt + neg).to(dev)
    t = _encode_trimmed(model, tokens)
    t_full, t_prev, t_next, t_neg = t[:B], t[B:2 * B], t[2 * B:3 * B], t[3 * B:]
    v = F.normalize(model.encode_image(X[torch.from_numpy(pick).to(dev)]).float(), dim=-1)
    l_con = info_nce(v, t_full, logit_scale=model.logit_scale, max_logit_scale=cfg.max_logit_scale)
    scale = model.logit_scale.exp().clamp(max=cfg.max_logit_scale)
    z_prev = scale * (v * t_prev).sum(-1)
    z_next = scale * (v * t_next).sum(-1)
    z_neg = scale * (v * t_neg).sum(-1)
    l_pos, l_neg, e_pos, e_neg = specs_losses(z_prev, z_next, z_neg, cfg.eps_min, cfg.eps_max)
    loss = cfg.alpha * l_con + cfg.beta * l_pos + cfg.gamma * l_neg
    return loss, [float(l_con.detach()), float(l_pos.detach()), float(l_neg.detach()), float(e_pos), float(e_neg)]


def _train(model, bb, corpus, ids, cfg: SPECSConfig, show_progress: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(cfg.seed)
    torch.manual_seed(cfg.seed)
    units, negs = specificity_data(corpus, ids, cfg.seed, per_step=False)
    negs = training_negatives(negs, cfg.neg_shuffle, cfg.seed)
    cum = []
    for us in units:
        c, row = "", []
        for u in us:
            c = join_unit(c, u)
            row.append(c)
        cum.append(row)
    multi = [i for i, r in enumerate(cum) if len(r) >= 2]
    if len(multi) < 2:
        raise ValueError("SPECS: need at least two images with two or more detail units")
    dev = next(model.parameters()).device
    X = bb.preprocess_images([corpus.load_image(ids[i]) for i in multi]).to(dev)
    model.train()
    opt = adamw([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    B = min(cfg.batch_size, len(multi))
    n_steps = cfg.total_steps(len(multi))
    amp, sched = MixedPrecision(dev, cfg.precision), lr_schedule(opt, cfg.schedule, cfg.warmup_steps, n_steps)
    rows = []
    bar = progress(total=n_steps, desc="SPECS fine-tuning", enabled=show_progress)
    for step in range(n_steps):
        opt.zero_grad(set_to_none=True)
        for _ in range(cfg.grad_accumulation):   # one batch per step unless the recipe accumulates
            pick = rng.choice(len(multi), size=B, replace=False)
            with amp.autocast():
                loss, parts = _batch_loss(model, bb, X, cum, negs, multi, pick, rng, cfg)
            amp.backward(loss / cfg.grad_accumulation if cfg.grad_accumulation > 1 else loss)
        amp.update(opt, sched)
        rows.append([float(loss.detach()), *parts])
        tick(bar, None, "specs", step, loss)
    if bar is not None:
        bar.close()
    model.eval()
    out = state_dict_arrays(model)
    out["losses"] = np.asarray(rows, np.float32)
    return out


# ============================================================================ the score
class SPECSScore:
    """SPECS (Eq. 5): ``w · max((cos(v, t) + 1) / 2, 0)`` on the fine-tuned long-context backbone,
    ``w = 1``, no prompt (the reference code's formula; see the module docstring).  ``score_matrix`` gives
    the ``(n_images, n_captions)`` affinities for the evaluator."""

    def __init__(self, backbone, w: float = 1.0, prompt: str | None = "", name: str = "SPECS"):
        self.backbone = backbone
        self.w = float(w)
        self.prompt = prompt or ""
        self.name = name

    def cache_identity(self) -> dict:
        return {"scorer": "SPECS", "w": self.w, "prompt": self.prompt, "map": "(cos+1)/2",
                "backbone": self.backbone.cache_identity()}

    def _map(self, cos: np.ndarray) -> np.ndarray:
        """``w · max((cos + 1) / 2, 0)`` as float32."""
        c = np.asarray(cos, dtype=np.float32)
        return (np.float32(self.w) * np.maximum((c + np.float32(1.0)) / np.float32(2.0), 0.0)).astype(np.float32)

    def _texts(self, texts: Sequence[str]) -> np.ndarray:
        return self.backbone.encode_texts(with_prompt(list(texts), self.prompt or None)).numpy()

    def score(self, images, candidates: Sequence[str], references=None) -> np.ndarray:
        """Per-instance SPECS (reference-free: ``references`` is ignored)."""
        v = image_embeddings(self.backbone, images)
        if v.shape[0] != len(candidates):
            raise ValueError(f"SPECS.score: {v.shape[0]} images but {len(candidates)} candidates")
        return self._map(np.einsum("nd,nd->n", v, self._texts(candidates)))

    def score_matrix(self, images, captions: Sequence[str]) -> np.ndarray:
        return self._map(image_embeddings(self.backbone, images) @ self._texts(captions).T)


def _theta_backbone(scorer):
    """The backbone whose raw cosine is θ for ``scorer``: its ``backbone`` (CLIP-S, PAC-S, L-CLIPScore,
    SPECS), its ``clip`` (BRIDGE's frozen CLIP), or the scorer itself when it is a backbone."""
    for bb in (getattr(scorer, "backbone", None), getattr(scorer, "clip", None), scorer):
        if bb is not None and hasattr(bb, "encode_texts") and hasattr(bb, "encode_images"):
            return bb
    raise TypeError(f"{type(scorer).__name__} has no backbone for the raw cosine θ; "
                    "pass theta='score' to use its own score_matrix")


def raw_cosine_matrix(backbone, images, texts: Sequence[str]) -> np.ndarray:
    """``(n_images, n_texts)`` raw cosines ``cos(v, t)`` of ``backbone`` (texts as written, no prompt)."""
    v = image_embeddings(backbone, images)
    t = l2_normalize(backbone.encode_texts(list(texts)).numpy())
    return (v @ t.T).astype(np.float32)


class _RawCosine:
    """θ of SPECS Eqs. 1–2 for one backbone, with the ``score_matrix`` interface.  ``known``: image
    embeddings already computed by this backbone, by image object (``id``), used for those images."""

    def __init__(self, backbone, known: Mapping[int, np.ndarray] | None = None):
        self.backbone = backbone
        self.known = dict(known or {})

    def score_matrix(self, images, texts: Sequence[str]) -> np.ndarray:
        if not self.known or not all(id(im) in self.known for im in images):
            return raw_cosine_matrix(self.backbone, images, texts)
        v = np.stack([self.known[id(im)] for im in images])
        t = l2_normalize(self.backbone.encode_texts(list(texts)).numpy())
        return (v @ t.T).astype(np.float32)


def _corpus_raw_cosine(backbone, corpus, ids: Sequence[str], images: Sequence) -> _RawCosine:
    """θ for ``backbone`` on the corpus images ``ids`` (loaded as ``images``): their embeddings from the
    backbone's in-memory table of corpus images (:meth:`neural.backbone.Backbone.encode_corpus_images`,
    filled by the retrieval and judgment stages for the same weights), encoding only those not there."""
    if not hasattr(backbone, "encode_corpus_images"):
        return _RawCosine(backbone)
    v = backbone.encode_corpus_images(corpus, ids)
    return _RawCosine(backbone, {id(im): row for im, row in zip(images, v)})


def specificity_on_corpus(scorers: Mapping[str, object], corpus, split: str = "test", max_images: int = 100,
                          seed: int = 0, theta: str = "cosine") -> dict[str, dict[str, float]]:
    """SR_pos / SR_neg (SPECS Eqs. 1–2) of every scorer on the first ``max_images`` images of ``split``.

    Parameters
    ----------
    scorers : mapping of name to scorer
        Each with a backbone (``backbone`` / ``clip`` attribute, or a backbone itself); with
        ``theta="score"`` anything with ``score_matrix(images, texts)``.
    theta : ``"cosine"`` | ``"score"``
        ``"cosine"`` (the paper's θ, :data:`SPECIFICITY_THETA`): the raw image–text cosine of each
        scorer's backbone, the same quantity for every model; ``"score"``: the scorer's own output map.
        With ``"cosine"`` the rates are computed once per backbone (scorers sharing one get the same
        rates), the image embeddings taken from the backbone's in-memory corpus-image table where the
        images are already there (:meth:`~neural.backbone.Backbone.encode_corpus_images`).

    Returns
    -------
    dict
        ``{name: {"SR_pos", "SR_neg", ...}}`` (:func:`neural.specificity.specificity_rate`).
    """
    if theta not in ("cosine", "score"):
        raise ValueError(f"theta={theta!r}, expected 'cosine' or 'score'")
    # θ = cosine depends on the backbone alone: scorers sharing one (CLIP-S and BRIDGE's frozen CLIP) share
    # its rates, computed once
    thetas = {name: _theta_backbone(sc) if theta == "cosine" else sc for name, sc in scorers.items()}
    ids = list(corpus.split(split))[:max_images]
    units, negs = specificity_data(corpus, ids, seed)
    images = [corpus.load_image(i) for i in ids]
    rates: dict[int, dict] = {}
    for th in thetas.values():
        if id(th) not in rates:
            fn = pairwise_score_fn(_corpus_raw_cosine(th, corpus, ids, images) if theta == "cosine" else th)
            rates[id(th)] = specificity_rate(fn, images, units, negs)
    return {name: dict(rates[id(th)]) for name, th in thetas.items()}
