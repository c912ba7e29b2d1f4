"""Run a command and print the peak memory of its whole process tree.

``/usr/bin/time -v`` reports the largest resident set of *one* process; a run with ``--workers N`` is N + 2
processes (the job, the Dask scheduler's nanny-managed workers), whose memory adds up.  This samples the
resident set size of the command and every descendant once per ``--interval`` seconds and prints the peak
of their sum, the peak of the largest single process, and the time of the peak::

    python benchmarks/peak_memory.py --log /tmp/mem.tsv -- python -m experiments.flickr8k_kcca \\
        --data /data/coco-standin/dataset_coco.json --images /data/coco-standin --workers 2

RSS counts pages shared between processes (the libraries every worker maps) once per process, so the sum
is an upper bound on what the tree takes.  ``--log`` writes one line per sample (seconds, total GB,
number of processes, largest process GB).  The command's exit status is returned.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import psutil   # a dependency of dask.distributed


def tree_rss(root: psutil.Process) -> tuple[int, int, int]:
    """``(sum of RSS, number of processes, largest RSS)`` in bytes over ``root`` and its descendants."""
    total, count, largest = 0, 0, 0
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0, 0, 0
    for p in procs:
        try:
            rss = p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        total, count, largest = total + rss, count + 1, max(largest, rss)
    return total, count, largest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    ap.add_argument("--log", type=Path, help="write every sample to this tab-separated file")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    args = ap.parse_args(argv)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("give the command to run after --")
    start = time.monotonic()
    proc = subprocess.Popen(cmd)
    root = psutil.Process(proc.pid)
    peak = (0, 0.0, 0)
    peak_one = 0
    log = args.log.open("w", buffering=1) if args.log else None
    if log:
        log.write("seconds\ttotal_gb\tprocesses\tlargest_gb\n")
    try:
        while proc.poll() is None:
            total, count, largest = tree_rss(root)
            t = time.monotonic() - start
            if total > peak[0]:
                peak = (total, t, count)
            peak_one = max(peak_one, largest)
            if log:
                log.write(f"{t:.0f}\t{total / 2**30:.3f}\t{count}\t{largest / 2**30:.3f}\n")
            time.sleep(args.interval)
    finally:
        if log:
            log.close()
    elapsed = time.monotonic() - start
    print(f"exit status {proc.returncode}; wall {elapsed / 60:.1f} min; peak memory of the process tree "
          f"{peak[0] / 2**30:.2f} GB at {peak[1] / 60:.1f} min ({peak[2]} processes); largest single "
          f"process {peak_one / 2**30:.2f} GB", file=sys.stderr, flush=True)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
