"""``python -m neural.score`` — a clipscore-like command line for every CLIP-family metric: CLIP-S, PAC-S,
L-CLIPScore, BRIDGE and SPECS, the reference-based RefCLIP-S, RefPAC-S and RefL-CLIPScore, and any family
registered in :mod:`neural.registry`.

Examples
--------
Score candidate captions for a folder of images with OpenAI ViT-B/32 (downloads on a networked
machine)::

    python -m neural.score --candidates cands.json --images imgs/ --metric clip-s

With references, from a local weights file (any format of :mod:`neural.checkpoints`)::

    python -m neural.score --candidates cands.json --references refs.json --images imgs/ \\
        --metric refpac-s --clip-model ViT-B-32 --clip-pretrained checkpoints/clip_ViT-B-32.pth

With a saved scorer (``python -m neural.train_scorer``, :func:`neural.saved.save_scorer`); the metric is
the scorer's, PAC-S and BRIDGE also need the backbone they were trained from (checked by hash)::

    python -m neural.score --candidates cands.json --images imgs/ --scorer scorers/pacs-tiny --clip-model tiny

Offline, without any weights: ``--clip-model teaching`` uses the shipped teaching CLIP and, for PAC-S,
L-CLIPScore, BRIDGE and SPECS without ``--scorer``, the shipped scorers (:mod:`neural.shipped_scorers`;
``--train-scorers`` trains them on the teaching set instead); ``--clip-model tiny`` trains (once, then
cached) the small CLIP on the built-in teaching set, and those four are then trained on the teaching set
first (cached) with their default recipes.

``cands.json``: ``{image_id: caption}``; ``refs.json``: ``{image_id: [reference, ...]}`` (jmhessel/clipscore's
formats); the image of ``image_id`` is ``DIR/image_id`` or ``DIR/image_id.<jpg|jpeg|png|…>`` (the id is the
file stem).  Empty (or whitespace-only) candidates and references are refused; captions longer than the
context (prompt included) are truncated, and how many were is reported (stderr note, ``"truncated"`` in
the ``--out`` and ``--summary`` JSON).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from corpora.cli_values import exit_status, seed_value
from neural.registry import families, metric_entry, metric_names, metrics_help

def metrics_epilog() -> str:
    """The ``--metric`` list of ``--help``: every registered family's names and formulas
    (:func:`neural.registry.metrics_help`)."""
    return ("metrics (--metric):\n" + metrics_help() + """
