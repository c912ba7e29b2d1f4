"""The main job: classical (Hodosh et al. 2013 KCCA) and CLIP-family methods on one evaluator, one report.

Run with no arguments for the built-in teaching set (offline, no downloads)::

    python -m experiments.flickr8k_kcca

or on the real Flickr8k (standard layout: ``Flicker8k_Dataset/`` + ``Flickr8k_text/``, or the Kaggle
``Images/`` + ``captions.txt`` layout)::

    python -m experiments.flickr8k_kcca --data /path/to/flickr8k --clip-model ViT-B-32 --clip-pretrained openai

The run writes ``report.md``, a self-contained ``report.html``, ``results.json`` (every number with its
configuration and provenance) and ``run.log`` into ``--out`` (default ``runs/<corpus>-<timestamp>/``).
Every expensive step (features, codebooks, Gram matrices, trained models, embeddings) is cached on disk,
so a re-run with the same settings only re-evaluates.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import textwrap

from experiments.errors import PipelineError
from experiments.options import (
    DEFAULT_SYSTEMS,
    QUICK_SYSTEMS,
    RunOptions,
    add_benchmark_file_options,
    available_systems,
)
from experiments.output_folder import OUT_HELP
from experiments.pipeline import run
from experiments.report import console_tables
from neural.registry import scorer_names


def positive_int(text: str) -> int:
    """argparse type: an integer ≥ 1 (0 or a negative count is an error, not "use the default")."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def build_parser() -> argparse.ArgumentParser:
    """The main job's command line (``--help`` explains every option and its default)."""
    p = argparse.ArgumentParser(
        prog="python -m experiments.flickr8k_kcca",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.dedent(__doc__ or ""),
        epilog=textwrap.dedent(f"""\
            systems (classical, --systems): {', '.join(available_systems())}
            default systems: {', '.join(DEFAULT_SYSTEMS)}
            --quick systems: {', '.join(QUICK_SYSTEMS)}
            neural scorers (--metrics): {', '.join(scorer_names())}
            default scorers: all of them

            environment:
              ITR_CACHE_DIR          default --cache-dir (else ~/.cache/image-text-ranking); the compiled
                                     C kernels are built there too
              ITR_NUM_THREADS        threads of the image features and Grams and of the compiled soft-TRI
                                     kernel (default: every usable core; results do not depend on it)
              ITR_DEVICE             the device --device auto picks (cpu, cuda, cuda:1 …; default: CUDA
                                     when torch sees it, else the CPU)
              ITR_SHARED             folder holding data/flickr8k and nltk_data (default ../shared)
              NLTK_DATA              NLTK resources (stop words, WordNet, Brown, tagger); else
                                     $ITR_SHARED/nltk_data
              ITR_OFFLINE=1          never download CLIP weights or tokenizers (also HF_HUB_OFFLINE=1):
                                     missing ones stop the run with a message saying how to get them
              ITR_TRUST_TORCHSCRIPT=1  load OpenAI TorchScript weights files (they can run code)
              ITR_NO_CEXT=1, ITR_NO_NATIVE=1  use the numpy image-Gram, torch soft-TRI and numpy
                                     TagRank fallbacks instead of the compiled C kernels (the
                                     same up to float rounding, slower); "0" or empty leaves
                                     them on
              ITR_METEOR_JAR         the official METEOR 1.5 jar, with data/paraphrase-en.gz beside it
                                     (caption_metrics_vs_humans; default: the one pycocoevalcap ships)
            """),
    )
    add_data_options(p.add_argument_group("data"))
    add_method_options(p.add_argument_group("methods"))
    add_run_options(p.add_argument_group("run"))
    add_benchmark_options(p.add_argument_group("standard benchmarks (PAC-S Tables 1-3 layout; docs/evaluation.md)"))
    return p


def add_benchmark_options(g) -> None:
    """The standard-benchmark options: Composite, Pascal-50S, FOIL and their images."""
    add_benchmark_file_options(g)
    g.add_argument("--benchmark-images", metavar="DIR", default=None,
                   help="the benchmarks' images, for the scorers that look at images: DIR/<id> or "
                        "DIR/<subfolder>/<id> (e.g. flickr8k/, flickr30k/, coco/ = val2014, pascal/ = VOC2010 "
                        "JPEGImages). Default: none (the n-gram metrics alone score the benchmarks; the "
                        "other rows say why not). A malformed benchmark file is reported and skipped")


