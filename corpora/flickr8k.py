# Size (~650 lines): the parsers of the six Flickr8k text files and the loader that cross-checks them.
"""Flickr8k loader (Hodosh, Young & Hockenmaier 2013, "Framing Image Description as a Ranking Task",
JAIR 47) – the standard text bundle and the Kaggle ``captions.txt`` variant.

Two layers:

* **parsers** (``parse_*``) read one file each and return *raw* records exactly as the file states
  them – e.g. :func:`parse_token_file` keeps the bogus id ``2258277193_586949ec62.jpg.1`` so that the
  raw counts are the file's (40,460 caption lines, 8,092 ids);
* **builders** (:func:`load_flickr8k`, :func:`load_captions_csv`) check the records against each other
  and build the :class:`~corpora.base.Corpus` used downstream.

Standard layout (``root`` is the folder holding both)::

    root/Flicker8k_Dataset/*.jpg      (also accepted: Flickr8k_Dataset/, Images/)
    root/Flickr8k_text/               (or the text files directly in root)
        Flickr8k.token.txt            <image>#<k> TAB caption             (required)
        Flickr8k.lemma.token.txt      <image>#<k> TAB lemmatised caption  (optional -> Caption.lemma)
        Flickr_8k.{train,dev,test}Images.txt   one image id per line      (optional, see below)
        ExpertAnnotations.txt         image TAB caption-id TAB s1 TAB s2 TAB s3      (optional)
        CrowdFlowerAnnotations.txt    image TAB caption-id TAB frac-yes TAB #yes TAB #no   (optional)

Kaggle layout: ``root/captions.txt`` (CSV with an ``image,caption`` header) + ``root/Images/``.

Errors and warnings
-------------------
Errors are :class:`~corpora.base.CorpusError` with the file and the 1-based line number:

* a line without a TAB, a caption id that is not ``<image>#<k>``, a duplicate caption id, an empty
  caption, bytes that are not UTF-8 (the line of the first bad byte is named);
* a split file naming an image without captions, an image listed twice or in two splits;
* an annotation row with the wrong number of columns, an image id or caption id that has no captions
  in the token file, expert scores outside 1..4, a crowd fraction outside [0, 1] or inconsistent with
  ``#yes / (#yes + #no)`` (tolerance 0.01), negative counts or no judgments at all;
* a crowd file that does not contain exactly one caption of each test image's own (the Hodosh test
  pool, see below).

Warnings (``warnings.warn`` + a line in ``corpus.notes``), the corpus still loads:

* the known bogus id ``2258277193_586949ec62.jpg.1`` (generally: an id that does not end in an image
  extension and is in no split) – it stays in the raw parse but is excluded from the corpus;
* lemma lines for unknown caption ids (ignored) and captions without a lemma line (``lemma=None``) –
  the lemma file is mapped by caption id, never by line position;
* no split files (the ``captions.txt`` layout): a seeded split is made (:func:`seeded_split`).

Blank lines (only whitespace) are skipped everywhere; ``\\r\\n`` line ends and a UTF-8 BOM are accepted.

The Hodosh test pool
--------------------
Sec. 4.1.1: the test pool holds one caption per test image – the caption that was judged by the crowd.
CrowdFlowerAnnotations.txt contains exactly 1,000 distinct caption ids, one written for each test
image; :func:`load_flickr8k` recovers them (for every test image, the caption id *of that image* that
appears in the crowd file's caption column), checks that there is exactly one per test image and
stores them, in test-split order, as ``corpus.fixed_pools["test"]``.
"""
from __future__ import annotations

import csv
import io
import math
import re
import warnings
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from corpora.base import (
    Caption,
    CaptionId,
    Corpus,
    CorpusError,
    CrowdJudgment,
    ExpertJudgment,
    ImageId,
    caption_id,
    decode_utf8,
    is_caption_index,
)
from corpora.images import PathImageLoader
from corpora.textfiles import check_unique, read_lines

