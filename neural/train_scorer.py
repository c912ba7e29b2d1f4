"""``python -m neural.train_scorer`` — train a PAC-S, L-CLIPScore, BRIDGE or SPECS scorer (or any trained
family registered in :mod:`neural.registry`) on the built-in teaching set and save it (:func:`neural.saved.save_scorer`) for ``python -m neural.score --scorer``.

Examples
--------
The tiny CLIP trained here (offline default) as the parent, PAC-S fine-tuned on the teaching set's
generated positives::

    python -m neural.train_scorer --metric pac-s --out scorers/pacs-tiny

An open_clip backbone as the parent (its weights are recorded by hash; PAC-S and BRIDGE need the same
backbone options again when scoring)::

    python -m neural.train_scorer --metric bridge --clip-model ViT-B-32 --clip-pretrained openai --out scorers/bridge

Each scorer is trained with the recipe the main job would use on that backbone
(:meth:`neural.family.ScorerFamily.recipe`: the small-model recipes on the teaching / tiny CLIP, each paper's on
any other backbone) and the main job's training data (the teaching set's training split; PAC-S: its generated positives,
up to 700 training and 150 validation images); the trained weights are cached as in the main job.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from corpora.cli_values import exit_status, seed_value
from neural.family import TrainSettings
from neural.registry import families, family_for, trained_family

__all__ = ["trainable_metrics", "train_scorer", "build_parser", "main", "run"]


def trainable_metrics() -> dict[str, str]:
    """``{--metric name: family name}`` of the registered families that are trained and can be saved (the
    reference-based variants are the same weights)."""
    return {f.metric: f.name for f in families(trained=True) if f.savable}


def train_scorer(metric: str, backbone, corpus, *, seed: int = 0, cache=None, show_progress: bool = True):
    """Train ``metric``'s scorer on ``corpus``' training split from ``backbone`` (its parent).

    Parameters
    ----------
    metric : str
        A trained family's ``--metric`` or main-job name (``"pac-s"`` / ``"PAC-S"`` …, :mod:`neural.registry`).
    backbone : Backbone
        The parent CLIP (fine-tuned copies for PAC-S / SPECS, the teacher of L-CLIPScore, BRIDGE's frozen
        CLIP).
    corpus : Corpus
        PAC-S needs a generated corpus (the teaching set: its positives come from the generator); the
        others any corpus with images and a ``train`` split (BRIDGE and SPECS: ``dev`` is not used).
    seed : int
        The recipe's seed.
    cache : DiskCache, optional
        Where trained weights are cached (the trainers' namespaces).

    Returns
    -------
    object
        The family's trained scorer (:meth:`neural.family.ScorerFamily.train`; PACScore, LCLIPScore, BRIDGE
        or SPECSScore for the built-in ones).
    """
    family = trained_family(metric)   # ValueError: unknown or not trained
    settings = TrainSettings(seed=seed, cache=cache, show_progress=show_progress)
    return family.train(backbone, corpus, family.recipe(backbone), settings)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m neural.train_scorer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--metric", required=True, choices=list(trainable_metrics()),
                    help="the scorer to train (RefPAC-S / RefL-CLIPScore use the same weights as PAC-S / "
                         "L-CLIPScore: pass --references when scoring)")
    ap.add_argument("--out", required=True, type=Path,
                    help="folder to write (scorer.json + weights.safetensors); refused if it holds other "
                         "files; a saved scorer already there is replaced")
    ap.add_argument("--clip-model", default=None,
                    help="the parent backbone: 'teaching' (default: the shipped teaching CLIP), 'tiny' (the "
                         "small CLIP trained here on the teaching set) or an open_clip architecture")
    ap.add_argument("--clip-pretrained", default=None,
                    help="pretrained tag or weights file of an open_clip --clip-model (default: openai)")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                    help="auto: $ITR_DEVICE when set, else CUDA when available, else CPU (default auto)")
    ap.add_argument("--seed", type=seed_value, default=0,
                    help="seed of the teaching set, the tiny CLIP and the recipe, 0 ≤ SEED < 2^31")
    ap.add_argument("--cache-dir", default=None, help="disk cache (default $ITR_CACHE_DIR or ~/.cache/…)")
    ap.add_argument("--no-cache", action="store_true", help="neither read nor write the disk cache")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    return ap


def _check_out(out: Path, clip_pretrained: str | None = None) -> None:
    """Refuse a ``--out`` that is a file, a folder with other files, the ``--clip-pretrained`` file or a
    folder containing it, under a file or not writable (:func:`corpora.paths.check_output_path`), before
    any training."""
    from corpora.paths import OutputPathError, check_output_path
    from neural.saved import CONFIG_NAME, WEIGHTS_NAME   # lazy: imports torch (option errors stay instant)

    out = out.expanduser()
    inputs = [("--clip-pretrained", Path(clip_pretrained))] if clip_pretrained else []
    try:
        check_output_path("--out", out, [(o, p) for o, p in inputs if p.expanduser().exists()], folder=True)
    except OutputPathError as exc:
        raise SystemExit(f"error: {exc}") from None
    if out.is_dir():
        others = sorted(p.name for p in out.iterdir() if p.name not in (CONFIG_NAME, WEIGHTS_NAME))
        if others:
            raise SystemExit(f"error: --out {out} is a folder with other files ({', '.join(others[:3])}); "
                             "give a new or empty folder")


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    _check_out(args.out, args.clip_pretrained)
    # lazy: torch, open_clip and the teaching-set generator take seconds (--help must stay instant)
    from corpora.cache import DiskCache
    from corpora.teaching import make_teaching_set
    from neural.checkpoints import WeightsError
    from neural.factory import backbone_for
    from neural.saved import save_scorer

    cache = DiskCache(args.cache_dir, enabled=not args.no_cache)
    teaching = make_teaching_set(seed=args.seed)
    try:
        bb = backbone_for(teaching, args.clip_model, args.clip_pretrained, seed=args.seed, cache=cache,
                          device=args.device, show_progress=not args.quiet)
    except (WeightsError, ValueError, RuntimeError) as exc:
        raise SystemExit(f"error: {exc}") from None
    print(f"training {family_for(args.metric).name} from {bb.name} on the teaching set (cached) …", file=sys.stderr)
    scorer = train_scorer(args.metric, bb, teaching, seed=args.seed, cache=cache, show_progress=not args.quiet)
    try:
        folder = save_scorer(scorer, args.out)
    except OSError as exc:   # a full disk or a folder made read-only during the training
        raise SystemExit(f"error: --out {args.out}: cannot write the scorer ({exc.strerror or exc}: "
                         f"{exc.filename or args.out})") from None
    print(f"saved {family_for(args.metric).name} to {folder} (parent {bb.name}, weights {bb.weights_id})")
    return 0


def run(argv=None) -> int:
    """:func:`main`'s exit status, or 2 with its one ``error:`` line on stderr for a user mistake
    (:func:`corpora.cli_values.exit_status`)."""
    return exit_status(main, argv)


if __name__ == "__main__":
    sys.exit(run())
