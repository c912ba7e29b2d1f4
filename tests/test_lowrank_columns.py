"""The low-rank KCCA path reads only the training kernels' diagonals and the pivot columns incomplete
Cholesky asks for (kcca.kernel_store column sources): the factor equals the one of the materialised
Gram, no ``N × N`` training Gram is ever built, and Dask workers give the in-process numbers.  Small
teaching corpus; the file runs in well under a minute on two cores."""
from __future__ import annotations

import json

import numpy as np
import pytest

from corpora.cache import DiskCache
from corpora.parallel import BlockExecutor, Shared
from kcca.kernel_store import KernelStore
from kcca.lowrank import KernelSource, incomplete_cholesky
from kcca.solver import decompose

IMAGE_KW = {"n_words": {"color": 16, "texture": 16, "sift": 16}, "max_side": 96, "codebook_images": 20,
            "n_jobs": 1}
MAX_RANK = 12


@pytest.fixture(scope="module")
def corpus():
    from corpora.teaching import make_teaching_set

    return make_teaching_set(n_images=50, n_train=30, n_dev=10, seed=5)


def _image_store(corpus, cache, executor=None):
    store = KernelStore()
    kw = dict(IMAGE_KW, **({"executor": executor} if executor is not None else {}))
    store.image("pyramid", corpus, corpus.split("train"), cache=cache, image_kwargs=kw)
    return store


def _record_gram_shapes(monkeypatch, kernel) -> list:
    """Wrap ``kernel.feature_grams`` so that every Gram it returns is recorded by shape."""
    shapes: list = []
    inner = kernel.feature_grams

    def recording(rows, cols=None):
        out = inner(rows, cols)
        shapes.extend(g.shape for g in out.values())
        return out

    monkeypatch.setattr(kernel, "feature_grams", recording)
    return shapes


def test_image_lowrank_reads_columns_only_and_matches_the_gram(corpus, tmp_path, monkeypatch):
    n = len(corpus.split("train"))
    store = _image_store(corpus, DiskCache(tmp_path / "c"))
    entry = store.image_entry("pyramid")
    shapes = _record_gram_shapes(monkeypatch, entry.kernel)
    released: list = []
    inner_release = entry.kernel.release_rows
    monkeypatch.setattr(entry.kernel, "release_rows", lambda: released.append(len(shapes)) or inner_release())
    view = store.image_view("pyramid", 2, solver="lowrank", max_rank=MAX_RANK)
    # the training histograms kept for the columns are freed after the last column
    assert released and released[-1] == len(shapes)
    # (b) only N × 1 columns were built, one per pivot; never the N × N training Gram
    assert shapes and all(s == (n, 1) for s in shapes)
    assert len(shapes) == 3 * view.pivots.size          # three features per pivot column
    assert "train" not in entry.feature_grams and not entry.combined
    # (a) the factor of the materialised Gram: the same pivots, the same factor and view
    monkeypatch.undo()
    K = entry.kernel.gram(list(entry.train_ids))
    G_ref, piv_ref = incomplete_cholesky(KernelSource.from_gram(K), max_rank=MAX_RANK)
    G, piv = incomplete_cholesky(entry.column_source(2), max_rank=MAX_RANK)
    np.testing.assert_array_equal(piv, piv_ref)
    np.testing.assert_allclose(G, G_ref, rtol=1e-6, atol=1e-7)
    ref = decompose(K, solver="lowrank", max_rank=MAX_RANK)
    np.testing.assert_allclose(view.lam, ref.lam, rtol=1e-6)
    np.testing.assert_allclose(np.abs(view.train_features()), np.abs(ref.train_features()), rtol=1e-5, atol=1e-7)
    # the diagonal without the Gram equals the Gram's diagonal
    np.testing.assert_array_equal(entry.column_source(2).diag(), np.diagonal(K).astype(np.float64))


