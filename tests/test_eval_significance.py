"""McNemar, Fisher's paired randomisation test, compare() markers, ranking agreement."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

from evaluation import (
    RankingResult,
    compare,
    evaluate,
    mcnemar_test,
    paired_randomization_test,
    ranking_agreement,
    significance_marker,
)


def test_mcnemar_against_statsmodels_and_binomial():
    from statsmodels.stats.contingency_tables import mcnemar

    rng = np.random.default_rng(0)
    a = rng.random(400) < 0.4
    b = rng.random(400) < 0.5
    t = mcnemar_test(a, b)
    table = [[np.sum(a & b), np.sum(a & ~b)], [np.sum(~a & b), np.sum(~a & ~b)]]
    ref = mcnemar(table, exact=False, correction=True)
    assert t.pvalue == pytest.approx(ref.pvalue) and "chi2" in t.method
    # few discordant pairs -> exact binomial
    a = np.array([1, 1, 1, 0, 0, 1, 1, 0, 1, 1], bool)
    b = np.array([1, 0, 0, 0, 1, 0, 0, 0, 1, 1], bool)  # discordant: 4 (a only) vs 1 (b only)
    t = mcnemar_test(a, b)
    assert "exact" in t.method and t.extra == (4, 1)
    assert t.pvalue == pytest.approx(stats.binomtest(1, 5, 0.5).pvalue)
    assert mcnemar_test(a, a).pvalue == 1.0
    with pytest.raises(ValueError):
        mcnemar_test(a, b[:5])
    assert mcnemar_test(a.astype(np.int64), b.astype(float)).pvalue == t.pvalue   # 0/1 numbers are hits
    # NaN and values other than 0/1 (ranks passed by mistake) are not silently cast to "hit"
    with pytest.raises(ValueError, match="NaN"):
        mcnemar_test([np.nan, np.nan, 0], [0, 0, 0])
    with pytest.raises(ValueError, match="binary outcomes .* value 3"):
        mcnemar_test([3, 7, 1], [1, 1, 1])


def _brute_force_p(x, y, f):
    obs = abs(f(x) - f(y))
    n = len(x)
    count = 0
    for flips in itertools.product([0, 1], repeat=n):
        s = np.array(flips, bool)
        xa, ya = np.where(s, y, x), np.where(s, x, y)
        count += abs(f(xa) - f(ya)) >= obs - 1e-12
    return count / 2 ** n


def test_randomisation_exact_vs_bruteforce_and_scipy():
    x = np.array([3.0, 1.0, 7.0, 2.0, 9.0, 4.0])
    y = np.array([2.0, 2.0, 5.0, 1.0, 4.0, 4.0])
    for stat, f in (("mean", np.mean), ("median", np.median)):
        t = paired_randomization_test(x, y, stat)
        assert "exact" in t.method
        assert t.pvalue == pytest.approx(_brute_force_p(x, y, f))
        assert t.statistic == pytest.approx(f(x) - f(y))
    rng = np.random.default_rng(1)
    x = rng.normal(size=13)
    y = x + rng.normal(0.4, 1, size=13)
    sp = stats.permutation_test((x, y), lambda a, b, axis: np.median(a, axis) - np.median(b, axis),
                                permutation_type="samples", n_resamples=np.inf)
    assert paired_randomization_test(x, y, "median").pvalue == pytest.approx(sp.pvalue)


def _integer_exact_p(d):
    """Exact two-sided p of the mean difference from integer sums (no rounding anywhere)."""
    d = np.asarray(d, dtype=np.int64)
    n = d.size
    swap = ((np.arange(1 << n)[:, None] >> np.arange(n)) & 1).astype(bool)
    sums = np.where(swap, -d, d).sum(axis=1)
    return float(np.mean(np.abs(sums) >= abs(int(d.sum()))))


def test_randomisation_mean_ties_counted_for_large_ranks():
    # mean ranks on a 25,000-candidate pool: values ~2e4, integer per-query differences
    x = np.array([22850, 22022, 24983, 20992, 24732, 20453, 23115, 22901, 24494, 21493])
    y = np.array([22847, 22021, 24980, 20994, 24730, 20450, 23118, 22902, 24493, 21496])
    t = paired_randomization_test(x.astype(float), y.astype(float), "mean")
    assert "exact" in t.method
    assert t.pvalue == _integer_exact_p(x - y)
    assert t.statistic == pytest.approx(0.4)
    rng = np.random.default_rng(5)
    for _ in range(20):
        xi = rng.integers(20_000, 25_000, 12)
        yi = xi - rng.integers(-2, 3, 12)
        assert paired_randomization_test(xi.astype(float), yi.astype(float), "mean").pvalue \
            == _integer_exact_p(xi - yi)


@pytest.mark.parametrize("stat", ["mean", "median"])
def test_randomisation_p_invariant_to_common_shift(stat):
    rng = np.random.default_rng(7)
    for _ in range(20):
        x = rng.integers(1, 500, 30).astype(float)
        y = x - rng.integers(-1, 2, 30)
        ref = paired_randomization_test(x, y, stat, n_resamples=5000, seed=1).pvalue
        for shift in (20_000.0, 1e6):
            assert paired_randomization_test(x + shift, y + shift, stat, n_resamples=5000,
                                             seed=1).pvalue == ref


def test_randomisation_large_common_offset_is_not_mistaken_for_ties():
    """A shift far above the differences but well within float64's resolution leaves p as it is (the
    tie tolerance follows rounding, not the size of the raw values)."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=50) * 0.1
    y = x + 0.03 + rng.normal(size=50) * 0.1
    for stat in ("mean", "median"):
        ref = paired_randomization_test(x, y, stat, n_resamples=20_000).pvalue
        assert ref < 0.2
        for shift in (1e6, 1e8):
            p = paired_randomization_test(x + shift, y + shift, stat, n_resamples=20_000).pvalue
            assert p == pytest.approx(ref, abs=0.01), (stat, shift, p, ref)
    # float counts are accepted when integral; anything else is a clear error
    assert paired_randomization_test(x, y, n_resamples=2e3).pvalue == \
        paired_randomization_test(x, y, n_resamples=2000).pvalue
    with pytest.raises(ValueError, match="integer"):
        paired_randomization_test(x, y, n_resamples=2.5)


