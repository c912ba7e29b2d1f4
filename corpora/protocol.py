"""The evaluation protocol of Hodosh, Young & Hockenmaier (2013), Sec. 4.1.1 and 4.3.2.

* **Training data** (Sec. 4.1): the training images with *all* their captions – :func:`train_items`.
* **Ranking pools** (Sec. 4.1.1): the dev and test pools hold N images and **one caption per image**
  (N = 1,000 for Flickr8k).  Image annotation ranks the N captions for each image, image search ranks the
  N images for each caption – :func:`hodosh_pool`.
* **Caption pools** (not in the paper; a variance check): :func:`caption_pools` returns one pool per
  caption index, pool ``k`` holding caption ``k`` of every image, so every caption of the split is a
  query exactly once across the pools.  One pool of 300 captions moves R-precision by several points
  depending on which caption each image contributes; the mean over the caption pools shows whether a
  difference between two systems is more than that draw (``benchmarks/quality_bar.py``).

  - If the corpus fixes the pool (``corpus.fixed_pools[split]``; Flickr8k test = the 1,000 caption ids
    judged in CrowdFlowerAnnotations.txt) that pool is used.
  - Otherwise one caption per image is chosen from ``seed``: caption index
    ``k(image) = int.from_bytes(sha256(f"{seed}\\0{image_id}")[:8], "big") mod n_captions(image)``.
    The choice depends only on (seed, image id, number of captions) – stable across runs, platforms
    and Python versions (no ``hash()`` randomisation), and unchanged for the remaining images when
    missing images are skipped.  The pool's ``caption_ids`` are the record of the choice.
* **Every-caption pool** (not in Hodosh et al.; the retrieval protocol CLIP-style models are reported
  with): :func:`every_caption_pool` holds the split's N images and *all* their captions (COCO's 5k
  Karpathy test split: 5,000 images, 25,010 captions; Flickr30k's: 1,000 and 5,000), as CLIP_benchmark
  (LAION-AI, ``clip_benchmark/metrics/zeroshot_retrieval.py``) defines its ``flickr30k`` and
  ``mscoco_captions`` retrieval sets.  Its text→image recall@k (a caption finds its image in the top
  k) is the pool's image-search R@k; its image→text recall@k (at least one of the image's captions in
  the top k) is the pool's image-annotation S@k, its relevance being the original pairing.
* **Relevance** (Sec. 4.3.2): ``R[i, j]`` is true iff caption ``j`` is image ``i``'s original caption
  or the crowd's "fraction yes" for (image ``i``, caption ``j``) is ≥ 0.66 (two of three judges);
  unjudged pairs are not relevant.  Computed by ``corpus.judge_relevance`` (generated corpora with exact
  scene facts override it).  :func:`relevance_stats` summarises it (the counts Hodosh et al. give in the prose of Sec. 4.3.2).

Missing images
--------------
With ``require_images=True`` the split's images must exist on disk: if some are absent,
:class:`~corpora.base.MissingImagesError` is raised with one message naming how many are missing and the
first few paths.  With ``skip_missing_images=True`` the split is restricted to the images present
instead; the restriction is *counted and reported*: a ``UserWarning``, a line in ``corpus.notes``, and on
the returned pool the attributes ``pool.skipped_image_ids`` (tuple, also ``()`` when nothing was skipped)
and ``pool.n_skipped`` (fields of :class:`~corpora.base.RankingPool`) – or read them with
:func:`skipped_images`.  :func:`train_items` returns them in its
:class:`TrainItems` result.
"""
from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from corpora.base import (
    Caption,
    CaptionId,
    Corpus,
    CorpusError,
    ImageId,
    MissingImagesError,
    RankingPool,
)

__all__ = ["hodosh_pool", "caption_pools", "every_caption_pool", "train_items", "TrainItems", "relevance_stats", "select_caption_index",
           "skipped_images", "available_images", "N_MISSING_SHOWN"]

#: How many missing paths the MissingImagesError message lists.
N_MISSING_SHOWN = 5


