"""CLIPScore and RefCLIPScore (Hessel et al., EMNLP 2021), exactly as the reference implementation
(jmhessel/clipscore, ``clipscore.py``).

Reference-implementation details reproduced here:

* every candidate **and every reference** is prefixed with the prompt ``"A photo depicts"`` joined by
  one space, and tokenised with truncation to the context length (77 for OpenAI CLIP; the end-of-text
  token is kept) — :func:`neural.base.with_prompt`, :meth:`neural.backbone.Backbone.tokenize`;
* images go through open_clip's eval transform for the model (for OpenAI ViT-B/32: bicubic resize of the
  short side to 224, centre crop, CLIP mean / std);
* features are L2-normalised; CLIP-S (Eq. 1)

  .. math:: \\text{CLIP-S}(c, v) = w \\cdot \\max(\\cos(c, v), 0), \\quad w = 2.5;

* RefCLIP-S (Eq. 2) is the harmonic mean of CLIP-S and the maximal reference cosine

  .. math:: \\text{RefCLIP-S}(c, R, v) = \\text{H-Mean}\\big(\\text{CLIP-S}(c, v),\\;
            \\max(\\max_{r \\in R} \\cos(c, r), 0)\\big)

  as written in the paper — **but** the reference code (``get_refonlyclipscore``) takes
  ``np.max(all_sims)`` with neither the ``w`` scaling nor the clipping at 0, and so do we: the
  reference term here is ``max_r cos(c, r)``, unscaled and unclipped.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from neural.base import (
    PROMPT,
    clip_s,
    flatten_references,
    harmonic_mean,
    image_embeddings,
    l2_normalize,
    max_reference_cosine,
    with_prompt,
)

#: Hessel et al. 2021, Sec. 3: "w = 2.5".
CLIPSCORE_W = 2.5


class CLIPScore:
    """CLIP-S (reference-free).  With ``reference_based=True`` the same object computes RefCLIP-S.

    Parameters
    ----------
    backbone : neural.backbone.Backbone
    w : float
        Rescaling weight (2.5 for CLIP-S; PAC-S uses 2.0).
    prompt : str or None
        Text prefix for candidates and references (``"A photo depicts"``).
    reference_based : bool
        ``False``: :attr:`name` ``"CLIP-S"``; ``True``: ``"RefCLIP-S"`` (``score`` then needs references).
    image_batch_size, text_batch_size : int
        Encoding batch sizes (64 / 256 as in the reference code).
    """

    base_name = "CLIP-S"

    def __init__(self, backbone, *, w: float = CLIPSCORE_W, prompt: str | None = PROMPT,
                 reference_based: bool = False, image_batch_size: int = 64, text_batch_size: int = 256):
        self.backbone = backbone
        self.w = float(w)
        self.prompt = prompt
        self.reference_based = bool(reference_based)
        self.image_batch_size = int(image_batch_size)
        self.text_batch_size = int(text_batch_size)

    # ------------------------------------------------------------------ identity
    @property
    def name(self) -> str:
        return ("Ref" + self.base_name) if self.reference_based else self.base_name

    def cache_identity(self) -> dict:
        return {"scorer": self.name, "w": self.w, "prompt": self.prompt,
                "backbone": self.backbone.cache_identity()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, w={self.w}, backbone={self.backbone.name!r})"

    # ------------------------------------------------------------------ embeddings
    def image_embeddings(self, images) -> np.ndarray:
        """Normalised image embeddings (pixels are encoded; an ``(N, D)`` float matrix is re-normalised)."""
        return image_embeddings(self.backbone, images, batch_size=self.image_batch_size)

    def text_embeddings(self, texts: Sequence[str]) -> np.ndarray:
        """Normalised embeddings of ``prompt + ' ' + text`` (truncated to the context length)."""
        return l2_normalize(self.backbone.encode_texts(with_prompt(texts, self.prompt),
                                                       batch_size=self.text_batch_size).numpy())

    # ------------------------------------------------------------------ scores
    def compute(self, images, candidates: Sequence[str],
                references: Sequence[Sequence[str]] | None = None) -> dict[str, np.ndarray]:
        """All per-instance quantities in one pass (candidates are encoded once).

        Returns a dict with ``"cos"`` (cos(v, c)), ``self.base_name`` (w · max(cos, 0)) and, with
        references, ``"ref_cos"`` (max_r cos(c, r), unscaled, unclipped) and ``"Ref" + base_name``
        (harmonic mean).  All arrays are float32 of shape ``(len(candidates),)``.
        """
        candidates = list(candidates)
        n = len(candidates)
        v = self.image_embeddings(images)
        if v.shape[0] != n:
            raise ValueError(f"{self.name}: {v.shape[0]} images but {n} candidates (one candidate per image)")
        c = self.text_embeddings(candidates)
        cos = np.einsum("nd,nd->n", v, c).astype(np.float32)
        out = {"cos": cos, self.base_name: clip_s(cos, self.w)}
        if references is not None:
            texts, owner = flatten_references(references, n)
            r = self.text_embeddings(texts)
            ref = max_reference_cosine(c, r, owner, n)
            out["ref_cos"] = ref
            out["Ref" + self.base_name] = harmonic_mean(out[self.base_name], ref)
        return out

    def score(self, images, candidates: Sequence[str],
              references: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        """Per-instance CLIP-S, or RefCLIP-S when ``reference_based`` (then ``references`` is required;
        for the reference-free scorer ``references`` is ignored)."""
        if self.reference_based:
            if references is None:
                raise ValueError(f"{self.name} needs references (one list of reference captions per candidate)")
            return self.compute(images, candidates, references)["Ref" + self.base_name]
        return self.compute(images, candidates)[self.base_name]

    def score_matrix(self, images, captions: Sequence[str],
                     references: Sequence[Sequence[str]] | None = None) -> np.ndarray:
        """Affinity ``(n_images, n_captions)`` float32: ``w · max(cos(v_i, c_j), 0)``.

        For the reference-based variant ``references[i]`` are the references of image ``i`` and entry
        ``(i, j)`` is H(CLIP-S(c_j, v_i), max_{r ∈ R_i} cos(c_j, r)).  Note: clipping at 0 ties every
        caption with a negative cosine at 0 (the evaluator's tie policy is pessimistic).
        """
        v = self.image_embeddings(images)
        c = self.text_embeddings(list(captions))
        S = clip_s(v @ c.T, self.w)
        if not self.reference_based:
            return S
        if references is None:
            raise ValueError(f"{self.name}.score_matrix needs references[i] for every image i")
        texts, owner = flatten_references(references, v.shape[0])
        r = self.text_embeddings(texts)
        sims = r @ c.T  # (M_refs, n_captions)
        ref = np.full((v.shape[0], c.shape[0]), -np.inf, dtype=np.float32)
        np.maximum.at(ref, owner, sims)
        return harmonic_mean(S, ref)


class RefCLIPScore(CLIPScore):
    """RefCLIP-S (Hessel et al. 2021, Eq. 2): :class:`CLIPScore` with ``reference_based=True``."""

    def __init__(self, backbone, **kwargs):
        kwargs.setdefault("reference_based", True)
        super().__init__(backbone, **kwargs)


__all__ = ["CLIPSCORE_W", "CLIPScore", "RefCLIPScore"]
