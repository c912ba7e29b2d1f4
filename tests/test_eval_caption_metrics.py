"""Classical caption metrics: tokenizer, BLEU, ROUGE-L, CIDEr-D, METEOR (NLTK variant), Hodosh unigram
BLEU/ROUGE, Cohen's kappa – hand-computed cases and independent reference implementations."""
from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest

from evaluation.caption_metrics import (
    CIDErD,
    bleu,
    cider_d,
    cohen_kappa,
    corpus_bleu,
    hodosh_bleu,
    hodosh_preprocess,
    hodosh_rouge,
    lcs_length,
    ptb_tokenize,
    rouge_l,
)
from evaluation.meteor import meteor_nltk


def test_ptb_tokenizer():
    assert ptb_tokenize("A dog's toy, black-and-white.") == ["a", "dog", "'s", "toy", "black-and-white"]
    assert ptb_tokenize("Don't GO!!  (now) 3.5 m") == ["do", "n't", "go", "now", "3.5", "m"]
    assert ptb_tokenize(" ... ") == []
    # accented (non-ASCII) words stay whole; composed and decomposed forms give the same tokens
    assert ptb_tokenize("Café crème at the dog's") == ["café", "crème", "at", "the", "dog", "'s"]
    assert ptb_tokenize("Cafe\u0301 Crème-brûlée") == ["café", "crème-brûlée"]
    assert ptb_tokenize("snake_case") == ["snake", "case"]   # underscore is not a word character
    with pytest.raises(TypeError):
        ptb_tokenize(["a"])


def test_bleu_hand_computed():
    c = ["a dog runs on the grass"]
    r = [["a dog is running on grass", "the dog runs"]]
    b = bleu(c, r)[0]
    # unigrams all matched: p1 = 1; bigrams: "a dog", "dog runs" of 5 -> p2 = 2/5; closest ref len 6 -> BP 1
    assert b[0] == pytest.approx(1.0, abs=1e-9)
    assert b[1] == pytest.approx(math.sqrt(0.4), abs=1e-9)
    assert b[3] < 1e-6  # no 3-gram / 4-gram match -> ~0 (COCO's tiny constant)
    # brevity penalty: candidate length 2, reference length 4 -> exp(1 - 4/2)
    assert bleu(["a dog"], [["a dog runs fast"]], n=1)[0, 0] == pytest.approx(math.exp(-1), abs=1e-9)
    # closest reference length, tie -> shorter (2 and 4 are both at distance 1 from 3) -> no penalty
    assert bleu(["a b c"], [["a b", "a b c d"]], n=1)[0, 0] == pytest.approx(1.0, abs=1e-9)
    # clipping: "the the the" vs "the cat" -> 1/3
    assert bleu(["the the the"], [["the cat"]], n=1)[0, 0] == pytest.approx(1 / 3, abs=1e-9)


def test_bleu_matches_nltk_when_all_precisions_positive():
    from nltk.translate.bleu_score import sentence_bleu

    rng = random.Random(0)
    words = "a the dog cat runs on grass red ball".split()
    n_checked = 0
    for _ in range(300):
        base = [rng.choice(words) for _ in range(rng.randint(5, 9))]
        refs = [base[: rng.randint(4, len(base))] + [rng.choice(words)] for _ in range(3)]
        cand = base[: rng.randint(4, len(base))]
        ours = bleu([" ".join(cand)], [[" ".join(x) for x in refs]])[0, 3]
        theirs = sentence_bleu(refs, cand)
        if theirs > 1e-3:
            assert ours == pytest.approx(theirs, rel=1e-6)
            n_checked += 1
    assert n_checked > 50


def test_corpus_bleu_hand_computed():
    c = ["a b", "c d e"]
    r = [["a b"], ["c x e f"]]
    # unigram matches 2 + 2 of 2 + 3; lengths 5 vs closest refs 2 + 4 = 6 -> BP exp(1 - 6/5)
    got = corpus_bleu(c, r, n=1)[0]
    assert got == pytest.approx(4 / 5 * math.exp(1 - 6 / 5), rel=1e-9)


