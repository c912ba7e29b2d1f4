"""The teaching CLIP: a compact open_clip CLIP pretrained on a large generated stream and used zero-shot.

The real CLIP (Radford et al. 2021) is pretrained on a huge web corpus and then applied zero-shot to
Flickr8k.  The teaching CLIP does the same in the teaching world: it is pretrained on hundreds of
thousands of generated (image, caption) pairs drawn from seeds no evaluation corpus uses
(:mod:`neural.teaching_stream`; :data:`corpora.teaching.PRETRAIN_SEEDS`), shipped in the package as fp16
safetensors (:data:`WEIGHTS_FILE`, ≤ 10 MB) and never sees the evaluated corpus' training split — so KCCA
(trained in-domain) and CLIP (pretrained elsewhere) are compared as in the papers.  The model card is
``docs/teaching_clip.md``.

Architecture ``itr-teaching-clip`` (:data:`neural.architectures.CUSTOM_MODEL_CONFIGS`): an open_clip
``CLIP`` — ViT image tower (96 px, 12 px patches → 8 × 8 grid, width 128, 6 layers), causal text
transformer (width 128, 4 layers, context 32) with open_clip's BPE tokenizer and full 49,408-token
vocabulary, whose token embedding is factorised as in L-CLIPScore's student,
:math:`E = A B` with :math:`A \\in \\mathbb{R}^{49408 \\times 32}`, :math:`B \\in \\mathbb{R}^{32 \\times 128}`
(:class:`neural.architectures.FactorizedTokenEmbedding`); 128-d joint space; 3.67 M parameters.

Objective and optimiser: CLIP's symmetric InfoNCE with a learnable temperature
(:func:`neural.losses.info_nce`),

.. math:: \\mathcal{L} = -\\tfrac{1}{2B}\\sum_i \\Big[\\log\\frac{e^{s\\cos(v_i,t_i)}}{\\sum_j e^{s\\cos(v_i,t_j)}}
          + \\log\\frac{e^{s\\cos(t_i,v_i)}}{\\sum_j e^{s\\cos(t_i,v_j)}}\\Big], \\qquad s = e^{\\text{logit\\_scale}} \\le 100,

AdamW (β = 0.9, 0.98, ε = 1e-6; decoupled weight decay on matrices only, Loshchilov & Hutter 2019),
linear warm-up then cosine decay to 0.  Deterministic: seeded initialisation, seeded stream, and
``torch.use_deterministic_algorithms`` (:func:`neural.training.deterministic`).

Checkpoints (:func:`pretrain`): ``checkpoint.safetensors`` (model, AdamW moments) and
``checkpoint.json`` (step, configuration, optimiser hyper-parameters, the safetensors' SHA-256), each
written to a temporary file and renamed; a run restarted on the same ``--out`` continues from the last
one and reproduces the uninterrupted run.  ``log.json``: the loss of every step and the zero-shot R@k
of both tasks on the held-out pool every ``eval_every`` steps.

Shipping (:func:`export_weights`, :func:`load_teaching_clip`): the weights in fp16 with safetensors
metadata (architecture, generator and stream versions, seed ranges, pairs, steps), and a record
``<name>.json`` beside them holding the file's SHA-256 and the model card's figures.  The loader checks
the SHA-256 and stops with one :class:`TeachingCLIPError` naming the file and :data:`REBUILD_COMMAND`
when it is missing or damaged (nothing is trained instead); weights pretrained with another generator
version load with a :class:`GeneratorVersionWarning` naming the command.
"""
from __future__ import annotations

import json
import math
import os
import platform
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file

from corpora.jsondata import write_json_atomic
from corpora.teaching import GENERATOR_VERSION, HELDOUT_SEEDS, PRETRAIN_SEEDS
from neural.architectures import CUSTOM_MODEL_CONFIGS, create_architecture
from neural.backbone import Backbone, backbone_from_model
from neural.checkpoints import MissingWeightsError, file_sha256, save_safetensors_atomic
from neural.losses import info_nce
from neural.names import TEACHING_REBUILD_COMMAND, TEACHING_WEIGHTS_FILE, teaching_weights_problem
from neural.teaching_stream import STREAM_VERSION, HeldOutPool, StreamSpec, TeachingStream, encode_batch
from neural.train_checkpoint import CHECKPOINT_FILES, RECORD_FILE, read_checkpoint, restore_optimizer, save_checkpoint
from neural.training import adamw, deterministic, progress, tick
from neural.weights_check import safetensors_problem

