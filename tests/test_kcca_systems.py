"""The Appendix-B system registry and run_system (kcca/systems.py)."""
from __future__ import annotations

import numpy as np
import pytest

from kcca.kernel_store import KernelStore
from kcca.systems import PAPER_TABLE_ORDER, SYSTEMS, canonical_name, get_system, run_system


def test_registry_has_the_paper_systems_and_aliases():
    must = ["NN5_F1", "NN5_F1^idf", "NN5_BoW5", "NN5_TRI", "BoW1", "TRI1", "BoW5^Histo", "BoW5",
            "BoW5^idf", "BoW5^sqrtidf", "TagRank", "TRI5^Histo", "TRI5", "TRI5_Lin", "TRI5_D_ext",
            "TRI5_D_ic", "TRI5_D_ext+ic", "TRI5_A", "TRI5_A,D_ic", "TRI5_A,D_ext", "TRI5_A,D_ext+ic",
            "TRI5_A^sqrtidf", "TRI5_D_ic^sqrtidf", "TRI5SEM"]
    for n in must:
        assert n in SYSTEMS and n in PAPER_TABLE_ORDER
    assert len(PAPER_TABLE_ORDER) == len(set(PAPER_TABLE_ORDER)) >= 30
    assert canonical_name("BoW5^{√idf}") == "BoW5^sqrtidf"
    assert canonical_name("TRI5_{A,D_{ext}+ic}^{\\sqrt{idf}}") == "TRI5SEM"
    assert canonical_name("TRI5_{D_BNC}") == "TRI5_D_ext"
    assert canonical_name("NN5_F1^{idf}") == "NN5_F1^idf"
    assert canonical_name("tri5^histo") == "TRI5^Histo"
    # TRI5SEM's long name, in any case and spelling, is TRI5SEM (registered once, under that name)
    for long in ("TRI5_A,D_ext+ic^sqrtidf", "tri5_a,d_ext+ic^sqrtidf", "TRI5_{A,D_{BNC}+D_{ic}}^{√idf}",
                 "tri5_a,d_bnc,ic^sqrtidf"):
        assert canonical_name(long) == "TRI5SEM", long
    assert set(PAPER_TABLE_ORDER) <= set(SYSTEMS) and len(PAPER_TABLE_ORDER) == 30
    sem = get_system("TRI5SEM")
    assert sem.model == "kcca" and sem.image_kind == "pyramid" and sem.text == "TRI5SEM"
    assert get_system("BoW5^Histo").image_kind == "histogram"
    assert get_system("NN5_F1^idf").model == "nn" and get_system("NN5_F1^idf").nn_variant == "NN5_F1_idf"
    with pytest.raises(ValueError, match="unknown system"):
        canonical_name("TRI7")


def test_every_text_name_is_known_to_the_text_kernels():
    from kernels.text import TextKernel

    for cfg in SYSTEMS.values():
        if cfg.model == "kcca":
            tk = TextKernel.from_name(cfg.text)
            assert tk.kind in ("BoW", "TRI", "TagRank")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_run_system_on_the_small_teaching_set(small_teaching_set, tmp_cache):
    from corpora.protocol import hodosh_pool
    from evaluation import ScoreMatrices, evaluate_pool

    corpus = small_teaching_set
    pools = {s: hodosh_pool(corpus, s, seed=0) for s in ("dev", "test")}
    store = KernelStore()
    nn = run_system("NN5_F1^idf", corpus, cache=tmp_cache, store=store, pools=pools)
    run = run_system("BoW5", corpus, cache=tmp_cache, store=store, pools=pools, diag_factors=(1.0, 5.0))
    n_test = pools["test"].n_images
    for r in (nn, run):
        assert isinstance(r.test_matrices, ScoreMatrices) and r.test_matrices.shape == (n_test, n_test)
        assert r.dev_matrices.shape == (pools["dev"].n_images, pools["dev"].n_captions)
    # the (p, d) grid was searched on dev and the chosen pair is the best one
    assert len(run.grid) == 4 and {(g["p"], g["d"]) for g in run.grid} == {(2, 1.0), (2, 5.0), (3, 1.0), (3, 5.0)}
    assert run.config["dev_score"] == max(g["dev_score"] for g in run.grid)
    assert run.config["image_power"] in (2, 3) and run.config["text_diag"] in (1.0, 5.0)
    assert all(len(v) == 15 for v in run.config["selection"]["chosen"].values())
    # shared state: the pyramid image kernel was fitted once and decomposed once per power
    assert store.has_image("pyramid")
    assert len(store.image_entry("pyramid").views) == 2
    # far above chance (R@10 chance = 10 / n_test)
    m = evaluate_pool(run.test_matrices, pools["test"])
    chance = 100.0 * 10 / n_test
    assert m["annotation"].metrics["R@10"] > chance + 10 and m["search"].metrics["R@10"] > chance + 10
    # a second run with the same shared dicts reuses everything and gives identical matrices
    again = run_system("BoW5", corpus, cache=tmp_cache, store=store, pools=pools, diag_factors=(1.0, 5.0))
    np.testing.assert_array_equal(again.test_matrices.annotation, run.test_matrices.annotation)
    assert again.timings["decompose"] < 0.5
    # a cheaper (p, d) search with one κ still ends with the full (n, κ) selection of the chosen pair
    quick = run_system("BoW5", corpus, cache=tmp_cache, store=store, pools=pools, diag_factors=(1.0, 5.0),
                       pd_kappas=(1.0,))
    assert all(g["kappas"] == [1.0] for g in quick.grid)
    kappas_used = {c["kappa"] for cs in quick.config["selection"]["chosen"].values() for c in cs}
    assert kappas_used <= {0.1, 0.5, 1.0, 5.0} and len(quick.config["selection"]["n_components"]) == 4
    assert quick.test_matrices.shape == (n_test, n_test)


