"""A small CLIP trained here, on CPU, on a corpus' training split — the offline default backbone.

No CLIP weights exist on an offline machine, so every neural scorer of the toolkit defaults to this
model.  It is an honest, small CLIP (Radford et al. 2021):

* architecture ``itr-tiny-clip`` (:data:`neural.architectures.CUSTOM_MODEL_CONFIGS`), a standard open_clip
  ``CLIP``: ViT image tower (48 px input, 8 px patches, i.e. a 6 × 6 grid, width 128, 4 layers), a causal text transformer (3 layers,
  width 128, context 32, open_clip's ``SimpleTokenizer`` BPE vocabulary), 128-d joint space;
* objective: CLIP's symmetric InfoNCE with a learnable temperature (:func:`neural.losses.info_nce`),

  .. math:: \\mathcal{L} = \\tfrac12\\Big[-\\tfrac1B\\sum_i \\log\\frac{e^{s\\,\\cos(v_i,t_i)}}{\\sum_j e^{s\\,\\cos(v_i,t_j)}}
            -\\tfrac1B\\sum_i \\log\\frac{e^{s\\,\\cos(t_i,v_i)}}{\\sum_j e^{s\\,\\cos(t_i,v_j)}}\\Big],
            \\quad s = \\exp(\\text{logit\\_scale}) \\le 100;

  each batch holds ``batch_size`` distinct training images with one of their captions drawn at random;
* AdamW (β = 0.9, 0.98; weight decay on matrices only), linear warm-up then cosine decay;
* deterministic: seeded initialisation and sampling, ``torch.use_deterministic_algorithms`` during
  training (bit-identical reruns on the same machine, torch version and thread count);
* cached: the trained state dict is stored in the :class:`~corpora.cache.DiskCache` (namespace
  ``"tiny_clip"``) under a key made of the corpus fingerprint, the split and every hyper-parameter;
  ``weights_id`` is the SHA-256 prefix of the trained state dict.

The default recipe (56 steps of 96 images) keeps training to about 15 s on two CPU cores.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from corpora.cache import NO_CACHE
from corpora.scoring import gold_ranks, rank_metrics
from neural.architectures import CUSTOM_MODEL_CONFIGS, create_architecture
from neural.backbone import Backbone, backbone_from_model, to_pil
from neural.losses import info_nce
from neural.training import adamw, deterministic, progress

TINY_ARCH = "itr-tiny-clip"


@dataclass(frozen=True)
class TinyCLIPConfig:
    """Hyper-parameters of :func:`train_tiny_clip` (all part of the cache key)."""

    steps: int = 56
    batch_size: int = 96
    lr: float = 1e-3
    warmup: int = 6
    weight_decay: float = 0.1
    init_temperature: float = 0.07
    max_logit_scale: float = 100.0
    split: str = "train"
    arch: str = TINY_ARCH


def _param_groups(model: torch.nn.Module, weight_decay: float):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim < 2 or "bn" in n or "ln" in n or "bias" in n or "logit_scale" in n or "embedding" in n \
                or n.endswith("class_embedding"):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def _lr_at(step: int, cfg: TinyCLIPConfig) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return 0.5 * cfg.lr * (1.0 + math.cos(math.pi * t))


def _training_data(corpus, split: str, preprocess, tokenizer, show_progress: bool):
    ids = list(corpus.split(split))
    if not ids:
        raise ValueError(f"split {split!r} of corpus {corpus.name!r} is empty")
    missing = corpus.missing_images(ids)
    if missing:
        raise FileNotFoundError(f"tiny CLIP training needs the images of split {split!r}: {len(missing)} "
                                f"missing (first: {missing[:3]})")
    it = progress(ids, total=len(ids), desc="tiny CLIP: preprocess images", enabled=show_progress and len(ids) > 300)
    X = torch.stack([preprocess(to_pil(corpus.load_image(i))) for i in it])
    texts, owner = [], []
    for k, i in enumerate(ids):
        caps = corpus.captions_of(i)
        if not caps:
            raise ValueError(f"image {i!r} of split {split!r} has no captions")
        texts.extend(c.text for c in caps)
        owner.extend([k] * len(caps))
    T = tokenizer(texts)
    owner_t = torch.tensor(owner)
    starts = torch.zeros(len(ids) + 1, dtype=torch.long)
    starts[1:] = torch.cumsum(torch.bincount(owner_t, minlength=len(ids)), 0)
    return ids, X, T, starts


def _train(corpus, cfg: TinyCLIPConfig, seed: int, show_progress: bool, num_threads: int | None):
    torch.manual_seed(seed)
    model, preprocess, tokenizer = create_architecture(cfg.arch)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(1.0 / cfg.init_temperature))
    ids, X, T, starts = _training_data(corpus, cfg.split, preprocess, tokenizer, show_progress)
    n = len(ids)
    B = min(cfg.batch_size, n)
    gen = torch.Generator().manual_seed(seed)
    opt = adamw(_param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)
    model.train()
    losses = []
    perm, pos = torch.randperm(n, generator=gen), 0
    bar = progress(range(cfg.steps), total=cfg.steps, desc="tiny CLIP: train", enabled=show_progress)
    with deterministic(num_threads):
        for step in bar:
            if pos + B > n:
                perm, pos = torch.randperm(n, generator=gen), 0
            idx = perm[pos:pos + B]
            pos += B
            counts = starts[idx + 1] - starts[idx]
            pick = starts[idx] + (torch.rand(B, generator=gen) * counts).long().clamp(max=counts - 1)
            for g in opt.param_groups:
                g["lr"] = _lr_at(step, cfg)
            img = F.normalize(model.encode_image(X[idx]), dim=-1)
            txt = F.normalize(model.encode_text(T[pick]), dim=-1)
            loss = info_nce(img, txt, logit_scale=model.logit_scale, max_logit_scale=cfg.max_logit_scale)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            with torch.no_grad():
                model.logit_scale.clamp_(0, math.log(cfg.max_logit_scale))
            losses.append(float(loss.detach()))
            if hasattr(bar, "set_postfix") and step % 5 == 0:
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
    model.eval()
    return model, preprocess, tokenizer, np.asarray(losses, np.float32)


def train_tiny_clip(corpus, *, seed: int = 0, steps: int | None = None, batch_size: int | None = None,
                    cache=None, show_progress: bool = True, num_threads: int | None = None,
                    config: TinyCLIPConfig | None = None, device: str = "auto",
                    **overrides) -> Backbone:
    """Train (or load from the cache) the small CLIP on ``corpus``' training split.

    Parameters
    ----------
    corpus : corpora.base.Corpus
        Usually the teaching set (``corpora.teaching.make_teaching_set``); any corpus with images works.
    seed : int
        Seeds initialisation and batch sampling.
    steps, batch_size : int, optional
        Override :class:`TinyCLIPConfig` defaults (56 steps of 96 images ≈ 15 s on 2 idle cores).
    cache : corpora.cache.DiskCache, optional
        Where the trained weights are stored / found.
    num_threads : int, optional
        torch CPU threads during training (part of reproducibility on CPU).
    config : TinyCLIPConfig, optional
        Full hyper-parameter set; keyword ``overrides`` replace single fields.
    device : str
        Device of the returned backbone (training itself runs on CPU).

    Returns
    -------
    Backbone
        ``name`` ``"tiny-clip(<corpus>, seed=<seed>)"``, ``arch`` ``"itr-tiny-clip"``, ``weights_id`` the
        state-dict hash; ``backbone.training`` holds the loss curve, time and whether the cache was hit.
    """
    cfg = config or TinyCLIPConfig()
    upd = dict(overrides)
    if steps is not None:
        upd["steps"] = int(steps)
    if batch_size is not None:
        upd["batch_size"] = int(batch_size)
    if upd:
        cfg = TinyCLIPConfig(**{**asdict(cfg), **upd})
    cache = cache if cache is not None else NO_CACHE
    key = {"what": "tiny-clip", "corpus": corpus.name, "fingerprint": corpus.fingerprint, "seed": int(seed),
           "images": corpus.images_fingerprint(corpus.split(cfg.split)), "config": asdict(cfg),
           "arch_config": CUSTOM_MODEL_CONFIGS.get(cfg.arch), "torch": torch.__version__}
    info: dict = {"cache_hit": True}

    def compute():
        t0 = time.perf_counter()
        model, _, _, losses = _train(corpus, cfg, seed, show_progress, num_threads)
        info.update(cache_hit=False, train_seconds=time.perf_counter() - t0)
        arrays = {"param::" + k: v.detach().cpu().numpy() for k, v in model.state_dict().items()}
        arrays["losses"] = losses
        return arrays

    arrays = cache.get_or_compute("tiny_clip", key, compute)
    model, preprocess, tokenizer = create_architecture(cfg.arch)
    sd = {k[len("param::"):]: torch.from_numpy(np.array(v)) for k, v in arrays.items() if k.startswith("param::")}
    model.load_state_dict(sd, strict=True)
    bb = backbone_from_model(model, preprocess, tokenizer, name=f"tiny-clip({corpus.name}, seed={seed})",
                             arch=cfg.arch, source=f"trained here on {corpus.name}/{cfg.split} "
                             f"({cfg.steps} steps x {cfg.batch_size}, seed {seed})",
                             device=device, show_progress=show_progress)
    info.update(losses=arrays["losses"].tolist(), config=asdict(cfg), seed=int(seed))
    bb.training = info  # type: ignore[attr-defined]
    return bb


def retrieval_recall(backbone: Backbone, corpus, image_ids: Sequence[str], caption_ids: Sequence[str],
                     gold: Sequence[int], ks=(1, 5, 10), cache=None) -> dict[str, float]:
    """Image-annotation R@k (percent), median and mean rank of a backbone by raw cosine similarity (a
    quick training check that does not need the evaluation package): ``gold[i]`` is the column of image
    ``i``'s own caption.  Ranks and metrics are those of the evaluator (:func:`corpora.scoring.gold_ranks`,
    pessimistic ties; :func:`corpora.scoring.rank_metrics`, Hodosh et al. 2013, Sec. 4.3.1):
    ``R@k = 100 · mean_i [rank_i ≤ k]``."""
    v = backbone.encode_corpus_images(corpus, image_ids, cache=cache)
    t = backbone.encode_texts([corpus.caption(c).text for c in caption_ids]).numpy()
    return rank_metrics(gold_ranks(v @ t.T, np.asarray(gold)), ks)


__all__ = ["TINY_ARCH", "TinyCLIPConfig", "train_tiny_clip", "retrieval_recall"]
