"""Logging of the main job: the console (through ``tqdm.write``, so that log lines do not land inside
progress bars) and ``run.log`` in the output folder, warnings included; the stage timer."""
from __future__ import annotations

import logging
import sys
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

#: The logger of every stage of the main job.
JOB_LOGGER = "experiments.flickr8k_kcca"

log = logging.getLogger(JOB_LOGGER)


class Timer:
    """Times the stages of a run and logs ``[i/total] name …`` / ``… done in s`` around each.

    Parameters
    ----------
    total : int, optional
        The number of stages (shown as ``[i/total]``); without it no counter is shown.

    Attributes
    ----------
    timings : dict
        ``{stage name: seconds}`` (a stage entered twice adds up).
    """

    def __init__(self, total: int | None = None) -> None:
        self.timings: dict[str, float] = {}
        self.total = total
        self._count = 0

    @contextmanager
    def stage(self, name: str):
        """Time the ``with`` block as the next stage, ``name``."""
        self._count += 1
        head = f"[{self._count}/{self.total}] " if self.total is not None else ""
        log.info("%s%s …", head, name)
        t0 = time.perf_counter()
        yield
        dt = time.perf_counter() - t0
        self.timings[name] = self.timings.get(name, 0.0) + dt
        log.info("%s%s done in %.1f s", head, name, dt)


def _log_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """``warnings.showwarning`` while the job runs: the message alone (loader notes, skipped images),
    logged to the console and ``run.log`` — not the ``file.py:103: UserWarning:`` + source-line form."""
    logging.getLogger("py.warnings").warning("warning: %s", message)


def printed_by_its_own_logger(record: logging.LogRecord) -> bool:
    """Whether ``record`` was printed by a console handler before it reached the root logger.

    A library logger with its own stderr/stdout handler that also propagates (huggingface_hub installs one
    when it is imported) would otherwise print each message twice, once there and once through the job's
    console handler.  A handler whose level is above the record's did not print it.  Such records still
    reach ``run.log``.

    Parameters
    ----------
    record : logging.LogRecord
        A record on its way through the root logger's handlers.

    Returns
    -------
    bool
        True when a console handler of the record's logger or of an ancestor below the root printed it.
    """
    lg = logging.getLogger(record.name)
    while lg is not None and lg is not logging.root:
        for h in lg.handlers:
            if (isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
                    and record.levelno >= h.level
                    and getattr(h, "stream", None) in (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__)):
                return True
        if not lg.propagate:
            return False
        lg = lg.parent
    return False


class ConsoleHandler(logging.StreamHandler):
    """Console log lines printed through ``tqdm.write``: the progress bars on the stream are cleared
    first and redrawn below the message, instead of the message landing inside a bar's line.

    Only tqdm's write lock serialises the output: :meth:`handle` does not take the handler's own lock,
    because tqdm issues warnings (which the job logs) while holding its lock, and taking the two locks in
    opposite orders in two threads would deadlock."""

    def handle(self, record: logging.LogRecord):
        if printed_by_its_own_logger(record):   # e.g. huggingface_hub's: printed once already
            return False
        rv = self.filter(record)
        if isinstance(rv, logging.LogRecord):   # Python ≥ 3.12: a filter may return a replacement record
            record = rv
        if rv:
            self.emit(record)
        return rv

    def emit(self, record: logging.LogRecord) -> None:
        try:
            from tqdm.auto import tqdm

            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 - logging must never raise (as logging.StreamHandler)
            self.handleError(record)


class RunLogHandler(logging.FileHandler):
    """``run.log``: a record that cannot be written (a full disk, a folder made read-only during the run)
    is reported once, as one ``warning:`` line on stderr, and the file is not written again — instead of
    :mod:`logging`'s traceback for every later record.  The console keeps the whole log."""

    failed = False

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        if not self.failed:
            self.failed = True
            exc = sys.exc_info()[1]
            why = getattr(exc, "strerror", None) or exc
            print(f"warning: {self.baseFilename}: cannot write the log ({why}); it stops here, the console "
                  "shows the rest", file=sys.stderr)

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failed:
            super().emit(record)


def setup_logging(out_dir: Path) -> logging.Handler:
    """Log to the console and ``out_dir/run.log``; warnings are logged too.

    Parameters
    ----------
    out_dir : Path
        The output folder (created if needed).

    Returns
    -------
    logging.Handler
        The ``run.log`` handler, to pass to :func:`teardown_logging`.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    fh = RunLogHandler(out_dir / "run.log", mode="w", encoding="utf-8")
    fh.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    root.addHandler(fh)
    if not any(isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
               for h in root.handlers):
        sh = ConsoleHandler(sys.stderr)
        sh.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(sh)
    fh.prev_showwarning = warnings.showwarning  # type: ignore[attr-defined]
    warnings.showwarning = _log_warning
    return fh


def log_error_to_file(handler: logging.Handler, exc: BaseException) -> None:
    """Write ``error: <exc>`` to ``run.log`` only (the command line prints it to the console).

    Parameters
    ----------
    handler : logging.Handler
        The ``run.log`` handler of :func:`setup_logging`.
    exc : BaseException
        The error that ends the run.
    """
    handler.handle(logging.LogRecord(log.name, logging.ERROR, __file__, 0, "error: %s", (exc,), None))


def teardown_logging(handler: logging.Handler) -> None:
    """Remove the ``run.log`` handler of :func:`setup_logging` and restore ``warnings.showwarning``.

    Parameters
    ----------
    handler : logging.Handler
        What :func:`setup_logging` returned.
    """
    logging.getLogger().removeHandler(handler)
    handler.close()
    prev = getattr(handler, "prev_showwarning", None)
    if prev is not None:
        warnings.showwarning = prev
