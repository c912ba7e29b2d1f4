"""The official METEOR 1.5 (evaluation/meteor.py): availability messages, the jar's own scores, and the
published Flickr8k correlations (CLIPScore, Hessel et al. 2021, Tables 1-2)."""
from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np
import pytest

from evaluation import meteor as meteor_mod
from evaluation.meteor import Meteor15, Meteor15Error, meteor15, meteor15_available

AVAILABLE, WHY = meteor15_available()
needs_meteor = pytest.mark.skipif(not AVAILABLE, reason=f"official METEOR unavailable: {WHY}")
SHARED = Path(os.environ.get("ITR_SHARED", Path(__file__).resolve().parents[2] / "shared"))
FLICKR = SHARED / "data" / "flickr8k"


def test_availability_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(meteor_mod.shutil, "which", lambda name: None)
    ok, why = meteor15_available()
    assert not ok and "Java" in why
    monkeypatch.undo()
    monkeypatch.setattr(meteor_mod.shutil, "which", lambda name: "/usr/bin/java")
    monkeypatch.setenv("ITR_METEOR_JAR", str(tmp_path / "meteor-1.5.jar"))
    ok, why = meteor15_available()
    assert not ok and "no such file" in why
    (tmp_path / "meteor-1.5.jar").write_bytes(b"PK")
    ok, why = meteor15_available()
    assert not ok and "paraphrase-en.gz" in why
    with pytest.raises(Meteor15Error, match="paraphrase"):
        Meteor15()


@pytest.fixture(scope="module")
def jar():
    """One METEOR process for the module (starting one loads the paraphrase table: ~10-20 s)."""
    with Meteor15() as m:
        yield m


@needs_meteor
def test_segment_scores_of_the_jar(jar):
    refs = [["a dog runs on the grass", "a brown dog is running"]] * 4
    cands = ["a dog runs on the grass",          # identical to a reference: one chunk, near 1
             "A dog runs on the grass.",         # same after PTB tokenisation and lower-casing
             "a dog is running on grass",        # stem / partial matches: in between
             "two people ride bicycles"]         # no word in common: near 0
    s = meteor15(cands, refs)
    assert s.shape == (4,) and s.dtype == np.float64
    assert s[0] > 0.95 and s[1] == s[0]
    assert 0.2 < s[2] < s[0]
    assert s[3] < 0.1
    # one running process answers several requests alike
    np.testing.assert_array_equal(jar.score(cands[:2], refs[:2]), s[:2])
    np.testing.assert_array_equal(jar.score(cands[2:], refs[2:]), s[2:])
    with pytest.raises(ValueError, match="empty"):
        jar.score(["a dog"], [[]])


@needs_meteor
@pytest.mark.skipif(not FLICKR.is_dir(), reason=f"shared Flickr8k text bundle not found at {FLICKR}")
def test_published_flickr8k_correlations_of_meteor():
    """caption_metrics_vs_humans reports the official METEOR as its METEOR row: Expert τ-c 41.8 as
    published; CF τ-b 22.3 against the published 22.2 (the official PTBTokenizer gives the same per-caption
    scores as ours on these rows, so the 0.07 is not the tokenisation)."""
    from corpora.flickr8k import load_flickr8k
    from experiments.caption_metrics_vs_humans import metric_table, selected_metrics

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")           # Flickr8k's known token-file quirk
        corpus = load_flickr8k(FLICKR, with_images=False)
    assert "METEOR" in selected_metrics(hodosh=False) and "METEOR (NLTK variant)" not in selected_metrics()
    row = metric_table(corpus, hodosh=False, only=["METEOR"], progress=False)["METEOR"]
    assert row["expert_tau_c"] == 41.8
    assert round(abs(row["cf_tau_b"] - 22.2), 1) <= 0.1


def test_without_java_the_nltk_variant_is_the_labelled_fallback(monkeypatch, capsys):
    import experiments.caption_metrics_vs_humans as cmh

    monkeypatch.setattr(cmh, "meteor15_available", lambda: (False, "no Java runtime on the PATH"))
    metrics = cmh.selected_metrics(hodosh=False)
    assert "METEOR" not in metrics and "METEOR (NLTK variant)" in metrics
    assert "official METEOR unavailable: no Java runtime on the PATH" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"metric 'METEOR' unavailable \(no Java runtime on the PATH\)"):
        cmh.selected_metrics(only=["METEOR"])
    assert list(cmh.selected_metrics(meteor=False, hodosh=False)) == ["BLEU-1", "BLEU-4", "ROUGE-L", "CIDEr-D"]
