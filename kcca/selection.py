"""Model selection on the development set and Borda ensembles (Hodosh et al. 2013, Sec. 4.1.3).

The paper's procedure, per kernel pair:

1. *Fixed in advance, on dev*: the image-kernel power ``p ∈ {2, 3}`` (Eq. 6) and the text-kernel
   diagonal factor ``d ∈ [1, 15]`` (:func:`choose_power_and_diag`: every ``(p, d)`` of a small grid is
   swept over all ``(n, κ)`` below and the pair with the best dev score — the mean over both tasks of
   the best ``(R@1 + R@5 + R@10) / 3`` — wins; ties go to the smaller ``p`` then the smaller ``d``).
2. ``κ ∈ {0.1, 0.5, 1, 5}`` and ``n`` from 46 values in ``[10, 6000]`` capped by the rank, log-spaced
   (the paper gives the range, not the spacing; :func:`~kcca.solver.log_spaced_ns`).  One fit per kernel pair; every κ re-solves only the small core
   (:meth:`KCCA.with_reg`) and every ``n`` is a prefix of the same projections
   (:func:`~kcca.solver.cosine_sweep`), so the ``4 × 46`` dev evaluations cost 4 core solves, 4
   projections and 184 vectorised rank computations (:func:`sweep_dev`).
3. For each task (annotation, search) pick on dev the 5 ``(n, κ)`` settings maximising R@1, the 5
   maximising R@5 and the 5 maximising R@10 — 15 models (a setting that is in several top-5 lists is
   used once per list, so it carries that much more weight; this keeps the paper's count of 15).  Ties
   on the criterion are broken by the lower mean rank of the gold item, then the smaller ``n``, then the
   smaller κ (documented and deterministic).
4. Combine the 15 models' test rankings with the Borda count
   (:func:`corpora.scoring.borda`, ties by median rank), one tile row of queries at a time
   (:func:`~kcca.solver.cosine_affinity`: the blocks hold the whole matrices' entries bit for bit, and
   Borda fuses each query's row on its own), so no chosen model's whole affinity matrix is held.

Ranks follow the evaluator's pessimistic tie policy: ``rank = 1 + #{j ≠ gold : s_j ≥ s_gold}``,
computed on the same float32 matrices the ensembles use.
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from corpora.scoring import ScoreMatrices, affinity_gold_ranks, borda, rank_metrics
from kcca.solver import KCCA, KernelView, affinity_slices, cosine_affinity, cosine_sweep, log_spaced_ns
from kernels.threads import spare_map

__all__ = [
    "PAPER_KAPPAS", "PAPER_POWERS", "DEFAULT_DIAG_FACTORS", "CRITERIA", "ChosenModel", "SweepTable",
    "SelectionResult", "sweep_dev", "select_top", "select_and_ensemble",
    "choose_power_and_diag", "scale_diagonal",
]

#: κ values of Sec. 4.1.3.
PAPER_KAPPAS: tuple[float, ...] = (0.1, 0.5, 1.0, 5.0)
#: Image kernel powers p of Eq. 6 tried on dev.
PAPER_POWERS: tuple[int, ...] = (2, 3)
#: Text diagonal factors tried on dev (the paper's range is [1, 15]).
DEFAULT_DIAG_FACTORS: tuple[float, ...] = (1.0, 2.0, 5.0, 10.0, 15.0)
#: Selection criteria (each contributes ``top`` models per task).
CRITERIA: tuple[str, ...] = ("R@1", "R@5", "R@10")
TASKS: tuple[str, ...] = ("annotation", "search")


def scale_diagonal(K: np.ndarray, d: float) -> np.ndarray:
    """Text-kernel regularisation of Hodosh Sec. 4.1.3: multiply the diagonal of a training Gram
    matrix by ``d`` (a copy; ``d = 1`` returns the input)."""
    if d == 1:
        return K
    if d < 1:
        raise ValueError(f"diagonal factor d must be ≥ 1, got {d}")
    K = np.array(K, dtype=np.float64, copy=True)
    K[np.diag_indices_from(K)] *= d
    return K


@dataclass
class SweepTable:
    """Dev metrics of every ``(κ, n)`` setting for both tasks.

    ``metrics[task]`` is a float array of shape ``(len(kappas), len(ns), 5)`` with columns
    ``R@1, R@5, R@10, median_rank, mean_rank``; entries for ``n`` beyond a κ's available components are
    NaN (``ns_by_kappa`` says which were evaluated)."""

    kappas: tuple[float, ...]
    ns: tuple[int, ...]
    metrics: dict[str, np.ndarray]
    ns_by_kappa: dict[float, tuple[int, ...]]
    columns: tuple[str, ...] = ("R@1", "R@5", "R@10", "median_rank", "mean_rank")

    def rows(self) -> list[dict]:
        """Flat records ``{"task", "kappa", "n", "R@1", ...}`` (for JSON reports)."""
        out = []
        for task, arr in self.metrics.items():
            for a, kappa in enumerate(self.kappas):
                for b, n in enumerate(self.ns):
                    if np.isnan(arr[a, b, 0]):
                        continue
                    rec = {"task": task, "kappa": float(kappa), "n": int(n)}
                    rec.update({c: float(arr[a, b, k]) for k, c in enumerate(self.columns)})
                    out.append(rec)
        return out

    def best(self, task: str, criterion: str = "R@10") -> dict:
        """The single best record of a task under one criterion (same tie-breaking as selection)."""
        return select_top(self, task, criterion, top=1)[0].as_dict()


@dataclass(frozen=True)
class ChosenModel:
    task: str
    criterion: str
    kappa: float
    n: int
    dev_value: float

    def as_dict(self) -> dict:
        return {"task": self.task, "criterion": self.criterion, "kappa": self.kappa, "n": self.n,
                "dev_value": self.dev_value}


@dataclass
class SelectionResult:
    """Output of :func:`select_and_ensemble`.

    Attributes
    ----------
    test_matrices : corpora.scoring.ScoreMatrices or None
        Borda fusion of the chosen models on the test pool (annotation (N, M), search (M, N)).
    dev_matrices : corpora.scoring.ScoreMatrices or None
        The same ensembles on the dev pool (optimistic: chosen on dev); None with ``ensembles=False``.
    chosen : dict task -> list of ChosenModel (15 each by default)
    table : SweepTable (dev metrics of every setting)
    correlations : dict κ -> canonical correlations
    timings : dict of seconds (``fit``, ``features``, ``sweep``, ``ensemble``)
    """

    test_matrices: object | None
    dev_matrices: object
    chosen: dict[str, list[ChosenModel]]
    table: SweepTable
    correlations: dict[float, np.ndarray]
    timings: dict[str, float] = field(default_factory=dict)

    def summary(self) -> dict:
        return {
            "chosen": {t: [c.as_dict() for c in cs] for t, cs in self.chosen.items()},
            "best_dev": {t: {c: self.table.best(t, c) for c in CRITERIA} for t in TASKS},
            "n_components": {str(k): int(v.size) for k, v in self.correlations.items()},
            "timings": dict(self.timings),
        }


def _metric_row(ranks: np.ndarray) -> np.ndarray:
    """The sweep table's columns (:attr:`SweepTable.columns`) from one task's gold ranks."""
    m = rank_metrics(ranks, (1, 5, 10))
    return np.array([m[c] for c in SweepTable.columns])


def sweep_dev(models: Mapping[float, KCCA], Fx_dev: np.ndarray, Fy_dev: np.ndarray, pool_dev,
              ns: Sequence[int]) -> SweepTable:
    """Evaluate every ``(κ, n)`` on dev.

    Parameters
    ----------
    models : mapping κ -> fitted KCCA (sharing decompositions, see :meth:`KCCA.with_reg`)
    Fx_dev, Fy_dev : feature coordinates of the dev images / captions (:meth:`KCCA.features_x`)
    pool_dev : RankingPool (uses ``gold_caption`` and ``gold_image``)
    ns : requested numbers of dimensions (each capped by the κ's ``n_components_``)
    """
    gc = np.asarray(pool_dev.gold_caption)
    gi = np.asarray(pool_dev.gold_image)
    kappas = tuple(float(k) for k in models)
    ns_all = sorted({int(n) for n in ns})
    capped = {k: tuple(sorted({min(n, m.n_components_) for n in ns_all})) for k, m in models.items()}
    ns_union = tuple(sorted(set().union(*capped.values())))
    metrics = {t: np.full((len(kappas), len(ns_union), 5), np.nan) for t in TASKS}
    col = {n: j for j, n in enumerate(ns_union)}

    def one_kappa(item) -> list:
        """``[(n, annotation row, search row)]`` of one κ."""
        kappa, m = item
        P = m.project_features_x(Fx_dev, m.n_components_)
        Q = m.project_features_y(Fy_dev, m.n_components_)
        rows = []
        for n, S in cosine_sweep(P, Q, capped[kappa]):
            ra, rs = affinity_gold_ranks(S, gc, gi)
            rows.append((n, _metric_row(ra), _metric_row(rs)))
        return rows

    # the κ side by side on the threads other systems leave idle (kernels.threads.spare_map)
    for a, rows in enumerate(spare_map(one_kappa, models.items())):
        for n, ann, sea in rows:
            metrics["annotation"][a, col[n]] = ann
            metrics["search"][a, col[n]] = sea
    return SweepTable(kappas=kappas, ns=ns_union, metrics=metrics,
                      ns_by_kappa={float(k): v for k, v in capped.items()})


def select_top(table: SweepTable, task: str, criterion: str, top: int = 5) -> list[ChosenModel]:
    """The ``top`` settings of a task maximising ``criterion`` on dev; ties → lower mean rank, then
    smaller n, then smaller κ."""
    if criterion not in table.columns[:3]:
        raise ValueError(f"criterion must be one of {table.columns[:3]}, got {criterion!r}")
    arr = table.metrics[task]
    c = table.columns.index(criterion)
    cand = []
    for a, kappa in enumerate(table.kappas):
        for b, n in enumerate(table.ns):
            if not np.isnan(arr[a, b, c]):
                cand.append((-arr[a, b, c], arr[a, b, 4], n, kappa, arr[a, b, c]))
    cand.sort()
    return [ChosenModel(task, criterion, float(k), int(n), float(v)) for _, _, n, k, v in cand[:top]]


def _ensemble(models: Mapping[float, KCCA], chosen: Mapping[str, list[ChosenModel]], Fx, Fy) -> ScoreMatrices:
    """Borda fusion of each task's chosen models over one pool, a block of query rows at a time.

    A block is one tile row of :func:`~kcca.solver.cosine_affinity` (images for annotation, captions
    for search): its entries are the whole matrix's bit for bit, and Borda fuses each query's row on its
    own, so the result is :func:`~corpora.scoring.borda` of the whole matrices while only one block per
    chosen model is held (at COCO size a 5,000 × 5,000 matrix is 100 MB, and up to 15 are chosen per task).
    """
    proj: dict[float, tuple[np.ndarray, np.ndarray]] = {}
    for c in (*chosen["annotation"], *chosen["search"]):
        if c.kappa not in proj:
            m = models[c.kappa]
            proj[c.kappa] = (m.project_features_x(Fx, m.n_components_), m.project_features_y(Fy, m.n_components_))
    P0, Q0 = next(iter(proj.values()))
    ann = _fuse_blocks(proj, chosen["annotation"], (len(P0), len(Q0)),
                       lambda P, Q, part: cosine_affinity(P, Q, rows=part))
    sea = _fuse_blocks(proj, chosen["search"], (len(Q0), len(P0)),
                       lambda P, Q, part: cosine_affinity(P, Q, cols=part).T)
    return ScoreMatrices(annotation=ann, search=sea)


def _fuse_blocks(proj: Mapping[float, tuple[np.ndarray, np.ndarray]], picked: Sequence[ChosenModel],
                 shape: tuple[int, int], block_of) -> np.ndarray:
    """Borda of ``picked`` models' (queries, candidates) affinities of the given ``shape``, one block of
    queries (:func:`~kcca.solver.affinity_slices`) at a time; ``block_of(P, Q, part)`` gives a model's
    block for the queries in ``part``."""
    out = np.empty(shape, dtype=np.float32)
    for part in affinity_slices(shape[0]):
        blocks: dict[tuple[float, int], np.ndarray] = {}
        for c in picked:
            if (c.kappa, c.n) not in blocks:
                P, Q = proj[c.kappa]
                blocks[(c.kappa, c.n)] = block_of(P[:, :c.n], Q[:, :c.n], part)
        out[part] = borda([blocks[(c.kappa, c.n)] for c in picked])
    return out


def fit_models(Kx_train, Ky_train, kappas: Sequence[float] = PAPER_KAPPAS, **kcca_kwargs) -> dict[float, KCCA]:
    """One KCCA decomposition, re-solved for every κ (``{κ: fitted KCCA}``).  ``Kx_train`` /
    ``Ky_train`` may be :class:`~kcca.solver.KernelView` objects from :func:`~kcca.solver.decompose`
    (both, to reuse decompositions across kernel pairs)."""
    kappas = [float(k) for k in kappas]
    if not kappas:
        raise ValueError("kappas must not be empty")
    if isinstance(Kx_train, KernelView) or isinstance(Ky_train, KernelView):
        if not (isinstance(Kx_train, KernelView) and isinstance(Ky_train, KernelView)):
            raise TypeError("fit_models: pass two KernelViews or two kernels, not a mix")
        first = KCCA(reg=kappas[0], **kcca_kwargs).fit_decomposed(Kx_train, Ky_train)
    else:
        first = KCCA(reg=kappas[0], **kcca_kwargs).fit(Kx_train, Ky_train)
    # the other κ re-solve the r × r core only, side by side on idle threads (kernels.threads.spare_map)
    return dict(zip(kappas, [first, *spare_map(first.with_reg, kappas[1:])]))


def select_and_ensemble(
    Kx_train, Ky_train, *, dev: tuple, test: tuple | None = None,
    kappas: Sequence[float] = PAPER_KAPPAS, ns: Sequence[int] | None = None, top: int = 5,
    criteria: Sequence[str] = CRITERIA, models: Mapping[float, KCCA] | None = None, ensembles: bool = True,
    **kcca_kwargs,
) -> SelectionResult:
    """Hodosh Sec. 4.1.3 end to end for one kernel pair.

    Parameters
    ----------
    Kx_train, Ky_train : (N, N) training Gram matrices (image, text) over the same training pairs
        (or data / :class:`~kcca.solver.KernelSource` with ``kernel_x``/``kernel_y``/``solver`` in
        ``kcca_kwargs``).  Ignored when ``models`` is given.
    dev : (Kx_dev, Ky_dev, pool_dev)
        Kernel rows of the dev pool's images (``pool.image_ids`` order) and captions
        (``pool.caption_ids`` order) against the training items, and the dev RankingPool.
    test : (Kx_test, Ky_test), optional
        The same for the test pool; the ensembles' test matrices are returned when given.
    kappas, ns, top, criteria
        Grid and selection sizes (defaults: the paper's; ``ns=None`` → 46 log-spaced values in
        ``[10, 6000]``, capped by the number of components).
    models : precomputed ``{κ: KCCA}`` (e.g. from :func:`fit_models`), to skip the fit.
    ensembles : with ``False`` only the dev sweep and the choice are made (``dev_matrices`` and
        ``test_matrices`` are ``None``) – for cheap comparisons of kernel pairs.
    **kcca_kwargs : passed to :class:`~kcca.solver.KCCA` (``solver``, ``center``, ``jitter`` …).
    """
    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    if models is None:
        models = fit_models(Kx_train, Ky_train, kappas, **kcca_kwargs)
    else:
        models = {float(k): m for k, m in models.items()}
    timings["fit"] = time.perf_counter() - t0
    Kx_dev, Ky_dev, pool_dev = dev
    any_model = next(iter(models.values()))
    t = time.perf_counter()
    Fx_dev, Fy_dev = any_model.features_x(Kx_dev), any_model.features_y(Ky_dev)
    if Fx_dev.shape[0] != pool_dev.n_images or Fy_dev.shape[0] != pool_dev.n_captions:
        raise ValueError(
            f"dev kernel rows ({Fx_dev.shape[0]} images, {Fy_dev.shape[0]} captions) do not match the "
            f"dev pool ({pool_dev.n_images} images, {pool_dev.n_captions} captions)")
    Fx_test = Fy_test = None
    if test is not None:
        Fx_test, Fy_test = any_model.features_x(test[0]), any_model.features_y(test[1])
    timings["features"] = time.perf_counter() - t
    if ns is None:
        ns = log_spaced_ns(6000, 46, 10)
    t = time.perf_counter()
    table = sweep_dev(models, Fx_dev, Fy_dev, pool_dev, ns)
    timings["sweep"] = time.perf_counter() - t
    chosen = {task: [c for crit in criteria for c in select_top(table, task, crit, top)] for task in TASKS}
    t = time.perf_counter()
    features = [(Fx_dev, Fy_dev)] + ([(Fx_test, Fy_test)] if test is not None else [])
    # the dev and test pools' ensembles side by side on an idle thread (kernels.threads.spare_map)
    matrices = spare_map(lambda F: _ensemble(models, chosen, *F), features) if ensembles else []
    dev_m = matrices[0] if matrices else None
    test_m = matrices[1] if len(matrices) > 1 else None
    timings["ensemble"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t0
    return SelectionResult(test_matrices=test_m, dev_matrices=dev_m, chosen=chosen, table=table,
                           correlations={k: m.correlations_ for k, m in models.items()},
                           timings=timings)


def choose_power_and_diag(
    image_grams: Mapping[int, tuple[np.ndarray, np.ndarray]], Ky_train: np.ndarray, Ky_dev: np.ndarray,
    pool_dev, *, diag_factors: Sequence[float] = DEFAULT_DIAG_FACTORS,
    kappas: Sequence[float] = PAPER_KAPPAS, ns: Sequence[int] | None = None, **kcca_kwargs,
) -> tuple[tuple[int, float], list[dict]]:
    """Fix the image power ``p`` and the text diagonal factor ``d`` on dev (step 1 of the module doc).

    Parameters
    ----------
    image_grams : ``{p: (Kx_train_p, Kx_dev_p)}`` image Gram matrices for each candidate power
    Ky_train, Ky_dev : the text kernel (training Gram without diagonal scaling; dev rows)
    pool_dev : the dev RankingPool

    Returns
    -------
    ((p, d), records) where each record is ``{"p", "d", "score", "annotation", "search"}`` (best
    ``(R@1+R@5+R@10)/3`` per task over the ``(n, κ)`` grid and their mean).
    """
    if ns is None:
        ns = log_spaced_ns(6000, 46, 10)
    records = []
    for p in sorted(image_grams):
        Kx_train, Kx_dev = image_grams[p]
        for d in diag_factors:
            models = fit_models(Kx_train, scale_diagonal(Ky_train, d), kappas, **kcca_kwargs)
            m0 = next(iter(models.values()))
            table = sweep_dev(models, m0.features_x(Kx_dev), m0.features_y(Ky_dev), pool_dev, ns)
            per = {t: float(np.nanmax(table.metrics[t][..., :3].mean(axis=-1))) for t in TASKS}
            records.append({"p": int(p), "d": float(d), "score": float(np.mean(list(per.values()))), **per})
    best = max(records, key=lambda r: (r["score"], -r["p"], -r["d"]))
    return (best["p"], best["d"]), records
