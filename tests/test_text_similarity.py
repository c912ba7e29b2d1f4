"""Lexical similarities (Hodosh et al. 2013, Sec. 3.5): PPMI, IBM Models 1/2, alignment, Lin, combination."""
from __future__ import annotations

import math

import numpy as np
import pytest

from kernels.text.ibm import IBMModel2
from kernels.text.similarity import combine_word_kernels, cosine_kernel, ppmi_vectors


def test_ppmi_matches_definition():
    sents = [[0, 1], [0, 1, 2], [2, 3], [0, 3, 3], [1]]
    P = ppmi_vectors(sents, 4)
    N = len(sents)
    sets = [set(s) for s in sents]
    for a in range(4):
        for b in range(4):
            pa = sum(a in s for s in sets) / N
            pb = sum(b in s for s in sets) / N
            pab = sum(a in s and b in s for s in sets) / N
            ref = max(0.0, math.log(pab / (pa * pb))) if pab > 0 and a != b else 0.0
            assert abs(P[a, b] - ref) < 1e-12


def test_cosine_kernel_threshold_and_diag():
    X = np.array([[1.0, 0, 0], [1, 0.05, 0], [0, 0, 1], [0, 0, 0]])
    K = cosine_kernel(X, 0.5)
    assert np.allclose(np.diag(K), 1) and K[0, 2] == 0 and K[0, 1] > 0.99 and K[3, 0] == 0
    assert np.allclose(K, K.T)


def test_ibm_model1_recovers_planted_permutation():
    rng = np.random.default_rng(0)
    perm = rng.permutation(8)
    src, tgt = [], []
    for _ in range(400):
        e = rng.integers(0, 8, rng.integers(2, 6)).tolist()
        f = [int(perm[w]) for w in e]
        rng.shuffle(f)
        src.append(e)
        tgt.append(f)
    m = IBMModel2(n_iter_model1=20, n_iter_model2=0).fit(src, tgt, 8, 8)
    t = m.translation()
    assert np.all(np.argmax(t, axis=1) == perm)
    assert t[np.arange(8), perm].min() > 0.9
    ll = np.array(m.log_likelihood)
    assert np.all(np.diff(ll) >= -1e-6 * np.abs(ll[:-1]))        # EM never decreases the likelihood


def test_ibm_model2_recovers_stochastic_table_and_alignment():
    rng = np.random.default_rng(1)
    V = 6
    planted = np.zeros((V, V))
    for e in range(V):                       # each source word: two translations, 0.7 / 0.3
        planted[e, e] = 0.7
        planted[e, (e + 1) % V] = 0.3
    src, tgt = [], []
    for _ in range(3000):
        e = rng.integers(0, V, 3).tolist()
        f = [int(rng.choice(V, p=planted[w])) for w in e]   # monotone alignment: f_j from e_j
        src.append(e)
        tgt.append(f)
    m = IBMModel2(n_iter_model1=10, n_iter_model2=10).fit(src, tgt, V, V)
    assert np.abs(m.translation() - planted).max() < 0.06
    a = m.a[(3, 3)]                          # rows: NULL, e_1..e_3; columns: f_1..f_3
    assert np.all(np.argmax(a, axis=0) == np.array([1, 2, 3]))
    ll = np.array(m.log_likelihood)
    assert np.all(np.diff(ll[10:]) >= -1e-6 * np.abs(ll[10:-1]))
    with pytest.raises(ValueError, match="source"):
        IBMModel2().fit([[0]], [], 1, 1)


def test_never_aligned_source_words_have_no_translation_evidence():
    """EM leaves a source word that never met a target word at its uniform start row; those rows must
    not become σ_A vectors, or every such pair of words would have κ_A = 1."""
    from kernels.text.similarity import alignment_kernel

    m = IBMModel2(n_iter_model1=5, n_iter_model2=2).fit([[0, 1], [2], [3]], [[1, 0], [], []], 4, 4)
    assert m.seen_.tolist() == [True, True, False, False]
    np.testing.assert_allclose(m.translation()[2:], 0.25)         # the uniform start, untouched
    assert not m.observed_translation()[2:].any()
    np.testing.assert_array_equal(m.observed_translation()[:2], m.translation()[:2])

    class P:                                                      # one caption per item: no pairs
        def __init__(self, toks):
            self.tokens, self.tags = toks, ["NN"] * len(toks)

    processed = [P(["dog", "cat"]), P(["dog", "ball"]), P(["cat", "ball"])] * 2
    words, K, _ = alignment_kernel(processed, [0, 1, 2, 3, 4, 5], min_count=1)
    assert words == ["ball", "cat", "dog"]
    np.testing.assert_array_equal(K, np.eye(3))                   # no evidence: no similarity


