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


# ---------------------------------------------------------------------------- outputs vs inputs
class OutputPathError(ValueError):
    """An output path that would overwrite or sit inside an input, or that cannot be written (the message
    names the option)."""


def _resolved(p: Path) -> Path:
    return Path(p).expanduser().resolve()


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (same resolved path, or a hard / symbolic link to it)."""
    if _resolved(a) == _resolved(b):
        return True
    try:
        return os.path.samefile(Path(a).expanduser(), Path(b).expanduser())
    except OSError:   # one of them does not exist
        return False


def output_overlap(out: Path, inputs) -> str | None:
    """How writing ``out`` would touch one of ``inputs``, or ``None``.

    The one check of every command that writes: an output that **is** an input (same resolved path, or a
    hard or symbolic link to it), **contains** one (an output folder above an input), or **lies inside**
    one (an output under an input folder) is refused, since writing it would replace or mix with the data
    the command reads.

    Parameters
    ----------
    out : Path
        The output file or folder (it need not exist).
    inputs : iterable of (str, Path or None)
        ``(option, path)`` of every input the command reads (``None`` paths are skipped).

    Returns
    -------
    str or None
        ``"is the --x file P"``, ``"contains the --x input P"`` or ``"lies inside the --x folder P"``.
    """
    o = _resolved(out)
    for option, given in inputs:
        if given is None:
            continue
        i = _resolved(given)
        kind = "folder" if i.is_dir() else "file"
        if _same_file(out, given):
            return f"is the {option} {kind} {given}"
        if i != o and i.is_relative_to(o):
            return f"contains the {option} {kind} {given}"
        if o != i and kind == "folder" and o.is_relative_to(i):
            return f"lies inside the {option} {kind} {given}"
    return None


def check_output_path(option: str, out: Path, inputs=(), *, folder: bool = False) -> None:
    """Refuse an output before any work: one that :func:`output_overlap` finds touching an input, a file
    where a folder is wanted (or the reverse), a path under a file, or a place that cannot be written.

    Parameters
    ----------
    option : str
        The output's option (``"--out"``), named in the message.
    out : Path
        The output path (need not exist; its missing parents are created when it is written).
    inputs : iterable of (str, Path or None)
        The command's inputs (see :func:`output_overlap`).
    folder : bool
        Whether the output is a folder (else a file).

    Raises
    ------
    OutputPathError
        One line naming the option, the path and the reason.
    """
    p = Path(out).expanduser()
    if folder and p.exists() and not p.is_dir():
        raise OutputPathError(f"{option} {out} is a file; give a folder")
    if not folder and p.is_dir():
        raise OutputPathError(f"{option} {out} is a folder; give a file name (e.g. {Path(out) / 'out.json'})")
    overlap = output_overlap(out, inputs)
    if overlap is not None:
        raise OutputPathError(f"{option} {out} {overlap}: that input would be overwritten or mixed with the "
                              "output; give another path")
    ancestor = p.parent if not p.exists() else p
    while not ancestor.exists():   # the folders that writing will create
        ancestor = ancestor.parent
    if not ancestor.is_dir() and ancestor != p:
        raise OutputPathError(f"{option} {out}: {ancestor} is a file, not a folder")
    target = p if p.exists() else ancestor
    if not os.access(target, os.W_OK | (os.X_OK if target.is_dir() else 0)):
        raise OutputPathError(f"{option} {out}: {target} is not writable")
