"""CLIP-S and RefCLIP-S (Hessel et al. 2021, Eqs. 1-2) as a scorer family: not trained, the backbone as
given is the whole scorer (:mod:`neural.clipscore`)."""
from __future__ import annotations

from neural.family import ScorerFamily

__all__ = ["CLIPScoreFamily", "FAMILY"]


class CLIPScoreFamily(ScorerFamily):
    """CLIP-S = 2.5 max(cos(c, v), 0); RefCLIP-S = H(CLIP-S, max_r cos(c, r))."""

    name, metric = "CLIP-S", "clip-s"
    help = "CLIP-S = 2.5 max(cos(c, v), 0)  (Hessel et al. 2021, Eq. 1)"
    reference_name, reference_metric = "RefCLIP-S", "refclip-s"
    reference_help = "RefCLIP-S = H(CLIP-S, max_r cos(c, r))  (Eq. 2; reference term unscaled, unclipped)"

    def untrained(self, backbone, *, prompt=None):
        from neural.base import PROMPT   # lazy: torch (the family's names are read without it)
        from neural.clipscore import CLIPScore

        return CLIPScore(backbone, prompt=PROMPT if prompt is None else prompt or None)

    def variants(self, scorer):
        from neural.clipscore import CLIPScore   # lazy: torch

        return scorer, CLIPScore(scorer.backbone, w=scorer.w, prompt=scorer.prompt, reference_based=True)

    def scores(self, scorer, images, candidates, references):
        """One pass gives both (:meth:`neural.clipscore.CLIPScore.compute`)."""
        out = scorer.compute(images, candidates, references)
        keys = [scorer.base_name] + (["Ref" + scorer.base_name] if references is not None else [])
        return {k: out[k] for k in keys}


FAMILY = CLIPScoreFamily()
