"""Compositionality on contrast twins: does a system prefer the true caption over its twin's?

A *contrast twin* (:attr:`corpora.teaching.TeachingSet.twins`) is a scene with the same objects as
another scene but with two colours or two places swapped, so a bag of words (or a CLIP-style bag of
concepts) sees almost the same caption for both.  For every twin pair ``(i, j)`` whose two images are
both in the pool, with ``g(i)`` the column of image ``i``'s gold caption:

* **annotation** – image ``i`` scores its own caption above its twin's, ``S[i, g(i)] > S[i, g(j)]``,
  and image ``j`` likewise (two trials per pair);
* **search** – caption ``g(i)`` scores image ``i`` above image ``j``, and caption ``g(j)`` likewise
  (two trials per pair).

A tie counts ½ (the scorer cannot tell the two apart, as a coin would), so a scorer blind to the swap
gets exactly 50 %, which is chance.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from corpora.base import RankingPool
from corpora.scoring import ScoreMatrices

__all__ = ["twin_pairs", "twin_preference"]


def twin_pairs(pool: RankingPool, twins: Mapping[str, str]) -> list[tuple[int, int]]:
    """Row indices ``(i, j)`` of the twin pairs whose two images are both in the pool.

    Parameters
    ----------
    pool : RankingPool
        The pool (its ``image_ids`` give the rows).
    twins : mapping
        ``{image id: image id of the scene it is a contrast twin of}``.

    Returns
    -------
    list of (int, int)
        One entry per pair, ``i < j``, sorted; a pair given in both directions is counted once.
    """
    row = {im: k for k, im in enumerate(pool.image_ids)}
    seen: set[frozenset] = set()
    pairs: list[tuple[int, int]] = []
    for a, b in twins.items():
        if a in row and b in row and a != b and frozenset((a, b)) not in seen:
            seen.add(frozenset((a, b)))
            pairs.append((min(row[a], row[b]), max(row[a], row[b])))
    return sorted(pairs)


def _prefers(better: np.ndarray, worse: np.ndarray) -> np.ndarray:
    """1 where ``better > worse``, ½ on a tie, 0 otherwise."""
    return np.where(better > worse, 1.0, np.where(better == worse, 0.5, 0.0))


def twin_preference(scores: ScoreMatrices, pool: RankingPool, twins: Mapping[str, str]) -> dict:
    """How often a system prefers the true caption (image) over its contrast twin's, per task.

    Parameters
    ----------
    scores : ScoreMatrices
        The system's scores over ``pool`` (annotation ``(n_images, n_captions)``, search the other way).
    pool : RankingPool
        The pool; ``gold_caption[i]`` is the column of image ``i``'s own caption.
    twins : mapping
        ``{image id: image id of its twin}`` (e.g. ``TeachingSet.twins``); pairs with an image outside
        the pool are left out.

    Returns
    -------
    dict
        ``"annotation"`` and ``"search"``: the % of trials won (ties count ½; 50 % is chance;
        ``nan`` without pairs); ``"n_pairs"``: the number of pairs; ``"pairs"``: the ``(image id, image
        id)`` pairs; ``"per_pair"``: ``{task: ndarray (n_pairs, 2)}`` of each trial's outcome in
        ``{0, 0.5, 1}`` (column 0: the pair's first image / its caption, column 1: the second), for a
        paired test between systems.

    Raises
    ------
    ValueError
        ``scores`` does not match the pool's shape.
    """
    if scores.shape != (pool.n_images, pool.n_captions):
        raise ValueError(f"twin_preference: scores of shape {scores.shape} do not match the pool "
                         f"({pool.n_images} images x {pool.n_captions} captions)")
    pairs = twin_pairs(pool, twins)
    i = np.array([p[0] for p in pairs], dtype=np.intp)
    j = np.array([p[1] for p in pairs], dtype=np.intp)
    gi, gj = np.asarray(pool.gold_caption)[i], np.asarray(pool.gold_caption)[j]
    A = np.asarray(scores.annotation, dtype=np.float64)
    S = np.asarray(scores.search, dtype=np.float64)
    per_pair = {
        "annotation": np.stack([_prefers(A[i, gi], A[i, gj]), _prefers(A[j, gj], A[j, gi])], axis=1),
        "search": np.stack([_prefers(S[gi, i], S[gi, j]), _prefers(S[gj, j], S[gj, i])], axis=1),
    }
    out: dict = {task: (float(100.0 * v.mean()) if len(pairs) else float("nan"))
                 for task, v in per_pair.items()}
    out["n_pairs"] = len(pairs)
    out["pairs"] = [(pool.image_ids[a], pool.image_ids[b]) for a, b in pairs]
    out["per_pair"] = per_pair
    return out
