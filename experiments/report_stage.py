"""The main job's report stage: ``results.json`` assembled from the stages' results, the gallery of
top-ranked captions, and the report files (:func:`experiments.report.write_report`)."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from corpora.base import Corpus, RankingPool
from corpora.parallel import BlockExecutor
from experiments.corpus_stage import RetrievalPlan, corpus_summary
from experiments.errors import PipelineError
from experiments.options import RunOptions
from experiments.outputs import SystemOutput
from experiments.provenance import provenance
from experiments.report import GalleryItem, QueryOutcomes, write_report
from kernels.image.codebook import codebook_folder_identity
from kernels.threads import default_threads


def make_gallery(corpus: Corpus, pool: RankingPool, outputs: Mapping[str, SystemOutput],
                 systems_json: Mapping, k: int = 5) -> list[GalleryItem]:
    """One query image with the top-k captions of the best classical and the best neural system.

    Parameters
    ----------
    corpus : Corpus
    pool : RankingPool
        The test pool.
    outputs : mapping
        Every system's :class:`SystemOutput`.
    systems_json : mapping
        The evaluation stage's ``systems`` block (the best system per family by R-precision, then R@10).
    k : int, optional
        Captions per system.

    Returns
    -------
    list of GalleryItem
        One item (the first test image on disk), or none without systems or images.
    """
    def best(family):
        cands = [s for s, v in systems_json.items() if v["family"] == family]
        return max(cands, key=lambda s: (systems_json[s]["annotation"].get("R-precision", 0.0),
                                         systems_json[s]["annotation"]["R@10"], s)) if cands else None

    chosen = [s for s in (best("classical"), best("neural")) if s is not None]
    if not chosen:
        return []
    # The query: the first test image (deterministic) that has an image on disk.
    qi = next((i for i, im in enumerate(pool.image_ids) if corpus.has_image(im)), None)
    if qi is None:
        return []
    item = GalleryItem(image=corpus.load_image(pool.image_ids[qi]), image_id=pool.image_ids[qi],
                       gold_caption=pool.captions[int(pool.gold_caption[qi])].text)
    for s in chosen:
        row = np.asarray(outputs[s].test.annotation[qi], dtype=np.float64)
        top = np.argsort(-row, kind="stable")[:k]
        item.columns[f"{s} ({systems_json[s]['family']})"] = [
            (pool.captions[j].text, bool(pool.relevance[qi, j])) for j in top]
    return [item]


def results_json(options: RunOptions, corpus: Corpus, pools: Mapping[str, RankingPool], *, skipped: int,
                 plan: RetrievalPlan, outputs: Mapping[str, SystemOutput], systems_json: Mapping,
                 reference: Mapping, human: Mapping, specificity: Mapping, compositionality: Mapping,
                 stage_timings: Mapping[str, float], neural_provenance: Mapping, kcca_models: Mapping,
                 paper_effects: Mapping | None = None, scoring_timings: Mapping | None = None,
                 benchmarks: Mapping | None = None) -> dict:
    """``results.json``: corpus, systems, significance reference, human correlation, specificity,
    compositionality (generated corpora only), timings and provenance.

    Parameters
    ----------
    options : RunOptions
    corpus : Corpus
    pools : mapping
        The dev and test pools.
    skipped : int
        Pool images skipped because they are missing on disk.
    plan : RetrievalPlan
        What ran (and the training images skipped).
    outputs : mapping
        Every system's :class:`SystemOutput` (their timings go to ``timings_s["systems"]``).
    systems_json, reference : mapping
        The evaluation stage's results.
    human, specificity : mapping
        The human-correlation table and the specificity rates.
    compositionality : mapping
        ``{system: {"annotation", "search", "n_pairs"}}`` on the test pool's contrast twins
        (:func:`experiments.evaluation_stage.compositionality_table`); empty: no block.
    stage_timings : mapping
        ``{stage: seconds}``.
    neural_provenance : mapping
        The neural stage's provenance (backbones, timings); its ``backbones`` table (one row per backbone:
        name, architecture, weights source, SHA-256 prefix, parameters, scorers) becomes the top-level
        ``backbones`` block.
    kcca_models : mapping
        The (n, κ) model of each KCCA caption metric.
    paper_effects : mapping, optional
        :func:`experiments.paper_effects.paper_effects` (empty or ``None``: no block).
    scoring_timings : mapping, optional
        ``{scorer: {step: timing}}`` measured outside a system's own steps (L-CLIPScore and its teacher's
        pair-scoring throughput), filed with the systems' timings under ``timings_s["systems"]``.
    benchmarks : mapping, optional
        :func:`experiments.benchmark_stage.benchmark_stage` (empty or ``None``: no block).

    Returns
    -------
    dict
        Every timing is under ``timings_s`` (stage seconds, and ``"systems"``: each system's step
        timings), so two runs with the same numbers have equal blocks elsewhere (provenance aside).
    """
    timings: dict = {k: round(v, 2) for k, v in stage_timings.items()}
    timings["systems"] = {name: o.timings for name, o in outputs.items() if o.timings}
    for name, steps in (scoring_timings or {}).items():
        timings["systems"][name] = {**timings["systems"].get(name, {}), **steps}
    backbones = neural_provenance.get("backbones") or {}
    extra = {**{k: v for k, v in neural_provenance.items() if k != "backbones"}, "device_requested": options.device, "permutations": options.permutations,
             "significance_reference_rule": "chosen (--reference)" if options.reference else "best R@10 per task",
             "systems_requested": list(options.systems), "neural_requested": list(options.neural),
             "systems_run": list(plan.systems), "neural_run": list(plan.neural),
             "kcca_caption_metric_models": kcca_models,
             "codebook_source": (codebook_folder_identity(options.codebook_images)
                                 if options.codebook_images is not None else "training split"),
             "parallelism": parallelism(options, neural_provenance)}
    return {
        "corpus": corpus_summary(corpus, pools, skipped, plan.train_skipped),
        "systems": systems_json,
        "significance_reference": reference,
        "human_correlation": human,
        "specificity": specificity,
        **({"paper_effects": dict(paper_effects)} if paper_effects else {}),
        **({"benchmarks": dict(benchmarks)} if benchmarks else {}),
        **({"compositionality": dict(compositionality)} if compositionality else {}),
        **({"backbones": dict(backbones)} if backbones else {}),
        "timings_s": timings,
        "provenance": provenance(seed=options.seed, data=options.data, use_cache=not options.no_cache,
                                 corpus=corpus, extra=extra),
    }


def parallelism(options: RunOptions, neural_provenance: Mapping) -> dict:
    """Where the run computed (provenance; the numbers do not depend on it): the classical stage's block
    mode (``in-process``, ``local cluster`` of ``--workers`` processes, or ``scheduler`` at
    ``--scheduler``), this process's threads (:func:`kernels.threads.default_threads`) and the neural
    scorers' device (as resolved by the neural stage, else as requested)."""
    mode = BlockExecutor(workers=options.workers, scheduler=options.scheduler).mode
    return {"mode": mode, "workers": options.workers, "scheduler": options.scheduler,
            "threads": default_threads(), "device": neural_provenance.get("device", options.device)}


