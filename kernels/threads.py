"""Thread counts shared by the compiled and threaded kernels (image features and Grams, soft TRI).

The results of every kernel that takes a thread count do not depend on it (each output entry is computed
by one thread in a fixed order), so the count only changes speed.
"""
from __future__ import annotations

import os

ENV = "ITR_NUM_THREADS"


def default_threads() -> int:
    """Worker threads: ``$ITR_NUM_THREADS`` (a positive integer) or the number of usable CPU cores.

    Raises
    ------
    ValueError
        If ``$ITR_NUM_THREADS`` is set to something other than an integer (values below 1 count as 1).
    """
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
