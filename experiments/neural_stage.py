# Size (~600 lines): the neural stage as one unit: backbones, scorers, retrieval, judgments, its stage cache.
"""The main job's neural stage: the registered CLIP-family scorers (:mod:`neural.registry`: CLIP-S, PAC-S,
L-CLIPScore, BRIDGE, SPECS and the reference-based variants, and any family registered since) on the tiny CLIP trained here or open_clip backbones — test-pool score
matrices, pair scorers for the human-correlation stage, specificity rates — and the one cache entry that
lets a warm re-run skip the whole stage without importing torch.

Several backbones (``--backbone NAME=…`` and ``SCORER@NAME``, :mod:`experiments.backbone_specs`) run one at
a time: each is loaded once, its scorers score the test pool, the specificity units and the human
judgments, and it is released (``del``, garbage collection, the CUDA cache emptied) before the next.

Each scorer family (:class:`neural.family.ScorerFamily`) says how it is obtained (its release file, its
shipped copy, trained here), which variants it has, what its outputs record and how it scores pairs;
this stage only iterates over the families of the scorers asked for.  The torch-free :mod:`neural`
modules (the registry, the families' declarations) are imported at module top; every other one inside
the functions that use it: a warm re-run reads the stage from its cache and must not import torch.
"""
from __future__ import annotations

import dataclasses
import functools
import gc
import hashlib
import json
import logging
import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from corpora.base import Corpus, RankingPool, fingerprint
from corpora.cache import DiskCache
from corpora.jsondata import jsonable
from corpora.parallel import BlockExecutor
from corpora.scoring import PairScorer, ScoreMatrices
from experiments.backbone_specs import DEFAULT_BACKBONE, BackboneSpec, scorer_groups, scorer_label, split_scorer
from experiments.corpus_stage import EVERY_CAPTION_POOL, missing_images_message
from experiments.evaluation_stage import every_caption_json
from experiments.errors import PipelineError
from experiments.human_stage import (
    MIN_JUDGED_ROWS,
    cached_row_scores,
    images_on_disk,
    judgment_protocols,
    restrict_rows,
)
from experiments.options import RunOptions, uses_shipped_scorers
from experiments.outputs import SystemOutput
from experiments.provenance import library_versions, source_digest
from experiments.runlog import JOB_LOGGER
from kernels.threads import one_blas_thread
from neural.cluster import clip_encoding_on
from neural.family import TrainSettings
from neural.names import auto_device_setting
from neural.registry import family_for

log = logging.getLogger(JOB_LOGGER)

#: What the neural stage gives: retrieval outputs, pair scorers, specificity rates, provenance.
NeuralResults = tuple[dict[str, SystemOutput], dict[str, PairScorer], dict, dict]


def backbone_row(spec: BackboneSpec, bb, scorers: Sequence[str]) -> dict:
    """The backbones table's row of one backbone: name, architecture, weights source and format, the first
    12 hex digits of the weights' SHA-256 (:attr:`~neural.backbone.Backbone.weights_id`), parameters, and
    the scorers (row labels) it serves."""
    n_params = sum(int(p.numel()) for p in bb.model.parameters()) if hasattr(bb, "model") else None
    return {"name": spec.name, "architecture": bb.arch or spec.model or "tiny", "weights_source": bb.source,
            "weights_format": getattr(bb, "weights_format", ""), "sha256_12": str(bb.weights_id)[:12],
            "parameters": n_params, "scorers": [scorer_label(s, spec.name) for s in scorers]}


def release_backbone_memory(device: object = None) -> None:
    """After ``del`` of a backbone's last references: collect garbage and, on CUDA, return the cached
    blocks to the driver (``torch.cuda.empty_cache``) so the next backbone has the memory."""
    gc.collect()
    if str(device or "").startswith("cuda"):
        import torch  # lazy: only after a CUDA backbone ran, so torch is loaded already

        torch.cuda.empty_cache()


def neural_train_ids(corpus: Corpus, options: RunOptions) -> list[str] | None:
    """The training images of the trained neural scorers (L-CLIPScore, BRIDGE, SPECS): with
    ``--skip-missing-images`` only the train-split images on disk (as the classical systems), else
    ``None`` (the whole split; a missing image is an error)."""
    if not options.skip_missing_images:
        return None
    return [i for i in corpus.split("train") if corpus.has_image(i)]


