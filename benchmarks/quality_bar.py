"""The R-precision orderings of issue 6's quality bar (§5), measured on the fixed test pool *and* on every
caption of the test split (the bar's other parts — every KCCA system above NN on R@10 and median rank, far
above chance — are asserted by ``tests/test_quality_bar.py``, not measured here).

Usage::

    python benchmarks/quality_bar.py                  # default teaching set (seed 0), ~2 min on 2 cores
    python benchmarks/quality_bar.py --seed 1 --json  # another teaching set; one JSON object on stdout
    python benchmarks/quality_bar.py --n-train 700    # train on the first 700 training images only

Runs the KCCA systems of ``tests/test_quality_bar.py`` (same settings: ``powers=(2,)``,
``diag_factors=(1.0,)``, ``pd_kappas=(1.0,)``, float32 KCCA, dev pool ``hodosh_pool(ts, "dev", seed=0)``)
(among them ``TRI5^sqrtidf``, the √idf word weights alone) plus ``TRI5_{A,D_ext+ic}`` (the lexical
similarities alone): the two split TRI5SEM's change against TRI5 into its parts.  Each trained system is scored on

* the **fixed pool** (``hodosh_pool(ts, "test")``: one seeded caption per image, the protocol of the
  paper and of the test), and
* the five **caption pools** (:func:`corpora.protocol.caption_pools`: pool k = caption k of every test
  image, so each of the 1,500 test captions is a query once).

It prints R-precision (%) per system, then every ordering ``a ≥ b`` as the difference on the fixed pool,
the mean difference over the caption pools and the per-pool differences; an ordering whose difference is
negative with p < 0.05 is flagged "significantly reversed" (on the fixed pool, that is what
``tests/test_quality_bar.py`` fails on).  A difference whose sign
changes across the caption pools is within the noise of *which caption* each image contributes, whatever
the fixed pool says.  Each difference also gets a two-sided p-value from Fisher's paired randomisation
test on per-query R-precision (:func:`evaluation.significance.paired_randomization_test`, the test the
evaluator uses for R-precision; 10,000 reassignments, seed 0): on the fixed pool over its 300 queries, and
for the caption-pool mean over the 300 test images, each image's values averaged over the five pools
first (annotation: the image as query in every pool; search: its five captions as queries), since the
five pools share their images and are not independent samples.  ``--n-train N`` trains every system on the first N images of the training split
only (dev and test unchanged, so the comparison with the full split is paired).  JSON keys: ``seed``,
``n_train``, ``systems`` (name -> ``{"fixed": {task: R-prec},
"pools": [{task: R-prec}, ...], "mean": {task: R-prec}}``), ``orderings`` (list of ``{"task", "a", "b",
"fixed", "mean", "pools", "p_fixed", "p_mean", "paper"}``; ``paper`` is true for the ten orderings the issue requires),
``wall_s``.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TASKS = ("annotation", "search")
SYSTEMS = ("BoW1", "BoW5", "TRI5", "TRI5SEM", "BoW5^Histo", "TRI5^Histo", "TRI5^sqrtidf", "TRI5_A,D_ext+ic")
#: (a, b, required by the issue): a ≥ b on R-precision for both tasks
#: The lexical-similarity claim is tested at equal word weights (TRI5SEM vs TRI5^sqrtidf); the √idf
#: weights alone (TRI5 vs TRI5^sqrtidf) and TRI5SEM vs TRI5 are reported, not required.
ORDERINGS = (("TRI5SEM", "TRI5^sqrtidf", True), ("TRI5", "BoW5", True), ("BoW5", "BoW1", True),
             ("BoW5", "BoW5^Histo", True), ("TRI5", "TRI5^Histo", True),
             ("TRI5", "TRI5^sqrtidf", False), ("TRI5SEM", "TRI5", False), ("TRI5_A,D_ext+ic", "TRI5", False))


#: p below which a negative difference counts as a significantly reversed ordering (tests/test_quality_bar.py
#: fails on it, on the fixed pool)
REVERSED_P = 0.05


def first_train(corpus, n: int | None):
    """``corpus`` with its training split cut to its first ``n`` images (:meth:`Corpus.with_splits`:
    dev, test and images unchanged, the fingerprint covers the cut)."""
    train = corpus.splits["train"]
    if n is None or n == len(train):
        return corpus
    if not 1 <= n <= len(train):
        raise ValueError(f"--n-train {n}: the training split has {len(train)} images")
    return corpus.with_splits(train=train[:n])


def ordering_test(a: list[np.ndarray], b: list[np.ndarray], *, n_resamples: int = 10_000,
                  seed: int = 0) -> tuple[float, float]:
    """Two-sided p-values of ``R-prec(a) − R-prec(b)`` on the fixed pool and on the caption-pool mean.

    Parameters
    ----------
    a, b : lists of 1-D arrays
        Per-query R-precision of the two systems: element 0 on the fixed pool, elements 1.. on the caption
        pools, where position ``j`` of every caption pool is test image ``j`` (its query in annotation,
        its caption in search; :func:`corpora.protocol.caption_pools`).

    Returns
    -------
    (p_fixed, p_mean)
        Fisher's paired randomisation test of the mean difference over the fixed pool's queries, and over
        the images with each image's values averaged over the caption pools (one paired unit per image).
    """
    from evaluation.significance import paired_randomization_test

    if len(a) != len(b) or len(a) < 2:
        raise ValueError("ordering_test: need the fixed pool and at least one caption pool for both systems")
    p_fixed = paired_randomization_test(a[0], b[0], "mean", n_resamples=n_resamples, seed=seed).pvalue
    ma, mb = np.mean(np.stack(a[1:]), axis=0), np.mean(np.stack(b[1:]), axis=0)
    p_mean = paired_randomization_test(ma, mb, "mean", n_resamples=n_resamples, seed=seed).pvalue
    return float(p_fixed), float(p_mean)


def _p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="teaching-set seed (default 0: the default set)")
    ap.add_argument("--n-train", type=int, default=None, metavar="N",
                    help="train on the first N images of the training split only; dev and test stay the same "
                         "(default: the whole split, 1,400 images)")
    ap.add_argument("--cache", default=None,
                    help="cache directory for kernels and KCCA runs (default: a temporary directory)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    args = ap.parse_args(argv)

    from corpora.cache import DiskCache
    from corpora.protocol import caption_pools, hodosh_pool
    from corpora.teaching import make_teaching_set
    from evaluation.ranking import evaluate_pool
    from kcca.kernel_store import KernelStore
    from kcca.systems import run_system

    t0 = time.perf_counter()
    if args.cache is None:   # removed on any exit, interrupted runs included
        with tempfile.TemporaryDirectory(prefix="itr_quality_bar_") as tmp:
            return main([*(argv if argv is not None else sys.argv[1:]), "--cache", tmp])
    cache = DiskCache(args.cache)
    ts = first_train(make_teaching_set(seed=args.seed), args.n_train)
    dev = hodosh_pool(ts, "dev", seed=0)
    tests = [hodosh_pool(ts, "test", seed=0), *caption_pools(ts, "test")]
    store = KernelStore()
    rp = {name: [] for name in SYSTEMS}
    per_q = {name: {t: [] for t in TASKS} for name in SYSTEMS}   # per-query R-precision, pool by pool
    for name in SYSTEMS:
        for pool in tests:   # the model is trained once; later pools reuse the cached decompositions
            run = run_system(name, ts, seed=0, cache=cache, store=store,
                             pools={"dev": dev, "test": pool}, pd_kappas=(1.0,), powers=(2,), diag_factors=(1.0,),
                             kcca_kwargs={"dtype": "float32", "jitter": "auto"})
            ev = evaluate_pool(run.test_matrices, pool)
            rp[name].append({t: float(ev[t].metrics["R-precision"]) for t in TASKS})
            for t in TASKS:
                per_q[name][t].append(np.asarray(ev[t].per_query("R-precision"), dtype=np.float64))
        if not args.json:
            print(f"  {name:<16} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    out = {"seed": args.seed, "n_train": len(ts.splits["train"]), "systems": {}, "orderings": []}
    for name, vals in rp.items():
        out["systems"][name] = {"fixed": vals[0], "pools": vals[1:],
                                "mean": {t: float(np.mean([v[t] for v in vals[1:]])) for t in TASKS}}
    for a, b, paper in ORDERINGS:
        for t in TASKS:
            d = [x[t] - y[t] for x, y in zip(rp[a], rp[b])]
            p_fixed, p_mean = ordering_test(per_q[a][t], per_q[b][t])
            out["orderings"].append({"task": t, "a": a, "b": b, "paper": paper, "fixed": d[0],
                                     "mean": float(np.mean(d[1:])), "pools": d[1:],
                                     "p_fixed": p_fixed, "p_mean": p_mean})
    out["wall_s"] = time.perf_counter() - t0
    if args.json:
        print(json.dumps(out, indent=1))
        return out
    print(f"\nR-precision (%) on the teaching set (seed {args.seed}, {out['n_train']} training images): "
          "fixed pool | mean ± sd over the 5 caption pools")
    print(f"{'system':<16} {'annotation':>24} {'search':>24}")
    for name, s in out["systems"].items():
        cells = [f"{s['fixed'][t]:5.1f} | {s['mean'][t]:5.1f} ± {np.std([p[t] for p in s['pools']]):3.1f}" for t in TASKS]
        print(f"{name:<16} {cells[0]:>24} {cells[1]:>24}")
    print("\nOrderings a >= b: difference on the fixed pool (p) | mean over the caption pools (p) [per pool]"
          "  (* = required by the issue; p: paired randomisation test, two-sided)")
    for o in out["orderings"]:
        flag = "" if o["fixed"] >= 0 and o["mean"] >= 0 else "   <- fails" + (" (fixed)" if o["fixed"] < 0 else "") + \
            (" (mean)" if o["mean"] < 0 else "")
        reversed_ = [w for w in ("fixed", "mean") if o[w] < 0 and o[f"p_{w}"] < REVERSED_P]
        if reversed_:   # what tests/test_quality_bar.py fails on (there: the fixed pool only)
            flag += f", significantly reversed ({', '.join(reversed_)})"
        print(f"{'*' if o['paper'] else ' '} {o['task']:<10} {o['a']:>15} >= {o['b']:<15} {o['fixed']:+5.1f} "
              f"({_p(o['p_fixed'])}) | {o['mean']:+5.1f} ({_p(o['p_mean'])}) [{' '.join(f'{x:+.1f}' for x in o['pools'])}]{flag}")
    print(f"\nwall time {out['wall_s']:.0f} s")
    return out


if __name__ == "__main__":
    main()