def test_power_and_diag_ties_go_to_the_smaller_values_whatever_the_grid_order(small_teaching_set, tmp_cache,
                                                                              monkeypatch):
    """Hodosh's (p, d) is chosen on dev; on a tie the smaller p, then the smaller d wins (as
    kcca.selection.choose_power_and_diag), even when the candidate grids are given in descending order."""
    import kcca.systems as systems

    monkeypatch.setattr(systems, "dev_score", lambda res: 1.0)   # every pair ties
    run = run_system("BoW1", small_teaching_set, cache=None, powers=(3, 2), diag_factors=(5.0, 1.0),
                     pd_kappas=(1.0,), kappas=(1.0,), ns=(10, 20))
    assert [(g["p"], g["d"]) for g in run.grid] == [(3, 5.0), (3, 1.0), (2, 5.0), (2, 1.0)]
    assert (run.config["image_power"], run.config["text_diag"]) == (2, 1.0)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cached_run_is_identical_and_refits_models_on_demand(small_teaching_set, tmp_cache):
    """A second run_system with the same settings and cache loads the selection from disk (no KCCA fit),
    returns the same matrices / config, and its lazily refitted models equal the original ones."""
    from corpora.protocol import hodosh_pool
    from kcca.caption_metric import pair_scorer
    from kcca.systems import LazyModels

    corpus = small_teaching_set
    pools = {s: hodosh_pool(corpus, s, seed=0) for s in ("dev", "test")}
    kw = dict(cache=tmp_cache, pools=pools, powers=(2,), diag_factors=(1.0,),
              kcca_kwargs={"dtype": "float32", "jitter": "auto"})
    store1 = KernelStore()
    first = run_system("TRI5", corpus, store=store1, **kw)
    assert list((tmp_cache.root / "kcca_runs").glob("*"))
    store2 = KernelStore()
    second = run_system("TRI5", corpus, store=store2, **kw)
    assert isinstance(second.models, LazyModels) and not second.models.fitted   # nothing fitted yet
    for split in ("test_matrices", "dev_matrices"):
        a, b = getattr(first, split), getattr(second, split)
        np.testing.assert_array_equal(a.annotation, b.annotation)
        np.testing.assert_array_equal(a.search, b.search)
    assert first.config == second.config and first.grid == second.grid
    f1 = pair_scorer(first, corpus, store=store1)
    f2 = pair_scorer(second, corpus, store=store2)
    assert not second.models.fitted and f1.model == f2.model     # making a scorer fits nothing
    ids = list(pools["test"].image_ids[:4])
    caps = [c.text for c in pools["test"].captions[:4]]
    np.testing.assert_allclose(f1(ids, caps), f2(ids, caps), atol=1e-6)
    assert len(second.models.fitted) == 1 and f1.model == f2.model
    # a different setting is a different cache entry
    third = run_system("TRI5", corpus, store=store2, **{**kw, "kcca_kwargs": {"dtype": "float32"}})
    assert len(list((tmp_cache.root / "kcca_runs").glob("*"))) == 2
    assert isinstance(third.models, LazyModels) and len(third.models.fitted) == 4   # a fresh run keeps its fits


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_cached_run_follows_a_replaced_image_file(tmp_path):
    """The run cache covers the pixels, not only captions and splits: replacing a test image file gives
    the same matrices as a run on a fresh cache (it used to return the old image's rankings)."""
    import os

    import cv2

    from corpora.base import Caption, Corpus
    from corpora.cache import DiskCache

    rng = np.random.default_rng(3)
    colours = {"red": (0, 0, 220), "green": (0, 200, 0), "blue": (220, 0, 0), "yellow": (0, 220, 220)}
    names = list(colours)
    folder = tmp_path / "images"
    folder.mkdir()
    ids = [f"im{i:02d}.png" for i in range(14)]
    caps = {}
    for i, im in enumerate(ids):
        a, b = names[i % 4], names[(i // 4) % 4]
        img = np.zeros((60, 80, 3), np.uint8)
        img[:] = colours[a]
        img[15:45, 20:60] = colours[b]
        img[::6] = rng.integers(0, 256, 3)
        assert cv2.imwrite(str(folder / im), img)
        caps[im] = tuple(Caption(f"{im}#{k}", im, k, f"a {b} box on {a} ground picture {k}") for k in range(5))

    def corpus():
        def load(i):
            return cv2.imread(str(folder / i), cv2.IMREAD_COLOR)[:, :, ::-1].copy()
        return Corpus("files", tuple(ids), caps, {"train": tuple(ids[:8]), "dev": tuple(ids[8:11]),
                                                  "test": tuple(ids[11:])},
                      image_loader=load, image_paths={i: folder / i for i in ids})

    kw = dict(fixed_power=2, fixed_diag=1.0, kappas=(0.1,), ns=(2, 3), top=1, show_progress=False,
              image_kwargs={"n_words": {"color": 4, "texture": 4, "sift": 4}, "codebook_images": 8,
                            "n_jobs": 1, "samples_per_image": {"sift": 64}})
    cache = DiskCache(tmp_path / "cache")
    first = run_system("BoW5", corpus(), cache=cache, **kw).test_matrices.annotation
    target = folder / ids[12]
    img = cv2.imread(str(folder / ids[5]))                 # another picture in place of test image 2
    assert cv2.imwrite(str(target), img)
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    again = run_system("BoW5", corpus(), cache=cache, **kw).test_matrices.annotation
    fresh = run_system("BoW5", corpus(), cache=DiskCache(tmp_path / "fresh"), **kw).test_matrices.annotation
    np.testing.assert_array_equal(again, fresh)
    assert not np.array_equal(first, fresh)                # the replacement matters for this pool


def test_run_cache_is_keyed_by_the_codebooks(small_teaching_set, tmp_cache, monkeypatch):
    """Codebooks are cached apart from the runs; a run computed with other visual words (a codebook
    entry rebuilt differently) is a different kcca_runs entry, never the old run read back."""
    from corpora.protocol import hodosh_pool
    from kernels.image import ImageKernel

    corpus = small_teaching_set
    pools = {s: hodosh_pool(corpus, s, seed=0) for s in ("dev", "test")}
    kw = dict(cache=tmp_cache, pools=pools, powers=(2,), diag_factors=(1.0,), kappas=(0.1,), ns=(5, 10),
              top=1, kcca_kwargs={"dtype": "float32"})
    run_system("BoW1", corpus, **kw)
    runs = tmp_cache.root / "kcca_runs"
    assert len(list(runs.glob("*"))) == 1
    run_system("BoW1", corpus, **kw)
    assert len(list(runs.glob("*"))) == 1                      # same codebooks: read back
    real = ImageKernel.codebook_digests
    monkeypatch.setattr(ImageKernel, "codebook_digests",
                        lambda self: {f: "other-" + d for f, d in real(self).items()})
    run_system("BoW1", corpus, **kw)
    assert len(list(runs.glob("*"))) == 2


def test_system_lists_with_commas_inside_names():
    """--systems lists are split on commas, but Hodosh's names contain commas themselves (TRI5_A,D_ext):
    the longest known name wins at each position, in any spelling canonical_name accepts."""
    from kcca.systems import split_system_list

    assert split_system_list("TRI5_A,D_ext,BoW5,TRI5_{A,D_{ext}+ic}^{\\sqrt{idf}},TRI5_A,D_ic^sqrtidf,"
                             " BoW5^√idf,TRI5_A,TRI5") == [
        "TRI5_A,D_ext", "BoW5", "TRI5SEM", "TRI5_A,D_ic^sqrtidf", "BoW5^sqrtidf", "TRI5_A", "TRI5"]
    with pytest.raises(ValueError, match="unknown system 'nonsense'"):
        split_system_list("BoW5,nonsense,TRI5")


def test_kernel_warnings_name_the_kernel():
    from kcca.solver import decompose

    rng = np.random.default_rng(0)
    A = rng.standard_normal((30, 30))
    K = A + A.T   # symmetric, indefinite
    with pytest.warns(RuntimeWarning, match=r"^TRI5SEM text kernel \(d = 1\): kernel matrix is not positive"):
        decompose(K, label="TRI5SEM text kernel (d = 1)")
