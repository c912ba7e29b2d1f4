"""The published CLIP-S / RefCLIP-S / PAC-S / RefPAC-S numbers, as a runnable check.

    python -m experiments.published_numbers --flickr8k DIR --composite DIR --pascal50s DIR \\
        --clip-weights openai --pacs-weights checkpoints/clip_ViT-B-32.pth --tolerance 1.0 --out check.json

Scores the four CLIP-family metrics with this toolkit's scorers (``neural.clipscore``, ``neural.pacs``)
on the benchmarks of the papers, through the protocols the rest of the toolkit uses
(``evaluation.correlation`` rows, ``evaluation.benchmarks`` loaders and table), and prints every figure
beside the published one with the difference Δ = ours − published:

* CLIPScore (Hessel et al., EMNLP 2021): CLIP-S / RefCLIP-S with OpenAI ViT-B/32 (open_clip ``ViT-B-32``,
  tag ``openai``, or a local weights file);
* PAC-S (Sarto et al., CVPR 2023): PAC-S / RefPAC-S with the PAC-S release checkpoint
  ``clip_ViT-B-32.pth`` (given by path; never downloaded);

on Flickr8k-Expert (τ-c), Flickr8k-CF (τ-b), Composite (τ-c, the first 3 rated captions of each row:
11,985 judgments) and Pascal-50S (accuracy % per category HC / HI / HM / MM and their mean; 5 references
sampled per draw, mean of 5 draws).  The published values, with the paper and table each comes from,
are :data:`PUBLISHED`; those marked ``*`` could not be checked against the paper here and are the values
of issue #36.

Inputs that are not given (or cannot be read, or whose images are missing) skip their rows with the
reason printed; when nothing at all can be run the command fails (exit status 2).  With ``--tolerance T``
every row whose |Δ| exceeds ``T`` is flagged ``!`` and the exit status is 1, so the command is a check.

Image folders: Flickr8k's own (``Flicker8k_Dataset/`` in the ``--flickr8k`` folder); Composite's
``--composite-images`` (default ``<composite>/images``) holds ``flickr8k/``, ``flickr30k/`` and ``coco/``
(Flickr8k's ``Flicker8k_Dataset``, ``flickr30k-images``, COCO ``val2014``); Pascal-50S's
``--pascal50s-images`` (default: the first of ``<pascal50s>/images``, ``<pascal50s>/VOC2010/JPEGImages``,
``<pascal50s>/JPEGImages``) is VOC2010's ``JPEGImages``.
"""
from __future__ import annotations

import argparse
import json
import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from corpora.base import Corpus, CorpusError
from corpora.cache import DiskCache
from corpora.cli_values import seed_value
from corpora.flickr8k import load_flickr8k
from corpora.images import PathImageLoader
from corpora.jsondata import write_text_atomic
from corpora.paths import OutputPathError, check_output_path
from evaluation.benchmarks import BenchmarkFormatError, benchmark_table, load_composite, load_pascal50s
from evaluation.correlation import flickr8k_cf_rows, flickr8k_expert_rows
from experiments.caption_metrics_vs_humans import CROWD_FILE, EXPERT_FILE, cache_dir_error

# ------------------------------------------------------------------------------------ published values
#: Where the CLIPScore values were checked: the paper's text (Tables 1-4, EMNLP 2021 version).
_CLIPSCORE_CHECKED = "CLIPScore paper text, Tables 1-4 (also Papers with Code for Flickr8k)"
#: The PAC-S values confirmed by the release's README (output of compute_correlations.py).
_PACS_README = "aimagelab/pacscore README, compute_correlations.py output"


@dataclass(frozen=True)
class PublishedValue:
    """One published figure.

    Attributes
    ----------
    metric : str
        ``"CLIP-S"``, ``"RefCLIP-S"``, ``"PAC-S"`` or ``"RefPAC-S"``.
    key : str
        The :func:`evaluation.benchmarks.benchmark_table` result key the figure is compared with
        (``flickr8k_expert_tau_c``, ``flickr8k_cf_tau_b``, ``composite_tau_c``, ``pascal50s_HC`` …).
    value : float
        The published figure (τ × 100, or accuracy %).
    source : str
        Paper and table.
    confirmed : str or None
        Where the value was checked; ``None``: not confirmed here (the value of issue #36).
    """

    metric: str
    key: str
    value: float
    source: str
    confirmed: str | None


