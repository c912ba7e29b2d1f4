"""BRIDGE (Sarto et al., ECCV 2024) as a scorer family: a mapping module ψ and the L3 head trained beside
a frozen CLIP (:mod:`neural.bridge`); saved as those modules plus the caption bank, loaded on its parent.
Reference-free only: the paper defines no reference-based variant."""
from __future__ import annotations

from dataclasses import asdict

from neural.family import ScorerFamily
from neural.recipes import BRIDGE_PAPER, BRIDGE_SMALL

__all__ = ["BridgeFamily", "FAMILY"]


class BridgeFamily(ScorerFamily):
    """BRIDGE = (CLIP-S + 2.5 max(cos(t*, c), 0)) / 2."""

    name, metric = "BRIDGE", "bridge"
    help = ("BRIDGE = (CLIP-S + 2.5 max(cos(t*, c), 0)) / 2  (Sarto et al. 2024, Eq. 4);\n"
            "reference-free only: the paper defines no reference-based variant")
    recipes = {"small": BRIDGE_SMALL, "paper": BRIDGE_PAPER}
    needs_parent, shipped_folder = True, "bridge"
    specificity = weights_in_backbone = False

    def train(self, parent, corpus, recipe, settings):
        from neural.bridge import BRIDGE, BridgeConfig   # lazy: torch

        cfg = BridgeConfig.from_recipe(recipe, seed=settings.seed)
        return BRIDGE(parent, cfg).fit(corpus, "train", cache=settings.cache, show_progress=settings.show_progress,
                                       image_ids=settings.image_ids)

    def owns(self, scorer) -> bool:
        from neural.bridge import BRIDGE   # lazy: torch

        return isinstance(scorer, BRIDGE)

    def backbone_of(self, scorer):
        """The frozen CLIP (BRIDGE scores pools and pairs itself)."""
        return scorer.clip

    def text_prompt(self, scorer):
        from neural.base import PROMPT   # lazy: torch

        return PROMPT

    def pair_scorer(self, scorer, corpus, cache, *, use_references):
        from neural.bridge import BridgePairScorer   # lazy: torch

        return BridgePairScorer(scorer, corpus)

    def retrieval_config(self, scorer, corpus) -> dict:
        """The backbone and the template source chosen at fit time (:meth:`~neural.bridge.BRIDGE.source_for`)."""
        return {**super().retrieval_config(scorer, corpus), "template_source": scorer.source_for(corpus)}

    def parts(self, scorer):
        """ψ and the L3 head; the caption bank (the fallback templates) goes to ``scorer.json``."""
        from neural.saved_parts import backbone_record   # lazy: torch

        if not hasattr(scorer, "template_source"):
            raise ValueError("BRIDGE: not fitted (call fit first): there is no trained mapping module to save")
        sd = dict(scorer.trainable_modules().state_dict())
        return sd, {
            "scorer": {"name": scorer.name},
            "architecture": {"kind": "BRIDGE mapping module psi + L3 head (the CLIP stays frozen)",
                             "text_width": scorer.text_width, "vision_width": scorer.vision_width,
                             "embed_dim": scorer.embed_dim},
            "backbone": backbone_record(scorer.clip), "parent": backbone_record(scorer.clip),
            "recipe": asdict(scorer.config), "training_data": getattr(scorer, "fit_data", None),
            "bridge": {"template_source": scorer.template_source, "captions_file": scorer.captions_file,
                       "bank_texts": list(scorer.bank_texts),
                       "bank_tags": [None if t is None else list(t) for t in scorer.bank_tags]},
            "training": {"losses": scorer.log}}

    def load(self, cfg_path, config, tensors, parent, device):
        import torch   # lazy: the family's names are read without torch

        from neural.bridge import BRIDGE, BridgeConfig
        from neural.saved_parts import load_tensors

        recipe = dict(config.get("recipe") or {})
        with torch.random.fork_rng(devices=[]):
            br = BRIDGE(parent, BridgeConfig(**recipe), name=str(config["scorer"].get("name", "BRIDGE")))
        load_tensors(br.trainable_modules(), tensors, cfg_path)   # names and shapes checked, as the others
        extra = config.get("bridge") or {}
        br.restore(br.trainable_modules().state_dict(), template_source=extra.get("template_source"),
                   captions_file=extra.get("captions_file"), bank_texts=extra.get("bank_texts") or [],
                   bank_tags=extra.get("bank_tags") or [], log=(config.get("training") or {}).get("losses"),
                   fit_data=config.get("training_data"))
        return br


FAMILY = BridgeFamily()
