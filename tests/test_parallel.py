"""The block executor (corpora/parallel.py): Dask vs in-process give identical numbers, in block order,
and a worker killed mid-run costs only its blocks.  Small inputs: the whole file runs in well under a
minute on two cores."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
cloudpickle = pytest.importorskip("cloudpickle")

from corpora.cache import DiskCache  # noqa: E402
from corpora.parallel import BlockExecutor, ExecutorError, Shared, blocks_of, context_parts  # noqa: E402
from kernels.image.kernel import ImageKernel  # noqa: E402

# the block functions below travel to spawned worker processes by value (this test module is not
# importable there)
cloudpickle.register_pickle_by_value(sys.modules[__name__])

N_BLOCKS = 6


def slow_square(context, block, cache):
    """A block that logs each computation; block 2 kills its worker process the first time it runs."""
    import time

    (i,) = block
    marker = Path(context["dir"]) / "killed"
    if i == 2 and not marker.exists():
        time.sleep(0.5)               # let the other worker finish (and cache) a few blocks first
        marker.write_text("x")
        os._exit(1)                   # the worker process dies mid-run, as on a lost machine
    time.sleep(0.1)
    with open(Path(context["dir"]) / "computed.log", "a") as fh:
        fh.write(f"{i}\n")
    return {"x": np.arange(5, dtype=np.float64) * i + context["offset"]}


def scaled(context, block, cache):
    (i,) = block
    return {"x": context["rows"][i] * context["scale"]}


def test_shared_context_is_scattered_once_and_sent_again_when_lost(tmp_path):
    """A Shared context lives on the workers (scattered to each, not kept by the scheduler, which on a
    local cluster is this process); maps reuse it, and when every copy is gone it is sent again once."""

    rows = np.arange(12.0).reshape(4, 3)
    ctx = Shared({"rows": rows, "scale": 2.0})
    blocks = [(i,) for i in range(4)]
    with BlockExecutor(workers=2, processes=False) as ex:
        first = ex.map_blocks(scaled, blocks, context=ctx, show_progress=False)
        held = ex._shared[id(ctx)][1]
        assert held.status == "finished" and held.type is dict        # data on the workers, not a task
        ex.map_blocks(scaled, blocks, context=ctx, show_progress=False)
        assert ex._shared[id(ctx)][1] is held                           # sent once for both maps
        ex.client().cancel(held)                                        # every copy lost
        again = ex.map_blocks(scaled, blocks, context=ctx, show_progress=False)
        assert ex._shared[id(ctx)][1] is not held
        ex.forget(ctx)
        assert id(ctx) not in ex._shared
    for a, b, i in zip(first, again, range(4)):
        np.testing.assert_array_equal(a["x"], rows[i] * 2.0)
        np.testing.assert_array_equal(b["x"], rows[i] * 2.0)
    # with a rebuild function this process lets go of the value once the workers hold it
    rebuilt = []
    ctx = Shared({"rows": rows, "scale": 3.0}, rebuild=lambda: rebuilt.append(1) or {"rows": rows, "scale": 3.0})
    with BlockExecutor(workers=2, processes=False) as ex:
        ex.map_blocks(scaled, blocks, context=ctx, show_progress=False)
        assert ctx.value is None and not rebuilt
        ex.client().cancel(ex._shared[id(ctx)][1])
        out = ex.map_blocks(scaled, blocks, context=ctx, show_progress=False)
    assert rebuilt == [1] and all(np.array_equal(o["x"], rows[i] * 3.0) for i, o in enumerate(out))
    assert np.array_equal(BlockExecutor().map_blocks(scaled, blocks, context=ctx)[1]["x"], rows[1] * 3.0)



def shifted(context, block, cache):
    (i,) = block
    return {"x": context["table"]["rows"][i] * context["table"]["scale"] + context["shift"]}


def test_a_dict_context_sends_its_shared_values_once_and_the_rest_per_call():
    """A dict context may hold Shared values beside plain ones: the block function gets the dict with each
    value unwrapped; the Shared one goes to the workers once for every call given it (and again once if
    every copy is lost), the plain ones with each call."""
    rows = np.arange(12.0).reshape(4, 3)
    table = Shared({"rows": rows, "scale": 2.0})
    blocks = [(i,) for i in range(4)]
    assert context_parts({"table": table, "shift": 1.0}) == ({"shift": 1.0}, {"table": table})
    assert context_parts({"shift": 1.0}) == ({"shift": 1.0}, {}) and context_parts(table) == (table, {})
    here = [BlockExecutor().map_blocks(shifted, blocks, context={"table": table, "shift": s}) for s in (1.0, 5.0)]
    with BlockExecutor(workers=2, processes=False) as ex:
        first = ex.map_blocks(shifted, blocks, context={"table": table, "shift": 1.0}, show_progress=False)
        held = ex._shared[id(table)][1]
        second = ex.map_blocks(shifted, blocks, context={"table": table, "shift": 5.0}, show_progress=False)
        assert ex.n_shared == 1 and ex._shared[id(table)][1] is held   # sent once for both calls
        ex.client().cancel(held)                                        # every copy lost
        third = ex.map_blocks(shifted, blocks, context={"table": table, "shift": 5.0}, show_progress=False)
        assert ex._shared[id(table)][1] is not held
        ex.forget(table)
        assert ex.n_shared == 0
    for i in range(4):
        for out, s in ((first, 1.0), (second, 5.0), (third, 5.0)):
            np.testing.assert_array_equal(out[i]["x"], rows[i] * 2.0 + s)
        np.testing.assert_array_equal(here[0][i]["x"], first[i]["x"])
        np.testing.assert_array_equal(here[1][i]["x"], second[i]["x"])


def test_shared_context_keeps_a_copy_on_every_worker(monkeypatch):
    """The copies of a scattered Shared context stay on every worker after its maps: Dask's Active Memory
    Manager (ReduceReplicas, on by default) would drop all but one within its interval, and every later
    block would then run on that one worker."""
    import time

    import dask

    rows = np.arange(12.0).reshape(4, 3)
    ctx = Shared({"rows": rows, "scale": 2.0})
    with dask.config.set({"distributed.scheduler.active-memory-manager.interval": "100ms"}):
        with BlockExecutor(workers=2, processes=False) as ex:
            ex.map_blocks(scaled, [(i,) for i in range(4)], context=ctx, show_progress=False)
            held = ex._shared[id(ctx)][1]
            assert not ex.client().amm.running()
            time.sleep(1.0)                                 # ten intervals of the manager
            assert len(ex.client().who_has([held])[held.key]) == 2
            used = ex.client().run(lambda dask_worker: len(dask_worker.data))   # each holds its copy
            assert len(used) == 2 and all(n >= 1 for n in used.values())


def test_workers_that_do_not_start_are_one_error_line(monkeypatch):
    from distributed import Client

    def never(self, n_workers, timeout=None):
        raise TimeoutError(f"Only 0/{n_workers} workers arrived after {timeout}")

    monkeypatch.setattr(Client, "wait_for_workers", never)
    ex = BlockExecutor(workers=2, processes=False)
    with pytest.raises(ExecutorError, match=r"--workers 2: the workers did not start within \d+ s"):
        ex.client()
    assert ex._client is None and ex._cluster is None          # nothing left running


def threads_seen(context, block, cache):
    from kernels.threads import default_threads

    return {"n": np.array([default_threads()])}


def test_cluster_blocks_use_one_thread_each(monkeypatch):
    """A cluster runs one block per worker thread, so the compiled kernels inside a block (soft TRI)
    start one thread, not one per core; in-process blocks, and this thread afterwards, use the machine's."""
    monkeypatch.setenv("ITR_NUM_THREADS", "3")
    with BlockExecutor(workers=2, processes=False) as ex:
        got = ex.map_blocks(threads_seen, [(i,) for i in range(4)], show_progress=False)
    assert [int(g["n"][0]) for g in got] == [1, 1, 1, 1]
    here = BlockExecutor().map_blocks(threads_seen, [(0,), (1,)], show_progress=False)
    assert [int(g["n"][0]) for g in here] == [3, 3]
    from kernels.threads import default_threads
    assert default_threads() == 3


