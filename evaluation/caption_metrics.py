"""Classical reference-based caption metrics, in pure Python / NumPy / SciPy (no Java).

All metrics take a list of candidate strings and, aligned with it, a list of reference lists, and return
one float per candidate.  Text goes through one tokenizer, :func:`ptb_tokenize`, everywhere.

=====================  ==========================================================================
function               definition
=====================  ==========================================================================
:func:`bleu`           BLEU-1..4 (Papineni et al. 2002) as computed by the COCO caption evaluation
                       (``pycocoevalcap.bleu``): clipped n-gram precisions, geometric mean,
                       brevity penalty with the *closest* reference length; sentence level and
                       corpus level (:func:`corpus_bleu`).
:func:`rouge_l`        ROUGE-L (Lin 2004) as in COCO: LCS-based F-measure with β = 1.2, precision
                       and recall maximised over the references.
:func:`cider_d`        CIDEr-D (Vedantam et al. 2015) as in COCO: TF-IDF n-gram vectors (n = 1..4),
                       clipped cosine, Gaussian length penalty σ = 6, ×10, document frequency from
                       the reference sets.
:func:`hodosh_bleu`,   Hodosh et al. (2013), Sec. 5 / Eq. 28: unigram BLEU (clipped unigram precision,
:func:`hodosh_rouge`   no brevity penalty) and unigram ROUGE (ROUGE-1 recall), optionally with the
                       paper's "pre" preprocessing (:func:`hodosh_preprocess`).
:func:`cohen_kappa`    Cohen's κ between binarised metric scores and binarised expert scores
                       (Hodosh et al. 2013, Tables 8–10).
=====================  ==========================================================================

METEOR, both the official 1.5 and the NLTK variant (:func:`~evaluation.meteor.meteor_nltk`), lives in
:mod:`evaluation.meteor`.
"""
from __future__ import annotations

import math
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

from corpora.nltk_resources import english_stopwords

__all__ = [
    "ptb_tokenize", "bleu", "corpus_bleu", "rouge_l", "cider_d", "CIDErD",
    "hodosh_preprocess", "hodosh_bleu", "hodosh_rouge", "cohen_kappa", "binarise", "METRICS",
    "lcs_length", "check_caption_inputs",
]

# ---------------------------------------------------------------------------------------------- tokenizer
_CLITIC_NT = re.compile(r"(\w)n't\b")
_CLITIC = re.compile(r"(\w)'(s|re|ve|ll|m|d)\b")
# word characters = Unicode letters and digits (``[^\W_]``), so "café" / "crème" stay whole
_TOKEN = re.compile(r"n't|'(?:s|re|ve|ll|m|d)\b|[^\W_]+(?:[-.,'&/][^\W_]+)*|\S")
_PUNCT_CHARS = set(string.punctuation) | {"\u2018", "\u2019", "\u201c", "\u201d", "\u2013", "\u2014", "\u2026"}


@lru_cache(maxsize=300_000)
def _ptb_tokenize_cached(text: str) -> tuple[str, ...]:
    t = unicodedata.normalize("NFC", text).lower().replace("\u2019", "'").replace("\u2018", "'").replace("`", "'")
    t = _CLITIC_NT.sub(r"\1 n't", t)
    t = _CLITIC.sub(r"\1 '\2", t)
    toks = _TOKEN.findall(t)
    return tuple(w for w in toks if not all(ch in _PUNCT_CHARS for ch in w))


def ptb_tokenize(text: str) -> list[str]:
    """Tokenise like the COCO caption evaluation (Stanford PTBTokenizer + punctuation removal).

    NFC-normalises and lowercases; splits the clitics ``n't 's 're 've 'll 'm 'd`` off as PTB does;
    words are runs of Unicode letters and digits (accented words such as ``café`` stay whole), kept
    whole across internal hyphens, apostrophes, dots or commas (``black-and-white``, ``3.5``); drops
    every token made only of punctuation.  ``"A dog's toy, black-and-white."`` ->
    ``['a', 'dog', "'s", 'toy', 'black-and-white']``.
    """
    if not isinstance(text, str):
        raise TypeError(f"ptb_tokenize expects a string, got {type(text).__name__}")
    return list(_ptb_tokenize_cached(text))