def test_image_lowrank_columns_on_dask_identical(corpus, tmp_path, monkeypatch):
    import kernels.image.blocks as blocks

    monkeypatch.setattr(blocks, "GRAM_BLOCK_ROWS", 6)
    monkeypatch.setattr(blocks, "SKINNY_BLOCK_ENTRIES", 8)     # row blocks of 8: four per column
    ref = _image_store(corpus, DiskCache(tmp_path / "in-process")).image_view(
        "pyramid", 2, solver="lowrank", max_rank=MAX_RANK)
    contexts: list = []
    real_map = BlockExecutor.map_blocks

    def recording(self, fn, blocks_, **kw):
        contexts.append((fn.__name__, kw.get("context")))
        return real_map(self, fn, blocks_, **kw)

    monkeypatch.setattr(BlockExecutor, "map_blocks", recording)
    with BlockExecutor(workers=2, processes=False) as ex:
        store = _image_store(corpus, DiskCache(tmp_path / "dask"), ex)
        view = store.image_view("pyramid", 2, solver="lowrank", max_rank=MAX_RANK)
    # every pivot column went to the workers against training histograms sent once per feature
    columns = [c for name, c in contexts if name == "gram_columns_block"]
    assert len(columns) == 3 * view.pivots.size
    assert all(isinstance(c, Shared) for c in columns) and len({id(c) for c in columns}) == 3
    np.testing.assert_array_equal(view.pivots, ref.pivots)
    np.testing.assert_array_equal(view.U, ref.U)
    np.testing.assert_array_equal(view.lam, ref.lam)
    assert any(p.parent.name == "image_gram_rows" for p in (tmp_path / "dask").rglob("*.npz"))
    # the columns are cached as their row blocks only, not a second time whole
    stages = [json.loads(str(np.load(p)["__key__"]))["stage"] for p in (tmp_path / "dask" / "image_gram").glob("*.npz")]
    assert "gram-columns" not in stages
    # a second run reads every column from the blocks and computes none
    with BlockExecutor(workers=2, processes=False) as ex:
        cache = DiskCache(tmp_path / "dask")
        again = _image_store(corpus, cache, ex).image_view("pyramid", 2, solver="lowrank", max_rank=MAX_RANK)
    np.testing.assert_array_equal(again.U, ref.U)
    assert cache.misses == 0 and cache.hits > 0