def select_caption_index(image_id: ImageId, n_captions: int, seed: int = 0) -> int:
    """Deterministic caption choice for one image: ``sha256(f"{seed}\\0{image_id}")`` mod ``n_captions``."""
    if n_captions < 1:
        raise ValueError(f"image {image_id!r} has no captions")
    digest = hashlib.sha256(f"{int(seed)}\0{image_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % n_captions


def available_images(corpus: Corpus, image_ids: Sequence[ImageId], *, split: str,
                     skip_missing_images: bool, require_images: bool
                     ) -> tuple[tuple[ImageId, ...], tuple[ImageId, ...]]:
    """``(kept, skipped)`` image ids of a split under the missing-image policy (module docstring)."""
    image_ids = tuple(image_ids)
    if not (skip_missing_images or require_images):
        return image_ids, ()
    missing = corpus.missing_images(image_ids)
    if not missing:
        return image_ids, ()
    if not skip_missing_images:
        shown = [str(corpus.image_path(i) or i) for i in missing[:N_MISSING_SHOWN]]
        more = f", … ({len(missing) - len(shown)} more)" if len(missing) > len(shown) else ""
        n_present = len(image_ids) - len(missing)
        what = (f"split {split!r} of corpus {corpus.name!r} needs {len(image_ids)} images, {len(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} missing: {', '.join(shown)}{more}")
        raise MissingImagesError(
            f"{what}. Put the images there, or pass skip_missing_images=True to restrict the split to the "
            f"{n_present} image{'' if n_present == 1 else 's'} present.", what=what, n_present=n_present)
    miss = set(missing)
    kept = tuple(i for i in image_ids if i not in miss)
    msg = (f"split {split!r}: skipped {len(missing)} of {len(image_ids)} images not on disk "
           f"(kept {len(kept)}); results are NOT comparable with the full split")
    corpus.notes.append(msg)
    warnings.warn(msg, UserWarning, stacklevel=3)
    return kept, tuple(missing)


def _attach_skipped(pool: RankingPool, skipped: tuple[ImageId, ...]) -> RankingPool:
    return dataclasses.replace(pool, skipped_image_ids=tuple(skipped))


def skipped_images(pool: RankingPool) -> tuple[ImageId, ...]:
    """The images left out of ``pool`` because they were missing (``()`` if none / not recorded)."""
    return tuple(getattr(pool, "skipped_image_ids", ()))


def _one_caption_pool(corpus: Corpus, split: str, images: Sequence[ImageId], chosen: Sequence[Caption],
                      skipped: tuple[ImageId, ...]) -> RankingPool:
    """The pool of ``images`` with ``chosen[j]`` the caption of ``images[j]`` (gold = diagonal)."""
    caption_ids = tuple(c.id for c in chosen)
    n = len(images)
    pool = RankingPool(
        split=split,
        image_ids=tuple(images),
        caption_ids=caption_ids,
        captions=tuple(chosen),
        gold_caption=np.arange(n, dtype=np.int64),
        gold_image=np.arange(n, dtype=np.int64),
        relevance=corpus.judge_relevance(images, caption_ids),
    )
    return _attach_skipped(pool, skipped)


def hodosh_pool(corpus: Corpus, split: str, *, seed: int = 0, skip_missing_images: bool = False,
                require_images: bool = False) -> RankingPool:
    """The ranking pool of ``split`` under the Hodosh protocol (Sec. 4.1.1): N images, one caption each.

    Parameters
    ----------
    corpus : Corpus
    split : str
        ``"dev"``, ``"test"`` (or any split of the corpus).
    seed : int
        Seed of the one-caption-per-image choice (ignored where ``corpus.fixed_pools[split]`` exists).
    skip_missing_images, require_images : bool
        Missing-image policy, see the module docstring.

    Returns
    -------
    RankingPool
        ``image_ids`` in split order; ``caption_ids[j]`` is the caption chosen for ``image_ids[j]`` so
        ``gold_caption = gold_image = arange(N)``; ``relevance`` (N, N) bool per Sec. 4.3.2.  Extra
        attributes ``skipped_image_ids`` / ``n_skipped``.
    """
    images, skipped = available_images(corpus, corpus.split(split), split=split,
                                       skip_missing_images=skip_missing_images,
                                       require_images=require_images)
    fixed = corpus.fixed_pools.get(split)
    chosen: list[Caption] = []
    if fixed is not None:
        by_image: dict[ImageId, list[CaptionId]] = {}
        for cid in fixed:
            c = corpus.caption(cid)
            by_image.setdefault(c.image_id, []).append(cid)
        split_set = set(corpus.split(split))
        stray = [cid for im, cids in by_image.items() if im not in split_set for cid in cids]
        if stray:
            raise CorpusError(f"fixed pool of split {split!r} has {len(stray)} captions of images outside "
                              f"the split, e.g. {stray[0]}")
        for im in images:
            cids = by_image.get(im, [])
            if len(cids) != 1:
                raise CorpusError(f"fixed pool of split {split!r} has {len(cids)} captions for image {im} "
                                  "(expected exactly one)")
            chosen.append(corpus.caption(cids[0]))
    else:
        for im in images:
            caps = corpus.captions_of(im)
            if not caps:
                raise CorpusError(f"image {im} of split {split!r} has no captions")
            chosen.append(caps[select_caption_index(im, len(caps), seed)])
    return _one_caption_pool(corpus, split, images, chosen, skipped)


def caption_pools(corpus: Corpus, split: str, *, n_pools: int | None = None, skip_missing_images: bool = False,
                  require_images: bool = False) -> tuple[RankingPool, ...]:
    """One Hodosh-style pool per caption index: pool ``k`` holds caption ``k mod n_i`` of every image ``i``.

    Parameters
    ----------
    corpus, split, skip_missing_images, require_images
        As for :func:`hodosh_pool` (``corpus.fixed_pools`` is ignored: every caption is used).
    n_pools : int or None
        Number of pools (default: the largest number of captions of an image in the split, 5 for
        Flickr8k and the teaching set).

    Returns
    -------
    tuple of RankingPool
        Pool ``k`` has ``image_ids`` in split order, ``caption_ids[j]`` = caption ``k mod n_j`` of image
        ``j``, ``gold_caption = gold_image = arange(N)`` and ``relevance`` from ``corpus.judge_relevance``.
        With ``n_pools`` equal to the number of captions per image every caption is a query exactly once.
        On Flickr8k the crowd judgments cover one caption per test image (caption ``#2``, the fixed
        pool's), so only that pool gets relevant pairs beyond the originals: S@k and R-precision are
        comparable across these pools only on a corpus with exact relevance (the teaching set).
    """
    images, caps_of, skipped = train_items(corpus, split=split, skip_missing_images=skip_missing_images,
                                           require_images=require_images)
    if n_pools is None:
        n_pools = max((len(c) for c in caps_of), default=0)
    if n_pools < 1:
        raise ValueError(f"caption_pools: n_pools={n_pools} (split {split!r} has no captions?)")
    return tuple(_one_caption_pool(corpus, split, images, [c[k % len(c)] for c in caps_of], skipped)
                 for k in range(int(n_pools)))


def every_caption_pool(corpus: Corpus, split: str, *, skip_missing_images: bool = False,
                       require_images: bool = False) -> RankingPool:
    """The images of ``split`` with every caption of each (module docstring: the CLIP_benchmark retrieval
    sets).

    Parameters
    ----------
    corpus, split, skip_missing_images, require_images
        As for :func:`hodosh_pool` (``corpus.fixed_pools`` is ignored: every caption is used).

    Returns
    -------
    RankingPool
        ``image_ids`` in split order, ``caption_ids`` every caption of each image in turn (so M ≥ N);
        ``gold_image[j]`` the image caption ``j`` was written for, ``gold_caption[i]`` the first caption
        of image ``i`` (R@k of image annotation reads that one; S@k counts any relevant caption), and
        ``relevance`` the original pairing only (CLIP_benchmark's positive pairs: a caption is relevant
        to the image it was written for), also on corpora with judged or exact relevance.
    """
    images, caps_of, skipped = train_items(corpus, split=split, skip_missing_images=skip_missing_images,
                                           require_images=require_images)
    captions = tuple(c for caps in caps_of for c in caps)
    counts = np.array([len(c) for c in caps_of], dtype=np.int64)
    caption_ids = tuple(c.id for c in captions)
    gold_image = np.repeat(np.arange(len(images), dtype=np.int64), counts)
    relevance = np.zeros((len(images), len(captions)), dtype=bool)
    relevance[gold_image, np.arange(len(captions))] = True
    pool = RankingPool(
        split=split,
        image_ids=tuple(images),
        caption_ids=caption_ids,
        captions=captions,
        gold_caption=np.cumsum(counts) - counts,   # each image's first caption
        gold_image=gold_image,
        relevance=relevance,
    )
    return _attach_skipped(pool, skipped)


class TrainItems(NamedTuple):
    """Training data (Sec. 4.1): images and all their captions, aligned."""

    image_ids: tuple[ImageId, ...]
    captions: list[tuple[Caption, ...]]
    skipped_image_ids: tuple[ImageId, ...] = ()

    @property
    def n_skipped(self) -> int:
        return len(self.skipped_image_ids)

    def pairs(self) -> tuple[np.ndarray, list[Caption]]:
        """Flattened (image index, caption) pairs: every image repeated once per caption."""
        idx = np.repeat(np.arange(len(self.image_ids)), [len(c) for c in self.captions])
        return idx, [c for caps in self.captions for c in caps]


def train_items(corpus: Corpus, *, split: str = "train", skip_missing_images: bool = False,
                require_images: bool = False) -> TrainItems:
    """The images of ``split`` with all their captions (Sec. 4.1: 6,000 training images × 5 captions).

    Returns a :class:`TrainItems` ``(image_ids, captions, skipped_image_ids)``; unpacks as
    ``ids, caps, skipped = train_items(corpus)``.
    """
    images, skipped = available_images(corpus, corpus.split(split), split=split,
                                       skip_missing_images=skip_missing_images,
                                       require_images=require_images)
    caps = []
    for im in images:
        c = corpus.captions_of(im)
        if not c:
            raise CorpusError(f"image {im} of split {split!r} has no captions")
        caps.append(c)
    return TrainItems(tuple(images), caps, skipped)


def _histogram(counts: np.ndarray) -> dict[str, int]:
    return {"0": int((counts == 0).sum()), "1": int((counts == 1).sum()), "2": int((counts == 2).sum()),
            "3": int((counts == 3).sum()), ">=4": int((counts >= 4).sum())}


def relevance_stats(pool: RankingPool) -> dict:
    """Counts describing ``pool.relevance`` (Sec. 4.3.2).

    Returns
    -------
    dict
        ``n_images``, ``n_captions``, ``n_relevant_pairs``, ``n_original_pairs`` (gold pairs),
        ``n_extra_pairs`` (relevant non-original pairs), ``captions_by_n_images`` – how many captions
        are relevant to 0 / 1 / 2 / 3 / ≥4 images –, ``images_by_n_captions`` (the same per image),
        ``mean_images_per_caption``, ``mean_captions_per_image``, ``n_skipped_images``.
    """
    R = np.asarray(pool.relevance, dtype=bool)
    per_caption = R.sum(axis=0)
    per_image = R.sum(axis=1)
    gold = np.zeros_like(R)
    gold[np.asarray(pool.gold_image), np.arange(R.shape[1])] = True
    n_orig = int((R & gold).sum())
    return {
        "split": pool.split,
        "n_images": int(R.shape[0]),
        "n_captions": int(R.shape[1]),
        "n_relevant_pairs": int(R.sum()),
        "n_original_pairs": n_orig,
        "n_extra_pairs": int(R.sum()) - n_orig,
        "captions_by_n_images": _histogram(per_caption),
        "images_by_n_captions": _histogram(per_image),
        "mean_images_per_caption": float(per_caption.mean()) if R.size else 0.0,
        "mean_captions_per_image": float(per_image.mean()) if R.size else 0.0,
        "n_skipped_images": len(skipped_images(pool)),
    }