def check_caption_inputs(candidates: Sequence[str], references: Sequence[Sequence[str]], name: str) -> None:
    """Refuse a bare string for a list, mismatched lengths and a candidate without references
    (``TypeError`` / ``ValueError`` naming ``name``, the metric)."""
    if isinstance(candidates, str):
        raise TypeError(f"{name}: candidates must be a list of strings, not one string")
    if len(candidates) != len(references):
        raise ValueError(
            f"{name}: {len(candidates)} candidates but {len(references)} reference lists (must match)"
        )
    for i, refs in enumerate(references):
        if isinstance(refs, str):
            raise TypeError(f"{name}: references[{i}] must be a list of strings, not one string")
        if len(refs) == 0:
            raise ValueError(f"{name}: references[{i}] is empty; every candidate needs ≥ 1 reference")


def _ngrams(tokens: Sequence[str], n: int) -> Counter:
    return Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


@lru_cache(maxsize=300_000)
def _ngram_counts(text: str, n_max: int) -> tuple[int, tuple[Counter, ...]]:
    toks = _ptb_tokenize_cached(text)
    return len(toks), tuple(_ngrams(toks, n) for n in range(1, n_max + 1))


# ---------------------------------------------------------------------------------------------- BLEU
_TINY, _SMALL = 1e-15, 1e-9


@lru_cache(maxsize=100_000)
def _max_ref_counts(refs: tuple[str, ...], n_max: int) -> tuple[tuple[int, ...], tuple[dict, ...]]:
    """Reference lengths and, per order, the maximum count of every n-gram over the references
    (memoised: the same reference set serves many candidates)."""
    rlens = []
    maxref: list[dict] = [dict() for _ in range(n_max)]
    for r in refs:
        rl, rcounts = _ngram_counts(r, n_max)
        rlens.append(rl)
        for n in range(n_max):
            m = maxref[n]
            for g, c in rcounts[n].items():
                if c > m.get(g, 0):
                    m[g] = c
    return tuple(rlens), tuple(maxref)


def _bleu_stats(cand: str, refs: Sequence[str], n_max: int) -> tuple[int, int, np.ndarray, np.ndarray]:
    """(candidate length, closest reference length, clipped matches per n, candidate n-grams per n)."""
    clen, ccounts = _ngram_counts(cand, n_max)
    rlens, maxref = _max_ref_counts(tuple(refs), n_max)
    # closest reference length, ties -> shorter (as coco-caption: min over (|l − c|, l))
    rlen = min((abs(rl - clen), rl) for rl in rlens)[1]
    correct = np.array([sum(min(c, maxref[n].get(g, 0)) for g, c in ccounts[n].items())
                        for n in range(n_max)], dtype=np.float64)
    guess = np.array([max(0, clen - n) for n in range(n_max)], dtype=np.float64)
    return clen, rlen, correct, guess


def bleu(candidates: Sequence[str], references: Sequence[Sequence[str]], n: int = 4) -> np.ndarray:
    """Sentence-level BLEU-1..n as in the COCO caption evaluation.

    For each candidate ``c`` with references ``R`` and each order ``m ≤ n``

    .. math::
        p_m = \\frac{\\sum_{g \\in m\\text{-grams}(c)} \\min(\\#_c(g), \\max_{r \\in R} \\#_r(g)) + 10^{-15}}
                   {|m\\text{-grams}(c)| + 10^{-9}},
        \\qquad
        \\mathrm{BLEU}\\text{-}m = \\mathrm{BP} \\cdot \\Bigl(\\prod_{i=1}^{m} p_i\\Bigr)^{1/m},

    with brevity penalty ``BP = exp(1 − ℓ_r / ℓ_c)`` if ``ℓ_c < ℓ_r`` else 1, where ``ℓ_r`` is the
    reference length closest to ``ℓ_c`` (ties -> the shorter).  The tiny constants are COCO's guards
    against zero division; they make a candidate with no matching m-gram score ≈ 0.

    Returns
    -------
    ndarray, shape (len(candidates), n)
        Column ``m − 1`` is BLEU-m.
    """
    check_caption_inputs(candidates, references, "bleu")
    out = np.empty((len(candidates), n), dtype=np.float64)
    expo = 1.0 / np.arange(1, n + 1)
    for i, (c, refs) in enumerate(zip(candidates, references)):
        clen, rlen, correct, guess = _bleu_stats(c, refs, n)
        cum = np.cumprod((correct + _TINY) / (guess + _SMALL))
        scores = cum ** expo
        ratio = (clen + _TINY) / (rlen + _SMALL)
        if ratio < 1:
            scores *= math.exp(1 - 1 / ratio)
        out[i] = scores
    return out


