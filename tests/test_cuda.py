"""Every expectation of the suite that depends on the device, asked for on a CUDA device by name.

The rest of the suite runs ``auto`` on the CPU (tests/conftest.py sets ``ITR_DEVICE=cpu``), because its
expectations are CPU-exact: bit-identical resumes, cached numbers, seeded training.  Here the same code
runs on the GPU and is held to what can be promised across devices:

* the teaching CLIP's features on CUDA give the CPU's similarities to within float32-on-GPU error
  (cuDNN may run convolutions in TF32, a 10-bit mantissa: about 1e-3 relative);
* on one device, the features do not depend on the loader threads or the pinned-memory copy (exact);
* fp16 inference stays within half precision's error of fp32;
* every trainer runs under CUDA autocast (bfloat16, and float16 with its gradient scaler) with finite
  losses;
* corpus images encoded by Dask workers on the GPU are the job's own GPU features (exact);
* the main job with ``--device cuda`` runs end to end, records the GPU in its provenance and gives the
  CPU run's figures up to near-ties that the two devices may order differently.

Skipped, with the reason, on a machine where torch sees no CUDA device.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from neural.architectures import create_architecture
from neural.backbone import backbone_from_model
from neural.teaching_clip import load_teaching_clip
from neural.training import MixedPrecision

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="no CUDA device (torch.cuda.is_available() is False): the device "
                                       "expectations run on a GPU machine")

REPO = Path(__file__).resolve().parent.parent


def teaching_pairs(corpus, n: int = 48) -> tuple[list[np.ndarray], list[str]]:
    """The first ``n`` images of the corpus and the first caption of each."""
    ids = corpus.image_ids[:n]
    return [corpus.load_image(i) for i in ids], [corpus.captions_of(i)[0].text for i in ids]


def similarities(backbone, images, texts) -> np.ndarray:
    return (backbone.encode_images(images, batch_size=16) @ backbone.encode_texts(texts).T).numpy()


def test_teaching_clip_on_cuda_gives_the_cpu_similarities(small_teaching_set):
    images, texts = teaching_pairs(small_teaching_set)
    cpu = similarities(load_teaching_clip(device="cpu", show_progress=False), images, texts)
    gpu_bb = load_teaching_clip(device="cuda", show_progress=False)
    assert gpu_bb.device.type == "cuda" and next(gpu_bb.model.parameters()).is_cuda
    gpu = similarities(gpu_bb, images, texts)
    assert np.abs(gpu - cpu).max() < 1e-2
    # the caption each image ranks first is the same but for near-ties
    agree = np.mean(gpu.argmax(axis=1) == cpu.argmax(axis=1))
    assert agree >= 0.9, agree


def test_cuda_features_do_not_depend_on_the_loader_threads(small_teaching_set):
    """Batches loaded on 0 or 3 threads, pinned for the copy to the GPU: the same features bit for bit."""
    images, _ = teaching_pairs(small_teaching_set, 40)
    bb = load_teaching_clip(device="cuda", show_progress=False)
    feats = []
    for threads in (0, 3):
        bb.loader_threads = threads
        feats.append(bb.encode_images_from(lambda i: images[i], len(images), batch_size=16))
    assert torch.equal(feats[0], feats[1])


def test_fp16_inference_stays_within_half_precision_error():
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 255, (64, 64, 3), dtype=np.uint8) for _ in range(12)]
    texts = [f"a photo of {k} dogs on the grass" for k in range(12)]
    sims = {}
    for precision in ("fp32", "fp16"):
        torch.manual_seed(0)
        m, p, t = create_architecture("itr-tiny-clip")
        bb = backbone_from_model(m, p, t, name="tiny-random", arch="itr-tiny-clip", device="cuda",
                                 precision=precision, show_progress=False)
        assert bb.precision == precision
        sims[precision] = similarities(bb, images, texts)
    assert np.abs(sims["fp16"] - sims["fp32"]).max() < 2e-2


@pytest.fixture()
def cuda_tiny_backbone():
    torch.manual_seed(0)
    m, p, t = create_architecture("itr-tiny-clip")
    return backbone_from_model(m, p, t, name="tiny-random", arch="itr-tiny-clip", device="cuda",
                               show_progress=False)


def test_corpus_images_encoded_by_cluster_workers_on_cuda_are_the_jobs(cuda_tiny_backbone, small_teaching_set,
                                                                      tmp_path):
    """A job on CUDA with a Dask cluster: each worker moves its copy of the backbone to the GPU it sees and
    encodes its chunks there (neural/cluster.py), giving the features the job computes on the GPU."""
    from corpora.cache import DiskCache
    from corpora.parallel import BlockExecutor
    from neural.cluster import clip_encoding_on

    ts = small_teaching_set
    ids = list(ts.image_ids[:70])
    bb = cuda_tiny_backbone
    bb.clear_image_memo()
    with BlockExecutor(workers=2, processes=False) as ex, clip_encoding_on(ex):
        on_workers = bb.encode_corpus_images(ts, ids, cache=DiskCache(tmp_path / "dask"), batch_size=8, chunk=16)
    bb.clear_image_memo()
    here = bb.encode_corpus_images(ts, ids, cache=DiskCache(tmp_path / "here"), batch_size=8, chunk=16)
    assert bb.n_image_encodes == 70 and all(p.is_cuda for p in bb.model.parameters())
    np.testing.assert_array_equal(on_workers, here)


def test_texts_encoded_by_cluster_workers_on_cuda_are_the_jobs(cuda_tiny_backbone, small_teaching_set, monkeypatch):
    """A large text call of a job on CUDA with a Dask cluster: the workers encode the token rows' blocks on
    the GPU they see, in the job's batches, giving the features the job computes on the GPU."""
    import neural.cluster
    from corpora.parallel import BlockExecutor
    from neural.cluster import clip_encoding_on

    ts = small_teaching_set
    texts = [c.text for i in ts.image_ids for c in ts.captions_of(i)][:300]
    monkeypatch.setattr(neural.cluster, "TEXT_BLOCK", 70)
    bb = cuda_tiny_backbone
    bb.clear_text_memo()
    n0 = bb.n_text_encodes
    with BlockExecutor(workers=2, processes=False) as ex, clip_encoding_on(ex):
        on_workers = bb.encode_texts(texts, batch_size=16)
    assert bb.n_text_encodes == n0
    bb.clear_text_memo()
    here = bb.encode_texts(texts, batch_size=16)
    assert bb.n_text_encodes > n0 and all(p.is_cuda for p in bb.model.parameters())
    np.testing.assert_array_equal(on_workers.numpy(), here.numpy())


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_every_trainer_runs_under_cuda_autocast(half, cuda_tiny_backbone, small_teaching_set, monkeypatch,
                                                every_trainer_under_amp):
    """``precision="amp"`` on CUDA: bfloat16 where the GPU has it, float16 with a gradient scaler where it
    does not (forced here by hiding bfloat16)."""
    if half == "float16":
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    elif not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    mp = MixedPrecision("cuda", "amp")
    assert mp.dtype == getattr(torch, half) and (mp.scaler is not None) == (half == "float16")
    every_trainer_under_amp(cuda_tiny_backbone, small_teaching_set)
    assert all(p.is_cuda and p.dtype == torch.float32 for p in cuda_tiny_backbone.model.parameters())


