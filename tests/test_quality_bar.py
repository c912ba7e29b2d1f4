"""Quality bar on the default teaching set (issue 6, §5): the paper's orderings must show.

Known gap (issue 6 stays open): TRI5SEM ≥ TRI5 holds for image search but not for annotation
(−1.1 R-precision points on the fixed pool of seed 0, −3.9 on average over the five caption pools;
−3.4 / −2.8 on the fixed pools of teaching-set seeds 1 / 2), so only the search half of that ordering is
asserted.  The fixed-pool miss alone is within noise (paired randomisation test p = 0.55), the
caption-pool deficit is not (p < 0.001; docs/teaching_set.md, "Which differences 300 queries can
resolve").  TRI5SEM differs from TRI5 in two ways, measured apart (``benchmarks/quality_bar.py``): the lexical similarities
help (TRI5SEM ≥ TRI5^√idf on both tasks, asserted below), the √idf word weights hurt the subsequence
kernel on the teaching set by about 6 points on both tasks.  Details and the variants tried in
docs/teaching_set.md, "TRI5SEM vs TRI5 on annotation", "Where the √idf penalty lives" (a long tail of
objects gives the captions Flickr8k-like word statistics; the √idf penalty in KCCA stays) and "Training-set
size and image kernel power" (fewer training images or p = 3 narrow the gap but put TRI5 below BoW5).

Runs the required systems (every NN baseline, the main job's KCCA systems and TRI5^√idf) once (module-scoped fixture) on ``make_teaching_set()`` (2000 images, seed 0)
with cheap fixed settings: ``powers=(2,)``, ``diag_factors=(1.0,)``, ``pd_kappas=(1.0,)``,
``kcca_kwargs={"dtype": "float32", "jitter": "auto"}`` (the main job's default), the Hodosh pools of
``hodosh_pool(corpus, split, seed=0)``; image
and text kernels shared across systems and cached under a temporary directory.
"""
from __future__ import annotations

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
    from kcca.systems import run_system

    ts = make_teaching_set()
    pools = {s: hodosh_pool(ts, s, seed=0) for s in ("dev", "test")}
    cache = DiskCache(tmp_path_factory.mktemp("quality_bar_cache"))
    ik, tk, out = {}, {}, {}
    for name in SYSTEMS:
        run = run_system(name, ts, seed=0, cache=cache, image_kernels=ik, text_kernels=tk, pools=pools,
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


@pytest.mark.parametrize("task", ["annotation", "search"])
def test_paper_ordering(results, task):
    rp = {n: _m(results, n, task, "R-precision") for n in ("TRI5SEM", "TRI5", "BoW5", "BoW1")}
    assert rp["TRI5"] >= rp["BoW5"] >= rp["BoW1"], rp


def test_lexical_similarity_helps_search(results):
    rp = {n: _m(results, n, "search", "R-precision") for n in ("TRI5SEM", "TRI5")}
    assert rp["TRI5SEM"] >= rp["TRI5"], rp


@pytest.mark.parametrize("task", ["annotation", "search"])
def test_lexical_similarities_help_at_equal_word_weights(results, task):
    """TRI5SEM = TRI5^√idf + the lexical similarities A, D_ext+ic: the similarities alone must help.

    Measured (benchmarks/quality_bar.py, seed 0): +6.8 / +9.7 R-precision points on the fixed pool,
    +2.1 / +5.4 on average over the five caption pools."""
    assert _m(results, "TRI5SEM", task, "R-precision") >= _m(results, "TRI5^sqrtidf", task, "R-precision")


@pytest.mark.parametrize("task", ["annotation", "search"])
def test_pyramid_beats_histogram(results, task):
    for pyr, histo in (("BoW5", "BoW5^Histo"), ("TRI5", "TRI5^Histo")):
        assert _m(results, pyr, task, "R-precision") >= _m(results, histo, task, "R-precision"), (pyr, task)


@pytest.mark.parametrize("task", ["annotation", "search"])
@pytest.mark.parametrize("name", KCCA)
def test_far_above_chance(results, name, task):
    n = results["_n"]
    chance_r10 = 100.0 * 10 / n
    assert _m(results, name, task, "R@10") > 5 * chance_r10
    assert _m(results, name, task, "median_rank") < n / 10