def _rows(metric: str, source: str, confirmed: str | None, **values: float) -> list[PublishedValue]:
    return [PublishedValue(metric, k, v, source, confirmed) for k, v in values.items()]


_PASCAL = ("pascal50s_HC", "pascal50s_HI", "pascal50s_HM", "pascal50s_MM", "pascal50s_mean")
_HESSEL = "Hessel et al. 2021 (CLIPScore), Table"
_SARTO = "Sarto et al. 2023 (PAC-S), Table"

#: Every published figure this check compares with (τ × 100 | accuracy %).
PUBLISHED: tuple[PublishedValue, ...] = tuple(
    _rows("CLIP-S", f"{_HESSEL} 1", _CLIPSCORE_CHECKED, flickr8k_expert_tau_c=51.2)
    + _rows("RefCLIP-S", f"{_HESSEL} 1", _CLIPSCORE_CHECKED, flickr8k_expert_tau_c=53.0)
    + _rows("CLIP-S", f"{_HESSEL} 2", _CLIPSCORE_CHECKED, flickr8k_cf_tau_b=34.4)
    + _rows("RefCLIP-S", f"{_HESSEL} 2", _CLIPSCORE_CHECKED, flickr8k_cf_tau_b=36.4)
    + _rows("CLIP-S", f"{_HESSEL} 3", _CLIPSCORE_CHECKED, composite_tau_c=53.8)
    + _rows("RefCLIP-S", f"{_HESSEL} 3", _CLIPSCORE_CHECKED, composite_tau_c=55.4)
    + _rows("CLIP-S", f"{_HESSEL} 4", _CLIPSCORE_CHECKED, **dict(zip(_PASCAL, (56.5, 99.3, 96.4, 70.4, 80.7))))
    + _rows("RefCLIP-S", f"{_HESSEL} 4", _CLIPSCORE_CHECKED, **dict(zip(_PASCAL, (64.5, 99.6, 95.4, 72.8, 83.1))))
    + _rows("PAC-S", f"{_SARTO} 1", f"{_PACS_README} (τ-c 54.292)", flickr8k_expert_tau_c=54.3)
    + _rows("RefPAC-S", f"{_SARTO} 1", None, flickr8k_expert_tau_c=55.9)
    + _rows("PAC-S", f"{_SARTO} 1", f"{_PACS_README} (τ-b 36.037)", flickr8k_cf_tau_b=36.0)
    + _rows("RefPAC-S", f"{_SARTO} 1", None, flickr8k_cf_tau_b=37.6)
    + _rows("PAC-S", f"{_SARTO} 1", None, composite_tau_c=55.7)
    + _rows("RefPAC-S", f"{_SARTO} 1", None, composite_tau_c=57.3)
    + _rows("PAC-S", f"{_SARTO} 2", None, **dict(zip(_PASCAL, (60.6, 99.3, 96.9, 72.9, 82.4))))
    + _rows("RefPAC-S", f"{_SARTO} 2", None, **dict(zip(_PASCAL, (67.7, 99.6, 96.0, 75.6, 84.7))))
)

#: Benchmark key (of ``evaluation.benchmarks``) -> display name.
BENCHMARK_NAMES = {"flickr8k_expert": "Flickr8k-Expert", "flickr8k_cf": "Flickr8k-CF",
                   "composite": "Composite", "pascal50s": "Pascal-50S"}
#: Model family -> its metrics (reference-free, reference-based).
FAMILIES = {"CLIP": ("CLIP-S", "RefCLIP-S"), "PAC-S": ("PAC-S", "RefPAC-S")}
METRICS = tuple(m for ms in FAMILIES.values() for m in ms)
#: Composite: judged captions per row kept (CLIPScore and PAC-S report 3 per image, 11,985 in all).
COMPOSITE_CAPTIONS_PER_ROW = 3
#: Pascal-50S image folders looked for under ``--pascal50s`` when ``--pascal50s-images`` is not given.
PASCAL50S_IMAGE_DIRS = ("images", "VOC2010/JPEGImages", "JPEGImages")