H is the harmonic mean 2ab / (a + b).  A reference-based metric also reports its reference-free score.
""" + ", ".join(f.name for f in families(trained=True)) + """ are trained: --scorer DIR loads a saved one
(python -m neural.train_scorer); without it --clip-model teaching uses the shipped ones (--train-scorers
trains them here on the teaching set) and --clip-model tiny trains them here on the teaching set.""")


IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif")


def _read_json(path: Path, what: str, option: str) -> dict:
    from corpora.jsondata import DuplicateKeyError, loads_unique   # lazy: --help imports no corpora

    try:
        data = loads_unique(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SystemExit(f"error: {option} {path}: file not found") from None
    except IsADirectoryError:
        raise SystemExit(f"error: {option} {path} is a folder; give the JSON file") from None
    except DuplicateKeyError as exc:
        raise SystemExit(f"error: {option} {path}: {exc} (each image id once)") from None
    except OSError as exc:
        raise SystemExit(f"error: {option} {path}: cannot read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SystemExit(f"error: {path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except json.JSONDecodeError as exc:
        raise SystemExit(f"error: {path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise SystemExit(f"error: {path}: expected a JSON object mapping image id -> {what}")
    return data


def find_image(folder: Path, image_id: str) -> Path | None:
    """``folder/image_id`` if it exists, else ``folder/image_id + ext`` for a known image extension."""
    p = folder / image_id
    if p.is_file():
        return p
    for ext in IMAGE_EXTS:
        for e in (ext, ext.upper()):
            q = folder / (image_id + e)
            if q.is_file():
                return q
    return None


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows ``(default: …)`` only for options whose default is a value (``None`` defaults are explained
    in the help text itself); the description and the metric list keep their line breaks."""

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m neural.score", description=__doc__.split("\n\n")[0],
                                 formatter_class=_DefaultsFormatter, epilog=metrics_epilog())
    ap.add_argument("--candidates", required=True, type=Path, help="JSON {image_id: candidate caption}")
    ap.add_argument("--images", required=True, type=Path, help="folder with the images (file name = image id)")
    ap.add_argument("--references", type=Path, default=None,
                    help="JSON {image_id: [reference captions]} (needed for refclip-s / refpac-s / "
                         "refl-clipscore)")
    ap.add_argument("--metric", choices=metric_names(), default=None,
                    help="score to compute (see the list below). Default: clip-s, or with --scorer the saved "
                         "scorer's (refpac-s for a saved RefPAC-S; with --references the Ref variant is also "
                         "reported)")
    ap.add_argument("--scorer", type=Path, default=None,
                    help="a saved scorer folder (python -m neural.train_scorer; scorer.json + "
                         "weights.safetensors): PAC-S, L-CLIPScore, BRIDGE or SPECS, the metric from its "
                         "scorer.json. PAC-S and BRIDGE also need the backbone they were trained from "
                         "(--clip-model / --clip-pretrained; verified by hash); L-CLIPScore and SPECS load "
                         "alone (a backbone given is verified as their parent)")
    ap.add_argument("--clip-model", default=None,
                    help="open_clip architecture (e.g. ViT-B-32, ViT-L-14), 'auto' (infer from an OpenAI-"
                         "layout file), 'teaching' (the shipped teaching CLIP, pretrained on generated "
                         "teaching-world pairs; --clip-pretrained may name another file of it) or 'tiny' (the "
                         "small CLIP trained here on the teaching set). Default: ViT-B-32 with --clip-pretrained openai")
    ap.add_argument("--clip-pretrained", default=None,
                    help="pretrained tag (openai, laion2b_s32b_b82k, …) or a weights file (OpenAI .pt, "
                         "open_clip .pt/.safetensors, PAC-S .pth, Long-CLIP longclip-B/L.pt and SPECS spec.pt: "
                         "248-token context). An OpenAI TorchScript .pt file is "
                         "loaded only with ITR_TRUST_TORCHSCRIPT=1 (it can run code; or convert it to "
                         ".safetensors, see docs/neural.md). Default: openai. Not with --clip-model tiny")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="auto: $ITR_DEVICE when set, else CUDA when available, else CPU")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "fp16"),
                    help="fp16 only on CUDA, not with --clip-model tiny")
    ap.add_argument("--prompt", default=None,
                    help="text prefix of candidates and references of CLIP-S / PAC-S (default: 'A photo "
                         "depicts'; '' for none). Not with --scorer (the saved scorer's prompt is part of it)")
    ap.add_argument("--train-scorers", action="store_true",
                    help="with --clip-model teaching: train PAC-S / BRIDGE / SPECS here on the teaching set, "
                         "L-CLIPScore on the teaching CLIP's pretraining stream (about 20 min the first time; "
                         "all cached) instead of loading the shipped one (docs/shipped_scorers.md)")
    ap.add_argument("--seed", type=seed_value, default=0,
                    help="seed of the teaching set, the tiny CLIP and the scorers' training, 0 ≤ SEED < 2^31")
    ap.add_argument("--cache-dir", default=None, help="disk cache (default $ITR_CACHE_DIR or ~/.cache/…)")
    ap.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    ap.add_argument("--out", type=Path, default=None,
                    help="write per-instance scores and the summary as JSON here (checked before any model "
                         "is loaded: an input file or a path inside the --images folder, a folder, a path "
                         "under a file or an unwritable place is refused)")
    ap.add_argument("--summary", type=Path, default=None,
                    help="write the summary alone as JSON here (metric, score, mean, n, averages, scorer "
                         "identity, truncated count; checked as --out)")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


