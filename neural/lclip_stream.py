"""L-CLIPScore's distillation data for the shipped teaching CLIP: its own pretraining stream.

Li et al. (L-CLIPScore, Sec. IV-B) distil the student on large image–text data, not on the evaluation
corpus' small training split.  The teaching CLIP's counterpart of that data is its pretraining stream
(:func:`corpora.teaching.pretraining_chunk`, :mod:`neural.teaching_stream`): generated chunks of 1,000
images with five captions each, from seeds no evaluation corpus uses.  The recipe ``lclip-teaching``
(:data:`neural.recipes.LCLIP_TEACHING`, ``data="pretraining-stream"``) takes its first
``max_images`` images — chunks ``0, 1, …`` in order, every caption of each image (``max_texts``) — and
all (image, caption) pairs among them for stage 2's Similarity Regulator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from corpora.teaching import GENERATOR_VERSION, PRETRAIN_CHUNK, PRETRAIN_SEEDS, pretraining_chunk
from neural.lclip import LCLIPConfig, train_lclip

__all__ = ["StreamData", "stream_data", "train_lclip_on_stream"]


@dataclass(frozen=True)
class StreamData:
    """The first ``n_images`` images of the pretraining stream: ``images`` (uint8 arrays), ``texts`` (every
    caption of each image, capped at ``max_texts``), ``pairs`` ((image row, text row) of each caption) and
    ``description`` (what the cache key and the saved scorer record of the data)."""

    images: list[np.ndarray]
    texts: list[str]
    pairs: list[tuple[int, int]]
    description: dict


def stream_data(n_images: int, max_texts: int | None = None, chunk_size: int = PRETRAIN_CHUNK) -> StreamData:
    """The first ``n_images`` images of the teaching CLIP's pretraining stream (module docstring) and their
    captions (at most ``max_texts``)."""
    if n_images < 1:
        raise ValueError(f"stream_data: n_images must be >= 1, got {n_images}")
    images, texts, pairs = [], [], []
    n_chunks = math.ceil(n_images / chunk_size)
    for c in range(n_chunks):
        chunk = pretraining_chunk(c, size=chunk_size)
        for image_id in chunk.split("train")[: n_images - len(images)]:
            row = len(images)
            images.append(chunk.load_image(image_id))
            for cap in chunk.captions_of(image_id):
                if max_texts is None or len(texts) < max_texts:
                    pairs.append((row, len(texts)))
                    texts.append(cap.text)
    description = {"data": "teaching-pretraining-stream", "function": "corpora.teaching.pretraining_chunk",
                   "chunks": n_chunks, "chunk_size": chunk_size, "images": len(images), "texts": len(texts),
                   "seeds": [PRETRAIN_SEEDS.start, PRETRAIN_SEEDS.start + n_chunks],
                   "generator_version": GENERATOR_VERSION}
    return StreamData(images, texts, pairs, description)


def train_lclip_on_stream(teacher, config: LCLIPConfig, *, cache=None, show_progress: bool = True,
                          num_threads: int | None = None, log: list | None = None,
                          checkpoint_dir=None):
    """:func:`neural.lclip.train_lclip` on :func:`stream_data` (``config.max_images`` images, at most
    ``config.max_texts`` captions), cached under the stream's description and resumable (checkpoints beside
    the cache entry, or in ``checkpoint_dir``)."""
    data = stream_data(config.max_images, config.max_texts)
    return train_lclip(teacher, data.images, data.texts, data.pairs, config, cache=cache,
                       cache_key=data.description, show_progress=show_progress, log=log,
                       num_threads=num_threads, checkpoint_dir=checkpoint_dir)
