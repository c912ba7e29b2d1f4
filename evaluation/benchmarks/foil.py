"""FOIL-COCO (Shekhar et al. 2017, "FOIL it! Find One mismatch between Image and Language caption")
in its public release format, with the protocol of CLIPScore (Hessel et al. 2021, Sec. 4, Table 5) and
PAC-S (Sarto et al. 2023, Table 3).

File: ``foilv1.0_test_2017.json`` (foilunitn.github.io), COCO caption format: ``images`` (``id``,
``file_name``, a COCO *val2014* image) and ``annotations``, each with ``id``, ``image_id``, ``caption``,
``foil`` (``true`` for a foil caption, ``false`` for the original COCO caption), ``target_word`` /
``foil_word`` (``"ORIG"`` on an original).  The original caption and its foils share the annotation
``id``: one record per foil caption pairs it with the original of its ``id``.

References: the image's COCO captions (``captions_val2014.json``) except the original caption being
foiled (four remain); without the COCO file, the image's other original captions in the FOIL file.
Protocol: a scorer is right on a record when it scores the original above the foil (strict,
:func:`evaluation.correlation.foil_accuracy`), with 1 and with 4 references (the first one / four in
file order, as the public readers take them).  PAC-S evaluates the 8k-image subset of the test file
that does not overlap its fine-tuning images; ``images=`` restricts the records the same way.
"""
from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path

from corpora.base import decode_utf8
from evaluation.benchmarks.common import BenchmarkFormatError, as_benchmark_errors, normalise_caption, require_file
from evaluation.correlation import FoilRecord

__all__ = ["FOIL_TEST_FILE", "COCO_CAPTIONS_FILE", "read_json", "coco_captions_by_file", "load_foil",
           "with_first_references"]

FOIL_TEST_FILE = "foilv1.0_test_2017.json"
COCO_CAPTIONS_FILE = "captions_val2014.json"


def read_json(path: str | Path, what: str):
    """The parsed JSON of ``path``; a missing file, bad UTF-8 or bad JSON (a truncated file) is one
    :class:`BenchmarkFormatError` naming the file and line."""
    p = require_file(path, what)
    with as_benchmark_errors():
        text = decode_utf8(p.read_bytes(), p)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchmarkFormatError(f"not valid JSON ({exc.msg}, column {exc.colno})", p, exc.lineno) from None


def _records(data, key: str, path: Path) -> list:
    if not isinstance(data, dict) or not isinstance(data.get(key), list):
        raise BenchmarkFormatError(f"expected a JSON object with a list under {key!r}", path, record=key)
    return data[key]


def _field(rec, name: str, kinds, path: Path, record: str):
    if not isinstance(rec, dict) or name not in rec:
        raise BenchmarkFormatError(f"missing key {name!r}", path, record=record)
    v = rec[name]
    if not isinstance(v, kinds) or (isinstance(v, bool) and kinds is not bool):  # JSON true is no id
        raise BenchmarkFormatError(f"{name!r} has the wrong type ({type(v).__name__}: {v!r})", path, record=record)
    return v


def _file_names(data, path: Path) -> dict:
    """``{image id: file name}`` from ``images`` (absent: the COCO val2014 naming rule)."""
    if isinstance(data, dict) and "images" not in data:
        return {}
    out = {}
    for i, im in enumerate(_records(data, "images", path)):
        rec = f"images[{i}]"
        out[_field(im, "id", (int, str), path, rec)] = _field(im, "file_name", str, path, rec)
    return out


def _file_name(names: Mapping, image_id) -> str:
    return names.get(image_id) or f"COCO_val2014_{int(image_id):012d}.jpg"


def coco_captions_by_file(path: str | Path) -> dict[str, list[str]]:
    """``{image file name: [captions in file order]}`` of a COCO captions file (``captions_val2014.json``:
    ``images`` with ``id`` / ``file_name``, ``annotations`` with ``image_id`` / ``caption``)."""
    path = Path(path)
    data = read_json(path, "COCO captions file")
    names = _file_names(data, path)
    out: dict[str, list[str]] = {}
    for i, ann in enumerate(_records(data, "annotations", path)):
        rec = f"annotations[{i}]"
        image_id = _field(ann, "image_id", (int, str), path, rec)
        out.setdefault(_file_name(names, image_id), []).append(_field(ann, "caption", str, path, rec).strip())
    return out