__all__ = [
    "TEACHING_ARCH", "WEIGHTS_FILE", "REBUILD_COMMAND", "MAX_WEIGHTS_BYTES", "PretrainConfig", "TeachingCLIPError",
    "GeneratorVersionWarning", "pretrain", "export_weights", "load_teaching_clip",
    "weights_record_path", "RUN_FILES",
    "parameter_count", "fp16_file_bytes", "param_groups", "lr_at", "CARD_POOL_IMAGES", "cpu_name", "card_table",
]

TEACHING_ARCH = "itr-teaching-clip"
WEIGHTS_FILE = TEACHING_WEIGHTS_FILE
REBUILD_COMMAND = TEACHING_REBUILD_COMMAND
MAX_WEIGHTS_BYTES = 10_000_000
#: Sizes of the held-out pools whose figures the record keeps: the full one (as the default test pool)
#: and a small one that the test suite recomputes quickly.
CARD_POOL_IMAGES = (300, 60)
#: The files :func:`pretrain` keeps in its run folder (the resumable checkpoint, its record, the log).
RUN_FILES = CHECKPOINT_FILES


class TeachingCLIPError(MissingWeightsError):
    """The shipped teaching-CLIP weights are missing or damaged (the message names the rebuild command)."""


class GeneratorVersionWarning(UserWarning):
    """The teaching CLIP was pretrained on another version of the teaching-world generator."""


@dataclass(frozen=True)
class PretrainConfig:
    """The pretraining recipe (every field is recorded in the checkpoint, the log and the weights)."""

    n_pairs: int = 400_000
    steps: int | None = None
    batch_size: int = 128
    lr: float = 1e-3
    warmup: int = 150
    weight_decay: float = 0.1
    init_temperature: float = 0.07
    max_logit_scale: float = 100.0
    chunk_size: int = 1000
    prompt_rate: float = 0.5
    seed: int = 0
    eval_every: int = 200
    eval_images: int = 300
    checkpoint_every: int = 100
    arch: str = TEACHING_ARCH

    @property
    def stream(self) -> StreamSpec:
        return StreamSpec(chunk_size=self.chunk_size, batch_size=self.batch_size, seed=self.seed,
                          prompt_rate=self.prompt_rate)

    @property
    def total_steps(self) -> int:
        return int(self.steps) if self.steps is not None else self.stream.steps_for_pairs(self.n_pairs)

    def training_fields(self) -> dict:
        """The fields that determine the trained weights (``checkpoint_every`` and the held-out pool
        size only affect monitoring; a resumed run may change them)."""
        d = asdict(self)
        for k in ("eval_every", "eval_images", "checkpoint_every"):
            d.pop(k)
        d["total_steps"] = self.total_steps
        return d


# ------------------------------------------------------------------------------------------ recipe
def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: weight decay on matrices; none on biases, norms, embeddings, the temperature."""
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        if p.ndim < 2 or "ln" in n or "bias" in n or "logit_scale" in n or "embedding" in n:
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_at(step: int, cfg: PretrainConfig) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 0 at ``total_steps``:
    ``η_s = η (s+1)/W`` for ``s < W``, else ``½ η (1 + cos(π (s−W)/(T−W)))``."""
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    t = (step - cfg.warmup) / max(1, cfg.total_steps - cfg.warmup)
    return 0.5 * cfg.lr * (1.0 + math.cos(math.pi * min(1.0, t)))


def parameter_count(arch: str = TEACHING_ARCH) -> int:
    """Number of stored values of an architecture's state dict (what the weights file holds)."""
    model = create_architecture(arch)[0]
    return sum(v.numel() for v in model.state_dict().values())


def fp16_file_bytes(arch: str = TEACHING_ARCH) -> int:
    """Size of the fp16 weights of ``arch`` in bytes (2 per value; the safetensors header adds a few KB)."""
    return 2 * parameter_count(arch)


# ------------------------------------------------------------------------------------------ files
# ------------------------------------------------------------------------------------------ checkpoints
def _resume(out: Path, model: torch.nn.Module, opt: torch.optim.Optimizer, cfg: PretrainConfig) -> tuple[int, dict | None]:
    """Load the checkpoint in ``out`` if there is one (:mod:`neural.train_checkpoint`): ``(step, log)``;
    ``(0, None)`` otherwise.  A checkpoint of another recipe, or one whose tensors do not match its record,
    is an error."""
    ckpt = read_checkpoint(out, cfg.training_fields())
    if ckpt is None:
        return 0, None
    model.load_state_dict(ckpt.model_state())
    restore_optimizer(opt, ckpt)
    return ckpt.step, ckpt.log


