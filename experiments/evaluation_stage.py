"""The main job's evaluation stage: every system's test-pool score matrices through one evaluator (R@k,
median rank, S@k, R-precision), the significance of each against a reference system per task, and, on a
generated corpus, the compositionality table on its contrast twins."""
from __future__ import annotations

import json
from collections.abc import Mapping

import numpy as np

from corpora.base import Corpus, GeneratedCorpus, RankingPool
from corpora.cache import DiskCache, array_digest
from evaluation import evaluate, evaluate_pool
from evaluation.compositionality import twin_preference
from evaluation.significance import default_metrics
from experiments.errors import PipelineError
from experiments.options import RunOptions
from experiments.outputs import SystemOutput
from experiments.provenance import library_versions, source_digest


def significance_table(results: Mapping, reference: str, *, permutations: int, seed: int,
                       cache: DiskCache | None = None) -> dict[str, dict]:
    """``{system: {"markers", "p_values"}}`` of :func:`evaluation.compare` against ``reference`` (its
    default metrics), cached under a digest of every system's per-query values, the reference, the test
    settings, the code of :mod:`evaluation.significance` and the versions of numpy (the reassignments'
    random draws), scipy and statsmodels (McNemar) — the randomisation tests are the evaluation stage's
    only slow part."""
    from evaluation import compare  # looked up on each call, where tests count the calls

    def compute() -> dict[str, dict]:
        table = compare(results, reference=reference, n_permutations=permutations, seed=seed)
        return {s: {"markers": table[s]["markers"], "p_values": table[s]["p_values"]} for s in results}

    if cache is None or not cache.enabled:
        return compute()
    data = array_digest({f"{name}\0{m}": r.per_query(m) for name, r in results.items() for m in default_metrics(r)})
    key = {"what": "significance", "reference": reference, "permutations": int(permutations),
           "seed": int(seed), "data": data, "code": source_digest(("evaluation/significance.py",)),
           "libraries": library_versions(("numpy", "scipy", "statsmodels"))}
    hit = cache.load("significance", key)
    if hit is not None:
        return json.loads(str(hit["table"]))
    table = compute()
    cache.store("significance", key, {"table": np.array(json.dumps(table))})
    return table


def evaluate_systems(outputs: Mapping[str, SystemOutput], pool: RankingPool, *, permutations: int,
                     seed: int, cache: DiskCache | None = None,
                     reference_system: str | None = None) -> tuple[dict, dict, dict]:
    """Evaluate every system on the test pool; significance against ``reference_system`` in both tasks
    when given (``--reference``), else against the best system per task (:func:`significance_table`,
    cached in ``cache`` when given).

    Returns ``(systems_json, per_query, reference)``.
    """
    evals = {name: evaluate_pool(o.test, pool) for name, o in outputs.items()}
    if reference_system is not None and reference_system not in evals:
        raise PipelineError(f"--reference {reference_system}: it did not run (ran: {', '.join(evals)})")
    systems: dict = {}
    reference: dict[str, str] = {}
    for task in ("annotation", "search"):
        # Best system: highest R@10, then R@1, then lowest median rank, then name (deterministic).
        ranked = sorted(evals, key=lambda s: (-evals[s][task].metrics["R@10"], -evals[s][task].metrics["R@1"],
                                              evals[s][task].metrics["median_rank"], s))
        reference[task] = reference_system or ranked[0]
    markers: dict[str, dict[str, dict[str, str]]] = {s: {} for s in evals}
    pvalues: dict[str, dict[str, dict[str, float]]] = {s: {} for s in evals}
    for task in ("annotation", "search"):
        table = significance_table({s: evals[s][task] for s in evals}, reference[task],
                                   permutations=permutations, seed=seed, cache=cache)
        for s in evals:
            markers[s][task] = table[s]["markers"]
            pvalues[s][task] = table[s]["p_values"]
    for name, o in outputs.items():
        systems[name] = {
            "family": o.family,
            "annotation": metrics_json(evals[name]["annotation"]),
            "search": metrics_json(evals[name]["search"]),
            "significance": markers[name],
            "p_values": pvalues[name],
            "config": o.config,
            **({"every_caption": o.every_caption} if o.every_caption else {}),
        }
    return systems, evals, reference


