"""Dask vs in-process at the size where the main job changes path: a 11,000-image stand-in in COCO's
Karpathy layout (``benchmarks/coco_standin.py``: 10,108 training images, above
``experiments.classical_stage.LOWRANK_ABOVE``, so the classical systems take the low-rank path), run
end to end in-process and with ``--workers 2``, each with its own cache, must give the same numbers.

At this size every block-cut path has several blocks: visual words (32 images), the training
histograms stored by bin (4,096 images), the NN baseline's pool rows (128 pool images), the pivot
columns of incomplete Cholesky up to rank 4,000.  It takes about an hour of 2 cores, so it runs only
when ``ITR_SCALE_TESTS=1`` (the small-corpus tests in ``test_parallel.py``, ``test_lowrank_columns.py``
and ``test_karpathy_main_job.py`` check the same identities on every run, with the block sizes shrunk).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
N_IMAGES = 11_000
SYSTEMS = "NN5_F1^idf,BoW1"

pytestmark = pytest.mark.skipif(os.environ.get("ITR_SCALE_TESTS") != "1",
                                reason="about an hour of 2 cores: set ITR_SCALE_TESTS=1 to run it")


def _run(data: Path, images: Path, tmp: Path, name: str, extra: list[str]) -> dict:
    cache, out = tmp / f"cache-{name}", tmp / f"out-{name}"
    cmd = [sys.executable, "-m", "experiments.flickr8k_kcca", "--data", str(data), "--images", str(images),
           "--systems", SYSTEMS, "--metrics", "CLIP-S", "--permutations", "1000", "--no-progress",
           "--cache-dir", str(cache), "--out", str(out), *extra]
    proc = subprocess.run(cmd, cwd=REPO, env={**os.environ, "ITR_CACHE_DIR": str(cache)}, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_dask_gives_the_in_process_numbers_at_11k_images(benchmark_module, tmp_path_factory, nltk_data_dir):
    mod = benchmark_module("coco_standin")
    tmp = tmp_path_factory.mktemp("scale")
    mod.build(tmp / "coco", n_images=N_IMAGES, seed=0, show_progress=False)
    data = tmp / "coco" / "dataset_coco.json"
    here = _run(data, tmp / "coco", tmp, "in-process", [])
    dask = _run(data, tmp / "coco", tmp, "workers", ["--workers", "2"])
    assert dask["provenance"]["parallelism"]["mode"] == "local cluster"
    assert here["provenance"]["parallelism"]["mode"] == "in-process"
    assert here["systems"]["BoW1"]["config"]["solver"] == "lowrank"
    assert set(here["systems"]) == {"NN5_F1^idf", "BoW1", "CLIP-S"}
    # every figure, dev-set values and p-values at full precision included
    assert dask["systems"] == here["systems"]
