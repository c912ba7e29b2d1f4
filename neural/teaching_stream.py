"""The teaching CLIP's pretraining data: a seeded stream of generated (image, caption) batches, and the
zero-shot retrieval check on a held-out generated pool.

Stream (version :data:`STREAM_VERSION`)
---------------------------------------
The stream is made of chunks of the generated teaching world
(:func:`corpora.teaching.pretraining_chunk`: chunk ``c`` is a teaching set of ``chunk_size`` images
with five captions each, seed ``2^31 + c`` — outside every evaluation seed, see
:data:`corpora.teaching.EVALUATION_SEEDS`).  Each chunk is used in ``passes`` passes (5: every one of
an image's five captions once); pass ``r`` visits the chunk's images in a seeded permutation, cut into
``⌈chunk_size / B⌉`` batches of distinct images, and pairs image ``i`` with its caption
``(shift_i + r) mod 5`` (``shift`` a seeded draw per image), so a chunk yields each of its
``5 · chunk_size`` pairs exactly once, and rendering costs one image per five pairs.  With probability
``prompt_rate`` a batch's captions carry CLIP-S's prompt ("A photo depicts …", :data:`neural.base.PROMPT`),
as web alt-texts often open with such a phrase; the scorers add it at evaluation.

Step ``s`` maps to ``(chunk, pass, batch) = (s // S_c, (s mod S_c) // S_p, s mod S_p)`` with
``S_p = ⌈chunk_size / B⌉`` and ``S_c = passes · S_p``; every random choice of a batch is drawn from
``numpy.random.default_rng([seed, chunk, pass, tag])``, so a batch depends only on the step and the
configuration — a resumed run sees exactly the batches an uninterrupted one sees.

Held-out check
--------------
:class:`HeldOutPool` is :func:`corpora.teaching.heldout_pool_set` (seed ``2^31 + 2^30 + index``: neither
an evaluation nor a pretraining seed) with its fixed one-caption-per-image pool, built like the
default corpus' 300-image test pool.  Zero-shot R@k of both tasks (image annotation: rank the pool's
captions for each image; image search: rank the images for each caption) by cosine similarity, captions
with CLIP-S's prompt, ranks and metrics from :mod:`corpora.scoring` (pessimistic ties; Hodosh et al.
2013, Sec. 4.3.1).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from corpora.scoring import gold_ranks, rank_metrics
from corpora.teaching import N_CAPTIONS, heldout_pool_set, pretraining_chunk
from neural.backbone import to_pil
from neural.base import PROMPT, with_prompt
from neural.text_tower import encode_text_to_eot

__all__ = ["STREAM_VERSION", "StreamSpec", "TeachingStream", "HeldOutPool", "encode_batch"]

#: Version of the stream's definition (chunking, pass order, caption choice, prompt rule).
STREAM_VERSION = 1
_TAG_PERM, _TAG_SHIFT, _TAG_PROMPT = 0, 1, 2


@dataclass(frozen=True)
class StreamSpec:
    """What the stream is: images per chunk, passes per chunk, batch size, seed, prompt rate."""

    chunk_size: int = 1000
    passes: int = N_CAPTIONS
    batch_size: int = 128
    seed: int = 0
    prompt_rate: float = 0.5

    @property
    def steps_per_pass(self) -> int:
        return math.ceil(self.chunk_size / self.batch_size)

    @property
    def steps_per_chunk(self) -> int:
        return self.passes * self.steps_per_pass

    @property
    def pairs_per_chunk(self) -> int:
        return self.passes * self.chunk_size

    def steps_for_pairs(self, n_pairs: int) -> int:
        """Steps that consume ``n_pairs`` pairs, rounded up to whole chunks."""
        return math.ceil(n_pairs / self.pairs_per_chunk) * self.steps_per_chunk

    def pairs_until(self, steps: int) -> int:
        """Pairs consumed by the first ``steps`` steps (every pass but its last batch holds ``B``)."""
        full, rest = divmod(int(steps), self.steps_per_pass)
        return full * self.chunk_size + rest * self.batch_size

    def locate(self, step: int) -> tuple[int, int, int]:
        """``(chunk, pass, batch)`` of a step."""
        chunk, r = divmod(int(step), self.steps_per_chunk)
        return chunk, r // self.steps_per_pass, r % self.steps_per_pass


def _rng(spec: StreamSpec, *parts: int) -> np.random.Generator:
    return np.random.default_rng([int(spec.seed), *(int(p) for p in parts)])


class TeachingStream:
    """Batches of the pretraining stream (module docstring), preprocessed for a model.

    Parameters
    ----------
    spec : StreamSpec
    preprocess : callable
        The model's eval transform (PIL image → tensor), applied to each rendered image once per chunk.
    """

    def __init__(self, spec: StreamSpec, preprocess: Callable):
        if spec.chunk_size < 2 or spec.batch_size < 2 or not 1 <= spec.passes <= N_CAPTIONS:
            raise ValueError(f"bad stream spec {spec}: chunk_size and batch_size >= 2, passes in 1..{N_CAPTIONS}")
        self.spec = spec
        self.preprocess = preprocess
        self._chunk_index = -1
        self._chunk = None
        self._pixels: dict[int, torch.Tensor] = {}

    def _load_chunk(self, c: int) -> None:
        if c != self._chunk_index:
            self._chunk = pretraining_chunk(c, size=self.spec.chunk_size)
            self._chunk_index, self._pixels = c, {}

    def _pixels_of(self, i: int) -> torch.Tensor:
        x = self._pixels.get(i)
        if x is None:
            x = self._pixels[i] = self.preprocess(to_pil(self._chunk.load_image(self._chunk.image_ids[i])))
        return x

    def batch(self, step: int) -> tuple[torch.Tensor, list[str]]:
        """Step ``step``'s batch: ``(images (B, 3, S, S) float32, captions)``, images distinct."""
        spec = self.spec
        c, r, j = spec.locate(step)
        self._load_chunk(c)
        perm = _rng(spec, c, r, _TAG_PERM).permutation(spec.chunk_size)
        shift = _rng(spec, c, 0, _TAG_SHIFT).integers(N_CAPTIONS, size=spec.chunk_size)
        idx = perm[j * spec.batch_size:(j + 1) * spec.batch_size]
        ids = self._chunk.image_ids
        texts = [self._chunk.captions[ids[i]][(int(shift[i]) + r) % N_CAPTIONS].text for i in idx]
        if _rng(spec, c, r, _TAG_PROMPT, j).random() < spec.prompt_rate:
            texts = with_prompt(texts, PROMPT)
        return torch.stack([self._pixels_of(int(i)) for i in idx]), texts


