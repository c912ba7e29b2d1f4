"""Trained scorers saved to disk and loaded back bit-identically: PAC-S fine-tunes, L-CLIPScore students,
BRIDGE mapping modules and SPECS fine-tunes.

A saved scorer is a folder of two files:

``scorer.json``
    Plain JSON (:data:`FORMAT`, :data:`FORMAT_VERSION`): the metric, the scorer's own settings (``w``,
    prompt, reference-based or not), the architecture, the recipe (every hyper-parameter of the training
    run), a description of the training data, the **parent** backbone's identity (name, architecture,
    structure hash, preprocessing, tokenizer and the SHA-256 of its state dict,
    :func:`~neural.checkpoints.state_dict_sha256`), the SHA-256 and storage type (fp32, or fp16 to halve
    the file) of the saved tensors and the library versions.
``weights.safetensors``
    The tensors (read with :func:`safetensors.torch.load_file`: nothing is ever unpickled).

What the weights hold, and whether loading needs the parent backbone:

============  ==============================================================  ==============
metric        weights                                                          parent needed
============  ==============================================================  ==============
PAC-S         the **delta**: the state-dict entries that differ from the      yes
              parent (by default the two final projections, Sarto et al.
              2023, Sec. 4.1), applied to a copy of the parent
L-CLIPScore   the whole student (:class:`~neural.lclip.MultiplexedCLIP`)       no
BRIDGE        the mapping module ψ and the L3 head; the caption bank (the      yes (frozen CLIP)
              fallback templates) is in ``scorer.json``
SPECS         the whole long-context fine-tune (every parameter trains and    no
              the positional embedding is stretched)
============  ==============================================================  ==============

A parent given to :func:`load_scorer` is always verified: its state-dict SHA-256 must be the recorded one
(:class:`ScorerFormatError` otherwise, naming ``scorer.json``).  Without a parent, an L-CLIPScore or
SPECS scorer rebuilds the parent's *architecture* (untrained) from the record and checks that its
structure, preprocessing and tokenizer are the recorded ones (a pretrained tag with its own
preprocessing cannot be rebuilt so: pass the parent).  After loading, the SHA-256 of the scorer's whole
state dict is checked against the recorded one, so a loaded scorer gives exactly the saved scorer's
scores (same device and precision).
"""
from __future__ import annotations

import copy
import json
import platform
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from corpora.jsondata import write_json_atomic
from neural.backbone import Backbone, backbone_from_model
from neural.bridge import BRIDGE, BridgeConfig
from neural.checkpoints import WeightsError, save_safetensors_atomic, state_dict_sha256
from neural.lclip import LCLIPScore, MultiplexedCLIP
from neural.pacs import PACScore
from neural.specs import SPECSScore, stretch_backbone

#: The ``"format"`` entry of every ``scorer.json``.
FORMAT = "itr-saved-scorer"
#: Layout version; a file of another version is refused.
FORMAT_VERSION = 1
CONFIG_NAME = "scorer.json"
WEIGHTS_NAME = "weights.safetensors"
#: Storage types of a saved scorer's floating-point tensors (``scorer.json`` ``weights.dtype``).
STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: The metrics that can be saved (the ``"metric"`` entry), and whether loading needs the parent backbone.
SAVED_METRICS = {"PAC-S": True, "L-CLIPScore": False, "BRIDGE": True, "SPECS": False}

__all__ = ["FORMAT", "FORMAT_VERSION", "CONFIG_NAME", "WEIGHTS_NAME", "SAVED_METRICS", "STORAGE_DTYPES",
           "ScorerFormatError", "backbone_record", "save_scorer", "load_scorer", "stored_tensor",
           "rounded_state_sha256", "read_scorer_config", "scorer_identity"]


class ScorerFormatError(WeightsError):
    """A saved scorer cannot be read or does not match (its parent, its recorded hashes); the message
    names the file."""


def _quick_gelu(model: torch.nn.Module) -> bool:
    return any(type(m).__name__ == "QuickGELU" for m in model.modules())


def _structure_record(bb: Backbone) -> dict:
    """The parts of :func:`backbone_record` that do not depend on the weights."""
    return {"structure": bb.model_config_id, "preprocess": repr(bb.preprocess),
            "tokenizer": f"{type(bb.tokenizer).__module__}.{type(bb.tokenizer).__name__}/{int(bb.context_length)}"}


