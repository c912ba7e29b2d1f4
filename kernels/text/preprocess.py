"""Caption preprocessing for the text kernels (Hodosh et al. 2013, Sec. 4.1.1).

Pipeline, applied to every caption (training captions and queries alike)::

    raw tokens  ->  POS tags (corpus tags, else NLTK averaged-perceptron tagger)
                ->  lemmas   (corpus lemmas, else NLTK WordNet lemmatiser with the POS)
                ->  lowercase, drop punctuation-only tokens
                ->  compound normalisation (table + hyphen/space rule learnt from the training vocabulary)
                ->  stop-word removal (NLTK English list)

* **Tokenisation.**  A corpus lemma string (``Caption.lemma``; Flickr8k.lemma.token.txt or the teaching
  set) is already tokenised and split on whitespace.  Raw text is split with :data:`TOKEN_RE`
  (words with inner hyphens/apostrophes, clitics like ``'s``, and single punctuation marks).
* **POS tags** are only needed by the alignment and Lin similarities (Eq. 25, Eqs. 22-23).
  ``Caption.pos`` (aligned with the lemma tokens) is used when present.  Otherwise the raw text is
  tagged with ``nltk.pos_tag`` when it has as many tokens as the lemma string (true for ~98% of
  Flickr8k, whose lemma file is token-aligned with the token file); else the lemma tokens themselves
  are tagged.
* **Lemmatisation.**  Corpus lemmas when present; otherwise ``WordNetLemmatizer`` with the POS mapped to
  WordNet's n/v/a/r.  Spelling correction is *not* done.
* **Compounds.**  :data:`COMPOUND_TABLE` maps known variants (``tee-shirt``, ``tee shirt``, ``t shirt``,
  ``tshirt`` …) to one form (``t-shirt``).  General rule (:meth:`Preprocessor.fit`): for every
  hyphenated training token ``x-y(-z…)`` seen at least :attr:`Preprocessor.min_compound_count` times whose
  first and last parts are not stop words, the spaced variant ``x y`` and the closed variant ``xy`` are
  rewritten to a single canonical token: whichever of ``x-y`` / ``xy`` is more frequent in the
  training captions (ties: the hyphenated form).
* **Stop words.**  NLTK's English list (``corpora/stopwords/english``, 179 words, from ``NLTK_DATA``),
  plus tokens without any letter or digit.  Note the list contains ``be``/``have``/``do`` and the
  clitic ``s`` (from ``'s``).

Missing NLTK resources: :func:`corpora.nltk_resources.nltk_resource` (re-exported here) tries
``nltk.download`` only when the network is reachable, otherwise it raises :class:`MissingResourceError`
naming the resource and how to install it.
"""
from __future__ import annotations

import hashlib
import re
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version as package_version

import numpy as np

from corpora.base import Caption
from corpora.cache import NO_CACHE, DiskCache
from corpora.nltk_resources import (  # noqa: F401 (MissingResourceError, english_stopwords, nltk_resource: re-exported)
    MissingResourceError,
    english_stopwords,
    english_wordnet,
    ensure_pos_tagger,
    nltk_resource,
)
from corpora.parallel import BlockExecutor

#: Raw-text tokeniser: words (with inner hyphens / apostrophes), clitics ("'s", "n't"), punctuation.
TOKEN_RE = re.compile(r"[A-Za-z0-9]+(?:[-'][A-Za-z0-9]+)*|'[A-Za-z]+|[^\sA-Za-z0-9]")

#: Known compound variants -> canonical token (lowercase; multiword keys are space-separated).
COMPOUND_TABLE: dict[str, str] = {
    "tee-shirt": "t-shirt", "tee shirt": "t-shirt", "t shirt": "t-shirt", "tshirt": "t-shirt",
    "teeshirt": "t-shirt", "t-shirts": "t-shirt", "tee-shirts": "t-shirt",
    "sweat shirt": "sweatshirt", "sweat-shirt": "sweatshirt",
    "skate board": "skateboard", "skate-board": "skateboard",
    "snow board": "snowboard", "snow-board": "snowboard",
    "surf board": "surfboard", "surf-board": "surfboard",
    "base ball": "baseball", "basket ball": "basketball", "foot ball": "football",
    "four wheeler": "four-wheeler", "4 wheeler": "four-wheeler", "4-wheeler": "four-wheeler",
    "hula hoop": "hula-hoop", "hoola hoop": "hula-hoop",
    "tug of war": "tug-of-war", "tug-o-war": "tug-of-war",
    "merry go round": "merry-go-round",
}

