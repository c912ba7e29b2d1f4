"""L-CLIPScore student vs teacher: parameter counts and raw encode speed.

    python benchmarks/lclip_student.py [--json] [--quick] [--arch itr-tiny-clip ViT-B-32]

Architectures are instantiated with random weights (speed and size do not depend on the weights, and
no download is needed); the student is ``MultiplexedCLIP`` with its defaults (vision 3 shared blocks x 2,
text 2 x 2, token embedding factorised).  Timings: best of 3 of ``encode_image`` / ``encode_text`` on a
batch, preprocessing and tokenisation excluded, fp32 CPU unless CUDA is present.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def measure(arch: str, n_images: int, n_texts: int, threads: int | None) -> dict:
    from neural.backbone import backbone_from_model, create_architecture
    from neural.lclip import MultiplexedCLIP, count_parameters, encode_speed

    if threads:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model, pre, tok = create_architecture(arch)
    teacher = backbone_from_model(model, pre, tok, name=f"{arch}/random", arch=arch, show_progress=False)
    t0 = time.perf_counter()
    # built from the teacher on its own device (the student copies every tensor it takes, as in
    # neural.lclip.train_lclip); .float() acts on the new student only, backbone_from_model places it
    student_model = MultiplexedCLIP(teacher.model).float().eval()
    build_s = time.perf_counter() - t0
    student = backbone_from_model(student_model, pre, tok, name=f"L-CLIP({arch})", arch="lclip-multiplexed",
                                  device=teacher.device, show_progress=False)
    rng = np.random.default_rng(0)
    size = teacher.image_size
    images = [rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for _ in range(n_images)]
    texts = [f"a photo of {k} red circles left of a striped blue square on the grass" for k in range(n_texts)]
    st = encode_speed(teacher, images, texts)
    ss = encode_speed(student, images, texts)
    vt, tt = teacher.model.visual, teacher.model
    return {
        "arch": arch,
        "device": str(teacher.device),
        "teacher_params": count_parameters(teacher.model),
        "student_params": count_parameters(student_model),
        "param_ratio": count_parameters(student_model) / count_parameters(teacher.model),
        "teacher_vision_layers": len(vt.transformer.resblocks),
        "teacher_text_layers": len(tt.transformer.resblocks),
        "student_vision_layers": student_model.visual.transformer.layers,
        "student_text_layers": student_model.transformer.layers,
        "embed_rank": student_model.embed_rank,
        "teacher_images_per_s": st["images_per_s"],
        "student_images_per_s": ss["images_per_s"],
        "teacher_texts_per_s": st["texts_per_s"],
        "student_texts_per_s": ss["texts_per_s"],
        "image_speedup": ss["images_per_s"] / st["images_per_s"],
        "text_speedup": ss["texts_per_s"] / st["texts_per_s"],
        "student_build_s": build_s,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", nargs="+", default=None, help="architectures (default: itr-tiny-clip ViT-B-32)")
    ap.add_argument("--quick", action="store_true", help="tiny CLIP only, small batches")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own setting)")
    args = ap.parse_args(argv)
    archs = args.arch or (["itr-tiny-clip"] if args.quick else ["itr-tiny-clip", "ViT-B-32"])
    n_img, n_txt = (16, 64) if args.quick else (32, 128)
    out = {a: measure(a, n_img, n_txt, args.threads) for a in archs}
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    for a, r in out.items():
        print(f"{a}: params teacher {r['teacher_params'] / 1e6:.2f} M -> student {r['student_params'] / 1e6:.2f} M "
              f"(x{r['param_ratio']:.2f}); layers vision {r['teacher_vision_layers']}->{r['student_vision_layers']}, "
              f"text {r['teacher_text_layers']}->{r['student_text_layers']}, embedding rank {r['embed_rank']}")
        print(f"   images/s teacher {r['teacher_images_per_s']:.1f} student {r['student_images_per_s']:.1f} "
              f"(x{r['image_speedup']:.2f}); texts/s teacher {r['teacher_texts_per_s']:.1f} "
              f"student {r['student_texts_per_s']:.1f} (x{r['text_speedup']:.2f}) [{r['device']}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
