"""Dev-set model selection and Borda ensembles (kcca/selection.py, Hodosh et al. 2013 Sec. 4.1.3)."""
from __future__ import annotations

import numpy as np
import pytest

from corpora.scoring import affinity_gold_ranks
from evaluation import ScoreMatrices, borda, evaluate_pool
from kcca.selection import (
    PAPER_KAPPAS, choose_power_and_diag, fit_models, scale_diagonal, select_and_ensemble,
    select_top, sweep_dev,
)
from kcca.solver import KCCA
from kcca.synthetic import make_two_view, toy_pool


@pytest.fixture(autouse=True, scope="module")
def _one_blas_thread():
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(scope="module")
def split_data():
    ntr, ndv, nte = 240, 60, 60
    d = make_two_view(ntr + ndv + nte, seed=1, n_gamma=ntr, noise=0.4)
    tr, dv, te = slice(0, ntr), slice(ntr, ntr + ndv), slice(ntr + ndv, None)
    return {
        "Kx": d.kx(d.X[tr], d.X[tr]), "Ky": d.ky(d.Y[tr], d.Y[tr]),
        "dev": (d.kx(d.X[dv], d.X[tr]), d.ky(d.Y[dv], d.Y[tr]), toy_pool(ndv, "dev")),
        "test": (d.kx(d.X[te], d.X[tr]), d.ky(d.Y[te], d.Y[tr])),
        "pool_test": toy_pool(nte, "test"),
    }


def test_gold_ranks_match_the_evaluator_including_ties():
    rng = np.random.default_rng(0)
    S = rng.integers(0, 4, (30, 30)).astype(np.float32)      # many ties
    pool = toy_pool(30)
    ra, rs = affinity_gold_ranks(S, pool.gold_caption, pool.gold_image)
    res = evaluate_pool(S, pool)
    np.testing.assert_array_equal(ra, res["annotation"].ranks)
    np.testing.assert_array_equal(rs, res["search"].ranks)


def test_sweep_table_agrees_with_evaluator(split_data):
    models = fit_models(split_data["Kx"], split_data["Ky"], PAPER_KAPPAS)
    assert set(models) == set(PAPER_KAPPAS)
    m0 = models[0.1]
    Kx_dev, Ky_dev, pool = split_data["dev"]
    table = sweep_dev(models, m0.features_x(Kx_dev), m0.features_y(Ky_dev), pool, [5, 20, 80, 10_000])
    assert table.ns[-1] == min(m.n_components_ for m in models.values()) or 10_000 not in table.ns
    for kappa in (0.5, 5.0):
        for n in (5, 80):
            S = models[kappa].affinity(Kx_dev, Ky_dev, n)
            res = evaluate_pool(S, pool)
            a, b = table.kappas.index(kappa), table.ns.index(n)
            for t in ("annotation", "search"):
                got = table.metrics[t][a, b]
                exp = res[t].metrics
                np.testing.assert_allclose(got, [exp["R@1"], exp["R@5"], exp["R@10"],
                                                 exp["median_rank"], exp["mean_rank"]])
    rows = table.rows()
    assert {r["task"] for r in rows} == {"annotation", "search"} and all("R@10" in r for r in rows)


def test_select_and_ensemble_picks_15_models_and_borda_fuses_them(split_data):
    res = select_and_ensemble(split_data["Kx"], split_data["Ky"], dev=split_data["dev"],
                              test=split_data["test"], ns=[2, 4, 8, 16, 32, 64, 128])
    for task in ("annotation", "search"):
        chosen = res.chosen[task]
        assert len(chosen) == 15
        assert [c.criterion for c in chosen] == ["R@1"] * 5 + ["R@5"] * 5 + ["R@10"] * 5
        for crit in ("R@1", "R@5", "R@10"):
            picked = [c for c in chosen if c.criterion == crit]
            assert len({(c.kappa, c.n) for c in picked}) == 5          # 5 distinct settings per list
            # they really are the top 5 on dev
            col = ("R@1", "R@5", "R@10").index(crit)
            allv = np.sort(res.table.metrics[task][..., col][~np.isnan(res.table.metrics[task][..., col])])[::-1]
            assert [c.dev_value for c in picked] == pytest.approx(list(allv[:5]))
    # test matrices are the Borda fusion of exactly those models
    assert isinstance(res.test_matrices, ScoreMatrices)
    assert res.test_matrices.shape == (60, 60)
    models = fit_models(split_data["Kx"], split_data["Ky"], PAPER_KAPPAS)
    Kx_te, Ky_te = split_data["test"]
    ann = borda([models[c.kappa].affinity(Kx_te, Ky_te, c.n) for c in res.chosen["annotation"]])
    sea = borda([models[c.kappa].affinity(Kx_te, Ky_te, c.n).T for c in res.chosen["search"]])
    np.testing.assert_array_equal(res.test_matrices.annotation, ann)
    np.testing.assert_array_equal(res.test_matrices.search, sea)
    # the ensemble works: far above chance (R@10 chance = 10/60 ≈ 17 %)
    metrics = evaluate_pool(res.test_matrices, split_data["pool_test"])
    assert metrics["annotation"].metrics["R@10"] > 50 and metrics["search"].metrics["R@10"] > 50
    summary = res.summary()
    assert set(summary["best_dev"]) == {"annotation", "search"} and summary["timings"]["total"] > 0


