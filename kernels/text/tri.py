"""Trigram (gapped subsequence) kernels, exact and soft-matching (Hodosh et al. 2013, Sec. 3.4.3).

**Exact TRI (Eq. 15).**  For a sentence ``s`` and every ordered (gapped) word subsequence ``w`` of length
``l(w) = k <= 3`` let ``m_{s,w}`` be the number of its occurrences as a subsequence (gap weight
``lambda_g = 1``).  Then

    K_TRI(s, s') = sum_w m_{s,w} m_{s',w} lambda_m^{2 l(w)},            lambda_m = 0.5,

normalised by the geometric mean of the self-kernels.  The sqrt(idf) version (Eq. 16) multiplies each
term by ``lambda_w = prod_k lambda_{w_k}``.  Both are inner products of the *explicit* sparse features

    phi_s[w] = m_{s,w} * lambda_m^{l(w)} * prod_k omega_{w_k}           (omega = 1, sqrt(idf) or idf),

built here by enumerating the index tuples ``i_1 < … < i_k`` of every caption (vectorised per caption
length).  A subsequence is coded as one int64 (20 bits per word id + 1).  With ``max_len = 1`` this is
exactly the (count) BoW kernel times ``lambda_m^2``.

**Soft TRI (Eqs. 17-21).**  With a word kernel ``kappa_S`` (cosine of similarity vectors, identity for
out-of-vocabulary words) and ``sigma_S(w, w') = prod_k kappa_S(w_k, w'_k)``,

    K_S(s, s') = sum_{l<=3} sum_{|w|=|w'|=l} m_{s,w} m_{s',w'} lambda_m^{2l} sigma_S(w, w') sqrt(lambda_w lambda_w')
               = sum_{l<=3} sum_{i_1<..<i_l} sum_{j_1<..<j_l} prod_k M[i_k, j_k],

    M[i, j] = lambda_m^2 omega_{s_i} kappa_S(s_i, s'_j) omega_{s'_j}.

Dynamic programme (per caption pair, all pairs of a block at once): with ``C`` the inclusive 2-D prefix
sum of ``M``, ``B[i,j] = C[i-1,j-1]`` (strictly before) and
``A[i,j] = C[n-1,m-1] - C[i,m-1] - C[n-1,j] + C[i,j]`` (strictly after),

    K_S = sum_ij M[i,j] * (1 + B[i,j] + B[i,j] A[i,j])

(length 1, 2, 3: the middle element of a length-3 match splits it into independent before/after
parts).  Implementation (:func:`soft_tri_block`): the word-kernel rows of the row captions are
gathered once per row block, their prefix sums over ``i`` taken on the vocabulary side, and the
``(n, m, B, A)`` arrays are filled by contiguous row gathers; everything runs in preallocated float32
buffers (torch CPU).  This is exact (no approximation); cost ``O(sum over caption pairs of n m)``.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import scipy.sparse as sp

#: bits per word id in a subsequence code (ids + 1 must stay below 2**ID_BITS)
ID_BITS = 20
MAX_ID = (1 << ID_BITS) - 2


@lru_cache(maxsize=None)
def _combos(n: int, max_len: int) -> tuple[np.ndarray, ...]:
    return tuple(np.array(list(itertools.combinations(range(n), k)), dtype=np.int64).reshape(-1, k)
                 for k in range(1, max_len + 1))


def subsequence_features(docs: Sequence[Sequence[int]], max_len: int = 3, lambda_m: float = 0.5,
                         omega=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Enumerate weighted subsequence features of every document.

    Parameters
    ----------
    docs : sequence of int sequences
        Word ids (``0 <= id <= MAX_ID``).
    max_len : int
        Longest subsequence length k (paper: 3).
    lambda_m : float
        Match decay; a length-l feature carries ``lambda_m ** l``.
    omega : callable ``ids -> weights`` or None
        Per-word weight (sqrt(idf) for Eq. 16); ``None`` = 1.

    Returns
    -------
    rows, codes, values : 1-D arrays (one entry per subsequence occurrence; duplicates not summed).
    """
    if max_len < 1 or max_len > 3:
        raise ValueError(f"max_len={max_len}: must be 1, 2 or 3 (codes hold at most 3 word ids)")
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    R, Cd, Vl = [], [], []
    for n in np.unique(lengths):
        n = int(n)
        if n == 0:
            continue
        idx = np.nonzero(lengths == n)[0]
        ids = np.array([docs[i] for i in idx], dtype=np.int64).reshape(len(idx), n)
        if ids.min() < 0 or ids.max() > MAX_ID:
            raise ValueError(f"word ids must lie in [0, {MAX_ID}] (got {ids.min()}..{ids.max()})")
        w = np.ones(ids.shape) if omega is None else np.asarray(omega(ids.ravel()), np.float64).reshape(ids.shape)
        for k, comb in enumerate(_combos(n, max_len), start=1):
            if len(comb) == 0:
                continue
            code = np.zeros((len(idx), len(comb)), dtype=np.int64)
            val = np.full((len(idx), len(comb)), lambda_m ** k)
            for t in range(k):
                code |= (ids[:, comb[:, t]] + 1) << (ID_BITS * (2 - t))
                val *= w[:, comb[:, t]]
            R.append(np.repeat(idx, len(comb)))
            Cd.append(code.ravel())
            Vl.append(val.ravel())
    if not R:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    return np.concatenate(R), np.concatenate(Cd), np.concatenate(Vl)


