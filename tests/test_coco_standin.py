"""benchmarks/coco_standin.py: the generated COCO-size stand-in in Karpathy's layout, read back by
corpora.karpathy as COCO is, with the teaching world's own captions on their own images."""
from __future__ import annotations

import numpy as np


def test_split_sizes_are_cocos_at_its_size_and_proportional_below(benchmark_module):
    mod = benchmark_module("coco_standin")
    assert mod.split_sizes(mod.COCO_IMAGES) == {"train": 82_783, "restval": 30_504, "val": 5_000, "test": 5_000}
    small = mod.split_sizes(1000)
    assert sum(small.values()) == 1000 and small["val"] == small["test"] == 40 and small["restval"] == 247


def test_standin_loads_as_a_karpathy_corpus_and_resumes(benchmark_module, tmp_path):
    from corpora.karpathy import load_karpathy
    from corpora.teaching import make_teaching_set

    mod = benchmark_module("coco_standin")
    out = tmp_path / "coco"
    first = mod.build(out, n_images=200, seed=3, show_progress=False)
    assert first["written"] == 200 and first["splits"] == mod.split_sizes(200)
    corpus = load_karpathy(out / "dataset_coco.json", out)
    sizes = mod.split_sizes(200)
    assert len(corpus.split("train")) == sizes["train"] + sizes["restval"]     # restval trains, as in COCO
    assert len(corpus.split("dev")) == sizes["val"] and len(corpus.split("test")) == sizes["test"]
    # the captions are the teaching world's own, on their own image (PNG: the same pixels)
    ts = make_teaching_set(n_images=200, n_train=sizes["train"] + sizes["restval"], n_dev=sizes["val"], seed=3)
    test_id, src = corpus.split("test")[0], ts.split("test")[0]
    assert [c.text for c in corpus.captions_of(test_id)] == [c.text for c in ts.captions_of(src)]
    assert np.array_equal(corpus.load_image(test_id), ts.load_image(src))
    assert test_id.startswith("COCO_val2014_") and corpus.split("train")[0].startswith("COCO_train2014_")
    # an interrupted build resumes: existing images are kept
    (out / "val2014" / test_id).unlink()
    again = mod.build(out, n_images=200, seed=3, show_progress=False)
    assert again["written"] == 1