def load_neural_backbone(corpus: Corpus, options: RunOptions, cache: DiskCache, spec: BackboneSpec | None = None):
    """The shipped teaching CLIP (the offline default, zero-shot), the tiny CLIP trained here
    (``--clip-model tiny``) or an open_clip backbone (name + tag / file), via
    :func:`neural.factory.backbone_for`: ``spec`` (a ``--backbone``), else ``--clip-model`` /
    ``--clip-pretrained``; loading failures become :class:`PipelineError` naming the backbone (the
    options themselves were checked by :class:`~experiments.options.RunOptions`)."""
    from neural.checkpoints import WeightsError
    from neural.factory import backbone_for

    spec = spec or BackboneSpec(DEFAULT_BACKBONE, options.clip_model, options.clip_pretrained)
    tiny = spec.is_tiny
    steps = options.clip_steps if options.clip_steps is not None else (40 if options.quick else None)
    try:
        return backbone_for(corpus, spec.model, spec.pretrained,
                            seed=options.seed, cache=cache, device=options.device,
                            show_progress=not options.no_progress,
                            **({"steps": steps} if tiny else {}))
    except (WeightsError, FileNotFoundError, RuntimeError, ValueError) as exc:
        raise PipelineError(str(exc) if spec.is_default else f"--backbone {spec.name}: {exc}") from exc


def run_neural(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], options: RunOptions,
               cache: DiskCache, executor: BlockExecutor | None = None) -> NeuralResults:
    """Train / load the CLIP family and score the test pool (the corpus images and the large text calls
    on ``executor``'s Dask workers, if any: :func:`neural.cluster.clip_encoding_on`, the same features).

    Returns ``(retrieval outputs, pair scorers for human correlation, specificity rates, provenance)``.
    Reference-based variants (RefCLIP-S, RefPAC-S, RefL-CLIPScore) only score pairs: ranking a pool
    with the pool's own references would leak the answer.  With ``--skip-missing-images`` the trained
    scorers see only the training images on disk; an image that is still missing raises
    :class:`PipelineError`.
    """
    from corpora.base import MissingImagesError

    try:
        with clip_encoding_on(executor):
            return _run_neural(corpus, pools, names, options, cache)
    except MissingImagesError as exc:
        if options.skip_missing_images:
            raise PipelineError(f"neural scorers: {exc.what}") from exc
        raise PipelineError("neural scorers: " + missing_images_message(exc)) from exc


def _run_neural(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], options: RunOptions,
                cache: DiskCache) -> NeuralResults:
    """:func:`run_neural` one backbone at a time (:func:`run_backbone`), results under the scorers' row labels;
    the provenance of the default backbone's group stays at the top (``backbone``, ``pacs_backbone`` …),
    a named one's goes to ``named_backbones[NAME]``, and ``backbones`` holds the backbones table."""
    names = list(names)
    if not names:
        return {}, {}, {}, {}
    specs = {b.name: b for b in options.backbones}
    outputs: dict[str, SystemOutput] = {}
    pair: dict[str, PairScorer] = {}
    specificity: dict = {}
    prov: dict = {}
    table: dict = {}
    timings: dict[str, float] = {}
    for name, scorers in scorer_groups(names).items():
        spec = specs.get(name) or BackboneSpec(DEFAULT_BACKBONE, options.clip_model, options.clip_pretrained)
        with one_blas_thread():   # the numbers must not depend on the cores (docs/neural.md)
            o, p, sr, group_prov = run_backbone(corpus, pools, scorers, spec, options, cache)
        outputs.update(o)
        pair.update(p)
        specificity.update(sr)
        table[name] = group_prov.pop("backbone_row")
        suffix = "" if spec.is_default else f"@{name}"
        timings.update({k + suffix: v for k, v in group_prov.pop("neural_timings_s").items()})
        if spec.is_default:
            prov.update(group_prov)
        else:
            prov.setdefault("named_backbones", {})[name] = group_prov
    prov["backbones"] = table
    prov["neural_timings_s"] = {k: round(v, 2) for k, v in timings.items()}
    return outputs, pair, specificity, prov


