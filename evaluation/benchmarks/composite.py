"""Composite (Aditya et al. 2015, "From images to sentences through scene description graphs using
commonsense reasoning and knowledge") in its public release format, with the protocol of CLIPScore
(Hessel et al. 2021, Sec. 4 and App. A) and PAC-S (Sarto et al. 2023, Table 1).

Files: one Amazon Mechanical Turk results file per source corpus, ``8k_correctness.csv`` (Flickr8k),
``30k_correctness.csv`` (Flickr30k) and ``coco_correctness.csv`` (COCO val2014), *semicolon*-separated
with a header row.  The columns read: ``Input.image_url`` (the image; its file name is the last path
component), ``Input.text1`` … ``Input.textK`` (the K judged captions: 3 in the Flickr8k part, 4 in the
others) and ``Answer.Q1Answer`` … ``Answer.QKAnswer`` (their *correctness* on a 1–5 scale); the AMT
bookkeeping columns are ignored.  The ``*_throughness.csv`` files (thoroughness) are not used.  Rows
without an image URL are skipped (public readers drop the last two rows of each file), as is a caption
whose answer is empty (unrated); both are counted in the rows' notes.

References are not in the release: they are the image's captions in its source corpus
(``Flickr8k.token.txt``, Flickr30k's ``results_20130124.token``, COCO's ``captions_val2014.json``),
without the judged human caption (CLIPScore: one of the image's references was rated, so it is removed
from the references; a caption of the image that equals any judged candidate, whitespace / case
normalised, is removed from every row of that image).  One row per rated caption; statistic: Kendall
τ-c (CLIPScore Table 1, PAC-S Table 1).
"""
from __future__ import annotations

import csv
import io
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from corpora.base import decode_utf8
from corpora.flickr8k import parse_token_file
from evaluation.benchmarks.common import BenchmarkFormatError, as_benchmark_errors, normalise_caption
from evaluation.benchmarks.foil import coco_captions_by_file
from evaluation.correlation import JudgmentRows

__all__ = ["COMPOSITE_FILES", "COMPOSITE_REFERENCE_FILES", "CompositeJudgment", "parse_composite_csv",
           "load_composite"]

#: Part -> judgment file (correctness) of the release.
COMPOSITE_FILES = {"flickr8k": "8k_correctness.csv", "flickr30k": "30k_correctness.csv",
                   "coco": "coco_correctness.csv"}
#: Part -> the source corpus's caption file that gives the references.
COMPOSITE_REFERENCE_FILES = {"flickr8k": "Flickr8k.token.txt", "flickr30k": "results_20130124.token",
                             "coco": "captions_val2014.json"}
_TEXT_COLUMN = re.compile(r"Input\.text(\d+)$")
_SCORE_RANGE = (1.0, 5.0)


@dataclass(frozen=True)
class CompositeJudgment:
    """One AMT row: an image file, its judged captions and their correctness (``None`` = unrated)."""

    image_file: str
    captions: tuple[str, ...]
    scores: tuple[float | None, ...]
    line: int


def _columns(header: list[str], path: Path) -> tuple[int, list[int], list[int]]:
    """Indices of ``Input.image_url``, ``Input.text1..K`` and ``Answer.Q1Answer..QKAnswer``."""
    names = [h.strip() for h in header]
    ks = sorted(int(m.group(1)) for h in names if (m := _TEXT_COLUMN.match(h)))
    if not ks:
        raise BenchmarkFormatError("no Input.text1 … column in the header (is the file ';'-separated?)", path, 1)
    need = ["Input.image_url"] + [f"Input.text{k}" for k in range(1, ks[-1] + 1)] \
        + [f"Answer.Q{k}Answer" for k in range(1, ks[-1] + 1)]
    for n in need:
        if n not in names:
            raise BenchmarkFormatError(f"missing column {n!r} in the header", path, 1)
    k = ks[-1]
    return names.index(need[0]), [names.index(n) for n in need[1:k + 1]], [names.index(n) for n in need[k + 1:]]


def _score(text: str, path: Path, line: int, column: str) -> float | None:
    text = text.strip()
    if not text:
        return None
    try:
        v = float(text)
    except ValueError:
        v = float("nan")
    if not _SCORE_RANGE[0] <= v <= _SCORE_RANGE[1]:
        raise BenchmarkFormatError(f"{column} must be a correctness score in 1–5, got {text!r}", path, line)
    return v


