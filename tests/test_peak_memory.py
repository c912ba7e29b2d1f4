"""benchmarks/peak_memory.py: the peak memory of a command's whole process tree (a run with --workers
is several processes), not of one process as /usr/bin/time reports."""
from __future__ import annotations

import sys

CHILD = "import time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(3)"


def test_peak_counts_every_process_of_the_tree(benchmark_module, tmp_path, capsys):
    mod = benchmark_module("peak_memory")
    # a parent holding ~300 MB that starts a child holding another ~300 MB
    parent = ("import subprocess, sys, time; b = bytearray(300 << 20); b[::4096] = b'x' * len(b[::4096]); "
              f"subprocess.run([sys.executable, '-c', {CHILD!r}])")
    log = tmp_path / "mem.tsv"
    assert mod.main(["--interval", "0.2", "--log", str(log), "--", sys.executable, "-c", parent]) == 0
    err = capsys.readouterr().err
    total = float(err.split("peak memory of the process tree ")[1].split(" GB")[0])
    largest = float(err.split("largest single process ")[1].split(" GB")[0])
    assert total > 0.55 and 0.28 < largest < total        # both processes' pages, not the larger one's
    rows = log.read_text().splitlines()
    assert rows[0].split("\t") == ["seconds", "total_gb", "processes", "largest_gb"]
    assert max(int(r.split("\t")[2]) for r in rows[1:]) == 2
    assert mod.main(["--", sys.executable, "-c", "raise SystemExit(3)"]) == 3
