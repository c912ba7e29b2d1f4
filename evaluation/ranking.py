"""Ranking metrics for image annotation and image search (Hodosh et al. 2013, Sec. 4.3).

Every scorer in the toolkit produces score matrices; this module turns one score matrix (rows =
queries, columns = candidates, higher = better) into the metrics of the paper:

* **R@k** – percentage of queries whose *original* (gold) item is among the top ``k`` candidates;
* **median rank / mean rank** – of the gold item, 1-based;
* **S@k** – percentage of queries with at least one *relevant* item in the top ``k`` (Sec. 4.3.3);
* **R-precision** – precision at rank ``r_q`` where ``r_q`` is the number of relevant items of query
  ``q``, averaged over queries.

Tie policy (applied everywhere in :mod:`evaluation`)
----------------------------------------------------
Scores can tie (integer-valued Borda scores, lexical similarities, identical captions).  Ties are
broken **pessimistically**: among candidates with equal score, non-relevant candidates are placed
first, then relevant non-gold candidates, then the gold candidate.  So the gold item's rank is

.. math::  \\mathrm{rank}_q = 1 + |\\{j : s_{qj} > s_{qg}\\}| + |\\{j \\ne g : s_{qj} = s_{qg}\\}|,

and S@k / R-precision count a relevant item tied with a non-relevant one as if it came after it.  A
constant scorer therefore gets R@k = 0 (k < N), not the ``k/N`` it would get from a lucky order.  The
number of queries whose gold item ties with at least one other candidate is reported as ``n_ties``
(per query: ``tied_with_gold``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from corpora.scoring import ScoreMatrices, descending_key, gold_ranks, rank_metrics, validate_scores

__all__ = [
    "ScoreMatrices", "RankingResult", "evaluate", "evaluate_pool", "validate_scores",
    "pessimistic_order",
]

# rows per chunk when a full sort is needed (keeps temporaries around ~100 MB for 25k columns)
_CHUNK_ELEMENTS = 4_000_000


@dataclass
class RankingResult:
    """Metrics of one task plus the per-query outputs significance tests need.

    Attributes
    ----------
    metrics : dict
        ``"R@k"`` (%), ``"median_rank"``, ``"mean_rank"`` (1-based) and, when relevance was given,
        ``"S@k"`` (%) and ``"R-precision"`` (%).
    ranks : ndarray of int, shape (Q,)
        1-based pessimistic rank of each query's gold item.
    hits : dict k -> ndarray of bool, shape (Q,)
        ``ranks <= k``.
    success : dict k -> ndarray of bool or None
        At least one relevant item in the top ``k`` (``None`` without relevance).
    r_precision : ndarray of float, shape (Q,) or None
        Per-query R-precision in [0, 1].
    n_relevant : ndarray of int or None
        ``r_q`` per query.
    tied_with_gold : ndarray of int, shape (Q,)
        Number of other candidates whose score equals the gold item's score.
    n_ties : int
        Number of queries with ``tied_with_gold > 0``.
    ks : tuple of int
    n_queries, n_candidates : int
    """

    metrics: dict[str, float]
    ranks: np.ndarray
    hits: dict[int, np.ndarray]
    success: dict[int, np.ndarray] | None
    r_precision: np.ndarray | None
    n_relevant: np.ndarray | None
    tied_with_gold: np.ndarray
    n_ties: int
    ks: tuple[int, ...]
    n_queries: int
    n_candidates: int
    extra: dict = field(default_factory=dict)

    def __getitem__(self, key: str) -> float:
        return self.metrics[key]

    def per_query(self, metric: str) -> np.ndarray:
        """The per-query values behind an aggregate metric (for significance tests).

        ``"R@k"`` / ``"S@k"`` -> bool arrays, ``"median_rank"`` / ``"mean_rank"`` -> ranks,
        ``"R-precision"`` -> per-query R-precision.
        """
        if metric in ("median_rank", "mean_rank", "rank"):
            return self.ranks
        if metric == "R-precision":
            if self.r_precision is None:
                raise KeyError("R-precision needs relevance sets (none were given)")
            return self.r_precision
        if metric.startswith("R@"):
            return self.hits[int(metric[2:])]
        if metric.startswith("S@"):
            if self.success is None:
                raise KeyError(f"{metric} needs relevance sets (none were given)")
            return self.success[int(metric[2:])]
        raise KeyError(f"unknown metric {metric!r}")

    def to_dict(self) -> dict:
        """JSON-friendly summary (metrics, counts, ties)."""
        return {
            **{k: float(v) for k, v in self.metrics.items()},
            "n_queries": int(self.n_queries),
            "n_candidates": int(self.n_candidates),
            "n_ties": int(self.n_ties),
        }

    def __str__(self) -> str:
        parts = [f"{k}={v:.1f}" for k, v in self.metrics.items()]
        return f"RankingResult({', '.join(parts)}; Q={self.n_queries}, ties={self.n_ties})"


def _validate_gold(gold, n_queries: int, n_candidates: int) -> np.ndarray:
    gold = np.asarray(gold)
    if gold.ndim != 1 or gold.shape[0] != n_queries:
        raise ValueError(
            f"gold must have shape ({n_queries},) (one gold column per query row), got {gold.shape}"
        )
    if not np.issubdtype(gold.dtype, np.integer):
        if np.issubdtype(gold.dtype, np.floating) and np.all(gold == np.round(gold)):
            gold = gold.astype(np.int64)
        else:
            raise TypeError(f"gold must hold integer column indices, got dtype {gold.dtype}")
    if n_queries and (gold.min() < 0 or gold.max() >= n_candidates):
        raise ValueError(
            f"gold indices must lie in [0, {n_candidates}); got range [{gold.min()}, {gold.max()}]"
        )
    return gold.astype(np.int64)


def _validate_relevance(relevance, shape: tuple[int, int], gold: np.ndarray) -> np.ndarray:
    relevance = np.asarray(relevance)
    if relevance.shape != shape:
        raise ValueError(f"relevance shape {relevance.shape} does not match scores shape {shape}")
    if relevance.dtype != bool:
        if not np.isin(relevance, (0, 1)).all():
            raise ValueError("relevance must be boolean (or 0/1)")
        relevance = relevance.astype(bool)
    n_rel = relevance.sum(axis=1)
    empty = np.nonzero(n_rel == 0)[0]
    if empty.size:
        raise ValueError(
            f"{empty.size} quer{'y has' if empty.size == 1 else 'ies have'} an empty relevance set "
            f"(rows {empty[:5].tolist()}{' …' if empty.size > 5 else ''}); every query needs at least "
            f"its gold item marked relevant"
        )
    not_gold = np.nonzero(~relevance[np.arange(shape[0]), gold])[0]
    if not_gold.size:
        raise ValueError(
            f"the gold item is not marked relevant for {not_gold.size} quer"
            f"{'y' if not_gold.size == 1 else 'ies'} (rows {not_gold[:5].tolist()}); the relevance "
            f"set must contain the original item (Hodosh et al. 2013, Sec. 4.3.2)"
        )
    return relevance


def pessimistic_order(scores: np.ndarray, relevance: np.ndarray | None = None,
                      gold: np.ndarray | None = None) -> np.ndarray:
    """Column order of each row under the pessimistic tie policy.

    Sort by score (descending); among equal scores put non-relevant candidates first, then relevant
    non-gold ones, then the gold item (then by column index, for determinism).
    Returns an ``int64`` array of shape ``scores.shape``.
    """
    scores = validate_scores(scores)
    Q, N = scores.shape
    cls = np.zeros(scores.shape, dtype=np.int8)
    if relevance is not None:
        cls[np.asarray(relevance, dtype=bool)] = 1
    if gold is not None:
        cls[np.arange(Q), np.asarray(gold)] = 2
    return np.lexsort((cls, descending_key(scores)), axis=1)


def _relevance_outcomes(scores: np.ndarray, relevance: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query: pessimistic position of the first relevant item, R-precision in [0, 1], ``r_q``."""
    Q, N = scores.shape
    success_rank = np.empty(Q, dtype=np.int64)
    rprec = np.empty(Q, dtype=np.float64)
    n_rel = relevance.sum(axis=1)
    chunk = max(1, _CHUNK_ELEMENTS // max(N, 1))
    for lo in range(0, Q, chunk):
        hi = min(Q, lo + chunk)
        S, R = scores[lo:hi], relevance[lo:hi]
        rows = np.arange(hi - lo)
        # S@k: pessimistic position of the first relevant item = 1 + #(s > s*) + #(non-relevant, s = s*)
        # with s* the best relevant score
        best = np.where(R, S, -np.inf).max(axis=1)[:, None]
        success_rank[lo:hi] = 1 + (S > best).sum(axis=1) + ((S == best) & ~R).sum(axis=1)
        # R-precision: t = r-th largest score; the items above t are all in the top r, the remaining
        # r − #(s > t) slots are filled from the items tied at t, non-relevant ones first
        r = n_rel[lo:hi]
        t = np.sort(S, axis=1)[rows, N - r][:, None]      # no negation: safe for unsigned / bool
        above = S > t
        at = S == t
        slots = r - above.sum(axis=1)
        n_at_nonrel = (at & ~R).sum(axis=1)
        n_at_rel = (at & R).sum(axis=1)
        from_ties = np.clip(slots - n_at_nonrel, 0, n_at_rel)
        rprec[lo:hi] = ((above & R).sum(axis=1) + from_ties) / r
    return success_rank, rprec, n_rel


def evaluate(
    scores: np.ndarray,
    gold: Sequence[int] | np.ndarray,
    relevance: np.ndarray | None = None,
    ks: Sequence[int] = (1, 5, 10),
) -> RankingResult:
    """Rank the candidates of every query and compute the metrics of Hodosh et al. (2013), Sec. 4.3.

    Parameters
    ----------
    scores : ndarray, shape (Q, N)
        Row ``q`` scores the ``N`` candidates of query ``q``; higher = better.  NaN is rejected.
    gold : array of int, shape (Q,)
        Column of the original item of each query.
    relevance : ndarray of bool, shape (Q, N), optional
        ``relevance[q, j]`` – candidate ``j`` is a correct answer for query ``q``.  Must contain the gold
        item of every query.  Enables S@k and R-precision.
    ks : sequence of int
        Cut-offs for R@k and S@k (any positive integers).

    Returns
    -------
    RankingResult
        With the pessimistic tie policy described in the module docstring.

    Notes
    -----
    * ``R@k = 100 · mean_q [rank_q ≤ k]``; ``median_rank = median_q rank_q``;
      ``mean_rank = mean_q rank_q``.
    * ``S@k = 100 · mean_q [∃ j relevant to q among the top k]``.
    * ``R-precision = 100 · mean_q |{relevant j in the top r_q}| / r_q`` with
      ``r_q = Σ_j relevance[q, j]``.
    """
    scores = validate_scores(scores)
    Q, N = scores.shape
    gold = _validate_gold(gold, Q, N)
    ks = tuple(int(k) for k in ks)
    if not ks or any(k < 1 for k in ks):
        raise ValueError(f"ks must be positive integers, got {ks}")
    if relevance is not None:
        relevance = _validate_relevance(relevance, scores.shape, gold)

    ranks, tied = gold_ranks(scores, gold, return_ties=True)
    success_rank = rprec = n_rel = None
    if relevance is not None:
        success_rank, rprec, n_rel = _relevance_outcomes(scores, relevance)

    metrics = rank_metrics(ranks, ks)
    hits = {k: ranks <= k for k in ks}
    success = None
    if relevance is not None:
        success = {k: success_rank <= k for k in ks}
        for k in ks:
            metrics[f"S@{k}"] = 100.0 * float(success[k].mean())
        metrics["R-precision"] = 100.0 * float(rprec.mean())
    return RankingResult(
        metrics=metrics, ranks=ranks, hits=hits, success=success, r_precision=rprec,
        n_relevant=n_rel, tied_with_gold=tied, n_ties=int((tied > 0).sum()), ks=ks,
        n_queries=Q, n_candidates=N,
    )


def evaluate_pool(matrices_or_affinity, pool, ks: Sequence[int] = (1, 5, 10)) -> dict[str, RankingResult]:
    """Evaluate both tasks over a :class:`~corpora.base.RankingPool`.

    Parameters
    ----------
    matrices_or_affinity : ScoreMatrices or ndarray of shape (n_images, n_captions)
        An affinity matrix is used for both tasks (``S`` for annotation, ``S.T`` for search).
    pool : RankingPool
        Supplies ``gold_caption`` / ``relevance`` (annotation) and ``gold_image`` / ``relevance.T``
        (search).
    ks : sequence of int

    Returns
    -------
    dict
        ``{"annotation": RankingResult, "search": RankingResult}``.
    """
    m = matrices_or_affinity
    if not isinstance(m, ScoreMatrices):
        m = ScoreMatrices.from_affinity(m)
    expected = (pool.n_images, pool.n_captions)
    if m.shape != expected:
        raise ValueError(
            f"score matrices have shape {m.shape} but pool {getattr(pool, 'split', '?')!r} is "
            f"(n_images, n_captions) = {expected}"
        )
    rel = None if pool.relevance is None else np.asarray(pool.relevance, dtype=bool)
    return {
        "annotation": evaluate(m.annotation, pool.gold_caption, rel, ks=ks),
        "search": evaluate(m.search, pool.gold_image, None if rel is None else rel.T, ks=ks),
    }
