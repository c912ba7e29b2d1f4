"""The shipped PAC-S, L-CLIPScore, BRIDGE and SPECS (:mod:`neural.shipped_scorers`: trained once on
:func:`corpora.teaching.scorer_training_set`, fp16) versus the same scorers trained in the run on the
evaluation corpus' train split (``--train-scorers``), on the main job's default teaching corpus (seed 0,
2,000 images, 1,400 / 300 / 300): Flickr8k-Expert τ-c and Flickr8k-CF τ-b (×100,
:func:`experiments.human_stage.human_correlation_table`) and the SPECS specificity rates SR_pos / SR_neg
(:func:`neural.specs.specificity_on_corpus`, test split, 100 images), with CLIP-S on the teaching CLIP
as the reference row; with ``--fp32`` also the shipped scorers trained again and kept in fp32 (what the
fp16 storage costs).

Usage::

    python -m benchmarks.shipped_scorers [--shipped DIR]   # default: the package's neural/weights/scorers
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from corpora.cache import DiskCache
from corpora.teaching import make_teaching_set
from experiments.human_stage import human_correlation_table
from experiments.train_shipped_scorers import train_scorers, training_set


def pair_scorers(scorers: dict, corpus, cache, suffix: str) -> tuple[dict, dict]:
    """``(pair scorers, specificity scorers)`` under ``NAME + suffix``."""
    from neural.base import CorpusPairScorer  # lazy: torch-heavy
    from neural.bridge import BRIDGE, BridgePairScorer

    pair, spec = {}, {}
    for name, sc in scorers.items():
        if isinstance(sc, BRIDGE):
            pair[name + suffix] = BridgePairScorer(sc, corpus)
        else:
            pair[name + suffix] = CorpusPairScorer(sc, corpus, cache, use_references=False)
            spec[name + suffix] = sc
    return pair, spec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.shipped_scorers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shipped", type=Path, default=None,
                    help="folder written by experiments.train_shipped_scorers (default: the package's)")
    ap.add_argument("--seed", type=int, default=0, help="evaluation corpus seed (default %(default)s)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="feature cache (default: none)")
    ap.add_argument("--fp32", action="store_true",
                    help="also train the shipped scorers again on their training set and keep them in fp32")
    ap.add_argument("--json", type=Path, default=None, help="also write the table here")
    args = ap.parse_args(argv)
    from neural.clipscore import CLIPScore  # lazy: torch-heavy
    from neural.registry import shipped_folders
    from neural.shipped_scorers import load_shipped_scorer, read_manifest
    from neural.specs import specificity_on_corpus
    from neural.teaching_clip import load_teaching_clip

    corpus = make_teaching_set(seed=args.seed)
    cache = DiskCache(args.cache_dir) if args.cache_dir else None
    bb = load_teaching_clip(device="cpu", show_progress=False)
    shipped = {m: load_shipped_scorer(m, bb, args.shipped) for m in shipped_folders()}
    inrun, _ = train_scorers(bb, corpus, seed=0, cache=cache, show_progress=False)
    pair, spec = pair_scorers({"CLIP-S": CLIPScore(bb)}, corpus, cache, "")
    groups = [(inrun, " (in-run)"), (shipped, " (shipped)")]
    if args.fp32:
        index = read_manifest(args.shipped)["training_set"]["index"]
        groups.append((train_scorers(bb, training_set(index, None), seed=0, cache=cache, show_progress=False)[0],
                       " (shipped, fp32)"))
    for scorers, suffix in groups:
        p, s = pair_scorers(scorers, corpus, cache, suffix)
        pair.update(p)
        spec.update(s)
    table = human_correlation_table(corpus, pair, image_based=set(pair), cache=None)
    sr = specificity_on_corpus(spec, corpus, "test", max_images=100, seed=0)
    rows = {}
    print(f"{'scorer':<26} {'Expert tau-c':>12} {'CF tau-b':>9} {'SR_pos':>7} {'SR_neg':>7}")
    for name, row in table.items():
        r = {"expert_tau_c": row.get("expert_tau_c"), "cf_tau_b": row.get("cf_tau_b"),
             "SR_pos": float(sr[name]["SR_pos"]) if name in sr else None,
             "SR_neg": float(sr[name]["SR_neg"]) if name in sr else None}
        rows[name] = r
        f = lambda v, k=1: "—" if v is None else f"{v:.{k}f}"  # noqa: E731
        print(f"{name:<26} {f(r['expert_tau_c']):>12} {f(r['cf_tau_b']):>9} "
              f"{f(None if r['SR_pos'] is None else 100 * r['SR_pos']):>7} "
              f"{f(None if r['SR_neg'] is None else 100 * r['SR_neg']):>7}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