def backbone_record(bb: Backbone) -> dict:
    """The identity of a backbone as a saved scorer records it (its parent's, or its own).

    Returns
    -------
    dict
        ``name``, ``arch``, ``weights_id``, ``state_dict_sha256`` (the full hash of the current weights),
        ``structure`` (:attr:`~neural.backbone.Backbone.model_config_id`), ``quick_gelu``, ``preprocess``
        (its ``repr``), ``tokenizer`` (class and context length), ``context_length``, ``precision`` and
        ``source``.
    """
    return {"name": bb.name, "arch": bb.arch, "weights_id": bb.current_weights_id(),
            "state_dict_sha256": state_dict_sha256(bb.model.state_dict()), **_structure_record(bb),
            "quick_gelu": _quick_gelu(bb.model), "context_length": int(bb.context_length),
            "precision": bb.precision, "source": bb.source}


def scorer_identity(config: Mapping, folder: str | Path | None = None) -> dict:
    """What a report should say about a saved scorer: metric, name, its weights' and its parent's hashes."""
    parent = config.get("parent") or {}
    return {"metric": config.get("metric"), "name": (config.get("scorer") or {}).get("name"),
            "path": None if folder is None else str(folder),
            "format_version": config.get("format_version"),
            "weights_sha256": (config.get("weights") or {}).get("sha256"),
            "backbone_sha256": (config.get("backbone") or {}).get("state_dict_sha256"),
            "parent": {k: parent.get(k) for k in ("name", "arch", "state_dict_sha256")}}


# ============================================================================ save
def save_scorer(scorer, path: str | Path, *, dtype: str = "float32") -> Path:
    """Save a trained scorer to the folder ``path`` (created; ``scorer.json`` + ``weights.safetensors``).

    Parameters
    ----------
    scorer : PACScore, LCLIPScore, SPECSScore or BRIDGE
        As made by :func:`~neural.pacs.finetune_pacs`, :func:`~neural.lclip.train_lclip`,
        :meth:`~neural.bridge.BRIDGE.fit` or :func:`~neural.specs.train_specs` (their backbones record the
        parent they were trained from).
    path : path
        The folder.
    dtype : {"float32", "float16"}
        Storage type of the floating-point tensors.  ``"float16"`` halves the file (the shipped scorers,
        :mod:`neural.shipped_scorers`); the loaded scorer then holds the fp16-rounded values in its own
        dtype, and the recorded state-dict SHA-256 of its backbone is that of the rounded weights, so
        loading still verifies bit-exactly what the file holds.

    Returns
    -------
    Path
        The folder.

    Raises
    ------
    TypeError
        Not one of the savable scorers.
    ValueError
        The scorer's backbone does not record its parent (e.g. PAC-S on a backbone that was never
        fine-tuned here: nothing to save) or BRIDGE was not fitted.
    """
    if isinstance(scorer, BRIDGE):
        metric, tensors, parts = "BRIDGE", *_bridge_parts(scorer)
    elif isinstance(scorer, PACScore):
        metric, tensors, parts = "PAC-S", *_pacs_parts(scorer)
    elif isinstance(scorer, LCLIPScore):
        metric, tensors, parts = "L-CLIPScore", *_lclip_parts(scorer)
    elif isinstance(scorer, SPECSScore):
        metric, tensors, parts = "SPECS", *_specs_parts(scorer)
    else:
        raise TypeError(f"cannot save a {type(scorer).__name__}: saved scorers are PAC-S, L-CLIPScore, BRIDGE "
                        "and SPECS (CLIP-S has no trained weights: its backbone is the whole scorer)")
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"save_scorer: dtype must be one of {sorted(STORAGE_DTYPES)}, got {dtype!r}")
    tensors = {k: stored_tensor(v, dtype) for k, v in tensors.items()}
    if dtype != "float32" and metric != "BRIDGE":   # the backbone holds the rounded values once loaded
        parts["backbone"] = {**parts["backbone"],
                             "state_dict_sha256": rounded_state_sha256(scorer.backbone.model.state_dict(), tensors)}
    import open_clip  # lazy: seconds to import; already loaded with any backbone

    config = {"format": FORMAT, "format_version": FORMAT_VERSION, "metric": metric,
              "needs_parent": SAVED_METRICS[metric], **parts,
              "weights": {"file": WEIGHTS_NAME, "sha256": state_dict_sha256(tensors), "dtype": dtype,
                          "n_tensors": len(tensors),
                          "n_values": int(sum(t.numel() for t in tensors.values()))},
              "versions": {"torch": torch.__version__, "open_clip": getattr(open_clip, "__version__", "unknown"),
                           "numpy": np.__version__, "python": platform.python_version()}}
    folder = Path(path).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    # each file written beside its final name and renamed over it: a killed save leaves whole files
    # (and a scorer.json whose weights hash then refuses a weights file from another save)
    save_safetensors_atomic(folder / WEIGHTS_NAME, tensors)
    write_json_atomic(folder / CONFIG_NAME, config)
    return folder


