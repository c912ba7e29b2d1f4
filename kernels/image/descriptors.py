"""Low-level image descriptors of Hodosh et al. (2013), Sec. 3.3: colour, texture and dense SIFT.

Every image is first brought to a fixed *working resolution* (longest side ``max_side`` pixels, default
256, aspect ratio kept; :func:`working_image`) so that the cost per image is bounded and filter scales
(in pixels) mean the same thing for every image.  Descriptors are then computed on a regular grid of
*sample points* whose size does not depend on the image (:class:`GridSpec`): ``n_long`` points along the
longer side and ``n_short`` along the shorter one.  Every image therefore yields exactly the same number
of descriptors per feature, and every spatial-pyramid cell (level ``l`` has ``2^l × 2^l`` cells) exactly
``N / 4^l`` of them — which makes the cell histograms of different images directly comparable
(see :mod:`kernels.image.histograms`).

Colour (:func:`lab_descriptors`)
    The three CIELAB coordinates of the sampled pixels.  OpenCV converts float RGB in ``[0, 1]``
    (sRGB, D65) to true CIELAB: ``L*`` in ``[0, 100]``, ``a*``, ``b*`` roughly in ``[-127, 127]``; no
    further scaling, so Euclidean distance is the CIE76 colour difference ΔE*ab.

Texture (:func:`mr8_responses`, :func:`make_rfs_filters`)
    Varma & Zisserman (2005) MR8: the grey image is normalised to zero mean and unit variance, filtered
    with the 38 filters of the RFS bank (edge = first and bar = second Gaussian derivative filters at
    3 scales (σx, σy) ∈ {(1, 3), (2, 6), (4, 12)} — σ across, 3σ along the orientation — and
    6 orientations, plus an isotropic Gaussian and a Laplacian of Gaussian with σ = 10; support
    49 × 49), the maximum over the 6 orientations is kept for each (type, scale) → 6 + 2 = 8 responses
    (edges: maximum *absolute* response, see :func:`mr8_from_rfs`), and the response vector ``F`` at
    each pixel is contrast normalised following Weber's law, ``F ← F · log(1 + L/0.03) / L`` with
    ``L = ||F||₂``.  Only the sampled pixels are evaluated (:func:`rfs_responses_at`).

SIFT (:func:`dense_sift`)
    OpenCV ``SIFT_create().compute`` on the grey working image at a regular grid of upright keypoints
    (angle 0): grid step ``s = max_side / n_long`` pixels (8 px by default); each descriptor covers a
    ``2s × 2s`` patch (16 × 16 px by default, 4 × 4 spatial bins of ``s/2`` = 4 px, as in Lazebnik et
    al.'s dense SIFT), so neighbouring descriptors overlap by half.  OpenCV's spatial bin width is
    ``1.5 × KeyPoint.size``, hence ``KeyPoint.size = (2/3) · bin``.  128-d, OpenCV's own normalisation
    (unit length, clipped at 0.2, renormalised, scaled by 512).
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np
import scipy.fft as sfft

from kernels.threads import CountedSetting

FEATURES: tuple[str, ...] = ("color", "texture", "sift")
#: Descriptor dimensionality per feature.
DESCRIPTOR_DIMS = {"color": 3, "texture": 8, "sift": 128}

#: RFS bank constants (Varma & Zisserman 2005; Oxford VGG ``makeRFSfilters.m``).
RFS_SUPPORT = 49
RFS_SCALES = (1.0, 2.0, 4.0)
RFS_ORIENTATIONS = 6
RFS_ISO_SIGMA = 10.0
WEBER_CONSTANT = 0.03


# ---------------------------------------------------------------------------------------------- grids
@dataclass(frozen=True)
class GridSpec:
    """A regular grid of sample points, ``n_long`` × ``n_short`` (along the longer / shorter side).

    Both must be divisible by ``2**max_level`` so that every pyramid cell holds the same number of
    points.  Points sit at the centres of a regular tiling of the image:
    ``x_i = (i + 0.5) · W / n_x``.
    """

    n_long: int
    n_short: int

    def shape(self, h: int, w: int) -> tuple[int, int]:
        """``(n_y, n_x)`` for an ``h × w`` image (landscape → ``n_x = n_long``)."""
        return (self.n_short, self.n_long) if w >= h else (self.n_long, self.n_short)

    def points(self, h: int, w: int) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        """Row-major sample coordinates ``(ys, xs)`` (float, pixel units) and ``(n_y, n_x)``."""
        n_y, n_x = self.shape(h, w)
        ys = (np.arange(n_y) + 0.5) * (h / n_y)
        xs = (np.arange(n_x) + 0.5) * (w / n_x)
        yy, xx = np.meshgrid(ys, xs, indexing="ij")
        return yy.ravel(), xx.ravel(), (n_y, n_x)

    def pixel_index(self, h: int, w: int) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
        ys, xs, shape = self.points(h, w)
        return (np.minimum(ys.astype(np.int64), h - 1), np.minimum(xs.astype(np.int64), w - 1), shape)

    def check(self, levels: int) -> None:
        q = 2 ** (levels - 1)
        for name, v in (("n_long", self.n_long), ("n_short", self.n_short)):
            if v <= 0 or v % q:
                raise ValueError(f"grid {name}={v} must be a positive multiple of {q} (pyramid levels)")


# ---------------------------------------------------------------------------------------------- images
def working_image(rgb: np.ndarray, max_side: int = 256) -> np.ndarray:
    """Resize an ``(H, W, 3)`` uint8 RGB image so that its longest side is ``max_side`` pixels.

    Shrinking uses area averaging (``cv2.INTER_AREA``), enlarging bilinear interpolation.  Grey or RGBA
    input is rejected with a message naming the shape.
    """
    rgb = np.asarray(rgb)
    if rgb.ndim != 3 or rgb.shape[2] != 3:
        raise ValueError(f"expected an (H, W, 3) RGB image, got shape {rgb.shape}")
    if rgb.dtype != np.uint8:
        raise ValueError(f"expected a uint8 image, got dtype {rgb.dtype}")
    h, w = rgb.shape[:2]
    if min(h, w) < 8:
        raise ValueError(f"image of shape {rgb.shape} is too small (need at least 8 × 8 pixels)")
    scale = max_side / max(h, w)
    if scale == 1.0:
        return np.ascontiguousarray(rgb)
    nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    return cv2.resize(np.ascontiguousarray(rgb), (nw, nh), interpolation=interp)


def to_gray(rgb: np.ndarray) -> np.ndarray:
    """Float32 grey image in ``[0, 1]`` (ITU-R BT.601 luma, OpenCV ``COLOR_RGB2GRAY``)."""
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY).astype(np.float32) / np.float32(255.0)


# ---------------------------------------------------------------------------------------------- colour
def rgb_to_lab(rgb: np.ndarray) -> np.ndarray:
    """CIELAB of a uint8 RGB image, float32 ``(H, W, 3)``: ``L*`` ∈ [0, 100], ``a*, b*`` ≈ [-127, 127].

    OpenCV's float path (input scaled to ``[0, 1]``) gives unscaled CIELAB (sRGB primaries, D65 white);
    its 8-bit path would rescale to ``[0, 255]`` and is not used.
    """
    return cv2.cvtColor(rgb.astype(np.float32) / np.float32(255.0), cv2.COLOR_RGB2Lab)


def lab_descriptors(rgb: np.ndarray, grid: GridSpec) -> tuple[np.ndarray, tuple[int, int]]:
    """Colour descriptors: CIELAB ``(L*, a*, b*)`` of the grid's sample pixels, ``(N, 3)`` float32."""
    h, w = rgb.shape[:2]
    iy, ix, shape = grid.pixel_index(h, w)
    lab = rgb_to_lab(rgb[iy, ix][None])[0]
    return np.ascontiguousarray(lab, dtype=np.float32), shape