def benchmark_of(key: str) -> str:
    """The benchmark of a result key (``"pascal50s_HC"`` -> ``"pascal50s"``)."""
    return next(b for b in BENCHMARK_NAMES if key.startswith(b + "_"))


def statistic_of(key: str) -> str:
    """The column label of a result key: ``τ-c``, ``τ-b``, ``HC`` … ``mean``."""
    tail = key[len(benchmark_of(key)) + 1:]
    return {"tau_b": "τ-b", "tau_c": "τ-c"}.get(tail, tail)


# ------------------------------------------------------------------------------------ inputs
@dataclass
class Skip:
    """Rows not computed: ``metrics`` on ``benchmarks``, and why."""

    metrics: tuple[str, ...]
    benchmarks: tuple[str, ...]
    reason: str

    def line(self) -> str:
        ms = "all metrics" if set(self.metrics) == set(METRICS) else ", ".join(self.metrics)
        bs = "all benchmarks" if set(self.benchmarks) == set(BENCHMARK_NAMES) else \
            ", ".join(BENCHMARK_NAMES[b] for b in self.benchmarks)
        return f"skipped: {ms} on {bs}: {self.reason}"


def image_folder_corpus(name: str, root: Path, image_ids: Sequence[str]) -> Corpus:
    """A caption-less :class:`~corpora.base.Corpus` whose image ``i`` is the file ``root / i`` — the image
    source of a benchmark whose ids are file paths (Composite, Pascal-50S) for
    :class:`neural.base.CorpusPairScorer`."""
    ids = tuple(dict.fromkeys(image_ids))
    paths = {i: Path(root) / i for i in ids}
    return Corpus(name=name, image_ids=ids, captions={}, splits={}, image_loader=PathImageLoader(paths, name),
                  image_paths=paths)


def missing_images_reason(corpus: Corpus, image_ids: Sequence[str], where: Path | str) -> str | None:
    """Why the images of a benchmark cannot all be read (how many are missing under ``where``), or ``None``."""
    ids = list(dict.fromkeys(image_ids))
    missing = corpus.missing_images(ids)
    if not missing:
        return None
    return f"{len(missing)} of {len(ids)} images not found under {where} (first: {', '.join(missing[:3])})"


def _flickr8k_inputs(folder: str | None, found: dict, skips: list[Skip]) -> None:
    """Flickr8k-Expert and -CF rows with their corpus (the image source) into ``found``; else skips."""
    both = ("flickr8k_expert", "flickr8k_cf")
    if folder is None:
        skips.append(Skip(METRICS, both, "no --flickr8k given"))
        return
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # the loader's notes are in corpus.notes; not needed here
            corpus = load_flickr8k(folder)
    except (CorpusError, FileNotFoundError) as exc:
        skips.append(Skip(METRICS, both, f"--flickr8k {folder}: {exc}"))
        return
    for key, has, build, file in (("flickr8k_expert", corpus.expert, flickr8k_expert_rows, EXPERT_FILE),
                                  ("flickr8k_cf", corpus.crowd, flickr8k_cf_rows, CROWD_FILE)):
        if not has:
            skips.append(Skip(METRICS, (key,), f"no {file} in --flickr8k {folder}"))
            continue
        try:
            rows = build(corpus)
        except ValueError as exc:   # the protocol refuses the judgments (e.g. an image left without references)
            skips.append(Skip(METRICS, (key,), f"--flickr8k {folder}: {exc}"))
            continue
        where = next(iter(corpus.image_paths.values())).parent if corpus.image_paths else folder
        why = missing_images_reason(corpus, rows.image_ids, where)
        if why:
            skips.append(Skip(METRICS, (key,), why))
        else:
            found[key] = (rows, corpus)


