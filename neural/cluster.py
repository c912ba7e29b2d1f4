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

The backbone goes to the workers once for consecutive calls with the same backbone and weights inside one
:func:`clip_encoding_on` (a :class:`~corpora.parallel.Shared` value of each call's context: a ViT-L copy
is over a gigabyte per worker); the corpus, or the token rows, go once per call.  The scope keeps one
backbone on the workers at a time: a call with another backbone, or with the same one after its weights
changed in place (:meth:`~neural.backbone.Backbone.weights_state`), replaces it, and leaving the scope
lets the cluster drop it.  Outside a scope each call sends its own copy and drops it after.

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
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import numpy as np

from corpora.cache import DiskCache
from corpora.parallel import BlockExecutor, Shared, blocks_of

log = logging.getLogger(__name__)

__all__ = ["TEXT_BLOCK", "active_executor", "clip_encoding_on", "encode_block", "encode_on_cluster",
           "encode_text_block", "encode_texts_on_cluster", "encoder_on", "text_block_rows", "text_executor",
           "worker_copy"]

#: Texts per block sent to a worker by :func:`encode_texts_on_cluster` (rounded down to whole batches);
#: a call with at most this many texts to encode stays in the job.
TEXT_BLOCK = 1024


class _Scope:
    """One :func:`clip_encoding_on`: its cluster and the backbone copy it keeps there (the last one sent)."""

    def __init__(self, executor: BlockExecutor):
        self.executor = executor
        self._lock = threading.Lock()
        self._held: tuple | None = None     # (backbone, its weights_state(), the Shared encoder)

    def encoder(self, backbone) -> Shared:
        """``backbone``'s encoder on the cluster: the one kept if it is this backbone with the same weights,
        else a new one replacing it."""
        with self._lock:
            state = backbone.weights_state()
            if self._held is None or self._held[0] is not backbone or self._held[1] != state:
                self.release()
                self._held = (backbone, state, _shared_encoder(backbone))
                log.info("CLIP backbone (%s) copied to the Dask workers, kept for its next calls", backbone.name)
            return self._held[2]

    def release(self) -> None:
        """Let the cluster drop the kept encoder."""
        if self._held is not None:
            self.executor.forget(self._held[2])
            self._held = None


_SCOPE: ContextVar[_Scope | None] = ContextVar("itr_clip_scope", default=None)


@contextmanager
def clip_encoding_on(executor: BlockExecutor | None) -> Iterator[None]:
    """Corpus images and large text calls encoded on ``executor``'s cluster while inside (in this thread);
    an in-process or no executor leaves them here.  The backbone sent to the workers stays there until
    another one is needed or the scope ends (see the module's docstring)."""
    scope = _Scope(executor) if executor is not None and executor.distributed else None
    token = _SCOPE.set(scope)
    try:
        yield
    finally:
        _SCOPE.reset(token)
        if scope is not None:
            scope.release()


def active_executor() -> BlockExecutor | None:
    """The cluster of the enclosing :func:`clip_encoding_on`, or ``None``."""
    scope = _SCOPE.get()
    return None if scope is None else scope.executor


def text_executor(n_texts: int) -> BlockExecutor | None:
    """The cluster that encodes ``n_texts`` texts: the enclosing :func:`clip_encoding_on`'s, when they fill
    more than one block of :data:`TEXT_BLOCK`; otherwise ``None`` (encoded in the job)."""
    return active_executor() if n_texts > TEXT_BLOCK else None


def _shared_encoder(backbone) -> Shared:
    """What the workers keep of ``backbone``: its :func:`worker_copy` and the device the job encodes on
    (:func:`_on_device` adds the copy moved there, once per worker).  The job lets go of its own reference
    once the workers hold it (a model on CUDA was copied to the CPU for them) and copies it again only if
    the cluster loses every copy."""
    def make() -> dict:
        return {"backbone": worker_copy(backbone), "device": backbone.device.type}

    return Shared(make(), rebuild=make)


@contextmanager
def encoder_on(executor: BlockExecutor, backbone) -> Iterator[Shared]:
    """``backbone``'s encoder for one call's context on ``executor``'s workers: the enclosing
    :func:`clip_encoding_on`'s kept copy when the scope is on this cluster, else one sent for this call
    and dropped after it."""
    scope = _SCOPE.get()
    if scope is not None and scope.executor is executor:
        yield scope.encoder(backbone)
        return
    shared = _shared_encoder(backbone)
    try:
        yield shared
    finally:
        executor.forget(shared)


