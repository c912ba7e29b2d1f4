"""The one data model of the toolkit: an image–text corpus.

Everything downstream (features, kernels, KCCA, neural scorers, the evaluator) reads corpora through
the small, typed objects defined here:

* :class:`Caption` – one caption with its ``image#k`` id, raw text, optional lemmatised text and POS
  tags aligned with the lemmatised tokens;
* :class:`ExpertJudgment` / :class:`CrowdJudgment` – the human judgments of Flickr8k-Expert and
  Flickr8k-CF (Hodosh et al. 2013, Sec. 4.2 / 4.3.2);
* :class:`Corpus` – image ids, lazy RGB image loading, captions per image, splits, judgments;
* :class:`RankingPool` – the image / caption pool of one split under the Hodosh protocol (Sec. 4.1)
  with the gold pairing and the relevance matrix used by S@k and R-precision (Sec. 4.3.2 for relevance, Sec. 4.3.3 for the metrics).

Score-matrix convention (shared by every scorer): an *affinity* matrix ``S`` of shape
``(n_images, n_captions)`` over ``pool.image_ids`` × ``pool.caption_ids``.  Image annotation ranks the
columns of each row (gold = ``pool.gold_caption``, relevance = ``pool.relevance``); image search ranks the
rows of each column, i.e. uses ``S.T`` (gold = ``pool.gold_image``, relevance = ``pool.relevance.T``).
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

#: Caption pools are always ordered; a caption id is ``"<image_id>#<k>"``.
CaptionId = str
ImageId = str

#: Crowd "fraction yes" at or above which a non-original pair counts as relevant (two of three
#: judges; Hodosh et al. 2013, Sec. 4.3.2).
CROWD_RELEVANCE_THRESHOLD = 0.66


class CorpusError(ValueError):
    """A corpus file is malformed or inconsistent.  The message names the file and, where it
    applies, the 1-based line number."""

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}"
            if line is not None:
                where += f":{line}"
            where += ": "
        super().__init__(where + message)
        self.path = None if path is None else Path(path)
        self.line = line


def decode_utf8(data: bytes, path: str | Path) -> str:
    """``data`` decoded as UTF-8 (a leading byte-order mark dropped); a bad byte raises
    :class:`CorpusError` naming ``path``, the 1-based line and the byte offset in the file."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # utf-8-sig reports positions after the BOM it skipped
        offset = exc.start + (3 if data.startswith(b"\xef\xbb\xbf") else 0)
        # \r\n, a bare \r and \n each end a line, as the readers split them
        line = len(re.findall(rb"\r\n|\r|\n", data[:offset])) + 1
        raise CorpusError(f"not valid UTF-8 (byte {data[offset:offset + 1]!r} at byte offset {offset})",
                          path, line) from None


