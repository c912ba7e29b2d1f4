"""Train the four trained CLIP-family scorers (PAC-S, L-CLIPScore, BRIDGE, SPECS) once, from the shipped
teaching CLIP, on a teaching corpus drawn from the teaching CLIP's **pretraining** seed range, and save
each with :func:`neural.saved.save_scorer` so that an evaluation can load them instead of training them
inside the run (prototype: the main job does not use them yet).

This is how the papers' scorers are made: PAC-S (Sarto et al., CVPR 2023) and BRIDGE (Sarto et al., ECCV
2024) are trained on COCO, SPECS (Chen et al., 2025) on ShareGPT4V, and all are evaluated zero-shot on
Flickr8k.  Here the training corpus is :func:`corpora.teaching.pretraining_chunk` ``--chunk`` (seed
``PRETRAIN_SEEDS.start + chunk``, never an evaluation seed) re-split 70/15/15 like the main job's default
corpus (:func:`experiments.corpus_stage.load_corpus`); the command checks with
:func:`corpora.teaching.scene_fingerprints` that it shares no scene with the evaluation corpus of seed
``--eval-seed``.  Each scorer is trained with exactly the recipe the main job uses on the teaching CLIP
(:func:`neural.recipes.recipe_for`, family ``auto``) and the main job's PAC-S tuple counts (700 train /
150 dev images).  The folders hold fp32 tensors (:func:`~neural.saved.save_scorer` saves the dtype it
is given); the command prints each file's size and SHA-256.

Usage::

    python -m experiments.train_shipped_scorers --out DIR [--chunk 0] [--teaching-size 2000] [--seed 0]
"""
from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

from corpora.cache import DiskCache
from corpora.teaching import PRETRAIN_SEEDS, make_teaching_set, pretraining_chunk, scene_fingerprints

#: The main job's default teaching-set size (``RunOptions.n_teaching_images`` without ``--quick``).
DEFAULT_SIZE = 2000
#: PAC-S positive tuples: train / dev images, as the main job (``experiments.neural_stage``, not quick).
PACS_TRAIN_IMAGES, PACS_DEV_IMAGES = 700, 150
SCORER_FOLDERS = {"PAC-S": "pacs", "L-CLIPScore": "lclip", "BRIDGE": "bridge", "SPECS": "specs"}

__all__ = ["training_corpus", "train_scorers", "file_digest", "main", "build_parser", "SCORER_FOLDERS"]


def training_corpus(chunk: int = 0, n_images: int = DEFAULT_SIZE, eval_seed: int | None = 0):
    """Chunk ``chunk`` of the teaching CLIP's pretraining stream with ``n_images`` images, split 70/15/15
    (train / dev / test, as :func:`experiments.corpus_stage.load_corpus` splits the default corpus).

    With ``eval_seed`` the evaluation corpus of that seed and size is generated (scenes only) and a
    shared scene raises :class:`RuntimeError`.
    """
    ts = pretraining_chunk(chunk, size=n_images)
    n_train, n_dev = int(round(n_images * 0.7)), int(round(n_images * 0.15))
    ids = list(ts.image_ids)
    corpus = ts.with_splits(train=ids[:n_train], dev=ids[n_train:n_train + n_dev], test=ids[n_train + n_dev:])
    if eval_seed is not None:
        ev = make_teaching_set(n_images=n_images, n_train=n_train, n_dev=n_dev, seed=eval_seed)
        shared = scene_fingerprints(ts) & scene_fingerprints(ev)
        if shared:
            raise RuntimeError(f"training chunk {chunk} shares {len(shared)} scenes with the evaluation corpus "
                               f"of seed {eval_seed}")
    return corpus


