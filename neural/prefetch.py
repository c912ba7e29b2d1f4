"""Batches prepared ahead of the encoder: image loading (decoding, or rendering a generated image), the
eval transform (resize, crop, normalise) and pinning run on loader threads while the accelerator encodes
the batch before.

Without it a GPU waits on the CPU for every batch (the image work of a batch of 64 takes longer than its
ViT-B/32 forward pass on an H100).  The loader threads release the GIL in the work that matters (OpenCV /
PIL decoding and resizing, torch's normalisation), so threads suffice and no worker process needs the
corpus pickled.  Batches are yielded in order and each is made by the same function as without loader
threads, so the features are bit-identical whatever the number of threads (tested).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import torch

from kernels.threads import default_threads

__all__ = ["MAX_LOADER_THREADS", "loader_threads_for", "prefetched"]

#: At most this many loader threads by default (more rarely help one GPU; the rest of the cores stay free).
MAX_LOADER_THREADS = 4


def loader_threads_for(device: torch.device) -> int:
    """The default number of loader threads for encoding on ``device``: on CUDA one per usable core but
    one (:func:`kernels.threads.default_threads`, which ``ITR_NUM_THREADS`` sets), at most
    :data:`MAX_LOADER_THREADS`, and at least 1; on the CPU one per usable core (each thread then encodes
    whole batches on one torch thread, :meth:`neural.backbone.Backbone.encode_images_from`)."""
    if torch.device(device).type != "cuda":
        return default_threads()
    return max(1, min(MAX_LOADER_THREADS, default_threads() - 1))


def prefetched(make_batch: Callable[[int], torch.Tensor], n_batches: int, threads: int, *,
               depth: int | None = None, pin: bool = False) -> Iterator[torch.Tensor]:
    """``make_batch(0), …, make_batch(n_batches − 1)``, in this order, made up to ``depth`` (default
    ``2 · threads``) batches ahead on ``threads`` loader threads; ``threads = 0`` makes each batch when it
    is asked for, in the caller's thread.  ``pin``: each batch is copied to page-locked memory on its loader
    thread (for an asynchronous host-to-GPU copy).  An error in a batch is raised when that batch is
    reached; closing the iterator cancels the batches not started."""
    if threads <= 0:
        for b in range(n_batches):
            yield make_batch(b)
        return

    def job(b: int) -> torch.Tensor:
        x = make_batch(b)
        return x.pin_memory() if pin else x

    ahead = max(1, depth if depth is not None else 2 * threads)
    pending: deque[Future] = deque()
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="itr-loader") as pool:
        try:
            nxt = 0
            while nxt < min(ahead, n_batches):
                pending.append(pool.submit(job, nxt))
                nxt += 1
            while pending:
                x = pending.popleft().result()
                if nxt < n_batches:
                    pending.append(pool.submit(job, nxt))
                    nxt += 1
                yield x
        finally:
            for f in pending:
                f.cancel()