# ------------------------------------------------------------------------------------------ training
def _new_model(cfg: PretrainConfig):
    torch.manual_seed(cfg.seed)
    model, preprocess, tokenizer = create_architecture(cfg.arch)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(1.0 / cfg.init_temperature))
    opt = adamw(param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6)
    return model, preprocess, tokenizer, opt


def _fresh_log(cfg: PretrainConfig) -> dict:
    return {"config": cfg.training_fields(), "arch": cfg.arch, "arch_config": CUSTOM_MODEL_CONFIGS.get(cfg.arch),
            "generator_version": GENERATOR_VERSION, "stream_version": STREAM_VERSION,
            "pretrain_seeds": [PRETRAIN_SEEDS.start, PRETRAIN_SEEDS.start + cfg.stream.locate(
                max(0, cfg.total_steps - 1))[0] + 1],
            "heldout_seed": HELDOUT_SEEDS.start, "torch": torch.__version__,
            "loss": [], "eval": [], "segments": []}


def _train_step(model, opt, cfg: PretrainConfig, stream: TeachingStream, tokenizer, step: int) -> torch.Tensor:
    images, texts = stream.batch(step)
    for g in opt.param_groups:
        g["lr"] = lr_at(step, cfg)
    v, t = encode_batch(model, images, tokenizer(texts))
    loss = info_nce(v, t, logit_scale=model.logit_scale, max_logit_scale=cfg.max_logit_scale)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    with torch.no_grad():
        model.logit_scale.clamp_(0, math.log(cfg.max_logit_scale))
    return loss


def _evaluate(model, heldout: HeldOutPool | None, cfg: PretrainConfig, step: int, log: dict, t0: float) -> None:
    if heldout is None:
        return
    res = heldout.evaluate(model)
    log["eval"].append({"step": step, "pairs_seen": cfg.stream.pairs_until(step), "pool_images": heldout.n_images,
                        "seconds": round(time.perf_counter() - t0, 1), **res})


def pretrain(out_dir: str | Path, cfg: PretrainConfig | None = None, *, resume: bool = True,
             num_threads: int | None = 2, show_progress: bool = True, stop_at: int | None = None):
    """Pretrain the teaching CLIP on the generated stream (module docstring), checkpointing in ``out_dir``.

    Parameters
    ----------
    out_dir : path
        Holds ``checkpoint.safetensors``, ``checkpoint.json`` and ``log.json``.
    cfg : PretrainConfig
    resume : bool
        Continue from the checkpoint in ``out_dir`` (same recipe required); ``False`` refuses to
        overwrite one.
    num_threads : int, optional
        torch CPU threads (part of bit-exact reproducibility).
    stop_at : int, optional
        Stop (with a checkpoint) after this step instead of ``cfg.total_steps`` (an interruption).

    Returns
    -------
    model : open_clip CLIP
        The model after the last step run (eval mode).
    log : dict
        Also in ``log.json``: ``loss`` (``[step, loss, unix time]`` per step), ``eval`` (held-out R@k of
        both tasks with the step and pairs seen), ``segments`` (wall time and pairs of every call).
    """
    cfg = cfg or PretrainConfig()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not resume and (out / RECORD_FILE).exists():
        raise FileExistsError(f"{out} already holds a checkpoint: resume it, or choose another directory")
    model, preprocess, tokenizer, opt = _new_model(cfg)
    start, log = _resume(out, model, opt, cfg)
    log = log or _fresh_log(cfg)
    log["loss"] = [e for e in log["loss"] if e[0] < start]
    log["eval"] = [e for e in log["eval"] if e["step"] <= start]
    end = min(cfg.total_steps, stop_at if stop_at is not None else cfg.total_steps)
    stream = TeachingStream(cfg.stream, preprocess)
    heldout = HeldOutPool(cfg.eval_images, preprocess, tokenizer) if cfg.eval_every else None
    t0 = time.perf_counter()
    bar = progress(total=cfg.total_steps, desc="teaching CLIP: pretrain", enabled=show_progress)
    if bar is not None:
        bar.update(start)
    with deterministic(num_threads):
        if start == 0:
            _evaluate(model, heldout, cfg, 0, log, t0)
        model.train()
        for step in range(start, end):
            loss = _train_step(model, opt, cfg, stream, tokenizer, step)
            tick(bar, None, "pretrain", step, loss)
            log["loss"].append([step, round(float(loss.detach()), 5), round(time.time(), 2)])
            done = step + 1
            if cfg.eval_every and (done % cfg.eval_every == 0 or done == cfg.total_steps):
                _evaluate(model, heldout, cfg, done, log, t0)
            if done % cfg.checkpoint_every == 0 or done == end:
                if done == end:
                    log["segments"].append(_segment(cfg, start, end, t0, num_threads))
                save_checkpoint(out, model, opt, done, cfg.training_fields(), log)
    if bar is not None:
        bar.close()
    return model.eval(), log