def every_caption_json(pool: RankingPool, affinity: np.ndarray, ks=(1, 5, 10)) -> dict:
    """Retrieval on a pool of every caption of the test images (:func:`corpora.protocol.every_caption_pool`)
    as CLIP_benchmark reports it (``clip_benchmark/metrics/zeroshot_retrieval.py``), through the one
    evaluator (:func:`evaluation.evaluate`, pessimistic ties):

    * ``image_to_text`` R@k: % of images with at least one of their captions among their top k captions
      (CLIP_benchmark's ``text_retrieval_recall@k``) = image annotation S@k under the original pairing;
    * ``text_to_image`` R@k: % of captions whose image is among their top k images (its
      ``image_retrieval_recall@k``) = image search R@k; with its median rank.

    Parameters
    ----------
    pool : RankingPool
        The every-caption pool (relevance: the original pairing).
    affinity : ndarray (n_images, n_captions)
        A scorer's scores over it.
    """
    ann = evaluate(affinity, pool.gold_caption, pool.relevance, ks=ks).metrics
    # search needs only the gold image: no relevance, so no R-precision sort of 25,000 × 5,000 scores
    sea = evaluate(np.asarray(affinity).T, pool.gold_image, ks=ks).metrics
    return {"n_images": int(pool.n_images), "n_captions": int(pool.n_captions),
            "image_to_text": {f"R@{k}": round(float(ann[f"S@{k}"]), 4) for k in ks},
            "text_to_image": {**{f"R@{k}": round(float(sea[f"R@{k}"]), 4) for k in ks},
                              "median_rank": float(sea["median_rank"])}}


def metrics_json(res) -> dict:
    """One task's metrics as ``results.json`` holds them (4 decimals), with the query and tie counts.

    Parameters
    ----------
    res : evaluation.RankingResult
        One system's evaluation on one task.

    Returns
    -------
    dict
    """
    keys = ("R@1", "R@5", "R@10", "median_rank", "mean_rank", "S@1", "S@5", "S@10", "R-precision")
    out = {k: round(float(res.metrics[k]), 4) for k in keys if k in res.metrics}
    out["n_queries"] = int(res.n_queries)
    out["n_ties"] = int(res.n_ties)
    return out


def evaluation_stage(outputs: Mapping[str, SystemOutput], pool: RankingPool, options: RunOptions,
                     cache: DiskCache | None) -> tuple[dict, dict, dict]:
    """:func:`evaluate_systems` with the run's options (nothing to evaluate: empty results).

    Parameters
    ----------
    outputs : mapping
        Every system's :class:`SystemOutput`.
    pool : RankingPool
        The test pool.
    options : RunOptions
        ``permutations``, ``seed`` and ``reference`` are used.
    cache : DiskCache or None
        Where the significance tables are cached.

    Returns
    -------
    systems_json, per_query, reference : dict
    """
    if not outputs:
        return {}, {}, {}
    return evaluate_systems(outputs, pool, permutations=options.permutations, seed=options.seed, cache=cache,
                            reference_system=options.reference)


def compositionality_table(corpus: Corpus, outputs: Mapping[str, SystemOutput], pool: RankingPool) -> dict:
    """``{system: {"annotation": %, "search": %, "n_pairs": n}}`` of
    :func:`evaluation.compositionality.twin_preference` on the test pool's contrast twins.

    Parameters
    ----------
    corpus : Corpus
        Only a generated corpus (:class:`corpora.base.GeneratedCorpus`) with ``twins`` has a table.
    outputs : mapping
        Every system's :class:`SystemOutput`.
    pool : RankingPool
        The test pool.

    Returns
    -------
    dict
        Percentages rounded to 2 decimals (ties count ½, 50 % is chance); empty for a corpus without
        twins (Flickr8k) or a test pool holding no twin pair.
    """
    twins = getattr(corpus, "twins", None) if isinstance(corpus, GeneratedCorpus) else None
    if not twins:
        return {}
    table: dict = {}
    for name, o in outputs.items():
        res = twin_preference(o.test, pool, twins)
        if not res["n_pairs"]:
            return {}
        table[name] = {"annotation": round(res["annotation"], 2), "search": round(res["search"], 2),
                       "n_pairs": int(res["n_pairs"])}
    return table
