"""The systems of Hodosh et al. (2013), Appendix B (Tables 11–12), configurable by name.

A *system* is a model (``"kcca"`` or the nearest-neighbour baseline ``"nn"``), a text kernel
(:class:`kernels.text.TextKernel` by paper name) and an image kernel
(:class:`kernels.image.ImageKernel`, spatial pyramid by default, the global-histogram kernel for the
``^Histo`` systems).  :func:`run_system` trains one system on the corpus' training split and returns its
dev and test score matrices (Hodosh's dev-set model selection and Borda ensembles for KCCA, see
:mod:`kcca.selection`).

Canonical names are ASCII (``BoW5^sqrtidf``, ``TRI5_A,D_ext+ic^sqrtidf``); :func:`canonical_name`
also accepts the paper's spellings (``BoW5^{√idf}``, ``TRI5_{A,D_{ext}+ic}^{\\sqrt{idf}}``,
``NN5_F1^{idf}``, ``D_BNC`` for ``D_ext``, ``NN`` for ``NN5_F1^idf`` as Sec. 4 abbreviates it, and every
:attr:`SystemConfig.paper_name`).  ``TRI5SEM`` is ``TRI5_A,D_ext+ic^sqrtidf`` with the
pyramid kernel, ``TRI5SEM^Histo`` the same text kernel with the global-histogram kernel, ``NN5_TRI`` the
paper's NN5_TRI(best) (the NN baseline over TRI5SEM's text kernel).  :data:`PAPER_TABLE_ORDER` holds the
30 systems of Tables 11-12 in the tables' order; :data:`EXTRA_SYSTEMS` the registered systems outside
that grid.

Sharing across systems
----------------------
A :class:`~kcca.kernel_store.KernelStore` (one per corpus and training split, kept by the caller across
calls) holds the fitted :class:`ImageKernel` per kind, its per-feature Gram matrices per split and the
κ-independent KCCA decomposition of every (kind, power) — computed once for the whole grid — and the same
for text kernels (fitted :class:`TextKernel`, query rows, decompositions per diagonal factor).
Everything expensive is also cached on disk through the kernels' own ``DiskCache``, and a KCCA system's
whole search through :mod:`kcca.run_cache`.  The KCCA affinity of a trained system as a caption metric
is :class:`kcca.caption_metric.KCCACaptionMetric`.
"""
from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np

from corpora.protocol import hodosh_pool, train_items
from kcca.kernel_store import KernelStore
from kcca.run_cache import RUN_CACHE_NAMESPACE, run_cache_key, run_from_arrays, run_to_arrays
from kcca.selection import (
    CRITERIA, DEFAULT_DIAG_FACTORS, PAPER_KAPPAS, PAPER_POWERS, SelectionResult, fit_models,
    select_and_ensemble,
)
from kcca.solver import log_spaced_ns
from kernels.text.nn import NearestNeighbour

__all__ = ["SystemConfig", "SYSTEMS", "PAPER_TABLE_ORDER", "EXTRA_SYSTEMS", "canonical_name", "split_system_list", "get_system",
           "list_systems", "system_names",
           "SystemRun", "run_system", "dev_score", "LazyModels", "SearchGrid", "SystemViews", "PowerDiagSearch"]


@dataclass(frozen=True)
class SystemConfig:
    """One system of Appendix B.

    Attributes
    ----------
    name : canonical ASCII name
    model : ``"kcca"`` or ``"nn"``
    text : TextKernel paper name (``TextKernel.from_name``) for KCCA systems and for the NN5_TRI
        baselines (their TRI kernel), else ``None``
    nn_variant : ``NearestNeighbour`` variant for NN systems
    image_kind : ``"pyramid"`` or ``"histogram"``
    paper_name : the name as printed in the paper
    """

    name: str
    model: str
    text: str | None = None
    nn_variant: str | None = None
    image_kind: str = "pyramid"
    paper_name: str = ""

    def as_dict(self) -> dict:
        return {"name": self.name, "model": self.model, "text": self.text, "nn_variant": self.nn_variant,
                "image_kind": self.image_kind, "paper_name": self.paper_name or self.name}


