"""Rank aggregation by Borda count (Hodosh et al. 2013, Sec. 4.1.3).

Given ``K`` rankings of the same ``N`` candidates for a query, the item at 0-based position ``r`` of
ranking ``k`` receives ``N − r`` points; items are ordered by their summed points

.. math::  B(j) = \\sum_{k=1}^{K} \\bigl(N - r_k(j)\\bigr),

and items with equal ``B`` are ordered by the median of their positions ``median_k r_k(j)`` (smaller is
better).  The input here is a list of score matrices (rows = queries); all queries are fused at once.

Ties *inside* one input ranking (equal scores) give the tied items the average of the positions they
occupy (``r`` = mean of the tied 0-based positions), so the result never depends on column order.  Items
still tied after both keys (same points and same median position) receive the same fused score; the
evaluator then applies its pessimistic tie policy to them.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

from evaluation.ranking import ScoreMatrices, _descending_key, validate_scores

__all__ = ["borda", "fuse", "borda_points"]

_CHUNK_ELEMENTS = 2_000_000


def _positions(scores: np.ndarray) -> np.ndarray:
    """0-based positions (average over ties) of every column in each row, descending score."""
    return rankdata(_descending_key(scores), method="average", axis=1) - 1.0


def borda_points(score_matrices: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Borda points ``B`` and median positions of every item (see module docstring).

    Returns
    -------
    points : ndarray of float64, shape (Q, N)
        ``Σ_k (N − r_k)``.
    median_position : ndarray of float64, shape (Q, N)
        ``median_k r_k`` (0-based).
    """
    mats = [validate_scores(m, name=f"score matrix {i}") for i, m in enumerate(score_matrices)]
    if not mats:
        raise ValueError("borda needs at least one score matrix")
    shape = mats[0].shape
    for i, m in enumerate(mats):
        if m.shape != shape:
            raise ValueError(f"borda: score matrix {i} has shape {m.shape}, expected {shape}")
    N = shape[1]
    pos = np.stack([_positions(m) for m in mats])  # (K, Q, N)
    return (N - pos).sum(axis=0), np.median(pos, axis=0)


def _borda_array(mats: Sequence[np.ndarray]) -> np.ndarray:
    shape = np.asarray(mats[0]).shape
    Q, N = shape
    out = np.empty(shape, dtype=np.float32)
    chunk = max(1, _CHUNK_ELEMENTS // max(1, N * len(mats)))
    for lo in range(0, Q, chunk):
        hi = min(Q, lo + chunk)
        points, med = borda_points([np.asarray(m)[lo:hi] for m in mats])
        order = np.lexsort((med, -points), axis=1)  # points desc, then median position asc
        p_sorted = np.take_along_axis(points, order, axis=1)
        m_sorted = np.take_along_axis(med, order, axis=1)
        new_group = np.ones(p_sorted.shape, dtype=bool)
        new_group[:, 1:] = (p_sorted[:, 1:] != p_sorted[:, :-1]) | (m_sorted[:, 1:] != m_sorted[:, :-1])
        idx = np.where(new_group, np.arange(N)[None, :], 0)
        group_start = np.maximum.accumulate(idx, axis=1)  # 0-based position of the group's first item
        fused_sorted = (N - group_start).astype(np.float32)
        rows = np.arange(hi - lo)[:, None]
        block = np.empty((hi - lo, N), dtype=np.float32)
        block[rows, order] = fused_sorted
        out[lo:hi] = block
    return out


def borda(score_matrices):
    """Fuse several rankings with the Borda count of Hodosh et al. (2013), Sec. 4.1.3.

    Parameters
    ----------
    score_matrices : sequence of ndarray (Q, N), or sequence of ScoreMatrices
        Rankings to fuse (higher score = better), all of the same shape.  With
        :class:`~evaluation.ranking.ScoreMatrices`, annotation and search are fused separately.

    Returns
    -------
    ndarray of float32, shape (Q, N)   (or ScoreMatrices)
        Fused scores (higher = better): the item at fused 0-based position ``p`` gets ``N − p``, where
        the fused order sorts by summed Borda points ``Σ_k (N − r_k)`` (descending) and then by the median
        position ``median_k r_k`` (ascending).  Items tied on both keys share the score of the first of
        them.

    Examples
    --------
    >>> a = np.array([[3., 2., 1.]]); b = np.array([[1., 3., 2.]])
    >>> borda([a, b])   # points: item0 3+1=4, item1 2+3=5, item2 1+2=3
    array([[2., 3., 1.]], dtype=float32)
    """
    mats = list(score_matrices)
    if not mats:
        raise ValueError("borda needs at least one score matrix")
    if all(isinstance(m, ScoreMatrices) for m in mats):
        return ScoreMatrices(
            annotation=_borda_array([m.annotation for m in mats]),
            search=_borda_array([m.search for m in mats]),
        )
    if any(isinstance(m, ScoreMatrices) for m in mats):
        raise TypeError("borda: mix of ScoreMatrices and plain arrays; pass one kind")
    mats = [validate_scores(m, name=f"score matrix {i}") for i, m in enumerate(mats)]
    for i, m in enumerate(mats):
        if m.shape != mats[0].shape:
            raise ValueError(f"borda: score matrix {i} has shape {m.shape}, expected {mats[0].shape}")
    return _borda_array(mats)


#: ranx-style alias.
fuse = borda