def corpus_bleu(candidates: Sequence[str], references: Sequence[Sequence[str]], n: int = 4) -> np.ndarray:
    """Corpus-level BLEU-1..n (COCO): matches, n-gram counts and lengths summed over the corpus before
    the precisions and the brevity penalty are formed.  Returns an array of length ``n``."""
    check_caption_inputs(candidates, references, "corpus_bleu")
    tc = tr = 0
    correct = np.zeros(n)
    guess = np.zeros(n)
    for c, refs in zip(candidates, references):
        clen, rlen, cor, gu = _bleu_stats(c, refs, n)
        tc += clen
        tr += rlen
        correct += cor
        guess += gu
    scores = np.cumprod((correct + _TINY) / (guess + _SMALL)) ** (1.0 / np.arange(1, n + 1))
    ratio = (tc + _TINY) / (tr + _SMALL)
    if ratio < 1:
        scores = scores * math.exp(1 - 1 / ratio)
    return scores


# ---------------------------------------------------------------------------------------------- ROUGE-L
def lcs_length(a: Sequence, b: Sequence) -> int:
    """Length of the longest common subsequence, bit-parallel (Allison & Dix 1986; Hyyrö 2004).

    With ``M[x]`` the bit mask of the positions of symbol ``x`` in ``a`` and ``V`` initialised to all
    ones, each symbol ``y`` of ``b`` updates ``U = V & M[y]; V = (V + U) | (V − U)``; the LCS length is
    the number of zero bits among the low ``len(a)`` bits of ``V``.
    """
    if not a or not b:
        return 0
    masks: dict = {}
    for i, x in enumerate(a):
        masks[x] = masks.get(x, 0) | (1 << i)
    full = (1 << len(a)) - 1
    v = full
    for y in b:
        m = masks.get(y)
        if m is None:
            continue
        u = v & m
        v = ((v + u) | (v - u)) & full
    return len(a) - bin(v).count("1")


def rouge_l(candidates: Sequence[str], references: Sequence[Sequence[str]], beta: float = 1.2) -> np.ndarray:
    """ROUGE-L as in the COCO caption evaluation (Lin 2004, Sec. 3.1).

    .. math::
        P = \\max_{r} \\frac{\\mathrm{LCS}(c, r)}{|c|},\\quad R = \\max_{r} \\frac{\\mathrm{LCS}(c, r)}{|r|},
        \\quad \\mathrm{ROUGE\\text{-}L} = \\frac{(1 + \\beta^2) P R}{R + \\beta^2 P}
        \\;(0 \\text{ if } P = 0 \\text{ or } R = 0),\\; \\beta = 1.2.
    """
    check_caption_inputs(candidates, references, "rouge_l")
    out = np.zeros(len(candidates), dtype=np.float64)
    b2 = beta * beta
    for i, (c, refs) in enumerate(zip(candidates, references)):
        ct = _ptb_tokenize_cached(c)
        if not ct:
            continue
        pmax = rmax = 0.0
        for r in refs:
            rt = _ptb_tokenize_cached(r)
            if not rt:
                continue
            lcs = lcs_length(rt, ct)
            pmax = max(pmax, lcs / len(ct))
            rmax = max(rmax, lcs / len(rt))
        if pmax > 0 and rmax > 0:
            out[i] = (1 + b2) * pmax * rmax / (rmax + b2 * pmax)
    return out


