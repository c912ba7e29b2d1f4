"""Block executor: one function mapped over fixed-size blocks, in this process or on a Dask cluster.

Three modes, chosen by the main job's ``--workers`` / ``--scheduler`` (docs/scaling.md):

* **in-process** (default): blocks run here, one after the other (each block may use this machine's
  threads, :func:`kernels.threads.default_threads`), exactly as a run without Dask;
* **local cluster** (``workers=N``): a :class:`distributed.LocalCluster` of ``N`` worker processes on
  this machine, one thread each (the parallelism is over blocks, so BLAS / OpenMP / OpenCV inside a
  block are held to one thread: no oversubscription);
* **existing cluster** (``scheduler=ADDRESS``): the blocks go to a running Dask scheduler (``dask
  scheduler`` + ``dask worker`` on other machines, or dask-jobqueue on SLURM).  The workers must import
  this package and see the same cache folder (a shared file system) for their blocks to be reused.

Dask (``dask.distributed``) is the scheduling engine: this module only cuts the work into blocks,
ships them and puts the results back **in block order**, so the numbers never depend on how many
workers there are or which finished first.  Each block's result is written once, atomically, into the
:class:`~corpora.cache.DiskCache` under a key of data + parameters + block, by the worker that computed
it; a task whose worker is killed or lost is rescheduled by Dask on another worker, which finds the
blocks already written and recomputes only the lost ones.
"""
from __future__ import annotations

import functools
import logging
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from threadpoolctl import ThreadpoolController
from tqdm.auto import tqdm

from corpora.cache import NO_CACHE, DiskCache

log = logging.getLogger(__name__)

MODES = ("in-process", "local cluster", "scheduler")
#: Seconds to wait for ``--scheduler ADDRESS`` to answer before giving up with an error.
CONNECT_TIMEOUT_S = 20
#: Seconds to wait for a ``--workers N`` cluster's workers to start.
WORKERS_START_TIMEOUT_S = 120

#: ``fn(context, block, cache) -> {name: array}``: the work of one block.  ``cache`` is the
#: :class:`DiskCache` of the process running it (the same folder as the caller's).
BlockFn = Callable[[Any, Any, DiskCache], Mapping[str, np.ndarray]]


class Shared:
    """A block context sent to a cluster's workers once and reused by every :meth:`BlockExecutor.map_blocks`
    call given this same object (e.g. the training histograms that each of the low-rank solver's kernel
    columns is computed against: hundreds of maps over the same rows).  It may also be one value of a
    dict context whose other values change from call to call (a CLIP backbone beside each call's token
    rows): only those others are sent again.  In-process it is just ``value``.
    :meth:`BlockExecutor.forget` (or closing the executor) lets the cluster drop it."""

    def __init__(self, value, rebuild: Callable[[], Any] | None = None, meta: Mapping | None = None):
        self.value = value
        #: Gives ``value`` again.  When given, the executor drops ``value`` from this process once the
        #: cluster holds it (at COCO size the training histograms would otherwise be held here as well as
        #: on every worker), and calls it if every copy on the cluster is lost.
        self.rebuild = rebuild
        #: Small facts about ``value`` that stay here when it is dropped (e.g. its number of rows).
        self.meta = dict(meta or {})

    def get(self):
        """``value``, or a rebuilt one when it was dropped (not kept)."""
        return self.value if self.value is not None or self.rebuild is None else self.rebuild()


class ExecutorError(ValueError):
    """A cluster that cannot be started or reached (the message names the option and the reason)."""


