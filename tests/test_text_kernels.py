"""Text kernels (Hodosh et al. 2013, Sec. 3.4-3.5) against brute-force implementations of their equations."""
from __future__ import annotations

import itertools
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from corpora.base import Caption, Corpus
from kernels.text import TextKernel
from kernels.text import tri as T
from kernels.text.similarity import WordKernel

WORDS = ["dog", "run", "grass", "man", "ride", "bike", "red", "ball", "jump", "water", "swim", "girl"]


def _corpus(n_items=7, per_item=5, seed=0, maxlen=6):
    rng = np.random.default_rng(seed)
    caps, ids = {}, []
    for i in range(n_items):
        im = f"im{i}.jpg"
        ids.append(im)
        cs = []
        for k in range(per_item):
            n = int(rng.integers(1, maxlen + 1))
            ws = [WORDS[j] for j in rng.integers(0, len(WORDS), n)]
            if k == 0 and i == 0:
                ws = ["dog", "dog", "run", "dog"]          # repeated words
            cs.append(Caption(f"{im}#{k}", im, k, " ".join(ws), lemma=" ".join(ws)))
        caps[im] = tuple(cs)
    return Corpus("toy", tuple(ids), caps, {"train": tuple(ids)})


def _queries(seed=5):
    rng = np.random.default_rng(seed)
    qs = []
    for k in range(6):
        n = int(rng.integers(1, 6))
        ws = [WORDS[j] for j in rng.integers(0, len(WORDS), n)]
        if k == 1:
            ws = ws + ["zebra", "zebra", "unicorn"]       # unseen words (OOV), repeated
        if k == 2:
            ws = ["the", "a"]                             # only stop words -> empty caption
        qs.append(Caption(f"q.jpg#{k}", "q.jpg", k, " ".join(ws), lemma=" ".join(ws)))
    return qs


def _subseq_counts(toks, max_len):
    c = Counter()
    for k in range(1, max_len + 1):
        for idx in itertools.combinations(range(len(toks)), k):
            c[tuple(toks[i] for i in idx)] += 1
    return c


def brute_tri(s, t, lam=0.5, max_len=3, weight=lambda w: 1.0):
    """Eq. 15 / 16 literally: sum over common subsequences w of m_s,w m_t,w lam^(2l) prod weight."""
    cs, ct = _subseq_counts(s, max_len), _subseq_counts(t, max_len)
    return sum(cs[w] * ct[w] * lam ** (2 * len(w)) * math.prod(weight(x) for x in w) for w in cs if w in ct)


def brute_soft(s, t, kappa, lam=0.5, max_len=3, weight=lambda w: 1.0):
    """Eqs. 17-21 literally: every pair of equal-length subsequences (index tuples)."""
    tot = 0.0
    for k in range(1, max_len + 1):
        for I in itertools.combinations(range(len(s)), k):
            for J in itertools.combinations(range(len(t)), k):
                p = lam ** (2 * k)
                for i, j in zip(I, J):
                    p *= kappa(s[i], t[j]) * math.sqrt(weight(s[i]) * weight(t[j]))
                tot += p
    return tot


def _norm(k, a, b):
    return k / math.sqrt(a * b) if a > 0 and b > 0 else 0.0


def _item_brute(ki, caps_i, caps_j, sent):
    tot = sum(_norm(sent(s, t), sent(s, s), sent(t, t)) for s in caps_i for t in caps_j)
    return tot


def _tokens(tk, caps):
    return [list(p.tokens) for p in tk.pre.transform(caps)]