def file_signature(path: str | Path) -> str:
    """What a file's bytes are, cheaply, for cache keys: ``file:<name>:<bytes>:<mtime_ns>`` (replacing or
    editing the file changes it; moving it with ``mv`` / ``cp -p`` does not), or ``missing:<name>``."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        return f"missing:{p.name}"
    return f"file:{p.name}:{st.st_size}:{st.st_mtime_ns}"


def is_caption_index(k: str) -> bool:
    """A caption index: ASCII digits only (``str.isdigit`` also accepts '²', which ``int`` refuses)."""
    return k.isascii() and k.isdigit()


class MissingImagesError(FileNotFoundError):
    """Raised when a split needs images that are not on disk (see ``skip_missing_images``).

    ``what`` says what is missing without the advice; ``n_present`` is the number of the split's images
    that are on disk (``None`` when the error is about one file), so a command line can give its own
    advice (its option name instead of the keyword argument).
    """

    def __init__(self, message: str, *, what: str | None = None, n_present: int | None = None) -> None:
        super().__init__(message)
        self.what = what if what is not None else message
        self.n_present = n_present


def caption_id(image_id: ImageId, index: int) -> CaptionId:
    """The Flickr8k caption id ``"<image_id>#<index>"``."""
    return f"{image_id}#{index}"


def caption_key_text(c: "Caption", *, pos: bool = True) -> str:
    """The text of caption ``c`` as cache keys hash it: id, text, lemma and (``pos=True``) POS tags.

    ``lemma=None`` (the text side tokenises the text) and ``lemma=""`` (no tokens) give different keys, and
    so do ``pos=None`` and ``pos=()``."""
    key = c.id + "\t" + c.text + "\t" + ("\1" if c.lemma is None else "\2" + c.lemma)
    if pos and c.pos is not None:
        key += "\t\2" + " ".join(c.pos)
    return key


def split_caption_id(cid: CaptionId) -> tuple[ImageId, int]:
    """Inverse of :func:`caption_id`; raises :class:`ValueError` on a malformed id."""
    image_id, sep, k = cid.rpartition("#")
    if not sep or not image_id or not is_caption_index(k):
        raise ValueError(f"malformed caption id {cid!r} (expected '<image>#<k>')")
    return image_id, int(k)


@dataclass(frozen=True)
class Caption:
    """One caption.

    Attributes
    ----------
    id : str
        ``"<image_id>#<k>"``.
    image_id : str
        The image the caption was written for.
    index : int
        ``k``, the caption's position among its image's captions (0-based).
    text : str
        The raw caption as written by the annotator.
    lemma : str or None
        Lemmatised caption, whitespace-tokenised (Flickr8k.lemma.token.txt, or the teaching set's
        generator).  ``None`` when the corpus has no lemmatisation; the text side then lemmatises with
        NLTK.
    pos : tuple of str or None
        Penn Treebank POS tags aligned one-to-one with ``lemma.split()`` when known (teaching set), else
        ``None``.
    """

    id: CaptionId
    image_id: ImageId
    index: int
    text: str
    lemma: str | None = None
    pos: tuple[str, ...] | None = None

    @property
    def lemma_tokens(self) -> tuple[str, ...] | None:
        return None if self.lemma is None else tuple(self.lemma.split())


@dataclass(frozen=True)
class ExpertJudgment:
    """One row of ExpertAnnotations.txt: three expert scores on the 1–4 scale
    (4 = describes the image without errors … 1 = unrelated)."""

    image_id: ImageId
    caption_id: CaptionId
    scores: tuple[int, int, int]


@dataclass(frozen=True)
class CrowdJudgment:
    """One row of CrowdFlowerAnnotations.txt: share of "yes" answers and the counts behind it."""

    image_id: ImageId
    caption_id: CaptionId
    fraction_yes: float
    n_yes: int
    n_no: int


class FrozenMapping(dict):
    """A ``dict`` that refuses in-place changes (the captions and splits of a :class:`Corpus`, which its
    fingerprint covers).  Reads, iteration, equality, ``dict(m)`` and pickling work as for a dict."""

    def _refuse(self, *args, **kwargs):
        raise TypeError("this corpus mapping is read-only (the corpus fingerprint covers it): build a new "
                        "corpus with corpus.with_splits(...) or dataclasses.replace(corpus, ...)")

    __setitem__ = __delitem__ = __ior__ = _refuse
    update = pop = popitem = clear = setdefault = _refuse

    def __reduce__(self):
        return (FrozenMapping, (dict(self),))

    def copy(self) -> dict:
        return dict(self)


def fingerprint(parts: Iterable[str]) -> str:
    """SHA-256 prefix (16 hex digits) of a sequence of strings, each ended by a NUL byte.

    Parameters
    ----------
    parts : iterable of str
        The strings, in order (the order matters).

    Returns
    -------
    str
        The digest prefix, e.g. the corpus fingerprint of :class:`Corpus`.
    """
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


@dataclass
class Corpus:
    """An image–text corpus.

    Parameters
    ----------
    name : str
        Short name used in reports and cache keys (``"flickr8k"``, ``"teaching"`` …).
    image_ids : sequence of str
        All images, in a fixed order.
    captions : mapping image id -> sequence of Caption
        Each image's captions, ordered by index.
    splits : mapping split name -> sequence of image ids
        Usually ``"train"``, ``"dev"``, ``"test"``.
    image_loader : callable, optional
        ``image_loader(image_id) -> np.ndarray`` of shape ``(H, W, 3)``, dtype uint8, RGB.
    image_paths : mapping image id -> Path, optional
        Where each image lives on disk (``None`` for generated corpora).
    expert, crowd : sequences of judgments, optional
        Human judgments (Flickr8k-Expert, Flickr8k-CF).
    fixed_pools : mapping split name -> sequence of caption ids, optional
        Caption pools fixed by the corpus itself (Flickr8k test: the 1,000 caption ids of
        CrowdFlowerAnnotations.txt).  Splits not listed get a seeded one-caption-per-image choice.
    fingerprint : str
        Content hash used in cache keys, computed at construction (not a parameter) from the name,
        every caption (id, text, lemma), the splits and :meth:`_fingerprint_extra` (what a subclass's
        images are generated from).  So a copy made with :meth:`with_splits` or
        ``dataclasses.replace`` gets its own.  ``captions`` and ``splits`` cannot be reassigned or
        edited in place (:class:`FrozenMapping`); ``fingerprint`` itself may be assigned, e.g. to
        simulate an edit in a test.
    notes : list of str
        Human-readable remarks gathered while loading (quirks handled, images skipped …).
    """

    name: str
    image_ids: tuple[ImageId, ...]
    captions: Mapping[ImageId, tuple[Caption, ...]]
    splits: Mapping[str, tuple[ImageId, ...]]
    image_loader: Callable[[ImageId], np.ndarray] | None = None
    image_paths: Mapping[ImageId, Path] | None = None
    expert: tuple[ExpertJudgment, ...] | None = None
    crowd: tuple[CrowdJudgment, ...] | None = None
    fixed_pools: Mapping[str, tuple[CaptionId, ...]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    fingerprint: str = field(default="", init=False)

    def __post_init__(self) -> None:
        self.image_ids = tuple(self.image_ids)
        self.captions = FrozenMapping((k, tuple(v)) for k, v in self.captions.items())
        self.splits = FrozenMapping((k, tuple(v)) for k, v in self.splits.items())
        self.notes = list(self.notes)          # a copy's notes are its own
        self._caption_index: dict[CaptionId, Caption] = {
            c.id: c for caps in self.captions.values() for c in caps
        }
        self.fingerprint = fingerprint(
            [self.name]
            + [caption_key_text(c) for c in self._caption_index.values()]
            + [f"{s}:{','.join(ids)}" for s, ids in sorted(self.splits.items())]
            + list(self._fingerprint_extra())
        )
        self._sealed = True

    def _fingerprint_extra(self) -> Sequence[str]:
        """Further parts of :attr:`fingerprint` beyond name, captions and splits: a generated corpus
        returns what its images are made from (:class:`~corpora.teaching.TeachingSet`: generator
        version, seed, image size, scenes).  Empty here: a file-based corpus's images are covered by
        :meth:`image_signature` in the image-side cache keys."""
        return ()

    #: Fields the fingerprint is computed from: fixed once the corpus is built.
    _SEALED_FIELDS = frozenset({"image_ids", "captions", "splits"})

    def __setattr__(self, name: str, value) -> None:
        if name in Corpus._SEALED_FIELDS and self.__dict__.get("_sealed", False):
            raise AttributeError(
                f"Corpus.{name} cannot be reassigned on corpus {self.name!r}: its fingerprint, and so every "
                f"cache key built from it, covers the {name}; use corpus.with_splits(...) for new splits or "
                f"dataclasses.replace(corpus, {name}=...) for a new corpus")
        object.__setattr__(self, name, value)

    def with_splits(self, **splits: Sequence[ImageId]) -> "Corpus":
        """A copy with the named splits replaced (e.g. ``corpus.with_splits(train=ids[:700])``).

        The copy's :attr:`fingerprint` covers the new splits, so cache keys built from it (text
        kernels, KCCA runs) see the change (assigning or editing ``corpus.splits`` is refused for that
        reason).  Images and their :meth:`image_signature` are unchanged.
        """
        unknown = set(splits) - set(self.splits)
        if unknown:
            raise KeyError(f"corpus {self.name!r} has no split {sorted(unknown)} (has: {sorted(self.splits)})")
        new = {k: tuple(v) for k, v in splits.items()}
        return replace(self, splits={**self.splits, **new})

    # ------------------------------------------------------------------ captions
    def caption(self, cid: CaptionId) -> Caption:
        """The caption with id ``cid`` (``KeyError`` naming the id if unknown)."""
        try:
            return self._caption_index[cid]
        except KeyError:
            raise KeyError(f"unknown caption id {cid!r} in corpus {self.name!r}") from None

    def has_caption(self, cid: CaptionId) -> bool:
        return cid in self._caption_index

    def captions_of(self, image_id: ImageId) -> tuple[Caption, ...]:
        return self.captions.get(image_id, ())

    def split(self, name: str) -> tuple[ImageId, ...]:
        try:
            return self.splits[name]
        except KeyError:
            raise KeyError(
                f"corpus {self.name!r} has no split {name!r} (has: {sorted(self.splits)})"
            ) from None

    # ------------------------------------------------------------------ images
    def has_image(self, image_id: ImageId) -> bool:
        if self.image_paths is None:
            return self.image_loader is not None and image_id in self.captions
        p = self.image_paths.get(image_id)
        return p is not None and p.is_file()

    def image_path(self, image_id: ImageId) -> Path | None:
        return None if self.image_paths is None else self.image_paths.get(image_id)

    def load_image(self, image_id: ImageId) -> np.ndarray:
        """The image as an ``(H, W, 3)`` uint8 RGB array (EXIF orientation applied)."""
        if self.image_loader is None:
            raise RuntimeError(f"corpus {self.name!r} has no image loader")
        return self.image_loader(image_id)

    def missing_images(self, image_ids: Sequence[ImageId]) -> list[ImageId]:
        return [i for i in image_ids if not self.has_image(i)]

    def image_signature(self, image_id: ImageId) -> str:
        """What one image's pixels are made from, for the cache keys of image features.

        Image features (visual words, CLIP image embeddings) must not depend on the captions or the
        splits, so their cache keys use this instead of :attr:`fingerprint`.  For an image file: its
        name, size and modification time (``file:<name>:<bytes>:<mtime_ns>``; replacing or editing the
        file changes it, moving it with ``mv`` / ``cp -p`` does not).  A missing file gives
        ``missing:<name>``.  An image made in memory by ``image_loader`` (no path) falls back to the
        corpus name and fingerprint plus the id; generated corpora that know what their images are
        rendered from override ``_image_source`` (:class:`corpora.teaching.TeachingSet`).  Memoised
        per corpus object.
        """
        memo = self.__dict__.setdefault("_image_signatures", {})
        sig = memo.get(image_id)
        if sig is None:
            sig = memo[image_id] = self._image_source(image_id)
        return sig

    def _image_source(self, image_id: ImageId) -> str:
        """Unmemoised :meth:`image_signature` (subclasses that render their images override this)."""
        path = self.image_path(image_id)
        if path is None:
            return f"corpus:{self.name}:{self.fingerprint}:{image_id}"
        return file_signature(path)

    def images_fingerprint(self, image_ids: Iterable[ImageId]) -> str:
        """Hash of the :meth:`image_signature` of ``image_ids`` (in order) and the ids themselves."""
        return fingerprint(f"{i}\t{self.image_signature(i)}" for i in image_ids)

    # ------------------------------------------------------------------ relevance
    def judge_relevance(
        self, image_ids: Sequence[ImageId], caption_ids: Sequence[CaptionId]
    ) -> np.ndarray:
        """Boolean relevance matrix ``R[i, j]``: is caption ``j`` a correct description of image ``i``?

        Default (Hodosh et al. 2013, Sec. 4.3.2): the original pair is relevant, and so is any pair whose
        crowd "fraction yes" is at least :data:`CROWD_RELEVANCE_THRESHOLD`; unjudged pairs are not.
        Generated corpora with exact scene facts override this.
        """
        row = {im: i for i, im in enumerate(image_ids)}
        col = {c: j for j, c in enumerate(caption_ids)}
        rel = np.zeros((len(image_ids), len(caption_ids)), dtype=bool)
        for j, cid in enumerate(caption_ids):
            im, _ = split_caption_id(cid)
            if im in row:
                rel[row[im], j] = True
        for judg in self.crowd or ():
            if judg.fraction_yes >= CROWD_RELEVANCE_THRESHOLD:
                i, j = row.get(judg.image_id), col.get(judg.caption_id)
                if i is not None and j is not None:
                    rel[i, j] = True
        return rel

    def summary(self) -> dict:
        """Counts for reports: images, captions, split sizes, judgments."""
        return {
            "name": self.name,
            "images": len(self.image_ids),
            "captions": len(self._caption_index),
            "splits": {k: len(v) for k, v in self.splits.items()},
            "expert_judgments": 0 if self.expert is None else len(self.expert),
            "crowd_judgments": 0 if self.crowd is None else len(self.crowd),
            "fingerprint": self.fingerprint,
            "notes": list(self.notes),
        }


@runtime_checkable
class GeneratedCorpus(Protocol):
    """A corpus whose images and captions come from a generator that can make more of them.

    The teaching set (:class:`corpora.teaching.TeachingCorpus`) is one; the scorers that need new
    positives, templates or negatives from the generator (PAC-S positives, BRIDGE templates, SPECS
    negatives) test ``isinstance(corpus, GeneratedCorpus)`` instead of probing attributes.
    """

    def rerender(self, image_id: str, seed: int) -> np.ndarray:
        """The image's facts drawn again with another layout: ``(H, W, 3)`` uint8 RGB."""
        ...

    def paraphrase(self, caption_id: str, seed: int) -> Caption:
        """A caption with the same facts in other words."""
        ...

    def describe(self, image_id: str, seed: int = 0) -> tuple[Caption, list[str]]:
        """A detailed caption of the image and its noun-chunk units."""
        ...

    def negative_unit(self, image_id: str, seed: int) -> str:
        """A detail that is false of the image."""
        ...


