"""Helpers of the assignments' test files (public checks and hidden tests, otter's exception format).

:func:`call` runs a student's function; when it raises, the test fails with the *student's* traceback
(the frames of their own code and below), never the grader's frames.  :func:`assert_close` compares
with a message that says what differed, without showing how the expected value was computed.
"""
from __future__ import annotations

import traceback

import numpy as np

__all__ = ["call", "assert_close", "answer"]


def _student_frames(tb) -> str:
    # The first frame is call() itself: everything after it is the student's code and what it called.
    frames = traceback.extract_tb(tb)[1:]
    return "".join(traceback.format_list(frames))


def call(fn, *args, name: str | None = None, **kwargs):
    """``fn(*args, **kwargs)``; a missing, unfinished or failing function fails the test with a clear
    message (and the student's own traceback)."""
    label = name or getattr(fn, "__name__", "your function")
    if fn is None or fn is Ellipsis or not callable(fn):
        raise AssertionError(f"{label} is not defined: run the cell that defines it")
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        raise AssertionError(f"{label} is not implemented yet (it raises NotImplementedError)") from None
    except Exception as exc:   # the student's error, shown as their own traceback
        text = _student_frames(exc.__traceback__) + "".join(traceback.format_exception_only(type(exc), exc))
        raise AssertionError(f"{label} raised an error:\nTraceback (most recent call last):\n{text}") from None


def answer(env: dict, name: str):
    """A result variable of the notebook; fails the test when it is missing or still ``...``."""
    value = env.get(name, None)
    if value is None or value is Ellipsis:
        raise AssertionError(f"{name} is not set: replace the ... with your answer and run the cell")
    return value


def assert_close(got, expected, *, what: str, atol: float = 1e-6, rtol: float = 0.0) -> None:
    """``got`` equals ``expected`` elementwise within ``atol + rtol·|expected|`` (same shape)."""
    try:
        g = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError):
        raise AssertionError(f"{what}: expected numbers, got {type(got).__name__}") from None
    e = np.asarray(expected, dtype=np.float64)
    if g.shape != e.shape:
        raise AssertionError(f"{what}: expected shape {e.shape}, got {g.shape}")
    bad = ~np.isclose(g, e, atol=atol, rtol=rtol, equal_nan=False)
    if bad.any():
        k = int(np.flatnonzero(bad.ravel())[0])
        raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} values differ (first at flat index {k}: "
                             f"got {g.ravel()[k]:.8g}, expected {e.ravel()[k]:.8g})")
