"""What sending a CLIP backbone to a Dask cluster's workers costs, and what keeping it there saves.

Inside one ``clip_encoding_on`` scope (the neural stage with ``--workers`` / ``--scheduler``) a backbone
goes to the workers once for its consecutive calls (its corpus images, its pool captions, BRIDGE's caption
bank; ``neural.cluster.encoder_on``), a :class:`corpora.parallel.Shared` value of each call's context.
This script measures that mechanism on a local cluster with an open_clip architecture of the given size
and random weights (nothing is downloaded): a map whose context holds the model, as the encoding calls'
do, then a second map with the same kept copy:

    python benchmarks/backbone_copy.py                          # ViT-L-14 (1.7 GB in float32), 2 workers
    python benchmarks/backbone_copy.py --model ViT-B-32 --workers 4 --json

Figures: ``size_mb`` (float32 weights), ``first_copy_s`` (the first map: the copy sent to workers that
have not yet imported torch), ``copy_s`` (a fresh copy to the same, warm workers: what every call paid when
each call sent its own), ``kept_s`` (a map that finds the copy kept).  Over a network each copy also
crosses it once per worker.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import emit  # noqa: E402
from corpora.parallel import BlockExecutor, Shared  # noqa: E402


def count_parameters(context, block, cache):
    """A block that touches the workers' copy (its parameter tensors), as an encoding block would."""
    return {"n": np.array([sum(p.numel() for p in context["encoder"]["model"].parameters())])}


def timed_map(ex: BlockExecutor, encoder: Shared, workers: int, call: int) -> float:
    """Seconds for one map of one block per worker whose context holds ``encoder``."""
    t0 = time.perf_counter()
    ex.map_blocks(count_parameters, [(i,) for i in range(workers)], context={"encoder": encoder, "call": call},
                  show_progress=False)
    return time.perf_counter() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="ViT-L-14", help="open_clip architecture, random weights (default ViT-L-14)")
    ap.add_argument("--workers", type=int, default=2, help="local Dask worker processes (default 2)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    import open_clip   # heavy (torch): imported only when the script runs

    model = open_clip.create_model(args.model, pretrained=None)
    size_mb = sum(p.numel() for p in model.parameters()) * 4 / 1e6
    with BlockExecutor(workers=args.workers) as ex:
        ex.client()
        first = Shared({"model": model})
        first_s = timed_map(ex, first, args.workers, 0)
        ex.forget(first)
        fresh = Shared({"model": model})
        copy_s = timed_map(ex, fresh, args.workers, 1)
        kept_s = timed_map(ex, fresh, args.workers, 2)
        ex.forget(fresh)
    emit({"model": args.model, "workers": args.workers, "size_mb": round(size_mb, 1),
          "first_copy_s": round(first_s, 2), "copy_s": round(copy_s, 2), "kept_s": round(kept_s, 3)}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
