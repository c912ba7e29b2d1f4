"""Several classical systems side by side on one machine's cores, with numbers that do not depend on how many.

The image kernels' feature extraction and Gram rows already use every core
(:class:`~kernels.image.ImageKernel`, ``n_jobs``), but a system's KCCA work — its text kernel, the
decompositions, the κ solves, the (n, κ) sweep on dev and the Borda ensembles (Hodosh et al. 2013,
Sec. 4.1.3) — is a sequence of mid-sized numpy / LAPACK calls that one thread runs best.  On a 2-core
machine it was a third of the cold classical stage, on one core, while the other idled.  The systems are
independent once their kernels exist, so :func:`run_systems` runs ``n_jobs`` of them at a time on threads
(numpy releases the GIL, and so do the eigendecompositions through :func:`kcca.lapack.eigh`) over one :class:`~kcca.kernel_store.KernelStore`, which fits each
kernel once and serialises the calls on one kernel.

Determinism: BLAS / LAPACK results depend on their own thread count (an OpenBLAS ``eigh`` on 2 threads
differs in the last bits from 1), so the whole run holds BLAS to one thread
(:func:`kernels.threads.one_blas_thread`) for every ``n_jobs``; every other threaded kernel computes each
output entry on one thread in a fixed order.  The numbers are therefore the same for any ``n_jobs`` and
any core count (tested: ``tests/test_run_systems.py``; measured by ``benchmarks/thread_scaling.py``).

Once fewer systems are left unfinished than there are threads, the idle threads are lent to the running
systems (:func:`kernels.threads.lending_threads`), whose κ solves, dev sweeps and ensembles split over them
(:func:`kernels.threads.spare_map`; each piece is computed as on one thread, so the numbers stay the same).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import islice

from corpora.protocol import hodosh_pool
from kcca.kernel_store import KernelStore
from kcca.systems import SystemRun, run_system
from kernels.threads import default_threads, lending_threads, one_blas_thread, short_switch_interval

__all__ = ["run_systems", "systems_in_parallel"]

#: Systems submitted per thread of :func:`run_systems` (those running and those queued behind them).
LOOKAHEAD = 2


def systems_in_parallel(n_jobs: int | None, solver: str = "exact") -> int:
    """How many systems :func:`run_systems` runs at a time: ``n_jobs`` (``None``: ``$ITR_NUM_THREADS`` or
    every usable core, :func:`kernels.threads.default_threads`), but one on the low-rank solver, whose
    systems each hold ``N × rank`` factors (COCO: gigabytes) and whose kernel columns are the parallel
    work (:mod:`kcca.lowrank`, :class:`~corpora.parallel.BlockExecutor`)."""
    n = default_threads() if n_jobs is None else max(1, int(n_jobs))
    return 1 if solver == "lowrank" else n


def run_systems(names: Sequence[str], corpus, *, store: KernelStore | None = None, n_jobs: int | None = None,
                seed: int = 0, skip_missing_images: bool = False, pools: Mapping[str, object] | None = None,
                **kwargs) -> Iterator[SystemRun]:
    """:func:`~kcca.systems.run_system` for each of ``names``, ``n_jobs`` at a time, yielded in ``names`` order.

    Parameters
    ----------
    names : system names (any spelling :func:`~kcca.systems.canonical_name` accepts)
    corpus : corpora.base.Corpus with ``train``/``dev``/``test`` splits
    store : the :class:`~kcca.kernel_store.KernelStore` every system shares (default: a fresh one)
    n_jobs : systems at a time (:func:`systems_in_parallel`; ``None``: every usable core)
    seed, skip_missing_images, pools : as :func:`~kcca.systems.run_system` (the default pools are built
        once and shared)
    **kwargs : passed to every :func:`~kcca.systems.run_system` call (grids, ``solver``, kernels' settings)

    Yields
    ------
    SystemRun
        In ``names`` order, each as soon as it and every earlier one are done.  At most ``n_jobs``
        systems run at a time, and at most :data:`LOOKAHEAD` ``× n_jobs`` are submitted (running, queued
        or done and waiting for their turn), so a thread whose system ends early starts the next one
        instead of waiting for the system at the head of the line.  Every system in flight comes later in
        ``names`` than the one the caller handles, so a caller that frees what no later system needs
        (e.g. :meth:`KernelStore.drop_text` after the last system that uses a text kernel, in ``names``
        order) never frees what a running one uses.

    Notes
    -----
    The whole generator runs with BLAS / LAPACK held to one thread (the module docstring says why) and with
    a short thread switch interval (:func:`kernels.threads.short_switch_interval`), also for
    ``n_jobs = 1``: a system's numbers here are the same for every ``n_jobs``, and may differ in the
    last bits from a lone :func:`~kcca.systems.run_system` call on a multi-threaded BLAS.  An error in one
    system is raised when its turn comes; the systems not started yet are cancelled.
    """
    store = KernelStore() if store is None else store
    if pools is None:
        pools = {s: hodosh_pool(corpus, s, seed=seed, skip_missing_images=skip_missing_images)
                 for s in ("dev", "test")}
    n = systems_in_parallel(n_jobs, kwargs.get("solver", "exact"))
    names = list(names)

    with one_blas_thread(), short_switch_interval(), lending_threads(n, len(names)) as lender:
        def one(name: str) -> SystemRun:
            try:
                return run_system(name, corpus, store=store, seed=seed, pools=pools,
                                  skip_missing_images=skip_missing_images, **kwargs)
            finally:   # its thread is idle now: once no system waits for it, the running ones may borrow it
                lender.task_done()

        if n == 1:
            for name in names:
                yield one(name)
            return
        pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="kcca-system")
        try:
            todo = iter(names)
            # n running and the rest queued behind them: a thread whose system ends before the one at the
            # head of the line takes the next system instead of idling until the head's turn
            ahead: deque[Future] = deque(pool.submit(one, name) for name in islice(todo, LOOKAHEAD * n))
            while ahead:
                run = ahead.popleft().result()
                nxt = next(todo, None)
                if nxt is not None:
                    ahead.append(pool.submit(one, nxt))
                yield run
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
