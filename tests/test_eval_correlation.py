"""Human-correlation protocols (Flickr8k-Expert / CF), τ variants, pairwise / FOIL accuracy, and the
real-data experiment."""
from __future__ import annotations

import collections
import json
import warnings

import numpy as np
import pytest
from scipy import stats

from corpora.base import Caption, Corpus, CrowdJudgment, ExpertJudgment
from evaluation import (
    FoilRecord,
    PairwiseRecord,
    bleu,
    cider_d,
    correlations,
    flickr8k_cf_rows,
    flickr8k_expert_rows,
    foil_accuracy,
    human_correlation,
    kappa_sweep,
    kendall_tau,
    pairwise_accuracy,
    rouge_l,
    score_rows,
    text_metric,
)


def _tau_c_bruteforce(x, y):
    n = len(x)
    P = Q = 0
    for i in range(n):
        for j in range(i + 1, n):
            s = np.sign(x[i] - x[j]) * np.sign(y[i] - y[j])
            P += s > 0
            Q += s < 0
    m = min(len(set(x)), len(set(y)))
    return 2 * m * (P - Q) / (n * n * (m - 1))


def test_tau_variants_vs_scipy_and_bruteforce():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 5, 60).astype(float)
    y = x + rng.integers(0, 3, 60)
    assert kendall_tau(x, y, "b") == pytest.approx(stats.kendalltau(x, y, variant="b").statistic)
    assert kendall_tau(x, y, "c") == pytest.approx(_tau_c_bruteforce(x, y))
    c = correlations(x, y)
    assert set(c) == {"tau_b", "tau_c", "spearman", "pearson"}
    assert c["pearson"] == pytest.approx(np.corrcoef(x, y)[0, 1])
    with pytest.raises(ValueError, match="variant"):
        kendall_tau(x, y, "a")
    with pytest.raises(ValueError, match="differ in length"):
        correlations(x, y[:-1])
    with pytest.raises(ValueError, match="NaN"):
        correlations(np.r_[x[:-1], np.nan], y)
    with pytest.raises(ValueError, match=r"y\[0\] is -inf"):
        correlations(x, np.r_[-np.inf, y[1:]])        # Pearson would be NaN


def _toy_corpus():
    caps = {}
    for im, texts in {"i1": ["a dog runs", "a brown dog", "dog on grass"],
                      "i2": ["a man rides a bike", "a cyclist", "man on a bike"]}.items():
        caps[im] = [Caption(id=f"{im}#{k}", image_id=im, index=k, text=t) for k, t in enumerate(texts)]
    expert = [
        ExpertJudgment("i1", "i2#0", (1, 1, 2)),
        ExpertJudgment("i1", "i1#1", (4, 4, 4)),   # own caption -> skipped
        ExpertJudgment("i2", "i2#2", (4, 3, 4)),   # own caption -> skipped
        ExpertJudgment("i2", "i1#0", (1, 2, 1)),
        ExpertJudgment("i1", "i1#2", (3, 3, 4)),   # own caption -> skipped
    ]
    crowd = [
        CrowdJudgment("i1", "i1#0", 1.0, 3, 0),    # own caption -> removed from references
        CrowdJudgment("i1", "i2#1", 0.0, 0, 3),
        CrowdJudgment("i2", "i1#2", 1 / 3, 1, 2),
    ]
    return Corpus(name="toy", image_ids=("i1", "i2"), captions=caps, splits={"test": ("i1", "i2")},
                  expert=tuple(expert), crowd=tuple(crowd))


def test_expert_protocol_rows():
    rows = flickr8k_expert_rows(_toy_corpus())
    # 5 judged pairs, 3 are own captions (ids i1#1, i2#2, i1#2) -> 2 kept × 3 scores
    assert rows.n_skipped_pairs == 3
    assert len(rows) == 6 and rows.n_pairs == 2
    np.testing.assert_array_equal(rows.human, [1, 1, 2, 1, 2, 1])
    assert rows.references[0] == ["a dog runs", "a brown dog", "dog on grass"]
    assert rows.candidates[0] == "a man rides a bike"
    calls = []

    def scorer(ims, cands, refs):
        calls.append(len(cands))
        return np.arange(len(cands), dtype=float)

    s = score_rows(rows, scorer)
    assert calls == [2]  # one call, once per distinct pair
    np.testing.assert_array_equal(s, [0, 0, 0, 1, 1, 1])