__all__ = [
    "BOGUS_IMAGE_ID", "IMAGE_DIR_NAMES", "TOKEN_FILE", "LEMMA_FILE", "SPLIT_FILES", "EXPERT_FILE",
    "CROWD_FILE", "CaptionRecord", "Flickr8kLayout", "find_layout", "parse_token_file",
    "parse_lemma_file", "parse_split_file", "parse_expert_file", "parse_crowd_file",
    "parse_captions_csv", "seeded_split", "hodosh_test_captions", "load_flickr8k", "load_captions_csv",
]

#: The one caption-file id of Flickr8k that names no image (a duplicate upload's name).
BOGUS_IMAGE_ID = "2258277193_586949ec62.jpg.1"
#: Accepted names of the image folder, in order of preference.
IMAGE_DIR_NAMES = ("Flicker8k_Dataset", "Flickr8k_Dataset", "Images")
TEXT_DIR_NAME = "Flickr8k_text"
TOKEN_FILE = "Flickr8k.token.txt"
LEMMA_FILE = "Flickr8k.lemma.token.txt"
#: The name the bundle's readme.txt gives the lemma file (also accepted).
LEMMA_FILE_README = "Flickr8k.lemma.txt"
SPLIT_FILES = {"train": "Flickr_8k.trainImages.txt", "dev": "Flickr_8k.devImages.txt",
               "test": "Flickr_8k.testImages.txt"}
EXPERT_FILE = "ExpertAnnotations.txt"
CROWD_FILE = "CrowdFlowerAnnotations.txt"
CSV_FILE = "captions.txt"

_EXTENSIONS = r"(jpe?g|png|bmp|gif|tiff?|webp)"
_IMAGE_EXT = re.compile(rf".+\.{_EXTENSIONS}$", re.IGNORECASE)
#: A line inside a multi-line CSV caption that looks like a record of its own (``<image file>,…``).
_SWALLOWED_RECORD = re.compile(rf"[\r\n]\s*[^\s,]+\.{_EXTENSIONS}(#[0-9]+)?\s*,", re.IGNORECASE)
#: A token-file caption number (``#0`` … ``#4``) left on an image id in captions.txt (ASCII digits, as
#: :func:`corpora.base.is_caption_index`: the token file refuses ``#٣``, and so does captions.txt).
_CAPTION_NUMBER = re.compile(r"#[0-9]+$")
_FRACTION_TOL = 0.01


# ---------------------------------------------------------------------------------------- reading
@dataclass(frozen=True)
class CaptionRecord:
    """One line of a caption file as stated there."""

    caption_id: CaptionId
    image_id: ImageId
    index: int
    text: str
    line: int


def _parse_caption_id(cid: str, path: Path, line: int) -> tuple[str, int]:
    image_id, sep, k = cid.rpartition("#")
    if not sep or not image_id or not is_caption_index(k) or image_id != image_id.strip():
        raise CorpusError(f"malformed caption id {cid!r} (expected '<image>#<k>' with k a number)",
                          path, line)
    return image_id, int(k)


def parse_token_file(path: str | Path) -> list[CaptionRecord]:
    """Parse ``Flickr8k.token.txt`` (``<image>#<k> TAB caption`` per line) into raw records.

    Nothing is dropped: the bogus id ``2258277193_586949ec62.jpg.1`` is returned like any other.
    Raises :class:`CorpusError` (file:line) for a missing TAB, a malformed or duplicate caption id,
    an empty caption or non-UTF-8 bytes.
    """
    path = Path(path)
    out: list[CaptionRecord] = []
    seen: dict[tuple[str, int], int] = {}
    for ln, line in read_lines(path):
        cid, tab, text = line.partition("\t")
        if not tab:
            raise CorpusError("no TAB between caption id and caption", path, ln)
        cid = cid.strip()
        image_id, k = _parse_caption_id(cid, path, ln)
        text = text.strip()
        if not text:
            raise CorpusError(f"empty caption for {cid}", path, ln)
        # by (image, number): "x.jpg#0" and "x.jpg#00" are the same caption
        check_unique(seen, (image_id, k), f"duplicate caption id {cid}", path, ln)
        out.append(CaptionRecord(cid, image_id, k, text, ln))
    return out


