"""Content-keyed, kill-safe on-disk cache for arrays (features, codebooks, Gram matrices, embeddings).

Every expensive intermediate of the pipeline is stored as one ``.npz`` file whose name is a SHA-256 of
its *key*: a JSON-serialisable description of the data (corpus fingerprint, image / caption ids) and of
every parameter that influences the result (written by :func:`corpora.npzfile.write_npz`: small entries
built in memory at once, large ones streamed).  Writes are atomic: the payload goes to a temporary file in
the same directory, is flushed and fsync'ed, and only then renamed over the final name
(``os.replace``), so a run killed mid-write leaves at most a stray ``*.tmp`` file and never a truncated
entry under a valid name.  Temporary names carry the writer's process id and a tag of its host and
process-id namespace; the first write into a namespace removes the temporaries there whose writer is gone
(same tag, process no longer running) or that are older than a day (:meth:`DiskCache.sweep_temporaries`),
so killed runs do not leave their partial writes behind for good.  Each entry also stores its key and a
SHA-256 digest of its arrays; an entry whose key is not the one asked for (files renamed or copied over
each other) or whose digest does not match (bit rot, a hand-edited or truncated file) is reported, deleted
and recomputed – never silently used.

A folder that cannot be written does not stop a run: :func:`check_cache_dir` lets a command-line tool
refuse it up front with a one-line :class:`CacheDirError`, and a write that fails later (permission, disk
full, read-only file system) warns once per :class:`DiskCache` (:class:`CacheWriteWarning`), after which
that cache only reads.  Whatever a cache warning quotes of an exception is escaped and capped
(:func:`quote_error`).

Usage
-----
>>> cache = DiskCache("/tmp/cache")
>>> key = {"stage": "gram", "corpus": corpus.fingerprint, "p": 2}
>>> arrays = cache.get_or_compute("gram", key, lambda: {"K": compute_gram()})
"""
from __future__ import annotations

import errno
import functools
import hashlib
import json
import logging
import os
import re
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from corpora.npzfile import write_npz

log = logging.getLogger(__name__)

#: Environment variable that overrides the default cache directory.
CACHE_ENV = "ITR_CACHE_DIR"
_DIGEST_FIELD = "__digest__"
_KEY_FIELD = "__key__"
#: Read errors that say nothing about the entry itself (the process or the system could not read it now,
#: or another process replaced / removed it meanwhile): the entry is kept, this call recomputes.
_TRANSIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.EACCES, errno.EPERM, errno.EIO, errno.EAGAIN,
                               errno.EBUSY, errno.EINTR, errno.ENOMEM, errno.ENOENT})
#: Reads again of an entry whose read raised ``SystemError`` (an interpreter race, not damage).
_INTERPRETER_RETRIES = 3
#: A temporary file older than this (seconds) is stale whoever wrote it: no entry takes a day to write.
STALE_TMP_AGE_S = 24 * 3600
#: The most characters of an exception's text that a cache warning quotes (:func:`quote_error`).
QUOTE_LIMIT = 200


def _pid_namespace() -> str:
    """The process-id namespace (``/proc/self/ns/pid``, e.g. ``pid:[4026531836]``; ``""`` where there is
    none): containers sharing a host name but not their process ids differ here."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


#: This host, as it appears in temporary names: 8 hex digits of a SHA-256 of the host name and the pid
#: namespace, so "same tag" means "its process ids are ours to check".
_HOST_TAG = hashlib.sha256(f"{socket.gethostname()}\0{_pid_namespace()}".encode("utf-8", "replace")).hexdigest()[:8]
#: ``<entry stem>.<writer pid>-<host tag>.<mkstemp random part>.tmp``
_TMP_NAME = re.compile(r"^[0-9a-f]{64}\.(?P<pid>[0-9]+)-(?P<host>[0-9a-f]{8})\.[^.]*\.tmp$")


def _current_umask() -> int:
    """The process umask (read once at import, while the process is still single-threaded)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: Mode of new cache files: what ``open()`` would give (0o666 minus the umask), not ``mkstemp``'s 0o600,
#: so a cache folder shared by a class or a group stays readable by its other users.
_FILE_MODE = 0o666 & ~_current_umask()


