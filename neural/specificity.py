"""Specificity rate of ANY image–text scorer (SPECS, Chen et al., Sec. 3, Eqs. 1–2).

A caption is segmented into detail units ``u_1 … u_K`` (:func:`neural.text_units.detail_units`, or the
teaching set's own units); its cumulative captions are ``c_k = u_1 ⊕ … ⊕ u_k``.  A *specific* scorer

* rises when a correct (positive) unit is added:   ``s(I, c_k) > s(I, c_{k-1})``          (Eq. 1)
* falls when an incorrect (negative) unit — a detail unit of another image — is added:
  ``s(I, c_k ⊕ u⁻) < s(I, c_k)``                                                          (Eq. 2)

.. math::

    SR_{pos} = \\frac{\\sum_i \\sum_{k=2}^{K_i} 1[s(I_i, c_{i,k}) > s(I_i, c_{i,k-1})]}{\\sum_i (K_i - 1)},
    \\qquad
    SR_{neg} = \\frac{\\sum_i \\sum_{k=1}^{K_i} 1[s(I_i, c_{i,k} \\oplus u^-_{i,k}) < s(I_i, c_{i,k})]}
                     {\\sum_i K_i}.

The printed Eq. 2 has the inequality the other way round (the extended caption scoring *above* the
base); its prose — an incorrect detail should lower the score — is what is implemented here, as the
authors' code does.

Both rates are pooled over all steps of all images ("micro" average: every step counts once); the
per-image ("macro") averages are returned too.  The first positive step ``c_1`` has no base caption and is
not counted; ties (equal scores) count as failures in both rates.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["specificity_rate", "build_specificity_texts", "pairwise_score_fn", "join_unit"]

ScoreFn = Callable[[Sequence[np.ndarray], Sequence[str]], np.ndarray]


def join_unit(a: str, b: str) -> str:
    """``a ⊕ b``: caption ``a`` extended by unit ``b`` (stripped; one space between, none before a
    punctuation mark; ``b`` alone when ``a`` is empty)."""
    a, b = a.strip(), b.strip()
    if not a:
        return b
    if b[:1] in {".", ",", ";", ":", "!", "?"}:
        return a + b
    return a + " " + b


def build_specificity_texts(
    unit_sequences: Sequence[Sequence[str]], negative_units: Sequence[str | Sequence[str]]
) -> tuple[list[int], list[str], list[tuple[int, int, int, str]]]:
    """Flatten the cumulative / negative captions of every image.

    Returns
    -------
    owners : list of int
        Image index of each text.
    texts : list of str
        ``c_1 … c_K`` of image 0, its negatives ``c_k ⊕ u⁻``, then image 1 …
    steps : list of (image, text index a, text index b, kind)
        One comparison per step; ``kind`` is ``"pos"`` (want s[b] > s[a]) or ``"neg"`` (want s[b] < s[a]).
    """
    if len(unit_sequences) != len(negative_units):
        raise ValueError(
            f"unit_sequences ({len(unit_sequences)}) and negative_units ({len(negative_units)}) differ in length"
        )
    owners: list[int] = []
    texts: list[str] = []
    steps: list[tuple[int, int, int, str]] = []
    for i, (units, negs) in enumerate(zip(unit_sequences, negative_units)):
        units = [u for u in units if u and u.strip()]
        if not units:
            raise ValueError(f"unit_sequences[{i}] has no non-empty unit")
        if isinstance(negs, str):
            negs = [negs] * len(units)
        if len(negs) != len(units):
            raise ValueError(
                f"negative_units[{i}] has {len(negs)} units, expected 1 or {len(units)} (one per step)"
            )
        cum, idx = "", []
        for u in units:
            cum = join_unit(cum, u)
            idx.append(len(texts))
            texts.append(cum)
            owners.append(i)
        for k in range(1, len(units)):
            steps.append((i, idx[k - 1], idx[k], "pos"))
        for k, neg in enumerate(negs):
            texts.append(join_unit(texts[idx[k]], neg))
            owners.append(i)
            steps.append((i, idx[k], len(texts) - 1, "neg"))
    return owners, texts, steps


def specificity_rate(
    score_fn: ScoreFn,
    images: Sequence[np.ndarray],
    unit_sequences: Sequence[Sequence[str]],
    negative_units: Sequence[str | Sequence[str]],
) -> dict:
    """SR_pos and SR_neg (SPECS Eqs. 1–2) of any scorer.

    Parameters
    ----------
    score_fn : callable ``(images, texts) -> (n,) scores``
        Scores each pair ``(images[j], texts[j])``; higher = better match.  It is called once with every
        pair (images repeat: the same array object appears for every text of an image, so a scorer can
        encode each image once — see :func:`pairwise_score_fn`).
    images : sequence of (H, W, 3) uint8 arrays
    unit_sequences : sequence of sequences of str
        The detail units ``u_1 … u_K`` of each image's caption, in order.
    negative_units : sequence of str or sequences of str
        Per image, one unit from another image (used at every step) or one per step.

    Returns
    -------
    dict
        ``{"SR_pos", "SR_neg", "SR_pos_macro", "SR_neg_macro", "n_pos_steps", "n_neg_steps"}`` and the
        per-step outcomes ``"hits_pos"`` / ``"hits_neg"`` (bool arrays in step order, the same steps for
        every scorer given the same units: paired outcomes for McNemar's test).
    """
    if len(images) != len(unit_sequences):
        raise ValueError(f"images ({len(images)}) and unit_sequences ({len(unit_sequences)}) differ in length")
    owners, texts, steps = build_specificity_texts(unit_sequences, negative_units)
    scores = np.asarray(score_fn([images[o] for o in owners], texts), dtype=np.float64).reshape(-1)
    if scores.shape[0] != len(texts):
        raise ValueError(f"score_fn returned {scores.shape[0]} scores for {len(texts)} pairs")
    if not np.all(np.isfinite(scores)):
        raise ValueError("score_fn returned non-finite scores")
    n = len(images)
    succ = {"pos": np.zeros(n), "neg": np.zeros(n)}
    tot = {"pos": np.zeros(n), "neg": np.zeros(n)}
    hits: dict[str, list[bool]] = {"pos": [], "neg": []}
    for i, a, b, kind in steps:
        ok = scores[b] > scores[a] if kind == "pos" else scores[b] < scores[a]
        succ[kind][i] += ok
        tot[kind][i] += 1
        hits[kind].append(bool(ok))
    out: dict = {f"hits_{k}": np.asarray(v, dtype=bool) for k, v in hits.items()}
    for kind in ("pos", "neg"):
        t = tot[kind].sum()
        out[f"SR_{kind}"] = float(succ[kind].sum() / t) if t else float("nan")
        has = tot[kind] > 0
        out[f"SR_{kind}_macro"] = float(np.mean(succ[kind][has] / tot[kind][has])) if has.any() else float("nan")
        out[f"n_{kind}_steps"] = int(t)
    return out


def pairwise_score_fn(scorer) -> ScoreFn:
    """Adapt a scorer with ``score_matrix(images, captions)`` or a :class:`Backbone`-like object to the
    ``score_fn(images, texts)`` pair interface, encoding each distinct image object once.

    The pair score is taken from ``score_matrix`` over the *distinct* images (by object identity) and the
    texts, i.e. ``S[u(j), j]``; for large inputs the matrix is computed per distinct image group.
    """

    def fn(images: Sequence[np.ndarray], texts: Sequence[str]) -> np.ndarray:
        uniq: dict[int, int] = {}
        distinct: list[np.ndarray] = []
        which = np.empty(len(images), dtype=np.int64)
        for j, im in enumerate(images):
            k = uniq.setdefault(id(im), len(distinct))
            if k == len(distinct):
                distinct.append(im)
            which[j] = k
        out = np.empty(len(texts), dtype=np.float32)
        # group texts by image so the matrix stays (1, n_texts_of_image) per image, batched in one call
        S = scorer.score_matrix(distinct, list(texts)) if len(distinct) * len(texts) <= 4_000_000 else None
        if S is not None:
            out[:] = np.asarray(S)[which, np.arange(len(texts))]
            return out
        for k, im in enumerate(distinct):
            cols = np.flatnonzero(which == k)
            out[cols] = np.asarray(scorer.score_matrix([im], [texts[c] for c in cols]))[0]
        return out

    return fn
