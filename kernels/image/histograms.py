"""Bag-of-visual-words histograms and spatial pyramids (Hodosh et al. 2013, Sec. 3.3, Eqs. 5, 7–8).

Layout of a pyramid histogram with ``L + 1`` levels (default ``levels=3``: l = 0, 1, 2 → 1 + 4 + 16 = 21
cells) over a vocabulary of ``V`` words: the cells are concatenated level by level, cells of a level in
row-major order, each cell a block of ``V`` bins.  The level-0 block is the global histogram ``H_i``.

Normalisation.  Every cell histogram returned here is *normalised* (sums to 1): ``H(v)`` is the fraction
of the cell's descriptors assigned word ``v``.  Because descriptors lie on a fixed regular grid whose
size is a multiple of ``2^L`` (:class:`~kernels.image.descriptors.GridSpec`), every level-``l`` cell holds
exactly ``N / 4^l`` descriptors, so ``H_cell / 4^l`` is Lazebnik et al.'s count histogram divided by the
image's total ``N``.  The pyramid kernel (:func:`pyramid_column_weights`) uses that form, which makes each
level's summed intersection ``I^l`` lie in ``[0, 1]``, decrease with ``l`` (matches at a finer level are
matches at the coarser one) and gives ``K^PY(x, x) = 1``.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

N_LEVELS = 3


def n_cells(levels: int = N_LEVELS) -> int:
    """Number of cells in a pyramid: ``Σ_l 4^l`` (21 for 3 levels)."""
    return sum(4 ** l for l in range(levels))


def level_slices(n_words: int, levels: int = N_LEVELS) -> list[slice]:
    """Column range of each level in a concatenated pyramid histogram."""
    out, start = [], 0
    for l in range(levels):
        stop = start + 4 ** l * n_words
        out.append(slice(start, stop))
        start = stop
    return out


def pyramid_level_weights(levels: int = N_LEVELS) -> np.ndarray:
    """Weights ``w_l`` with ``K^PY = Σ_l w_l I^l`` (Hodosh Eq. 8, Lazebnik et al. 2006).

    Expanding ``K^PY = I^L + Σ_{l<L} (I^l − I^{l+1}) / 2^{L−l}`` gives ``w_0 = 1/2^L`` and
    ``w_l = 1/2^{L−l+1}`` for ``l ≥ 1`` (``L = levels − 1``); for L = 2: (1/4, 1/4, 1/2).  They sum to 1.
    """
    L = levels - 1
    return np.array([1.0 / 2 ** L] + [1.0 / 2 ** (L - l + 1) for l in range(1, L + 1)], dtype=np.float64)


def pyramid_column_weights(n_words: int, levels: int = N_LEVELS) -> np.ndarray:
    """Per-column weights ``α`` such that ``K^PY(x, y) = Σ_c min(α_c x_c, α_c y_c)``.

    ``α = w_l / 4^l`` on level ``l``'s columns: ``1/4^l`` turns the cell-normalised histograms into
    image-normalised ones (see the module docstring) and ``w_l`` is :func:`pyramid_level_weights`.  As
    ``min(αa, αb) = α·min(a, b)`` for ``α ≥ 0``, the pyramid match kernel is *one* histogram intersection
    over the level-weighted, concatenated histograms.
    """
    w = pyramid_level_weights(levels)
    cols = [np.full(4 ** l * n_words, w[l] / 4 ** l) for l in range(levels)]
    return np.concatenate(cols).astype(np.float32)


@lru_cache(maxsize=64)
def cell_ids(shape: tuple[int, int], levels: int = N_LEVELS) -> np.ndarray:
    """For a row-major ``(n_y, n_x)`` grid: the global cell index (0 … n_cells−1) of every point at every
    level, int64 ``(levels, n_y·n_x)``."""
    n_y, n_x = shape
    q = 2 ** (levels - 1)
    if n_y % q or n_x % q:
        raise ValueError(f"grid shape {shape} is not divisible by {q} (needed for {levels} pyramid levels)")
    gy, gx = np.meshgrid(np.arange(n_y), np.arange(n_x), indexing="ij")
    gy, gx = gy.ravel(), gx.ravel()
    out = np.empty((levels, n_y * n_x), dtype=np.int64)
    offset = 0
    for l in range(levels):
        k = 2 ** l
        out[l] = offset + (gy * k // n_y) * k + (gx * k // n_x)
        offset += k * k
    out.setflags(write=False)
    return out


def pyramid_histogram(words: np.ndarray, shape: tuple[int, int], n_words: int,
                      levels: int = N_LEVELS) -> np.ndarray:
    """Cell-normalised pyramid histogram ``(n_cells · V,)`` float32 of the words of one image.

    ``words`` are the visual words of the grid points in row-major order over ``shape = (n_y, n_x)``.
    """
    words = np.asarray(words, dtype=np.int64).ravel()
    n = shape[0] * shape[1]
    if words.shape[0] != n:
        raise ValueError(f"{words.shape[0]} words for a grid of shape {shape}")
    if n == 0:
        raise ValueError(f"pyramid_histogram: empty grid {tuple(shape)} (no points to count)")
    if words.min() < 0 or words.max() >= n_words:
        raise ValueError(f"word index out of range [0, {n_words})")
    cells = cell_ids(tuple(shape), levels)
    idx = (cells * n_words + words[None, :]).ravel()
    counts = np.bincount(idx, minlength=n_cells(levels) * n_words).astype(np.float64)
    # every level-l cell holds exactly n / 4^l points
    per_cell = np.concatenate([np.full(4 ** l * n_words, n / 4 ** l) for l in range(levels)])
    return (counts / per_cell).astype(np.float32)


def global_histogram(words: np.ndarray, n_words: int) -> np.ndarray:
    """``H_i(v)``: fraction of the image's descriptors with word ``v`` (Hodosh Eq. 5), float32 ``(V,)``."""
    words = np.asarray(words, dtype=np.int64).ravel()
    return (np.bincount(words, minlength=n_words) / max(len(words), 1)).astype(np.float32)