def _backbone(args, cache):
    from neural.backbone import is_teaching_model, is_tiny_model, load_backbone, resolve_device
    from neural.checkpoints import WeightsError

    try:  # --device cuda without CUDA: refused before any training or loading
        resolve_device(args.device)
    except RuntimeError as exc:
        raise SystemExit(f"error: --device: {exc}") from None
    if is_teaching_model(args.clip_model):
        from corpora.teaching import make_teaching_set
        from neural.teaching_clip import load_teaching_clip

        try:
            bb = load_teaching_clip(args.clip_pretrained, device=args.device, show_progress=not args.quiet)
        except WeightsError as exc:  # missing or damaged shipped file: one error naming the rebuild command
            option = "--clip-pretrained" if args.clip_pretrained else "--clip-model teaching"
            raise SystemExit(f"error: {option}: {exc}") from None
        return bb, make_teaching_set(seed=args.seed)
    if is_tiny_model(args.clip_model):
        if args.clip_pretrained is not None:
            raise SystemExit(f"error: --clip-pretrained {args.clip_pretrained} does not apply to --clip-model "
                             f"{args.clip_model}: the tiny CLIP is trained here on the teaching set; pass an "
                             "open_clip architecture (e.g. --clip-model ViT-B-32) to score with those weights")
        if args.precision != "fp32":
            raise SystemExit(f"error: --precision {args.precision} does not apply to --clip-model "
                             f"{args.clip_model}: the tiny CLIP runs in fp32")
        from corpora.teaching import make_teaching_set
        from neural.tiny_clip import train_tiny_clip

        ts = make_teaching_set(seed=args.seed)
        print(f"training / loading the tiny CLIP on the teaching set (seed {args.seed}) …", file=sys.stderr)
        return train_tiny_clip(ts, seed=args.seed, cache=cache, show_progress=not args.quiet,
                               device=args.device), ts
    model = args.clip_model or "ViT-B-32"
    pretrained = args.clip_pretrained or "openai"
    try:
        return load_backbone(model, pretrained, device=args.device, precision=args.precision,
                             show_progress=not args.quiet), None
    except (WeightsError, ValueError, RuntimeError) as exc:  # missing / unsafe / mismatched weights,
        option = "--clip-pretrained" if args.clip_pretrained else "--clip-model"   # unknown model or tag, no CUDA
        raise SystemExit(f"error: {option}: {exc}") from None


def _check_cache_option(args) -> None:
    """Refuse an unwritable cache folder (``--cache-dir`` or the default) up front, as one ``error:`` line
    (exit 2), instead of a traceback at the first cache write after the work."""
    from corpora.cache import CacheDirError, check_cache_dir   # here like main's: --help imports no corpora

    if args.no_cache:
        return
    try:
        check_cache_dir(args.cache_dir)
    except CacheDirError as exc:
        raise SystemExit(f"error: {exc} (pass another --cache-dir, or --no-cache)") from None


def _read_inputs(args) -> tuple[dict, dict | None, list]:
    """``(candidates, references or None, image ids)`` read and checked: one ``error:`` line (exit 2) naming
    the file and the image id for a missing, non-string, empty or whitespace-only caption (candidates and
    references alike)."""
    cands = _read_json(args.candidates, "caption", "--candidates")
    refs = _read_json(args.references, "reference list", "--references") if args.references else None
    if metric_entry(args.metric)[1] and refs is None:
        raise SystemExit(f"error: --metric {args.metric} needs --references refs.json")
    if not args.images.is_dir():
        raise SystemExit(f"error: --images {args.images} is not a folder")
    ids = list(cands)
    if not ids:
        raise SystemExit(f"error: {args.candidates}: no candidates")
    for i in ids:
        if not isinstance(cands[i], str):
            raise SystemExit(f"error: {args.candidates}: candidate of {i!r} is not a string")
        if not cands[i].strip():
            raise SystemExit(f"error: {args.candidates}: candidate of {i!r} is empty")
    if refs is None:
        return cands, None, ids
    for i in ids:
        r = refs.get(i)
        if r is not None and (not isinstance(r, list) or not all(isinstance(x, str) for x in r)):
            raise SystemExit(f"error: {args.references}: references of {i!r} must be a list of strings, "
                             f"got {type(r).__name__}")
        for k, x in enumerate(r or ()):
            if not x.strip():   # the candidates' rule: an empty caption would be scored as the bare prompt
                raise SystemExit(f"error: {args.references}: reference {k} of {i!r} is empty")
    missing_refs = [i for i in ids if not refs.get(i)]
    if missing_refs:
        raise SystemExit(f"error: {args.references}: no references for {len(missing_refs)} image(s), "
                         f"e.g. {missing_refs[:3]}")
    return cands, refs, ids


