"""The scoring contract: what every scorer hands to the evaluator.

Every model of the toolkit — the nearest-neighbour baseline and the text kernels (:mod:`kernels`), KCCA
(:mod:`kcca`), the CLIP family (:mod:`neural`) — yields the same currency, and the evaluator
(:mod:`evaluation`) consumes only it.  This module sits at the bottom of the import graph (beside the
corpus data model) so that every layer imports it at module top:

* :class:`ScoreMatrices` – an image-annotation matrix ``(N_images, N_captions)`` and an image-search
  matrix ``(N_captions, N_images)`` over one :class:`~corpora.base.RankingPool` (higher = better);
* :func:`gold_ranks` / :func:`affinity_gold_ranks` / :func:`rank_metrics` – the pessimistic 1-based rank of
  each query's gold item and R@k / median rank / mean rank from it (Hodosh et al. 2013, Sec. 4.3.1), the
  one place these are computed (the evaluator, dev-set model selection and training monitors reuse it);
* :func:`borda` – the Borda count of Hodosh et al. (2013), Sec. 4.1.3, that fuses rankings;
* :class:`PairScorer` – a caption metric ``f(image_ids, candidates, references) -> scores`` with an
  explicit ``identity`` (the JSON description under which its scores may be cached).

Tie policy (everywhere)
-----------------------
Ties are broken **pessimistically**: a candidate whose score equals the gold item's is ranked above it,

.. math::  \\mathrm{rank}_q = 1 + |\\{j : s_{qj} > s_{qg}\\}| + |\\{j \\ne g : s_{qj} = s_{qg}\\}|
           = |\\{j : s_{qj} \\ge s_{qg}\\}|,

so a constant scorer gets R@k = 0 (k < N), not the ``k/N`` of a lucky order.

Borda count (Hodosh et al. 2013, Sec. 4.1.3)
--------------------------------------------
Given ``K`` rankings of the same ``N`` candidates for a query, the item at 0-based position ``r`` of
ranking ``k`` receives ``N − r`` points; items are ordered by their summed points

.. math::  B(j) = \\sum_{k=1}^{K} \\bigl(N - r_k(j)\\bigr),

and items with equal ``B`` are ordered by the median of their positions ``median_k r_k(j)`` (smaller is
better).  Ties *inside* one input ranking (equal scores) give the tied items the average of the positions
they occupy, so the result never depends on column order.  Items still tied after both keys receive the
same fused score; the evaluator then applies its pessimistic tie policy to them.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "ScoreMatrices", "validate_scores", "descending_key", "gold_ranks", "affinity_gold_ranks",
    "rank_metrics", "borda", "borda_points", "fuse", "ScoreFn", "PairScorer", "FunctionScorer",
]

# rows per chunk of a rank computation (keeps temporaries around ~100 MB for 25k columns)
RANK_CHUNK_ELEMENTS = 4_000_000
# elements per chunk of a Borda fusion (positions of K rankings are held at once)
BORDA_CHUNK_ELEMENTS = 2_000_000


@dataclass
class ScoreMatrices:
    """Score matrices for the two tasks over one :class:`~corpora.base.RankingPool`.

    Attributes
    ----------
    annotation : ndarray, shape (N_images, N_captions)
        Image annotation: row ``i`` scores every pool caption for image ``i`` (higher = better).
    search : ndarray, shape (N_captions, N_images)
        Image search: row ``j`` scores every pool image for caption ``j`` (higher = better).

    The two matrices may come from different models (Hodosh's per-task model selection, Borda
    ensembles); when one affinity matrix ``S`` serves both, use :meth:`from_affinity`.
    """

    annotation: np.ndarray
    search: np.ndarray

    def __post_init__(self) -> None:
        self.annotation = np.asarray(self.annotation)
        self.search = np.asarray(self.search)
        if self.annotation.ndim != 2 or self.search.ndim != 2:
            raise ValueError(
                f"ScoreMatrices: annotation and search must be 2-D, got shapes "
                f"{self.annotation.shape} and {self.search.shape}"
            )
        if self.annotation.shape != self.search.shape[::-1]:
            raise ValueError(
                f"ScoreMatrices: annotation shape {self.annotation.shape} must be the transpose of "
                f"search shape {self.search.shape} (annotation = (N_images, N_captions), "
                f"search = (N_captions, N_images))"
            )

    @classmethod
    def from_affinity(cls, S: np.ndarray) -> "ScoreMatrices":
        """Both tasks from one affinity matrix ``S`` of shape ``(n_images, n_captions)``:
        ``annotation = S``, ``search = S.T``."""
        S = np.asarray(S)
        if S.ndim != 2:
            raise ValueError(f"ScoreMatrices.from_affinity: S must be 2-D, got shape {S.shape}")
        return cls(annotation=S, search=S.T)

    @property
    def shape(self) -> tuple[int, int]:
        """``(n_images, n_captions)``."""
        return tuple(self.annotation.shape)  # type: ignore[return-value]


def validate_scores(scores: np.ndarray, name: str = "scores") -> np.ndarray:
    """Check a score matrix: 2-D, numeric, no NaN (``±inf`` allowed).  Returns it as an array."""
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"{name} must be a 2-D (queries × candidates) matrix, got shape {scores.shape}")
    if not np.issubdtype(scores.dtype, np.number) and scores.dtype != bool:
        raise TypeError(f"{name} must be numeric, got dtype {scores.dtype}")
    if scores.shape[0] == 0 or scores.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {scores.shape})")
    if np.issubdtype(scores.dtype, np.floating):
        bad = np.isnan(scores)
        if bad.any():
            rows = np.unique(np.nonzero(bad)[0])
            raise ValueError(
                f"{name} contains {int(bad.sum())} NaN value(s) in {rows.size} row(s) "
                f"(first rows: {rows[:5].tolist()})"
            )
    return scores


def descending_key(scores: np.ndarray) -> np.ndarray:
    """An array whose ascending order is the descending order of ``scores``, ties kept exactly.

    ``−float64(scores)`` for every dtype that float64 holds exactly (floats, bool, integers up to 2^53;
    negating in float64 is also safe for unsigned types); 64-bit integers beyond 2^53 are replaced by
    their negated dense rank (:func:`numpy.unique`), which float64 would round into false ties.
    """
    if scores.dtype.kind in "iu" and scores.dtype.itemsize == 8 and scores.size:
        if max(abs(int(scores.min())), abs(int(scores.max()))) > 2 ** 53:
            _, inv = np.unique(scores, return_inverse=True)
            return -inv.reshape(scores.shape).astype(np.int64)
    return -scores.astype(np.float64)


def gold_ranks(scores: np.ndarray, gold: Sequence[int] | np.ndarray, *,
               return_ties: bool = False) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Pessimistic 1-based rank of each query's gold item (Hodosh et al. 2013, Sec. 4.3.1).

    Parameters
    ----------
    scores : ndarray, shape (Q, N)
        Row ``q`` scores the ``N`` candidates of query ``q`` (higher = better); NaN is rejected.
    gold : array of int, shape (Q,)
        Column of each query's gold item (validated by the caller).
    return_ties : bool
        Also return the number of other candidates tied with the gold item.

    Returns
    -------
    ranks : ndarray of int64, shape (Q,)
        ``rank_q = |{j : s_qj ≥ s_qg}|`` (the module's tie policy).
    tied : ndarray of int64, shape (Q,)
        ``|{j ≠ g : s_qj = s_qg}|``, only with ``return_ties``.
    """
    scores = validate_scores(scores)
    gold = np.asarray(gold, dtype=np.int64)
    Q, N = scores.shape
    ranks = np.empty(Q, dtype=np.int64)
    tied = np.empty(Q, dtype=np.int64)
    chunk = max(1, RANK_CHUNK_ELEMENTS // max(N, 1))
    for lo in range(0, Q, chunk):
        hi = min(Q, lo + chunk)
        S = scores[lo:hi]
        g = S[np.arange(hi - lo), gold[lo:hi]][:, None]
        equal = (S == g).sum(axis=1) - 1
        ranks[lo:hi] = 1 + (S > g).sum(axis=1) + equal
        tied[lo:hi] = equal
    return (ranks, tied) if return_ties else ranks


def affinity_gold_ranks(S: np.ndarray, gold_caption: np.ndarray,
                        gold_image: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gold ranks of both tasks from one affinity matrix ``S`` of shape ``(N_images, N_captions)``.

    Annotation ranks row ``i``'s captions (gold ``gold_caption[i]``), search ranks column ``s``'s images
    (gold ``gold_image[s]``); both by :func:`gold_ranks`.  Returns ``(annotation_ranks, search_ranks)``.
    """
    S = validate_scores(S, name="affinity")
    return gold_ranks(S, gold_caption), gold_ranks(S.T, gold_image)


def rank_metrics(ranks: np.ndarray, ks: Sequence[int] = (1, 5, 10)) -> dict[str, float]:
    """R@k (percent), median and mean rank from 1-based gold ranks (Hodosh et al. 2013, Sec. 4.3.1).

    ``R@k = 100 · mean_q [rank_q ≤ k]``, ``median_rank = median_q rank_q``, ``mean_rank = mean_q rank_q``.
    """
    ranks = np.asarray(ranks)
    out = {f"R@{int(k)}": 100.0 * float(np.mean(ranks <= k)) for k in ks}
    out["median_rank"] = float(np.median(ranks))
    out["mean_rank"] = float(ranks.mean())
    return out


# ---------------------------------------------------------------------------------------------- Borda


def _tie_averages(tied: np.ndarray) -> np.ndarray:
    """Per row of sorted keys (``tied[r, j]``: sorted positions ``j`` and ``j + 1`` hold equal keys), each
    position's tie-averaged position ``(a + b) / 2``, where ``a..b`` are the positions of its tie group."""
    R, N = tied.shape[0], tied.shape[1] + 1
    col = np.arange(N)
    starts = np.ones((R, N), dtype=bool)
    starts[:, 1:] = ~tied
    ends = np.ones((R, N), dtype=bool)
    ends[:, :-1] = ~tied
    first = np.maximum.accumulate(np.where(starts, col, 0), axis=1)
    last = np.minimum.accumulate(np.where(ends, col, N - 1)[:, ::-1], axis=1)[:, ::-1]
    return (first + last) / 2.0


def _positions(scores: np.ndarray) -> np.ndarray:
    """0-based positions (average over ties) of every column in each row, descending score.

    A tie group that occupies sorted positions ``a..b`` gives each of its items ``(a + b) / 2``, exact in
    float64 (scipy's ``rankdata(method="average") − 1``, the same bits).  The order inside a tie group
    does not change that average, so the sort need not be stable: numpy's default sort is several times
    faster here than the stable one rankdata uses (the Borda ensembles of model selection rank every
    model's dev-pool matrices), and only the rows that have ties average them.
    """
    key = descending_key(scores)
    Q, N = key.shape
    order = np.argsort(key, axis=1)
    y = np.take_along_axis(key, order, axis=1)
    pos = np.broadcast_to(np.arange(N, dtype=np.float64), (Q, N))
    tied = y[:, 1:] == y[:, :-1]
    rows = np.flatnonzero(tied.any(axis=1))
    if rows.size:
        pos = pos.copy()
        pos[rows] = _tie_averages(tied[rows])
    out = np.empty((Q, N), dtype=np.float64)
    np.put_along_axis(out, order, pos, axis=1)
    return out


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
    return (N - pos).sum(axis=0), _median_over_rankings(pos)


def _median_over_rankings(pos: np.ndarray) -> np.ndarray:
    """``numpy.median(pos, axis=0)`` bit for bit, from one sort of the ``K`` positions of each item (for the
    small ``K`` of an ensemble several times faster than the partition median takes).  With an even
    ``K`` the two middle positions, multiples of 1/2, are averaged exactly."""
    K = pos.shape[0]
    s = np.sort(pos, axis=0)
    return s[K // 2] if K % 2 else (s[K // 2 - 1] + s[K // 2]) / 2


def _fused_order(points: np.ndarray, med: np.ndarray) -> np.ndarray:
    """Each row's columns by Borda points (descending), then median position (ascending).

    ``points`` are multiples of 1/2 and the median positions of 1/4 (sums and medians of tie-averaged
    positions), so ``2·points`` and ``4·median`` are exact integers and one int64 key
    ``−2·points · 4N + 4·median`` orders them as ``numpy.lexsort((med, −points))`` does; items equal on
    both keys may come in any order (they get the same fused score).  The key stays below 2^53 while
    ``8·K·N² < 2^53`` (K rankings; e.g. N = 25,000 with K = 1,000): beyond that, lexsort."""
    N = points.shape[1]
    if float(points.max(initial=0)) * 8 * N >= 2 ** 53:
        return np.lexsort((med, -points), axis=1)
    key = -(points * 2).astype(np.int64) * (4 * N) + (med * 4).astype(np.int64)
    return np.argsort(key, axis=1)


def _borda_array(mats: Sequence[np.ndarray]) -> np.ndarray:
    shape = np.asarray(mats[0]).shape
    Q, N = shape
    out = np.empty(shape, dtype=np.float32)
    chunk = max(1, BORDA_CHUNK_ELEMENTS // max(1, N * len(mats)))
    for lo in range(0, Q, chunk):
        hi = min(Q, lo + chunk)
        points, med = borda_points([np.asarray(m)[lo:hi] for m in mats])
        order = _fused_order(points, med)  # points desc, then median position asc
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
        :class:`ScoreMatrices`, annotation and search are fused separately.

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


# ---------------------------------------------------------------------------------------------- pair scorers
#: ``f(image_ids, candidates, references) -> scores``: one score per candidate caption of its image;
#: ``references[i]`` are the reference captions of row ``i`` (ignored by reference-free scorers).
ScoreFn = Callable[[Sequence[str], Sequence[str], Sequence[Sequence[str]]], np.ndarray]


@runtime_checkable
class PairScorer(Protocol):
    """A caption metric over image–caption pairs, as the human-judgment protocols use it.

    Attributes
    ----------
    identity : mapping or None
        JSON-serialisable description of everything the scores depend on (weights, configuration,
        training data); cached scores are keyed by it, and a scorer whose identity is ``None`` is
        always recomputed.
    """

    identity: Mapping[str, Any] | None

    def __call__(self, image_ids: Sequence[str], candidates: Sequence[str],
                 references: Sequence[Sequence[str]]) -> np.ndarray:
        """Scores of shape ``(len(candidates),)`` (higher = better)."""
        ...


@dataclass(frozen=True, eq=False)
class FunctionScorer:
    """A :class:`PairScorer` made of a plain function and its identity.

    Parameters
    ----------
    fn : ScoreFn
        ``fn(image_ids, candidates, references) -> scores``.
    identity : mapping or None
        See :class:`PairScorer`.
    name : str
        Display name (defaults to the function's ``__name__``).
    """

    fn: ScoreFn
    identity: Mapping[str, Any] | None = None
    name: str = ""

    def __call__(self, image_ids: Sequence[str], candidates: Sequence[str],
                 references: Sequence[Sequence[str]]) -> np.ndarray:
        return self.fn(image_ids, candidates, references)

    def __repr__(self) -> str:
        return f"FunctionScorer({self.name or getattr(self.fn, '__name__', 'fn')!r})"