def write_run_report(results: Mapping, options: RunOptions, corpus: Corpus, test_pool: RankingPool,
                     outputs: Mapping[str, SystemOutput], evals: Mapping) -> dict[str, Path]:
    """Write the report files of a run into ``options.out``.

    Parameters
    ----------
    results : mapping
        What :func:`results_json` returned.
    options : RunOptions
    corpus : Corpus
    test_pool : RankingPool
        The test pool (the gallery's query).
    outputs : mapping
        Every system's :class:`SystemOutput`.
    evals : mapping
        ``{system: {task: RankingResult}}`` (the per-query plots).

    Returns
    -------
    dict
        The paths of :func:`experiments.report.write_report`.
    """
    systems_json = results["systems"]
    outcomes = {s: {t: QueryOutcomes(ranks=evals[s][t].ranks, r_precision=evals[s][t].r_precision)
                    for t in ("annotation", "search")} for s in evals}
    gallery = make_gallery(corpus, test_pool, outputs, systems_json) if outputs else []
    try:
        return write_report(results, options.out, outcomes=outcomes, gallery=gallery, seed=options.seed)
    except OSError as exc:   # a full disk or a folder made read-only during the run: one error line
        raise PipelineError(f"--out {options.out}: cannot write the report "
                            f"({exc.strerror or exc.__class__.__name__}: {exc.filename or options.out})") from exc