def test_ensembles_fuse_one_tile_row_of_queries_at_a_time(split_data, monkeypatch):
    import kcca.selection as selection
    import kcca.solver as solver

    monkeypatch.setattr(solver, "AFFINITY_TILE", 16)         # the 60-item test pool: 4 blocks (16+16+16+12)
    models = fit_models(split_data["Kx"], split_data["Ky"], PAPER_KAPPAS)
    blocks = []

    def recording(P, Q, rows=None, cols=None):
        out = solver.cosine_affinity(P, Q, rows=rows, cols=cols)
        blocks.append(out.shape)
        return out

    monkeypatch.setattr(selection, "cosine_affinity", recording)
    res = select_and_ensemble(None, None, dev=split_data["dev"], test=split_data["test"], models=models,
                              ns=[2, 4, 8, 16, 32, 64, 128])
    assert blocks and all(min(shape) <= 16 for shape in blocks)   # never a whole 60 × 60 matrix
    Kx_te, Ky_te = split_data["test"]
    ann = borda([models[c.kappa].affinity(Kx_te, Ky_te, c.n) for c in res.chosen["annotation"]])
    sea = borda([models[c.kappa].affinity(Kx_te, Ky_te, c.n).T for c in res.chosen["search"]])
    np.testing.assert_array_equal(res.test_matrices.annotation, ann)
    np.testing.assert_array_equal(res.test_matrices.search, sea)


def test_selection_ties_are_broken_deterministically():
    from kcca.selection import SweepTable

    arr = np.zeros((2, 3, 5))
    arr[..., 0] = 50.0                     # every setting ties on R@1
    arr[..., 4] = [[3.0, 2.0, 2.0], [2.0, 9.0, 1.0]]   # mean ranks break the tie
    table = SweepTable(kappas=(0.1, 1.0), ns=(10, 20, 30), metrics={"annotation": arr, "search": arr},
                       ns_by_kappa={0.1: (10, 20, 30), 1.0: (10, 20, 30)})
    top = select_top(table, "annotation", "R@1", top=4)
    # mean rank 1 first; then mean rank 2 ordered by smaller n, then smaller κ
    assert [(c.kappa, c.n) for c in top] == [(1.0, 30), (1.0, 10), (0.1, 20), (0.1, 30)]


def test_choose_power_and_diag_on_dev(split_data):
    Kx = split_data["Kx"]
    Kx_dev, Ky_dev, pool = split_data["dev"]
    # "powers" of the image kernel: elementwise powers of an RBF kernel are RBF kernels (still PSD)
    grams = {p: (Kx ** p, Kx_dev ** p) for p in (2, 3)}
    (p, d), records = choose_power_and_diag(grams, split_data["Ky"], Ky_dev, pool, diag_factors=(1.0, 5.0),
                                            kappas=(0.1, 1.0), ns=[4, 16, 64])
    assert len(records) == 4 and p in (2, 3) and d in (1.0, 5.0)
    best = max(r["score"] for r in records)
    assert [r for r in records if r["p"] == p and r["d"] == d][0]["score"] == best


def test_scale_diagonal():
    K = np.ones((3, 3))
    np.testing.assert_array_equal(scale_diagonal(K, 4.0), np.ones((3, 3)) + 3 * np.eye(3))
    assert scale_diagonal(K, 1.0) is K and K[0, 0] == 1.0
    with pytest.raises(ValueError, match="d must be"):
        scale_diagonal(K, 0.5)


def test_dev_pool_size_mismatch_is_a_clear_error(split_data):
    Kx_dev, Ky_dev, _ = split_data["dev"]
    with pytest.raises(ValueError, match="do not match the dev pool"):
        select_and_ensemble(split_data["Kx"], split_data["Ky"], dev=(Kx_dev, Ky_dev, toy_pool(10)),
                            kappas=(0.1,), ns=[4])
    assert KCCA  # imported API stays public


def test_selection_without_ensembles_makes_the_same_choice(split_data):
    models = fit_models(split_data["Kx"], split_data["Ky"], PAPER_KAPPAS)
    full = select_and_ensemble(None, None, dev=split_data["dev"], test=split_data["test"], models=models,
                               ns=[4, 16, 64])
    cheap = select_and_ensemble(None, None, dev=split_data["dev"], test=split_data["test"], models=models,
                                ns=[4, 16, 64], ensembles=False)
    assert cheap.test_matrices is None and cheap.dev_matrices is None
    assert cheap.chosen == full.chosen