def _pairs(data, path: Path) -> tuple[dict, list[tuple[int, object, str]]]:
    """``{id: (index, image id, original caption)}`` and ``[(index, id, foil caption)]``."""
    origs: dict = {}
    foils = []
    for i, ann in enumerate(_records(data, "annotations", path)):
        rec = f"annotations[{i}]"
        ann_id = _field(ann, "id", (int, str), path, rec)
        image_id = _field(ann, "image_id", (int, str), path, rec)
        caption = _field(ann, "caption", str, path, rec).strip()
        if not caption:
            raise BenchmarkFormatError("empty caption", path, record=rec)
        if _field(ann, "foil", bool, path, rec):
            foils.append((i, ann_id, caption, image_id))
        elif ann_id in origs:
            raise BenchmarkFormatError(f"second original (foil: false) caption for id {ann_id} (first at "
                                       f"annotations[{origs[ann_id][0]}])", path, record=rec)
        else:
            origs[ann_id] = (i, image_id, caption)
    return origs, foils


def _references(names, origs: dict, coco: Mapping[str, list[str]] | None, coco_path, path: Path) -> dict:
    """``{id: references}``: the image's captions without the original being foiled."""
    by_image: dict = {}
    if coco is None:
        for ann_id, (_, image_id, caption) in origs.items():
            by_image.setdefault(image_id, []).append((ann_id, caption))
    out = {}
    for ann_id, (i, image_id, caption) in origs.items():
        if coco is None:
            out[ann_id] = tuple(c for other, c in by_image[image_id] if other != ann_id)
            continue
        refs = coco.get(_file_name(names, image_id))
        if refs is None:
            raise BenchmarkFormatError(f"image {_file_name(names, image_id)} has no captions in {coco_path}",
                                       path, record=f"annotations[{i}]")
        norm = [normalise_caption(r) for r in refs]
        target = normalise_caption(caption)
        own = norm.index(target) if target in norm else None
        out[ann_id] = tuple(r for k, r in enumerate(refs) if k != own)
    return out


def load_foil(path: str | Path, *, coco_captions: str | Path | None = None,
              images: Collection[str] | None = None) -> list[FoilRecord]:
    """FOIL-COCO pairs as :class:`~evaluation.correlation.FoilRecord` (see the module docstring).

    Parameters
    ----------
    path : str or Path
        ``foilv1.0_test_2017.json`` (or the train file, same format).
    coco_captions : str or Path, optional
        ``captions_val2014.json``; its captions of each image, minus the original caption, are the
        references (the published protocol).  Without it, the image's other original captions in the
        FOIL file are.
    images : collection of str, optional
        Keep only the records of these image file names (e.g. PAC-S's subset).

    Returns
    -------
    list of FoilRecord
        One per foil caption, in file order: ``image_id`` = the COCO file name (relative to
        ``val2014/``), ``correct`` = the original caption of the foil's ``id``, ``foil``, ``references``.

    Raises
    ------
    BenchmarkFormatError
        Naming the file and line (invalid JSON) or record (``annotations[i]``): a missing key, a value
        of the wrong type, a second original for one ``id``, a foil whose ``id`` has no original or
        whose image differs from the original's, an image missing from the COCO captions file.
    """
    path = Path(path)
    data = read_json(path, "FOIL file")
    names = _file_names(data, path)
    origs, foils = _pairs(data, path)
    coco = coco_captions_by_file(coco_captions) if coco_captions is not None else None
    refs = _references(names, origs, coco, coco_captions, path)
    keep = None if images is None else set(images)
    out = []
    for i, ann_id, caption, image_id in foils:
        if ann_id not in origs:
            raise BenchmarkFormatError(f"foil caption of id {ann_id} has no original (foil: false) caption "
                                       f"with that id", path, record=f"annotations[{i}]")
        _, orig_image, correct = origs[ann_id]
        if orig_image != image_id:
            raise BenchmarkFormatError(f"foil caption of id {ann_id} is on image {image_id}, its original on "
                                       f"{orig_image}", path, record=f"annotations[{i}]")
        name = _file_name(names, image_id)
        if keep is None or name in keep:
            out.append(FoilRecord(image_id=name, correct=correct, foil=caption, references=refs[ann_id]))
    return out


def with_first_references(records: list[FoilRecord], k: int) -> list[FoilRecord]:
    """The records with their first ``k`` references only (FOIL 1-ref: ``k=1``, 4-ref: ``k=4``)."""
    if k < 1:
        raise ValueError(f"with_first_references: k must be ≥ 1, got {k}")
    return [FoilRecord(r.image_id, r.correct, r.foil, tuple(r.references[:k])) for r in records]
