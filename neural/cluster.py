"""CLIP features of corpus images and of texts on a Dask cluster (``--workers`` / ``--scheduler``,
docs/scaling.md).

Inside :func:`clip_encoding_on` a cluster, two kinds of encoding go to its workers as blocks
(:class:`corpora.parallel.BlockExecutor`); the job puts the blocks back in order:

- **Corpus images.** :meth:`neural.backbone.Backbone.encode_corpus_images` cuts the images it has not
  encoded yet into chunks (the chunks of its disk cache, ``neural_image_features``).  Each worker loads,
  decodes, transforms and encodes its chunks' images and writes each chunk's features into the cache
  under the key the job would have used (:func:`encode_on_cluster`).
- **Texts.** :meth:`~neural.backbone.Backbone.encode_texts` tokenises the texts it has not encoded yet and
  orders them by token length, in the job.  When they fill more than one block of :data:`TEXT_BLOCK`
  texts (a pool's captions; the scorers' many small calls stay in the job), the ordered token rows go to
  the workers in blocks of whole batches (:func:`encode_texts_on_cluster`).  Text features are kept in
  the job's memory only, as in-process.

The backbone (and the corpus, or the token rows) go to the workers once per call
(:class:`~corpora.parallel.Shared`).

Same numbers: a chunk of images, or a block of text batches, is encoded in the same batches whoever encodes
it, each batch on one torch thread on the CPU (:meth:`~neural.backbone.Backbone.encode_images_from`,
:meth:`~neural.backbone.Backbone.encode_token_rows`), so a worker's features are the job's bit for bit.  A job
on CUDA encodes on each worker's CUDA device (the one the worker process sees: give each worker its own GPU
with ``CUDA_VISIBLE_DEVICES``, as ``dask-cuda`` does); a worker without a GPU stops the job with an error, as
the job's own device would.  GPUs of another model may round otherwise.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from corpora.cache import DiskCache
from corpora.parallel import BlockExecutor, Shared, blocks_of

log = logging.getLogger(__name__)

__all__ = ["TEXT_BLOCK", "active_executor", "clip_encoding_on", "encode_block", "encode_on_cluster",
           "encode_text_block", "encode_texts_on_cluster", "text_block_rows", "text_executor",
           "worker_copy"]

#: Texts per block sent to a worker by :func:`encode_texts_on_cluster` (rounded down to whole batches);
#: a call with at most this many texts to encode stays in the job.
TEXT_BLOCK = 1024

_EXECUTOR: ContextVar[BlockExecutor | None] = ContextVar("itr_clip_executor", default=None)


@contextmanager
def clip_encoding_on(executor: BlockExecutor | None) -> Iterator[None]:
    """Corpus images and large text calls encoded on ``executor``'s cluster while inside (in this thread);
    an in-process or no executor leaves them here."""
    token = _EXECUTOR.set(executor if executor is not None and executor.distributed else None)
    try:
        yield
    finally:
        _EXECUTOR.reset(token)


def active_executor() -> BlockExecutor | None:
    """The cluster of the enclosing :func:`clip_encoding_on`, or ``None``."""
    return _EXECUTOR.get()


def text_executor(n_texts: int) -> BlockExecutor | None:
    """The cluster that encodes ``n_texts`` texts: the enclosing :func:`clip_encoding_on`'s, when they fill
    more than one block of :data:`TEXT_BLOCK`; otherwise ``None`` (encoded in the job)."""
    return _EXECUTOR.get() if n_texts > TEXT_BLOCK else None


def worker_copy(backbone):
    """What a worker needs of ``backbone``: a copy with the model on the CPU (a model on CUDA is copied there;
    one on the CPU is shared, pickling copies it), without this process's memo tables and progress bars.
    :func:`encode_block` puts it on the worker's device."""
    import torch  # heavy (seconds): the main job imports this module on a warm re-run, which needs no torch

    model = backbone.model if backbone.device.type == "cpu" else copy.deepcopy(backbone.model).to("cpu")
    return dataclasses.replace(backbone, model=model, device=torch.device("cpu"), show_progress=False,
                               loader_threads=None)