#: Penn tag prefixes -> WordNet POS for the lemmatiser.
WN_POS = {"N": "n", "V": "v", "J": "a", "R": "r"}


@lru_cache(maxsize=1)
def _tagger():
    ensure_pos_tagger()
    import nltk  # heavy (seconds to import): only raw text without corpus POS tags needs the tagger

    return nltk.pos_tag_sents


#: Serialises the first :func:`lemmatizer` call: a thread that asks while another loads WordNet waits
#: for that load instead of starting a second one.
_LEMMATIZER_LOCK = threading.Lock()


def lemmatizer():
    """NLTK's ``WordNetLemmatizer.lemmatize`` (the shortest of WordNet's ``_morphy`` lemmas, else the word)
    on :func:`english_wordnet`, memoised; thread-safe (WordNet is loaded once)."""
    with _LEMMATIZER_LOCK:
        return _lemmatizer()


@lru_cache(maxsize=1)
def _lemmatizer():
    wn = english_wordnet()

    def lemmatize(w: str, p: str) -> str:
        lemmas = wn._morphy(w, p)
        return min(lemmas, key=len) if lemmas else w

    return lru_cache(maxsize=200_000)(lemmatize)


def _clean(tok: str) -> str:
    """Lowercase; clitics lose their apostrophe (``'s`` -> ``s``, ``n't`` -> ``not``: stop words)."""
    t = tok.lower()
    if t == "n't":
        return "not"
    return t.lstrip("'") if t.startswith("'") and len(t) > 1 else t


def is_word(tok: str) -> bool:
    """A token with at least one letter or digit (others are dropped as stop words)."""
    return any(ch.isalnum() for ch in tok)


def is_noun_tag(tag: str | None) -> bool:
    return bool(tag) and tag.startswith("NN")


def is_verb_tag(tag: str | None) -> bool:
    return bool(tag) and tag.startswith("VB")


@dataclass(frozen=True)
class ProcessedCaption:
    """A preprocessed caption: content lemmas and their POS tags (``None`` when not computed)."""

    tokens: tuple[str, ...]
    tags: tuple[str, ...] | None = None


#: Shared memo of :meth:`Preprocessor._finish` results, one table per preprocessor state (at most 4 states,
#: each restarted beyond :data:`_FINISH_MEMO_MAX` captions).  Results are immutable tuples.
_FINISH_MEMO: dict[tuple, dict] = {}
_FINISH_MEMO_MAX = 500_000

#: Shared memo of the tagger's output: the space-joined token sequence (tokens never contain whitespace)
#: -> its Penn tags.  The perceptron tagger tags each sentence on its own, so a sentence's tags do not
#: depend on the batch; without corpus POS tags (Flickr30k, COCO) every text kernel of the main job would
#: otherwise tag the same training captions again (about 10 min per kernel on COCO's 566k captions).
#: Restarted beyond :data:`_TAG_MEMO_MAX` sentences (about 250 bytes each).
_TAG_MEMO: dict[str, tuple[str, ...]] = {}
_TAG_MEMO_MAX = 1_000_000


def clear_preprocess_memo() -> None:
    """Forget the processed captions and POS tags shared by :class:`Preprocessor` objects (the main job
    calls it once its text kernels are built; on Flickr8k's 40,455 captions the tables hold about 60 MB)."""
    _FINISH_MEMO.clear()
    _TAG_MEMO.clear()


#: Sentences per block when the tagger runs on a cluster's workers or its output is cached
#: (:func:`pos_tags`): COCO's 566,000 training captions are 29 blocks of about 8 s each on a worker here.
TAG_BLOCK = 20_000
#: The cache namespace of tagged blocks.
TAG_NAMESPACE = "pos_tags"
#: The NLTK resource of ``nltk.pos_tag`` (:func:`~corpora.nltk_resources.ensure_pos_tagger`), in cache keys.
TAG_MODEL = "averaged_perceptron_tagger_eng"


