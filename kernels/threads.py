"""Thread counts shared by the compiled and threaded kernels (image features and Grams, soft TRI), and the
rule that keeps BLAS out of the numbers.

The results of every kernel that takes a thread count do not depend on it (each output entry is computed
by one thread in a fixed order), so the count only changes speed.  BLAS / LAPACK are the exception: an
OpenBLAS product or eigendecomposition on 2 threads differs in the last bits from the same call on 1
(it splits sums between threads).  Work whose numbers must not depend on the machine's cores therefore
runs under :func:`one_blas_thread` and gets its parallelism from running independent pieces side by side
(e.g. whole classical systems, :func:`kcca.systems.run_systems`).
"""
from __future__ import annotations

import os

from threadpoolctl import threadpool_limits

from corpora.parallel import task_threads

ENV = "ITR_NUM_THREADS"

__all__ = ["ENV", "default_threads", "one_blas_thread"]


def default_threads() -> int:
    """Worker threads: one inside a cluster task (:func:`corpora.parallel.task_threads`: the cluster runs
    one block per worker thread), else ``$ITR_NUM_THREADS`` (a positive integer) or the number of usable
    CPU cores.

    Raises
    ------
    ValueError
        If ``$ITR_NUM_THREADS`` is set to something other than an integer (values below 1 count as 1).
    """
    task = task_threads()
    if task is not None:
        return task
    env = os.environ.get(ENV, "").strip()
    if env:
        try:
            return max(1, int(env))
        except ValueError:
            raise ValueError(f"{ENV}={env!r}: expected a whole number of threads, e.g. {ENV}=2") from None
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return max(1, os.cpu_count() or 1)


def one_blas_thread():
    """Context manager holding BLAS / LAPACK to one thread, process-wide (threadpoolctl).

    Enter it from the thread that starts the work, around all of it: threadpoolctl's limits are global
    to the loaded BLAS libraries, so threads started inside run under the same limit.
    """
    return threadpool_limits(limits=1, user_api="blas")
