"""What the main job's checked options imply (derived choices, no checks): which backbone kind the run
uses, whether the shipped scorers are loaded, which scorers train, whether they train on the CPU, the
default output folder.  Each takes the :class:`experiments.options.RunOptions` of the run."""
from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from experiments.backbone_specs import DEFAULT_BACKBONE, BackboneSpec, split_scorer
from neural.registry import family_for, trained_names

__all__ = ["uses_tiny_clip", "uses_teaching_clip", "uses_small_clip",
           "uses_shipped_scorers", "default_out_dir", "corpus_label", "trained_scorers", "trains_on_cpu"]


# ``RunOptions`` in the annotations below is :class:`experiments.options.RunOptions`, not imported:
# experiments.options imports this module (annotations are not evaluated here).


def uses_tiny_clip(options: RunOptions) -> bool:
    """Whether ``--clip-model`` selects the tiny CLIP trained here, inside the run (``tiny``,
    ``tiny-clip`` or ``tiny-trained``, :data:`neural.names.TINY_MODEL_NAMES`: the course exercise "train
    your own CLIP")."""
    from neural.names import is_tiny_model  # torch-free; imported on use like every neural module

    return is_tiny_model(options.clip_model)


def uses_teaching_clip(options: RunOptions) -> bool:
    """Whether the run uses the shipped pretrained teaching CLIP zero-shot: ``--clip-model`` absent (the
    offline default), ``teaching`` or ``teaching-clip``."""
    from neural.names import is_teaching_model  # torch-free

    return is_teaching_model(options.clip_model, default=True)


def uses_small_clip(options: RunOptions) -> bool:
    """Whether the backbone is one of the small offline CLIPs (teaching or tiny), whose fine-tuned scorers
    use the small-model recipes."""
    from neural.names import is_small_offline_model  # torch-free

    return is_small_offline_model(options.clip_model)


def uses_shipped_scorers(options: RunOptions, spec: BackboneSpec | None = None) -> bool:
    """Whether PAC-S, L-CLIPScore, BRIDGE and SPECS on backbone ``spec`` (default: the ``--clip-model``
    one) are loaded from the shipped scorers (:mod:`neural.shipped_scorers`) instead of fine-tuned in the
    run: the backbone is the shipped teaching CLIP (its name, or no ``--clip-model``; no weights file
    given), ``--recipe auto`` and no ``--train-scorers``.  ``--pacs-positives`` still fine-tunes PAC-S
    here on the tuples given."""
    from neural.names import is_teaching_model  # torch-free

    model, pretrained = (options.clip_model, options.clip_pretrained) if spec is None else (spec.model, spec.pretrained)
    return (not options.train_scorers and options.recipe == "auto" and pretrained is None
            and is_teaching_model(model, default=True))


def default_out_dir(corpus_name: str) -> Path:
    """``runs/<corpus>-<UTC timestamp>/``, the default ``--out``."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path("runs") / f"{corpus_name}-{stamp}"


def corpus_label(data: Path | None) -> str:
    """The corpus part of the default output folder: ``teaching``, or the ``--data`` folder's name."""
    if data is not None and Path(data).suffix.lower() == ".json":   # dataset_coco.json -> coco
        return Path(data).stem.lower().removeprefix("dataset_") or "karpathy"
    return "teaching" if data is None else Path(data).resolve().name.lower() or "flickr8k"


def trained_scorers(options: RunOptions) -> list[str]:
    """The trained scorers (:func:`neural.registry.trained_names`) the run will train: PAC-S only with
    generated positives (the teaching set, or ``--pacs-positives``)."""
    # the default backbone's scorers (a qualified SCORER@NAME runs on a named backbone)
    names = {family_for(n).name for n in options.neural if split_scorer(n)[1] == DEFAULT_BACKBONE}
    # a family whose training data comes from the corpus generator trains on --data only with user tuples
    return [s for s in trained_names() if s in names
            and not (family_for(s).needs_generator and options.data is not None and not options.pacs_positives)]


def trains_on_cpu(options: RunOptions) -> bool:
    """Whether the neural scorers run on the CPU (``--device cpu``, or ``auto`` resolving to it:
    :func:`neural.backbone.resolve_device`; whether a CUDA device is there is checked with the options)."""
    if options.device in ("cpu", "cuda"):
        return options.device == "cpu"
    # lazy: imports torch, and is only asked for a backbone that will train with a paper recipe
    from neural.backbone import resolve_device

    return resolve_device(options.device).type == "cpu"
