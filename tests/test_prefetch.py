"""Image batches loaded and preprocessed ahead of the encoder (neural.prefetch): the batches arrive in
order and are the same whatever the number of loader threads, at most ``depth`` are made ahead, an error
surfaces at its batch, and a backbone's features do not depend on its loader threads, nor on the CPU on
torch's threads or the usable cores (each batch is encoded on one torch thread)."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from neural import prefetch
from neural.prefetch import loader_threads_for, prefetched


def _make(seen: list, lock: threading.Lock, live: list):
    def make(b: int) -> torch.Tensor:
        with lock:
            live[0] += 1
            live[1] = max(live[1], live[0])
        time.sleep(0.002 * (b % 3))          # batches finish out of order on several threads
        with lock:
            seen.append(b)
            live[0] -= 1
        return torch.full((2, 3), float(b))
    return make


@pytest.mark.parametrize("threads", [0, 1, 3])
def test_batches_come_in_order_and_at_most_depth_ahead(threads):
    seen, lock, live = [], threading.Lock(), [0, 0]
    got = []
    for b, x in enumerate(prefetched(_make(seen, lock, live), 11, threads, depth=4)):
        assert len(seen) <= b + 4 if threads else len(seen) == b + 1   # never more than depth ahead
        got.append(x)
    assert [int(x[0, 0]) for x in got] == list(range(11)) and sorted(seen) == list(range(11))
    assert live[1] <= max(1, threads)


def test_an_error_is_raised_at_its_batch_and_the_rest_is_cancelled():
    def make(b):
        if b == 2:
            raise OSError("image 2 unreadable")
        return torch.zeros(1)

    it = prefetched(make, 50, 2, depth=3)
    assert next(it) is not None and next(it) is not None
    with pytest.raises(OSError, match="image 2"):
        next(it)


def test_loader_threads_default(monkeypatch):
    """On CUDA up to MAX_LOADER_THREADS loaders beside the encoder; on the CPU one encoding thread per
    usable core."""
    monkeypatch.setattr(prefetch, "default_threads", lambda: 3)
    assert loader_threads_for(torch.device("cpu")) == 3
    monkeypatch.setattr(prefetch, "default_threads", lambda: 16)
    assert loader_threads_for(torch.device("cuda")) == prefetch.MAX_LOADER_THREADS
    monkeypatch.setattr(prefetch, "default_threads", lambda: 1)
    assert loader_threads_for(torch.device("cuda")) == 1


def test_corpus_image_features_do_not_depend_on_the_loader_threads(random_tiny_backbone, small_teaching_set):
    """70 corpus images in batches of 16 (an uneven last batch): the features with 3 loader threads equal
    those made in the caller's thread, bit for bit, and in the requested order."""
    import dataclasses

    ts = small_teaching_set
    ids = list(ts.image_ids[:70])[::-1]
    serial = dataclasses.replace(random_tiny_backbone, loader_threads=0, show_progress=False)
    ahead = dataclasses.replace(random_tiny_backbone, loader_threads=3, show_progress=False)
    a = serial.encode_images_from(lambda k: ts.load_image(ids[k]), len(ids), batch_size=16)
    b = ahead.encode_images_from(lambda k: ts.load_image(ids[k]), len(ids), batch_size=16)
    assert torch.equal(a, b) and a.shape[0] == 70
    direct = serial.encode_images([ts.load_image(i) for i in ids[:16]], batch_size=16)   # the same first batch
    assert torch.equal(direct, a[:16])
    with pytest.raises(ValueError, match="no images"):
        ahead.encode_images([])
    assert np.isfinite(a.numpy()).all()


def test_cpu_features_are_one_torch_threads_whatever_the_cores(random_tiny_backbone, small_teaching_set,
                                                               monkeypatch):
    """On the CPU every image and text batch is encoded on one torch thread, several batches side by side
    (ITR_NUM_THREADS of them): the features are the same with 1 and 3 threads and whatever torch's own
    setting, which is restored afterwards."""
    import dataclasses

    ts = small_teaching_set
    ids = list(ts.image_ids[:70])
    texts = [c.text for i in ids for c in ts.captions_of(i)][:150]
    seen: list[int] = []
    bb = dataclasses.replace(random_tiny_backbone, show_progress=False)
    assert bb.device.type == "cpu"
    real = bb._encode_image_batch

    def recording(x):
        seen.append(torch.get_num_threads())
        return real(x)

    monkeypatch.setattr(bb, "_encode_image_batch", recording)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        out = {}
        for n in ("1", "3"):
            monkeypatch.setenv("ITR_NUM_THREADS", n)
            bb.clear_text_memo()
            out[n] = (bb.encode_images_from(lambda k: ts.load_image(ids[k]), len(ids), batch_size=16),
                      bb.encode_texts(texts, batch_size=32))
        after = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    assert torch.equal(out["1"][0], out["3"][0]) and torch.equal(out["1"][1], out["3"][1])
    assert seen and set(seen) == {1} and after == 2
