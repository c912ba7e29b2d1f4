"""``python -m neural.score`` — a clipscore-like command line for CLIP-S, RefCLIP-S, PAC-S and RefPAC-S.

Examples
--------
Score candidate captions for a folder of images with OpenAI ViT-B/32 (downloads on a networked
machine)::

    python -m neural.score --candidates cands.json --images imgs/ --metric clip-s

With references, from a local weights file (any format of :mod:`neural.checkpoints`)::

    python -m neural.score --candidates cands.json --references refs.json --images imgs/ \\
        --metric refpac-s --clip-model ViT-B-32 --clip-pretrained checkpoints/clip_ViT-B-32.pth

Offline, without any weights: ``--clip-model tiny`` trains (once, then cached) the small CLIP on the
built-in teaching set; for ``pac-s`` it is then fine-tuned with positive-augmented contrastive learning.

``cands.json``: ``{image_id: caption}``; ``refs.json``: ``{image_id: [reference, ...]}``; the image of
``image_id`` is ``DIR/image_id`` or ``DIR/image_id.<jpg|jpeg|png|…>``.  Empty (or whitespace-only)
candidates and references are refused; captions longer than the context (prompt included) are truncated,
and how many were is reported (stderr note, ``"truncated"`` in the ``--out`` JSON).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

METRICS = ("clip-s", "refclip-s", "pac-s", "refpac-s")
IMAGE_EXTS = (".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".gif")


def _read_json(path: Path, what: str, option: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SystemExit(f"error: {option} {path}: file not found") from None
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


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: …)`` only for options whose default is a value (``None`` defaults are explained
    in the help text itself)."""

    def _get_help_string(self, action):
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m neural.score", description=__doc__.split("\n\n")[0],
                                 formatter_class=_DefaultsFormatter)
    ap.add_argument("--candidates", required=True, type=Path, help="JSON {image_id: candidate caption}")
    ap.add_argument("--images", required=True, type=Path, help="folder with the images (file name = image id)")
    ap.add_argument("--references", type=Path, default=None,
                    help="JSON {image_id: [reference captions]} (needed for refclip-s / refpac-s)")
    ap.add_argument("--metric", choices=METRICS, default="clip-s", help="score to compute")
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
                    help="auto: CUDA when available, else CPU")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "fp16"),
                    help="fp16 only on CUDA, not with --clip-model tiny")
    ap.add_argument("--prompt", default="A photo depicts", help="text prefix of candidates and references")
    ap.add_argument("--seed", type=int, default=0, help="seed of the tiny CLIP / PAC-S fine-tuning")
    ap.add_argument("--cache-dir", default=None, help="disk cache (default $ITR_CACHE_DIR or ~/.cache/…)")
    ap.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    ap.add_argument("--out", type=Path, default=None,
                    help="write per-instance scores as JSON here (checked before any model is loaded: an "
                         "input file, a folder or a path under a file is refused)")
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
            raise SystemExit(f"error: {exc}") from None
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
        raise SystemExit(f"error: {exc}") from None              # unknown model or tag, no CUDA


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
    if args.metric.startswith("ref") and refs is None:
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