# ---------------------------------------------------------------------------------------------- MR8
def _gauss1d(sigma: float, x: np.ndarray, order: int) -> np.ndarray:
    var = sigma * sigma
    g = np.exp(-x * x / (2 * var)) / math.sqrt(2 * math.pi * var)
    if order == 1:
        g = -g * x / var
    elif order == 2:
        g = g * (x * x - var) / (var * var)
    return g


def _normalise_filter(f: np.ndarray) -> np.ndarray:
    f = f - f.mean()
    return f / np.abs(f).sum()


@lru_cache(maxsize=4)
def make_rfs_filters(support: int = RFS_SUPPORT) -> np.ndarray:
    """The RFS (Root Filter Set) bank of Varma & Zisserman (2005), shape ``(38, support, support)``.

    Layout (as in the Oxford VGG reference code): filters ``0..17`` are *edge* filters (first derivative
    of an anisotropic Gaussian), ``18..35`` *bar* filters (second derivative), each ordered by scale
    σ ∈ {1, 2, 4} and, within a scale, orientation θ_k = kπ/6, k = 0..5; ``36`` is a Gaussian and ``37``
    a Laplacian of Gaussian, both with σ = 10.

    With filter coordinates ``(x, y)`` (``x`` to the right, ``y`` up) rotated by θ,
    ``u = x cos θ − y sin θ``, ``v = x sin θ + y cos θ``, the oriented filters are

        f(x, y) = G_{3σ}(u) · G^{(d)}_{σ}(v),   d = 1 (edge) or 2 (bar),

    i.e. elongated (σ_u = 3σ) along the orientation and differentiated across it.  Every filter is made
    zero-mean and L1-normalised, like the reference code (which also applies this to the Gaussian).
    """
    if support % 2 != 1:
        raise ValueError(f"support={support} must be odd")
    h = (support - 1) // 2
    x, y = np.meshgrid(np.arange(-h, h + 1, dtype=np.float64), np.arange(h, -h - 1, -1, dtype=np.float64))
    n_or = RFS_ORIENTATIONS
    n_edge = len(RFS_SCALES) * n_or
    bank = np.zeros((2 * n_edge + 2, support, support), dtype=np.float64)
    count = 0
    for sigma in RFS_SCALES:
        for k in range(n_or):
            theta = math.pi * k / n_or
            c, s = math.cos(theta), math.sin(theta)
            u = c * x - s * y
            v = s * x + c * y
            gu = _gauss1d(3 * sigma, u, 0)
            bank[count] = _normalise_filter(gu * _gauss1d(sigma, v, 1))
            bank[count + n_edge] = _normalise_filter(gu * _gauss1d(sigma, v, 2))
            count += 1
    r2 = x * x + y * y
    s2 = RFS_ISO_SIGMA ** 2
    g = np.exp(-r2 / (2 * s2))
    g /= g.sum()
    bank[2 * n_edge] = _normalise_filter(g)
    log_f = g * (r2 - 2 * s2) / (s2 * s2)
    log_f -= log_f.mean()
    bank[2 * n_edge + 1] = _normalise_filter(log_f)
    return bank.astype(np.float32)


