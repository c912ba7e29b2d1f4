"""Optional MD5 verification of image files against an ``md5sum``-style list.

The list has one ``<md5>  <relative path>`` line per file (``md5sum`` text mode; the binary-mode marker
``<md5> *<path>`` is accepted too), e.g. ``shared/data/flickr8k/checksums/flickr8k_checksum.txt``::

    2ced981ae965987bbe88552d5562ff10  Flicker8k_Dataset/1000268201_693b08cb0e.jpg

Image ids are the file names (``1000268201_693b08cb0e.jpg``).  A listed path is looked up first as
``images_root / <relative path>`` (``images_root`` = the dataset root) and then as
``images_root / <file name>`` (``images_root`` = the image folder itself), so either folder can be passed.

Files are hashed with :mod:`hashlib` in 1 MiB chunks.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from corpora.base import CorpusError
from corpora.flickr8k import IMAGE_DIR_NAMES   # the image folders of the known layouts
from corpora.textfiles import check_unique, read_lines

__all__ = ["ChecksumReport", "read_checksum_file", "md5_file", "verify_checksums"]

_LINE = re.compile(r"^([0-9a-fA-F]{32}) [ *](.+)$")
_CHUNK = 1 << 20


def md5_file(path: str | Path) -> str:
    """Hex MD5 of a file, read in 1 MiB chunks."""
    h = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def read_checksum_file(path: str | Path) -> dict[str, tuple[str, str]]:
    """``{image id (file name): (md5, relative path)}``; malformed lines raise :class:`CorpusError`."""
    path = Path(path)
    out: dict[str, tuple[str, str]] = {}
    seen: dict[str, int] = {}
    for ln, line in read_lines(path):
        m = _LINE.match(line)
        if m is None:
            raise CorpusError(f"expected '<32 hex md5>  <path>', got {line[:80]!r}", path, ln)
        rel = m.group(2).strip()
        name = PurePosixPath(rel.replace("\\", "/")).name
        check_unique(seen, name, f"{name} listed twice", path, ln)
        out[name] = (m.group(1).lower(), rel)
    return out


@dataclass
class ChecksumReport:
    """Outcome of :func:`verify_checksums`.

    Attributes
    ----------
    ok : list of str
        Image ids whose MD5 matches.
    mismatched : list of (image id, expected md5, actual md5, path)
    missing : list of (image id, expected path)
        Listed (or requested) files that are not on disk – only filled when ``only_present=False``.
    not_listed : list of str
        Requested image ids without a line in the checksum file.
    n_not_present : int
        Listed files absent from disk and skipped because ``only_present=True``.
    """

    checksum_file: Path
    images_root: Path
    ok: list[str] = field(default_factory=list)
    mismatched: list[tuple[str, str, str, Path]] = field(default_factory=list)
    missing: list[tuple[str, Path]] = field(default_factory=list)
    not_listed: list[str] = field(default_factory=list)
    n_not_present: int = 0

    @property
    def n_requested(self) -> int:
        """Image ids asked for (every listed file by default): each lands in exactly one of the lists above
        or in ``n_not_present``."""
        return (len(self.ok) + len(self.mismatched) + len(self.missing) + len(self.not_listed)
                + self.n_not_present)

    @property
    def nothing_verified(self) -> bool:
        """Files were asked for but none was found on disk (a wrong folder?)."""
        return not (self.ok or self.mismatched) and self.n_not_present > 0

    @property
    def all_ok(self) -> bool:
        """No mismatch, no missing file, no unlisted requested id — and at least one file verified when any
        was asked for (a wrong folder must not pass as "all files fine")."""
        return not (self.mismatched or self.missing or self.not_listed or self.nothing_verified)

    def __bool__(self) -> bool:
        return self.all_ok

    def raise_for_errors(self) -> None:
        """Raise :class:`CorpusError` (with the report as message) unless :attr:`all_ok`."""
        if not self.all_ok:
            raise CorpusError(str(self), self.checksum_file)

    def __str__(self) -> str:
        head = (f"checksums ({self.checksum_file.name}, images under {self.images_root}): "
                f"{len(self.ok)} ok, {len(self.mismatched)} mismatched, {len(self.missing)} missing, "
                f"{len(self.not_listed)} not listed")
        if self.n_not_present:
            head += f"; {self.n_not_present} listed files not present (skipped)"
        lines = [head]
        if self.nothing_verified:
            lines.append(f"  none of the listed files is under {self.images_root}: wrong folder?")
        for im, exp, act, p in self.mismatched:
            lines.append(f"  MISMATCH {im}: expected {exp}, got {act} ({p})")
        for im, p in self.missing[:20]:
            lines.append(f"  MISSING  {im}: {p}")
        if len(self.missing) > 20:
            lines.append(f"  … {len(self.missing) - 20} more missing")
        for im in self.not_listed[:20]:
            lines.append(f"  NOT LISTED {im}")
        if len(self.not_listed) > 20:
            lines.append(f"  … {len(self.not_listed) - 20} more not listed")
        return "\n".join(lines)


def verify_checksums(images_root: str | Path, checksum_file: str | Path,
                     image_ids: Iterable[str] | None = None, only_present: bool = True) -> ChecksumReport:
    """Verify image files against an MD5 list.

    Parameters
    ----------
    images_root : path
        Dataset root (paths in the list are relative to it) or the image folder itself.
    checksum_file : path
        ``md5  relative/path`` lines.
    image_ids : iterable of str, optional
        File names to check (default: every listed file).
    only_present : bool
        ``True`` (default): files not on disk are skipped and only counted (``n_not_present``) – the
        right mode when only some images are downloaded.  ``False``: they are reported as missing.
    """
    root = Path(images_root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"images_root={str(images_root)!r}: no such folder")
    ck = Path(checksum_file).expanduser()
    table = read_checksum_file(ck)
    report = ChecksumReport(checksum_file=ck, images_root=root)
    wanted = list(table) if image_ids is None else list(dict.fromkeys(image_ids))
    folders = [root] + [root / n for n in IMAGE_DIR_NAMES if (root / n).is_dir()]
    for im in wanted:
        entry = table.get(im)
        if entry is None:
            report.not_listed.append(im)
            continue
        expected, rel = entry
        cands = [root / rel] + [f / im for f in folders]
        p = next((c for c in cands if c.is_file()), None)
        if p is None:
            if only_present:
                report.n_not_present += 1
            else:
                report.missing.append((im, cands[0] if cands[0].parent.is_dir() else cands[1]))
            continue
        actual = md5_file(p)
        if actual == expected:
            report.ok.append(im)
        else:
            report.mismatched.append((im, expected, actual, p))
    return report
