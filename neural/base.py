"""The caption-scorer protocol shared by every neural scorer, and the formulas they share.

A scorer turns images (RGB arrays, or precomputed L2-normalised image embeddings) and captions into

* a **per-instance score** ``score(images, candidates, references=None) -> (N,)`` — caption evaluation
  (one candidate per image, optional reference captions per image), and
* an **affinity matrix** ``score_matrix(images, captions) -> (n_images, n_captions)`` float32 — retrieval
  through the common evaluator (``docs/architecture.md``: annotation ranks the columns of each row,
  search ranks the rows of each column).

Shared formulas (Hessel et al. 2021, Eq. 1–2; Sarto et al. 2023, Eq. 1 and 4):

.. math::

    \\text{CLIP-S}(c, v) = w \\max(\\cos(c, v), 0), \\qquad
    \\text{Ref}(c, R) = \\max_{r \\in R} \\cos(c, r), \\qquad
    \\text{H}(a, b) = \\frac{2ab}{a + b}.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from corpora.cache import NO_CACHE

#: The prompt CLIPScore and PAC-S prepend to every candidate and reference (jmhessel/clipscore,
#: aimagelab/pacscore: ``prefix='A photo depicts'`` + a space).
PROMPT = "A photo depicts"


@runtime_checkable
class CaptionScorer(Protocol):
    """What the evaluator and the main job need from a caption scorer."""

    name: str

    def score(self, images, candidates: Sequence[str],
              references: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        """Per-instance scores, shape ``(len(candidates),)``; ``images[i]`` goes with ``candidates[i]``
        (and ``references[i]``).  ``images``: a sequence of ``(H, W, 3)`` uint8 arrays, or an
        ``(N, D)`` float array of image embeddings."""
        ...

    def score_matrix(self, images, captions: Sequence[str]) -> np.ndarray:
        """Affinity matrix ``(n_images, n_captions)`` float32, higher = better."""
        ...


# ---------------------------------------------------------------------------- shared helpers
def with_prompt(texts: Sequence[str], prompt: str | None = PROMPT) -> list[str]:
    """Prefix every text with ``prompt`` joined by one space, as the reference implementations do
    (``prefix + ' ' + caption``).  ``prompt=None`` or ``""`` leaves the texts unchanged."""
    if isinstance(texts, str):
        raise TypeError("expected a sequence of captions, got a single string")
    if not prompt:
        return [str(t) for t in texts]
    p = prompt if prompt.endswith(" ") else prompt + " "
    return [p + str(t) for t in texts]


def l2_normalize(x: np.ndarray, axis: int = -1, eps: float = 1e-12) -> np.ndarray:
    """Row-wise L2 normalisation in float32."""
    x = np.asarray(x, dtype=np.float32)
    n = np.sqrt(np.sum(x * x, axis=axis, keepdims=True))
    return x / np.maximum(n, eps)


def clip_s(cos: np.ndarray, w: float) -> np.ndarray:
    """``w · max(cos, 0)`` — CLIP-S (Hessel et al. 2021, Eq. 1; w = 2.5) and PAC-S (Sarto et al. 2023,
    Eq. 1; w = 2.0)."""
    return (np.float32(w) * np.maximum(np.asarray(cos, dtype=np.float32), 0.0)).astype(np.float32)


def harmonic_mean(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise ``2ab / (a + b)``; 0 where ``a + b == 0`` (RefCLIP-S, Hessel et al. 2021, Eq. 2;
    RefPAC-S, Sarto et al. 2023, Eq. 4).  With a negative reference term (which the reference code does
    not clip) the value is whatever the formula gives."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    den = a + b
    with np.errstate(divide="ignore", invalid="ignore"):
        h = np.where(den != 0, 2.0 * a * b / np.where(den != 0, den, 1.0), 0.0)
    return h.astype(np.float32)


def max_reference_cosine(cand: np.ndarray, refs: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """``max_{r ∈ R_i} cos(c_i, r)`` for every candidate ``i``.

    ``cand``: (n, D) normalised candidate embeddings; ``refs``: (M, D) normalised embeddings of all
    references flattened; ``owner``: (M,) index of the candidate each reference belongs to.
    """
    owner = np.asarray(owner)
    if owner.size and (owner.min() < 0 or owner.max() >= n):
        raise ValueError("reference owner index out of range")
    counts = np.bincount(owner, minlength=n)
    if np.any(counts == 0):
        raise ValueError(f"candidate(s) {np.flatnonzero(counts == 0)[:5].tolist()} have no references")
    sims = np.einsum("md,md->m", refs.astype(np.float32), cand[owner].astype(np.float32))
    out = np.full(n, -np.inf, dtype=np.float32)
    np.maximum.at(out, owner, sims)
    return out


def is_embedding_matrix(images: Any) -> bool:
    """True when ``images`` are precomputed embeddings (2-D float array / tensor), not pixels."""
    if isinstance(images, torch.Tensor):
        return images.ndim == 2 and images.is_floating_point()
    if isinstance(images, np.ndarray):
        return images.ndim == 2 and np.issubdtype(images.dtype, np.floating)
    return False


def image_embeddings(backbone, images, batch_size: int = 64) -> np.ndarray:
    """Normalised image embeddings ``(N, D)`` float32 from pixels (encoded with ``backbone``) or from an
    already-computed embedding matrix (re-normalised)."""
    if is_embedding_matrix(images):
        arr = images.detach().cpu().numpy() if isinstance(images, torch.Tensor) else images
        return l2_normalize(arr)
    if isinstance(images, np.ndarray) and images.ndim == 4:
        images = list(images)
    return backbone.encode_images(images, batch_size=batch_size).numpy()


def flatten_references(references: Sequence[Sequence[str]], n: int) -> tuple[list[str], np.ndarray]:
    """Flatten per-candidate reference lists; returns (texts, owner index).  Errors name the offending
    candidate."""
    if len(references) != n:
        raise ValueError(f"references: got {len(references)} reference lists for {n} candidates")
    texts: list[str] = []
    owner: list[int] = []
    for i, refs in enumerate(references):
        if isinstance(refs, str):
            refs = [refs]
        if len(refs) == 0:
            raise ValueError(f"references[{i}] is empty")
        texts.extend(str(r) for r in refs)
        owner.extend([i] * len(refs))
    return texts, np.asarray(owner, dtype=np.int64)


def affinity_for_pool(scorer, corpus, pool, cache=None, **kwargs) -> np.ndarray:
    """The ``(pool.n_images, pool.n_captions)`` float32 affinity matrix of ``scorer`` over a
    :class:`~corpora.base.RankingPool`.

    When the scorer exposes a ``backbone`` (every CLIP-family scorer does), image features come from
    :meth:`~neural.backbone.Backbone.encode_corpus_images` (disk-cached per model / weights / image
    id) and are passed to ``score_matrix`` as an embedding matrix; otherwise raw images are loaded.  A
    scorer that builds its inputs from the corpus itself (class attribute ``pool_affinity_from_corpus``:
    BRIDGE, whose templates come from the source chosen at fit time) is asked for
    ``scorer.affinity(corpus, pool)`` instead.  When the scorer also has ``cache_identity()`` and a cache
    is given, the whole matrix is cached too (namespace ``"neural_affinity"``, keyed by the scorer, the
    pool's ids, the corpus fingerprint and the pool images' signatures).  Extra keyword arguments go to
    ``score_matrix``.
    """
    cache = cache if cache is not None else NO_CACHE
    captions = [c.text for c in pool.captions]
    backbone = getattr(scorer, "backbone", None)

    def compute() -> dict[str, np.ndarray]:
        method = "affinity" if getattr(scorer, "pool_affinity_from_corpus", False) and not kwargs else "score_matrix"
        if method == "affinity":
            S = np.asarray(scorer.affinity(corpus, pool), dtype=np.float32)
        else:
            if backbone is not None and hasattr(backbone, "encode_corpus_images"):
                imgs = backbone.encode_corpus_images(corpus, pool.image_ids, cache=cache)
            else:
                imgs = [corpus.load_image(i) for i in pool.image_ids]
            S = np.asarray(scorer.score_matrix(imgs, captions, **kwargs), dtype=np.float32)
        if S.shape != (pool.n_images, pool.n_captions):
            raise ValueError(f"{getattr(scorer, 'name', scorer)}: {method} returned {S.shape}, "
                             f"expected {(pool.n_images, pool.n_captions)}")
        return {"S": S}

    ident = getattr(scorer, "cache_identity", None)
    if ident is None or kwargs:
        return compute()["S"]
    key = {"what": "affinity", "scorer": ident(), "corpus": corpus.name, "fingerprint": corpus.fingerprint,
           "split": pool.split, "image_ids": list(pool.image_ids), "caption_ids": list(pool.caption_ids),
           "images": corpus.images_fingerprint(pool.image_ids)}   # the pixels (the fingerprint: captions)
    return cache.get_or_compute("neural_affinity", key, compute)["S"]


class CorpusPairScorer:
    """A CLIP-family scorer as a :class:`corpora.scoring.PairScorer` over corpus images, for the
    human-correlation protocols: ``pair_scorer(image_ids, candidates, references)`` scores each
    candidate against its corpus image (features from
    :meth:`~neural.backbone.Backbone.encode_corpus_images`, disk-cached in ``cache``; each distinct image
    encoded once per call) with ``scorer.score``, passing the references only when ``use_references``
    (RefCLIP-S, RefPAC-S, RefL-CLIPScore).

    Attributes
    ----------
    identity : dict or None
        ``{"scorer": scorer.cache_identity(), "references": use_references}``, taken when the pair scorer
        is made (the key of its cached scores); ``None`` for a scorer without ``cache_identity`` (its
        scores are then never cached).
    name : str
        The scorer's name.
    """

    def __init__(self, scorer, corpus, cache=None, *, use_references: bool):
        self.scorer = scorer
        self.corpus = corpus
        self.cache = cache
        self.use_references = use_references
        self.name = getattr(scorer, "name", type(scorer).__name__)
        ident = getattr(scorer, "cache_identity", None)
        self.identity = None if ident is None else {"scorer": ident(), "references": use_references}

    def __call__(self, image_ids: Sequence[str], candidates: Sequence[str],
                 references: Sequence[Sequence[str]]) -> np.ndarray:
        uniq = list(dict.fromkeys(image_ids))
        emb = self.scorer.backbone.encode_corpus_images(self.corpus, uniq, cache=self.cache)
        row = {u: k for k, u in enumerate(uniq)}
        v = emb[[row[i] for i in image_ids]]
        return self.scorer.score(v, list(candidates), list(references) if self.use_references else None)

    def __repr__(self) -> str:
        return f"CorpusPairScorer({self.name!r}, references={self.use_references})"


__all__ = [
    "PROMPT", "CaptionScorer", "with_prompt", "l2_normalize", "clip_s", "harmonic_mean",
    "max_reference_cosine", "is_embedding_matrix", "image_embeddings", "flatten_references",
    "affinity_for_pool", "CorpusPairScorer",
]
