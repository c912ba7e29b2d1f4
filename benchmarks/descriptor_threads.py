"""What one image's descriptors cost on one thread and on several: wall time, CPU time, the kernel's share
of it and the page faults, per image.

The per-image pass of :class:`kernels.image.ImageKernel` (codebook samples and visual words) runs on
``n_jobs`` threads.  Besides the GIL, what threads add is kernel time: memory that glibc's per-thread
arenas handed back to the system comes back as zeroed pages (huge pages for numpy arrays of 4 MB and
more), and the GIL is handed from thread to thread through futexes.  This script measures the pass as the
kernel runs it (images of the built-in teaching set rendered, then colour, texture and SIFT descriptors
extracted; BLAS and OpenCV held to one thread per worker) on 1, 2, … threads, each in a fresh process so
that no thread count inherits another's heap:

    python benchmarks/descriptor_threads.py                      # 300 images, 1 and 2 threads
    python benchmarks/descriptor_threads.py --threads 1,2,4 --images 500 --json

Figures per thread count: ``wall_s``, ``speedup`` (against the first count), ``cpu_ms_per_image``,
``system_ms_per_image`` (the kernel's part of the CPU time) and ``minor_faults_per_image``.  Every run
checks that its descriptors are the same bits as the first run's (``identical``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import resource
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._common import emit  # noqa: E402


def measure(n_images: int, threads: int) -> dict:
    """The pass over ``n_images`` teaching images on ``threads`` threads, in this process."""
    # imported here, in the child runs only: the parent process just starts them and reads their figures
    from threadpoolctl import threadpool_limits

    from corpora.teaching import make_teaching_set
    from kernels.image.descriptors import FEATURES, DescriptorParams, extract_descriptors, one_opencv_thread

    corpus = make_teaching_set()
    ids = list(corpus.image_ids)[: n_images + 3]
    params = DescriptorParams()

    def one(image_id):
        return extract_descriptors(corpus.load_image(image_id), params, FEATURES)

    with threadpool_limits(limits=1), one_opencv_thread():
        for image_id in ids[:3]:   # warm-up: the filter bank's spectra, OpenCV's SIFT, the renderer
            one(image_id)
        ids = ids[3:]
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        if threads == 1:
            out = [one(i) for i in ids]
        else:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                out = list(pool.map(one, ids))
        wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    h = hashlib.sha256()
    for desc in out:
        for f in FEATURES:
            h.update(desc[f][0].tobytes())
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return {"threads": threads, "images": len(ids), "wall_s": round(wall, 3),
            "cpu_ms_per_image": round(1e3 * cpu / len(ids), 3),
            "system_ms_per_image": round(1e3 * (r1.ru_stime - r0.ru_stime) / len(ids), 3),
            "minor_faults_per_image": round((r1.ru_minflt - r0.ru_minflt) / len(ids), 1),
            "digest": h.hexdigest()[:16]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default: 1,2)")
    ap.add_argument("--images", type=int, default=300, help="teaching images per run (default: 300)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)   # a child run: one count
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.images, args.one)))
        return 0
    runs = []
    for t in (int(x) for x in args.threads.split(",")):
        child = subprocess.run([sys.executable, __file__, "--one", str(t), "--images", str(args.images)],
                               check=True, capture_output=True, text=True)
        runs.append(json.loads(child.stdout.strip().splitlines()[-1]))
    base = runs[0]
    result = {}
    for r in runs:
        t = r["threads"]
        result[f"wall_s_{t}"] = r["wall_s"]
        result[f"speedup_{t}"] = round(base["wall_s"] / r["wall_s"], 3)
        for k in ("cpu_ms_per_image", "system_ms_per_image", "minor_faults_per_image"):
            result[f"{k}_{t}"] = r[k]
        result[f"identical_{t}"] = r["digest"] == base["digest"]
    result["images"] = base["images"]
    emit(result, args.json)
    return 0 if all(r["digest"] == base["digest"] for r in runs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