def parse_composite_csv(path: str | Path) -> tuple[list[CompositeJudgment], int]:
    """The judged rows of one Composite file and the number of rows skipped for lack of an image URL.

    Raises :class:`BenchmarkFormatError` (file:line) for bad UTF-8, a header without the columns of the
    module docstring, a row with fewer fields than the header, an empty caption or a score that is not
    a number in 1–5.
    """
    path = Path(path)
    with as_benchmark_errors():
        text = decode_utf8(path.read_bytes(), path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=";")
    try:
        header = next(reader)
    except StopIteration:
        raise BenchmarkFormatError("empty file (no header row)", path, 1) from None
    url_i, text_i, ans_i = _columns(header, path)
    rows, skipped, start = [], 0, reader.line_num + 1
    for fields in reader:
        line, start = start, reader.line_num + 1
        if not any(f.strip() for f in fields) or (len(fields) > url_i and not fields[url_i].strip()):
            skipped += 1
            continue
        if len(fields) < len(header):
            raise BenchmarkFormatError(f"{len(fields)} fields, the header has {len(header)}", path, line)
        caps = tuple(fields[i].strip() for i in text_i)
        for k, c in enumerate(caps, start=1):
            if not c:
                raise BenchmarkFormatError(f"empty caption in Input.text{k}", path, line)
        scores = tuple(_score(fields[i], path, line, f"Answer.Q{k}Answer") for k, i in enumerate(ans_i, start=1))
        image = fields[url_i].strip().rstrip("/").rsplit("/", 1)[-1]
        rows.append(CompositeJudgment(image, caps, scores, line))
    return rows, skipped


