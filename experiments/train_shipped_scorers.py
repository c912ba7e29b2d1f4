"""Train the shipped fine-tuned scorers — PAC-S, L-CLIPScore, BRIDGE and SPECS — once from the shipped
teaching CLIP and write them with their manifest (:mod:`neural.shipped_scorers`; model card
``docs/shipped_scorers.md``).

The training data is :func:`corpora.teaching.scorer_training_set` ``--index`` (2,000 images split
1,400 / 300 / 300 like the main job's default corpus, from :data:`corpora.teaching.SCORER_TRAINING_SEEDS`:
neither the teaching CLIP's pretraining stream nor any evaluation corpus uses those seeds, which the
command checks on the scene fingerprints of the evaluation corpus of ``--eval-seed``).  Each scorer is
trained exactly as the main job trains it in-run (``--train-scorers``): the recipe
:func:`neural.recipes.recipe_for` picks on the teaching CLIP (``auto``: the small recipes), PAC-S on 700
train / 150 dev images' positive tuples.  The scorers are saved in fp16 (:func:`neural.saved.save_scorer`),
each file at most :data:`neural.shipped_scorers.MAX_FILE_BYTES`, with their figures on the held-out card
pool (:func:`neural.shipped_scorers.heldout_figures`) in ``manifest.json``.

L-CLIPScore is the exception to the training set: on the teaching CLIP its recipe (``lclip-teaching``)
distils the student on the teaching CLIP's own pretraining stream (:mod:`neural.lclip_stream`), as the
paper distils on large image–text data; its manifest entry says so (``data``).  ``--only METRIC``
retrains the named scorers and keeps the others' files and entries as they are (their files checked
against the manifest first), e.g. after one recipe changed; each entry records the machine and versions
it was built with (``built``).

Usage::

    python -m experiments.train_shipped_scorers --out neural/weights/scorers [--index 0] [--seed 0]
    python -m experiments.train_shipped_scorers --out neural/weights/scorers --only L-CLIPScore
"""
from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from corpora.cache import DiskCache
from corpora.cli_values import int_in, seed_value
from corpora.jsondata import write_json_atomic
from corpora.paths import OutputPathError, check_output_path
from corpora.teaching import (
    GENERATOR_VERSION,
    SCORER_TRAINING_SEEDS,
    make_teaching_set,
    scene_fingerprints,
    scorer_training_set,
)
from neural.registry import shipped_folders

#: Sizes of the training set (as the main job's default corpus: ``make_teaching_set()``).
N_IMAGES, N_TRAIN, N_DEV = 2000, 1400, 300

__all__ = ["training_set", "train_scorers", "write_shipped", "main", "build_parser"]


def training_set(index: int = 0, eval_seed: int | None = 0, *, n_images: int | None = None,
                 n_train: int | None = None, n_dev: int | None = None):
    """:func:`corpora.teaching.scorer_training_set` ``index`` (sizes default to :data:`N_IMAGES`,
    :data:`N_TRAIN`, :data:`N_DEV`); with ``eval_seed`` the evaluation corpus of that seed (the main job's
    default sizes) is generated and a shared scene raises :class:`RuntimeError`."""
    ts = scorer_training_set(index, N_IMAGES if n_images is None else n_images,
                             N_TRAIN if n_train is None else n_train, N_DEV if n_dev is None else n_dev)
    if eval_seed is not None:
        shared = scene_fingerprints(ts) & scene_fingerprints(make_teaching_set(seed=eval_seed))
        if shared:
            raise RuntimeError(f"scorer training set {index} shares {len(shared)} scenes with the evaluation "
                               f"corpus of seed {eval_seed}")
    return ts


def train_scorers(bb, corpus, *, seed: int = 0, cache=None, show_progress: bool = True,
                  only: Sequence[str] | None = None) -> tuple[dict, dict]:
    """``({metric: scorer}, {metric: seconds})``: every family with a shipped copy (PAC-S, L-CLIPScore,
    BRIDGE, SPECS; ``only``: those named) trained from backbone ``bb`` on ``corpus``'s train split (PAC-S
    validated on its dev split) exactly as the main job trains them in-run
    (:func:`neural.train_scorer.train_scorer`, recipes ``auto``)."""
    from neural.train_scorer import train_scorer  # lazy: torch-heavy, after the argument check

    scorers, seconds = {}, {}
    for metric in shipped_folders():   # every family with a shipped copy
        if only is not None and metric not in only:
            continue
        t = time.perf_counter()
        scorers[metric] = train_scorer(metric, bb, corpus, seed=seed, cache=cache, show_progress=show_progress)
        seconds[metric] = round(time.perf_counter() - t, 1)
        print(f"  trained {metric:<12} {seconds[metric]:6.1f} s", flush=True)
    return scorers, seconds


