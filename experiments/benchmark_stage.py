"""The main job's standard benchmarks: Composite, Pascal-50S and FOIL (``--composite`` / ``--pascal50s`` /
``--foil``; :mod:`evaluation.benchmarks`) scored by every pair scorer of the run, in the layout of PAC-S
(Sarto et al. 2023) Tables 1–3, with the Flickr8k-Expert / CF columns taken from the run's
human-correlation table.

The n-gram caption metrics need only the benchmark's texts.  An image-based scorer needs the benchmark's
images (COCO val2014, Flickr8k / Flickr30k, PASCAL VOC 2010), which no benchmark file holds: they are read
from ``--benchmark-images DIR`` (:class:`FolderImageScorer`); a scorer without them, or that cannot score
images outside the run's corpus (the KCCA caption metric, whose image kernel is built on the run's image
features), is left unscored on that benchmark with the reason in the table's errors.  A benchmark whose
file is missing or malformed costs only its own columns: its one error (file and line) is reported and
the rest of the run goes on.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from corpora.images import read_image
from corpora.scoring import PairScorer
from evaluation.benchmarks import TABLE_COLUMNS, benchmark_table, format_benchmark_table, load_benchmarks
from experiments.options import RunOptions
from experiments.runlog import JOB_LOGGER

log = logging.getLogger(JOB_LOGGER)

__all__ = ["FolderImageScorer", "benchmark_stage", "find_benchmark_image"]

#: The Flickr8k columns of the table and the human-correlation keys they come from.
_FLICKR_KEYS = {"flickr8k_expert_tau_c": "expert_tau_c", "flickr8k_expert_tau_b": "expert_tau_b",
                "flickr8k_cf_tau_b": "cf_tau_b", "flickr8k_cf_tau_c": "cf_tau_c"}


def find_benchmark_image(folder: Path, image_id: str) -> Path | None:
    """The file of a benchmark image: ``folder/<image_id>``, else ``folder/<subfolder>/<image_id>`` for the
    first subfolder (in name order) that has it, else ``None``.  So one folder with ``flickr8k/``,
    ``flickr30k/``, ``coco/`` (val2014) and ``pascal/`` (VOC2010 ``JPEGImages``) serves Composite (whose ids
    are ``<part>/<file>``), FOIL (COCO file names) and Pascal-50S (VOC file names)."""
    direct = folder / image_id
    if direct.is_file():
        return direct
    for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
        if (sub / image_id).is_file():
            return sub / image_id
    return None


class FolderImageScorer:
    """A run's image-based pair scorer on images read from a folder instead of its corpus.

    Parameters
    ----------
    scorer : PairScorer
        The run's pair scorer: a CLIP-family one (``.scorer`` and ``.use_references``), BRIDGE
        (``.bridge``), or one restored from the cache (``.live()`` builds it).
    folder : Path or None
        ``--benchmark-images`` (``None``: not given).
    name : str

    Calling it raises :class:`LookupError` — which :func:`~evaluation.benchmarks.benchmark_table` reports
    as that scorer's reason on that benchmark — when ``folder`` is ``None``, an image is not in it, or the
    scorer cannot score images from outside the corpus.
    """

    #: Rows scored per call of the live scorer: only their images are in memory at once (FOIL has
    #: thousands of full-size COCO images).
    chunk = 256

    def __init__(self, scorer: PairScorer, folder: Path | None, name: str):
        self.inner, self.folder, self.name = scorer, folder, name
        self.identity = None          # benchmark scores are not cached

    def _live(self):
        s = self.inner
        return s.live() if hasattr(s, "live") else s

    def _paths(self, image_ids: Sequence[str]) -> dict[str, Path]:
        """Every image's file; :class:`LookupError` (how many are missing, the first) before any is read."""
        if self.folder is None:
            raise LookupError("needs the benchmark's images: pass --benchmark-images DIR")
        paths = {i: find_benchmark_image(self.folder, i) for i in dict.fromkeys(image_ids)}
        missing = [i for i, p in paths.items() if p is None]
        if missing:
            raise LookupError(f"{len(missing)} of the benchmark's images are not in --benchmark-images "
                              f"{self.folder} (first: {missing[0]})")
        return paths

    def __call__(self, image_ids: Sequence[str], candidates: Sequence[str],
                 references: Sequence[Sequence[str]]) -> np.ndarray:
        live = self._live()
        if hasattr(live, "bridge"):
            def score(ims, cands, refs):
                return live.bridge.score(ims, cands)
        elif hasattr(live, "scorer") and hasattr(live, "use_references"):
            def score(ims, cands, refs):
                return live.scorer.score(ims, cands, refs if live.use_references else None)
        else:
            raise LookupError("scores only the run's own corpus images (its image kernel is built on the run's "
                              "image features), not a benchmark's")
        paths = self._paths(image_ids)
        out = []
        for lo in range(0, len(candidates), self.chunk):   # per-pair scores: chunking does not change them
            ids = image_ids[lo:lo + self.chunk]
            images = {i: read_image(paths[i]) for i in dict.fromkeys(ids)}
            out.append(np.asarray(score([images[i] for i in ids], list(candidates[lo:lo + self.chunk]),
                                        [list(r) for r in references[lo:lo + self.chunk]]), dtype=np.float64))
        return np.concatenate(out) if out else np.zeros(0)


