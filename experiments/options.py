# Size (~760 lines): every option of the main job checked in one place (lists, RunOptions, folders, backbones, the CPU-recipe guard, the benchmark options).
"""The main job's options, checked once: :class:`RunOptions` (frozen) is built from the command line by
:meth:`RunOptions.from_args`, which parses the method lists and ``--reference``, checks every value
(:meth:`RunOptions.__post_init__`: the values among themselves; then data folder, neural options and the
output / cache folders) and creates the folders, before anything is loaded, trained or written.

:func:`parse_list` is the comma-separated list rule of every command line of :mod:`experiments`.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from corpora.cache import CacheDirError, DiskCache, check_cache_dir
from corpora.teaching import EVALUATION_SEEDS
from experiments.backbone_specs import (
    BackboneSpec,
    DEFAULT_BACKBONE,
    parse_backbones,
    qualify_scorers,
    scorer_groups,
    split_scorer,
    unused_backbones,
)
from kernels.image.codebook import codebook_folder_images
from experiments.errors import PipelineError

#: Default classical systems: NN, BoW1, BoW5, TagRank, TRI5, TRI5SEM and the ^Histo contrasts.
DEFAULT_SYSTEMS = ("NN5_F1^idf", "BoW1", "BoW5", "BoW5^Histo", "TagRank", "TRI5", "TRI5^Histo",
                   "TRI5SEM")
QUICK_SYSTEMS = ("NN5_F1^idf", "BoW1", "BoW5", "TRI5", "TRI5^Histo", "TRI5SEM")
#: Neural scorers that rank (retrieval) and score pairs (human correlation).
ALL_NEURAL = ("CLIP-S", "RefCLIP-S", "PAC-S", "RefPAC-S", "L-CLIPScore", "RefL-CLIPScore", "BRIDGE", "SPECS")
DEFAULT_NEURAL = ALL_NEURAL
#: Reference-based scorers cannot rank a pool (their references would leak the answer): they only
#: enter the human-correlation table.
REFERENCE_BASED = ("RefCLIP-S", "RefPAC-S", "RefL-CLIPScore")
#: ``--pacs-positives`` needs this many tuples: at least 2 for validation and 2 for training.
MIN_PACS_TUPLES = 4
#: PAC-S on a generated corpus: positive tuples from this many train / dev images (``--quick``: 300 train).
PACS_TRAIN_IMAGES, PACS_DEV_IMAGES = 700, 150
#: The smallest teaching set (``--teaching-size``).
MIN_TEACHING_SIZE = 60


class OptionError(PipelineError, ValueError):
    """An option value that cannot work; the message names the option."""


def available_systems() -> list[str]:
    """The classical systems ``--systems all`` runs (the paper's grid, canonical names)."""
    from kcca.systems import list_systems  # the system registry: only when names are listed

    return list_systems()


def split_commas(value: str) -> list[str]:
    """The non-empty, stripped pieces of a comma-separated ``value``."""
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_list(value: str | None, default: Sequence[str], allowed: Sequence[str] | None, option: str, *,
               split: Callable[[str], list[str]] = split_commas, keywords: bool = True,
               all_names: Sequence[str] | None = None) -> list[str]:
    """A comma-separated list option, one rule for every command line: no names is an error.

    Parameters
    ----------
    value : str or None
        The option's value; ``None`` when it was not given.
    default : sequence of str
        The names when the option is not given.
    allowed : sequence of str or None
        The known names: matched case-insensitively and returned in this spelling; another name is an
        error listing them.  ``None``: the names are returned as ``split`` gives them.
    option : str
        The option (``"--metrics"``), named in messages.
    split : callable, optional
        ``value -> names`` (e.g. one that keeps names with commas together); its errors
        (``ValueError``) become :class:`OptionError`.
    keywords : bool, optional
        Whether ``none`` (no names) and ``all`` (``all_names``, else ``allowed``, when either is given)
        are keywords.
    all_names : sequence of str, optional
        The names ``all`` stands for (default: ``allowed``).

    Returns
    -------
    list of str
        The names.

    Raises
    ------
    OptionError
        ``value`` holds no names (``""``, ``","``), or an unknown name.
    """
    if value is None:
        return list(default)
    word = value.strip().lower()
    everything = all_names if all_names is not None else allowed
    if keywords and word == "none":
        return []
    if keywords and word == "all" and everything is not None:
        return list(everything)
    try:
        items = split(value)
    except ValueError as exc:
        raise OptionError(f"{option}: {exc}") from exc
    if not items:
        choices = "a comma-separated list" + (", 'all'," if keywords and everything is not None else "")
        rest = f" or 'none' to run no {option.lstrip('-')}" if keywords else ""
        raise OptionError(f"{option}: no names in {value!r} (give {choices}{rest})")
    if allowed is not None:
        by_lower = {a.lower(): a for a in allowed}  # clip-s == CLIP-S
        items = [by_lower.get(v.lower(), v) for v in items]
        bad = [v for v in items if v not in allowed]
        if bad:
            raise OptionError(f"unknown {option.lstrip('-')}: {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


def requested_methods(systems: str | None, metrics: str | None, *, quick: bool,
                      backbones: Sequence[BackboneSpec] = ()) -> tuple[list[str], list[str]]:
    """The classical systems (canonical names) and neural scorers asked for.

    Parameters
    ----------
    systems, metrics : str or None
        ``--systems`` / ``--metrics`` as given (``None``: the defaults, :data:`DEFAULT_SYSTEMS` or
        :data:`QUICK_SYSTEMS`, and :data:`DEFAULT_NEURAL`).
    quick : bool
        ``--quick`` (its smaller default system list).
    backbones : sequence of BackboneSpec, optional
        The ``--backbone`` backbones a scorer may name (``CLIP-S@openai``,
        :func:`experiments.backbone_specs.qualify_scorers`).

    Returns
    -------
    systems, neural : list of str
        The neural scorers as row labels (``CLIP-S``, ``CLIP-S@openai``).

    Raises
    ------
    OptionError
        An empty list or an unknown name (the message lists the choices); every problem of ``--metrics``
        and ``--backbone`` at once, one per line.
    """
    from kcca.systems import canonical_name, split_system_list  # the system registry's name rules

    def system_names(value: str) -> list[str]:   # names may contain commas themselves (TRI5_A,D_ext)
        return list(dict.fromkeys(split_system_list(value)))

    default = [canonical_name(s) for s in (QUICK_SYSTEMS if quick else DEFAULT_SYSTEMS)]
    chosen = parse_list(systems, default, None, "--systems", split=system_names, all_names=available_systems())
    items = parse_list(metrics, DEFAULT_NEURAL, None, "--metrics", all_names=ALL_NEURAL)
    neural, problems = qualify_scorers(items, ALL_NEURAL, backbones)
    if problems:
        raise OptionError(problem_lines(problems))
    return chosen, neural


def problem_lines(problems: Sequence[str]) -> str:
    """Several problems as one message that the command line prints as one ``error:`` line each."""
    return "\nerror: ".join(problems)


def reference_choice(value: str | None, systems: Sequence[str], neural: Sequence[str]) -> str | None:
    """``--reference`` as the name of a requested system or scorer.

    Parameters
    ----------
    value : str or None
        The option as given; ``best`` (or ``None``) for the best system per task.
    systems, neural : sequence of str
        The requested classical systems and neural scorers.

    Returns
    -------
    str or None
        The canonical spelling, or ``None`` for 'best'.

    Raises
    ------
    OptionError
        A name that is not requested.
    """
    value = (value or "best").strip()
    if value.lower() == "best":
        return None
    from kcca.systems import canonical_name  # the system registry's name rules

    by_lower = {n.lower(): n for n in neural}
    try:
        name = by_lower.get(value.lower()) or canonical_name(value)
    except ValueError:
        name = value
    if name not in set(systems) | set(neural):
        raise OptionError(f"--reference {value}: not among the requested systems and scorers "
                          f"({', '.join(list(systems) + list(neural)) or 'none'}); use one of them or 'best'")
    return name


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
        The neural scorers to run.
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
    neural: tuple[str, ...] = DEFAULT_NEURAL
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
        if self.seed not in EVALUATION_SEEDS:
            raise OptionError(f"--seed must be in [0, 2^31) (got {self.seed}; the seeds from 2^31 up are "
                              f"reserved for the teaching CLIP's pretraining and held-out data)")
        if self.data is None and self.n_teaching_images < MIN_TEACHING_SIZE:
            raise OptionError(f"--teaching-size must be at least {MIN_TEACHING_SIZE} (got {self.n_teaching_images})")
        if self.data is not None and self.teaching_size is not None:
            raise OptionError("--teaching-size sets the size of the built-in teaching set; it does not apply "
                              "with --data (drop one of the two)")
        for what, n in (("--permutations", self.permutations), ("--clip-steps", self.clip_steps)):
            if n is not None and n < 1:
                raise OptionError(f"{what}: expected a positive integer, got {n}")
        if not self.systems and not self.neural:
            raise OptionError("--systems none and --metrics none: nothing to run (the n-gram caption metrics "
                              "against human judgments alone: python -m experiments.caption_metrics_vs_humans)")
        if (self.images is not None) != (self.data is not None and self.data.suffix.lower() == ".json"):
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


# ---------------------------------------------------------------------------- standard benchmarks
#: option -> (RunOptions field, "dir" or "file") of the standard-benchmark options.
BENCHMARK_OPTIONS = {"--composite": ("composite", "dir"), "--pascal50s": ("pascal50s", "dir"),
                     "--foil": ("foil", "file"), "--foil-coco-captions": ("foil_coco_captions", "file"),
                     "--benchmark-images": ("benchmark_images", "dir")}


def benchmark_paths(ns) -> dict[str, Path | None]:
    """The standard-benchmark paths of a parsed command line, checked: each given one exists as the
    folder or file it must be (what is inside is read later, and a malformed file costs only its own
    benchmark); ``--foil-coco-captions`` needs ``--foil``, ``--benchmark-images`` a benchmark.

    Raises
    ------
    OptionError
        Naming the option.
    """
    out: dict[str, Path | None] = {}
    for opt, (field, kind) in BENCHMARK_OPTIONS.items():
        value = getattr(ns, field, None)
        path = None if value is None else Path(value).expanduser()
        if path is not None and not (path.is_dir() if kind == "dir" else path.is_file()):
            raise OptionError(f"{opt} {value}: no such {'folder' if kind == 'dir' else 'file'}")
        out[field] = path
    if out["foil_coco_captions"] is not None and out["foil"] is None:
        raise OptionError("--foil-coco-captions gives the references of --foil, which is not given")
    if out["benchmark_images"] is not None and not any(out[k] for k in ("composite", "pascal50s", "foil")):
        raise OptionError("--benchmark-images holds the images of --composite / --pascal50s / --foil; none is given")
    return out


def check_codebook_folder(folder: Path | None) -> None:
    """Refuse a ``--codebook-images`` folder that is missing or holds no image file.

    Raises
    ------
    OptionError
        Naming the folder and what is wrong.
    """
    if folder is None:
        return
    try:
        codebook_folder_images(folder)
    except (FileNotFoundError, ValueError) as exc:
        raise OptionError(f"--codebook-images: {exc}") from exc


def check_data_folder(data: Path | None) -> None:
    """Refuse a ``--data`` path that is not a folder.

    Parameters
    ----------
    data : Path or None
        ``--data`` (``None``: the teaching set, nothing to check).

    Raises
    ------
    OptionError
        No such path, or a file.
    """
    if data is None:
        return
    if not data.exists():
        raise OptionError(f"--data {data}: no such folder")
    if data.suffix.lower() == ".json" and data.is_file():   # a Karpathy split file
        return
    if not data.is_dir():
        raise OptionError(f"--data {data}: is a file; give the Flickr8k root folder (the one holding "
                          f"Flicker8k_Dataset/ or Images/ and the caption files)")


def make_folders(options: RunOptions) -> None:
    """Create ``--cache-dir`` (when the cache is on) and ``--out``.

    Parameters
    ----------
    options : RunOptions
        The run's options.

    Raises
    ------
    OptionError
        A path that exists and is not a folder, a folder that cannot be created, or a cache folder that
        cannot be written.
    """
    cache_root = None if options.no_cache else DiskCache(options.cache_dir).root
    if cache_root is not None:
        if cache_root.exists() and not cache_root.is_dir():
            raise OptionError(f"--cache-dir {cache_root}: exists and is not a folder")
        try:       # created and written to (a small file, removed), not only created
            check_cache_dir(cache_root)
        except CacheDirError as exc:
            raise OptionError(f"--cache-dir: {exc}") from exc
    out = options.out
    if out is None:
        return
    if out.exists() and not out.is_dir():
        raise OptionError(f"--out {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OptionError(f"--out {out}: cannot create the folder "
                          f"({exc.strerror or exc.__class__.__name__}: {exc.filename or out})") from exc


def check_neural_options(options: RunOptions) -> None:
    """Refuse ``--device`` / ``--pacs-positives`` / ``--clip-model`` / ``--clip-pretrained`` values that
    cannot work, before the corpus is loaded.

    That is: a CUDA device on a machine without one, a PAC-S tuples file that is unreadable, malformed
    or names missing images, an unknown open_clip architecture, a weights file that does not exist, an
    untrusted TorchScript archive, a pretrained tag that is unknown or neither cached nor downloadable
    (downloads off, host unreachable), a teaching-CLIP weights file that is missing or fails its SHA-256
    check.  The tiny CLIP with ``--clip-pretrained`` is refused by
    :class:`RunOptions` itself.

    Parameters
    ----------
    options : RunOptions
        The run's options (neural scorers requested).

    Raises
    ------
    OptionError
        The first value that cannot work.
    """
    if options.device not in (None, "auto", "cpu"):  # "auto" and "cpu" always resolve: no torch import needed
        from neural.backbone import resolve_device  # imports torch: only for --device cuda

        try:
            resolve_device(options.device)
        except RuntimeError as exc:
            raise OptionError(f"--device: {exc}") from exc
    if options.pacs_positives:
        from neural.positives import check_positives_file  # torch-free

        try:
            check_positives_file(options.pacs_positives, min_tuples=MIN_PACS_TUPLES)
        except (ValueError, FileNotFoundError) as exc:
            raise OptionError(f"--pacs-positives: {exc}") from exc
    problems = []
    for spec in options.backbone_specs().values():
        try:
            check_backbone(spec)
        except OptionError as exc:
            problems.append(str(exc))
    if problems:
        raise OptionError(problem_lines(problems))


def check_backbone(spec: BackboneSpec) -> None:
    """Refuse a backbone (``--clip-model`` / ``--clip-pretrained``, or one ``--backbone``) whose
    architecture is unknown or whose weights cannot be loaded (:func:`check_pretrained`); the tiny CLIP
    and the teaching CLIP's default weights need no check.

    Raises
    ------
    OptionError
        Naming the option.
    """
    if spec.is_tiny:
        return
    from neural.names import is_teaching_model  # torch-free

    if is_teaching_model(spec.model, default=True):
        from neural.names import teaching_weights_problem  # torch-free: a warm re-run never imports torch

        problem = teaching_weights_problem(spec.pretrained)   # the file against its record's SHA-256
        if problem is not None:
            raise OptionError(f"{spec.option}: {problem}")
        return
    if spec.model != "auto":
        from neural.backbone import check_architecture  # open_clip: only for an open_clip backbone

        try:
            check_architecture(spec.model.replace("/", "-"))
        except ValueError as exc:
            raise OptionError(f"{'--clip-model' if spec.is_default else spec.option}: {exc}") from exc
    check_pretrained(spec.model, spec.pretrained, option=spec.option)


def check_pretrained(clip_model: str, clip_pretrained: str | None, *, option: str = "--clip-pretrained") -> None:
    """Refuse a ``--clip-pretrained`` weights file or tag that cannot be loaded (nothing is downloaded).

    Parameters
    ----------
    clip_model : str
        The open_clip architecture, or ``auto`` (inferred from a weights file).
    clip_pretrained : str or None
        A weights file or a pretrained tag (``None``: the ``openai`` tag).
    option : str, optional
        How messages name the option (``--backbone NAME`` for a named backbone).

    Raises
    ------
    OptionError
        Not a weights file, an untrusted TorchScript archive, a missing file, ``auto`` with a tag, an
        unknown tag or one neither cached nor downloadable.
    """
    # open_clip backbones only: these modules import torch
    from neural.backbone import check_pretrained_tag, looks_like_weights_file
    from neural.checkpoints import MissingWeightsError

    pretrained = clip_pretrained or "openai"   # backbone_for's default tag
    p = Path(pretrained).expanduser()
    if p.is_file():
        from neural.checkpoints import (
            NotWeightsFileError,
            check_weights_file,
            is_torchscript_archive,
            torchscript_refused,
            torchscript_trusted,
        )

        try:   # the check and message python -m neural.score and read_state_dict use as well
            check_weights_file(p)
        except NotWeightsFileError as exc:
            raise OptionError(f"{option} {exc}") from exc
        if is_torchscript_archive(p) and not torchscript_trusted():
            raise OptionError(f"{option} {torchscript_refused(p)}")
        return
    if looks_like_weights_file(pretrained):
        raise OptionError(f"{option} {p}: weights file not found")
    if clip_model == "auto":
        raise OptionError(f"--clip-model auto infers the architecture from a weights file, but "
                          f"--clip-pretrained {pretrained!r} is not a file; give the file, or name the "
                          f"architecture (e.g. --clip-model ViT-B-32) for a pretrained tag")
    try:  # a tag: known, and cached or downloadable now (nothing is downloaded here)
        check_pretrained_tag(clip_model, pretrained)
    except (ValueError, MissingWeightsError) as exc:
        raise OptionError(str(exc)) from exc


# ---------------------------------------------------------------------------- training recipes on the CPU
#: Training images of the standard Flickr8k split (the CPU estimate's data size with ``--data``).
FLICKR8K_TRAIN_IMAGES = 6000


def trained_scorers(options: RunOptions) -> list[str]:
    """The trained scorers (:data:`neural.recipes.TRAINED_SCORERS`) the run will train: PAC-S only with
    generated positives (the teaching set, or ``--pacs-positives``)."""
    names = {n[3:] if n.startswith("Ref") else n for n in options.neural}
    out = [s for s in ("PAC-S", "L-CLIPScore", "BRIDGE", "SPECS") if s in names]
    if "PAC-S" in out and options.data is not None and not options.pacs_positives:
        out.remove("PAC-S")
    return out


def trains_on_cpu(options: RunOptions) -> bool:
    """Whether the neural scorers run on the CPU (``--device cpu``, or ``auto`` without CUDA)."""
    if options.device == "cpu":
        return True
    if options.device == "cuda":
        return False
    import torch  # lazy: only asked for a backbone that will train with a paper recipe

    return not torch.cuda.is_available()


def backbone_seconds_per_sample(options: RunOptions) -> float:
    """One forward + backward pass of one image–text pair through ``--clip-model``'s architecture on the
    CPU (random weights: the time does not depend on them; ``auto``: the ``--clip-pretrained`` file's)."""
    from neural.architectures import create_architecture  # lazy: torch / open_clip
    from neural.names import is_teaching_model, is_tiny_model
    from neural.recipes import measure_seconds_per_sample

    name = options.clip_model
    if name == "auto":
        from neural.backbone import load_backbone

        model = load_backbone("auto", options.clip_pretrained, device="cpu", show_progress=False).model
    else:
        arch = ("itr-tiny-clip" if is_tiny_model(name, default=True) else
                "itr-teaching-clip" if is_teaching_model(name) else name.replace("/", "-"))
        model = create_architecture(arch)[0]
    size = getattr(model.visual, "image_size", 224)
    size = int(size[0] if isinstance(size, (tuple, list)) else size)
    return measure_seconds_per_sample(model, size, int(getattr(model, "context_length", 77)))


def check_cpu_training(options: RunOptions, *, seconds_per_sample=None, announce=print) -> None:
    """Refuse, before any stage runs, a paper recipe (:mod:`neural.recipes`) that would train on the CPU
    without ``--train-on-cpu``; print its estimate either way (``PAC-S paper recipe on CPU: ~N h (M
    steps × batch B)``).

    Parameters
    ----------
    options : RunOptions
    seconds_per_sample : callable, optional
        ``() -> seconds`` per image–text pair (default :func:`backbone_seconds_per_sample`, measured).
    announce : callable
        Receives each estimate line (default ``print``).

    Raises
    ------
    OptionError
        One line: the estimates and how to go ahead.
    """
    from neural.recipes import cpu_training_refusal, is_small_backbone  # torch-free

    if options.recipe == "small" or (options.recipe == "auto" and is_small_backbone(options.clip_model)):
        return
    scorers = trained_scorers(options)
    if not scorers or not trains_on_cpu(options):
        return
    n_train = (int(round(0.7 * options.n_teaching_images)) if options.data is None else FLICKR8K_TRAIN_IMAGES)
    message = cpu_training_refusal(scorers, options.clip_model, options.recipe, options.train_on_cpu,
                                   seconds_per_sample or (lambda: backbone_seconds_per_sample(options)),
                                   n_train, announce)
    if message:
        raise OptionError(message)


# ---------------------------------------------------------------------------- the standard-benchmark options
def add_benchmark_file_options(g) -> None:
    """``--composite`` / ``--pascal50s`` / ``--foil`` / ``--foil-coco-captions``: the standard benchmarks'
    files in their release formats (:mod:`evaluation.benchmarks`), the same options for the main job and
    ``experiments.caption_metrics_vs_humans``."""
    g.add_argument("--composite", metavar="DIR", default=None,
                   help="Composite (Aditya et al. 2015): the folder of 8k_correctness.csv / 30k_correctness.csv "
                        "/ coco_correctness.csv with their reference caption files (τ-c; default: not run)")
    g.add_argument("--pascal50s", metavar="DIR", default=None,
                   help="Pascal-50S: the folder of pair_pascal.mat and consensus_pascal.mat (accuracy per HC / "
                        "HI / HM / MM, 5 references × 5 draws; default: not run)")
    g.add_argument("--foil", metavar="FILE", default=None,
                   help="FOIL-COCO test JSON (foilv1.0_test_2017.json; accuracy with 1 and 4 references; "
                        "default: not run)")
    g.add_argument("--foil-coco-captions", metavar="FILE", default=None,
                   help="COCO captions_val2014.json, the references of the FOIL images (default: the FOIL "
                        "file's own original captions)")

