"""The main job's first two stages: the corpus (the built-in teaching set or Flickr8k) and the dev / test
ranking pools of the Hodosh protocol, with what retrieval can run on them."""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from corpora.base import Corpus, CorpusError, MissingImagesError, RankingPool
from corpora.flickr8k import load_flickr8k
from corpora.karpathy import load_karpathy
from corpora.protocol import every_caption_pool, hodosh_pool, skipped_images
from corpora.teaching import make_teaching_set
from experiments.errors import PipelineError
from experiments.options import RunOptions
from experiments.runlog import JOB_LOGGER

log = logging.getLogger(JOB_LOGGER)


def load_corpus(options: RunOptions) -> Corpus:
    """The teaching set of ``options.n_teaching_images`` images (split 70/15/15), or the Flickr8k folder.

    Parameters
    ----------
    options : RunOptions
        ``data``, ``n_teaching_images`` and ``seed`` are used.

    Returns
    -------
    Corpus

    Raises
    ------
    PipelineError
        The Flickr8k folder cannot be read.
    """
    if options.data is None:
        n = options.n_teaching_images
        n_train = int(round(n * 0.7))
        n_dev = int(round(n * 0.15))
        return make_teaching_set(n_images=n, n_train=n_train, n_dev=n_dev, seed=options.seed)
    try:
        if options.karpathy_file:   # Karpathy's dataset_*.json (Flickr30k, COCO, Flickr8k)
            if not options.images.is_dir():
                raise PipelineError(f"--images {options.images}: no such folder")
            return load_karpathy(options.data, options.images)
        return load_flickr8k(options.data)   # a folder: checked by RunOptions.from_args
    except (CorpusError, FileNotFoundError) as exc:
        raise PipelineError(str(exc)) from exc


def missing_images_message(exc) -> str:
    """The command line's advice for a :class:`corpora.base.MissingImagesError`: its option
    ``--skip-missing-images`` rather than the library's keyword argument."""
    n = exc.n_present
    present = f"the {n} image{'' if n == 1 else 's'} present" if n is not None else "the images present"
    return (f"{exc.what}. Put the images there, or pass --skip-missing-images to run on "
            f"{present} (results are then not comparable with the full splits).")


#: The key in the pools of a Karpathy-file run of the test split with every caption (the CLIP_benchmark
#: retrieval protocol, :func:`corpora.protocol.every_caption_pool`).
EVERY_CAPTION_POOL = "test_every_caption"


def build_pools(corpus: Corpus, options: RunOptions) -> tuple[dict[str, RankingPool], int]:
    """Dev and test pools (Hodosh Sec. 4.1.1) and the number of images skipped (missing on disk); with a
    Karpathy ``--data`` file also the test split with every caption (:data:`EVERY_CAPTION_POOL`), on which
    the CLIP family is ranked as CLIP_benchmark ranks it.

    Parameters
    ----------
    corpus : Corpus
    options : RunOptions
        ``seed``, ``skip_missing_images`` and ``karpathy_file`` are used.

    Returns
    -------
    pools : dict
        ``{"dev": pool, "test": pool}`` (and :data:`EVERY_CAPTION_POOL`).
    skipped : int
        Pool images skipped because they are missing on disk.
    """
    pools, skipped = {}, 0
    kw = dict(require_images=True, skip_missing_images=options.skip_missing_images)
    try:
        for split in ("dev", "test"):
            pools[split] = hodosh_pool(corpus, split, seed=options.seed, **kw)
            skipped += len(skipped_images(pools[split]))
        if options.karpathy_file:   # the test images again: their skipped ones are counted already
            pools[EVERY_CAPTION_POOL] = every_caption_pool(corpus, "test", **kw)
    except MissingImagesError as exc:
        raise PipelineError(missing_images_message(exc)) from exc
    return pools, skipped


@dataclass(frozen=True)
class RetrievalPlan:
    """What runs on the pools.

    Attributes
    ----------
    systems, neural : tuple of str
        The classical systems and neural scorers that run (none when retrieval is skipped).
    train_skipped : int
        Training images skipped because they are missing on disk (``--skip-missing-images``).
    """

    systems: tuple[str, ...]
    neural: tuple[str, ...]
    train_skipped: int


def retrieval_plan(corpus: Corpus, pools: Mapping[str, RankingPool], options: RunOptions) -> RetrievalPlan:
    """The requested methods, or none when a pool or the training split has fewer than 2 images on disk
    (then a note in the corpus and the log says so).

    Parameters
    ----------
    corpus : Corpus
        Its ``notes`` get the reasons retrieval is skipped.
    pools : mapping
        The dev and test pools.
    options : RunOptions
        ``systems``, ``neural`` and ``skip_missing_images`` are used.

    Returns
    -------
    RetrievalPlan
    """
    n_train = sum(corpus.has_image(i) for i in corpus.split("train"))
    train_skipped = len(corpus.split("train")) - n_train if options.skip_missing_images else 0
    too_small = [f"{s} pool has {p.n_images} image(s) on disk" for s, p in pools.items() if p.n_images < 2]
    if n_train < 2:
        too_small.append(f"train split has {n_train} image(s) on disk")
    if not too_small:
        return RetrievalPlan(options.systems, options.neural, train_skipped)
    rest = ("only the text-only human-correlation tables are computed"
            if (corpus.expert or corpus.crowd) else "the corpus has no human judgments either")
    msg = "retrieval skipped: " + "; ".join(too_small) + f" (need at least 2 each); {rest}"
    log.warning(msg)
    corpus.notes.append(msg)
    if options.systems or options.neural:
        msg = "not run (retrieval skipped): " + ", ".join(options.systems + options.neural)
        log.warning(msg)
        corpus.notes.append(msg)
    return RetrievalPlan((), (), train_skipped)


def corpus_summary(corpus: Corpus, pools: Mapping[str, RankingPool], skipped: int, train_skipped: int) -> dict:
    """``results.json``'s ``corpus`` block: the corpus summary, the pools and the skipped images.

    Parameters
    ----------
    corpus : Corpus
    pools : mapping
        The dev and test pools.
    skipped, train_skipped : int
        Pool and training images skipped because they are missing on disk.

    Returns
    -------
    dict
    """
    return {
        **corpus.summary(),
        "pools": {s: {"images": p.n_images, "captions": p.n_captions,
                      "relevant_pairs": int(np.asarray(p.relevance).sum()),
                      "skipped_images": p.n_skipped} for s, p in pools.items()},
        "skipped_images": skipped + train_skipped,
        "skipped_images_by_split": {"train": train_skipped, **{s: p.n_skipped for s, p in pools.items()
                                                               if s != EVERY_CAPTION_POOL}},
    }