def parse_lemma_file(path: str | Path) -> dict[CaptionId, tuple[str, int]]:
    """Parse ``Flickr8k.lemma.token.txt`` into ``{caption id: (lemmatised text, line)}``.

    Same format and errors as :func:`parse_token_file`, except that an empty lemma is kept as ``""``
    (the builder then leaves ``Caption.lemma`` as ``None``).
    """
    path = Path(path)
    out: dict[CaptionId, tuple[str, int]] = {}
    seen: dict[str, int] = {}
    for ln, line in read_lines(path):
        cid, tab, text = line.partition("\t")
        if not tab:
            raise CorpusError("no TAB between caption id and lemmatised caption", path, ln)
        cid = cid.strip()
        _parse_caption_id(cid, path, ln)
        check_unique(seen, cid, f"duplicate caption id {cid}", path, ln)
        out[cid] = (" ".join(text.split()), ln)
    return out


def parse_split_file(path: str | Path) -> list[tuple[ImageId, int]]:
    """Parse a ``Flickr_8k.*Images.txt`` split file into ``[(image id, line)]``; duplicates are errors."""
    path = Path(path)
    out: list[tuple[ImageId, int]] = []
    seen: dict[str, int] = {}
    for ln, line in read_lines(path):
        im = line.strip()
        if "\t" in im or " " in im:
            raise CorpusError(f"expected one image id per line, got {line!r}", path, ln)
        check_unique(seen, im, f"image {im} listed twice", path, ln)
        out.append((im, ln))
    return out


def _split_row(line: str, n: int, path: Path, ln: int, what: str) -> list[str]:
    cols = [c.strip() for c in line.split("\t")]
    if len(cols) != n:
        raise CorpusError(f"expected {n} TAB-separated columns ({what}), got {len(cols)}", path, ln)
    return cols


def _check_ids(image_id: str, cid: str, known_captions: Mapping[str, object] | None,
               known_images: Mapping[str, object] | set | None, path: Path, ln: int) -> None:
    _parse_caption_id(cid, path, ln)
    if known_images is not None and image_id not in known_images:
        raise CorpusError(f"unknown image id {image_id!r} (no captions for it in the caption file)",
                          path, ln)
    if known_captions is not None and cid not in known_captions:
        raise CorpusError(f"unknown caption id {cid!r} (not in the caption file)", path, ln)


def parse_expert_file(path: str | Path, known_images=None, known_captions=None) -> list[ExpertJudgment]:
    """Parse ``ExpertAnnotations.txt``: ``image TAB caption-id TAB s1 TAB s2 TAB s3``, scores in 1..4.

    ``known_images`` / ``known_captions`` (containers of ids), when given, make an unknown id an error
    naming file:line.
    """
    path = Path(path)
    out: list[ExpertJudgment] = []
    seen: dict[tuple[str, str], int] = {}
    for ln, line in read_lines(path):
        im, cid, *s = _split_row(line, 5, path, ln, "image, caption id, three expert scores")
        _check_ids(im, cid, known_captions, known_images, path, ln)
        check_unique(seen, (im, cid), f"pair ({im}, {cid}) is judged again", path, ln)
        try:
            scores = tuple(int(v) for v in s)
        except ValueError:
            raise CorpusError(f"expert scores must be integers 1..4, got {s}", path, ln) from None
        if any(not 1 <= v <= 4 for v in scores):
            raise CorpusError(f"expert scores must be in 1..4, got {list(scores)}", path, ln)
        out.append(ExpertJudgment(im, cid, scores))  # type: ignore[arg-type]
    return out


