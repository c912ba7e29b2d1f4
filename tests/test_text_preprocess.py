"""Caption preprocessing (Hodosh et al. 2013, Sec. 4.1.1) and the nearest-neighbour baseline (Sec. 3.1)."""
from __future__ import annotations

import numpy as np
import pytest

from corpora.base import Caption, Corpus
from kernels.text import NearestNeighbour, Preprocessor, TextKernel


def cap(text, lemma=None, pos=None, k=0, im="a.jpg"):
    return Caption(f"{im}#{k}", im, k, text, lemma=lemma, pos=pos)


def test_stopwords_lemmas_and_compounds(nltk_data_dir):
    pre = Preprocessor()
    assert len(pre.stopwords) == 179 and "be" in pre.stopwords and "s" in pre.stopwords
    train = [cap("A boy in a t-shirt .", "A boy in a t-shirt ."),
             cap("A man wears a tee shirt", "A man wear a tee shirt"),
             cap("Kids on a merry-go-round", "kid on a merry-go-round"),
             cap("Kids on a merry-go-round", "kid on a merry-go-round"),
             cap("a snow-covered hill", "a snow-covered hill"), cap("a snow-covered hill", "a snow-covered hill"),
             cap("a snowcovered hill", "a snowcovered hill")]
    pre.fit(train)
    out = [p.tokens for p in pre.transform(train)]
    assert out[0] == ("boy", "t-shirt")
    assert out[1] == ("man", "wear", "t-shirt")                       # table: 'tee shirt' -> t-shirt
    q = [cap("x", "The girl be ride a merry go round in a T shirt near a snow covered hill"),
         cap("x", "The tshirt 's snowcovered")]
    got = [p.tokens for p in pre.transform(q)]
    assert got[0] == ("girl", "ride", "merry-go-round", "t-shirt", "near", "snow-covered", "hill")
    assert got[1] == ("t-shirt", "snow-covered")                      # closed form -> hyphenated
    # the hyphen rule never fires for rare forms or stop-word edges
    assert ("in", "line") not in pre.phrase_map


def test_shared_memo_follows_the_preprocessor_state(nltk_data_dir):
    """Preprocessors in the same state share processed captions; a different learnt compound rule or
    stop-word setting gets its own results, equal to processing without the memo."""
    from kernels.text import preprocess

    train = [cap("a snow-covered hill", "a snow-covered hill", k=k) for k in range(2)] + \
        [cap("a snowcovered hill", "a snowcovered hill", k=2)]
    q = [cap("x", "a snow covered hill in the snow-covered field", pos=("DT", "NN", "VBN", "NN", "IN", "DT",
                                                                         "JJ", "NN"))]

    def direct(pre, tags):
        c = q[0]
        return pre._finish(c.lemma.split(), list(c.pos) if tags else None)

    fitted, plain, keep = Preprocessor().fit(train), Preprocessor(compounds=False), \
        Preprocessor(remove_stopwords=False).fit(train)
    for tags in (False, True):
        for pre in (fitted, plain, keep, fitted):
            assert pre.transform(q, tags=tags)[0] == direct(pre, tags)
    assert fitted.transform(q)[0].tokens == ("snow-covered", "hill", "snow-covered", "field")
    assert plain.transform(q)[0].tokens == ("snow", "covered", "hill", "snow-covered", "field")
    assert "a" in keep.transform(q)[0].tokens
    again = Preprocessor().fit(train)                    # same state: the same (shared) result objects
    assert again.transform(q)[0] is fitted.transform(q)[0]
    assert len(preprocess._FINISH_MEMO) <= 4
    preprocess.clear_preprocess_memo()
    assert not preprocess._FINISH_MEMO and again.transform(q)[0] == fitted.transform(q)[0]