def run_backbone(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], spec: BackboneSpec,
                 options: RunOptions, cache: DiskCache, *, live: bool = False) -> NeuralResults:
    """The scorers ``names`` (without ``@NAME``) on one backbone, loaded once; results under their row
    labels (:func:`~experiments.backbone_specs.scorer_label`).

    The pair scorers come back answered (:class:`AnsweredPairScorer`: the human judgments are scored
    here, :func:`answer_judgments`) and the backbone is released before this returns; with ``live`` they
    are the live scorers and the backbone stays with them (a later stage asked for a score that was not
    answered).  The provenance holds ``backbone_row`` (:func:`backbone_row`) and the raw
    ``neural_timings_s``.
    """
    from corpora.base import GeneratedCorpus

    names = list(names)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    # the default backbone keeps the call of earlier versions (tests replace this function)
    bb = (load_neural_backbone(corpus, options, cache) if spec.is_default
          else load_neural_backbone(corpus, options, cache, spec))
    timings["backbone"] = time.perf_counter() - t
    log.info("neural backbone %s: %s (weights %s); scorers %s", spec.name, bb.name, bb.weights_id, ", ".join(names))
    prov = {"backbone": bb.provenance(), "backbone_row": backbone_row(spec, bb, names)}
    device = prov["backbone"].get("device")
    train_ids = neural_train_ids(corpus, options)   # None: the whole train split
    shipped = uses_shipped_scorers(options, spec) and _is_shipped_parent(bb)   # load, do not train
    settings = TrainSettings(seed=options.seed, cache=cache, show_progress=not options.no_progress,
                             image_ids=train_ids, quick=options.quick, positives=options.pacs_positives)
    scorers: dict[str, object] = {}      # retrieval + pair scoring
    ref_scorers: dict[str, object] = {}  # pair scoring with references
    origin: dict[str, str] = {}          # where each fine-tuned scorer comes from
    fams = list(dict.fromkeys(family_for(n) for n in names))
    for fam in fams:
        t = time.perf_counter()
        scorer, from_shipped = obtain_scorer(fam, bb, corpus, options, settings, shipped=shipped)
        scorers[fam.name], ref = fam.variants(scorer)
        if ref is not None:
            ref_scorers[fam.reference_name] = ref
        if fam.provenance_key:
            prov[fam.provenance_key] = fam.backbone_of(scorer).provenance()
        if fam.trained:
            timings[fam.name] = time.perf_counter() - t
            origin[fam.name] = "shipped" if from_shipped else "this run"
    recipes = {f.name: f.recipe(bb, options.recipe).name for f in fams if f.trained}
    prov["training_recipes"] = {b: f"shipped ({r}, trained once on the scorer training set)"
                                if origin[b] == "shipped" else r for b, r in recipes.items()}
    if origin:   # the backbones table says where the fine-tuned scorers come from
        prov["backbone_row"]["fine_tuned"] = (next(iter(origin.values())) if len(set(origin.values())) == 1
                                              else ", ".join(f"{b}: {o}" for b, o in origin.items()))
    if shipped:
        prov["shipped_scorers"] = _shipped_record(names)

    outputs = _retrieval_outputs(corpus, pools, names, scorers, cache, timings)
    pair = _pair_scorers(corpus, names, scorers, ref_scorers, cache)
    specificity: dict = {}
    if isinstance(corpus, GeneratedCorpus):   # the corpus can produce detail units
        specificity = _specificity(corpus, names, {k: v for k, v in scorers.items() if family_for(k).specificity},
                                   options, cache, timings)
    if not live:   # e.g. L-CLIPScore's parameters and throughput against its teacher
        for fam in fams:
            if fam.name in names:
                prov.update(fam.extra_provenance(scorers[fam.name], bb, corpus, pools["test"]))
    label = {n: scorer_label(n, spec.name) for n in {*outputs, *pair, *specificity}}
    outputs = {label[k]: dataclasses.replace(v, name=label[k]) for k, v in outputs.items()}
    pair = {label[k]: v for k, v in pair.items()}
    specificity = {label[k]: v for k, v in specificity.items()}
    prov["neural_timings_s"] = timings
    if live:
        return outputs, pair, specificity, prov
    t = time.perf_counter()
    pair = answer_judgments(corpus, pair, cache, lambda: run_backbone(corpus, pools, names, spec, options, cache,
                                                                      live=True)[1])
    timings["human judgments"] = time.perf_counter() - t
    del bb, scorers, ref_scorers   # the last references to the backbone and its fine-tunes
    release_backbone_memory(device)
    return outputs, pair, specificity, prov


