"""Where shared data and NLTK resources live.

One environment variable, ``ITR_SHARED``, points at the shared folder (default: ``../shared`` relative
to the repository root, which is where CI places it).  It holds ``data/flickr8k/`` (the real Flickr8k
text bundle and a few JPEGs) and ``nltk_data/``.
"""
from __future__ import annotations

import os
from pathlib import Path

SHARED_ENV = "ITR_SHARED"
REPO_ROOT = Path(__file__).resolve().parent.parent


def shared_dir() -> Path:
    """``$ITR_SHARED`` or ``<repo>/../shared``."""
    env = os.environ.get(SHARED_ENV)
    return Path(env).expanduser().resolve() if env else (REPO_ROOT.parent / "shared").resolve()


def shared_flickr8k_dir() -> Path:
    """The shared Flickr8k folder (``<shared>/data/flickr8k``)."""
    return shared_dir() / "data" / "flickr8k"


def shared_nltk_dir() -> Path:
    return shared_dir() / "nltk_data"


def ensure_nltk_data_path() -> None:
    """Add ``$NLTK_DATA`` and the shared ``nltk_data`` folder to NLTK's search path (no download)."""
    import nltk

    for cand in (os.environ.get("NLTK_DATA"), str(shared_nltk_dir())):
        if cand and Path(cand).is_dir() and cand not in nltk.data.path:
            nltk.data.path.insert(0, cand)
