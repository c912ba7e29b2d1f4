"""Build a full-size Flickr8k stand-in for timing and memory measurements of the real-data path.

No Flickr8k images ship here (the shared folder has the real text bundle and 14 of the 8,091 JPEGs).  To
measure what a run on the real dataset costs (feature extraction of 8,091 images, kernels and KCCA at
6,000 training items, the 1,000-image Hodosh test pool), this script writes a folder in the standard
layout::

    OUT/Flickr8k_text/        -> a link to (or, with --copy-text, a copy of) the real text bundle
    OUT/Flicker8k_Dataset/    one JPEG per image file name of the real dataset (8,091)

Each image is derived from one of the real JPEGs on disk, chosen and transformed by a generator seeded
with the CRC-32 of the file name: a random crop of 55–100 % of each side, a horizontal flip with
probability ½, a hue rotation and a brightness factor in [0.6, 1.3], resized to 500 px on the long
side and 333, 375 or 500 px on the short one (Flickr8k's usual sizes).  Every image is therefore
distinct (full-rank image kernels, real extraction cost) and the folder is the same byte for byte on
every run with the same inputs.  **The images do not match their captions**, so every method scores at
chance: use the stand-in for time and memory, never for accuracy.

The source must have the standard layout (``Flickr8k_text/Flickr8k.token.txt``; Kaggle's ``captions.txt``
layout is not supported).  The file names come from the MD5 list when there is one
(``checksums/flickr8k_checksum.txt``, all 8,091 originals), else from the caption file (ids ending in
``.jpg``).  Existing files are kept, so an interrupted build resumes.

    python benchmarks/flickr8k_standin.py /tmp/flickr8k-standin            # from $ITR_SHARED/data/flickr8k
    python benchmarks/flickr8k_standin.py OUT --source /path/to/flickr8k --limit 500
    python benchmarks/main_job.py --data /tmp/flickr8k-standin --json      # then time the main job on it

Measured (2-core machine): building the 8,091 images takes ≈ 20 s and 0.5 GB of disk; the
default main job on the stand-in, see docs/tutorial.md ("Run on the real Flickr8k").
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
import zlib
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import emit  # noqa: E402

SHORT_SIDES = (333, 375, 500)


def image_names(source: Path) -> list[str]:
    """The image file names of the dataset at ``source``: from the MD5 list when present, else the
    caption file's ids that end in ``.jpg`` (sorted, unique)."""
    from corpora.checksums import read_checksum_file
    from corpora.flickr8k import find_layout, parse_token_file

    md5 = source / "checksums" / "flickr8k_checksum.txt"
    if md5.is_file():
        return sorted(n for n in read_checksum_file(md5) if n.endswith(".jpg"))
    lay = find_layout(source)
    if lay.token_file is None:
        raise SystemExit(f"error: {source}: no Flickr8k.token.txt (the standard layout is needed)")
    return sorted({r.image_id for r in parse_token_file(lay.token_file) if r.image_id.endswith(".jpg")})


def derive(base: list[np.ndarray], name: str) -> np.ndarray:
    """The stand-in image for file ``name`` (BGR uint8), seeded by the CRC-32 of the name."""
    r = np.random.default_rng(zlib.crc32(name.encode("utf-8")))
    im = base[int(r.integers(len(base)))]
    h, w = im.shape[:2]
    ch, cw = max(1, int(h * r.uniform(0.55, 1.0))), max(1, int(w * r.uniform(0.55, 1.0)))
    y, x = int(r.integers(0, h - ch + 1)), int(r.integers(0, w - cw + 1))
    crop = im[y:y + ch, x:x + cw]
    if r.random() < 0.5:
        crop = crop[:, ::-1]
    hsv = cv2.cvtColor(np.ascontiguousarray(crop), cv2.COLOR_BGR2HSV).astype(np.float32)
    hsv[..., 0] = (hsv[..., 0] + float(r.integers(0, 180))) % 180
    hsv[..., 2] = np.clip(hsv[..., 2] * r.uniform(0.6, 1.3), 0, 255)
    out = cv2.cvtColor(hsv.astype(np.uint8), cv2.COLOR_HSV2BGR)
    short = int(r.choice(SHORT_SIDES))
    size = (500, short) if r.random() < 0.7 else (short, 500)   # (width, height): landscape or portrait
    return cv2.resize(out, size, interpolation=cv2.INTER_AREA)


