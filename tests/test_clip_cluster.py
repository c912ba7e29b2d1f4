"""CLIP features on a Dask cluster (neural/cluster.py).  Corpus images: the workers' features are the
in-process ones bit for bit, in the requested order, each chunk written into the same cache entry the job
would write; a job on CUDA stops on a worker without a GPU.  Texts: a call with more than one block of
texts is encoded by the workers in whole batches, the in-process features bit for bit; a small call stays
in the job.  The backbone goes to the workers once for consecutive calls in one scope, again when its
weights change or another backbone comes."""
from __future__ import annotations

import dataclasses
from copy import deepcopy

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
        assert active_executor() is None and ex.n_shared == 0    # the backbone's copy left the cluster
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
    out = encode_block({"encoder": {"backbone": copy, "device": "cpu"}, "corpus": ts, "batch_size": 8}, ids, None)
    here = bb.encode_images_from(lambda k: ts.load_image(ids[k]), len(ids), batch_size=8)   # the same batches
    np.testing.assert_array_equal(out["features"], here.numpy())
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the missing-GPU message is for CPU-only workers")
    with pytest.raises(RuntimeError, match="sees no GPU"):
        encode_block({"encoder": {"backbone": copy, "device": "cuda"}, "corpus": ts, "batch_size": 8},
                     ts.image_ids[:3], None)


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
        assert ex.n_shared == 0                                  # the backbone's copy left the cluster
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


def test_one_scope_sends_the_backbone_once_until_its_weights_change(random_tiny_backbone, small_teaching_set,
                                                                     monkeypatch, tmp_path):
    ts = small_teaching_set
    texts = list(dict.fromkeys(c.text for i in ts.image_ids for c in ts.captions_of(i)))[:250]
    assert len(texts) == 250
    monkeypatch.setattr(neural.cluster, "TEXT_BLOCK", 70)
    sent = []                                                    # the backbones copied for the workers
    real = neural.cluster.worker_copy
    monkeypatch.setattr(neural.cluster, "worker_copy", lambda b: sent.append(b) or real(b))
    bb = dataclasses.replace(random_tiny_backbone, model=deepcopy(random_tiny_backbone.model), show_progress=False)
    other = dataclasses.replace(random_tiny_backbone, show_progress=False)
    for b in (bb, other):
        b.clear_image_memo()
        b.clear_text_memo()
    n_bb, n_other = bb.n_text_encodes, other.n_text_encodes
    with BlockExecutor(workers=2, processes=False) as ex:
        with clip_encoding_on(ex):
            bb.encode_corpus_images(ts, list(ts.image_ids[:40]), cache=DiskCache(tmp_path), batch_size=8, chunk=16)
            bb.encode_texts(texts[:100], batch_size=16)          # on the workers
            bb.encode_texts(texts[100:130], batch_size=16)       # at most one block: here
            bb.encode_texts(texts[130:], batch_size=16)          # on the workers again
            assert list(map(id, sent)) == [id(bb)] and ex.n_shared == 1   # one copy: images, both text calls
            with torch.no_grad():
                next(bb.model.parameters()).mul_(1.5)            # weights changed in place: sent again
            bb.clear_text_memo()
            changed = bb.encode_texts(texts, batch_size=16)
            other.clear_text_memo()                              # (shared with bb's first weights)
            theirs = other.encode_texts(texts, batch_size=16)    # another backbone replaces it
            assert list(map(id, sent)) == [id(bb), id(bb), id(other)] and ex.n_shared == 1   # one at a time
        assert ex.n_shared == 0                                  # the scope let the cluster drop it
    assert bb.n_text_encodes == n_bb + 30 and other.n_text_encodes == n_other
    bb.clear_text_memo()
    other.clear_text_memo()
    np.testing.assert_array_equal(changed.numpy(), bb.encode_texts(texts, batch_size=16).numpy())
    np.testing.assert_array_equal(theirs.numpy(), other.encode_texts(texts, batch_size=16).numpy())
    assert not np.array_equal(changed.numpy(), theirs.numpy())   # the workers used the changed weights


def test_a_call_outside_a_scope_sends_its_own_copy_and_drops_it(random_tiny_backbone, small_teaching_set):
    ts = small_teaching_set
    bb = dataclasses.replace(random_tiny_backbone, show_progress=False)
    tokens = bb.tokenize([c.text for c in ts.captions_of(ts.image_ids[0])] * 4)
    with BlockExecutor(workers=2, processes=False) as ex:
        feats = neural.cluster.encode_texts_on_cluster(ex, bb, tokens, batch_size=4)
        assert ex.n_shared == 0
    np.testing.assert_array_equal(feats, bb.encode_token_rows(tokens, batch_size=4).numpy())