def _check_out_option(args, image_paths) -> None:
    """Refuse an unusable ``--out`` or ``--summary`` up front, before any image is read or model loaded, as
    one ``error:`` line (exit 2): an output that is, contains or lies inside an input (candidates,
    references, the images folder or an image, the saved scorer's folder, a weights file), the other
    output, a folder, a path under a file, or a place that cannot be written
    (:func:`corpora.paths.check_output_path`) — instead of a traceback after the scoring, with the scores
    lost."""
    from corpora.paths import OutputPathError, check_output_path, output_overlap   # lazy: --help imports no corpora

    inputs = [("--candidates", args.candidates), ("--references", args.references)]
    inputs += [("--images", q) for q in image_paths] + [("--images", args.images)]
    if args.scorer is not None:   # its files first (the message names the file), then the folder
        folder = args.scorer if args.scorer.is_dir() else args.scorer.parent
        inputs += [("--scorer", q) for q in sorted(folder.iterdir()) if q.is_file()] if folder.is_dir() else []
        inputs.append(("--scorer", args.scorer))
    if args.clip_pretrained is not None and Path(args.clip_pretrained).expanduser().is_file():
        inputs.append(("--clip-pretrained", Path(args.clip_pretrained)))
    if args.out is not None and args.summary is not None and output_overlap(args.out, [("--out", args.summary)]):
        raise SystemExit(f"error: --summary {args.summary} is the --out file; give two different files")
    for option, path in (("--out", args.out), ("--summary", args.summary)):
        if path is not None:
            try:
                check_output_path(option, path, inputs)
            except OutputPathError as exc:
                raise SystemExit(f"error: {exc}") from None


def _check_weights_option(args) -> None:
    """Weights refused up front, as one ``error:`` line naming the option and the file: a
    ``--clip-pretrained`` file that is not a weights file (the main job's check and message,
    :func:`neural.checkpoints.check_weights_file`); a safetensors file that is truncated, holds non-floating
    weights or NaN / infinite values (:func:`neural.weights_check.safetensors_problem`); teaching-CLIP
    weights that fail their record's SHA-256 or that content check.  Not for the tiny CLIP (the option is
    refused in :func:`_backbone`)."""
    from neural.checkpoints import NotWeightsFileError, check_weights_file, is_safetensors_file   # lazy: imports torch (--help and option errors stay instant)
    from neural.names import is_teaching_model, is_tiny_model
    from neural.weights_check import safetensors_problem, teaching_weights_content_problem

    if is_tiny_model(args.clip_model):
        return
    if is_teaching_model(args.clip_model):
        problem = teaching_weights_content_problem(args.clip_pretrained)
        if problem is not None:
            option = "--clip-pretrained" if args.clip_pretrained else "--clip-model teaching"
            raise SystemExit(f"error: {option}: {problem}")
        return
    if args.clip_pretrained is None:
        return
    p = Path(args.clip_pretrained).expanduser()
    if p.is_file():
        try:
            check_weights_file(p)
        except NotWeightsFileError as exc:
            raise SystemExit(f"error: --clip-pretrained {exc}") from None
        problem = safetensors_problem(p) if is_safetensors_file(p) else None
        if problem is not None:
            raise SystemExit(f"error: --clip-pretrained {p}: {problem}")


def _truncation(bb, prompt, cands: list, refs: list | None) -> dict | None:
    """How many candidates and references (prompt included, as scored) exceed the backbone's context
    length and are therefore cut: ``{"candidates", "references", "context_length"}``, or ``None`` when the
    tokenizer cannot count (:meth:`neural.backbone.Backbone.token_lengths`)."""
    from neural.base import with_prompt   # lazy: imports torch (--help and option errors stay instant)

    ctx = int(bb.context_length)
    texts = list(cands) + [x for r in (refs or ()) for x in r]
    lengths = bb.token_lengths(with_prompt(texts, prompt))
    if lengths is None:
        return None
    over = [n > ctx for n in lengths]
    return {"candidates": int(sum(over[:len(cands)])), "references": int(sum(over[len(cands):])),
            "context_length": ctx}


def _resolve_metric(args) -> dict | None:
    """Set ``args.metric`` (default ``clip-s``; with ``--scorer`` the saved scorer's, refused when another
    family is asked for) and return the saved scorer's ``scorer.json`` (``None`` without ``--scorer``)."""
    if args.scorer is None:
        args.metric = args.metric or "clip-s"
        return None
    from neural.saved import ScorerFormatError, read_scorer_config   # lazy: imports torch

    if args.prompt is not None:
        raise SystemExit("error: --prompt does not apply to --scorer: the saved scorer's prompt is part of it")
    try:
        config = read_scorer_config(args.scorer)
    except ScorerFormatError as exc:
        raise SystemExit(f"error: --scorer {exc}") from None
    family = metric_entry(config["metric"])[0]
    ref = bool(config["scorer"].get("reference_based")) and family.reference_metric
    metric = args.metric or (family.reference_metric if ref else family.metric)
    if metric_entry(metric)[0] is not family:
        raise SystemExit(f"error: --metric {metric} does not fit --scorer {args.scorer}, a saved {family.name} "
                         f"scorer (use {' or '.join(family.metrics())})")
    args.metric = metric
    return config


