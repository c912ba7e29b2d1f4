"""The main job's option checks that look outside the option values: the data, codebook, output and
cache folders, the standard-benchmark paths, the neural options (device, PAC-S tuples, backbones and
their weights) and the CPU guard of the paper recipes.  Each raises :class:`OptionError` naming the
option, before anything is loaded, trained or written
(:meth:`experiments.options.RunOptions.from_args` calls them)."""
from __future__ import annotations

from pathlib import Path

from corpora.cache import CacheDirError, DiskCache, check_cache_dir
from experiments.backbone_specs import BackboneSpec
from experiments.option_choices import trained_scorers, trains_on_cpu
from experiments.option_lists import OptionError, problem_lines
from experiments.output_folder import prepare_out_folder, run_inputs
from kernels.image.codebook import codebook_folder_images
from neural.families.pacs import MIN_PACS_TUPLES
from neural.names import auto_device_setting


# ``RunOptions`` in the annotations below is :class:`experiments.options.RunOptions`, not imported:
# experiments.options imports this module (annotations are not evaluated here).
#: The smallest teaching set (``--teaching-size``).
MIN_TEACHING_SIZE = 60


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
    if options.out is not None:   # the output-folder rules: experiments/output_folder.py
        prepare_out_folder(options.out, run_inputs(options), own=[cache_root] if cache_root else [])


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
    # "cpu", and "auto" without $ITR_DEVICE (or set to cpu), always resolve: no torch import needed
    named = auto_device_setting() if options.device in (None, "auto") else options.device
    if named not in (None, "cpu"):
        from neural.backbone import resolve_device  # imports torch: only for a CUDA device or $ITR_DEVICE

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
        from neural.weights_check import teaching_weights_content_problem  # torch-free: a warm re-run never imports torch

        problem = teaching_weights_content_problem(spec.pretrained)   # SHA-256 against its record, then content
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
    from neural.registry import recipe_for

    if options.recipe == "small" or (options.recipe == "auto" and is_small_backbone(options.clip_model)):
        return
    scorers = trained_scorers(options)
    if not scorers or not trains_on_cpu(options):
        return
    n_train = (int(round(0.7 * options.n_teaching_images)) if options.data is None else FLICKR8K_TRAIN_IMAGES)
    recipes = [recipe_for(s, options.clip_model, options.recipe) for s in scorers]
    message = cpu_training_refusal(recipes, options.train_on_cpu,
                                   seconds_per_sample or (lambda: backbone_seconds_per_sample(options)),
                                   n_train, announce)
    if message:
        raise OptionError(message)
