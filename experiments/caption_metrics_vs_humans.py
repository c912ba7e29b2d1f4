"""Classical caption metrics against human judgments on Flickr8k (no images needed).

    python -m experiments.caption_metrics_vs_humans --data ../shared/data/flickr8k
    python -m experiments.caption_metrics_vs_humans --data ../shared/data/flickr8k --json

Computes BLEU-1, BLEU-4, ROUGE-L, CIDEr-D, METEOR and Hodosh et al.'s unigram BLEU / ROUGE (with and
without "pre" preprocessing) on

* Flickr8k-Expert – one row per expert score, candidates that are one of the image's own captions
  skipped, references = the image's five captions; Kendall τ-c (primary) and τ-b;
* Flickr8k-CF – one row per judged pair, human score = fraction "yes"; a judged caption of the image
  itself is removed from that image's references, for every row of the image as in CLIPScore's data
  (``--cf-references image``, the published protocol) or for its own row only (``row``); τ-b (primary)
  and τ-c;

METEOR is the official METEOR 1.5 (the COCO evaluation's Java jar, ``evaluation.meteor``) when a Java
runtime and the jar (the ``meteor`` extra: pycocoevalcap, or ``$ITR_METEOR_JAR``) are present; otherwise the row is the NLTK
variant, labelled "METEOR (NLTK variant)", and the reason is printed.

With ``--composite`` / ``--pascal50s`` / ``--foil`` it also prints the standard caption-metric benchmarks
in the layout of the PAC-S paper's Tables 1-3 (``evaluation.benchmarks``).

It prints a table of τ ×100 (one decimal) with the number of rows used, then the relevance statistics
of the Hodosh test pool (how many captions are relevant to 1, 2, 3, ≥4 images and vice versa), which
drive S@k and R-precision.  ``--json`` prints one JSON object instead, ``{metric: {"expert_tau_b", "expert_tau_c",
"cf_tau_b", "cf_tau_c", "n_expert", "n_cf", "cf_references"}}`` (the pool statistics then go to stderr).  Metric scores are cached on disk (``corpora.cache.DiskCache``) keyed by the corpus fingerprint
and the scored items (candidates and references).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from corpora.base import CorpusError
from corpora.cli_values import seed_value
from corpora.cache import CacheDirError, DiskCache, check_cache_dir
from corpora.flickr8k import load_flickr8k
from corpora.nltk_resources import MissingResourceError
from corpora.paths import ensure_nltk_data_path
from evaluation.benchmarks import benchmark_table, format_benchmark_table, load_benchmarks
from evaluation.caption_metrics import (
    bleu,
    cider_d,
    hodosh_bleu,
    hodosh_rouge,
    rouge_l,
)
from evaluation.correlation import (
    CF_REFERENCE_RULES,
    JudgmentRows,
    correlations,
    flickr8k_cf_rows,
    flickr8k_expert_rows,
    text_metric,
)
from evaluation.meteor import METEOR15_NAME, meteor15, meteor15_available, meteor_available, meteor_nltk
from experiments.options import OptionError, add_benchmark_file_options, parse_list

#: bump when a metric implementation changes (invalidates cached scores)
_CACHE_VERSION = 2

METEOR_NAME = "METEOR (NLTK variant)"
#: The judgment files of the standard Flickr8k text bundle (named in messages).
EXPERT_FILE = "ExpertAnnotations.txt"
CROWD_FILE = "CrowdFlowerAnnotations.txt"

_BASE_METRICS = {
    "BLEU-1": lambda c, r: bleu(c, r, n=1)[:, 0],
    "BLEU-4": lambda c, r: bleu(c, r, n=4)[:, 3],
    "ROUGE-L": rouge_l,
    "CIDEr-D": cider_d,
}
_HODOSH_METRICS = {
    "Hodosh BLEU (unigram)": lambda c, r: hodosh_bleu(c, r, pre=False),
    "Hodosh BLEU (unigram, pre)": lambda c, r: hodosh_bleu(c, r, pre=True),
    "Hodosh ROUGE (unigram)": lambda c, r: hodosh_rouge(c, r, pre=False),
    "Hodosh ROUGE (unigram, pre)": lambda c, r: hodosh_rouge(c, r, pre=True),
}


#: Every metric name ``--metrics`` accepts.
METRIC_NAMES = (*_BASE_METRICS, METEOR15_NAME, METEOR_NAME, *_HODOSH_METRICS)
#: The two METEOR implementations: the official METEOR 1.5, and the NLTK variant (the fallback).
METEOR_NAMES = (METEOR15_NAME, METEOR_NAME)


def meteor_metrics(progress: bool = False) -> tuple[dict, dict[str, str]]:
    """The METEOR implementations that can run here, ``{name: metric(candidates, references)}``, and
    the reasons of those that cannot, ``{name: why}``."""
    metrics, unavailable = {}, {}
    for name, (ok, why), fn in (
            (METEOR15_NAME, meteor15_available(), lambda c, r: meteor15(c, r, progress=progress)),
            (METEOR_NAME, meteor_available(), lambda c, r: meteor_nltk(c, r, progress=progress))):
        if ok:
            metrics[name] = fn
        else:
            unavailable[name] = why
    return metrics, unavailable


def split_metric_list(value: str, known=METRIC_NAMES) -> list[str]:
    """``--metrics`` value → metric names.  Commas separate names, but two names contain one
    (``"Hodosh BLEU (unigram, pre)"``): consecutive pieces are joined back whenever together they form a
    known name (longest match first).  Case does not matter (``bleu-4`` is ``BLEU-4``); unknown pieces are
    kept, so that :func:`metric_table` names them."""
    parts = [t.strip() for t in value.split(",")]
    by_lower = {k.lower(): k for k in known}
    out, i = [], 0
    while i < len(parts):
        for j in range(len(parts), i, -1):
            name = by_lower.get(", ".join(parts[i:j]).lower())
            if name is not None:
                out.append(name)
                i = j
                break
        else:
            if parts[i]:
                out.append(parts[i])
            i += 1
    return out


def metric_selection_error(only: list[str] | None, *, meteor: bool = True, hodosh: bool = True,
                           meteor_unavailable: dict[str, str] | None = None) -> str | None:
    """Why ``only`` (``--metrics``) cannot be computed with these options, or ``None`` if it can.

    Names are sorted into unknown ones (not in :data:`METRIC_NAMES`), those excluded by ``--no-hodosh``
    (``hodosh=False``) or ``--no-meteor`` (``meteor=False``), and a METEOR implementation asked for but
    unavailable (``meteor_unavailable`` = ``{name: reason}``).  The message names each group and the metrics
    still available.
    """
    if not only:
        return None
    unknown = [m for m in only if m not in METRIC_NAMES]
    no_hodosh = [m for m in only if m in _HODOSH_METRICS and not hodosh]
    unavailable = meteor_unavailable or {}
    no_meteor = [m for m in only if m in METEOR_NAMES and not meteor]
    missing = [m for m in only if m in unavailable and meteor]
    parts = []
    if unknown:
        parts.append(f"unknown metric(s) {unknown}")
    if no_hodosh:
        parts.append(f"metric(s) {no_hodosh} excluded by --no-hodosh")
    if no_meteor:
        parts.append(f"metric(s) {no_meteor} excluded by --no-meteor")
    for m in missing:
        parts.append(f"metric {m!r} unavailable ({unavailable[m]})")
    if not parts:
        return None
    available = [m for m in METRIC_NAMES
                 if (hodosh or m not in _HODOSH_METRICS)
                 and (m not in METEOR_NAMES or (meteor and m not in unavailable))]
    return "; ".join(parts) + f"; available: {available}"


def selected_metrics(*, meteor: bool = True, hodosh: bool = True, only: list[str] | None = None,
                     progress: bool = False) -> dict:
    """The metrics :func:`metric_table` computes, ``{name: metric(candidates, references)}``.

    Raises ``ValueError`` (:func:`metric_selection_error`) when ``only`` cannot be computed.
    """
    metrics = dict(_BASE_METRICS)
    meteors, unavailable = meteor_metrics(progress) if meteor else ({}, {})
    if hodosh:
        metrics.update(_HODOSH_METRICS)
    if only:
        err = metric_selection_error(only, meteor=meteor, hodosh=hodosh, meteor_unavailable=unavailable)
        if err:
            raise ValueError(err)
        return {m: {**metrics, **meteors}[m] for m in only}
    if meteor:
        if METEOR15_NAME in meteors:
            metrics[METEOR15_NAME] = meteors[METEOR15_NAME]
        else:
            print(f"[caption_metrics_vs_humans] official METEOR unavailable: {unavailable[METEOR15_NAME]}; "
                  f"reporting the {METEOR_NAME}", file=sys.stderr)
            if METEOR_NAME in meteors:
                metrics[METEOR_NAME] = meteors[METEOR_NAME]
            else:
                print(f"[caption_metrics_vs_humans] METEOR skipped: {unavailable[METEOR_NAME]}", file=sys.stderr)
    return metrics


def metric_table(corpus, *, meteor: bool = True, hodosh: bool = True, cache=None,
                 progress: bool = True, only: list[str] | None = None, cf_references: str = "image") -> dict:
    """τ-b / τ-c (×100) of every metric on Flickr8k-Expert and Flickr8k-CF.

    Returns ``{metric: {"expert_tau_b", "expert_tau_c", "cf_tau_b", "cf_tau_c", "n_expert", "n_cf",
    "cf_references"}}`` (``cf_references``: the CF reference rule behind the CF values, ``None`` without CF)
    plus, under the key ``"_rows"``, the two :class:`~evaluation.correlation.JudgmentRows` (and under
    ``"_cf_references"`` the CF reference rule).  A corpus
    without expert (``ExpertAnnotations.txt``) or without crowd judgments (``CrowdFlowerAnnotations.txt``)
    gets ``None`` for that protocol's values and rows; one without either raises ``ValueError``.
    ``cf_references``: the CF reference rule of :func:`~evaluation.correlation.flickr8k_cf_rows`.

    Raises ``ValueError`` (message from :func:`metric_selection_error`) when ``only`` names an unknown
    metric, one excluded by ``meteor=False`` / ``hodosh=False``, or a METEOR that is unavailable; this
    is checked before any rows are built or scores computed.  Without ``only`` the METEOR row is the
    official METEOR 1.5 where it can run, else the NLTK variant (the reason is printed).
    """
    metrics = selected_metrics(meteor=meteor, hodosh=hodosh, only=only, progress=progress)
    if not corpus.expert and not corpus.crowd:
        raise ValueError(f"corpus {corpus.name!r} has neither expert judgments ({EXPERT_FILE}) nor crowd "
                         f"judgments ({CROWD_FILE}) to correlate with")
    expert = flickr8k_expert_rows(corpus) if corpus.expert else None
    cf = flickr8k_cf_rows(corpus, references=cf_references) if corpus.crowd else None

    def scores_for(name: str, rows: JudgmentRows) -> np.ndarray:
        _, cands, refs = rows.unique_items()

        def compute():
            t0 = time.time()
            s = metrics[name](cands, refs)
            if progress:
                print(f"  {name:<28s} {rows.protocol:<16s} {len(cands):6d} items  {time.time() - t0:6.1f} s",
                      file=sys.stderr)
            return {"scores": np.asarray(s, dtype=np.float64)}

        if cache is None:
            s = compute()["scores"]
        else:
            key = {"v": _CACHE_VERSION, "corpus": corpus.fingerprint, "protocol": rows.protocol,
                   "metric": name, "n_items": len(cands), "items": rows.items_digest()}
            s = cache.get_or_compute("caption_metrics_vs_humans", key, compute)["scores"]
        return s[rows.pair_index]

    out: dict = {}
    expert_scores: dict[str, np.ndarray] = {}
    for name in metrics:
        row: dict = {}
        for tag, rows in (("expert", expert), ("cf", cf)):
            if rows is None:
                row.update({f"{tag}_tau_b": None, f"{tag}_tau_c": None, f"n_{tag}": None})
                continue
            s = scores_for(name, rows)
            if tag == "expert":
                expert_scores[name] = s
            c = correlations(s, rows.human)
            row.update({f"{tag}_tau_b": round(100 * c["tau_b"], 1), f"{tag}_tau_c": round(100 * c["tau_c"], 1),
                        f"n_{tag}": len(rows)})
        out[name] = {k: row[k] for k in ("expert_tau_b", "expert_tau_c", "cf_tau_b", "cf_tau_c",
                                         "n_expert", "n_cf")}
        # the CF reference rule changes the CF numbers (CLIPScore's BLEU-4 16.9 vs 17.3), so every row says it
        out[name]["cf_references"] = cf_references if cf is not None else None
    out["_rows"] = (expert, cf)
    out["_cf_references"] = cf_references
    out["_expert_scores"] = expert_scores
    return out


def format_kappa(result: dict, human_thresholds=(3, 4)) -> str:
    """Cohen's κ (Hodosh et al. 2013, Tables 8–10) between each metric binarised at the rate-matched
    threshold and the expert score binarised at ``≥ 3`` (minor errors at most) and ``= 4`` (no errors)."""
    from evaluation.correlation import kappa_sweep

    expert = result["_rows"][0]
    if expert is None:
        return f"Cohen's κ needs the expert judgments ({EXPERT_FILE}), which this corpus does not have"
    w = max(len(n) for n in result["_expert_scores"]) + 2
    head = f"{'metric':<{w}}" + "".join(f"{'κ (expert ≥ %d)' % t:>24}" for t in human_thresholds)
    lines = ["Cohen's κ, Flickr8k-Expert rows, metric binarised at the rate-matched threshold", head,
             "-" * len(head)]
    for name, sc in result["_expert_scores"].items():
        cells = [kappa_sweep(sc, expert.human, human_threshold=t)[0] for t in human_thresholds]
        lines.append(f"{name:<{w}}" + "".join(f"{c['kappa']:.3f} (θ={c['threshold']:.3g})".rjust(24)
                                               for c in cells))
    return "\n".join(lines)


def format_table(result: dict) -> str:
    expert, cf = result["_rows"]
    names = [k for k in result if not k.startswith("_")]
    w = max(len(n) for n in names) + 2
    head = (f"{'metric':<{w}}{'Expert τ-c':>12}{'Expert τ-b':>12}{'CF τ-b':>10}{'CF τ-c':>10}")
    lines = ["Correlation with human judgments (Kendall τ × 100)", head, "-" * len(head)]

    def cell(v, width):
        return f"{'–' if v is None else f'{v:.1f}':>{width}}"

    for n in names:
        r = result[n]
        lines.append(f"{n:<{w}}{cell(r['expert_tau_c'], 12)}{cell(r['expert_tau_b'], 12)}"
                     f"{cell(r['cf_tau_b'], 10)}{cell(r['cf_tau_c'], 10)}")
    used = [f"Flickr8k-Expert n_expert = {len(expert)} ({expert.n_pairs} pairs × 3 scores; "
            f"{expert.n_skipped_pairs} pairs skipped)" if expert is not None
            else f"Flickr8k-Expert: – (no {EXPERT_FILE})",
            f"Flickr8k-CF n_cf = {len(cf)} (judged own captions removed from the references per "
            f"{result['_cf_references']})" if cf is not None else f"Flickr8k-CF: – (no {CROWD_FILE})"]
    lines.append("rows used: " + ", ".join(used))
    lines.append("primary statistic: τ-c for Expert, τ-b for CF")
    return "\n".join(lines)


def pool_statistics(corpus, split: str = "test") -> dict:
    from corpora.protocol import hodosh_pool, relevance_stats

    pool = hodosh_pool(corpus, split)
    return relevance_stats(pool)


def format_pool_statistics(st: dict) -> str:
    c, i = st["captions_by_n_images"], st["images_by_n_captions"]
    return "\n".join([
        f"Hodosh {st['split']} pool relevance (S@k / R-precision): {st['n_images']} images × "
        f"{st['n_captions']} captions, {st['n_relevant_pairs']} relevant pairs "
        f"({st['n_original_pairs']} original + {st['n_extra_pairs']} crowd-judged)",
        f"  captions relevant to 1 / 2 / 3 / ≥4 images: {c['1']} / {c['2']} / {c['3']} / {c['>=4']}"
        + (f"  (0: {c['0']})" if c.get("0") else ""),
        f"  images with 1 / 2 / 3 / ≥4 relevant captions: {i['1']} / {i['2']} / {i['3']} / {i['>=4']}"
        + (f"  (0: {i['0']})" if i.get("0") else ""),
        f"  mean images per caption {st['mean_images_per_caption']:.2f}, "
        f"mean captions per image {st['mean_captions_per_image']:.2f}",
    ])


def cache_dir_error(cache_dir: str | None) -> str | None:
    """Why the cache folder (``--cache-dir``, or the default) cannot be used, as the text of one
    ``error:`` line, or ``None`` when it can be created and written."""
    try:
        check_cache_dir(cache_dir)
    except CacheDirError as exc:
        return f"{exc} (pass another --cache-dir, or --no-cache)"
    return None


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m experiments.caption_metrics_vs_humans``."""
    p = argparse.ArgumentParser(prog="python -m experiments.caption_metrics_vs_humans",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True,
                   help="Flickr8k folder: the standard layout (Flickr8k_text/, or its text files in the folder "
                        "itself) or the Kaggle captions.txt layout; the metrics are compared with its "
                        "ExpertAnnotations.txt and CrowdFlowerAnnotations.txt")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--no-meteor", action="store_true",
                   help="skip METEOR (the official METEOR 1.5, and the NLTK variant used without Java / jar)")
    p.add_argument("--no-hodosh", action="store_true", help="skip Hodosh's unigram BLEU / ROUGE")
    p.add_argument("--kappa", action="store_true",
                   help="also print Cohen's κ of binarised metrics vs binarised expert scores (table mode)")
    p.add_argument("--metrics", default=None,
                   help="comma-separated subset of metrics to compute, any case (default: all available, "
                        "one METEOR row): " + "; ".join(METRIC_NAMES))
    p.add_argument("--cf-references", choices=CF_REFERENCE_RULES, default="image",
                   help="Flickr8k-CF: remove a caption judged for its own image from that image's references "
                        "in every row of the image ('image', default: CLIPScore's crowdflower_flickr8k.json, "
                        "the protocol of the published numbers) or in its own row only ('row')")
    b = p.add_argument_group("standard benchmarks (PAC-S Tables 1-3 layout; docs/evaluation.md §7)")
    add_benchmark_file_options(b)
    b.add_argument("--seed", type=seed_value, default=0,
                   help="seed of the benchmarks' random draws (Pascal-50S references, vote ties; 0 ≤ SEED < "
                        "2^31; default 0)")
    p.add_argument("--no-cache", action="store_true", help="do not read or write the disk cache")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress bars or per-metric timings on stderr")
    p.add_argument("--cache-dir", default=None, help="cache root (default $ITR_CACHE_DIR or ~/.cache/...)")
    return p


