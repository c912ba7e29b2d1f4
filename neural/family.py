"""The contract of a scorer family: what the main job, ``neural.score``, ``neural.train_scorer``, the saved
and the shipped scorers need to know about one CLIP-family metric, in one class (the way open_clip builds
any model from one registry and torchmetrics gives each metric one class with one contract).

A family (:class:`ScorerFamily`) declares

* its names: the main job's ``--metrics`` name (``PAC-S``), the command lines' ``--metric`` name
  (``pac-s``) with a help line, and its reference-based variant (``RefPAC-S`` / ``refpac-s``) if its
  paper defines one;
* its recipes (:mod:`neural.recipes`): the small-model and the paper recipe (and optionally one for the
  teaching CLIP); a family without recipes is not trained (CLIP-S);
* how it is trained from a parent backbone and a corpus (:meth:`ScorerFamily.train`);
* how it is saved and loaded (:meth:`ScorerFamily.parts`, :meth:`ScorerFamily.load`, ``needs_parent``);
* whether a shipped copy exists (``shipped_folder``, :mod:`neural.shipped_scorers`).

The built-in families live in :mod:`neural.families`, one module each; :mod:`neural.registry` holds them
and :func:`neural.registry.register_family` adds another.  Nothing here imports torch: the main job reads
the names before it decides whether torch is needed; the methods that train, save or load import the
scorer's own module when called.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from neural.recipes import RECIPE_FAMILIES, Recipe, small_kind

__all__ = ["ScorerFamily", "TrainSettings", "NoTrainingData", "TrainingDataError"]


class NoTrainingData(ValueError):
    """The corpus holds no training data of the kind the family needs (e.g. PAC-S positives without a
    generator); the main job then scores with :meth:`ScorerFamily.untrained` and a warning."""


class TrainingDataError(ValueError):
    """The training data given cannot be used (the message names the file or option)."""


@dataclass(frozen=True)
class TrainSettings:
    """What a trainer takes besides the parent, the corpus and the recipe.

    Attributes
    ----------
    seed : int
        The recipe's seed.
    cache : DiskCache or None
        Where trained weights are cached.
    show_progress : bool
        Progress bars.
    image_ids : sequence of str or None
        The training images (``None``: the whole ``train`` split).
    quick : bool
        The main job's ``--quick`` (smaller training data where the family has a quick size).
    positives : str or None
        A user's file of positive tuples (the main job's ``--pacs-positives``) for a family that trains on
        them.
    """

    seed: int = 0
    cache: object = None
    show_progress: bool = True
    image_ids: Sequence[str] | None = None
    quick: bool = False
    positives: str | None = None


class ScorerFamily:
    """One CLIP-family metric.  Subclass it, set the class attributes and override the methods the family
    needs; register an instance with :func:`neural.registry.register_family`.

    Attributes
    ----------
    name : str
        The main job's ``--metrics`` name, the row label and the ``metric`` of a saved ``scorer.json``.
    metric, help : str
        The ``--metric`` name of ``neural.score`` / ``neural.train_scorer`` and its help line (formula and
        paper).
    reference_name, reference_metric, reference_help : str or None
        The reference-based variant (``RefPAC-S``, ``refpac-s``, its help line); ``None`` when the paper
        defines none.
    recipes : mapping
        ``{"small": Recipe, "paper": Recipe}`` and optionally ``"teaching"`` (used on the teaching CLIP
        instead of ``"small"``); empty for a family that is not trained.
    needs_parent : bool
        A saved scorer needs its parent backbone to load (its weights are a delta or a head).
    shipped_folder : str or None
        The sub-folder of the shipped scorers (:mod:`neural.shipped_scorers`); ``None``: none is shipped.
    release_format : str or None
        A weights format (:data:`neural.checkpoints.FORMATS`) that is this scorer's own release: a
        backbone read from it is used as it is.
    provenance_key : str or None
        The main job's provenance entry of the scorer's backbone (``pacs_backbone`` …).
    specificity : bool
        Whether the main job measures its specificity rates (SPECS Eqs. 1-2).
    card_specificity : bool
        Whether the shipped scorers' model card reports its specificity rates.
    needs_generator : bool
        Its training data comes from a generated corpus (:class:`corpora.base.GeneratedCorpus`) unless the
        user gives some (``TrainSettings.positives``): on a real corpus without them it is not trained.
    weights_in_backbone : bool
        Whether the saved tensors are (part of) the scorer backbone's state dict (a head kept beside a
        frozen backbone is not).
    """

    name: str = ""
    metric: str = ""
    help: str = ""
    reference_name: str | None = None
    reference_metric: str | None = None
    reference_help: str = ""
    recipes: Mapping[str, Recipe] = {}
    needs_parent: bool = False
    shipped_folder: str | None = None
    release_format: str | None = None
    provenance_key: str | None = None
    specificity: bool = True
    card_specificity: bool = False
    needs_generator: bool = False
    weights_in_backbone: bool = True

    # ------------------------------------------------------------------ declaration
    @property
    def trained(self) -> bool:
        """Whether the family is trained (it has recipes)."""
        return bool(self.recipes)

    @property
    def savable(self) -> bool:
        """Whether a trained scorer of the family can be saved (:mod:`neural.saved`)."""
        return type(self).parts is not ScorerFamily.parts

    def names(self) -> tuple[str, ...]:
        """The main job's names: the scorer and its reference-based variant."""
        return (self.name,) + ((self.reference_name,) if self.reference_name else ())

    def metrics(self) -> tuple[str, ...]:
        """The command lines' ``--metric`` names."""
        return (self.metric,) + ((self.reference_metric,) if self.reference_metric else ())

    def check(self) -> None:
        """Refuse a declaration that cannot work (:func:`neural.registry.register_family` calls it)."""
        if not self.name or not self.metric:
            raise ValueError(f"scorer family {type(self).__name__}: name and metric are needed")
        if bool(self.reference_name) != bool(self.reference_metric):
            raise ValueError(f"scorer family {self.name}: reference_name and reference_metric go together")
        if self.recipes and not {"small", "paper"} <= set(self.recipes):
            raise ValueError(f"scorer family {self.name}: recipes need 'small' and 'paper'")
        wrong = [r.name for r in self.recipes.values() if r.scorer != self.name]
        if wrong:
            raise ValueError(f"scorer family {self.name}: recipes {', '.join(wrong)} are for another scorer")

    def recipe(self, backbone, family: str = "auto") -> Recipe:
        """The recipe to train on ``backbone`` (a Backbone, a ``--clip-model`` name, ``None``: the teaching
        CLIP): ``auto`` gives the small recipe to the small offline CLIPs (the ``teaching`` one, where
        declared, to the teaching CLIP) and the paper's to any other backbone; ``small`` / ``paper`` force
        that recipe."""
        if not self.recipes:
            raise ValueError(f"no training recipe for scorer {self.name!r}: it is not trained")
        if family not in RECIPE_FAMILIES:
            raise ValueError(f"recipe family {family!r}: choose from {', '.join(RECIPE_FAMILIES)}")
        kind = small_kind(backbone)
        small = kind is not None if family == "auto" else family == "small"
        if not small:
            return self.recipes["paper"]
        if kind == "teaching" and "teaching" in self.recipes:
            return self.recipes["teaching"]
        return self.recipes["small"]

    # ------------------------------------------------------------------ scorers
    def untrained(self, backbone, *, prompt: str | None = None):
        """The scorer on ``backbone`` as it is (CLIP-S; a trained family's formula on a backbone it was
        not trained on, or on its own release file); ``None`` when the family cannot score untrained.
        ``prompt``: a ``neural.score --prompt`` (``None``: the family's default)."""
        return None

    def prefers_shipped(self, settings: TrainSettings) -> bool:
        """Whether the shipped copy is used where the shipped scorers are (default yes; a family trained
        on data the user gives says no then)."""
        return True

    def train(self, parent, corpus, recipe: Recipe, settings: TrainSettings):
        """Train the scorer from ``parent`` on ``corpus``' ``train`` split with ``recipe``.

        Raises
        ------
        NoTrainingData
            The corpus has no training data of the needed kind.
        TrainingDataError
            ``settings.positives`` cannot be used.
        """
        raise NotImplementedError(f"{self.name} is not trained")

    def owns(self, scorer) -> bool:
        """Whether ``scorer`` is one of this family's scorers (the save dispatch)."""
        return False

    def backbone_of(self, scorer):
        """The backbone whose weights define ``scorer`` (its identity, the shipped record)."""
        return scorer.backbone

    def variants(self, scorer) -> tuple[object, object | None]:
        """The main job's ``(reference-free, reference-based or None)`` scorers made from a trained or
        loaded ``scorer``."""
        return scorer, None

    def with_prompt(self, scorer, prompt: str | None):
        """``scorer`` with ``neural.score --prompt`` applied (a family without a prompt returns it)."""
        return scorer

    def text_prompt(self, scorer) -> str | None:
        """The prompt ``scorer`` puts before a caption (for counting truncated captions)."""
        return getattr(scorer, "prompt", None)

    def scores(self, scorer, images, candidates: list, references: list | None) -> dict:
        """``{score name: (n,) array}``: the reference-free score and, with references and a
        reference-based variant, that one too (``neural.score``)."""
        out = {self.name: scorer.score(images, candidates)}
        if references is not None and self.reference_name:
            out[self.reference_name] = scorer.score(images, candidates, references)
        return out

    def pair_scorer(self, scorer, corpus, cache, *, use_references: bool):
        """The main job's pair scorer (human correlation) of ``scorer`` on ``corpus``."""
        from neural.base import CorpusPairScorer  # lazy: torch (names are read without it)

        return CorpusPairScorer(scorer, corpus, cache, use_references=use_references)

    def retrieval_config(self, scorer, corpus) -> dict:
        """What the main job's retrieval output records of ``scorer``."""
        bb = self.backbone_of(scorer)
        return {"backbone": bb.name, "weights_id": bb.weights_id}

    def extra_provenance(self, scorer, backbone, corpus, pool) -> dict:
        """Entries the main job adds to its provenance after scoring (default none)."""
        return {}

    # ------------------------------------------------------------------ saving
    def parts(self, scorer) -> tuple[dict, dict]:
        """``(tensors, scorer.json entries)`` of a trained scorer (:func:`neural.saved.save_scorer`): the
        entries ``scorer``, ``architecture``, ``backbone``, ``parent`` and the training record."""
        raise TypeError(f"{self.name} has no trained weights to save")

    def load(self, cfg_path, config: dict, tensors: dict, parent, device):
        """The scorer of a checked ``scorer.json`` and its tensors on ``parent`` (``None`` when not given
        and not needed: rebuild it, :func:`neural.saved_parts.rebuilt_parent`)."""
        raise TypeError(f"{self.name} cannot be loaded")
