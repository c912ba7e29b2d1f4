"""TagRank's and soft TRI's training Gram and query rows in blocks (kernels/text/blocks.py): on a Dask
cluster they are the one-process numbers bit for bit, each block is cached, and a block's rows do not
depend on the rows computed with it.  Small inputs (a 120-image teaching set, small blocks)."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

import kernels.text.blocks as tblocks
import kernels.text.tagrank as tagrank_mod
from corpora.cache import DiskCache
from corpora.parallel import BlockExecutor
from kernels.text import native
from kernels.text.items import symmetrise_inplace
from kernels.text.kernel import TextKernel

distributed = pytest.importorskip("distributed")

KINDS = {"TagRank": {"kind": "TagRank"}, "soft-TRI": {"kind": "TRI", "similarity": "A"}}
PIVOTS = [5, 3, 60, 7, 0]


@pytest.fixture(scope="module")
def corpus():
    from corpora.teaching import make_teaching_set

    return make_teaching_set(n_images=120, n_train=80, n_dev=20, seed=11)


@pytest.fixture
def small_blocks(monkeypatch):
    """Several blocks of every kind on the small corpus (400 training captions, 80 items)."""
    monkeypatch.setattr(tagrank_mod, "BLOCK", 48)
    monkeypatch.setattr(tblocks, "GRAM_BLOCK_CAPTIONS", 96)
    monkeypatch.setattr(tblocks, "GRAM_BLOCK_ITEMS", 13)
    monkeypatch.setattr(tblocks, "QUERY_BLOCK_CAPTIONS", 48)


def _queries(corpus):
    return [c for i in corpus.split("test") for c in corpus.captions_of(i)]


def _needs_native(kw):
    if kw.get("similarity") and native.load_softtri() is None:
        pytest.skip("no C compiler here: soft TRI's Gram rows go to a cluster with the compiled kernel only")


@pytest.mark.parametrize("label", list(KINDS))
def test_gram_and_query_rows_on_dask_identical(corpus, tmp_path, small_blocks, label):
    kw = KINDS[label]
    _needs_native(kw)
    train, queries = corpus.split("train"), _queries(corpus)
    ref = TextKernel(show_progress=False, cache=DiskCache(tmp_path / "one"), **kw).fit(corpus, train)
    K_ref, Q_ref = ref.gram_train(), ref.gram_queries(queries)
    P_ref = ref.gram_queries(queries[:70], items=PIVOTS)
    with BlockExecutor(workers=2, processes=False) as ex:
        tk = TextKernel(show_progress=False, cache=DiskCache(tmp_path / "dask"), **kw).fit(corpus, train, executor=ex)
        assert tk.executor is ex and tk._rows_on_cluster()
        K, Q = tk.gram_train(), tk.gram_queries(queries)
        P = tk.gram_queries(queries[:70], items=PIVOTS)
        assert not ex._shared                         # the kernel's copy left the cluster after each call
        assert pickle.loads(pickle.dumps(tk)).executor is None    # the connection never travels
    np.testing.assert_array_equal(K, K_ref)
    np.testing.assert_array_equal(Q, Q_ref)
    np.testing.assert_array_equal(P, P_ref)
    n_gram = len(tblocks.gram_spans(tk))
    assert n_gram > 3
    assert len(list((tmp_path / "dask" / "text_gram_rows").glob("*.npz"))) == n_gram
    # query blocks: every test caption, then 70 of them against the pivots, in blocks of 48
    assert len(queries) > 96
    n_query = -(-len(queries) // 48) + 2
    assert len(list((tmp_path / "dask" / "text_query_rows").glob("*.npz"))) == n_query


def test_in_process_kernels_compute_no_blocks(corpus, tmp_path):
    tk = TextKernel(kind="TagRank", show_progress=False, cache=DiskCache(tmp_path / "c"))
    tk.fit(corpus, corpus.split("train"), executor=BlockExecutor())
    assert tk.executor is None and not tk._rows_on_cluster()
    tk.gram_train()
    assert not (tmp_path / "c" / "text_gram_rows").exists()


@pytest.mark.parametrize("label", list(KINDS))
def test_a_blocks_rows_do_not_depend_on_the_other_rows(corpus, small_blocks, label):
    """Without Dask: every block of rows, computed alone and added in order, gives the one-process Gram
    bit for bit; the query rows of any block of captions are the whole set's rows."""
    kw = KINDS[label]
    _needs_native(kw)
    tk = TextKernel(show_progress=False, **kw).fit(corpus, corpus.split("train"))
    if label == "TagRank":
        whole = tk._fitted_tagrank().gram(tk.docs, tk.item_of, tk.n_items)
    else:
        whole = native.soft_gram_native(tk.weighted_word_kernel(), tk.docs, tk._train_scale(), tk.item_of,
                                        tk.n_items, tk.max_len, None)
    parts = {}
    for lo, hi in reversed(tblocks.gram_spans(tk)):          # computed in any order, added in block order
        parts[lo, hi] = tk.gram_rows(lo, hi)
        if label == "TagRank":
            assert len(parts[lo, hi]) == -(-(hi - lo) // tagrank_mod.BLOCK)
    K = np.zeros((tk.n_items, tk.n_items))
    for lo, hi in tblocks.gram_spans(tk):
        tk.add_gram_rows(K, lo, hi, parts[lo, hi])
    np.testing.assert_array_equal(symmetrise_inplace(K), whole)
    qdocs = tk.encode_queries(_queries(corpus))
    qscale = tk._query_scales(qdocs) if tk.sim_parts else None
    rows = tk.query_rows(qdocs, qscale, None)
    np.testing.assert_array_equal(tk.query_rows(qdocs[48:96], None if qscale is None else qscale[48:96], None),
                                  rows[48:96])


def test_tagrank_gram_rows_must_start_on_a_block(corpus):
    tk = TextKernel(kind="TagRank", show_progress=False).fit(corpus, corpus.split("train"))
    with pytest.raises(ValueError, match="multiples of 256"):
        tk.gram_rows(100, 356)
    with pytest.raises(ValueError, match="multiples of 256"):
        tk.gram_rows(0, 300)
