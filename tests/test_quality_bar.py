"""Quality bar on the default teaching set (issue 6, §5): the paper's orderings must show.

Every required R-precision ordering (TRI5SEM ≥ TRI5^√idf — the lexical similarities at equal word
weights —, TRI5 ≥ BoW5 ≥ BoW1, pyramid ≥ global histogram, both tasks) is asserted as *not reversed*: a ≥ b, or a − b not significant in the evaluator's paired
randomisation test (p ≥ 0.05).  A strict a ≥ b on 300 queries is not reproducible where the teaching set
shows a tie: OpenCV's SIFT differs in the last bits between AVX-512 and AVX2 code paths, the k-means
codebooks are chaotic in those bits, and the fixed-pool differences move by 2–3 points between
machines (TRI5 − BoW5 on annotation: +0.6 on the machine the docs were first measured on, −1.2 on an
AVX-512 one; docs/teaching_set.md, "How reproducible the numbers are").  The effect the teaching set is
built to show with a wide margin (the spatial pyramid for TRI5) must be positive and significant
(p ≤ 0.1, the paper's weakest marker).  TRI5 vs TRI5^√idf (the √idf word weights alone) and TRI5SEM vs
TRI5 are reported with their p-values, not required.

Measured (IDF over training images, the paper's Lin vectors and noun vocabulary;
``benchmarks/quality_bar.py``, fixed pool | mean over the five caption pools, R-precision points):
TRI5SEM − TRI5^√idf +1.8 (p = 0.29) | +0.4 (p = 0.63) on annotation, +5.9 (p = 0.021) | +3.5
(p = 0.009) on search; TRI5 − TRI5^√idf +2.9 (p = 0.023) | +2.6 (p < 0.001) on annotation, +2.5
(p = 0.24) | +3.2 (p = 0.001) on search.  No required ordering is significantly reversed on either.

Runs the required systems (every NN baseline, the main job's KCCA systems and TRI5^√idf) once (module-scoped fixture) on ``make_teaching_set()`` (2000 images, seed 0)
with cheap fixed settings: ``powers=(2,)``, ``diag_factors=(1.0,)``, ``pd_kappas=(1.0,)``,
``kcca_kwargs={"dtype": "float32", "jitter": "auto"}`` (the main job's default), the Hodosh pools of
``hodosh_pool(corpus, split, seed=0)``; image
and text kernels shared across systems and cached under a temporary directory.
"""
from __future__ import annotations

import numpy as np
import pytest

NN = ("NN5_F1^idf", "NN5_F1", "NN5_BoW5", "NN5_TRI")      # every nearest-neighbour baseline (Appendix B)
KCCA = ("BoW1", "BoW5", "TRI5", "BoW5^Histo", "TRI5^Histo", "TRI5SEM", "TRI5^sqrtidf", "TagRank")
SYSTEMS = NN + KCCA


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    from corpora.cache import DiskCache
    from corpora.protocol import hodosh_pool
    from corpora.teaching import make_teaching_set
    from evaluation.ranking import evaluate_pool
    from kcca.kernel_store import KernelStore
    from kcca.systems import run_system

    ts = make_teaching_set()
    pools = {s: hodosh_pool(ts, s, seed=0) for s in ("dev", "test")}
    cache = DiskCache(tmp_path_factory.mktemp("quality_bar_cache"))
    store, out = KernelStore(), {}
    for name in SYSTEMS:
        run = run_system(name, ts, seed=0, cache=cache, store=store, pools=pools,
                         pd_kappas=(1.0,), powers=(2,), diag_factors=(1.0,),
                         kcca_kwargs={"dtype": "float32", "jitter": "auto"})
        out[name] = evaluate_pool(run.test_matrices, pools["test"])
    out["_n"] = pools["test"].n_images
    return out


def _m(res, name, task, key):
    return res[name][task].metrics[key]


@pytest.mark.parametrize("task", ["annotation", "search"])
@pytest.mark.parametrize("name", KCCA)
def test_kcca_beats_nn(results, name, task):
    """Every KCCA system (the main job's defaults and the √idf contrast) beats every NN baseline."""
    for nn in NN:
        assert _m(results, name, task, "R@10") > _m(results, nn, task, "R@10"), (name, nn)
        assert _m(results, name, task, "median_rank") < _m(results, nn, task, "median_rank"), (name, nn)