def _shipped_record(names: Sequence[str]) -> dict:
    """The provenance of the shipped scorers a run loads: the training set and, per scorer, its weights'
    SHA-256 and its model-card figures (:func:`neural.shipped_scorers.read_manifest`)."""
    from neural.shipped_scorers import read_manifest  # lazy: a warm re-run must not import torch

    manifest = read_manifest()
    bases = {family_for(n).name for n in names}
    return {"training_set": manifest.get("training_set"), "training_seed": manifest.get("training_seed"),
            "scorers": {m: {"weights_sha256": e["files"]["weights.safetensors"]["sha256"],
                            "heldout": e.get("heldout")}
                        for m, e in manifest["scorers"].items() if m in bases and family_for(m).shipped_folder}}
def judged_rows(corpus: Corpus) -> list[tuple[str, object]]:
    """``[(protocol, rows)]``: the judgment rows the human-correlation stage gives an image-based scorer
    (:func:`experiments.human_stage.human_correlation_table`: Flickr8k-Expert and -CF rows whose image is
    on disk, at least :data:`~experiments.human_stage.MIN_JUDGED_ROWS`)."""
    restricted = [(tag, restrict_rows(rows, images_on_disk(corpus, rows)))
                  for tag, rows in judgment_protocols(corpus, skip_bad_cf=True)]   # the human stage reports it
    return [(tag, rows) for tag, rows in restricted if len(rows) >= MIN_JUDGED_ROWS]


