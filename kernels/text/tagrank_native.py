"""Optional compiled backend for TagRank's common-word sums (``_tagrank.c``; Hodosh et al. 2013, Eq. 11).

:meth:`kernels.text.tagrank.TagRank.caption_kernel` needs, for a block of row captions against the column
captions, ``sum_{w shared} x_w y_w / (x_w + y_w)`` of their relative-rank and absolute-rank vectors.  In
numpy that is a Python loop over the block's words, thousands of small array operations holding the GIL
between them: a thread computing TagRank then slows every other thread of the run that needs the GIL, and
is slowed by them.  The compiled function does the whole block in one call, with the GIL released
(:mod:`ctypes`), adding the same terms to each entry in the same order (word by word, ascending), so the
sums are the numpy loop's bit for bit (it is built with ``-ffp-contract=off``: no fused multiply-adds).

The library is built on first use with the system C compiler into ``<cache dir>/native/tagrank-<hash>.so``
and loaded only after its SHA-256 matches its build record (:mod:`kernels.native_lib`).  Without a
compiler, or with ``ITR_NO_NATIVE=1``, :func:`common_sums` returns ``False`` and TagRank uses the numpy loop.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path

import numpy as np

from kernels.native_lib import load_source_library

SOURCE = Path(__file__).with_name("_tagrank.c")
FLAGS = ("-O3", "-ffp-contract=off", "-std=c99")

__all__ = ["common_sums", "load_tagrank"]


@lru_cache(maxsize=1)
def load_tagrank():
    """The compiled library (``ctypes.CDLL``), or ``None`` when unavailable (see the module docstring)."""
    dll = load_source_library(SOURCE, "tagrank", (FLAGS,), "TagRank", flags_in_tag=True)
    if dll is None:
        return None
    P, i64 = ctypes.c_void_p, ctypes.c_int64
    dll.tagrank_common.argtypes = [i64, P, P, P, P, P, P, P, P, P, i64, i64, i64, i64, P, P]
    dll.tagrank_common.restype = ctypes.c_int
    return dll


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def _checked(a: np.ndarray, dtype) -> np.ndarray:
    if a.dtype != dtype or not a.flags.c_contiguous:
        raise TypeError(f"expected a C-contiguous {np.dtype(dtype)} array, got {a.dtype}")
    return a


def common_sums(rows, cols, col_lo: np.ndarray, col_hi: np.ndarray, s: int, e: int, c0: int,
                com_r: np.ndarray, com_a: np.ndarray) -> bool:
    """Add the common-word sums of row captions ``s:e`` against column captions ``c0:`` into ``com_r`` and
    ``com_a`` (``(e - s, n_cols - c0)`` float64, C-contiguous); ``False`` (nothing added) when the compiled
    kernel is unavailable.

    ``rows`` and ``cols`` are :class:`~kernels.text.tagrank.Postings`; ``col_lo[k]:col_hi[k]`` are the
    column postings of the row postings' ``k``-th word (empty when no column caption has it)."""
    dll = load_tagrank()
    if dll is None:
        return False
    i64, f64 = np.int64, np.float64
    shape = (e - s, cols.n_captions - c0)     # every row and column the postings can name: no write outside
    if not 0 <= s <= e <= rows.n_captions or not 0 <= c0 <= cols.n_captions:
        raise ValueError(f"common sums: rows {s}:{e} of {rows.n_captions}, columns {c0}: of {cols.n_captions}")
    for out in (com_r, com_a):
        if _checked(out, f64).shape != shape:
            raise ValueError(f"common sums: output of shape {out.shape}, expected {shape}")
    if not (len(col_lo) == len(col_hi) == len(rows.words) == len(rows.ptr) - 1):
        raise ValueError("common sums: one column range per row word")
    # the ranges the C loop reads stay inside the postings (their captions are inside by construction)
    if len(rows.ptr) and (rows.ptr[0] < 0 or rows.ptr[-1] > len(rows.caps) or np.any(np.diff(rows.ptr) < 0)):
        raise ValueError("common sums: row postings' offsets outside their arrays")
    if np.any(col_lo < 0) or np.any(col_hi < col_lo) or np.any(col_hi > len(cols.caps)):
        raise ValueError("common sums: column ranges outside the column postings")
    args = (_checked(rows.ptr, i64), _checked(rows.caps, i64), _checked(rows.r, f64), _checked(rows.a, f64),
            _checked(col_lo, i64), _checked(col_hi, i64), _checked(cols.caps, i64), _checked(cols.r, f64),
            _checked(cols.a, f64))
    rc = dll.tagrank_common(len(rows.words), *(_ptr(a) for a in args), int(s), int(e), int(c0),
                            int(shape[1]), _ptr(com_r), _ptr(com_a))
    return rc == 0
