"""Lexical similarities and the word kernels of the soft TRI kernel (Hodosh et al. 2013, Sec. 3.5).

Every similarity ``sigma_S`` defines word vectors over a fixed vocabulary ``w_S(i) = sigma_S(w, w_i)``
and the word kernel is their cosine (Eqs. 17-21)

    kappa_S(w, w') = <w_S, w'_S> / (||w_S|| ||w'_S||),     kappa_S(w, w) = 1,

identity for words outside the similarity's vocabulary.  Implemented here:

* **distributional** ``sigma_D`` (Eq. 24): positive PMI of sentence-level co-occurrence,
  ``sigma_D(w, w') = max(0, log P(w, w') / (P(w) P(w')))`` with ``P(w)`` the fraction of sentences
  containing ``w`` and ``P(w, w')`` the fraction containing both; a word is not its own context
  (``sigma_D(w, w) := 0`` in the vectors, otherwise the self-dimension dominates every cosine).
  Vocabulary (targets and context dimensions): words seen >= 5 times.  ``D_ic`` uses the training captions; ``D_ext`` an external corpus (the paper's BNC
  is not available: a user plain-text file, one sentence per line, or NLTK's Brown corpus).
  Entries of kappa_D below 0.01 are set to 0.  ``D_ext+ic`` is the average of the two kernels
  (Eq. 26); for a word pair covered by only one of them that one is used.
* **alignment** ``sigma_A`` (Eq. 25): IBM Model 1 -> Model 2 (:mod:`kernels.text.ibm`) trained on all
  ordered pairs of distinct captions of the same training image, separately on their nouns and their
  verbs.  Noun vocabulary (Sec. 3.5.4): lemmas seen >= 5 times as a noun and tagged noun in >= 50% of their
  occurrences; verbs: tagged verb >= 25 times and >= 25% of the time.  ``sigma_A(w, w') = P_n(w) t_n(w'|w) + P_v(w) t_v(w'|w)`` with
  ``P_n(w)``, ``P_v(w)`` the fraction of ``w``'s training tokens tagged noun / verb.  kappa_A < 0.05 -> 0.
* **Lin / WordNet** (Eqs. 22-23): Lin's similarity ``sim_Lin(c, c') = 2 IC(lcs(c, c')) / (IC(c) + IC(c'))``
  (Eq. 22); each word is the vector over WordNet synsets with entry 1 on its *first* noun sense ``c``
  ("1 if s_w = s_i") and ``sim_Lin(c, h) = 2 IC(h) / (IC(c) + IC(h))`` on every hypernym ``h`` of ``c``
  (Eq. 23), and kappa_Lin is their cosine.  Information content ``IC(c) = -log p(c)`` is estimated from
  the training captions' noun tokens (each token's count split equally among its noun senses (Resnik
  1995) and propagated to all hypernyms).  Vocabulary: every lemma seen >= 5 times in the training
  captions, whatever its tags, with a WordNet noun sense (the paper restricts Lin to no part of speech;
  its Fig. 3 lists Lin neighbours of the verb "swim").  A verb enters through its first *noun* sense
  (``swim.n.01``, the act of swimming): the paper does not say which hierarchy a verb uses, and the
  information content is estimated on the noun hierarchy.
* **combination** (Eq. 27): ``kappa_{S1,S2} = max(kappa_S1, kappa_S2)`` (``"A,D_ic"``).  The max of PSD
  kernels need not be PSD (nor need the thresholded cosines); see ``TextKernel(psd=...)``.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from corpora.base import file_signature
from corpora.nltk_resources import MissingResourceError, english_stopwords, english_wordnet, nltk_resource
from kernels.text.ibm import IBMModel2
from kernels.text.preprocess import TOKEN_RE, WN_POS, is_noun_tag, is_verb_tag, is_word, lemmatizer

#: thresholds below which kernel entries are zeroed (Sec. 3.5)
KAPPA_D_MIN = 0.01
KAPPA_A_MIN = 0.05
MIN_COUNT = 5


@dataclass
class WordKernel:
    """A word kernel over the training vocabulary: a dense block on ``idx`` (vocabulary ids), identity
    elsewhere.  ``parts`` keeps the component kernels (name -> (idx, K))."""

    words: list[str]
    idx: np.ndarray
    K: np.ndarray
    parts: dict = field(default_factory=dict)

    def dense(self, V: int) -> np.ndarray:
        out = np.eye(V, dtype=np.float64)
        if len(self.idx):
            out[np.ix_(self.idx, self.idx)] = self.K
        return out

    def value(self, w1: str, w2: str) -> float:
        pos = {int(v): k for k, v in enumerate(self.idx)}
        i, j = self.words.index(w1), self.words.index(w2)
        if i in pos and j in pos:
            return float(self.K[pos[i], pos[j]])
        return 1.0 if i == j else 0.0

    def nearest(self, word: str, k: int = 5, part: str | None = None) -> list[tuple[str, float]]:
        idx, K = (self.idx, self.K) if part is None else self.parts[part]
        try:
            wid = self.words.index(word)
        except ValueError:
            raise KeyError(f"word {word!r} not in the training vocabulary") from None
        where = np.nonzero(idx == wid)[0]
        if not len(where):
            return []
        row = K[where[0]].copy()
        row[where[0]] = -np.inf
        order = np.argsort(-row, kind="stable")[:k]
        return [(self.words[int(idx[o])], float(row[o])) for o in order if np.isfinite(row[o])]


def cosine_kernel(X: np.ndarray, threshold: float) -> np.ndarray:
    """Cosine of the rows of ``X`` (the word kernel of Eqs. 17-21); entries below ``threshold`` set to 0; diagonal 1."""
    X = np.asarray(X)
    X = X if X.dtype == np.float32 else X.astype(np.float64)
    nrm = np.linalg.norm(X, axis=1)
    U = X / np.where(nrm > 0, nrm, 1.0).astype(X.dtype)[:, None]
    K = (U @ U.T).astype(np.float64)
    K[K < threshold] = 0.0
    np.fill_diagonal(K, 1.0)
    return np.clip(K, 0.0, 1.0)


# ------------------------------------------------------------------------------------ distributional
def ppmi_vectors(sentences: Sequence[Sequence[int]], n_words: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Sentence-level PPMI (Eq. 24) among word ids ``0..n_words-1`` (other ids ignored).

    Returns the ``(len(rows), n_words)`` block for target ids ``rows`` (default: all), float32, with
    ``PPMI(w, w) = 0`` (a word is not its own context).  Only the target rows of the co-occurrence
    matrix are formed, so a large external context vocabulary stays cheap.
    """
    lens = np.fromiter((len(s) for s in sentences), dtype=np.int64, count=len(sentences))
    flat = np.fromiter(chain.from_iterable(sentences), dtype=np.int64, count=int(lens.sum()))
    return ppmi_vectors_flat(flat, np.r_[0, np.cumsum(lens)], n_words, rows)