# ------------------------------------------------------------------------------------------ exact TRI
@pytest.mark.parametrize("idf", ["none", "sqrt"])
def test_tri5_matches_bruteforce(idf):
    corpus = _corpus()
    tk = TextKernel("TRI", 5, idf=idf, show_progress=False).fit(corpus, corpus.split("train"))
    K = tk.gram_train()
    items = [_tokens(tk, corpus.captions_of(i)) for i in corpus.split("train")]
    wt = (lambda w: tk.idf_values[tk.vocab.index[w]]) if idf == "sqrt" else (lambda w: 1.0)
    sent = lambda s, t: brute_tri(s, t, weight=wt)  # noqa: E731
    raw = np.array([[_item_brute(None, a, b, sent) for b in items] for a in items])
    ref = raw / np.sqrt(np.outer(np.diag(raw), np.diag(raw)))
    np.testing.assert_allclose(K, ref, rtol=1e-5, atol=1e-6)
    # queries, including unseen words (they count in the query's self-kernel only) and an empty one
    qs = _queries()
    Q = tk.gram_queries(qs)
    qt = _tokens(tk, qs)
    unseen = tk.idf_unseen
    wq = (lambda w: tk.idf_values[tk.vocab.index[w]] if w in tk.vocab else unseen) if idf == "sqrt" else (lambda w: 1.0)
    sentq = lambda s, t: brute_tri(s, t, weight=wq)  # noqa: E731
    for qi, q in enumerate(qt):
        for j, it in enumerate(items):
            val = sum(_norm(sentq(q, t), sentq(q, q), sentq(t, t)) for t in it)
            np.testing.assert_allclose(Q[qi, j], val / math.sqrt(np.diag(raw)[j]), rtol=1e-5, atol=1e-6)
    assert np.all(Q[2] == 0)


def test_tri_k1_equals_count_bow():
    corpus = _corpus(seed=3)
    tri1 = TextKernel("TRI", 1, max_len=1, show_progress=False).fit(corpus, corpus.split("train"))
    bow1 = TextKernel("BoW", 1, show_progress=False).fit(corpus, corpus.split("train"))
    np.testing.assert_allclose(tri1.gram_train(), bow1.gram_train(), rtol=1e-6, atol=1e-7)
    # unnormalised: K_TRI(k=1) = lambda_m^2 * <tf_s, tf_t>
    docs = [[0, 0, 1, 2], [0, 1, 1], [3]]
    r, c, v = T.subsequence_features(docs, 1, 0.5)
    X, _, _ = T.features_to_csr(r, c, v, 3)
    tf = np.zeros((3, 4))
    for i, d in enumerate(docs):
        for w in d:
            tf[i, w] += 1
    np.testing.assert_allclose((X @ X.T).toarray(), 0.25 * tf @ tf.T)


def test_bow_variants_match_bruteforce():
    corpus = _corpus(seed=1)
    ids = corpus.split("train")
    for name in ("BoW5", "BoW5^idf", "BoW5^sqrtidf"):
        tk = TextKernel.from_name(name, show_progress=False).fit(corpus, ids)
        K = tk.gram_train()
        docs = [sum(_tokens(tk, corpus.captions_of(i)), []) for i in ids]
        df = Counter(w for d in docs for w in set(d))
        idf = {w: max(math.log(len(docs) / (df[w] + 1)), 0.0) for w in df}
        p = {"BoW5": 0.0, "BoW5^idf": 1.0, "BoW5^sqrtidf": 0.5}[name]
        vecs = [{w: c * idf[w] ** p for w, c in Counter(d).items()} for d in docs]
        cos = lambda a, b: sum(a[w] * b.get(w, 0) for w in a) / math.sqrt(sum(x * x for x in a.values()) * sum(x * x for x in b.values()))  # noqa: E731
        ref = np.array([[cos(a, b) for b in vecs] for a in vecs])
        np.testing.assert_allclose(K, ref, rtol=1e-5, atol=1e-6)
    # BoW5 with 5 captions not merged = normalised sum of caption cosines
    tk = TextKernel("BoW", 5, show_progress=False).fit(corpus, ids)
    items = [_tokens(tk, corpus.captions_of(i)) for i in ids]
    sent = lambda s, t: sum(a * Counter(t)[w] for w, a in Counter(s).items())  # noqa: E731
    raw = np.array([[_item_brute(None, a, b, sent) for b in items] for a in items])
    np.testing.assert_allclose(tk.gram_train(), raw / np.sqrt(np.outer(np.diag(raw), np.diag(raw))), rtol=1e-5)


