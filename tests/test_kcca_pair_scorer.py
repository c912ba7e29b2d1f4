"""The KCCA affinity f(i, s) (Hodosh Eq. 4) as a per-pair caption scorer (kcca.caption_metric)."""
from __future__ import annotations

import numpy as np
import pytest

from corpora.scoring import PairScorer
from kcca.caption_metric import KCCACaptionMetric, pair_scorer
from kcca.kernel_store import KernelStore
from kcca.systems import run_system
from kernels.threads import ENV as THREADS_ENV

GRID = dict(kappas=(1.0,), ns=(5, 10, 20), powers=(2,), diag_factors=(1.0,))


@pytest.fixture(scope="module")
def trained(small_teaching_set, tmp_path_factory):
    from corpora.cache import DiskCache
    from corpora.protocol import hodosh_pool

    corpus = small_teaching_set
    cache = DiskCache(tmp_path_factory.mktemp("pair_scorer_cache"))
    pools = {s: hodosh_pool(corpus, s, seed=0) for s in ("dev", "test")}
    store = KernelStore()
    run = run_system("BoW5", corpus, cache=cache, store=store, pools=pools, **GRID)
    return corpus, pools, run, store, cache


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_scores_equal_the_chosen_models_affinity_matrix(trained):
    corpus, pools, run, store, _ = trained
    fn = pair_scorer(run, corpus, store=store, criterion="R@1")
    assert isinstance(fn, KCCACaptionMetric) and isinstance(fn, PairScorer)
    info = fn.model
    assert info["task"] == "annotation" and info["kappa"] == 1.0 and info["n"] in (5, 10, 20)
    best = run.selection.table.best("annotation", "R@1")
    assert (info["kappa"], info["n"]) == (best["kappa"], best["n"])
    # reference: the chosen model's Eq. 4 affinity over the test pool, from the kernel rows run_system used
    pool = pools["test"]
    Kx = store.image_rows("pyramid", "test", pool.image_ids, run.config["image_power"])
    Ky = store.text_queries("BoW5", "test", pool.captions)
    S = run.models[info["kappa"]].affinity(Kx, Ky, info["n"])
    assert S.shape == (pool.n_images, pool.n_captions)
    # every (image, caption) pair, given as texts, in a shuffled order
    ii, jj = np.meshgrid(np.arange(pool.n_images), np.arange(pool.n_captions), indexing="ij")
    order = np.random.default_rng(0).permutation(ii.size)
    ii, jj = ii.ravel()[order], jj.ravel()[order]
    scores = fn([pool.image_ids[i] for i in ii], [pool.captions[j].text for j in jj], [[]] * ii.size)
    assert scores.dtype == np.float32 and scores.shape == (ii.size,)
    np.testing.assert_allclose(scores, S[ii, jj], atol=1e-5, rtol=0)
    assert np.all(np.abs(scores) <= 1 + 1e-6)
    assert len(fn([], [], [])) == 0
    with pytest.raises(ValueError, match="candidates"):
        fn(["a"], [], [])


def test_identity_is_the_jsonable_description_cached_scores_are_keyed_by(trained):
    """KCCACaptionMetric.identity: the model, the run config, the training images and the visual-word
    codebooks (what the main job's cached human-judgment scores are keyed by), JSON-serialisable."""
    import json

    corpus, _, run, store, _ = trained
    fn = pair_scorer(run, corpus, store=store)
    ident = fn.identity
    assert set(ident) == {"kcca", "config", "train", "codebooks"}
    assert ident["kcca"] == fn.model and ident["train"] == list(corpus.split("train"))
    assert ident["config"]["image_power"] == run.config["image_power"]
    assert ident["codebooks"] == store.image_entry("pyramid").kernel.codebook_digests() and ident["codebooks"]
    json.dumps(ident)
    assert pair_scorer(run, corpus, store=store, criterion="R@10").identity["kcca"]["criterion"] == "R@10"


