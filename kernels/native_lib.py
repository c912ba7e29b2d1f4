"""Build and load the compiled kernels' shared libraries from the cache, verified (one path for all of them).

A compiled kernel (``kernels/image/native.py``, ``kernels/text/native.py``) is built from its C source on
first use into the cache folder and loaded with :mod:`ctypes`.  Loading a shared library runs its code (its
constructors run at ``dlopen``), and the cache folder is writable by whatever else writes there, so a library
is never loaded on its name alone:

* When a library is built, its SHA-256 is written to a record beside it (``<library>.sha256.json``:
  ``{"source_sha256", "library_sha256"}``), keyed by the SHA-256 of the source (and compiler flags / machine
  tag) it was built from.
* Before ``ctypes.CDLL`` the loader reads the record, checks that it was made for this source, and hashes
  the library file; the library is loaded only when both match.  The file is opened once, hashed through
  that open descriptor and loaded through it (``/proc/self/fd/N`` where the system has it), so a file
  swapped between the check and the load is not the one loaded.
* A library without a record, with a record of another source, or whose bytes do not match its record is
  reported (``logging`` warning naming the file and the reason), removed and rebuilt; when it cannot be
  rebuilt the caller falls back to its numpy / torch implementation.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Callable

from corpora.cache import default_cache_dir

log = logging.getLogger(__name__)

_BUILD_LOCK = threading.Lock()   # build_and_load: one build at a time in this process

RECORD_SUFFIX = ".sha256.json"


class UnverifiedLibrary(Exception):
    """A cached library that does not match the record made when it was built (or has none)."""


def record_path(lib: Path) -> Path:
    """Where the build record of ``lib`` lives (beside it)."""
    return lib.with_name(lib.name + RECORD_SUFFIX)


def source_digest(*parts: bytes | str) -> str:
    """SHA-256 (hex) of what a library is built from: its source, flags and machine tag, in order."""
    h = hashlib.sha256()
    for p in parts:
        b = p.encode() if isinstance(p, str) else p
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()


def _fd_digest(fd: int) -> str:
    h = hashlib.sha256()
    os.lseek(fd, 0, os.SEEK_SET)
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        h.update(chunk)
    return h.hexdigest()


def write_record(lib: Path, source_sha256: str) -> None:
    """Record ``lib``'s SHA-256 for ``source_sha256`` (atomic: temporary file renamed over the record)."""
    fd = os.open(lib, os.O_RDONLY)
    try:
        digest = _fd_digest(fd)
    finally:
        os.close(fd)
    rec = record_path(lib)
    fd, tmp = tempfile.mkstemp(dir=lib.parent, prefix=rec.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"source_sha256": source_sha256, "library_sha256": digest}, f)
        os.replace(tmp, rec)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load_verified(lib: Path, source_sha256: str) -> ctypes.CDLL:
    """``ctypes.CDLL`` of ``lib`` after checking it against its build record.

    Raises
    ------
    UnverifiedLibrary
        No record, a record of another source, an unreadable record, or library bytes that do not match it.
    OSError
        The library cannot be opened or loaded.
    """
    rec = record_path(lib)
    try:
        record = json.loads(rec.read_text(encoding="utf-8"))
        expected = record["source_sha256"], record["library_sha256"]
    except FileNotFoundError:
        raise UnverifiedLibrary("no build record") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UnverifiedLibrary(f"unreadable build record {rec.name} ({exc.__class__.__name__})") from None
    if expected[0] != source_sha256:
        raise UnverifiedLibrary("its build record is for another source")
    fd = os.open(lib, os.O_RDONLY)
    try:
        if _fd_digest(fd) != expected[1]:
            raise UnverifiedLibrary("its SHA-256 differs from the one recorded when it was built")
    finally:
        os.close(fd)
    return ctypes.CDLL(str(lib))


def c_compiler() -> str | None:
    """The C compiler the compiled kernels are built with: ``$CC``, else ``gcc``, ``cc`` or ``clang`` on the
    ``PATH``; ``None`` when there is none."""
    for cand in (os.environ.get("CC"), "gcc", "cc", "clang"):
        if cand and shutil.which(cand):
            return cand
    return None


