"""Optional compiled kernel for sparse (CSC row block) × dense histogram intersection (built on first use with the C
compiler, loaded with :mod:`ctypes`; no Python build step, no new dependency).

The library is compiled once per source version and machine into ``<cache dir>/cext/`` (atomic rename)
and reused, loaded only after its SHA-256 matches the one recorded when it was built
(:mod:`kernels.native_lib`; a library that does not match is removed and rebuilt, with a warning).  If no
compiler is available, the build fails or ``ITR_NO_CEXT=1`` is set, :func:`load` returns ``None`` and :mod:`kernels.image.gram` falls back to its numpy implementation of the same
algorithm.  ctypes releases the GIL during the call, so a thread pool runs blocks on all cores.
"""
from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import tempfile
from pathlib import Path

import numpy as np

from corpora.cache import default_cache_dir
from kernels.native_lib import build_and_load, c_compiler, compile_shared, source_digest

log = logging.getLogger(__name__)

_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define ITR_JB 128

/* Histogram intersection (Hodosh Eq. 5) of a block of nrows sparse rows against dense columns:

     out[r * out_stride + (j - c0)] = sum_v min(X[r, v], YT[v * ldy + j]),   r < nrows, c0 <= j < c1,

   with the row block given in CSC form (colptr over the D bins, local row indices, values).  Only the
   stored entries of X contribute (min(a, 0) = 0 for a >= 0).  For each block of ITR_JB columns, bin v's
   slice of YT is read once and min-accumulated into the (nrows x ITR_JB) accumulator tile of every row
   that uses bin v; the tile stays in L1/L2 and the inner loop vectorises (vminps + vaddps). */
int itr_intersect_csc_block(const int64_t *colptr, const int32_t *rows, const float *data,
                            int64_t D, int64_t nrows, const float *YT, int64_t ldy,
                            int64_t c0, int64_t c1, float *out, int64_t out_stride)
{
    float *acc = (float *)malloc((size_t)(nrows > 0 ? nrows : 1) * ITR_JB * sizeof(float));
    if (!acc) return -1;
    for (int64_t j0 = c0; j0 < c1; j0 += ITR_JB) {
        const int64_t jn = (c1 - j0 < ITR_JB) ? (c1 - j0) : ITR_JB;
        memset(acc, 0, (size_t)nrows * ITR_JB * sizeof(float));
        for (int64_t v = 0; v < D; ++v) {
            const float *restrict y = YT + v * ldy + j0;
            for (int64_t k = colptr[v]; k < colptr[v + 1]; ++k) {
                const float a = data[k];
                float *restrict o = acc + (int64_t)rows[k] * ITR_JB;
                if (jn == ITR_JB) {
                    for (int64_t j = 0; j < ITR_JB; ++j) { const float t = y[j]; o[j] += (t < a) ? t : a; }
                } else {
                    for (int64_t j = 0; j < jn; ++j) { const float t = y[j]; o[j] += (t < a) ? t : a; }
                }
            }
        }
        for (int64_t r = 0; r < nrows; ++r)
            memcpy(out + r * out_stride + (j0 - c0), acc + r * ITR_JB, (size_t)jn * sizeof(float));
    }
    free(acc);
    return 0;
}

/* Histogram intersection of sparse rows, stored by bin (colptr over the D bins, row indices sorted within
   a bin, values), against m pivots in CSC form (pcolptr, local pivot index, values), for rows
   start <= i < stop:

     out[p * out_stride + (i - start)] += min(X[i, v], Y[p, v])   for every bin v of pivot p, in increasing v,

   where X[i, v] > 0 (min(0, a) = 0: the zero terms of the dense sum add exactly nothing).  Each entry adds
   the same terms in the same order as itr_intersect_csc_block's entry for the pair, so it equals the
   Gram's bit for bit.  out must hold zeros (or a partial sum) on entry. */
static int64_t itr_lower_bound(const int32_t *a, int64_t lo, int64_t hi, int64_t key)
{
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

int itr_intersect_bin_rows(const int64_t *pcolptr, const int32_t *prows, const float *pdata, int64_t D,
                           const int64_t *xcolptr, const int32_t *xrows, const float *xdata,
                           int64_t start, int64_t stop, float *out, int64_t out_stride)
{
    for (int64_t v = 0; v < D; ++v) {
        if (pcolptr[v] == pcolptr[v + 1]) continue;
        const int64_t lo = itr_lower_bound(xrows, xcolptr[v], xcolptr[v + 1], start);
        const int64_t hi = itr_lower_bound(xrows, lo, xcolptr[v + 1], stop);
        for (int64_t k = pcolptr[v]; k < pcolptr[v + 1]; ++k) {
            const float a = pdata[k];
            float *restrict o = out + (int64_t)prows[k] * out_stride - start;
            for (int64_t j = lo; j < hi; ++j) { const float t = xdata[j]; o[xrows[j]] += (t < a) ? t : a; }
        }
    }
    return 0;
}
"""

_LIB = None
_TRIED = False


def _source_tag() -> str:
    """What the library is built from: the source, and the machine it is built for."""
    return _SOURCE + platform.node() + platform.machine() + platform.python_version()


def _lib_path() -> Path:
    tag = hashlib.sha256(_source_tag().encode()).hexdigest()[:16]
    return default_cache_dir() / "cext" / f"itr_intersect_{tag}.so"


def _build(target: Path) -> None:
    """Compile :data:`_SOURCE` into ``target`` with the compiled kernels' compiler
    (:func:`~kernels.native_lib.c_compiler`), for this CPU when the compiler can (``-march=native``)."""
    cc = c_compiler()
    if cc is None:
        raise RuntimeError("no C compiler ($CC, gcc, cc or clang) on PATH")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "itr_intersect.c"
        src.write_text(_SOURCE)
        compile_shared(cc, src, target, (("-O3", "-march=native", "-std=c11"), ("-O3", "-std=c11")))


def _library():
    """The compiled library with both functions' signatures set, or ``None`` (see module docstring)."""
    global _LIB, _TRIED
    if _TRIED:
        return _LIB
    _TRIED = True
    if os.environ.get("ITR_NO_CEXT", "").strip() not in ("", "0"):
        return None
    try:
        lib = build_and_load(_lib_path(), source_digest(_source_tag()), _build, "histogram intersection")
        if lib is None:
            return None
        p = np.ctypeslib.ndpointer
        i64, i32, f32 = p(np.int64, flags="C"), p(np.int32, flags="C"), p(np.float32, flags="C")
        n = ctypes.c_int64
        lib.itr_intersect_csc_block.argtypes = [i64, i32, f32, n, n, f32, n, n, n, ctypes.c_void_p, n]
        lib.itr_intersect_csc_block.restype = ctypes.c_int
        lib.itr_intersect_bin_rows.argtypes = [i64, i32, f32, n, i64, i32, f32, n, n, ctypes.c_void_p, n]
        lib.itr_intersect_bin_rows.restype = ctypes.c_int
        _LIB = lib
    except Exception as exc:  # pragma: no cover - depends on the machine
        log.warning("compiled intersection kernel unavailable (%s); using the numpy implementation", exc)
        _LIB = None
    return _LIB


def load():
    """The compiled CSC-block function (``itr_intersect_csc_block``), or ``None`` when unavailable."""
    lib = _library()
    return None if lib is None else lib.itr_intersect_csc_block


def load_bin_rows():
    """The compiled bin-major rows function (``itr_intersect_bin_rows``), or ``None`` when unavailable."""
    lib = _library()
    return None if lib is None else lib.itr_intersect_bin_rows