def test_combine_max_and_avg():
    a = (np.array([0, 1, 2]), np.array([[1, .2, 0], [.2, 1, .5], [0, .5, 1]]))
    b = (np.array([1, 2, 3]), np.array([[1, .9, 0], [.9, 1, .1], [0, .1, 1]]))
    idx, K = combine_word_kernels({"a": a, "b": b}, ["w0", "w1", "w2", "w3"], "max")
    assert idx.tolist() == [0, 1, 2, 3]
    assert K[1, 2] == .9 and K[0, 1] == .2 and K[2, 3] == .1 and K[0, 3] == 0
    idx, K = combine_word_kernels({"a": a, "b": b}, ["w0", "w1", "w2", "w3"], "avg")
    assert abs(K[1, 2] - 0.7) < 1e-12 and K[0, 1] == .2 and K[2, 3] == .1   # one-sided pairs keep their value


@pytest.fixture(scope="module")
def teaching_tk():
    from corpora.teaching import make_teaching_set
    from kernels.text import TextKernel

    ts = make_teaching_set(n_images=400, n_train=200, n_dev=100, seed=0)
    return TextKernel("TRI", 5, similarity="A", show_progress=False).fit(ts, ts.split("train"))


def test_alignment_ranks_generator_synonyms_first(teaching_tk):
    """kappa_A on the teaching set: each noun's nearest words are exactly its generator synonyms, and so
    are the verbs of the 'land' group (synonyms co-occur across an image's five captions)."""
    from corpora.teaching import SYNONYM_GROUPS

    wk = teaching_tk.word_kernel
    covered = {wk.words[i] for i in wk.idx}
    groups = [g for g in SYNONYM_GROUPS["noun"].values() if len(g) > 1] + [SYNONYM_GROUPS["verb"]["land"]]
    checked = 0
    for g in groups:
        members = [w for w in g if w in covered]
        for w in members:
            others = set(members) - {w}
            if not others:
                continue
            nb = wk.nearest(w, len(others), part="A")
            assert {x for x, _ in nb} == others, (w, nb, others)
            assert min(v for _, v in nb) > 0.05
            checked += 1
    assert checked >= 25


def test_lin_matches_nltk_lin_similarity(teaching_tk, nltk_data_dir):
    from collections import defaultdict

    from nltk.corpus import wordnet as wn

    from kernels.text.similarity import lin_kernel, lin_similarity, wordnet_information_content

    proc = teaching_tk.tagged
    words, K, info = lin_kernel(proc)
    assert len(words) >= 10 and np.allclose(np.diag(K), 1) and np.all(K >= 0)
    freq, total, ic_of = wordnet_information_content(proc)
    ic = {"n": defaultdict(float), "v": defaultdict(float)}
    for s, f in freq.items():
        ic["n"][s.offset()] = f
    ic["n"][0] = total
    first = [wn.synsets(w, pos="n")[0] for w in words]
    for i in range(len(words)):
        for j in range(i + 1, min(len(words), i + 6)):
            ref = first[i].lin_similarity(first[j], ic)
            got = lin_similarity(first[i], first[j], ic_of)
            assert abs(got - ref) < 1e-9, (words[i], words[j], got, ref)