def compile_shared(cc: str, source: Path, target: Path, flag_sets: tuple[tuple[str, ...], ...]) -> None:
    """Compile the C file ``source`` into the shared library ``target`` (``-shared -fPIC``), trying each of
    ``flag_sets`` in turn (e.g. with and without ``-fopenmp``); the first that builds is renamed over
    ``target``.  Raises ``RuntimeError`` with the last compiler message when none builds."""
    errors = []
    for flags in flag_sets:
        fd, tmp = tempfile.mkstemp(dir=target.parent, suffix=".so.tmp")
        os.close(fd)
        cmd = [cc, *flags, "-shared", "-fPIC", "-o", tmp, str(source)]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
            if r.returncode == 0:
                os.replace(tmp, target)
                return
            errors.append(r.stderr.strip()[:500])
        except (OSError, subprocess.SubprocessError) as exc:
            errors.append(str(exc))
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    raise RuntimeError(f"compiling {source} failed: {errors[-1] if errors else 'no flags given'}")


def load_source_library(source: Path, stem: str, flag_sets: tuple[tuple[str, ...], ...], what: str,
                        flags_in_tag: bool = False):
    """A text kernel's compiled library (``kernels/text/*.c``), built on first use into
    ``<cache dir>/native/<stem>-<hash>.so`` and loaded verified (:func:`build_and_load`), or ``None``
    (``ITR_NO_NATIVE`` set, no source, no C compiler, or no build: the caller uses its fallback).

    The hash and the build record are taken over the source and the machine, and with ``flags_in_tag``
    over the first flag set too (a library built with other flags is another library)."""
    if os.environ.get("ITR_NO_NATIVE", "").strip() not in ("", "0") or not source.is_file():
        return None
    cc = c_compiler()
    if cc is None:
        log.info("no C compiler found; %s uses its fallback implementation", what)
        return None
    parts = (source.read_bytes(), *((" ".join(flag_sets[0]),) if flags_in_tag else ()), os.uname().machine)
    tag = hashlib.sha256(b"".join(p if isinstance(p, bytes) else p.encode() for p in parts)).hexdigest()[:16]
    lib = default_cache_dir() / "native" / f"{stem}-{tag}.so"
    return build_and_load(lib, source_digest(*parts), lambda target: compile_shared(cc, source, target, flag_sets),
                          what)


def _discard(lib: Path) -> None:
    for p in (lib, record_path(lib)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def build_and_load(lib: Path, source_sha256: str, build: Callable[[Path], None], what: str):
    """The verified library at ``lib``: loaded when its record matches, else (re)built and loaded.

    One thread at a time (a process-wide lock): two classical systems that run side by side and meet a
    library that is not built yet build it once, not twice into the same path.

    Parameters
    ----------
    lib : Path
        Where the library lives in the cache.
    source_sha256 : str
        :func:`source_digest` of what it is built from.
    build : callable
        ``build(target)`` compiles the library to ``target`` (atomically) or raises.
    what : str
        The kernel's name for the warnings (``"soft TRI"``).

    Returns
    -------
    ctypes.CDLL or None
        ``None`` when it cannot be built or loaded (the caller uses its fallback); a warning says why.
    """
    with _BUILD_LOCK:
        return _build_and_load(lib, source_sha256, build, what)


def _build_and_load(lib: Path, source_sha256: str, build: Callable[[Path], None], what: str):
    if lib.is_file():
        try:
            return load_verified(lib, source_sha256)
        except UnverifiedLibrary as exc:
            log.warning("compiled %s library %s is not verified (%s); removing it and rebuilding", what, lib, exc)
            _discard(lib)
        except OSError as exc:
            log.warning("cannot load compiled %s library %s (%s); rebuilding", what, lib, exc)
            _discard(lib)
    try:
        lib.parent.mkdir(parents=True, exist_ok=True)
        build(lib)
        write_record(lib, source_sha256)
        return load_verified(lib, source_sha256)
    except (OSError, RuntimeError, UnverifiedLibrary) as exc:
        log.warning("compiled %s library unavailable (%s); using the fallback implementation", what, exc)
        return None
