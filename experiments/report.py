# Size (~610 lines): one renderer for the report (markdown, self-contained HTML and the PNG plots of every section).
"""Render the main job's results as ``report.md``, a self-contained ``report.html`` and PNG plots.

Everything here is presentation: it takes the ``results`` dictionary that is also written to
``results.json`` plus the per-query outcomes kept by the evaluator (ranks of the original item and
per-query R-precision) and draws

* Table 3/11-style retrieval table (R@1/5/10, median rank; annotation and search),
* Table 4/5/12-style S@k / R-precision table,
* the human-correlation table (τ-b, τ-c, ρ) when judgments exist,
* the specificity-rate table,
* on a generated corpus, the compositionality table (true caption vs its contrast twin's),
* recall@k curves (k = 1…100), the cumulative distribution of the rank of the original item, a
  per-system bar chart of R-precision with bootstrap 95 % confidence intervals, and a gallery of one
  query image with the top-5 captions of the best classical and the best neural system.

Plots are embedded in the HTML as PNG data URIs, so the file needs no network and no side files.
"""
from __future__ import annotations

import base64
import html
import io
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from corpora.jsondata import jsonable, write_text_atomic
from experiments.report_sections import benchmark_note, benchmark_rows, paper_effect_rows, paper_effects_note

TASKS = ("annotation", "search")
_TASK_TITLES = {"annotation": "image annotation (an image ranks the captions)",
                "search": "image search (a caption ranks the images)"}
RETRIEVAL_KEYS = ("R@1", "R@5", "R@10", "median_rank")
#: Column labels of result keys that are not already readable.
KEY_LABELS = {"median_rank": "median rank", "mean_rank": "mean rank"}
#: The plots :func:`make_plots` can draw (``plots/<name>.png``).
PLOT_NAMES = ("recall", "rank_cdf", "r_precision")
RELEVANCE_KEYS = ("S@1", "S@5", "S@10", "R-precision")
FAMILY_ORDER = {"baseline": 0, "classical": 1, "neural": 2}


@dataclass
class QueryOutcomes:
    """Per-query outcomes of one system on one task (what the plots need).

    Attributes
    ----------
    ranks : ndarray of int, shape (Q,)
        1-based rank of the original item for each query.
    r_precision : ndarray of float, shape (Q,) or None
        Per-query R-precision in [0, 1] (``None`` without relevance judgments).
    """

    ranks: np.ndarray
    r_precision: np.ndarray | None = None


@dataclass
class GalleryItem:
    """One query image with the top captions of two systems."""

    image: np.ndarray
    image_id: str
    gold_caption: str
    columns: dict[str, list[tuple[str, bool]]] = field(default_factory=dict)  # system -> [(caption, relevant)]


# ---------------------------------------------------------------------------------------------- plots
def _fig_png(fig) -> bytes:
    """The figure as PNG bytes; the figure is closed."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _png_data_uri(fig) -> str:
    return _png_uri(_fig_png(fig))


def _thumbnail_png(img: np.ndarray, max_side: int = 256) -> bytes:
    """PNG bytes of ``img`` shrunk to at most ``max_side`` pixels per side."""
    from PIL import Image

    pil = Image.fromarray(np.asarray(img, dtype=np.uint8))
    pil.thumbnail((max_side, max_side))
    buf = io.BytesIO()
    pil.save(buf, format="PNG")
    return buf.getvalue()


def _png_uri(png: bytes) -> str:
    """A ``data:`` URI of PNG bytes (the HTML report embeds every image)."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def recall_curve(ranks: np.ndarray, kmax: int = 100) -> np.ndarray:
    """R@k in percent for k = 1 … kmax: share of queries whose original item is ranked ≤ k."""
    ranks = np.asarray(ranks)
    ks = np.arange(1, kmax + 1)
    return 100.0 * (ranks[None, :] <= ks[:, None]).mean(axis=1)


def bootstrap_ci(values: np.ndarray, *, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0
                 ) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean (seeded)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return (float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.size, size=(n_boot, values.size))
    means = values[idx].mean(axis=1)
    lo, hi = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(lo), float(hi)


