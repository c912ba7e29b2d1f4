"""The fine-tuned scorers shipped with the package: PAC-S, L-CLIPScore, BRIDGE and SPECS trained once from
the shipped teaching CLIP (:mod:`neural.teaching_clip`) and loaded — never trained — by the main job's
default run.

This is how the papers' scorers reach an evaluation: PAC-S (Sarto et al., CVPR 2023) and BRIDGE (Sarto
et al., ECCV 2024) are fine-tuned on COCO, SPECS (Chen et al., 2025) on ShareGPT4V and L-CLIPScore (Li et
al., 2024) is distilled on its own image–text corpus; each is then scored zero-shot on Flickr8k.  Here the
training data is :func:`corpora.teaching.scorer_training_set` ``0`` — a teaching set from a seed range
(:data:`corpora.teaching.SCORER_TRAINING_SEEDS`) that neither the teaching CLIP's pretraining stream nor
any evaluation corpus uses — and each scorer follows the recipe the main job would use on the teaching
CLIP (:func:`neural.recipes.recipe_for`, ``auto``); that recipe distils the L-CLIPScore student on the
teaching CLIP's own pretraining stream instead (``lclip-teaching``, :mod:`neural.lclip_stream`).  ``python -m experiments.train_shipped_scorers``
writes the folder; the model card is ``docs/shipped_scorers.md``.

The folder :data:`SCORERS_DIR` holds one saved scorer per metric (:mod:`neural.saved`, fp16 storage) and
``manifest.json``: the SHA-256 and size of every file, the training set (generator version, seed, sizes),
the parent (the teaching CLIP's file SHA-256), the training seed, and per scorer its training time,
recipe, data source, the machine it was built on and its figures on the held-out card pool
(:func:`heldout_figures`).  :func:`load_shipped_scorer` checks the files against
the manifest before reading them: a missing or damaged file stops with one
:class:`ShippedScorerError` naming the file and :data:`REBUILD_COMMAND` (nothing is trained in its
place).
"""
from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from corpora.protocol import hodosh_pool
from corpora.scoring import gold_ranks, rank_metrics
from corpora.teaching import GENERATOR_VERSION, heldout_pool_set
from neural.backbone import Backbone
from neural.base import affinity_for_pool
from neural.checkpoints import MissingWeightsError, file_sha256
from neural.names import SHIPPED_SCORERS_DIR, TEACHING_WEIGHTS_FILE
from neural.registry import family_for, shipped_folders
from neural.saved import CONFIG_NAME, WEIGHTS_NAME, ScorerFormatError, load_scorer
from neural.specs import specificity_on_corpus
from neural.teaching_clip import GeneratorVersionWarning

#: Where the shipped scorers live (package data).
SCORERS_DIR = SHIPPED_SCORERS_DIR
MANIFEST_NAME = "manifest.json"
#: ``"format"`` of the manifest, and its layout version.
MANIFEST_FORMAT, MANIFEST_VERSION = "itr-shipped-scorers", 1
#: The command that rebuilds :data:`SCORERS_DIR` (about a minute on 2 CPU cores).
REBUILD_COMMAND = "python -m experiments.train_shipped_scorers --out neural/weights/scorers"
#: Largest shipped file, as for the teaching CLIP (bytes).
MAX_FILE_BYTES = 10_000_000
#: Images of the held-out card pool (:func:`corpora.teaching.heldout_pool_set`, index 0).
CARD_POOL_IMAGES = 60

__all__ = ["SCORERS_DIR", "MANIFEST_NAME", "MANIFEST_FORMAT", "MANIFEST_VERSION", 
           "REBUILD_COMMAND", "MAX_FILE_BYTES", "CARD_POOL_IMAGES", "ShippedScorerError", "read_manifest",
           "verified_folder", "load_shipped_scorer", "is_shipped_teaching_clip", "heldout_figures"]


class ShippedScorerError(MissingWeightsError):
    """A shipped scorer's file is missing or damaged, or does not fit the teaching CLIP it is loaded on
    (the message names the file and :data:`REBUILD_COMMAND`)."""


#: How to get going again after a :class:`ShippedScorerError` (the end of every such message).
ADVICE = f"rebuild the shipped scorers with: {REBUILD_COMMAND} (or train them here with --train-scorers)"


def _problem(path: Path, why: str) -> ShippedScorerError:
    return ShippedScorerError(f"shipped scorer {path}: {why}; {ADVICE}")