def stored_tensor(t: torch.Tensor, dtype: str = "float32") -> torch.Tensor:
    """A detached, contiguous CPU copy of ``t``; floating-point tensors in the storage type ``dtype``
    (integer buffers keep their type)."""
    t = t.detach().to("cpu")
    if t.is_floating_point():
        t = t.to(STORAGE_DTYPES[dtype])
    return t.contiguous().clone()


def rounded_state_sha256(state: Mapping[str, torch.Tensor], stored: Mapping[str, torch.Tensor]) -> str:
    """:func:`~neural.checkpoints.state_dict_sha256` of ``state`` with its entries in ``stored`` replaced
    by the stored values cast back to the state's own dtype: the state a model holds after loading
    ``stored`` into it."""
    merged = dict(state)
    for k, v in stored.items():
        if k in merged:
            merged[k] = v.to(merged[k].dtype)
    return state_dict_sha256(merged)


def _parent_of(bb: Backbone, metric: str) -> Backbone:
    parent = getattr(bb, "parent", None)
    if parent is None:
        raise ValueError(f"{metric}: the backbone {bb.name!r} records no parent (it was not trained here by "
                         f"this toolkit's {metric} trainer), so there is no trained scorer to save")
    return parent


def _pacs_parts(scorer: PACScore) -> tuple[dict, dict]:
    bb = scorer.backbone
    parent = _parent_of(bb, "PAC-S")
    psd, sd = parent.model.state_dict(), bb.model.state_dict()
    if set(psd) != set(sd):
        raise ValueError("PAC-S: the fine-tuned model's state dict has other entries than its parent's")
    delta = {k: v for k, v in sd.items()
             if not (v.dtype == psd[k].dtype and v.shape == psd[k].shape and torch.equal(v, psd[k]))}
    training = getattr(bb, "training", {}) or {}
    return delta, {
        "scorer": {"name": scorer.name, "w": scorer.w, "prompt": scorer.prompt,
                   "reference_based": scorer.reference_based},
        "architecture": {"kind": "CLIP fine-tune (delta: the entries that differ from the parent)",
                         "delta_keys": sorted(delta)},
        "backbone": backbone_record(bb), "parent": backbone_record(parent),
        "recipe": training.get("config"), "training_data": training.get("data"),
        "training": {k: training.get(k) for k in ("best_iteration", "final_train_loss", "history")}}


def _lclip_parts(scorer: LCLIPScore) -> tuple[dict, dict]:
    bb = scorer.backbone
    teacher = _parent_of(bb, "L-CLIPScore")
    training = getattr(bb, "training", {}) or {}
    return dict(bb.model.state_dict()), {
        "scorer": {"name": scorer.name, "w": scorer.w, "prompt": scorer.prompt},
        "architecture": {"kind": "L-CLIPScore student (whole model)", "student": dict(bb.model.config)},
        "backbone": backbone_record(bb), "parent": backbone_record(teacher),
        "recipe": training.get("config"), "training_data": training.get("data")}


def _specs_parts(scorer: SPECSScore) -> tuple[dict, dict]:
    bb = scorer.backbone
    parent = _parent_of(bb, "SPECS")
    training = getattr(bb, "specs_training", {}) or {}
    return dict(bb.model.state_dict()), {
        "scorer": {"name": scorer.name, "w": scorer.w, "prompt": scorer.prompt},
        "architecture": {"kind": "SPECS long-context fine-tune (whole model)", "stretch": dict(bb.stretch)},
        "backbone": backbone_record(bb), "parent": backbone_record(parent),
        "recipe": training.get("config"), "training_data": training.get("data"),
        "training": {"losses": training.get("losses")}}