def _benchmark_input(key: str, folder: str | None, images: Path | None, load, option: str,
                     found: dict, skips: list[Skip]) -> None:
    """One of Composite / Pascal-50S: ``load(folder)`` and the image folder corpus, or a skip."""
    if folder is None:
        skips.append(Skip(METRICS, (key,), f"no {option} given"))
        return
    try:
        data = load(folder)
    except BenchmarkFormatError as exc:
        skips.append(Skip(METRICS, (key,), str(exc)))
        return
    ids = data.image_ids if hasattr(data, "image_ids") else [r.image_id for r in data]
    corpus = image_folder_corpus(key, images, ids)
    why = missing_images_reason(corpus, ids, images)
    if why:
        skips.append(Skip(METRICS, (key,), f"{why} (pass the image folder with {option}-images)"))
    else:
        found[key] = (data, corpus)


def pascal50s_image_dir(folder: str | Path) -> Path:
    """The default Pascal-50S image folder: the first of :data:`PASCAL50S_IMAGE_DIRS` under ``folder`` that
    exists, else ``folder / "images"``."""
    for sub in PASCAL50S_IMAGE_DIRS:
        if (Path(folder) / sub).is_dir():
            return Path(folder) / sub
    return Path(folder) / PASCAL50S_IMAGE_DIRS[0]


def load_inputs(args) -> tuple[dict, list[Skip]]:
    """The benchmarks that can be run, ``{key: (rows or records, image corpus)}``, and the skips."""
    found: dict = {}
    skips: list[Skip] = []
    _flickr8k_inputs(args.flickr8k, found, skips)
    comp_images = Path(args.composite_images) if args.composite_images else \
        Path(args.composite or ".") / "images"
    _benchmark_input("composite", args.composite, comp_images,
                     lambda d: load_composite(d, captions_per_row=COMPOSITE_CAPTIONS_PER_ROW), "--composite",
                     found, skips)
    pascal_images = Path(args.pascal50s_images) if args.pascal50s_images else \
        pascal50s_image_dir(args.pascal50s or ".")
    _benchmark_input("pascal50s", args.pascal50s, pascal_images, lambda d: load_pascal50s(d, seed=args.seed),
                     "--pascal50s", found, skips)
    return found, skips


# ------------------------------------------------------------------------------------ models
def _load(arch: str, weights: str, device: str, precision: str, quick_gelu: bool | None, option: str):
    """``(backbone, None)`` or ``(None, why)``: the project's missing-weights message (with the option that
    gives a file here) for weights that are not available, the loader's message for any other failure."""
    from neural.backbone import load_backbone   # lazy: torch and open_clip take seconds to import
    from neural.checkpoints import MissingWeightsError, WeightsError

    try:
        with warnings.catch_warnings():   # fp16 on CPU runs fp32, as --clip-precision's help says
            warnings.filterwarnings("ignore", message="fp16 is only used on CUDA")
            return load_backbone(arch, weights, device=device, precision=precision, quick_gelu=quick_gelu,
                                 show_progress=False), None
    except MissingWeightsError as exc:
        return None, f"{exc} (here: {option} FILE)"
    except (WeightsError, ValueError, RuntimeError) as exc:   # unsafe / mismatched weights, unknown tag, no CUDA
        return None, f"{option} {weights}: {exc}"