def test_cf_protocol_rows():
    rows = flickr8k_cf_rows(_toy_corpus())
    assert len(rows) == 3
    np.testing.assert_allclose(rows.human, [1.0, 0.0, 1 / 3])
    # default rule "image" (CLIPScore's data): i1's judged own caption leaves every row of i1
    assert rows.references[0] == ["a brown dog", "dog on grass"]
    assert rows.references[1] == ["a brown dog", "dog on grass"]
    assert rows.references[2] == ["a man rides a bike", "a cyclist", "man on a bike"]
    per_row = flickr8k_cf_rows(_toy_corpus(), references="row")
    assert per_row.references[0] == ["a brown dog", "dog on grass"]  # own caption removed from its row only
    assert per_row.references[1] == ["a dog runs", "a brown dog", "dog on grass"]
    assert per_row.references[2] == rows.references[2]
    np.testing.assert_array_equal(per_row.human, rows.human)
    assert rows.items_digest() != per_row.items_digest()   # the cache keys of the two rules differ
    with pytest.raises(ValueError, match="references must be one of"):
        flickr8k_cf_rows(_toy_corpus(), references="per-image")
    out = human_correlation(rows, text_metric(lambda c, r: bleu(c, r, n=1)[:, 0]))
    assert out["n"] == 3 and -1 <= out["tau_b"] <= 1
    with pytest.raises(ValueError, match="NaN"):
        score_rows(rows, lambda i, c, r: np.full(len(c), np.nan))
    with pytest.raises(ValueError, match="returned 1 scores"):
        score_rows(rows, lambda i, c, r: np.zeros(1))


def test_cf_own_caption_by_text_and_no_references_left():
    c = _toy_corpus()
    caps = dict(c.captions)
    # i2#1 has the same text (up to case / spaces) as i1#1: judged for i1, it is one of i1's captions
    caps["i2"] = [caps["i2"][0], Caption(id="i2#1", image_id="i2", index=1, text="A  Brown dog"), caps["i2"][2]]
    crowd = (CrowdJudgment("i1", "i2#1", 1.0, 3, 0), CrowdJudgment("i1", "i2#0", 0.0, 0, 3))
    text_twin = Corpus(name="twin", image_ids=c.image_ids, captions=caps, splits=c.splits, crowd=crowd)
    rows = flickr8k_cf_rows(text_twin)
    assert rows.references == [["a dog runs", "dog on grass"]] * 2
    assert flickr8k_cf_rows(text_twin, references="row").references[1] == ["a dog runs", "a brown dog", "dog on grass"]
    # two captions with the same text: a judgment removes one (the id match, else the first text match),
    # as list.remove in CLIPScore's script; a second judgment of that text removes the other
    dup = {"i1": [Caption(id=f"i1#{k}", image_id="i1", index=k, text=t) for k, t in
                  enumerate(["x y", "X y", "z", "w"])], "i2": [Caption(id="i2#0", image_id="i2", index=0, text="x  y")]}
    one = Corpus(name="dup", image_ids=("i1", "i2"), captions=dup, splits=c.splits,
                 crowd=(CrowdJudgment("i1", "i2#0", 1.0, 3, 0), CrowdJudgment("i1", "i1#3", 0.0, 0, 3)))
    assert flickr8k_cf_rows(one).references == [["X y", "z"]] * 2
    assert flickr8k_cf_rows(one, references="row").references == [["X y", "z", "w"], ["x y", "X y", "z"]]
    two = Corpus(name="dup2", image_ids=("i1", "i2"), captions=dup, splits=c.splits,
                 crowd=(CrowdJudgment("i1", "i1#1", 1.0, 3, 0), CrowdJudgment("i1", "i2#0", 0.0, 0, 3)))
    assert flickr8k_cf_rows(two).references == [["z", "w"]] * 2   # "X y" takes i1#0, then "x  y" i1#1
    # a caption already removed by another judgment's text is not removed again by its own id
    three = Corpus(name="dup3", image_ids=("i1", "i2"), captions=dup, splits=c.splits,
                   crowd=(CrowdJudgment("i1", "i2#0", 1.0, 3, 0), CrowdJudgment("i1", "i1#0", 0.0, 0, 3)))
    assert flickr8k_cf_rows(three).references == [["z", "w"]] * 2
    # every caption of i1 judged for i1: nothing left under the image rule, the row rule still works
    all_own = Corpus(name="all", image_ids=c.image_ids, captions=c.captions, splits=c.splits,
                     crowd=tuple(CrowdJudgment("i1", f"i1#{k}", 1.0, 3, 0) for k in range(3)))
    with pytest.raises(ValueError, match=r"image 'i1'.*no references left.*references='row', --cf-references row"):
        flickr8k_cf_rows(all_own)
    assert [len(r) for r in flickr8k_cf_rows(all_own, references="row").references] == [2, 2, 2]
    # the main job reports it as a pipeline error (one "error:" line), not a traceback
    from experiments.errors import PipelineError
    from experiments.human_stage import human_correlation_table

    with pytest.raises(PipelineError, match="Flickr8k-CF protocol: .*image 'i1'.*no references left"):
        human_correlation_table(all_own, {})


