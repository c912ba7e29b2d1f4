"""IBM Model 1 and Model 2 word alignment, trained by EM (vectorised numpy).

Used for the alignment-based similarity of Hodosh et al. (2013), Eq. 25: the captions of one image
are treated as translations of each other.  Notation (Brown et al. 1993): a source sentence
``e = e_1..e_l`` (plus the NULL word ``e_0``), a target sentence ``f = f_1..f_m``;

* Model 1: ``P(f, a | e) ∝ prod_j t(f_j | e_{a_j})``, posterior
  ``P(a_j = i | e, f) = t(f_j|e_i) / sum_i' t(f_j|e_i')``;
* Model 2: adds the alignment distribution ``a(i | j, l, m)``:
  ``P(a_j = i | e, f) = t(f_j|e_i) a(i|j,l,m) / sum_i' t(f_j|e_i') a(i'|j,l,m)``.

EM: expected counts ``c(f|e) = sum over pairs and positions of the posteriors``;
``t(f|e) = c(f|e) / sum_f c(f|e)``, ``a(i|j,l,m) = c(i|j,l,m) / sum_i c(i|j,l,m)``.  Model 2 starts from
Model 1's ``t`` and a uniform ``a``.  All sentence pairs with the same ``(l, m)`` are processed as one
array; counts are accumulated with ``np.bincount``.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np


class IBMModel2:
    """IBM Model 1 (``n_iter_model1`` EM iterations) followed by Model 2 (``n_iter_model2``).

    Parameters
    ----------
    n_iter_model1, n_iter_model2 : int
        EM iterations of each model (``n_iter_model2=0`` gives plain Model 1).
    null : bool
        Include the NULL source word (id ``n_src``, the last row of ``t``).

    Attributes (after :meth:`fit`)
    ------------------------------
    t : ndarray (n_src + 1, n_tgt)
        Translation table ``t[e, f] = t(f | e)``; rows sum to 1 (rows of unseen source words: uniform).
    a : dict (l, m) -> ndarray (l + 1, m)
        ``a[(l, m)][i, j] = a(i | j, l, m)``.
    """

    def __init__(self, n_iter_model1: int = 10, n_iter_model2: int = 5, null: bool = True):
        self.n_iter_model1, self.n_iter_model2, self.null = int(n_iter_model1), int(n_iter_model2), bool(null)

    def _buckets(self, src, tgt):
        groups: dict[tuple[int, int], list[int]] = defaultdict(list)
        for p, (e, f) in enumerate(zip(src, tgt)):
            if len(f) == 0 or (len(e) == 0 and not self.null):
                continue
            groups[(len(e), len(f))].append(p)
        out = {}
        for (l, m), ps in groups.items():
            E = np.array([src[p] for p in ps], dtype=np.int64).reshape(len(ps), l)
            if self.null:
                E = np.concatenate([np.full((len(ps), 1), self.n_src, np.int64), E], axis=1)
            F = np.array([tgt[p] for p in ps], dtype=np.int64).reshape(len(ps), m)
            out[(l, m)] = (E, F)
        return out

    def fit(self, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]], n_src: int, n_tgt: int) -> "IBMModel2":
        if len(src) != len(tgt):
            raise ValueError(f"IBMModel2.fit: {len(src)} source vs {len(tgt)} target sentences")
        self.n_src, self.n_tgt = int(n_src), int(n_tgt)
        n_rows = self.n_src + (1 if self.null else 0)
        buckets = self._buckets(src, tgt)
        t = np.full((n_rows, self.n_tgt), 1.0 / max(self.n_tgt, 1))
        a = {lm: np.full((E.shape[1], lm[1]), 1.0 / E.shape[1]) for lm, (E, F) in buckets.items()}
        self.log_likelihood: list[float] = []
        for it in range(self.n_iter_model1 + self.n_iter_model2):
            model2 = it >= self.n_iter_model1
            counts = np.zeros(n_rows * self.n_tgt)
            new_a = {}
            ll = 0.0
            for lm, (E, F) in buckets.items():
                T = t[E[:, :, None], F[:, None, :]]                 # (P, l+1, m)
                if model2:
                    T = T * a[lm][None]
                Z = T.sum(1, keepdims=True)
                ll += float(np.log(np.maximum(Z, 1e-300)).sum())
                post = T / np.maximum(Z, 1e-300)
                flat = (E[:, :, None] * self.n_tgt + F[:, None, :]).ravel()
                counts += np.bincount(flat, weights=post.ravel(), minlength=counts.size)
                if model2:
                    ca = post.sum(0)
                    new_a[lm] = ca / np.maximum(ca.sum(0, keepdims=True), 1e-300)
            C = counts.reshape(n_rows, self.n_tgt)
            tot = C.sum(1, keepdims=True)
            t = np.where(tot > 0, C / np.maximum(tot, 1e-300), 1.0 / max(self.n_tgt, 1))
            if model2:
                a = new_a
            self.log_likelihood.append(ll)
        self.t, self.a = t, a
        # source words that never met a target word keep EM's uniform start row: no evidence at all
        self.seen_ = (tot[: self.n_src, 0] > 0) if self.n_iter_model1 + self.n_iter_model2 else \
            np.zeros(self.n_src, bool)
        return self

    def translation(self) -> np.ndarray:
        """``t(f | e)`` for real source words (NULL row dropped): ``(n_src, n_tgt)``.  A source word never
        aligned to anything (:attr:`seen_` false) keeps the uniform row EM started from."""
        return self.t[: self.n_src]

    def observed_translation(self) -> np.ndarray:
        """:meth:`translation` with the rows of never-aligned source words set to 0 (no evidence), so
        a similarity built from the rows does not call all such words identical."""
        return np.where(self.seen_[:, None], self.translation(), 0.0)