def load_judged_corpus(data: str):
    """The Flickr8k corpus of ``--data`` with its notes printed, or the one ``error:`` line (``None``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the loader's notes are printed below, once each
            corpus = load_flickr8k(data)
    except (CorpusError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    for note in corpus.notes:
        print(f"note: {note}", file=sys.stderr)
    return corpus


def print_benchmarks(args, result: dict, only: list[str] | None) -> None:
    """The standard benchmarks (``--composite`` / ``--pascal50s`` / ``--foil``) with every text metric, in the
    PAC-S Tables 1-3 layout; a benchmark whose files are malformed is reported and the others still run."""
    loaded = load_benchmarks(composite=args.composite, pascal50s=args.pascal50s, foil=args.foil,
                             foil_coco_captions=args.foil_coco_captions, seed=args.seed)
    expert, cf = result["_rows"]
    benches = {**({"flickr8k_expert": expert} if expert is not None else {}),
               **({"flickr8k_cf": cf} if cf is not None else {}), **loaded.benchmarks}
    metrics = selected_metrics(meteor=not args.no_meteor, hodosh=not args.no_hodosh, only=only,
                               progress=not args.no_progress)
    scorers = {n: text_metric(f, identity={"metric": n}) for n, f in metrics.items()}
    table = benchmark_table(scorers, benches, seed=args.seed)
    if args.json:
        print(json.dumps({"benchmarks": table, "benchmark_errors": {k: str(e) for k, e in loaded.errors.items()}},
                         default=str))
    else:
        print(format_benchmark_table(table, loaded.errors))
        print()


def main(argv=None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    try:   # the main job's list rule: no names ("" or ",") is an error, not "every metric"
        only = None if args.metrics is None else parse_list(args.metrics, (), None, "--metrics",
                                                             split=split_metric_list, keywords=False)
    except OptionError as exc:
        p.error(str(exc))
    # unknown or excluded (--no-hodosh / --no-meteor) names: fail before loading the corpus
    err = metric_selection_error(only, meteor=not args.no_meteor, hodosh=not args.no_hodosh)
    if err:
        p.error(err)
    ensure_nltk_data_path()
    if not Path(args.data).is_dir():
        print(f"error: --data {args.data}: no such folder", file=sys.stderr)
        return 2
    cache_error = None if args.no_cache else cache_dir_error(args.cache_dir)
    if cache_error:
        print(f"error: {cache_error}", file=sys.stderr)
        return 2
    corpus = load_judged_corpus(args.data)
    if corpus is None:
        return 2
    cache = DiskCache(args.cache_dir, enabled=not args.no_cache)
    try:
        result = metric_table(corpus, meteor=not args.no_meteor, hodosh=not args.no_hodosh, cache=cache,
                              only=only, progress=not args.no_progress, cf_references=args.cf_references)
    except MissingResourceError as exc:   # e.g. the stop words of the Hodosh metrics, offline
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        p.error(str(exc))
    print_report(args, corpus, result)
    if args.composite or args.pascal50s or args.foil:
        print_benchmarks(args, result, only)
    return 0


def print_report(args, corpus, result: dict) -> None:
    """The τ table (or JSON), the optional κ sweep and the Hodosh test-pool statistics."""
    try:
        st = pool_statistics(corpus)
    except (CorpusError, ValueError) as exc:  # e.g. no crowd judgments to build the pool's relevance from
        st = None
        print(f"note: no Hodosh test-pool statistics ({exc})", file=sys.stderr)
    if args.json:
        print(json.dumps({k: v for k, v in result.items() if not k.startswith("_")}))
        if st is not None:
            print(format_pool_statistics(st), file=sys.stderr)
        return
    print(format_table(result))
    print()
    if args.kappa:
        print(format_kappa(result))
        print()
    if st is not None:
        print(format_pool_statistics(st))


if __name__ == "__main__":
    sys.exit(main())