def test_protocols_need_judgments():
    c = _toy_corpus()
    bare = Corpus(name="bare", image_ids=c.image_ids, captions=c.captions, splits=c.splits)
    with pytest.raises(ValueError, match="expert"):
        flickr8k_expert_rows(bare)
    with pytest.raises(ValueError, match="crowd"):
        flickr8k_cf_rows(bare)


def test_pairwise_and_foil_accuracy():
    # toy scorer: number of words shared with the references
    def overlap(ims, cands, refs):
        return np.array([len(set(c.split()) & set(" ".join(r).split())) for c, r in zip(cands, refs)], float)

    recs = [
        PairwiseRecord("i", "a dog runs", "a cat sleeps", ("a dog runs fast", "dog running"), 0, "HC"),
        PairwiseRecord("i", "red car", "a dog", ("a dog", "the dog"), 1, "HI"),
        PairwiseRecord("i", "x", "y", ("z",), 0, "HI"),   # tie -> counts 1/2
    ]
    out = pairwise_accuracy(recs, overlap)
    assert out["accuracy"] == pytest.approx(100 * 2.5 / 3)
    assert out["per_category"] == {"HC": 100.0, "HI": 75.0}
    s1 = pairwise_accuracy(recs, overlap, n_refs=1, n_draws=4, seed=5)
    s2 = pairwise_accuracy(recs, overlap, n_refs=1, n_draws=4, seed=5)
    assert s1 == s2 and len(s1["per_draw"]) == 4
    with pytest.raises(ValueError, match="preferred"):
        pairwise_accuracy([PairwiseRecord("i", "a", "b", ("c",), 2)], overlap)
    for kw, match in (({"n_refs": 1, "n_draws": 0}, "n_draws"), ({"n_refs": 0}, "n_refs"), ({"n_refs": 1.5}, "n_refs")):
        with pytest.raises(ValueError, match=match):
            pairwise_accuracy(recs, overlap, **kw)

    foils = [FoilRecord("i", "a dog on grass", "a cat on grass", ("a dog lies on the grass",)),
             FoilRecord("i", "a man", "a woman", ("a person",))]   # tie -> failure
    assert foil_accuracy(foils, overlap) == {"accuracy": 50.0, "n": 2}
    with pytest.raises(ValueError, match="n_refs"):
        foil_accuracy(foils, overlap, n_refs=0)


