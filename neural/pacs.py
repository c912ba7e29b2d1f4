"""PAC-S and RefPAC-S (Sarto et al., CVPR 2023, "Positive-Augmented Contrastive Learning for Image and
Video Captioning Evaluation"), and the positive-augmented contrastive fine-tuning that produces the
PAC-S backbone.

Score (Eq. 1, reference implementation ``aimagelab/pacscore``, ``evaluation/pac_score/pac_score.py``):

.. math:: \\text{PAC-S}(c, v) = w \\cdot \\max(\\cos(c, v), 0), \\quad w = 2.0,

with the same ``"A photo depicts"`` prompt and truncating tokenisation as CLIPScore.  RefPAC-S (Eq. 4) is
the harmonic mean of PAC-S and ``max_r cos(c, r)`` — as in the reference code (``RefPACScore``), the
reference term is neither scaled nor clipped.

Fine-tuning (Sec. 3, introduction, and Sec. 4.1).  For a batch of N tuples :math:`(v_i, t_i, v'_i, t'_i)` — a real image, its real
caption, a *generated* image of the same content and a *generated* caption of the same content — the
symmetric InfoNCE of Eq. 2 is

.. math::

    L_{V,T} = -\\frac1N \\sum_i \\log \\frac{\\exp(\\cos(v_i, t_i)/\\tau)}{\\sum_j \\exp(\\cos(v_i, t_j)/\\tau)}
              -\\frac1N \\sum_i \\log \\frac{\\exp(\\cos(t_i, v_i)/\\tau)}{\\sum_j \\exp(\\cos(t_i, v_j)/\\tau)}

(the *sum* of the two directions, as written in the paper — open_clip's ``ClipLoss`` averages them),
and the positive-augmented objective (Eq. 3) is

.. math:: L = L_{V,T} + \\lambda_v L_{V',T} + \\lambda_t L_{V,T'}, \\quad \\lambda_v = 0.05,\\ \\lambda_t = 0.1,

:math:`L_{V',T}` contrasting generated images with the real captions and :math:`L_{V,T'}` real images with
the generated captions.  :math:`1/\\tau = \\exp(\\text{logit\\_scale})` is the backbone's.  Only the final
visual and textual projections (``visual.proj``, ``text_projection``) are trained (Sec. 4.1: "finetune the
visual and textual final projections"; configurable: adding ``logit_scale`` to ``trainable`` makes the
temperature learnable); AdamW, lr 1e-4, batch size 256 (Sec. 4.1); early stopping on the validation loss
with the patience counted in **iterations** (Sec. 4.1: training stops when the validation loss "stops
decreasing for 1,500 iterations"): the validation loss is computed every ``eval_every`` iterations,
training stops after ``patience`` iterations without improvement (or at ``max_iters``), and the best
evaluation's weights are kept.  The training
tuples are visited in seeded shuffles (one epoch after another); a batch never spans two epochs.

On the teaching set the generator supplies the positives: :math:`v'` = ``corpus.rerender(image_id,
seed)`` (the same scene with new layout noise) and :math:`t'` = ``corpus.paraphrase(caption_id, seed)``
(the same facts in other words) — :func:`teaching_tuples`.  On real data the user supplies them
(:func:`load_tuples`: a JSON file listing real image, real caption, generated image, generated caption).

When only the projections (and, if made trainable, the temperature) train, the frozen towers'
pre-projection features are computed once and every step is a few small matrix products (identical maths, much faster).
"""
from __future__ import annotations

import copy
import hashlib
import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from corpora.base import GeneratedCorpus, file_signature
from corpora.cache import NO_CACHE
from corpora.images import read_image  # the datasets layer's safe image reader
from neural.backbone import Backbone, backbone_from_model
from neural.base import PROMPT
from neural.checkpoints import file_sha256
from neural.clipscore import CLIPScore
from neural.losses import info_nce
from neural.positives import tuple_entries
from neural.recipes import Recipe
from neural.text_tower import encode_text_bucketed
from neural.training import MixedPrecision, adamw, deterministic, lr_schedule, progress

#: Sarto et al. 2023, Eq. 1: w = 2.0.
PACS_W = 2.0