def _build_registry() -> dict[str, SystemConfig]:
    reg: dict[str, SystemConfig] = {}

    def add(name, **kw):
        reg[name] = SystemConfig(name=name, **kw)

    add("NN5_F1", model="nn", nn_variant="NN5_F1", paper_name="NN5_F1")
    add("NN5_F1^idf", model="nn", nn_variant="NN5_F1_idf", paper_name="NN5_F1^idf")
    add("NN5_BoW5", model="nn", nn_variant="NN5_BoW5", paper_name="NN5_BoW5")
    # NN5_TRI(best): the NN baseline over the best TRI text kernel (TRI5SEM's)
    add("NN5_TRI", model="nn", nn_variant="NN5_TRI", text="TRI5SEM", paper_name="NN5_TRI(best)")
    for t in ("BoW1", "TRI1", "BoW5", "BoW5^idf", "BoW5^sqrtidf", "TRI5", "TRI5^sqrtidf"):
        add(t, model="kcca", text=t, paper_name=t.replace("^sqrtidf", "^√idf"))
    add("TagRank", model="kcca", text="TagRank", paper_name="TAGRANK")
    add("BoW5^Histo", model="kcca", text="BoW5", image_kind="histogram", paper_name="BoW5^Histo")
    add("TRI5^Histo", model="kcca", text="TRI5", image_kind="histogram", paper_name="TRI5^Histo")
    for s in ("Lin", "D_ext", "D_ic", "D_ext+ic", "A", "A,D_ic", "A,D_ext", "A,D_ext+ic"):
        printed = s.replace("D_ext", "D_BNC")
        add(f"TRI5_{s}", model="kcca", text=f"TRI5_{s}", paper_name=f"TRI5_{{{printed}}}")
        if s != "A,D_ext+ic":   # its √idf version is TRI5SEM, registered under that name only
            add(f"TRI5_{s}^sqrtidf", model="kcca", text=f"TRI5_{s}^sqrtidf", paper_name=f"TRI5_{{{printed}}}^√idf")
    add("TRI5SEM", model="kcca", text="TRI5SEM", paper_name="TRI5_{A,D_BNC+ic}^√idf (= TRI5SEM)")
    add("TRI5SEM^Histo", model="kcca", text="TRI5SEM", image_kind="histogram",
        paper_name="TRI5_{A,D_BNC+ic}^{√idf,Histo}")
    # outside the paper's grid (EXTRA_SYSTEMS)
    add("NN5_TRI5", model="nn", nn_variant="NN5_TRI", text="TRI5", paper_name="NN5_TRI5")
    return reg


#: name -> SystemConfig (canonical ASCII names).
SYSTEMS: dict[str, SystemConfig] = _build_registry()

#: The 30 systems of Tables 11/12 row by row (``--systems all``): the baselines and BoW / TagRank rows,
#: the eight plain TRI5 variants, then the √idf block ending with TRI5SEM^Histo and TRI5SEM.
PAPER_TABLE_ORDER: tuple[str, ...] = (
    "NN5_F1", "NN5_F1^idf", "NN5_BoW5", "NN5_TRI", "BoW1", "TRI1", "BoW5^Histo", "BoW5", "BoW5^idf",
    "BoW5^sqrtidf", "TagRank", "TRI5^Histo", "TRI5",
    "TRI5_Lin", "TRI5_D_ext", "TRI5_D_ic", "TRI5_D_ext+ic", "TRI5_A", "TRI5_A,D_ext", "TRI5_A,D_ic",
    "TRI5_A,D_ext+ic",
    "TRI5^sqrtidf", "TRI5_D_ext^sqrtidf", "TRI5_D_ic^sqrtidf", "TRI5_D_ext+ic^sqrtidf", "TRI5_A^sqrtidf",
    "TRI5_A,D_ext^sqrtidf", "TRI5_A,D_ic^sqrtidf", "TRI5SEM^Histo", "TRI5SEM",
)

