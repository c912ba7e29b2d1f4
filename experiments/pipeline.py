"""The main job (``python -m experiments.flickr8k_kcca``) as its list of stages.

corpus → pools (Hodosh protocol) → classical systems (kernels → KCCA / NN) and neural scorers (CLIP
family) → one evaluator (R@k, median rank, S@k, R-precision, significance) → human correlation → report.

Each stage is timed (``results["timings_s"]``) and every expensive artefact is cached in a
:class:`corpora.cache.DiskCache`, so a warm re-run only re-evaluates.  The options arrive checked
(:class:`experiments.options.RunOptions`).
"""
from __future__ import annotations

from pathlib import Path

from corpora.base import CorpusError
from corpora.cache import DiskCache
from corpora.jsondata import jsonable
from corpora.nltk_resources import MissingResourceError
from experiments.classical_stage import kcca_pair_scorers, pair_scorers_wanted, run_classical
from experiments.cluster import stage_executor
from experiments.corpus_stage import build_pools, load_corpus, retrieval_plan
from experiments.errors import PipelineError
from experiments.evaluation_stage import compositionality_table, evaluation_stage
from experiments.benchmark_stage import benchmark_stage
from experiments.human_stage import human_stage, ngram_scorers

# The neural stage imports the neural modules (torch) inside its functions, when they run: a warm re-run
# reads the whole stage from its cache and never imports torch.
from experiments.neural_stage import neural_stage
from experiments.options import RunOptions
from experiments.paper_effects import paper_effects, take_specificity_hits, take_student_timing
from experiments.report_stage import results_json, write_run_report
from experiments.runlog import Timer, log, log_error_to_file, setup_logging, teardown_logging

#: The stages :func:`run` times and numbers (``[i/7]`` in the log).
N_STAGES = 7


def run(options: RunOptions) -> dict[str, Path]:
    """Run the whole job; ``run.log`` in the output folder gets the log and any error.

    Parameters
    ----------
    options : RunOptions
        Checked options (:meth:`RunOptions.from_args`; the output folder is set).

    Returns
    -------
    dict
        The paths of the written report files (``results``, ``md``, ``html``).

    Raises
    ------
    PipelineError
        A user-facing failure (also a corpus error or a missing NLTK resource, converted).
    """
    if options.out is None:
        raise PipelineError("RunOptions.out is not set (build the options with RunOptions.from_args)")
    earlier_report = (options.out / "results.json").exists()
    handler = setup_logging(options.out)
    try:
        log.info("Output folder: %s", options.out)
        if earlier_report:
            log.warning("warning: %s holds an earlier run's report; its report files and plots are replaced",
                        options.out)
        return run_stages(options, DiskCache(options.cache_dir, enabled=not options.no_cache))
    except (PipelineError, CorpusError, MissingResourceError) as exc:
        log_error_to_file(handler, exc)   # the command line prints it to the console
        if not isinstance(exc, PipelineError):  # an unreadable image file, a missing NLTK resource
            raise PipelineError(str(exc)) from exc
        raise
    finally:
        teardown_logging(handler)


def run_stages(options: RunOptions, cache: DiskCache) -> dict[str, Path]:
    """The stages of :func:`run`, in order, each timed.

    Parameters
    ----------
    options : RunOptions
        Checked options.
    cache : DiskCache
        The run's cache (possibly disabled).

    Returns
    -------
    dict
        The paths of the written report files.
    """
    timer = Timer(total=N_STAGES)
    with timer.stage("corpus"):
        corpus = load_corpus(options)
        log.info("%s: %d images, %d captions", corpus.name, len(corpus.image_ids),
                 sum(len(v) for v in corpus.captions.values()))
    with timer.stage("pools"):
        pools, skipped = build_pools(corpus, options)
        plan = retrieval_plan(corpus, pools, options)
    with stage_executor(options) as executor:   # --workers / --scheduler: one cluster for both stages
        with timer.stage("classical systems (kernels, KCCA, NN)"):
            classical, runs, kernel_store = (run_classical(corpus, pools, plan.systems, options, cache, executor)
                                             if plan.systems else ({}, {}, None))
        with timer.stage("neural scorers (CLIP family)"):
            neural, pair_scorers, specificity, neural_prov = neural_stage(corpus, pools, plan.neural, options, cache,
                                                                          executor)
    sr_hits = take_specificity_hits(specificity)                  # per-step outcomes: tests, not results
    student, student_timing = take_student_timing(neural_prov)   # L-CLIPScore vs its teacher
    outputs = {**classical, **neural}
    with timer.stage("evaluation and significance"):
        systems_json, evals, reference = evaluation_stage(outputs, pools["test"], options, cache)
        compositionality = compositionality_table(corpus, outputs, pools["test"])
    with timer.stage("human correlation"):
        kcca_scorers = (kcca_pair_scorers(corpus, runs, kernel_store, systems_json)
                        if pair_scorers_wanted(corpus, options) else {})
        per_row: dict = {}
        human = human_stage(corpus, {**pair_scorers, **kcca_scorers}, cache, keep=per_row)
        effects = paper_effects(per_row, sr_hits, student, seed=options.seed, cache=cache)
        benchmarks = benchmark_stage(options, human, ngram_scorers(), {**pair_scorers, **kcca_scorers})
    with timer.stage("report"):
        results = results_json(
            options, corpus, pools, skipped=skipped, plan=plan, outputs=outputs, systems_json=systems_json,
            reference=reference, human=human, specificity=specificity, compositionality=compositionality,
            stage_timings=timer.timings, paper_effects=effects, scoring_timings=student_timing,
            benchmarks=benchmarks,
            neural_provenance=neural_prov,
            kcca_models={k: jsonable(getattr(f, "model", {})) for k, f in kcca_scorers.items()})
        paths = write_run_report(results, options, corpus, pools["test"], outputs, evals)
    log.info("Done in %.1f s. Report: %s", sum(timer.timings.values()), paths["html"])
    return paths
