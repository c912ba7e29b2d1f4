"""Thread scaling of the classical stage: the main job cold at 1, 2, … threads (``ITR_NUM_THREADS``).

Target (issue "Scale", item 1): the classical stage cold at least **1.7× faster on 2 threads than on 1**
on a 2-core machine, and at least 5× from 2 to 16 threads on a 16-core one, with identical numbers at
every thread count.  Each run is the main job on the built-in teaching set with ``--metrics none`` and an
empty ``--cache-dir`` (nothing of the classical stage cached), the compiled C kernels built beforehand
(they live in ``$ITR_CACHE_DIR``, not in ``--cache-dir``, so no run pays their compile).  The figure is
the job's own "classical systems (kernels, KCCA, NN)" timing from ``results.json``; the numbers are
compared as ``benchmarks/main_job.py`` does (every figure except timings, the command line and the
provenance, which records the thread count).

    python benchmarks/thread_scaling.py                  # 1, 2, 4, … up to the usable cores
    python benchmarks/thread_scaling.py --threads 1,2    # the 2-core target
    python benchmarks/thread_scaling.py --threads 2,16 --json
    python benchmarks/thread_scaling.py --quick          # the --quick default (600 images)
    python benchmarks/thread_scaling.py --threads 1,2 --repeat 3   # median of 3 interleaved trials
    python benchmarks/thread_scaling.py --threads 1,2 --repeat 3 --ceiling   # and the machine's ceiling
    python benchmarks/thread_scaling.py --workers 1,4,16 --json    # a local Dask cluster of N workers

With ``--workers LIST`` each run is the main job with ``--workers N`` (a ``LocalCluster`` of N worker
processes, each on its share of the usable cores: ``corpora.parallel.task_threads``) instead of
``ITR_NUM_THREADS``; the same numbers are expected at every N.

With ``--repeat N`` the trials are interleaved (1, 2, 1, 2, …); besides the speed-up of the median
times it prints each pair's speed-up (trial k at 1 thread against trial k at 2, which ran one after the
other on the same machine state) and their median, the steadier figure when the machine's speed drifts.

Each count's ``trials_steal_s`` is the CPU time the hypervisor gave to other guests during each trial
(``steal`` in ``/proc/stat``, summed over the machine's CPUs; ``None`` where it is not reported): on a
virtual machine a trial with seconds of it ran on a slower machine than its pair, and its pair's
speed-up says more about the host than about the program.

With ``--ceiling`` each repeat also runs two one-thread jobs at once, as two processes that share
nothing (no GIL, no memory), right after the 1- and 2-thread trials.  ``2 · T₁ / mean(T₁ᵃ, T₁ᵇ)`` is
then what the machine gave two busy cores at that moment, relative to one (``two_core_ceilings``; 2.0 on
two cores that do not slow each other down, less where the host, shared caches or memory do), and
``pair_speedups_over_ceiling`` is each two-thread speed-up as a share of it: the program's part of the
figure, apart from the machine's.

Run it on a quiet machine: another busy process makes every figure meaningless.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import comparable_numbers, emit, peak_rss_mb  # noqa: E402
from kernels.threads import ENV  # noqa: E402

STAGE = "classical systems (kernels, KCCA, NN)"


def default_counts() -> list[int]:
    """1, 2, 4, … and the number of usable cores."""
    cores = len(os.sched_getaffinity(0))
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return counts + [cores]


def build_native(env: dict) -> None:
    """Compile (or verify) the C kernels into ``env``'s ``$ITR_CACHE_DIR`` once, outside the timings."""
    code = ("from kernels.image.native import load; from kernels.text.native import load_softtri; "
            "from kernels.text.tagrank_native import load_tagrank; load(); load_softtri(); load_tagrank()")
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, check=True)