#: Registered systems outside the paper's grid (run by name only): TRI5_Lin with √idf weights, and the
#: NN baseline over the plain TRI5 kernel.
EXTRA_SYSTEMS: tuple[str, ...] = tuple(n for n in SYSTEMS if n not in PAPER_TABLE_ORDER)


def canonical_name(name: str) -> str:
    """Map a paper / LaTeX / Unicode spelling to the registry's ASCII name (``ValueError`` if unknown)."""
    s = name.strip().replace(" ", "")
    s = s.replace("√", "sqrt").replace("\\sqrt", "sqrt").replace("sqrt(idf)", "sqrtidf")
    s = s.replace("{", "").replace("}", "")
    s = re.sub(r"D_?BNC", "D_ext", s, flags=re.IGNORECASE)
    s = re.sub(r"D_ext(\+D_|,)ic", "D_ext+ic", s, flags=re.IGNORECASE)
    s = re.sub(r"\^histo\b", "^Histo", s, flags=re.IGNORECASE)
    s = re.sub(r"NN5_F1_idf", "NN5_F1^idf", s, flags=re.IGNORECASE)
    s = re.sub(r"NN5_TRI\(best\)", "NN5_TRI", s, flags=re.IGNORECASE)
    s = re.sub(r"\(=TRI5SEM\)$", "", s, flags=re.IGNORECASE)   # TRI5SEM's printed name with its note
    if s.upper() == "NN":                        # the paper's short name (Sec. 4): NN5_F1^idf
        s = "NN5_F1^idf"
    if s.lower() == "tri5_a,d_ext+ic^sqrtidf":   # registered under its paper name only
        s = "TRI5SEM"
    if s.lower() in ("tri5_a,d_ext+ic^sqrtidf,histo", "tri5sem^histo"):
        s = "TRI5SEM^Histo"
    if s in SYSTEMS:
        return s
    low = {k.lower(): k for k in SYSTEMS}
    if s.lower() in low:
        return low[s.lower()]
    raise ValueError(f"unknown system {name!r}; known: {', '.join(PAPER_TABLE_ORDER + EXTRA_SYSTEMS)}")


def split_system_list(value: str) -> list[str]:
    """Canonical names of a comma-separated list of systems whose names may themselves contain commas
    (``TRI5_A,D_ext``, ``TRI5_{A,D_{ext}+ic}^{\\sqrt{idf}}``): at each position the longest run of
    comma-separated pieces that :func:`canonical_name` knows is taken.  ``ValueError`` names the first
    piece that starts no known name."""
    pieces = [p.strip() for p in value.split(",")]
    out, i = [], 0
    while i < len(pieces):
        if not pieces[i]:
            i += 1
            continue
        for j in range(len(pieces), i, -1):
            try:
                out.append(canonical_name(",".join(pieces[i:j])))
            except ValueError:
                continue
            i = j
            break
        else:
            canonical_name(pieces[i])   # raises, naming the piece
    return out


def get_system(name: str) -> SystemConfig:
    return SYSTEMS[canonical_name(name)]


def list_systems() -> list[str]:
    """The 30 systems of Tables 11/12 in the paper's order (canonical names)."""
    return list(PAPER_TABLE_ORDER)


#: Alias used by the experiment pipeline.
system_names = list_systems


