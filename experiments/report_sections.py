"""Report sections of the paper effects and the standard benchmarks (``results["paper_effects"]``,
``results["benchmarks"]``): their table rows and notes, for :mod:`experiments.report`."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

__all__ = ["format_p", "paper_effect_rows", "paper_effects_note", "benchmark_rows", "benchmark_note"]


def _fmt(v, nd: int = 1) -> str:
    """One decimal; ``–`` for a missing or non-finite value (as the report's other tables)."""
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f"{v:.{nd}f}"


def format_p(p) -> str:
    """A p-value for a table: ``< 0.001`` below it, else three decimals; ``–`` when there is none."""
    if p is None:
        return "–"
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def paper_effect_rows(results: Mapping) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the "Paper effects" table (``results["paper_effects"]["rows"]``)."""
    header = ["paper", "compared pair", "measure", "first", "second", "Δ", "95 % CI", "p", "", "finding"]
    rows = []
    for r in results.get("paper_effects", {}).get("rows", []):
        ci = r.get("ci")
        rows.append([r["paper"], r["effect"], r["measure"], _fmt(r.get("value_a")), _fmt(r.get("value_b")),
                     _fmt(r.get("delta")), f"[{_fmt(ci[0])}, {_fmt(ci[1])}]" if ci else "–",
                     format_p(r.get("p")), r.get("marker", ""), r["finding"]])
    return header, rows


def paper_effects_note(results: Mapping) -> str:
    """The note of the "Paper effects" section: the tests, and L-CLIPScore's size and speed."""
    pe = results.get("paper_effects", {})
    bs = pe.get("bootstrap", {})
    note = ("Each paper's headline effect, re-measured here: the first scorer of the pair against the second "
            "(Δ = first − second, ×100). Correlations (Kendall τ × 100 with the same human judgments): "
            f"paired bootstrap over the judged images ({bs.get('resamples', '?')} resamples, seed "
            f"{bs.get('seed', '?')}; each resample draws images with replacement and keeps all their judged "
            "rows, because the rows of one image share its candidates and references), percentile 95 % CI, "
            "two-sided p = twice the share of resamples whose Δ falls on the other side of 0. Specificity "
            "rates (SPECS Eqs. 1–2, %): McNemar's test on the per-step outcomes, Wald CI of the paired "
            "difference. * p ≤ 0.1, ** p ≤ 0.05, *** p ≤ 0.01. A claim that does not appear on this run "
            "says so in its last column.")
    st = pe.get("lclip_vs_teacher")
    if st:
        note += (f" L-CLIPScore's student has {st['student_params']:,} parameters, its teacher (CLIP-S on the "
                 f"same backbone) {st['teacher_params']:,} ({100 * st['ratio']:.0f} %).")
        sysm = results.get("timings_s", {}).get("systems", {})
        t_s = sysm.get("L-CLIPScore", {}).get("pair_scoring")
        t_t = sysm.get("CLIP-S (teacher)", {}).get("pair_scoring")
        if t_s and t_t:
            note += (f" Measured scoring of the {t_s['captions']} test-pool captions with their images "
                     f"(image and text encoding; wall-clock, results.json timings_s): student "
                     f"{t_s['captions_per_s']:.0f} captions/s, teacher {t_t['captions_per_s']:.0f} captions/s.")
    return note


def benchmark_rows(results: Mapping) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the standard-benchmark table (``results["benchmarks"]``), in the column order of
    PAC-S (Sarto et al. 2023) Tables 1–3."""
    b = results.get("benchmarks", {})
    cols = b.get("columns", [])
    header = ["scorer"] + [f"{g} {h}" for g, h, _ in cols]
    rows = [[name] + [_fmt(r.get(k)) for _, _, k in cols] for name, r in b.get("rows", {}).items()]
    return header, rows


def benchmark_note(results: Mapping) -> str:
    """The note of the standard-benchmark section: protocol, sizes, and every benchmark or cell not scored
    with its reason."""
    b = results.get("benchmarks", {})
    sizes = ", ".join(f"{k} {v}" for k, v in b.get("benchmarks", {}).items()) or "none loaded"
    note = ("Kendall τ × 100 (Flickr8k-Expert and Composite τ-c, Flickr8k-CF τ-b; the Flickr8k columns are "
            "the table above) and accuracy % (Pascal-50S: the human-preferred caption scores higher, 5 of the "
            f"48 references sampled per draw, mean of {b.get('pascal_draws', 5)} draws, seed {b.get('seed', 0)}; "
            "FOIL: the original caption scores above its foil, with the first 1 / 4 references), laid out as "
            f"PAC-S (Sarto et al. 2023) Tables 1–3. Items: {sizes}. “–”: not run or not scored.")
    for k, e in b.get("load_errors", {}).items():
        note += f" Benchmark {k} not loaded: {e}."
    errs = b.get("errors", {})
    if errs:
        note += " Not scored: " + "; ".join(f"{k}: {v}" for k, v in errs.items()) + "."
    return note
