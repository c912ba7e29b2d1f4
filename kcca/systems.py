"""The systems of Hodosh et al. (2013), Appendix B (Tables 11–12), configurable by name.

A *system* is a model (``"kcca"`` or the nearest-neighbour baseline ``"nn"``), a text kernel
(:class:`kernels.text.TextKernel` by paper name) and an image kernel
(:class:`kernels.image.ImageKernel`, spatial pyramid by default, the global-histogram kernel for the
``^Histo`` systems).  :func:`run_system` trains one system on the corpus' training split and returns its
dev and test score matrices (Hodosh's dev-set model selection and Borda ensembles for KCCA, see
:mod:`kcca.selection`).

Canonical names are ASCII (``BoW5^sqrtidf``, ``TRI5_A,D_ext+ic^sqrtidf``); :func:`canonical_name`
also accepts the paper's spellings (``BoW5^{√idf}``, ``TRI5_{A,D_{ext}+ic}^{\\sqrt{idf}}``,
``NN5_F1^{idf}``, ``D_BNC`` for ``D_ext``).  ``TRI5SEM`` is ``TRI5_A,D_ext+ic^sqrtidf`` with the
pyramid kernel, ``TRI5SEM^Histo`` the same text kernel with the global-histogram kernel, ``NN5_TRI`` the
paper's NN5_TRI(best) (the NN baseline over TRI5SEM's text kernel).  :data:`PAPER_TABLE_ORDER` holds the
30 systems of Tables 11-12 in the tables' order; :data:`EXTRA_SYSTEMS` the registered systems outside
that grid.

Sharing across systems
----------------------
``image_kernels`` (a dict the caller keeps across calls) holds the fitted :class:`ImageKernel` per
kind, its per-feature Gram matrices per split and the κ-independent KCCA decomposition of every
(kind, power) — computed once for the whole grid.  ``text_kernels`` does the same for text kernels
(fitted :class:`TextKernel`, query rows, decompositions per diagonal factor).  Everything expensive
is also cached on disk through the kernels' own ``DiskCache``.
"""
from __future__ import annotations

import contextlib
import re
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from corpora.scoring import ScoreMatrices
from kcca.selection import (
    CRITERIA, DEFAULT_DIAG_FACTORS, PAPER_KAPPAS, PAPER_POWERS, SelectionResult, fit_models,
    select_and_ensemble,
)
from kcca.solver import decompose, log_spaced_ns

__all__ = ["SystemConfig", "SYSTEMS", "PAPER_TABLE_ORDER", "EXTRA_SYSTEMS", "canonical_name", "split_system_list", "get_system",
           "list_systems", "system_names",
           "SystemRun", "run_system", "dev_score", "pair_scorer"]


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
    for t in ("BoW1", "TRI1", "BoW5", "BoW5^idf", "BoW5^sqrtidf", "TagRank", "TRI5", "TRI5^sqrtidf"):
        add(t, model="kcca", text=t, paper_name=t.replace("^sqrtidf", "^√idf"))
    add("BoW5^Histo", model="kcca", text="BoW5", image_kind="histogram", paper_name="BoW5^Histo")
    add("TRI5^Histo", model="kcca", text="TRI5", image_kind="histogram", paper_name="TRI5^Histo")
    for s in ("Lin", "D_ext", "D_ic", "D_ext+ic", "A", "A,D_ic", "A,D_ext", "A,D_ext+ic"):
        add(f"TRI5_{s}", model="kcca", text=f"TRI5_{s}", paper_name=f"TRI5_{{{s}}}")
        if s != "A,D_ext+ic":   # its √idf version is TRI5SEM, registered under that name only
            add(f"TRI5_{s}^sqrtidf", model="kcca", text=f"TRI5_{s}^sqrtidf", paper_name=f"TRI5_{{{s}}}^√idf")
    add("TRI5SEM", model="kcca", text="TRI5SEM", paper_name="TRI5SEM")
    add("TRI5SEM^Histo", model="kcca", text="TRI5SEM", image_kind="histogram",
        paper_name="TRI5_{A,D_BNC+ic}^{√idf,Histo}")
    # outside the paper's grid (EXTRA_SYSTEMS)
    add("NN5_TRI5", model="nn", nn_variant="NN5_TRI", text="TRI5", paper_name="NN5_TRI5")
    return reg