def test_free_text_candidates_are_lemmatised_by_the_text_kernel(trained, nltk_data_dir):
    from corpora.base import Caption
    from kcca.caption_metric import query_caption

    corpus, pools, run, store, _ = trained
    pool = pools["test"]
    lookup = {c.text: c for caps in corpus.captions.values() for c in caps}
    own = pool.captions[0]
    assert query_caption(own.text, lookup) is lookup[own.text]                   # corpus lemma / POS reused
    assert query_caption("  " + own.text.upper() + " ", {" ".join(own.text.lower().split()): own}) is own
    free_text = "Two green diamonds are sitting on the snowy ground."
    q = query_caption(free_text, lookup)
    assert q.lemma is None and q.text == free_text
    fn = pair_scorer(run, corpus, store=store)
    # the text kernel lemmatises the free text ("diamonds" -> "diamond", "sitting" -> "sit"): the same
    # score as the already-lemmatised sentence
    lemmatised = Caption(id="lemmatised", image_id="", index=0, text=free_text,
                         lemma="Two green diamond be sit on the snowy ground .")
    s_free = fn([pool.image_ids[0]] * 2, [free_text, own.text], [[], []])
    assert np.isfinite(s_free).all()
    q_rows = store.text_entry("BoW5").kernel.gram_queries([q, lemmatised])
    np.testing.assert_allclose(q_rows[0], q_rows[1], atol=1e-6)
    assert q_rows[0].max() > 0


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_correlates_with_the_teaching_sets_expert_judgments(trained):
    from evaluation.correlation import flickr8k_expert_rows, human_correlation

    corpus, _, run, store, _ = trained
    rows = flickr8k_expert_rows(corpus)
    fn = pair_scorer(run, corpus, store=store)
    hc = human_correlation(rows, fn)
    assert hc["n"] == len(rows) and hc["tau_b"] > 0, hc   # measured: 0.23 (CF: 0.18)
    # kernel rows are kept in the kernel store: a second scorer over the same kernels computes nothing new
    shared = store.image_entry("pyramid").pair_feature_rows
    assert set(rows.image_ids) <= set(shared)
    n_before = len(shared), len(store.text_entry("BoW5").pair_rows)
    again = pair_scorer(run, corpus, store=store, criterion="R@10")
    again(rows.image_ids[:5], rows.candidates[:5], rows.references[:5])
    assert (len(shared), len(store.text_entry("BoW5").pair_rows)) == n_before


def test_nn_systems_and_bad_arguments_raise(trained):
    corpus, pools, run, store, cache = trained
    nn = run_system("NN5_F1", corpus, cache=cache, store=store, pools=pools)
    with pytest.raises(ValueError, match="nearest-neighbour"):
        pair_scorer(nn, corpus, store=store)
    with pytest.raises(ValueError, match="criterion"):
        pair_scorer(run, corpus, store=store, criterion="R@3")
    with pytest.raises(ValueError, match="image kernel"):
        pair_scorer(run, corpus, store=KernelStore())


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_released_models_are_refitted_with_the_same_numbers(trained):
    """SystemRun.release_models frees the fitted KCCA models (the main job does so after each system);
    the pair scorer then refits its model from the kept decompositions and scores exactly as before."""
    corpus, pools, run, store, _ = trained
    pool = pools["test"]
    ids = [pool.image_ids[i % pool.n_images] for i in range(12)]
    caps = [pool.captions[(5 * i) % pool.n_captions].text for i in range(12)]
    kappa = run.selection.table.best("annotation", "R@1")["kappa"]
    before_model = run.models[kappa]
    before = pair_scorer(run, corpus, store=store)(ids, caps, [[]] * 12)
    run.release_models()
    assert not run.models.fitted                      # nothing fitted is kept
    fn = pair_scorer(run, corpus, store=store)
    after = fn(ids, caps, [[]] * 12)
    refit = run.models.fitted[kappa]
    assert refit is not before_model
    np.testing.assert_array_equal(after, before)
    np.testing.assert_array_equal(refit.correlations_, before_model.correlations_)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_main_job_keeps_only_what_the_pair_scorers_need(small_teaching_set, tmp_cache, caplog, monkeypatch):
    """experiments.classical_stage.run_classical releases every system's fitted KCCA models and dev-pool
    matrices once its test rankings exist and drops a text kernel after its last system unless a KCCA pair scorer needs it (on
    Flickr8k the models took about 1 GB per system, so --systems all ran out of memory); the pair
    scorers built afterwards still score, refitting one model each."""
    from corpora.protocol import hodosh_pool
    from evaluation import evaluate_pool
    from experiments.classical_stage import best_kcca_system, kcca_pair_scorers, run_classical
    from experiments.evaluation_stage import metrics_json
    from experiments.options import RunOptions

    corpus = small_teaching_set
    pools = {s: hodosh_pool(corpus, s, seed=0) for s in ("dev", "test")}
    args = RunOptions(seed=0, no_progress=True, skip_missing_images=False, full_selection=False)
    names = ["BoW1", "BoW5", "TRI5^Histo", "NN5_F1^idf", "TRI5"]
    import gc

    from kernels.text import TextKernel

    import experiments.classical_stage as stage
    from kcca.kernel_store import ImageKernelEntry

    done, released = [], []
    real_run_systems, real_release = stage.run_systems, ImageKernelEntry.release_rows

    def counting(*a, **k):
        for r in real_run_systems(*a, **k):
            done.append(r.name)
            yield r

    monkeypatch.setattr(stage, "run_systems", counting)
    monkeypatch.setattr(ImageKernelEntry, "release_rows",
                        lambda self: released.append((self.kernel.kind, len(done))) or real_release(self))
    older = {id(o) for o in gc.get_objects() if isinstance(o, TextKernel)}   # e.g. other tests' fixtures
    outputs, runs, store = run_classical(corpus, pools, names, args, tmp_cache)
    assert list(runs) == names
    # an image kernel's kept training histograms serve all its systems (the NN baseline's pool rows, the
    # low-rank columns) and are released after the last one: histogram after TRI5^Histo, pyramid after TRI5
    assert released == [("histogram", 3), ("pyramid", 5)]
    assert all(not r.models.fitted for n, r in runs.items() if n != "NN5_F1^idf")
    # nor their dev-pool matrices (the selection is made; at COCO size 200 MB per system)
    assert all(r.dev_matrices is None and getattr(r.selection, "dev_matrices", None) is None for r in runs.values())
    systems_json = {n: {"annotation": metrics_json(evaluate_pool(o.test, pools["test"])["annotation"])}
                    for n, o in outputs.items()}
    kcca = [n for n in names if n != "NN5_F1^idf"]
    best = best_kcca_system({n: systems_json[n]["annotation"]["R@10"] for n in kcca})
    from kcca.systems import get_system

    assert store.text_names() == {get_system(best).text}              # every other text kernel was dropped
    gc.collect()   # ... and freed: nothing (e.g. a run's refit closure) keeps a dropped kernel alive
    assert sum(isinstance(o, TextKernel) and id(o) not in older for o in gc.get_objects()) == 1
    assert store.image_kinds() == {"pyramid", "histogram"}
    scorers = kcca_pair_scorers(corpus, runs, store, systems_json)
    assert list(scorers) == [f"KCCA f(i,s) [{best}]"]
    pool = pools["test"]
    s = scorers[f"KCCA f(i,s) [{best}]"](list(pool.image_ids[:3]), [c.text for c in pool.captions[:3]], [[]] * 3)
    assert s.shape == (3,) and np.isfinite(s).all()
    assert len(runs[best].models.fitted) == 1
    # a caller whose choice differs gets a warning, not an error at the end of a long run
    other = next(n for n in kcca if get_system(n).text != get_system(best).text)
    fake = {n: {"annotation": {"R@10": 100.0 if n == other else 0.0}} for n in kcca}
    with caplog.at_level("WARNING"):
        assert kcca_pair_scorers(corpus, runs, store, fake) == {}
    assert "no longer in memory" in caplog.text
    # without pair scorers (Flickr30k, COCO: no judgments) an image kernel goes with its last system
    monkeypatch.setattr(stage, "pair_scorers_wanted", lambda corpus, options: False)
    done.clear(), released.clear()
    _, _, bare = run_classical(corpus, pools, ["BoW1", "NN5_F1^idf", "TRI5^Histo"], args, tmp_cache)
    assert released == [("pyramid", 2), ("histogram", 3)] and bare.image_kinds() == set()
    assert bare.text_names() == set()