def make_plots(outcomes: Mapping[str, Mapping[str, QueryOutcomes]], families: Mapping[str, str],
               out_dir: Path | None = None, seed: int = 0) -> dict[str, str]:
    """Draw the report's plots; returns ``{plot name: PNG data URI}`` and writes PNGs to ``out_dir``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from matplotlib.patches import Patch
    from matplotlib.ticker import FormatStrFormatter

    systems = sorted(outcomes, key=lambda s: (FAMILY_ORDER.get(families.get(s, ""), 9), s))
    styles = {"baseline": ":", "classical": "-", "neural": "--"}
    palette = plt.get_cmap("tab20").colors          # one colour per system (up to 20), then repeats
    colour = {s: palette[k % len(palette)] for k, s in enumerate(systems)}
    plots: dict[str, str] = {}

    for kind in ("recall", "rank_cdf"):
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True, layout="constrained")
        for ax, task in zip(axes, TASKS):
            for s in systems:
                if task not in outcomes[s]:
                    continue
                ranks = outcomes[s][task].ranks
                n = len(ranks)
                kmax = min(100, n)
                if kind == "recall":
                    ax.plot(np.arange(1, kmax + 1), recall_curve(ranks, kmax),
                            styles.get(families.get(s, ""), "-"), label=s, lw=1.4, color=colour[s])
                else:
                    xs = np.sort(ranks)
                    ax.step(xs, np.arange(1, n + 1) / n * 100.0, where="post",
                            ls=styles.get(families.get(s, ""), "-"), label=s, lw=1.4, color=colour[s])
            ax.set_title(_TASK_TITLES[task])
            ax.grid(alpha=0.3)
            ax.set_xlabel("k" if kind == "recall" else "rank of the original item")
            ax.set_xscale("log")
            ax.xaxis.set_major_formatter(FormatStrFormatter("%g"))   # 1, 10, 100 rather than 10⁰, 10¹, 10²
        axes[0].set_ylabel("R@k (%)" if kind == "recall" else "queries with rank ≤ x (%)")
        # one legend for both panels, right beside them (the constrained layout makes room), so that it
        # hides no curve
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, fontsize=8, loc="outside right center",
                   title="dotted: baseline\nsolid: classical\ndashed: neural", title_fontsize=8)
        k_top = max((min(100, len(outcomes[s][t].ranks)) for s in systems for t in TASKS if t in outcomes[s]),
                    default=100)
        fig.suptitle(f"Recall@k, k = 1…{k_top}" if kind == "recall"
                     else "Cumulative distribution of the rank of the original item")
        plots[kind] = _png_data_uri(fig) if out_dir is None else _save(fig, out_dir, kind)

    have_rp = [s for s in systems if all(
        t in outcomes[s] and outcomes[s][t].r_precision is not None for t in TASKS)]
    if have_rp:
        fig, axes = plt.subplots(1, 2, figsize=(11, 0.5 + 0.32 * len(have_rp) + 1.2), sharey=True, sharex=True,
                                 layout="constrained")
        colours = {"baseline": "#999999", "classical": "#3b6ea8", "neural": "#c0504d"}
        for ax, task in zip(axes, TASKS):
            means, errs = [], [[], []]
            for s in have_rp:
                v = 100.0 * np.asarray(outcomes[s][task].r_precision)
                m = float(v.mean())
                lo, hi = bootstrap_ci(v, seed=seed)
                means.append(m)
                errs[0].append(m - lo)
                errs[1].append(hi - m)
            y = np.arange(len(have_rp))
            ax.barh(y, means, xerr=errs, color=[colours.get(families.get(s, ""), "#666") for s in have_rp],
                    capsize=2, alpha=0.9)
            ax.set_yticks(y, have_rp, fontsize=8)
            ax.set_xlabel("R-precision (%) with bootstrap 95% CI")
            ax.set_title(_TASK_TITLES[task])
            ax.grid(axis="x", alpha=0.3)
        axes[0].invert_yaxis()  # shared y axis: flip once so the order matches the tables
        fams = [f for f in ("baseline", "classical", "neural") if any(families.get(s) == f for s in have_rp)]
        # beside the panels, like the curves' legend, so that it hides no bar or interval
        fig.legend(handles=[Patch(color=colours[f], label=f) for f in fams], fontsize=8, loc="outside right center")
        fig.suptitle("R-precision per system")
        plots["r_precision"] = _png_data_uri(fig) if out_dir is None else _save(fig, out_dir, "r_precision")
    return plots


def _save(fig, out_dir: Path, name: str) -> str:
    """Write the figure to ``out_dir/<name>.png``; returns its data URI."""
    out_dir.mkdir(parents=True, exist_ok=True)
    png = _fig_png(fig)
    (out_dir / f"{name}.png").write_bytes(png)
    return _png_uri(png)


# ---------------------------------------------------------------------------------------------- tables
def _fmt(v, nd: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float) and np.isnan(v):
        return "–"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f"{v:.{nd}f}"


#: Metrics where a lower value is better (every other table column: higher is better).
LOWER_IS_BETTER = frozenset({"median_rank", "mean_rank"})


def _cell(sysres: Mapping, task: str, key: str, ref: Mapping | None = None) -> str:
    """A table cell: the value, its significance marker and ``↑`` when it is significantly *better* than
    the reference system's ``ref`` (the tests are two-sided: a bare marker means worse)."""
    val = sysres.get(task, {}).get(key)
    if key in LOWER_IS_BETTER and val is not None and not (isinstance(val, float) and np.isnan(val)):
        txt = f"{val:g}"
    else:
        txt = _fmt(val)
    mark = sysres.get("significance", {}).get(task, {}).get(key, "")
    ref_val = (ref or {}).get(task, {}).get(key)
    if mark and val is not None and ref_val is not None and val != ref_val:
        better = val < ref_val if key in LOWER_IS_BETTER else val > ref_val
        mark += "↑" if better else ""
    return txt + mark