@dataclass
class SystemRun:
    """Result of :func:`run_system`.

    Attributes
    ----------
    name : canonical system name
    test_matrices, dev_matrices : corpora.scoring.ScoreMatrices over the test / dev pools
    config : dict (system config + chosen p, d and the selection summary)
    timings : dict of seconds per stage
    selection : SelectionResult of the chosen (p, d) (KCCA systems), else None
    grid : list of dev records, one per (p, d) tried (KCCA systems)
    models : ``{κ: fitted KCCA}`` of the chosen (p, d) (KCCA systems; empty for NN), a
        :class:`LazyModels`.  Every model of the selection is ``models[κ]`` truncated to ``n``
        dimensions; :class:`~kcca.caption_metric.KCCACaptionMetric` uses them.  A model that is not in
        memory (a run served from the cache, or after :meth:`release_models`) is fitted on first access,
        using the kernel decompositions kept in the :class:`~kcca.kernel_store.KernelStore`.
    """

    name: str
    test_matrices: object
    dev_matrices: object
    config: dict
    timings: dict = field(default_factory=dict)
    selection: SelectionResult | None = None
    grid: list = field(default_factory=list)
    models: Mapping = field(default_factory=dict)

    def release_dev_matrices(self) -> None:
        """Drop the dev-pool score matrices (here and in :attr:`selection`) once the selection has read
        them: at COCO size each system's are two 5,000 × 5,000 float32 matrices (200 MB)."""
        self.dev_matrices = None
        if self.selection is not None:
            self.selection.dev_matrices = None

    def release_models(self) -> None:
        """Drop the fitted KCCA models to free memory; a caption metric (or any access to ``models[κ]``)
        refits the one it needs.  Each model holds two ``r × n`` direction matrices
        (float64); the four κ of a system took about 1 GB at Flickr8k's 6,000 training items, so a run
        of many systems keeps only what it still uses (docs/kcca.md, "Memory across systems")."""
        release = getattr(self.models, "release", None)
        if release is not None:
            release()


def dev_score(result: SelectionResult) -> float:
    """The (p, d) selection score: mean over tasks of the best ``(R@1 + R@5 + R@10) / 3`` on dev."""
    return float(np.mean([np.nanmax(result.table.metrics[t][..., :3].mean(axis=-1))
                          for t in ("annotation", "search")]))


# ------------------------------------------------------------------------------------ run: steps
def _default_pools(corpus, seed, skip_missing_images):
    return {s: hodosh_pool(corpus, s, seed=seed, skip_missing_images=skip_missing_images)
            for s in ("dev", "test")}


class LazyModels(Mapping):
    """``{κ: fitted KCCA}`` whose models are fitted on first access (a cached run keeps no models).

    ``done`` holds models already fitted (a fresh run keeps those of its selection); :meth:`release`
    drops them, and a later access refits from the kernel store's decompositions (the same numbers)."""

    def __init__(self, kappas: tuple[float, ...], fit: Callable[[float], object],
                 done: Mapping[float, object] | None = None):
        self._kappas, self._fit = kappas, fit
        self._done = {float(k): m for k, m in (done or {}).items()}

    @property
    def fitted(self) -> Mapping[float, object]:
        """The models in memory now, ``{κ: KCCA}`` (read-only)."""
        return MappingProxyType(self._done)

    def release(self) -> None:
        """Forget the fitted models (each holds ``r × n`` direction matrices per view)."""
        self._done.clear()

    def __getitem__(self, kappa):
        kappa = float(kappa)
        if kappa not in self._kappas:
            raise KeyError(kappa)
        if kappa not in self._done:
            self._done[kappa] = self._fit(kappa)
        return self._done[kappa]

    def __iter__(self):
        return iter(self._kappas)

    def __len__(self) -> int:
        return len(self._kappas)


@dataclass(frozen=True, eq=False)
class SearchGrid:
    """What :func:`run_system` searches for a KCCA system (see its parameters).

    ``powers`` / ``diags`` are the (p, d) candidates (one each when fixed), ``search_kappas`` the κ used
    to compare them, ``kcca`` the solver settings (``{"solver": …, **kcca_kwargs}``)."""

    kappas: tuple
    ns: Sequence[int]
    powers: list[int]
    diags: list[float]
    search_kappas: tuple
    top: int
    criteria: Sequence[str]
    kcca: dict

    @property
    def solver(self) -> str:
        return self.kcca["solver"]

    @property
    def decompose_kwargs(self) -> dict:
        """The settings :func:`kcca.solver.decompose` takes."""
        return {k: self.kcca[k] for k in ("center", "jitter", "eta", "max_rank", "dtype") if k in self.kcca}

    @property
    def fit_kwargs(self) -> dict:
        """The settings :func:`kcca.selection.fit_models` takes."""
        return {k: v for k, v in self.kcca.items() if k not in ("eta", "max_rank")}

    @property
    def single(self) -> bool:
        """Only one (p, d) pair: no search."""
        return len(self.powers) * len(self.diags) == 1


