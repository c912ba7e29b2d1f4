"""TagRank kernel (Hwang & Grauman 2012) as used by Hodosh et al. (2013), Sec. 3.4.2, Eqs. 9-11.

For a caption (after preprocessing) let ``p_i`` be the 1-based position of word ``i`` (averaged over
repeated occurrences).  Two vectors over the vocabulary (0 for absent words):

* absolute rank (Eq. 9):  ``a(i) = 1 / log2(1 + p_i)``;
* relative rank (Eq. 10): ``r(i) = 1 - sum_{k <= p_i} n_ik / n_i`` with ``n_ik`` the number of training
  tokens of word ``i`` at position ``k`` and ``n_i`` all its training tokens (words unseen in training:
  ``r(i) = 0``).

Kernel between two captions (Eq. 11), with the chi-square distance
``chi2(x, y) = sum_i (x_i - y_i)^2 / (x_i + y_i)`` (terms with ``x_i + y_i = 0`` omitted):

    K(s, s') = 1/2 [ exp(-chi2(r, r') / (2 Omega)) + exp(-chi2(a, a') / (2 Omega')) ],

``Omega``, ``Omega'`` = the mean chi-square distance over all pairs of distinct training captions
(computed exactly, per word from value histograms).  Items: sum over the caption cross product, then
normalised (:mod:`kernels.text.items`; normalising makes "averaged" and "summed" identical).

Computation: ``chi2(x, y) = |x|_1 + |y|_1 - 4 sum_{i in x and y} x_i y_i / (x_i + y_i)``; the common-word
sum is accumulated per word over its postings list, one block of row captions at a time, by the compiled
kernel (:mod:`kernels.text.tagrank_native`, without the GIL) or, without a C compiler, by
:func:`common_sums_numpy`, with the same sums bit for bit.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from tqdm.auto import tqdm

from kernels.text.items import symmetrise_inplace
from kernels.text.packing import PackedArrays
from kernels.text.tagrank_native import common_sums

#: Captions per block of :meth:`TagRank.caption_kernel`: the rows of one dense block of caption kernels.
#: Blocks of rows computed elsewhere (a Dask task) start at multiples of it, so that every block is one of
#: the whole computation's.
BLOCK = 256


def _f(x, y):
    s = x + y
    return np.where(s > 0, x * y / np.where(s > 0, s, 1.0), 0.0)


def _chi2_inplace(common: np.ndarray, l1_rows: np.ndarray, l1_cols: np.ndarray) -> np.ndarray:
    """``chi2 = max(|x|_1 + |y|_1 - 4 common, 0)`` for a block (rows x columns), written over ``common``
    (float64): clamped at 0, which it is up to rounding."""
    common *= -4.0
    common += l1_rows[:, None]
    common += l1_cols[None, :]
    return np.maximum(common, 0.0, out=common)


def _exp_average(chi_r: np.ndarray, c_r: float, chi_a: np.ndarray, c_a: float) -> np.ndarray:
    """Eq. 11 for a block: ``(exp(-c_r chi_r) + exp(-c_a chi_a)) / 2`` (``c = 1 / (2 Omega)``), written over
    ``chi_r`` (numpy's element-wise ``exp``: no thread pool, so the values do not depend on threads)."""
    chi_r *= -c_r
    np.exp(chi_r, out=chi_r)
    chi_a *= -c_a
    np.exp(chi_a, out=chi_a)
    chi_r += chi_a
    chi_r *= 0.5
    return chi_r


class Postings(NamedTuple):
    """Captions' TagRank vectors grouped by word: the distinct ``words`` (ascending); the postings of
    ``words[k]`` are ``ptr[k]:ptr[k + 1]`` of ``caps`` (caption positions, ascending), ``r`` and ``a`` (its
    relative and absolute rank in each); ``n_captions`` captions in all."""

    words: np.ndarray
    ptr: np.ndarray
    caps: np.ndarray
    r: np.ndarray
    a: np.ndarray
    n_captions: int


def column_ranges(rows: Postings, cols: Postings) -> tuple[np.ndarray, np.ndarray]:
    """``(col_lo, col_hi)``: the column postings ``col_lo[k]:col_hi[k]`` of the row postings' ``k``-th word
    (empty where no column caption has it)."""
    at = np.searchsorted(cols.words, rows.words)
    found = at < len(cols.words)
    found[found] = cols.words[at[found]] == rows.words[found]
    n = len(cols.words)
    col_lo = np.where(found, cols.ptr[np.minimum(at, n)], 0).astype(np.int64)
    col_hi = np.where(found, cols.ptr[np.minimum(at + 1, n)], 0).astype(np.int64)
    return col_lo, col_hi


def common_sums_numpy(rows: Postings, cols: Postings, col_lo, col_hi, s: int, e: int, c0: int,
                       com_r: np.ndarray, com_a: np.ndarray) -> None:
    """:func:`~kernels.text.tagrank_native.common_sums` in numpy (its fallback): word by word, ascending,
    ``_f`` of the row captions' ``s:e`` values against the column captions' from ``c0`` on, added in."""
    for k in range(len(rows.words)):
        r0, r1 = rows.ptr[k], rows.ptr[k + 1]
        rc = rows.caps[r0:r1]
        lo, hi = r0 + np.searchsorted(rc, s), r0 + np.searchsorted(rc, e)
        if hi <= lo or col_hi[k] <= col_lo[k]:
            continue
        k0 = col_lo[k] + np.searchsorted(cols.caps[col_lo[k]:col_hi[k]], c0)
        if k0 >= col_hi[k]:
            continue
        cc, cr, ca = cols.caps[k0:col_hi[k]] - c0, cols.r[k0:col_hi[k]], cols.a[k0:col_hi[k]]
        ix = np.ix_(rows.caps[lo:hi] - s, cc)
        com_r[ix] += _f(rows.r[lo:hi, None], cr[None, :])
        com_a[ix] += _f(rows.a[lo:hi, None], ca[None, :])


class TagRank:
    """Position statistics from training captions and the TagRank kernel (Eqs. 9-11)."""

    def fit(self, docs: Sequence[np.ndarray], n_vocab: int) -> "TagRank":
        self.V = int(n_vocab)
        maxlen = max([len(d) for d in docs] + [1])
        pos_counts = np.zeros((self.V, maxlen + 1))
        for d in docs:
            if len(d):
                np.add.at(pos_counts, (d, np.arange(1, len(d) + 1)), 1.0)
        self.n_i = pos_counts.sum(1)
        self.cdf = np.cumsum(pos_counts, axis=1)  # cdf[i, k] = sum_{k' <= k} n_ik'
        self.maxlen = maxlen
        vecs = self.vectors(docs)
        self.train_vecs = vecs
        self.omega_r, self.omega_a = self._mean_chi2(vecs, len(docs))
        return self

    def __getstate__(self) -> dict:
        """Pickled with the training captions' vectors packed (:class:`~kernels.text.packing.PackedArrays`)
        and without the per-span postings (:meth:`_captions_of`, rebuilt where they are used)."""
        state = {k: v for k, v in self.__dict__.items() if k not in ("_spans", "_all")}
        vecs = state.get("train_vecs")
        if isinstance(vecs, list):
            state["train_vecs"] = tuple(PackedArrays([v[i] for v in vecs], dt)
                                        for i, dt in enumerate((np.int64, np.float64, np.float64)))
        return state

    def __setstate__(self, state: dict) -> None:
        vecs = state.get("train_vecs")
        if isinstance(vecs, tuple):
            state = {**state, "train_vecs": list(zip(*(p.unpack() for p in vecs)))}
        self.__dict__.update(state)

    def vectors(self, docs):
        """Per caption: (word ids, r values, a values) over its distinct words (ascending ids).

        All captions at once: the tokens sorted by (caption, word), each (caption, word) run giving one
        entry, its mean position ``pbar`` (the positions summed in caption order, as a per-caption
        ``bincount`` does), ``a = 1 / log2(1 + pbar)`` (Eq. 9) and ``r`` from the training position counts
        (Eq. 10; 0 for a word unseen in training)."""
        docs = [np.asarray(d, dtype=np.int64) for d in docs]
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        if not len(docs) or not lengths.sum():
            return [(d, np.zeros(0), np.zeros(0)) for d in docs]
        ids = np.concatenate(docs)
        cap = np.repeat(np.arange(len(docs)), lengths)
        pos = (np.arange(len(ids)) - np.repeat(np.cumsum(lengths) - lengths, lengths) + 1).astype(np.float64)
        order = np.lexsort((ids, cap))                      # stable: a run's tokens stay in caption order
        ids, cap, pos = ids[order], cap[order], pos[order]
        starts = np.flatnonzero(np.r_[True, (np.diff(ids) != 0) | (np.diff(cap) != 0)])
        u = ids[starts]
        pbar = np.add.reduceat(pos, starts) / np.diff(np.r_[starts, len(ids)])
        a = 1.0 / np.log2(1.0 + pbar)
        r = np.zeros(len(u))
        seen = u < self.V
        if seen.any():
            us = u[seen]
            k = np.minimum(np.floor(pbar[seen] + 1e-9).astype(np.int64), self.maxlen)
            with np.errstate(divide="ignore", invalid="ignore"):
                r_s = 1.0 - self.cdf[us, k] / self.n_i[us]
            r[seen] = np.where(self.n_i[us] > 0, r_s, 0.0)
        cut = np.searchsorted(cap[starts], np.arange(1, len(docs)))
        return list(zip(np.split(u, cut), np.split(r, cut), np.split(a, cut)))

    @staticmethod
    def _postings(vecs) -> Postings:
        """The captions' vectors grouped by word (ascending), each word's captions ascending."""
        ids = np.concatenate([v[0] for v in vecs]) if vecs else np.zeros(0, np.int64)
        caps = np.repeat(np.arange(len(vecs), dtype=np.int64), [len(v[0]) for v in vecs])
        r = np.concatenate([v[1] for v in vecs]) if vecs else np.zeros(0)
        a = np.concatenate([v[2] for v in vecs]) if vecs else np.zeros(0)
        order = np.lexsort((caps, ids))
        ids, caps, r, a = ids[order], caps[order], r[order], a[order]
        bounds = np.r_[0, np.nonzero(np.diff(ids))[0] + 1, len(ids)] if len(ids) else np.zeros(1, np.int64)
        c = np.ascontiguousarray
        return Postings(c(ids[bounds[:-1]], np.int64), c(bounds, np.int64), c(caps, np.int64), c(r, np.float64),
                        c(a, np.float64), len(vecs))

    def _mean_chi2(self, vecs, N):
        if N < 2:
            return 1.0, 1.0
        l1r = sum(v[1].sum() for v in vecs)
        l1a = sum(v[2].sum() for v in vecs)
        com_r = com_a = 0.0
        post = self._postings(vecs)
        for lo, hi in zip(post.ptr[:-1], post.ptr[1:]):
            for vals, which in ((post.r[lo:hi], "r"), (post.a[lo:hi], "a")):
                u, c = np.unique(vals, return_counts=True)
                s = float((c[:, None] * c[None, :] * _f(u[:, None], u[None, :])).sum())
                if which == "r":
                    com_r += s
                else:
                    com_a += s
        tot_r = 2 * N * l1r - 4 * com_r
        tot_a = 2 * N * l1a - 4 * com_a
        om_r = tot_r / (N * (N - 1))
        om_a = tot_a / (N * (N - 1))
        return (om_r if om_r > 0 else 1.0), (om_a if om_a > 0 else 1.0)

    def caption_kernel(self, row_vecs, col_vecs, post=None, block: int | None = None, show_progress=False,
                       symmetric: bool = False, col_l1=None, row_offset: int = 0):
        """Yield ``(start, col_start, K_block)``: caption-level TagRank for rows ``start:start+b`` against
        columns ``col_start:`` (``col_start = row_offset + start`` when ``symmetric``: the rows are columns
        ``row_offset:`` themselves; else 0), float64.  ``post`` and ``col_l1``: the columns' postings and L1
        norms when already computed.  ``block``: rows per block (default :data:`BLOCK`).  A row's values do
        not depend on the other rows given with it, as long as the blocks of ``block`` rows are the same."""
        post = self._postings(col_vecs) if post is None else post
        Nc = len(col_vecs)
        l1r_c, l1a_c = self._l1_norms(col_vecs) if col_l1 is None else col_l1
        l1r_rows, l1a_rows = (l1r_c, l1a_c) if row_vecs is col_vecs else self._l1_norms(row_vecs)
        row_post = self._postings(row_vecs)
        cr_, ca_ = 1.0 / (2 * self.omega_r), 1.0 / (2 * self.omega_a)
        block = BLOCK if block is None else int(block)
        col_lo, col_hi = column_ranges(row_post, post)
        for s in tqdm(range(0, len(row_vecs), block), disable=not show_progress, leave=False, desc="TagRank"):
            e = min(s + block, len(row_vecs))
            c0 = row_offset + s if symmetric else 0
            com_r = np.zeros((e - s, Nc - c0))
            com_a = np.zeros((e - s, Nc - c0))
            if not common_sums(row_post, post, col_lo, col_hi, s, e, c0, com_r, com_a):
                common_sums_numpy(row_post, post, col_lo, col_hi, s, e, c0, com_r, com_a)
            l1r_r, l1a_r = l1r_rows[s:e], l1a_rows[s:e]
            # chi2 = |x|_1 + |y|_1 - 4 common  (>= 0 up to rounding), K = (exp(-chi_r/2W) + exp(-chi_a/2W'))/2
            yield s, c0, _exp_average(_chi2_inplace(com_r, l1r_r, l1r_c[c0:]), cr_,
                                      _chi2_inplace(com_a, l1a_r, l1a_c[c0:]), ca_)

    @staticmethod
    def _l1_norms(vecs):
        """``(|r|_1, |a|_1)`` of every caption's vectors, float64 (each sum as numpy takes it)."""
        return tuple(np.array([v[i].sum() for v in vecs], dtype=np.float64).reshape(-1) for i in (1, 2))

    @staticmethod
    def _item_bounds(item_of, lo, hi):
        """Start offsets (relative to ``lo``) of the item runs in ``item_of[lo:hi]`` and their item ids."""
        seg = item_of[lo:hi]
        starts = np.r_[0, np.nonzero(np.diff(seg))[0] + 1]
        return starts, seg[starts]

    def gram(self, docs, item_of, n_items, show_progress=False) -> np.ndarray:
        """Unnormalised item Gram: sum of caption kernels over the cross products (pairs a <= b
        computed once, symmetrised), :meth:`gram_rows` for every block of :data:`BLOCK` captions."""
        K = np.zeros((n_items, n_items))
        N = len(self.train_vecs)
        for lo in tqdm(range(0, N, BLOCK), disable=not show_progress, leave=False, desc="TagRank Gram"):
            hi = min(lo + BLOCK, N)
            self.add_gram_rows(K, item_of, lo, hi, self.gram_rows(item_of, lo, hi))
        return symmetrise_inplace(K)

    def gram_rows(self, item_of, lo: int, hi: int) -> list[np.ndarray]:
        """The part of :meth:`gram` that training captions ``lo:hi`` give (``lo`` a multiple of
        :data:`BLOCK`): per block of :data:`BLOCK` of them, the item sums ``R`` of their caption kernels
        against the captions from the block's first one on (pairs a <= b; the block's square part halved),
        rows: the block's items, columns: the items from the block's first caption's on.  Each block's
        ``R`` is the one :meth:`gram` adds, bit for bit, wherever it is computed."""
        vecs = self.train_vecs
        if lo % BLOCK or (hi % BLOCK and hi != len(vecs)):
            raise ValueError(f"TagRank Gram rows {lo}:{hi}: the bounds must be multiples of {BLOCK} captions "
                             f"(or the last caption)")
        post, l1 = self._all_captions()
        N = len(vecs)
        out = []
        for s, c0, Kb in self.caption_kernel(vecs[lo:hi], vecs, post, symmetric=True, col_l1=l1, row_offset=lo):
            b = len(Kb)
            Kb = np.asarray(Kb, dtype=np.float64)             # a fresh block: scaled in place
            Kb[:, :b] *= 0.5                                   # square part: counted twice by symmetrising
            cst, _ = self._item_bounds(item_of, c0, N)
            rst, _ = self._item_bounds(item_of, lo + s, lo + s + b)
            out.append(np.add.reduceat(np.add.reduceat(Kb, cst, axis=1), rst, axis=0))
        return out

    def add_gram_rows(self, K: np.ndarray, item_of, lo: int, hi: int, parts: Sequence[np.ndarray]) -> None:
        """Add :meth:`gram_rows` ``(item_of, lo, hi)`` into the item Gram ``K`` (before symmetrising), in
        block order."""
        for k, R in enumerate(parts):
            s = lo + k * BLOCK
            _, cit = self._item_bounds(item_of, s, len(item_of))
            _, rit = self._item_bounds(item_of, s, min(s + BLOCK, hi))
            K[np.ix_(rit, cit)] += R

    def _all_captions(self) -> tuple:
        """The training captions' postings and L1 norms (what every block of :meth:`gram_rows` and of
        :meth:`cross` against all of them reads), made once and kept until :meth:`forget_spans`."""
        memo = self.__dict__.get("_all")
        if memo is None:
            memo = self.__dict__["_all"] = (self._postings(self.train_vecs), self._l1_norms(self.train_vecs))
        return memo

    def cross(self, qdocs, docs, item_of, n_items, show_progress=False, captions=None) -> np.ndarray:
        """Queries (one caption each) x items, unnormalised (sum over the item's captions).  ``captions``:
        the training captions (positions) the items are made of, when not all of them (``item_of`` then
        gives their items, grouped); each entry is the same sum as over all the captions."""
        qv = self.vectors(qdocs)
        cols = self.train_vecs if captions is None else [self.train_vecs[int(c)] for c in captions]
        post, l1 = self._all_captions() if captions is None else (None, None)
        starts = np.r_[0, np.nonzero(np.diff(item_of))[0] + 1]
        Q = np.zeros((len(qdocs), n_items))
        for s, _, Kb in self.caption_kernel(qv, cols, post, show_progress=show_progress, col_l1=l1):
            Q[s:s + len(Kb)] = np.add.reduceat(np.asarray(Kb, dtype=np.float64), starts, axis=1)
        return Q

    # ------------------------------------------------------------------ without the Gram (low-rank path)
    def _captions_of(self, c0: int, c1: int) -> tuple:
        """Training captions ``c0:c1``: their vectors, postings and L1 norms, kept per span (a pivot column
        visits the same spans for every pivot)."""
        spans = self.__dict__.setdefault("_spans", {})
        if (c0, c1) not in spans:
            vecs = self.train_vecs[c0:c1]
            spans[(c0, c1)] = (vecs, self._postings(vecs), self._l1_norms(vecs))
        return spans[(c0, c1)]

    def forget_spans(self) -> None:
        """Drop the per-span postings :meth:`item_block` keeps (once a decomposition has its columns) and
        the whole training set's that :meth:`gram_rows` and :meth:`cross` keep."""
        self.__dict__.pop("_spans", None)
        self.__dict__.pop("_all", None)

    def item_block(self, query_captions: Sequence[int], c0: int, c1: int, item_of_block: np.ndarray,
                   n_block: int) -> np.ndarray:
        """Unnormalised item kernel between the training item made of captions ``query_captions`` and the
        ``n_block`` training items whose captions are ``c0:c1`` (``item_of_block``: their item, counted
        from the block's first): the sum of caption kernels over each cross product, ``(n_block,)``.
        One block of a training Gram column, without the Gram."""
        vecs, post, l1 = self._captions_of(c0, c1)
        qv = [self.train_vecs[int(c)] for c in query_captions]
        out = np.zeros(n_block)
        for _, _, Kb in self.caption_kernel(qv, vecs, post, col_l1=l1):
            np.add.at(out, item_of_block, np.asarray(Kb, dtype=np.float64).sum(axis=0))
        return out

    def item_self(self, item_of: np.ndarray, n_items: int, block_items: int = 256) -> np.ndarray:
        """Unnormalised self-kernel of every training item (the Gram's diagonal, without the Gram): each
        item's captions against themselves, in blocks of ``block_items`` items."""
        out = np.zeros(n_items)
        starts = np.searchsorted(item_of, np.arange(0, n_items + 1))   # item_of is sorted
        for lo in range(0, n_items, block_items):
            hi = min(n_items, lo + block_items)
            c0, c1 = int(starts[lo]), int(starts[hi])
            vecs = self.train_vecs[c0:c1]
            own = item_of[c0:c1]
            for s, _, Kb in self.caption_kernel(vecs, vecs):
                rows = own[s:s + len(Kb)]
                same = rows[:, None] == own[None, :]
                np.add.at(out, rows, np.where(same, Kb, 0.0).sum(axis=1))
        return out
