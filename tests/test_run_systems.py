"""Classical systems side by side (kcca/runner.py), the GIL-free LAPACK eigendecomposition (kcca/lapack.py),
the kernel store under threads, OpenCV's thread count and the GIL switch interval (issue "Scale", item 1)."""
from __future__ import annotations

import sys
import threading
import time

import cv2
import numpy as np
import pytest
import scipy.linalg as sla
from threadpoolctl import threadpool_info

from kcca.kernel_store import KernelStore
from kcca.lapack import eigh
from kcca.runner import run_systems, systems_in_parallel
from kernels.image.descriptors import one_opencv_thread
from kernels.threads import SWITCH_INTERVAL_S, ThreadLender, lending_threads, short_switch_interval, spare_map

NAMES = ["NN5_F1^idf", "BoW1", "BoW5", "BoW5^Histo", "TRI5", "TRI5^Histo"]
GRID = {"ns": (2, 5, 10, 20), "kappas": (0.1, 1.0, 10.0), "fixed_power": 2, "fixed_diag": 1.0,
        "kcca_kwargs": {"dtype": "float32", "jitter": "auto"}}


def _run(corpus, n_jobs: int, cache) -> list:
    return list(run_systems(NAMES, corpus, store=KernelStore(), n_jobs=n_jobs, cache=cache, **GRID))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_every_system_comes_back_in_order_with_the_same_numbers_for_any_n_jobs(small_teaching_set, tmp_path):
    from corpora.cache import DiskCache

    # separate caches: each run computes everything itself (a shared cache would hand the second its numbers)
    one = _run(small_teaching_set, 1, DiskCache(tmp_path / "one"))
    three = _run(small_teaching_set, 3, DiskCache(tmp_path / "three"))
    assert [r.name for r in one] == [r.name for r in three] == NAMES   # none lost, none reordered
    for a, b in zip(one, three):
        for split in ("test_matrices", "dev_matrices"):
            ma, mb = getattr(a, split), getattr(b, split)
            assert np.array_equal(ma.annotation, mb.annotation) and np.array_equal(ma.search, mb.search), a.name
        if a.selection is not None:
            ca, cb = ({k: v for k, v in r.config["selection"].items() if k != "timings"} for r in (a, b))
            assert ca == cb, a.name