@dataclass(frozen=True, eq=False)
class SystemViews:
    """The KCCA decompositions of one system's kernels, looked up in the store on every call (not kept):
    :attr:`SystemRun.models` keeps this object for refits, and a caller that drops a text kernel no later
    system needs (the main job does) must free its Grams and decompositions."""

    store: KernelStore
    cfg: SystemConfig
    grid: SearchGrid
    timings: dict

    def __call__(self, p: int, d: float):
        """``(image view at power p, text view with diagonal factor d)``."""
        cfg = self.cfg
        if not self.store.has_image(cfg.image_kind) or not self.store.has_text(cfg.text):
            raise KeyError(f"{cfg.name}: the {cfg.image_kind!r} image kernel or the {cfg.text!r} text kernel is "
                           "no longer in the kernel store; its KCCA models cannot be refitted")
        t = time.perf_counter()
        kw = self.grid.decompose_kwargs
        # A view still to be made is asked for first: its factor fills while the one already made waits
        # on disk (parked between systems, KernelStore.park_views) instead of in memory.
        solver = self.grid.solver
        if self.store.has_view("text", cfg.text, d, solver=solver, **kw) and \
                not self.store.has_view("image", cfg.image_kind, p, solver=solver, **kw):
            vx = self.store.image_view(cfg.image_kind, p, solver=solver, **kw)
            vy = self.store.text_view(cfg.text, d, solver=solver, **kw)
        else:
            vy = self.store.text_view(cfg.text, d, solver=solver, **kw)
            vx = self.store.image_view(cfg.image_kind, p, solver=solver, **kw)
        self.timings["decompose"] += time.perf_counter() - t
        return vx, vy

    def refit(self, p: int, d: float, kappa: float):
        """The KCCA model of regulariser ``kappa`` at (p, d), fitted from the decompositions."""
        return fit_models(*self(p, d), (kappa,), **self.grid.fit_kwargs)[kappa]


def pivot_columns(view) -> tuple[int, ...] | None:
    """The training positions a low-rank view reads new items' kernel rows at (its pivots, in pivot
    order); ``None`` when it reads whole rows (exact views, and a full-rank factor, whose rows are read
    in training order)."""
    piv = getattr(view, "pivots", None)
    if getattr(view, "kind", "exact") != "lowrank" or piv is None or len(piv) >= view.n_train:
        return None
    return tuple(int(j) for j in piv)


