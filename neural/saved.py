"""Trained scorers saved to disk and loaded back bit-identically: PAC-S fine-tunes, L-CLIPScore students,
BRIDGE mapping modules and SPECS fine-tunes.

A saved scorer is a folder of two files:

``scorer.json``
    Plain JSON (:data:`FORMAT`, :data:`FORMAT_VERSION`): the metric, the scorer's own settings (``w``,
    prompt, reference-based or not), the architecture, the recipe (every hyper-parameter of the training
    run), a description of the training data, the **parent** backbone's identity (name, architecture,
    structure hash, preprocessing, tokenizer and the SHA-256 of its state dict,
    :func:`~neural.checkpoints.state_dict_sha256`), the SHA-256 and storage type (fp32, or fp16 to halve
    the file) of the saved tensors, the library versions, and ``fields_sha256``: the SHA-256 of every
    entry that decides the scores (:data:`SCORED_FIELDS`).  Reading refuses, naming the file and the
    field, a setting out of range (``w`` not a finite number in (0, 100], a prompt that is not text) and
    any scored entry that was edited after saving (its SHA-256 is not the recorded one).
``weights.safetensors``
    The tensors (read with :func:`safetensors.torch.load_file`: nothing is ever unpickled).

Each scorer family (:mod:`neural.families`, :meth:`neural.family.ScorerFamily.parts` / ``load``) says
what its weights hold and whether loading needs the parent backbone; the built-in ones:

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

import hashlib
import json
import math
import platform
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file

from corpora.jsondata import write_json_atomic
from neural.backbone import Backbone
from neural.checkpoints import WeightsError, check_tensor_values, save_safetensors_atomic, state_dict_sha256
from neural.registry import family_for, family_of_scorer, families
from neural.saved_parts import ScorerFormatError, backbone_record

#: The ``"format"`` entry of every ``scorer.json``.
FORMAT = "itr-saved-scorer"
#: Layout version; a file of another version is refused (version 2 records :data:`SCORED_FIELDS`' hashes).
FORMAT_VERSION = 2
CONFIG_NAME = "scorer.json"
WEIGHTS_NAME = "weights.safetensors"
#: Storage types of a saved scorer's floating-point tensors (``scorer.json`` ``weights.dtype``).
STORAGE_DTYPES = {"float32": torch.float32, "float16": torch.float16}
#: The ``scorer.json`` entries that decide a loaded scorer's scores (the metric, its settings ``w`` /
#: prompt / name, the architecture, the backbone and parent records, the recipe a loader reads, the
#: BRIDGE caption bank): each is recorded with its SHA-256 (``fields_sha256``, one per entry and, for an
#: object, per key), so an edited one is refused by name.  The weights carry their own SHA-256; the
#: training record, the data description and the versions are descriptive.
SCORED_FIELDS = ("metric", "needs_parent", "scorer", "architecture", "backbone", "parent", "recipe", "bridge")
#: The largest scale ``w`` a saved scorer may have (the papers' are 1, 2 and 2.5).
MAX_W = 100.0
#: The longest prompt a saved scorer may have (characters).
MAX_PROMPT_CHARS = 1000

__all__ = ["FORMAT", "FORMAT_VERSION", "CONFIG_NAME", "WEIGHTS_NAME", "STORAGE_DTYPES", "SCORED_FIELDS", "MAX_W",
           "MAX_PROMPT_CHARS", "ScorerFormatError", "backbone_record", "save_scorer", "load_scorer",
           "stored_tensor", "rounded_state_sha256", "read_scorer_config", "scorer_identity", "fields_sha256",
           "saved_metrics"]


def saved_metrics() -> dict[str, bool]:
    """``{metric: loading needs the parent}`` of the families that can be saved (:mod:`neural.registry`)."""
    return {f.name: f.needs_parent for f in families() if f.savable}


def fields_sha256(config: Mapping) -> dict[str, str]:
    """The SHA-256 of each of :data:`SCORED_FIELDS` in ``config`` (canonical JSON: sorted keys): one per
    entry, and one per key of an entry that is an object (``"scorer.prompt"``), so a change is named."""
    def digest(value) -> str:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    out = {}
    for field in SCORED_FIELDS:
        value = config.get(field)
        out[field] = digest(value)
        if isinstance(value, Mapping):
            out.update({f"{field}.{k}": digest(v) for k, v in value.items()})
    return out


def scorer_identity(config: Mapping, folder: str | Path | None = None) -> dict:
    """What a report should say about a saved scorer: metric, name, its weights' and its parent's hashes."""
    parent = config.get("parent") or {}
    return {"metric": config.get("metric"), "name": (config.get("scorer") or {}).get("name"),
            "path": None if folder is None else str(folder),
            "format_version": config.get("format_version"),
            "config_sha256": hashlib.sha256(json.dumps(config.get("fields_sha256"), sort_keys=True)
                                            .encode("utf-8")).hexdigest(),
            "weights_sha256": (config.get("weights") or {}).get("sha256"),
            "backbone_sha256": (config.get("backbone") or {}).get("state_dict_sha256"),
            "parent": {k: parent.get(k) for k in ("name", "arch", "state_dict_sha256")}}


# ============================================================================ save
def save_scorer(scorer, path: str | Path, *, dtype: str = "float32") -> Path:
    """Save a trained scorer to the folder ``path`` (created; ``scorer.json`` + ``weights.safetensors``).

    Parameters
    ----------
    scorer : object
        A trained scorer of a registered family that can be saved (:meth:`neural.family.ScorerFamily.parts`:
        PAC-S, L-CLIPScore, BRIDGE, SPECS as their trainers make them — their backbones record the
        parent they were trained from — or a family registered since).
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
    family = family_of_scorer(scorer)   # TypeError: not a savable scorer
    metric = family.name
    tensors, parts = family.parts(scorer)
    if dtype not in STORAGE_DTYPES:
        raise ValueError(f"save_scorer: dtype must be one of {sorted(STORAGE_DTYPES)}, got {dtype!r}")
    tensors = {k: stored_tensor(v, dtype) for k, v in tensors.items()}
    if dtype != "float32" and family.weights_in_backbone:   # the backbone holds the rounded values once loaded
        parts["backbone"] = {**parts["backbone"], "state_dict_sha256": rounded_state_sha256(
            family.backbone_of(scorer).model.state_dict(), tensors)}
    import open_clip  # lazy: seconds to import; already loaded with any backbone

    config = {"format": FORMAT, "format_version": FORMAT_VERSION, "metric": metric,
              "needs_parent": family.needs_parent, **parts,
              "weights": {"file": WEIGHTS_NAME, "sha256": state_dict_sha256(tensors), "dtype": dtype,
                          "n_tensors": len(tensors),
                          "n_values": int(sum(t.numel() for t in tensors.values()))},
              "versions": {"torch": torch.__version__, "open_clip": getattr(open_clip, "__version__", "unknown"),
                           "numpy": np.__version__, "python": platform.python_version()}}
    config["fields_sha256"] = fields_sha256(json.loads(json.dumps(config)))   # as read back
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
    if config.get("metric") not in saved_metrics():
        raise ScorerFormatError(f"{cfg_path}: unknown metric {config.get('metric')!r} (expected one of "
                                f"{sorted(saved_metrics())})")
    for key in ("scorer", "architecture", "backbone", "parent", "weights"):
        if not isinstance(config.get(key), dict):
            raise ScorerFormatError(f"{cfg_path}: entry {key!r} missing or not an object")
    check_scorer_settings(cfg_path, config["scorer"])
    check_fields_sha256(cfg_path, config)
    return config


