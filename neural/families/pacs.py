"""PAC-S and RefPAC-S (Sarto et al., CVPR 2023) as a scorer family: the backbone fine-tuned on
positive-augmented tuples (:mod:`neural.pacs`); saved as the delta from its parent."""
from __future__ import annotations

import copy

import numpy as np

from neural.family import NoTrainingData, ScorerFamily, TrainingDataError
from neural.recipes import PACS_PAPER, PACS_SMALL

__all__ = ["PACSFamily", "FAMILY", "MIN_PACS_TUPLES", "PACS_TRAIN_IMAGES", "PACS_DEV_IMAGES", "PACS_QUICK_IMAGES",
           "split_tuples"]

#: Positive tuples a user's file must hold: at least 2 for validation and 2 for training.
MIN_PACS_TUPLES = 4
#: On a generated corpus: positive tuples from this many train / dev images (``quick``: the smaller train count).
PACS_TRAIN_IMAGES, PACS_DEV_IMAGES, PACS_QUICK_IMAGES = 700, 150, 300


def split_tuples(tuples, *, seed: int, val_share: float = 0.1):
    """Seeded train / validation split of user-supplied PAC-S tuples (validation: ≥ 2 tuples).

    Raises
    ------
    TrainingDataError
        Fewer than :data:`MIN_PACS_TUPLES` tuples.
    """
    from neural.pacs import PositiveTuples   # lazy: torch

    n = len(tuples)
    if n < MIN_PACS_TUPLES:
        raise TrainingDataError(f"--pacs-positives: need at least {MIN_PACS_TUPLES} tuples (got {n})")
    perm = np.random.default_rng(seed).permutation(n)
    n_val = max(2, int(round(n * val_share)))
    parts = []
    for idx, tag in ((perm[n_val:], "train"), (perm[:n_val], "val")):
        ident = None if tuples.identity is None else {**tuples.identity, "part": tag, "seed": seed}
        parts.append(PositiveTuples(images=[tuples.images[i] for i in idx], texts=[tuples.texts[i] for i in idx],
                                    gen_images=[tuples.gen_images[i] for i in idx],
                                    gen_texts=[tuples.gen_texts[i] for i in idx], identity=ident))
    return parts[0], parts[1]