class PACScore(CLIPScore):
    """PAC-S (Eq. 1): ``2.0 · max(cos(c, v), 0)`` on a PAC-S (fine-tuned) backbone; with
    ``reference_based=True`` RefPAC-S (Eq. 4).  Same prompt, tokenisation and preprocessing as
    :class:`~neural.clipscore.CLIPScore`."""

    base_name = "PAC-S"

    def __init__(self, backbone, *, w: float = PACS_W, prompt: str | None = PROMPT, **kwargs):
        super().__init__(backbone, w=w, prompt=prompt, **kwargs)


class RefPACScore(PACScore):
    """RefPAC-S (Eq. 4): harmonic mean of PAC-S and ``max_r cos(c, r)`` (unscaled, unclipped)."""

    def __init__(self, backbone, **kwargs):
        kwargs.setdefault("reference_based", True)
        super().__init__(backbone, **kwargs)


# ---------------------------------------------------------------------------- training data
class LazySequence(Sequence):
    """A read-only sequence of ``n`` items made by ``make(k)`` on first access (then kept), so that
    generated tuples whose fine-tuned weights are already cached are never generated."""

    def __init__(self, n: int, make):
        self._n, self._make, self._memo = int(n), make, {}

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, k):
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(self._n))]
        k = int(k)
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(f"index {k} out of range for {self._n} items")
        if k not in self._memo:
            self._memo[k] = self._make(k)
        return self._memo[k]


@dataclass
class PositiveTuples:
    """Tuples ``(v, t, v', t')``: real image, real caption, generated image, generated caption.

    ``images`` / ``gen_images`` are ``(H, W, 3)`` uint8 arrays (or PIL images); ``identity`` is a
    JSON-serialisable description used in cache keys (``None`` disables caching of the fine-tuned
    weights)."""

    images: Sequence
    texts: list[str]
    gen_images: Sequence
    gen_texts: list[str]
    identity: dict | None = None

    def __post_init__(self):
        n = len(self.texts)
        for nm in ("images", "gen_images", "gen_texts"):
            if len(getattr(self, nm)) != n:
                raise ValueError(f"PositiveTuples: {nm} has {len(getattr(self, nm))} items, texts has {n}")
        if n < 2:
            raise ValueError("PositiveTuples: need at least 2 tuples for a contrastive loss")

    def __len__(self) -> int:
        return len(self.texts)


def teaching_tuples(corpus, split: str = "train", *, seed: int = 0, captions_per_image: int = 1,
                    max_images: int | None = None) -> PositiveTuples:
    """Positive-augmented tuples from the teaching set: for each image of ``split`` (first
    ``max_images``), ``captions_per_image`` of its captions (chosen with ``seed``), with
    ``v' = corpus.rerender(image_id, seed + k)`` and ``t' = corpus.paraphrase(caption_id, seed)``."""
    if not isinstance(corpus, GeneratedCorpus):
        raise TypeError(f"corpus {corpus.name!r} cannot generate positives (no generator: rerender/paraphrase); "
                        "supply generated images and captions with load_tuples()")
    ids = list(corpus.split(split))[: max_images or None]
    rng = np.random.default_rng(seed)
    rows, texts, cids = [], [], []   # rows: (image id, caption id, k)
    for i in ids:
        caps = corpus.captions_of(i)
        pick = rng.choice(len(caps), size=min(captions_per_image, len(caps)), replace=False)
        for k, j in enumerate(sorted(pick)):
            c = caps[int(j)]
            rows.append((i, c.id, k))
            texts.append(c.text)
            cids.append(c.id)
    ident = {"corpus": corpus.name, "fingerprint": corpus.fingerprint, "split": split, "seed": seed,
             "caption_ids": cids, "images": corpus.images_fingerprint(ids),
             "generator": "teaching rerender/paraphrase"}
    # images, re-rendered images and paraphrases are made on first use (a cached fine-tune needs none)
    n = len(rows)
    return PositiveTuples(LazySequence(n, lambda r: corpus.load_image(rows[r][0])), texts,
                          LazySequence(n, lambda r: corpus.rerender(rows[r][0], seed + rows[r][2])),
                          LazySequence(n, lambda r: corpus.paraphrase(rows[r][1], seed).text), identity=ident)


