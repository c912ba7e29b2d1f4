"""Nearest-neighbour baseline (Hodosh et al. 2013, Sec. 3.1, Eq. 2).

The two tasks use the two modalities' nearest neighbours (Eq. 2):

* **annotation**: a test image ``i`` is represented by its nearest training image under the image
  kernel, ``NN(i) = argmax_j K_img(i, j)``, and a caption ``s`` is scored by the text similarity between
  ``s`` and the captions of ``NN(i)``:  ``f(i, s) = sim(s, captions(NN(i)))``;
* **search**: a query sentence ``s`` is represented by its nearest training image under the text
  similarity, ``NN(s) = argmax_j sim(s, captions(j))``, and a test image ``i`` is scored by its
  image-kernel similarity to it:  ``f(s, i) = K_img(i, NN(s))``.

In both directions a training image's text is its five captions as one document: Sec. 3.1, NN5 "treats
the five captions associated with each training image as a single document".

:meth:`NearestNeighbour.affinity` is the annotation matrix, :meth:`NearestNeighbour.search_affinity` the
search matrix; :meth:`NearestNeighbour.scores` returns both as :class:`~corpora.scoring.ScoreMatrices`.

Variants (Appendix B) — the text similarity ``sim``:

* ``NN5_F1_idf`` (the paper's NN baseline): F1 of IDF-weighted bags of words against the training
  image's five captions merged into one document ``d``:
  ``overlap = sum_w idf_w min(tf_s(w), tf_d(w))``, ``P = overlap / sum_w idf_w tf_s(w)``,
  ``R = overlap / sum_w idf_w tf_d(w)``, ``F1 = 2PR/(P+R) = 2 overlap / (|s|_idf + |d|_idf)``.  IDF over the
  merged training documents (``log(|D| / (|D(w)| + 1))``, clipped at 0).
* ``NN5_F1``: the same without IDF weights.
* ``NN5_BoW5``: cosine of tf vectors against the merged document.
* ``NN5_TRI``: a five-caption TRI item kernel (``text``: ``"TRI5"`` by default; the paper's
  NN5_TRI(best) uses the best TRI kernel, ``"TRI5SEM"``, system ``NN5_TRI`` in :mod:`kcca.systems`)
  between ``s`` and the training item.

Ties among training images are broken by the lowest index (``argmax``).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from corpora.base import Caption, Corpus
from corpora.scoring import ScoreMatrices
from kernels.text.kernel import TextKernel

VARIANTS = ("NN5_F1_idf", "NN5_F1", "NN5_BoW5", "NN5_TRI")
#: Image kernel rows read at a time by :meth:`NearestNeighbour.scores` (below the image kernel's
#: few-columns threshold, :func:`kernels.image.blocks.is_skinny`): a block is computed as columns of the
#: training images' histograms stored by bin, which a Dask cluster holds once.
IMAGE_BLOCK = 128
#: Captions per block of the F1 similarity's nearest-neighbour search (a block × n_train float64).
TEXT_BLOCK = 512


class NearestNeighbour:
    """The NN5_* baselines of Hodosh et al. (2013), Sec. 3.1, Eq. 2.

    ``fit(corpus, train_ids)`` then ``scores(image_gram_test_train, pool)`` (or ``affinity`` for annotation
    and ``search_affinity`` for search).

    Parameters
    ----------
    variant : {"NN5_F1_idf", "NN5_F1", "NN5_BoW5", "NN5_TRI"}
        The text similarity (module docstring).
    cache : DiskCache or None
    show_progress : bool
    text : str
        ``NN5_TRI`` only: the five-caption TRI kernel's name (``TextKernel.from_name``), default ``"TRI5"``.
    text_kwargs : dict or None
        ``NN5_TRI`` only: further ``TextKernel`` arguments (e.g. ``external_corpus``).
    """

    def __init__(self, variant: str = "NN5_F1_idf", cache=None, show_progress: bool = False,
                 text: str = "TRI5", text_kwargs: dict | None = None):
        if variant not in VARIANTS:
            raise ValueError(f"variant={variant!r}: expected one of {VARIANTS}")
        if not text.startswith("TRI5"):
            raise ValueError(f"text={text!r}: expected a five-caption TRI kernel name (TextKernel.from_name)")
        self.variant, self.cache, self.show_progress = variant, cache, show_progress
        self.text, self.text_kwargs = text, dict(text_kwargs or {})

    def fit(self, corpus: Corpus, train_ids: Sequence[str], executor=None) -> "NearestNeighbour":
        """The text kernel of the variant on the training captions (``executor``: see
        :meth:`~kernels.text.TextKernel.fit`) and, for the F1 variants, the training items' word levels."""
        self.train_ids = tuple(train_ids)
        if self.variant == "NN5_TRI":
            self.tk = TextKernel.from_name(self.text, cache=self.cache, show_progress=self.show_progress,
                                           **self.text_kwargs)
        else:
            self.tk = TextKernel("BoW", 5, merge=True, idf="idf" if self.variant == "NN5_F1_idf" else "none",
                                 cache=self.cache, show_progress=self.show_progress)
        self.tk.fit(corpus, self.train_ids, executor=executor)
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

    def _levels_on_cols(self, docs) -> sp.csr_matrix:
        """Unweighted level features of ``docs`` on the training items' columns (levels no training item
        has are left out: they match nothing)."""
        r, c, v = self._level_features(docs, self._stride)
        pos = np.searchsorted(self._cols, c)
        ok = (pos < len(self._cols)) & (self._cols[np.minimum(pos, len(self._cols) - 1)] == c) if len(c) else np.zeros(0, bool)
        return sp.csr_matrix((v[ok], (r[ok], pos[ok])), shape=(len(docs), len(self._cols)))

    def _f1(self, qdocs, levels: sp.csr_matrix, mass: np.ndarray) -> np.ndarray:
        """``F1 = 2 overlap / (|q|_idf + |d|_idf)`` of each query against each training document."""
        overlap = (self._levels_on_cols(qdocs) @ levels.T).toarray()
        q_mass = np.array([self.tk.omega_of(d).sum() if len(d) else 0.0 for d in qdocs])
        den = q_mass[:, None] + mass[None, :]
        return np.where(den > 0, 2.0 * overlap / np.where(den > 0, den, 1.0), 0.0)

    def text_similarity(self, captions: Sequence[Caption]) -> np.ndarray:
        """``(n_captions, n_train)`` similarity of each caption to each training item (the variant's sim)."""
        captions = list(captions)
        if not self.variant.startswith("NN5_F1"):
            return self.tk.gram_queries(captions).astype(np.float64)
        return self._f1(self.tk.encode_queries(captions), self._levels, self._item_mass)

    def _check_gram(self, image_gram_test_train) -> np.ndarray:
        G = np.asarray(image_gram_test_train)
        if G.ndim != 2 or G.shape[1] != len(self.train_ids):
            raise ValueError(f"image_gram_test_train must have shape (n_test, {len(self.train_ids)}); got {G.shape}")
        return G

    def affinity(self, image_gram_test_train: np.ndarray, captions: Sequence[Caption]) -> np.ndarray:
        """Annotation direction of Eq. 2: ``S[i, s] = sim(s, captions(NN(i)))``, ``(n_test_images, n_captions)``
        float32."""
        return self.scores(image_gram_test_train, captions).annotation

    def search_affinity(self, image_gram_test_train: np.ndarray, captions: Sequence[Caption]) -> np.ndarray:
        """Search direction of Eq. 2: ``S[s, i] = K_img(i, NN(s))`` with ``NN(s)`` the training image whose
        five-caption document is most similar to ``s`` (:meth:`text_similarity`, as for annotation);
        ``(n_captions, n_test_images)`` float32."""
        return self.scores(image_gram_test_train, captions).search

    def scores(self, image_gram_test_train: np.ndarray | Callable[[int, int], np.ndarray], pool_or_captions,
               *, n_images: int | None = None, block: int = IMAGE_BLOCK) -> ScoreMatrices:
        """:class:`~corpora.scoring.ScoreMatrices` of both directions of Eq. 2 (:meth:`affinity`,
        :meth:`search_affinity`) for a pool (its ``captions``) or a list of captions.

        ``image_gram_test_train`` is the ``(n_test, n_train)`` image kernel, or a function
        ``rows(lo, hi)`` giving its rows ``lo:hi`` (with ``n_images``), read ``block`` rows at a time: at
        COCO size (5,000 × 113,287 per pool) the whole matrix is never held.  Only what Eq. 2 reads is
        kept: each image's nearest training image, each caption's, the image kernel at the captions'
        neighbours, and the text similarity at the images' neighbours; the numbers are those of the
        whole matrices (each row of both similarities is computed on its own)."""
        captions = list(getattr(pool_or_captions, "captions", pool_or_captions))
        if callable(image_gram_test_train):
            if n_images is None:
                raise ValueError("n_images is needed when the image kernel is given as a function of rows")
            rows = image_gram_test_train
        else:
            G = self._check_gram(image_gram_test_train)
            n_images, rows = G.shape[0], (lambda lo, hi: G[lo:hi])
        text = self._caption_neighbours(captions)
        nn_i = np.zeros(n_images, dtype=np.int64)
        search = np.zeros((len(captions), n_images), dtype=np.float32)
        for lo in range(0, n_images, max(1, int(block))):
            hi = min(n_images, lo + max(1, int(block)))
            Gb = self._check_gram(rows(lo, hi))
            if Gb.shape[0] != hi - lo:
                raise ValueError(f"rows({lo}, {hi}) gave {Gb.shape[0]} rows")
            nn_i[lo:hi] = np.argmax(Gb, axis=1)
            search[:, lo:hi] = Gb[:, text.neighbours].T
        return ScoreMatrices(annotation=self._similarity_at(nn_i, text).T.astype(np.float32),
                             search=search)

    def _caption_neighbours(self, captions: Sequence[Caption]) -> "_CaptionSide":
        """Each caption's nearest training item under the text similarity (``argmax``, ties to the lowest
        index): the F1 variants ``TEXT_BLOCK`` captions at a time, the others from their whole rows
        (kept for :meth:`_similarity_at`)."""
        if not self.variant.startswith("NN5_F1"):
            T = self.text_similarity(captions)
            return _CaptionSide(np.argmax(T, axis=1), None, T)
        qdocs = self.tk.encode_queries(captions)
        best = np.zeros(len(qdocs), dtype=np.int64)
        for lo in range(0, len(qdocs), TEXT_BLOCK):
            best[lo:lo + TEXT_BLOCK] = np.argmax(self._f1(qdocs[lo:lo + TEXT_BLOCK], self._levels, self._item_mass),
                                                 axis=1)
        return _CaptionSide(best, qdocs, None)

    def _similarity_at(self, items: np.ndarray, text: "_CaptionSide") -> np.ndarray:
        """``(n_captions, len(items))``: the text similarity of every caption to the training items
        ``items`` (columns of :meth:`text_similarity`, computed for the distinct items only)."""
        if text.whole is not None:
            return text.whole[:, items]
        uniq, inv = np.unique(items, return_inverse=True)
        return self._f1(text.qdocs, self._levels[uniq], self._item_mass[uniq])[:, inv.reshape(-1)]


@dataclass(frozen=True)
class _CaptionSide:
    """The captions' side of :meth:`NearestNeighbour.scores`: each caption's nearest training item, and
    what gives the similarity at other items (the encoded captions, or the whole similarity rows)."""

    neighbours: np.ndarray
    qdocs: list | None
    whole: np.ndarray | None