def steal_seconds() -> float | None:
    """CPU seconds stolen from this virtual machine by its host so far, all CPUs together (the ``steal``
    field of ``/proc/stat``'s ``cpu`` line); ``None`` where the system does not report it."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def run_cold(count: int, tmp: Path, env: dict, extra: list[str], unit: str = "threads", tag: str = "") -> dict:
    """One cold main job at ``count`` threads (``unit="threads"``: ``ITR_NUM_THREADS``) or on a local
    cluster of ``count`` workers (``unit="workers"``: ``--workers``): wall time, the stage timing and the
    numbers.  Its output and cache folders are ``tmp/run-<count><tag>`` and ``tmp/cache-<count><tag>``."""
    out = tmp / f"run-{count}{tag}"
    cmd = [sys.executable, "-m", "experiments.flickr8k_kcca", "--metrics", "none", "--no-progress",
           "--cache-dir", str(tmp / f"cache-{count}{tag}"), "--out", str(out), *extra]
    if unit == "workers":
        cmd += ["--workers", str(count)]
    else:
        env = dict(env, **{ENV: str(count)})
    t0, steal0 = time.perf_counter(), steal_seconds()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    wall, steal1 = time.perf_counter() - t0, steal_seconds()
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"main job at {count} {unit} failed with exit code {proc.returncode}")
    results = json.loads((out / "results.json").read_text())
    return {"wall_s": wall, "stage_s": float(results["timings_s"][STAGE]),
            "steal_s": None if steal0 is None or steal1 is None else steal1 - steal0,
            "numbers": comparable_numbers(results, drop=("command", "provenance"))}


def side_by_side(tmp: Path, env: dict, extra: list[str]) -> list[dict]:
    """Two cold one-thread jobs at once, as two processes: what this machine gives two busy cores that
    share nothing (no GIL, no memory), the ceiling of a two-thread speed-up at that moment."""
    with ThreadPoolExecutor(max_workers=2) as pool:   # each thread only waits on its job's process
        runs = list(pool.map(lambda tag: run_cold(1, tmp, env, extra, "threads", tag), ("a", "b")))
    for tag in ("a", "b"):
        shutil.rmtree(tmp / f"cache-1{tag}")
        shutil.rmtree(tmp / f"run-1{tag}")
    return runs


def ceiling_summary(alone: list[dict], pairs: list[list[dict]], speedups: list[float]) -> dict:
    """Per trial ``k``: the two-core ceiling ``2 · T₁ / mean(T₁ᵃ, T₁ᵇ)`` (``T₁`` the one-thread trial run
    alone, ``T₁ᵃ``, ``T₁ᵇ`` the two run side by side right after trial ``k``'s two-thread run), and the
    two-thread speed-up as a fraction of it; their medians."""
    ceilings = [2 * a["stage_s"] / float(np.mean([r["stage_s"] for r in p])) for a, p in zip(alone, pairs)]
    shares = [s / c for s, c in zip(speedups, ceilings)]
    return {"side_by_side_s": [[round(r["stage_s"], 1) for r in p] for p in pairs],
            "side_by_side_steal_s": [[None if r["steal_s"] is None else round(r["steal_s"], 1) for r in p]
                                     for p in pairs],
            "two_core_ceilings": [round(c, 2) for c in ceilings],
            "median_two_core_ceiling": round(float(np.median(ceilings)), 2),
            "pair_speedups_over_ceiling": [round(x, 2) for x in shares],
            "median_pair_speedup_over_ceiling": round(float(np.median(shares)), 2)}


def median_run(trials: list[dict]) -> dict:
    """The trial with the median stage time (the lower median for an even count)."""
    return sorted(trials, key=lambda r: r["stage_s"])[(len(trials) - 1) // 2]


def pair_speedups(trials: dict[int, list[dict]], slow: int, fast: int) -> dict:
    """Each interleaved pair's speed-up of ``fast`` threads over ``slow`` (trial k of each ran one after
    the other, on the same machine state) and their median."""
    pairs = [a["stage_s"] / b["stage_s"] for a, b in zip(trials[slow], trials[fast])]
    return {f"pair_speedups_{fast}_vs_{slow}": [round(r, 2) for r in pairs],
            f"median_pair_speedup_{fast}_vs_{slow}": round(float(np.median(pairs)), 2)}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default=None, metavar="LIST",
                    help="comma-separated thread counts (default: 1, 2, 4, … and the usable cores)")
    ap.add_argument("--workers", default=None, metavar="LIST",
                    help="comma-separated worker counts: run the main job with --workers N (a local Dask "
                         "cluster) for each, instead of thread counts")
    ap.add_argument("--quick", action="store_true", help="measure the --quick default (600 images)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--repeat", type=int, default=1, metavar="N",
                    help="measure every count N times, interleaved (1, 2, 1, 2, …), and report the "
                         "median (default 1; a shared or virtual machine's timings vary by 10 %% between runs)")
    ap.add_argument("--ceiling", action="store_true",
                    help="after each 1- and 2-thread trial, also run two one-thread jobs side by side (two "
                         "processes) and report the machine's two-core ceiling, 2 x (one alone) / (one of "
                         "two at once), and each pair's speed-up as a share of it (needs --threads with "
                         "1 and 2)")
    ap.add_argument("--keep", metavar="DIR", default=None,
                    help="keep each run's output folder (results.json, report, run.log) as DIR/run-<count>")
    args = ap.parse_args(argv)
    if args.threads and args.workers:
        ap.error("--threads and --workers: give one of them")
    unit = "workers" if args.workers else "threads"
    given = args.workers or args.threads
    try:
        counts = [int(t) for t in given.split(",")] if given else default_counts()
    except ValueError:
        ap.error(f"--{unit} {given}: expected whole numbers separated by commas, e.g. 1,2")
    if not counts or min(counts) < 1:
        ap.error(f"--{unit}: every count must be at least 1")
    if args.ceiling and (unit != "threads" or not {1, 2} <= set(counts)):
        ap.error("--ceiling compares 2 threads with 1: give --threads with 1 and 2 (e.g. --threads 1,2)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        env = dict(os.environ, PYTHONUNBUFFERED="1", ITR_CACHE_DIR=str(tmp / "native"))
        build_native(env)
        trials: dict[int, list[dict]] = {t: [] for t in counts}
        pairs: list[list[dict]] = []
        extra = ["--quick"] if args.quick else []
        for _ in range(max(1, args.repeat)):
            for t in counts:
                trials[t].append(run_cold(t, tmp, env, extra, unit))
                shutil.rmtree(tmp / f"cache-{t}")   # the next trial is cold again
                if args.keep:
                    shutil.copytree(tmp / f"run-{t}", Path(args.keep) / f"run-{t}", dirs_exist_ok=True)
                shutil.rmtree(tmp / f"run-{t}")
            if args.ceiling:
                pairs.append(side_by_side(tmp, env, extra))
    runs = {t: median_run(ts) for t, ts in trials.items()}
    reference = trials[min(counts)][0]["numbers"]
    base_t = min(counts)
    base = runs[base_t]
    curve = [{unit: t, "classical_stage_s": round(r["stage_s"], 1), "job_wall_s": round(r["wall_s"], 1),
              "trials_s": [round(x["stage_s"], 1) for x in trials[t]],
              "trials_steal_s": [None if x["steal_s"] is None else round(x["steal_s"], 1) for x in trials[t]],
              f"speedup_vs_{base_t}": round(base["stage_s"] / r["stage_s"], 2),
              "efficiency": round(base["stage_s"] / r["stage_s"] * base_t / t, 2),
              "numbers_identical": all(x["numbers"] == reference for x in trials[t])}
             for t, r in runs.items()]
    out = {"cores": len(os.sched_getaffinity(0)), "unit": unit, "quick": args.quick, "curve": curve,
           "peak_rss_mb": round(peak_rss_mb(children=True)),   # the largest of the runs
           "identical_numbers": all(c["numbers_identical"] for c in curve)}
    if unit == "threads" and 1 in runs and 2 in runs:
        out["speedup_2_vs_1"] = round(runs[1]["stage_s"] / runs[2]["stage_s"], 2)
        out.update(pair_speedups(trials, 1, 2))
        out["target_2_vs_1"] = 1.7
        if pairs:
            out.update(ceiling_summary(trials[1], pairs, [a["stage_s"] / b["stage_s"]
                                                          for a, b in zip(trials[1], trials[2])]))
            out["side_by_side_numbers_identical"] = all(r["numbers"] == reference for p in pairs for r in p)
    if unit == "threads" and 2 in runs and 16 in runs:
        out["speedup_16_vs_2"] = round(runs[2]["stage_s"] / runs[16]["stage_s"], 2)
        out.update(pair_speedups(trials, 2, 16))
        out["target_16_vs_2"] = 5.0
    if args.json:
        emit(out, True)
        return
    emit({k: v for k, v in out.items() if k != "curve"}, False)
    print()
    header = list(curve[0])
    print("  ".join(f"{h:>18}" for h in header))
    for c in curve:
        print("  ".join(f"{str(c[h]):>18}" for h in header))


if __name__ == "__main__":
    main()
