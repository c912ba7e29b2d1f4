"""Bag-of-words features and IDF weights (Hodosh et al. 2013, Sec. 3.4.1).

BoW kernel: the cosine of (weighted) term-frequency vectors,

    K_BoW(s, s') = <x_s, x_s'> / (||x_s|| ||x_s'||),    x_s[w] = tf_s(w) * omega_w,

with ``omega_w = 1`` (plain), ``lambda_w`` (``idf``) or ``sqrt(lambda_w)`` (``sqrt``, "BoW^sqrt(idf)"),
and the IDF of Sec. 3.4.1

    lambda_w = log( |D_train| / (|D_train(w)| + 1) ),

where ``D_train`` is the set of training *images*, each image's captions merged into one document
(:meth:`kernels.text.kernel.TextKernel.item_documents`, for every kernel), and ``D_train(w)`` those
containing ``w``.  A word seen in every document would get a (tiny)
negative weight; weights are clipped at 0 so that ``sqrt`` is defined (documented deviation).
Words never seen in training get ``log |D_train|`` (``|D_train(w)| = 0``).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp

IDF_MODES = ("none", "idf", "sqrt")


def document_frequency(docs: Sequence[Sequence[int]], n_vocab: int) -> np.ndarray:
    """``|D(w)|`` for every word id ``0..n_vocab-1`` (ids < 0 ignored)."""
    df = np.zeros(n_vocab, dtype=np.int64)
    for d in docs:
        u = np.unique(np.asarray(d, dtype=np.int64))
        u = u[(u >= 0) & (u < n_vocab)]
        df[u] += 1
    return df


def idf_weights(docs: Sequence[Sequence[int]], n_vocab: int) -> tuple[np.ndarray, float]:
    """IDF ``lambda_w = log(|D| / (|D(w)| + 1))`` (clipped at 0) and the value for unseen words."""
    n_docs = max(len(docs), 1)
    df = document_frequency(docs, n_vocab)
    lam = np.log(n_docs / (df + 1.0))
    return np.maximum(lam, 0.0).astype(np.float64), float(max(np.log(n_docs), 0.0))


def word_weights(idf: np.ndarray, mode: str) -> np.ndarray:
    """Per-word feature weight omega_w for an IDF mode (``none`` / ``idf`` / ``sqrt``)."""
    if mode == "none":
        return np.ones_like(idf)
    if mode == "idf":
        return idf.copy()
    if mode == "sqrt":
        return np.sqrt(idf)
    raise ValueError(f"idf={mode!r}: expected one of {IDF_MODES}")


def tf_matrix(docs: Sequence[Sequence[int]], n_cols: int, weights: np.ndarray | None = None) -> sp.csr_matrix:
    """Sparse ``(n_docs, n_cols)`` matrix of term frequencies times ``weights[w]`` (ids outside
    ``0..n_cols-1`` are dropped)."""
    rows, cols = [], []
    for i, d in enumerate(docs):
        d = np.asarray(d, dtype=np.int64)
        d = d[(d >= 0) & (d < n_cols)]
        rows.append(np.full(len(d), i, dtype=np.int64))
        cols.append(d)
    r = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    c = np.concatenate(cols) if cols else np.zeros(0, np.int64)
    vals = np.ones(len(r), dtype=np.float64) if weights is None else np.asarray(weights, np.float64)[c]
    X = sp.csr_matrix((vals, (r, c)), shape=(len(docs), n_cols))
    X.sum_duplicates()
    return X


def doc_self_norms(docs: Sequence[Sequence[int]], weight_of) -> np.ndarray:
    """Exact ``||x_s||`` including words unseen in training (``weight_of(ids) -> weights``)."""
    out = np.zeros(len(docs))
    for i, d in enumerate(docs):
        if len(d) == 0:
            continue
        u, c = np.unique(np.asarray(d, dtype=np.int64), return_counts=True)
        out[i] = np.sqrt(np.sum((c * weight_of(u)) ** 2))
    return out


def row_normalise(X: sp.csr_matrix, norms: np.ndarray | None = None) -> sp.csr_matrix:
    """Divide each row by its norm (given, or computed); zero rows stay zero."""
    if norms is None:
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    inv = np.zeros_like(norms, dtype=np.float64)
    nz = norms > 0
    inv[nz] = 1.0 / norms[nz]
    return sp.csr_matrix(sp.diags(inv) @ X)