def pos_tags(sentences: Sequence[Sequence[str]], executor: BlockExecutor | None = None,
             cache: DiskCache | None = None, show_progress: bool = True) -> list[tuple[str, ...]]:
    """Penn POS tags of tokenised sentences (``nltk.pos_tag_sents``), each sentence tagged once per
    process (:data:`_TAG_MEMO`); the result for a sentence is the tagger's, whatever the batch.

    Parameters
    ----------
    sentences : sequence of token sequences
    executor : BlockExecutor, optional
        With a Dask cluster (``--workers`` / ``--scheduler``) the sentences not in the memo are tagged on
        its workers, :data:`TAG_BLOCK` at a time, in order.  The perceptron tagger tags each sentence on
        its own, so the tags do not depend on the blocks or the workers.
    cache : DiskCache, optional
        When enabled, each block's tags are read from or written once to the ``pos_tags`` namespace, keyed
        by the block's sentences, NLTK's version and the tagger model (a resumed COCO-size run does not
        tag its 566,000 training captions again).  Without an enabled cache or a cluster the sentences
        are tagged in this process in one call.
    show_progress : bool
        A progress bar over the blocks (the main job's ``--no-progress`` turns it off).
    """
    keys = [" ".join(s) for s in sentences]
    todo = list(dict.fromkeys(k for k in keys if k not in _TAG_MEMO))
    if todo and len(_TAG_MEMO) + len(todo) > _TAG_MEMO_MAX:
        _TAG_MEMO.clear()
        todo = list(dict.fromkeys(keys))
    if todo:
        for k, tags in zip(todo, _tag_sentences(todo, executor, cache, show_progress)):
            _TAG_MEMO[k] = tags
    return [_TAG_MEMO[k] for k in keys]


def _tag_sentences(joined: list[str], executor: BlockExecutor | None, cache: DiskCache | None,
                   show_progress: bool = True) -> list[tuple[str, ...]]:
    """Tags of space-joined sentences: in one call here, or in :data:`TAG_BLOCK` blocks through
    ``executor`` (a cluster's workers, or this process when only the cache is wanted)."""
    cache = cache if cache is not None else NO_CACHE
    distributed = executor is not None and executor.distributed
    if not distributed and not cache.enabled:
        return [tuple(t for _, t in sent) for sent in _tagger()([k.split(" ") if k else [] for k in joined])]
    blocks = [joined[lo:lo + TAG_BLOCK] for lo in range(0, len(joined), TAG_BLOCK)]
    model = {"nltk": package_version("nltk"), "model": TAG_MODEL}
    keys = [{"what": "pos-tags", **model, "n": len(b),
             "sentences": hashlib.sha256("\n".join(b).encode("utf-8")).hexdigest()} for b in blocks]
    results = (executor if distributed else BlockExecutor()).map_blocks(
        tag_block, blocks, cache=cache, namespace=TAG_NAMESPACE, keys=keys, desc="POS tagging",
        show_progress=show_progress)
    out: list[tuple[str, ...]] = []
    for block, res in zip(blocks, results):
        out.extend(decode_tags(res["tags"], len(block)))
    return out


def tag_block(context, block: Sequence[str], cache) -> dict[str, np.ndarray]:
    """A :meth:`~corpora.parallel.BlockExecutor.map_blocks` task: the Penn tags of a block of
    space-joined sentences, encoded by :func:`encode_tags` (``context`` and ``cache`` are unused)."""
    tagged = _tagger()([k.split(" ") if k else [] for k in block])
    return {"tags": encode_tags([tuple(t for _, t in sent) for sent in tagged])}


def encode_tags(tags: Sequence[Sequence[str]]) -> np.ndarray:
    """Sentences' tags as one UTF-8 byte array: tags joined by spaces, sentences by newlines (Penn tags
    contain neither)."""
    return np.frombuffer("\n".join(" ".join(t) for t in tags).encode("utf-8"), dtype=np.uint8).copy()


def decode_tags(buf: np.ndarray, n: int) -> list[tuple[str, ...]]:
    """The inverse of :func:`encode_tags` for ``n`` sentences (an empty sentence has no tags)."""
    lines = np.asarray(buf, dtype=np.uint8).tobytes().decode("utf-8").split("\n")
    if len(lines) != n:
        raise ValueError(f"decode_tags: {len(lines)} tagged sentences, expected {n}")
    return [tuple(line.split(" ")) if line else () for line in lines]