def load_tuples(path: str | Path, image_root: str | Path | None = None) -> PositiveTuples:
    """Read user-supplied positive tuples (real data) from a JSON file: a list of objects
    ``{"image": path, "caption": str, "generated_image": path, "generated_caption": str}``; relative
    paths are resolved against ``image_root`` (default: the JSON file's folder).  Errors name the file
    and the entry.

    The tuples' ``identity`` (the cache key of :func:`finetune_pacs`) holds the JSON file's hash, the
    resolved image root and a digest of every image file's :func:`~corpora.base.file_signature` (size,
    modification time), so moving the root or replacing an image invalidates a cached fine-tune."""
    p = Path(path)
    entries, root = tuple_entries(p, image_root)
    out = {"images": [], "texts": [], "gen_images": [], "gen_texts": []}
    signatures: dict[str, str] = {}   # image path (as written in the file) -> file_signature

    def read(rel) -> np.ndarray:
        img = read_image(root / rel)
        signatures[str(rel)] = file_signature(root / rel)
        return img

    for e in entries:
        out["images"].append(read(e["image"]))
        out["texts"].append(e["caption"])
        out["gen_images"].append(read(e["generated_image"]))
        out["gen_texts"].append(e["generated_caption"])
    digest = hashlib.sha256("\n".join(f"{k}\t{v}" for k, v in sorted(signatures.items()))
                            .encode("utf-8")).hexdigest()
    return PositiveTuples(**out, identity={"file": str(p), "sha256": file_sha256(p),
                                           "image_root": str(root.resolve()),
                                           "images": {"n": len(signatures), "sha256": digest}})


# ---------------------------------------------------------------------------- the loss
def pacs_loss(v: torch.Tensor, t: torch.Tensor, v_gen: torch.Tensor, t_gen: torch.Tensor,
              logit_scale: torch.Tensor, lambda_v: float = 0.05, lambda_t: float = 0.1
              ) -> tuple[torch.Tensor, dict[str, float]]:
    """Eq. 3: ``L_{V,T} + λ_v L_{V',T} + λ_t L_{V,T'}`` on normalised embeddings; also returns the parts.

    Each ``L_{A,B}`` is Eq. 2, the *sum* of the a→b and b→a cross-entropies of ``exp(logit_scale) · cos``
    logits, each averaged over the batch: :func:`neural.losses.info_nce` with ``reduction="sum"``."""
    l_vt = info_nce(v, t, logit_scale=logit_scale, reduction="sum")
    l_gv = info_nce(v_gen, t, logit_scale=logit_scale, reduction="sum")
    l_gt = info_nce(v, t_gen, logit_scale=logit_scale, reduction="sum")
    total = l_vt + lambda_v * l_gv + lambda_t * l_gt
    return total, {"L_VT": float(l_vt.detach()), "L_V'T": float(l_gv.detach()), "L_VT'": float(l_gt.detach())}


# ---------------------------------------------------------------------------- fine-tuning
@dataclass(frozen=True)
class PACSFinetuneConfig:
    """Hyper-parameters of :func:`finetune_pacs` (Sarto et al. 2023, Sec. 3 introduction and Sec. 4.1):
    λ_v = 0.05, λ_t = 0.1, AdamW lr 1e-4, batch 256, the two final projections trained, early stopping with
    the patience in iterations (the paper's 1,500: :data:`neural.recipes.PACS_PAPER`).  The defaults'
    ``eval_every``, ``patience`` and ``max_iters`` (iterations) are ours, sized for the in-run fine-tune (a
    few hundred tuples; the paper trains on COCO)."""

    lambda_v: float = 0.05
    lambda_t: float = 0.1
    lr: float = 1e-4
    weight_decay: float = 0.01
    batch_size: int = 256
    max_iters: int = 400
    eval_every: int = 5
    patience: int = 50
    trainable: tuple[str, ...] = ("visual.proj", "text_projection")
    seed: int = 0
    max_logit_scale: float = 100.0
    #: return the best validation evaluation's weights (early stopping); ``False``: the last iteration's
    restore_best: bool = True
    #: learning-rate schedule, warm-up iterations, ``"fp32"`` or ``"amp"`` (autocast on CUDA):
    #: :class:`neural.recipes.Recipe`
    schedule: str = "constant"
    warmup_steps: int = 0
    precision: str = "fp32"

    @classmethod
    def from_recipe(cls, recipe: Recipe, **overrides) -> "PACSFinetuneConfig":
        """The config of a PAC-S :class:`~neural.recipes.Recipe` (batch, lr, weight decay, iteration cap,
        validation interval, patience, trainable parameters, schedule, precision); ``overrides`` (e.g.
        ``seed``) replace single fields."""
        fields = {**recipe.optimiser_fields("PAC-S"), "max_iters": recipe.steps}
        fields.update({k: v for k, v in (("eval_every", recipe.eval_every), ("patience", recipe.patience),
                                          ("trainable", recipe.trainable)) if v is not None})
        return cls(**{**fields, **overrides})