def blocks_of(n: int, size: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` cutting ``range(n)`` into consecutive blocks of ``size`` (the last one
    shorter); the cut depends only on ``n`` and ``size``, never on the number of workers."""
    if size < 1:
        raise ValueError(f"block size must be positive, got {size}")
    return [(s, min(s + size, n)) for s in range(0, n, size)]


def _cache_spec(cache: DiskCache) -> tuple[str, bool]:
    return str(cache.root), bool(cache.enabled)


#: Seconds after a failed write before a worker's cache tries to write again (:func:`_worker_cache`).
WORKER_WRITE_RETRY_S = 60.0


@functools.lru_cache(maxsize=8)
def _worker_cache(root: str, enabled: bool) -> DiskCache:
    """One :class:`DiskCache` per folder in a worker process, so that its once-per-namespace sweep of stale
    temporaries (a listing of the whole namespace folder) runs once per worker, not once per block:
    with one entry per block that listing grew with every block written.  A worker outlives runs (a
    ``--scheduler`` cluster), so a failed write (a full disk) stops its writes for
    :data:`WORKER_WRITE_RETRY_S` seconds only, not for the worker's life."""
    return DiskCache(root, enabled=enabled, retry_writes_after=WORKER_WRITE_RETRY_S) if enabled else NO_CACHE


#: This process's threadpoolctl controller and ``len(sys.modules)`` when it was made (:func:`_one_thread`).
_CONTROLLER: list = [None, -1]


def _one_thread():
    """BLAS / OpenMP held to one thread for a block (``threadpool_limits(limits=1)``), through a controller
    made once per process: finding the loaded libraries costs about 2 ms, as much as a small block's work
    (a pivot column's row block).  It is made again when modules were imported since (an extension module
    may have loaded another BLAS or OpenMP)."""
    n = len(sys.modules)
    if _CONTROLLER[1] != n:
        _CONTROLLER[:] = [ThreadpoolController(), n]
    return _CONTROLLER[0].limit(limits=1)


#: The thread count of the cluster task running on this thread (:func:`task_threads`).
_TASK = threading.local()


def task_threads() -> int | None:
    """Threads the block running on this thread may use: 1 inside a cluster task (the cluster's
    parallelism is over blocks, one per worker thread), ``None`` elsewhere (in-process blocks, and any
    other work, use the machine's threads).  :func:`kernels.threads.default_threads` follows it, so the
    compiled kernels (soft TRI, image Grams) do not start a thread per core in every worker."""
    return getattr(_TASK, "threads", None)


def context_parts(context) -> tuple[Any, dict[str, Shared]]:
    """A map's context as ``(plain, shared)``: a dict with :class:`Shared` values gives its other items
    (sent once per call) and those values by key (each sent once for every call given it); any other
    context is ``(context, {})``."""
    if isinstance(context, Mapping) and any(isinstance(v, Shared) for v in context.values()):
        return ({k: v for k, v in context.items() if not isinstance(v, Shared)},
                {k: v for k, v in context.items() if isinstance(v, Shared)})
    return context, {}


def _local_value(context):
    """What ``fn`` gets as its context in this process: :class:`Shared` values unwrapped."""
    if isinstance(context, Shared):
        return context.get()
    plain, shared = context_parts(context)
    return {**plain, **{k: v.get() for k, v in shared.items()}} if shared else context


def _run_block(fn: BlockFn, context, block, cache_spec: tuple[str, bool], namespace: str | None,
               key, threads: int | None = None, shared: Mapping | None = None) -> dict[str, np.ndarray]:
    """One block: read its entry if some worker already wrote it, else compute and write it (atomically,
    :meth:`DiskCache.store`); BLAS / OpenMP held to one thread, and with ``threads`` (a cluster task)
    :func:`task_threads` says so to the compiled kernels.  ``shared``: the values of a dict context's
    :class:`Shared` items (:func:`context_parts`), put back beside its plain items."""
    if shared:
        context = {**context, **shared}
    cache = _worker_cache(*cache_spec)
    before = getattr(_TASK, "threads", None)
    _TASK.threads = threads
    try:
        with _one_thread():
            if namespace is None or key is None:
                return {k: np.asarray(v) for k, v in fn(context, block, cache).items()}
            return cache.get_or_compute(namespace, key, lambda: fn(context, block, cache))
    finally:
        _TASK.threads = before


def _context(context):
    """The task that holds a map's plain context on the workers (see :meth:`BlockExecutor._context_future`)."""
    return context


class BlockExecutor:
    """Where blocks run: in-process (default), on a local Dask cluster, or on an existing scheduler.

    Parameters
    ----------
    workers : int, optional
        Start a :class:`distributed.LocalCluster` of this many worker processes (one thread each).
    scheduler : str, optional
        Address of a running Dask scheduler (e.g. ``tcp://10.0.0.5:8786``) to send the blocks to.
    processes : bool
        With ``workers``: worker processes (default) or threads of this process (tests, debugging).

    The cluster starts on first use and is closed by :meth:`close` (or a ``with`` block); an existing
    scheduler is only disconnected from, never shut down.
    """

    def __init__(self, workers: int | None = None, scheduler: str | None = None, processes: bool = True):
        if workers is not None and scheduler is not None:
            raise ExecutorError("--workers starts a cluster on this machine and --scheduler joins an "
                                "existing one: give one of the two")
        if workers is not None and (isinstance(workers, bool) or int(workers) < 1):
            raise ExecutorError(f"--workers must be a positive integer, got {workers!r}")
        self.workers = None if workers is None else int(workers)
        self.scheduler = scheduler
        self.processes = processes
        self._client = None
        self._cluster = None
        self._shared: dict[int, tuple[Shared, Any]] = {}   # id(Shared) -> (it, its context future)

    @property
    def mode(self) -> str:
        """``"in-process"``, ``"local cluster"`` or ``"scheduler"``."""
        if not self.distributed:
            return MODES[0]
        return MODES[1] if self.workers is not None else MODES[2]

    @property
    def distributed(self) -> bool:
        """Whether blocks go to Dask workers."""
        return self.workers is not None or self.scheduler is not None

    # ------------------------------------------------------------------ cluster
    def client(self):
        """The Dask client (started or connected on first call)."""
        if self._client is None:
            # dask.distributed is imported here, not at module top: a heavy import that a run without
            # --workers / --scheduler never needs
            from distributed import Client, LocalCluster
            # Dask's own INFO lines (workers starting, retiring, comms closing) would flood the run's
            # console and log; its warnings and errors (a lost worker, a task retried) still show
            logging.getLogger("distributed").setLevel(logging.WARNING)
            if self.workers is not None:
                try:
                    self._cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1,
                                                 processes=self.processes, dashboard_address=None)
                except Exception as exc:  # noqa: BLE001 - a port, memory or spawn problem: one line
                    raise ExecutorError(f"--workers {self.workers}: cannot start a local Dask cluster "
                                        f"({type(exc).__name__}: {exc})") from exc
                self._client = Client(self._cluster)
                try:   # a Shared context reaches every one of them
                    self._client.wait_for_workers(self.workers, timeout=WORKERS_START_TIMEOUT_S)
                except TimeoutError as exc:
                    self.close()
                    raise ExecutorError(f"--workers {self.workers}: the workers did not start within "
                                        f"{WORKERS_START_TIMEOUT_S} s") from exc
            else:
                try:
                    self._client = Client(self.scheduler, timeout=CONNECT_TIMEOUT_S)
                except Exception as exc:  # noqa: BLE001 - OSError / TimeoutError / a bad address
                    raise ExecutorError(f"--scheduler {self.scheduler}: cannot reach the Dask scheduler "
                                        f"({type(exc).__name__}: {exc})") from exc
            self._keep_replicas()
        return self._client

    def _keep_replicas(self) -> None:
        """Stop the scheduler's Active Memory Manager.  Its default policy (ReduceReplicas, every 2 s)
        drops the copies of a datum that no queued task asks for: the copies of a :class:`Shared`
        context scattered to every worker went within seconds, and every later block of its maps then
        ran on the one worker that kept it (measured at COCO size: one of two workers idle through the
        pivot columns).  On an existing scheduler this is the cluster's setting for every client."""
        if self._client.amm.running():
            if self.scheduler is not None:
                log.warning("--scheduler %s: stopping its Active Memory Manager, whose ReduceReplicas policy "
                            "would drop the copies of the shared block contexts on the workers", self.scheduler)
            self._client.amm.stop()

    def forget(self, shared: Shared) -> None:
        """Let the cluster drop a :class:`Shared` context (no error if it was never sent)."""
        held = self._shared.pop(id(shared), None)
        if held is not None:
            held[1].release()

    @property
    def n_shared(self) -> int:
        """How many :class:`Shared` contexts the cluster holds now (sent and not forgotten)."""
        return len(self._shared)

    def close(self) -> None:
        """Disconnect; stop the local cluster if this executor started one."""
        for held in list(self._shared.values()):
            self.forget(held[0])
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None

    def __enter__(self) -> "BlockExecutor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ work
    def map_blocks(self, fn: BlockFn, blocks: Sequence, *, context=None, cache: DiskCache = NO_CACHE,
                   namespace: str | None = None, keys: Sequence | None = None, desc: str = "blocks",
                   show_progress: bool = True) -> list[dict[str, np.ndarray]]:
        """``[fn(context, block, cache) for block in blocks]``, in block order, wherever the blocks run.

        Parameters
        ----------
        fn : callable
            ``fn(context, block, cache) -> {name: array}``; a module-level function (it is pickled to the
            workers).  Its result must depend only on ``context`` and ``block``.
        blocks : sequence
            The blocks (small, picklable descriptions: index ranges, ids, row slices).
        context : object or :class:`Shared`, optional
            What every block needs (codebooks, the corpus, column histograms): sent to the cluster once
            per call, or, wrapped in :class:`Shared`, once for every call given the same object.  A dict
            may hold :class:`Shared` values beside plain ones (:func:`context_parts`): ``fn`` gets the
            dict with each such value unwrapped.
        cache, namespace, keys : optional
            With ``namespace`` and ``keys`` (one JSON key per block: data + parameters + block), each
            block's result is read from, or written once into, ``cache`` under ``namespace``.
        desc, show_progress :
            The progress bar (block progress, the cluster's included).

        Returns
        -------
        list of dict
            One result per block, in the order of ``blocks``.
        """
        blocks = list(blocks)
        if keys is not None and len(keys) != len(blocks):
            raise ValueError(f"{len(keys)} keys for {len(blocks)} blocks")
        keyed = namespace is not None and keys is not None and cache.enabled
        out: list[dict | None] = [None] * len(blocks)
        todo = []
        for i in range(len(blocks)):
            hit = cache.load(namespace, keys[i]) if keyed else None
            if hit is not None:
                cache.count(hits=1)
                out[i] = hit
            else:
                todo.append(i)
        bar = tqdm(total=len(blocks), initial=len(blocks) - len(todo), desc=desc, unit="block", leave=False,
                   disable=not show_progress or len(blocks) <= 1)
        try:
            if self.distributed:
                self._run_on_cluster(fn, blocks, todo, context, cache, namespace if keyed else None, keys,
                                     out, bar)
            else:
                value = _local_value(context)
                for i in todo:
                    out[i] = _run_block(fn, value, blocks[i], _cache_spec(cache),
                                        namespace if keyed else None, keys[i] if keyed else None)
                    bar.update(1)
        finally:
            bar.close()
        cache.count(misses=len(todo) if keyed else 0)
        return out  # type: ignore[return-value]

    def _run_on_cluster(self, fn, blocks, todo, context, cache, namespace, keys, out, bar) -> None:
        if not todo:
            return
        client = self.client()
        plain, shared = context_parts(context)
        for attempt in range(2):
            ctx = self._context_future(client, plain)
            held = {k: self._context_future(client, v) for k, v in shared.items()}
            try:
                self._submit_and_collect(client, fn, blocks, [i for i in todo if out[i] is None], ctx, held,
                                         cache, namespace, keys, out, bar)
                return
            except Exception:
                # a Shared context lives on the workers only: if every copy went with its workers, send it
                # again once and go on with the blocks not done (those done are in `out` or the cache)
                sent = [(shared[k], f) for k, f in held.items()] + ([(plain, ctx)] if isinstance(plain, Shared) else [])
                lost = [s for s, f in sent if f.status != "finished"]
                if attempt or not lost:
                    raise
                log.warning("a shared block context was lost with its workers; sending it again")
                for s in lost:
                    self.forget(s)
            finally:
                if ctx is not None and not isinstance(plain, Shared):
                    ctx.release()

    def _context_future(self, client, context):
        """The cluster's handle on a map's context.  A plain context is a task whose input the scheduler
        keeps (a lost worker's copy is recomputed elsewhere); a :class:`Shared` one (hundreds of MB to GB:
        the training histograms at COCO size) is scattered to every worker once and not kept by the
        scheduler, which on a local cluster lives in this process and would hold one more copy."""
        if context is None:
            return None
        if not isinstance(context, Shared):
            return client.submit(_context, context, pure=False)
        if id(context) not in self._shared:
            # a one-item list: scatter would send a dict's (or list's) items as separate pieces
            self._shared[id(context)] = (context, client.scatter([context.get()], broadcast=True, hash=False)[0])
            if context.rebuild is not None:
                context.value = None   # the workers hold it now
        return self._shared[id(context)][1]

    def _submit_and_collect(self, client, fn, blocks, todo, ctx, held, cache, namespace, keys, out, bar) -> None:
        """Submit the blocks ``todo`` (``held``: the dict context's :class:`Shared` values on the cluster)
        and put each result in ``out`` as it arrives."""
        from distributed import as_completed  # lazy: see client()
        futures = {}
        for i in todo:
            f = client.submit(_run_block, fn, ctx, blocks[i], _cache_spec(cache), namespace,
                              None if namespace is None else keys[i], 1, shared=held or None, pure=False)
            futures[f] = i
        try:
            for f in as_completed(futures):
                out[futures[f]] = f.result()
                f.release()
                bar.update(1)
        finally:
            for f in futures:
                f.cancel()