def count_tagger_calls(monkeypatch) -> list[int]:
    """Wrap the NLTK tagger so that each call records its number of sentences (in the returned list)."""
    from kernels.text import preprocess

    real = preprocess._tagger()
    calls: list[int] = []

    def counting(sents):
        calls.append(len(sents))
        return real(sents)

    monkeypatch.setattr(preprocess, "_tagger", lambda: counting)
    return calls


def test_pos_tags_are_computed_once_per_sentence(nltk_data_dir, monkeypatch):
    """Without corpus lemmas every caption is tagged; a second preprocessor (the next text kernel of the
    main job) and a ``tags=True`` pass reuse the memo, and the tags are the tagger's whatever the batch."""
    from kernels.text import preprocess

    preprocess.clear_preprocess_memo()
    real = preprocess._tagger()
    calls = count_tagger_calls(monkeypatch)
    caps = [cap("Two dogs are running on the beach .", k=0), cap("A man rides a bike .", k=1),
            cap("Two dogs are running on the beach .", k=2, im="b.jpg"), cap("Children playing in snow", k=3)]
    first = Preprocessor().fit(caps).transform(caps)
    assert calls == [3]                                   # the repeated caption is tagged once
    tagged = Preprocessor().fit(caps).transform(caps, tags=True)
    assert calls == [3] and [p.tokens for p in tagged] == [p.tokens for p in first]
    assert tagged[0].tokens == ("two", "dog", "run", "beach")        # lemmatised with the tagger's POS
    alone = [tuple(t for _, t in s) for s in real([preprocess.TOKEN_RE.findall(c.text) for c in caps])]
    preprocess.clear_preprocess_memo()
    assert preprocess.pos_tags([preprocess.TOKEN_RE.findall(c.text) for c in caps[::-1]])[::-1] == alone
    assert calls == [3, 3]
    preprocess.clear_preprocess_memo()


def test_pos_tags_in_blocks_on_a_cluster_and_from_the_cache(nltk_data_dir, monkeypatch, tmp_path):
    """With a cluster the tagger runs on its workers a block at a time and with a cache each block is
    written once: the tags are the one-call tagger's either way, and a second run reads them back."""
    from corpora.cache import DiskCache
    from corpora.parallel import BlockExecutor
    from kernels.text import preprocess

    sents = [preprocess.TOKEN_RE.findall(t) for t in (
        "Two dogs are running on the beach .", "A man rides a bike .", "Children playing in snow",
        "A girl in a red coat climbs a rock .", "Two dogs are running on the beach .", "")]
    preprocess.clear_preprocess_memo()
    one_call = preprocess.pos_tags(sents)
    assert one_call[-1] == () and one_call[0] == one_call[4] and len(set(one_call)) == 5
    calls = count_tagger_calls(monkeypatch)
    monkeypatch.setattr(preprocess, "TAG_BLOCK", 2)
    cache = DiskCache(tmp_path / "cache")
    preprocess.clear_preprocess_memo()
    with BlockExecutor(workers=2, processes=False) as ex:
        assert preprocess.pos_tags(sents, ex, cache) == one_call
    assert sorted(calls) == [1, 2, 2]                      # 5 distinct sentences in blocks of 2
    assert len(list((tmp_path / "cache" / preprocess.TAG_NAMESPACE).rglob("*.npz"))) == 3
    preprocess.clear_preprocess_memo()
    assert preprocess.pos_tags(sents, cache=cache) == one_call
    assert sorted(calls) == [1, 2, 2]                      # read back: not tagged again
    preprocess.clear_preprocess_memo()
    buf = preprocess.encode_tags([("DT", "NN"), (), ("``", "-LRB-", ".")])
    assert preprocess.decode_tags(buf, 3) == [("DT", "NN"), (), ("``", "-LRB-", ".")]
    with pytest.raises(ValueError, match="expected 2"):
        preprocess.decode_tags(buf, 2)