def test_diag_factor_and_psd():
    corpus = _corpus(seed=2)
    ids = corpus.split("train")
    K1 = TextKernel("TRI", 5, show_progress=False).fit(corpus, ids).gram_train()
    K3 = TextKernel("TRI", 5, diag=3.0, show_progress=False).fit(corpus, ids).gram_train()
    np.testing.assert_allclose(np.diag(K3), 3 * np.diag(K1))
    off = ~np.eye(len(ids), dtype=bool)
    np.testing.assert_array_equal(K3[off], K1[off])
    for name in ("BoW1", "BoW5", "TRI5", "TRI5^sqrtidf", "TagRank"):
        K = TextKernel.from_name(name, show_progress=False).fit(corpus, ids).gram_train().astype(np.float64)
        assert np.abs(K - K.T).max() < 1e-6, name
        assert np.linalg.eigvalsh(K).min() > -1e-5, name
        assert K.dtype == np.float64 or True


# ------------------------------------------------------------------------------------------ soft TRI
def test_soft_dp_block_and_pairs_match_bruteforce():
    import torch

    rng = np.random.default_rng(0)
    V = 9
    X = rng.random((V, 4))
    Kw = X @ X.T
    Kw = (Kw / np.sqrt(np.outer(np.diag(Kw), np.diag(Kw)))).astype(np.float32)
    Wt = torch.from_numpy(Kw)
    for n, m in [(1, 1), (1, 4), (3, 1), (2, 5), (4, 4), (6, 3)]:
        ta = torch.from_numpy(rng.integers(0, V, (3, n)))
        tb = torch.from_numpy(rng.integers(0, V, (5, m)))
        RT, PT = T.row_tables(Wt, ta)
        ws = T.SoftTRIWorkspace(1 << 14)
        for L in (1, 2, 3):
            Y = T.soft_tri_block(RT, PT, tb, ws, L).numpy()
            for a in range(3):
                for b in range(5):
                    ref = T.soft_tri_bruteforce(ta[a].tolist(), tb[b].tolist(), lambda u, v: float(Kw[u, v]), L)
                    assert abs(Y[b, a] - ref) <= 1e-4 * max(1.0, abs(ref)), (n, m, L)
        pairs = T.soft_tri_pairs(lambda u, v: Kw[u, v], ta[:3].numpy(), tb[:3].numpy())   # numpy, no torch
        for p in range(3):
            ref = T.soft_tri_bruteforce(ta[p].tolist(), tb[p].tolist(), lambda u, v: float(Kw[u, v]))
            assert abs(pairs[p] - ref) <= 1e-6 * max(1.0, ref)


def _planted_word_kernel(tk, seed=0):
    rng = np.random.default_rng(seed)
    idx = np.arange(len(tk.vocab) - 2)            # the last two words stay identity (OOV of the similarity)
    X = rng.random((len(idx), 3)) ** 3
    K = X @ X.T
    K = K / np.sqrt(np.outer(np.diag(K), np.diag(K)))
    K[K < 0.3] = 0.0
    np.fill_diagonal(K, 1.0)
    return WordKernel(list(tk.vocab.words), idx, K)


