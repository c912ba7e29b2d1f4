"""Thread counts shared by the compiled and threaded kernels (image features and Grams, soft TRI), and the
rule that keeps BLAS out of the numbers.

The results of every kernel that takes a thread count do not depend on it (each output entry is computed
by one thread in a fixed order), so the count only changes speed.  BLAS / LAPACK are the exception: an
OpenBLAS product or eigendecomposition on 2 threads differs in the last bits from the same call on 1
(it splits sums between threads).  Work whose numbers must not depend on the machine's cores therefore
runs under :func:`one_blas_thread` and gets its parallelism from running independent pieces side by side
(e.g. whole classical systems, :func:`kcca.systems.run_systems`).

The threads that run side by side alternate between long calls that release the GIL (numpy, OpenCV,
LAPACK, the compiled kernels) and short Python steps between them.  :func:`short_switch_interval` keeps a
thread that returns from such a call from waiting CPython's default 5 ms for the GIL while another thread
runs Python.

A team of threads that runs whole tasks side by side (:func:`kcca.runner.run_systems`) idles once fewer
tasks are left than threads.  :func:`lending_threads` lends those threads to the tasks still running, and
:func:`spare_map` uses them for work that splits into independent pieces (e.g. one KCCA solve per κ).
"""
from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from threadpoolctl import threadpool_limits

from corpora.parallel import task_threads

ENV = "ITR_NUM_THREADS"

__all__ = ["ENV", "SWITCH_INTERVAL_S", "CountedSetting", "ThreadLender", "default_threads", "lending_threads",
           "one_blas_thread", "short_switch_interval", "spare_map", "torch_threads"]

#: The interpreter's thread switch interval (:func:`sys.setswitchinterval`) while threaded kernels run,
#: in seconds (CPython's default: 5 ms).
SWITCH_INTERVAL_S = 0.0005


class CountedSetting:
    """A process-wide setting (read with ``get``, written with ``put``) held at a value while any caller is
    inside :meth:`held`.  Nesting and several threads entering at once are counted: the first entry saves
    the setting and sets it, the last exit restores it (only when it was changed)."""

    def __init__(self, get: Callable[[], object], put: Callable[[object], None]):
        self._get, self._put = get, put
        self._lock = threading.Lock()
        self._depth, self._saved, self._changed = 0, None, False

    @contextmanager
    def held(self, value, when: Callable[[object], bool] | None = None):
        """The setting at ``value`` while inside; ``when(saved)`` false leaves it as it was (e.g. a
        shorter interval already set)."""
        with self._lock:
            if self._depth == 0:
                self._saved = self._get()
                self._changed = when is None or bool(when(self._saved))
                if self._changed:
                    self._put(value)
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._changed:
                    self._put(self._saved)


_SWITCH = CountedSetting(sys.getswitchinterval, sys.setswitchinterval)


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


def _torch():
    import torch  # heavy (seconds to import): only the callers that compute with torch need it

    return torch


_TORCH_ONE = CountedSetting(lambda: _torch().get_num_threads(), lambda n: _torch().set_num_threads(int(n)))


@contextmanager
def torch_threads(n: int | None):
    """torch's intra-op threads (:func:`torch.set_num_threads`, process-wide) at ``n`` while inside,
    restored after; ``None`` leaves them as they are.

    torch's CPU results can depend on them, as BLAS's do: the teaching CLIP's image features of a batch of
    6 images on 2 threads differ from those on 1 in the last bits.  Work whose numbers must not depend on
    the machine's cores therefore runs on one (``n = 1``) and gets its parallelism from independent pieces
    side by side.  Entries with ``n = 1`` are counted (:class:`CountedSetting`), so threads that enter and
    leave at different times keep one torch thread until the last one leaves; another ``n`` is set and
    restored as given (a caller's explicit choice)."""
    if n is None:
        yield
        return
    if int(n) == 1:
        with _TORCH_ONE.held(1):
            yield
        return
    torch = _torch()
    old = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(old)