def built_on() -> dict:
    """The machine and versions a scorer is built with (each manifest entry's ``built``)."""
    import open_clip  # lazy: torch-heavy
    import torch

    from neural.teaching_clip import cpu_name

    return {"hardware": {"cpu": cpu_name(), "threads": torch.get_num_threads(), "platform": platform.platform()},
            "versions": {"torch": torch.__version__, "open_clip": getattr(open_clip, "__version__", "unknown"),
                         "python": platform.python_version()}}


def kept_entries(out: Path, only: Sequence[str], index: int) -> dict:
    """``--only``: the manifest entries in ``out`` of the scorers not retrained, after checking that the
    folder's manifest is complete, of the package's teaching CLIP and training set ``index``, and that
    their files are the ones it records
    (:func:`neural.shipped_scorers.verified_folder`); an entry without its own ``built`` record takes the
    manifest's former top-level one.  Raises :class:`neural.shipped_scorers.ShippedScorerError` or
    ``ValueError`` naming the problem."""
    from neural.names import teaching_weights_sha256
    from neural.shipped_scorers import read_manifest, verified_folder

    manifest = read_manifest(out)
    if (manifest.get("parent") or {}).get("file_sha256") != teaching_weights_sha256(None):
        raise ValueError(f"{out / 'manifest.json'}: its scorers were trained from another teaching CLIP than the "
                         f"package's; retrain them all (leave out --only)")
    if (manifest.get("training_set") or {}).get("index") != index:
        raise ValueError(f"{out / 'manifest.json'}: built from training set "
                         f"{(manifest.get('training_set') or {}).get('index')}, not --index {index}")
    kept = {}
    for metric, entry in manifest["scorers"].items():
        if metric in only:
            continue
        verified_folder(metric, out, manifest)
        built = entry.get("built") or {"hardware": manifest.get("hardware"), "versions": manifest.get("versions")}
        kept[metric] = {**entry, "built": built}
    return kept


def write_shipped(scorers: dict, seconds: dict, out: Path, *, parent, corpus, index: int, seed: int,
                  kept: Mapping[str, dict] | None = None) -> dict:
    """Save each scorer (fp16) under ``out`` and write ``manifest.json`` (files' SHA-256 and sizes, the
    training set, the parent, per scorer its recipe, training data, the machine it was built on and its
    held-out card figures as loaded back from its files on ``parent``); ``kept``: entries of scorers not
    retrained (``--only``), written as they are.  Returns the manifest."""
    from neural.checkpoints import file_sha256
    from neural.names import teaching_weights_sha256
    from neural.registry import recipe_for
    from neural.saved import load_scorer, save_scorer
    from neural.shipped_scorers import (
        CARD_POOL_IMAGES,
        MANIFEST_FORMAT,
        MANIFEST_NAME,
        MANIFEST_VERSION,
        MAX_FILE_BYTES,
        REBUILD_COMMAND,
        heldout_figures,
    )
    entries = dict(kept or {})
    built = built_on()
    for metric, scorer in scorers.items():
        folder = save_scorer(scorer, out / shipped_folders()[metric], dtype="float16")
        files = {f.name: {"bytes": f.stat().st_size, "sha256": file_sha256(f)} for f in sorted(folder.iterdir())}
        for name, rec in files.items():
            print(f"  {metric:<12} {name:<20} {rec['bytes']:>10,d} B  sha256 {rec['sha256']}", flush=True)
            if rec["bytes"] > MAX_FILE_BYTES:
                raise RuntimeError(f"{folder / name}: {rec['bytes']} bytes, over the {MAX_FILE_BYTES}-byte limit")
        recipe = recipe_for(metric, parent, "auto")
        data = {"source": recipe.data}
        if recipe.data == "pretraining-stream":   # the stream's description, as the saved scorer records it
            data["stream"] = ((getattr(scorer.backbone, "training", None) or {}).get("data") or {}).get("description")
        entries[metric] = {"folder": shipped_folders()[metric], "files": files, "train_seconds": seconds.get(metric),
                           "recipe": recipe.name,
                           "data": data,
                           "built": built,
                           "heldout": heldout_figures(load_scorer(folder, parent), metric, CARD_POOL_IMAGES)}
    manifest = {
        "format": MANIFEST_FORMAT, "version": MANIFEST_VERSION, "rebuild_command": REBUILD_COMMAND,
        "training_set": {"function": "corpora.teaching.scorer_training_set", "index": index,
                         "seed": SCORER_TRAINING_SEEDS.start + index, "generator_version": GENERATOR_VERSION,
                         "n_images": len(corpus.image_ids), "splits": {k: len(v) for k, v in corpus.splits.items()},
                         "fingerprint": corpus.fingerprint},
        "parent": {"name": "teaching-clip", "file_sha256": teaching_weights_sha256(None)},
        "training_seed": seed, "recipes": "neural.registry.recipe_for(metric, teaching CLIP, 'auto')",
        "storage_dtype": "float16", "heldout_pool": {"function": "corpora.teaching.heldout_pool_set",
                                                     "images": CARD_POOL_IMAGES, "index": 0},
        "scorers": {m: entries[m] for m in shipped_folders() if m in entries},
    }
    write_json_atomic(out / MANIFEST_NAME, manifest)
    return manifest