def test_pairwise_and_foil_accuracy_reject_bad_scorer_output():
    recs = [PairwiseRecord("i", "a dog", "a cat", ("a dog",), 0, "HC"),
            PairwiseRecord("i", "red car", "a dog", ("a dog",), 1, "HI")]
    foils = [FoilRecord("i", "a dog", "a cat", ("a dog",)), FoilRecord("i", "a man", "a woman", ("a man",))]

    def scalar(ims, cands, refs):          # broadcasts silently if not checked
        return 0.5

    def too_many(ims, cands, refs):
        return np.zeros(len(cands) + 1)

    def with_nan(ims, cands, refs):
        out = np.arange(len(cands), dtype=float)
        out[-1] = np.nan
        return out

    def with_inf(ims, cands, refs):
        return np.full(len(cands), np.inf)

    for fn in (lambda f: pairwise_accuracy(recs, f), lambda f: pairwise_accuracy(recs, f, n_refs=1),
               lambda f: foil_accuracy(foils, f)):
        for bad in (scalar, too_many):
            with pytest.raises(ValueError, match=r"score_fn returned \d+ score\(s\) for 2"):
                fn(bad)
        for bad in (with_nan, with_inf):
            with pytest.raises(ValueError, match="score_fn returned .*non-finite"):
                fn(bad)
    # a column vector with one score per record is accepted
    col = lambda ims, cands, refs: np.arange(len(cands), dtype=float)[:, None]  # noqa: E731
    assert pairwise_accuracy(recs, col)["n"] == 2
    assert foil_accuracy(foils, col)["n"] == 2


def test_kappa_sweep():
    from sklearn.metrics import cohen_kappa_score

    metric = np.array([0.1, 0.4, 0.5, 0.9, 0.8, 0.2, 0.7, 0.3])
    human = np.array([1, 2, 3, 4, 4, 1, 2, 3])
    out = kappa_sweep(metric, human, human_threshold=3, metric_thresholds=[0.5, 0.75])
    assert [o["threshold"] for o in out] == [0.5, 0.75]
    assert out[0]["kappa"] == pytest.approx(cohen_kappa_score(metric >= 0.5, human >= 3))
    assert out[1]["kappa"] == pytest.approx(cohen_kappa_score(metric >= 0.75, human >= 3))
    rm = kappa_sweep(metric, human, human_threshold=3)[0]  # rate-matched: 4 of 8 positive
    assert rm["metric_positive_rate"] == rm["human_positive_rate"] == 0.5


# ----------------------------------------------------------------------------------------- real data
@pytest.fixture(scope="module")
def flickr8k(flickr8k_dir):
    from corpora.flickr8k import load_flickr8k

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_flickr8k(flickr8k_dir)


def test_real_protocol_row_counts(flickr8k):
    e = flickr8k_expert_rows(flickr8k)
    c = flickr8k_cf_rows(flickr8k)
    assert len(flickr8k.expert) == 5822
    assert e.n_skipped_pairs == 158 and e.n_pairs == 5664 and len(e) == 16992
    assert len(c) == 47830
    assert all(len(r) == 5 for r in e.references)
    # 723 rows judge one of their image's own captions (721 by id, 2 more by identical text); removed
    # from every row of their image, as in CLIPScore's crowdflower_flickr8k.json: 36,190 rows lose one or
    # two references (two: images with two judged own captions)
    c_row = flickr8k_cf_rows(flickr8k, references="row")
    assert sum(len(r) < 5 for r in c_row.references) == 723 and all(len(r) >= 4 for r in c_row.references)
    counts = collections.Counter(len(r) for r in c.references)
    assert counts == {5: 11640, 4: 36100, 3: 90}
    # an image whose captions #1 and #2 have the same text, #2 judged for it: one copy stays a reference
    rugby = [r for i, r in zip(c.image_ids, c.references) if i == "3262075846_5695021d84.jpg"]
    assert len(rugby) == 30 and all(r.count("A group of men are playing rugby .") == 1 for r in rugby)
    # CLIPScore (Hessel et al. 2021, Table 1) Flickr8k-CF τ-b: BLEU-1 17.9, BLEU-4 16.9, ROUGE-L 19.9,
    # CIDEr 24.6 — reproduced to the decimal with the image rule, not with the row rule
    ims, cands, refs = c.unique_items()
    b14 = bleu(cands, refs, n=4)
    cf = {"BLEU-1": b14[:, 0], "BLEU-4": b14[:, 3], "ROUGE-L": rouge_l(cands, refs), "CIDEr-D": cider_d(cands, refs)}
    got = {k: round(100 * kendall_tau(v[c.pair_index], c.human, "b"), 1) for k, v in cf.items()}
    assert got == {"BLEU-1": 17.9, "BLEU-4": 16.9, "ROUGE-L": 19.9, "CIDEr-D": 24.6}
    ims, cands, refs = c_row.unique_items()
    assert round(100 * kendall_tau(cider_d(cands, refs)[c_row.pair_index], c_row.human, "b"), 1) == 25.5
    # CLIPScore (Hessel et al. 2021, Table 1) Flickr8k-Expert τ-c: BLEU-1 32.3, BLEU-4 30.8, ROUGE-L 32.3,
    # CIDEr 43.9 — reproduced to the decimal
    ims, cands, refs = e.unique_items()
    b14 = bleu(cands, refs, n=4)
    ex = {"BLEU-1": b14[:, 0], "BLEU-4": b14[:, 3], "ROUGE-L": rouge_l(cands, refs), "CIDEr-D": cider_d(cands, refs)}
    got = {k: round(100 * kendall_tau(v[e.pair_index], e.human, "c"), 1) for k, v in ex.items()}
    assert got == {"BLEU-1": 32.3, "BLEU-4": 30.8, "ROUGE-L": 32.3, "CIDEr-D": 43.9}