def _segment(cfg: PretrainConfig, start: int, end: int, t0: float, num_threads: int | None) -> dict:
    secs = time.perf_counter() - t0
    pairs = cfg.stream.pairs_until(end) - cfg.stream.pairs_until(start)
    return {"start_step": start, "end_step": end, "seconds": round(secs, 2), "pairs": pairs,
            "pairs_per_s": round(pairs / max(secs, 1e-9), 2), "steps_per_s": round((end - start) / max(secs, 1e-9), 4),
            "threads": num_threads, "cpu_count": os.cpu_count(), "cpu": cpu_name(), "platform": platform.platform()}


def cpu_name() -> str:
    """The processor's model name (``/proc/cpuinfo`` on Linux, else :func:`platform.processor`)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ------------------------------------------------------------------------------------------ shipping
def weights_record_path(path: str | Path) -> Path:
    """The record (SHA-256, card figures) of a weights file: ``<name>.json`` beside ``<name>.safetensors``."""
    p = Path(path)
    return p.with_suffix(".json")


def _metadata(cfg: PretrainConfig, steps: int) -> dict[str, str]:
    last_chunk = cfg.stream.locate(max(0, steps - 1))[0]
    return {"arch": cfg.arch, "arch_config": json.dumps(CUSTOM_MODEL_CONFIGS[cfg.arch], sort_keys=True),
            "generator_version": str(GENERATOR_VERSION), "stream_version": str(STREAM_VERSION),
            "pretrain_seeds": f"[{PRETRAIN_SEEDS.start}, {PRETRAIN_SEEDS.start + last_chunk + 1})",
            "heldout_seed": str(HELDOUT_SEEDS.start), "steps": str(steps),
            "pairs": str(cfg.stream.pairs_until(steps)), "images": str((last_chunk + 1) * cfg.chunk_size),
            "recipe": json.dumps(cfg.training_fields(), sort_keys=True), "torch": torch.__version__}


def export_weights(model: torch.nn.Module, path: str | Path, cfg: PretrainConfig, steps: int, *,
                   log: dict | None = None, pools=CARD_POOL_IMAGES, show_progress: bool = True) -> dict:
    """Write the fp16 weights to ``path`` (safetensors whose metadata records the architecture, generator
    and stream versions, seed ranges, steps and pairs) and the record :func:`weights_record_path`:
    SHA-256, size, metadata, the held-out figures of the loaded (fp16 → fp32) weights on held-out pools
    of ``pools`` images (:data:`CARD_POOL_IMAGES`), the last logged evaluation and the rebuild command.
    Returns the record."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    meta = _metadata(cfg, steps)
    save_safetensors_atomic(p, {k: v.half() for k, v in model.state_dict().items()}, metadata=meta)
    size = p.stat().st_size
    if size > MAX_WEIGHTS_BYTES:
        raise ValueError(f"{p}: {size} bytes, more than the {MAX_WEIGHTS_BYTES} the package may ship")
    record = {"file": p.name, "sha256": file_sha256(p), "bytes": size, "metadata": meta,
              "rebuild_command": REBUILD_COMMAND}
    write_json_atomic(weights_record_path(p), record)   # the loader below needs it
    bb = load_teaching_clip(p, show_progress=show_progress)
    record["heldout"] = {str(n): HeldOutPool(n, bb.preprocess, bb.tokenizer).evaluate(bb.model)
                         for n in pools}
    if log and log.get("eval"):
        record["last_logged_eval"] = {k: v for k, v in log["eval"][-1].items()}
    if log and log.get("segments"):
        record["training_segments"] = log["segments"]
    write_json_atomic(weights_record_path(p), record)
    return record


def _missing(path: Path, why: str) -> TeachingCLIPError:
    return TeachingCLIPError(f"teaching CLIP weights {path}: {why}; rebuild them with: {REBUILD_COMMAND}")