class PACSFamily(ScorerFamily):
    """PAC-S = 2.0 max(cos(c, v), 0) on a PAC-S fine-tuned CLIP; RefPAC-S = H(PAC-S, max_r cos(c, r))."""

    name, metric = "PAC-S", "pac-s"
    help = "PAC-S = 2.0 max(cos(c, v), 0) on a PAC-S fine-tuned CLIP  (Sarto et al. 2023, Eq. 1)"
    reference_name, reference_metric = "RefPAC-S", "refpac-s"
    reference_help = "RefPAC-S = H(PAC-S, max_r cos(c, r))  (Eq. 4)"
    recipes = {"small": PACS_SMALL, "paper": PACS_PAPER}
    needs_parent, shipped_folder, release_format, provenance_key = True, "pacs", "pacs", "pacs_backbone"
    needs_generator = True
    #: ``neural.score``'s note when the formula runs on a backbone that was not fine-tuned.
    untrained_note = ("PAC-S formula (w = 2.0) on a backbone that was not PAC-S fine-tuned: pass the PAC-S "
                      "checkpoint with --clip-pretrained for the published metric")

    def untrained(self, backbone, *, prompt=None):
        from neural.base import PROMPT   # lazy: torch (the family's names are read without it)
        from neural.pacs import PACScore

        return PACScore(backbone, prompt=PROMPT if prompt is None else prompt or None)

    def prefers_shipped(self, settings) -> bool:
        """A user's tuples (``--pacs-positives``) are always trained on, shipped scorers or not."""
        return settings.positives is None

    def train(self, parent, corpus, recipe, settings):
        """Fine-tune on the tuples of ``settings.positives`` (a seeded 90 / 10 split) or, on a generated
        corpus, on its positives (:data:`PACS_TRAIN_IMAGES` train and :data:`PACS_DEV_IMAGES` dev images)."""
        from corpora.base import GeneratedCorpus, MissingImagesError
        from neural.pacs import PACScore, finetune_pacs, load_tuples, teaching_tuples   # lazy: torch

        if settings.positives:
            try:
                tuples = load_tuples(settings.positives)
            except (ValueError, MissingImagesError) as exc:   # the file changed since the up-front check
                raise TrainingDataError(f"--pacs-positives: {exc}") from exc
            train, val = split_tuples(tuples, seed=settings.seed)
        elif isinstance(corpus, GeneratedCorpus):
            n_img = PACS_QUICK_IMAGES if settings.quick else PACS_TRAIN_IMAGES
            train = teaching_tuples(corpus, "train", seed=settings.seed, max_images=n_img)
            val = teaching_tuples(corpus, "dev", seed=settings.seed, max_images=PACS_DEV_IMAGES)
        else:
            raise NoTrainingData(f"PAC-S positives need a generated corpus; {corpus.name!r} has no generator "
                                 "(pass --pacs-positives FILE, or load the official PAC-S checkpoint with "
                                 "--clip-pretrained)")
        return PACScore(finetune_pacs(parent, train, val, recipe, cache=settings.cache,
                                      show_progress=settings.show_progress))

    def owns(self, scorer) -> bool:
        from neural.pacs import PACScore   # lazy: torch

        return isinstance(scorer, PACScore)

    def variants(self, scorer):
        from neural.pacs import PACScore, RefPACScore   # lazy: torch

        return PACScore(scorer.backbone), RefPACScore(scorer.backbone)

    def with_prompt(self, scorer, prompt):
        return scorer if prompt is None else self.untrained(scorer.backbone, prompt=prompt)

    def scores(self, scorer, images, candidates, references):
        from neural.families.clipscore import FAMILY as CLIPS   # one pass gives both, as CLIP-S

        return CLIPS.scores(scorer, images, candidates, references)

    def parts(self, scorer):
        """The delta from the parent: the state-dict entries that differ (by default the two projections
        and the temperature, Sarto et al. 2023, Sec. 3.2)."""
        import torch   # lazy: the family's names are read without torch

        from neural.saved_parts import backbone_record, parent_of

        bb = scorer.backbone
        parent = parent_of(bb, "PAC-S")
        psd, sd = parent.model.state_dict(), bb.model.state_dict()
        if set(psd) != set(sd):
            raise ValueError("PAC-S: the fine-tuned model's state dict has other entries than its parent's")
        delta = {k: v for k, v in sd.items()
                 if not (v.dtype == psd[k].dtype and v.shape == psd[k].shape and torch.equal(v, psd[k]))}
        training = getattr(bb, "training", {}) or {}
        return delta, {
            "scorer": {"name": scorer.name, "w": scorer.w, "prompt": scorer.prompt,
                       "reference_based": scorer.reference_based},
            "architecture": {"kind": "CLIP fine-tune (delta: the entries that differ from the parent)",
                             "delta_keys": sorted(delta)},
            "backbone": backbone_record(bb), "parent": backbone_record(parent),
            "recipe": training.get("config"), "training_data": training.get("data"),
            "training": {k: training.get(k) for k in ("best_iteration", "final_train_loss", "history")}}

    def load(self, cfg_path, config, tensors, parent, device):
        from neural.pacs import PACScore   # lazy: torch
        from neural.saved_parts import load_tensors, wrap_model

        model = copy.deepcopy(parent.model)
        load_tensors(model, tensors, cfg_path, strict=False)
        bb = wrap_model(model, parent, config, parent.arch)
        bb.parent = parent  # type: ignore[attr-defined]
        bb.training = {"config": config.get("recipe"), "data": config.get("training_data"),  # type: ignore[attr-defined]
                       **(config.get("training") or {})}
        s = config["scorer"]
        return PACScore(bb, w=float(s["w"]), prompt=s.get("prompt"), reference_based=bool(s.get("reference_based")))


FAMILY = PACSFamily()
