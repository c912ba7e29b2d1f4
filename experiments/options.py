"""The main job's options, checked once: :class:`RunOptions` (frozen) is built from the command line by
:meth:`RunOptions.from_args`, which parses the method lists and ``--reference``, checks every value
(:meth:`RunOptions.__post_init__`: the values among themselves; then data folder, neural options and the
output / cache folders) and creates the folders, before anything is loaded, trained or written.

The concerns live in their own modules, re-exported here: :mod:`experiments.option_lists` (the method
lists, :func:`parse_list` — the comma-separated list rule of every command line of :mod:`experiments` —
and :class:`OptionError`), :mod:`experiments.option_checks` (the checks that look at files, folders,
backbones and the CPU) and :mod:`experiments.option_choices` (what the options imply).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from corpora.cli_values import MAX_TEACHING_SIZE, seed_problem
from experiments.backbone_specs import (
    BackboneSpec,
    DEFAULT_BACKBONE,
    parse_backbones,
    scorer_groups,
    split_scorer,
    unused_backbones,
)
from experiments.option_checks import (
    BENCHMARK_OPTIONS,
    FLICKR8K_TRAIN_IMAGES,
    MIN_PACS_TUPLES,
    MIN_TEACHING_SIZE,
    backbone_seconds_per_sample,
    benchmark_paths,
    check_backbone,
    check_codebook_folder,
    check_cpu_training,
    check_data_folder,
    check_neural_options,
    check_pretrained,
    make_folders,
)
from experiments.option_choices import (
    corpus_label,
    default_out_dir,
    trained_scorers,
    trains_on_cpu,
    uses_shipped_scorers,
    uses_small_clip,
    uses_teaching_clip,
    uses_tiny_clip,
)
from experiments.option_lists import (
    DEFAULT_SYSTEMS,
    QUICK_SYSTEMS,
    OptionError,
    add_benchmark_file_options,
    available_systems,
    parse_list,
    problem_lines,
    reference_choice,
    requested_methods,
    split_commas,
)
from neural.registry import scorer_names


__all__ = ["RunOptions", "BENCHMARK_OPTIONS", "FLICKR8K_TRAIN_IMAGES", "MIN_PACS_TUPLES", "MIN_TEACHING_SIZE",
           "backbone_seconds_per_sample", "benchmark_paths", "check_backbone", "check_codebook_folder",
           "check_cpu_training", "check_data_folder", "check_neural_options", "check_pretrained", "make_folders",
           "corpus_label", "default_out_dir", "trained_scorers",
           "trains_on_cpu", "uses_shipped_scorers", "uses_small_clip", "uses_teaching_clip", "uses_tiny_clip",
           "DEFAULT_SYSTEMS", "QUICK_SYSTEMS", "OptionError",
           "add_benchmark_file_options", "available_systems", "parse_list", "problem_lines", "reference_choice",
           "requested_methods", "split_commas"]


@dataclass(frozen=True)
class RunOptions:
    """Every setting of one run of the main job, checked (build it with :meth:`from_args`).

    Attributes
    ----------
    data : Path or None
        The Flickr8k folder or Karpathy ``.json`` file (``--data``, user folder expanded); ``None``: the
        built-in teaching set.
    images : Path or None
        The images folder of a Karpathy ``--data`` file (``--images``).
    teaching_size : int or None
        ``--teaching-size`` as given (``None``: the default, see :attr:`n_teaching_images`).
    skip_missing_images : bool
        Restrict every split to the images on disk.
    systems : tuple of str
        The classical systems to run (canonical names).
    neural : tuple of str
        The neural scorers to run (default: every registered one, :func:`neural.registry.scorer_names`).
    quick : bool
        The smaller class-demo defaults.
    full_selection : bool
        Choose each system's (p, d) on dev with float64 KCCA, as the paper.
    codebook_images : Path or None
        Fit the visual-word codebooks on a folder of images (the paper: 200 PASCAL VOC 2008 images,
        1,000 descriptors each); ``None``: on the training split.
    clip_model, clip_pretrained : str or None
        The open_clip architecture (``None``: the shipped teaching CLIP; ``tiny``: the tiny CLIP trained
        in the run) and pretrained tag or weights file (with the teaching CLIP: another file of it) of the
        default backbone (the scorers without ``@NAME``).
    backbones : tuple of BackboneSpec
        The named backbones (``--backbone NAME=ARCH[:WEIGHTS]``) that scorers pick with ``SCORER@NAME``.
    clip_steps : int or None
        Training steps of the tiny CLIP (``None``: its default; only with ``--clip-model tiny``).
    pacs_positives : str or None
        The PAC-S fine-tuning tuples file.
    reference : str or None
        The significance reference (``None``: the best system per task).
    permutations : int
        Reassignments of the randomisation test.
    out : Path or None
        The output folder (:meth:`from_args` fills in ``runs/<corpus>-<timestamp>/``).
    seed : int
        Seed of every random choice, in [0, 2^31) (the higher seeds are the teaching CLIP's pretraining
        and held-out streams, :data:`corpora.teaching.EVALUATION_SEEDS`).
    device : str
        ``auto``, ``cpu`` or ``cuda`` for the neural scorers.
    cache_dir : Path or None
        The cache folder (``None``: ``$ITR_CACHE_DIR`` or the user cache).
    no_cache, no_progress : bool
        Read and write no cache; hide progress bars.
    recipe : str
        The trained scorers' recipe family: ``auto`` (small offline CLIPs: the small recipes, other
        backbones: the papers'), ``small`` or ``paper`` (:mod:`neural.recipes`).
    train_on_cpu : bool
        Go ahead with a paper recipe on the CPU (else refused up front, :func:`check_cpu_training`).
    workers, scheduler : int or str or None
        Where the classical stage's image blocks run (:class:`corpora.parallel.BlockExecutor`):
        ``--workers N`` a local Dask cluster of N processes, ``--scheduler ADDRESS`` an existing Dask
        cluster, neither (``None``) in-process.
    train_scorers : bool
        Fine-tune PAC-S, L-CLIPScore, BRIDGE and SPECS inside the run on the corpus' training split even
        on the shipped teaching CLIP, whose default is to load the shipped scorers
        (:mod:`neural.shipped_scorers`; :func:`uses_shipped_scorers`).
    composite, pascal50s, foil, foil_coco_captions, benchmark_images : Path or None
        The standard benchmarks (``--composite`` folder, ``--pascal50s`` folder, ``--foil`` file with
        ``--foil-coco-captions``) and the folder of their images (``--benchmark-images``).
    """

    data: Path | None = None
    images: Path | None = None
    teaching_size: int | None = None
    skip_missing_images: bool = False
    systems: tuple[str, ...] = DEFAULT_SYSTEMS
    neural: tuple[str, ...] = field(default_factory=scorer_names)
    quick: bool = False
    full_selection: bool = False
    codebook_images: Path | None = None
    clip_model: str | None = None
    clip_pretrained: str | None = None
    backbones: tuple[BackboneSpec, ...] = ()
    clip_steps: int | None = None
    pacs_positives: str | None = None
    reference: str | None = None
    permutations: int = 10000
    out: Path | None = None
    seed: int = 0
    device: str = "auto"
    cache_dir: Path | None = None
    no_cache: bool = False
    no_progress: bool = False
    recipe: str = "auto"
    train_on_cpu: bool = False
    train_scorers: bool = False
    workers: int | None = None
    scheduler: str | None = None
    # standard benchmarks (check_benchmark_paths): files / folders as given, None when not given
    composite: Path | None = None
    pascal50s: Path | None = None
    foil: Path | None = None
    foil_coco_captions: Path | None = None
    benchmark_images: Path | None = None

    def __post_init__(self) -> None:
        """Check the values among themselves (no file is looked at); :class:`OptionError` if one cannot
        work."""
        if seed_problem(self.seed) is not None:
            raise OptionError(seed_problem(self.seed))
        if self.data is None and self.n_teaching_images < MIN_TEACHING_SIZE:
            raise OptionError(f"--teaching-size must be at least {MIN_TEACHING_SIZE} (got {self.n_teaching_images})")
        if self.data is None and self.n_teaching_images > MAX_TEACHING_SIZE:
            raise OptionError(f"--teaching-size must be at most {MAX_TEACHING_SIZE:,} (got "
                              f"{self.n_teaching_images:,}; corpora.cli_values.MAX_TEACHING_SIZE)")
        if self.data is not None and self.teaching_size is not None:
            raise OptionError("--teaching-size sets the size of the built-in teaching set; it does not apply "
                              "with --data (drop one of the two)")
        for what, n in (("--permutations", self.permutations), ("--clip-steps", self.clip_steps)):
            if n is not None and n < 1:
                raise OptionError(f"{what}: expected a positive integer, got {n}")
        if not self.systems and not self.neural:
            raise OptionError("--systems none and --metrics none: nothing to run (the n-gram caption metrics "
                              "against human judgments alone: python -m experiments.caption_metrics_vs_humans)")
        if (self.images is not None) != self.karpathy_file:
            raise OptionError("--images goes with a Karpathy --data file (dataset_*.json), and such a file "
                              "needs --images (the folder of its images)")
        if self.workers is not None and self.scheduler is not None:
            raise OptionError("--workers starts a Dask cluster on this machine and --scheduler joins an "
                              "existing one: give one of the two")
        if self.recipe not in ("auto", "small", "paper"):
            raise OptionError(f"--recipe {self.recipe!r}: choose from auto, small, paper")
        if self.pacs_positives and not {"PAC-S", "RefPAC-S"} & {split_scorer(n)[0] for n in self.neural}:
            raise OptionError("--pacs-positives fine-tunes PAC-S / RefPAC-S, which --metrics does not request")
        if self.uses_default_backbone and uses_tiny_clip(self) and self.clip_pretrained:
            raise OptionError(f"--clip-pretrained needs an open_clip architecture in --clip-model (the "
                              f"architecture of the weights, e.g. ViT-B-32, or auto); --clip-model "
                              f"{self.clip_model} is the tiny CLIP, which is always trained here")
        if self.clip_steps is not None and not uses_tiny_clip(self):
            raise OptionError("--clip-steps sets the training steps of the tiny CLIP trained in the run; "
                              "it needs --clip-model tiny (the default teaching CLIP is pretrained)")

    @property
    def uses_default_backbone(self) -> bool:
        """Whether a neural scorer runs on the ``--clip-model`` / ``--clip-pretrained`` backbone."""
        return DEFAULT_BACKBONE in scorer_groups(self.neural)

    def backbone_specs(self) -> dict[str, BackboneSpec]:
        """``{name: spec}`` of the backbones the neural scorers use, in the order of ``--metrics``
        (the default backbone is :data:`~experiments.backbone_specs.DEFAULT_BACKBONE`)."""
        named = {b.name: b for b in self.backbones}
        named[DEFAULT_BACKBONE] = BackboneSpec(DEFAULT_BACKBONE, self.clip_model, self.clip_pretrained)
        return {name: named[name] for name in scorer_groups(self.neural)}

    @property
    def karpathy_file(self) -> bool:
        """Whether ``--data`` is one of Karpathy's split files (``dataset_*.json``: Flickr30k, COCO,
        Flickr8k), read with ``--images``; the run then also ranks the test split with every caption
        (the CLIP_benchmark protocol, :func:`corpora.protocol.every_caption_pool`)."""
        return self.data is not None and Path(self.data).suffix.lower() == ".json"

    @property
    def n_teaching_images(self) -> int:
        """The number of teaching-set images: ``--teaching-size``, else 600 with ``--quick``, else 2000."""
        return self.teaching_size if self.teaching_size is not None else (600 if self.quick else 2000)

    @property
    def corpus_label(self) -> str:
        """``teaching`` or the ``--data`` folder's name (the default output folder's prefix)."""
        return corpus_label(self.data)

    @classmethod
    def from_args(cls, ns) -> RunOptions:
        """The checked options of a parsed command line (the only place that reads the namespace).

        Parameters
        ----------
        ns : argparse.Namespace
            What :func:`experiments.flickr8k_kcca.build_parser` parsed.

        Returns
        -------
        RunOptions
            Checked; the output and cache folders exist.

        Raises
        ------
        OptionError
            The first option that cannot work, before anything is loaded, trained or written.
        """
        data = None if ns.data is None else Path(ns.data).expanduser()
        given = getattr(ns, "backbone", None) or []
        backbones, problems = parse_backbones(given)
        # a scorer naming a backbone whose --backbone value is malformed: that value's problem is enough
        loose = [BackboneSpec(n, None) for n in dict.fromkeys(v.partition("=")[0].strip() for v in given)
                 if n and n not in {b.name for b in backbones} and n.lower() != DEFAULT_BACKBONE]
        try:
            systems, neural = requested_methods(ns.systems, ns.metrics, quick=ns.quick,
                                                backbones=[*backbones, *loose])
        except OptionError as exc:
            raise OptionError(problem_lines([*problems, str(exc)])) from exc
        problems = problems or unused_backbones(backbones, neural)
        if problems:
            raise OptionError(problem_lines(problems))
        options = cls(
            data=data, images=None if getattr(ns, "images", None) is None else Path(ns.images).expanduser(),
            teaching_size=ns.teaching_size, skip_missing_images=ns.skip_missing_images,
            systems=tuple(systems), neural=tuple(neural), quick=ns.quick, full_selection=ns.full_selection,
            codebook_images=None if ns.codebook_images is None else Path(ns.codebook_images).expanduser().resolve(),
            clip_model=ns.clip_model, clip_pretrained=ns.clip_pretrained, backbones=tuple(backbones),
            clip_steps=ns.clip_steps,
            pacs_positives=ns.pacs_positives, reference=reference_choice(ns.reference, systems, neural),
            permutations=ns.permutations, seed=ns.seed, device=ns.device,
            out=Path(ns.out) if ns.out else default_out_dir(corpus_label(data)),
            cache_dir=None if ns.cache_dir is None else Path(ns.cache_dir), no_cache=ns.no_cache,
            no_progress=ns.no_progress, recipe=getattr(ns, "recipe", "auto"),
            train_on_cpu=getattr(ns, "train_on_cpu", False), train_scorers=getattr(ns, "train_scorers", False),
            workers=getattr(ns, "workers", None), scheduler=getattr(ns, "scheduler", None),
            **benchmark_paths(ns))
        check_data_folder(options.data)
        check_codebook_folder(options.codebook_images)
        if options.neural:
            check_neural_options(options)
            check_cpu_training(options)
        make_folders(options)
        return options
