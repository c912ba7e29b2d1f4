"""Optional compiled backend for the soft TRI dynamic programme (``_softtri.c``).

The C source is compiled on first use with the system C compiler (``$CC``, else ``gcc``/``cc``;
``-O3 -shared -fPIC``, with ``-fopenmp`` when available) into
``<cache dir>/native/softtri-<source hash>.so`` (atomic rename) and loaded with :mod:`ctypes` only after
its SHA-256 matches the one recorded when it was built (:mod:`kernels.native_lib`; a library that does not
match is removed and rebuilt, with a warning).
It computes *exactly* the same DP as the torch implementation in :mod:`kernels.text.tri` (float32
word-kernel values, float64 accumulation) but fused per caption pair, without intermediate arrays.
When no compiler is available, compilation fails, ``ITR_NO_NATIVE=1`` is set, or a caption has more
than 64 content words, :class:`~kernels.text.kernel.TextKernel` uses the torch path.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import numpy as np
from tqdm.auto import tqdm

from kernels.native_lib import load_source_library
from kernels.text.items import symmetrise_inplace

SOURCE = Path(__file__).with_name("_softtri.c")


@lru_cache(maxsize=1)
def load_softtri():
    """The compiled library (``ctypes.CDLL``) or ``None`` when unavailable."""
    dll = load_source_library(SOURCE, "softtri", (("-O3", "-fopenmp"), ("-O3",)), "soft TRI")
    if dll is None:
        return None
    P = ctypes.c_void_p
    i64 = ctypes.c_int64
    dll.soft_tri_gram.argtypes = [P, i64, P, P, i64, P, P, i64, ctypes.c_int, P, ctypes.c_int, i64, i64]
    dll.soft_tri_gram.restype = ctypes.c_int
    dll.soft_tri_cross.argtypes = [P, i64, P, P, i64, P, P, P, i64, P, P, i64, ctypes.c_int, P, ctypes.c_int]
    dll.soft_tri_cross.restype = ctypes.c_int
    return dll


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


def _flat(docs, clip: int):
    lengths = np.array([len(d) for d in docs], dtype=np.int64)
    offsets = np.zeros(len(docs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    tokens = np.ascontiguousarray(np.concatenate([np.asarray(d, np.int64) for d in docs]) if len(docs) else
                                  np.zeros(0, np.int64)).clip(max=clip)
    return tokens, offsets


class SoftGramInputs(NamedTuple):
    """What :func:`soft_gram_rows` reads, flattened once for every block of rows of one Gram: the weighted
    word kernel, the captions' word ids as one array with offsets, their scales and the items' first
    captions."""

    W: np.ndarray
    tokens: np.ndarray
    offsets: np.ndarray
    scale: np.ndarray
    starts: np.ndarray
    n_items: int
    max_len: int


def soft_gram_inputs(W: np.ndarray, docs, scale: np.ndarray, item_of: np.ndarray, n_items: int,
                     max_len: int) -> SoftGramInputs | None:
    """The flattened inputs of :func:`soft_gram_rows`, or ``None`` when the compiled kernel is unavailable
    or a caption has more than 64 content words."""
    if load_softtri() is None:
        return None
    if len(item_of) and np.any(np.diff(item_of) < 0):
        raise ValueError("captions must be ordered by item")
    W = np.ascontiguousarray(W, dtype=np.float32)
    tokens, offsets = _flat(docs, W.shape[0] - 1)
    if np.diff(offsets).max(initial=0) > 64:
        return None
    starts = np.zeros(n_items + 1, dtype=np.int64)
    np.cumsum(np.bincount(item_of, minlength=n_items), out=starts[1:])
    return SoftGramInputs(W, tokens, offsets, np.ascontiguousarray(scale, dtype=np.float64), starts,
                          int(n_items), int(max_len))


def soft_gram_rows(inputs: SoftGramInputs, lo: int, hi: int, n_threads: int | None,
                   out: np.ndarray | None = None) -> np.ndarray | None:
    """Rows ``lo:hi`` of the unnormalised item Gram before symmetrising: for every caption pair ``a <= b``
    with ``a`` in items ``lo:hi``, the scaled soft-TRI kernel added to row ``item(a)``, column
    ``item(b)`` (half when ``a == b``).  ``(hi - lo, n_items)`` float64, written into ``out`` (C-contiguous
    rows) when given; ``None`` if the compiled kernel fails.  A row's entries do not depend on which other
    rows are computed with it, nor on ``n_threads``."""
    dll = load_softtri()
    if dll is None:
        return None
    x = inputs
    if out is None:
        out = np.zeros((hi - lo, x.n_items), dtype=np.float64)
    if out.shape != (hi - lo, x.n_items) or not out.flags.c_contiguous or out.dtype != np.float64:
        raise ValueError(f"out must be C-contiguous float64 of shape {(hi - lo, x.n_items)}")
    rc = dll.soft_tri_gram(_ptr(x.W), x.W.shape[0], _ptr(x.tokens), _ptr(x.offsets), len(x.offsets) - 1,
                           _ptr(x.scale), _ptr(x.starts), x.n_items, x.max_len, _ptr(out), int(n_threads or 0),
                           int(lo), int(hi))
    return None if rc != 0 else out


def soft_gram_native(W: np.ndarray, docs, scale: np.ndarray, item_of: np.ndarray, n_items: int, max_len: int,
                     n_threads: int | None, show_progress: bool = False) -> np.ndarray | None:
    """Unnormalised item Gram (sum over caption cross products of scaled soft-TRI kernels) or ``None``:
    :func:`soft_gram_rows` over chunks of items with about equal work, then symmetrised."""
    inputs = soft_gram_inputs(W, docs, scale, item_of, n_items, max_len)
    if inputs is None:
        return None
    out = np.zeros((n_items, n_items), dtype=np.float64)
    # chunks of items with about equal work (the pairs a <= b form a triangle)
    work = np.cumsum(np.arange(n_items, 0, -1, dtype=np.float64))
    n_chunks = max(1, min(50, n_items // 20))
    bounds = np.unique(np.r_[0, np.searchsorted(work, work[-1] * np.arange(1, n_chunks) / n_chunks), n_items])
    with tqdm(total=float(work[-1]), desc="soft TRI Gram (native)", disable=not show_progress, leave=False,
              mininterval=1.0) as bar:
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            if soft_gram_rows(inputs, int(lo), int(hi), n_threads, out=out[lo:hi]) is None:
                return None
            bar.update(float(work[hi - 1] - (work[lo - 1] if lo else 0.0)))
    symmetrise_inplace(out)
    return out


def soft_cross_native(W: np.ndarray, qdocs, qscale, docs, scale, item_of, n_items: int, max_len: int,
                      n_threads: int | None) -> np.ndarray | None:
    """Queries x items (sum over each item's captions of scaled soft-TRI kernels) or ``None``."""
    dll = load_softtri()
    if dll is None:
        return None
    W = np.ascontiguousarray(W, dtype=np.float32)
    qt, qo = _flat(qdocs, W.shape[0] - 1)
    tokens, offsets = _flat(docs, W.shape[0] - 1)
    starts = np.zeros(n_items + 1, dtype=np.int64)
    np.cumsum(np.bincount(item_of, minlength=n_items), out=starts[1:])
    qs = np.ascontiguousarray(qscale, dtype=np.float64)
    sc = np.ascontiguousarray(scale, dtype=np.float64)
    out = np.zeros((len(qdocs), n_items), dtype=np.float64)
    rc = dll.soft_tri_cross(_ptr(W), W.shape[0], _ptr(qt), _ptr(qo), len(qdocs), _ptr(qs), _ptr(tokens),
                            _ptr(offsets), len(docs), _ptr(sc), _ptr(starts), n_items, int(max_len), _ptr(out),
                            int(n_threads or 0))
    return None if rc != 0 else out
