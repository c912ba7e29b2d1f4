"""Where shared data and NLTK resources live.

One environment variable, ``ITR_SHARED``, points at the shared folder (default: ``../shared`` relative
to the repository root, which is where CI places it).  It holds ``data/flickr8k/`` (the real Flickr8k
text bundle and a few JPEGs) and ``nltk_data/``.
"""
from __future__ import annotations

import os
import socket
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


def network_problem(host: str, port: int = 443, timeout: float = 5.0) -> str | None:
    """Why ``host:port`` cannot be reached, or ``None`` when one TCP connection succeeds — or when an
    HTTPS / ALL proxy is configured, which a direct connection cannot judge.  Checked before a download
    (NLTK resources, CLIP weights), so an offline machine fails in seconds instead of through a
    library's retries."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return None
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return None
    except OSError as exc:
        return f"cannot reach {host}:{port} ({exc.__class__.__name__}: {exc})"


def shared_nltk_dir() -> Path:
    return shared_dir() / "nltk_data"


def ensure_nltk_data_path() -> None:
    """Add ``$NLTK_DATA`` and the shared ``nltk_data`` folder to NLTK's search path (no download)."""
    import nltk  # heavy (seconds to import): imported only when an NLTK resource is needed

    for cand in (os.environ.get("NLTK_DATA"), str(shared_nltk_dir())):
        if cand and Path(cand).is_dir() and cand not in nltk.data.path:
            nltk.data.path.insert(0, cand)