@pytest.mark.parametrize("idf,backend", [("none", "torch"), ("sqrt", "torch"), ("sqrt", "native")])
def test_soft_tri_items_and_queries_match_bruteforce(idf, backend):
    if backend == "native":
        from kernels.text.native import load_softtri

        if load_softtri() is None:
            pytest.skip("no C compiler: native soft-TRI backend unavailable")
    corpus = _corpus(n_items=6, seed=4)
    ids = corpus.split("train")
    tk = TextKernel("TRI", 5, idf=idf, show_progress=False, block_entries=4096, row_block=3, backend=backend)
    tk.fit(corpus, ids)
    # plant a word kernel (Eqs. 17-21 only need *some* kappa); bypasses similarity training
    tk.sim_parts = ("A",)
    tk.word_kernel = _planted_word_kernel(tk)
    kd = tk.word_kernel.dense(tk.V)
    K = tk._compute_gram()["K"]
    items = [_tokens(tk, corpus.captions_of(i)) for i in ids]
    ix = tk.vocab.index
    kap = lambda a, b: kd[ix[a], ix[b]] if (a in ix and b in ix) else float(a == b)  # noqa: E731
    wt = (lambda w: tk.idf_values[ix[w]] if w in ix else tk.idf_unseen) if idf == "sqrt" else (lambda w: 1.0)
    sent = lambda s, t: brute_soft(s, t, kap, weight=wt)  # noqa: E731
    raw = np.array([[_item_brute(None, a, b, sent) for b in items] for a in items])
    # an item whose words all have IDF 0 (in every training image) has self-kernel 0: its row is 0
    d = np.sqrt(np.diag(raw))
    inv = np.divide(1.0, d, out=np.zeros_like(d), where=d > 0)
    np.testing.assert_allclose(K, raw * np.outer(inv, inv), rtol=2e-5, atol=1e-6)
    tk._gram, tk._item_self = K, np.diag(raw)
    np.testing.assert_allclose(tk._soft_item_self(), np.diag(raw), rtol=1e-5)
    qs = _queries()
    Q = tk._compute_queries(qs)
    qt = _tokens(tk, qs)
    for qi, q in enumerate(qt):
        for j, it in enumerate(items):
            val = sum(_norm(sent(q, t), sent(q, q), sent(t, t)) for t in it) * inv[j]
            assert abs(Q[qi, j] - val) < 2e-5, (qi, j)
    assert tk.last_backend == backend


# ------------------------------------------------------------------------------------------ TagRank
def test_tagrank_matches_bruteforce():
    corpus = _corpus(n_items=5, seed=7)
    ids = corpus.split("train")
    tk = TextKernel("TagRank", 5, show_progress=False).fit(corpus, ids)
    K = tk.gram_train()
    caps = [c for i in ids for c in corpus.captions_of(i)]
    toks = _tokens(tk, caps)
    # position statistics n_ik
    nik = Counter()
    ni = Counter()
    for t in toks:
        for p, w in enumerate(t, 1):
            nik[(w, p)] += 1
            ni[w] += 1

    def vecs(t):
        pos = {}
        for p, w in enumerate(t, 1):
            pos.setdefault(w, []).append(p)
        a = {w: 1 / math.log2(1 + np.mean(ps)) for w, ps in pos.items()}
        r = {w: (1 - sum(nik[(w, k)] for k in range(1, int(np.floor(np.mean(ps))) + 1)) / ni[w]) if ni[w] else 0.0
             for w, ps in pos.items()}
        return r, a

    def chi2(x, y):
        return sum((x.get(w, 0) - y.get(w, 0)) ** 2 / (x.get(w, 0) + y.get(w, 0))
                   for w in set(x) | set(y) if x.get(w, 0) + y.get(w, 0) > 0)

    V = [vecs(t) for t in toks]
    N = len(V)
    om_r = np.mean([chi2(V[a][0], V[b][0]) for a in range(N) for b in range(N) if a != b])
    om_a = np.mean([chi2(V[a][1], V[b][1]) for a in range(N) for b in range(N) if a != b])
    kc = np.array([[0.5 * (math.exp(-chi2(V[a][0], V[b][0]) / (2 * om_r)) + math.exp(-chi2(V[a][1], V[b][1]) / (2 * om_a)))
                    for b in range(N)] for a in range(N)])
    item = tk.item_of
    raw = np.zeros((len(ids), len(ids)))
    np.add.at(raw, (item[:, None], item[None, :]), kc)
    np.testing.assert_allclose(K, raw / np.sqrt(np.outer(np.diag(raw), np.diag(raw))), rtol=1e-5, atol=1e-6)
    assert abs(tk._tagrank.omega_r - om_r) < 1e-9 and abs(tk._tagrank.omega_a - om_a) < 1e-9