def _on_device(context: dict):
    """The worker's backbone, moved once to the device the job encodes on (``context["device"]``)."""
    import torch  # heavy (seconds): see worker_copy

    ready = context.get("ready")
    if ready is None:
        bb = context["backbone"]
        if context["device"] == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("the job encodes on CUDA but this Dask worker sees no GPU; start "
                                   "the workers on GPU machines, or run the job with --device cpu")
            bb = dataclasses.replace(bb, model=bb.model.to("cuda"), device=torch.device("cuda"))
        ready = context["ready"] = bb
    return ready


def encode_block(context: dict, block: Sequence[str], cache: DiskCache) -> dict[str, np.ndarray]:
    """``{"features": (len(block), D)}``: the L2-normalised CLIP features of the corpus images ``block``
    (one chunk), loaded and encoded here in batches of ``context["batch_size"]``.  Runs on a Dask worker."""
    bb, corpus = _on_device(context), context["corpus"]
    ids = list(block)
    feats = bb.encode_images_from(lambda k: corpus.load_image(ids[k]), len(ids), batch_size=context["batch_size"])
    return {"features": feats.numpy()}


def encode_on_cluster(executor: BlockExecutor, backbone, corpus, chunks: Sequence[Sequence[str]],
                      keys: Sequence[dict], cache: DiskCache, batch_size: int) -> list[np.ndarray]:
    """The features of each chunk of corpus image ids, encoded on ``executor``'s workers (chunks already in
    ``cache`` under ``keys``, namespace ``neural_image_features``, are read back), in chunk order."""
    context = Shared({"backbone": worker_copy(backbone), "corpus": corpus, "batch_size": int(batch_size),
                      "device": backbone.device.type})
    log.info("CLIP image features (%s): %d images in %d blocks on the Dask cluster", backbone.name,
             sum(len(c) for c in chunks), len(chunks))
    try:
        parts = executor.map_blocks(encode_block, [tuple(c) for c in chunks], context=context, cache=cache,
                                    namespace="neural_image_features", keys=list(keys),
                                    desc=f"encode images ({backbone.name}, cluster)",
                                    show_progress=backbone.show_progress)
    finally:
        executor.forget(context)
    return [p["features"] for p in parts]


def text_block_rows(batch_size: int) -> int:
    """Token rows per text block: :data:`TEXT_BLOCK` rounded down to whole batches of ``batch_size``."""
    return max(1, TEXT_BLOCK // int(batch_size)) * int(batch_size)


def encode_text_block(context: dict, block: tuple[int, int], cache: DiskCache) -> dict[str, np.ndarray]:
    """``{"features": (stop − start, D)}``: the L2-normalised CLIP text features of the token rows
    ``block = (start, stop)`` of ``context["tokens"]`` (``start`` at a batch boundary), encoded here in
    batches of ``context["batch_size"]``.  Runs on a Dask worker."""
    bb = _on_device(context)
    start, stop = block
    feats = bb.encode_token_rows(context["tokens"][start:stop], batch_size=context["batch_size"])
    return {"features": feats.numpy()}


def encode_texts_on_cluster(executor: BlockExecutor, backbone, tokens, batch_size: int) -> np.ndarray:
    """The features of the token rows ``tokens`` (``(N, context_length)``, already in encoding order),
    encoded on ``executor``'s workers in blocks of :func:`text_block_rows` rows: ``(N, D)`` float32, in
    row order, the features :meth:`~neural.backbone.Backbone.encode_token_rows` gives in this process."""
    blocks = blocks_of(len(tokens), text_block_rows(batch_size))
    context = Shared({"backbone": worker_copy(backbone), "tokens": tokens, "batch_size": int(batch_size),
                      "device": backbone.device.type})
    log.info("CLIP text features (%s): %d texts in %d blocks on the Dask cluster", backbone.name,
             len(tokens), len(blocks))
    try:
        parts = executor.map_blocks(encode_text_block, blocks, context=context,
                                    desc=f"encode texts ({backbone.name}, cluster)",
                                    show_progress=backbone.show_progress)
    finally:
        executor.forget(context)
    return np.concatenate([p["features"] for p in parts])