def test_metric_list_keeps_names_that_contain_commas():
    from experiments.caption_metrics_vs_humans import METRIC_NAMES, split_metric_list

    assert split_metric_list("BLEU-4,CIDEr-D") == ["BLEU-4", "CIDEr-D"]
    assert split_metric_list("Hodosh BLEU (unigram, pre),BLEU-1, Hodosh ROUGE (unigram)") == [
        "Hodosh BLEU (unigram, pre)", "BLEU-1", "Hodosh ROUGE (unigram)"]
    assert split_metric_list(",".join(METRIC_NAMES)) == list(METRIC_NAMES)
    assert split_metric_list("BLEU-4,nonsense") == ["BLEU-4", "nonsense"]     # left for the error message
    assert split_metric_list("bleu-4, cider-d,hodosh bleu (UNIGRAM, pre)") == [
        "BLEU-4", "CIDEr-D", "Hodosh BLEU (unigram, pre)"]                     # any case


def test_experiment_metrics_excluded_by_option_named_in_error(capsys, tmp_path):
    from experiments.caption_metrics_vs_humans import METEOR_NAME, main, metric_table

    missing = str(tmp_path / "no-such-flickr8k")   # the usage error must come before the corpus is read
    cases = [
        (["--no-hodosh", "--metrics", "Hodosh BLEU (unigram)"], ["excluded by --no-hodosh"]),
        (["--no-hodosh", "--metrics", "BLEU-4,Hodosh BLEU (unigram, pre)"], ["excluded by --no-hodosh"]),
        (["--no-meteor", "--metrics", METEOR_NAME], ["excluded by --no-meteor"]),
        (["--no-meteor", "--no-hodosh", "--metrics", f"{METEOR_NAME},Hodosh ROUGE (unigram),BLEU-9"],
         ["excluded by --no-meteor", "excluded by --no-hodosh", "unknown metric(s) ['BLEU-9']"]),
    ]
    for opts, expected in cases:
        with pytest.raises(SystemExit) as exc:
            main(["--data", missing, "--no-cache", *opts])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        for e in expected:
            assert e in err
        if "BLEU-9" not in opts[-1]:
            assert "unknown metric" not in err
    # the library function says the same, without touching the corpus
    with pytest.raises(ValueError, match="excluded by --no-hodosh"):
        metric_table(None, meteor=False, hodosh=False, only=["Hodosh ROUGE (unigram, pre)"])
    with pytest.raises(ValueError, match="excluded by --no-meteor"):
        metric_table(None, meteor=False, only=[METEOR_NAME])