def test_tagrank_vectors_of_all_captions_at_once_are_each_captions_own():
    """TagRank.vectors computes every caption's (ids, r, a) in one pass over all tokens; each caption's
    vectors are the ones it gets alone, bit for bit (repeated words, words unseen in training, empty
    captions), with Eq. 9's a = 1 / log2(1 + mean position) and r = 0 for unseen words."""
    corpus = _corpus(n_items=5, seed=7)
    tk = TextKernel("TagRank", 5, show_progress=False).fit(corpus, corpus.split("train"))
    tr = tk._fitted_tagrank()
    V = tr.V
    docs = [np.array([3, 1, 3, 0], np.int64), np.zeros(0, np.int64), np.array([V + 2, 1, V + 2], np.int64),
            *tk.docs[:7], np.zeros(0, np.int64)]
    together = tr.vectors(docs)
    assert len(together) == len(docs)
    for d, (u, r, a) in zip(docs, together):
        (u1, r1, a1), = tr.vectors([d])
        for x, y in ((u, u1), (r, r1), (a, a1)):
            np.testing.assert_array_equal(x, y)
            assert x.dtype == y.dtype
    u, r, a = together[0]
    np.testing.assert_array_equal(u, [0, 1, 3])
    np.testing.assert_allclose(a, 1 / np.log2(1 + np.array([4.0, 2.0, 2.0])))
    u, r, a = together[2]
    assert u.tolist() == [1, V + 2] and r[1] == 0.0 and a[1] == 1 / np.log2(1 + 2.0)
    assert together[1][0].size == 0 and together[-1][2].size == 0