def _token_file_captions(path: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    with as_benchmark_errors():
        records = parse_token_file(path)
    for rec in records:
        out.setdefault(rec.image_id, []).append(rec.text)
    return out


def _reference_captions(part: str, path: Path) -> dict[str, list[str]]:
    if not path.is_file():
        raise BenchmarkFormatError(f"reference captions of the Composite {part} part not found (expected "
                                   f"{COMPOSITE_REFERENCE_FILES[part]}, pass references={{{part!r}: path}})", path)
    return coco_captions_by_file(path) if path.suffix == ".json" else _token_file_captions(path)


def _image_files(judged: list[CompositeJudgment], refs_of: Mapping[str, list[str]], csv_path: Path,
                 ref_path: Path) -> list[str]:
    """The reference file's name of each judged row's image: the URL's file name, or the caption file's
    name with the same stem (the public readers match ``1000092795`` with ``1000092795.jpg``)."""
    by_stem = {Path(name).stem: name for name in refs_of}
    out = []
    for j in judged:
        name = j.image_file if j.image_file in refs_of else by_stem.get(Path(j.image_file).stem)
        if name is None:
            raise BenchmarkFormatError(f"image {j.image_file} has no captions in {ref_path}", csv_path, j.line)
        out.append(name)
    return out


def _part_rows(part: str, judged: list[CompositeJudgment], refs_of: Mapping[str, list[str]], csv_path: Path,
               ref_path: Path, out: dict, limit: int | None) -> None:
    """Append the rows of one part to ``out`` (lists keyed like :class:`JudgmentRows`' fields), the first
    ``limit`` captions of each judged row (all with ``None``)."""
    files = _image_files(judged, refs_of, csv_path, ref_path)
    judged_text: dict[str, set[str]] = {}
    for j, f in zip(judged, files):
        judged_text.setdefault(f, set()).update(normalise_caption(c) for c in j.captions)
    for j, f in zip(judged, files):
        refs = [r for r in refs_of[f] if normalise_caption(r) not in judged_text[f]]
        if not refs:
            raise BenchmarkFormatError(f"image {f}: no reference caption left in {ref_path} once the "
                                       f"judged captions are removed", csv_path, j.line)
        for k, (cap, s) in enumerate(zip(j.captions[:limit], j.scores[:limit]), start=1):
            if s is None:
                out["unrated"] += 1
                continue
            image_id = f"{part}/{f}"
            key = (image_id, cap)
            out["pairs"].setdefault(key, len(out["pairs"]))
            out["image_ids"].append(image_id)
            out["candidate_ids"].append(f"{image_id}#{k}")
            out["candidates"].append(cap)
            out["references"].append(refs)
            out["human"].append(s)
            out["pair_index"].append(out["pairs"][key])


def load_composite(folder: str | Path, *, references: Mapping[str, str | Path] | None = None,
                   captions_per_row: int | None = None) -> JudgmentRows:
    """Composite correctness judgments as :class:`~evaluation.correlation.JudgmentRows` (see the module
    docstring for the files and the protocol).

    Parameters
    ----------
    folder : str or Path
        Holds the parts' judgment files (:data:`COMPOSITE_FILES`; at least one) and, unless given in
        ``references``, their reference caption files (:data:`COMPOSITE_REFERENCE_FILES`).
    references : mapping, optional
        Part (``"flickr8k"``, ``"flickr30k"``, ``"coco"``) -> its caption file, overriding
        ``folder / COMPOSITE_REFERENCE_FILES[part]``.
    captions_per_row : int, optional
        Keep the first ``captions_per_row`` judged captions of each row (``Input.text1`` …); all by
        default.  The release rates 3 captions per Flickr8k image and 4 per Flickr30k / COCO image
        (14,983 judgments); CLIPScore and PAC-S report 3 per image (3,995 × 3 = 11,985, Hessel in
        github.com/jmhessel/clipscore issue #13) without saying which three: ``captions_per_row=3``
        gives that count with the first three.

    Returns
    -------
    JudgmentRows
        ``protocol="composite"``; one row per rated caption; ``image_ids`` are ``"<part>/<file name>"``
        (the name in the reference file, matched to the URL's file name directly or by stem), i.e.
        relative to a Composite image folder holding ``flickr8k/`` (Flickr8k's
        ``Flicker8k_Dataset``), ``flickr30k/`` (``flickr30k-images``) and ``coco/`` (``val2014``);
        ``candidate_ids`` add ``#k`` (the ``Input.textk`` column); ``human`` is the 1–5 correctness.

    Raises
    ------
    BenchmarkFormatError
        One error naming the file and line: no judgment file in ``folder``, a missing reference
        file, a malformed judgment file (:func:`parse_composite_csv`), an image without captions in
        its reference file, or a malformed reference file.
    """
    folder = Path(folder)
    if captions_per_row is not None and (not isinstance(captions_per_row, int) or captions_per_row < 1):
        raise ValueError(f"load_composite: captions_per_row must be None or an integer ≥ 1, got {captions_per_row!r}")
    references = dict(references or {})
    unknown = sorted(set(references) - set(COMPOSITE_FILES))
    if unknown:
        raise ValueError(f"load_composite: unknown part(s) {unknown} in references (parts: {list(COMPOSITE_FILES)})")
    parts = [p for p, f in COMPOSITE_FILES.items() if (folder / f).is_file()]
    if not parts:
        raise BenchmarkFormatError(f"no Composite judgment file (expected one of {list(COMPOSITE_FILES.values())})",
                                   folder)
    acc = {"pairs": {}, "image_ids": [], "candidate_ids": [], "candidates": [], "references": [], "human": [],
           "pair_index": [], "unrated": 0}
    notes = []
    for part in parts:
        csv_path = folder / COMPOSITE_FILES[part]
        ref_path = Path(references.get(part, folder / COMPOSITE_REFERENCE_FILES[part]))
        judged, skipped = parse_composite_csv(csv_path)
        before, unrated = len(acc["human"]), acc["unrated"]
        _part_rows(part, judged, _reference_captions(part, ref_path), csv_path, ref_path, acc, captions_per_row)
        notes.append(f"{part}: {csv_path.name}, {len(judged)} judged rows ({skipped} rows without an image URL "
                     f"skipped), {len(acc['human']) - before} rated captions ({acc['unrated'] - unrated} unrated "
                     f"skipped); references from {ref_path.name}")
    return JudgmentRows("composite", acc["image_ids"], acc["candidate_ids"], acc["candidates"], acc["references"],
                        np.asarray(acc["human"], dtype=np.float64), np.asarray(acc["pair_index"], dtype=np.int64),
                        notes=notes)