def parse_crowd_file(path: str | Path, known_images=None, known_captions=None) -> list[CrowdJudgment]:
    """Parse ``CrowdFlowerAnnotations.txt``: ``image TAB caption-id TAB fraction-yes TAB #yes TAB #no``.

    Checks: fraction in [0, 1], counts non-negative integers with at least one judgment, and
    ``|fraction - #yes / (#yes + #no)| <= 0.01``.
    """
    path = Path(path)
    out: list[CrowdJudgment] = []
    seen: dict[tuple[str, str], int] = {}
    for ln, line in read_lines(path):
        im, cid, frac_s, yes_s, no_s = _split_row(line, 5, path, ln, "image, caption id, fraction yes, "
                                                  "#yes, #no")
        _check_ids(im, cid, known_captions, known_images, path, ln)
        check_unique(seen, (im, cid), f"pair ({im}, {cid}) is judged again", path, ln)
        try:
            frac = float(frac_s)
            n_yes, n_no = int(yes_s), int(no_s)
        except ValueError:
            raise CorpusError(f"bad crowd values {[frac_s, yes_s, no_s]} (expected a number and two "
                              "integers)", path, ln) from None
        if not (math.isfinite(frac) and 0.0 <= frac <= 1.0):
            raise CorpusError(f"fraction yes must be in [0, 1], got {frac_s}", path, ln)
        if n_yes < 0 or n_no < 0 or n_yes + n_no == 0:
            raise CorpusError(f"judgment counts must be >= 0 with at least one judgment, got "
                              f"#yes={n_yes}, #no={n_no}", path, ln)
        if abs(frac - n_yes / (n_yes + n_no)) > _FRACTION_TOL:
            raise CorpusError(f"fraction yes {frac_s} disagrees with #yes/(#yes+#no) = "
                              f"{n_yes}/{n_yes + n_no}", path, ln)
        out.append(CrowdJudgment(im, cid, frac, n_yes, n_no))
    return out


def parse_captions_csv(path: str | Path) -> list[CaptionRecord]:
    """Parse the Kaggle ``captions.txt`` CSV (header ``image,caption``; quoted fields may hold commas
    and quotes).  Caption indices are assigned per image in file order (``#0``, ``#1``, …), so the file
    must keep the token file's caption order within each image for the expert / crowd judgments (which
    name ``#k``) to refer to the right captions.  An image id written with its caption number
    (``1000268201_693b08cb0e.jpg#0``, the token file's form) keeps that number as the caption's index; a
    caption id stated twice is a :class:`CorpusError` naming both lines.  A quoted caption may
    span lines; one that holds lines looking like records of their own (an unclosed quote swallowing the
    file) is a :class:`CorpusError` naming the line where it starts.
    """
    path = Path(path)
    text = decode_utf8(path.read_bytes(), path)
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        raise CorpusError("empty file (expected an 'image,caption' header)", path, 1) from None
    except csv.Error as exc:
        raise CorpusError(f"CSV error: {exc}", path, 1) from None
    cols = [h.strip().lower() for h in header]
    if "image" not in cols or "caption" not in cols:
        raise CorpusError(f"header must name columns 'image' and 'caption', got {header}", path, 1)
    i_im, i_cap = cols.index("image"), cols.index("caption")
    counter: Counter[str] = Counter()
    seen: dict[str, int] = {}
    out: list[CaptionRecord] = []
    prev_line = reader.line_num
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise CorpusError(f"CSV error: {exc}", path, reader.line_num) from None
        start, ln = prev_line + 1, reader.line_num
        prev_line = ln
        if not row or all(not c.strip() for c in row):
            continue
        if ln > start and any(_SWALLOWED_RECORD.search(c) for c in row):
            # a quoted caption may span lines, but not hold what looks like the next record: an unclosed
            # quote has swallowed the lines that follow
            raise CorpusError(f"a record spans lines {start}-{ln} and its caption holds lines that look like "
                              "records ('<image>,<caption>'): an unclosed '\"' in its caption?", path, start)
        if len(row) != len(header):
            raise CorpusError(f"expected {len(header)} columns {header}, got {len(row)} (quote captions "
                              "that contain commas)", path, ln)
        raw, cap = row[i_im].strip(), " ".join(row[i_cap].split())
        stated = _CAPTION_NUMBER.search(raw)
        im = raw[:stated.start()] if stated else raw
        if not im:
            raise CorpusError("empty image id", path, ln)
        if not cap:
            raise CorpusError(f"empty caption for image {im}", path, ln)
        k = int(stated.group()[1:]) if stated else counter[im]
        counter[im] = max(counter[im], k + 1)
        cid = caption_id(im, k)
        check_unique(seen, cid, f"duplicate caption id {cid}", path, ln)
        out.append(CaptionRecord(cid, im, k, cap, ln))
    return out


