"""Backbone names and the device setting the command lines accept, importable without torch (the main job
checks its options and keys its neural-stage cache before deciding whether torch is needed at all)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

#: Environment variable naming the device that ``--device auto`` (every ``device="auto"`` default) picks
#: (:func:`neural.backbone.resolve_device`); unset or empty: CUDA when torch sees it, else the CPU.
DEVICE_ENV = "ITR_DEVICE"


def auto_device_setting() -> str | None:
    """``$ITR_DEVICE`` (stripped), or ``None`` when it is unset or empty."""
    return os.environ.get(DEVICE_ENV, "").strip() or None


#: The names of the small CLIP trained here, inside the run (:mod:`neural.tiny_clip`), for
#: ``--clip-model`` / ``clip_model`` ("train your own CLIP").
TINY_MODEL_NAMES = ("tiny", "tiny-clip", "tiny-trained")
#: The names of the pretrained, shipped teaching CLIP (:func:`neural.teaching_clip.load_teaching_clip`).
TEACHING_MODEL_NAMES = ("teaching", "teaching-clip")
#: The shipped teaching-CLIP weights (package data) and the record beside them (SHA-256, held-out figures).
TEACHING_WEIGHTS_FILE = Path(__file__).resolve().parent / "weights" / "teaching_clip.safetensors"


#: The shipped fine-tuned scorers (:mod:`neural.shipped_scorers`): one folder per scorer and ``manifest.json``.
SHIPPED_SCORERS_DIR = Path(__file__).resolve().parent / "weights" / "scorers"


def shipped_manifest_sha256(root: str | Path | None = None) -> str | None:
    """SHA-256 of the shipped scorers' ``manifest.json`` (which lists every file's SHA-256), read without
    torch (cache keys); ``None`` when it is missing (the loader then stops with its own error)."""
    p = Path(root or SHIPPED_SCORERS_DIR) / "manifest.json"
    try:
        return hashlib.sha256(p.read_bytes()).hexdigest()
    except OSError:
        return None


#: The command that rebuilds the shipped teaching-CLIP weights (named by every error about them).
TEACHING_REBUILD_COMMAND = ("python -m experiments.pretrain_teaching_clip --out runs/teaching_clip "
                            "--export neural/weights/teaching_clip.safetensors")


def teaching_weights_problem(path: str | Path | None = None) -> str | None:
    """What is wrong with a teaching-CLIP weights file (default: the shipped one), checked without torch
    (the main job's option check must not import it): ``None`` when the file and its record exist and the
    file's SHA-256 is the recorded one; else one message naming the file and
    :data:`TEACHING_REBUILD_COMMAND`."""
    p = Path(path) if path is not None else TEACHING_WEIGHTS_FILE
    rec = p.with_suffix(".json")
    why = None
    if not p.is_file():
        why = "file not found"
    elif not rec.is_file():
        why = f"its record {rec.name} (the SHA-256 to check) is missing"
    else:
        expected = teaching_weights_sha256(p)
        if expected is None:
            why = f"its record {rec.name} is unreadable (no 'sha256' entry, or not JSON)"
        else:
            digest = hashlib.sha256()
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 22), b""):
                    digest.update(block)
            actual = digest.hexdigest()
            if actual != expected:
                why = f"damaged: SHA-256 {actual[:16]}… differs from the recorded {expected[:16]}…"
    return None if why is None else f"teaching CLIP weights {p}: {why}; rebuild them with: {TEACHING_REBUILD_COMMAND}"


def teaching_weights_sha256(path: str | Path | None = None) -> str | None:
    """The SHA-256 that the record beside a teaching-CLIP weights file (default: the shipped one) states,
    read without torch (cache keys); ``None`` when the record is missing or unreadable (the loader then
    stops with its own error)."""
    p = Path(path) if path is not None else TEACHING_WEIGHTS_FILE
    try:
        return str(json.loads(p.with_suffix(".json").read_text(encoding="utf-8"))["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def is_tiny_model(name: str | None, *, default: bool = False) -> bool:
    """Whether ``name`` selects the tiny CLIP trained here (one of :data:`TINY_MODEL_NAMES`);
    ``default`` is the answer for ``None``."""
    if name is None:
        return default
    return str(name).strip().lower() in TINY_MODEL_NAMES


def is_teaching_model(name: str | None, *, default: bool = False) -> bool:
    """Whether ``name`` selects the pretrained teaching CLIP (one of :data:`TEACHING_MODEL_NAMES`);
    ``default`` is the answer for ``None`` (the main job's offline default backbone is the teaching
    CLIP: pass ``default=True`` there)."""
    if name is None:
        return default
    return str(name).strip().lower() in TEACHING_MODEL_NAMES


def is_small_offline_model(name: str | None, *, default: bool = True) -> bool:
    """Whether ``name`` selects one of the small offline CLIPs (the teaching CLIP or the tiny CLIP trained
    here), whose fine-tuned scorers use the small-model recipes; ``default`` is the answer for ``None``."""
    if name is None:
        return default
    return is_tiny_model(name) or is_teaching_model(name)


__all__ = ["TINY_MODEL_NAMES", "TEACHING_MODEL_NAMES", "TEACHING_WEIGHTS_FILE", "teaching_weights_sha256",
           "TEACHING_REBUILD_COMMAND", "teaching_weights_problem", "is_tiny_model", "is_teaching_model",
           "is_small_offline_model"]