def _pid_running(pid: int) -> bool:
    """Whether a process with this id exists on this host (a recycled id counts as running)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:   # PermissionError: it exists, owned by someone else
        return True
    return True


def stale_temporary(path: Path, now: float | None = None) -> bool:
    """Whether ``path`` (a ``*.tmp`` in a cache namespace) is a leftover of a write that will never finish.

    Stale when its name says it was written on this host by a process that is no longer running, or when
    it is older than :data:`STALE_TMP_AGE_S` (a writer on another host sharing the folder, or a name
    without a writer, as written before writer ids were recorded).
    """
    m = _TMP_NAME.match(path.name)
    if m and m["host"] == _HOST_TAG and not _pid_running(int(m["pid"])):
        return True
    try:
        age = (time.time() if now is None else now) - path.stat().st_mtime
    except OSError:
        return False
    return age > STALE_TMP_AGE_S


def quote_error(error: object, limit: int = QUOTE_LIMIT) -> str:
    """The text of ``error`` (an exception, or any object) made safe to quote in one log or warning line.

    Characters that are not printable (control characters, raw bytes decoded as text, line breaks, lone
    surrogates) are written as their ``repr`` escapes (``\\x9b``, ``\\n``), and a text longer than
    ``limit`` characters once escaped is cut there (never inside an escape) and ends with ``...`` and
    its total length, so a damaged file's header quoted by an exception cannot flood the console.

    Parameters
    ----------
    error : object
        Usually an exception; ``str(error)`` is quoted, or the exception's type name when that is empty.
    limit : int
        The most characters kept of the escaped text.

    Returns
    -------
    str
        At most ``limit`` characters plus a short ``... [N characters in all]`` suffix.
    """
    try:
        text = str(error)
    except Exception:   # a broken __str__ must not hide the warning that quotes it
        text = ""
    if not text and isinstance(error, BaseException):
        text = type(error).__name__
    pieces: list[str] = []
    used = 0
    for c in text:
        piece = c if c.isprintable() else repr(c)[1:-1]
        if used + len(piece) > limit:
            return f"{''.join(pieces)}... [{len(text)} characters in all]"
        pieces.append(piece)
        used += len(piece)
    return "".join(pieces)


class CacheDirError(ValueError):
    """The cache folder cannot be created or written; the message names the folder and the reason, and
    reads as one line (a command-line tool prints it as ``error: <message>``)."""


class CacheWriteWarning(RuntimeWarning):
    """A cache write failed (permission, disk full, read-only file system); the run goes on uncached."""


def _os_reason(exc: OSError) -> str:
    """The reason an ``OSError`` gives (``Permission denied``), without the path it repeats."""
    return exc.strerror or str(exc)


def check_cache_dir(root: str | Path | None = None) -> Path:
    """Check up front that a cache folder can be created and written; returns the folder.

    The folder (and its parents) is created if missing, and a small temporary file is written, flushed to
    disk and removed in it, so a read-only folder or file system, a folder owned by someone else, a full
    disk or a path through a regular file is refused before any work is done.

    Parameters
    ----------
    root : path, optional
        The folder a :class:`DiskCache` would be given; ``None`` checks :func:`default_cache_dir`.

    Returns
    -------
    Path
        The folder, as :class:`DiskCache` resolves it.

    Raises
    ------
    CacheDirError
        When the folder cannot be created or a file cannot be written and removed in it.
    """
    folder = Path(root) if root is not None else default_cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CacheDirError(f"cache folder {folder} cannot be created: {quote_error(_os_reason(exc))}") from exc
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".write-check.", suffix=".tmp")
    except OSError as exc:
        raise CacheDirError(f"cache folder {folder} is not writable: {quote_error(_os_reason(exc))}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(b"cache write check\n")
            f.flush()
            os.fsync(f.fileno())
        os.unlink(tmp)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise CacheDirError(f"cache folder {folder} is not writable: {quote_error(_os_reason(exc))}") from exc
    return folder


def default_cache_dir() -> Path:
    """``$ITR_CACHE_DIR`` if set, else ``~/.cache/image-text-ranking``."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "image-text-ranking"


