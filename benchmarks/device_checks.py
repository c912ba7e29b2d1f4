"""The checks that need a GPU machine with many cores, in one go: what a short loan of such a machine is for.

    python benchmarks/device_checks.py                       # cuda_tests, neural_overhead, kmeans, threads
    python benchmarks/device_checks.py --steps all --out runs/device-checks
    python benchmarks/device_checks.py --steps suite         # the whole test suite on this machine

Steps (each a subprocess with its own time limit; a step that fails or runs out of time is reported and
the next one runs):

* ``cuda_tests`` — ``tests/test_cuda.py``: the device-dependent expectations (the teaching CLIP on CUDA
  against the CPU, loader threads and pinned memory, fp16, every trainer under autocast, the main job
  with ``--device cuda`` against the CPU run);
* ``neural_overhead`` — ``benchmarks/neural_overhead.py --device cuda --clip-model ViT-B-32`` (random
  weights: speed does not depend on the values): ``throughput_ratio_corpus``, goal ≥ 0.9;
* ``kmeans`` — ``benchmarks/kmeans_threads.py --threads 1,2,…,<cores>``: SIFT's codebook k-means on
  one thread and on many (:mod:`kernels.image.lloyd`), the same centres bit for bit (about a minute);
* ``threads`` — ``benchmarks/thread_scaling.py --threads 2,<cores>`` (``1,2`` on two cores): the
  classical stage cold, goal ≥ 5× from 2 to 16 threads, identical numbers;
* ``workers`` — ``benchmarks/thread_scaling.py --workers 1,4,<cores>``: the same job on a local Dask
  cluster of N workers, identical numbers;
* ``suite`` — the README's test command's ``python -m pytest`` (``--device auto`` runs on the CPU there,
  ``tests/test_cuda.py`` on the GPU).

Prints one line per step (status, seconds, the figures) and, with ``--json``, one JSON object; every
step's output is kept in ``--out`` (default: a temporary folder, named in the summary).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import emit  # noqa: E402

DEFAULT_STEPS = ("cuda_tests", "neural_overhead", "kmeans", "threads")


def step_commands(cores: int) -> dict[str, tuple[list[str], int, bool]]:
    """``{step: (command, time limit in s, whether its stdout is one JSON object)}``."""
    py, bench = sys.executable, ROOT / "benchmarks"
    threads = ",".join(map(str, sorted({1 if cores <= 2 else 2, cores})))
    workers = ",".join(map(str, sorted({1, min(4, cores), cores})))
    powers = ",".join(map(str, sorted({1, cores} | {2 ** k for k in range(1, 8) if 2 ** k < cores})))
    return {
        "cuda_tests": ([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", "tests/test_cuda.py"], 600, False),
        "neural_overhead": ([py, str(bench / "neural_overhead.py"), "--device", "cuda", "--clip-model", "ViT-B-32",
                             "--threads", str(cores), "--json"], 300, True),
        "kmeans": ([py, str(bench / "kmeans_threads.py"), "--threads", powers, "--json"], 300, True),
        "threads": ([py, str(bench / "thread_scaling.py"), "--threads", threads, "--json"], 600, True),
        "workers": ([py, str(bench / "thread_scaling.py"), "--workers", workers, "--json"], 900, True),
        "suite": ([py, "-m", "pytest", "-q", "-p", "no:cacheprovider"], 1800, False),
    }


def figures(name: str, stdout: str, as_json: bool) -> dict:
    """The figures worth a line: the JSON's headline keys, or pytest's last line."""
    if not as_json:
        lines = [ln for ln in stdout.strip().splitlines() if ln.strip()]
        return {"pytest": lines[-1] if lines else ""}
    data = json.loads(stdout)
    keep = {"neural_overhead": ("throughput_ratio_corpus", "loader_threads", "overhead_ratio_image",
                                "overhead_ratio_text"),
            "threads": ("cores", "speedup_2_vs_1", "median_pair_speedup_2_vs_1", "speedup_16_vs_2",
                        "median_pair_speedup_16_vs_2", "identical_numbers"),
            "workers": ("cores", "identical_numbers"),
            "kmeans": ("init_s", "iterations")}[name]
    out = {k: data[k] for k in keep if k in data}
    if name == "kmeans":   # one figure per thread count
        out.update({k: v for k, v in data.items() if k.startswith(("speedup_", "identical_"))})
    if "provenance" in data:
        out["device"] = data["provenance"].get("device_name") or data["provenance"].get("device")
    if "curve" in data:
        out["curve_s"] = {str(c.get("threads", c.get("workers"))): c["classical_stage_s"] for c in data["curve"]}
    return out


def run_step(name: str, cmd: list[str], limit: int, as_json: bool, out: Path) -> dict:
    """Run one step, keep its output in ``out/<name>.log``, and say how it went."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=limit,
                              env=dict(os.environ, PYTHONUNBUFFERED="1"))
        stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as e:
        stdout, stderr, rc = e.stdout or "", e.stderr or "", None
        stdout, stderr = (s.decode() if isinstance(s, bytes) else s for s in (stdout, stderr))
    seconds = round(time.perf_counter() - t0, 1)
    (out / f"{name}.log").write_text(f"$ {' '.join(cmd)}\n{stdout}\n--- stderr ---\n{stderr}", encoding="utf-8")
    status = "timed out" if rc is None else ("ok" if rc == 0 else f"exit {rc}")
    result = {"step": name, "status": status, "seconds": seconds}
    if rc == 0:
        try:
            result.update(figures(name, stdout, as_json))
        except (ValueError, KeyError) as e:
            result["status"] = f"unreadable output ({e})"
    return result


def device_summary() -> dict:
    """The machine: cores, torch, and the GPU torch sees (``None`` without one)."""
    import torch  # lazy: the summary is the only part of this script that needs it in-process

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cores": len(os.sched_getaffinity(0)), "torch": torch.__version__, "gpu": gpu}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", default=",".join(DEFAULT_STEPS), metavar="LIST",
                    help="comma-separated steps, or 'all' (default: %(default)s)")
    ap.add_argument("--out", default=None, metavar="DIR", help="keep every step's output here")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    commands = step_commands(len(os.sched_getaffinity(0)))
    names = list(commands) if args.steps == "all" else [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = [s for s in names if s not in commands]
    if unknown or not names:
        ap.error(f"--steps: unknown {', '.join(unknown) or '(none given)'}; choose from {', '.join(commands)} or all")
    machine = device_summary()
    if machine["gpu"] is None:
        print("note: torch sees no CUDA device here; the GPU steps will report that", file=sys.stderr)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="device-checks-"))
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for name in names:
        cmd, limit, as_json = commands[name]
        results.append(run_step(name, cmd, limit, as_json, out))
        if not args.json:
            print(json.dumps(results[-1]), flush=True)
    summary = {**machine, "out": str(out), "steps": results}
    (out / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    if args.json:
        emit(summary, True)


if __name__ == "__main__":
    main()