# ---------------------------------------------------------------------------------------- layout
@dataclass
class Flickr8kLayout:
    """Where the files of one Flickr8k copy are (``None`` = absent)."""

    root: Path
    images_dir: Path | None
    token_file: Path | None = None
    lemma_file: Path | None = None
    split_files: dict[str, Path] = field(default_factory=dict)
    expert_file: Path | None = None
    crowd_file: Path | None = None
    csv_file: Path | None = None

    @property
    def kind(self) -> str:
        """``"standard"`` (token file) or ``"csv"`` (captions.txt)."""
        return "standard" if self.token_file is not None else "csv"


def find_layout(root: str | Path, *, text_dir: str | Path | None = None,
                images_dir: str | Path | None = None) -> Flickr8kLayout:
    """Locate the Flickr8k files under ``root`` (see the module docstring for the accepted layouts)."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"Flickr8k root folder not found: {root}")
    if text_dir is not None:
        tdirs = [Path(text_dir).expanduser()]
        if not tdirs[0].is_dir():
            raise FileNotFoundError(f"Flickr8k text folder not found: {tdirs[0]}")
    else:
        tdirs = [d for d in (root / TEXT_DIR_NAME, root) if d.is_dir()]

    def find(name: str) -> Path | None:
        for d in tdirs:
            if (d / name).is_file():
                return d / name
        return None

    if images_dir is not None:
        idir: Path | None = Path(images_dir).expanduser()
    else:
        idir = next((root / n for n in IMAGE_DIR_NAMES if (root / n).is_dir()), None)
    lay = Flickr8kLayout(
        root=root, images_dir=idir, token_file=find(TOKEN_FILE),
        lemma_file=find(LEMMA_FILE) or find(LEMMA_FILE_README),
        split_files={s: p for s, n in SPLIT_FILES.items() if (p := find(n)) is not None},
        expert_file=find(EXPERT_FILE), crowd_file=find(CROWD_FILE),
    )
    if lay.token_file is None:
        lay.csv_file = find(CSV_FILE)
        if lay.csv_file is None:
            raise FileNotFoundError(
                f"no Flickr8k captions under {root}: expected {TEXT_DIR_NAME}/{TOKEN_FILE}, {TOKEN_FILE} "
                f"or {CSV_FILE} (searched: {', '.join(str(d) for d in tdirs)})")
    return lay


# ---------------------------------------------------------------------------------------- splits
def seeded_split(image_ids: Sequence[ImageId], seed: int = 0, *, n_dev: int | None = None,
                 n_test: int | None = None, n_train: int | None = None) -> dict[str, tuple[ImageId, ...]]:
    """A deterministic train/dev/test split for corpora that ship without split files.

    The ids are sorted, permuted with ``numpy.random.default_rng(seed)`` (stable across platforms and
    Python versions) and cut into dev, test and train.  Defaults follow Hodosh et al.'s 6000/1000/1000
    when there are at least 8,000 images (leftover images belong to no split, as the 91 extra images of
    the official split); smaller corpora are cut 75 % / 12.5 % / 12.5 %.
    """
    ids = sorted(set(image_ids))
    n = len(ids)
    if n >= 8000:
        d_dev, d_test, d_train = 1000, 1000, 6000
    else:
        d_dev = d_test = n // 8
        d_train = n - d_dev - d_test
    n_dev = d_dev if n_dev is None else int(n_dev)
    n_test = d_test if n_test is None else int(n_test)
    n_train = d_train if n_train is None else int(n_train)
    if min(n_dev, n_test, n_train) < 0 or n_dev + n_test + n_train > n:
        raise ValueError(f"split sizes train={n_train}, dev={n_dev}, test={n_test} do not fit {n} images")
    perm = np.random.default_rng(seed).permutation(n)
    order = [ids[i] for i in perm]
    return {"dev": tuple(order[:n_dev]), "test": tuple(order[n_dev:n_dev + n_test]),
            "train": tuple(order[n_dev + n_test:n_dev + n_test + n_train])}


def hodosh_test_captions(crowd: Sequence[CrowdJudgment], test_ids: Sequence[ImageId],
                         path: str | Path | None = None) -> tuple[CaptionId, ...]:
    """The Hodosh test caption pool (Sec. 4.1.1) recovered from the crowd judgments.

    For every test image, the caption id *written for that image* that occurs in the crowd file's
    caption column.  Exactly one per test image is required; anything else is a :class:`CorpusError`
    naming ``path``.  Returned in the order of ``test_ids``.
    """
    by_image: dict[str, set[str]] = defaultdict(set)
    for j in crowd:
        by_image[j.caption_id.rpartition("#")[0]].add(j.caption_id)
    pool: list[str] = []
    problems: list[str] = []
    for im in test_ids:
        cids = sorted(by_image.get(im, ()))
        if len(cids) != 1:
            problems.append(f"{im}: {len(cids)} ({', '.join(cids[:3]) or 'none'})")
        else:
            pool.append(cids[0])
    if problems:
        raise CorpusError(
            f"the Hodosh test pool needs exactly one judged caption of each test image's own; "
            f"{len(problems)} of {len(test_ids)} test images differ, e.g. {'; '.join(problems[:5])}", path)
    return tuple(pool)


# ---------------------------------------------------------------------------------------- builders
def _looks_bogus(image_id: str) -> bool:
    return image_id == BOGUS_IMAGE_ID or not _IMAGE_EXT.fullmatch(image_id)


def _image_loader(paths: Mapping[ImageId, Path], name: str) -> PathImageLoader:
    return PathImageLoader(paths, name)


def _warn(notes: list[str], msg: str) -> None:
    notes.append(msg)
    # _warn <- _build <- load_flickr8k / load_captions_csv <- the caller
    warnings.warn(msg, UserWarning, stacklevel=4)


def _read_splits(layout: Flickr8kLayout, by_image: Mapping[str, list[CaptionRecord]],
                 caption_path: Path) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, Path, int]]]:
    """The official split files found: ``{split: image ids}`` and each listed image's
    ``(split, file, line)``; an image without captions or in two splits, or a split file without any
    image id, is a :class:`CorpusError`."""
    splits: dict[str, tuple[str, ...]] = {}
    owner: dict[str, tuple[str, Path, int]] = {}
    for s in ("train", "dev", "test"):
        p = layout.split_files.get(s)
        if p is None:
            continue
        ids = []
        for im, ln in parse_split_file(p):
            if im not in by_image:
                raise CorpusError(f"image {im} has no captions in {caption_path.name}", p, ln)
            if im in owner:
                s0, p0, l0 = owner[im]
                raise CorpusError(f"image {im} is also in split {s0!r} ({p0.name}:{l0})", p, ln)
            owner[im] = (s, p, ln)
            ids.append(im)
        if not ids:   # else the split would be silently empty and every method on it skipped
            raise CorpusError(f"the {s} split file lists no image ids; give one image id per line", p)
        splits[s] = tuple(ids)
    return splits, owner


def _bogus_ids(by_image: Mapping[str, list[CaptionRecord]], owner: Mapping, caption_path: Path,
               notes: list[str]) -> list[str]:
    """Image ids that name no image file and are in no split (kept in the raw parse, excluded from the
    corpus, with a note); every id bogus (or none at all) is a :class:`CorpusError`."""
    bogus = sorted(im for im in by_image if _looks_bogus(im) and im not in owner)
    if not by_image:
        raise CorpusError("no caption lines", caption_path)
    if len(bogus) == len(by_image):
        raise CorpusError(f"no image ids that name an image file (e.g. {bogus[:3]}); expected ids such as "
                          "'1000268201_693b08cb0e.jpg'", caption_path)
    for im in bogus:
        lines = [r.line for r in by_image[im]]
        _warn(notes, f"{caption_path.name}: image id {im!r} (lines {min(lines)}-{max(lines)}, "
                     f"{len(lines)} captions) names no image file and is in no split – a known quirk of "
                     "Flickr8k; excluded from the corpus (raw counts above include it)")
    return bogus


def _captions_with_lemmas(image_ids: Sequence[str], by_image: Mapping[str, list[CaptionRecord]], bogus,
                          layout: Flickr8kLayout, notes: list[str]) -> tuple[dict[str, tuple[Caption, ...]], set[str]]:
    """Each image's captions in index order with their lemma lines (mapped by caption id), and the set of
    caption ids; missing and unknown lemma lines are noted."""
    captions: dict[str, tuple[Caption, ...]] = {}
    lemmas: dict[str, tuple[str, int]] = {}
    if layout.lemma_file is not None:
        lemmas = parse_lemma_file(layout.lemma_file)
    n_missing_lemma = 0
    known_cids: set[str] = set()
    for im in image_ids:
        caps = []
        for r in sorted(by_image[im], key=lambda r: r.index):
            lem = lemmas.get(r.caption_id, ("", 0))[0] or None
            if lemmas and lem is None:
                n_missing_lemma += 1
            caps.append(Caption(r.caption_id, im, r.index, r.text, lem))
            known_cids.add(r.caption_id)
        captions[im] = tuple(caps)
    if layout.lemma_file is not None:
        bogus_cids = {r.caption_id for im in bogus for r in by_image[im]}
        extra = [c for c in lemmas if c not in known_cids and c not in bogus_cids]
        if n_missing_lemma:
            _warn(notes, f"{layout.lemma_file.name}: {n_missing_lemma} captions have no (or an empty) "
                         "lemma line; their Caption.lemma is None")
        if extra:
            _warn(notes, f"{layout.lemma_file.name}: {len(extra)} lemma lines for unknown caption ids "
                         f"ignored (e.g. {extra[0]} on line {lemmas[extra[0]][1]})")
    return captions, known_cids


def _judgments(layout: Flickr8kLayout, captions, known_cids, splits, official_splits: bool, notes: list[str]):
    """``(expert, crowd, fixed pools)``: the judgment files found and, with the official split and the
    CrowdFlower file, Hodosh's fixed test pool of judged captions."""
    expert = crowd = None
    if layout.expert_file is not None:
        expert = tuple(parse_expert_file(layout.expert_file, captions, known_cids))
    fixed: dict[str, tuple[str, ...]] = {}
    if layout.crowd_file is not None:
        crowd = tuple(parse_crowd_file(layout.crowd_file, captions, known_cids))
        if official_splits:
            fixed["test"] = hodosh_test_captions(crowd, splits["test"], layout.crowd_file)
            notes.append(f"test pool: the {len(fixed['test'])} caption ids judged in {layout.crowd_file.name}")
        else:
            notes.append(f"{layout.crowd_file.name} loaded but no fixed test pool (no official split)")
    elif official_splits:
        _warn(notes, f"{CROWD_FILE} not found: the test pool is one seeded caption per test image (not "
                     "Hodosh's 1,000 judged captions) and only original pairs are relevant, so S@k and "
                     "R-precision are not the paper's")
    return expert, crowd, fixed