# ---------------------------------------------------------------------------------------------- CIDEr-D
class CIDErD:
    """CIDEr-D (Vedantam et al. 2015) exactly as the COCO caption evaluation computes it.

    For n-gram order ``n ∈ {1..4}`` a sentence ``s`` maps to the TF-IDF vector
    ``g_n(s)_k = h_k(s) · (log |D| − log max(1, df_k))`` where ``h_k`` is the raw count of n-gram ``k``
    in ``s``, ``D`` the set of *documents* (one per reference set) and ``df_k`` the number of documents in
    which ``k`` occurs in at least one reference.  For a candidate ``c`` with references ``S``:

    .. math::
        \\mathrm{CIDEr\\text{-}D}_n(c, S) = \\frac{10}{|S|} \\sum_{s \\in S}
            e^{-\\frac{(\\ell_c - \\ell_s)^2}{2\\sigma^2}}
            \\frac{\\langle \\min(g_n(c), g_n(s)), g_n(s) \\rangle}{\\|g_n(c)\\|\\,\\|g_n(s)\\|},
        \\qquad \\mathrm{CIDEr\\text{-}D} = \\frac{1}{4} \\sum_{n=1}^{4} \\mathrm{CIDEr\\text{-}D}_n,

    σ = 6, ``min`` element-wise (the "clipping" of CIDEr-D).  As in coco-caption's ``cider_scorer.py``
    the length ``ℓ`` is the number of *bigram* tokens of the sentence (``len − 1`` for non-empty text).

    ``fit(references)`` sets the document frequencies; :meth:`score` then scores any candidates.  COCO
    fits on the reference sets of exactly the items being scored (one document per scored item); the
    functional form :func:`cider_d` does that unless ``df_references`` is given.

    Everything is vectorised with sparse matrices: ~17k candidates × 5 references take about a second.
    """

    def __init__(self, n: int = 4, sigma: float = 6.0):
        if n < 1:
            raise ValueError(f"CIDErD: n must be ≥ 1, got {n}")
        if sigma <= 0:
            raise ValueError(f"CIDErD: sigma must be > 0, got {sigma}")
        self.n = n
        self.sigma = float(sigma)
        self.df_: dict | None = None
        self.log_n_docs_: float | None = None

    # n-gram ids are shared across calls through a per-instance vocabulary
    # (the n-gram counts are the memoised ones BLEU uses: a sentence is counted once for both metrics)
    def _vocab_ids(self, text: str, vocab: dict) -> tuple[list[int], list[int], int]:
        n_tokens, per_order = _ngram_counts(text, self.n)
        ids, counts = [], []
        for grams in per_order:
            for g, c in grams.items():
                j = vocab.get(g)
                if j is None:
                    j = vocab[g] = len(vocab)
                ids.append(j)
                counts.append(c)
        return ids, counts, max(0, n_tokens - 1)

    def fit(self, references: Sequence[Sequence[str]]) -> "CIDErD":
        """Document frequencies from reference sets (one document per set)."""
        if len(references) == 0:
            raise ValueError("CIDErD.fit: no reference sets")
        # documents × sentences incidence  @  sentences × n-grams presence  ->  (doc, n-gram) support
        sent_index: dict[str, int] = {}
        d_rows, d_cols = [], []
        for i, refs in enumerate(references):
            if isinstance(refs, str):
                raise TypeError(f"CIDErD.fit: references[{i}] must be a list of strings")
            for r in refs:
                d_rows.append(i)
                d_cols.append(sent_index.setdefault(r, len(sent_index)))
        vocab: dict = {}
        s_rows, s_cols = [], []
        for sent, j in sent_index.items():
            ids, _, _ = self._vocab_ids(sent, vocab)
            s_rows.extend([j] * len(ids))
            s_cols.extend(ids)
        D = sp.csr_matrix((np.ones(len(d_rows)), (d_rows, d_cols)), shape=(len(references), len(sent_index)))
        G = sp.csr_matrix((np.ones(len(s_rows)), (s_rows, s_cols)), shape=(len(sent_index), max(1, len(vocab))))
        support = (D @ G).tocsr()
        support.eliminate_zeros()
        df = np.bincount(support.indices, minlength=len(vocab))
        grams = [None] * len(vocab)
        for g, j in vocab.items():
            grams[j] = g
        self.df_ = {g: float(c) for g, c in zip(grams, df.tolist())}
        self.log_n_docs_ = math.log(float(len(references)))
        return self

    def score(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """CIDEr-D of every candidate against its own references (requires :meth:`fit`)."""
        if self.df_ is None:
            raise RuntimeError("CIDErD.score called before fit()")
        check_caption_inputs(candidates, references, "CIDErD.score")
        # unique sentences -> sparse count matrix
        sent_index: dict[str, int] = {}
        for c in candidates:
            sent_index.setdefault(c, len(sent_index))
        for refs in references:
            for r in refs:
                sent_index.setdefault(r, len(sent_index))
        vocab: dict = {}
        rows, cols, vals, lengths = [], [], [], np.zeros(len(sent_index))
        for s, i in sent_index.items():
            ids, counts, length = self._vocab_ids(s, vocab)
            rows.extend([i] * len(ids))
            cols.extend(ids)
            vals.extend(counts)
            lengths[i] = length
        V = max(1, len(vocab))
        grams = [None] * len(vocab)
        for g, j in vocab.items():
            grams[j] = g
        order = np.array([len(g) - 1 for g in grams], dtype=np.int64)
        df = np.array([self.df_.get(g, 0.0) for g in grams], dtype=np.float64)
        idf = self.log_n_docs_ - np.log(np.maximum(1.0, df))
        C = sp.csr_matrix((np.asarray(vals, dtype=np.float64), (rows, cols)), shape=(len(sent_index), V))
        T = C.multiply(idf[None, :]).tocsr() if len(vocab) else C
        onehot = sp.csr_matrix((np.ones(len(order)), (np.arange(len(order)), order)), shape=(V, self.n))
        norms = np.sqrt(sp.csr_matrix(T.multiply(T)) @ onehot).toarray()  # (n_sent, n)
        # candidate/reference pairs
        cand_idx, ref_idx, owner = [], [], []
        for i, (c, refs) in enumerate(zip(candidates, references)):
            ci = sent_index[c]
            for r in refs:
                cand_idx.append(ci)
                ref_idx.append(sent_index[r])
                owner.append(i)
        cand_idx = np.asarray(cand_idx)
        ref_idx = np.asarray(ref_idx)
        owner = np.asarray(owner)
        H = T[cand_idx]
        R = T[ref_idx]
        num = (sp.csr_matrix(H.minimum(R).multiply(R)) @ onehot).toarray()  # (pairs, n)
        den = norms[cand_idx] * norms[ref_idx]
        with np.errstate(divide="ignore", invalid="ignore"):
            val = np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)
        delta = lengths[cand_idx] - lengths[ref_idx]
        val *= np.exp(-(delta ** 2) / (2 * self.sigma ** 2))[:, None]
        per_pair = val.mean(axis=1)
        n_refs = np.bincount(owner, minlength=len(candidates)).astype(np.float64)
        total = np.bincount(owner, weights=per_pair, minlength=len(candidates))
        return 10.0 * total / n_refs


