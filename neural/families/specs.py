"""SPECS (Chen et al., EMNLP 2025) as a scorer family: the backbone fine-tuned for specificity with a
stretched long context (:mod:`neural.specs`), saved whole.  Reference-free only: the paper defines no
reference-based variant."""
from __future__ import annotations

from neural.family import ScorerFamily
from neural.recipes import SPECS_PAPER, SPECS_SMALL, SPECS_TEACHING

__all__ = ["SPECSFamily", "FAMILY"]


class SPECSFamily(ScorerFamily):
    """SPECS = (cos(c, v) + 1) / 2 on a SPECS fine-tuned long-context CLIP."""

    name, metric = "SPECS", "specs"
    help = ("SPECS = (cos(c, v) + 1) / 2 on a SPECS fine-tuned long-context CLIP  (Chen et al., Eq. 5);\n"
            "reference-free only: the paper defines no reference-based variant")
    recipes = {"small": SPECS_SMALL, "teaching": SPECS_TEACHING, "paper": SPECS_PAPER}
    shipped_folder, release_format, provenance_key = "specs", "specs", "specs_backbone"
    card_specificity = True

    def untrained(self, backbone, *, prompt=None):
        """A SPECS release file's backbone, scored as it is."""
        from neural.specs import SPECSScore   # lazy: torch (the family's names are read without it)

        return SPECSScore(backbone)

    def train(self, parent, corpus, recipe, settings):
        from neural.specs import SPECSConfig, SPECSScore, train_specs   # lazy: torch

        cfg = SPECSConfig.from_recipe(recipe, seed=settings.seed)
        return SPECSScore(train_specs(parent, corpus, "train", cfg, cache=settings.cache,
                                      show_progress=settings.show_progress, image_ids=settings.image_ids))

    def owns(self, scorer) -> bool:
        from neural.specs import SPECSScore   # lazy: torch

        return isinstance(scorer, SPECSScore)

    def variants(self, scorer):
        from neural.specs import SPECSScore   # lazy: torch

        return SPECSScore(scorer.backbone), None

    def parts(self, scorer):
        """The whole long-context fine-tune (every parameter trains and the positional embedding is stretched)."""
        from neural.saved_parts import backbone_record, parent_of   # lazy: torch

        bb = scorer.backbone
        parent = parent_of(bb, "SPECS")
        training = getattr(bb, "specs_training", {}) or {}
        return dict(bb.model.state_dict()), {
            "scorer": {"name": scorer.name, "w": scorer.w, "prompt": scorer.prompt},
            "architecture": {"kind": "SPECS long-context fine-tune (whole model)", "stretch": dict(bb.stretch)},
            "backbone": backbone_record(bb), "parent": backbone_record(parent),
            "recipe": training.get("config"), "training_data": training.get("data"),
            "training": {"losses": training.get("losses")}}

    def load(self, cfg_path, config, tensors, parent, device):
        from neural.saved_parts import load_tensors, rebuilt_parent, wrap_model   # lazy: torch
        from neural.specs import SPECSScore, stretch_backbone

        base = parent if parent is not None else rebuilt_parent(cfg_path, config, device)
        st = config["architecture"]["stretch"]
        long_bb = stretch_backbone(base, int(st["to"]), int(st["keep"]), precision="fp32")
        model = long_bb.model
        load_tensors(model, tensors, cfg_path)
        model.eval()
        bb = wrap_model(model, long_bb, config, base.arch)
        bb.parent = base  # type: ignore[attr-defined]
        bb.stretch = dict(st)  # type: ignore[attr-defined]
        bb.specs_training = {"config": config.get("recipe"), "data": config.get("training_data"),  # type: ignore[attr-defined]
                             "losses": (config.get("training") or {}).get("losses")}
        s = config["scorer"]
        return SPECSScore(bb, w=float(s["w"]), prompt=s.get("prompt"), name=str(s.get("name", "SPECS")))


FAMILY = SPECSFamily()