def ppmi_vectors_flat(flat: np.ndarray, offsets: np.ndarray, n_words: int,
                      rows: np.ndarray | None = None) -> np.ndarray:
    """:func:`ppmi_vectors` of sentences given as one array of word ids, sentence ``k`` being
    ``flat[offsets[k]:offsets[k + 1]]`` (``len(offsets) - 1`` sentences, empty ones included)."""
    flat = np.asarray(flat, dtype=np.int64)
    offsets = np.asarray(offsets, dtype=np.int64)
    n_sent = len(offsets) - 1
    sent = np.repeat(np.arange(n_sent, dtype=np.int64), np.diff(offsets))
    ok = (flat >= 0) & (flat < n_words)
    # the distinct (sentence, word) pairs, sentence-major (a word counts once per sentence); sorting and
    # dropping repeats is np.unique's result, several times faster than its hash-based path here
    pairs = np.sort(sent[ok] * n_words + flat[ok])
    pairs = pairs[np.r_[True, pairs[1:] != pairs[:-1]]] if len(pairs) else pairs
    r_idx, c_idx = pairs // n_words, pairs % n_words
    N = max(n_sent, 1)
    X = sp.csc_matrix((np.ones(len(r_idx), np.float32), (r_idx, c_idx)), shape=(n_sent, n_words))
    cnt = np.asarray(X.sum(axis=0)).ravel().astype(np.float64)
    rows = np.arange(n_words) if rows is None else np.asarray(rows, dtype=np.int64)
    out = np.zeros((len(rows), n_words), dtype=np.float32)
    for s0 in range(0, len(rows), 1024):
        rr = rows[s0:s0 + 1024]
        co = (X[:, rr].T @ X).toarray().astype(np.float64)          # (|rr|, n_words) sentence counts
        with np.errstate(divide="ignore", invalid="ignore"):
            pmi = np.log(co * N / (cnt[rr][:, None] * cnt[None, :]))
        pmi[~np.isfinite(pmi)] = 0.0
        np.maximum(pmi, 0.0, out=pmi)
        pmi[np.arange(len(rr)), rr] = 0.0
        out[s0:s0 + len(rr)] = pmi
    return out


