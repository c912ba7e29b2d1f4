"""The main job's "paper effects": each CLIP-family paper's headline effect, re-measured on this run's
judgments and pool with a paired significance test.

==========================  ===============================  ============================================
effect                      compared pair                    test
==========================  ===============================  ============================================
CLIPScore (Hessel et al.    CLIP-S vs each n-gram metric     paired image bootstrap of the difference of
2021, Table 1)              (BLEU-1/4, ROUGE-L, CIDEr-D)     Kendall τ (Expert: τ-c, CF: τ-b;
PAC-S (Sarto et al. 2023,   PAC-S vs CLIP-S                  :mod:`evaluation.correlation_tests`)
Table 1)
BRIDGE (Sarto et al. 2024)  BRIDGE vs CLIP-S
L-CLIPScore (Li et al.)     L-CLIPScore vs its teacher,
                            CLIP-S on the same backbone
SPECS (Chen et al., Eqs.    SPECS vs CLIP-S on SR_pos and    McNemar's test on the per-step outcomes
1–2)                        SR_neg                           (:func:`evaluation.significance.mcnemar_test`)
==========================  ===============================  ============================================

Every effect is a claim that the first scorer does better than the second, except L-CLIPScore's: a
distilled student that keeps its teacher's correlation with humans at a fraction of its parameters.  A
row is reported whether or not the effect appears here; its ``finding`` says which, in words.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from evaluation.correlation_tests import GroupedKendall
from evaluation.significance import mcnemar_test, significance_marker
from experiments.human_stage import NGRAM_METRICS

__all__ = ["BOOTSTRAP_RESAMPLES", "CORRELATION_EFFECTS", "paper_effects", "take_specificity_hits",
           "take_student_timing"]

#: Resamples of the paired image bootstrap (seeded with the run's ``--seed``).
BOOTSTRAP_RESAMPLES = 1000
#: The judgment protocols and the τ each paper reports on them.
PROTOCOLS = {"expert": ("Flickr8k-Expert τ-c", "c"), "cf": ("Flickr8k-CF τ-b", "b")}
#: (paper, scorer, compared with, expectation): "better" = the paper reports a higher correlation;
#: "no worse" = the paper reports the student keeping its teacher's.
CORRELATION_EFFECTS = (
    *(("CLIPScore (Hessel et al. 2021)", "CLIP-S", m, "better") for m in NGRAM_METRICS),
    ("PAC-S (Sarto et al. 2023)", "PAC-S", "CLIP-S", "better"),
    ("BRIDGE (Sarto et al. 2024)", "BRIDGE", "CLIP-S", "better"),
    ("L-CLIPScore (Li et al.)", "L-CLIPScore", "CLIP-S", "no worse"),
)
_ALPHA = 0.05


def take_specificity_hits(specificity: dict) -> dict[str, dict[str, np.ndarray]]:
    """Remove the per-step outcomes from the neural stage's specificity block (they are not results);
    returns ``{scorer: {"SR_pos": bool array, "SR_neg": bool array}}``."""
    hits = {}
    for name, v in specificity.items():
        pos, neg = v.pop("hits_pos", None), v.pop("hits_neg", None)
        if pos is not None and neg is not None:
            hits[name] = {"SR_pos": np.asarray(pos, dtype=bool), "SR_neg": np.asarray(neg, dtype=bool)}
    return hits


def take_student_timing(neural_provenance: dict) -> tuple[dict | None, dict]:
    """Remove L-CLIPScore's student-vs-teacher measurement from the neural provenance: ``(parameters,
    timings)`` — the parameter counts (deterministic: ``results["paper_effects"]``) and the measured
    throughput (wall-clock: ``results["timings_s"]``), or ``(None, {})`` without L-CLIPScore."""
    m = neural_provenance.pop("lclip_vs_teacher", None)
    if not m:
        return None, {}
    params = {"student_params": m["student_params"], "teacher_params": m["teacher_params"],
              "ratio": round(m["student_params"] / m["teacher_params"], 4)}
    return params, {"L-CLIPScore": {"pair_scoring": m["timing"]["student"]},
                    "CLIP-S (teacher)": {"pair_scoring": m["timing"]["teacher"]}}


def _finding(a: str, b: str, expect: str, delta: float, p: float, measure: str) -> str:
    """The plain sentence of one effect."""
    sig = p <= _ALPHA
    if expect == "no worse":
        if delta < 0 and sig:
            return f"Does not appear: {a} correlates less than its teacher {b} on {measure} (p ≤ {_ALPHA})."
        return f"Appears: {a} is not significantly worse than its teacher {b} on {measure}."
    if delta > 0 and sig:
        return f"Appears: {a} beats {b} on {measure} (p ≤ {_ALPHA})."
    if delta > 0:
        return f"Not shown: {a} is ahead of {b} on {measure}, but not significantly (p > {_ALPHA})."
    if sig:
        return f"Does not appear: {a} is significantly behind {b} on {measure}."
    return f"Does not appear: {a} is not ahead of {b} on {measure} (Δ ≤ 0, not significant)."


def _correlation_rows(per_row: Mapping, n_resamples: int, seed: int) -> list[dict]:
    """The bootstrap rows of :data:`CORRELATION_EFFECTS` on each protocol both scorers were run on."""
    out = []
    for tag, (measure, variant) in PROTOCOLS.items():
        if tag not in per_row:
            continue
        rows, scores = per_row[tag]["rows"], per_row[tag]["scores"]
        pairs = [e for e in CORRELATION_EFFECTS if e[1] in scores and e[2] in scores]
        prepared: dict = {}        # (rows mask, scorer) -> blocks, so CLIP-S's are built once per mask
        for paper, a, b, expect in pairs:
            ok = np.isfinite(scores[a]) & np.isfinite(scores[b])
            if ok.sum() < 3 or len({rows.image_ids[i] for i in np.flatnonzero(ok)}) < 2:
                out.append({"paper": paper, "effect": f"{a} vs {b}", "measure": measure, "n_rows": int(ok.sum()),
                            "finding": f"Not tested: fewer than 3 judgments (or one image) scored by both on "
                                       f"{measure}."})
                continue
            mask_key = ok.tobytes()
            idx = np.flatnonzero(ok)
            if mask_key not in prepared:
                prepared[mask_key] = {"gk": GroupedKendall(rows.human[idx], [rows.image_ids[i] for i in idx],
                                                           variant)}
            cell = prepared[mask_key]
            for s in (a, b):
                if s not in cell:
                    cell[s] = cell["gk"].blocks(scores[s][idx])
            r = cell["gk"].compare(cell[a], cell[b], n_resamples=n_resamples, seed=seed)
            out.append({"paper": paper, "effect": f"{a} vs {b}", "measure": measure, "expect": expect,
                        "value_a": round(100 * r.tau_a, 4), "value_b": round(100 * r.tau_b, 4),
                        "delta": round(100 * r.delta, 4), "ci": [round(100 * r.ci[0], 4), round(100 * r.ci[1], 4)],
                        "p": round(r.pvalue, 6), "marker": r.marker, "test": r.method, "n_rows": r.n_rows,
                        "finding": _finding(a, b, expect, r.delta, r.pvalue, measure)})
    return out


def _paired_proportion_ci(a: np.ndarray, b: np.ndarray, z: float = 1.959964) -> tuple[float, float]:
    """Wald interval of the difference of two paired proportions, ``Δ ± z sqrt(n10 + n01 − (n10 − n01)²/n) / n``
    (Fleiss, Levin & Paik 2003, Statistical Methods for Rates and Proportions, Sec. 13.1)."""
    n = a.size
    n10, n01 = float(np.sum(a & ~b)), float(np.sum(~a & b))
    d = (n10 - n01) / n
    half = z * np.sqrt(max(n10 + n01 - (n10 - n01) ** 2 / n, 0.0)) / n
    return d - half, d + half


def _specificity_rows(hits: Mapping[str, Mapping[str, np.ndarray]]) -> list[dict]:
    """SPECS vs CLIP-S on SR_pos and SR_neg: McNemar on the per-step outcomes."""
    if "SPECS" not in hits or "CLIP-S" not in hits:
        return []
    out = []
    for rate in ("SR_pos", "SR_neg"):
        a, b = hits["SPECS"][rate], hits["CLIP-S"][rate]
        if a.size == 0 or a.size != b.size:
            continue
        t = mcnemar_test(a, b)
        lo, hi = _paired_proportion_ci(a, b)
        delta = float(a.mean() - b.mean())
        out.append({"paper": "SPECS (Chen et al.)", "effect": "SPECS vs CLIP-S", "measure": f"{rate} (%)",
                    "expect": "better", "value_a": round(100 * float(a.mean()), 4),
                    "value_b": round(100 * float(b.mean()), 4), "delta": round(100 * delta, 4),
                    "ci": [round(100 * lo, 4), round(100 * hi, 4)], "p": round(t.pvalue, 6),
                    "marker": significance_marker(t.pvalue), "test": f"{t.method} ({a.size} steps)",
                    "n_rows": int(a.size), "finding": _finding("SPECS", "CLIP-S", "better", delta, t.pvalue, rate)})
    return out


def paper_effects(per_row: Mapping, specificity_hits: Mapping, student: dict | None, *, seed: int,
                  n_resamples: int = BOOTSTRAP_RESAMPLES) -> dict:
    """The "Paper effects" block of ``results.json``.

    Parameters
    ----------
    per_row : mapping
        The per-row scores of the human-correlation stage (``keep`` of
        :func:`experiments.human_stage.human_correlation_table`).
    specificity_hits : mapping
        :func:`take_specificity_hits`.
    student : dict or None
        L-CLIPScore's parameter counts (:func:`take_student_timing`).
    seed, n_resamples : int
        The bootstrap's seed and resamples.

    Returns
    -------
    dict
        ``{"rows": [{"paper", "effect", "measure", "value_a", "value_b", "delta", "ci", "p", "marker",
        "test", "n_rows", "finding"}, ...], "bootstrap": {"resamples", "seed", "unit"}, "lclip_vs_teacher"}``
        (values × 100; empty ``{}`` when nothing could be compared).
    """
    rows = _correlation_rows(per_row, n_resamples, seed) + _specificity_rows(specificity_hits)
    if not rows and student is None:
        return {}
    out = {"rows": rows, "bootstrap": {"resamples": n_resamples, "seed": seed, "unit": "judged image",
                                       "confidence": 1 - _ALPHA}}
    if student is not None:
        out["lclip_vs_teacher"] = student
    return out