def blas_threads(context, block, cache):
    from threadpoolctl import threadpool_info

    return {"n": np.array([i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"])}


def test_blocks_hold_blas_to_one_thread_with_one_controller_per_process():
    """Each block runs with BLAS on one thread (then restored), through a threadpoolctl controller made
    once per process, not once per block (about 2 ms each)."""
    from threadpoolctl import threadpool_info

    from corpora import parallel

    before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
    got = BlockExecutor().map_blocks(blas_threads, [(0,), (1,), (2,)], show_progress=False)
    assert all(len(g["n"]) == len(before) and set(g["n"].tolist()) <= {1} for g in got)
    controller = parallel._CONTROLLER[0]
    BlockExecutor().map_blocks(blas_threads, [(0,)], show_progress=False)
    assert parallel._CONTROLLER[0] is controller
    assert [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"] == before


def test_blocks_of_is_fixed_by_size_only():
    assert blocks_of(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert blocks_of(0, 4) == []
    with pytest.raises(ValueError):
        blocks_of(5, 0)


def test_options_cannot_be_combined():
    with pytest.raises(ExecutorError, match="one of the two"):
        BlockExecutor(workers=2, scheduler="tcp://127.0.0.1:1")
    with pytest.raises(ExecutorError, match="positive"):
        BlockExecutor(workers=0)
    assert BlockExecutor().mode == "in-process" and not BlockExecutor().distributed
    assert BlockExecutor(workers=2).mode == "local cluster"
    assert BlockExecutor(scheduler="tcp://x:1").mode == "scheduler"


def test_unreachable_scheduler_is_one_error_line():
    ex = BlockExecutor(scheduler="tcp://127.0.0.1:9")   # discard port: nothing listens
    ex_timeout = 2
    import corpora.parallel as par
    old, par.CONNECT_TIMEOUT_S = par.CONNECT_TIMEOUT_S, ex_timeout
    try:
        with pytest.raises(ExecutorError, match=r"--scheduler tcp://127.0.0.1:9: cannot reach"):
            ex.map_blocks(slow_square, [(0,)], context={"dir": "/nonexistent", "offset": 0})
    finally:
        par.CONNECT_TIMEOUT_S = old


def test_killed_worker_costs_only_its_blocks(tmp_path):
    cache = DiskCache(tmp_path / "cache")
    blocks = [(i,) for i in range(N_BLOCKS)]
    keys = [{"test": "square", "offset": 1, "block": i} for i in range(N_BLOCKS)]
    ctx = {"dir": str(tmp_path), "offset": 1.0}
    with BlockExecutor(workers=2) as ex:          # worker processes, so one can really die
        got = ex.map_blocks(slow_square, blocks, context=ctx, cache=cache, namespace="squares", keys=keys,
                            show_progress=False)
    assert (tmp_path / "killed").exists()         # block 2 did kill its worker
    want = [np.arange(5, dtype=np.float64) * i + 1.0 for i in range(N_BLOCKS)]
    for g, w in zip(got, want):                   # in block order, whatever finished first
        np.testing.assert_array_equal(g["x"], w)
    computed = sorted(int(x) for x in (tmp_path / "computed.log").read_text().split())
    assert computed == list(range(N_BLOCKS))       # each block computed once: blocks the dead worker had
    #                                                 finished were read back from the cache, not redone
    # every block is in the cache: an in-process re-run computes nothing
    again = BlockExecutor().map_blocks(slow_square, blocks, context=ctx, cache=cache, namespace="squares",
                                       keys=keys, show_progress=False)
    assert sorted(int(x) for x in (tmp_path / "computed.log").read_text().split()) == computed
    for g, w in zip(again, want):
        np.testing.assert_array_equal(g["x"], w)


@pytest.fixture(scope="module")
def tiny_corpus():
    from corpora.teaching import make_teaching_set

    return make_teaching_set(n_images=40, n_train=20, n_dev=10, seed=3)


def _kernel(cache, executor=None):
    return ImageKernel(kind="pyramid", power=2, n_words={"color": 16, "texture": 16, "sift": 16}, max_side=96,
                       codebook_images=20, cache=cache, show_progress=False, n_jobs=1, executor=executor)


def test_dask_image_kernel_identical_to_in_process(tiny_corpus, tmp_path, monkeypatch):
    import kernels.image.blocks as kmod

    monkeypatch.setattr(kmod, "WORDS_BLOCK_IMAGES", 7)     # several blocks on a small corpus
    monkeypatch.setattr(kmod, "GRAM_BLOCK_ROWS", 6)
    train, test = tiny_corpus.split("train"), tiny_corpus.split("test")
    ref = _kernel(DiskCache(tmp_path / "in-process")).fit(tiny_corpus, train)
    K_ref, Q_ref = ref.gram(train), ref.gram(test, train)
    H_ref = ref.histograms(test)

    cache = DiskCache(tmp_path / "dask")
    import kernels.image.kernel as kernel_mod

    contexts = []
    real_words = kernel_mod.words_on_cluster
    monkeypatch.setattr(kernel_mod, "words_on_cluster", lambda ex, ctx, *a, **k: contexts.append(ctx) or
                        real_words(ex, ctx, *a, **k))
    with BlockExecutor(workers=2, processes=False) as ex:
        ik = _kernel(cache, ex).fit(tiny_corpus, train)
        K, Q = ik.gram(train), ik.gram(test, train)
        H = ik.histograms(test)
        # the words' context (the corpus among it) goes to the workers once per fit, not once per call
        assert len(contexts) == 2 and contexts[0] is contexts[1] and isinstance(contexts[0], Shared)
        assert id(contexts[0]) in ex._shared
        ik.fit(tiny_corpus, train)                   # a refit lets the cluster drop the old one
        assert id(contexts[0]) not in ex._shared
    assert ik.codebook_digests() == ref.codebook_digests()
    np.testing.assert_array_equal(K, K_ref)
    np.testing.assert_array_equal(Q, Q_ref)
    for f in H_ref:
        np.testing.assert_array_equal(H[f], H_ref[f])
    # one cache entry per image's words and per Gram row block, written by the workers
    assert len(list((tmp_path / "dask").rglob("*.npz"))) > len(tiny_corpus.image_ids)
    assert any(p.parent.name == "image_gram_rows" for p in (tmp_path / "dask").rglob("*.npz"))


def test_in_process_executor_is_todays_path(tiny_corpus, tmp_path):
    ik = _kernel(DiskCache(tmp_path / "c"), BlockExecutor())
    assert ik.executor is None                     # in-process: the threaded path, unchanged


def test_blocks_on_a_worker_share_one_cache_that_sweeps_once(tmp_path, monkeypatch):
    """A worker process keeps one DiskCache per folder: the sweep of stale temporaries (a listing of the
    whole namespace folder) runs on the first block's write, not on every block's; it retries failed writes."""
    from corpora import parallel
    from corpora.cache import DiskCache

    sweeps = []
    real = DiskCache.sweep_temporaries
    monkeypatch.setattr(DiskCache, "sweep_temporaries",
                        lambda self, namespace=None: sweeps.append(namespace) or real(self, namespace))
    spec = (str(tmp_path / "c"), True)
    for k in range(5):
        out = parallel._run_block(lambda ctx, block, cache: {"x": np.arange(block)}, None, k + 1, spec, "blocks",
                                  {"block": k})
        assert np.array_equal(out["x"], np.arange(k + 1))
    assert sweeps == ["blocks"]
    assert parallel._worker_cache(*spec) is parallel._worker_cache(*spec)
    # it outlives runs: a failed write stops its writes for a while, not for good
    assert parallel._worker_cache(*spec).retry_writes_after == parallel.WORKER_WRITE_RETRY_S > 0