class PowerDiagSearch:
    """The KCCA part of :func:`run_system` (Hodosh et al. 2013, Sec. 4.1.3): compare the (p, d) pairs on
    dev without ensembles, then the chosen pair's full (n, κ) selection with Borda ensembles."""

    def __init__(self, views: SystemViews, pools: Mapping[str, object]):
        self.views, self.pools = views, pools
        self.store, self.cfg, self.grid, self.timings = views.store, views.cfg, views.grid, views.timings
        self.final_models: dict[float, object] = {}
        self._text_rows: dict = {}   # pivots of the text view (None: whole rows) -> {split: rows}

    def select(self, p: int, d: float, kappas, final_run: bool) -> SelectionResult:
        """The (n, κ) selection at (p, d); ``final_run``: with test scores and Borda ensembles, and the
        fitted models kept in :attr:`final_models`."""
        vx, vy = self.views(p, d)
        t = time.perf_counter()
        cfg, pools = self.cfg, self.pools
        # a low-rank view reads a pool's kernel rows at its pivots only (kcca.solver.KernelView.features):
        # only those columns are computed (at COCO size the full rows would be 5,000 x 113,287 per pool)
        px, py = pivot_columns(vx), pivot_columns(vy)
        if py not in self._text_rows:
            self._text_rows.clear()
            self._text_rows[py] = {s: self.store.text_queries(cfg.text, s, pools[s].captions, py)
                                   for s in ("dev", "test")}
        Ky_rows = self._text_rows[py]
        Kx_rows = {s: self.store.image_rows(cfg.image_kind, s, pools[s].image_ids, p, px) for s in ("dev", "test")}
        models = fit_models(vx, vy, kappas, **self.grid.fit_kwargs)
        res = select_and_ensemble(None, None, dev=(Kx_rows["dev"], Ky_rows["dev"], pools["dev"]),
                                  test=(Kx_rows["test"], Ky_rows["test"]) if final_run else None,
                                  kappas=kappas, ns=self.grid.ns, top=self.grid.top, criteria=self.grid.criteria,
                                  models=models, ensembles=final_run)
        self.timings["select"] += time.perf_counter() - t
        if final_run:
            self.final_models.clear()
            self.final_models.update({float(k): m for k, m in models.items()})
        return res

    def search(self) -> tuple[list[dict], int, float]:
        """The dev records of every (p, d) pair and the best pair (ties → smaller p, then smaller d, as
        :func:`kcca.selection.choose_power_and_diag`, whatever the grids' order)."""
        grid: list[dict] = []
        best: tuple[float, int, float] | None = None
        for p in self.grid.powers:
            for d in self.grid.diags:
                res = self.select(p, d, self.grid.search_kappas, final_run=False)
                score = dev_score(res)
                grid.append({"p": p, "d": d, "dev_score": score, "kappas": list(self.grid.search_kappas),
                             "best_dev": res.summary()["best_dev"]})
                if best is None or (score, -p, -d) > (best[0], -best[1], -best[2]):
                    best = (score, p, d)
        return grid, best[1], best[2]

    def search_and_select(self) -> dict:
        """The whole search as :func:`~kcca.run_cache.run_to_arrays` (what the run cache stores)."""
        if self.grid.single:
            grid, p, d = [], self.grid.powers[0], self.grid.diags[0]
        else:
            grid, p, d = self.search()
        res = self.select(p, d, tuple(self.grid.kappas), final_run=True)
        score = dev_score(res)
        if self.grid.single:
            grid.append({"p": p, "d": d, "dev_score": score, "kappas": [float(k) for k in self.grid.kappas],
                         "best_dev": res.summary()["best_dev"]})
        return run_to_arrays(res, grid, p, d, score)


def _pool_images(pools: Mapping[str, object]) -> tuple[str, ...]:
    """The dev and test pools' images, each once: the image kernel's fit computes their visual words in
    its parallel pass over the training images (:meth:`KernelStore.image`, ``words_for``) instead of the
    first Gram rows that need them, a row block at a time."""
    return tuple(dict.fromkeys(i for s in ("dev", "test") for i in pools[s].image_ids))