@pytest.mark.parametrize("name", ["BoW5", "TRI5", "TagRank"])
def test_text_lowrank_reads_columns_only_and_matches_the_gram(corpus, tmp_path, monkeypatch, name):
    store = KernelStore()
    entry = store.text(name, corpus, corpus.split("train"), cache=DiskCache(tmp_path / "c"))
    tk = entry.kernel

    def no_gram():
        raise AssertionError("the low-rank path built the N x N training text Gram")

    monkeypatch.setattr(tk, "gram_train", no_gram)
    view = store.text_view(name, 2.0, solver="lowrank", max_rank=MAX_RANK)
    monkeypatch.undo()
    tk.diag = 2.0
    K = tk.gram_train()
    G_ref, piv_ref = incomplete_cholesky(KernelSource.from_gram(K), max_rank=MAX_RANK)
    G, piv = incomplete_cholesky(entry.column_source(2.0), max_rank=MAX_RANK)
    np.testing.assert_array_equal(piv, piv_ref)
    np.testing.assert_allclose(G, G_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(view.pivots, piv_ref)
    cols = tk.gram_columns(list(range(K.shape[0])))
    np.testing.assert_allclose(cols, K, rtol=1e-5, atol=1e-6)


def test_exact_path_still_uses_the_gram(corpus, tmp_path):
    store = _image_store(corpus, DiskCache(tmp_path / "c"))
    entry = store.image_entry("pyramid")
    view = store.image_view("pyramid", 2, solver="exact")
    assert "train" in entry.feature_grams                  # the exact path factors the whole Gram
    K = entry.rows("train", None, 2)
    ref = decompose(K, solver="exact")
    np.testing.assert_array_equal(view.lam, ref.lam)


def test_main_job_lowrank_scores_equal_the_materialised_gram_path(corpus, monkeypatch):
    """The classical stage's solver choice forced to low rank on a small corpus: the systems' scores
    equal those of the low-rank solver fed with the materialised training Grams, and neither the image
    nor the text training Gram is built."""
    from types import SimpleNamespace

    import experiments.classical_stage as stage
    from corpora.protocol import hodosh_pool
    from kcca.kernel_store import ImageKernelEntry, TextKernelEntry
    from kcca.systems import run_system

    monkeypatch.setattr(stage, "LOWRANK_ABOVE", 10)
    monkeypatch.setattr(stage, "LOWRANK_MAX_RANK", MAX_RANK)
    extra = {"powers": (2,), "diag_factors": (1.0,), "kappas": (1.0,), "ns": (5, 10), "image_kwargs": IMAGE_KW}
    stage.solver_choice(corpus, SimpleNamespace(skip_missing_images=False), extra)
    assert extra["solver"] == "lowrank" and extra["kcca_kwargs"]["max_rank"] == MAX_RANK
    pools = {s: hodosh_pool(corpus, s, seed=0) for s in ("dev", "test")}
    built: list = []
    widths: list = []   # columns of the pool rows the systems read
    real_rows, real_gram = ImageKernelEntry.rows, TextKernelEntry.train_gram

    def rows(self, split, ids, power, columns=None):
        built.append(("image", split)) if split == "train" else None
        out = real_rows(self, split, ids, power, columns)
        widths.append(out.shape[1])
        return out

    def train_gram(self, diag):
        built.append(("text", diag))
        return real_gram(self, diag)

    monkeypatch.setattr(ImageKernelEntry, "rows", rows)
    monkeypatch.setattr(TextKernelEntry, "train_gram", train_gram)
    run = run_system("BoW5", corpus, store=KernelStore(), pools=pools, cache=None, show_progress=False, **extra)
    assert built == []                                      # only columns and diagonals were read
    assert widths and set(widths) == {MAX_RANK}             # pools' rows at the pivots only
    # the pools' rows against the pivots give the numbers of whole rows, bit for bit
    import kcca.systems as systems

    with monkeypatch.context() as m:
        m.setattr(systems, "pivot_columns", lambda view: None)
        whole = run_system("BoW5", corpus, store=KernelStore(), pools=pools, cache=None, show_progress=False,
                           **extra)
    assert len(corpus.split("train")) in widths
    for split in ("test_matrices", "dev_matrices"):
        a, b = getattr(run, split), getattr(whole, split)
        np.testing.assert_array_equal(a.annotation, b.annotation)
        np.testing.assert_array_equal(a.search, b.search)
    # the previous behaviour: the low-rank solver on the materialised training Grams
    monkeypatch.setattr(ImageKernelEntry, "column_source",
                        lambda self, p: KernelSource.from_gram(self.rows("train", None, p)))
    monkeypatch.setattr(TextKernelEntry, "column_source",
                        lambda self, d, executor=None: KernelSource.from_gram(self.train_gram(d)))
    ref = run_system("BoW5", corpus, store=KernelStore(), pools=pools, cache=None, show_progress=False, **extra)
    assert ("image", "train") in built and any(b[0] == "text" for b in built)
    for split in ("test_matrices", "dev_matrices"):
        a, b = getattr(run, split), getattr(ref, split)
        np.testing.assert_allclose(a.annotation, b.annotation, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(a.search, b.search, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["TRI5", "TagRank"])
def test_text_lowrank_columns_on_dask_identical(corpus, tmp_path, monkeypatch, name):
    import kernels.text.blocks as tblocks

    monkeypatch.setattr(tblocks, "COLUMN_BLOCK_ITEMS", 7)       # five blocks per column
    train = corpus.split("train")
    ref_store = KernelStore()
    ref_store.text(name, corpus, train, cache=DiskCache(tmp_path / "in-process"))
    ref = ref_store.text_view(name, 1.0, solver="lowrank", max_rank=MAX_RANK)
    with BlockExecutor(workers=2, processes=False) as ex:
        store = KernelStore(ex)
        store.text(name, corpus, train, cache=DiskCache(tmp_path / "dask"))
        view = store.text_view(name, 1.0, solver="lowrank", max_rank=MAX_RANK)
        assert not ex._shared                        # the kernel's copy left the cluster with the factor
    np.testing.assert_array_equal(view.pivots, ref.pivots)
    np.testing.assert_array_equal(view.U, ref.U)
    np.testing.assert_array_equal(view.lam, ref.lam)
    assert len(list((tmp_path / "dask" / "text_gram_column").glob("*.npz"))) == 5 * view.pivots.size


@pytest.mark.parametrize("kw", [{"kind": "TRI"}, {"kind": "TagRank"}, {"kind": "TRI", "similarity": "A"}],
                         ids=["TRI", "TagRank", "soft-TRI"])
def test_column_context_leaves_the_captions_and_gives_the_same_blocks(corpus, kw):
    """The copy of a text kernel sent to the workers for its columns has no captions (at COCO size 0.65 GB
    of Python objects on every worker), everything the blocks read computed before it leaves, and its
    blocks are the kernel's bit for bit."""
    import pickle

    from kernels.text.kernel import TextKernel

    tk = TextKernel(show_progress=False, **kw).fit(corpus, corpus.split("train"))
    slim = tk.column_context()
    assert all(getattr(slim, n) is None for n in TextKernel.NOT_FOR_COLUMNS) and tk.train_captions is not None
    assert slim._item_self is not None
    tk.column_block(0, 0, 7)                 # the sender's TagRank postings do not travel
    sent = pickle.loads(pickle.dumps(slim))
    assert len(pickle.dumps(slim)) < len(pickle.dumps(tk))
    assert "_spans" not in getattr(sent, "_tagrank", None).__dict__ if kw["kind"] == "TagRank" else True
    for item, lo, hi in [(0, 0, 7), (9, 7, tk.n_items), (4, 0, tk.n_items)]:
        np.testing.assert_array_equal(sent.column_block(item, lo, hi), tk.column_block(item, lo, hi))
    # the per-caption arrays travel packed and come back as views of one array, values and dtypes kept
    assert len(sent.docs) == len(tk.docs) and all(
        a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(sent.docs, tk.docs))
    assert len({id(d.base) for d in sent.docs}) == 1
    if kw["kind"] == "TagRank":
        for got, want in zip(sent._tagrank.train_vecs, tk._tagrank.train_vecs):
            assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(got, want))


def test_soft_tri_columns_equal_the_gram(corpus):
    """Soft TRI (Eqs. 17-21, here the alignment similarity): each column is the pivot's captions as
    queries against every training item, the Gram's column."""
    from kernels.text.kernel import TextKernel

    tk = TextKernel(kind="TRI", similarity="A", diag=2.0, show_progress=False).fit(corpus, corpus.split("train"))
    K = tk.gram_train()
    cols = tk.gram_columns([0, 7, 3])
    np.testing.assert_allclose(cols, K[:, [0, 7, 3]], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(tk.gram_diagonal(), np.diagonal(K), rtol=1e-6)


def test_tagrank_columns_and_self_kernels_without_the_gram(corpus):
    """TagRank (Eqs. 9-11) on the low-rank path: the items' self-kernels computed item by item equal the
    Gram's diagonal, each column (the pivot's captions against every training item, summed over the
    cross products, in blocks) equals the Gram's column, and the query rows need no Gram."""
    import kernels.text.blocks as tblocks
    from kernels.text.kernel import TextKernel

    train = corpus.split("train")
    fresh = TextKernel(kind="TagRank", captions_per_item=5, show_progress=False).fit(corpus, train)
    fresh._ensure_item_self()
    direct = fresh._item_self.copy()
    q_direct = fresh.gram_queries(corpus.captions_of(corpus.split("test")[0]))
    tk = TextKernel(kind="TagRank", captions_per_item=5, show_progress=False).fit(corpus, train)
    K = tk.gram_train()
    np.testing.assert_allclose(direct, tk._item_self, rtol=1e-12)
    old = tblocks.COLUMN_BLOCK_ITEMS
    tblocks.COLUMN_BLOCK_ITEMS = 5                       # several blocks per column
    try:
        cols = tk.gram_columns([0, 9, 4])
    finally:
        tblocks.COLUMN_BLOCK_ITEMS = old
    np.testing.assert_allclose(cols, K[:, [0, 9, 4]], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(q_direct, tk.gram_queries(corpus.captions_of(corpus.split("test")[0])), rtol=1e-6)
    tk.release_columns()
    assert "_spans" not in tk._tagrank.__dict__


def test_pivot_column_entries_name_the_rows_by_one_digest(corpus, tmp_path):
    """Each cached pivot column names its rows (every training image) by one digest, not by their ids:
    at COCO size the ids would be hashed for every column and stored in every entry."""
    store = _image_store(corpus, DiskCache(tmp_path / "c"))
    view = store.image_view("pyramid", 2, solver="lowrank", max_rank=4)
    train = list(corpus.split("train"))
    others = [i for k, i in enumerate(train) if k not in set(view.pivots.tolist())]
    entries = list((tmp_path / "c" / "image_gram").glob("*.npz"))
    assert len(entries) == 3 * view.pivots.size
    for p in entries:
        key = json.loads(str(np.load(p)["__key__"]))   # the entry's stored key (corpora.cache)
        assert key["stage"] == "gram-columns" and len(key["rows_digest"]) >= 16
        assert not any(i in json.dumps(key) for i in others[:20])


def test_packed_arrays_round_trip():
    import pickle

    from kernels.text.packing import PackedArrays

    arrays = [np.array([3, 1], np.int64), np.zeros(0, np.int64), np.array([7], np.int64)]
    back = pickle.loads(pickle.dumps(PackedArrays(arrays, np.int64))).unpack()
    assert [a.tolist() for a in back] == [[3, 1], [], [7]] and all(a.dtype == np.int64 for a in back)
    assert PackedArrays([], np.float64).unpack() == [] and len(PackedArrays([np.ones(2)], np.float64)) == 1


def test_parked_views_come_back_bit_for_bit(corpus, tmp_path):
    """KernelStore.park_views: every low-rank factor goes to disk (once) and comes back unchanged when a
    system asks for the view; exact views stay in memory."""
    store = _image_store(corpus, DiskCache(tmp_path / "c"))
    store.park_root = tmp_path / "scratch"
    store.park_root.mkdir()
    store.text("BoW5", corpus, corpus.split("train"), cache=DiskCache(tmp_path / "c"))
    vx = store.image_view("pyramid", 2, solver="lowrank", max_rank=MAX_RANK)
    vy = store.text_view("BoW5", 1.0, solver="lowrank", max_rank=MAX_RANK)
    exact = store.image_view("pyramid", 2, solver="exact")
    Ux, Uy = vx.U.copy(), vy.U.copy()
    assert store.park_views() == 2
    assert vx.U is None and vy.U is None and exact.U is not None
    files = sorted(p.name for p in store.park_root.rglob("*.npy"))
    assert len(files) == 2 and not list(store.park_root.rglob("*.part"))
    assert store.image_view("pyramid", 2, solver="lowrank", max_rank=MAX_RANK) is vx
    np.testing.assert_array_equal(vx.U, Ux)
    assert vx.U.dtype == Ux.dtype and vy.U is None            # only the view asked for is read back
    stamp = vx.parked.stat().st_mtime_ns
    assert store.park_views() == 1                            # vy is parked already
    assert vx.parked.stat().st_mtime_ns == stamp              # U never changes: not written again
    np.testing.assert_array_equal(store.text_view("BoW5", 1.0, solver="lowrank", max_rank=MAX_RANK).U, Uy)
    scratch = vx.parked.parent
    del store, vx, vy
    import gc

    gc.collect()
    assert not scratch.exists()                               # the scratch folder goes with the store


def test_main_job_parks_views_between_systems_with_the_same_numbers(corpus, tmp_path, monkeypatch):
    """On the low-rank solver the classical stage parks the decompositions after each system; the
    systems that reuse a parked view score exactly as with every view kept in memory."""
    from types import SimpleNamespace

    import experiments.classical_stage as stage
    from corpora.protocol import hodosh_pool
    from kcca.runner import run_systems

    monkeypatch.setattr(stage, "LOWRANK_ABOVE", 10)
    monkeypatch.setattr(stage, "LOWRANK_MAX_RANK", MAX_RANK)
    extra = {"powers": (2,), "diag_factors": (1.0,), "kappas": (1.0,), "ns": (5, 10), "image_kwargs": IMAGE_KW}
    stage.solver_choice(corpus, SimpleNamespace(skip_missing_images=False), extra)
    pools = {s: hodosh_pool(corpus, s, seed=0) for s in ("dev", "test")}
    names = ("BoW5", "TRI5", "BoW5")     # the second BoW5 reuses both (parked) views
    runs = {}
    for park in (False, True):
        store = KernelStore(park_root=tmp_path, park=park)   # park: factors written as they are made
        out = []
        for run in run_systems(names, corpus, store=store, pools=pools, cache=None, show_progress=False,
                               **extra):
            out.append(run.test_matrices)
            if park:
                assert store.park_views() == 2    # the two views the system just used (the others wait)
        runs[park] = out
    for a, b in zip(runs[False], runs[True], strict=True):
        np.testing.assert_array_equal(a.annotation, b.annotation)
        np.testing.assert_array_equal(a.search, b.search)
    np.testing.assert_array_equal(runs[True][0].annotation, runs[True][2].annotation)


@pytest.mark.parametrize("name", ["BoW1", "BoW5", "TRI5"])
def test_explicit_feature_columns_are_the_sparse_product_bit_for_bit(corpus, name):
    """An explicit-feature column block comes from the inverted index of the item features; each entry is
    the one the sparse product of the block's rows with the item's row gives, bit for bit (TRI5's item
    rows, sums of caption rows, are not stored sorted: the terms follow the stored order), before and
    after the kernel travels as a column context."""
    import pickle

    from kernels.text import TextKernel
    from kernels.text.items import normalise_items

    tk = TextKernel.from_name(name, show_progress=False).fit(corpus, corpus.split("train"))
    F = tk.F_items
    s = np.asarray(F.multiply(F).sum(axis=1), dtype=np.float64).ravel()
    ctx = pickle.loads(pickle.dumps(tk.column_context()))
    n = F.shape[0]
    for item in (0, 7, n - 1):
        for lo, hi in ((0, n), (0, 11), (11, n), (5, 6)):
            raw = np.asarray((F[lo:hi] @ F[[item]].T).toarray(), dtype=np.float64)
            want = normalise_items(raw, s[lo:hi], s[[item]])[:, 0].astype(np.float32)
            np.testing.assert_array_equal(tk.column_block(item, lo, hi), want)
            np.testing.assert_array_equal(ctx.column_block(item, lo, hi), want)
    tk.release_columns()                                      # the index goes, and is made again on demand
    np.testing.assert_array_equal(tk.column_block(3, 0, n), ctx.column_block(3, 0, n))


def test_decomposition_progress_bar(capsys):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 8))
    K = X @ X.T
    quiet = decompose(K, solver="lowrank", max_rank=20, label="toy kernel")
    shown = decompose(K, solver="lowrank", max_rank=20, label="toy kernel", show_progress=True)
    err = capsys.readouterr().err
    assert "incomplete Cholesky: toy kernel" in err and "pivot" in err
    np.testing.assert_array_equal(quiet.U, shown.U)
    np.testing.assert_array_equal(quiet.pivots, shown.pivots)


def test_a_parking_store_writes_each_factor_as_it_is_made(corpus, tmp_path):
    """KernelStore(park=True): a low-rank decomposition writes U to disk instead of converting it beside
    its float64 factor; read back, it is the in-memory conversion's bit for bit, in the same memory
    order, and the view can be parked and read again."""
    cache = DiskCache(tmp_path / "c")
    views = {}
    for park in (False, True):
        store = _image_store(corpus, cache)
        store.park, store.park_root = park, tmp_path
        store.text("TRI5", corpus, corpus.split("train"), cache=cache)
        vy = store.text_view("TRI5", 1.0, solver="lowrank", max_rank=MAX_RANK, dtype="float32")
        vx = store.image_view("pyramid", 2, solver="lowrank", max_rank=MAX_RANK, dtype="float32")
        views[park] = (vx, vy, store)
    for a, b in zip(views[False][:2], views[True][:2]):
        assert a.parked is None and b.parked is not None and b.parked.is_file()
        assert b.U.dtype == a.U.dtype == np.float32 and b.U.flags.f_contiguous == a.U.flags.f_contiguous
        np.testing.assert_array_equal(b.U, a.U)
        np.testing.assert_array_equal(b.lam, a.lam)
    assert views[True][2].park_views() == 2 and views[True][0].U is None


def test_a_view_still_to_be_made_fills_while_the_made_one_waits_on_disk(corpus, tmp_path, monkeypatch):
    """BoW5^Histo after BoW5 on a parking store: the histogram decomposition is made while BoW5's text
    view (made by BoW5, parked after it) is on disk, not in memory."""
    from types import SimpleNamespace

    import experiments.classical_stage as stage
    import kcca.kernel_store as ks
    from corpora.protocol import hodosh_pool
    from kcca.systems import run_system

    monkeypatch.setattr(stage, "LOWRANK_ABOVE", 10)
    monkeypatch.setattr(stage, "LOWRANK_MAX_RANK", MAX_RANK)
    extra = {"powers": (2,), "diag_factors": (1.0,), "kappas": (1.0,), "ns": (5, 10),
             "image_kwargs": IMAGE_KW}
    stage.solver_choice(corpus, SimpleNamespace(skip_missing_images=False), extra)
    pools = {s: hodosh_pool(corpus, s, seed=0) for s in ("dev", "test")}
    store = KernelStore(park_root=tmp_path, park=True)
    text_in_memory: list = []
    real = ks.decompose

    def recording(K, **kw):
        if "histogram" in (kw.get("label") or ""):
            text_in_memory.append([v.U is not None for v in store.text_entry("BoW5").views.values()])
        return real(K, **kw)

    monkeypatch.setattr(ks, "decompose", recording)
    run_system("BoW5", corpus, store=store, pools=pools, **extra)
    store.park_views()
    run_system("BoW5^Histo", corpus, store=store, pools=pools, **extra)
    assert text_in_memory == [[False]]