def build_parser() -> argparse.ArgumentParser:
    """The command's options."""
    ap = argparse.ArgumentParser(prog="python -m experiments.train_shipped_scorers",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path,
                    help="output folder: one sub-folder per scorer and manifest.json (the package's folder "
                         "is neural/weights/scorers)")
    ap.add_argument("--index", type=int_in(0, len(SCORER_TRAINING_SEEDS) - 1), default=0,
                    help="training set corpora.teaching.scorer_training_set(INDEX): seed "
                         "SCORER_TRAINING_SEEDS.start + INDEX (default %(default)s)")
    ap.add_argument("--seed", type=seed_value, default=0,
                    help="training seed, 0 ≤ SEED < 2^31 (default %(default)s, as the main job)")
    ap.add_argument("--eval-seed", type=seed_value, default=0,
                    help="evaluation corpus checked for shared scenes (default %(default)s, the main job's)")
    ap.add_argument("--device", default="cpu", help="torch device (default %(default)s)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="feature cache (default: none)")
    ap.add_argument("--only", nargs="+", choices=tuple(shipped_folders()), default=None, metavar="METRIC",
                    help="retrain only these scorers (" + ", ".join(shipped_folders()) + ") and keep the "
                         "others' files and manifest entries in --out as they are (checked against the "
                         "manifest first); default: all")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:   # the shared output rule (corpora/paths.py), before any training
        check_output_path("--out", args.out, folder=True)
    except OutputPathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    kept = None
    if args.only:
        from neural.shipped_scorers import ShippedScorerError  # lazy: torch-heavy, after the argument check

        try:
            kept = kept_entries(args.out, args.only, args.index)
        except (ShippedScorerError, ValueError) as exc:
            print(f"error: --only needs the other scorers' complete folder in --out: {exc}", file=sys.stderr)
            return 2
    from neural.teaching_clip import load_teaching_clip  # lazy: torch-heavy, after the argument check

    t0 = time.perf_counter()
    print(f"training set: corpora.teaching.scorer_training_set({args.index}) (seed "
          f"{SCORER_TRAINING_SEEDS.start + args.index}); checking scenes against evaluation seed {args.eval_seed}",
          flush=True)
    corpus = training_set(args.index, args.eval_seed)
    bb = load_teaching_clip(device=args.device, show_progress=not args.quiet)
    cache = DiskCache(args.cache_dir) if args.cache_dir else None
    scorers, seconds = train_scorers(bb, corpus, seed=args.seed, cache=cache, show_progress=not args.quiet,
                                     only=args.only)
    try:
        write_shipped(scorers, seconds, args.out, parent=bb, corpus=corpus, index=args.index, seed=args.seed,
                      kept=kept)
    except OSError as exc:   # a full disk or a folder made read-only during the training
        print(f"error: --out {args.out}: cannot write ({exc.strerror or exc}: {exc.filename or args.out})",
              file=sys.stderr)
        return 2
    print(f"done in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