def add_data_options(g) -> None:
    """The data options: ``--data``, ``--skip-missing-images``, ``--teaching-size``."""
    g.add_argument("--data", metavar="PATH", default=None,
                   help="Flickr8k folder (standard or Kaggle captions.txt layout), or a Karpathy split file "
                        "(dataset_flickr30k.json, dataset_coco.json, dataset_flickr8k.json) with --images; "
                        "such a file also ranks the CLIP family on its test split with every caption, as "
                        "CLIP_benchmark does. Default: the built-in teaching set, generated offline.")
    g.add_argument("--images", metavar="DIR", default=None,
                   help="the images of a Karpathy --data file: DIR/<filename>, or for COCO DIR/<filepath>/"
                        "<filename> (the folder holding train2014/ and val2014/). Default: none (needed "
                        "with a .json --data)")
    g.add_argument("--skip-missing-images", action="store_true",
                   help="restrict every split to the images present on disk and report how many were "
                        "skipped (default: stop with an error naming the missing files)")
    g.add_argument("--teaching-size", type=positive_int, default=None, metavar="N",
                   help="number of teaching-set images (default 2000; 600 with --quick; at least 60, at most "
                        "100,000); "
                        "split 70/15/15; only without --data")


def add_method_options(g) -> None:
    """The method options: systems, neural scorers and their backbone, significance tests."""
    g.add_argument("--systems", default=None, metavar="LIST",
                   help="comma-separated classical systems (names with commas such as TRI5_A,D_ext "
                        "work as they are; quote the list in the shell), 'all' for the paper's grid, or "
                        "'none' (default: see below)")
    g.add_argument("--metrics", default=None, metavar="LIST",
                   help="comma-separated neural scorers, or 'none' (default: see below); SCORER@NAME runs "
                        "a scorer on the backbone --backbone NAME, e.g. CLIP-S@openai,PAC-S@pacs; a scorer "
                        "without @NAME uses --clip-model / --clip-pretrained")
    g.add_argument("--quick", action="store_true",
                   help="a smaller default for class demos: 600 teaching images, fewer systems, "
                        "shorter neural training")
    g.add_argument("--full-selection", action="store_true",
                   help="choose each system's image power p ∈ {2,3} and text diagonal factor "
                        "d ∈ {1,2,5,10,15} on dev over all four κ with float64 KCCA, as the paper "
                        "(about 10x slower); default: p = 2, d = 1 fixed in advance, float32 KCCA "
                        "(the 15-model (n, κ) selection on dev is always done)")
    g.add_argument("--codebook-images", default=None, metavar="DIR",
                   help="fit the visual-word codebooks on a seeded sample of 200 images of DIR, 1,000 "
                        "descriptors per feature each, as the paper did with PASCAL VOC 2008 (give its "
                        "JPEGImages folder); default: the training split's images (a deviation from the "
                        "paper, docs/image_kernels.md)")
    g.add_argument("--clip-model", default=None, metavar="NAME",
                   help="the CLIP backbone of the neural scorers. Default 'teaching': the shipped teaching "
                        "CLIP (docs/teaching_clip.md), pretrained on 400,000 generated teaching-world "
                        "pairs from seeds no evaluation corpus uses, applied zero-shot as the real CLIP is "
                        "to Flickr8k; 'tiny' (also 'tiny-clip', 'tiny-trained'): a small CLIP trained "
                        "inside the run on the training split (the exercise 'train your own CLIP'); or an "
                        "open_clip model name, e.g. ViT-B-32, or 'auto' to infer an OpenAI-layout "
                        "architecture from the --clip-pretrained file")
    g.add_argument("--clip-pretrained", default=None, metavar="TAG_OR_FILE",
                   help="open_clip pretrained tag (e.g. openai; needs a download on a networked "
                        "machine) or a local weights file (.pt OpenAI/open_clip/PAC-S/Long-CLIP/SPECS, "
                        ".safetensors); "
                        "an OpenAI TorchScript .pt file is loaded only with ITR_TRUST_TORCHSCRIPT=1 "
                        "(it can run code; or convert it to .safetensors, see docs/neural.md); with the "
                        "teaching CLIP, another weights file of it (its .json record beside it). "
                        "Default: none (the shipped teaching CLIP; with an open_clip --clip-model alone, "
                        "the openai tag)")
    g.add_argument("--backbone", action="append", default=None, metavar="NAME=ARCH[:WEIGHTS]",
                   help="name a further backbone for SCORER@NAME in --metrics (repeat the option for more): "
                        "ARCH as --clip-model (an open_clip architecture, auto, tiny, teaching), WEIGHTS as "
                        "--clip-pretrained (a tag or a file; the text after the first ':' is taken whole, "
                        "so a path may contain ':'; default: the openai tag), e.g. "
                        "pacs=ViT-B-32-quickgelu:/path/clip_ViT-B-32.pth. A PAC-S release file makes "
                        "PAC-S@NAME score with it as it is. Each backbone is loaded once, its scorers run, "
                        "and it is released before the next; report rows read SCORER@NAME and a table "
                        "lists every backbone with its weights' SHA-256. Default: none")
    g.add_argument("--clip-steps", type=positive_int, default=None, metavar="N",
                   help="training steps of the tiny CLIP, with --clip-model tiny only (default 56, 40 "
                        "with --quick; ~15 s on 2 cores)")
    g.add_argument("--pacs-positives", default=None, metavar="FILE",
                   help="PAC-S fine-tuning tuples for real data: a JSON file of at least 4 generated "
                        "positives (see docs/neural.md); default: none (on the teaching set the generator "
                        "supplies them; otherwise the PAC-S formula runs on the backbone as given)")
    g.add_argument("--reference", default="best", metavar="NAME",
                   help="the system or scorer every other one is tested against in both tasks (the "
                        "significance markers), e.g. TRI5SEM as in the paper's Tables 3-5; it must be "
                        "one that runs. Default 'best': per task the system with the highest R@10 "
                        "(then R@1, then median rank)")
    g.add_argument("--permutations", type=positive_int, default=10000, metavar="N",
                   help="reassignments of Fisher's paired randomisation test (default 10000; the "
                        "paper's 100000 is slower)")