@lru_cache(maxsize=8)
def _bank_spectrum(fh: int, fw: int, support: int) -> np.ndarray:
    """rFFT of the (convolution) bank zero-padded to ``fh × fw``, centred on the origin."""
    bank = make_rfs_filters(support).astype(np.float64)
    h = (support - 1) // 2
    pad = np.zeros((bank.shape[0], fh, fw), dtype=np.float64)
    pad[:, :support, :support] = bank
    pad = np.roll(pad, (-h, -h), axis=(1, 2))
    return sfft.rfft2(pad, axes=(1, 2)).astype(np.complex64)


def rfs_responses(gray: np.ndarray, support: int = RFS_SUPPORT) -> np.ndarray:
    """All 38 RFS responses ``(38, H, W)`` float32 of a grey image (2-D convolution, symmetric padding).

    Convolution (not correlation) as MATLAB's ``conv2`` in the reference code, computed with one
    forward FFT of the reflect-padded image and 38 inverse FFTs.
    """
    gray = np.asarray(gray, dtype=np.float32)
    H, W = gray.shape
    h = (support - 1) // 2
    padded = cv2.copyMakeBorder(gray, h, h, h, h, cv2.BORDER_REFLECT)
    fh, fw = sfft.next_fast_len(padded.shape[0], real=True), sfft.next_fast_len(padded.shape[1], real=True)
    spec = sfft.rfft2(padded, s=(fh, fw))
    out = sfft.irfft2(spec[None] * _bank_spectrum(fh, fw, support), s=(fh, fw), axes=(1, 2))
    return np.ascontiguousarray(out[:, h:h + H, h:h + W], dtype=np.float32)