def _build(records: Sequence[CaptionRecord], caption_path: Path, layout: Flickr8kLayout, *,
           with_images: bool, split_seed: int, name: str) -> Corpus:
    notes: list[str] = []
    by_image: dict[str, list[CaptionRecord]] = defaultdict(list)
    for r in records:
        by_image[r.image_id].append(r)
    notes.append(f"{caption_path.name}: {len(records)} caption lines, {len(by_image)} image ids")
    splits, owner = _read_splits(layout, by_image, caption_path)   # official files, else seeded (below)
    official_splits = len(splits) == 3
    bogus = _bogus_ids(by_image, owner, caption_path, notes)
    bogus_set = set(bogus)
    image_ids = tuple(im for im in by_image if im not in bogus_set)
    captions, known_cids = _captions_with_lemmas(image_ids, by_image, bogus, layout, notes)
    if not official_splits:
        if splits:
            raise CorpusError(f"only some split files were found ({sorted(layout.split_files)}); provide "
                              "all three Flickr_8k.{train,dev,test}Images.txt or none", layout.root)
        splits = seeded_split(image_ids, split_seed)
        _warn(notes, f"no split files found: made a seeded split (seed={split_seed}) of "
                     f"{len(splits['train'])}/{len(splits['dev'])}/{len(splits['test'])} train/dev/test "
                     "images – NOT the official Hodosh split, results are not comparable with the paper")
    expert, crowd, fixed = _judgments(layout, captions, known_cids, splits, official_splits, notes)
    if layout.lemma_file is None and layout.kind == "standard":
        notes.append(f"{LEMMA_FILE} not found: the text kernels lemmatise the captions with NLTK's WordNet "
                     "lemmatiser instead")
    image_paths = loader = None
    if with_images:
        idir = layout.images_dir if layout.images_dir is not None else layout.root / IMAGE_DIR_NAMES[0]
        if layout.images_dir is None or not idir.is_dir():
            notes.append(f"image folder not found (looked for {', '.join(IMAGE_DIR_NAMES)} under "
                         f"{layout.root}); image paths point to {idir}")
        image_paths = {im: idir / im for im in image_ids}
        loader = _image_loader(image_paths, name)
    return Corpus(name=name, image_ids=image_ids, captions=captions, splits=splits,
                  image_loader=loader, image_paths=image_paths, expert=expert, crowd=crowd,
                  fixed_pools=fixed, notes=notes)