def _saved_scorer(args, cache):
    """The scorer saved in ``--scorer``, on its parent backbone when the backbone options name one (verified
    by hash; needed for PAC-S and BRIDGE)."""
    from neural.checkpoints import WeightsError
    from neural.saved import load_scorer   # lazy: imports torch (--help and option errors stay instant)

    parent = None
    if args.clip_model is not None or args.clip_pretrained is not None:
        parent = _backbone(args, cache)[0]
    try:
        return load_scorer(args.scorer, parent, device=args.device)
    except WeightsError as exc:
        raise SystemExit(f"error: --scorer {exc}") from None


def _shipped(family: str, bb):
    """``family``'s shipped scorer on the package's teaching CLIP (:mod:`neural.shipped_scorers`); a
    missing or damaged file is one ``error:`` line naming it and the rebuild command."""
    from neural.shipped_scorers import ShippedScorerError, load_shipped_scorer   # lazy: imports torch

    print(f"{family}: the shipped scorer, trained once from the teaching CLIP (docs/shipped_scorers.md)",
          file=sys.stderr)
    try:
        return load_shipped_scorer(family, bb)
    except ShippedScorerError as exc:
        raise SystemExit(f"error: {exc}") from None


def _scorer(args, bb, teaching, cache, notes: list):
    """The scorer of ``--metric`` on the backbone options' backbone (:mod:`neural.registry`): a family that
    is not trained (CLIP-S) scores with the backbone; a trained one on the shipped teaching CLIP is the
    shipped scorer (:mod:`neural.shipped_scorers`; with ``--train-scorers`` trained here on the teaching
    set), on the tiny CLIP trained on the teaching set; elsewhere its formula on the backbone where it has
    one (PAC-S, with a note), else a saved scorer is needed."""
    from neural.shipped_scorers import is_shipped_teaching_clip   # lazy: imports torch

    family = metric_entry(args.metric)[0]
    if not family.trained:
        return family.untrained(bb, prompt=args.prompt)
    shipped = teaching is not None and not args.train_scorers and is_shipped_teaching_clip(bb)
    if shipped and family.shipped_folder:
        return family.with_prompt(_shipped(family.name, bb), args.prompt)
    if teaching is not None:
        from neural.train_scorer import train_scorer   # lazy: imports torch

        print(f"training {family.name} from {bb.name} on the teaching set (cached) …", file=sys.stderr)
        scorer = train_scorer(family.name, bb, teaching, seed=args.seed, cache=cache, show_progress=not args.quiet)
        return family.with_prompt(scorer, args.prompt)
    scorer = family.untrained(bb, prompt=args.prompt)
    if scorer is None:
        raise SystemExit(f"error: --metric {args.metric} is a trained metric: pass a saved scorer (--scorer DIR, "
                         "made by python -m neural.train_scorer) or --clip-model teaching (the shipped "
                         "scorers) / tiny (trained here on the teaching set)")
    note = getattr(family, "untrained_note", None)
    if note and (args.clip_pretrained is None or not Path(args.clip_pretrained).is_file()):
        notes.append(note)
    return scorer


def _scores(args, scorer, images, cands: list, refs: list | None, notes: list) -> dict:
    """Per-instance scores ``{score name: (n,) array}``: the reference-free score and, with references, the
    reference-based one (:meth:`neural.family.ScorerFamily.scores`: RefCLIP-S, RefPAC-S: Eq. 2 / Eq. 4;
    RefL-CLIPScore: Li et al., Eq. 4).  A family without one (BRIDGE, SPECS) ignores the references, with a
    note."""
    family = metric_entry(args.metric)[0]
    if refs is not None and not family.reference_name:
        notes.append(f"{family.name} is reference-free (its paper defines no reference-based variant): "
                     "--references were not used")
        refs = None
    return family.scores(scorer, images, cands, refs)