def load_models(args) -> tuple[dict, list[Skip]]:
    """``{family: backbone}`` for the model families whose weights load, and a skip for each other.

    A weights *file* is loaded with QuickGELU: OpenAI's ViT-B/32 and the PAC-S release fine-tuned from it
    use it (:data:`neural.pretrained.PACS_CHECKPOINTS` gives the activation of each PAC-S release file); an
    open_clip tag brings its own setting."""
    from neural.pretrained import PACS_CHECKPOINTS, looks_like_weights_file

    models: dict = {}
    skips: list[Skip] = []
    benches = tuple(BENCHMARK_NAMES)
    clip_file = looks_like_weights_file(args.clip_weights) or Path(args.clip_weights).is_file()
    bb, why = _load(args.clip_model, args.clip_weights, args.device, args.clip_precision, True if clip_file else None,
                    "--clip-weights")
    if bb is None:
        skips.append(Skip(FAMILIES["CLIP"], benches, why))
    else:
        models["CLIP"] = bb
    if args.pacs_weights is None:
        skips.append(Skip(FAMILIES["PAC-S"], benches, "no --pacs-weights given (the PAC-S release file "
                                                      "clip_ViT-B-32.pth)"))
        return models, skips
    p = Path(args.pacs_weights)
    if not p.is_file():
        skips.append(Skip(FAMILIES["PAC-S"], benches, f"--pacs-weights {p}: no such file (the PAC-S release "
                                                      "checkpoint clip_ViT-B-32.pth, github.com/aimagelab/pacscore)"))
        return models, skips
    quick = PACS_CHECKPOINTS.get(p.name, {}).get("quick_gelu", True)
    bb, why = _load(args.clip_model, str(p), args.device, "fp32", quick, "--pacs-weights")
    if bb is None:
        skips.append(Skip(FAMILIES["PAC-S"], benches, why))
    else:
        models["PAC-S"] = bb
    return models, skips


def metric_scorers(models: Mapping) -> dict[str, tuple[object, bool]]:
    """``{metric: (scorer, uses references)}`` of the families loaded: CLIP-S / RefCLIP-S on ``models["CLIP"]``
    (:mod:`neural.clipscore`), PAC-S / RefPAC-S on ``models["PAC-S"]`` (:mod:`neural.pacs`)."""
    from neural.clipscore import CLIPScore, RefCLIPScore   # lazy: torch
    from neural.pacs import PACScore, RefPACScore

    out: dict[str, tuple[object, bool]] = {}
    if "CLIP" in models:
        out.update({"CLIP-S": (CLIPScore(models["CLIP"]), False), "RefCLIP-S": (RefCLIPScore(models["CLIP"]), True)})
    if "PAC-S" in models:
        out.update({"PAC-S": (PACScore(models["PAC-S"]), False), "RefPAC-S": (RefPACScore(models["PAC-S"]), True)})
    return out


# ------------------------------------------------------------------------------------ scoring and comparing
def compute_figures(inputs: Mapping, scorers: Mapping, *, cache=None, seed: int = 0) -> tuple[dict, list[Skip]]:
    """Every metric on every benchmark given: ``{metric: {result key: value}}`` from
    :func:`evaluation.benchmarks.benchmark_table` (one call per benchmark, each metric wrapped as a
    :class:`neural.base.CorpusPairScorer` over that benchmark's images), and a skip per cell the table
    could not compute."""
    from neural.base import CorpusPairScorer   # lazy: torch

    figures: dict[str, dict] = {m: {} for m in scorers}
    skips: list[Skip] = []
    for key, (data, corpus) in inputs.items():
        pair = {m: CorpusPairScorer(s, corpus, cache, use_references=ref) for m, (s, ref) in scorers.items()}
        table = benchmark_table(pair, {key: data}, seed=seed)
        for m, row in table["rows"].items():
            figures[m].update({k: v for k, v in row.items() if v is not None and k.startswith(key + "_")})
        for where, msg in table["errors"].items():
            skips.append(Skip((where.split(" on ")[0],), (key,), msg))
    return figures, skips


def compare(figures: Mapping, tolerance: float | None) -> list[dict]:
    """One row per published figure that was computed: metric, benchmark, statistic, ``ours``,
    ``published``, ``difference`` (ours − published), source, confirmed, ``exceeds`` (|Δ| > tolerance)."""
    out = []
    for p in PUBLISHED:
        ours = figures.get(p.metric, {}).get(p.key)
        if ours is None:
            continue
        diff = float(ours) - p.value
        out.append({"metric": p.metric, "benchmark": BENCHMARK_NAMES[benchmark_of(p.key)],
                    "statistic": statistic_of(p.key), "key": p.key, "ours": float(ours), "published": p.value,
                    "difference": diff, "source": p.source, "confirmed": p.confirmed,
                    "exceeds": tolerance is not None and abs(diff) > tolerance})
    return out