#: The paper's R-precision orderings the issue requires (a >= b), both tasks (Hodosh Tables 4, 5, 12).
#: The lexical-similarity claim is tested at equal word weights: TRI5SEM >= TRI5^√idf.
PAPER_ORDERINGS = (("TRI5SEM", "TRI5^sqrtidf"), ("TRI5", "BoW5"), ("BoW5", "BoW1"),
                   ("BoW5", "BoW5^Histo"), ("TRI5", "TRI5^Histo"))
#: Reported with their p-values, not required (the √idf word weights alone, and TRI5SEM against TRI5).
REPORTED = (("TRI5", "TRI5^sqrtidf"), ("TRI5SEM", "TRI5"))


@pytest.fixture(scope="module")
def alpha(benchmark_module):
    """Significance level below which an ordering counts as reversed (two-sided; the same rule flags
    "significantly reversed" in ``benchmarks/quality_bar.py``)."""
    return benchmark_module("quality_bar").REVERSED_P


def _ordering(res, a, b, task):
    """(R-precision difference a − b in points, two-sided p of the evaluator's paired randomisation test)."""
    from evaluation.significance import paired_randomization_test

    x = res[a][task].per_query("R-precision")
    y = res[b][task].per_query("R-precision")
    t = paired_randomization_test(x, y, "mean", n_resamples=10_000, seed=0)
    return 100.0 * float(t.statistic), float(t.pvalue)


@pytest.mark.parametrize("task", ["annotation", "search"])
@pytest.mark.parametrize("a,b", PAPER_ORDERINGS, ids=[f"{a}>={b}" for a, b in PAPER_ORDERINGS])
def test_paper_ordering(results, alpha, a, b, task):
    """No ordering of the paper is reversed: a ≥ b, or a − b is within the noise of 300 queries.

    ``a < b`` fails when the evaluator's paired randomisation test calls the difference significant
    (p < 0.05).  A plain ``a ≥ b`` on 300 queries is a coin flip where the teaching set shows a tie
    (TRI5 vs BoW5 and TRI5SEM vs TRI5 on annotation: −2.5 to +1.8 points over the four codebook draws
    measured on the default set, never significant): the visual-word codebooks are chaotic in the last
    bits of the SIFT descriptors, which OpenCV computes differently on AVX-512 and AVX2 machines, and that
    alone moves these differences by 2–3 points (docs/teaching_set.md, "How reproducible the numbers
    are").
    """
    diff, p = _ordering(results, a, b, task)
    assert diff >= 0 or p >= alpha, f"{a} < {b} on {task} R-precision: {diff:+.1f} points, p = {p:.3g}"


@pytest.mark.parametrize("task", ["annotation", "search"])
def test_designed_effects_are_significant(results, task):
    """The effect the teaching set is built to show with a wide margin must be positive and significant
    at least at the paper's weakest marker (p ≤ 0.1), not just unreversed: the spatial pyramid over
    global histograms for TRI5 (places and relations; default set, four codebook draws: +4.4 to +8.9
    points on annotation, p ≤ 0.039, +10.3 to +11.5 on search, p < 0.001).  The lexical similarities
    under equal (√idf) word weights are required as an ordering (TRI5SEM ≥ TRI5^√idf, not significantly
    reversed: :data:`PAPER_ORDERINGS`), not as a significant effect."""
    for a, b in (("TRI5", "TRI5^Histo"),):
        diff, p = _ordering(results, a, b, task)
        assert diff > 0 and p <= 0.1, f"{a} vs {b} on {task}: {diff:+.1f} points, p = {p:.3g}"


@pytest.mark.parametrize("task", ["annotation", "search"])
@pytest.mark.parametrize("a,b", REPORTED, ids=[f"{a}-vs-{b}" for a, b in REPORTED])
def test_reported_contrasts(results, a, b, task, capsys):
    """TRI5 vs TRI5^√idf (what the √idf word weights cost or gain) and TRI5SEM vs TRI5 are reported with
    their p-values, not required: printed, and only checked to be a finite difference with a p-value."""
    diff, p = _ordering(results, a, b, task)
    with capsys.disabled():
        print(f"\n  {task}: {a} - {b} = {diff:+.1f} R-precision points (p = {p:.3g})")
    assert np.isfinite(diff) and 0.0 < p <= 1.0


@pytest.mark.parametrize("task", ["annotation", "search"])
@pytest.mark.parametrize("name", KCCA)
def test_far_above_chance(results, name, task):
    n = results["_n"]
    chance_r10 = 100.0 * 10 / n
    assert _m(results, name, task, "R@10") > 5 * chance_r10
    assert _m(results, name, task, "median_rank") < n / 10
