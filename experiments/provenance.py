"""Provenance of a run of the main job: the command line, library versions, data checksums and code
digests (the last two also enter cache keys)."""
from __future__ import annotations

import hashlib
import importlib.metadata as md
import os
import platform
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from corpora.base import Corpus

#: Distributions whose versions ``results.json`` records.
REPORTED_LIBRARIES = ("numpy", "scipy", "scikit-learn", "opencv-python-headless", "nltk", "torch",
                      "open_clip_torch", "statsmodels", "matplotlib", "image-text-ranking")


def command_line() -> str:
    """The command as a user would type it again.

    Returns
    -------
    str
        ``python -m experiments.flickr8k_kcca`` for the module (``sys.argv[0]`` is then its file path),
        arguments quoted for a POSIX shell; empty without ``sys.argv``.
    """
    if not sys.argv:
        return ""
    prog = Path(sys.argv[0])
    head = (["python", "-m", f"experiments.{prog.stem}"] if prog.parent.name == "experiments" and prog.suffix == ".py"
            else [prog.name])
    return shlex.join(head + sys.argv[1:])


def library_versions(names: Sequence[str]) -> dict:
    """Installed versions, read from the package metadata (nothing is imported).

    Parameters
    ----------
    names : sequence of str
        Distribution names.

    Returns
    -------
    dict
        ``{distribution: version or None}``.
    """
    out = {}
    for n in names:
        try:
            out[n] = md.version(n)
        except md.PackageNotFoundError:
            out[n] = None
    return out


def source_digest(paths: Sequence[str]) -> str:
    """SHA-256 prefix of the ``.py`` files under ``paths``, names and contents, in sorted order.

    Parameters
    ----------
    paths : sequence of str
        Folders or files relative to the repository root (the folder above this package).

    Returns
    -------
    str
        16 hex digits; a change to any of the files gives another digest.
    """
    root = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for rel in paths:
        p = root / rel
        for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p] if p.is_file() else []):
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def data_checksums(data: str | Path | None) -> dict:
    """SHA-256 of the text files of a Flickr8k folder (what the numbers depend on besides images).

    Parameters
    ----------
    data : str or Path or None
        The ``--data`` folder; ``None`` for the teaching set.

    Returns
    -------
    dict
        ``{path relative to the folder: 16 hex digits}`` of its ``.txt`` / ``.csv`` / ``.json`` files
        under 64 MiB, sorted; linked folders are followed, each real folder once.
    """
    if data is None:
        return {"teaching_set": "generated from the seed; see corpus fingerprint"}
    out = {}
    root = Path(data)
    if root.is_file():   # a Karpathy dataset_*.json
        return {root.name: hashlib.sha256(root.read_bytes()).hexdigest()[:16]}
    seen: set[str] = set()
    # os.walk with followlinks: a linked text folder (``Flickr8k_text -> /data/...``) is read too; each real
    # folder once, so a link cycle ends
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        for name in filenames:
            p = Path(dirpath) / name
            if p.suffix in (".txt", ".csv", ".json") and p.is_file() and p.stat().st_size < 64 << 20:
                out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()[:16]
    return dict(sorted(out.items()))


def provenance(*, seed: int, data: str | Path | None, use_cache: bool, corpus: Corpus,
               extra: Mapping | None = None) -> dict:
    """``results.json``'s ``provenance`` block.

    Parameters
    ----------
    seed : int
        The run's seed.
    data : str or Path or None
        The ``--data`` folder (``None``: the teaching set).
    use_cache : bool
        Whether the disk cache was on.
    corpus : Corpus
        The corpus that was evaluated (its fingerprint is recorded).
    extra : mapping, optional
        Further entries (the stages' provenance, the requested methods), added last.

    Returns
    -------
    dict
        Command line, Python and platform, library versions, seed, corpus fingerprint, data checksums,
        cache use, then ``extra``.
    """
    prov = {
        "command": command_line(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "versions": library_versions(REPORTED_LIBRARIES),
        "seed": seed,
        "corpus_fingerprint": corpus.fingerprint,
        "data_checksums": data_checksums(data),
        "cache": "enabled" if use_cache else None,
    }
    if extra:
        prov.update(extra)
    return prov