def test_experiment_metric_list_without_names_is_an_error(capsys, tmp_path):
    """``--metrics ","`` or ``""`` names no metric: a usage error naming the option (the main job's list
    rule, one parser for both command lines), not a run of every metric."""
    from experiments.caption_metrics_vs_humans import main
    from experiments.errors import PipelineError
    from experiments.options import parse_list
    from neural.registry import scorer_names

    missing = str(tmp_path / "no-such-flickr8k")   # the usage error must come before the corpus is read
    for value in (",", "", " , "):
        with pytest.raises(SystemExit) as exc:
            main(["--data", missing, "--no-cache", "--metrics", value])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"--metrics: no names in {value!r}" in err, err
        with pytest.raises(PipelineError, match=f"--metrics: no names in {value!r}"):   # the main job's rule
            parse_list(value, (), scorer_names(), "--metrics")


def test_experiment_json(flickr8k_dir, capsys, tmp_path):
    from experiments.caption_metrics_vs_humans import main

    assert main(["--data", str(flickr8k_dir), "--json", "--no-meteor", "--metrics", "BLEU-4,CIDEr-D",
                 "--cache-dir", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"BLEU-4", "CIDEr-D"}
    for v in out.values():
        assert set(v) == {"expert_tau_b", "expert_tau_c", "cf_tau_b", "cf_tau_c", "n_expert", "n_cf",
                          "cf_references"}
        assert v["n_expert"] == 16992 and v["n_cf"] == 47830 and v["cf_references"] == "image"
    assert out["CIDEr-D"]["expert_tau_c"] > out["BLEU-4"]["expert_tau_c"]
    assert out["BLEU-4"]["expert_tau_c"] == pytest.approx(30.8, abs=0.3)
    # cached re-run gives the same object
    assert main(["--data", str(flickr8k_dir), "--json", "--no-meteor", "--metrics", "BLEU-4,CIDEr-D",
                 "--cache-dir", str(tmp_path)]) == 0
    assert json.loads(capsys.readouterr().out) == out
    with pytest.raises(SystemExit):
        main(["--data", str(flickr8k_dir), "--metrics", "BLEU-9", "--no-cache"])


def test_experiment_without_expert_file_reports_cf_and_bad_folders_fail_cleanly(flickr8k_dir, tmp_path, capsys):
    """No ExpertAnnotations.txt: the CF columns are still computed and the Expert ones say which file is
    missing; a missing or broken folder is one 'error:' line, exit 2, no traceback."""
    from experiments.caption_metrics_vs_humans import main

    root = tmp_path / "noexpert"
    (root / "Flickr8k_text").mkdir(parents=True)
    for p in (flickr8k_dir / "Flickr8k_text").iterdir():
        if p.name != "ExpertAnnotations.txt":
            (root / "Flickr8k_text" / p.name).symlink_to(p)
    assert main(["--data", str(root), "--json", "--no-meteor", "--metrics", "BLEU-4", "--no-cache",
                 "--no-progress"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["BLEU-4"]["expert_tau_c"] is None and out["BLEU-4"]["n_expert"] is None
    assert out["BLEU-4"]["n_cf"] == 47830 and out["BLEU-4"]["cf_tau_b"] == 16.9   # CLIPScore, Table 1
    assert main(["--data", str(root), "--json", "--no-meteor", "--metrics", "BLEU-4", "--no-cache",
                 "--no-progress", "--cf-references", "row"]) == 0
    row = json.loads(capsys.readouterr().out)["BLEU-4"]
    assert row["cf_tau_b"] == 17.3 and row["cf_references"] == "row"
    assert main(["--data", str(root), "--no-meteor", "--metrics", "BLEU-4", "--no-cache", "--no-progress",
                 "--kappa"]) == 0
    table = capsys.readouterr().out
    assert "Flickr8k-Expert: – (no ExpertAnnotations.txt)" in table
    assert "Cohen's κ needs the expert judgments (ExpertAnnotations.txt)" in table

    assert main(["--data", str(tmp_path / "nope"), "--no-cache"]) == 2
    assert "error: --data" in capsys.readouterr().err
    broken = tmp_path / "broken"
    (broken / "Flickr8k_text").mkdir(parents=True)
    for p in (flickr8k_dir / "Flickr8k_text").iterdir():
        if p.name != "CrowdFlowerAnnotations.txt":
            (broken / "Flickr8k_text" / p.name).symlink_to(p)
    (broken / "Flickr8k_text" / "CrowdFlowerAnnotations.txt").write_text(
        "1056338697_4f7d7ce270.jpg\t2718495608_d8533e3ac5.jpg#2\tnot-a-number\t1\t2\n", encoding="utf-8")
    assert main(["--data", str(broken), "--no-cache"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "CrowdFlowerAnnotations.txt" in err and ":1" in err


def test_correlations_tau_c_is_stuarts_tau_c_with_ties_and_non_square_table():
    # x has 3 distinct values, y has 5 (non-square contingency), both with ties: τ-b ≠ τ-c
    x = np.array([1, 1, 2, 2, 2, 3, 3, 1, 3, 2, 1, 3], dtype=float)
    y = np.array([1, 2, 2, 3, 5, 4, 5, 1, 3, 4, 2, 5], dtype=float)
    c = correlations(x, y)
    assert c["tau_c"] == pytest.approx(_tau_c_bruteforce(x, y), rel=1e-12)
    assert c["tau_b"] == pytest.approx(stats.kendalltau(x, y, variant="b").statistic, rel=1e-12)
    assert abs(c["tau_b"] - c["tau_c"]) > 1e-3
    assert c["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic)


def test_kappa_sweep_rate_matched_threshold_with_unbalanced_human_labels():
    from sklearn.metrics import cohen_kappa_score

    metric = np.array([0.1, 0.4, 0.5, 0.9, 0.8, 0.2, 0.7, 0.3])
    human = np.array([1, 2, 4, 4, 1, 1, 3, 2])      # 3 of 8 at or above 3
    (rm,) = kappa_sweep(metric, human, human_threshold=3)
    assert rm["human_positive_rate"] == 3 / 8
    assert rm["metric_positive_rate"] == 3 / 8      # the same share: the 3 highest metric scores
    mb = metric >= rm["threshold"]
    np.testing.assert_array_equal(np.flatnonzero(mb), [3, 4, 6])   # metric 0.9, 0.8, 0.7
    assert rm["kappa"] == pytest.approx(cohen_kappa_score(mb, human >= 3))


@pytest.mark.parametrize("label, rate", [(4, 1.0), (1, 0.0)])
def test_kappa_sweep_rate_matched_when_every_or_no_row_is_human_positive(label, rate):
    metric = np.array([0.1, 0.2, 0.3, 0.4])
    (rm,) = kappa_sweep(metric, np.full(4, label), human_threshold=3)
    assert rm["human_positive_rate"] == rm["metric_positive_rate"] == rate
    assert np.isfinite(rm["threshold"]) and rm["kappa"] == 1.0


def test_experiment_missing_stop_words_is_one_error_line(flickr8k_dir, tmp_path, capsys, monkeypatch):
    """The Hodosh metrics' stop words go through corpora.nltk_resources (found, or downloaded when online);
    when they cannot be had the command prints that resource's message as one 'error:' line, exit 2."""
    import corpora.nltk_resources as res
    from evaluation import caption_metrics
    from experiments.caption_metrics_vs_humans import main

    def missing(path, package):
        raise res.MissingResourceError(f"NLTK resource {path!r} not found (test)")

    caption_metrics._stopwords.cache_clear()
    monkeypatch.setattr(res, "nltk_resource", missing)
    try:
        assert main(["--data", str(flickr8k_dir), "--no-meteor", "--metrics", "Hodosh BLEU (unigram, pre)",
                     "--no-cache", "--no-progress"]) == 2
    finally:
        caption_metrics._stopwords.cache_clear()
    err = capsys.readouterr().err
    assert "error: NLTK resource 'corpora/stopwords' not found (test)" in err and "Traceback" not in err