def test_distributional_external_file(tmp_path):
    from kernels.text import TextKernel
    from corpora.teaching import make_teaching_set

    ext = tmp_path / "ext.txt"
    ext.write_text("\n".join(["The dog sits."] * 6 + ["A puppy is sitting."] * 6
                             + ["Boxes and blocks are squares."] * 6), encoding="utf-8")
    ts = make_teaching_set(n_images=60, n_train=30, n_dev=15, seed=1)
    tk = TextKernel("TRI", 5, similarity="D_ext", external_corpus=ext, show_progress=False).fit(ts, ts.split("train"))
    wk = tk.word_kernel
    assert wk.value("dog", "puppy") > 0.99           # same (lemmatised) context 'sit' in the external file
    assert wk.value("dog", "box") == 0.0
    assert wk.value("dog", "dog") == 1.0
    with pytest.raises(FileNotFoundError, match="no such file"):
        TextKernel("TRI", 5, similarity="D_ext", external_corpus=tmp_path / "missing.txt",
                   show_progress=False).fit(ts, ts.split("train"))


def test_fast_brown_reader_equals_nltk(nltk_data_dir):
    """D_ext's Brown reader returns exactly NLTK's tagged sentences (a spread of 50 of the 500 files)."""
    from nltk.corpus import brown

    from kernels.text.similarity import brown_tagged_sents

    files = brown.fileids()[::10]
    assert brown_tagged_sents(files) == list(brown.tagged_sents(fileids=files))


def test_id_sentences_equal_the_sorted_string_sentences():
    """D_ext's stored sentences: ids into the sorted vocabulary, dropped tokens (-1) left out, a sentence
    whose tokens were all dropped kept empty; the same as building the string sentences and sorting."""
    from kernels.text.similarity import id_sentences

    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in rng.permutation(40)] + ["Z", "a", "é"]    # first-seen order, not sorted
    sents = [rng.integers(-1, len(words), rng.integers(0, 9)).tolist() for _ in range(200)] + [[-1, -1], []]
    got = id_sentences(words, [t for s in sents for t in s], [len(s) for s in sents])
    strings = [[words[t] for t in s if t >= 0] for s in sents]
    vocab = sorted({w for s in strings for w in s})
    ix = {w: i for i, w in enumerate(vocab)}
    assert got["vocab"].tolist() == vocab and got["flat"].dtype == np.int32 and got["offsets"].dtype == np.int64
    assert got["flat"].tolist() == [ix[w] for s in strings for w in s]
    assert np.diff(got["offsets"]).tolist() == [len(s) for s in strings]
    assert got["offsets"][-2] == got["offsets"][-1] and len(got["offsets"]) == len(sents) + 1
    empty = id_sentences([], [], [])
    assert empty["vocab"].size == empty["flat"].size == 0 and empty["offsets"].tolist() == [0]


def test_flat_ppmi_and_distributional_kernels_equal_the_list_ones():
    """The id-array forms (D_ext's external corpus is stored that way) give bit-for-bit the kernels of
    the sentence-list forms, empty sentences and ids outside the vocabulary included."""
    from kernels.text.similarity import distributional_kernel, distributional_kernel_flat, ppmi_vectors_flat

    rng = np.random.default_rng(0)
    sents = [rng.integers(-1, 14, rng.integers(0, 8)).tolist() for _ in range(300)] + [[]]
    offs = np.r_[0, np.cumsum([len(s) for s in sents])]
    flat = np.array([w for s in sents for w in s], dtype=np.int64)
    rows = np.array([3, 0, 7])
    assert np.array_equal(ppmi_vectors_flat(flat, offs, 12, rows), ppmi_vectors(sents, 12, rows))
    assert np.array_equal(ppmi_vectors_flat(np.zeros(0, np.int64), [0], 4), ppmi_vectors([], 4))
    vocab = sorted(f"w{i:02d}" for i in range(14))
    words = [[vocab[w] for w in s if w >= 0] for s in sents]
    ids = np.array([w for s in sents for w in s if w >= 0], dtype=np.int64)
    offs = np.r_[0, np.cumsum([len(s) for s in words])]
    targets = ["w03", "w11", "nope", "w00"]
    ws, K = distributional_kernel(words, targets, 5, 0.01)
    ws2, K2 = distributional_kernel_flat(vocab, ids, offs, targets, 5, 0.01)
    assert ws == ws2 == ["w03", "w11", "w00"] and np.array_equal(K, K2)