def features_to_csr(rows, codes, values, n_rows: int, columns: np.ndarray | None = None):
    """Sum duplicate features into a CSR matrix.

    With ``columns=None`` the column space is the sorted set of codes present (returned); otherwise
    codes are looked up in ``columns`` (sorted) and unknown ones dropped.  Also returns the exact row
    norms computed *before* dropping unknown codes (needed to normalise queries, Eq. 15).
    """
    # exact per-row norms over all (row, code) features
    if len(codes):
        order = np.lexsort((codes, rows))
        r_s, c_s, v_s = rows[order], codes[order], values[order]
        new = np.ones(len(r_s), dtype=bool)
        new[1:] = (r_s[1:] != r_s[:-1]) | (c_s[1:] != c_s[:-1])
        grp = np.cumsum(new) - 1
        summed = np.bincount(grp, weights=v_s)
        r_u, c_u = r_s[new], c_s[new]
        norms = np.sqrt(np.bincount(r_u, weights=summed ** 2, minlength=n_rows))
    else:
        r_u = c_u = np.zeros(0, np.int64)
        summed = np.zeros(0)
        norms = np.zeros(n_rows)
    if columns is None:
        columns = np.unique(c_u)
    pos = np.searchsorted(columns, c_u)
    ok = (pos < len(columns)) & (columns[np.minimum(pos, len(columns) - 1)] == c_u) if len(columns) else np.zeros(len(c_u), bool)
    X = sp.csr_matrix((summed[ok], (r_u[ok], pos[ok])), shape=(n_rows, len(columns)))
    return X, columns, norms


def blocked_features_csr(docs: Sequence, featurise, columns: np.ndarray | None = None,
                         block: int = 20_000) -> tuple[sp.csr_matrix, np.ndarray, np.ndarray]:
    """:func:`features_to_csr` of ``featurise(docs)``, built ``block`` documents at a time.

    ``featurise(chunk) -> (rows, codes, values)`` enumerates the feature occurrences of a list of
    documents (rows local to the chunk), e.g. :func:`subsequence_features`.  Each block is summed on
    its own: all occurrences of a row lie in that row's block, in the same order as in one pass over
    all documents, so every summed entry and row norm is bit for bit the one-pass value.  With
    ``columns=None`` the column space is the sorted union of the blocks' codes, and each block's
    columns are remapped into it (a monotone map, so rows stay sorted).  Peak memory is one block's
    occurrence arrays (a few hundred MB at 20,000 captions of subsequences up to length 3) instead of
    all of them (over 8 GB for COCO's 566k training captions).

    Returns
    -------
    X : csr_matrix ``(len(docs), len(columns))``
    columns : sorted int64 codes
    norms : exact per-row norms before unknown codes are dropped (see :func:`features_to_csr`)
    """
    if block < 1:
        raise ValueError(f"block={block}: must be >= 1")
    parts = []
    for s in range(0, max(len(docs), 1), block):
        chunk = list(docs[s:s + block])
        rows, codes, vals = featurise(chunk)
        parts.append(features_to_csr(np.asarray(rows, np.int64), np.asarray(codes, np.int64),
                                     np.asarray(vals, np.float64), len(chunk), columns))
    if columns is None:
        columns = np.unique(np.concatenate([c for _, c, _ in parts]))
        mats = []
        for X, cols, _ in parts:
            X = X.tocsr()
            mats.append(sp.csr_matrix((X.data, np.searchsorted(columns, cols)[X.indices], X.indptr),
                                      shape=(X.shape[0], len(columns))))
    else:
        mats = [X for X, _, _ in parts]
    X = sp.vstack(mats, format="csr") if len(mats) > 1 else mats[0].tocsr()
    norms = np.concatenate([n for _, _, n in parts])
    return X, columns, norms


