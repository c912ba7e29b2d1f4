"""Line-oriented text files of a corpus (caption, split, judgment and checksum lists): the shared line
reader and the duplicate-entry check, so every parser reports a bad file the same way
(:class:`~corpora.base.CorpusError` naming the file and line)."""
from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from corpora.base import CorpusError, decode_utf8

__all__ = ["read_lines", "check_unique"]


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line_number, line)`` for every non-blank line, 1-based, without line ends.

    Non-UTF-8 bytes raise :class:`CorpusError` naming the line of the first bad byte.
    """
    text = decode_utf8(path.read_bytes(), path)
    # \r\n (Windows) and a bare \r (old Mac) end a line too: a caption never holds either
    for i, line in enumerate(re.split(r"\r\n|\r|\n", text), start=1):
        if line.strip():
            yield i, line


def check_unique(seen: dict, key, what: str, path: Path, ln: int) -> None:
    """Record ``key`` as seen on line ``ln``; seen before: :class:`CorpusError` ``"<what> (first on line N)"``
    naming both lines (duplicate caption ids, split entries, judgment rows)."""
    if key in seen:
        raise CorpusError(f"{what} (first on line {seen[key]})", path, ln)
    seen[key] = ln