@dataclass(frozen=True)
class RankingPool:
    """The candidate pool of one split (Hodosh et al. 2013, Sec. 4.1.1).

    Attributes
    ----------
    split : str
    image_ids : tuple of str, length N
    caption_ids : tuple of str, length M (N under the Hodosh protocol: one caption per image)
    captions : tuple of Caption, length M (aligned with ``caption_ids``)
    gold_caption : ndarray of int, shape (N,)
        Column index of each image's original caption (annotation gold).
    gold_image : ndarray of int, shape (M,)
        Row index of the image each caption was written for (search gold).
    relevance : ndarray of bool, shape (N, M)
        ``relevance[i, j]`` – caption ``j`` correctly describes image ``i`` (originals included).
    skipped_image_ids : tuple of str
        Images of the split left out because they are missing on disk (``skip_missing_images``).
    """

    split: str
    image_ids: tuple[ImageId, ...]
    caption_ids: tuple[CaptionId, ...]
    captions: tuple[Caption, ...]
    gold_caption: np.ndarray
    gold_image: np.ndarray
    relevance: np.ndarray
    skipped_image_ids: tuple[ImageId, ...] = ()

    @property
    def n_skipped(self) -> int:
        return len(self.skipped_image_ids)

    @property
    def n_images(self) -> int:
        return len(self.image_ids)

    @property
    def n_captions(self) -> int:
        return len(self.caption_ids)
