"""Overhead of the neural scorers over raw open_clip encoding, and the image-feature cache.

    python benchmarks/neural_overhead.py --json [--quick] [--clip-model itr-tiny-clip] [--clip-pretrained FILE]

Prints (and with ``--json`` as one JSON object):

* ``overhead_ratio_image`` — ``CLIPScore.image_embeddings(images)`` time / the raw loop a user would write
  (open_clip eval transform per image, ``torch.stack``, ``model.encode_image`` in batches of 64 under
  ``torch.inference_mode``, L2 normalisation) on the same images; goal ≤ 1.2;
* ``overhead_ratio_text`` — ``CLIPScore.text_embeddings(captions)`` (prompt, truncating tokeniser,
  batches of 256) / raw ``tokenizer`` + ``model.encode_text`` + normalisation on the same prompted
  captions; goal ≤ 1.2.  The backbone's in-memory table of encoded texts is cleared before each timed
  call, so every caption is encoded; ``scorer_text_memo_s`` is the same call served from that table.
  The scorer stops each batch at its last end-of-text token (exact for CLIP's causal text tower), so
  this ratio can be below 1; ``overhead_ratio_text_eot`` compares it with a raw loop that also stops at
  end-of-text (``neural.text_tower.encode_text_to_eot``) but keeps the input order, while the scorer also
  groups captions of similar length into batches (fewer padded positions), so it is not the wrapper's
  overhead alone;
* ``cached_rerun_encodes`` — images encoded when ``Backbone.encode_corpus_images`` is run a second
  time with the same disk cache; goal 0;
* ``throughput_ratio_corpus`` — images / s of ``Backbone.encode_corpus_images`` (no disk cache: every
  image loaded, transformed and encoded, with the backbone's loader threads, ``--loader-threads``,
  :mod:`neural.prefetch`) / images / s of a raw ``model.encode_image`` loop over the same batches already
  transformed and on the device — the encoder alone.  Goal **≥ 0.9** on CUDA (``--device cuda``): image
  loading and the transform hidden behind encoding.  On the CPU the two compete for the same cores and the
  ratio is well below 1; ``raw_corpus_images_per_s`` is the serial loop a user would write (load,
  transform, encode), for comparison;
* the raw and scorer timings (best of ``--repeats``) and the backbone's provenance.

The architecture defaults to the tiny CLIP (random weights: speed does not depend on the values), so
the script needs no download.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import emit  # noqa: E402


def _best(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def corpus_throughput(bb, corpus, ids, repeats: int, batch_size: int = 64) -> dict:
    """Images / s of ``bb.encode_corpus_images`` without a disk cache (the in-memory table cleared before
    each call, so every image is loaded, transformed and encoded) against the encoder alone on the same
    batches, transformed and moved to the device beforehand, and against the serial user loop."""
    from corpora.cache import NO_CACHE
    from neural.backbone import to_pil
    from neural.prefetch import loader_threads_for

    model, pre, dev, dtype = bb.model, bb.preprocess, bb.device, bb.dtype
    batches = [torch.stack([pre(to_pil(corpus.load_image(i))) for i in ids[s:s + batch_size]]).to(dev, dtype)
               for s in range(0, len(ids), batch_size)]

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    def encoder_only():
        with torch.inference_mode():
            out = [F.normalize(model.encode_image(x).float(), dim=-1) for x in batches]
        sync()
        return out

    def user_loop():
        with torch.inference_mode():
            for s in range(0, len(ids), batch_size):
                x = torch.stack([pre(to_pil(corpus.load_image(i))) for i in ids[s:s + batch_size]])
                F.normalize(model.encode_image(x.to(dev, dtype)).float(), dim=-1).cpu()
        sync()

    def ours():
        bb.clear_image_memo()
        bb.encode_corpus_images(corpus, ids, cache=NO_CACHE, batch_size=batch_size)
        sync()

    encoder_only()   # warm-up (CUDA kernels, allocator)
    t_enc, t_user, t_ours = (_best(f, repeats) for f in (encoder_only, user_loop, ours))
    n = len(ids)
    threads = loader_threads_for(dev) if bb.loader_threads is None else bb.loader_threads
    return {"loader_threads": threads, "encoder_images_per_s": round(n / t_enc, 1),
            "raw_corpus_images_per_s": round(n / t_user, 1), "corpus_images_per_s": round(n / t_ours, 1),
            "throughput_ratio_corpus": round(t_enc / t_ours, 4)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="fewer images / captions")
    ap.add_argument("--clip-model", default="itr-tiny-clip",
                    help="open_clip architecture to time (default: itr-tiny-clip, randomly initialised "
                         "unless --clip-pretrained is given)")
    ap.add_argument("--clip-pretrained", default=None,
                    help="pretrained tag or weights file for --clip-model (default: none, random weights); "
                         "an OpenAI TorchScript .pt file needs ITR_TRUST_TORCHSCRIPT=1")
    ap.add_argument("--device", default="cpu", help="auto | cpu | cuda (default: cpu)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats; the best is reported (default 3)")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    ap.add_argument("--loader-threads", type=int, default=None,
                    help="threads loading and transforming image batches ahead of the encoder on CUDA, "
                         "loading, transforming and encoding whole batches side by side on the CPU (default: "
                         "neural.prefetch.loader_threads_for the device: up to 4 on CUDA, one per usable "
                         "core on the CPU)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    from corpora.cache import DiskCache
    from corpora.teaching import make_teaching_set
    from neural.backbone import load_backbone, to_pil
    from neural.base import with_prompt
    from neural.clipscore import CLIPScore
    from neural.text_tower import encode_text_to_eot

    n_img = 128 if args.quick else 512
    ts = make_teaching_set(n_images=max(n_img, 120), n_train=max(n_img, 120) // 2,
                           n_dev=max(n_img, 120) // 4, seed=0)
    ids = list(ts.image_ids[:n_img])
    images = [ts.load_image(i) for i in ids]
    captions = [c.text for i in ids for c in ts.captions[i]][: (1000 if args.quick else 4000)]
    torch.manual_seed(0)   # the tiny CLIP's random weights: the same backbone (weights_id) every run
    bb = load_backbone(args.clip_model, args.clip_pretrained, device=args.device, show_progress=False)
    scorer = CLIPScore(bb)
    model, pre, tok = bb.model, bb.preprocess, bb.tokenizer
    dev, dtype = bb.device, bb.dtype

    def raw_images():
        out = []
        with torch.inference_mode():
            for s in range(0, len(images), 64):
                x = torch.stack([pre(to_pil(im)) for im in images[s:s + 64]]).to(dev, dtype)
                out.append(F.normalize(model.encode_image(x).float(), dim=-1).cpu())
        return torch.cat(out)

    prompted = with_prompt(captions)

    def raw_texts(encode=model.encode_text):
        out = []
        with torch.inference_mode():
            for s in range(0, len(prompted), 256):
                out.append(F.normalize(encode(tok(prompted[s:s + 256]).to(dev)).float(), dim=-1).cpu())
        return torch.cat(out)

    def raw_texts_eot():   # the same loop, stopping each batch at its last end-of-text token
        return raw_texts(lambda tokens: encode_text_to_eot(model, tokens))

    # warm-up, and check that the scorer computes the same thing as the raw loop
    assert np.allclose(raw_images().numpy(), scorer.image_embeddings(images), atol=1e-5)
    assert np.allclose(raw_texts().numpy(), scorer.text_embeddings(captions), atol=1e-5)
    t_raw_img = _best(raw_images, args.repeats)
    t_img = _best(lambda: scorer.image_embeddings(images), args.repeats)
    t_raw_txt = _best(raw_texts, args.repeats)
    assert np.allclose(raw_texts_eot().numpy(), raw_texts().numpy(), atol=1e-5)
    t_raw_txt_eot = _best(raw_texts_eot, args.repeats)
    t_txt_memo = _best(lambda: scorer.text_embeddings(captions), args.repeats)   # all served from the table

    def fresh_texts():
        bb.clear_text_memo()
        return scorer.text_embeddings(captions)

    n0 = bb.n_text_encodes
    t_txt = _best(fresh_texts, args.repeats)
    assert bb.n_text_encodes - n0 == args.repeats * len(set(prompted)), "texts served from the memo"

    with tempfile.TemporaryDirectory() as tmp:
        cache = DiskCache(tmp)
        t0 = time.perf_counter()
        first = bb.encode_corpus_images(ts, ids, cache=cache)
        t_cold = time.perf_counter() - t0
        n0 = bb.n_image_encodes
        t0 = time.perf_counter()
        again = bb.encode_corpus_images(ts, ids, cache=cache)
        t_warm = time.perf_counter() - t0
        rerun_encodes = bb.n_image_encodes - n0
        assert np.array_equal(first, again)

    if args.loader_threads is not None:
        bb.loader_threads = args.loader_threads
    through = corpus_throughput(bb, ts, ids, args.repeats)

    res = {
        "backbone": bb.name,
        "n_images": len(images),
        "n_captions": len(captions),
        "threads": args.threads,
        "raw_encode_image_s": round(t_raw_img, 4),
        "scorer_image_s": round(t_img, 4),
        "overhead_ratio_image": round(t_img / t_raw_img, 4),
        "raw_encode_text_s": round(t_raw_txt, 4),
        "scorer_text_s": round(t_txt, 4),
        "scorer_text_memo_s": round(t_txt_memo, 4),
        "overhead_ratio_text": round(t_txt / t_raw_txt, 4),
        "raw_encode_text_eot_s": round(t_raw_txt_eot, 4),
        "overhead_ratio_text_eot": round(t_txt / t_raw_txt_eot, 4),
        "corpus_images_cold_s": round(t_cold, 4),
        "corpus_images_cached_s": round(t_warm, 4),
        "cached_rerun_encodes": int(rerun_encodes),
        **through,
        "provenance": bb.provenance(),
    }
    emit(res, args.json, skip=("provenance",), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
