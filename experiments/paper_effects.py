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

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from corpora.cache import DiskCache
from evaluation.correlation_tests import BootstrapResult, GroupedKendall
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
#: Part of the cache key of a bootstrap result: raise it when the test's computation changes.
_CACHE_VERSION = 1


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


class _ProtocolBootstrap:
    """The paired image bootstraps on one protocol's rows scored by both scorers of a pair: the
    :class:`~evaluation.correlation_tests.GroupedKendall` and each scorer's blocks are built on first
    need, so the comparisons found in the cache cost nothing but their keys."""

    def __init__(self, human: np.ndarray, groups: Sequence[str], variant: str):
        self.human, self.groups, self.variant = np.ascontiguousarray(human, dtype=np.float64), groups, variant
        self.groups_digest = hashlib.sha256("\x1f".join(groups).encode("utf-8")).hexdigest()
        self.gk: GroupedKendall | None = None
        self.blocks: dict = {}

    def compute(self, a: str, b: str, scores: Mapping[str, np.ndarray], n_resamples: int,
                seed: int) -> BootstrapResult:
        if self.gk is None:
            self.gk = GroupedKendall(self.human, self.groups, self.variant)
        for s in (a, b):
            if s not in self.blocks:
                self.blocks[s] = self.gk.blocks(scores[s])
        return self.gk.compare(self.blocks[a], self.blocks[b], n_resamples=n_resamples, seed=seed, alpha=_ALPHA)

    def compare(self, a: str, b: str, scores: Mapping[str, np.ndarray], n_resamples: int, seed: int,
                cache: DiskCache | None) -> BootstrapResult:
        """:meth:`GroupedKendall.compare` of scorers ``a`` and ``b`` (``scores``: their scores of these
        rows), cached under the human scores, the images and both scorers' scores (digests), the variant,
        ``n_resamples``, ``seed`` and the interval's level."""
        if cache is None:
            return self.compute(a, b, scores, n_resamples, seed)
        key = {"what": "paired-image-bootstrap", "version": _CACHE_VERSION, "variant": self.variant,
               "human": self.human, "images": self.groups_digest,
               "a": np.ascontiguousarray(scores[a], dtype=np.float64),
               "b": np.ascontiguousarray(scores[b], dtype=np.float64),
               "n_resamples": int(n_resamples), "seed": int(seed), "alpha": _ALPHA}
        v = cache.get_or_compute("paper_effects", key,
                                 lambda: {"v": _result_values(self.compute(a, b, scores, n_resamples, seed))})["v"]
        p = float(v[5])
        return BootstrapResult(delta=float(v[0]), tau_a=float(v[1]), tau_b=float(v[2]), ci=(float(v[3]), float(v[4])),
                               pvalue=p, marker=significance_marker(p), n_rows=int(v[6]), n_images=int(v[7]),
                               n_resamples=int(n_resamples), n_undefined=int(v[8]), variant=self.variant)


def _result_values(r: BootstrapResult) -> np.ndarray:
    """A bootstrap result's numbers as one float64 array (the cached form; integers are exact)."""
    return np.array([r.delta, r.tau_a, r.tau_b, r.ci[0], r.ci[1], r.pvalue, r.n_rows, r.n_images, r.n_undefined],
                    dtype=np.float64)


def _correlation_rows(per_row: Mapping, n_resamples: int, seed: int, cache: DiskCache | None = None) -> list[dict]:
    """The bootstrap rows of :data:`CORRELATION_EFFECTS` on each protocol both scorers were run on."""
    out = []
    for tag, (measure, variant) in PROTOCOLS.items():
        if tag not in per_row:
            continue
        rows, scores = per_row[tag]["rows"], per_row[tag]["scores"]
        pairs = [e for e in CORRELATION_EFFECTS if e[1] in scores and e[2] in scores]
        prepared: dict = {}        # rows mask -> its bootstraps, so CLIP-S's blocks are built once per mask
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
                prepared[mask_key] = _ProtocolBootstrap(rows.human[idx], [str(rows.image_ids[i]) for i in idx],
                                                        variant)
            r = prepared[mask_key].compare(a, b, {s: scores[s][idx] for s in (a, b)}, n_resamples, seed, cache)
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
                  n_resamples: int = BOOTSTRAP_RESAMPLES, cache: DiskCache | None = None) -> dict:
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
    cache : DiskCache, optional
        Where each bootstrap comparison's result is kept (namespace ``paper_effects``, keyed by the digests
        of the human scores, the images and both scorers' per-row scores, the τ variant, ``n_resamples``
        and ``seed``): a warm re-run reads them instead of resampling.

    Returns
    -------
    dict
        ``{"rows": [{"paper", "effect", "measure", "value_a", "value_b", "delta", "ci", "p", "marker",
        "test", "n_rows", "finding"}, ...], "bootstrap": {"resamples", "seed", "unit"}, "lclip_vs_teacher"}``
        (values × 100; empty ``{}`` when nothing could be compared).
    """
    rows = _correlation_rows(per_row, n_resamples, seed, cache) + _specificity_rows(specificity_hits)
    if not rows and student is None:
        return {}
    out = {"rows": rows, "bootstrap": {"resamples": n_resamples, "seed": seed, "unit": "judged image",
                                       "confidence": 1 - _ALPHA}}
    if student is not None:
        out["lclip_vs_teacher"] = student
    return out
