"""KCCA speed benchmark (issue 6, §6).

Measures, on synthetic PSD kernels with a planted shared latent variable (RBF kernels, see
``kcca/synthetic.py``):

* ``ours_fit_s`` – one exact KCCA fit (κ = 0.1, float64) on ``N = 6000`` precomputed training kernels;
* ``ours_sweep_s`` – the full Hodosh model-selection sweep: that fit, the core re-solved for the other
  three κ, dev features, and the dev evaluation of 46 n × 4 κ × 2 tasks on a 1000-image dev pool;
  ``ours_sweep_breakdown`` splits it.  The same for ``dtype="float32"`` (``ours_float32_*``), for float32
  restricted to its numerical rank (``jitter="auto"``: eigenvalues above ``N · eps32 · λ_max``;
  ``ours_float32_rank_*``) and for the
  low-rank solver at rank 1500 (``ours_lowrank_r1500_*``);
* the same fit with pyrcca, cca-zoo and mvlearn when importable (optional ``bench`` extra);
  ``max_abs_corr_diff`` – largest difference of the top-10 training canonical correlations between ours
  and any library whose formulation matches (see ``notes``);
* ``lowrank_30000_s`` / ``lowrank_30000_peak_rss_mb`` – the low-rank (incomplete Cholesky) solver on
  30,000 items whose kernel columns are computed on demand from data (run in a fresh subprocess so the
  peak RSS is its own), including out-of-sample projection of 1,000 held-out items.

``python benchmarks/kcca.py --json`` prints one JSON object; ``--quick`` uses N = 1500 and 5,000
low-rank items (about a minute, half of it cca-zoo's fit).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import emit, peak_rss_mb  # noqa: E402
from kcca.selection import PAPER_KAPPAS, sweep_dev  # noqa: E402
from kcca.solver import KCCA, KernelSource, center_gram, log_spaced_ns, paired_correlations  # noqa: E402
from kcca.synthetic import make_two_view, toy_pool  # noqa: E402

TOP = 10  # canonical correlations compared with the other libraries


def _mvlearn_sklearn_tags_shim(notes: list[str]) -> None:
    """mvlearn 0.4.1 (the last release that installs on Python ≥ 3.10: 0.5.0 pins matplotlib ≤ 3.3.4)
    predates scikit-learn 1.6's estimator tags: its internal ``SimpleSplitter`` is not a
    ``BaseEstimator``, so ``KMCCA.fit`` fails in ``check_is_fitted``.  Give that helper class the
    default tags (nothing else changes) so the library can be timed and compared."""
    try:
        import mvlearn.compose.split as split
        from sklearn.base import BaseEstimator
        from sklearn.utils import get_tags
    except ImportError:
        return
    cls = split.SimpleSplitter
    if BaseEstimator in cls.__mro__ or "__sklearn_tags__" in cls.__dict__:
        return
    try:
        get_tags(cls())
    except Exception:
        cls.__sklearn_tags__ = lambda self: get_tags(BaseEstimator())
        notes.append("mvlearn: its SimpleSplitter was given scikit-learn's default estimator tags "
                     "(mvlearn 0.4.1 predates the tags API of scikit-learn ≥ 1.6)")


def _pyrcca_scipy_shim(notes: list[str]) -> None:
    """pyrcca 0.2 calls ``scipy.linalg.eigh(..., eigvals=(lo, hi))``, an argument SciPy 1.14 removed in
    favour of ``subset_by_index``; route that one call to the new name (nothing else changes)."""
    import inspect

    import rcca.rcca as mod
    import scipy.linalg

    if "eigvals" in inspect.signature(scipy.linalg.eigh).parameters or getattr(mod.eigh, "_shim", False):
        return

    def eigh(a, b=None, *args, eigvals=None, **kw):
        return scipy.linalg.eigh(a, b, *args, subset_by_index=eigvals, **kw)

    eigh._shim = True
    mod.eigh = eigh
    notes.append("pyrcca: its eigh(..., eigvals=) call was routed to SciPy's subset_by_index "
                 "(pyrcca 0.2 predates SciPy 1.14)")


def _fit_library(lib: str, Kx, Ky, X, Y, gamma_x: float, kappa: float, ours_train_corr: np.ndarray,
                 notes: list[str]) -> tuple[float, dict]:
    """Fit one third-party KCCA on the same problem; return (fit seconds, {label: max |Δρ| top-10}).

    Every library orders its components by its generalised eigenvalue, a monotone function of our
    regularised ρ, so component k is compared with our component k (Pearson correlation of the paired
    training projections, sign-free)."""
    n = Kx.shape[0]
    if lib == "cca_zoo":
        # constraint (1-c) cov(K) + c K = (1-c)/(n-1) (K² + κ K) with c = κ / (κ + n - 1)
        Kxc, Kyc = center_gram(Kx)[0], center_gram(Ky)[0]
        c = kappa / (kappa + n - 1)
        try:  # cca-zoo ≥ 3: cca_zoo.nonparametric.KCCA(n_components, shrinkage=...)
            from cca_zoo.nonparametric import KCCA as ZooKCCA

            zoo = ZooKCCA(n_components=TOP, kernel="precomputed", shrinkage=[c, c], center=False)
        except ImportError:  # cca-zoo 1.x / 2.x
            try:
                from cca_zoo.classical import KCCA as ZooKCCA
            except ImportError:
                from cca_zoo.models import KCCA as ZooKCCA
            zoo = ZooKCCA(latent_dimensions=TOP, kernel="precomputed", c=[c, c], eps=1e-12)
        t = time.perf_counter()
        zoo.fit([Kxc, Kyc])
        fit_s = time.perf_counter() - t
        Zx, Zy = zoo.transform([Kxc, Kyc])
        notes.append("cca-zoo: KCCA(kernel='precomputed', shrinkage c=κ/(κ+n−1)) on our centred kernels — its "
                     "constraint (1−c)K²/(n−1)+cK is proportional to Eq. 3's K²+κK")
        return fit_s, {"cca_zoo": float(np.abs(np.abs(paired_correlations(Zx, Zy))[:TOP] - ours_train_corr[:TOP]).max())}
    if lib == "mvlearn":
        # diag_mode 'A' is (1-r)K² + rK = (1-r)(K² + κK) with r = κ/(1+κ)
        from mvlearn.embed import KMCCA

        _mvlearn_sklearn_tags_shim(notes)
        t = time.perf_counter()
        mv = KMCCA(n_components=TOP, kernel="precomputed", regs=kappa / (1 + kappa), sval_thresh=1e-12,
                   diag_mode="A", center=True)
        mv.fit([Kx, Ky])
        fit_s = time.perf_counter() - t
        Zx, Zy = mv.transform([Kx, Ky])
        notes.append("mvlearn: KMCCA(kernel='precomputed', regs=κ/(1+κ), diag_mode='A', sval_thresh=1e-12) — "
                     "(1−r)K²+rK ∝ K²+κK")
        return fit_s, {"mvlearn": float(np.abs(np.abs(paired_correlations(Zx, Zy))[:TOP] - ours_train_corr[:TOP]).max())}
    if lib == "pyrcca":
        # kernel mode builds its own kernels from data and regularises with K² + reg·I (a ridge on α, not
        # Eq. 3's κK), so it is timed on the same RBF kernel but its correlations are compared in the one
        # setting where the formulations coincide: linear CCA in the primal (X^T X + reg I ⇔ our linear
        # kernel with κ = reg).
        import rcca

        _pyrcca_scipy_shim(notes)
        t = time.perf_counter()
        cca = rcca.CCA(kernelcca=True, ktype="gaussian", reg=kappa, numCC=TOP, verbose=False)
        cca.gausigma = float(np.sqrt(0.5 / gamma_x))  # exp(-d²/2σ²) = exp(-γ d²); not an __init__ arg
        cca.train([X, Y])
        fit_s = time.perf_counter() - t
        Xc, Yc = X - X.mean(0), Y - Y.mean(0)
        lin = rcca.CCA(kernelcca=False, reg=kappa, numCC=TOP, verbose=False).train([Xc, Yc])
        ours_lin = KCCA(reg=kappa).fit(Xc @ Xc.T, Yc @ Yc.T)
        theirs = np.abs(np.ravel(lin.cancorrs))[:TOP]  # both ordered by the regularised ρ
        k = min(TOP, theirs.size, ours_lin.train_correlations_.size)
        notes.append("pyrcca: timed in kernel mode, which builds and normalises its own gaussian kernels "
                     "inside train() (included in its time) with one bandwidth for both views (the X view's; "
                     "ours has one per view), so its time is for a neighbouring problem; its kernel "
                     "regulariser is K²+reg·I (ridge on α) ≠ Eq. 3's K²+κK, so correlations are compared "
                     "on linear CCA in the primal, where X^TX+reg·I equals our linear-kernel κ")
        return fit_s, {"pyrcca(linear primal)": float(np.abs(theirs[:k] - ours_lin.train_correlations_[:k]).max())}
    raise ValueError(f"unknown library {lib!r}")


LIBRARIES = {"cca_zoo": "cca-zoo", "mvlearn": "mvlearn", "pyrcca": "pyrcca"}


def _library_child(lib: str, data_path: str) -> dict:
    """Child-process entry: load the shared problem, fit one library, print one JSON line."""
    z = np.load(data_path)
    notes: list[str] = []
    res = {"fit_s": None, "diffs": {}, "notes": notes}
    try:
        res["fit_s"], res["diffs"] = _fit_library(lib, z["Kx"], z["Ky"], z["X"], z["Y"], float(z["gamma_x"]),
                                                  float(z["kappa"]), z["ours"], notes)
    except ImportError as exc:
        notes.append(f"{LIBRARIES[lib]} not importable ({exc.__class__.__name__}: {exc}); optional 'bench' extra")
    except Exception as exc:  # a library failing on this input is reported, not fatal
        notes.append(f"{LIBRARIES[lib]} failed: {exc.__class__.__name__}: {exc}")
    return res


def bench_others(Kx, Ky, data, gammas: tuple[float, float], kappa: float, ours_train_corr: np.ndarray,
                 notes: list[str], timeout_s: float = 600.0) -> dict:
    """Fit pyrcca / cca-zoo / mvlearn, each in its own subprocess with a wall-clock limit; cca-zoo and
    mvlearn on exactly our training kernels (RBF, centred as the library expects), pyrcca on the data
    (it builds its own kernels, with one bandwidth for both views: ``gammas[0]``); compare the top-10
    training correlations."""
    import tempfile

    out = {"pyrcca_fit_s": None, "cca_zoo_fit_s": None, "mvlearn_fit_s": None}
    diffs: dict = {}
    X, Y = data
    with tempfile.TemporaryDirectory(prefix="kcca_bench_") as tmp:
        path = os.path.join(tmp, "problem.npz")
        np.savez(path, Kx=Kx, Ky=Ky, X=X, Y=Y, gamma_x=gammas[0], kappa=kappa, ours=ours_train_corr)
        for lib, label in LIBRARIES.items():
            cmd = [sys.executable, str(Path(__file__).resolve()), "--_library_child", lib, path]
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                notes.append(f"{label}: fit did not finish within {timeout_s:.0f} s at N = {Kx.shape[0]} "
                             f"(killed; raise --others-timeout to wait longer)")
                continue
            if proc.returncode != 0 or not proc.stdout.strip():
                notes.append(f"{label} crashed: {proc.stderr.strip()[-300:]}")
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            out[f"{lib}_fit_s"] = None if res["fit_s"] is None else round(res["fit_s"], 3)
            diffs.update(res["diffs"])
            notes.extend(res["notes"])
    out["corr_diffs"] = diffs
    out["max_abs_corr_diff"] = max(diffs.values()) if diffs else None
    return out


def bench_others_small(n: int, timeout_s: float, notes: list[str]) -> dict:
    """The library comparison on a smaller problem of the same kind, where every library finishes:
    their fit times, ours (exact, float64, same κ = 0.1) and the ratio ours / theirs."""
    d = make_two_view(n, seed=0, n_gamma=n)
    Kx, Ky = d.kx(d.X, d.X), d.ky(d.Y, d.Y)
    t = time.perf_counter()
    ours = KCCA(reg=0.1).fit(Kx, Ky)
    ours_s = time.perf_counter() - t
    sub: list[str] = []
    res = bench_others(Kx, Ky, (d.X, d.Y), (d.gamma_x, d.gamma_y), 0.1, ours.train_correlations_, sub,
                       timeout_s=timeout_s)
    notes.extend(f"[N={n}] {m}" for m in sub if "not importable" in m or "did not finish" in m
                 or "failed" in m or "crashed" in m)
    out = {"n_train": n, "ours_fit_s": round(ours_s, 3)}
    for lib in LIBRARIES:
        out[f"{lib}_fit_s"] = res[f"{lib}_fit_s"]
        out[f"ratio_ours_over_{lib}"] = round(ours_s / res[f"{lib}_fit_s"], 4) if res[f"{lib}_fit_s"] else None
    out["corr_diffs"] = res["corr_diffs"]
    out["max_abs_corr_diff"] = res["max_abs_corr_diff"]
    return out


def _sweep(Kx, Ky, Kx_dev, Ky_dev, pool, **kw) -> dict:
    """Fit once (timed alone), re-solve for the other κ, dev features, 46 n × 4 κ × 2 tasks evaluation."""
    t0 = time.perf_counter()
    first = KCCA(reg=PAPER_KAPPAS[0], **kw).fit(Kx, Ky)
    t_fit = time.perf_counter() - t0
    models = {PAPER_KAPPAS[0]: first, **{k: first.with_reg(k) for k in PAPER_KAPPAS[1:]}}
    t1 = time.perf_counter()
    Fx, Fy = first.features_x(Kx_dev), first.features_y(Ky_dev)
    t2 = time.perf_counter()
    table = sweep_dev(models, Fx, Fy, pool, log_spaced_ns(6000, 46, 10))
    t3 = time.perf_counter()
    return {"model": first, "fit_s": t_fit, "sweep_s": t3 - t0,
            "breakdown": {"fit_first_kappa_s": round(t_fit, 3), "resolve_3_kappas_s": round(t1 - t0 - t_fit, 3),
                          "dev_features_s": round(t2 - t1, 3), "dev_eval_s": round(t3 - t2, 3),
                          "settings_evaluated": int(sum(len(v) for v in table.ns_by_kappa.values())) * 2,
                          "n_components": int(first.n_components_)},
            "best_dev_R@10": {t: table.best(t, "R@10")["dev_value"] for t in ("annotation", "search")}}


#: Exact-solver variants: name -> KCCA keyword arguments.
VARIANTS = {
    "float64": {"dtype": "float64"},
    "float32": {"dtype": "float32"},
    # float32 restricted to its numerical rank (eigenvalues > N·eps32·λ_max; see KCCA's ``jitter``)
    "float32_rank": {"dtype": "float32", "jitter": "auto"},
}


def bench_exact(n_train: int, n_dev: int, seed: int = 0, variants=("float64",), lowrank_rank=None) -> dict:
    d = make_two_view(n_train + n_dev, seed=seed, n_gamma=n_train)
    tr, dv = slice(0, n_train), slice(n_train, n_train + n_dev)
    Kx = d.kx(d.X[tr], d.X[tr])
    Ky = d.ky(d.Y[tr], d.Y[tr])
    Kx_dev, Ky_dev = d.kx(d.X[dv], d.X[tr]), d.ky(d.Y[dv], d.Y[tr])
    pool = toy_pool(n_dev)
    out = {"Kx": Kx, "Ky": Ky, "data": (d.X[tr], d.Y[tr]), "gammas": (d.gamma_x, d.gamma_y), "runs": {}}
    for v in variants:
        out["runs"][v] = _sweep(Kx, Ky, Kx_dev, Ky_dev, pool, **VARIANTS[v])
    if lowrank_rank:
        out["runs"][f"lowrank_r{lowrank_rank}"] = _sweep(Kx, Ky, Kx_dev, Ky_dev, pool, solver="lowrank",
                                                         max_rank=lowrank_rank, eta=1e-8)
    return out


def bench_lowrank(n_items: int, max_rank: int, eta: float, n_new: int = 1000, seed: int = 0) -> dict:
    """Low-rank KCCA on ``n_items`` training pairs with kernel columns computed from data on demand."""
    d = make_two_view(n_items + n_new, seed=seed, n_gamma=min(n_items, 5000))
    Xtr, Ytr = d.X[:n_items], d.Y[:n_items]
    ones = lambda A: np.ones(len(A))  # noqa: E731  (RBF diagonal)
    sx = KernelSource(Xtr, d.kx, diag=ones)
    sy = KernelSource(Ytr, d.ky, diag=ones)
    t = time.perf_counter()
    m = KCCA(reg=0.1, solver="lowrank", eta=eta, max_rank=max_rank, kernel_x=d.kx, kernel_y=d.ky)
    m.fit(sx, sy)
    fit_s = time.perf_counter() - t
    S = m.affinity(d.X[n_items:], d.Y[n_items:], n=min(50, m.n_components_))
    total = time.perf_counter() - t
    gold_rank = (S >= np.diag(S)[:, None]).sum(1)
    return {"lowrank_s": total, "lowrank_fit_s": fit_s, "rank_x": m.rank_x_, "rank_y": m.rank_y_,
            "n_items": n_items, "heldout_R@10_annotation": float(100 * np.mean(gold_rank <= 10)),
            "peak_rss_mb": peak_rss_mb()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="small sizes (N=1500, 5000 low-rank items)")
    ap.add_argument("--n", type=int, default=None, help="training pairs for the exact fit (default 6000)")
    ap.add_argument("--lowrank-items", type=int, default=None, help="default 30000 (quick: 5000)")
    ap.add_argument("--max-rank", type=int, default=1000, help="low-rank pivots per view (default 1000)")
    ap.add_argument("--eta", type=float, default=1e-4, help="low-rank residual-trace tolerance (default 1e-4)")
    ap.add_argument("--skip-lowrank", action="store_true", help="skip the 30,000-item low-rank run")
    ap.add_argument("--float64-only", action="store_true", help="skip the float32 exact variants")
    ap.add_argument("--sweep-lowrank-rank", type=int, default=1500,
                    help="also time the sweep with the low-rank solver at this rank (default 1500; 0: skip; "
                         "not run with --quick)")
    ap.add_argument("--others-timeout", type=float, default=600.0,
                    help="wall-clock limit in seconds for each third-party library's fit (default 600)")
    ap.add_argument("--others-small-n", type=int, default=1500,
                    help="also compare the libraries at this smaller N, where they finish (0: skip; default 1500)")
    ap.add_argument("--skip-others", action="store_true", help="do not run pyrcca / cca-zoo / mvlearn")
    ap.add_argument("--_lowrank_child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--_library_child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args._library_child is not None:
        res = _library_child(*args._library_child)
        print(json.dumps(res))
        return res
    if args._lowrank_child is not None:
        res = bench_lowrank(args._lowrank_child, args.max_rank, args.eta)
        print(json.dumps(res))
        return res

    n = args.n or (1500 if args.quick else 6000)
    n_dev = 300 if args.quick else 1000
    lr_items = args.lowrank_items or (5000 if args.quick else 30000)
    notes: list[str] = []
    variants = ("float64",) if args.float64_only else ("float64", "float32", "float32_rank")
    ex = bench_exact(n, n_dev, variants=variants, lowrank_rank=None if args.quick else args.sweep_lowrank_rank)
    main_run = ex["runs"]["float64"]
    if args.skip_others:
        others = {"pyrcca_fit_s": None, "cca_zoo_fit_s": None, "mvlearn_fit_s": None, "corr_diffs": {},
                  "max_abs_corr_diff": None}
        notes.append("--skip-others: pyrcca / cca-zoo / mvlearn not run")
    else:
        others = bench_others(ex["Kx"], ex["Ky"], ex["data"], ex["gammas"], 0.1,
                              main_run["model"].train_correlations_, notes, timeout_s=args.others_timeout)
        if args.others_small_n and args.others_small_n < n:
            others["small"] = bench_others_small(args.others_small_n, args.others_timeout, notes)
            if others["max_abs_corr_diff"] is None and others["small"]["max_abs_corr_diff"] is not None:
                # no library finished at N: the agreement figure comes from the smaller comparison
                others["max_abs_corr_diff"] = others["small"]["max_abs_corr_diff"]
                others["corr_diffs"] = {f"{k} (N={args.others_small_n})": v
                                        for k, v in others["small"]["corr_diffs"].items()}
                notes.append(f"max_abs_corr_diff: measured at N = {args.others_small_n} (no library finished "
                             f"at N = {n} within --others-timeout)")
    result = {
        "n_train": n, "n_dev": n_dev,
        "ours_fit_s": round(main_run["fit_s"], 3),
        "ours_sweep_s": round(main_run["sweep_s"], 3),
        "ours_sweep_breakdown": main_run["breakdown"],
        "pyrcca_fit_s": others["pyrcca_fit_s"], "cca_zoo_fit_s": others["cca_zoo_fit_s"],
        "mvlearn_fit_s": others["mvlearn_fit_s"],
        "max_abs_corr_diff": others["max_abs_corr_diff"], "corr_diffs": others["corr_diffs"],
        "ratios_ours_over": {k: (round(main_run["fit_s"] / v, 3) if v else None)
                             for k, v in (("pyrcca", others["pyrcca_fit_s"]),
                                          ("cca_zoo", others["cca_zoo_fit_s"]),
                                          ("mvlearn", others["mvlearn_fit_s"]))},
        "top_correlations": [round(float(c), 6) for c in main_run["model"].correlations_[:5]],
        **({f"others_at_n{args.others_small_n}": others["small"]} if "small" in others else {}),
        "lowrank_30000_s": None, "lowrank_30000_peak_rss_mb": None,
    }
    for v, r in ex["runs"].items():
        if v == "float64":
            continue
        result[f"ours_{v}_fit_s"] = round(r["fit_s"], 3)
        result[f"ours_{v}_sweep_s"] = round(r["sweep_s"], 3)
        result[f"ours_{v}_sweep_breakdown"] = r["breakdown"]
        if v.startswith("float32"):
            result[f"{v}_vs_float64_max_corr_diff"] = float(np.abs(
                r["model"].correlations_[:TOP] - main_run["model"].correlations_[:TOP]).max())
    result["best_dev_R@10"] = {v: r["best_dev_R@10"] for v, r in ex["runs"].items()}
    del ex
    if args.skip_lowrank:
        notes.append("--skip-lowrank: the low-rank run was not made (lowrank_30000_* are null)")
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--_lowrank_child", str(lr_items),
               "--max-rank", str(args.max_rank), "--eta", str(args.eta)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            notes.append(f"low-rank run failed: {proc.stderr.strip()[-500:]}")
        else:
            lr = json.loads(proc.stdout.strip().splitlines()[-1])
            key = "lowrank_30000" if lr_items == 30000 else f"lowrank_{lr_items}"
            result["lowrank_30000_s"] = round(lr["lowrank_s"], 3) if lr_items == 30000 else None
            result["lowrank_30000_peak_rss_mb"] = round(lr["peak_rss_mb"], 1) if lr_items == 30000 else None
            result[key + "_detail"] = lr
            if lr_items != 30000:
                notes.append(f"--quick/--lowrank-items: low-rank measured on {lr_items} items, not 30000")
    result["notes"] = notes
    result["machine"] = {"cpus": os.cpu_count(), "loadavg_1m": round(os.getloadavg()[0], 2),
                         "python": platform.python_version(), "numpy": np.__version__}
    emit(result, args.json)
    return result


if __name__ == "__main__":
    main()