def _lcs_dp(a, b):
    L = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a)):
        for j in range(len(b)):
            L[i + 1][j + 1] = L[i][j] + 1 if a[i] == b[j] else max(L[i][j + 1], L[i + 1][j])
    return L[-1][-1]


def test_lcs_bit_parallel_matches_dp():
    rng = random.Random(1)
    for _ in range(500):
        a = [rng.choice("abcd") for _ in range(rng.randint(0, 14))]
        b = [rng.choice("abcd") for _ in range(rng.randint(0, 14))]
        assert lcs_length(a, b) == _lcs_dp(a, b)


def test_rouge_l_hand_computed():
    # LCS("a b c d", "a c d e f") = 3 -> P = 3/4, R = 3/5, beta = 1.2
    p, r, b2 = 0.75, 0.6, 1.44
    expect = (1 + b2) * p * r / (r + b2 * p)
    assert rouge_l(["a b c d"], [["a c d e f"]])[0] == pytest.approx(expect)
    # P and R are maximised separately over references
    got = rouge_l(["a b c d"], [["a b", "a b c d e f g h"]])[0]
    p, r = 1.0, 1.0  # P from ref 2 (4/4), R from ref 1 (2/2)
    assert got == pytest.approx(1.0)
    assert rouge_l(["x y"], [["a b"]])[0] == 0.0


def test_cider_d_hand_computed():
    # unigram CIDEr-D (n=1) on two documents: {"a cat"}, {"a dog"}; log|D| = log 2
    # idf(a) = 0, idf(cat) = idf(dog) = log 2
    refs = [["a cat"], ["a dog"]]
    s = CIDErD(n=1).fit(refs)
    # identical sentence: cosine 1, no length penalty -> 10
    assert s.score(["a cat"], [["a cat"]])[0] == pytest.approx(10.0)
    # "a cat cat": g = (0, 2l) vs (0, l): <min(g_c, g_r), g_r> = l^2, norms 2l and l -> 1/2;
    # lengths (bigram counts) 2 vs 1 -> penalty exp(-1 / 72)
    assert s.score(["a cat cat"], [["a cat"]])[0] == pytest.approx(10 * 0.5 * math.exp(-1 / 72))
    # average over references
    both = s.score(["a cat"], [["a cat", "a dog"]])[0]
    assert both == pytest.approx(5.0)


def _cider_reference(cands, refs, n=4, sigma=6.0):
    """Straightforward dictionary implementation of the COCO CIDEr-D formula."""
    def grams(s):
        t = ptb_tokenize(s)
        c = Counter()
        for k in range(1, n + 1):
            c.update(tuple(t[i:i + k]) for i in range(len(t) - k + 1))
        return c, max(0, len(t) - 1)

    df = Counter()
    for rs in refs:
        df.update(set(g for r in rs for g in grams(r)[0]))
    logd = math.log(len(refs))

    def vec(c):
        v = [dict() for _ in range(n)]
        for g, tf in c.items():
            v[len(g) - 1][g] = tf * (logd - math.log(max(1.0, df[g])))
        return v, [math.sqrt(sum(x * x for x in d.values())) for d in v]

    out = []
    for cand, rs in zip(cands, refs):
        cc, lc = grams(cand)
        vc, nc = vec(cc)
        tot = 0.0
        for r in rs:
            rc, lr = grams(r)
            vr, nr = vec(rc)
            vals = []
            for k in range(n):
                num = sum(min(x, vr[k].get(g, 0.0)) * vr[k].get(g, 0.0) for g, x in vc[k].items())
                val = num / (nc[k] * nr[k]) if nc[k] * nr[k] > 0 else 0.0
                vals.append(val * math.exp(-((lc - lr) ** 2) / (2 * sigma ** 2)))
            tot += sum(vals) / n
        out.append(10 * tot / len(rs))
    return np.array(out)