def format_table(rows: Sequence[dict], skips: Sequence[Skip], tolerance: float | None) -> str:
    """The comparison as text: one line per figure (ours, published, Δ, source; ``*`` after a published
    value not confirmed here, ``!`` after a row whose |Δ| exceeds the tolerance), then the skipped rows."""
    head = f"{'metric':<10}{'benchmark':<17}{'stat':<6}{'ours':>7}{'published':>11}{'Δ':>7}  source"
    lines = ["Published numbers: ours vs the papers (Kendall τ × 100 | accuracy %), Δ = ours − published",
             head, "-" * (len(head) + 30)]
    for r in rows:
        pub = f"{r['published']:.1f}" + ("*" if r["confirmed"] is None else " ")
        lines.append(f"{r['metric']:<10}{r['benchmark']:<17}{r['statistic']:<6}{r['ours']:>7.1f}{pub:>11}"
                     f"{r['difference']:>+7.1f}  {r['source']}" + ("  !" if r["exceeds"] else ""))
    lines.append("* published value not confirmed against the paper here (issue #36's value)")
    if tolerance is not None:
        n = sum(r["exceeds"] for r in rows)
        lines.append(f"tolerance {tolerance:g}: {n} of {len(rows)} rows exceed it" + (" (marked !)" if n else ""))
    lines.extend(s.line() for s in skips)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ command line