_SCRATCH = threading.local()


def _scratch(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An uninitialised array of ``shape`` and ``dtype``, a view of this thread's scratch buffer, which
    grows to the largest size asked for and is reused by the next call on the same thread.

    The filter bank's product with an image spectrum is 38 spectra (megabytes; tens of them for a
    500 × 375 image).  Allocated afresh for every image on two or more threads, such arrays came from
    memory that glibc's per-thread arenas had handed back to the system, and numpy advises huge pages
    for arrays of 4 MB and more: every image then paid for zeroed (huge) pages in the kernel.  On two
    threads the kernel's share of an image's descriptors was 0.8–1.1 ms of about 12 ms of CPU time, and
    is 0.5–0.6 ms with the buffer; one thread reuses the freed memory either way (0.2–0.35 ms)
    (``benchmarks/descriptor_threads.py``, 400 teaching images, three interleaved runs).
    """
    dtype = np.dtype(dtype)
    n = math.prod(shape)
    buf = getattr(_SCRATCH, "buffer", None)
    if buf is None or buf.dtype != dtype or buf.size < n:
        buf = np.empty(n, dtype=dtype)
        _SCRATCH.buffer = buf
    return buf[:n].reshape(shape)


def rfs_responses_at(gray: np.ndarray, rows: np.ndarray, cols: np.ndarray,
                     support: int = RFS_SUPPORT) -> np.ndarray:
    """The 38 RFS responses at the pixels ``rows × cols`` only, ``(38, len(rows), len(cols))`` float32.

    Same values as ``rfs_responses(gray)[:, rows][:, :, cols]`` but cheaper: the inverse 2-D FFT is
    split into a complex inverse FFT along the image rows, after which only the sampled rows are
    inverse-transformed along the columns.
    """
    gray = np.asarray(gray, dtype=np.float32)
    h = (support - 1) // 2
    padded = cv2.copyMakeBorder(gray, h, h, h, h, cv2.BORDER_REFLECT)
    fh, fw = sfft.next_fast_len(padded.shape[0], real=True), sfft.next_fast_len(padded.shape[1], real=True)
    spec = sfft.rfft2(padded, s=(fh, fw))
    bank = _bank_spectrum(fh, fw, support)
    # the image's spectrum times the bank's, then the inverse FFT along the rows, in one scratch array of
    # this thread's, reused from image to image (same values as a fresh product, bit for bit)
    Z = np.multiply(spec[None], bank, out=_scratch(bank.shape, np.result_type(spec, bank)))
    Z = sfft.ifft(Z, axis=1, overwrite_x=True)
    Z = Z[:, np.asarray(rows) + h, :]
    out = sfft.irfft(Z, n=fw, axis=2)
    return np.ascontiguousarray(out[:, :, np.asarray(cols) + h], dtype=np.float32)


def mr8_from_rfs(resp: np.ndarray) -> np.ndarray:
    """MR8 from the 38 RFS responses (leading axis): max over the 6 orientations of each of the 3 edge
    and 3 bar scales, then the Gaussian and the LoG → 8 responses, ordered
    ``[edge σ=1, 2, 4, bar σ=1, 2, 4, Gaussian, LoG]``.

    Edge filters are odd (``f_{θ+π} = −f_θ``), so the bank's 6 orientations in ``[0, π)`` only cover all
    directions if the sign is dropped: the edge maximum is taken over ``|response|`` (as in the MR8fast
    reference implementation), which is the maximum over the 12 orientations in ``[0, 2π)``.  Bar filters
    are even (π-periodic) and keep the signed maximum.  Both are then invariant to image rotations by
    multiples of π/6 (and approximately to any rotation)."""
    n_or = RFS_ORIENTATIONS
    n_sc = len(RFS_SCALES)
    oriented = resp[: 2 * n_sc * n_or].reshape((2, n_sc, n_or) + resp.shape[1:])
    edge = np.abs(oriented[0]).max(axis=1)
    bar = oriented[1].max(axis=1)
    return np.concatenate([edge, bar, resp[2 * n_sc * n_or:]], axis=0)


def weber_normalise(F: np.ndarray, axis: int = -1, c: float = WEBER_CONSTANT) -> np.ndarray:
    """Contrast normalisation ``F ← F · log(1 + L/c) / L`` with ``L = ||F||₂`` along ``axis``
    (Varma & Zisserman 2005, after Malik et al. 2001); zero vectors stay zero."""
    F = np.asarray(F, dtype=np.float32)
    L = np.sqrt(np.sum(F * F, axis=axis, keepdims=True))
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.where(L > 0, np.log1p(L / c) / L, 0.0).astype(np.float32)
    return F * scale


def normalise_image(gray: np.ndarray) -> np.ndarray:
    """Zero mean, unit variance (a constant image becomes all zeros)."""
    g = np.asarray(gray, dtype=np.float32)
    g = g - g.mean()
    sd = float(g.std())
    return g / sd if sd > 1e-8 else g


def mr8_responses(gray: np.ndarray, support: int = RFS_SUPPORT, weber: bool = True) -> np.ndarray:
    """MR8 responses per pixel, ``(H, W, 8)`` float32 (Varma & Zisserman 2005).

    The grey image is normalised to zero mean / unit variance, filtered with the RFS bank
    (:func:`rfs_responses`), reduced to 8 maximum responses (:func:`mr8_from_rfs`) and contrast
    normalised (:func:`weber_normalise`, over the 8-vector at each pixel) when ``weber``.
    """
    mr8 = np.moveaxis(mr8_from_rfs(rfs_responses(normalise_image(gray), support)), 0, -1)
    return weber_normalise(mr8, axis=-1) if weber else np.ascontiguousarray(mr8)


def texture_descriptors(rgb: np.ndarray, grid: GridSpec) -> tuple[np.ndarray, tuple[int, int]]:
    """Texture descriptors: MR8 responses (:func:`mr8_responses`) at the grid's sample pixels, ``(N, 8)``
    float32, computed only where sampled (:func:`rfs_responses_at`)."""
    h, w = rgb.shape[:2]
    iy, ix, shape = grid.pixel_index(h, w)
    rows, cols = iy.reshape(shape)[:, 0], ix.reshape(shape)[0, :]
    resp = rfs_responses_at(normalise_image(to_gray(rgb)), rows, cols)      # (38, n_y, n_x)
    mr8 = np.moveaxis(mr8_from_rfs(resp), 0, -1).reshape(-1, 8)
    return np.ascontiguousarray(weber_normalise(mr8, axis=-1)), shape


# ---------------------------------------------------------------------------------------------- threads
_CV_THREADS = CountedSetting(cv2.getNumThreads, cv2.setNumThreads)


def one_opencv_thread():
    """OpenCV held to one thread (``cv2.setNumThreads(1)``, process-wide) while any caller is inside.

    The image kernels parallelise over images (``n_jobs`` threads, or one Dask worker per core); OpenCV's
    own pool (every core by default, used by ``SIFT.compute``) would put ``n_jobs × cores`` threads on
    the cores, and on one thread (``ITR_NUM_THREADS=1``) it would still use them all.  Nesting and
    several threads entering at once are counted (:class:`kernels.threads.CountedSetting`): the first
    entry saves and sets the count, the last exit restores it.  Descriptors do not depend on OpenCV's
    thread count.
    """
    return _CV_THREADS.held(1)


# ---------------------------------------------------------------------------------------------- SIFT
@lru_cache(maxsize=16)
def _sift_keypoints(h: int, w: int, grid: GridSpec, patch_factor: float) -> tuple[tuple, tuple[int, int]]:
    """The grid's upright keypoints for an ``h × w`` image (see :func:`dense_sift`), built once per image
    size: a corpus of same-sized images would otherwise create thousands of ``cv2.KeyPoint`` objects per
    image, in Python, holding the GIL.  ``SIFT.compute`` reads them and returns new ones."""
    ys, xs, shape = grid.points(h, w)
    step = max(h, w) / grid.n_long
    bin_width = patch_factor * step / 4.0
    size = float(2.0 * bin_width / 3.0)
    return tuple(cv2.KeyPoint(float(x), float(y), size, 0.0) for y, x in zip(ys, xs)), shape


def dense_sift(rgb: np.ndarray, grid: GridSpec, patch_factor: float = 2.0) -> tuple[np.ndarray, tuple[int, int]]:
    """Dense SIFT: OpenCV ``SIFT.compute`` on the grey image at the grid's points, ``(N, 128)`` float32.

    Keypoints are upright (angle 0).  Each descriptor covers a square patch of side
    ``patch_factor × step`` pixels (``step`` = grid spacing along the longer side), i.e. 4 × 4 spatial
    bins of width ``bin = patch / 4``; OpenCV's bin width is ``1.5 × KeyPoint.size``, so the keypoint
    size passed is ``2 · bin / 3``.  Raises if OpenCV drops a keypoint (every image must keep exactly
    ``N`` descriptors in grid order).
    """
    h, w = rgb.shape[:2]
    kps, shape = _sift_keypoints(h, w, grid, float(patch_factor))
    gray8 = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    # cv2 SIFT objects are not documented as thread-safe: one per call is cheap.
    kp_out, desc = cv2.SIFT_create().compute(gray8, kps)
    if desc is None or len(kp_out) != len(kps):
        raise RuntimeError(
            f"OpenCV SIFT kept {0 if desc is None else len(kp_out)} of {len(kps)} grid keypoints "
            f"for an image of shape {rgb.shape}"
        )
    return np.ascontiguousarray(desc, dtype=np.float32), shape


# ---------------------------------------------------------------------------------------------- all
@dataclass(frozen=True)
class DescriptorParams:
    """Everything that determines the descriptors of an image (part of every cache key)."""

    max_side: int = 256
    pixel_grid: GridSpec = GridSpec(64, 48)   # colour and texture samples (step 4 px at 256)
    sift_grid: GridSpec = GridSpec(32, 24)    # SIFT keypoints (step 8 px, 16 px patches at 256)
    sift_patch_factor: float = 2.0

    def key(self) -> dict:
        return {
            "max_side": self.max_side,
            "pixel_grid": [self.pixel_grid.n_long, self.pixel_grid.n_short],
            "sift_grid": [self.sift_grid.n_long, self.sift_grid.n_short],
            "sift_patch_factor": self.sift_patch_factor,
            "version": 1,
        }

    def grid(self, feature: str) -> GridSpec:
        return self.sift_grid if feature == "sift" else self.pixel_grid


def extract_descriptors(
    rgb: np.ndarray, params: DescriptorParams = DescriptorParams(), features=FEATURES
) -> dict[str, tuple[np.ndarray, tuple[int, int]]]:
    """All requested descriptors of one RGB image: ``{feature: (descriptors (N, d), (n_y, n_x))}``."""
    img = working_image(rgb, params.max_side)
    out: dict[str, tuple[np.ndarray, tuple[int, int]]] = {}
    for f in features:
        if f == "color":
            out[f] = lab_descriptors(img, params.pixel_grid)
        elif f == "texture":
            out[f] = texture_descriptors(img, params.pixel_grid)
        elif f == "sift":
            out[f] = dense_sift(img, params.sift_grid, params.sift_patch_factor)
        else:
            raise ValueError(f"unknown feature {f!r} (expected one of {FEATURES})")
    return out
