"""What a weights file holds, checked before a model is built from it: without torch, for safetensors files
(the teaching CLIP's, the saved scorers', any ``.safetensors`` given to ``--clip-pretrained``).

A file can have the right format and checksum and still be unusable: an integer (quantised) copy loads and
scores 0 everywhere, a NaN anywhere makes every score ``nan``.  :func:`safetensors_problem` reads the
safetensors header (an 8-byte little-endian length, then a JSON table ``name -> {dtype, shape,
data_offsets}``; format described at https://github.com/huggingface/safetensors) and the tensor bytes, and
names the first problem:

* not a safetensors file, or a truncated one (a header that does not parse, offsets past the end of the
  file, byte counts that do not match dtype × shape);
* a weight (a tensor of two or more dimensions) that is not floating point (``I8``, ``U8``, ``BOOL`` …);
* a floating-point value that is NaN, or infinite outside an attention mask (a causal mask holds ``-inf``
  by design: a tensor whose name contains ``mask``), found from the raw bits (all exponent bits set; NaN
  when the mantissa is not zero), so that ``BF16`` needs no conversion.

:func:`tensor_problem` is the same dtype and finiteness rule for a state dict already in memory.
"""
from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path

import numpy as np

from neural.names import TEACHING_REBUILD_COMMAND, TEACHING_WEIGHTS_FILE, teaching_weights_problem

#: safetensors dtype -> (bytes per element, unsigned view, exponent mask) of the floating-point types.
FLOAT_DTYPES = {"F16": (2, np.uint16, 0x7C00), "BF16": (2, np.uint16, 0x7F80),
                "F32": (4, np.uint32, 0x7F800000), "F64": (8, np.uint64, 0x7FF0000000000000)}
#: Bytes per element of the other safetensors dtypes.
OTHER_DTYPES = {"I8": 1, "U8": 1, "BOOL": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8,
                "F8_E4M3": 1, "F8_E5M2": 1}
#: The largest header the format allows (100 MB, as the reference implementation).
MAX_HEADER = 100_000_000
#: Elements checked per block (bounded memory on large files).
BLOCK = 1 << 24


def _header(path: Path, size: int, mm) -> tuple[dict, int] | str:
    if size < 8:
        return "not a safetensors file (shorter than its 8-byte header length)"
    (n,) = struct.unpack("<Q", mm[:8])
    if n > MAX_HEADER or 8 + n > size:
        return "not a safetensors file, or truncated (its header length points past the end of the file)"
    try:
        header = json.loads(bytes(mm[8:8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return "not a safetensors file (its header is not JSON)"
    if not isinstance(header, dict):
        return "not a safetensors file (its header is not a JSON object)"
    header.pop("__metadata__", None)
    return header, 8 + n


def _entry_problem(name: str, entry, data_len: int) -> str | None:
    if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
        return f"tensor {name!r}: malformed header entry"
    dtype, shape, (start, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
    width = FLOAT_DTYPES[dtype][0] if dtype in FLOAT_DTYPES else OTHER_DTYPES.get(dtype)
    if width is None:
        return f"tensor {name!r}: unknown dtype {dtype!r}"
    if not (0 <= start <= end <= data_len):
        return f"tensor {name!r}: data past the end of the file (truncated)"
    if end - start != width * int(np.prod(shape, dtype=np.int64)):
        return f"tensor {name!r}: {end - start} bytes for a {dtype} tensor of shape {shape}"
    if dtype not in FLOAT_DTYPES and len(shape) >= 2:
        return (f"tensor {name!r} is {dtype}: weights must be floating point (F16, BF16, F32 or F64; a "
                "quantised or integer copy cannot be scored)")
    return None


def may_hold_infinity(name: str) -> bool:
    """Whether tensor ``name`` may hold ±infinity (an attention mask: ``-inf`` above the diagonal)."""
    return "mask" in name


def _nonfinite(buf, dtype: str, allow_inf: bool) -> bool:
    """Whether the raw ``dtype`` values in ``buf`` hold a NaN (or an infinity unless ``allow_inf``)."""
    width, view, mask = FLOAT_DTYPES[dtype]
    sign = view(1) << view(8 * width - 1)
    exp = view(mask)
    bits = np.frombuffer(buf, dtype=view)
    for lo in range(0, bits.size, BLOCK):
        block = bits[lo:lo + BLOCK]
        special = (block & exp) == exp
        if allow_inf:
            special &= (block & ~(exp | sign)) != 0   # NaN: mantissa not zero
        if np.any(special):
            return True
    return False


def safetensors_problem(path: str | Path) -> str | None:
    """The first problem of a safetensors weights file (see the module docstring), or ``None``.

    Parameters
    ----------
    path : path-like
        The file (it must exist).

    Returns
    -------
    str or None
        A message without the file name (callers put the file and option in front).
    """
    p = Path(path)
    size = p.stat().st_size
    if size == 0:
        return "empty file"
    with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        parsed = _header(p, size, mm)
        if isinstance(parsed, str):
            return parsed
        header, base = parsed
        for name, entry in header.items():
            problem = _entry_problem(name, entry, size - base)
            if problem is not None:
                return problem
        for name, entry in header.items():
            if entry["dtype"] in FLOAT_DTYPES:
                start, end = entry["data_offsets"]
                if _nonfinite(mm[base + start:base + end], entry["dtype"], may_hold_infinity(name)):
                    return f"tensor {name!r} holds NaN or infinite values"
    return None


def tensor_problem(name: str, dtype_name: str, is_floating: bool, ndim: int, nonfinite: bool) -> str | None:
    """The rule of :func:`safetensors_problem` for one tensor in memory (described by its dtype's name,
    whether it is floating point, its number of dimensions and whether it holds a NaN — or an infinity,
    for a tensor that may not hold one, :func:`may_hold_infinity`)."""
    if not is_floating and ndim >= 2:
        return (f"tensor {name!r} is {dtype_name}: weights must be floating point (a quantised or integer copy "
                "cannot be scored)")
    if is_floating and nonfinite:
        return f"tensor {name!r} holds NaN or infinite values"
    return None


def teaching_weights_content_problem(path: str | Path | None = None) -> str | None:
    """:func:`neural.names.teaching_weights_problem` (the file against its record's SHA-256), then what
    the file holds (:func:`safetensors_problem`): one message naming the file and the rebuild command, or
    ``None``.  Torch-free, for the command lines' up-front checks."""
    p = Path(path) if path is not None else TEACHING_WEIGHTS_FILE
    problem = teaching_weights_problem(p)
    if problem is not None:
        return problem
    content = safetensors_problem(p)
    if content is None:
        return None
    return f"teaching CLIP weights {p}: {content}; rebuild them with: {TEACHING_REBUILD_COMMAND}"
