"""Significance tests between systems and agreement between system rankings.

* :func:`mcnemar_test` – McNemar's test for paired binary outcomes (R@k / S@k hits per query), via
  :func:`statsmodels.stats.contingency_tables.mcnemar`; the exact binomial version is used when the
  number of discordant queries is below ``exact_threshold`` (default 25), the χ² version with
  continuity correction otherwise.
* :func:`paired_randomization_test` – Fisher's paired randomisation (permutation) test (Hodosh et al.
  2013, Sec. 4.2.2): under H0 the two systems' outputs for a query are exchangeable, so each of ``R``
  reassignments swaps the pair of every query with probability ½ and recomputes the difference of the
  statistic (median rank, mean R-precision, mean score).  Two-sided p-value
  ``(1 + #{|d*| ≥ |d_obs|}) / (R + 1)``; when ``2^n ≤ R`` all ``2^n`` reassignments are enumerated and
  the exact p-value ``#{|d*| ≥ |d_obs|} / 2^n`` is returned.  Vectorised (chunks of reassignments) and
  seeded.
* :func:`compare` – every system against a reference system, with the paper's markers
  (``*`` p ≤ 0.1, ``**`` p ≤ 0.05, ``***`` p ≤ 0.01).
* :func:`ranking_agreement` – Spearman ρ and Kendall τ between the system rankings induced by two metrics
  (Hodosh et al. 2013, Table 7).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from evaluation.ranking import RankingResult

__all__ = [
    "TestResult", "mcnemar_test", "paired_randomization_test", "significance_marker", "compare",
    "Comparison", "ranking_agreement", "default_metrics",
]


@dataclass(frozen=True)
class TestResult:
    statistic: float
    pvalue: float
    method: str
    n: int
    extra: tuple = ()


def significance_marker(p: float) -> str:
    """Paper-style marker: ``***`` p ≤ 0.01, ``**`` p ≤ 0.05, ``*`` p ≤ 0.1, else ``""``."""
    if p is None or np.isnan(p):
        return ""
    if p <= 0.01:
        return "***"
    if p <= 0.05:
        return "**"
    if p <= 0.1:
        return "*"
    return ""


def _paired(a, b, name: str, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a)
    b = np.asarray(b)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"{name}: need two 1-D arrays of equal length, got shapes {a.shape} and {b.shape}")
    if a.size == 0:
        raise ValueError(f"{name}: empty input")
    for v in (a, b):
        if v.dtype.kind not in "biuf":
            raise ValueError(f"{name}: need numeric or boolean arrays, got dtype {v.dtype}")
        if v.dtype.kind == "f" and np.isnan(v).any():
            raise ValueError(f"{name}: NaN in input")
        if dtype is bool and v.dtype.kind != "b" and not np.isin(v, (0, 1)).all():
            bad = v[~np.isin(v, (0, 1))][0]
            raise ValueError(f"{name}: need binary outcomes (bool or 0/1), got the value {bad.item()!r}")
    return a.astype(dtype), b.astype(dtype)


def mcnemar_test(hits_a, hits_b, *, exact: bool | None = None, exact_threshold: int = 25,
                 correction: bool = True) -> TestResult:
    """McNemar's test for two paired binary outcome vectors.

    With ``b = #(a ∧ ¬b)`` and ``c = #(¬a ∧ b)`` the discordant counts: exact two-sided binomial test of
    ``b ~ Bin(b + c, ½)`` when ``exact`` (default: when ``b + c < exact_threshold``), else
    ``χ² = (|b − c| − 1)² / (b + c)`` (continuity-corrected) with 1 d.o.f.  Identical outcomes give p = 1.
    """
    a, b = _paired(hits_a, hits_b, "mcnemar_test", dtype=bool)
    from statsmodels.stats.contingency_tables import mcnemar

    n10 = int(np.sum(a & ~b))
    n01 = int(np.sum(~a & b))
    table = np.array([[int(np.sum(a & b)), n10], [n01, int(np.sum(~a & ~b))]])
    disc = n10 + n01
    if disc == 0:
        return TestResult(0.0, 1.0, "mcnemar (no discordant pairs)", a.size, (n10, n01))
    use_exact = disc < exact_threshold if exact is None else bool(exact)
    res = mcnemar(table, exact=use_exact, correction=correction)
    method = "mcnemar exact binomial" if use_exact else "mcnemar chi2" + (" (corrected)" if correction else "")
    return TestResult(float(res.statistic), float(min(1.0, res.pvalue)), method, a.size, (n10, n01))


_STATS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mean": lambda m: m.mean(axis=-1),
    "median": lambda m: np.median(m, axis=-1),
}


#: The reassignments depend only on (seed, n, n_resamples, chunk), so the last set drawn is kept and
#: reused by the next test with the same settings (``compare`` runs one test per system and metric with
#: one seed): identical p-values, one draw.  Only sets of at most this many cells (bools) are kept.
_SWAP_MEMO_CELLS = 16_000_000
_SWAP_MEMO: dict = {}


def paired_randomization_test(x, y, statistic: str | Callable = "mean", *, n_resamples: int = 100_000,
                              seed: int = 0, chunk: int | None = None) -> TestResult:
    """Fisher's paired randomisation test of ``statistic(x) − statistic(y)`` (two-sided).

    Parameters
    ----------
    x, y : 1-D arrays of equal length
        Per-query outputs of two systems (ranks, R-precision, scores …).
    statistic : "mean", "median" or callable
        A callable must reduce the last axis of a 2-D array (``f(M) -> M.shape[:-1]``).
    n_resamples : int
        Random reassignments (default 100,000, as in Hodosh et al. 2013).  If ``2^n ≤ n_resamples`` the
        test is exact (all ``2^n`` swaps enumerated).
    seed : int
        Seed of the reassignments.

    Returns
    -------
    TestResult
        ``statistic`` = observed difference; ``pvalue`` as in the module docstring.

    Notes
    -----
    For ``"mean"`` the observed difference is computed as ``mean(x − y)``, with the same arithmetic as
    the reassigned ``mean(±(x − y))``.  ``|d*| ≥ |d_obs|`` is tested up to a rounding tolerance of
    ``64 · log2(n + 1) · ε · M`` (ε the float64 machine epsilon), with ``M = max|x − y|`` for
    ``"mean"`` (the reassignments only flip signs of ``x − y``) and ``M = 2 · max(|x|, |y|)``
    otherwise, so reassignments that tie the observed statistic in exact arithmetic are counted, while
    differences above floating-point resolution are never mistaken for ties (a common shift of both
    inputs changes p only once it reaches the data's resolution).
    """
    x, y = _paired(x, y, "paired_randomization_test")
    f = _STATS.get(statistic) if isinstance(statistic, str) else statistic
    if f is None:
        raise ValueError(f"statistic must be 'mean', 'median' or a callable, got {statistic!r}")
    n_resamples = _check_resamples(n_resamples)
    n = x.size
    is_mean = statistic == "mean" or f is _STATS["mean"]
    d = x - y if is_mean else None
    observed, tol = _observed_difference(x, y, f, d)
    exact = n <= 30 and (1 << n) <= n_resamples
    total = (1 << n) if exact else n_resamples
    if chunk is None:
        chunk = max(1, min(total, 4_000_000 // max(n, 1)))
    count = 0
    for swap in _reassignments(n, total, chunk, seed, exact):
        if is_mean:
            diff = (np.where(swap, -d, d)).mean(axis=1)
        else:
            xa = np.where(swap, y, x)
            ya = np.where(swap, x, y)
            diff = f(xa) - f(ya)
        count += int(np.sum(np.abs(diff) >= abs(observed) - tol))
    p = count / total if exact else (count + 1) / (total + 1)
    return TestResult(observed, float(min(1.0, p)),
                      f"paired randomisation ({'exact, ' if exact else ''}{total} reassignments, {statistic if isinstance(statistic, str) else 'custom'})",
                      n)


def _check_resamples(n_resamples) -> int:
    """``n_resamples`` as an int ≥ 1 (an integral float accepted); ValueError otherwise."""
    if isinstance(n_resamples, float) and n_resamples.is_integer():
        n_resamples = int(n_resamples)
    if not isinstance(n_resamples, (int, np.integer)) or isinstance(n_resamples, bool) or n_resamples < 1:
        raise ValueError(f"n_resamples must be an integer ≥ 1, got {n_resamples!r}")
    return int(n_resamples)


def _observed_difference(x: np.ndarray, y: np.ndarray, f, d: np.ndarray | None) -> tuple[float, float]:
    """The observed ``statistic(x) − statistic(y)`` and the tie tolerance (``d = x − y`` for the mean, else
    ``None``)."""
    if d is not None:
        # Same arithmetic as the reassignments (mean of ±(x − y)), so the identity reassignment
        # reproduces the observed value bit for bit; mean(x) − mean(y) can differ from it by an ulp.
        observed = float(d[None, :].mean(axis=1)[0])
    else:
        observed = float(f(x[None, :])[0] - f(y[None, :])[0])
    # Ties are counted up to rounding: (pairwise) summation of n terms of size ≤ M errs by about
    # log2(n)·ε·M, so the tolerance follows the size of what is summed, not of the observed difference.
    scale = float(np.max(np.abs(d))) if d is not None else 2.0 * float(max(np.max(np.abs(x)), np.max(np.abs(y))))
    tol = 64.0 * np.log2(x.size + 1.0) * np.finfo(np.float64).eps * scale
    return observed, tol


def _reassignments(n: int, total: int, chunk: int, seed: int, exact: bool):
    """The swap masks ``(rows, n)`` bool, ``chunk`` reassignments at a time: all ``2^n`` enumerated when
    ``exact``, else seeded draws (kept in :data:`_SWAP_MEMO` when small enough, reused by the next test
    with the same seed and sizes)."""
    rng = np.random.default_rng(seed)
    bits = np.arange(n, dtype=np.int64)
    memo = None
    if not exact and total * n <= _SWAP_MEMO_CELLS:
        memo_key = (seed, n, total, chunk)
        memo = _SWAP_MEMO.get(memo_key)
        if memo is None:
            memo = [rng.random((min(total, lo + chunk) - lo, n)) < 0.5 for lo in range(0, total, chunk)]
            _SWAP_MEMO.clear()
            _SWAP_MEMO[memo_key] = memo
    for c, lo in enumerate(range(0, total, chunk)):
        hi = min(total, lo + chunk)
        if exact:
            yield ((np.arange(lo, hi, dtype=np.int64)[:, None] >> bits[None, :]) & 1).astype(bool)
        elif memo is not None:
            yield memo[c]
        else:
            yield rng.random((hi - lo, n)) < 0.5


@dataclass
class Comparison:
    """Result of :func:`compare`: ``rows[system][metric] = {"value", "p", "marker", "test"}``."""

    reference: str
    metrics: list[str]
    rows: dict[str, dict[str, dict]]

    def table(self, digits: int = 1) -> str:
        """Plain-text table, values with the significance markers of each system vs the reference."""
        names = list(self.rows)
        w = max(8, max(len(s) for s in names) + 2)
        head = "system".ljust(w) + "".join(m.rjust(14) for m in self.metrics)
        lines = [head, "-" * len(head)]
        for s in names:
            cells = []
            for m in self.metrics:
                c = self.rows[s].get(m)
                if c is None:
                    cells.append("".rjust(14))
                    continue
                mark = "(ref)" if s == self.reference else c["marker"]
                cells.append(f"{c['value']:.{digits}f}{mark}".rjust(14))
            lines.append(s.ljust(w) + "".join(cells))
        lines.append("markers vs " + self.reference + ": * p≤0.1, ** p≤0.05, *** p≤0.01")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"reference": self.reference, "metrics": self.metrics, "rows": self.rows}

    # Mapping-style access: comparison[system] -> per-metric cells plus "markers" / "p_values" summaries
    def __getitem__(self, system: str) -> dict:
        cells = self.rows[system]
        tested = {m: c for m, c in cells.items() if c["p"] is not None}
        return {**cells, "markers": {m: c["marker"] for m, c in tested.items()},
                "p_values": {m: c["p"] for m, c in tested.items()}}

    def get(self, system: str, default=None):
        return self[system] if system in self.rows else default

    def __contains__(self, system) -> bool:
        return system in self.rows

    def __iter__(self):
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def default_metrics(res: RankingResult) -> list[str]:
    """The metrics :func:`compare` tests by default on a ranking result.

    Parameters
    ----------
    res : RankingResult
        One system's evaluation on one task.

    Returns
    -------
    list of str
        ``R@k`` for each cut-off, ``median_rank``, and, where relevance is known, ``S@k`` and
        ``R-precision``.
    """
    ms = [f"R@{k}" for k in res.ks] + ["median_rank"]
    if res.success is not None:
        ms += [f"S@{k}" for k in res.ks] + ["R-precision"]
    return ms


def compare(results_by_system: Mapping[str, RankingResult | np.ndarray], reference: str, *,
            metrics: Sequence[str] | None = None, n_resamples: int = 100_000, seed: int = 0,
            exact_threshold: int = 25, n_permutations: int | None = None) -> Comparison:
    """Test every system against ``reference`` on every metric.

    Parameters
    ----------
    results_by_system : mapping name -> RankingResult, or name -> 1-D array of per-query scores
        All over the same queries in the same order.  Arrays stand for "averaged scores" (metric
        ``"mean_score"``).
    reference : str
        Key of the reference system.
    metrics : sequence of str, optional
        ``"R@k"``, ``"S@k"`` (McNemar on hits), ``"median_rank"`` (randomisation, median),
        ``"mean_rank"``, ``"R-precision"``, ``"mean_score"`` (randomisation, mean).  Default: all R@k,
        median rank, and S@k + R-precision when relevance was given.
    n_resamples, seed : randomisation test settings (``n_permutations`` is an alias of ``n_resamples``).

    Returns
    -------
    Comparison
        ``comparison.rows[system][metric] = {"value", "p", "marker", "test"}``; mapping-style
        ``comparison[system]`` adds ``"markers"`` and ``"p_values"`` dicts (tested metrics only).
    """
    if n_permutations is not None:
        n_resamples = int(n_permutations)
    if reference not in results_by_system:
        raise KeyError(f"reference system {reference!r} not in results ({sorted(results_by_system)})")
    ref = results_by_system[reference]
    if metrics is None:
        metrics = ["mean_score"] if not isinstance(ref, RankingResult) else default_metrics(ref)
    metrics = list(metrics)

    def values(r, m: str) -> tuple[float, np.ndarray]:
        if not isinstance(r, RankingResult):
            if m != "mean_score":
                raise ValueError(f"metric {m!r} needs RankingResult inputs (got an array)")
            arr = np.asarray(r, dtype=np.float64)
            return float(arr.mean()), arr
        if m == "mean_score":
            raise ValueError("metric 'mean_score' needs per-query score arrays")
        return float(r.metrics[m]), r.per_query(m)

    n_ref = len(values(ref, metrics[0])[1])
    rows: dict[str, dict[str, dict]] = {}
    for name, r in results_by_system.items():
        rows[name] = {}
        for m in metrics:
            v, per_q = values(r, m)
            if len(per_q) != n_ref:
                raise ValueError(f"system {name!r} has {len(per_q)} queries, reference has {n_ref}")
            if name == reference:
                rows[name][m] = {"value": v, "p": None, "marker": "", "test": "reference"}
                continue
            _, ref_q = values(ref, m)
            if m.startswith("R@") or m.startswith("S@"):
                t = mcnemar_test(per_q, ref_q, exact_threshold=exact_threshold)
            elif m == "median_rank":
                t = paired_randomization_test(per_q, ref_q, "median", n_resamples=n_resamples, seed=seed)
            else:  # mean_rank, R-precision, mean_score
                t = paired_randomization_test(per_q, ref_q, "mean", n_resamples=n_resamples, seed=seed)
            rows[name][m] = {"value": v, "p": t.pvalue, "marker": significance_marker(t.pvalue),
                             "test": t.method}
    return Comparison(reference=reference, metrics=metrics, rows=rows)


def ranking_agreement(metric_a: Mapping[str, float], metric_b: Mapping[str, float], *,
                      higher_is_better_a: bool = True, higher_is_better_b: bool = True,
                      tau_variant: str = "b") -> dict:
    """Agreement between the system rankings two metrics induce (Hodosh et al. 2013, Table 7).

    ``metric_a`` / ``metric_b`` map system names to metric values (only shared systems are used).
    Values of a lower-is-better metric (e.g. median rank) are negated first, so a positive correlation
    always means the two metrics order the systems alike.  Returns ``{"spearman", "kendall", "n_systems",
    "systems"}``.
    """
    systems = [s for s in metric_a if s in metric_b]
    if len(systems) < 2:
        raise ValueError(f"ranking_agreement: need ≥ 2 shared systems, got {systems}")
    a = np.array([metric_a[s] for s in systems], dtype=np.float64) * (1 if higher_is_better_a else -1)
    b = np.array([metric_b[s] for s in systems], dtype=np.float64) * (1 if higher_is_better_b else -1)
    if np.isnan(a).any() or np.isnan(b).any():
        raise ValueError("ranking_agreement: NaN metric value")
    return {
        "spearman": float(stats.spearmanr(a, b).statistic),
        "kendall": float(stats.kendalltau(a, b, variant=tau_variant).statistic),
        "n_systems": len(systems),
        "systems": systems,
    }