def test_randomisation_monte_carlo_seeded_and_close_to_exact():
    rng = np.random.default_rng(2)
    x = rng.normal(size=40)
    y = x + rng.normal(0.35, 1, size=40)
    t1 = paired_randomization_test(x, y, "mean", n_resamples=20_000, seed=3)
    t2 = paired_randomization_test(x, y, "mean", n_resamples=20_000, seed=3)
    assert t1.pvalue == t2.pvalue and "exact" not in t1.method
    sp = stats.permutation_test((x, y), lambda a, b, axis: a.mean(axis) - b.mean(axis),
                                permutation_type="samples", n_resamples=20_000, random_state=0)
    assert abs(t1.pvalue - sp.pvalue) < 0.02
    # a custom statistic reduces the last axis
    t3 = paired_randomization_test(x, y, lambda m: m.max(axis=-1), n_resamples=2000, seed=0)
    assert 0 < t3.pvalue <= 1
    with pytest.raises(ValueError, match="NaN"):
        paired_randomization_test(np.array([1.0, np.nan]), np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="statistic"):
        paired_randomization_test(x, y, "mode")


def test_markers():
    assert significance_marker(0.005) == "***"
    assert significance_marker(0.01) == "***"
    assert significance_marker(0.05) == "**"
    assert significance_marker(0.0501) == "*"
    assert significance_marker(0.1) == "*"
    assert significance_marker(0.2) == ""


def _system(rng, quality, n=300, N=50):
    S = rng.normal(size=(n, N))
    S[np.arange(n), np.arange(n) % N] += quality
    rel = np.zeros((n, N), bool)
    rel[np.arange(n), np.arange(n) % N] = True
    return evaluate(S, np.arange(n) % N, rel)


def test_compare_against_reference():
    rng = np.random.default_rng(0)
    ref = _system(rng, 1.0)
    better = _system(rng, 3.0)
    same = RankingResult(**{**ref.__dict__})
    comp = compare({"ref": ref, "better": better, "same": same}, "ref", n_resamples=2000, seed=0)
    assert comp.rows["better"]["R@1"]["marker"] == "***"
    assert comp.rows["better"]["median_rank"]["marker"] == "***"
    assert comp.rows["same"]["R@1"]["p"] == 1.0 and comp.rows["same"]["R@1"]["marker"] == ""
    assert comp.rows["same"]["median_rank"]["p"] == 1.0
    assert "R-precision" in comp.metrics and "S@5" in comp.metrics
    assert comp["better"]["markers"]["R@1"] == "***" and comp["better"]["p_values"]["R@1"] < 0.01
    assert comp.get("ref")["markers"] == {} and comp.get("nope", {}) == {}
    assert set(comp) == {"ref", "better", "same"} and "better" in comp
    alias = compare({"ref": ref, "better": better}, "ref", n_permutations=500, seed=0)
    assert "500 reassignments" in alias.rows["better"]["median_rank"]["test"]
    table = comp.table()
    assert "***" in table and "(ref)" in table
    # averaged per-query scores
    a = rng.normal(size=100)
    c2 = compare({"A": a, "B": a + 1.0}, "A", n_resamples=2000)
    assert c2.rows["B"]["mean_score"]["marker"] == "***"
    with pytest.raises(KeyError):
        compare({"A": a}, "missing")