def test_blas_is_held_to_one_thread_while_systems_run(small_teaching_set, monkeypatch):
    import kcca.runner as runner

    seen = []

    def fake_run_system(name, corpus, **kwargs):
        seen.append([i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"])
        return name

    monkeypatch.setattr(runner, "run_system", fake_run_system)
    assert list(run_systems(["BoW1", "BoW5", "TRI5"], small_teaching_set, n_jobs=2)) == ["BoW1", "BoW5", "TRI5"]
    assert seen and all(counts and set(counts) == {1} for counts in seen)


def test_systems_run_with_a_short_switch_interval_and_it_is_restored(small_teaching_set, monkeypatch):
    import kcca.runner as runner

    before = sys.getswitchinterval()
    assert before > SWITCH_INTERVAL_S   # CPython's default, 5 ms
    seen = []

    def fake_run_system(name, corpus, **kwargs):
        seen.append(sys.getswitchinterval())
        return name

    monkeypatch.setattr(runner, "run_system", fake_run_system)
    for n_jobs in (1, 2):
        assert list(run_systems(["BoW1", "BoW5", "TRI5"], small_teaching_set, n_jobs=n_jobs)) == ["BoW1", "BoW5", "TRI5"]
        assert sys.getswitchinterval() == before
    assert seen == [pytest.approx(SWITCH_INTERVAL_S, abs=2e-6)] * 6   # kept in whole microseconds


@pytest.mark.parametrize("held, read, value", [
    (one_opencv_thread, cv2.getNumThreads, 1),
    (short_switch_interval, sys.getswitchinterval, pytest.approx(SWITCH_INTERVAL_S, abs=2e-6)),  # whole µs
], ids=["opencv-threads", "switch-interval"])
def test_process_settings_nest_across_threads_and_restore(held, read, value):
    before = read()
    inside = []
    gate = threading.Barrier(2)

    def worker():
        with held():
            gate.wait()
            inside.append(read())
            gate.wait()

    with held():
        t = threading.Thread(target=worker)
        t.start()
        gate.wait()
        inside.append(read())
        gate.wait()
        t.join()
        assert read() == value   # the worker left, this caller is still inside
    assert inside == [value, value] and read() == before


def test_short_switch_interval_keeps_a_shorter_one():
    before = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_INTERVAL_S / 5)
    shorter = sys.getswitchinterval()
    try:
        with short_switch_interval():
            assert sys.getswitchinterval() == shorter   # never made longer
        assert sys.getswitchinterval() == shorter
    finally:
        sys.setswitchinterval(before)


def test_a_thread_lender_lends_only_threads_no_task_needs():
    lender = ThreadLender(threads=3, tasks=4)
    assert lender.borrow(2) == 0                  # four tasks unfinished on three threads: none idle
    lender.task_done()
    lender.task_done()                            # two left: one thread idle
    assert lender.borrow(2) == 1 and lender.borrow(1) == 0
    lender.task_done()
    assert lender.borrow(5) == 1                  # one task left: two idle, one of them already lent
    lender.give_back(2)
    assert lender.borrow(5) == 2


def test_spare_map_keeps_the_order_and_uses_lent_threads_only():
    def who(x):
        time.sleep(0.05)
        return x * x, threading.current_thread().name

    alone = spare_map(who, range(4))              # no team: this thread only
    assert [r for r, _ in alone] == [0, 1, 4, 9] and {t for _, t in alone} == {threading.current_thread().name}
    with lending_threads(threads=3, tasks=1):     # one task running: two threads idle
        lent = spare_map(who, range(6))
        assert [r for r, _ in lent] == [0, 1, 4, 9, 16, 25] and len({t for _, t in lent}) == 3
    with lending_threads(threads=2, tasks=2):     # every thread busy
        assert {t for _, t in spare_map(who, range(3))} == {threading.current_thread().name}


def test_a_second_team_lends_nothing_while_the_first_is_inside():
    """One team lends at a time, process-wide: a team entered on another thread meanwhile gets a lender
    with no thread to lend, the first keeps its own, and a team entered afterwards lends again."""
    inside, done, seen = threading.Event(), threading.Event(), {}

    def second():
        inside.wait()
        with lending_threads(threads=4, tasks=1) as other:
            seen["borrowed"] = other.borrow(3)
        done.set()

    t = threading.Thread(target=second)
    t.start()
    with lending_threads(threads=3, tasks=1) as first:
        inside.set()
        done.wait(10)
        assert first.borrow(2) == 2
    t.join()
    assert seen["borrowed"] == 0
    with lending_threads(threads=3, tasks=1) as later:
        assert later.borrow(2) == 2


def test_the_last_system_borrows_the_thread_an_ended_system_left(small_teaching_set, monkeypatch):
    """With two threads, the second system runs on alone once the first has ended: its splittable work
    (one KCCA solve per κ, kcca.selection) then also runs on the first system's thread."""
    import kcca.runner as runner

    threads = {}

    def where(_):
        time.sleep(0.05)
        return threading.current_thread().name

    def fake_run_system(name, corpus, **kwargs):
        if name == "b":
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:    # until "a" has ended and its thread is lent
                names = set(spare_map(where, range(2)))
                if len(names) == 2:
                    break
                time.sleep(0.02)
            threads[name] = names
        else:
            threads[name] = set(spare_map(where, range(2)))
        return name

    monkeypatch.setattr(runner, "run_system", fake_run_system)
    assert list(run_systems(["a", "b"], small_teaching_set, n_jobs=2)) == ["a", "b"]
    assert len(threads["b"]) == 2
    assert list(run_systems(["a", "b"], small_teaching_set, n_jobs=1)) == ["a", "b"]
    assert len(threads["a"]) == len(threads["b"]) == 1   # one thread: nothing to lend


def test_an_error_in_one_system_is_raised_at_its_turn(small_teaching_set, monkeypatch):
    import kcca.runner as runner

    def fake_run_system(name, corpus, **kwargs):
        if name == "bad":
            raise ValueError("bad system")
        return name

    monkeypatch.setattr(runner, "run_system", fake_run_system)
    got = []
    with pytest.raises(ValueError, match="bad system"):
        for r in run_systems(["a", "b", "bad", "c", "d"], small_teaching_set, n_jobs=2):
            got.append(r)
    assert got == ["a", "b"]


def test_a_free_thread_starts_the_next_system_before_the_head_of_the_line_ends(small_teaching_set, monkeypatch):
    """Two threads, "a" slow and "b" quick: the thread "b" leaves takes "c" while "a" still runs (before,
    it idled until "a" was done); the runs still come back in names order."""
    import threading

    import kcca.runner as runner

    c_started = threading.Event()

    def fake_run_system(name, corpus, **kwargs):
        if name == "a" and not c_started.wait(timeout=20):
            raise AssertionError("system c waited for system a to end")
        if name == "c":
            c_started.set()
        return name

    monkeypatch.setattr(runner, "run_system", fake_run_system)
    assert list(run_systems(["a", "b", "c", "d", "e"], small_teaching_set, n_jobs=2)) == ["a", "b", "c", "d", "e"]


def test_systems_in_parallel_follows_threads_and_is_one_on_the_lowrank_path(monkeypatch):
    monkeypatch.setenv("ITR_NUM_THREADS", "3")
    assert systems_in_parallel(None) == 3 and systems_in_parallel(2) == 2 and systems_in_parallel(0) == 1
    assert systems_in_parallel(None, solver="lowrank") == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", [1, 3, 17, 200])
def test_lapack_eigh_is_scipys_evd_bit_for_bit(n, dtype):
    rng = np.random.default_rng(n)
    a = rng.standard_normal((n, n)).astype(dtype)
    a = a + a.T
    w_ref, v_ref = sla.eigh(a, lower=True, driver="evd", check_finite=False)
    w, v = eigh(a)
    assert w.dtype == v.dtype == dtype and np.array_equal(w, w_ref) and np.array_equal(v, v_ref)
    # overwrite_a on a Fortran array works in place and gives the same numbers
    f = np.array(a, order="F", copy=True)
    w2, v2 = eigh(f, overwrite_a=True)
    assert np.array_equal(w2, w_ref) and np.array_equal(v2, v_ref) and np.shares_memory(v2, f)
    # only the lower triangle is read
    junk = a.copy()
    junk[np.triu_indices(n, 1)] = 1e3
    assert np.array_equal(eigh(junk)[0], w_ref)


def test_lapack_eigh_refuses_non_square_and_takes_other_dtypes_through_scipy():
    with pytest.raises(ValueError, match="square"):
        eigh(np.zeros((2, 3)))
    w, _ = eigh(np.diag([3, 1, 2]).astype(np.int64))
    assert np.allclose(w, [1, 2, 3])


def test_kernel_store_fits_a_shared_text_kernel_once_under_threads(small_teaching_set, monkeypatch):
    from corpora.protocol import train_items
    from kernels.text import TextKernel

    fits = []
    real_fit = TextKernel.fit

    def slow_fit(self, corpus, ids, **kwargs):
        fits.append(self.name)
        threading.Event().wait(0.2)   # keep the first fit running while the others ask
        return real_fit(self, corpus, ids, **kwargs)

    monkeypatch.setattr(TextKernel, "fit", slow_fit)
    store = KernelStore()
    ids = train_items(small_teaching_set).image_ids
    entries = []
    threads = [threading.Thread(target=lambda: entries.append(store.text("BoW5", small_teaching_set, ids)))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fits == ["BoW5"] and len({id(e) for e in entries}) == 1


def test_a_lone_nn_run_lets_its_training_histograms_go(small_teaching_set, tmp_path):
    """run_system on its own store: nothing later reads the training histograms the NN baseline's pool rows
    kept, so they are released; on a caller's store they stay for that store's later systems."""
    from corpora.cache import DiskCache
    from kcca.systems import run_system

    cache = DiskCache(tmp_path / "c")   # the second run reads the first one's visual words
    store = KernelStore()
    shared = run_system("NN5_F1^idf", small_teaching_set, store=store, fixed_power=2, cache=cache)
    assert store.image_entry(shared.config["image_kind"]).kernel.holds_rows
    fresh: list = []
    real = KernelStore.__init__

    def record(self, *a, **k):
        real(self, *a, **k)
        fresh.append(self)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(KernelStore, "__init__", record)
        lone = run_system("NN5_F1^idf", small_teaching_set, fixed_power=2, cache=cache)
    (own,) = fresh
    assert not own.image_entry(shared.config["image_kind"]).kernel.holds_rows
    np.testing.assert_array_equal(lone.test_matrices.annotation, shared.test_matrices.annotation)


def test_a_decomposition_does_not_hold_up_rows_of_the_same_kernel(small_teaching_set, monkeypatch):
    """An image view's eigendecomposition runs under the entry's views lock, not its kernel lock: another
    system's row block of the same image kernel is computed meanwhile (before, it waited for the solve)."""
    import kcca.kernel_store as kernel_store
    from corpora.protocol import train_items

    store = KernelStore()
    ids = train_items(small_teaching_set).image_ids
    store.image("pyramid", small_teaching_set, ids, seed=0)
    solving, release = threading.Event(), threading.Event()
    real = kernel_store.decompose

    def slow_decompose(K, **kwargs):
        solving.set()
        assert release.wait(30), "the row block never came through"
        return real(K, **kwargs)

    monkeypatch.setattr(kernel_store, "decompose", slow_decompose)
    view = threading.Thread(target=store.image_view, args=("pyramid", 2), kwargs={"solver": "exact"})
    view.start()
    assert solving.wait(30)
    block = store.image_row_block("pyramid", list(ids[:3]), 2)   # would deadlock under the kernel lock
    release.set()
    view.join()
    assert block.shape == (3, len(ids)) and store.has_view("image", "pyramid", 2, solver="exact")


def test_the_fit_computes_the_pools_visual_words_with_the_training_images(small_teaching_set, monkeypatch):
    """run_system asks the store for its image kernel with the dev and test pools' images: their visual
    words come from the fit's parallel pass, and the nearest-neighbour baseline's pool row blocks extract
    nothing more."""
    from kcca.systems import run_system
    from kernels.image import ImageKernel

    passes = []
    real = ImageKernel._ensure_words

    def record(self, ids):
        before = self.n_extracted_
        real(self, ids)
        passes.append(self.n_extracted_ - before)

    monkeypatch.setattr(ImageKernel, "_ensure_words", record)
    store = KernelStore()
    run = run_system("NN5_F1^idf", small_teaching_set, store=store, fixed_power=2)
    kernel = store.image_entry(run.config["image_kind"]).kernel
    assert passes[0] > 0 and not any(passes[1:]), passes    # one extracting pass: the fit's
    pool_images = [i for s in ("dev", "test") for i in small_teaching_set.split(s)]
    extracted = kernel.n_extracted_
    kernel.histograms(pool_images)
    assert kernel.n_extracted_ == extracted and not any(passes[1:])


def test_image_rows_of_one_kernel_side_by_side_and_each_computed_once():
    """ImageKernelEntry.rows computes a pool's feature Grams outside the entry lock: other rows of the same
    kernel go on meanwhile, and a second thread asking for the same rows waits for the first one's
    (one computation, the same arrays)."""
    from kcca.kernel_store import ImageKernelEntry

    calls, gate, started = [], threading.Event(), threading.Event()

    class Double:   # a kernel whose dev rows block until the test lets them go
        def feature_grams(self, rows, cols=None, **kw):
            calls.append(tuple(rows))
            if rows[0] == "d0":
                started.set()
                assert gate.wait(30), "the test rows never came through"
            return {"f": np.ones((len(rows), 2), dtype=np.float32)}

    entry = ImageKernelEntry(kernel=Double(), train_ids=("t0", "t1"))
    out = {}
    first = threading.Thread(target=lambda: out.setdefault("a", entry.rows("dev", ["d0", "d1"], 2)))
    second = threading.Thread(target=lambda: out.setdefault("b", entry.rows("dev", ["d0", "d1"], 3)))
    first.start()
    assert started.wait(30)
    second.start()
    test_rows = entry.rows("test", ["e0"], 2)    # not held up by the dev rows being computed
    gate.set()
    first.join()
    second.join()
    assert test_rows.shape == (1, 2) and calls.count(("d0", "d1")) == 1
    assert entry.feature_grams[next(k for k in entry.feature_grams if k.split == "dev")]["f"].shape == (2, 2)
    assert out["a"].shape == out["b"].shape == (2, 2) and not entry.pending