def add_run_options(g) -> None:
    """The run options: output and cache folders, seed, device, progress bars."""
    g.add_argument("--out", default=None, metavar="DIR", help=OUT_HELP)
    g.add_argument("--seed", type=int, default=0, help="seed for every random choice, 0 ≤ SEED < 2^31 (default 0; the seeds from 2^31 up are the teaching CLIP's pretraining data)")
    g.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="device for the neural scorers (default auto: $ITR_DEVICE when set, else CUDA "
                        "when available, else the CPU)")
    g.add_argument("--cache-dir", default=None, metavar="DIR",
                   help="cache folder (default $ITR_CACHE_DIR or ~/.cache/image-text-ranking)")
    g.add_argument("--no-cache", action="store_true",
                   help="recompute everything; read and write no cache")
    g.add_argument("--no-progress", action="store_true", help="hide progress bars")
    g.add_argument("--workers", type=positive_int, default=None, metavar="N",
                   help="compute the image features, image Gram matrices, TagRank / soft-TRI Gram and "
                        "query rows, low-rank kernel columns and the CLIP family's encoding of corpus images "
                        "and of large text calls (a pool's captions) as "
                        "Dask tasks on a local cluster of N worker processes started for the run (one "
                        "thread each; on --device cuda each worker encodes on the GPU it sees). Default: "
                        "neither this nor --scheduler, everything in this process on ITR_NUM_THREADS "
                        "threads. The numbers are the same in all three modes (docs/scaling.md)")
    g.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="send those tasks to a running Dask scheduler instead, e.g. tcp://10.0.0.5:8786 "
                        "(started with 'dask scheduler', workers with 'dask worker ADDRESS', or by "
                        "dask-jobqueue); its workers need this package and the same --cache-dir (a shared "
                        "folder) for their results to be reused. Default: none")
    g.add_argument("--recipe", default="auto", choices=("auto", "small", "paper"),
                   help="training recipes of PAC-S, L-CLIPScore, BRIDGE and SPECS (docs/neural.md, "
                        "'Training recipes'): auto (default) = the small recipes for the tiny and teaching "
                        "CLIPs (the teaching CLIP's own for SPECS and L-CLIPScore), each paper's recipe for any "
                        "other backbone; small or paper for every backbone")
    g.add_argument("--train-scorers", action="store_true",
                   help="fine-tune PAC-S, BRIDGE and SPECS inside the run on the corpus' training split (about "
                        "35 s on 2 CPU cores) and distil L-CLIPScore (on the teaching CLIP: on its pretraining "
                        "stream, about 20 min the first time, then cached for every corpus). Without it, on the "
                        "teaching CLIP with --recipe auto, the run loads the shipped ones, trained once from the "
                        "teaching CLIP on generated data no evaluation uses (docs/shipped_scorers.md); every "
                        "other backbone always fine-tunes here")
    g.add_argument("--train-on-cpu", action="store_true",
                   help="go ahead with a paper recipe on the CPU: without it the run prints the estimated "
                        "time ('PAC-S paper recipe on CPU: ~N h (M steps × batch B)') and stops before "
                        "any stage")


def parse_options(argv: list[str] | None = None) -> RunOptions:
    """The checked options of a command line (``--help`` and a malformed value exit through argparse).

    Parameters
    ----------
    argv : list of str, optional
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    RunOptions

    Raises
    ------
    PipelineError
        An option that cannot work (:meth:`RunOptions.from_args`).
    """
    return RunOptions.from_args(build_parser().parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    """Run the main job; the exit status (2: a user-facing error, printed as one ``error:`` line)."""
    try:
        paths = run(parse_options(argv))
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    tables = console_tables(json.loads(paths["results"].read_text(encoding="utf-8")))
    if tables:
        print("\n" + tables + "\n")
    print(f"Report: {paths['html']}  (also {paths['md'].name}, {paths['results'].name})")
    return 0


def exit_now(status: int) -> None:
    """End the process with ``status`` once every output is flushed, without the interpreter's teardown.

    After a run that imported torch the teardown alone takes 2–3 s (freeing the models and the memo
    tables, unloading torch's libraries); by the time :func:`main` returns, the report, the results and
    every cache entry are written and closed (cache writes are atomic renames, made as they happen), so
    nothing is lost by ending here."""
    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main())