def test_tagrank_and_compiled_soft_tri_never_import_torch():
    """TagRank's kernel blocks and soft TRI's self-kernels are numpy, its Gram and query rows the compiled
    kernel: fitting both, their Grams and their query rows leave torch unimported (its import holds the
    GIL for seconds, stalling the systems beside it).  Only soft TRI's DP fallback, without the compiled
    kernel, imports it.  In a fresh process, since other tests import torch."""
    import subprocess
    import sys

    from kernels.text.native import load_softtri

    if load_softtri() is None:
        pytest.skip("no C compiler: soft TRI falls back to the torch DP")
    code = (
        "import sys\n"
        "from corpora.teaching import make_teaching_set\n"
        "from kernels.text.kernel import TextKernel\n"
        "c = make_teaching_set(n_images=120, n_train=60, n_dev=30, seed=0)\n"
        "caps = [cap for i in c.split('test')[:6] for cap in c.captions_of(i)]\n"
        "for name in ('TagRank', 'TRI5_A'):\n"
        "    tk = TextKernel.from_name(name, show_progress=False).fit(c, c.split('train'))\n"
        "    tk.gram_train(); tk.gram_queries(caps); tk.gram_columns([0, 3])\n"
        "    assert getattr(tk, 'last_backend', 'native') == 'native', tk.last_backend\n"
        "print('torch' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          cwd=str(Path(__file__).resolve().parent.parent))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


# ------------------------------------------------------------------------------------------ names, errors
def test_registry_names():
    from kernels.text import PAPER_NAMES

    for name in PAPER_NAMES:
        tk = TextKernel.from_name(name)
        assert tk.name == name
    tk = TextKernel.from_name("TRI5_{A,D_{ext}+ic}^{\\sqrt{idf}}")
    assert tk.name == "TRI5_A,D_ext+ic^sqrtidf" and tk.similarity == "A,D_ext+ic" and tk.idf == "sqrt"
    sem = TextKernel.from_name("TRI5SEM")
    assert (sem.similarity, sem.idf, sem.kind, sem.captions_per_item) == ("A,D_ext+ic", "sqrt", "TRI", 5)
    assert TextKernel.from_name("BoW5^√idf").idf == "sqrt"
    with pytest.raises(ValueError, match="unknown text kernel"):
        TextKernel.from_name("TRI7")
    with pytest.raises(ValueError, match="similarity"):
        TextKernel(similarity="WordNet")
    with pytest.raises(ValueError, match="merge"):
        TextKernel("TRI", merge=True)
    with pytest.raises(RuntimeError, match="fit"):
        TextKernel().gram_train()


@pytest.mark.parametrize("max_len", [1, 2, 3])
def test_soft_backends_agree_for_every_max_len(max_len):
    from kernels.text.native import load_softtri

    if load_softtri() is None:
        pytest.skip("no C compiler: native soft-TRI backend unavailable")
    corpus = _corpus(n_items=5, seed=9)
    ids = corpus.split("train")
    out = {}
    for backend in ("torch", "native"):
        tk = TextKernel("TRI", 5, max_len=max_len, show_progress=False, backend=backend, row_block=4).fit(corpus, ids)
        tk.sim_parts = ("A",)
        tk.word_kernel = _planted_word_kernel(tk, seed=3)
        out[backend] = (tk._compute_gram()["K"], tk._compute_queries(_queries()))
        assert tk.last_backend == backend
    np.testing.assert_allclose(out["torch"][0], out["native"][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["torch"][1], out["native"][1], rtol=1e-5, atol=1e-6)


def test_native_soft_tri_is_identical_on_any_number_of_threads():
    """The compiled kernel's Gram and query rows are bit-identical on 1 and 3 OpenMP threads (each entry is
    summed by one thread in a fixed order), so ``native_threads`` may default to every core."""
    from kernels.text.native import load_softtri

    if load_softtri() is None:
        pytest.skip("no C compiler: native soft-TRI backend unavailable")
    corpus = _corpus(n_items=24, seed=5)
    ids = corpus.split("train")
    out = {}
    for threads in (1, 3):
        tk = TextKernel("TRI", 5, show_progress=False, backend="native", native_threads=threads).fit(corpus, ids)
        tk.sim_parts = ("A",)
        tk.word_kernel = _planted_word_kernel(tk, seed=3)
        out[threads] = (tk._compute_gram()["K"], tk._compute_queries(_queries()))
        assert tk.last_backend == "native" and tk._native_threads() == threads
    assert np.array_equal(out[1][0], out[3][0]) and np.array_equal(out[1][1], out[3][1])
    assert TextKernel().native_threads is None and TextKernel()._native_threads() >= 1


@pytest.mark.parametrize("idf", ["none", "sqrt"])
def test_soft_tri_with_identity_word_kernel_equals_exact_tri(idf):
    corpus = _corpus(n_items=6, seed=11)
    ids = corpus.split("train")
    exact = TextKernel("TRI", 5, idf=idf, show_progress=False).fit(corpus, ids)
    soft = TextKernel("TRI", 5, idf=idf, show_progress=False).fit(corpus, ids)
    soft.sim_parts = ("A",)
    soft.word_kernel = WordKernel(list(soft.vocab.words), np.zeros(0, np.int64), np.zeros((0, 0)))
    np.testing.assert_allclose(soft._compute_gram()["K"], exact.gram_train(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(soft._compute_queries(_queries()), exact.gram_queries(_queries()), rtol=1e-5, atol=1e-6)


def test_psd_clip_option_on_max_combination():
    """Eq. 27 (max of word kernels) and the thresholded cosines can make the Gram indefinite;
    psd='clip' projects it onto the PSD cone, psd='none' (default) leaves it untouched."""
    corpus = _corpus(n_items=6, seed=12)
    ids = corpus.split("train")
    tk = TextKernel("TRI", 5, show_progress=False).fit(corpus, ids)
    tk.sim_parts = ("A",)
    rng = np.random.default_rng(0)
    K = rng.random((tk.V - 2, tk.V - 2))
    K = np.maximum(K, K.T)                      # an indefinite "max"-style similarity
    np.fill_diagonal(K, 1.0)
    tk.word_kernel = WordKernel(list(tk.vocab.words), np.arange(tk.V - 2), K)
    arr = tk._compute_gram()
    tk._gram, tk._item_self = arr["K"], arr["item_self"]
    raw = tk.gram_train()
    tk.psd = "clip"
    clipped = tk.gram_train()
    assert np.linalg.eigvalsh(clipped.astype(np.float64)).min() > -1e-5
    assert np.abs(clipped - raw).max() <= max(0.0, -np.linalg.eigvalsh(raw.astype(np.float64)).min()) + 1e-5


def test_disk_cache_roundtrip(tmp_cache, small_teaching_set):
    ts = small_teaching_set
    qs = [c for i in ts.split("test") for c in ts.captions_of(i)][:20]
    a = TextKernel.from_name("TRI5_D_ic^sqrtidf", cache=tmp_cache, show_progress=False).fit(ts, ts.split("train"))
    K1, Q1 = a.gram_train(), a.gram_queries(qs)
    misses = tmp_cache.misses
    b = TextKernel.from_name("TRI5_D_ic^sqrtidf", cache=tmp_cache, show_progress=False, diag=2.0)
    b.fit(ts, ts.split("train"))
    K2, Q2 = b.gram_train(), b.gram_queries(qs)
    assert tmp_cache.misses == misses and tmp_cache.hits >= 3      # word kernel, Gram, queries
    np.testing.assert_array_equal(Q1, Q2)
    np.testing.assert_allclose(np.diag(K2), 2 * np.diag(K1))
    assert K1.dtype == np.float32 and Q1.dtype == np.float32
    # a different parameter is a different entry
    c = TextKernel.from_name("TRI5_D_ic", cache=tmp_cache, show_progress=False).fit(ts, ts.split("train"))
    c.gram_train()
    assert tmp_cache.misses == misses + 1


def test_query_cache_tells_missing_from_empty_lemma(tmp_cache, small_teaching_set):
    """A query with ``lemma=None`` (the text is tokenised) and one with ``lemma=""`` (no tokens) are
    different queries for the disk cache, even with the same id and text."""
    ts = small_teaching_set
    tk = TextKernel.from_name("BoW5", cache=tmp_cache, show_progress=False).fit(ts, ts.split("train"))
    text = ts.captions_of(ts.split("test")[0])[0].text
    q_none = tk.gram_queries([Caption("q#0", "q", 0, text, None)])
    q_empty = tk.gram_queries([Caption("q#0", "q", 0, text, "")])
    assert np.abs(q_none).sum() > 0 and np.abs(q_empty).sum() == 0
    fresh = TextKernel.from_name("BoW5", show_progress=False).fit(ts, ts.split("train"))
    np.testing.assert_array_equal(q_empty, fresh.gram_queries([Caption("q#0", "q", 0, text, "")]))


@pytest.mark.parametrize("kw", [dict(kind="TRI", similarity="D_ic", min_count=2), dict(kind="TagRank"),
                                dict(kind="TRI", idf="sqrt")])
def test_second_fit_forgets_the_first(kw):
    """Refitting on other data equals a fresh fit (word kernel, normalisers, TagRank statistics)."""
    a, b = _corpus(seed=0), _corpus(seed=3)
    tk = TextKernel(show_progress=False, **kw)
    tk.fit(a, a.split("train"))
    tk.gram_train()
    tk.gram_queries(_queries())
    tk.fit(b, b.split("train"))
    fresh = TextKernel(show_progress=False, **kw).fit(b, b.split("train"))
    np.testing.assert_allclose(tk.gram_train(), fresh.gram_train(), atol=1e-6)
    np.testing.assert_allclose(tk.gram_queries(_queries()), fresh.gram_queries(_queries()), atol=1e-6)


def test_edited_external_corpus_is_not_served_from_the_cache(tmp_path):
    """The external (D_ext) corpus enters the cache keys by content stamp (size, mtime), not by path."""
    import os

    from corpora.cache import DiskCache

    ext = tmp_path / "ext.txt"
    corpus = _corpus()
    cache = DiskCache(tmp_path / "cache")

    def gram():
        tk = TextKernel(kind="TRI", similarity="D_ext", external_corpus=ext, cache=cache, show_progress=False,
                        min_count=5)
        return tk.fit(corpus, corpus.split("train")).gram_train()

    def fresh():
        tk = TextKernel(kind="TRI", similarity="D_ext", external_corpus=ext, cache=None, show_progress=False,
                        min_count=5)
        return tk.fit(corpus, corpus.split("train")).gram_train()

    words = sorted({w for caps in corpus.captions.values() for c in caps for w in c.text.split()})
    ext.write_text(f"{words[0]} {words[1]} {words[2]}\n" * 6 + f"{words[3]} {words[4]} {words[5]}\n" * 6)
    before = gram()
    ext.write_text(f"{words[0]} {words[3]} {words[5]}\n" * 6 + f"{words[1]} {words[2]} {words[4]}\n" * 6)
    st = ext.stat()
    os.utime(ext, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    after = gram()
    np.testing.assert_allclose(after, fresh(), atol=1e-6)
    assert not np.allclose(after, before)


@pytest.mark.parametrize("kind", ["BoW5", "TRI5", "TagRank", "soft-torch", "soft-native"])
def test_queries_against_some_items_equal_the_full_rows(kind):
    """gram_queries(items=...) (the low-rank path's pool rows against the pivots) is the full rows'
    columns, bit for bit, in the items' order (repeated and unsorted items included)."""
    corpus = _corpus(n_items=9, seed=3)
    ids = corpus.split("train")
    if kind.startswith("soft"):
        backend = kind.split("-")[1]
        if backend == "native":
            from kernels.text.native import load_softtri

            if load_softtri() is None:
                pytest.skip("no C compiler: native soft-TRI backend unavailable")
        tk = TextKernel("TRI", 5, show_progress=False, backend=backend)
        tk.fit(corpus, ids)
        tk.sim_parts = ("A",)
        tk.word_kernel = _planted_word_kernel(tk)
    else:
        tk = TextKernel.from_name(kind, show_progress=False)
        tk.fit(corpus, ids)
    qs = _queries()
    full = tk.gram_queries(qs)
    items = [7, 0, 3, 8, 3]
    part = tk.gram_queries(qs, items=items)
    assert part.shape == (len(qs), len(items))
    np.testing.assert_array_equal(part, full[:, items])
    with pytest.raises(ValueError, match="item positions"):
        tk.gram_queries(qs, items=[9])


@pytest.mark.parametrize("block", [1, 2, 5, 1000])
def test_blocked_features_equal_one_pass(block):
    rng = np.random.default_rng(7)
    docs = [list(rng.integers(0, 40, size=rng.integers(0, 9))) for _ in range(23)]
    omega = lambda ids: 1.0 + 0.1 * (np.asarray(ids) % 7)   # noqa: E731 -- per-word weight

    def feat(chunk):
        return T.subsequence_features(chunk, 3, 0.5, omega)

    r, c, v = feat(docs)
    X1, cols1, n1 = T.features_to_csr(r, c, v, len(docs))
    Xb, colsb, nb = T.blocked_features_csr(docs, feat, block=block)
    np.testing.assert_array_equal(colsb, cols1)
    np.testing.assert_array_equal(nb, n1)                  # bit for bit, not allclose
    assert (Xb != X1).nnz == 0 and Xb.shape == X1.shape
    # queries against a fixed column space: unknown codes dropped, norms over all codes
    queries = [list(rng.integers(0, 60, size=rng.integers(1, 8))) for _ in range(11)]
    r, c, v = feat(queries)
    Q1, _, qn1 = T.features_to_csr(r, c, v, len(queries), cols1)
    Qb, _, qnb = T.blocked_features_csr(queries, feat, cols1, block=block)
    np.testing.assert_array_equal(qnb, qn1)
    assert (Qb != Q1).nnz == 0 and Qb.shape == (len(queries), len(cols1))


def test_text_kernel_features_do_not_depend_on_block(monkeypatch):
    corpus = _corpus(seed=5)
    train = corpus.split("train")
    grams = {}
    for block in (TextKernel.feature_block, 3):
        monkeypatch.setattr(TextKernel, "feature_block", block)
        for name, kw in (("TRI", dict(kind="TRI")), ("BoW5", dict(kind="BoW", merge=True))):
            k = TextKernel(captions_per_item=5, show_progress=False, **kw).fit(corpus, train)
            grams[name, block] = (k.gram_train(), k.F_items)
    for name in ("TRI", "BoW5"):
        np.testing.assert_array_equal(grams[name, 3][0], grams[name, TextKernel.feature_block][0])
        assert (grams[name, 3][1] != grams[name, TextKernel.feature_block][1]).nnz == 0
