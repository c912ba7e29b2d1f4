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

from corpora.teaching import PRETRAIN_SEEDS

DEFAULTS = {"n_pairs": 400_000, "batch_size": 128, "lr": 1e-3, "warmup": 150, "seed": 0, "eval_every": 200,
            "eval_images": 300, "checkpoint_every": 100, "chunk_size": 1000, "prompt_rate": 0.5}


def build_parser() -> argparse.ArgumentParser:
    d = DEFAULTS
    ap = argparse.ArgumentParser(
        prog="python -m experiments.pretrain_teaching_clip",
        description="Pretrain the teaching CLIP (itr-teaching-clip, docs/teaching_clip.md) on generated "
                    f"teaching-world pairs from seeds {PRETRAIN_SEEDS.start} and up (never an evaluation "
                    "seed), checkpointing and resuming in --out; --export writes the shipped fp16 weights.")
    ap.add_argument("--out", required=True, type=Path,
                    help="run directory: checkpoint.safetensors / checkpoint.json (resumable) and log.json")
    ap.add_argument("--n-pairs", type=int, default=d["n_pairs"],
                    help="stream size: (image, caption) pairs to train on, rounded up to whole chunks of "
                         "--chunk-size images x 5 captions (default %(default)s)")
    ap.add_argument("--steps", type=int, default=None,
                    help="optimiser steps (overrides --n-pairs; the stream continues into further chunks)")
    ap.add_argument("--batch-size", type=int, default=d["batch_size"],
                    help="images per step, each with one of its captions (default %(default)s)")
    ap.add_argument("--lr", type=float, default=d["lr"], help="peak AdamW learning rate (default %(default)s)")
    ap.add_argument("--warmup", type=int, default=d["warmup"], help="linear warm-up steps before the cosine "
                    "decay (default %(default)s)")
    ap.add_argument("--seed", type=int, default=d["seed"],
                    help="seeds the initialisation, the pass order and caption choice (the stream's images "
                         "come from the fixed pretraining seed range) (default %(default)s)")
    ap.add_argument("--chunk-size", type=int, default=d["chunk_size"],
                    help="images per generated chunk, each chunk used for 5 passes (default %(default)s)")
    ap.add_argument("--prompt-rate", type=float, default=d["prompt_rate"],
                    help="share of batches whose captions start with 'A photo depicts' (default %(default)s)")
    ap.add_argument("--eval-every", type=int, default=d["eval_every"],
                    help="steps between zero-shot retrieval checks on the held-out pool; 0: none "
                         "(default %(default)s)")
    ap.add_argument("--eval-images", type=int, default=d["eval_images"],
                    help="images of the held-out pool (default %(default)s, as the default test pool)")
    ap.add_argument("--checkpoint-every", type=int, default=d["checkpoint_every"],
                    help="steps between checkpoints (default %(default)s)")
    ap.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                    help="continue from the checkpoint in --out (default); --no-resume refuses an existing one")
    ap.add_argument("--stop-at", type=int, default=None,
                    help="stop after this step (checkpointed; rerun to continue)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (default %(default)s)")
    ap.add_argument("--export", type=Path, default=None,
                    help="after the last step, write fp16 weights here plus <name>.json (SHA-256, held-out "
                         "figures); neural/weights/teaching_clip.safetensors is the shipped file")
    ap.add_argument("--card-pools", default="300,60",
                    help="held-out pool sizes whose figures --export records (the model card's; the test "
                         "suite recomputes the smallest) (default %(default)s)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    # torch only once the options are known to be valid (--help stays fast)
    from neural.teaching_clip import PretrainConfig, card_table, export_weights, pretrain  # noqa: PLC0415

    cfg = PretrainConfig(n_pairs=args.n_pairs, steps=args.steps, batch_size=args.batch_size, lr=args.lr,
                         warmup=args.warmup, seed=args.seed, chunk_size=args.chunk_size,
                         prompt_rate=args.prompt_rate, eval_every=args.eval_every,
                         eval_images=args.eval_images, checkpoint_every=args.checkpoint_every)
    print(f"teaching CLIP: {cfg.total_steps} steps x {cfg.batch_size} = "
          f"{cfg.stream.pairs_until(cfg.total_steps)} pairs, run directory {args.out}", file=sys.stderr)
    model, log = pretrain(args.out, cfg, resume=args.resume, num_threads=args.threads,
                          show_progress=not args.quiet, stop_at=args.stop_at)
    done = log["loss"][-1][0] + 1 if log["loss"] else 0
    if log["eval"]:
        print(json.dumps(log["eval"][-1], indent=1), file=sys.stderr)
    if args.export is not None:
        if done < cfg.total_steps:
            print(f"not exporting: stopped at step {done} of {cfg.total_steps}", file=sys.stderr)
            return 1
        pools = tuple(int(n) for n in args.card_pools.split(",") if n.strip())
        rec = export_weights(model, args.export, cfg, done, log=log, pools=pools, show_progress=not args.quiet)
        print(f"wrote {args.export} ({rec['bytes']} bytes, sha256 {rec['sha256']})", file=sys.stderr)
        print("model card rows (docs/teaching_clip.md):\n" + card_table(rec), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
