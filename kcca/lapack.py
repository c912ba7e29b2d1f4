"""Symmetric eigendecomposition (LAPACK ``?syevd``) that lets other Python threads run meanwhile.

``scipy.linalg.eigh`` holds the GIL for the whole LAPACK call (its f2py wrappers do not release it), so
two classical systems whose KCCA solves run side by side on threads (:mod:`kcca.runner`) take turns
instead of using two cores: on the teaching set the eigendecompositions were two thirds of the time the
systems' threads held the GIL.  :func:`eigh` calls the very same routine of the very same library —
SciPy's LAPACK, through the function pointers ``scipy.linalg.cython_lapack`` publishes for compiled code
(``__pyx_capi__``) — via :mod:`ctypes`, which releases the GIL during a foreign call.  Same routine, same
inputs (Fortran order, lower triangle, the optimal workspace from a workspace query, as SciPy's wrapper
passes them): the same numbers as ``scipy.linalg.eigh(a, lower=True, driver="evd")``, bit for bit
(tested).  Where the pointers are not available it falls back to that SciPy call.
"""
from __future__ import annotations

import ctypes
import logging
from functools import lru_cache

import numpy as np
import scipy.linalg as sla
import scipy.linalg.cython_lapack as cython_lapack

__all__ = ["eigh"]

log = logging.getLogger(__name__)

_INT = ctypes.c_int   # SciPy's cython_lapack is LP64: LAPACK integers are C ints
_P = ctypes.c_void_p


@lru_cache(maxsize=None)
def _syevd(prefix: str):
    """The ctypes function for ``{prefix}syevd`` (``"s"`` / ``"d"``) from SciPy's LAPACK, or ``None``."""
    try:
        capsule = cython_lapack.__pyx_capi__[f"{prefix}syevd"]
        get_name = ctypes.pythonapi.PyCapsule_GetName
        get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
        get_pointer.restype, get_pointer.argtypes = _P, [ctypes.py_object, ctypes.c_char_p]
        address = get_pointer(capsule, get_name(capsule))
    except (AttributeError, KeyError, ValueError, TypeError) as exc:  # pragma: no cover - other SciPy builds
        log.debug("LAPACK %ssyevd pointer unavailable (%s): scipy.linalg.eigh holds the GIL", prefix, exc)
        return None
    if not address:  # pragma: no cover
        return None
    # jobz, uplo, n, a, lda, w, work, lwork, iwork, liwork, info
    return ctypes.CFUNCTYPE(None, *([_P] * 11))(address)


def _call(fn, a: np.ndarray, w: np.ndarray, work: np.ndarray, lwork: int, iwork: np.ndarray, liwork: int) -> int:
    """``?syevd("V", "L", n, a, n, w, work, lwork, iwork, liwork, info)``; returns ``info``."""
    n = a.shape[0]
    n_, lda, lwork, liwork, info = _INT(n), _INT(max(1, n)), _INT(lwork), _INT(liwork), _INT(0)
    jz, ul = ctypes.c_char(b"V"), ctypes.c_char(b"L")
    fn(ctypes.addressof(jz), ctypes.addressof(ul), ctypes.addressof(n_), a.ctypes.data, ctypes.addressof(lda),
       w.ctypes.data, work.ctypes.data, ctypes.addressof(lwork), iwork.ctypes.data, ctypes.addressof(liwork),
       ctypes.addressof(info))
    return int(info.value)


def eigh(a: np.ndarray, overwrite_a: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (ascending) and eigenvectors (columns) of the symmetric matrix whose lower triangle is ``a``.

    LAPACK ``?syevd`` (divide and conquer) in ``a``'s precision (float32 → ``ssyevd``, float64 →
    ``dsyevd``), with the GIL released during the call.  Equal to
    ``scipy.linalg.eigh(a, lower=True, driver="evd", check_finite=False)``.

    Parameters
    ----------
    a : ndarray (n, n), float32 or float64
        Only the lower triangle (in the matrix's own indexing) is read.
    overwrite_a : bool
        Allow ``a`` to be overwritten (saves a copy when ``a`` is already Fortran-ordered and writeable).

    Returns
    -------
    w : ndarray (n,)
    v : ndarray (n, n), Fortran order
    """
    a = np.asarray(a)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"eigh: expected a square matrix, got shape {a.shape}")
    prefix = {np.dtype(np.float32): "s", np.dtype(np.float64): "d"}.get(a.dtype)
    fn = _syevd(prefix) if prefix else None
    if fn is None or a.shape[0] == 0:
        return sla.eigh(a, lower=True, driver="evd", check_finite=False, overwrite_a=overwrite_a)
    v = a if (overwrite_a and a.flags.f_contiguous and a.flags.writeable) else np.array(a, order="F", copy=True)
    n = v.shape[0]
    w = np.empty(n, dtype=v.dtype)
    # workspace query (lwork = liwork = -1), as SciPy's wrapper does, then the optimal sizes
    work, iwork = np.empty(1, dtype=v.dtype), np.empty(1, dtype=np.intc)
    info = _call(fn, v, w, work, -1, iwork, -1)
    if info != 0:  # pragma: no cover - a query does not fail on valid arguments
        raise np.linalg.LinAlgError(f"LAPACK {prefix}syevd workspace query failed (info = {info})")
    lwork, liwork = max(1, int(work[0])), max(1, int(iwork[0]))
    work, iwork = np.empty(lwork, dtype=v.dtype), np.empty(liwork, dtype=np.intc)
    info = _call(fn, v, w, work, lwork, iwork, liwork)
    if info > 0:
        raise np.linalg.LinAlgError(f"LAPACK {prefix}syevd: the algorithm failed to converge (info = {info})")
    if info < 0:  # pragma: no cover - the arguments are built above
        raise ValueError(f"LAPACK {prefix}syevd: illegal value in argument {-info}")
    return w, v