def short_switch_interval(seconds: float = SWITCH_INTERVAL_S):
    """The interpreter's thread switch interval held at ``seconds`` (at most; process-wide) while any
    caller is inside.

    A thread that leaves a GIL-free call (a numpy, OpenCV or LAPACK call, a compiled kernel) must take the
    GIL back before its next Python step.  If another thread is running Python, CPython lets that thread
    keep the GIL until its switch interval has passed (5 ms by default), and the returning thread's core
    idles meanwhile.  The classical stage's threads make thousands of such returns per second (descriptor
    extraction between OpenCV / FFT calls, the KCCA sweeps between small numpy calls), so a shorter
    interval keeps both cores busier.  Measured on the main job cold on 2 threads (5 interleaved pairs of
    runs): 0.5 ms instead of 5 ms took the classical stage from 46.0 to 44.2 s (median; every pair
    faster, by 1.5–3.0 s), and the CPU from 171 % to 176 % busy; 0.1 ms was no faster than 0.5 ms.  The
    interval changes no number (it only decides when threads take turns).

    Nesting and several threads entering at once are counted (:class:`CountedSetting`): the first entry
    saves the interval and shortens it to ``seconds`` (a shorter one is kept), the last exit restores it.
    """
    seconds = float(seconds)
    return _SWITCH.held(seconds, when=lambda saved: seconds < saved)


class ThreadLender:
    """The threads of a team that runs ``tasks`` whole tasks on ``threads`` threads and that no task
    needs: ``threads − unfinished tasks − threads already lent`` (none while at least as many tasks are
    unfinished, queued ones included, as there are threads).

    A running task borrows them (:meth:`borrow`, never waiting) for work it can split, and gives them back
    when that work is done; :meth:`task_done` frees a finished task's thread for lending.
    """

    def __init__(self, threads: int, tasks: int):
        self._lock = threading.Lock()
        self._threads, self._unfinished, self._lent = int(threads), int(tasks), 0

    def task_done(self) -> None:
        with self._lock:
            self._unfinished -= 1

    def borrow(self, wanted: int) -> int:
        """Up to ``wanted`` idle threads, taken now (0 when none is idle)."""
        with self._lock:
            got = max(0, min(int(wanted), self._threads - max(self._unfinished, 0) - self._lent))
            self._lent += got
            return got

    def give_back(self, n: int) -> None:
        with self._lock:
            self._lent -= int(n)


_LENDER: dict[str, ThreadLender | None] = {"current": None}
_LENDER_LOCK = threading.Lock()


@contextmanager
def lending_threads(threads: int, tasks: int):
    """A :class:`ThreadLender` for a team of ``threads`` threads and ``tasks`` tasks, the one
    :func:`spare_map` borrows from while inside (process-wide: one team at a time; a team entered while
    another is inside, nested or on another thread, lends nothing, and the first one keeps lending)."""
    lender = ThreadLender(threads, tasks)
    with _LENDER_LOCK:
        first = _LENDER["current"] is None
        if first:
            _LENDER["current"] = lender
    if not first:
        yield ThreadLender(0, 0)
        return
    try:
        yield lender
    finally:
        with _LENDER_LOCK:
            _LENDER["current"] = None


def spare_map(fn: Callable, items: Iterable) -> list:
    """``[fn(x) for x in items]``, on this thread plus the team's idle threads (:func:`lending_threads`)
    when there are any, else on this thread alone.

    The results are in ``items`` order and each is computed by one call of ``fn`` whichever thread runs
    it, so they do not depend on how many threads were lent (``fn`` must not depend on which thread runs
    it; BLAS stays at the team's limit, which threadpoolctl sets for the whole process).
    """
    items = list(items)
    lender = _LENDER["current"]
    extra = lender.borrow(len(items) - 1) if lender is not None and len(items) > 1 else 0
    if extra == 0:
        return [fn(x) for x in items]
    try:
        with ThreadPoolExecutor(max_workers=extra + 1, thread_name_prefix="spare") as pool:
            return list(pool.map(fn, items))
    finally:
        lender.give_back(extra)