def _same_file(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` name one file (same resolved path, or a hard / symbolic link to it)."""
    a, b = Path(a).expanduser(), Path(b).expanduser()
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:   # one of them does not exist
        return False


def _check_out_option(args, image_paths) -> None:
    """Refuse an unusable ``--out`` up front, before any image is read or model loaded, as one ``error:``
    line (exit 2): an input file (candidates, references, an image), a folder, a path under a file, or a
    place that cannot be written — instead of a traceback after the scoring, with the scores lost."""
    if args.out is None:
        return
    out = args.out.expanduser()
    inputs = [("--candidates", args.candidates), ("--references", args.references)]
    inputs += [("--images", q) for q in image_paths]
    for option, given in inputs:
        if given is not None and _same_file(out, given):
            raise SystemExit(f"error: --out {args.out} is the {option} file {given}: it would be overwritten; "
                             "write the scores to another file")
    if out.is_dir():
        raise SystemExit(f"error: --out {args.out} is a folder; give a file name (e.g. {args.out / 'scores.json'})")
    ancestor = out.parent
    while not ancestor.exists():   # the folders that writing will create
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise SystemExit(f"error: --out {args.out}: {ancestor} is a file, not a folder")
    target = out if out.exists() else ancestor
    if not os.access(target, os.W_OK | (0 if target is out else os.X_OK)):
        raise SystemExit(f"error: --out {args.out}: {target} is not writable")


def _check_weights_option(args) -> None:
    """A ``--clip-pretrained`` file that is not a weights file is refused up front with the main job's check
    and message (:func:`neural.checkpoints.check_weights_file`).  Not for the tiny CLIP (the option is
    refused in :func:`_backbone`) nor the teaching CLIP (its loader checks the file's SHA-256 and names the
    rebuild command)."""
    from neural.checkpoints import NotWeightsFileError, check_weights_file   # lazy: imports torch (--help and option errors stay instant)
    from neural.names import is_teaching_model, is_tiny_model

    if args.clip_pretrained is None or is_tiny_model(args.clip_model) or is_teaching_model(args.clip_model):
        return
    p = Path(args.clip_pretrained).expanduser()
    if p.is_file():
        try:
            check_weights_file(p)
        except NotWeightsFileError as exc:
            raise SystemExit(f"error: --clip-pretrained {exc}") from None


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


def _scorer(args, bb, teaching, cache, notes: list):
    """The CLIP-S or PAC-S scorer of ``--metric`` (PAC-S: fine-tunes the tiny / teaching CLIP first)."""
    if args.metric.startswith(("pac", "refpac")):
        from neural.pacs import PACScore, finetune_pacs, teaching_tuples

        if teaching is not None:
            print(f"PAC-S fine-tuning of {bb.name} on teaching-set positives (cached) …", file=sys.stderr)
            bb = finetune_pacs(bb, teaching_tuples(teaching, "train", seed=args.seed),
                               teaching_tuples(teaching, "dev", seed=args.seed), cache=cache,
                               show_progress=not args.quiet)
        elif args.clip_pretrained is None or not Path(args.clip_pretrained).is_file():
            notes.append("PAC-S formula (w = 2.0) on a backbone that was not PAC-S fine-tuned: pass the "
                         "PAC-S checkpoint with --clip-pretrained for the published metric")
        return PACScore(bb, prompt=args.prompt or None)
    from neural.clipscore import CLIPScore

    return CLIPScore(bb, prompt=args.prompt or None)


def _report(args, result: dict, bb) -> None:
    """Print the averages, the backbone and the notes; write ``--out`` (checked up front; a failure that
    remains, e.g. a full disk, is one ``error:`` line after the averages were printed)."""
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
    if args.out:
        try:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=2), encoding="utf-8")
        except OSError as exc:
            raise SystemExit(f"error: --out {args.out}: cannot write ({exc.strerror or exc})") from None
        print(f"per-instance scores: {args.out}")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from corpora.base import CorpusError
    from corpora.cache import DiskCache
    from corpora.images import read_image

    cands, refs, ids = _read_inputs(args)
    paths = {i: find_image(args.images, i) for i in ids}
    missing = [i for i, p in paths.items() if p is None]
    if missing:
        raise SystemExit(f"error: {len(missing)} image(s) not found in {args.images}, e.g. {missing[:3]} "
                         f"(expected files named <image_id> or <image_id>{IMAGE_EXTS[0]} …)")
    _check_out_option(args, paths.values())
    _check_cache_option(args)
    _check_weights_option(args)
    try:  # every image is read (and a damaged one named) before a backbone is loaded or trained
        images = [read_image(paths[i]) for i in ids]
    except CorpusError as exc:
        raise SystemExit(f"error: {exc}") from None
    cache = DiskCache(args.cache_dir, enabled=not args.no_cache)
    bb, teaching = _backbone(args, cache)
    notes = []
    scorer = _scorer(args, bb, teaching, cache, notes)
    bb = scorer.backbone   # PAC-S on the tiny / teaching CLIP: the fine-tuned one
    cand_texts, ref_lists = [cands[i] for i in ids], ([refs[i] for i in ids] if refs else None)
    out = scorer.compute(images, cand_texts, ref_lists)
    base = scorer.base_name
    keys = [base] + (["Ref" + base] if refs is not None else [])
    result = {"metric": args.metric, "n": len(ids), "averages": {k: float(np.mean(out[k])) for k in keys},
              "backbone": bb.provenance(), "notes": notes,
              "truncated": _truncation(bb, scorer.prompt, cand_texts, ref_lists),
              "per_instance": {i: {k: float(out[k][n]) for k in keys} for n, i in enumerate(ids)}}
    _report(args, result, bb)
    return 0


def run(argv=None) -> int:
    """The command line's exit status: :func:`main`'s, or 2 for a user mistake, printed as its one
    ``error:`` line on stderr (``main`` raises ``SystemExit("error: …")``, which Python would end with 1;
    2 is argparse's status for its own option errors and the main job's)."""
    try:
        return main(argv)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(run())