def train_scorers(bb, corpus, *, seed: int = 0, cache=None, show_progress: bool = True) -> dict:
    """``{metric: scorer}``: PAC-S, L-CLIPScore, BRIDGE and SPECS trained from backbone ``bb`` on
    ``corpus``'s train split exactly as the main job trains them (recipes :func:`neural.recipes.recipe_for`
    family ``auto``; PAC-S positives :func:`neural.pacs.teaching_tuples`)."""
    from neural.bridge import BRIDGE, BridgeConfig  # lazy: torch-heavy, after the argument check
    from neural.lclip import LCLIPConfig, LCLIPScore, train_lclip_on_corpus
    from neural.pacs import PACScore, finetune_pacs, teaching_tuples
    from neural.recipes import recipe_for
    from neural.specs import SPECSConfig, SPECSScore, train_specs

    out, times = {}, {}
    t = time.perf_counter()
    train = teaching_tuples(corpus, "train", seed=seed, max_images=PACS_TRAIN_IMAGES)
    val = teaching_tuples(corpus, "dev", seed=seed, max_images=PACS_DEV_IMAGES)
    out["PAC-S"] = PACScore(finetune_pacs(bb, train, val, recipe_for("PAC-S", bb, "auto"), cache=cache,
                                          show_progress=show_progress))
    times["PAC-S"] = time.perf_counter() - t
    t = time.perf_counter()
    cfg = LCLIPConfig.from_recipe(recipe_for("L-CLIPScore", bb, "auto"), seed=seed)
    out["L-CLIPScore"] = LCLIPScore(train_lclip_on_corpus(bb, corpus, "train", cfg, cache=cache,
                                                          show_progress=show_progress))
    times["L-CLIPScore"] = time.perf_counter() - t
    t = time.perf_counter()
    bcfg = BridgeConfig.from_recipe(recipe_for("BRIDGE", bb, "auto"), seed=seed)
    out["BRIDGE"] = BRIDGE(bb, bcfg).fit(corpus, "train", cache=cache, show_progress=show_progress)
    times["BRIDGE"] = time.perf_counter() - t
    t = time.perf_counter()
    scfg = SPECSConfig.from_recipe(recipe_for("SPECS", bb, "auto"), seed=seed)
    out["SPECS"] = SPECSScore(train_specs(bb, corpus, "train", scfg, cache=cache, show_progress=show_progress))
    times["SPECS"] = time.perf_counter() - t
    for k, v in times.items():
        print(f"  trained {k:<12} {v:6.1f} s", flush=True)
    return out


def file_digest(path: Path) -> str:
    """SHA-256 (hex) of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_parser() -> argparse.ArgumentParser:
    """The command's options."""
    ap = argparse.ArgumentParser(prog="python -m experiments.train_shipped_scorers",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="output folder (one sub-folder per scorer)")
    ap.add_argument("--chunk", type=int, default=0,
                    help="pretraining-stream chunk of the training corpus: seed PRETRAIN_SEEDS.start + CHUNK "
                         "(default %(default)s)")
    ap.add_argument("--teaching-size", type=int, default=DEFAULT_SIZE,
                    help="images of the training corpus, split 70/15/15 (default %(default)s)")
    ap.add_argument("--seed", type=int, default=0, help="training seed (default %(default)s, as the main job)")
    ap.add_argument("--eval-seed", type=int, default=0,
                    help="evaluation corpus checked for shared scenes (default %(default)s)")
    ap.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="feature cache (default: none)")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from neural.saved import save_scorer  # lazy: torch-heavy
    from neural.teaching_clip import load_teaching_clip

    t0 = time.perf_counter()
    print(f"training corpus: pretraining chunk {args.chunk} (seed {PRETRAIN_SEEDS.start + args.chunk}), "
          f"{args.teaching_size} images; checking scenes against evaluation seed {args.eval_seed}", flush=True)
    corpus = training_corpus(args.chunk, args.teaching_size, args.eval_seed)
    bb = load_teaching_clip(device=args.device, show_progress=not args.quiet)
    cache = DiskCache(args.cache_dir) if args.cache_dir else None
    scorers = train_scorers(bb, corpus, seed=args.seed, cache=cache, show_progress=not args.quiet)
    for metric, sc in scorers.items():
        folder = save_scorer(sc, args.out / SCORER_FOLDERS[metric])
        for f in sorted(folder.iterdir()):
            print(f"  {metric:<12} {f.name:<20} {f.stat().st_size:>10,d} B  sha256 {file_digest(f)}", flush=True)
    print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