def _identity(scorer, bb) -> dict:
    """The scorer's identity for the summary: the saved scorer's (:func:`neural.saved.scorer_identity`) or
    the scorer and backbone names with the weights id."""
    saved = getattr(bb, "saved", None)
    if saved is not None:
        return saved
    return {"metric": getattr(scorer, "name", type(scorer).__name__), "path": None, "backbone": bb.name,
            "weights_id": bb.weights_id}


def _report(args, result: dict, bb) -> None:
    """Print the averages, the backbone and the notes; write ``--out`` and ``--summary`` (checked up front; a
    failure that remains, e.g. a full disk, is one ``error:`` line after the averages were printed)."""
    for k, v in result["averages"].items():
        print(f"{k}: {v:.4f}")
    print(f"({result['n']} images; backbone {bb.name}, weights {bb.weights_id}, {bb.precision} on {bb.device})")
    for n in result["notes"]:
        print("note:", n)
    t = result["truncated"]
    if t is None:
        print("note: captions longer than the context were not counted (the tokenizer cannot say)", file=sys.stderr)
    elif t["candidates"] or t["references"]:
        print(f"note: {t['candidates']} candidate(s) and {t['references']} reference(s) are longer than the "
              f"{t['context_length']}-token context (prompt included) and were truncated", file=sys.stderr)
    summary = {k: v for k, v in result.items() if k != "per_instance"}
    for option, path, data in (("--out", args.out, result), ("--summary", args.summary, summary)):
        if path is None:
            continue
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(data, indent=2), encoding="utf-8")
        except OSError as exc:
            raise SystemExit(f"error: {option} {path}: cannot write ({exc.strerror or exc})") from None
        print(f"{'per-instance scores' if option == '--out' else 'summary'}: {path}")


def _images(args, ids: list) -> list:
    """Every image read (a missing or damaged one named) before a backbone is loaded or trained; ``--out``,
    ``--summary``, the cache folder and ``--clip-pretrained`` checked too."""
    from corpora.base import CorpusError
    from corpora.images import read_image

    paths = {i: find_image(args.images, i) for i in ids}
    missing = [i for i, p in paths.items() if p is None]
    if missing:
        raise SystemExit(f"error: {len(missing)} image(s) not found in {args.images}, e.g. {missing[:3]} "
                         f"(expected files named <image_id> or <image_id>{IMAGE_EXTS[0]} …)")
    _check_out_option(args, paths.values())
    _check_cache_option(args)
    _check_weights_option(args)
    try:
        return [read_image(paths[i]) for i in ids]
    except CorpusError as exc:
        raise SystemExit(f"error: {exc}") from None


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from corpora.cache import DiskCache

    config = _resolve_metric(args)
    cands, refs, ids = _read_inputs(args)
    images = _images(args, ids)
    cache = DiskCache(args.cache_dir, enabled=not args.no_cache)
    notes: list = []
    if config is not None:
        scorer = _saved_scorer(args, cache)
    else:
        bb, teaching = _backbone(args, cache)
        scorer = _scorer(args, bb, teaching, cache, notes)
    family, ref_based = metric_entry(args.metric)
    bb = family.backbone_of(scorer)   # BRIDGE's frozen CLIP; else the scorer's own
    cand_texts, ref_lists = [cands[i] for i in ids], ([refs[i] for i in ids] if refs else None)
    out = _scores(args, scorer, images, cand_texts, ref_lists, notes)
    key = family.reference_name if ref_based else family.name
    prompt = family.text_prompt(scorer)
    result = {"metric": args.metric, "score": key, "mean": float(np.mean(out[key])), "n": len(ids),
              "averages": {k: float(np.mean(v)) for k, v in out.items()}, "scorer": _identity(scorer, bb),
              "backbone": bb.provenance(), "notes": notes,
              "truncated": _truncation(bb, prompt, cand_texts, ref_lists if len(out) > 1 else None),
              "per_instance": {i: {k: float(v[n]) for k, v in out.items()} for n, i in enumerate(ids)}}
    _report(args, result, bb)
    return 0


def run(argv=None) -> int:
    """:func:`main`'s exit status, or 2 with its one ``error:`` line on stderr for a user mistake
    (:func:`corpora.cli_values.exit_status`)."""
    return exit_status(main, argv)


if __name__ == "__main__":
    sys.exit(run())