def check_scorer_settings(cfg_path: Path, settings: Mapping) -> None:
    """Refuse scorer settings out of range: ``w`` a finite number in (0, :data:`MAX_W`], ``prompt`` text
    (or ``null``) of at most :data:`MAX_PROMPT_CHARS` characters, ``name`` text, ``reference_based`` a
    boolean.

    Raises
    ------
    ScorerFormatError
        Naming the file and the field (``scorer.w`` …).
    """
    w = settings.get("w", 1.0)
    if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or not 0 < w <= MAX_W:
        raise ScorerFormatError(f"{cfg_path}: field 'scorer.w' must be a finite number in (0, {MAX_W:g}], "
                                f"got {w!r}")
    prompt = settings.get("prompt")
    if prompt is not None and (not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS):
        raise ScorerFormatError(f"{cfg_path}: field 'scorer.prompt' must be text of at most {MAX_PROMPT_CHARS} "
                                "characters (or null)")
    if not isinstance(settings.get("name", ""), str):
        raise ScorerFormatError(f"{cfg_path}: field 'scorer.name' must be text")
    if not isinstance(settings.get("reference_based", False), bool):
        raise ScorerFormatError(f"{cfg_path}: field 'scorer.reference_based' must be true or false")


def check_fields_sha256(cfg_path: Path, config: Mapping) -> None:
    """Refuse a ``scorer.json`` whose :data:`SCORED_FIELDS` do not have the SHA-256 recorded when it was
    saved (``fields_sha256``): an edited setting would change the scores while the reported hashes stay.

    Raises
    ------
    ScorerFormatError
        Naming the file and the changed fields.
    """
    recorded = config.get("fields_sha256")
    if not isinstance(recorded, dict):
        raise ScorerFormatError(f"{cfg_path}: field 'fields_sha256' missing or not an object")
    actual = fields_sha256(config)
    changed = sorted(k for k in set(recorded) | set(actual) if recorded.get(k) != actual.get(k))
    if changed:
        # an entry's own name when only its keys are listed for it
        named = [k for k in changed if "." in k or not any(c.startswith(k + ".") for c in changed)]
        raise ScorerFormatError(f"{cfg_path}: field {', '.join(repr(k) for k in named)} does not have the SHA-256 "
                                "recorded when the scorer was saved (edited after saving); train and save the "
                                "scorer again instead of editing it")


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
    try:   # dtype and finiteness: int8 weights score 0, NaN weights score nan (neural.weights_check)
        check_tensor_values(tensors, wpath)
    except WeightsError as exc:
        raise ScorerFormatError(str(exc)) from None
    return tensors