def array_bytes(a: np.ndarray) -> memoryview:
    """The bytes of ``np.ascontiguousarray(a)`` (``.tobytes()``'s content) for hashing, without copying
    an array that is already contiguous: ``tobytes`` would hold a second copy of a Gram matrix while it
    is hashed.  Dtypes without a buffer interface (datetime64, timedelta64) fall back to ``tobytes``."""
    a = np.ascontiguousarray(a)
    if not a.size:
        return memoryview(b"")
    try:
        return memoryview(a).cast("B")
    except (ValueError, TypeError, BufferError):
        return memoryview(a.tobytes())


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in sorted(obj.items(), key=lambda kv: str(kv[0]))}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return {"__ndarray_sha256__": hashlib.sha256(array_bytes(obj)).hexdigest(),
                "shape": list(obj.shape), "dtype": str(obj.dtype)}
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise TypeError(f"cache key part of type {type(obj).__name__} is not serialisable: {obj!r}")


def cache_key(key: Any) -> str:
    """Stable SHA-256 hex digest of a JSON-serialisable key (dict order does not matter)."""
    return _key_digest(_jsonable(key))


def _key_digest(canonical: Any) -> str:
    """:func:`cache_key` of a key already made JSON-ready by :func:`_jsonable`."""
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=256)
def _dtype_name(dtype: np.dtype) -> bytes:
    """``str(dtype)`` encoded, remembered (numpy builds the name anew each time: microseconds per array)."""
    return str(dtype).encode()


