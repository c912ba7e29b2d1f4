"""Write a generated stand-in of COCO's size in Karpathy's layout, for end-to-end scale runs of the main job.

No COCO images ship here.  To measure what the main job costs at COCO size (Karpathy split: 113,287
training images of which 30,504 are ``restval``, 5,000 validation, 5,000 test; five captions each), this
script writes the teaching world (:func:`corpora.teaching.make_teaching_set`, seed ``--seed``) at that
size in the layout ``corpora.karpathy`` reads::

    OUT/dataset_coco.json      {"dataset": "coco", "images": [{"filepath", "filename", "split",
                                "sentids", "sentences": [{"raw", "tokens", "sentid", "imgid"}]}, ...]}
    OUT/train2014/COCO_train2014_000000000000.png ...   (the "train" and "restval" images)
    OUT/val2014/COCO_val2014_000000082783.png ...       (the "val" and "test" images)

Unlike the Flickr8k stand-in, the captions describe their images (they are the teaching world's own), so
the numbers mean something: retrieval on the 5,000-image test split and the classical systems' low-rank
path at 113k training images.  The images are the teaching set's 160 × 120 renderings saved as PNG
(lossless, so their pixels are the teaching world's; about 13 KB each, 1.6 GB at COCO size; JPEG's chroma
subsampling would blur the world's textures and colour boundaries).  Existing image files are kept, so an
interrupted build resumes; the JSON is written last, atomically.  ``--images N`` writes a smaller set split in COCO's proportions (for a trial)::

    python benchmarks/coco_standin.py /data/coco-standin                 # 123,287 images
    python benchmarks/coco_standin.py /tmp/coco-small --images 12000
    python -m experiments.flickr8k_kcca --data /data/coco-standin/dataset_coco.json \\
        --images /data/coco-standin --workers 2
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import cv2
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from corpora.jsondata import write_json_atomic  # noqa: E402
from corpora.teaching import make_teaching_set  # noqa: E402

#: COCO's Karpathy split: train, restval, val, test.
COCO_SPLIT = {"train": 82_783, "restval": 30_504, "val": 5_000, "test": 5_000}
COCO_IMAGES = sum(COCO_SPLIT.values())


def split_sizes(n_images: int) -> dict[str, int]:
    """Karpathy split sizes for ``n_images`` images in COCO's proportions (all of COCO's at its size;
    the rounding remainder goes to ``train``)."""
    sizes = {k: n_images * v // COCO_IMAGES for k, v in COCO_SPLIT.items()}
    sizes["train"] += n_images - sum(sizes.values())
    return sizes


def entries(ts, sizes: dict[str, int]) -> list[dict]:
    """The ``images`` list of the JSON: the teaching set's train images first (Karpathy ``train``, then
    ``restval``), its dev images as ``val``, its test images as ``test``; file names as COCO's."""
    order = [("train", i) for i in ts.split("train")[: sizes["train"]]]
    order += [("restval", i) for i in ts.split("train")[sizes["train"]:]]
    order += [("val", i) for i in ts.split("dev")] + [("test", i) for i in ts.split("test")]
    out, sentid = [], 0
    for k, (split, image_id) in enumerate(order):
        folder = "train2014" if split in ("train", "restval") else "val2014"
        sentences = []
        for cap in ts.captions_of(image_id):
            sentences.append({"raw": cap.text, "tokens": re.findall(r"[a-z0-9]+", cap.text.lower()),
                              "sentid": sentid, "imgid": k})
            sentid += 1
        out.append({"filepath": folder, "filename": f"COCO_{folder}_{k:012d}.png", "split": split,
                    "imgid": k, "cocoid": k, "sentids": [s["sentid"] for s in sentences],
                    "sentences": sentences, "source_id": image_id})
    return out


def build(out: Path, n_images: int = COCO_IMAGES, seed: int = 0, show_progress: bool = True) -> dict:
    """Write the stand-in into ``out`` (module docstring); returns a summary (sizes, seconds)."""
    t0 = time.perf_counter()
    sizes = split_sizes(n_images)
    n_train = sizes["train"] + sizes["restval"]
    ts = make_teaching_set(n_images=n_images, n_train=n_train, n_dev=sizes["val"], seed=seed)
    images = entries(ts, sizes)
    t_gen = time.perf_counter() - t0
    written = 0
    for e in tqdm(images, desc="stand-in images", disable=not show_progress):
        p = out / e["filepath"] / e["filename"]
        if p.is_file():
            continue
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_suffix(".tmp.png")
        rgb = ts.load_image(e["source_id"])
        if not cv2.imwrite(str(tmp), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)):
            raise OSError(f"{tmp}: could not write the image")
        tmp.replace(p)
        written += 1
    for e in images:
        del e["source_id"]
    write_json_atomic(out / "dataset_coco.json", {"dataset": "coco", "images": images})
    return {"out": str(out), "images": n_images, "splits": sizes, "written": written,
            "generate_s": round(t_gen, 1), "total_s": round(time.perf_counter() - t0, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, help="output folder (created; existing images are kept)")
    ap.add_argument("--images", type=int, default=COCO_IMAGES,
                    help=f"number of images (default {COCO_IMAGES:,}, COCO's Karpathy split)")
    ap.add_argument("--seed", type=int, default=0, help="teaching-world seed (default 0)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    if args.images < 40:
        ap.error(f"--images must be at least 40, got {args.images}")
    summary = build(args.out, args.images, args.seed, show_progress=not args.quiet)
    print(", ".join(f"{k} {v}" for k, v in summary.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
