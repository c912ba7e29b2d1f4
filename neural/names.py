"""Backbone names the command lines accept, importable without torch (the main job checks its options and
keys its neural-stage cache before deciding whether torch is needed at all)."""
from __future__ import annotations

#: The names of the small CLIP trained here (:mod:`neural.tiny_clip`) for ``--clip-model`` / ``clip_model``.
TINY_MODEL_NAMES = ("tiny", "tiny-clip")


def is_tiny_model(name: str | None, *, default: bool = False) -> bool:
    """Whether ``name`` selects the tiny CLIP trained here (one of :data:`TINY_MODEL_NAMES`);
    ``default`` is the answer for ``None`` (the command lines' default backbone is the tiny CLIP)."""
    if name is None:
        return default
    return str(name).strip().lower() in TINY_MODEL_NAMES


__all__ = ["TINY_MODEL_NAMES", "is_tiny_model"]