def call_digest(image_ids: Sequence[str], candidates: Sequence[str], references: Sequence[Sequence[str]]) -> str:
    """SHA-256 of one pair-scorer call's arguments (the key of its answer)."""
    text = json.dumps([list(image_ids), list(candidates), [list(r) for r in references]], ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class AnsweredPairScorer:
    """A neural pair scorer whose backbone was released: it answers the calls it was asked while the
    backbone was loaded (:func:`answer_judgments`) with the very arrays computed then; another call
    rebuilds the live scorer once (``rebuild``, logged) and asks it."""

    def __init__(self, name: str, identity, answers: dict[str, np.ndarray],
                 rebuild: Callable[[], Mapping[str, PairScorer]]):
        self.name, self.identity, self.answers, self._rebuild = name, identity, answers, rebuild

    def __call__(self, image_ids, candidates, references):
        hit = self.answers.get(call_digest(image_ids, candidates, references))
        if hit is not None:
            return hit
        log.info("neural scorer %s: a human-judgment score was not answered before its backbone was "
                 "released; loading the backbone again", self.name)
        return self._rebuild()[self.name](image_ids, candidates, references)

    def live(self) -> PairScorer:
        """The live pair scorer, its backbone loaded again (e.g. to score a benchmark's own images)."""
        log.info("neural scorer %s: loading its backbone again for images outside the corpus", self.name)
        return self._rebuild()[self.name]


def answer_judgments(corpus: Corpus, pair: Mapping[str, PairScorer], cache: DiskCache,
                     rebuild: Callable[[], Mapping[str, PairScorer]]) -> dict[str, PairScorer]:
    """Score the corpus' human judgments (:func:`judged_rows`) with each live pair scorer through the
    human-correlation stage's cache (:func:`experiments.human_stage.cached_row_scores`, so that stage finds
    them there), and return :class:`AnsweredPairScorer` stand-ins that need no backbone."""
    rows = judged_rows(corpus)
    memo: dict[str, Mapping[str, PairScorer]] = {}

    def rebuild_once() -> Mapping[str, PairScorer]:
        if "live" not in memo:
            memo["live"] = rebuild()
        return memo["live"]

    out: dict[str, PairScorer] = {}
    for name, fn in pair.items():
        answers: dict[str, np.ndarray] = {}

        def recording(image_ids, candidates, references, fn=fn, answers=answers):
            s = fn(image_ids, candidates, references)
            answers[call_digest(image_ids, candidates, references)] = s
            return s

        recording.identity = fn.identity
        for tag, r in rows:
            cached_row_scores(cache, corpus, name, recording, tag, r, image_based=True)
        out[name] = AnsweredPairScorer(name, fn.identity, answers, rebuild_once)
    return out


def training_recipe(fam, options: RunOptions, bb):
    """The recipe family ``fam`` trains with on backbone ``bb`` (:meth:`neural.family.ScorerFamily.recipe`:
    ``--recipe``, else the small recipes for the tiny / teaching CLIP and each paper's for any other
    backbone), logged."""
    recipe = fam.recipe(bb, options.recipe)
    log.info("%s: training recipe %s", fam.name, recipe.name)
    return recipe


def obtain_scorer(fam, bb, corpus: Corpus, options: RunOptions, settings, *, shipped: bool) -> tuple[object, bool]:
    """``(scorer, from the shipped copy)`` of family ``fam`` (:class:`neural.family.ScorerFamily`) on
    backbone ``bb``: a backbone read from the family's own release file (:attr:`release_format`) as it is;
    with ``shipped`` the shipped scorer (:mod:`neural.shipped_scorers`) where the family has one and
    prefers it; else trained here with its recipe (``--recipe``,
    :meth:`~neural.family.ScorerFamily.recipe`); a family that is not trained scores with the backbone
    as given, as does a trained one without training data (with a warning)."""
    from neural.family import NoTrainingData, TrainingDataError  # torch-free; with the other neural imports

    if fam.release_format and getattr(bb, "weights_format", "") == fam.release_format:
        log.info("%s: %s is a %s release file; scoring with it as it is (no fine-tuning here%s)", fam.name,
                 bb.name, fam.name, ", --pacs-positives not used" if not fam.prefers_shipped(settings) else "")
        return fam.untrained(bb), False
    if shipped and fam.shipped_folder and fam.prefers_shipped(settings):
        return _load_shipped(fam, bb), True
    if not fam.trained:
        return fam.untrained(bb), False
    recipe = training_recipe(fam, options, bb)
    try:
        return fam.train(bb, corpus, recipe, settings), False
    except TrainingDataError as exc:
        raise PipelineError(str(exc)) from exc
    except NoTrainingData as exc:
        fallback = fam.untrained(bb)
        if fallback is None:
            raise PipelineError(f"{fam.name}: {exc}") from exc
        log.warning("%s; scoring with the %s formula on the backbone as given", exc, fam.name)
        return fallback, False


def _is_shipped_parent(bb) -> bool:
    """Whether ``bb`` is the package's teaching CLIP (:func:`neural.shipped_scorers.is_shipped_teaching_clip`)."""
    from neural.shipped_scorers import is_shipped_teaching_clip  # lazy: torch is loaded with the backbone

    return is_shipped_teaching_clip(bb)


def _load_shipped(fam, bb):
    """The family's shipped scorer on the teaching CLIP ``bb`` (:func:`neural.shipped_scorers.load_shipped_scorer`;
    a missing or damaged file is a :class:`PipelineError` naming it and the rebuild command)."""
    from neural.shipped_scorers import ShippedScorerError, load_shipped_scorer  # lazy: no torch on a warm run

    try:
        scorer = load_shipped_scorer(fam.name, bb)
    except ShippedScorerError as exc:
        raise PipelineError(str(exc)) from exc
    log.info("%s: the shipped scorer (%s), trained once from the teaching CLIP; not trained here", fam.name,
             fam.backbone_of(scorer).shipped["weights_sha256"][:12])
    return scorer


def _retrieval_outputs(corpus: Corpus, pools: Mapping[str, RankingPool], names: list[str],
                       scorers: Mapping[str, object], cache: DiskCache, timings: dict) -> dict[str, SystemOutput]:
    """Retrieval on the test pool: every reference-free scorer asked for (each family says what its output
    records, :meth:`~neural.family.ScorerFamily.retrieval_config`); where the pools hold the test split
    with every caption (:data:`~experiments.corpus_stage.EVERY_CAPTION_POOL`), also its metrics there
    (:func:`~experiments.evaluation_stage.every_caption_json`; the matrix is not kept)."""
    from neural.base import affinity_for_pool  # lazy: a warm re-run must not import torch

    outputs: dict[str, SystemOutput] = {}
    every = pools.get(EVERY_CAPTION_POOL)
    t = time.perf_counter()
    for name, sc in scorers.items():
        if name not in names:
            continue
        S = affinity_for_pool(sc, corpus, pools["test"], cache=cache)
        outputs[name] = SystemOutput(name=name, family="neural", test=ScoreMatrices.from_affinity(S),
                                     config=family_for(name).retrieval_config(sc, corpus),
                                     every_caption={} if every is None else
                                     every_caption_json(every, affinity_for_pool(sc, corpus, every, cache=cache)))
    timings["neural retrieval"] = time.perf_counter() - t
    return outputs


def _pair_scorers(corpus: Corpus, names: list[str], scorers: Mapping[str, object],
                  ref_scorers: Mapping[str, object], cache: DiskCache) -> dict[str, PairScorer]:
    """Pair scorers for the human-correlation tables (the reference-based variants use the references;
    :meth:`~neural.family.ScorerFamily.pair_scorer`)."""
    pair: dict[str, PairScorer] = {}
    for group, use_references in ((scorers, False), (ref_scorers, True)):
        for name, sc in group.items():
            if name in names:
                pair[name] = family_for(name).pair_scorer(sc, corpus, cache, use_references=use_references)
    return pair


def _specificity(corpus: Corpus, names: list[str], scorers: Mapping[str, object], options: RunOptions,
                 cache: DiskCache, timings: dict) -> dict:
    """Specificity rates (SPECS Eqs. 1-2) of the reference-free scorers on the test split."""
    from neural.specs import SPECIFICITY_THETA, specificity_on_corpus  # lazy: a warm run must not import torch

    t = time.perf_counter()
    # cached per scorer (under its identity); the scorers not in the cache are computed in one call,
    # which builds the detail units and loads the images once for all of them
    keys = {k: {"what": "specificity", "scorer": v.cache_identity(), "corpus": corpus.name,
                "fingerprint": corpus.fingerprint, "split": "test", "max_images": 100, "seed": options.seed,
                "theta": SPECIFICITY_THETA, "per_step": True}
            if hasattr(v, "cache_identity") else None
            for k, v in scorers.items() if k in names}
    sr = {k: hit for k, key in keys.items()
          if key is not None and (hit := cache.load("specificity", key)) is not None}
    missing = {k: scorers[k] for k in keys if k not in sr}
    if missing:
        fresh = specificity_on_corpus(missing, corpus, "test", max_images=100, seed=options.seed)
        for k in missing:
            sr[k] = {m: np.asarray(fresh[k][m]) for m in ("SR_pos", "SR_neg", "hits_pos", "hits_neg")}
            if keys[k] is not None:
                cache.store("specificity", keys[k], sr[k])
    # the per-step outcomes (paired tests, experiments.paper_effects) leave with the rates; the pipeline
    # takes them out before results.json
    specificity = {k: {"SR_pos": round(float(v["SR_pos"]), 4), "SR_neg": round(float(v["SR_neg"]), 4),
                       "hits_pos": [bool(x) for x in v["hits_pos"]], "hits_neg": [bool(x) for x in v["hits_neg"]]}
                   for k, v in sr.items()}
    timings["specificity"] = time.perf_counter() - t
    for k, v in specificity.items():
        log.info("specificity %-14s SR_pos %5.1f %%  SR_neg %5.1f %%", k, 100 * v["SR_pos"], 100 * v["SR_neg"])
    return specificity


#: Layout version of the ``neural_stage`` cache entries (bump when what is stored changes).
NEURAL_STAGE_VERSION = 1
#: Source files whose code decides the neural stage's numbers (besides the libraries): a change to any of
#: them gives the stage a new cache key (the per-scorer entries below it keep theirs).
NEURAL_STAGE_SOURCES = ("neural", "corpora", "experiments/neural_stage.py")
#: Distributions whose versions enter the neural stage's cache key.
NEURAL_LIBRARIES = ("torch", "torchvision", "open_clip_torch", "numpy", "pillow", "nltk", "opencv-python-headless",
                    "opencv-python")


def neural_stage_key(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str],
                     options: RunOptions) -> dict | None:
    """Cache key of the whole neural stage (:func:`neural_stage`), computed without importing torch.

    It holds what decides the stage's outputs: the corpus (name, fingerprint of captions and splits, the
    signatures of every image the stage reads: training, dev and test-pool images), the test pool, the
    scorers asked for, the options that reach them (``--seed``, ``--quick``, ``--clip-model``,
    ``--clip-pretrained`` — a weights file by path, size and modification time; the teaching CLIP's by its
    recorded SHA-256 —, ``--clip-steps``,
    ``--device``, with ``auto`` the NVIDIA driver's presence, ``CUDA_VISIBLE_DEVICES`` and ``$ITR_DEVICE``,
    ``--skip-missing-images``' training images, every ``--backbone`` a scorer uses: name, architecture,
    weights — a file as ``--clip-pretrained``'s), ``--train-scorers`` and the shipped scorers' manifest
    SHA-256 (:mod:`neural.shipped_scorers`), the versions of the libraries that compute them, and a
    digest of the code (:data:`NEURAL_STAGE_SOURCES`).  ``None`` (not cached as a whole) with
    ``--pacs-positives``: the tuples file names images whose identity only :mod:`neural.pacs` can read.
    """
    from neural.names import shipped_manifest_sha256  # torch-free

    if options.pacs_positives:
        return None
    weights_file = weights_file_identity(options.clip_pretrained, options.clip_model)
    backbones = [{"name": b.name, "model": b.model, "pretrained": b.pretrained,
                  "weights_file": weights_file_identity(b.pretrained, b.model)}
                 for b in options.backbones if b.name in scorer_groups(names)]
    train_ids = neural_train_ids(corpus, options)
    splits = getattr(corpus, "splits", {})
    pool = pools["test"]
    ids = list(dict.fromkeys([*(train_ids if train_ids is not None else splits.get("train", ())),
                              *splits.get("dev", ()), *pool.image_ids]))
    return {
        "what": "neural-stage", "version": NEURAL_STAGE_VERSION, "code": source_digest(NEURAL_STAGE_SOURCES),
        "libraries": library_versions(NEURAL_LIBRARIES), "python": platform.python_version(),
        "corpus": corpus.name, "fingerprint": corpus.fingerprint,
        "images": corpus.images_fingerprint(ids), "n_images": len(ids),
        "train_ids": None if train_ids is None else fingerprint(train_ids),
        "pool": {"split": pool.split, "image_ids": fingerprint(pool.image_ids),
                 "caption_ids": fingerprint(pool.caption_ids)},
        "every_caption_pool": None if EVERY_CAPTION_POOL not in pools else
        fingerprint(pools[EVERY_CAPTION_POOL].caption_ids),
        "names": list(names), "seed": int(options.seed), "quick": bool(options.quick),
        "clip_model": options.clip_model, "clip_pretrained": options.clip_pretrained, "weights_file": weights_file,
        "backbones": backbones, "clip_steps": options.clip_steps, "device": options.device,
        "recipe": options.recipe, "train_scorers": bool(options.train_scorers),
        # the shipped scorers' manifest lists every file's SHA-256: rebuilt scorers are a new key
        "shipped_scorers": shipped_manifest_sha256() if not options.train_scorers else None,
        # "auto" means $ITR_DEVICE, else CUDA where torch sees it; without importing torch, the NVIDIA
        # driver and the visible-devices setting stand in (the provenance then names the device used)
        "cuda_hint": [Path("/proc/driver/nvidia/version").exists(), os.environ.get("CUDA_VISIBLE_DEVICES"),
                      auto_device_setting()] if options.device == "auto" else None,
    }


