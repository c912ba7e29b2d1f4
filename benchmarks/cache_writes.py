"""What one small disk-cache entry costs to write: wall time and this thread's CPU time per
``DiskCache.store``, with the entry built in memory (``corpora.npzfile.npz_bytes``, the path for entries
up to ``IN_MEMORY_MAX_BYTES``) and streamed member by member with ``zipfile`` (the path for large ones).

The image kernel writes one entry per image (its visual words: six small arrays, plus the entry's key and
digest) from its worker threads, thousands per run and 123,000 at COCO size.  Its user-mode CPU time is
Python holding the GIL, which the other workers then wait for; the rest of the wall time is the system
calls (the temporary file, ``fsync``, the rename), which do not hold it.

    python benchmarks/cache_writes.py                  # 2,000 entries per path
    python benchmarks/cache_writes.py --entries 5000 --json

Figures per path: ``<path>_ms`` (wall) and ``<path>_cpu_ms`` (this thread's CPU in user mode: the Python,
not the kernel's work in the system calls), per entry, the best of three rounds; ``cpu_ratio`` is streamed
over in-memory.  Every entry read back must equal what was written.
"""
from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import corpora.npzfile as npzfile  # noqa: E402
from benchmarks._common import emit  # noqa: E402
from corpora.cache import DiskCache  # noqa: E402


def words_entry(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """An entry shaped like one teaching image's visual words: three features' word maps and shapes."""
    arrays = {}
    for feature, n in (("lab", 256), ("texture", 3600), ("sift", 900)):
        arrays[feature] = rng.integers(0, 1000, n).astype(np.uint16)
        arrays[feature + "_shape"] = np.array([int(np.sqrt(n)), int(np.sqrt(n))], dtype=np.int64)
    return arrays


def thread_user_s() -> float:
    """This thread's user-mode CPU seconds (Linux ``RUSAGE_THREAD``; the process's elsewhere)."""
    who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
    return resource.getrusage(who).ru_utime


def measure(cache: DiskCache, entries: list[dict], tag: str) -> tuple[float, float]:
    """Best of three rounds of storing ``entries``: ``(wall ms, user-mode CPU ms)`` per entry."""
    best_wall = best_cpu = float("inf")
    for r in range(3):
        wall, cpu = time.perf_counter(), thread_user_s()
        for i, arrays in enumerate(entries):
            cache.store("image_words", {"stage": "words", "image": f"{tag}-{r}-{i}", "version": 1}, arrays)
        best_wall = min(best_wall, (time.perf_counter() - wall) / len(entries) * 1e3)
        best_cpu = min(best_cpu, (thread_user_s() - cpu) / len(entries) * 1e3)
        back = cache.load("image_words", {"stage": "words", "image": f"{tag}-{r}-0", "version": 1})
        if back is None or any(not np.array_equal(back[k], v) for k, v in entries[0].items()):
            raise AssertionError(f"{tag}: an entry did not read back as written")
    return best_wall, best_cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--entries", type=int, default=2000, help="entries written per round and path (default: 2000)")
    ap.add_argument("--dir", default=None, help="folder for the cache (default: a temporary folder, removed after)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    entries = [words_entry(rng) for _ in range(args.entries)]
    result: dict = {"entries": args.entries, "entry_kb": round(sum(a.nbytes for a in entries[0].values()) / 1024, 1)}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        cache = DiskCache(Path(tmp) / "cache")
        in_memory = measure(cache, entries, "memory")
        limit = npzfile.IN_MEMORY_MAX_BYTES
        npzfile.IN_MEMORY_MAX_BYTES = -1          # every entry streamed, as large ones are
        try:
            streamed = measure(cache, entries, "streamed")
        finally:
            npzfile.IN_MEMORY_MAX_BYTES = limit
    result.update({"in_memory_ms": round(in_memory[0], 3), "in_memory_cpu_ms": round(in_memory[1], 3),
                   "streamed_ms": round(streamed[0], 3), "streamed_cpu_ms": round(streamed[1], 3),
                   "cpu_ratio": round(streamed[1] / max(in_memory[1], 1e-9), 2)})
    emit(result, args.json)


if __name__ == "__main__":
    main()