def build(out: Path, source: Path, *, limit: int | None = None, copy_text: bool = False,
          quality: int = 90, show_progress: bool = True) -> dict:
    """Write the stand-in under ``out``; returns a summary (counts, seconds, bytes)."""
    from tqdm.auto import tqdm

    from corpora.flickr8k import IMAGE_DIR_NAMES, TEXT_DIR_NAME, find_layout

    try:
        lay = find_layout(source)
    except FileNotFoundError as exc:
        raise SystemExit(f"error: {exc}") from None
    if lay.token_file is None:
        raise SystemExit(f"error: {source}: no {TEXT_DIR_NAME}/Flickr8k.token.txt (the stand-in copies the "
                         "standard layout; Kaggle's captions.txt layout is not supported)")
    if lay.images_dir is None:
        raise SystemExit(f"error: {source}: no image folder ({', '.join(IMAGE_DIR_NAMES)})")
    base_files = sorted(lay.images_dir.glob("*.jpg"))
    base = [im for p in base_files if (im := cv2.imread(str(p), cv2.IMREAD_COLOR)) is not None]
    if not base:
        raise SystemExit(f"error: {lay.images_dir}: no readable JPEG to derive images from")
    names = image_names(source)[:limit]
    out.mkdir(parents=True, exist_ok=True)
    text = out / TEXT_DIR_NAME
    if text.is_symlink() and not text.exists():   # a link left dangling (the source moved): make it again
        text.unlink()
    if not text.exists():
        src_text = lay.token_file.parent
        if copy_text:
            shutil.copytree(src_text, text)
        else:
            text.symlink_to(src_text.resolve(), target_is_directory=True)
    images = out / "Flicker8k_Dataset"
    images.mkdir(exist_ok=True)
    for leftover in images.glob(".*.tmp.jpg"):   # from an interrupted build
        leftover.unlink()
    t0, made = time.perf_counter(), 0
    for name in tqdm(names, desc="stand-in images", unit="img", disable=not show_progress):
        path = images / name
        if path.exists():
            continue
        tmp = path.with_name(f".{name}.tmp.jpg")
        if not cv2.imwrite(str(tmp), derive(base, name), [cv2.IMWRITE_JPEG_QUALITY, int(quality)]):
            raise SystemExit(f"error: could not write {tmp}")
        tmp.replace(path)   # atomic: an interrupted build never leaves a truncated JPEG under the real name
        made += 1
    return {"out": str(out), "images": len(names), "written": made, "derived_from": len(base),
            "seconds": round(time.perf_counter() - t0, 2),
            "image_bytes": sum(p.stat().st_size for p in images.glob("*.jpg") if not p.name.startswith("."))}


def main(argv=None) -> None:
    from corpora.paths import shared_flickr8k_dir

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="folder to write the stand-in into (created; existing images kept)")
    ap.add_argument("--source", type=Path, default=None,
                    help="Flickr8k folder with the text bundle and some JPEGs (default: $ITR_SHARED/data/flickr8k)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N image names (default: all)")
    ap.add_argument("--copy-text", action="store_true",
                    help="copy the text bundle instead of linking to it (default: a symbolic link)")
    ap.add_argument("--quality", type=int, default=90, help="JPEG quality 1-100 (default 90)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = ap.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        ap.error("--limit must be at least 1")
    if not 1 <= args.quality <= 100:
        ap.error("--quality must be in 1..100")
    source = (args.source or shared_flickr8k_dir()).expanduser()
    res = build(args.out.expanduser(), source, limit=args.limit, copy_text=args.copy_text,
                quality=args.quality, show_progress=not args.no_progress)
    emit(res, args.json)


if __name__ == "__main__":
    main()