_PROJ_NAMES = {"visual.proj", "text_projection", "logit_scale"}


class _Encoders:
    """Encodes tuples either fully (any trainable set) or through cached pre-projection features."""

    def __init__(self, backbone: Backbone, model: torch.nn.Module, fast: bool):
        self.bb, self.model, self.fast = backbone, model, fast
        self.dev = backbone.device

    def prepare_images(self, images) -> torch.Tensor:
        x = torch.cat([self.bb.preprocess_images(images[s:s + 64]) for s in range(0, len(images), 64)])
        if not self.fast:
            return x
        m = self.model
        proj = m.visual.proj
        m.visual.proj = None
        try:
            with torch.no_grad():
                return torch.cat([m.encode_image(x[s:s + 256].to(self.dev)).float().cpu()
                                  for s in range(0, len(x), 256)])
        finally:
            m.visual.proj = proj

    def prepare_texts(self, texts) -> torch.Tensor:
        tok = self.bb.tokenize(texts)
        if not self.fast:
            return tok
        m = self.model
        proj = m.text_projection
        m.text_projection = None
        try:
            with torch.no_grad():
                return torch.cat([encode_text_bucketed(m, tok[s:s + 512].to(self.dev)).float().cpu()
                                  for s in range(0, len(tok), 512)])
        finally:
            m.text_projection = proj

    def image(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dev)
        f = x @ self.model.visual.proj.float() if self.fast else self.model.encode_image(x).float()
        return F.normalize(f, dim=-1)

    def text(self, x: torch.Tensor) -> torch.Tensor:
        x = x.to(self.dev)
        f = x @ self.model.text_projection.float() if self.fast else encode_text_bucketed(self.model, x).float()
        return F.normalize(f, dim=-1)


def _epoch_loss(enc, data, idx_batches, cfg, opt=None, amp: MixedPrecision | None = None, sched=None) -> float:
    amp = amp or MixedPrecision("cpu")
    tot, n = 0.0, 0
    for idx in idx_batches:
        if len(idx) < 2:
            continue
        with amp.autocast():
            v = enc.image(data["v"][idx])
            t = enc.text(data["t"][idx])
            vg = enc.image(data["vg"][idx])
            tg = enc.text(data["tg"][idx])
            loss, _ = pacs_loss(v, t, vg, tg, enc.model.logit_scale, cfg.lambda_v, cfg.lambda_t)
        if opt is not None:
            amp.step(loss, opt, sched)
            with torch.no_grad():
                enc.model.logit_scale.clamp_(0, math.log(cfg.max_logit_scale))
        tot += float(loss.detach()) * len(idx)
        n += len(idx)
    return tot / max(n, 1)


