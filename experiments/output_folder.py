"""The main job's output folder (``--out``): which folders it writes into, checked before any work.

The job writes ``results.json``, ``report.md``, ``report.html``, ``run.log`` and ``plots/`` into ``--out``,
replacing files of those names.  So that it never replaces a user's files:

* ``--out`` must not be, contain or lie inside one of the run's inputs (``--data``, ``--codebook-images``,
  ``--pacs-positives``, the standard-benchmark paths, weights files given to ``--clip-pretrained`` /
  ``--backbone``; :func:`corpora.paths.output_overlap`);
* an existing ``--out`` must be empty or a previous run of the job, recognised by its ``results.json``
  or by the ``.itr-run`` file every run writes first (its report files and plots are then replaced, with
  a warning in ``run.log``); any other non-empty folder is refused, naming a few of the files it holds;
* the folder is created and ``.itr-run`` is written to it (flushed to disk), so that a read-only or full
  location is one ``error:`` line before the corpus is loaded, not a traceback after the work.
"""
from __future__ import annotations

import os
from pathlib import Path

from corpora.paths import output_overlap
from experiments.errors import PipelineError

#: The file that marks a folder as a previous (finished) run of the main job.
RUN_MARKER = "results.json"
#: The file the job writes into ``--out`` before any work (so a run that stopped with an error, which
#: leaves ``run.log`` without ``results.json``, can be re-run into the same folder).
CLAIM_MARKER = ".itr-run"
#: What ``--help`` says about ``--out``.
OUT_HELP = ("output folder (default: runs/<corpus>-<timestamp>/). It must be new, empty, or a previous run of "
            "this job (a folder with results.json or .itr-run), whose report files, run.log and plots are replaced; any "
            "other non-empty folder is refused, as is a folder that is, contains or lies inside an input "
            "(--data, --codebook-images, --pacs-positives, benchmark or weights files)")


class OutFolderError(PipelineError, ValueError):
    """An ``--out`` the job must not write into (the message names the option)."""


def run_inputs(options) -> list[tuple[str, Path]]:
    """``(option, path)`` of every file or folder a run reads, as given (those that exist)."""
    given = [("--data", options.data), ("--images", getattr(options, "images", None)),
             ("--codebook-images", options.codebook_images),
             ("--pacs-positives", options.pacs_positives), ("--clip-pretrained", options.clip_pretrained),
             ("--composite", options.composite), ("--pascal50s", options.pascal50s), ("--foil", options.foil),
             ("--foil-coco-captions", options.foil_coco_captions),
             ("--benchmark-images", options.benchmark_images)]
    given += [("--backbone", b.pretrained) for b in options.backbones]
    return [(o, Path(p).expanduser()) for o, p in given if p is not None and Path(p).expanduser().exists()]


def foreign_files(out: Path, own=()) -> list[str]:
    """The names in an existing ``out`` when it is neither empty nor a previous run (else ``[]``); the
    run's own folders ``own`` (a cache folder inside ``out``) do not count."""
    if not out.is_dir() or (out / RUN_MARKER).is_file() or (out / CLAIM_MARKER).is_file():
        return []
    mine = {Path(p).expanduser().resolve() for p in own}
    return sorted(p.name for p in out.iterdir() if p.resolve() not in mine)


def prepare_out_folder(out: Path, inputs, own=()) -> None:
    """Check ``--out`` against the rules of this module and create it.

    Parameters
    ----------
    out : Path
        The output folder.
    inputs : iterable of (str, Path)
        :func:`run_inputs`.
    own : iterable of Path
        Folders of the run itself that may already sit in ``out`` (the cache folder).

    Raises
    ------
    OutFolderError
        One line naming ``--out`` and the reason: a file, an input it would touch, a foreign non-empty
        folder, a folder that cannot be created or written.
    """
    if out.exists() and not out.is_dir():
        raise OutFolderError(f"--out {out}: exists and is not a folder")
    overlap = output_overlap(out, inputs)
    if overlap is not None:
        raise OutFolderError(f"--out {out} {overlap}: the report would be written among the inputs; give a "
                             "folder outside them")
    others = foreign_files(out, own)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise OutFolderError(f"--out {out} is a non-empty folder that is not a run of this job (no "
                             f"{RUN_MARKER}; it holds {shown}): its files could be replaced; give a new or "
                             "empty folder, or a previous run's")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutFolderError(f"--out {out}: cannot create the folder "
                             f"({exc.strerror or exc.__class__.__name__}: {exc.filename or out})") from exc
    try:   # written with content and flushed: a read-only or full location fails here, before the work
        with open(out / CLAIM_MARKER, "w", encoding="utf-8") as f:
            f.write("a folder of python -m experiments.flickr8k_kcca (its report files are replaced by the "
                    "next run written here)\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        (out / CLAIM_MARKER).unlink(missing_ok=True)
        raise OutFolderError(f"--out {out}: cannot write into the folder "
                             f"({exc.strerror or exc.__class__.__name__}: {exc.filename or out})") from exc
