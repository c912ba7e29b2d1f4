"""Reading images as ``(H, W, 3)`` uint8 RGB arrays – the one image decoder of the toolkit.

Every image that enters a feature extractor goes through :func:`read_image`, so that all of them see
the same pixels whatever the file looks like:

* **EXIF orientation** is applied (:func:`PIL.ImageOps.exif_transpose`): a photo stored sideways with an
  ``Orientation`` tag comes back upright, as a viewer would show it.
* **Mode conversions** (Pillow mode → RGB):

  ======================  ======================================================================
  ``RGB``                 unchanged
  ``L`` / ``1``           grayscale: the gray value is copied to R, G and B
  ``P`` (palette)         palette looked up; a palette with a transparent entry is treated as RGBA
  ``RGBA`` / ``LA`` /     **alpha-composited over a white background** (``out = a·rgb + (1-a)·255``),
  ``PA`` / ``RGBa``       so transparent regions become white instead of whatever colour the
                          invisible pixels happen to store
  ``CMYK``                Pillow's CMYK → RGB conversion (``R = 255 - min(255, C + K)`` …, no ICC
                          colour management); Adobe "inverted" CMYK JPEGs are un-inverted by
                          Pillow's decoder
  ``YCbCr`` / ``LAB`` /   Pillow's conversion to RGB
  ``HSV``
  ``I;16*`` (16-bit)      scaled to 8 bits: ``round(v / 257)`` (65535 → 255); then gray → RGB
  ``I`` / ``F``           32-bit integer / float grayscale: values already in [0, 255] are kept,
                          otherwise treated as 16-bit (``v / 257``, clipped to [0, 255])
  ======================  ======================================================================

  16-bit-per-channel colour PNGs are reduced to 8 bits by Pillow itself when it opens them.
* **Errors**: a missing file raises :class:`~corpora.base.MissingImagesError` (a
  :class:`FileNotFoundError`); an unreadable, truncated or non-image file raises
  :class:`~corpora.base.CorpusError` whose message names the file.  Truncated JPEGs are *not* silently
  padded with gray (unless the caller has set ``PIL.ImageFile.LOAD_TRUNCATED_IMAGES`` globally), nor are
  JPEGs whose scan data ends before the image their header declares (:func:`check_jpeg_fill`: a header
  claiming 9000 × 9000 on a small photo decodes to grey fill without any error from the decoder).

Speed: Pillow with libjpeg(-turbo) decodes a 500×375 Flickr8k JPEG in a few milliseconds.  Pass
``max_side`` when the caller will downscale anyway: JPEG images are then decoded with Pillow's
``draft`` mode (DCT-domain scaling by 1/2, 1/4 or 1/8, never below ``max_side``), which is several times
faster, and the result is resized (Lanczos) so that its longer side is at most ``max_side``.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from corpora.base import CorpusError, MissingImagesError

__all__ = ["read_image", "image_size", "to_rgb", "PathImageLoader"]

_ALPHA_MODES = {"RGBA", "LA", "PA", "RGBa", "La"}


def _scale_high_bit_depth(img: Image.Image) -> Image.Image:
    """16-bit / 32-bit integer / float grayscale -> 8-bit ``L`` (see module docstring)."""
    arr = np.asarray(img)
    if img.mode.startswith("I;16"):
        arr = arr.astype(np.float32) / 257.0
    else:  # "I" (int32) or "F" (float32)
        arr = arr.astype(np.float32)
        finite = arr[np.isfinite(arr)]
        if finite.size and (finite.max() > 255.0 or finite.min() < 0.0):
            arr = arr / 257.0
        arr = np.nan_to_num(arr, nan=0.0, posinf=255.0, neginf=0.0)
    return Image.fromarray(np.clip(np.rint(arr), 0, 255).astype(np.uint8), mode="L")


def to_rgb(img: Image.Image) -> Image.Image:
    """Convert a Pillow image of any mode to ``RGB`` following the table in the module docstring."""
    mode = img.mode
    if mode == "RGB":
        return img
    if mode == "P":
        img = img.convert("RGBA") if "transparency" in img.info else img.convert("RGB")
        mode = img.mode
        if mode == "RGB":
            return img
    if mode in _ALPHA_MODES:
        rgba = img.convert("RGBA")
        white = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, rgba).convert("RGB")
    if mode.startswith("I;16") or mode in ("I", "F"):
        return _scale_high_bit_depth(img).convert("RGB")
    # L, 1, CMYK, YCbCr, LAB, HSV, ...
    return img.convert("RGB")


def read_image(path: str | os.PathLike, *, max_side: int | None = None) -> np.ndarray:
    """Read an image file as an upright ``(H, W, 3)`` uint8 RGB array.

    Parameters
    ----------
    path : path-like
        Image file (JPEG, PNG, TIFF, BMP, GIF, WebP … anything Pillow reads).
    max_side : int, optional
        If given, the longer side of the result is at most ``max_side`` pixels (aspect ratio kept;
        images already smaller are not enlarged).  JPEGs are then decoded at reduced resolution
        (``Image.draft``), which is much faster.

    Returns
    -------
    ndarray, shape (H, W, 3), dtype uint8
        RGB pixels with EXIF orientation applied; C-contiguous and writeable.

    Raises
    ------
    MissingImagesError
        The file does not exist.
    CorpusError
        The file is not a readable image (corrupt, truncated, unsupported); the message names it.
    """
    p = Path(path)
    if not p.is_file():
        raise MissingImagesError(f"image file not found: {p}")
    if max_side is not None and int(max_side) < 1:
        raise ValueError(f"max_side must be a positive integer, got {max_side!r}")
    try:
        with Image.open(p) as img:
            declared = img.size
            if max_side is not None and img.format == "JPEG":
                # Request a DCT-scaled decode whose size is still >= the final size (draft keeps
                # the scale such that both sides stay >= the requested box).
                w, h = img.size
                s = max_side / max(w, h)
                if s < 1.0:
                    img.draft("RGB" if img.mode in ("RGB", "YCbCr") else None,
                              (max(1, int(w * s)), max(1, int(h * s))))
            img.load()  # force the full decode here so truncation errors surface now
            if img.format == "JPEG":
                check_jpeg_fill(img, p, declared)
            img = ImageOps.exif_transpose(img)
            img = to_rgb(img)
            if max_side is not None and max(img.size) > max_side:
                w, h = img.size
                s = max_side / max(w, h)
                img = img.resize((max(1, round(w * s)), max(1, round(h * s))), Image.Resampling.LANCZOS)
            arr = np.array(img, dtype=np.uint8)  # one copy: writeable, C-contiguous
    except CorpusError:   # check_jpeg_fill's: it names the file already
        raise
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError, EOFError,
            Image.DecompressionBombError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise MissingImagesError(f"image file not found: {p}") from exc
        raise CorpusError(f"cannot read image ({type(exc).__name__}: {exc})", p) from exc
    if arr.ndim != 3 or arr.shape[2] != 3:  # pragma: no cover - to_rgb guarantees RGB
        raise CorpusError(f"decoded image has unexpected shape {arr.shape}", p)
    return arr


#: The value libjpeg gives every sample of the blocks it has no data for (all coefficients zero).
JPEG_FILL = 128


def check_jpeg_fill(img: Image.Image, path: Path, declared: tuple[int, int] | None = None) -> None:
    """Refuse a decoded JPEG whose entropy-coded data ended before the image its header declares.

    libjpeg does not fail when the scan data stops early (a header that claims a larger image than the
    data holds — 9000 × 9000 on a 500 × 333 photo — or data cut before an end marker): it warns, and
    Pillow ignores the warning, and decodes every remaining block with all coefficients zero, i.e. as
    the flat mid-grey :data:`JPEG_FILL` in every channel.  So the decoded image's bottom rows are that
    exact grey over the whole width.  At least 1 % of the rows (and two) that are exactly
    ``JPEG_FILL`` in every sample are taken as that fill: a photograph does not hold an exactly
    uniform band of that value across its full width.

    Parameters
    ----------
    img : PIL.Image.Image
        The decoded JPEG (possibly at a draft scale).
    path : Path
        Its file, for the message.
    declared : (width, height), optional
        The size its header declares (default: ``img.size``).

    Raises
    ------
    CorpusError
        Naming the file, the declared size and how much of it is fill.
    """
    arr = np.asarray(img)
    if arr.ndim == 2:
        arr = arr[..., None]
    h = arr.shape[0]
    flat = (arr == JPEG_FILL).reshape(h, -1).all(axis=1)
    filled = int(np.argmin(flat[::-1])) if not flat.all() else h   # rows of fill at the bottom
    if filled >= max(2, h // 100):
        w, hd = declared or img.size
        raise CorpusError(f"JPEG data ends before the {w} x {hd} image its header declares: the bottom "
                          f"{100 * filled / h:.1f} % of the decoded rows are the decoder's grey fill (a damaged "
                          "or edited header, or a truncated file)", path)


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """``(width, height)`` of an image *after* EXIF orientation, read from the header only."""
    p = Path(path)
    if not p.is_file():
        raise MissingImagesError(f"image file not found: {p}")
    try:
        with Image.open(p) as img:
            w, h = img.size
            orientation = img.getexif().get(0x0112, 1)
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise CorpusError(f"cannot read image header ({type(exc).__name__}: {exc})", p) from exc
    return (h, w) if orientation in (5, 6, 7, 8) else (w, h)



class PathImageLoader:
    """``loader(image_id) -> read_image(paths[image_id])`` – the ``Corpus.image_loader`` of file-based
    corpora.  A plain class (not a closure) so that a corpus can be pickled to worker processes.

    Unknown ids raise :class:`KeyError`; ids whose file is absent raise
    :class:`~corpora.base.MissingImagesError` naming the path.
    """

    def __init__(self, paths, corpus_name: str = "", max_side: int | None = None):
        self.paths = paths
        self.corpus_name = corpus_name
        self.max_side = max_side

    def __call__(self, image_id: str) -> np.ndarray:
        p = self.paths.get(image_id)
        if p is None:
            raise KeyError(f"unknown image id {image_id!r} in corpus {self.corpus_name!r}")
        if not Path(p).is_file():
            raise MissingImagesError(f"image {image_id} of corpus {self.corpus_name!r} not found: {p}")
        return read_image(p, max_side=self.max_side)