def load_flickr8k(root: str | Path, *, text_dir: str | Path | None = None,
                  images_dir: str | Path | None = None, with_images: bool = True,
                  split_seed: int = 0, name: str = "flickr8k") -> Corpus:
    """Load Flickr8k (standard text bundle or ``captions.txt``) as a :class:`Corpus`.

    Parameters
    ----------
    root : path
        Folder holding the image folder and the text files (see the module docstring).
    text_dir : path, optional
        Folder of the text files (default: ``root/Flickr8k_text`` if present, else ``root``).
    images_dir : path, optional
        Folder of the JPEGs (default: the first of ``Flicker8k_Dataset``, ``Flickr8k_Dataset``, ``Images``
        under ``root``).  Images may be partly or wholly absent: the corpus loads, and
        :func:`corpora.protocol.hodosh_pool` / ``corpus.missing_images`` report what is missing.
    with_images : bool
        ``False`` builds a text-only corpus (no image paths, no loader; ``has_image`` is ``False``).
    split_seed : int
        Seed of :func:`seeded_split`, used only when no split files exist (``captions.txt`` layout).
    name : str
        Corpus name (used in cache keys).

    Returns
    -------
    Corpus
        8,091 images (the bogus id excluded, see module docstring), 40,455 captions, splits
        6000/1000/1000, expert and crowd judgments, ``fixed_pools["test"]`` (1,000 caption ids).
    """
    layout = find_layout(root, text_dir=text_dir, images_dir=images_dir)
    if layout.kind == "csv":
        assert layout.csv_file is not None
        records = parse_captions_csv(layout.csv_file)
        return _build(records, layout.csv_file, layout, with_images=with_images, split_seed=split_seed,
                      name=name)
    assert layout.token_file is not None
    records = parse_token_file(layout.token_file)
    return _build(records, layout.token_file, layout, with_images=with_images, split_seed=split_seed,
                  name=name)