def finetune_pacs(backbone: Backbone, train: PositiveTuples, val: PositiveTuples,
                  config: PACSFinetuneConfig | None = None, *, cache=None, show_progress: bool = True,
                  **overrides) -> Backbone:
    """Positive-augmented contrastive fine-tuning (Eq. 2–3) of a copy of ``backbone``.

    Parameters
    ----------
    backbone : Backbone
        Starting CLIP (not modified).  Its ``logit_scale`` is the temperature (and its start, when
        ``logit_scale`` is made trainable).
    train, val : PositiveTuples
        Training and validation tuples ``(v, t, v', t')``.
    config : PACSFinetuneConfig or Recipe
        A PAC-S :class:`~neural.recipes.Recipe` (``pacs-small``, ``pacs-paper``) or its config: λ_v, λ_t,
        AdamW lr / weight decay, batch size, iterations, early-stopping patience (iterations), the names of
        the trainable parameters (default: the two final projections).  Keyword
        ``overrides`` replace single fields.
    cache : DiskCache, optional
        Stores the fine-tuned trainable parameters (key: backbone weights, tuple identities, config).

    Returns
    -------
    Backbone
        The fine-tuned backbone (``name`` gets a ``+PAC-S`` suffix, new ``weights_id``);
        ``.training`` holds the history (``"history"``: at iteration 0 and every ``eval_every``
        iterations, the mean training loss since the last evaluation and the validation loss), the best
        iteration, whether the cache was hit, the config and the tuples' identities (``"data"``);
        ``.parent`` is ``backbone`` (:func:`neural.saved.save_scorer` saves the difference).
    """
    cfg = config or PACSFinetuneConfig()
    if isinstance(cfg, Recipe):
        cfg = PACSFinetuneConfig.from_recipe(cfg)
    if overrides:
        cfg = PACSFinetuneConfig(**{**asdict(cfg), **overrides})
    model, fast = _trainable_copy(backbone, cfg)
    cache = cache if cache is not None else NO_CACHE
    key = None
    if train.identity is not None and val.identity is not None:
        key = {"what": "pacs-finetune", "schedule": "iterations", "backbone": backbone.cache_identity(),
               "train": train.identity,
               "val": val.identity, "config": asdict(cfg)}
    info: dict = {"cache_hit": True}

    def compute_deterministic():
        with deterministic():       # deterministic algorithms, as the other fine-tunes (same seed, same weights)
            arrays, fresh = _train_pacs(backbone, model, fast, train, val, cfg, show_progress)
        info.update(fresh)
        return arrays

    arrays = (cache.get_or_compute("pacs_finetune", key, compute_deterministic) if key is not None
              else compute_deterministic())
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "param::" + n in arrays:
                p.copy_(torch.from_numpy(np.array(arrays["param::" + n])))
            p.requires_grad_(False)
    if "history" not in info:
        h = arrays["history"]
        info["history"] = [{"iteration": int(e), "train_loss": float(a), "val_loss": float(b)} for e, a, b in h]
        info["best_iteration"] = int(arrays["best_iteration"])
        info["final_train_loss"] = float(arrays["final_train_loss"])
    info["config"] = asdict(cfg)
    info["data"] = {"train": train.identity, "val": val.identity, "n_train": len(train), "n_val": len(val)}
    out = backbone_from_model(model, backbone.preprocess, backbone.tokenizer,
                              name=f"{backbone.name}+PAC-S", arch=backbone.arch,
                              source=f"{backbone.source}; PAC-S positive-augmented fine-tuning",
                              device=backbone.device, precision=backbone.precision,
                              show_progress=backbone.show_progress)
    out.training = info  # type: ignore[attr-defined]
    out.parent = backbone  # type: ignore[attr-defined]  (what neural.saved records and saves the delta from)
    return out


def _trainable_copy(backbone: Backbone, cfg: PACSFinetuneConfig) -> tuple[torch.nn.Module, bool]:
    """:func:`finetune_pacs`, step 1: an fp32 copy of the backbone's model with only ``cfg.trainable``
    requiring gradients, and whether the fast path applies (only the projections and perhaps the
    temperature train, so the frozen towers' pre-projection features can be computed once)."""
    model = copy.deepcopy(backbone.model).float()
    names = dict(model.named_parameters())
    unknown = [n for n in cfg.trainable if n not in names]
    if unknown:
        raise ValueError(f"trainable parameter(s) {unknown} not in the model (e.g. {list(names)[:4]} …)")
    for n, p in names.items():
        p.requires_grad_(n in cfg.trainable)
    fast = set(cfg.trainable) <= _PROJ_NAMES and isinstance(getattr(model, "text_projection", None),
                                                            torch.nn.Parameter) \
        and isinstance(getattr(model.visual, "proj", None), torch.nn.Parameter)
    return model, fast


