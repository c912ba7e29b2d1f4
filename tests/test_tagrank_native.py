"""TagRank's compiled common-word sums (kernels/text/_tagrank.c): the numpy loop's sums bit for bit, for any
block of rows and any first column; the whole TagRank Gram, query rows, pivot blocks and self-kernels
the same with and without the compiled kernel; outputs of the wrong shape refused before any write."""
from __future__ import annotations

import numpy as np
import pytest

import kernels.text.tagrank_native as tn
from corpora.protocol import train_items
from kernels.text import TextKernel
from kernels.text.tagrank import TagRank, column_ranges, common_sums_numpy

needs_compiled = pytest.mark.skipif(tn.load_tagrank() is None,
                                    reason="no C compiler (or ITR_NO_NATIVE set): the compiled TagRank kernel "
                                           "is not built, TagRank uses its numpy loop")


def _random_vecs(rng, n, vocab, max_len=9):
    """Captions as TagRank vectors: distinct word ids ascending, r values in [0, 1) (some 0), a in (0, 1]."""
    vecs = []
    for _ in range(n):
        k = int(rng.integers(0, max_len))
        ids = np.sort(rng.choice(vocab, size=k, replace=False)).astype(np.int64)
        r = np.where(rng.random(k) < 0.2, 0.0, rng.random(k))
        vecs.append((ids, r, 1.0 / np.log2(1.0 + rng.integers(1, 12, size=k))))
    return vecs


@needs_compiled
@pytest.mark.parametrize("s, e, c0", [(0, 40, 0), (5, 23, 0), (0, 40, 17), (12, 13, 60), (7, 7, 0)])
def test_compiled_sums_are_the_numpy_loops(s, e, c0):
    rng = np.random.default_rng(3)
    rows = TagRank._postings(_random_vecs(rng, 40, 55))       # words 45..54 in rows only; some captions empty
    cols = TagRank._postings(_random_vecs(rng, 70, 45))
    lo, hi = column_ranges(rows, cols)
    assert (hi == lo).any() and (hi > lo).any()
    want_r, want_a = np.zeros((e - s, 70 - c0)), np.zeros((e - s, 70 - c0))
    common_sums_numpy(rows, cols, lo, hi, s, e, c0, want_r, want_a)
    got_r, got_a = np.full_like(want_r, 0.0), np.zeros_like(want_a)
    assert tn.common_sums(rows, cols, lo, hi, s, e, c0, got_r, got_a)
    np.testing.assert_array_equal(got_r, want_r)
    np.testing.assert_array_equal(got_a, want_a)
    if e - s >= 18:
        assert np.count_nonzero(want_r) > (e - s)                 # the case is not trivially empty


@needs_compiled
def test_the_compiled_sums_add_into_the_output_and_refuse_a_wrong_shape():
    rng = np.random.default_rng(0)
    rows = TagRank._postings(_random_vecs(rng, 10, 12))
    lo, hi = column_ranges(rows, rows)
    start = rng.random((10, 10))
    want_r, want_a = start.copy(), start.copy()
    common_sums_numpy(rows, rows, lo, hi, 0, 10, 0, want_r, want_a)
    got_r, got_a = start.copy(), start.copy()
    assert tn.common_sums(rows, rows, lo, hi, 0, 10, 0, got_r, got_a)
    np.testing.assert_array_equal(got_r, want_r)
    np.testing.assert_array_equal(got_a, want_a)
    for bad in (np.zeros((10, 9)), np.zeros((11, 10)), np.zeros((10, 10), np.float32), np.zeros((10, 10)).T[:, :]):
        if bad.shape == (10, 10) and bad.dtype == np.float64 and bad.flags.c_contiguous:
            continue
        with pytest.raises((ValueError, TypeError)):
            tn.common_sums(rows, rows, lo, hi, 0, 10, 0, bad, np.zeros((10, 10)))
    with pytest.raises(ValueError):                               # rows beyond the postings' captions
        tn.common_sums(rows, rows, lo, hi, 5, 15, 0, np.zeros((10, 10)), np.zeros((10, 10)))
    with pytest.raises(ValueError, match="column ranges"):        # a range past the column postings
        tn.common_sums(rows, rows, lo, hi + len(rows.caps), 0, 10, 0, np.zeros((10, 10)), np.zeros((10, 10)))


@needs_compiled
def test_tagrank_is_the_same_with_and_without_the_compiled_kernel(small_teaching_set, monkeypatch):
    ts = small_teaching_set
    ids = list(train_items(ts).image_ids)[:120]

    def everything():
        tk = TextKernel("TagRank", 5, show_progress=False).fit(ts, ids)
        tr = tk._fitted_tagrank()
        caps = np.flatnonzero(tk.item_of == 3)
        block = tr.item_block(caps, 20, 300, tk.item_of[20:300] - tk.item_of[20], int(tk.item_of[299] - tk.item_of[20] + 1))
        return (tk.gram_train(), tr.cross([tk.docs[i] for i in range(0, 90, 3)], None, tk.item_of, tk.n_items),
                block, tr.item_self(tk.item_of, tk.n_items))

    calls = []
    real = tn.common_sums
    monkeypatch.setattr("kernels.text.tagrank.common_sums", lambda *a: calls.append(1) or real(*a))
    compiled = everything()
    assert calls                                                   # the compiled kernel did the sums
    monkeypatch.setattr("kernels.text.tagrank.common_sums", lambda *a: False)    # as without a compiler
    fallback = everything()
    for x, y in zip(compiled, fallback):
        np.testing.assert_array_equal(x, y)