def test_main_job_significance_table_is_cached_by_data(tmp_path, monkeypatch):
    """The main job's significance tables (experiments.evaluation_stage.significance_table) are cached under the
    per-query values: a re-run reads the same markers and p-values without testing again; other data,
    another seed or another reference is tested afresh."""
    import evaluation
    from corpora.cache import DiskCache
    from experiments import evaluation_stage

    rng = np.random.default_rng(0)
    results = {"ref": _system(rng, 1.0), "better": _system(rng, 3.0)}
    calls = []
    real = evaluation.compare
    monkeypatch.setattr(evaluation, "compare", lambda *a, **k: calls.append(1) or real(*a, **k))
    cache = DiskCache(tmp_path / "c")
    first = evaluation_stage.significance_table(results, "ref", permutations=500, seed=0, cache=cache)
    direct = real(results, "ref", n_permutations=500, seed=0)
    assert first["better"]["p_values"] == direct["better"]["p_values"]
    assert first["better"]["markers"] == direct["better"]["markers"] and first["ref"]["markers"] == {}
    assert evaluation_stage.significance_table(results, "ref", permutations=500, seed=0, cache=cache) == first
    assert len(calls) == 1
    other = {"ref": results["ref"], "better": _system(rng, 3.0)}
    evaluation_stage.significance_table(other, "ref", permutations=500, seed=0, cache=cache)
    evaluation_stage.significance_table(results, "ref", permutations=500, seed=1, cache=cache)
    evaluation_stage.significance_table(results, "better", permutations=500, seed=0, cache=cache)
    assert len(calls) == 4
    evaluation_stage.significance_table(results, "ref", permutations=500, seed=0, cache=None)
    assert len(calls) == 5
    monkeypatch.setattr(evaluation_stage, "library_versions", lambda names: {n: "other" for n in names})
    evaluation_stage.significance_table(results, "ref", permutations=500, seed=0, cache=cache)  # another statsmodels
    assert len(calls) == 6


def test_ranking_agreement_table7():
    r_at_1 = {"s1": 10.0, "s2": 20.0, "s3": 30.0, "s4": 25.0}
    median = {"s1": 40.0, "s2": 20.0, "s3": 8.0, "s4": 12.0}  # lower is better, same order
    out = ranking_agreement(r_at_1, median, higher_is_better_b=False)
    assert out["spearman"] == pytest.approx(1.0) and out["kendall"] == pytest.approx(1.0)
    out = ranking_agreement(r_at_1, median)  # forgetting the direction gives -1
    assert out["spearman"] == pytest.approx(-1.0)
    swapped = dict(median, s3=12.0, s4=8.0)
    out = ranking_agreement(r_at_1, swapped, higher_is_better_b=False)
    assert out["kendall"] == pytest.approx(stats.kendalltau([10, 20, 30, 25], [-40, -20, -12, -8]).statistic)


def test_randomisation_reuses_reassignments_without_changing_p_values(monkeypatch):
    """The kept reassignments (same seed, n, n_resamples) give exactly the p-values of a fresh draw."""
    import evaluation.significance as sig

    rng = np.random.default_rng(7)
    pairs = [(rng.normal(size=40), rng.normal(size=40) + d) for d in (0.0, 0.3, 0.6)]
    with_memo = [sig.paired_randomization_test(x, y, st, n_resamples=3000, seed=5).pvalue
                 for x, y in pairs for st in ("mean", "median")]
    assert sig._SWAP_MEMO                                    # a set was kept and reused
    monkeypatch.setattr(sig, "_SWAP_MEMO_CELLS", 0)         # no memo: every test draws afresh
    fresh = [sig.paired_randomization_test(x, y, st, n_resamples=3000, seed=5).pvalue
             for x, y in pairs for st in ("mean", "median")]
    assert with_memo == fresh


