"""Multi-caption items, normalisation and text-kernel regularisation (Hodosh et al. 2013, Sec. 4.1.3).

An *item* is a training image's set of captions.  For a sentence kernel ``k`` (already normalised to
``k(s, s) = 1``) the item kernel is the sum over the cross product, normalised (Moschitti 2009):

    K(I, J) = sum_{s in I} sum_{s' in J} k(s, s'),     K^(I, J) = K(I, J) / sqrt(K(I, I) K(J, J)).

A query is one caption ``q``: ``K^(q, J) = sum_{s' in J} k(q, s') / sqrt(K(J, J))`` (``k(q, q) = 1``).
Exceptions: BoW5 (the five captions merged into one document) and the ``*1`` variants (one caption per
training image), where the item *is* one document.

Regularisation: the training Gram's diagonal is multiplied by ``d`` (paper: d in [1, 15]).
Eq. 27's ``max`` combination of word kernels may make the Gram indefinite; :func:`clip_psd` (optional,
``psd="clip"``) projects it onto the PSD cone (negative eigenvalues set to 0); the default leaves it as is.
"""
from __future__ import annotations

import numpy as np


def normalise_items(K: np.ndarray, self_rows: np.ndarray, self_cols: np.ndarray | None = None) -> np.ndarray:
    """``K[i, j] / sqrt(self_rows[i] self_cols[j])``; pairs with a zero self-kernel give 0."""
    self_cols = self_rows if self_cols is None else self_cols
    r = np.where(self_rows > 0, 1.0 / np.sqrt(np.maximum(self_rows, 1e-300)), 0.0)
    c = np.where(self_cols > 0, 1.0 / np.sqrt(np.maximum(self_cols, 1e-300)), 0.0)
    return (K * r[:, None]) * c[None, :]


def apply_diag(K: np.ndarray, d: float) -> np.ndarray:
    """Multiply the diagonal of a square Gram matrix by ``d`` (in place; returns ``K``)."""
    if d != 1.0:
        idx = np.arange(min(K.shape))
        K[idx, idx] *= d
    return K


def clip_psd(K: np.ndarray) -> np.ndarray:
    """Nearest PSD matrix in Frobenius norm: symmetrise and clip negative eigenvalues at 0."""
    S = 0.5 * (K + K.T).astype(np.float64)
    w, U = np.linalg.eigh(S)
    return ((U * np.maximum(w, 0.0)) @ U.T).astype(K.dtype)


def symmetrise_inplace(out: np.ndarray, block: int = 512) -> np.ndarray:
    """``out += out.T`` for a square array, block by block (no full-size temporary)."""
    n = out.shape[0]
    for s in range(0, n, block):
        e = min(s + block, n)
        blk = out[s:e, e:].copy()
        out[s:e, s:e] += out[s:e, s:e].T.copy()
        out[s:e, e:] += out[e:, s:e].T
        out[e:, s:e] += blk.T
    return out


def item_index(n_per_item: list[int]) -> np.ndarray:
    """Caption -> item index for items with ``n_per_item`` captions each (in order)."""
    return np.repeat(np.arange(len(n_per_item)), n_per_item)