def weights_file_identity(pretrained: str | None, model: str | None = None) -> dict | None:
    """A weights file's path, size and modification time (``None``: a tag, or no weights); for the
    teaching CLIP (``model`` ``None`` or ``teaching``) also the SHA-256 its record states, so a
    re-pretrained shipped file is a new key."""
    from neural.names import is_teaching_model, teaching_weights_sha256  # torch-free

    out = None
    p = Path(pretrained).expanduser() if pretrained else None
    if p is not None and p.is_file():
        st = p.stat()
        out = {"path": str(p.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}
    if is_teaching_model(model, default=True):
        out = {"teaching_sha256": teaching_weights_sha256(pretrained), **(out or {})}
    return out


class DeferredPairScorer:
    """A neural pair scorer restored from the neural-stage cache: its ``identity`` (the key of its cached
    human-judgment scores) is known, its backbone is only built — by running that backbone's scorers on
    their per-scorer caches — if a score is actually asked for (``resolve``: the live pair scorers of
    its backbone)."""

    def __init__(self, name: str, identity, resolve: Callable[[], Mapping[str, PairScorer]]):
        self.name, self._resolve = name, resolve
        self.identity = identity   # None (as the live scorer's): its scores are never cached

    def __call__(self, image_ids, candidates, references):
        return self.live()(image_ids, candidates, references)

    def live(self) -> PairScorer:
        """The live pair scorer (built on first use; e.g. to score a benchmark's images)."""
        return self._resolve()[self.name]


def neural_stage(corpus: Corpus, pools: Mapping[str, RankingPool], names: Sequence[str], options: RunOptions,
                 cache: DiskCache, executor: BlockExecutor | None = None) -> NeuralResults:
    """:func:`run_neural`, with its results cached as a whole (namespace ``neural_stage``, key
    :func:`neural_stage_key`, without ``executor``: the numbers do not depend on it).

    A warm re-run then reads one entry — the test-pool score matrices, the pair scorers' identities, the
    specificity rates and the provenance — and neither imports torch nor builds a backbone.  The pair
    scorers come back deferred (:class:`DeferredPairScorer`): the human-correlation stage finds their
    scores in its own cache; a scorer asked for a new score runs its backbone's scorers once
    (:func:`run_backbone`, from the per-scorer caches) and answers.  Returns what :func:`run_neural` returns.
    """
    names = list(names)
    key = neural_stage_key(corpus, pools, names, options) if names else None
    if key is None:
        return run_neural(corpus, pools, names, options, cache, executor)
    t0 = time.perf_counter()
    hit = cache.load("neural_stage", key)
    if hit is None:
        outputs, pair, specificity, prov = run_neural(corpus, pools, names, options, cache, executor)
        meta = {"outputs": {k: {"family": v.family, "config": jsonable(v.config),
                                "every_caption": jsonable(v.every_caption)} for k, v in outputs.items()},
                "pair": {k: jsonable(f.identity) for k, f in pair.items()},
                "specificity": jsonable(specificity), "provenance": jsonable(prov)}
        arrays = {f"S::{k}": np.asarray(v.test.annotation, dtype=np.float32) for k, v in outputs.items()}
        arrays["meta"] = np.array(json.dumps(meta))
        cache.store("neural_stage", key, arrays)
        return outputs, pair, specificity, prov

    meta = json.loads(str(hit["meta"]))
    outputs = {k: SystemOutput(name=k, family=v["family"], test=ScoreMatrices.from_affinity(hit[f"S::{k}"]),
                               config=v["config"], every_caption=v.get("every_caption", {}))
               for k, v in meta["outputs"].items()}
    resolved: dict[str, Mapping[str, PairScorer]] = {}

    def resolve(label: str) -> Mapping[str, PairScorer]:
        group = split_scorer(label)[1]
        if group not in resolved:
            log.info("neural scorers: a human-judgment score is not cached; building the scorers of backbone %s",
                     group)
            # only this backbone's scorers: one backbone loaded
            live = run_neural(corpus, pools, [n for n in names if split_scorer(n)[1] == group], options, cache)[1]
            changed = sorted(k for k, f in live.items()
                             if k in meta["pair"] and jsonable(f.identity) != meta["pair"][k])
            if changed:  # retrained with other weights (their caches were deleted; other threads or device)
                log.warning("neural scorers %s were rebuilt with other weights than the cached neural stage "
                            "used; their new human-judgment scores do not belong to the report's retrieval "
                            "numbers: delete %s (or run with --no-cache) for a consistent report",
                            ", ".join(changed), cache.path("neural_stage", key))
            resolved[group] = live
        return resolved[group]

    pair = {k: DeferredPairScorer(k, ident, functools.partial(resolve, k)) for k, ident in meta["pair"].items()}
    specificity = meta["specificity"]
    for k, v in specificity.items():
        log.info("specificity %-14s SR_pos %5.1f %%  SR_neg %5.1f %%", k, 100 * v["SR_pos"], 100 * v["SR_neg"])
    prov = meta["provenance"]
    prov["neural_timings_s"] = {"cached stage": round(time.perf_counter() - t0, 2)}
    log.info("neural scorers: %s read from the cache", ", ".join(outputs) or "human-correlation scores")
    return outputs, pair, specificity, prov
