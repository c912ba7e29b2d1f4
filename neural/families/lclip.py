"""L-CLIPScore and RefL-CLIPScore (Li et al.) as a scorer family: a multiplexed student distilled from the
backbone (:mod:`neural.lclip`), saved whole."""
from __future__ import annotations

import copy
import time

from neural.family import ScorerFamily, TrainingDataError
from neural.recipes import LCLIP_PAPER, LCLIP_SMALL, LCLIP_TEACHING, small_kind

__all__ = ["LCLIPFamily", "FAMILY", "student_vs_teacher"]


def student_vs_teacher(student, teacher, corpus, pool, repeats: int = 2) -> dict:
    """Parameter counts and measured scoring throughput of L-CLIPScore's student and its teacher (CLIP-S
    on the same backbone): each scores every test-pool caption against its own image (image and text
    encoding and the score; the images are loaded before the clock starts), timed with
    :func:`time.perf_counter`, best of ``repeats``.

    Returns
    -------
    dict
        ``{"student_params", "teacher_params", "timing": {"student": {...}, "teacher": {...}}}``, each
        timing ``{"seconds", "captions", "captions_per_s"}`` (wall-clock: the pipeline files it under
        ``timings_s``).
    """
    from neural.lclip import count_parameters   # lazy: torch

    images = [corpus.load_image(i) for i in pool.image_ids]
    ims = [images[int(r)] for r in pool.gold_image]       # each caption with the image it was written for
    caps = [c.text for c in pool.captions]
    timing = {}
    for role, sc in (("student", student), ("teacher", teacher)):
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            sc.score(ims, caps)
            best = min(best, time.perf_counter() - t0)
        timing[role] = {"seconds": round(best, 4), "captions": len(caps),
                        "captions_per_s": round(len(caps) / best, 3) if best > 0 else None}
    return {"student_params": int(count_parameters(student.backbone.model)),
            "teacher_params": int(count_parameters(teacher.backbone.model)), "timing": timing}


class LCLIPFamily(ScorerFamily):
    """L-CLIPScore = 2.5 max(cos(c, v), 0) on the distilled student; RefL-CLIPScore (Li et al., Eq. 4)."""

    name, metric = "L-CLIPScore", "l-clipscore"
    help = "L-CLIPScore = 2.5 max(cos(c, v), 0) on a distilled student  (Li et al., Eq. 3)"
    reference_name, reference_metric = "RefL-CLIPScore", "refl-clipscore"
    reference_help = "RefL-CLIPScore = H(L-CLIPScore, max(max_r cos(c, r), 0))  (Eq. 4)"
    recipes = {"small": LCLIP_SMALL, "teaching": LCLIP_TEACHING, "paper": LCLIP_PAPER}
    shipped_folder, provenance_key = "lclip", "lclip_student"

    def train(self, parent, corpus, recipe, settings):
        """Distil the student from ``parent``: on the corpus' training images, or, with a recipe whose data
        is the pretraining stream (``lclip-teaching``), on the teaching CLIP's own stream
        (:mod:`neural.lclip_stream`)."""
        from neural.lclip import LCLIPConfig, LCLIPScore, train_lclip_on_corpus   # lazy: torch

        cfg = LCLIPConfig.from_recipe(recipe, seed=settings.seed)
        if recipe.data == "pretraining-stream":
            if small_kind(parent) != "teaching":
                raise TrainingDataError(f"recipe {recipe.name}: the pretraining stream is the teaching CLIP's; "
                                        f"{getattr(parent, 'name', parent)} was not pretrained on it")
            from neural.lclip_stream import train_lclip_on_stream   # lazy: torch

            return LCLIPScore(train_lclip_on_stream(parent, cfg, cache=settings.cache,
                                                    show_progress=settings.show_progress))
        return LCLIPScore(train_lclip_on_corpus(parent, corpus, "train", cfg, cache=settings.cache,
                                                show_progress=settings.show_progress,
                                                image_ids=settings.image_ids))

    def owns(self, scorer) -> bool:
        from neural.lclip import LCLIPScore   # lazy: torch

        return isinstance(scorer, LCLIPScore)

    def variants(self, scorer):
        from neural.lclip import LCLIPScore   # lazy: torch

        return LCLIPScore(scorer.backbone), LCLIPScore(scorer.backbone, name=self.reference_name)

    def extra_provenance(self, scorer, backbone, corpus, pool) -> dict:
        """Parameters and throughput of the student against its teacher (:func:`student_vs_teacher`)."""
        from neural.clipscore import CLIPScore   # lazy: torch

        return {"lclip_vs_teacher": student_vs_teacher(scorer, CLIPScore(backbone), corpus, pool)}

    def parts(self, scorer):
        """The whole student (:class:`~neural.lclip.MultiplexedCLIP`)."""
        from neural.saved_parts import backbone_record, parent_of   # lazy: torch

        bb = scorer.backbone
        teacher = parent_of(bb, "L-CLIPScore")
        training = getattr(bb, "training", {}) or {}
        return dict(bb.model.state_dict()), {
            "scorer": {"name": scorer.name, "w": scorer.w, "prompt": scorer.prompt},
            "architecture": {"kind": "L-CLIPScore student (whole model)", "student": dict(bb.model.config)},
            "backbone": backbone_record(bb), "parent": backbone_record(teacher),
            "recipe": training.get("config"), "training_data": training.get("data")}

    def load(self, cfg_path, config, tensors, parent, device):
        import torch   # lazy: the family's names are read without torch

        from neural.lclip import LCLIPScore, MultiplexedCLIP
        from neural.saved_parts import load_tensors, rebuilt_parent, wrap_model

        teacher = parent if parent is not None else rebuilt_parent(cfg_path, config, device)
        st = config["architecture"]["student"]
        with torch.random.fork_rng(devices=[]):
            student = MultiplexedCLIP(copy.deepcopy(teacher.model).float().cpu(), int(st["vision_shared"]),
                                      int(st["vision_repeats"]), int(st["text_shared"]), int(st["text_repeats"]),
                                      int(st["embed_rank"]))
        load_tensors(student, tensors, cfg_path)
        student.eval()
        bb = wrap_model(student, teacher, config, "lclip-multiplexed", precision="fp32")
        bb.parent = teacher  # type: ignore[attr-defined]
        bb.training = {"config": config.get("recipe"), "data": config.get("training_data")}  # type: ignore[attr-defined]
        s = config["scorer"]
        return LCLIPScore(bb, w=float(s["w"]), prompt=s.get("prompt"), name=str(s.get("name", "L-CLIPScore")))


FAMILY = LCLIPFamily()