def test_mcnemar_switches_to_chi2_at_exactly_the_threshold():
    from statsmodels.stats.contingency_tables import mcnemar

    def outcomes(n10, n01, n11=5, n00=5):
        a = np.array([1] * n10 + [0] * n01 + [1] * n11 + [0] * n00, bool)
        b = np.array([0] * n10 + [1] * n01 + [1] * n11 + [0] * n00, bool)
        return a, b

    # default threshold 25: 25 discordant pairs -> χ² (corrected); 24 -> exact binomial
    a, b = outcomes(18, 7)
    t = mcnemar_test(a, b)
    assert t.extra == (18, 7) and "chi2" in t.method and "exact" not in t.method
    assert t.statistic == pytest.approx((abs(18 - 7) - 1) ** 2 / 25)
    assert t.pvalue == pytest.approx(stats.chi2.sf((abs(18 - 7) - 1) ** 2 / 25, 1))
    assert t.pvalue == pytest.approx(mcnemar([[5, 18], [7, 5]], exact=False, correction=True).pvalue)
    a, b = outcomes(17, 7)
    t = mcnemar_test(a, b)
    assert "exact" in t.method and t.pvalue == pytest.approx(stats.binomtest(7, 24, 0.5).pvalue)
    # a custom threshold: exactly `exact_threshold` discordant pairs is already χ²
    a, b = outcomes(8, 2)
    assert "chi2" in mcnemar_test(a, b, exact_threshold=10).method
    assert "exact" in mcnemar_test(a, b, exact_threshold=11).method


def test_randomisation_exact_when_two_to_the_n_equals_n_resamples():
    # n = 10: 2^10 = 1024 reassignments; with n_resamples = 1024 the test enumerates them all (2^n ≤ R)
    x = np.array([5.0, 3.0, 8.0, 1.0, 4.0, 6.0, 2.0, 9.0, 7.0, 3.5])
    y = np.array([4.0, 3.5, 6.0, 1.5, 2.0, 6.5, 1.0, 6.0, 7.5, 2.0])
    for stat, f in (("mean", np.mean), ("median", np.median)):
        brute = _brute_force_p(x, y, f)
        assert 0.01 < brute < 0.99
        t = paired_randomization_test(x, y, stat, n_resamples=1024, seed=0)
        assert "exact" in t.method and "1024 reassignments" in t.method
        assert t.pvalue == pytest.approx(brute, rel=1e-12, abs=0)
        # one resample fewer than 2^n: Monte Carlo
        assert "exact" not in paired_randomization_test(x, y, stat, n_resamples=1023, seed=0).method


def test_randomisation_monte_carlo_p_counts_the_observed_assignment():
    # 40 large, one-signed differences: no random reassignment (each swaps some but not all pairs, or
    # swaps all of them with probability 2^-40) reaches |d_obs|, so #{|d*| ≥ |d_obs|} = 0 and the
    # Monte-Carlo p-value is (0 + 1) / (R + 1), never 0.
    rng = np.random.default_rng(4)
    y = rng.normal(size=40)
    x = y + 5.0 + rng.random(40)
    for stat in ("mean", "median"):
        t = paired_randomization_test(x, y, stat, n_resamples=999, seed=2)
        assert "exact" not in t.method
        assert t.pvalue == pytest.approx(1 / 1000, rel=1e-12)


def test_ranking_agreement_kendall_variant_with_tied_metric_values():
    # ties in both metrics and a non-square contingency (4 distinct values vs 3): τ-b ≠ τ-c
    a = {"s1": 10.0, "s2": 20.0, "s3": 20.0, "s4": 30.0, "s5": 40.0, "s6": 40.0}
    b = {"s1": 1.0, "s2": 1.0, "s3": 2.0, "s4": 3.0, "s5": 2.0, "s6": 3.0}
    xa, xb = list(a.values()), list(b.values())
    tau_b = stats.kendalltau(xa, xb, variant="b").statistic
    tau_c = stats.kendalltau(xa, xb, variant="c").statistic
    assert abs(tau_b - tau_c) > 1e-3
    assert ranking_agreement(a, b)["kendall"] == pytest.approx(tau_b)            # default: τ-b
    assert ranking_agreement(a, b, tau_variant="b")["kendall"] == pytest.approx(tau_b)
    assert ranking_agreement(a, b, tau_variant="c")["kendall"] == pytest.approx(tau_c)
    assert ranking_agreement(a, b)["spearman"] == pytest.approx(stats.spearmanr(xa, xb).statistic)