def array_digest(arrays: Mapping[str, np.ndarray]) -> str:
    """SHA-256 (hex) of named arrays: names in sorted order, each with its dtype, shape and bytes (the
    integrity digest of every entry; also a key part for results derived from arrays)."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode())
        h.update(_dtype_name(a.dtype))
        h.update(repr(a.shape).encode())
        h.update(array_bytes(a))
    return h.hexdigest()


_digest = array_digest  # the name the entries' integrity checks (and their tests) use


def _stored_key_digest(stored: np.ndarray) -> str:
    """:func:`cache_key` of an entry's stored key field (its canonical JSON), to compare with the entry's
    name: equal exactly when the entry was written for the key asked for."""
    return cache_key(json.loads(str(stored)))


def _write_atomically(p: Path, payload: Mapping[str, np.ndarray]) -> None:
    """Write ``payload`` as the ``.npz`` ``p``: into a temporary file beside it, flushed and fsync'ed, then
    renamed over ``p``; the temporary is removed when the write fails (where it can be)."""
    for attempt in (1, 2):
        fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f"{p.stem}.{os.getpid()}-{_HOST_TAG}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), _FILE_MODE)
                # straight into the file: no in-memory copy of the entry (a Gram matrix) next to it
                write_npz(f, payload)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
            return
        except FileNotFoundError:
            # the temporary was removed under us (by hand, or a sweeper that could not tell our pid
            # apart, e.g. without /proc); write it once more
            if attempt == 2 or not p.parent.is_dir():
                raise
            log.warning("cache temporary %s vanished before its rename; writing it again", tmp)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise


class CacheCorruptError(RuntimeError):
    """A cache entry exists but fails its integrity check."""


class DiskCache:
    """A directory of atomically written, checksummed ``.npz`` entries.

    Parameters
    ----------
    root : path, optional
        Cache directory (created on first write).  Defaults to :func:`default_cache_dir`.
    enabled : bool
        With ``False`` nothing is read or written (``--no-cache``); ``get_or_compute`` just computes.
    retry_writes_after : float, optional
        Seconds after a failed write before :meth:`store` tries to write again.  ``None`` (default): never
        again — right for one run, whose folder will not become writable while it runs.  A long-lived
        object (a Dask worker's, serving many runs) sets it, so that a disk that was full is used again
        once there is room.

    Attributes
    ----------
    hits, misses : int
        Entries read back and entries computed by :meth:`get_or_compute` and the kernels' own lookups
        (:meth:`count`; diagnostics).
    write_error : OSError or None
        The error of the last write that failed (permission, disk full, read-only file system), cleared by
        a write that succeeds.  While it is set, this object only reads, and :meth:`store` skips its writes
        without a further warning (until ``retry_writes_after`` has passed, when it tries again).
    """

    def __init__(self, root: str | Path | None = None, enabled: bool = True,
                 retry_writes_after: float | None = None):
        self.root = Path(root) if root is not None else default_cache_dir()
        self.enabled = enabled
        self.retry_writes_after = retry_writes_after
        self.hits = 0
        self.misses = 0
        self._count_lock = threading.Lock()
        self.write_error: OSError | None = None
        self._write_failed_at = 0.0
        self._swept: set[str] = set()

    def __getstate__(self) -> dict:
        """Pickled (a fitted text kernel sent to Dask workers holds its cache) without the counters' lock."""
        state = dict(self.__dict__)
        del state["_count_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._count_lock = threading.Lock()

    def count(self, hits: int = 0, misses: int = 0) -> None:
        """Add to :attr:`hits` and :attr:`misses` (entries read back, entries computed), under a lock: the
        threads of one run share a cache object, and Python does not promise that ``+=`` on an attribute
        is atomic (CPython 3.11 happens not to switch threads inside one; a free-threaded build can)."""
        with self._count_lock:
            self.hits += hits
            self.misses += misses

    def path(self, namespace: str, key: Any) -> Path:
        return self._entry_path(namespace, cache_key(key))

    def _entry_path(self, namespace: str, digest: str) -> Path:
        """The entry named by a key's digest (:func:`cache_key`)."""
        return self.root / namespace / f"{digest}.npz"

    # ------------------------------------------------------------------ read
    def load(self, namespace: str, key: Any) -> dict[str, np.ndarray] | None:
        """The stored arrays, or ``None`` if absent.

        A corrupt entry is logged, removed and treated as absent: one whose stored key is not ``key``
        (another key's file under this name), or whose arrays do not match their digest, or that cannot
        be parsed.  A ``MemoryError`` while reading propagates and leaves the entry in place, and an
        operating-system error that says nothing about the file (too many open files, permission, I/O,
        busy) is logged and treated as absent for this call, the entry kept.  An interpreter error
        (``SystemError``: CPython's header parser raced by another thread) is not damage either: the
        entry is read again, up to :data:`_INTERPRETER_RETRIES` times, then kept and treated as absent.
        """
        if not self.enabled:
            return None
        p = self.path(namespace, key)
        if not p.is_file():
            return None
        for attempt in range(_INTERPRETER_RETRIES + 1):
            try:
                return self._read(p)
            except MemoryError:        # no room to read a sound entry: not damage, keep it
                raise
            except SystemError as exc:
                # CPython 3.11's AST constructor keeps its recursion depth per interpreter, not per thread:
                # numpy parsing two .npy headers at once (ast.literal_eval) on two threads can raise
                # "AST constructor recursion depth mismatch" (python/cpython#106905).  Not damage: read again.
                if attempt == _INTERPRETER_RETRIES:
                    return self._keep(p, exc)
            except OSError as exc:
                if exc.errno in _TRANSIENT_ERRNOS:   # the system could not read it now: not damage
                    return self._keep(p, exc)
                return self._discard(p, exc)
            except Exception as exc:   # any damage (a flipped bit can raise NotImplementedError, RuntimeError …)
                return self._discard(p, exc)
        raise AssertionError("unreachable: the last attempt returns")  # pragma: no cover

    @staticmethod
    def _read(p: Path) -> dict[str, np.ndarray]:
        """The arrays of entry ``p``, checked against its stored key name and digest."""
        with np.load(p, allow_pickle=False) as z:
            if _KEY_FIELD not in z.files or _stored_key_digest(z[_KEY_FIELD]) != p.stem:
                raise CacheCorruptError("its stored key is not the key asked for: another entry's data")
            arrays = {k: z[k] for k in z.files if k not in (_DIGEST_FIELD, _KEY_FIELD)}
            stored = str(z[_DIGEST_FIELD]) if _DIGEST_FIELD in z.files else None
        if stored is None or stored != _digest(arrays):
            raise CacheCorruptError("digest mismatch")
        return arrays

    @staticmethod
    def _keep(p: Path, exc: BaseException) -> None:
        """A sound entry that cannot be read now: treated as absent for this call, left in place."""
        log.warning("cache entry %s cannot be read now (%s); recomputing, the entry is kept", p, quote_error(exc))
        return None

    @staticmethod
    def _discard(p: Path, exc: BaseException) -> None:
        log.warning("cache entry %s is corrupt (%s); removing it and recomputing", p, quote_error(exc))
        try:
            p.unlink()
        except OSError:
            pass
        return None

    # ------------------------------------------------------------------ write
    def store(self, namespace: str, key: Any, arrays: Mapping[str, np.ndarray]) -> Path | None:
        """Atomically write ``arrays`` under ``key``.

        Returns the path, or ``None`` when the cache is disabled or the entry could not be written: a
        write that fails with an ``OSError`` (permission, disk full, read-only file system) warns once
        per cache object (:class:`CacheWriteWarning`, naming the folder and the reason) and leaves no
        temporary file behind where it can be removed; the writes after it are skipped silently.  Arrays
        that cannot be cached (dtype object, reserved names) raise ``TypeError`` / ``ValueError``.
        """
        if not self.enabled:
            return None
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        reserved = sorted({_DIGEST_FIELD, _KEY_FIELD} & set(arrays))
        if reserved:
            raise ValueError(f"cache array name(s) {reserved} are reserved for the entry's own fields")
        for k, v in arrays.items():
            if v.dtype == object:
                raise TypeError(f"cache array {k!r} has dtype object; only plain arrays are cached")
        if self.write_error is not None and not self._retry_due():
            return None
        canonical = _jsonable(key)      # once: the entry's name and its stored key both come from it
        p = self._entry_path(namespace, _key_digest(canonical))
        payload = dict(arrays)
        payload[_DIGEST_FIELD] = np.array(_digest(arrays))
        payload[_KEY_FIELD] = np.array(json.dumps(canonical, sort_keys=True))
        try:
            p.parent.mkdir(parents=True, exist_ok=True)
            _write_atomically(p, payload)
        except OSError as exc:
            already_failing, self.write_error = self.write_error is not None, exc
            self._write_failed_at = time.monotonic()
            if already_failing:   # a retry that failed again: warned already
                return None
            warnings.warn(f"cache folder {self.root}: cannot write a {namespace!r} entry "
                          f"({quote_error(_os_reason(exc))}); going on without caching, the results computed "
                          "from now on are not stored (entries already there are still read)",
                          CacheWriteWarning, stacklevel=2)
            return None
        self.write_error = None
        if namespace not in self._swept:
            self._swept.add(namespace)
            self.sweep_temporaries(namespace)
        return p

    def _retry_due(self) -> bool:
        """Whether a write may be tried again after the last failure (``retry_writes_after`` passed)."""
        return (self.retry_writes_after is not None
                and time.monotonic() - self._write_failed_at >= self.retry_writes_after)

    def sweep_temporaries(self, namespace: str | None = None) -> list[Path]:
        """Remove the stale ``*.tmp`` files (:func:`stale_temporary`) of one namespace, or of every
        namespace when ``namespace`` is ``None``; returns the removed paths.

        Called once per namespace by the first :meth:`store` of this cache object, so a run resumed after
        a kill cleans up after the killed one.  Writes in progress (a live process on this host, or a
        recent file from another host) are left alone.
        """
        if not self.enabled:
            return []
        dirs = [self.root / namespace] if namespace is not None else (
            [d for d in self.root.iterdir() if d.is_dir()] if self.root.is_dir() else [])
        removed: list[Path] = []
        now = time.time()
        for d in dirs:
            try:
                candidates = [e for e in os.scandir(d) if e.name.endswith(".tmp") and e.is_file()]
            except OSError:
                continue
            for e in candidates:
                path = Path(e.path)
                if stale_temporary(path, now):
                    try:
                        path.unlink()
                    except OSError:
                        continue
                    removed.append(path)
        if removed:
            log.info("removed %d stale temporary file(s) left by killed writes under %s", len(removed), self.root)
        return removed

    def get_or_compute(
        self, namespace: str, key: Any, compute: Callable[[], Mapping[str, np.ndarray]]
    ) -> dict[str, np.ndarray]:
        """Return the cached arrays for ``key`` or compute, store and return them."""
        hit = self.load(namespace, key)
        if hit is not None:
            self.count(hits=1)
            return hit
        self.count(misses=1)
        arrays = {k: np.asarray(v) for k, v in compute().items()}
        self.store(namespace, key, arrays)
        return arrays


#: A cache that never reads or writes (handy default for library calls and tests).
NO_CACHE = DiskCache(root=Path(tempfile.gettempdir()) / "itr-disabled-cache", enabled=False)