class Preprocessor:
    """Tokenise, tag, lemmatise, normalise compounds and remove stop words (Hodosh 2013, Sec. 4.1.1).

    Parameters
    ----------
    remove_stopwords : bool
        Drop NLTK English stop words (default ``True``).
    use_corpus_lemmas : bool
        Use ``Caption.lemma`` when present (default ``True``), else lemmatise with NLTK.
    compounds : bool
        Apply :data:`COMPOUND_TABLE` and the learnt hyphen/space rule.
    min_compound_count : int
        A hyphenated training token must be seen this often to license the general rule.
    """

    def __init__(self, remove_stopwords: bool = True, use_corpus_lemmas: bool = True, compounds: bool = True,
                 min_compound_count: int = 2):
        self.remove_stopwords = remove_stopwords
        self.use_corpus_lemmas = use_corpus_lemmas
        self.compounds = compounds
        self.min_compound_count = int(min_compound_count)
        self.stopwords: frozenset[str] = english_stopwords() if remove_stopwords else frozenset()
        # multiword variant (tuple of parts) -> canonical; single-token variant -> canonical
        self.phrase_map: dict[tuple[str, ...], str] = {}
        self.token_map: dict[str, str] = {}
        self._max_phrase = 1
        self._load_table()

    # ------------------------------------------------------------------ compound rules
    def _load_table(self) -> None:
        self.phrase_map.clear()
        self.token_map.clear()
        for k, v in COMPOUND_TABLE.items():
            parts = tuple(k.split())
            if len(parts) == 1:
                self.token_map[parts[0]] = v
            else:
                self.phrase_map[parts] = v
        self._max_phrase = max([len(p) for p in self.phrase_map] + [1])

    def fit(self, captions: Iterable[Caption]) -> "Preprocessor":
        """Learn the general hyphen/space compound rule from the *training* captions."""
        self._load_table()
        if not self.compounds:
            return self
        counts: Counter[str] = Counter()
        for c in captions:
            counts.update(_clean(t) for t in self._raw_lemmas(c))
        for tok, n in counts.items():
            if "-" not in tok or n < self.min_compound_count or tok in self.token_map:
                continue
            parts = tuple(p for p in tok.split("-"))
            if len(parts) < 2 or not all(p.isalnum() for p in parts):
                continue
            if parts[0] in self.stopwords or parts[-1] in self.stopwords:
                continue
            closed = "".join(parts)
            canon = closed if counts.get(closed, 0) > n else tok
            self.phrase_map.setdefault(parts, canon)
            if canon != tok:
                self.token_map.setdefault(tok, canon)
            elif closed in counts:
                self.token_map.setdefault(closed, canon)
        self._max_phrase = max([len(p) for p in self.phrase_map] + [1])
        return self

    # ------------------------------------------------------------------ per caption
    def _raw_lemmas(self, c: Caption) -> list[str]:
        if self.use_corpus_lemmas and c.lemma is not None:
            return c.lemma.split()
        return TOKEN_RE.findall(c.text)

    def _merge(self, toks: list[str], tags: list[str] | None) -> tuple[list[str], list[str] | None]:
        out: list[str] = []
        out_tags: list[str] | None = [] if tags is not None else None
        i, n = 0, len(toks)
        while i < n:
            done = False
            for L in range(min(self._max_phrase, n - i), 1, -1):
                canon = self.phrase_map.get(tuple(toks[i:i + L]))
                if canon is not None:
                    out.append(canon)
                    if out_tags is not None:
                        out_tags.append(tags[i + L - 1])
                    i += L
                    done = True
                    break
            if not done:
                out.append(self.token_map.get(toks[i], toks[i]))
                if out_tags is not None:
                    out_tags.append(tags[i])
                i += 1
        return out, out_tags

    def _memo_table(self) -> dict:
        """The shared table of :meth:`_finish` results for this preprocessor's current state (everything
        :meth:`_finish` depends on): the main job builds one text kernel per system over the same
        captions, which are then processed once."""
        state = (self.compounds, self.stopwords, frozenset(self.phrase_map.items()),
                 frozenset(self.token_map.items()))
        table = _FINISH_MEMO.get(state)
        if table is None or len(table) > _FINISH_MEMO_MAX:
            if table is None and len(_FINISH_MEMO) >= 4:
                _FINISH_MEMO.pop(next(iter(_FINISH_MEMO)))
            table = _FINISH_MEMO[state] = {}
        return table

    def _finish_memo(self, table: dict, lemmas: list[str], tags: list[str] | None) -> ProcessedCaption:
        key = (tuple(lemmas), None if tags is None else tuple(tags))
        out = table.get(key)
        if out is None:
            out = table[key] = self._finish(lemmas, tags)
        return out

    def _finish(self, lemmas: list[str], tags: list[str] | None) -> ProcessedCaption:
        lemmas = [_clean(t) for t in lemmas]
        if self.compounds:
            lemmas, tags = self._merge(lemmas, tags)
        keep = [i for i, t in enumerate(lemmas) if is_word(t) and t not in self.stopwords]
        return ProcessedCaption(tuple(lemmas[i] for i in keep),
                                None if tags is None else tuple(tags[i] for i in keep))

    def transform(self, captions: Sequence[Caption], tags: bool = False, executor: BlockExecutor | None = None,
                  cache: DiskCache | None = None, show_progress: bool = True) -> list[ProcessedCaption]:
        """Preprocess captions.  With ``tags=True`` POS tags are attached (needed by Eqs. 22-23 and 25; Eq. 24
        uses none).  ``executor``, ``cache`` and ``show_progress``: where the tagger runs, whether its output
        is cached, and its progress bar (:func:`pos_tags`)."""
        captions = list(captions)
        need_nltk_lemma = [i for i, c in enumerate(captions)
                           if not (self.use_corpus_lemmas and c.lemma is not None)]
        table = self._memo_table()
        if not tags and not need_nltk_lemma:
            return [self._finish_memo(table, c.lemma.split(), None) for c in captions]
        # Which captions need the tagger, and over which tokens.
        lem_toks: list[list[str]] = []
        tag_out: list[list[str] | None] = [None] * len(captions)
        to_tag: list[list[str]] = []
        to_tag_idx: list[int] = []
        for i, c in enumerate(captions):
            use_lemma = self.use_corpus_lemmas and c.lemma is not None
            lt = c.lemma.split() if use_lemma else TOKEN_RE.findall(c.text)
            lem_toks.append(lt)
            if use_lemma and c.pos is not None and len(c.pos) == len(lt):
                tag_out[i] = list(c.pos)
                continue
            if use_lemma:
                raw = c.text.split()
                if len(raw) != len(lt):
                    raw = TOKEN_RE.findall(c.text)
                to_tag.append(raw if len(raw) == len(lt) else lt)
            else:
                to_tag.append(lt)
            to_tag_idx.append(i)
        for i, tg in zip(to_tag_idx, pos_tags(to_tag, executor, cache, show_progress)):
            tag_out[i] = list(tg)
        out = []
        for i, c in enumerate(captions):
            lt, tg = lem_toks[i], tag_out[i]
            if not (self.use_corpus_lemmas and c.lemma is not None):
                lemm = lemmatizer()
                lt = [lemm(w.lower(), WN_POS.get(t[:1], "n")) for w, t in zip(lt, tg)]
            out.append(self._finish_memo(table, lt, tg if tags else None))
        return out

    def __call__(self, caption: Caption) -> tuple[str, ...]:
        return self.transform([caption])[0].tokens

    def params(self) -> dict:
        """Everything that changes the output (for cache keys)."""
        return {"stop": self.remove_stopwords, "corpus_lemmas": self.use_corpus_lemmas,
                "compounds": self.compounds, "min_compound": self.min_compound_count,
                "phrases": sorted(" ".join(k) + "=" + v for k, v in self.phrase_map.items()),
                "tokens": sorted(k + "=" + v for k, v in self.token_map.items())}


class Vocabulary:
    """Word <-> id map of the training captions, ids sorted by decreasing frequency (ties: alphabetical).

    Query words never seen in training get id ``-1`` from :meth:`encode` (they can only match
    themselves; the kernels handle them explicitly).
    """

    def __init__(self, docs: Iterable[Sequence[str]]):
        self.counts: Counter[str] = Counter()
        for d in docs:
            self.counts.update(d)
        self.words: list[str] = sorted(self.counts, key=lambda w: (-self.counts[w], w))
        self.index: dict[str, int] = {w: i for i, w in enumerate(self.words)}

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, w: str) -> bool:
        return w in self.index

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.index.get(t, -1) for t in tokens]

    def count_array(self):
        return np.array([self.counts[w] for w in self.words], dtype=np.int64)