def test_pos_tagging_blocks_show_a_progress_bar_only_when_asked(nltk_data_dir, monkeypatch, tmp_path, capsys):
    """The blocks of tagged sentences (cached, or on a cluster) have a progress bar, which the main job's
    ``--no-progress`` (a text kernel's ``show_progress=False``) turns off."""
    from corpora.cache import DiskCache
    from kernels.text import preprocess

    sents = [preprocess.TOKEN_RE.findall(t) for t in ("A man rides a bike .", "Children playing in snow",
                                                        "Two dogs run .", "A girl climbs a rock .")]
    monkeypatch.setattr(preprocess, "TAG_BLOCK", 2)
    for show, cache_dir in ((False, "quiet"), (True, "shown")):
        preprocess.clear_preprocess_memo()
        capsys.readouterr()
        preprocess.pos_tags(sents, cache=DiskCache(tmp_path / cache_dir), show_progress=show)
        assert ("POS tagging" in capsys.readouterr().err) == show
    seen = []
    real = preprocess.pos_tags
    monkeypatch.setattr(preprocess, "pos_tags", lambda *a, **k: seen.append(a[3]) or real(*a, **k))
    preprocess.clear_preprocess_memo()
    caps = [Caption(f"im#{i}", "im", i, " ".join(t)) for i, t in enumerate(sents)]
    preprocess.Preprocessor().fit(caps).transform(caps, tags=True, show_progress=False)
    assert seen == [False]
    preprocess.clear_preprocess_memo()


def test_english_wordnet_answers_as_nltk_wordnet(nltk_data_dir):
    """The WordNet reader without NLTK's OMW sense map gives NLTK's answers: the lemmatiser's lemmas,
    synsets, hypernym paths and Lin similarities (with Brown IC)."""
    from nltk.corpus import wordnet as ref
    from nltk.corpus import wordnet_ic
    from nltk.stem import WordNetLemmatizer

    from kernels.text.preprocess import lemmatizer, english_wordnet

    wn = english_wordnet()
    assert wn.map30 is None and wn.get_version() == ref.get_version()
    forms = [("dogs", "n"), ("churches", "n"), ("abaci", "n"), ("geese", "n"), ("leaves", "n"), ("leaves", "v"),
             ("running", "v"), ("ran", "v"), ("was", "v"), ("better", "a"), ("best", "r"), ("hardrock", "n"),
             ("t-shirts", "n"), ("skiing", "v"), ("wading", "v")]
    lem, nltk_lem = lemmatizer(), WordNetLemmatizer()
    assert [lem(w, p) for w, p in forms] == [nltk_lem.lemmatize(w, p) for w, p in forms]
    ic = wordnet_ic.ic("ic-brown.dat")
    for w in ("dog", "man", "beach", "ball", "snow", "bike"):
        ours, theirs = wn.synsets(w, pos="n"), ref.synsets(w, pos="n")
        assert [s.name() for s in ours] == [s.name() for s in theirs]
        assert [[a.name() for a in p] for p in ours[0].hypernym_paths()] == \
            [[a.name() for a in p] for p in theirs[0].hypernym_paths()]
        assert ours[0].lin_similarity(wn.synset("cat.n.01"), ic) == \
            theirs[0].lin_similarity(ref.synset("cat.n.01"), ic)


