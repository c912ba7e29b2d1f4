"""The on-disk cache of KCCA system runs (namespace ``"kcca_runs"`` of :class:`~corpora.cache.DiskCache`).

A run's (p, d) search, (n, κ) selection and Borda ensembles (:func:`kcca.systems.run_system`) are stored
as plain arrays (npz, never pickles) under a key of everything that determines them
(:func:`run_cache_key`): the system, the corpus fingerprint, the training ids, the pools, the pixels of
the images used, the visual-word codebooks, the seed and every grid and solver setting.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence

import numpy as np

from corpora.jsondata import jsonable
from corpora.scoring import ScoreMatrices
from kcca.selection import ChosenModel, SelectionResult, SweepTable

__all__ = ["RUN_CACHE_VERSION", "RUN_CACHE_NAMESPACE", "digest", "pool_digest", "images_digest", "run_cache_key",
           "run_to_arrays", "run_from_arrays"]

#: Bumped whenever the cached content of a KCCA system run changes meaning (4: the low-rank solver keeps
#: its spectral factor in the working precision, ``dtype``).
RUN_CACHE_VERSION = 4
#: The DiskCache namespace of the runs.
RUN_CACHE_NAMESPACE = "kcca_runs"


def digest(items) -> str:
    """SHA-256 of the items' ``str`` forms, one per line."""
    return hashlib.sha256("\n".join(map(str, items)).encode("utf-8")).hexdigest()


def pool_digest(pool) -> str:
    """:func:`digest` of a :class:`~corpora.base.RankingPool`: its image and caption ids and gold pairing."""
    return digest([*pool.image_ids, "|", *pool.caption_ids, "|",
                   *np.asarray(pool.gold_caption).tolist(), "|", *np.asarray(pool.gold_image).tolist()])


def images_digest(corpus, id_lists) -> str | None:
    """:meth:`~corpora.base.Corpus.images_fingerprint` of each list of image ids (``None`` for objects
    without one, e.g. test doubles), so a replaced image file gives a new run key."""
    fp = getattr(corpus, "images_fingerprint", None)
    return None if fp is None else digest([fp(list(ids)) for ids in id_lists])


def run_cache_key(*, system: Mapping, corpus, train_ids: Sequence[str], pools: Mapping, codebooks: Mapping | None,
                  seed: int, kappas: Sequence[float], ns: Sequence[int], powers: list[int], diags: list[float],
                  pd_kappas: Sequence[float], top: int, criteria: Sequence[str], kcca: Mapping,
                  image_kwargs: Mapping | None, text_kwargs: Mapping | None, skip_missing_images: bool) -> dict:
    """The cache key of one KCCA system run (DiskCache canonicalises it): ``system`` is
    :meth:`~kcca.systems.SystemConfig.as_dict`, ``codebooks`` the image kernel's codebook digests,
    ``kcca`` the solver settings; the other arguments are those of :func:`~kcca.systems.run_system`."""
    return {"what": "kcca-system-run", "version": RUN_CACHE_VERSION, "system": system,
            "corpus": getattr(corpus, "name", None), "fingerprint": getattr(corpus, "fingerprint", None),
            "train": digest(train_ids), "pools": {s: pool_digest(pools[s]) for s in ("dev", "test")},
            # the pixels: the fingerprint covers captions and splits, not image files
            "images": images_digest(corpus, [train_ids, *(pools[s].image_ids for s in ("dev", "test"))]),
            # the visual words: the codebooks (sampled descriptors + k-means) are cached separately
            "codebooks": codebooks,
            "seed": int(seed), "kappas": [float(k) for k in kappas], "ns": [int(n) for n in ns],
            "powers": powers, "diags": diags, "pd_kappas": [float(k) for k in pd_kappas], "top": int(top),
            "criteria": list(criteria), "kcca": kcca, "image_kwargs": {k: v for k, v in (image_kwargs or {}).items()
                                                              if k != "executor"},   # where, not what
            "text_kwargs": dict(text_kwargs or {}),
            "skip_missing_images": bool(skip_missing_images)}


def run_to_arrays(res: SelectionResult, grid: list, p: int, d: float, score: float) -> dict:
    """A KCCA system run as plain arrays (the DiskCache stores npz, never pickles)."""
    t = res.table
    meta = {"p": int(p), "d": float(d), "score": float(score), "grid": grid,
            "chosen": {task: [c.as_dict() for c in cs] for task, cs in res.chosen.items()},
            "kappas": [float(k) for k in t.kappas], "ns": [int(n) for n in t.ns], "columns": list(t.columns),
            "ns_by_kappa": [[float(k), [int(n) for n in v]] for k, v in t.ns_by_kappa.items()],
            "tasks": list(t.metrics), "corr_kappas": [float(k) for k in res.correlations],
            "timings": {k: float(v) for k, v in res.timings.items()},
            "has_test": res.test_matrices is not None, "has_dev": res.dev_matrices is not None}
    out = {"meta": np.array(json.dumps(jsonable(meta)))}
    for split, m in (("test", res.test_matrices), ("dev", res.dev_matrices)):
        if m is not None:
            out[f"{split}::annotation"], out[f"{split}::search"] = m.annotation, m.search
    for k, task in enumerate(t.metrics):
        out[f"metrics::{k}"] = t.metrics[task]
    for k, c in enumerate(res.correlations.values()):
        out[f"corr::{k}"] = np.asarray(c)
    return out


def run_from_arrays(arrays) -> tuple[SelectionResult, list, int, float, float]:
    """The inverse of :func:`run_to_arrays`: ``(selection, grid, p, d, dev score)``."""
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