def _trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Copies of the parameters that train."""
    return {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}


def _batches(n: int, B: int) -> list[torch.Tensor]:
    """Consecutive index batches of size ``B`` over ``n`` items (evaluation order)."""
    return [torch.arange(s, min(s + B, n)) for s in range(0, n, B)]


def _train_pacs(backbone: Backbone, model: torch.nn.Module, fast: bool, train: PositiveTuples,
                val: PositiveTuples, cfg: PACSFinetuneConfig, show_progress: bool) -> tuple[dict, dict]:
    """:func:`finetune_pacs`, step 2: the training run.  Returns the cache arrays (the returned
    trainable parameters, the history, the best iteration and the final training loss) and the run's
    ``training`` entries."""
    t0 = time.perf_counter()
    enc = _Encoders(backbone, model, fast)
    model.eval()  # no dropout; frozen towers behave as at scoring time
    data = {}
    for split, tup in (("train", train), ("val", val)):
        data[split] = {"v": enc.prepare_images(tup.images), "t": enc.prepare_texts(tup.texts),
                       "vg": enc.prepare_images(tup.gen_images), "tg": enc.prepare_texts(list(tup.gen_texts))}
    history, best, best_it, best_state = _early_stopping(enc, data, model, len(train), len(val), cfg,
                                                         show_progress)
    if not cfg.restore_best:
        best_it = history[-1]["iteration"]
        best_state = _trainable_state(model)
    with torch.no_grad():  # the objective on the training tuples with the returned weights
        current = _trainable_state(model)
        for n, p in model.named_parameters():
            if n in best_state:
                p.copy_(best_state[n])
        final_train = _epoch_loss(enc, data["train"], _batches(len(train), cfg.batch_size), cfg)
        for n, p in model.named_parameters():
            if n in current:
                p.copy_(current[n])
    fresh = {"final_train_loss": final_train, "cache_hit": False, "history": history, "best_iteration": best_it,
             "best_val_loss": best, "seconds": time.perf_counter() - t0, "fast_path": fast}
    arrays = {"param::" + n: v.cpu().numpy() for n, v in best_state.items()}
    arrays["history"] = np.array([[h["iteration"], h["train_loss"], h["val_loss"]] for h in history],
                                 np.float64)
    arrays["best_iteration"] = np.array(best_it)
    arrays["final_train_loss"] = np.array(final_train)
    return arrays, fresh


def _train_batches(n_train: int, B: int, gen: torch.Generator):
    """Endless seeded shuffles of ``range(n_train)`` cut into batches of ``B`` (the last of an epoch may
    be smaller; a batch never spans two epochs)."""
    while True:
        perm = torch.randperm(n_train, generator=gen)
        yield from (perm[s:s + B] for s in range(0, n_train, B))


def _early_stopping(enc, data, model: torch.nn.Module, n_train: int, n_val: int, cfg: PACSFinetuneConfig,
                    show_progress: bool):
    """:func:`finetune_pacs`, the iterations (Sec. 4.1): AdamW on batches of ``cfg.batch_size`` training
    tuples, the validation loss every ``cfg.eval_every`` iterations, stopping once ``cfg.patience``
    iterations have passed without improvement or at ``cfg.max_iters``.  Returns ``(history, best
    validation loss, best iteration, its trainable parameters)``; iteration 0 is the starting point."""
    if cfg.eval_every < 1 or cfg.patience < 1 or cfg.max_iters < 0:
        raise ValueError("PACSFinetuneConfig: eval_every and patience must be ≥ 1, max_iters ≥ 0")
    params = [p for p in model.parameters() if p.requires_grad]
    opt = adamw(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    amp = MixedPrecision(enc.dev, cfg.precision)
    sched = lr_schedule(opt, cfg.schedule, cfg.warmup_steps, cfg.max_iters)
    B = cfg.batch_size
    val_batches = _batches(n_val, B)
    with torch.no_grad():
        v0 = _epoch_loss(enc, data["val"], val_batches, cfg)
        tr0 = _epoch_loss(enc, data["train"], _batches(n_train, B), cfg)
    history = [{"iteration": 0, "train_loss": tr0, "val_loss": v0}]
    best, best_it, best_state = v0, 0, _trainable_state(model)
    batches = _train_batches(n_train, B, torch.Generator().manual_seed(cfg.seed))
    bar = progress(range(1, cfg.max_iters + 1), total=cfg.max_iters, desc="PAC-S fine-tuning",
                   enabled=show_progress)
    run_loss, run_n = 0.0, 0
    for it in bar:
        run_loss += _epoch_loss(enc, data["train"], [next(batches)], cfg, opt, amp, sched)
        run_n += 1
        if it % cfg.eval_every and it != cfg.max_iters:
            continue
        with torch.no_grad():
            vl = _epoch_loss(enc, data["val"], val_batches, cfg)
        history.append({"iteration": it, "train_loss": run_loss / run_n, "val_loss": vl})
        run_loss, run_n = 0.0, 0
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(val=f"{vl:.4f}")
        if vl < best - 1e-7:
            best, best_it, best_state = vl, it, _trainable_state(model)
        elif it - best_it >= cfg.patience:
            break
    return history, best, best_it, best_state


__all__ = ["PACS_W", "PACScore", "RefPACScore", "PositiveTuples", "teaching_tuples", "load_tuples",
           "pacs_loss", "PACSFinetuneConfig", "finetune_pacs"]