def test_cider_d_matches_reference_implementation():
    rng = random.Random(2)
    words = "a the dog cat runs on grass red ball man woman sits".split()
    cands, refs = [], []
    for _ in range(40):
        cands.append(" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))))
        refs.append([" ".join(rng.choice(words) for _ in range(rng.randint(2, 9)))
                     for _ in range(rng.randint(1, 5))])
    np.testing.assert_allclose(cider_d(cands, refs), _cider_reference(cands, refs), rtol=1e-9, atol=1e-12)
    # external document frequencies
    df_refs = refs[:10]
    np.testing.assert_allclose(cider_d(cands[:5], refs[:5], df_references=df_refs),
                               CIDErD().fit(df_refs).score(cands[:5], refs[:5]))


def test_metric_input_errors():
    with pytest.raises(ValueError, match="2 candidates but 1"):
        bleu(["a", "b"], [["a"]])
    with pytest.raises(ValueError, match="empty"):
        rouge_l(["a"], [[]])
    with pytest.raises(TypeError, match="list of strings"):
        cider_d(["a"], ["a b"])
    with pytest.raises(RuntimeError, match="fit"):
        CIDErD().score(["a"], [["a"]])


def test_hodosh_unigram_metrics():
    c, r = ["the dog runs"], [["the dog", "a dog runs fast"]]
    assert hodosh_bleu(c, r)[0] == pytest.approx(1.0)   # clipped unigram precision, no BP
    assert hodosh_rouge(c, r)[0] == pytest.approx(4 / 6)  # (2 + 2) / (2 + 4)
    # no brevity penalty: a one-word candidate that matches is perfect
    assert hodosh_bleu(["dog"], [["a dog runs fast"]])[0] == 1.0


def test_hodosh_pre_processing(nltk_data_dir):
    assert hodosh_preprocess("The black-and-white dogs are running") == ["black", "white", "dog", "run"]
    c, r = ["Dogs running"], [["A dog runs"]]
    assert hodosh_bleu(c, r, pre=False)[0] == 0.0
    assert hodosh_bleu(c, r, pre=True)[0] == 1.0
    assert hodosh_rouge(c, r, pre=True)[0] == 1.0


def test_meteor_nltk_variant_equals_nltk(nltk_data_dir):
    """Same scores as NLTK's ``meteor_score`` with ``nltk.corpus.wordnet``, WordNet synonym matches included
    (kid ~ child, couch ~ sofa, automobile ~ car), although the toolkit reads WordNet without the OMW map."""
    from nltk.translate.meteor_score import meteor_score

    class NoWordNet:
        def synsets(self, word):
            return []

    c = ["a dog is running on the grass", "two men play", "a kid sits on the couch near an automobile"]
    r = [["the dog runs on grass", "a brown dog"], ["a man plays guitar"], ["a child sits on a sofa by the car"]]
    got = meteor_nltk(c, r)
    want = [meteor_score([ptb_tokenize(x) for x in rs], ptb_tokenize(cc)) for cc, rs in zip(c, r)]
    np.testing.assert_allclose(got, want)
    assert 0 < got[0] <= 1
    no_synonyms = meteor_score([ptb_tokenize(r[2][0])], ptb_tokenize(c[2]), wordnet=NoWordNet())
    assert got[2] > no_synonyms + 0.1  # the synonym stage is exercised


def test_cohen_kappa_vs_sklearn():
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(0)
    metric = rng.random(200)
    expert = np.clip(np.round(metric * 4 + rng.normal(0, 1, 200)), 1, 4)
    k = cohen_kappa(metric, expert, threshold_a=0.5, threshold_b=3)
    assert k == pytest.approx(cohen_kappa_score(metric >= 0.5, expert >= 3))
    assert cohen_kappa([1, 0, 1], [1, 0, 1]) == pytest.approx(1.0)
    # hand: po = 0.5, pe = 0.5*0.5 + 0.5*0.5 = 0.5 -> 0
    assert cohen_kappa([1, 1, 0, 0], [1, 0, 1, 0]) == pytest.approx(0.0)
    with pytest.raises(ValueError):
        cohen_kappa([1, 0], [1])
