"""Plain JSON data from the toolkit's results: one converter for configurations, identities and reports.

``results.json``, the provenance of a run, the identities of scorers and the metadata of cached runs hold
nested mappings and sequences with numpy scalars and arrays and paths in them; :func:`jsonable` turns
them into the types :mod:`json` writes.  (Cache *keys* are hashed by :func:`corpora.cache.cache_key`,
which digests arrays instead of listing them and refuses unknown types.)
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np

__all__ = ["DuplicateKeyError", "jsonable", "loads_unique", "write_json_atomic", "write_text_atomic"]


def jsonable(obj, *, nonfinite_as_null: bool = False):
    """A plain-JSON copy of ``obj``.

    Mappings get string keys, tuples and arrays become lists, numpy scalars Python numbers (``np.bool_``
    a ``bool``), paths strings; anything else is returned as it is.

    Parameters
    ----------
    obj : object
        A configuration, identity or result (nested mappings and sequences).
    nonfinite_as_null : bool
        Write NaN and ±inf (which JSON does not have) as ``None``, i.e. ``null``.

    Returns
    -------
    object
        The copy.
    """
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v, nonfinite_as_null=nonfinite_as_null) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v, nonfinite_as_null=nonfinite_as_null) for v in obj]
    if isinstance(obj, np.ndarray):
        return jsonable(obj.tolist(), nonfinite_as_null=nonfinite_as_null)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        value = float(obj)
        return None if nonfinite_as_null and not math.isfinite(value) else value
    if isinstance(obj, Path):
        return str(obj)
    return obj


def write_text_atomic(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically: a temporary file beside it, flushed to disk, then
    renamed over it.  A killed writer leaves the old file or the new one, never half of one; a write that
    fails (disk full, read-only folder) removes its temporary file and raises the ``OSError``."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_json_atomic(path: str | Path, obj) -> Path:
    """Write :func:`jsonable` ``obj`` as indented, key-sorted UTF-8 JSON to ``path`` atomically
    (:func:`write_text_atomic`)."""
    return write_text_atomic(path, json.dumps(jsonable(obj), indent=1, sort_keys=True) + "\n")


class DuplicateKeyError(ValueError):
    """A JSON object that names one key twice (``json`` would keep the last value silently)."""

    def __init__(self, key: str):
        super().__init__(f"duplicate key {key!r}")
        self.key = key


def _unique_pairs(pairs: list) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise DuplicateKeyError(k)
        out[k] = v
    return out


def loads_unique(text: str):
    """``json.loads(text)``, refusing an object with a duplicate key (:class:`DuplicateKeyError`, naming
    it) instead of keeping its last value."""
    return json.loads(text, object_pairs_hook=_unique_pairs)