def _bridge_parts(scorer: BRIDGE) -> tuple[dict, dict]:
    if not hasattr(scorer, "template_source"):
        raise ValueError("BRIDGE: not fitted (call fit first): there is no trained mapping module to save")
    sd = dict(scorer.trainable_modules().state_dict())
    return sd, {
        "scorer": {"name": scorer.name},
        "architecture": {"kind": "BRIDGE mapping module psi + L3 head (the CLIP stays frozen)",
                         "text_width": scorer.text_width, "vision_width": scorer.vision_width,
                         "embed_dim": scorer.embed_dim},
        "backbone": backbone_record(scorer.clip), "parent": backbone_record(scorer.clip),
        "recipe": asdict(scorer.config), "training_data": getattr(scorer, "fit_data", None),
        "bridge": {"template_source": scorer.template_source, "captions_file": scorer.captions_file,
                   "bank_texts": list(scorer.bank_texts),
                   "bank_tags": [None if t is None else list(t) for t in scorer.bank_tags]},
        "training": {"losses": scorer.log}}


# ============================================================================ load
def _config_file(path: str | Path) -> Path:
    p = Path(path).expanduser()
    return p / CONFIG_NAME if p.is_dir() else p


def read_scorer_config(path: str | Path) -> dict:
    """The checked ``scorer.json`` of a saved scorer (``path``: the folder or the file itself).

    Raises
    ------
    ScorerFormatError
        Missing, not JSON, not a saved scorer, another format version, an unknown metric or a missing
        entry; the message names the file (and the line of a JSON error).
    """
    cfg_path = _config_file(path)
    if not cfg_path.is_file():
        raise ScorerFormatError(f"{cfg_path}: saved scorer not found (expected a folder with {CONFIG_NAME} and "
                                f"{WEIGHTS_NAME}, as save_scorer / python -m neural.train_scorer write)")
    try:
        config = json.loads(cfg_path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ScorerFormatError(f"{cfg_path}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ScorerFormatError(f"{cfg_path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise ScorerFormatError(f"{cfg_path}: not a saved scorer (no \"format\": \"{FORMAT}\")")
    if config.get("format_version") != FORMAT_VERSION:
        raise ScorerFormatError(f"{cfg_path}: format version {config.get('format_version')!r}; this toolkit "
                                f"reads version {FORMAT_VERSION}")
    if config.get("metric") not in SAVED_METRICS:
        raise ScorerFormatError(f"{cfg_path}: unknown metric {config.get('metric')!r} (expected one of "
                                f"{sorted(SAVED_METRICS)})")
    for key in ("scorer", "architecture", "backbone", "parent", "weights"):
        if not isinstance(config.get(key), dict):
            raise ScorerFormatError(f"{cfg_path}: entry {key!r} missing or not an object")
    return config


def _read_weights(cfg_path: Path, config: dict) -> dict[str, torch.Tensor]:
    name = str(config["weights"].get("file", WEIGHTS_NAME))
    if Path(name).name != name or name in ("", ".", ".."):
        raise ScorerFormatError(f"{cfg_path}: weights file {name!r} must be a file name in the scorer's folder")
    wpath = cfg_path.parent / name
    if not wpath.is_file():
        raise ScorerFormatError(f"{wpath}: weights file of {cfg_path} not found")
    try:
        tensors = load_file(str(wpath), device="cpu")
    except Exception as exc:  # safetensors raises its own error types
        raise ScorerFormatError(f"{wpath}: not a readable safetensors file ({exc})") from exc
    if state_dict_sha256(tensors) != config["weights"].get("sha256"):
        raise ScorerFormatError(f"{wpath}: the tensors do not have the SHA-256 recorded in {cfg_path} "
                                "(damaged or replaced file)")
    return tensors


def _check_parent(cfg_path: Path, config: dict, parent: Backbone) -> None:
    want = config["parent"].get("state_dict_sha256")
    got = state_dict_sha256(parent.model.state_dict())
    if got != want:
        raise ScorerFormatError(
            f"{cfg_path}: the backbone given ({parent.name}, state dict {got[:16]}) is not the parent this "
            f"{config['metric']} scorer was trained from ({config['parent'].get('name')}, state dict "
            f"{str(want)[:16]}): pass that backbone")


def _rebuilt_parent(cfg_path: Path, config: dict, device) -> Backbone:
    """The parent's architecture, untrained, rebuilt from its record (structure, preprocessing and
    tokenizer checked against the record)."""
    from neural.architectures import create_architecture

    rec = config["parent"]
    try:
        with torch.random.fork_rng(devices=[]):
            net, pre, tok = create_architecture(str(rec.get("arch")), quick_gelu=bool(rec.get("quick_gelu")))
    except (ValueError, KeyError, WeightsError) as exc:
        raise ScorerFormatError(f"{cfg_path}: cannot rebuild the parent architecture {rec.get('arch')!r} "
                                f"({exc}); pass the parent backbone") from exc
    bb = backbone_from_model(net, pre, tok, name=str(rec.get("name")), arch=str(rec.get("arch")),
                             source="rebuilt (untrained) from a saved scorer's record", device=device,
                             precision="fp32", show_progress=False)
    got = _structure_record(bb)
    want = {k: rec.get(k) for k in got}
    if got != want:
        diff = sorted(k for k in got if got[k] != want[k])
        raise ScorerFormatError(f"{cfg_path}: the parent {rec.get('name')!r} cannot be rebuilt from its "
                                f"architecture name alone ({', '.join(diff)} differ); pass the parent backbone "
                                "(--clip-model / --clip-pretrained on the command line)")
    return bb


def load_scorer(path: str | Path, backbone: Backbone | None = None, *, device: str = "auto"):
    """Load a scorer saved by :func:`save_scorer`.

    Parameters
    ----------
    path : path
        The folder (or its ``scorer.json``).
    backbone : Backbone, optional
        The parent the scorer was trained from: required for PAC-S and BRIDGE, optional for L-CLIPScore
        and SPECS (their parent architecture is rebuilt when it can be).  Always verified against the
        recorded state-dict SHA-256.
    device : str
        Where a scorer without a given parent runs (``"auto"``: CUDA when available); with a parent, the
        parent's device.

    Returns
    -------
    PACScore, LCLIPScore, BRIDGE or SPECSScore
        Scores exactly as the saved scorer did.  Its backbone's ``saved`` attribute holds
        :func:`scorer_identity`.

    Raises
    ------
    ScorerFormatError
        A damaged or mismatched file, a wrong or missing parent; the message names the file.
    """
    cfg_path = _config_file(path)
    config = read_scorer_config(cfg_path)
    tensors = _read_weights(cfg_path, config)
    metric = config["metric"]
    if backbone is not None:
        _check_parent(cfg_path, config, backbone)
    elif config.get("needs_parent", SAVED_METRICS[metric]):
        rec = config["parent"]
        raise ScorerFormatError(f"{cfg_path}: this {metric} scorer needs the backbone it was trained from "
                                f"({rec.get('name')}, {rec.get('arch')}, state dict "
                                f"{str(rec.get('state_dict_sha256'))[:16]}): pass it (--clip-model / "
                                "--clip-pretrained on the command line)")
    build = {"PAC-S": _load_pacs, "L-CLIPScore": _load_lclip, "BRIDGE": _load_bridge, "SPECS": _load_specs}[metric]
    try:
        scorer = build(cfg_path, config, tensors, backbone, device)
    except ScorerFormatError:
        raise
    except (RuntimeError, KeyError, TypeError, ValueError) as exc:   # entries that do not fit the architecture
        raise ScorerFormatError(f"{cfg_path}: the weights do not fit the recorded architecture ({exc})") from exc
    scorer_bb = scorer.clip if metric == "BRIDGE" else scorer.backbone
    if state_dict_sha256(scorer_bb.model.state_dict()) != config["backbone"].get("state_dict_sha256"):
        raise ScorerFormatError(f"{cfg_path}: the loaded {metric} backbone does not have the recorded "
                                "state-dict SHA-256")
    scorer_bb.saved = scorer_identity(config, cfg_path.parent)  # type: ignore[attr-defined]
    return scorer


def _finish(model: torch.nn.Module, tensors: dict, cfg_path: Path, strict: bool = True) -> None:
    own = model.state_dict()
    unknown = sorted(set(tensors) - set(own))
    if unknown:
        raise ScorerFormatError(f"{cfg_path}: weights entries {unknown[:5]} are not in the architecture")
    bad = sorted(k for k in tensors if tensors[k].shape != own[k].shape)
    if bad:
        raise ScorerFormatError(f"{cfg_path}: weights entries {bad[:5]} have other shapes than the architecture's")
    with torch.no_grad():
        for k, v in tensors.items():
            own[k].copy_(v.to(own[k].dtype))
    if strict and set(own) - set(tensors):
        raise ScorerFormatError(f"{cfg_path}: weights lack entries {sorted(set(own) - set(tensors))[:5]}")


def _wrap(model, like: Backbone, config: dict, arch: str, precision: str | None = None) -> Backbone:
    rec = config["backbone"]
    return backbone_from_model(model, like.preprocess, like.tokenizer, name=str(rec.get("name")), arch=arch,
                               source=str(rec.get("source")), device=like.device,
                               precision=precision or str(rec.get("precision", "fp32")),
                               show_progress=like.show_progress)


def _load_pacs(cfg_path, config, tensors, parent: Backbone, device) -> PACScore:
    model = copy.deepcopy(parent.model)
    _finish(model, tensors, cfg_path, strict=False)
    bb = _wrap(model, parent, config, parent.arch)
    bb.parent = parent  # type: ignore[attr-defined]
    bb.training = {"config": config.get("recipe"), "data": config.get("training_data"),  # type: ignore[attr-defined]
                   **(config.get("training") or {})}
    s = config["scorer"]
    return PACScore(bb, w=float(s["w"]), prompt=s.get("prompt"), reference_based=bool(s.get("reference_based")))


def _load_lclip(cfg_path, config, tensors, parent: Backbone | None, device) -> LCLIPScore:
    teacher = parent if parent is not None else _rebuilt_parent(cfg_path, config, device)
    st = config["architecture"]["student"]
    with torch.random.fork_rng(devices=[]):
        student = MultiplexedCLIP(copy.deepcopy(teacher.model).float().cpu(), int(st["vision_shared"]),
                                  int(st["vision_repeats"]), int(st["text_shared"]), int(st["text_repeats"]),
                                  int(st["embed_rank"]))
    _finish(student, tensors, cfg_path)
    student.eval()
    bb = _wrap(student, teacher, config, "lclip-multiplexed", precision="fp32")
    bb.parent = teacher  # type: ignore[attr-defined]
    bb.training = {"config": config.get("recipe"), "data": config.get("training_data")}  # type: ignore[attr-defined]
    s = config["scorer"]
    return LCLIPScore(bb, w=float(s["w"]), prompt=s.get("prompt"), name=str(s.get("name", "L-CLIPScore")))


def _load_specs(cfg_path, config, tensors, parent: Backbone | None, device) -> SPECSScore:
    base = parent if parent is not None else _rebuilt_parent(cfg_path, config, device)
    st = config["architecture"]["stretch"]
    long_bb = stretch_backbone(base, int(st["to"]), int(st["keep"]), precision="fp32")
    model = long_bb.model
    _finish(model, tensors, cfg_path)
    model.eval()
    bb = _wrap(model, long_bb, config, base.arch)
    bb.parent = base  # type: ignore[attr-defined]
    bb.stretch = dict(st)  # type: ignore[attr-defined]
    bb.specs_training = {"config": config.get("recipe"), "data": config.get("training_data"),  # type: ignore[attr-defined]
                         "losses": (config.get("training") or {}).get("losses")}
    s = config["scorer"]
    return SPECSScore(bb, w=float(s["w"]), prompt=s.get("prompt"), name=str(s.get("name", "SPECS")))


def _load_bridge(cfg_path, config, tensors, parent: Backbone, device) -> BRIDGE:
    recipe = dict(config.get("recipe") or {})
    with torch.random.fork_rng(devices=[]):
        br = BRIDGE(parent, BridgeConfig(**recipe), name=str(config["scorer"].get("name", "BRIDGE")))
    _finish(br.trainable_modules(), tensors, cfg_path)   # names and shapes checked, as the others
    extra = config.get("bridge") or {}
    br.restore(br.trainable_modules().state_dict(), template_source=extra.get("template_source"),
               captions_file=extra.get("captions_file"), bank_texts=extra.get("bank_texts") or [],
               bank_tags=extra.get("bank_tags") or [], log=(config.get("training") or {}).get("losses"),
               fit_data=config.get("training_data"))
    return br
