"""Pretrain the teaching CLIP on the generated teaching-world stream and export the shipped weights.

::

    python -m experiments.pretrain_teaching_clip --out runs/teaching_clip \\
        --export neural/weights/teaching_clip.safetensors

Runs the recipe of :class:`neural.teaching_clip.PretrainConfig` (model card: ``docs/teaching_clip.md``)
with a progress bar, a checkpoint every ``--checkpoint-every`` steps in ``--out`` (rerunning the same
command resumes from it and reproduces the uninterrupted run) and ``--out/log.json`` (loss per step,
zero-shot R@1/5/10 of both tasks on a held-out generated pool every ``--eval-every`` steps).  With
``--export`` the final weights are written in fp16 with their record (SHA-256, held-out figures) — the
files the package ships.  Tens of minutes on two CPU cores: run it in the background
(``nohup … > pretrain.log 2>&1 &``).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from corpora.cli_values import MAX_TEACHING_SIZE, exit_status, float_in, int_in, seed_value
from corpora.paths import OutputPathError, check_output_path
from corpora.teaching import PRETRAIN_SEEDS

DEFAULTS = {"n_pairs": 400_000, "batch_size": 128, "lr": 1e-3, "warmup": 150, "seed": 0, "eval_every": 200,
            "eval_images": 300, "checkpoint_every": 100, "chunk_size": 1000, "prompt_rate": 0.5}
#: Documented maxima of the sizes (checked when the command line is read): the stream's pairs and steps
#: (10^9 pairs is 2,500 times the shipped recipe's), a batch, a chunk of generated images.
MAX_PAIRS, MAX_STEPS, MAX_BATCH, MAX_CHUNK = 10 ** 9, 10 ** 7, 4096, 100_000


def build_parser() -> argparse.ArgumentParser:
    d = DEFAULTS
    ap = argparse.ArgumentParser(
        prog="python -m experiments.pretrain_teaching_clip",
        description="Pretrain the teaching CLIP (itr-teaching-clip, docs/teaching_clip.md) on generated "
                    f"teaching-world pairs from seeds {PRETRAIN_SEEDS.start} and up (never an evaluation "
                    "seed), checkpointing and resuming in --out; --export writes the shipped fp16 weights.")
    ap.add_argument("--out", required=True, type=Path,
                    help="run directory: checkpoint.safetensors / checkpoint.json (resumable) and log.json")
    ap.add_argument("--n-pairs", type=int_in(1, MAX_PAIRS), default=d["n_pairs"],
                    help="stream size: (image, caption) pairs to train on, rounded up to whole chunks of "
                         f"--chunk-size images x 5 captions, 1 to {MAX_PAIRS:,} (default %(default)s)")
    ap.add_argument("--steps", type=int_in(1, MAX_STEPS), default=None,
                    help=f"optimiser steps, 1 to {MAX_STEPS:,} (overrides --n-pairs; the stream continues into "
                         "further chunks)")
    ap.add_argument("--batch-size", type=int_in(1, MAX_BATCH), default=d["batch_size"],
                    help=f"images per step, each with one of its captions, 1 to {MAX_BATCH} (default %(default)s)")
    ap.add_argument("--lr", type=float_in(0.0, 1.0, low_open=True), default=d["lr"],
                    help="peak AdamW learning rate, in (0, 1] (default %(default)s)")
    ap.add_argument("--warmup", type=int_in(0, MAX_STEPS), default=d["warmup"],
                    help="linear warm-up steps before the cosine decay, ≥ 0 (default %(default)s)")
    ap.add_argument("--seed", type=seed_value, default=d["seed"],
                    help="seeds the initialisation, the pass order and caption choice (the stream's images "
                         "come from the fixed pretraining seed range), 0 ≤ SEED < 2^31 (default %(default)s)")
    ap.add_argument("--chunk-size", type=int_in(1, MAX_CHUNK), default=d["chunk_size"],
                    help=f"images per generated chunk, each chunk used for 5 passes, 1 to {MAX_CHUNK:,} "
                         "(default %(default)s)")
    ap.add_argument("--prompt-rate", type=float_in(0.0, 1.0), default=d["prompt_rate"],
                    help="share of batches whose captions start with 'A photo depicts', in [0, 1] "
                         "(default %(default)s)")
    ap.add_argument("--eval-every", type=int_in(0, MAX_STEPS), default=d["eval_every"],
                    help="steps between zero-shot retrieval checks on the held-out pool; 0: none "
                         "(default %(default)s)")
    ap.add_argument("--eval-images", type=int_in(1, MAX_TEACHING_SIZE), default=d["eval_images"],
                    help=f"images of the held-out pool, 1 to {MAX_TEACHING_SIZE:,} (default %(default)s, as "
                         "the default test pool)")
    ap.add_argument("--checkpoint-every", type=int_in(1, MAX_STEPS), default=d["checkpoint_every"],
                    help="steps between checkpoints, ≥ 1 (default %(default)s)")
    ap.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                    help="continue from the checkpoint in --out (default); --no-resume refuses an existing one")
    ap.add_argument("--stop-at", type=int_in(1, MAX_STEPS), default=None,
                    help="stop after this step (checkpointed; rerun to continue)")
    ap.add_argument("--threads", type=int_in(1, 1024), default=2, help="torch CPU threads (default %(default)s)")
    ap.add_argument("--export", type=Path, default=None,
                    help="after the last step, write fp16 weights here (a .safetensors name) plus <name>.json "
                         "(SHA-256, held-out figures); neural/weights/teaching_clip.safetensors is the shipped "
                         "file. Refused up front if it is one of the run's own files in --out, or if either "
                         "file exists and is not an earlier export (an export replaces an earlier one)")
    ap.add_argument("--card-pools", default="300,60",
                    help="held-out pool sizes whose figures --export records (the model card's; the test "
                         "suite recomputes the smallest) (default %(default)s)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def card_pools(text: str) -> tuple[int, ...]:
    """``--card-pools``: comma-separated pool sizes, each 1 to the largest teaching set."""
    try:
        pools = tuple(int(n) for n in text.split(",") if n.strip())
    except ValueError:
        raise SystemExit(f"error: --card-pools {text!r}: expected comma-separated whole numbers, e.g. 300,60") from None
    if not pools or not all(1 <= n <= MAX_TEACHING_SIZE for n in pools):
        raise SystemExit(f"error: --card-pools {text!r}: give one or more pool sizes from 1 to {MAX_TEACHING_SIZE:,}")
    return pools


def _is_export_record(path: Path, weights: Path) -> bool:
    """Whether ``path`` is the record an export of ``weights`` wrote (:func:`neural.teaching_clip.export_weights`)."""
    try:
        rec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(rec, dict) and rec.get("file") == weights.name and "sha256" in rec and "rebuild_command" in rec


def check_paths(out: Path, export: Path | None, run_files, record_of) -> None:
    """Refuse, before any training, a ``--out`` that is a file or cannot be written, and an ``--export``
    that would destroy something: one of the run's own files (the resumable checkpoint), a name whose
    record ``<name>.json`` is not a ``.safetensors`` sibling, or an existing weights file or record that
    is not an earlier export.  Raises ``SystemExit("error: …")`` naming the option."""
    try:
        check_output_path("--out", out, folder=True)
    except OutputPathError as exc:
        raise SystemExit(f"error: {exc}") from None
    if export is None:
        return
    if export.suffix != ".safetensors":
        raise SystemExit(f"error: --export {export}: give a .safetensors file name (its record is written "
                         "beside it as <name>.json)")
    record = record_of(export)
    own = [("--out", out / name) for name in run_files]
    for path in (export, record):
        try:
            check_output_path("--export", path, own)
        except OutputPathError as exc:
            raise SystemExit(f"error: {exc}") from None
    earlier = _is_export_record(record, export)
    for path in (export, record):
        if path.exists() and not earlier:
            raise SystemExit(f"error: --export {export}: {path} exists and is not an earlier export of the "
                             f"teaching CLIP (no matching {record.name}); move it or choose another name")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    pools = card_pools(args.card_pools)
    # torch only once the options are known to be valid (--help stays fast)
    from safetensors import SafetensorError  # noqa: PLC0415
    from neural.checkpoints import WeightsError  # noqa: PLC0415
    from neural.teaching_clip import (  # noqa: PLC0415
        RUN_FILES, PretrainConfig, card_table, export_weights, pretrain, weights_record_path)

    check_paths(args.out, args.export, RUN_FILES, weights_record_path)

    cfg = PretrainConfig(n_pairs=args.n_pairs, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                         warmup=args.warmup, seed=args.seed, chunk_size=args.chunk_size,
                         prompt_rate=args.prompt_rate, eval_every=args.eval_every,
                         eval_images=args.eval_images, checkpoint_every=args.checkpoint_every)
    print(f"teaching CLIP: {cfg.total_steps} steps x {cfg.batch_size} = "
          f"{cfg.stream.pairs_until(cfg.total_steps)} pairs, run directory {args.out}", file=sys.stderr)
    try:
        model, log = pretrain(args.out, cfg, resume=args.resume, num_threads=args.threads,
                              show_progress=not args.quiet, stop_at=args.stop_at)
    except FileExistsError as exc:   # --no-resume on an existing run
        raise SystemExit(f"error: --no-resume: {exc}") from None
    except (ValueError, WeightsError, SafetensorError) as exc:   # another recipe, a damaged checkpoint
        raise SystemExit(f"error: --out {args.out}: cannot resume: {exc}") from None
    except OSError as exc:   # a full disk or a folder made read-only during the run
        raise SystemExit(f"error: --out {args.out}: cannot write the run ({exc.strerror or exc}: "
                         f"{exc.filename or args.out})") from None
    done = log["loss"][-1][0] + 1 if log["loss"] else 0
    if log["eval"]:
        print(json.dumps(log["eval"][-1], indent=1), file=sys.stderr)
    if args.export is not None:
        if done < cfg.total_steps:
            print(f"not exporting: stopped at step {done} of {cfg.total_steps}", file=sys.stderr)
            return 1
        try:
            rec = export_weights(model, args.export, cfg, done, log=log, pools=pools, show_progress=not args.quiet)
        except OSError as exc:
            raise SystemExit(f"error: --export {args.export}: cannot write ({exc.strerror or exc}: "
                             f"{exc.filename or args.export})") from None
        print(f"wrote {args.export} ({rec['bytes']} bytes, sha256 {rec['sha256']})", file=sys.stderr)
        print("model card rows (docs/teaching_clip.md):\n" + card_table(rec), file=sys.stderr)
    return 0


def run(argv=None) -> int:
    """:func:`main`'s exit status, or 2 with its one ``error:`` line on stderr for a user mistake
    (:func:`corpora.cli_values.exit_status`)."""
    return exit_status(main, argv)


if __name__ == "__main__":
    sys.exit(run())
