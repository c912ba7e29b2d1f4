"""The main job's block executor (``--workers`` / ``--scheduler``, docs/scaling.md): one for the classical
and the neural stages.

Without either option it is the in-process executor and nothing is started.  A cluster is started (or
reached) before any work, so a wrong address fails at once, and closed when both stages are done; a
cluster that cannot be started or reached becomes one :class:`~experiments.errors.PipelineError` line.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from corpora.parallel import BlockExecutor, ExecutorError
from experiments.errors import PipelineError
from experiments.options import RunOptions


@contextmanager
def stage_executor(options: RunOptions) -> Iterator[BlockExecutor]:
    """The block executor of ``options.workers`` / ``options.scheduler`` while inside, closed after."""
    executor = BlockExecutor(workers=options.workers, scheduler=options.scheduler)
    try:
        if executor.distributed:   # start or reach the cluster first: fail before any work, not after it
            executor.client()
        yield executor
    except ExecutorError as exc:
        raise PipelineError(str(exc)) from exc
    finally:
        executor.close()
