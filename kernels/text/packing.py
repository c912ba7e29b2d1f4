"""Many small arrays as one: how a text kernel's per-caption arrays travel to another process.

A fitted text kernel keeps one small array per training caption (its word ids; TagRank's word ids,
relative and absolute ranks, Eqs. 9-10).  Pickled as they are, ``N`` arrays come back as about ``3N``
numpy objects (under pickle protocol 5, which Dask uses, each array is rebuilt from its own buffer
through ``frombuffer`` and ``reshape``), each with its own small data allocation: at COCO size (566,000
captions, four arrays each) about 1.2 GB of Python objects on every Dask worker that receives the kernel.
:class:`PackedArrays` sends them as one flat array and the offsets, and gives back ``N`` views of that
array: one object each, the data in one block, the values and dtype unchanged.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["PackedArrays"]


class PackedArrays:
    """1-D arrays of one dtype stored as ``flat`` and ``offsets`` (array ``i`` is
    ``flat[offsets[i]:offsets[i + 1]]``).

    Parameters
    ----------
    arrays : sequence of 1-D ndarray
        The arrays, all of ``dtype`` (cast otherwise).
    dtype : numpy dtype
        Their common dtype.
    """

    def __init__(self, arrays: Sequence[np.ndarray], dtype) -> None:
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        self.offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        self.flat = (np.concatenate([np.asarray(a).reshape(-1) for a in arrays]).astype(dtype, copy=False)
                     if len(arrays) else np.zeros(0, dtype=dtype))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def unpack(self) -> list[np.ndarray]:
        """The arrays, as views of :attr:`flat` (in order)."""
        return np.split(self.flat, self.offsets[1:-1]) if len(self) else []
