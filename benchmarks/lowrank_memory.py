"""Peak memory and time of the classical stage's low-rank KCCA path on a generated teaching corpus.

Above ``experiments.classical_stage.LOWRANK_ABOVE`` training images the main job factors its training
kernels by pivoted incomplete Cholesky, reading only each kernel's diagonal and its pivots' columns
(docs/kcca.md, "Low-rank solver"); the ``N × N`` training Gram is never built.  This script forces that
path on a teaching set of ``--images`` images (70 % training, 15 % dev, 15 % test, as the default
teaching set), runs one KCCA system (``--system``, default BoW5: the spatial-pyramid image kernel and
the BoW5 text kernel) with one (p, d) pair, and prints the wall time, this process's peak resident
memory, and what one ``N × N`` float32 training Gram would have taken::

    python benchmarks/lowrank_memory.py --images 2000 --max-rank 300
    python benchmarks/lowrank_memory.py --images 20000 --max-rank 1000 --workers 2 --json

The default image kernel settings are the main job's (256 visual words per feature, 160 × 120 teaching
images).  A fresh temporary cache is used unless ``--cache-dir`` names one (a warm cache measures the
cached path instead).  Large sizes take hours on two cores and their visual words gigabytes of cache:
run them on an idle machine.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import emit, peak_rss_mb  # noqa: E402
from corpora.cache import DiskCache  # noqa: E402
from corpora.parallel import BlockExecutor  # noqa: E402
from corpora.protocol import hodosh_pool  # noqa: E402
from corpora.teaching import make_teaching_set  # noqa: E402
from kcca.kernel_store import KernelStore  # noqa: E402
from kcca.systems import run_system  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--images", type=int, default=2000, help="teaching-set size (default 2000)")
    ap.add_argument("--max-rank", type=int, default=300,
                    help="incomplete Cholesky's largest rank (the main job uses 4000; default 300)")
    ap.add_argument("--system", default="BoW5", help="the KCCA system to run (default BoW5)")
    ap.add_argument("--workers", type=int, default=None,
                    help="start a local Dask cluster of this many worker processes (default: in-process)")
    ap.add_argument("--cache-dir", type=Path, default=None, help="cache folder (default: a fresh temporary one)")
    ap.add_argument("--seed", type=int, default=0, help="teaching-set seed (default 0)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.images < 40:
        ap.error(f"--images must be at least 40, got {args.images}")
    if args.max_rank < 1:
        ap.error(f"--max-rank must be positive, got {args.max_rank}")
    return args


def run(args: argparse.Namespace, cache_dir: Path) -> dict:
    n_train, n_dev = int(0.7 * args.images), int(0.15 * args.images)
    corpus = make_teaching_set(n_images=args.images, n_train=n_train, n_dev=n_dev, seed=args.seed)
    pools = {s: hodosh_pool(corpus, s, seed=args.seed) for s in ("dev", "test")}
    t0 = time.perf_counter()
    with BlockExecutor(workers=args.workers) as executor:
        extra = {"image_kwargs": {"executor": executor}} if executor.distributed else {}
        r = run_system(args.system, corpus, store=KernelStore(executor), pools=pools, seed=args.seed,
                       cache=DiskCache(cache_dir), show_progress=False, solver="lowrank",
                       kcca_kwargs={"max_rank": args.max_rank, "dtype": "float32", "jitter": "auto"},
                       powers=(2,), diag_factors=(1.0,), **extra)
    seconds = time.perf_counter() - t0
    return {"images": args.images, "train_images": n_train, "system": args.system, "max_rank": args.max_rank,
            "workers": args.workers or 0, "seconds": round(seconds, 1),
            "peak_rss_mb": round(peak_rss_mb(), 1),
            "dense_train_gram_mb": round(n_train * n_train * 4 / 2**20, 1),
            "test_annotation_shape": list(r.test_matrices.shape)}


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cache_dir is not None:
        emit(run(args, args.cache_dir), args.json)
        return 0
    with tempfile.TemporaryDirectory(prefix="lowrank-memory-") as tmp:
        emit(run(args, Path(tmp)), args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