def load_captions_csv(path: str | Path, images_dir: str | Path | None = None, *,
                      split_dir: str | Path | None = None, split_seed: int = 0,
                      name: str = "flickr8k", with_images: bool = True) -> Corpus:
    """Load the Kaggle ``captions.txt`` CSV (``image,caption``) as a :class:`Corpus`.

    Split files (``Flickr_8k.*Images.txt``) are used when found in ``split_dir`` or beside the CSV
    (``split_dir`` first); otherwise a seeded split is made (:func:`seeded_split`, with a warning).
    Judgment files (ExpertAnnotations.txt, CrowdFlowerAnnotations.txt) are searched the same way and
    read too.  No lemmas.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"captions CSV not found: {path}")
    # split files and judgment files: split_dir first, then beside the CSV
    tdirs = ([Path(split_dir).expanduser()] if split_dir is not None else []) + [path.parent]

    def find(n: str) -> Path | None:
        return next((d / n for d in tdirs if (d / n).is_file()), None)

    idir = Path(images_dir).expanduser() if images_dir is not None else next(
        (path.parent / n for n in IMAGE_DIR_NAMES if (path.parent / n).is_dir()), None)
    layout = Flickr8kLayout(
        root=path.parent, images_dir=idir, csv_file=path,
        split_files={s: p for s, n in SPLIT_FILES.items() if (p := find(n)) is not None},
        expert_file=find(EXPERT_FILE), crowd_file=find(CROWD_FILE))
    return _build(parse_captions_csv(path), path, layout, with_images=with_images, split_seed=split_seed,
                  name=name)