def distributional_kernel(sentences: Sequence[Sequence[str]], targets: Sequence[str], min_count: int = MIN_COUNT,
                          threshold: float = KAPPA_D_MIN) -> tuple[list[str], np.ndarray]:
    """kappa_D over the words of ``targets`` seen >= ``min_count`` times in ``sentences``.

    Context dimensions: every word seen >= ``min_count`` times.  Returns (covered target words, kernel).
    """
    cnt = Counter(w for s in sentences for w in s)
    ctx = sorted(w for w, c in cnt.items() if c >= min_count)
    cix = {w: i for i, w in enumerate(ctx)}
    covered = [w for w in targets if w in cix]
    if not covered:
        return [], np.zeros((0, 0))
    enc = [[cix[w] for w in s if w in cix] for s in sentences]
    vec = ppmi_vectors(enc, len(ctx), np.array([cix[w] for w in covered]))
    return covered, cosine_kernel(vec, threshold)


def distributional_kernel_flat(vocab: Sequence[str], flat: np.ndarray, offsets: np.ndarray, targets: Sequence[str],
                               min_count: int = MIN_COUNT, threshold: float = KAPPA_D_MIN) -> tuple[list[str], np.ndarray]:
    """:func:`distributional_kernel` of sentences given as ids into the *sorted* word list ``vocab``
    (sentence ``k`` is ``flat[offsets[k]:offsets[k + 1]]``), without building them as strings."""
    flat = np.asarray(flat, dtype=np.int64)
    cnt = np.bincount(flat, minlength=len(vocab))
    keep = np.flatnonzero(cnt >= min_count)     # vocab is sorted, so the context words stay sorted
    cix = {vocab[i]: k for k, i in enumerate(keep)}
    covered = [w for w in targets if w in cix]
    if not covered:
        return [], np.zeros((0, 0))
    to_ctx = np.full(len(vocab), -1, dtype=np.int64)
    to_ctx[keep] = np.arange(len(keep))
    vec = ppmi_vectors_flat(to_ctx[flat], offsets, len(keep), np.array([cix[w] for w in covered]))
    return covered, cosine_kernel(vec, threshold)


def brown_tagged_sents(fileids=None):
    """NLTK's Brown corpus (or the files ``fileids``) as ``[[(word, TAG), ...], ...]``, exactly what ``nltk.corpus.brown.tagged_sents()``
    returns (every non-blank line of a file is a sentence, tokens split on whitespace, ``word/tag`` split
    at the last ``/``, tags upper-cased), read straight from the files: about 5× faster than NLTK's
    regex-based corpus view."""
    return [[split_tagged_token(tok) for tok in toks] for toks in brown_token_lines(fileids)]


def split_tagged_token(tok: str) -> tuple[str, str | None]:
    """``"word/tag"`` -> ``("word", "TAG")``, split at the last ``/`` (as NLTK's Brown reader)."""
    k = tok.rfind("/")
    return (tok[:k], tok[k + 1:].upper()) if k >= 0 else (tok, None)


def brown_token_lines(fileids=None):
    """The raw ``word/tag`` tokens of each sentence of NLTK's Brown corpus (or the files ``fileids``):
    one list per non-blank line, split on whitespace (what :func:`brown_tagged_sents` splits further)."""
    from nltk.corpus import brown  # heavy (seconds to import nltk): only D_ext over Brown reads it

    for fid in (brown.fileids() if fileids is None else fileids):
        with brown.open(fid) as fh:
            text = fh.read()
        for line in text.split("\n"):
            toks = line.split()
            if toks:
                yield toks


