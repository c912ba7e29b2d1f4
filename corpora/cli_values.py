"""The value rules of the command lines' numeric options, checked when the command line is read, and their
exit status (:func:`exit_status`).

One place for what every command line accepts as a seed and for the documented maxima of sizes, so a value
out of range is one ``error:`` line (argparse's, exit 2) before anything is loaded, instead of a traceback
from numpy or torch deep in the run, or a run that allocates without end.

* :data:`SEEDS` — every ``--seed``: ``0 ≤ SEED < 2^31``, the evaluation seed range
  (:data:`corpora.teaching.EVALUATION_SEEDS`; the seeds from ``2^31`` up are the teaching CLIP's pretraining
  and held-out streams, and numpy / torch take 32-bit seeds).
* :data:`MAX_TEACHING_SIZE` — the largest built-in teaching set (``--teaching-size``): 100,000 images
  (rendered images are memoised, 160 × 120 RGB = 57.6 kB each, 5.8 GB at the maximum; the largest corpus
  the toolkit documents is Flickr8k's 8,091 images).
"""
from __future__ import annotations

import argparse
import math
import sys

#: Accepted ``--seed`` values (equal to :data:`corpora.teaching.EVALUATION_SEEDS`; a test checks it).
SEEDS = range(0, 2 ** 31)
#: The largest ``--teaching-size``.
MAX_TEACHING_SIZE = 100_000


def seed_problem(seed, option: str = "--seed") -> str | None:
    """Why ``seed`` is not an accepted seed (naming ``option``), or ``None``."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed not in SEEDS:
        return (f"{option} must be in [0, 2^31) (got {seed!r}; the seeds from 2^31 up are reserved for the "
                "teaching CLIP's pretraining and held-out data)")
    return None


def seed_value(text: str) -> int:
    """argparse ``type`` of every ``--seed``: an integer in :data:`SEEDS`, else argparse's error (exit 2)."""
    try:
        seed = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a whole number in [0, 2^31), got {text!r}") from None
    if seed_problem(seed) is not None:
        raise argparse.ArgumentTypeError(f"must be in [0, 2^31) (got {seed}; the seeds from 2^31 up are "
                                         "reserved for the teaching CLIP's pretraining and held-out data)")
    return seed


def int_in(low: int, high: int | None = None):
    """argparse ``type``: an integer ``low ≤ n ≤ high`` (``high`` ``None``: no maximum)."""
    def parse(text: str) -> int:
        try:
            n = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if n < low or (high is not None and n > high):
            bound = f"at least {low}" if high is None else f"between {low} and {high:,}"
            raise argparse.ArgumentTypeError(f"must be {bound} (got {n:,})")
        return n
    parse.__name__ = "integer"
    return parse


def float_in(low: float, high: float, *, low_open: bool = False):
    """argparse ``type``: a finite float ``low ≤ x ≤ high`` (``low < x`` when ``low_open``)."""
    def parse(text: str) -> float:
        try:
            x = float(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(x) or x > high or x < low or (low_open and x == low):
            side = "(" if low_open else "["
            raise argparse.ArgumentTypeError(f"must be a finite number in {side}{low:g}, {high:g}] (got {text})")
        return x
    parse.__name__ = "number"
    return parse


def exit_status(main, argv=None) -> int:
    """A command line's exit status: ``main(argv)``'s, or 2 for a user mistake, printed as its one
    ``error:`` line on stderr.

    The command lines' ``main`` raise ``SystemExit("error: …")`` for a user mistake, which Python would end
    with status 1; 2 is argparse's status for its own option errors and the main job's, so every command
    line exits 2 for every mistake.  A ``SystemExit`` with a numeric code (argparse's, ``--help``) passes
    through.
    """
    try:
        return main(argv)
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        return 2