#: name -> SystemConfig (canonical ASCII names).
SYSTEMS: dict[str, SystemConfig] = _build_registry()

#: The 30 systems of Tables 11/12 in the tables' order (``--systems all``).
PAPER_TABLE_ORDER: tuple[str, ...] = (
    "NN5_F1", "NN5_F1^idf", "NN5_BoW5", "NN5_TRI", "BoW1", "TRI1", "BoW5^Histo", "BoW5", "BoW5^idf",
    "BoW5^sqrtidf", "TagRank", "TRI5^Histo", "TRI5", "TRI5^sqrtidf", "TRI5_Lin",
    "TRI5_D_ext", "TRI5_D_ext^sqrtidf", "TRI5_D_ic", "TRI5_D_ic^sqrtidf", "TRI5_D_ext+ic",
    "TRI5_D_ext+ic^sqrtidf", "TRI5_A", "TRI5_A^sqrtidf", "TRI5_A,D_ic", "TRI5_A,D_ic^sqrtidf",
    "TRI5_A,D_ext", "TRI5_A,D_ext^sqrtidf", "TRI5_A,D_ext+ic", "TRI5SEM^Histo", "TRI5SEM",
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
    test_matrices, dev_matrices : evaluation.ScoreMatrices over the test / dev pools
    config : dict (system config + chosen p, d and the selection summary)
    timings : dict of seconds per stage
    selection : SelectionResult of the chosen (p, d) (KCCA systems), else None
    grid : list of dev records, one per (p, d) tried (KCCA systems)
    models : ``{κ: fitted KCCA}`` of the chosen (p, d) (KCCA systems; empty for NN).  Every model of
        the selection is ``models[κ]`` truncated to ``n`` dimensions; :func:`pair_scorer` uses them.
        A model that is not in memory (a run served from the cache, or after :meth:`release_models`) is
        fitted on first access from the kernel decompositions kept in the shared kernel dicts.
    """

    name: str
    test_matrices: object
    dev_matrices: object
    config: dict
    timings: dict = field(default_factory=dict)
    selection: SelectionResult | None = None
    grid: list = field(default_factory=list)
    models: Mapping = field(default_factory=dict)

    def release_models(self) -> None:
        """Drop the fitted KCCA models to free memory; :func:`pair_scorer` (or any access to
        ``models[κ]``) refits the one it needs.  Each model holds two ``r × n`` direction matrices
        (float64); the four κ of a system took about 1 GB at Flickr8k's 6,000 training items, so a run
        of many systems keeps only what it still uses (docs/kcca.md, "Memory across systems")."""
        release = getattr(self.models, "release", None)
        if release is not None:
            release()


def dev_score(result: SelectionResult) -> float:
    """The (p, d) selection score: mean over tasks of the best ``(R@1 + R@5 + R@10) / 3`` on dev."""
    return float(np.mean([np.nanmax(result.table.metrics[t][..., :3].mean(axis=-1))
                          for t in ("annotation", "search")]))


# ----------------------------------------------------------------------------- shared kernels
def _image_entry(image_kernels: dict, kind: str, corpus, train_ids, seed, cache, show_progress, image_kwargs):
    from kernels.image import ImageKernel

    key = ("image", kind)
    if key not in image_kernels:
        ik = ImageKernel(kind=kind, power=2, seed=seed, cache=cache, show_progress=show_progress,
                         **(image_kwargs or {}))
        # another kind on the same corpus (pyramid vs histogram) has the same visual words: reuse them
        peers = [e["kernel"] for k, e in image_kernels.items()
                 if k[0] == "image" and e["train_ids"] == tuple(train_ids)]
        ik.fit(corpus, list(train_ids), share_words_with=peers[0] if peers else None)
        image_kernels[key] = {"kernel": ik, "train_ids": tuple(train_ids), "feature_grams": {},
                              "views": {}, "combined": {}}
    entry = image_kernels[key]
    if entry["train_ids"] != tuple(train_ids):
        raise ValueError("image_kernels was filled for a different training set; use a fresh dict per "
                         "corpus / training split")
    return entry


def _image_rows(entry: dict, split: str, ids, power: int) -> np.ndarray:
    """Combined image kernel (Eq. 6, power p) of ``ids`` against the training images (``split="train"``:
    the training Gram)."""
    from kernels.image import combine_kernels

    rows_key = "train" if split == "train" else (split, tuple(ids))   # keyed by the ids, not the name
    ck = (rows_key, int(power))
    if ck not in entry["combined"]:
        if rows_key not in entry["feature_grams"]:
            cols = None if split == "train" else list(entry["train_ids"])
            rows = list(entry["train_ids"]) if split == "train" else list(ids)
            entry["feature_grams"][rows_key] = entry["kernel"].feature_grams(rows, cols)
        entry["combined"][ck] = combine_kernels(entry["feature_grams"][rows_key], int(power))
    return entry["combined"][ck]


def _text_entry(text_kernels: dict, text_name: str, corpus, train_ids, seed, cache, show_progress, text_kwargs):
    from kernels.text import TextKernel

    key = ("text", text_name)
    if key not in text_kernels:
        tk = TextKernel.from_name(text_name, seed=seed, cache=cache, show_progress=show_progress,
                                  **(text_kwargs or {}))
        tk.fit(corpus, list(train_ids))
        text_kernels[key] = {"kernel": tk, "train_ids": tuple(train_ids), "queries": {}, "views": {}}
    entry = text_kernels[key]
    if entry["train_ids"] != tuple(train_ids):
        raise ValueError("text_kernels was filled for a different training set; use a fresh dict per "
                         "corpus / training split")
    return entry


def _text_train(entry: dict, d: float) -> np.ndarray:
    tk = entry["kernel"]
    tk.diag = float(d)
    return tk.gram_train()


def _text_queries(entry: dict, split: str, captions) -> np.ndarray:
    key = (split, tuple(c.id for c in captions))
    if key not in entry["queries"]:
        entry["queries"][key] = entry["kernel"].gram_queries(list(captions))
    return entry["queries"][key]


def _default_pools(corpus, seed, skip_missing_images):
    from corpora.protocol import hodosh_pool

    return {s: hodosh_pool(corpus, s, seed=seed, skip_missing_images=skip_missing_images)
            for s in ("dev", "test")}


# ------------------------------------------------------------------------------------ run
#: Bumped whenever the cached content of a KCCA system run changes meaning.
_RUN_CACHE_VERSION = 2


def _digest(items) -> str:
    import hashlib

    return hashlib.sha256("\n".join(map(str, items)).encode("utf-8")).hexdigest()


def _pool_digest(pool) -> str:
    return _digest([*pool.image_ids, "|", *pool.caption_ids, "|",
                    *np.asarray(pool.gold_caption).tolist(), "|", *np.asarray(pool.gold_image).tolist()])


@contextlib.contextmanager
def _warnings_naming(what: str):
    """Re-issue the warnings raised inside (e.g. KCCA's "not positive semidefinite") with ``what``
    (which kernel) in front, so a log line says where it comes from."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for w in caught:
        warnings.warn(f"{what}: {w.message}", w.category, stacklevel=3)


def _codebooks_digest(kernel) -> dict | None:
    """:meth:`~kernels.image.ImageKernel.codebook_digests` of a fitted image kernel (``None`` for objects
    without one, e.g. test doubles)."""
    fn = getattr(kernel, "codebook_digests", None)
    return fn() if fn is not None else None


def _images_digest(corpus, id_lists) -> str | None:
    """:meth:`~corpora.base.Corpus.images_fingerprint` of each list of image ids (``None`` for objects
    without one, e.g. test doubles), so a replaced image file gives a new run key."""
    fp = getattr(corpus, "images_fingerprint", None)
    return None if fp is None else _digest([fp(list(ids)) for ids in id_lists])


def _json_default(o):
    if isinstance(o, (np.integer, np.floating)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _run_to_arrays(res: SelectionResult, grid: list, p: int, d: float, score: float) -> dict:
    """A KCCA system run as plain arrays (the DiskCache stores npz, never pickles)."""
    import json

    t = res.table
    meta = {"p": int(p), "d": float(d), "score": float(score), "grid": grid,
            "chosen": {task: [c.as_dict() for c in cs] for task, cs in res.chosen.items()},
            "kappas": [float(k) for k in t.kappas], "ns": [int(n) for n in t.ns], "columns": list(t.columns),
            "ns_by_kappa": [[float(k), [int(n) for n in v]] for k, v in t.ns_by_kappa.items()],
            "tasks": list(t.metrics), "corr_kappas": [float(k) for k in res.correlations],
            "timings": {k: float(v) for k, v in res.timings.items()},
            "has_test": res.test_matrices is not None, "has_dev": res.dev_matrices is not None}
    out = {"meta": np.array(json.dumps(meta, default=_json_default))}
    for split, m in (("test", res.test_matrices), ("dev", res.dev_matrices)):
        if m is not None:
            out[f"{split}::annotation"], out[f"{split}::search"] = m.annotation, m.search
    for k, task in enumerate(t.metrics):
        out[f"metrics::{k}"] = t.metrics[task]
    for k, c in enumerate(res.correlations.values()):
        out[f"corr::{k}"] = np.asarray(c)
    return out


def _run_from_arrays(arrays) -> tuple[SelectionResult, list, int, float, float]:
    import json

    from kcca.selection import ChosenModel, SweepTable

    meta = json.loads(str(np.asarray(arrays["meta"])))
    mats = {s: ScoreMatrices(annotation=np.asarray(arrays[f"{s}::annotation"]),
                             search=np.asarray(arrays[f"{s}::search"]))
            for s in ("test", "dev") if meta[f"has_{s}"]}
    table = SweepTable(kappas=tuple(meta["kappas"]), ns=tuple(meta["ns"]),
                       metrics={task: np.asarray(arrays[f"metrics::{k}"]) for k, task in enumerate(meta["tasks"])},
                       ns_by_kappa={float(k): tuple(v) for k, v in meta["ns_by_kappa"]},
                       columns=tuple(meta["columns"]))
    chosen = {task: [ChosenModel(**c) for c in cs] for task, cs in meta["chosen"].items()}
    corr = {float(k): np.asarray(arrays[f"corr::{i}"]) for i, k in enumerate(meta["corr_kappas"])}
    res = SelectionResult(test_matrices=mats.get("test"), dev_matrices=mats.get("dev"), chosen=chosen,
                          table=table, correlations=corr, timings=dict(meta["timings"]))
    return res, meta["grid"], int(meta["p"]), float(meta["d"]), float(meta["score"])


class _LazyModels(Mapping):
    """``{κ: fitted KCCA}`` whose models are fitted on first access (a cached run keeps no models).

    ``done`` holds models already fitted (a fresh run keeps those of its selection); :meth:`release`
    drops them, and a later access refits from the shared kernel decompositions (the same numbers)."""

    def __init__(self, kappas: tuple[float, ...], fit: Callable[[float], object],
                 done: Mapping[float, object] | None = None):
        self._kappas, self._fit = kappas, fit
        self._done = {float(k): m for k, m in (done or {}).items()}

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


def run_system(
    name: str, corpus, *, seed: int = 0, cache=None, image_kernels: dict | None = None,
    text_kernels: dict | None = None, pools: Mapping[str, object] | None = None,
    kappas: Sequence[float] = PAPER_KAPPAS, ns: Sequence[int] | None = None,
    powers: Sequence[int] = PAPER_POWERS, diag_factors: Sequence[float] = DEFAULT_DIAG_FACTORS,
    fixed_power: int | None = None, fixed_diag: float | None = None, pd_kappas: Sequence[float] | None = None,
    top: int = 5,
    criteria: Sequence[str] = CRITERIA, solver: str = "exact", kcca_kwargs: Mapping | None = None,
    skip_missing_images: bool = False, show_progress: bool = False,
    image_kwargs: Mapping | None = None, text_kwargs: Mapping | None = None,
) -> SystemRun:
    """Train and score one system (Hodosh et al. 2013, Sec. 4.1.3, Appendix B).

    Parameters
    ----------
    name : system name (any spelling :func:`canonical_name` accepts)
    corpus : corpora.base.Corpus with ``train``/``dev``/``test`` splits
    seed : seeds the caption choices of the pools and the kernels' random steps
    cache : corpora.cache.DiskCache passed to the image and text kernels
    image_kernels, text_kernels : dicts shared across calls (fitted kernels, Gram rows and KCCA
        decompositions are reused by every later system on the same corpus)
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
    from corpora.protocol import train_items

    t_start = time.perf_counter()
    cfg = get_system(name)
    image_kernels = {} if image_kernels is None else image_kernels
    text_kernels = {} if text_kernels is None else text_kernels
    pools = dict(pools) if pools is not None else _default_pools(corpus, seed, skip_missing_images)
    for s in ("dev", "test"):
        if s not in pools:
            raise ValueError(f"pools must contain 'dev' and 'test' (got {sorted(pools)})")
    timings: dict[str, float] = {}
    train = train_items(corpus, skip_missing_images=skip_missing_images)
    train_ids = train.image_ids
    t = time.perf_counter()
    ie = _image_entry(image_kernels, cfg.image_kind, corpus, train_ids, seed, cache, show_progress, image_kwargs)
    timings["image_kernel_fit"] = time.perf_counter() - t

    if cfg.model == "nn":
        from kernels.text import NearestNeighbour

        t = time.perf_counter()
        nn = NearestNeighbour(cfg.nn_variant, cache=cache, show_progress=show_progress, text=cfg.text or "TRI5",
                              text_kwargs=text_kwargs).fit(corpus, list(train_ids))
        p = int(fixed_power or powers[0])   # NN uses argmax over the image kernel: p is irrelevant
        mats = {s: nn.scores(_image_rows(ie, s, pools[s].image_ids, p), pools[s]) for s in ("dev", "test")}
        timings["nn"] = time.perf_counter() - t
        timings["total"] = time.perf_counter() - t_start
        return SystemRun(name=cfg.name, test_matrices=mats["test"], dev_matrices=mats["dev"],
                         config={**cfg.as_dict(), "image_power": p}, timings=timings)

    kk = {"solver": solver, **dict(kcca_kwargs or {})}
    dec_kw = {k: kk[k] for k in ("center", "jitter", "eta", "max_rank", "dtype") if k in kk}
    t = time.perf_counter()
    te = _text_entry(text_kernels, cfg.text, corpus, train_ids, seed, cache, show_progress, text_kwargs)
    timings["text_kernel"] = time.perf_counter() - t
    ps = [int(fixed_power)] if fixed_power is not None else [int(p) for p in powers]
    ds = [float(fixed_diag)] if fixed_diag is not None else [float(d) for d in diag_factors]
    if ns is None:
        ns = log_spaced_ns(6000, 46, 10)
    vkey = (solver, tuple(sorted(dec_kw.items())))
    search_kappas = tuple(kappas) if pd_kappas is None else tuple(pd_kappas)
    single = len(ps) * len(ds) == 1
    timings["decompose"] = timings["select"] = 0.0
    Ky_rows: dict = {}

    ikey, tkey = ("image", cfg.image_kind), ("text", cfg.text)

    def views(p, d):
        # The entries are looked up in the shared dicts on each call, not captured: SystemRun.models
        # keeps this function for refits, and a caller that drops an entry (the main job does, for text
        # kernels no later system needs) must free its Grams and decompositions.
        if ikey not in image_kernels or tkey not in text_kernels:
            raise KeyError(f"{cfg.name}: the {cfg.image_kind!r} image kernel or the {cfg.text!r} text kernel is "
                           "no longer in the shared kernel dicts; its KCCA models cannot be refitted")
        ie_, te_ = image_kernels[ikey], text_kernels[tkey]
        t = time.perf_counter()
        if (p, vkey) not in ie_["views"]:
            with _warnings_naming(f"{cfg.image_kind} image kernel (p = {p})"):
                ie_["views"][(p, vkey)] = decompose(_image_rows(ie_, "train", None, p), solver=solver, **dec_kw)
        if (d, vkey) not in te_["views"]:
            with _warnings_naming(f"{cfg.text} text kernel (d = {d:g})"):
                te_["views"][(d, vkey)] = decompose(_text_train(te_, d), solver=solver, **dec_kw)
        timings["decompose"] += time.perf_counter() - t
        return ie_["views"][(p, vkey)], te_["views"][(d, vkey)]

    final_models: dict = {}
    fit_kw = {k: v for k, v in kk.items() if k not in ("eta", "max_rank")}

    def select(p, d, ks, final_run):
        vx, vy = views(p, d)
        t = time.perf_counter()
        if not Ky_rows:
            Ky_rows.update({s: _text_queries(te, s, pools[s].captions) for s in ("dev", "test")})
        Kx_rows = {s: _image_rows(ie, s, pools[s].image_ids, p) for s in ("dev", "test")}
        models = fit_models(vx, vy, ks, **fit_kw)
        res = select_and_ensemble(None, None, dev=(Kx_rows["dev"], Ky_rows["dev"], pools["dev"]),
                                  test=(Kx_rows["test"], Ky_rows["test"]) if final_run else None,
                                  kappas=ks, ns=ns, top=top, criteria=criteria, models=models,
                                  ensembles=final_run)
        timings["select"] += time.perf_counter() - t
        if final_run:
            final_models.clear()
            final_models.update({float(k): m for k, m in models.items()})
        return res

    def search_and_select() -> dict:
        # compare the (p, d) pairs on dev without building ensembles; then the chosen pair's full selection
        grid: list[dict] = []
        best: tuple[float, int, float] | None = None
        for p in ps:
            for d in ds:
                if single:
                    break
                res = select(p, d, search_kappas, final_run=False)
                score = dev_score(res)
                grid.append({"p": p, "d": d, "dev_score": score, "kappas": list(search_kappas),
                             "best_dev": res.summary()["best_dev"]})
                # ties → smaller p, then smaller d (as choose_power_and_diag), whatever the grids' order
                if best is None or (score, -p, -d) > (best[0], -best[1], -best[2]):
                    best = (score, p, d)
        if single:
            best = (float("nan"), ps[0], ds[0])
        _, p, d = best
        res = select(p, d, tuple(kappas), final_run=True)
        score = dev_score(res)
        if single:
            grid.append({"p": p, "d": d, "dev_score": score, "kappas": [float(k) for k in kappas],
                         "best_dev": res.summary()["best_dev"]})
        return _run_to_arrays(res, grid, p, d, score)

    # The whole (p, d) search + (n, κ) selection + Borda ensembles is cached on disk (namespace
    # "kcca_runs") under everything that determines it (DiskCache canonicalises the key); a hit rebuilds
    # the fitted models only on demand (SystemRun.models, e.g. for pair_scorer).  A hit also returns
    # the selection timings recorded when the entry was computed (config["selection"]["timings"]).
    key = None
    if cache is not None and getattr(cache, "enabled", False):
        key = {"what": "kcca-system-run", "version": _RUN_CACHE_VERSION, "system": cfg.as_dict(),
               "corpus": getattr(corpus, "name", None), "fingerprint": getattr(corpus, "fingerprint", None),
               "train": _digest(train_ids), "pools": {s: _pool_digest(pools[s]) for s in ("dev", "test")},
               # the pixels: the fingerprint covers captions and splits, not image files
               "images": _images_digest(corpus, [train_ids, *(pools[s].image_ids for s in ("dev", "test"))]),
               # the visual words: the codebooks (sampled descriptors + k-means) are cached separately
               "codebooks": _codebooks_digest(ie["kernel"]),
               "seed": int(seed), "kappas": [float(k) for k in kappas], "ns": [int(n) for n in ns],
               "powers": ps, "diags": ds, "pd_kappas": [float(k) for k in search_kappas], "top": int(top),
               "criteria": list(criteria), "kcca": kk, "image_kwargs": dict(image_kwargs or {}),
               "text_kwargs": dict(text_kwargs or {}),
               "skip_missing_images": bool(skip_missing_images)}
    arrays = search_and_select() if key is None else cache.get_or_compute("kcca_runs", key, search_and_select)
    res, grid, p, d, score = _run_from_arrays(arrays)
    # A cached run keeps no models: the chosen (p, d) models are fitted when first asked for.  A fresh
    # run keeps its selection's models until SystemRun.release_models() (then they are refitted too).
    final_models = _LazyModels(tuple(float(k) for k in kappas),
                               lambda k, p=p, d=d: fit_models(*views(p, d), (k,), **fit_kw)[k],
                               done=final_models)
    timings["total"] = time.perf_counter() - t_start
    config = {**cfg.as_dict(), "image_power": p, "text_diag": d, "dev_score": score,
              "powers_searched": [int(x) for x in ps], "diag_factors_searched": [float(x) for x in ds],
              "solver": solver, "kcca": {k: v for k, v in kk.items() if k != "solver"},
              "kappas": [float(k) for k in kappas], "n_grid": [int(n) for n in ns],
              "selection": res.summary()}
    return SystemRun(name=cfg.name, test_matrices=res.test_matrices, dev_matrices=res.dev_matrices,
                     config=config, timings=timings, selection=res, grid=grid, models=final_models)


# ------------------------------------------------------------------------------ pair scorer
def _query_caption(text: str, lookup: Mapping[str, object]):
    """A :class:`corpora.base.Caption` for a candidate text: the corpus caption with the same text
    (exact, else whitespace/case-normalised) so its corpus lemma / POS are reused, else a fresh caption
    with ``lemma=None`` (the text kernel's preprocessor then tags and lemmatises it with NLTK)."""
    import hashlib

    from corpora.base import Caption

    hit = lookup.get(text)
    if hit is None:
        hit = lookup.get(" ".join(text.lower().split()))
    if hit is not None:
        return hit
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]
    return Caption(id=f"query:{digest}", image_id="", index=0, text=text, lemma=None, pos=None)


def pair_scorer(run: SystemRun, corpus, *, image_kernels: dict, text_kernels: dict,
                criterion: str = "R@1") -> Callable:
    """The KCCA affinity of a trained system as a caption metric (Hodosh et al. 2013, Eq. 4).

    .. math::

        f_{KCCA}(i, s) = \\cos\\big(\\alpha_{1..n}^\\top K_I(i),\\; \\beta_{1..n}^\\top K_S(s)\\big)

    where ``K_I(i)`` is the combined image kernel (Eq. 6, the system's chosen power ``p``) of image ``i``
    against the training images and ``K_S(s)`` the text kernel of caption ``s`` against the training
    items (the chosen diagonal factor ``d`` only scales the *training* Gram, so it lives in the fitted
    model, not in the query rows).  Kernel centring uses the training statistics (as in retrieval).

    Which model: Borda ensembles (Sec. 4.1.3) fuse *rankings* of a pool and give no per-pair score, so
    the scorer uses the **single best (n, κ) model chosen on dev for the annotation task** (ranking
    captions for an image, i.e. what a caption metric does) under ``criterion`` — the top model of
    :func:`kcca.selection.select_top` (ties: lower mean rank, smaller n, smaller κ).

    Parameters
    ----------
    run : SystemRun of a KCCA system from :func:`run_system` (``run.models`` gives the fitted models,
        refitting one that was released or never fitted)
    corpus : the corpus the system was trained on (candidate texts are looked up in its captions)
    image_kernels, text_kernels : the shared dicts that were passed to :func:`run_system`
    criterion : ``"R@1"``, ``"R@5"`` or ``"R@10"`` (dev criterion picking the single model)

    Returns
    -------
    score_fn(image_ids, candidates, references) -> ndarray float32 (one score per pair, in [-1, 1]);
    ``references`` are ignored.  Image ids are corpus image ids (words extracted on demand through the
    system's :class:`~kernels.image.ImageKernel`, disk-cached); candidates are caption texts: a text equal
    to a corpus caption reuses that caption's lemma/POS, any other text is lemmatised with NLTK.  Kernel
    rows are computed once per distinct image / text and kept for later calls (in the ``image_kernels``
    / ``text_kernels`` entries, so scorers of other systems over the same kernels reuse them); each call
    projects the distinct items once and takes the per-pair cosine.  ``score_fn.model`` describes the model used;
    the model itself is fitted (or taken from ``run.models``) on the first call.

    Raises
    ------
    ValueError
        for NN systems (no KCCA affinity), an unknown ``criterion``, or kernel dicts that do not hold
        this system's kernels.
    """
    from kernels.image import combine_kernels

    cfg = get_system(run.name)
    if cfg.model != "kcca":
        raise ValueError(f"pair_scorer: system {run.name!r} is a nearest-neighbour baseline (model "
                         f"{cfg.model!r}); it has no KCCA affinity f(i, s) to score pairs with")
    if criterion not in CRITERIA:
        raise ValueError(f"pair_scorer: criterion must be one of {CRITERIA}, got {criterion!r}")
    if run.selection is None or not run.models:
        raise ValueError(f"pair_scorer: SystemRun {run.name!r} keeps no fitted KCCA models (run.models); "
                         "re-run it with kcca.systems.run_system")
    best = run.selection.table.best("annotation", criterion)
    kappa, n = float(best["kappa"]), int(best["n"])
    p, d = int(run.config["image_power"]), float(run.config["text_diag"])
    ikey, tkey = ("image", cfg.image_kind), ("text", cfg.text)
    if ikey not in image_kernels:
        raise ValueError(f"pair_scorer: image_kernels has no {cfg.image_kind!r} kernel; pass the dict given "
                         f"to run_system for {run.name!r}")
    if tkey not in text_kernels:
        raise ValueError(f"pair_scorer: text_kernels has no {cfg.text!r} kernel; pass the dict given to "
                         f"run_system for {run.name!r}")
    ie, te = image_kernels[ikey], text_kernels[tkey]
    train_ids = list(ie["train_ids"])
    fitted: list = []

    def model_of_run():
        # fitted on the first call, not here: a run served from the cache keeps no models, and a caller
        # whose pair scores are cached (keyed by score_fn.model) never needs one
        if not fitted:
            m = run.models[kappa]
            if len(train_ids) != m.n_train_:
                raise ValueError(f"pair_scorer: the kernel dicts describe a training set of {len(train_ids)} "
                                 f"images, the {run.name!r} model was trained on {m.n_train_}")
            fitted.append(m)
        return fitted[0]

    if te["train_ids"] != ie["train_ids"]:
        raise ValueError(f"pair_scorer: the image and text kernel dicts of {run.name!r} describe different "
                         "training sets")
    # kernel rows shared by every scorer over the same kernels (image rows before the power p: per feature)
    feature_rows: dict[str, dict[str, np.ndarray]] = ie.setdefault("pair_feature_rows", {})
    text_rows: dict[str, np.ndarray] = te.setdefault("pair_rows", {})
    image_rows: dict[str, np.ndarray] = {}
    lookup: dict[str, object] = {}

    def caption_lookup() -> Mapping[str, object]:
        if not lookup:
            for caps in corpus.captions.values():
                for c in caps:
                    lookup.setdefault(c.text, c)
                    lookup.setdefault(" ".join(c.text.lower().split()), c)
        return lookup

    def score_fn(image_ids, candidates, references=None) -> np.ndarray:
        image_ids, candidates = [str(i) for i in image_ids], [str(c) for c in candidates]
        if len(image_ids) != len(candidates):
            raise ValueError(f"score_fn: {len(image_ids)} image ids but {len(candidates)} candidates")
        if not candidates:
            return np.zeros(0, dtype=np.float32)
        u_img = list(dict.fromkeys(image_ids))
        u_txt = list(dict.fromkeys(candidates))
        new_feat = [i for i in u_img if i not in feature_rows]
        if new_feat:
            grams = ie["kernel"].feature_grams(new_feat, train_ids)
            for k, i in enumerate(new_feat):
                feature_rows[i] = {f: g[k] for f, g in grams.items()}
        new_img = [i for i in u_img if i not in image_rows]
        if new_img:
            feats = next(iter(feature_rows.values())).keys()
            K = combine_kernels({f: np.stack([feature_rows[i][f] for i in new_img]) for f in feats}, p)
            image_rows.update(zip(new_img, K))
        new_txt = [t for t in u_txt if t not in text_rows]
        if new_txt:
            look = caption_lookup()
            K = te["kernel"].gram_queries([_query_caption(t, look) for t in new_txt])
            text_rows.update(zip(new_txt, K))
        model = model_of_run()
        P = model.transform_x(np.stack([image_rows[i] for i in u_img]), n).astype(np.float64)
        Q = model.transform_y(np.stack([text_rows[t] for t in u_txt]), n).astype(np.float64)
        P /= np.maximum(np.linalg.norm(P, axis=1), 1e-30)[:, None]   # zero vectors → affinity 0
        Q /= np.maximum(np.linalg.norm(Q, axis=1), 1e-30)[:, None]
        pos_i = {x: k for k, x in enumerate(u_img)}
        pos_t = {x: k for k, x in enumerate(u_txt)}
        ii = np.array([pos_i[x] for x in image_ids], dtype=np.int64)
        jj = np.array([pos_t[x] for x in candidates], dtype=np.int64)
        out = np.empty(len(candidates), dtype=np.float32)
        step = max(1, (1 << 22) // max(P.shape[1], 1))          # ≤ 32 MB of gathered rows per chunk
        for s in range(0, len(out), step):
            e = min(s + step, len(out))
            out[s:e] = np.einsum("ij,ij->i", P[ii[s:e]], Q[jj[s:e]])
        return out

    score_fn.__name__ = f"KCCA[{run.name}]"
    score_fn.model = {"system": run.name, "task": "annotation", "criterion": criterion, "kappa": kappa,
                      "n": n, "dev_value": float(best["dev_value"]), "image_power": p, "text_diag": d,
                      "image_kind": cfg.image_kind, "text_kernel": cfg.text}
    return score_fn