def dense_features(X: sp.spmatrix, Y: sp.spmatrix | None = None, dense_cols: int = 1024) -> np.ndarray:
    """The ``dense_cols`` feature columns with the largest document frequency in ``X`` and ``Y``
    together (where most of :func:`sparse_gram`'s work lies), which it multiplies as dense blocks."""
    df = np.diff(sp.csc_matrix(X).indptr) + (0 if Y is None else np.diff(sp.csc_matrix(Y).indptr))
    return np.argsort(-df, kind="stable")[:min(dense_cols, X.shape[1])]


def sparse_gram(X: sp.csr_matrix, Y: sp.csr_matrix | None = None, dense_cols: int = 1024,
                row_chunk: int = 1000, dense: np.ndarray | None = None) -> np.ndarray:
    """Dense float32 ``X @ Y.T`` for sparse feature matrices.

    The ``dense_cols`` columns with the largest document frequency (:func:`dense_features`) are
    multiplied as dense BLAS blocks; the rest with scipy's sparse product, ``row_chunk`` rows at a time
    (bounded memory).  ``dense``: those columns, given (e.g. chosen on the whole of ``Y`` when only some
    of its rows are multiplied, so that each entry is the one the whole product gives).

    The dense block is summed in float64 and then rounded to float32: a BLAS float32 product's last bits
    depend on the matrices' shapes (OpenBLAS 0.3.31 gave another value for 1 to 7 rows of ``Y`` than for
    the same rows inside a larger ``Y``), float64 sums of the same terms round to the same float32 (none
    of 600,000 entries of random subsets differed).  The sparse rest adds each entry's terms in the same
    order whichever rows are multiplied.
    """
    sym = Y is None
    Y = X if Y is None else Y
    X = X.tocsc().astype(np.float32)
    Y = X if sym else Y.tocsc().astype(np.float32)
    top = dense_features(X, None if sym else Y, dense_cols) if dense is None else np.asarray(dense)
    rest = np.setdiff1d(np.arange(X.shape[1]), top)
    Xd = X[:, top].toarray().astype(np.float64)
    Yd = Xd if sym else Y[:, top].toarray().astype(np.float64)
    G = (Xd @ Yd.T).astype(np.float32)
    del Xd, Yd
    Xs = X[:, rest].tocsr()
    YsT = (Xs if sym else Y[:, rest].tocsr()).T.tocsr()
    for s in range(0, G.shape[0], row_chunk):
        G[s:s + row_chunk] += (Xs[s:s + row_chunk] @ YsT).toarray()
    return G


# ============================================================================ soft matching (DP)
def _torch():
    import torch  # heavy (seconds to import): only the soft-matching DP needs it

    return torch


class SoftTRIWorkspace:
    """Preallocated float32 buffers for :func:`soft_tri_block` (avoids page-faulting fresh arrays)."""

    def __init__(self, max_entries: int):
        torch = _torch()
        self.max_entries = int(max_entries)
        self.M = torch.empty(self.max_entries)
        self.C = torch.empty(self.max_entries)
        self.X = torch.empty(self.max_entries)

    def view(self, buf, *shape):
        n = int(np.prod(shape))
        if n > self.max_entries:
            raise ValueError("workspace too small")
        return buf[:n].view(*shape)


def row_tables(Kw, ta):
    """Per row position ``i``: ``R_i = Kw[:, ta[:, i]]`` (V, A) and its inclusive prefix over ``i``."""
    torch = _torch()
    A, n = ta.shape
    RT = torch.empty((n, Kw.shape[0], A))
    PT = torch.empty((n, Kw.shape[0], A))
    for i in range(n):
        torch.index_select(Kw, 1, ta[:, i], out=RT[i])
        if i == 0:
            PT[0].copy_(RT[0])
        else:
            torch.add(PT[i - 1], RT[i], out=PT[i])
    return RT, PT