def _check_parent(cfg_path: Path, config: dict, parent: Backbone) -> None:
    want = config["parent"].get("state_dict_sha256")
    got = state_dict_sha256(parent.model.state_dict())
    if got != want:
        raise ScorerFormatError(
            f"{cfg_path}: the backbone given ({parent.name}, state dict {got[:16]}) is not the parent this "
            f"{config['metric']} scorer was trained from ({config['parent'].get('name')}, state dict "
            f"{str(want)[:16]}): pass that backbone")


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
    elif family_for(metric).needs_parent:
        rec = config["parent"]
        raise ScorerFormatError(f"{cfg_path}: this {metric} scorer needs the backbone it was trained from "
                                f"({rec.get('name')}, {rec.get('arch')}, state dict "
                                f"{str(rec.get('state_dict_sha256'))[:16]}): pass it (--clip-model / "
                                "--clip-pretrained on the command line)")
    family = family_for(metric)
    try:
        scorer = family.load(cfg_path, config, tensors, backbone, device)
    except ScorerFormatError:
        raise
    except (RuntimeError, KeyError, TypeError, ValueError) as exc:   # entries that do not fit the architecture
        raise ScorerFormatError(f"{cfg_path}: the weights do not fit the recorded architecture ({exc})") from exc
    scorer_bb = family.backbone_of(scorer)
    if state_dict_sha256(scorer_bb.model.state_dict()) != config["backbone"].get("state_dict_sha256"):
        raise ScorerFormatError(f"{cfg_path}: the loaded {metric} backbone does not have the recorded "
                                "state-dict SHA-256")
    scorer_bb.saved = scorer_identity(config, cfg_path.parent)  # type: ignore[attr-defined]
    return scorer
