"""Shared pytest fixtures.

Shared data (the real Flickr8k text bundle, 14 JPEGs, NLTK resources) is found through one environment
variable, ``ITR_SHARED`` (default ``../shared`` next to the repository).  Tests that need it skip with a
clear reason when it is absent; CI (``.ci/run``) refuses to run without it.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from corpora.paths import shared_dir, shared_flickr8k_dir, shared_nltk_dir
from neural.names import DEVICE_ENV

# Never let a test reach the network for NLTK resources: point NLTK at the shared copy.
if shared_nltk_dir().is_dir():
    os.environ.setdefault("NLTK_DATA", str(shared_nltk_dir()))

# The suite's expectations are CPU-exact (bit-identical resumes, cached numbers, seeded training), so
# every ``--device auto`` / ``device="auto"`` in it, this process's and its subprocesses' and Dask
# workers', resolves to the CPU even where torch sees a GPU (neural.backbone.resolve_device).  What
# depends on the device is asked for by name, with its tolerance, in tests/test_cuda.py.
os.environ[DEVICE_ENV] = "cpu"


@pytest.fixture(scope="session")
def shared_path() -> Path:
    p = shared_dir()
    if not p.is_dir():
        pytest.skip(f"shared data folder not found at {p} (set ITR_SHARED to its location)")
    return p


@pytest.fixture(scope="session")
def flickr8k_dir() -> Path:
    p = shared_flickr8k_dir()
    if not (p / "Flickr8k_text" / "Flickr8k.token.txt").is_file():
        pytest.skip(f"real Flickr8k text bundle not found under {p} (set ITR_SHARED)")
    return p


@pytest.fixture(scope="session")
def nltk_data_dir() -> Path:
    p = shared_nltk_dir()
    if not p.is_dir():
        pytest.skip(f"shared NLTK data not found at {p} (set ITR_SHARED)")
    from corpora.paths import ensure_nltk_data_path

    ensure_nltk_data_path()
    return p


@pytest.fixture(scope="session")
def small_teaching_set():
    """A small teaching set (120 images: 60 train / 30 dev / 30 test), seed 0, shared by the session."""
    from corpora.teaching import make_teaching_set

    return make_teaching_set(n_images=120, n_train=60, n_dev=30, seed=0)


@pytest.fixture()
def tmp_cache(tmp_path):
    from corpora.cache import DiskCache

    return DiskCache(tmp_path / "cache")


@pytest.fixture()
def one_torch_thread():
    """Tiny models: one torch thread is faster on a shared 2-core machine (no spin-waiting)."""
    import torch

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


@pytest.fixture(scope="module")
def random_tiny_backbone():
    """The tiny CLIP architecture with seeded random weights (no training), as a Backbone."""
    import torch

    from neural.architectures import create_architecture
    from neural.backbone import backbone_from_model

    torch.manual_seed(0)
    m, p, t = create_architecture("itr-tiny-clip")
    return backbone_from_model(m, p, t, name="tiny-random", arch="itr-tiny-clip", device="cpu",
                               show_progress=False)


@pytest.fixture(scope="session")
def benchmark_module():
    """``benchmark_module("quality_bar")``: a script of ``benchmarks/`` imported as a module (the folder is
    not a package; each script is loaded once per session)."""
    import importlib.util

    folder = Path(__file__).resolve().parent.parent / "benchmarks"
    loaded: dict = {}

    def load(name: str):
        if name not in loaded:
            spec = importlib.util.spec_from_file_location(f"benchmark_{name}", folder / f"{name}.py")
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            loaded[name] = mod
        return loaded[name]

    return load


@pytest.fixture(scope="session")
def write_score_inputs():
    """``write(folder, n, caption, size)``: ``n`` seeded random RGB images ``folder/imgs/im<k>.png`` of
    ``size`` (height, width) and ``folder/cands.json`` = ``{"im<k>": caption.format(k=k)}``, the inputs
    of ``python -m neural.score``; returns ``(images folder, candidates file)``."""
    import json

    import numpy as np
    from PIL import Image

    def write(folder, n: int = 3, caption: str = "a caption {k}", size: tuple[int, int] = (60, 80)):
        imgs = folder / "imgs"
        imgs.mkdir()
        rng = np.random.default_rng(0)
        for k in range(n):
            Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8)).save(imgs / f"im{k}.png")
        cands = folder / "cands.json"
        cands.write_text(json.dumps({f"im{k}": caption.format(k=k) for k in range(n)}))
        return imgs, cands

    return write


@pytest.fixture(scope="session")
def every_trainer_under_amp():
    """``train(backbone, corpus)``: SPECS, BRIDGE, L-CLIPScore and PAC-S (on random positive tuples), two
    steps each with ``precision="amp"``, asserting that every logged loss is finite.  Which autocast runs
    is the caller's: CUDA's for a backbone there, or a patched ``MixedPrecision`` on the CPU."""
    import math

    import numpy as np

    from neural.bridge import BRIDGE
    from neural.lclip import train_lclip_on_corpus
    from neural.pacs import PositiveTuples, finetune_pacs
    from neural.recipes import Recipe
    from neural.specs import train_specs

    def tuples(n: int, seed: int = 0) -> PositiveTuples:
        rng = np.random.default_rng(seed)
        imgs = [rng.integers(0, 255, (40, 40, 3), dtype=np.uint8) for _ in range(2 * n)]
        return PositiveTuples(imgs[:n], [f"caption {k}" for k in range(n)], imgs[n:],
                              [f"other caption {k}" for k in range(n)])

    def train(backbone, corpus) -> None:
        amp = dict(lr=1e-4, weight_decay=0.0, precision="amp", schedule="cosine", warmup_steps=1)
        log = []
        train_specs(backbone, corpus, show_progress=False, log=log,
                    config=Recipe("s", "SPECS", batch_size=4, steps=2, max_images=12, **amp))
        assert len(log) == 2 and all(math.isfinite(e["loss"]) for e in log)
        br = BRIDGE(backbone, Recipe("b", "BRIDGE", batch_size=4, steps=2, max_images=12, **amp))
        assert np.isfinite(br.fit(corpus, show_progress=False).log).all()
        log = []
        train_lclip_on_corpus(backbone, corpus, show_progress=False, log=log,
                              config=Recipe("l", "L-CLIPScore", batch_size=4, steps=2, stage2_steps=1,
                                            max_images=8, max_texts=16, **amp))
        assert len(log) == 3 and all(math.isfinite(e["loss"]) for e in log)
        out = finetune_pacs(backbone, tuples(6), tuples(4, 1), show_progress=False,
                            config=Recipe("p", "PAC-S", batch_size=3, steps=2, eval_every=1, patience=4, **amp))
        assert all(math.isfinite(h["val_loss"]) for h in out.training["history"])

    return train