def _verified_metadata(p: Path) -> dict[str, str]:
    """The file's safetensors metadata after checking it against its record's SHA-256 (one
    :class:`TeachingCLIPError` naming the file and :data:`REBUILD_COMMAND` otherwise)."""
    problem = teaching_weights_problem(p)
    if problem is not None:
        raise TeachingCLIPError(problem)
    content = safetensors_problem(p)   # a matching record does not make a file usable weights
    if content is not None:
        raise _missing(p, content)
    with safe_open(str(p), framework="pt") as f:
        return dict(f.metadata() or {})


def load_teaching_clip(path: str | Path | None = None, *, device: str = "auto",
                       show_progress: bool = True) -> Backbone:
    """The pretrained teaching CLIP as a :class:`~neural.backbone.Backbone` (fp32), after checking the file.

    Parameters
    ----------
    path : path, optional
        Weights file (default: the shipped :data:`WEIGHTS_FILE`); its record ``<name>.json`` must be
        beside it.
    device : str
        ``"auto"``, ``"cpu"``, ``"cuda"`` …

    Raises
    ------
    TeachingCLIPError
        The file or its record is missing, the file's SHA-256 is not the recorded one, it is not a
        complete safetensors file, holds non-floating weights or NaN / infinite values
        (:func:`neural.weights_check.safetensors_problem`), or its tensors do not fit the architecture;
        the message names the file and :data:`REBUILD_COMMAND`.  Nothing is trained in its place.

    Warns
    -----
    GeneratorVersionWarning
        The weights were pretrained on another generator version than :data:`corpora.teaching.GENERATOR_VERSION`.
    """
    p = Path(path) if path is not None else WEIGHTS_FILE
    meta = _verified_metadata(p)
    arch = meta.get("arch", TEACHING_ARCH)
    if arch not in CUSTOM_MODEL_CONFIGS or meta.get("arch_config") != json.dumps(CUSTOM_MODEL_CONFIGS[arch], sort_keys=True):
        raise _missing(p, f"built for another definition of architecture {arch!r}")
    if meta.get("generator_version") != str(GENERATOR_VERSION):
        warnings.warn(f"teaching CLIP {p.name} was pretrained on teaching-world generator version "
                      f"{meta.get('generator_version')}, this corpus generator is version {GENERATOR_VERSION}: "
                      f"its zero-shot figures no longer describe this data; re-pretrain with: {REBUILD_COMMAND}",
                      GeneratorVersionWarning, stacklevel=2)
    model, preprocess, tokenizer = create_architecture(arch)
    sd = load_file(str(p))
    try:
        model.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    except RuntimeError as exc:   # missing / unexpected keys, other shapes: torch's message, first lines
        raise _missing(p, "does not fit the architecture (" + " ".join(str(exc).split())[:300] + ")") from None
    bb = backbone_from_model(model, preprocess, tokenizer, name="teaching-clip", arch=arch,
                             source=f"pretrained teaching CLIP {p} ({meta.get('pairs')} generated pairs, "
                             f"{meta.get('steps')} steps, generator v{meta.get('generator_version')})",
                             device=device, show_progress=show_progress)
    bb.card = meta  # type: ignore[attr-defined]
    bb.teaching_weights_file = p.resolve()  # type: ignore[attr-defined]
    return bb


def card_table(record: dict) -> str:
    """The model card's figures (``docs/teaching_clip.md``) as Markdown rows, from an export record."""
    meta = record["metadata"]
    segs = record.get("training_segments", [])
    secs = sum(s["seconds"] for s in segs)
    rows = [("hardware", "; ".join(sorted({f"{s.get('cpu', '?')}, {s.get('threads')} threads" for s in segs})) or "?"),
            ("wall time", f"{secs / 60:.1f} min over {len(segs)} call(s)"),
            ("steps / pairs / images", f"{meta['steps']} / {meta['pairs']} / {meta['images']}"),
            ("pretraining seeds", meta["pretrain_seeds"])]
    for n, figs in sorted(record.get("heldout", {}).items(), key=lambda kv: -int(kv[0])):
        for task in ("annotation", "search"):
            r = figs[task]
            rows.append((f"held-out ({n} images) {task} R@1 / R@5 / R@10",
                         f"{r['R@1']:.1f} / {r['R@5']:.1f} / {r['R@10']:.1f} %"))
    rows += [("file size", f"{record['bytes']} bytes"), ("SHA-256", f"`{record['sha256']}`")]
    return "\n".join(f"| {k} | {v} |" for k, v in rows)