def _run_nn(cfg: SystemConfig, corpus, store: KernelStore, train_ids, pools, *, fixed_power, powers, cache,
            show_progress, text_kwargs, timings: dict, t_start: float) -> SystemRun:
    """A nearest-neighbour baseline (Hodosh et al. 2013, Sec. 3.1, Eq. 2) over the store's image kernel.
    The training histograms its pool rows are computed against stay kept (the low-rank solver's columns of
    the same kernel use them): the caller releases them after the last system of that kernel
    (:meth:`~kcca.kernel_store.ImageKernelEntry.release_rows`)."""
    t = time.perf_counter()
    nn = NearestNeighbour(cfg.nn_variant, cache=cache, show_progress=show_progress, text=cfg.text or "TRI5",
                          text_kwargs=text_kwargs).fit(corpus, list(train_ids), executor=store.executor)
    p = int(fixed_power or powers[0])   # NN uses argmax over the image kernel: p is irrelevant
    mats = {}
    for s in ("dev", "test"):   # the pool's image rows a block at a time, never the pool x training matrix
        ids = list(pools[s].image_ids)
        mats[s] = nn.scores(lambda lo, hi, ids=ids: store.image_row_block(cfg.image_kind, ids[lo:hi], p), pools[s],
                            n_images=len(ids))
    timings["nn"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - t_start
    return SystemRun(name=cfg.name, test_matrices=mats["test"], dev_matrices=mats["dev"],
                     config={**cfg.as_dict(), "image_power": p}, timings=timings)


def _kcca_run(cfg: SystemConfig, search: PowerDiagSearch, arrays, *, timings: dict, t_start: float) -> SystemRun:
    """The :class:`SystemRun` of a KCCA system from its (computed or cached) search arrays."""
    res, grid, p, d, score = run_from_arrays(arrays)
    g = search.grid
    # A cached run keeps no models: the chosen (p, d) models are fitted when first asked for.  A fresh
    # run keeps its selection's models until SystemRun.release_models() (then they are refitted too).
    models = LazyModels(tuple(float(k) for k in g.kappas), functools.partial(search.views.refit, p, d),
                        done=search.final_models)
    timings["total"] = time.perf_counter() - t_start
    config = {**cfg.as_dict(), "image_power": p, "text_diag": d, "dev_score": score,
              "powers_searched": [int(x) for x in g.powers], "diag_factors_searched": [float(x) for x in g.diags],
              "solver": g.solver, "kcca": {k: v for k, v in g.kcca.items() if k != "solver"},
              "kappas": [float(k) for k in g.kappas], "n_grid": [int(n) for n in g.ns],
              "selection": res.summary()}
    return SystemRun(name=cfg.name, test_matrices=res.test_matrices, dev_matrices=res.dev_matrices,
                     config=config, timings=timings, selection=res, grid=grid, models=models)


# ------------------------------------------------------------------------------------ run
def run_system(
    name: str, corpus, *, store: KernelStore | None = None, seed: int = 0, cache=None,
    pools: Mapping[str, object] | None = None,
    kappas: Sequence[float] = PAPER_KAPPAS, ns: Sequence[int] | None = None,
    powers: Sequence[int] = PAPER_POWERS, diag_factors: Sequence[float] = DEFAULT_DIAG_FACTORS,
    fixed_power: int | None = None, fixed_diag: float | None = None, pd_kappas: Sequence[float] | None = None,
    top: int = 5,
    criteria: Sequence[str] = CRITERIA, solver: str = "exact", kcca_kwargs: Mapping | None = None,
    skip_missing_images: bool = False, show_progress: bool = False,
    image_kwargs: Mapping | None = None, text_kwargs: Mapping | None = None,
) -> SystemRun:
    """Train and score one system (Hodosh et al. 2013, Sec. 4.1.3, Appendix B).

    Steps: fit (or reuse) the image kernel; an NN system then ranks by its nearest training image
    (:func:`_run_nn`); a KCCA system fits (or reuses) its text kernel and runs :class:`PowerDiagSearch`
    (served from the on-disk run cache, :mod:`kcca.run_cache`, when it was computed before).

    Parameters
    ----------
    name : system name (any spelling :func:`canonical_name` accepts)
    corpus : corpora.base.Corpus with ``train``/``dev``/``test`` splits
    store : :class:`~kcca.kernel_store.KernelStore` shared across calls (fitted kernels, Gram rows and
        KCCA decompositions are reused by every later system on the same corpus); default: a fresh one
    seed : seeds the caption choices of the pools and the kernels' random steps
    cache : corpora.cache.DiskCache passed to the image and text kernels
    pools : ``{"dev": RankingPool, "test": RankingPool}``; default ``hodosh_pool(corpus, split, seed=seed)``
    kappas, ns : the (n, κ) grid (default: the paper's 4 κ, 46 log-spaced n in [10, 6000])
    powers, diag_factors : candidates for the image power p and the text diagonal factor d (fixed per
        system on dev: the pair with the best :func:`dev_score`); ``fixed_power`` / ``fixed_diag``
        skip that search; ``pd_kappas`` restricts the κ used while comparing (p, d) pairs (default: all
        of ``kappas``; e.g. ``(1.0,)`` makes the search 4× cheaper), the final selection always uses
        ``kappas``
    top, criteria : 5 models per criterion (R@1, R@5, R@10) per task → 15-model Borda ensembles
    solver : ``"exact"`` or ``"lowrank"`` KCCA (``kcca_kwargs`` for ``jitter``, ``eta``, ``max_rank`` …)

    Returns
    -------
    SystemRun
    """
    t_start = time.perf_counter()
    cfg = get_system(name)
    own_store = store is None   # nothing after this call can reuse what the store keeps
    store = KernelStore() if own_store else store
    pools = dict(pools) if pools is not None else _default_pools(corpus, seed, skip_missing_images)
    for s in ("dev", "test"):
        if s not in pools:
            raise ValueError(f"pools must contain 'dev' and 'test' (got {sorted(pools)})")
    timings: dict[str, float] = {}
    train_ids = train_items(corpus, skip_missing_images=skip_missing_images).image_ids
    fit_kw = dict(seed=seed, cache=cache, show_progress=show_progress)
    t = time.perf_counter()
    ie = store.image(cfg.image_kind, corpus, train_ids, image_kwargs=image_kwargs, words_for=_pool_images(pools),
                     **fit_kw)
    timings["image_kernel_fit"] = time.perf_counter() - t
    if cfg.model == "nn":
        run = _run_nn(cfg, corpus, store, train_ids, pools, fixed_power=fixed_power, powers=powers, cache=cache,
                      show_progress=show_progress, text_kwargs=text_kwargs, timings=timings, t_start=t_start)
        if own_store:   # the training histograms kept for later systems' columns: there are none
            ie.release_rows()
        return run

    t = time.perf_counter()
    store.text(cfg.text, corpus, train_ids, text_kwargs=text_kwargs, **fit_kw)
    timings["text_kernel"] = time.perf_counter() - t
    grid = SearchGrid(
        kappas=tuple(kappas), ns=log_spaced_ns(6000, 46, 10) if ns is None else ns,
        powers=[int(fixed_power)] if fixed_power is not None else [int(p) for p in powers],
        diags=[float(fixed_diag)] if fixed_diag is not None else [float(d) for d in diag_factors],
        search_kappas=tuple(kappas) if pd_kappas is None else tuple(pd_kappas), top=top, criteria=criteria,
        kcca={"solver": solver, **dict(kcca_kwargs or {})})
    timings["decompose"] = timings["select"] = 0.0
    search = PowerDiagSearch(SystemViews(store, cfg, grid, timings), pools)
    # The whole (p, d) search + (n, κ) selection + Borda ensembles is cached on disk under everything that
    # determines it; a hit rebuilds the fitted models only on demand (SystemRun.models, e.g. for a caption
    # metric) and returns the selection timings recorded when the entry was computed.
    if cache is None or not getattr(cache, "enabled", False):
        arrays = search.search_and_select()
    else:
        key = run_cache_key(
            system=cfg.as_dict(), corpus=corpus, train_ids=train_ids, pools=pools, codebooks=ie.codebook_digests(),
            seed=seed, kappas=grid.kappas, ns=grid.ns, powers=grid.powers, diags=grid.diags,
            pd_kappas=grid.search_kappas, top=top, criteria=criteria, kcca=grid.kcca, image_kwargs=image_kwargs,
            text_kwargs=text_kwargs, skip_missing_images=skip_missing_images)
        arrays = cache.get_or_compute(RUN_CACHE_NAMESPACE, key, search.search_and_select)
    return _kcca_run(cfg, search, arrays, timings=timings, t_start=t_start)