def external_corpus_identity(path) -> dict | None:
    """What a user-supplied external corpus (D_ext) file is, for cache keys: its path and
    :func:`~corpora.base.file_signature` (size, modification time); ``None`` = NLTK's Brown corpus.  An
    edited file gets new sentences, word kernels and Grams."""
    if path is None:
        return None
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"external_corpus={str(path)!r}: no such file")
    return {"path": str(path), "file": file_signature(p)}


def _ext_sentences(tk, path) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Preprocessed external sentences (lemmas, stop words removed), cached on disk: the sorted word list
    ``vocab`` and the sentences as ids into it, sentence ``k`` being ``flat[offsets[k]:offsets[k + 1]]``."""
    stop = english_stopwords()
    key = {"stage": "ext_corpus", "path": str(path) if path else "nltk:brown", "version": 1,
           "token_map": sorted(tk.pre.token_map.items()), "file": external_corpus_identity(path)}

    def compute():
        lem = lemmatizer()
        lemma_id: dict[str, int] = {}   # lemma -> id, in order of first appearance
        ids: list[int] = []             # each kept token's lemma id, -1 for a dropped token
        lengths: list[int] = []         # tokens (kept or not) of each sentence
        if path is None:
            try:
                nltk_resource("corpora/brown", "brown")
            except MissingResourceError as e:
                raise MissingResourceError(
                    f"D_ext needs an external corpus: pass external_corpus=<plain-text file> or install "
                    f"NLTK's Brown corpus ({e})") from None
            lemma_of: dict = {}   # (lower-cased word, WordNet POS) -> lemma id or -1: lemmatised once

            def token(w, t):
                w = w.lower()
                if not is_word(w) or w in stop:
                    return -1
                k = (w, WN_POS.get(t[:1].upper() if t[:2] != "NP" else "N", "n"))
                if k not in lemma_of:
                    l = lem(*k)
                    l = tk.pre.token_map.get(l, l)
                    lemma_of[k] = -1 if l in stop else lemma_id.setdefault(l, len(lemma_id))
                return lemma_of[k]

            class RawTokens(dict):   # raw "word/tag" token -> its lemma id or -1, each type processed once
                def __missing__(self, raw):
                    t = self[raw] = token(*split_tagged_token(raw))
                    return t

            lookup = RawTokens().__getitem__
            for toks in brown_token_lines():   # every line a sentence, even one left empty
                ids.extend(map(lookup, toks))
                lengths.append(len(toks))
        else:
            with open(path, encoding="utf-8") as fh:
                for line in fh:
                    toks = []
                    for w in TOKEN_RE.findall(line.lower()):
                        if not is_word(w) or w in stop:
                            continue
                        l = lem(w, "n")
                        if l == w:
                            l = lem(w, "v")
                        l = tk.pre.token_map.get(l, l)
                        toks.append(lemma_id.setdefault(l, len(lemma_id)))
                    if toks:   # a line left empty is no sentence
                        ids.extend(toks)
                        lengths.append(len(toks))
        return id_sentences(list(lemma_id), ids, lengths)

    arr = tk.cache.get_or_compute("text_ext", key, compute)
    return [str(w) for w in arr["vocab"]], arr["flat"], arr["offsets"]


def id_sentences(words: Sequence[str], ids: Sequence[int], lengths: Sequence[int]) -> dict[str, np.ndarray]:
    """Sentences as ids into their sorted word list: ``vocab`` (every one of the ``words``, sorted; the
    callers' ``words`` are exactly those their kept tokens use), ``flat`` (int32) and ``offsets`` (int64,
    sentence ``k`` being ``flat[offsets[k]:offsets[k + 1]]``).

    ``ids`` are the tokens of every sentence in turn as positions in ``words`` (``-1``: a token dropped),
    ``lengths`` each sentence's number of tokens, dropped ones included; a sentence whose tokens are all
    dropped stays, empty."""
    ids = np.asarray(ids, dtype=np.int32)
    lengths = np.asarray(lengths, dtype=np.int64)
    keep = ids >= 0
    sentence = np.repeat(np.arange(len(lengths)), lengths)
    counts = np.bincount(sentence[keep], minlength=len(lengths))
    order = sorted(range(len(words)), key=words.__getitem__)
    rank = np.empty(len(words), dtype=np.int32)
    rank[order] = np.arange(len(words), dtype=np.int32)
    return {"vocab": np.array([words[i] for i in order], dtype=str), "flat": rank[ids[keep]],
            "offsets": np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)}


# ------------------------------------------------------------------------------------ alignment
def pos_vocabularies(processed, min_count: int = MIN_COUNT):
    """Noun / verb vocabularies of Eq. 25 and P_n(w), P_v(w) from tagged training captions.

    Hodosh et al. (2013), Eq. 25 and Sec. 3.5.4: the noun vocabulary (alignment and Lin similarities) is
    every lemma seen at least ``min_count`` times as a noun (tagged ``NN*``) *and* tagged as a noun in
    at least 50 % of its occurrences (both clauses of the paper's rule); the verb vocabulary is every
    lemma tagged ``VB*`` at least 25 times and at least 25 % of the time.

    Returns
    -------
    nouns, verbs : sorted lists of lemmas
    p_n, p_v : dict
        The fraction of each lemma's training tokens tagged noun / verb.
    """
    tot, nn, vb = Counter(), Counter(), Counter()
    for p in processed:
        for w, t in zip(p.tokens, p.tags):
            tot[w] += 1
            if is_noun_tag(t):
                nn[w] += 1
            elif is_verb_tag(t):
                vb[w] += 1
    nouns = sorted(w for w in tot if nn[w] >= min_count and nn[w] >= 0.5 * tot[w])
    verbs = sorted(w for w in tot if vb[w] >= 25 and vb[w] >= 0.25 * tot[w])
    p_n = {w: nn[w] / tot[w] for w in tot}
    p_v = {w: vb[w] / tot[w] for w in tot}
    return nouns, verbs, p_n, p_v


def alignment_tables(processed, item_of, nouns, verbs, n_iter_model1=10, n_iter_model2=5):
    """Train the noun and verb IBM models on all ordered pairs of distinct captions of each item."""
    out = {}
    for name, vocab, is_tag in (("noun", nouns, is_noun_tag), ("verb", verbs, is_verb_tag)):
        ix = {w: i for i, w in enumerate(vocab)}
        sents = [[ix[w] for w, t in zip(p.tokens, p.tags) if is_tag(t) and w in ix] for p in processed]
        src, tgt = [], []
        by_item: dict[int, list[int]] = {}
        for c, it in enumerate(item_of):
            by_item.setdefault(int(it), []).append(c)
        for caps in by_item.values():
            for a in caps:
                for b in caps:
                    if a != b:
                        src.append(sents[a])
                        tgt.append(sents[b])
        model = IBMModel2(n_iter_model1, n_iter_model2).fit(src, tgt, len(vocab), len(vocab)) if vocab else None
        out[name] = (vocab, None if model is None else model.observed_translation())
    return out


def alignment_kernel(processed, item_of, min_count: int = MIN_COUNT, threshold: float = KAPPA_A_MIN):
    """kappa_A (Eq. 25): returns (covered words, kernel, info dict)."""
    nouns, verbs, p_n, p_v = pos_vocabularies(processed, min_count)
    tables = alignment_tables(processed, item_of, nouns, verbs)
    words = sorted(set(nouns) | set(verbs))
    wix = {w: i for i, w in enumerate(words)}
    S = np.zeros((len(words), len(words)))
    for name, pw in (("noun", p_n), ("verb", p_v)):
        vocab, t = tables[name]
        if t is None:
            continue
        rows = np.array([wix[w] for w in vocab])
        weight = np.array([pw.get(w, 0.0) for w in vocab])
        S[np.ix_(rows, rows)] += weight[:, None] * t
    K = cosine_kernel(S, threshold) if len(words) else np.zeros((0, 0))
    return words, K, {"nouns": nouns, "verbs": verbs, "sigma": S}


# ------------------------------------------------------------------------------------ Lin / WordNet
def _ancestors(ss, cache: dict):
    if ss not in cache:
        anc = {ss}
        for path in ss.hypernym_paths():
            anc.update(path)
        cache[ss] = anc
    return cache[ss]


def wordnet_information_content(processed):
    """Noun synset frequencies from the training captions (Resnik 1995): each noun-tagged token's count
    is split equally among its WordNet noun senses and added to every ancestor (once per sense).

    Returns ``(freq, total, ic)``: synset -> frequency, the root total, and ``ic(synset) = -log p``.
    """
    wn = english_wordnet()
    counts = Counter(w for p in processed for w, t in zip(p.tokens, p.tags) if is_noun_tag(t))
    freq: Counter = Counter()
    cache: dict = {}
    for w, c in counts.items():
        senses = wn.synsets(w.replace(" ", "_"), pos="n")
        if not senses:
            continue
        share = c / len(senses)
        for s in senses:
            for a in _ancestors(s, cache):
                freq[a] += share
    roots = [s for s in freq if not s.hypernyms() and not s.instance_hypernyms()]
    total = sum(freq[r] for r in roots) or 1.0

    def ic(s):
        return float(-np.log(max(freq.get(s, 0.0), 1e-300) / total))

    return freq, total, ic


def lin_first_senses(lemmas, freq):
    """The Lin similarity's words: the ``lemmas`` (for :func:`lin_kernel`, every lemma seen at
    least ``min_count`` times, nouns and verbs alike) whose first WordNet noun sense has a positive
    training frequency ``freq`` (from :func:`wordnet_information_content`); returns
    ``(words, first senses)``."""
    wn = english_wordnet()
    words, first = [], []
    for w in lemmas:
        senses = wn.synsets(w.replace(" ", "_"), pos="n")
        if senses and freq.get(senses[0], 0) > 0:
            words.append(w)
            first.append(senses[0])
    return words, first


def lin_similarity(c1, c2, ic, cache: dict | None = None) -> float:
    """Lin's similarity of two synsets, Hodosh et al. (2013), Eq. 22:
    ``sim_Lin(c1, c2) = 2 IC(lcs(c1, c2)) / (IC(c1) + IC(c2))``, the least common subsumer being the
    common ancestor with the largest information content ``ic``."""
    cache = {} if cache is None else cache
    common = _ancestors(c1, cache) & _ancestors(c2, cache)
    den = ic(c1) + ic(c2)
    if not common or den <= 0:
        return 0.0
    return float(2.0 * max(ic(a) for a in common) / den)


def lin_hypernym_vectors(first_senses, ic) -> tuple[list, np.ndarray]:
    """Each word's vector over WordNet hypernyms, Hodosh et al. (2013), Eq. 23.

    Word ``w`` (first noun sense ``c``) has the entry 1 on ``c`` itself (Eq. 23: "1 if s_w = s_i";
    also ``sim_Lin(c, c)``), ``sim_Lin(c, h) = 2 IC(h) / (IC(c) + IC(h))`` (Eq. 22 with
    ``lcs(c, h) = h``) for every hypernym ``h`` of ``c`` (every synset on its hypernym paths) and 0 for
    every other synset in the vocabulary's union.

    Returns
    -------
    hypernyms : list of synsets (the dimensions: the first senses and their hypernyms, sorted by name)
    X : ndarray, shape (n_words, n_hypernyms), float64
    """
    cache: dict = {}
    hyper = [_ancestors(c, cache) - {c} for c in first_senses]
    dims = sorted(set(first_senses).union(*hyper), key=lambda h: h.name()) if hyper else []
    col = {h: k for k, h in enumerate(dims)}
    X = np.zeros((len(first_senses), len(dims)))
    for r, (c, hs) in enumerate(zip(first_senses, hyper)):
        ic_c = ic(c)
        X[r, col[c]] = 1.0
        for h in hs:
            den = ic_c + ic(h)
            X[r, col[h]] = 2.0 * ic(h) / den if den > 0 else 0.0
    return dims, X


def lin_kernel(processed, min_count: int = MIN_COUNT):
    """kappa_Lin, Hodosh et al. (2013), Eqs. 22-23: the cosine of the words' hypernym vectors
    (:func:`lin_hypernym_vectors`) over every lemma seen at least ``min_count`` times in the training
    captions (any part of speech) with a WordNet noun sense.

    Returns
    -------
    words : list of str
    K : ndarray, shape (n_words, n_words), the word kernel (diagonal 1)
    info : dict
        ``"first_senses"``, ``"hypernyms"`` (the vector dimensions) and ``"vectors"``.
    """
    counts = Counter(w for p in processed for w in p.tokens)
    frequent = sorted(w for w, c in counts.items() if c >= min_count)
    freq, _, ic = wordnet_information_content(processed)
    words, first = lin_first_senses(frequent, freq)
    if not words:
        return [], np.zeros((0, 0)), {"first_senses": [], "hypernyms": [], "vectors": np.zeros((0, 0))}
    dims, X = lin_hypernym_vectors(first, ic)
    return words, cosine_kernel(X, 0.0), {"first_senses": first, "hypernyms": dims, "vectors": X}


# ------------------------------------------------------------------------------------ assembly
def combine_word_kernels(parts: dict, words: list[str], mode: str):
    """Put component word kernels ``{name: (word ids, kernel)}`` on the union of their vocabularies and
    combine them entrywise: ``"max"`` (Eq. 27, ``kappa_{S1,S2} = max(kappa_S1, kappa_S2)``) or ``"avg"``
    (the mean of the components that cover a pair, as ``D_ext+ic``); diagonal 1.  Returns
    ``(word ids, kernel)``."""
    wix = {w: i for i, w in enumerate(words)}
    union = sorted({int(i) for idx, _ in parts.values() for i in idx})
    if not union:
        return np.zeros(0, np.int64), np.zeros((0, 0))
    upos = {v: k for k, v in enumerate(union)}
    n = len(union)
    acc = np.zeros((n, n))
    cnt = np.zeros((n, n))
    for idx, K in parts.values():
        loc = np.array([upos[int(i)] for i in idx], dtype=np.int64)
        if mode == "max":
            sub = acc[np.ix_(loc, loc)]
            acc[np.ix_(loc, loc)] = np.maximum(sub, K)
        else:
            acc[np.ix_(loc, loc)] += K
            cnt[np.ix_(loc, loc)] += 1
    if mode == "avg":
        acc = np.where(cnt > 0, acc / np.maximum(cnt, 1), 0.0)
    np.fill_diagonal(acc, 1.0)
    del wix
    return np.array(union, dtype=np.int64), acc


def build_word_kernel(tk) -> WordKernel:
    """The word kernel of a fitted :class:`~kernels.text.kernel.TextKernel` (its ``sim_parts``), cached."""
    words = tk.vocab.words
    key = {"stage": "word_kernel", "corpus": tk.corpus_fingerprint, "train": list(tk.train_ids),
           "cpi": tk.captions_per_item, "seed": tk.seed, "parts": list(tk.sim_parts), "min_count": tk.min_count,
           "ext": tk.ext_identity(), "version": 3}
    comps: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    wix = {w: i for i, w in enumerate(words)}

    def as_ids(ws):
        return np.array([wix[w] for w in ws], dtype=np.int64)

    needed = set()
    for p in tk.sim_parts:
        needed.update({"D_ext+ic": ("D_ic", "D_ext")}.get(p, (p,)))

    def compute():
        res = {}
        toks = [list(p.tokens) for p in tk.processed]
        if "D_ic" in needed:
            ws, K = distributional_kernel(toks, words, tk.min_count, KAPPA_D_MIN)
            res["D_ic.idx"], res["D_ic.K"] = as_ids(ws), K.astype(np.float32)
        if "D_ext" in needed:
            ws, K = distributional_kernel_flat(*_ext_sentences(tk, tk.external_corpus), words, tk.min_count,
                                               KAPPA_D_MIN)
            res["D_ext.idx"], res["D_ext.K"] = as_ids(ws), K.astype(np.float32)
        if "A" in needed:
            ws, K, _ = alignment_kernel(tk.tagged, tk.item_of, tk.min_count, KAPPA_A_MIN)
            res["A.idx"], res["A.K"] = as_ids(ws), K.astype(np.float32)
        if "Lin" in needed:
            ws, K, _ = lin_kernel(tk.tagged, tk.min_count)
            res["Lin.idx"], res["Lin.K"] = as_ids(ws), K.astype(np.float32)
        return res

    arr = tk.cache.get_or_compute("text_wordkernel", key, compute)
    for name in needed:
        comps[name] = (arr[f"{name}.idx"], arr[f"{name}.K"].astype(np.float64))
    top: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for p in tk.sim_parts:
        if p == "D_ext+ic":
            top[p] = combine_word_kernels({"D_ic": comps["D_ic"], "D_ext": comps["D_ext"]}, words, "avg")
        else:
            top[p] = comps[p]
    idx, K = combine_word_kernels(top, words, "max") if len(top) > 1 else top[tk.sim_parts[0]]
    allparts = dict(comps)
    allparts.update(top)
    return WordKernel(list(words), idx, K, allparts)