def soft_tri_block(RT, PT, tb, ws: SoftTRIWorkspace, max_len: int = 3):
    """Unnormalised soft TRI kernel (Eqs. 17-21) for all pairs of a block.

    Parameters
    ----------
    RT, PT : tensors (n, V, A) from :func:`row_tables` for ``A`` row captions of length ``n``
        (columns of the *weighted* word kernel ``lambda_m^2 omega kappa omega``, and their inclusive
        prefix sums over the row positions ``i``).
    tb : int64 tensor (B, m)
        Column captions (all of length ``m``), word ids indexing ``V``.

    Returns
    -------
    tensor (B, A): K_S(column caption b, row caption a).

    Layout: ``M[i, b, j, a] = W[tb[b, j], ta[a, i]]`` filled by one row gather from ``RT`` viewed as
    ``(n V, A)``; ``C`` (gathered from ``PT``) then gets its prefix sum over ``j``.
    """
    torch = _torch()
    n, Vp, A = RT.shape
    B, m = tb.shape
    M = ws.view(ws.M, n, B, m, A)
    C = ws.view(ws.C, n, B, m, A)
    idx = (torch.arange(n, dtype=torch.int64)[:, None, None] * Vp + tb[None, :, :]).reshape(-1)
    torch.index_select(RT.view(n * Vp, A), 0, idx, out=M.view(n * B * m, A))
    torch.index_select(PT.view(n * Vp, A), 0, idx, out=C.view(n * B * m, A))
    for j in range(1, m):
        C[:, :, j] += C[:, :, j - 1]
    out = C[n - 1, :, m - 1].clone()
    if n == 1 or m == 1 or max_len == 1:
        return out
    X = ws.view(ws.X, n - 1, B, m - 1, A)
    if max_len >= 3:
        torch.sub(C[1:, :, 1:], C[1:, :, m - 1:m], out=X)
        X += (1.0 + out)[:, None, :] - C[n - 1, :, 1:]
        X *= C[:-1, :, :-1]
    else:
        X.copy_(C[:-1, :, :-1])
    X *= M[1:, :, 1:]
    out += X.sum(0).sum(1)
    return out


def soft_tri_pairs(Kfun, ta: np.ndarray, tb: np.ndarray, max_len: int = 3) -> np.ndarray:
    """Soft TRI for aligned pairs ``(ta[p], tb[p])`` (self-kernels, within-item pairs), in numpy (no torch:
    the classical systems import it only for the DP fallback without the compiled kernel).

    ``Kfun(u, v)`` -> weighted word-kernel values for integer id arrays of equal shape.  ``ta`` (P, n),
    ``tb`` (P, m).  Returns a float64 array (P,): Eqs. 17-21 as in :func:`soft_tri_block`, with the
    prefix sums ``C`` of ``M`` over both positions, ``Bef = C[i-1, j-1]`` and ``Aft`` the mass strictly
    after ``(i, j)``.
    """
    ta, tb = np.asarray(ta), np.asarray(tb)
    P, n = ta.shape
    m = tb.shape[1]
    if P == 0:
        return np.zeros(0)
    if n == 0 or m == 0:
        return np.zeros(P)
    M = np.asarray(Kfun(np.broadcast_to(ta[:, :, None], (P, n, m)), np.broadcast_to(tb[:, None, :], (P, n, m))),
                   dtype=np.float64)
    C = M.cumsum(1).cumsum(2)
    tot = C[:, n - 1, m - 1]
    if n == 1 or m == 1 or max_len == 1:
        return tot.copy()
    Bef = C[:, :-1, :-1]
    if max_len == 2:
        return tot + (M[:, 1:, 1:] * Bef).sum((1, 2))
    Aft = tot[:, None, None] - C[:, 1:, m - 1:m] - C[:, n - 1:n, 1:] + C[:, 1:, 1:]
    return tot + (M[:, 1:, 1:] * Bef * (1.0 + Aft)).sum((1, 2))


def soft_tri_bruteforce(a: Sequence[int], b: Sequence[int], kfun, max_len: int = 3) -> float:
    """Reference implementation of Eq. 17-21 by enumerating every pair of index tuples (tests)."""
    total = 0.0
    for k in range(1, max_len + 1):
        for I in itertools.combinations(range(len(a)), k):
            for J in itertools.combinations(range(len(b)), k):
                p = 1.0
                for i, j in zip(I, J):
                    p *= kfun(a[i], b[j])
                total += p
    return total