def cider_d(candidates: Sequence[str], references: Sequence[Sequence[str]], *,
            df_references: Sequence[Sequence[str]] | None = None, n: int = 4,
            sigma: float = 6.0) -> np.ndarray:
    """CIDEr-D of each candidate (see :class:`CIDErD`).

    ``df_references`` – the reference corpus that defines document frequencies; default: the given
    ``references`` (one document per candidate, as COCO's scorer does).
    """
    check_caption_inputs(candidates, references, "cider_d")
    scorer = CIDErD(n=n, sigma=sigma).fit(references if df_references is None else df_references)
    return scorer.score(candidates, references)


# ---------------------------------------------------------------------------------------------- Hodosh
#: NLTK's English stop words, the toolkit's one list (found, or downloaded when online; a
#: ``MissingResourceError`` naming them otherwise).
_stopwords = english_stopwords


@lru_cache(maxsize=1)
def _stemmer():
    from nltk.stem import PorterStemmer

    return PorterStemmer()


@lru_cache(maxsize=300_000)
def _hodosh_tokens(text: str, pre: bool) -> tuple[str, ...]:
    toks = _ptb_tokenize_cached(text)
    if not pre:
        return toks
    sw = _stopwords()
    stem = _stemmer().stem
    out = []
    for t in toks:
        for part in t.split("-"):  # split hyphenated words
            if part and part not in sw and not all(ch in _PUNCT_CHARS for ch in part):
                out.append(stem(part))
    return tuple(out)


def hodosh_preprocess(text: str) -> list[str]:
    """Hodosh et al. (2013) "pre" preprocessing: tokenise (:func:`ptb_tokenize`, which lowercases), split
    hyphenated words, drop NLTK English stop words, Porter-stem the rest (stop words are matched before
    stemming)."""
    return list(_hodosh_tokens(text, True))


