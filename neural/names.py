"""Backbone names the command lines accept, importable without torch (the main job checks its options and
keys its neural-stage cache before deciding whether torch is needed at all)."""
from __future__ import annotations

#: The names of the small CLIP trained here, inside the run (:mod:`neural.tiny_clip`), for
#: ``--clip-model`` / ``clip_model`` ("train your own CLIP").
TINY_MODEL_NAMES = ("tiny", "tiny-clip", "tiny-trained")
#: The names of the pretrained, shipped teaching CLIP (:func:`neural.teaching_clip.load_teaching_clip`).
TEACHING_MODEL_NAMES = ("teaching", "teaching-clip")


def is_tiny_model(name: str | None, *, default: bool = False) -> bool:
    """Whether ``name`` selects the tiny CLIP trained here (one of :data:`TINY_MODEL_NAMES`);
    ``default`` is the answer for ``None`` (the command lines' default backbone is the tiny CLIP)."""
    if name is None:
        return default
    return str(name).strip().lower() in TINY_MODEL_NAMES


def is_teaching_model(name: str | None, *, default: bool = False) -> bool:
    """Whether ``name`` selects the pretrained teaching CLIP (one of :data:`TEACHING_MODEL_NAMES`);
    ``default`` is the answer for ``None``."""
    if name is None:
        return default
    return str(name).strip().lower() in TEACHING_MODEL_NAMES


__all__ = ["TINY_MODEL_NAMES", "TEACHING_MODEL_NAMES", "is_tiny_model", "is_teaching_model"]
