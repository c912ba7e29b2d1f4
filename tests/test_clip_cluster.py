"""CLIP features on a Dask cluster (neural/cluster.py).  Corpus images: the workers' features are the
in-process ones bit for bit, in the requested order, each chunk written into the same cache entry the job
would write; a job on CUDA stops on a worker without a GPU.  Texts: a call with more than one block of
texts is encoded by the workers in whole batches, the in-process features bit for bit; a small call stays
in the job."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from corpora.cache import DiskCache
from corpora.parallel import BlockExecutor
import neural.cluster
from neural.cluster import active_executor, clip_encoding_on, encode_block, text_block_rows, worker_copy

distributed = pytest.importorskip("distributed")


def test_corpus_images_on_a_cluster_are_the_in_process_features(random_tiny_backbone, small_teaching_set, tmp_path):
    ts = small_teaching_set
    ids = list(ts.image_ids[:70])[::-1]
    bb = dataclasses.replace(random_tiny_backbone, show_progress=False)
    bb.clear_image_memo()
    with BlockExecutor(workers=2, processes=False) as ex:
        with clip_encoding_on(ex):
            assert active_executor() is ex
            on_cluster = bb.encode_corpus_images(ts, ids, cache=DiskCache(tmp_path / "dask"), batch_size=8, chunk=16)
        assert active_executor() is None and not ex._shared      # the backbone's copy left the cluster
    assert bb.n_image_encodes == 0                                 # encoded by the workers, not here
    bb.clear_image_memo()
    here = bb.encode_corpus_images(ts, ids, cache=DiskCache(tmp_path / "here"), batch_size=8, chunk=16)
    assert bb.n_image_encodes == 70
    np.testing.assert_array_equal(on_cluster, here)
    # one entry per chunk of 16, under the in-process keys: a run in this process reads them back
    assert len(list((tmp_path / "dask" / "neural_image_features").glob("*.npz"))) == 5
    bb.clear_image_memo()
    again = bb.encode_corpus_images(ts, ids, cache=DiskCache(tmp_path / "dask"), batch_size=8, chunk=16)
    assert bb.n_image_encodes == 70 and np.array_equal(again, here)


def test_an_in_process_executor_encodes_here(random_tiny_backbone, small_teaching_set):
    with clip_encoding_on(BlockExecutor()):
        assert active_executor() is None


def test_the_worker_copy_leaves_the_memo_and_a_cuda_job_needs_a_worker_gpu(random_tiny_backbone, small_teaching_set):
    ts = small_teaching_set
    bb = dataclasses.replace(random_tiny_backbone, show_progress=False)
    bb.encode_corpus_images(ts, list(ts.image_ids[:3]))
    copy = worker_copy(bb)
    assert copy.device.type == "cpu" and "_image_memo" not in copy.__dict__ and not copy.show_progress
    ids = list(ts.image_ids[:11])
    out = encode_block({"backbone": copy, "corpus": ts, "batch_size": 8, "device": "cpu"}, ids, None)
    here = bb.encode_images_from(lambda k: ts.load_image(ids[k]), len(ids), batch_size=8)   # the same batches
    np.testing.assert_array_equal(out["features"], here.numpy())
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the missing-GPU message is for CPU-only workers")
    with pytest.raises(RuntimeError, match="sees no GPU"):
        encode_block({"backbone": copy, "corpus": ts, "batch_size": 8, "device": "cuda"}, ts.image_ids[:3], None)


def test_texts_on_a_cluster_are_the_in_process_features(random_tiny_backbone, small_teaching_set, monkeypatch):
    ts = small_teaching_set
    texts = [c.text for i in ts.image_ids for c in ts.captions_of(i)][:300]
    texts = texts + texts[:40]                                   # repeats: encoded once, served twice
    monkeypatch.setattr(neural.cluster, "TEXT_BLOCK", 70)
    assert text_block_rows(16) == 64                             # whole batches per block
    bb = dataclasses.replace(random_tiny_backbone, show_progress=False)
    bb.clear_text_memo()
    n0 = bb.n_text_encodes
    with BlockExecutor(workers=2, processes=False) as ex:
        with clip_encoding_on(ex):
            on_cluster = bb.encode_texts(texts, batch_size=16)
            assert bb.n_text_encodes == n0                       # the workers encoded them
            small = bb.encode_texts(["a photo of a dog on grass", "two red squares"], batch_size=16)
            assert bb.n_text_encodes == n0 + 2                   # at most one block: encoded here
        assert not ex._shared                                    # the backbone's copy left the cluster
    distinct = len(set(texts[:300]))
    assert distinct > 4 * 64                                     # five blocks, the last one short
    bb.clear_text_memo()
    here = bb.encode_texts(texts, batch_size=16)
    assert bb.n_text_encodes == n0 + 2 + distinct
    np.testing.assert_array_equal(on_cluster.numpy(), here.numpy())
    np.testing.assert_array_equal(on_cluster[300:].numpy(), on_cluster[:40].numpy())
    bb.clear_text_memo()
    np.testing.assert_array_equal(small.numpy(), bb.encode_texts(["a photo of a dog on grass", "two red squares"],
                                                                 batch_size=16).numpy())