def hodosh_bleu(candidates: Sequence[str], references: Sequence[Sequence[str]], *, pre: bool = False) -> np.ndarray:
    """Unigram BLEU of Hodosh et al. (2013), Eq. 28 – clipped unigram precision, no brevity penalty:

    .. math:: \\mathrm{BLEU}(c, R) = \\frac{\\sum_w \\min(\\#_c(w), \\max_{r \\in R} \\#_r(w))}{\\sum_w \\#_c(w)}

    (0 for an empty candidate).  ``pre=True`` applies :func:`hodosh_preprocess` first.
    """
    check_caption_inputs(candidates, references, "hodosh_bleu")
    out = np.zeros(len(candidates))
    for i, (c, refs) in enumerate(zip(candidates, references)):
        cc = Counter(_hodosh_tokens(c, pre))
        tot = sum(cc.values())
        if not tot:
            continue
        mx: Counter = Counter()
        for r in refs:
            for w, k in Counter(_hodosh_tokens(r, pre)).items():
                if k > mx[w]:
                    mx[w] = k
        out[i] = sum(min(k, mx[w]) for w, k in cc.items()) / tot
    return out


def hodosh_rouge(candidates: Sequence[str], references: Sequence[Sequence[str]], *, pre: bool = False) -> np.ndarray:
    """Unigram ROUGE (ROUGE-1 recall) of Hodosh et al. (2013), Eq. 28:

    .. math:: \\mathrm{ROUGE}(c, R) = \\frac{\\sum_{r \\in R} \\sum_w \\min(\\#_c(w), \\#_r(w))}{\\sum_{r \\in R} \\sum_w \\#_r(w)}

    ``pre=True`` applies :func:`hodosh_preprocess` first.
    """
    check_caption_inputs(candidates, references, "hodosh_rouge")
    out = np.zeros(len(candidates))
    for i, (c, refs) in enumerate(zip(candidates, references)):
        cc = Counter(_hodosh_tokens(c, pre))
        num = den = 0
        for r in refs:
            rc = Counter(_hodosh_tokens(r, pre))
            num += sum(min(k, cc[w]) for w, k in rc.items())
            den += sum(rc.values())
        out[i] = num / den if den else 0.0
    return out


# ---------------------------------------------------------------------------------------------- κ
def binarise(x: Sequence[float], threshold: float) -> np.ndarray:
    """``x ≥ threshold`` as a bool array (NaN rejected)."""
    x = np.asarray(x, dtype=np.float64)
    if np.isnan(x).any():
        raise ValueError("binarise: input contains NaN")
    return x >= threshold


def cohen_kappa(a: Sequence, b: Sequence, *, threshold_a: float | None = None,
                threshold_b: float | None = None) -> float:
    """Cohen's κ = (p_o − p_e) / (1 − p_e) between two label sequences (Hodosh et al. 2013, Tables 8–10).

    With ``threshold_a`` / ``threshold_b`` the inputs are first binarised (``x ≥ threshold``) – e.g. a
    metric score at some cut-off against the expert score ≥ 3 ("describes the image with at most minor
    errors").  ``p_o`` is the observed agreement, ``p_e = Σ_l P_a(l) P_b(l)`` the chance agreement.
    Returns 1.0 when both raters are constant and agree, 0.0 when ``p_e = 1`` otherwise.
    """
    a = binarise(a, threshold_a) if threshold_a is not None else np.asarray(a)
    b = binarise(b, threshold_b) if threshold_b is not None else np.asarray(b)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"cohen_kappa: inputs must be 1-D of equal length, got {a.shape} and {b.shape}")
    if a.size == 0:
        raise ValueError("cohen_kappa: empty input")
    labels = np.union1d(a, b)
    po = float(np.mean(a == b))
    pe = float(sum(np.mean(a == l) * np.mean(b == l) for l in labels))
    if pe >= 1.0:
        return 1.0 if po == 1.0 else 0.0
    return (po - pe) / (1.0 - pe)


#: The metrics the experiment reports: name -> ``f(candidates, references) -> scores``.
METRICS: dict[str, Callable[[Sequence[str], Sequence[Sequence[str]]], np.ndarray]] = {
    "BLEU-1": lambda c, r: bleu(c, r, n=1)[:, 0],
    "BLEU-4": lambda c, r: bleu(c, r, n=4)[:, 3],
    "ROUGE-L": rouge_l,
    "CIDEr-D": cider_d,
}
