"""Nearest-neighbour baseline (Hodosh et al. 2013, Sec. 3.1, Eq. 2).

A test image ``i`` is represented by its nearest training image under the image kernel,
``NN(i) = argmax_j K_img(i, j)``, and a caption ``s`` is scored for ``i`` by the text similarity between
``s`` and the captions of ``NN(i)`` (Eq. 2):

    f(i, s) = sim(s, captions(NN(i))).

The one affinity matrix ``S[i, s] = f(i, s)`` yields **both** tasks (architecture contract): annotation
ranks the captions of each row, search ranks the images of each column (``S.T``); ``scores()`` returns
``corpora.scoring.ScoreMatrices.from_affinity(S)``.

Variants (Appendix B):

* ``NN5_F1_idf`` (the paper's NN baseline): sim = F1 of IDF-weighted bags of words, the five captions
  of the training image merged into one document ``d``:
  ``overlap = sum_w idf_w min(tf_s(w), tf_d(w))``, ``P = overlap / sum_w idf_w tf_s(w)``,
  ``R = overlap / sum_w idf_w tf_d(w)``, ``F1 = 2PR/(P+R) = 2 overlap / (|s|_idf + |d|_idf)``.  IDF over the
  merged training documents (``log(|D| / (|D(w)| + 1))``, clipped at 0).
* ``NN5_F1``: the same without IDF weights.
* ``NN5_BoW5``: cosine of tf vectors of ``s`` and the merged document (the BoW5 kernel).
* ``NN5_TRI``: the TRI5 item kernel between ``s`` and the training item.

Ties among training images are broken by the lowest index (``argmax``).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

from corpora.base import Caption, Corpus
from corpora.scoring import ScoreMatrices
from kernels.text.kernel import TextKernel

VARIANTS = ("NN5_F1_idf", "NN5_F1", "NN5_BoW5", "NN5_TRI")


class NearestNeighbour:
    """The NN5_* baselines.  ``fit(corpus, train_ids)`` then ``affinity(image_gram_test_train, captions)``."""

    def __init__(self, variant: str = "NN5_F1_idf", cache=None, show_progress: bool = False):
        if variant not in VARIANTS:
            raise ValueError(f"variant={variant!r}: expected one of {VARIANTS}")
        self.variant, self.cache, self.show_progress = variant, cache, show_progress

    def fit(self, corpus: Corpus, train_ids: Sequence[str]) -> "NearestNeighbour":
        self.train_ids = tuple(train_ids)
        if self.variant == "NN5_TRI":
            self.tk = TextKernel("TRI", 5, cache=self.cache, show_progress=self.show_progress)
        else:
            self.tk = TextKernel("BoW", 5, merge=True, idf="idf" if self.variant == "NN5_F1_idf" else "none",
                                 cache=self.cache, show_progress=self.show_progress)
        self.tk.fit(corpus, self.train_ids)
        if self.variant.startswith("NN5_F1"):
            tk = self.tk
            docs = tk.item_documents()
            self._item_docs = docs
            self._item_mass = np.array([tk.omega_of(d).sum() if len(d) else 0.0 for d in docs])
            self._levels = self._level_matrix(docs)
        return self

    # -------------------------------------------------------------- F1 machinery
    def _level_features(self, docs, stride: int):
        """Features (word, t) = [tf(w) >= t] * omega_w so that <x, y> = sum_w omega_w min(tf_x, tf_y)...
        (with omega on one side only), coded ``word * stride + t − 1`` for the levels ``t ≤ stride``.

        ``stride`` is the largest count of a word in one training document, so every training level has
        its own code; a query's levels above it can match no training level (min(tf_q, tf_train) ≤
        stride), so leaving them out is exact."""
        rows, cols, vals = [], [], []
        for r, d in enumerate(docs):
            if len(d) == 0:
                continue
            u, c = np.unique(d, return_counts=True)
            for t in range(1, min(int(c.max()), stride) + 1):
                sel = u[c >= t]
                rows.append(np.full(len(sel), r))
                cols.append(sel * stride + (t - 1))
                vals.append(np.ones(len(sel)))
        if not rows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
        return np.concatenate(rows), np.concatenate(cols).astype(np.int64), np.concatenate(vals)

    def _level_matrix(self, docs):
        self._stride = max([int(np.unique(d, return_counts=True)[1].max()) for d in docs if len(d)] or [1])
        r, c, v = self._level_features(docs, self._stride)
        w = self.tk.omega_of(c // self._stride)
        self._cols = np.unique(c)
        pos = np.searchsorted(self._cols, c)
        return sp.csr_matrix((v * w, (r, pos)), shape=(len(docs), len(self._cols)))

    def text_similarity(self, captions: Sequence[Caption]) -> np.ndarray:
        """``(n_captions, n_train)`` similarity of each caption to each training item (the variant's sim)."""
        captions = list(captions)
        if not self.variant.startswith("NN5_F1"):
            return self.tk.gram_queries(captions).astype(np.float64)
        qdocs = self.tk.encode_queries(captions)
        r, c, v = self._level_features(qdocs, self._stride)
        pos = np.searchsorted(self._cols, c)
        ok = (pos < len(self._cols)) & (self._cols[np.minimum(pos, len(self._cols) - 1)] == c) if len(c) else np.zeros(0, bool)
        Xq = sp.csr_matrix((v[ok], (r[ok], pos[ok])), shape=(len(qdocs), len(self._cols)))
        overlap = (Xq @ self._levels.T).toarray()
        q_mass = np.array([self.tk.omega_of(d).sum() if len(d) else 0.0 for d in qdocs])
        den = q_mass[:, None] + self._item_mass[None, :]
        return np.where(den > 0, 2.0 * overlap / np.where(den > 0, den, 1.0), 0.0)

    def affinity(self, image_gram_test_train: np.ndarray, captions: Sequence[Caption]) -> np.ndarray:
        """``S[i, s] = sim(s, captions(NN(i)))`` (Eq. 2): ``(n_test_images, n_captions)`` float32."""
        G = np.asarray(image_gram_test_train)
        if G.ndim != 2 or G.shape[1] != len(self.train_ids):
            raise ValueError(f"image_gram_test_train must have shape (n_test, {len(self.train_ids)}); got {G.shape}")
        nn = np.argmax(G, axis=1)
        T = self.text_similarity(captions)          # (n_captions, n_train)
        return T[:, nn].T.astype(np.float32)

    def scores(self, image_gram_test_train: np.ndarray, pool):
        """:class:`~corpora.scoring.ScoreMatrices` for ``pool`` (its captions), annotation and search."""
        return ScoreMatrices.from_affinity(self.affinity(image_gram_test_train, pool.captions))