def table_rows(results: Mapping, keys: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """Header and rows of a system × (task, metric) table, systems ordered baseline → classical →
    neural; the significance reference of each task is named in the system column (``ref. ann.``)."""
    systems = results.get("systems", {})
    refs = results.get("significance_reference", {})
    names = sorted(systems, key=lambda s: (FAMILY_ORDER.get(systems[s].get("family", ""), 9), s))
    header = ["system", "family"] + [f"{t[:3]}. {KEY_LABELS.get(k, k)}{' ↓' if k in LOWER_IS_BETTER else ''}"
                                     for t in TASKS for k in keys]
    rows = []
    ref = {t: systems.get(refs.get(t), {}).get(t, {}) for t in TASKS}   # the reference systems' results
    for s in names:
        r = systems[s]
        if not _has_metrics(r, keys):
            continue
        is_ref = [t[:3] + "." for t in TASKS if refs.get(t) == s]
        label = s + (f" (ref. {' & '.join(is_ref)})" if is_ref else "")
        rows.append([label, r.get("family", "")] + [_cell(r, t, k, ref) for t in TASKS for k in keys])
    return header, rows


def _has_metrics(sysres: Mapping, keys: Sequence[str]) -> bool:
    return all(k in sysres.get(t, {}) for t in TASKS for k in keys)


def missing_systems(results: Mapping, keys: Sequence[str]) -> list[str]:
    """Systems left out of a :func:`table_rows` table because a metric is missing for a task."""
    return sorted(s for s, r in results.get("systems", {}).items() if not _has_metrics(r, keys))


def human_rows(results: Mapping) -> tuple[list[str], list[list[str]]]:
    hc = results.get("human_correlation", {})
    cols = [("expert_tau_c", "Expert τ-c"), ("expert_tau_b", "Expert τ-b"), ("expert_rho", "Expert ρ"),
            ("cf_tau_b", "CF τ-b"), ("cf_tau_c", "CF τ-c"), ("cf_rho", "CF ρ"),
            ("n_expert", "rows (Expert)"), ("n_cf", "rows (CF)")]
    cols = [c for c in cols if any(c[0] in v for v in hc.values())]
    header = ["scorer"] + [c[1] for c in cols]
    rows = [[name] + [_fmt(v.get(k)) for k, _ in cols] for name, v in hc.items()]
    return header, rows


def specificity_rows(results: Mapping) -> tuple[list[str], list[list[str]]]:
    sp = results.get("specificity", {})
    header = ["scorer", "SR_pos (%)", "SR_neg (%)"]
    rows = [[k, _fmt(100 * v["SR_pos"]), _fmt(100 * v["SR_neg"])] for k, v in sp.items()]
    return header, rows


def every_caption_rows(results: Mapping) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the every-caption retrieval table (the CLIP_benchmark protocol: each system's
    ``every_caption`` block in ``results["systems"]``), in the systems' order."""
    ks = (1, 5, 10)
    header = (["system"] + [f"image→text R@{k}" for k in ks] + [f"text→image R@{k}" for k in ks]
              + ["text→image median rank ↓"])
    rows = []
    for name, v in results.get("systems", {}).items():
        ec = v.get("every_caption")
        if ec:
            i2t, t2i = ec["image_to_text"], ec["text_to_image"]
            rows.append([name] + [_fmt(i2t[f"R@{k}"]) for k in ks] + [_fmt(t2i[f"R@{k}"]) for k in ks]
                        + [_fmt(t2i["median_rank"])])
    return header, rows


def every_caption_note(results: Mapping) -> str:
    """The note of the every-caption retrieval table: the pool's size and what each column counts."""
    pool = results.get("corpus", {}).get("pools", {}).get("test_every_caption", {})
    size = (f"The test split with every caption: {pool.get('images')} images × {pool.get('captions')} captions. "
            if pool.get("images") else "")
    return (size + "Retrieval as CLIP_benchmark defines it for its flickr30k and mscoco_captions sets (the "
            "protocol CLIP-style models are reported with): image→text R@k = % of images with at least one of "
            "their own captions among their top k captions; text→image R@k = % of captions whose image is "
            "among their top k images. Each scorer ranks with its own scores (CLIP-S: 2.5·max(cos, 0), so "
            "negative cosines tie), ties broken pessimistically as in the tables above (CLIP_benchmark takes "
            "torch.topk of the raw cosines). Values in %.")


def compositionality_rows(results: Mapping) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the contrast-twin table (``results["compositionality"]``), one row per system,
    baseline → classical → neural."""
    comp = results.get("compositionality", {})
    systems = results.get("systems", {})
    fam = {s: systems.get(s, {}).get("family", "") for s in comp}
    names = sorted(comp, key=lambda s: (FAMILY_ORDER.get(fam[s], 9), s))
    header = ["system", "family", "ann. true > twin (%)", "sea. true > twin (%)", "twin pairs"]
    rows = [[s, fam[s], _fmt(comp[s].get("annotation")), _fmt(comp[s].get("search")),
             str(comp[s].get("n_pairs", ""))] for s in names]
    return header, rows


def backbone_rows(results: Mapping) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the neural backbones table (``results["backbones"]``): one row per backbone with
    its name, architecture, weights source, the first 12 hex digits of the weights' SHA-256, its
    parameters, the scorers (row labels) that ran on it and where its fine-tuned scorers come from
    (``shipped``: loaded from :mod:`neural.shipped_scorers`; ``this run``: trained here)."""
    bbs = results.get("backbones", {})
    header = ["backbone", "architecture", "weights source", "sha256[:12]", "parameters", "scorers",
              "fine-tuned scorers"]
    rows = [[name, str(b.get("architecture", "")), str(b.get("weights_source", "")), str(b.get("sha256_12", "")),
             f"{b['parameters']:,}" if isinstance(b.get("parameters"), int) else "–",
             ", ".join(b.get("scorers", [])), str(b.get("fine_tuned") or "–")] for name, b in bbs.items()]
    return header, rows


#: The note of the neural backbones section.
BACKBONES_NOTE = (
    "Each neural scorer's backbone: a row label SCORER@NAME ran on backbone NAME (--backbone NAME=…), a "
    "label without @ on the default backbone (--clip-model / --clip-pretrained). sha256[:12] identifies the "
    "weights: of the weights file, or of the state dict for weights trained here. Scorers that fine-tune "
    "(PAC-S, SPECS) or distil (L-CLIPScore) start from this backbone, except on a release file of their "
    "own (a PAC-S release for PAC-S), which they use as it is. 'fine-tuned scorers': shipped = PAC-S, "
    "L-CLIPScore, BRIDGE and SPECS loaded as shipped with the package, trained once from the teaching CLIP "
    "on a generated set that no evaluation uses, as the papers train on COCO or ShareGPT4V and evaluate on "
    "Flickr8k (docs/shipped_scorers.md); this run = trained here on the corpus' training split "
    "(--train-scorers, and every backbone other than the teaching CLIP).")


#: The note of the compositionality section.
COMPOSITIONALITY_NOTE = (
    "Each contrast twin of the test pool is a scene with the same objects as another test scene but two "
    "colours or two places swapped. ann.: % of trials where a twin image scores its own caption above its "
    "twin's caption; sea.: % where a twin's caption scores its own image above the twin image (two trials "
    "per pair and task). Ties count ½, so 50 % is chance. Word-order-blind models (bag-of-words text "
    "kernels) and CLIP-style bags of concepts are known to fail here: swapping which object has which "
    "colour or where it stands barely changes the words or concepts, so they score near chance. Telling "
    "twins apart needs a model that binds attributes and relations to objects. With few pairs (two "
    "trials each per task) a value some way from 50 % can still be chance.")


def text_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A fixed-width plain-text table for a terminal: the first column left-aligned, the others right."""
    width = [max(len(str(v)) for v in c) for c in zip(header, *rows)]

    def line(cells):
        return "  ".join(str(v).ljust(w) if j == 0 else str(v).rjust(w)
                         for j, (v, w) in enumerate(zip(cells, width)))

    return "\n".join([line(header), "  ".join("-" * w for w in width)] + [line(r) for r in rows])


def console_tables(results: Mapping) -> str:
    """The two retrieval tables of the report (Hodosh Table 3/11 and Table 4/5/12 style) as plain text,
    for the end of the main job's console output; the report has their notes."""
    ref = results.get("significance_reference", {})
    ref_txt = ", ".join(f"{t}: {s}" for t, s in ref.items())
    out = []
    for title, _note, (header, rows) in _sections(results)[:2]:   # the report's two retrieval sections
        if rows:
            out += [title, text_table(header, rows), ""]
    if out and ref_txt:
        out.append(f"* p ≤ 0.1, ** p ≤ 0.05, *** p ≤ 0.01 against the reference ({ref_txt}); ↑ better than it.")
    return "\n".join(out).rstrip()


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


#: A cell that reads as a number (with significance markers, %, a CI or a dash): right-aligned; any
#: other cell is text and is left-aligned (class ``t``) so that long phrases read normally.
_NUMERIC_CELL = re.compile(r"(?:< )?[-+−]?[\d.,]*\d[\d.,]*\s*[%*↑]*|[–-]|\[[^\]]*\]|\**|")


def _html_cell(c) -> str:
    text = str(c)
    cls = "" if _NUMERIC_CELL.fullmatch(text.strip()) else " class='t'"
    return f"<td{cls}>{html.escape(text)}</td>"


def _html_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    cls = " class='sys'" if len(header) > 1 and header[1] == "family" else ""
    h = f"<table{cls}><thead><tr>" + "".join(f"<th>{html.escape(c)}</th>" for c in header) + "</tr></thead><tbody>"
    for r in rows:
        h += "<tr>" + "".join(_html_cell(c) for c in r) + "</tr>"
    return h + "</tbody></table>"


# ---------------------------------------------------------------------------------------------- report
def _sections(results: Mapping) -> list[tuple[str, str, tuple[list[str], list[list[str]]] | None]]:
    ref = results.get("significance_reference", {})
    ref_txt = ", ".join(f"{t}: {s}" for t, s in ref.items()) or "–"
    test = results.get("corpus", {}).get("pools", {}).get("test", {})
    n_q = next((v.get(t, {}).get("n_queries") for v in results.get("systems", {}).values() for t in TASKS
                if v.get(t, {}).get("n_queries")), None)
    pool_note = ((f"Test pool: {test.get('images')} images × {test.get('captions')} captions"
                  + (f", {n_q} queries per task" if n_q else "") + ". ") if test.get("images") else "")
    tasks_note = ("ann. = image annotation (each test image ranks the pool's captions); sea. = image search "
                  "(each caption ranks the images); values in % except median ranks; higher is better except "
                  "where the header has ↓. ")
    chosen = results.get("provenance", {}).get("significance_reference_rule") == "chosen (--reference)"
    rule = ("the system chosen with --reference" if chosen else
            "the system with the highest R@10 (ties: R@1, then median rank)")
    sig_note = (f"Significance against a reference per task — {rule}, marked “ref.” ({ref_txt}): "
                "two-sided tests, so * p ≤ 0.1, "
                "** p ≤ 0.05, *** p ≤ 0.01 mark a difference in either direction, ↑ when the value is "
                "better than the reference's (McNemar for R@k / S@k, Fisher's paired randomisation test "
                "for median rank and R-precision). Ties in scores are broken pessimistically.")
    only_original = bool(test.get("images")) and test.get("relevant_pairs") == test.get("images")
    relevance_note = (" Only each caption's own image is relevant in this corpus (no crowd judgments), so S@k "
                      "equals R@k and R-precision equals R@1 in both tasks." if only_original else "")

    def left_out(keys):
        gone = missing_systems(results, keys)
        return f" Not shown (metrics missing): {', '.join(gone)}." if gone else ""

    secs = [
        ("Retrieval (Hodosh Table 3/11 style)",
         pool_note + "R@k: % of queries whose original item is in the top k; median rank of the original "
         "item. " + tasks_note + sig_note + left_out(RETRIEVAL_KEYS), table_rows(results, RETRIEVAL_KEYS)),
        ("Relevance-based metrics (Hodosh Table 4/5/12 style)",
         pool_note + "S@k: % of queries with at least one relevant item in the top k; R-precision averaged "
         "over queries. " + tasks_note + sig_note + relevance_note + left_out(RELEVANCE_KEYS),
         table_rows(results, RELEVANCE_KEYS)),
    ]
    if every_caption_rows(results)[1]:
        secs.append(("Retrieval with every test caption (CLIP_benchmark protocol)", every_caption_note(results),
                     every_caption_rows(results)))
    if results.get("human_correlation"):
        secs.append(("Correlation with human judgments",
                     "Kendall τ and Spearman ρ (×100, higher is better) between each scorer and the human "
                     "scores of the corpus' judgments, with the Flickr8k-Expert and Flickr8k-CF protocols of "
                     "the CLIPScore / PAC-S papers; the first column of each group is the figure those papers "
                     "report (Expert: τ-c, CF: τ-b). Rows = judgments used (Expert: three expert scores per "
                     "image–caption pair; a pair whose candidate is one of the image's own captions is left "
                     "out; CF: one judgment per pair). Ref- scorers also see the image's captions as "
                     "references, less any caption judged as a candidate for that image (CF, as in the "
                     "CLIPScore data). KCCA f(i,s): the "
                     "KCCA affinity (Hodosh Eq. 4) of TRI5SEM and of the classical system with the highest "
                     "test annotation R@10. A scorer shown with “–” had fewer than 3 judgments with its "
                     "images on disk, or gave every judgment the same score (no correlation defined).",
                     human_rows(results)))
    if results.get("specificity"):
        secs.append(("Specificity rate (SPECS)",
                     "A long description of each test image is built up one detail unit at a time (a phrase "
                     "that adds a fact, e.g. “with stripes”, “left of a small blue square”). SR_pos: share of "
                     "steps where adding a correct unit raises the score; SR_neg: share where appending a "
                     "wrong unit lowers it (higher is better for both).", specificity_rows(results)))
    if results.get("paper_effects"):
        secs.append(("Paper effects", paper_effects_note(results), paper_effect_rows(results)))
    if results.get("benchmarks"):
        secs.append(("Standard benchmarks (PAC-S Tables 1–3 layout)", benchmark_note(results),
                     benchmark_rows(results)))
    if results.get("compositionality"):
        secs.append(("Compositionality: true caption vs its contrast twin's", COMPOSITIONALITY_NOTE,
                     compositionality_rows(results)))
    if results.get("backbones"):
        secs.append(("Neural backbones", BACKBONES_NOTE, backbone_rows(results)))
    return secs


def _summary_lines(results: Mapping) -> list[str]:
    c = results.get("corpus", {})
    lines = [f"Corpus: **{c.get('name', '?')}** — {c.get('images', '?')} images, "
             f"{c.get('captions', '?')} captions; splits "
             + ", ".join(f"{k} {v}" for k, v in c.get("splits", {}).items())]
    pools = c.get("pools", {})
    for split, p in pools.items():
        if not p.get("images"):
            lines.append(f"{split} pool: empty (none of its images is on disk)")
            continue
        lines.append(f"{split.replace('_', ' ')} pool: {_count(p.get('images'), 'image')} × "
                     f"{_count(p.get('captions'), 'caption')}, "
                     f"{_count(p.get('relevant_pairs', '?'), 'relevant pair')}")
    if c.get("skipped_images"):
        by = c.get("skipped_images_by_split", {})
        detail = (" (" + ", ".join(f"{k} {v}" for k, v in by.items()) + ")") if by else ""
        lines.append(f"Images skipped because they are missing on disk: {c['skipped_images']}{detail}")
    for note in c.get("notes", []):
        lines.append(note)
    prov = results.get("provenance", {})
    if prov.get("backbone"):
        b = prov["backbone"]
        lines.append(f"Neural backbone: {b.get('backbone') or b.get('name')} (weights {b.get('weights_id')}, "
                     f"{b.get('device')}, {b.get('precision')})")
    run = [f"seed {prov['seed']}"] if "seed" in prov else []
    if prov.get("permutations"):
        run.append(f"{prov['permutations']:,} permutations per randomisation test")
    if prov.get("command"):
        run.append(f"command `{prov['command']}`")
    if run:
        lines.append("Run: " + "; ".join(run) + " (versions and checksums: results.json, provenance)")
    # the stages' seconds; timings_s["systems"] holds each system's step timings (results.json only)
    t = {k: v for k, v in results.get("timings_s", {}).items() if isinstance(v, (int, float))}
    if t:
        lines.append("Timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in t.items())
                     + f"; total before the report {sum(t.values()):.1f}")
    return lines


def _count(n, noun: str) -> str:
    """``"1 image"``, ``"300 images"``."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


def write_report(results: Mapping, out_dir: str | Path, *,
                 outcomes: Mapping[str, Mapping[str, QueryOutcomes]] | None = None,
                 gallery: Sequence[GalleryItem] = (), seed: int = 0) -> dict[str, Path]:
    """Write ``results.json``, ``report.md``, ``report.html`` and ``plots/*.png`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name in PLOT_NAMES:  # an earlier report's plots in the same folder are not this run's
        (out / "plots" / f"{name}.png").unlink(missing_ok=True)
    for old in (out / "plots").glob("gallery-*.png") if (out / "plots").is_dir() else ():
        old.unlink()
    paths = {"results": out / "results.json", "md": out / "report.md", "html": out / "report.html"}
    # strict JSON: a NaN (e.g. a correlation with a constant scorer) or an infinity is written as null
    _atomic_write(paths["results"], json.dumps(jsonable(results, nonfinite_as_null=True), indent=2, sort_keys=False,
                                               allow_nan=False))

    families = {s: v.get("family", "") for s, v in results.get("systems", {}).items()}
    plots = make_plots(outcomes, families, out / "plots", seed=seed) if outcomes else {}
    title = f"Image–text ranking report — {results.get('corpus', {}).get('name', '')}"
    secs = _sections(results)
    summary = _summary_lines(results)

    md = [f"# {title}", ""] + [f"- {s}" for s in summary] + [""]
    secs = [sec for sec in secs if sec[2][1]]  # no empty tables
    for name, text, tab in secs:
        md += [f"## {name}", "", text, "", _md_table(*tab), ""]
    if plots:
        md += ["## Plots", ""]
        for k in plots:
            md += [f"![{k}](plots/{k}.png)", ""]
    thumbs = [_thumbnail_png(g.image) for g in gallery]   # encoded once: report.md's file and the HTML's URI
    if gallery:
        (out / "plots").mkdir(parents=True, exist_ok=True)
    for n, g in enumerate(gallery):
        thumb = out / "plots" / f"gallery-{n}.png"
        thumb.write_bytes(thumbs[n])
        md += [f"## Gallery: {g.image_id}", "", GALLERY_NOTE, "", f"![query image](plots/{thumb.name})", "",
               f"Original caption: *{g.gold_caption}*", ""]
        for sysname, caps in g.columns.items():
            md += [f"**{sysname}** top-{len(caps)}:"] + [f"{i + 1}. {'✓ ' if rel else ''}{c}" for i, (c, rel) in
                                               enumerate(caps)] + [""]
    _atomic_write(paths["md"], "\n".join(md))

    body = [f"<h1>{html.escape(title)}</h1>", "<ul>"] + [
        f"<li>{_md_inline(s)}</li>" for s in summary] + ["</ul>"]
    for name, text, tab in secs:
        body += [f"<h2>{html.escape(name)}</h2>", f"<p class='note'>{html.escape(text)}</p>", _html_table(*tab)]
    labels = {"recall": "Recall@k curves", "rank_cdf": "Rank of the original item",
              "r_precision": "R-precision with bootstrap CIs"}
    if plots:
        body.append("<h2>Plots</h2>")
        for k, uri in plots.items():
            body.append(f"<figure><img alt='{k}' src='{uri}'><figcaption>{labels.get(k, k)}"
                        "</figcaption></figure>")
    for g, png in zip(gallery, thumbs):
        body.append(f"<h2>Gallery: {html.escape(g.image_id)}</h2><div class='gallery'>"
                    f"<img class='thumb' alt='query image' src='{_png_uri(png)}'>"
                    f"<div><p>Original caption: <em>{html.escape(g.gold_caption)}</em></p>")
        for sysname, caps in g.columns.items():
            items = "".join(f"<li class='{'rel' if rel else ''}'>{'✓ ' if rel else ''}{html.escape(c)}</li>"
                            for c, rel in caps)
            body.append(f"<div class='col'><h3>{html.escape(sysname)}</h3><ol>{items}</ol></div>")
        body.append(f"<p class='note'>{html.escape(GALLERY_NOTE)}</p></div></div>")
    page = _HTML_TEMPLATE.replace("{title}", html.escape(title)).replace("{body}", "\n".join(body))
    _atomic_write(paths["html"], page)
    return paths


#: How the gallery is chosen (experiments.report_stage.make_gallery) and what its marks mean.
GALLERY_NOTE = ("Image annotation for the first test image: the top-ranked test-pool captions of the classical "
                "and the neural system with the highest annotation R-precision; ✓ (green) marks a caption "
                "relevant to the image.")


def _md_inline(s: str) -> str:
    """The two Markdown spans the summary uses: ``**bold**`` and ```code```."""
    parts = html.escape(s).split("**")
    s = "".join(f"<b>{p}</b>" if i % 2 else p for i, p in enumerate(parts))
    parts = s.split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))


def _atomic_write(path: Path, text: str) -> None:
    write_text_atomic(path, text)   # a failed write (full disk) leaves no temporary file


_HTML_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;max-width:1180px;margin:2em auto;
padding:0 1em;color:#222;line-height:1.45}
h1{font-size:1.6em;border-bottom:2px solid #3b6ea8;padding-bottom:.3em}
h2{font-size:1.25em;margin-top:1.8em;color:#2b4f7a}
table{border-collapse:collapse;font-size:.86em;margin:.6em 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d4dbe4;padding:.28em .55em;text-align:right}
th{background:#eef3f9}td:first-child,th:first-child,table.sys td:nth-child(2),table.sys th:nth-child(2),td.t{text-align:left}
tbody tr:nth-child(even){background:#f8fafc}
.note{color:#555;font-size:.88em}
figure{margin:1em 0}img{max-width:100%}figcaption{color:#555;font-size:.85em}
.gallery{display:flex;gap:1.4em;align-items:flex-start;flex-wrap:wrap}
.gallery .thumb{width:240px;border:1px solid #ccc;image-rendering:pixelated}
.col{display:inline-block;vertical-align:top;margin-right:2em;max-width:430px}
li.rel{color:#1d7a2e;font-weight:600}
</style></head><body>
{body}
</body></html>
"""