def read_manifest(root: str | Path | None = None) -> dict:
    """The checked ``manifest.json`` of the shipped scorers (``root``: default :data:`SCORERS_DIR`).

    Raises
    ------
    ShippedScorerError
        Missing, not JSON (file and line named), another format or version, or without an entry per metric.
    """
    path = Path(root or SCORERS_DIR) / MANIFEST_NAME
    if not path.is_file():
        raise _problem(path, "not found")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        where = f":{exc.lineno}" if isinstance(exc, json.JSONDecodeError) else ""
        raise _problem(Path(f"{path}{where}"), f"not valid JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT \
            or manifest.get("version") != MANIFEST_VERSION:
        raise _problem(path, f"not a version-{MANIFEST_VERSION} {MANIFEST_FORMAT} manifest")
    scorers = manifest.get("scorers")
    if not isinstance(scorers, dict) or any(not isinstance(scorers.get(m), dict) for m in shipped_folders()):
        raise _problem(path, f"needs an entry for each of {', '.join(shipped_folders())}")
    return manifest


def verified_folder(metric: str, root: str | Path | None = None, manifest: Mapping | None = None) -> Path:
    """The folder of ``metric``'s shipped scorer after checking each of its files' size and SHA-256
    against the manifest.

    Raises
    ------
    ShippedScorerError
        A file is missing, has another size or another SHA-256 (the message names it).
    """
    folders = shipped_folders()
    if metric not in folders:
        raise ValueError(f"no shipped scorer for {metric!r} (shipped: {', '.join(folders)})")
    root = Path(root or SCORERS_DIR)
    manifest = manifest if manifest is not None else read_manifest(root)
    entry = manifest["scorers"][metric]
    folder = root / str(entry.get("folder", folders[metric]))
    files = entry.get("files") or {}
    if set(files) != {CONFIG_NAME, WEIGHTS_NAME}:
        raise _problem(root / MANIFEST_NAME, f"the {metric} entry must list {CONFIG_NAME} and {WEIGHTS_NAME}")
    for name, rec in sorted(files.items()):
        path = folder / name
        if not path.is_file():
            raise _problem(path, "missing")
        if path.stat().st_size != rec.get("bytes") or file_sha256(path) != rec.get("sha256"):
            raise _problem(path, "damaged (its size or SHA-256 is not the one in manifest.json)")
    return folder


def load_shipped_scorer(metric: str, backbone: Backbone, root: str | Path | None = None):
    """``metric``'s shipped scorer on the teaching CLIP ``backbone`` (verified files, then
    :func:`neural.saved.load_scorer`, which also checks that ``backbone`` is the parent it was trained
    from).

    Returns
    -------
    PACScore, LCLIPScore, BRIDGE or SPECSScore
        Its backbone's ``shipped`` attribute holds the manifest's record of the training set and the
        scorer's card figures.

    Raises
    ------
    ShippedScorerError
        A missing or damaged file, or ``backbone`` is not the teaching CLIP the scorer was trained from
        (e.g. the teaching CLIP was re-pretrained); the message names the file and :data:`REBUILD_COMMAND`.

    Warns
    -----
    GeneratorVersionWarning
        The training set came from another teaching-world generator version than this one.
    """
    manifest = read_manifest(root)
    folder = verified_folder(metric, root, manifest)
    version = (manifest.get("training_set") or {}).get("generator_version")
    if version != GENERATOR_VERSION:
        warnings.warn(f"the shipped scorers in {folder.parent} were trained on teaching-world generator version "
                      f"{version}, this corpus generator is version {GENERATOR_VERSION}; rebuild them with: "
                      f"{REBUILD_COMMAND}", GeneratorVersionWarning, stacklevel=2)
    try:
        scorer = load_scorer(folder, backbone)
    except ScorerFormatError as exc:   # its message names the file already
        raise ShippedScorerError(f"{exc}; {ADVICE}") from exc
    bb = family_for(metric).backbone_of(scorer)
    entry = manifest["scorers"][metric]
    bb.shipped = {"metric": metric, "folder": str(folder),  # type: ignore[attr-defined]
                  "training_set": manifest.get("training_set"), "heldout": entry.get("heldout"),
                  "weights_sha256": entry["files"][WEIGHTS_NAME]["sha256"]}
    return scorer


def is_shipped_teaching_clip(backbone) -> bool:
    """Whether ``backbone`` is the shipped teaching CLIP as :func:`neural.teaching_clip.load_teaching_clip`
    loads it from the package (:data:`neural.names.TEACHING_WEIGHTS_FILE`): the backbone the shipped
    scorers are for.  (Whether its weights are still the ones they were trained from is checked when they
    load.)"""
    return getattr(backbone, "teaching_weights_file", None) == TEACHING_WEIGHTS_FILE.resolve()


def heldout_figures(scorer, metric: str, n_images: int = CARD_POOL_IMAGES) -> dict:
    """The model card's figures of a scorer on the held-out card pool (:func:`corpora.teaching.heldout_pool_set`
    with ``n_images`` images, one caption each: a set no training and no evaluation uses).

    ``annotation`` / ``search``: R@1, R@5, R@10, median and mean rank of the pool's affinity matrix
    (Hodosh et al. 2013, Sec. 4.3.1); for SPECS also ``SR_pos`` / ``SR_neg`` (Chen et al. 2025, Eqs. 1–2,
    θ the raw image–text cosine, :func:`neural.specs.specificity_on_corpus`) on the same images.
    """
    corpus = heldout_pool_set(n_images)
    pool = hodosh_pool(corpus, "test")
    S = np.asarray(affinity_for_pool(scorer, corpus, pool), dtype=np.float64)
    out: dict = {"pool_images": int(n_images),
                 "annotation": rank_metrics(gold_ranks(S, pool.gold_caption)),
                 "search": rank_metrics(gold_ranks(S.T, pool.gold_image))}
    if family_for(metric).card_specificity:
        sr = specificity_on_corpus({metric: scorer}, corpus, "test", max_images=n_images, seed=0)[metric]
        out.update(SR_pos=100.0 * float(sr["SR_pos"]), SR_neg=100.0 * float(sr["SR_neg"]))
    return out
