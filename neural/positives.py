"""PAC-S positive-tuple files (``--pacs-positives``), read without torch.

A tuples file is a JSON list of objects ``{"image": path, "caption": str, "generated_image": path,
"generated_caption": str}`` (Sarto et al. 2023, Sec. 3: a real image–caption pair and its generated
positives); relative paths are resolved against an image root (default: the JSON file's folder).
:func:`tuple_entries` parses and checks a file; :func:`neural.pacs.load_tuples` reads the images of its
entries.  The main job calls :func:`check_positives_file` before any work, so a bad file stops the run
in seconds, not after the classical stage.
"""
from __future__ import annotations

import json
from pathlib import Path

__all__ = ["TUPLE_FIELDS", "tuple_entries", "check_positives_file"]

#: The fields of one positive tuple; the two ``*image`` fields are paths.
TUPLE_FIELDS = ("image", "caption", "generated_image", "generated_caption")


def tuple_entries(path: str | Path, image_root: str | Path | None = None) -> tuple[list[dict], Path]:
    """The entries of tuples file ``path`` and the image root their relative paths are resolved against.

    Raises
    ------
    ValueError
        The file cannot be read, is not a JSON list, or entry *k* lacks a field or has one of the wrong
        type (the message names the file and the entry).
    """
    p = Path(path)
    try:
        entries = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{p}: cannot read positive tuples ({exc})") from exc
    if not isinstance(entries, list):
        raise ValueError(f"{p}: expected a JSON list of tuples")
    for k, e in enumerate(entries):
        if not isinstance(e, dict) or any(f not in e for f in TUPLE_FIELDS):
            raise ValueError(f"{p}: entry {k} lacks image / caption / generated_image / generated_caption "
                             f"(got {sorted(e) if isinstance(e, dict) else type(e).__name__})")
        bad = [f for f in TUPLE_FIELDS if not isinstance(e[f], str) or not e[f]]
        if bad:
            raise ValueError(f"{p}: entry {k}: {', '.join(bad)} must be non-empty strings")
    return entries, (Path(image_root) if image_root else p.parent)


def check_positives_file(path: str | Path, image_root: str | Path | None = None, *, min_tuples: int = 1) -> int:
    """Check tuples file ``path`` without reading its images: it parses (:func:`tuple_entries`), holds at
    least ``min_tuples`` tuples, and every image it names exists.  Returns the number of tuples.

    Raises
    ------
    ValueError
        As :func:`tuple_entries`, or the file holds fewer than ``min_tuples`` tuples.
    FileNotFoundError
        An image named by an entry is not a file (the message names the entry and the path).
    """
    entries, root = tuple_entries(path, image_root)
    if not entries:
        raise ValueError(f"{path}: holds no tuples")
    for k, e in enumerate(entries):
        for f in ("image", "generated_image"):
            if not (root / e[f]).is_file():
                raise FileNotFoundError(f"{path}: entry {k}: {f} {root / e[f]} not found")
    if len(entries) < min_tuples:
        raise ValueError(f"{path}: holds {len(entries)} tuple(s), need at least {min_tuples}")
    return len(entries)