def encode_batch(model: torch.nn.Module, images: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """L2-normalised image and text features of a batch (text cut at the batch's last end-of-text token,
    :func:`neural.text_tower.encode_text_to_eot`)."""
    return F.normalize(model.encode_image(images), dim=-1), F.normalize(encode_text_to_eot(model, tokens), dim=-1)


class HeldOutPool:
    """The zero-shot retrieval check (module docstring) on ``n_images`` held-out generated images."""

    def __init__(self, n_images: int, preprocess: Callable, tokenizer: Callable, index: int = 0):
        self.corpus = heldout_pool_set(n_images, index=index)
        self.n_images, self.index = int(n_images), int(index)
        ids = self.corpus.split("test")
        self.images = torch.stack([preprocess(to_pil(self.corpus.load_image(i))) for i in ids])
        texts = [self.corpus.caption(c).text for c in self.corpus.fixed_pools["test"]]
        self.tokens = tokenizer(with_prompt(texts, PROMPT))

    @torch.inference_mode()
    def evaluate(self, model: torch.nn.Module, batch_size: int = 100) -> dict:
        """``{"annotation": {R@1, R@5, R@10, median_rank, mean_rank}, "search": {...}}`` (percent)."""
        was_training = model.training
        model.eval()
        v, t = [], []
        for s in range(0, self.n_images, batch_size):
            a, b = encode_batch(model, self.images[s:s + batch_size], self.tokens[s:s + batch_size])
            v.append(a.float())
            t.append(b.float())
        model.train(was_training)
        S = (torch.cat(v) @ torch.cat(t).T).numpy()
        gold = np.arange(self.n_images)
        return {"annotation": rank_metrics(gold_ranks(S, gold)), "search": rank_metrics(gold_ranks(S.T, gold))}