def worker_copy(backbone):
    """What a worker needs of ``backbone``: a copy with the model on the CPU (a model on CUDA is copied there;
    one on the CPU is shared, pickling copies it), without this process's memo tables and progress bars.
    :func:`encode_block` puts it on the worker's device."""
    import torch  # heavy (seconds): the main job imports this module on a warm re-run, which needs no torch

    model = backbone.model if backbone.device.type == "cpu" else copy.deepcopy(backbone.model).to("cpu")
    return dataclasses.replace(backbone, model=model, device=torch.device("cpu"), show_progress=False,
                               loader_threads=None)


def _on_device(encoder: dict):
    """The worker's backbone (``encoder``, :func:`_encoder`), moved once to the device the job encodes on."""
    import torch  # heavy (seconds): see worker_copy

    ready = encoder.get("ready")
    if ready is None:
        bb = encoder["backbone"]
        if encoder["device"] == "cuda":
            if not torch.cuda.is_available():
                raise RuntimeError("the job encodes on CUDA but this Dask worker sees no GPU; start "
                                   "the workers on GPU machines, or run the job with --device cpu")
            bb = dataclasses.replace(bb, model=bb.model.to("cuda"), device=torch.device("cuda"))
        ready = encoder["ready"] = bb
    return ready


def encode_block(context: dict, block: Sequence[str], cache: DiskCache) -> dict[str, np.ndarray]:
    """``{"features": (len(block), D)}``: the L2-normalised CLIP features of the corpus images ``block``
    (one chunk), loaded and encoded here in batches of ``context["batch_size"]`` by ``context["encoder"]``
    (:func:`encoder_on`).  Runs on a Dask worker."""
    bb, corpus = _on_device(context["encoder"]), context["corpus"]
    ids = list(block)
    feats = bb.encode_images_from(lambda k: corpus.load_image(ids[k]), len(ids), batch_size=context["batch_size"])
    return {"features": feats.numpy()}


def encode_on_cluster(executor: BlockExecutor, backbone, corpus, chunks: Sequence[Sequence[str]],
                      keys: Sequence[dict], cache: DiskCache, batch_size: int) -> list[np.ndarray]:
    """The features of each chunk of corpus image ids, encoded on ``executor``'s workers (chunks already in
    ``cache`` under ``keys``, namespace ``neural_image_features``, are read back), in chunk order."""
    log.info("CLIP image features (%s): %d images in %d blocks on the Dask cluster", backbone.name,
             sum(len(c) for c in chunks), len(chunks))
    with encoder_on(executor, backbone) as encoder:
        parts = executor.map_blocks(encode_block, [tuple(c) for c in chunks], cache=cache,
                                    context={"encoder": encoder, "corpus": corpus, "batch_size": int(batch_size)},
                                    namespace="neural_image_features", keys=list(keys),
                                    desc=f"encode images ({backbone.name}, cluster)",
                                    show_progress=backbone.show_progress)
    return [p["features"] for p in parts]


def text_block_rows(batch_size: int) -> int:
    """Token rows per text block: :data:`TEXT_BLOCK` rounded down to whole batches of ``batch_size``."""
    return max(1, TEXT_BLOCK // int(batch_size)) * int(batch_size)


def encode_text_block(context: dict, block: tuple[int, int], cache: DiskCache) -> dict[str, np.ndarray]:
    """``{"features": (stop − start, D)}``: the L2-normalised CLIP text features of the token rows
    ``block = (start, stop)`` of ``context["tokens"]`` (``start`` at a batch boundary), encoded here in
    batches of ``context["batch_size"]`` by ``context["encoder"]`` (:func:`encoder_on`).  Runs on a Dask
    worker."""
    bb = _on_device(context["encoder"])
    start, stop = block
    feats = bb.encode_token_rows(context["tokens"][start:stop], batch_size=context["batch_size"])
    return {"features": feats.numpy()}


def encode_texts_on_cluster(executor: BlockExecutor, backbone, tokens, batch_size: int) -> np.ndarray:
    """The features of the token rows ``tokens`` (``(N, context_length)``, already in encoding order),
    encoded on ``executor``'s workers in blocks of :func:`text_block_rows` rows: ``(N, D)`` float32, in
    row order, the features :meth:`~neural.backbone.Backbone.encode_token_rows` gives in this process."""
    blocks = blocks_of(len(tokens), text_block_rows(batch_size))
    log.info("CLIP text features (%s): %d texts in %d blocks on the Dask cluster", backbone.name,
             len(tokens), len(blocks))
    with encoder_on(executor, backbone) as encoder:
        parts = executor.map_blocks(encode_text_block, blocks,
                                    context={"encoder": encoder, "tokens": tokens, "batch_size": int(batch_size)},
                                    desc=f"encode texts ({backbone.name}, cluster)",
                                    show_progress=backbone.show_progress)
    return np.concatenate([p["features"] for p in parts])