def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m experiments.published_numbers``."""
    p = argparse.ArgumentParser(prog="python -m experiments.published_numbers", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    d = p.add_argument_group("data (a benchmark not given is skipped, with the reason printed)")
    d.add_argument("--flickr8k", metavar="DIR", help="Flickr8k folder, standard layout (Flickr8k_text/ with "
                   "ExpertAnnotations.txt and CrowdFlowerAnnotations.txt, images in Flicker8k_Dataset/): "
                   "Flickr8k-Expert τ-c and Flickr8k-CF τ-b")
    d.add_argument("--composite", metavar="DIR", help="Composite folder: 8k_correctness.csv / 30k_correctness.csv "
                   "/ coco_correctness.csv and their reference caption files (docs/evaluation.md §7): τ-c")
    d.add_argument("--composite-images", metavar="DIR", help="Composite images: a folder holding flickr8k/, "
                   "flickr30k/ and coco/ (default: <--composite>/images)")
    d.add_argument("--pascal50s", metavar="DIR", help="Pascal-50S folder: pair_pascal.mat and consensus_pascal.mat "
                   "(or pyCIDErConsensus/ with them): accuracy per HC / HI / HM / MM and the mean")
    d.add_argument("--pascal50s-images", metavar="DIR", help="Pascal-50S images: VOC2010 JPEGImages (default: the "
                   "first of <--pascal50s>/images, VOC2010/JPEGImages, JPEGImages)")
    m = p.add_argument_group("models")
    m.add_argument("--clip-weights", default="openai", metavar="TAG|FILE",
                   help="CLIP-S / RefCLIP-S weights: an open_clip pretrained tag (downloaded on a networked machine "
                        "unless $ITR_OFFLINE=1) or a weights file of OpenAI ViT-B/32 (default: openai)")
    m.add_argument("--pacs-weights", metavar="FILE", help="PAC-S / RefPAC-S weights: the PAC-S release file "
                   "clip_ViT-B-32.pth (never downloaded; without it the PAC-S rows are skipped)")
    m.add_argument("--clip-model", default="ViT-B-32", metavar="ARCH",
                   help="open_clip architecture of both models (default ViT-B-32, the papers'); another one, e.g. "
                        "the small itr-tiny-clip, only for testing the command on stand-in weights")
    m.add_argument("--device", default="auto", help="auto ($ITR_DEVICE when set, else CUDA when available), cpu or cuda "
                        "(default auto)")
    m.add_argument("--clip-precision", choices=("fp32", "fp16"), default="fp32",
                   help="precision of the CLIP-S / RefCLIP-S model (default fp32); fp16 is the CLIPScore reference "
                        "code's setting on a GPU and is used on CUDA only (on CPU: fp32). PAC-S always runs fp32, "
                        "as its reference code")
    o = p.add_argument_group("output and check")
    o.add_argument("--out", metavar="FILE", help="also write every figure, its published value and Δ as JSON")
    o.add_argument("--tolerance", type=float, default=None, metavar="T",
                   help="flag rows with |Δ| > T (τ or accuracy points) and exit with status 1 if any")
    o.add_argument("--seed", type=seed_value, default=0,
                   help="seed of the Pascal-50S reference draws and vote ties (0 ≤ SEED < 2^31; default 0)")
    o.add_argument("--cache-dir", default=None, help="cache of image features (default $ITR_CACHE_DIR or "
                                                     "~/.cache/...)")
    o.add_argument("--no-cache", action="store_true", help="do not read or write the disk cache")
    return p


def _option_error(args) -> str | None:
    """Why the options cannot be used (checked before any data or model is loaded), or ``None``."""
    if args.tolerance is not None and not args.tolerance >= 0:
        return f"--tolerance must be a number ≥ 0, got {args.tolerance}"
    if args.out is not None and not Path(args.out).expanduser().parent.is_dir():
        return f"--out {args.out}: folder {Path(args.out).parent} does not exist"
    if args.out is not None:
        try:
            check_output_path("--out", Path(args.out), input_paths(args))
        except OutputPathError as exc:
            return str(exc)
    if args.device not in ("auto", "cpu") and not args.device.startswith("cuda"):
        return f"--device must be auto, cpu or cuda[:N], got {args.device!r}"
    return None if args.no_cache else cache_dir_error(args.cache_dir)


def input_paths(args) -> list[tuple[str, Path]]:
    """``(option, path)`` of every input file or folder given (what ``--out`` must not touch)."""
    given = [("--flickr8k", args.flickr8k), ("--composite", args.composite),
             ("--composite-images", args.composite_images), ("--pascal50s", args.pascal50s),
             ("--pascal50s-images", args.pascal50s_images), ("--clip-weights", args.clip_weights),
             ("--pacs-weights", args.pacs_weights)]
    return [(o, Path(v)) for o, v in given if v is not None and Path(v).expanduser().exists()]


def _nothing_to_run(what: str, skips: Sequence[Skip]) -> int:
    print(f"error: nothing to run: {what}", file=sys.stderr)
    for s in skips:
        print(f"  {s.line()}", file=sys.stderr)
    return 2


def main(argv=None) -> int:
    """Run the check; exit status 0 (every row within the tolerance, or no tolerance), 1 (a row exceeds it)
    or 2 (bad options, or nothing could be run)."""
    p = build_parser()
    args = p.parse_args(argv)
    err = _option_error(args)
    if err:
        p.error(err)
    inputs, skips = load_inputs(args)
    if not inputs:
        return _nothing_to_run("no benchmark could be loaded", skips)
    models, model_skips = load_models(args)
    skips += model_skips
    if not models:
        return _nothing_to_run("no model could be loaded", skips)
    cache = DiskCache(args.cache_dir, enabled=not args.no_cache)
    figures, cell_skips = compute_figures(inputs, metric_scorers(models), cache=cache, seed=args.seed)
    skips += cell_skips
    rows = compare(figures, args.tolerance)
    print(format_table(rows, skips, args.tolerance))
    if args.out:
        result = {"rows": rows, "skipped": [asdict(s) for s in skips], "tolerance": args.tolerance,
                  "benchmarks": {BENCHMARK_NAMES[k]: len(d) for k, (d, _) in inputs.items()},
                  "models": {f: bb.provenance() for f, bb in models.items()}, "seed": args.seed}
        try:
            write_text_atomic(Path(args.out).expanduser(), json.dumps(result, indent=2, default=str))
        except OSError as exc:
            print(f"error: --out {args.out}: cannot write ({exc.strerror or exc})", file=sys.stderr)
            return 2
    return 1 if any(r["exceeds"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