def test_wordnet_left_zipped_by_the_downloader_is_found(nltk_data_dir, tmp_path):
    """``python -m nltk.downloader wordnet`` leaves ``corpora/wordnet.zip``: the resource check, the reader
    and the lemmatiser find WordNet inside it (in a fresh process, with only the zip on the data path)."""
    import os
    import subprocess
    import sys
    import zipfile
    from pathlib import Path

    src = nltk_data_dir / "corpora" / "wordnet"
    (tmp_path / "data" / "corpora").mkdir(parents=True)
    with zipfile.ZipFile(tmp_path / "data" / "corpora" / "wordnet.zip", "w", zipfile.ZIP_DEFLATED,
                         compresslevel=1) as z:
        for f in sorted(src.rglob("*")):
            if f.is_file():
                z.write(f, "wordnet/" + f.relative_to(src).as_posix())
    (tmp_path / "no-shared").mkdir()
    code = ("from kernels.text.preprocess import lemmatizer, english_wordnet\n"
            "from evaluation.meteor import meteor_available\n"
            "print(english_wordnet().synsets('dog')[0].name(), lemmatizer()('geese', 'n'), meteor_available()[0])")
    env = {**os.environ, "NLTK_DATA": str(tmp_path / "data"), "ITR_SHARED": str(tmp_path / "no-shared")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parent.parent, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["dog.n.01", "goose", "True"]


def test_nltk_lemmatiser_and_tagger_when_no_corpus_lemmas(nltk_data_dir):
    pre = Preprocessor()
    out = pre.transform([cap("Two dogs are running through the fields.")], tags=True)[0]
    assert out.tokens == ("two", "dog", "run", "field")
    assert out.tags[1].startswith("NN") and out.tags[2].startswith("VB")
    # corpus lemmas + corpus POS are used as given (teaching set style)
    c = cap("A dog sits .", "A dog sit .", ("DT", "NN", "VBZ", "."))
    out = pre.transform([c], tags=True)[0]
    assert out.tokens == ("dog", "sit") and out.tags == ("NN", "VBZ")


def _corpus(n=12):
    words = ["dog", "run", "grass", "man", "ride", "bike", "red", "ball", "water", "swim"]
    rng = np.random.default_rng(0)
    caps = {}
    ids = [f"im{i}.jpg" for i in range(n)]
    for i, im in enumerate(ids):
        caps[im] = tuple(cap(" ".join(rng.choice(words, 4)), None, None, k, im) for k in range(5))
        caps[im] = tuple(Caption(c.id, c.image_id, c.index, c.text, lemma=c.text) for c in caps[im])
    return Corpus("toy", tuple(ids), caps, {"train": tuple(ids[:8]), "test": tuple(ids[8:])})


def test_nn_baseline_f1_and_score_matrices():
    from evaluation import ScoreMatrices, evaluate_pool
    from corpora.protocol import hodosh_pool

    corpus = _corpus()
    train = corpus.split("train")
    pool = hodosh_pool(corpus, "test")
    rng = np.random.default_rng(1)
    G = rng.random((len(pool.image_ids), len(train)))
    nn = NearestNeighbour("NN5_F1_idf").fit(corpus, train)
    S = nn.affinity(G, pool.captions)
    assert S.shape == (pool.n_images, pool.n_captions) and S.dtype == np.float32
    # brute force Eq. 2: F1 of idf-weighted bags, NN(i) = argmax_j G[i, j], five captions merged
    tk = nn.tk
    for i in range(pool.n_images):
        j = int(np.argmax(G[i]))
        d = [w for c in corpus.captions_of(train[j]) for w in c.lemma.split()]
        for k, c in enumerate(pool.captions):
            s = c.lemma.split()
            w = lambda x: tk.idf_values[tk.vocab.index[x]] if x in tk.vocab else tk.idf_unseen  # noqa: E731
            ov = sum(w(x) * min(s.count(x), d.count(x)) for x in set(s))
            ms, md = sum(w(x) for x in s), sum(w(x) for x in d)
            P, R = (ov / ms if ms else 0), (ov / md if md else 0)
            ref = 2 * P * R / (P + R) if P + R > 0 else 0.0
            assert abs(S[i, k] - ref) < 1e-5
    sm = nn.scores(G, pool)
    assert isinstance(sm, ScoreMatrices)
    res = evaluate_pool(sm, pool)
    assert set(res) == {"annotation", "search"}
    for variant in ("NN5_F1", "NN5_BoW5", "NN5_TRI"):
        S2 = NearestNeighbour(variant).fit(corpus, train).affinity(G, pool.captions)
        assert S2.shape == S.shape and np.isfinite(S2).all()
    # NN5_BoW5 equals the BoW5 query kernel at the nearest neighbour
    bow = TextKernel.from_name("BoW5", show_progress=False).fit(corpus, train)
    Q = bow.gram_queries(pool.captions)
    S3 = NearestNeighbour("NN5_BoW5").fit(corpus, train).affinity(G, pool.captions)
    np.testing.assert_allclose(S3, Q[:, np.argmax(G, axis=1)].T, rtol=1e-6)
    with pytest.raises(ValueError, match="shape"):
        nn.affinity(G[:, :3], pool.captions)
    with pytest.raises(ValueError, match="variant"):
        NearestNeighbour("NN1")


def test_nn_f1_with_a_query_word_repeated_past_the_level_limit():
    """F1 overlap counts min(tf_query, tf_item): a query word repeated 64+ times must not spill into the
    next word's level codes (it used to inflate the overlap from 65 repeats on)."""
    corpus = _corpus()
    train = corpus.split("train")
    nn = NearestNeighbour("NN5_F1").fit(corpus, train)
    tk = nn.tk
    docs = tk.item_documents()
    for word in tk.vocab.words[:3]:
        for reps in (1, 63, 64, 65, 130):
            q = Caption("q.jpg#0", "q.jpg", 0, " ".join([word] * reps), lemma=" ".join([word] * reps))
            got = nn.text_similarity([q])[0]
            qd = tk.encode_queries([q])[0]
            ref = []
            for d in docs:
                ov = sum(min(np.sum(qd == x), np.sum(d == x)) for x in np.unique(qd))
                ref.append(2 * ov / (len(qd) + len(d)))
            np.testing.assert_allclose(got, ref, atol=1e-6, err_msg=f"{word} x{reps}")
    # a training item that repeats a word 70 times (14 in each of its five captions): all 70 levels count
    base = _corpus()
    caps = dict(base.captions)
    im = base.split("train")[0]
    caps[im] = tuple(Caption(c.id, c.image_id, c.index, " ".join(["dog"] * 14), lemma=" ".join(["dog"] * 14))
                     for c in caps[im])
    corpus = Corpus("toy70", base.image_ids, caps, base.splits)
    nn = NearestNeighbour("NN5_F1").fit(corpus, corpus.split("train"))
    for reps, want in ((70, 1.0), (80, 2 * 70 / 150), (35, 2 * 35 / 105)):
        q = Caption("q.jpg#0", "q.jpg", 0, " ".join(["dog"] * reps), lemma=" ".join(["dog"] * reps))
        assert nn.text_similarity([q])[0][0] == pytest.approx(want, abs=1e-6), reps


def test_missing_nltk_resource_message():
    from kernels.text import MissingResourceError
    from kernels.text.preprocess import nltk_resource

    with pytest.raises(MissingResourceError, match="no_such_resource.*nltk.downloader"):
        nltk_resource("corpora/no_such_resource", "no_such_resource")


def test_native_backend_fallback(monkeypatch):
    """backend='auto' falls back to torch when the compiled kernel is unavailable; 'native' says so."""
    import kernels.text.native as native
    from kernels.text.similarity import WordKernel

    corpus = _corpus(n=6)
    train = corpus.split("train")
    monkeypatch.setattr(native, "load_softtri", lambda: None)
    for backend in ("auto", "native"):
        tk = TextKernel("TRI", 5, show_progress=False, backend=backend).fit(corpus, train)
        tk.sim_parts = ("A",)
        tk.word_kernel = WordKernel(list(tk.vocab.words), np.zeros(0, np.int64), np.zeros((0, 0)))
        if backend == "auto":
            K = tk._compute_gram()["K"]
            assert tk.last_backend == "torch" and K.shape == (len(train), len(train))
        else:
            with pytest.raises(RuntimeError, match="native"):
                tk._compute_gram()


def test_compiled_kernel_switches_read_zero_as_off(monkeypatch):
    """ITR_NO_NATIVE / ITR_NO_CEXT switch the compiled kernels off for a true value; "0" or "" leave them
    on (as ITR_OFFLINE reads "0")."""
    import kernels.image.native as cext
    import kernels.native_lib as native_lib
    import kernels.text.native as native
    import kernels.text.tagrank_native as tagrank_native

    monkeypatch.setattr(cext, "_LIB", cext._LIB)       # restored afterwards, with _TRIED
    monkeypatch.setattr(cext, "_TRIED", cext._TRIED)
    tried = []
    monkeypatch.setattr(native_lib, "c_compiler", lambda: tried.append("text"))   # None: nothing compiled
    monkeypatch.setattr(cext, "_lib_path", lambda: tried.append("cext") or 1 / 0)
    monkeypatch.setattr(cext, "log", type("Quiet", (), {"warning": staticmethod(lambda *a, **k: None)}))
    for value, off in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv("ITR_NO_NATIVE", value)
        monkeypatch.setenv("ITR_NO_CEXT", value)
        native.load_softtri.cache_clear()
        tagrank_native.load_tagrank.cache_clear()
        monkeypatch.setattr(cext, "_TRIED", False)
        tried.clear()
        assert native.load_softtri() is None and tagrank_native.load_tagrank() is None and cext.load() is None
        assert tried == ([] if off else ["text", "text", "cext"]), (value, tried)
    native.load_softtri.cache_clear()
    tagrank_native.load_tagrank.cache_clear()


def test_lemmatizer_loads_wordnet_once_across_threads(nltk_data_dir):
    """The main job loads WordNet on a warm-up thread while the image kernel is fitted; a text kernel
    asking meanwhile waits for that load and gets the same lemmatiser."""
    import threading

    from kernels.text.preprocess import lemmatizer

    got = []
    threads = [threading.Thread(target=lambda: got.append(lemmatizer())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 3 and all(g is got[0] for g in got) and got[0]("dogs", "n") == "dog"
    # a load touches no warnings filter (not thread-safe) and warns nothing; the reader has no OMW data
    import warnings

    from corpora import nltk_resources

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fresh = nltk_resources._english_wordnet.__wrapped__()
    assert not caught and fresh._omw_reader is None and fresh.synsets("dog", pos="n")


@pytest.mark.parametrize("variant", ["NN5_F1_idf", "NN5_BoW5"])
def test_nn_scores_from_row_blocks_equal_the_whole_matrices(variant, monkeypatch):
    """NearestNeighbour.scores reading the image kernel a few rows at a time (and the F1 similarity a few
    captions at a time) gives Eq. 2 on the whole matrices, bit for bit."""
    import kernels.text.nn as nn_module
    from corpora.protocol import hodosh_pool

    corpus = _corpus()
    train = corpus.split("train")
    pool = hodosh_pool(corpus, "test")
    G = np.random.default_rng(2).random((pool.n_images, len(train))).astype(np.float32)
    G[0, 3] = G[0, 5] = G[0].max() + 1            # a tie: the lowest index wins
    nn = NearestNeighbour(variant).fit(corpus, train)
    T = nn.text_similarity(pool.captions)
    ref_ann = T[:, np.argmax(G, axis=1)].T.astype(np.float32)
    ref_search = G[:, np.argmax(T, axis=1)].T.astype(np.float32)
    monkeypatch.setattr(nn_module, "TEXT_BLOCK", 3)
    asked = []

    def rows(lo, hi):
        asked.append((lo, hi))
        return G[lo:hi]

    for sm in (nn.scores(G, pool), nn.scores(rows, pool, n_images=pool.n_images, block=2)):
        np.testing.assert_array_equal(sm.annotation, ref_ann)
        np.testing.assert_array_equal(sm.search, ref_search)
    assert asked[0] == (0, 2) and asked[-1][1] == pool.n_images and len(asked) == -(-pool.n_images // 2)
    with pytest.raises(ValueError, match="n_images"):
        nn.scores(rows, pool)