def benchmarks_given(options: RunOptions) -> bool:
    """Whether the run was given a caption-metric benchmark (``--composite``, ``--pascal50s``, ``--foil``)."""
    return any(getattr(options, k, None) is not None for k in ("composite", "pascal50s", "foil"))


def benchmark_stage(options: RunOptions, human: Mapping, text_scorers: Mapping[str, PairScorer],
                    image_scorers: Mapping[str, PairScorer]) -> dict:
    """Every scorer on the benchmarks given (none given: ``{}``).

    Parameters
    ----------
    options : RunOptions
        ``composite``, ``pascal50s``, ``foil``, ``foil_coco_captions``, ``benchmark_images``, ``seed``.
    human : mapping
        The run's human-correlation table (the Flickr8k-Expert / CF columns).
    text_scorers, image_scorers : mapping
        The n-gram metrics, and the scorers that need images (wrapped in :class:`FolderImageScorer`).

    Returns
    -------
    dict
        :func:`~evaluation.benchmarks.benchmark_table`'s result (``rows``, ``benchmarks``, ``errors``: the
        cells not scored, with their reason), ``load_errors`` (benchmark -> the one error naming its
        file and line), ``image_folder``, and ``text``: :func:`~evaluation.benchmarks.format_benchmark_table`.
    """
    if not benchmarks_given(options):
        return {}
    loaded = load_benchmarks(composite=options.composite, pascal50s=options.pascal50s, foil=options.foil,
                             foil_coco_captions=options.foil_coco_captions, seed=options.seed)
    for key, exc in loaded.errors.items():
        log.error("error: benchmark %s not scored: %s", key, exc)
    folder = options.benchmark_images
    scorers = {**text_scorers, **{n: FolderImageScorer(s, folder, n) for n, s in image_scorers.items()}}
    table = benchmark_table(scorers, loaded.benchmarks, seed=options.seed)
    for name, row in table["rows"].items():        # Flickr8k: the run's own human-correlation numbers
        for key, src in _FLICKR_KEYS.items():
            row[key] = human.get(name, {}).get(src)
    for tag, n in (("flickr8k_expert", "n_expert"), ("flickr8k_cf", "n_cf")):
        sizes = [v[n] for v in human.values() if v.get(n)]
        if sizes:
            table["benchmarks"] = {tag: max(sizes), **table["benchmarks"]}
    table["load_errors"] = {k: str(e) for k, e in loaded.errors.items()}
    table["image_folder"] = None if folder is None else str(folder)
    table["columns"] = [list(c) for c in TABLE_COLUMNS]
    table["text"] = format_benchmark_table(table, loaded.errors)
    log.info("%s", table["text"])
    return table
