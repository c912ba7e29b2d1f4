"""What the benchmark loaders share: the one error type and caption normalisation."""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from corpora.base import CorpusError

__all__ = ["BenchmarkFormatError", "normalise_caption", "require_file", "as_benchmark_errors"]


class BenchmarkFormatError(CorpusError):
    """A benchmark file is missing, malformed or inconsistent.

    The message starts with the file and, where it applies, the 1-based line (``path:line: ...``, text
    files and JSON syntax errors) or the record (``path: annotations[12]: ...``, JSON records and .mat
    variables).  A :class:`ValueError` (through :class:`~corpora.base.CorpusError`), so callers that
    already report a malformed corpus file report this one the same way.

    Parameters
    ----------
    message : str
    path : str or Path
    line : int, optional
        1-based line number in ``path``.
    record : str, optional
        Where in a structured file: ``"annotations[12]"``, ``"triplets[0, 95]"``, ...
    """

    def __init__(self, message: str, path: str | Path, line: int | None = None, record: str | None = None):
        super().__init__(message if record is None else f"{record}: {message}", path, line)
        self.record = record


def normalise_caption(text: str) -> str:
    """Whitespace-collapsed, lower-cased text: how a judged candidate is matched against its image's
    reference captions (as :func:`evaluation.correlation.flickr8k_expert_rows` does)."""
    return " ".join(str(text).lower().split())


def require_file(path: str | Path, what: str) -> Path:
    """``path`` as a :class:`Path` if it is a file; otherwise :class:`BenchmarkFormatError` saying which
    file of which benchmark is missing."""
    p = Path(path)
    if not p.is_file():
        raise BenchmarkFormatError(f"{what} not found (no such file)", p)
    return p


@contextmanager
def as_benchmark_errors() -> Iterator[None]:
    """Re-raise a :class:`~corpora.base.CorpusError` of the corpus readers reused here (UTF-8 check,
    Flickr caption token files) as a :class:`BenchmarkFormatError` with the same file, line and message,
    so every loader raises the one error type."""
    try:
        yield
    except BenchmarkFormatError:
        raise
    except CorpusError as exc:
        where = f"{exc.path}:{exc.line}: " if exc.line is not None else f"{exc.path}: "
        msg = str(exc)
        raise BenchmarkFormatError(msg[len(where):] if msg.startswith(where) else msg, exc.path or "?",
                                   exc.line) from None