def run_main_job(device: str, tmp_path: Path) -> dict:
    out = tmp_path / f"out-{device}"
    cmd = [sys.executable, "-m", "experiments.flickr8k_kcca", "--teaching-size", "120", "--systems", "BoW1",
           "--permutations", "200", "--no-progress", "--device", device, "--cache-dir", str(tmp_path / "cache"),
           "--out", str(out)]
    env = {**os.environ, "ITR_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def test_main_job_on_cuda_gives_the_cpu_figures_but_for_near_ties(tmp_path):
    cpu, gpu = run_main_job("cpu", tmp_path), run_main_job("cuda", tmp_path)
    assert gpu["provenance"]["backbone"]["device"].startswith("cuda")
    assert cpu["provenance"]["backbone"]["device"] == "cpu"
    assert set(gpu["systems"]) == set(cpu["systems"])
    for task in ("annotation", "search"):                              # the classical stage never uses the GPU
        assert gpu["systems"]["BoW1"][task] == cpu["systems"]["BoW1"][task]
    neural = [s for s, v in cpu["systems"].items() if v["family"] == "neural"]
    assert neural
    for name in neural:
        for task in ("annotation", "search"):
            c, g = cpu["systems"][name][task], gpu["systems"][name][task]
            two_queries = 2 * 100.0 / c["n_queries"]                 # two queries' worth, in percent
            for metric in ("R@1", "R@5", "R@10"):
                assert abs(g[metric] - c[metric]) <= two_queries, (name, task, metric, c[metric], g[metric])