def test_wordnet_warm_up_only_on_a_cold_run_with_a_d_ext_kernel(small_teaching_set, tmp_cache, monkeypatch):
    """The classical stage loads WordNet (a D_ext word kernel lemmatises Brown with it) on a daemon thread
    only while the image codebooks must be fitted and the job has more than one thread: never on a warm
    run, never without D_ext, never with ITR_NUM_THREADS=1."""
    from corpora.protocol import train_items
    from experiments.classical_stage import needs_wordnet, start_warm_up
    from experiments.options import RunOptions
    from kcca.kernel_store import KernelStore

    opts = RunOptions(seed=0, no_progress=True)
    assert not needs_wordnet(["BoW1", "NN5_F1", "TagRank", "TRI5_A"])
    assert needs_wordnet(["BoW5", "TRI5SEM"]) and needs_wordnet(["TRI5_D_ext"])
    assert start_warm_up(small_teaching_set, ["BoW1"], opts, tmp_cache) is None      # nothing to load
    monkeypatch.setenv(THREADS_ENV, "1")
    assert start_warm_up(small_teaching_set, ["TRI5SEM"], opts, tmp_cache) is None   # no core to spare
    monkeypatch.setenv(THREADS_ENV, "2")
    cold = start_warm_up(small_teaching_set, ["TRI5SEM"], opts, tmp_cache)
    assert cold is not None and cold.daemon
    cold.join()
    KernelStore().image("pyramid", small_teaching_set, train_items(small_teaching_set).image_ids, seed=0,
                        cache=tmp_cache)
    assert start_warm_up(small_teaching_set, ["TRI5SEM"], opts, tmp_cache) is None   # codebooks cached
