"""Writing uncompressed ``.npz`` files (what :func:`numpy.savez` writes) for the disk cache.

An ``.npz`` is a ZIP archive (PKWARE APPNOTE 6.3.x: a local file header before each member, a central
directory and an end-of-central-directory record at the end) whose members are ``<name>.npy`` files in
the NPY format (``numpy.lib.format``: the magic string, a format version, a little-endian header length,
an ASCII header ``{'descr': ..., 'fortran_order': False, 'shape': ..., }`` padded with spaces to a
multiple of 64 bytes and ended by a newline, then the array's bytes in C order).

Two ways to write one, the same archive to every reader (:func:`numpy.load`, :mod:`zipfile`):

* :func:`npz_bytes` builds a small archive in memory, in one pass of a few ``struct.pack`` calls per
  member.  The cache writes thousands of small entries (every image's visual words, every block of a
  cluster map) from worker threads, and :mod:`zipfile` with ``numpy.lib.format.write_array`` spends about
  0.3 ms of Python per entry of eight members (headers built and patched, several seeks per member), all
  of it holding the GIL that the other threads need; this takes about a fifth of that.
* :func:`write_npz_streaming` streams members straight into the file with :mod:`zipfile` (ZIP64 where
  needed), without an in-memory copy next to the arrays: the way for large entries (Gram matrices).

:func:`write_npz` picks between them by size (:data:`IN_MEMORY_MAX_BYTES`).
"""
from __future__ import annotations

import struct
import time
import zipfile
import zlib
from collections.abc import Mapping
from typing import BinaryIO

import numpy as np

#: Largest payload (sum of the arrays' bytes) that :func:`write_npz` builds in memory; larger ones are
#: streamed.  Far below the ZIP64 limits (4 GiB per member and per offset), which the in-memory path
#: therefore never needs.
IN_MEMORY_MAX_BYTES = 8 << 20

_NPY_MAGIC_V1 = b"\x93NUMPY\x01\x00"
_NPY_ALIGN = 64               # numpy.lib.format.ARRAY_ALIGN: the header ends on a multiple of this
_GROWTH_DIGITS = 21           # numpy.lib.format.GROWTH_AXIS_MAX_DIGITS
_ZIP_VERSION = 20             # "version needed to extract" 2.0: stored (method 0) members, no ZIP64
_LOCAL = struct.Struct("<4s5H3L2H")        # local file header (APPNOTE 4.3.7), 30 bytes
_CENTRAL = struct.Struct("<4s6H3L5H2L")    # central directory file header (APPNOTE 4.3.12), 46 bytes
_END = struct.Struct("<4s4H2LH")           # end of central directory record (APPNOTE 4.3.16), 22 bytes


def npy_header(a: np.ndarray) -> bytes:
    """The NPY format 1.0 preamble of ``a`` (C order): magic, version, header length and the padded
    header dict, as ``numpy.lib.format.write_array`` writes it for a header under 64 KiB."""
    shape = tuple(int(n) for n in a.shape)
    text = "{'descr': %r, 'fortran_order': False, 'shape': %r, }" % (np.lib.format.dtype_to_descr(a.dtype), shape)
    # numpy leaves room for the first axis to grow to 21 digits in place (its GROWTH_AXIS_MAX_DIGITS)
    text += " " * (_GROWTH_DIGITS - len(repr(shape[0])) if shape else 0)
    pad = -(len(_NPY_MAGIC_V1) + 2 + len(text) + 1) % _NPY_ALIGN
    header = (text + " " * pad + "\n").encode("latin1")
    if len(header) > 0xFFFF:
        raise ValueError(f"an NPY 1.0 header holds at most 65,535 bytes (array of shape {a.shape})")
    return _NPY_MAGIC_V1 + struct.pack("<H", len(header)) + header


def _dos_time(when: float) -> tuple[int, int]:
    """``(time, date)`` of ``when`` in the ZIP format's MS-DOS fields (local time, 2-second steps), as
    :mod:`zipfile` stamps a member written now."""
    t = time.localtime(when)
    return (t.tm_hour << 11) | (t.tm_min << 5) | (t.tm_sec // 2), ((t.tm_year - 1980) << 9) | (t.tm_mon << 5) | t.tm_mday


def npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    """An uncompressed ``.npz`` of ``arrays`` (member ``<name>.npy`` for each, in the mapping's order) as
    one ``bytes``: each member's local header and NPY data, then the central directory and its end
    record.  For archives under 4 GiB (no ZIP64); :func:`write_npz` uses it below
    :data:`IN_MEMORY_MAX_BYTES`.  Object arrays are refused, as ``allow_pickle=False`` does."""
    dos_time, dos_date = _dos_time(time.time())
    parts: list[bytes] = []
    central: list[bytes] = []
    offset = 0
    for name, arr in arrays.items():
        a = np.asarray(arr)
        if a.dtype.hasobject:
            raise ValueError(f"array {name!r} holds Python objects, which an .npz written without pickle cannot")
        head, body = npy_header(a), a.tobytes(order="C")
        fname = (name + ".npy").encode("utf-8")
        flags = 0x800 if not fname.isascii() else 0       # bit 11: the name is UTF-8 (APPNOTE D.2)
        crc, size = zlib.crc32(body, zlib.crc32(head)), len(head) + len(body)
        local = _LOCAL.pack(b"PK\x03\x04", _ZIP_VERSION, flags, 0, dos_time, dos_date, crc, size, size,
                            len(fname), 0)
        central.append(_CENTRAL.pack(b"PK\x01\x02", _ZIP_VERSION, _ZIP_VERSION, flags, 0, dos_time, dos_date,
                                     crc, size, size, len(fname), 0, 0, 0, 0, 0, offset) + fname)
        parts += (local, fname, head, body)
        offset += len(local) + len(fname) + size
    directory = b"".join(central)
    end = _END.pack(b"PK\x05\x06", 0, 0, len(central), len(central), len(directory), offset, 0)
    return b"".join(parts) + directory + end


def write_npz_streaming(f: BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    """An uncompressed ``.npz`` as ``np.savez`` writes it, member by member into the seekable file ``f``
    with :mod:`zipfile` (ZIP64 where needed), for any member names (``np.savez(f, **arrays)`` would take
    members called ``file`` or ``allow_pickle`` for its own keyword arguments)."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            with zf.open(name + ".npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(arr), allow_pickle=False)


def write_npz(f: BinaryIO, arrays: Mapping[str, np.ndarray]) -> None:
    """Write ``arrays`` as an uncompressed ``.npz`` into ``f``: built in memory and written at once up to
    :data:`IN_MEMORY_MAX_BYTES` of array data (:func:`npz_bytes`), streamed member by member above it
    (:func:`write_npz_streaming`, no copy of a large entry in memory)."""
    if sum(np.asarray(a).nbytes for a in arrays.values()) <= IN_MEMORY_MAX_BYTES:
        f.write(npz_bytes(arrays))
    else:
        write_npz_streaming(f, arrays)
