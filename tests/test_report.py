"""The main job's report writer (``experiments/report.py``) and HTML checker (``experiments/check_report.py``)
on hand-made results: fast, no pipeline run."""
from __future__ import annotations

import json

import numpy as np
import pytest

from experiments.check_report import external_references
from experiments.check_report import main as check_main
from experiments.report import (
    GalleryItem,
    QueryOutcomes,
    bootstrap_ci,
    human_rows,
    recall_curve,
    specificity_rows,
    table_rows,
    write_report,
)

METRICS = {"R@1": 10.0, "R@5": 30.0, "R@10": 50.0, "median_rank": 11.0, "mean_rank": 20.5,
           "S@1": 20.0, "S@5": 40.0, "S@10": 60.0, "R-precision": 15.0, "n_queries": 20, "n_ties": 0}


def _results() -> dict:
    def sysres(family, bump=0.0, marks=None):
        m = {k: (v + bump if k not in ("n_queries", "n_ties") else v) for k, v in METRICS.items()}
        return {"family": family, "annotation": dict(m), "search": dict(m),
                "significance": {"annotation": marks or {}, "search": {}}}

    return {
        "corpus": {"name": "toy", "images": 40, "captions": 200, "splits": {"train": 20, "dev": 10, "test": 10},
                   "pools": {"test": {"images": 10, "captions": 10, "relevant_pairs": 14, "skipped_images": 3}},
                   "skipped_images": 3, "notes": ["a note about the corpus"]},
        "systems": {"TRI5": sysres("classical", 5.0), "NN5_F1^idf": sysres("baseline", marks={"R@1": "**"}),
                    "CLIP-S": sysres("neural", 10.0)},
        "significance_reference": {"annotation": "CLIP-S", "search": "CLIP-S"},
        "human_correlation": {"BLEU-4": {"expert_tau_c": 30.12, "expert_tau_b": 29.9, "expert_rho": 38.0,
                                         "cf_tau_b": 17.3, "n_expert": 100, "n_cf": 50}},
        "specificity": {"CLIP-S": {"SR_pos": 0.625, "SR_neg": 0.5}},
        "timings_s": {"corpus": 0.1, "report": 0.2},
        "provenance": {"seed": 0, "backbone": {"backbone": "tiny-clip(toy, seed=0)", "weights_id": "abc123",
                                               "device": "cpu", "precision": "fp32"}},
    }


def _outcomes(results, seed=0):
    rng = np.random.default_rng(seed)
    return {s: {t: QueryOutcomes(ranks=rng.integers(1, 11, size=10), r_precision=rng.random(10))
                for t in ("annotation", "search")} for s in results["systems"]}


def test_recall_curve_matches_definition():
    ranks = np.array([1, 2, 2, 5, 100, 7])
    c = recall_curve(ranks, kmax=10)
    assert c.shape == (10,)
    for k in range(1, 11):
        assert c[k - 1] == pytest.approx(100.0 * np.mean(ranks <= k))
    assert np.all(np.diff(c) >= 0)
    assert recall_curve(np.array([3]), kmax=3).tolist() == [0.0, 0.0, 100.0]


def test_bootstrap_ci_brackets_the_mean_and_is_seeded():
    v = np.random.default_rng(1).random(200)
    lo, hi = bootstrap_ci(v, seed=3)
    assert lo < v.mean() < hi
    assert (lo, hi) == bootstrap_ci(v, seed=3)
    assert (hi - lo) < 0.2
    assert bootstrap_ci(np.full(50, 0.4)) == pytest.approx((0.4, 0.4))
    assert all(np.isnan(bootstrap_ci(np.array([]))))


def test_tables_order_families_and_carry_significance_markers():
    r = _results()
    header, rows = table_rows(r, ("R@1", "R@5", "R@10", "median_rank"))
    assert header[:2] == ["system", "family"] and len(header) == 2 + 2 * 4
    # baseline → classical → neural; the significance reference is named
    assert [row[0] for row in rows] == ["NN5_F1^idf", "TRI5", "CLIP-S (ref. ann. & sea.)"]
    assert rows[0][2] == "10.0**"                 # significantly different, and worse: no arrow
    assert rows[1][2] == "15.0" and rows[2][2] == "20.0"
    assert all(len(row) == len(header) for row in rows)
    assert header[-1] == "sea. median rank ↓"
    # two-sided tests: a value significantly *better* than the reference's gets ↑ (lower, for ranks)
    import copy

    r2 = copy.deepcopy(r)
    r2["significance_reference"] = {"annotation": "NN5_F1^idf", "search": "CLIP-S"}
    r2["systems"]["TRI5"]["significance"]["annotation"] = {"R@1": "*", "median_rank": "**"}
    r2["systems"]["TRI5"]["annotation"]["median_rank"] = 3.0
    r2["systems"]["NN5_F1^idf"]["annotation"]["median_rank"] = float("nan")
    _, rows2 = table_rows(r2, ("R@1", "R@5", "R@10", "median_rank"))
    tri5 = next(row for row in rows2 if row[0] == "TRI5")
    assert tri5[2] == "15.0*↑" and tri5[5] == "3**"     # the reference's median rank is NaN: no direction
    assert rows2[0][0] == "NN5_F1^idf (ref. ann.)" and rows2[0][5] == "–"
    r2["systems"]["NN5_F1^idf"]["annotation"]["median_rank"] = 11.0
    tri5 = next(row for row in table_rows(r2, ("median_rank",))[1] if row[0] == "TRI5")
    assert tri5[2] == "3**↑"
    h, hr = human_rows(r)
    assert h[0] == "scorer" and "Expert τ-c" in h and "CF τ-b" in h
    assert hr[0][0] == "BLEU-4" and "30.1" in hr[0]
    sh, sr = specificity_rows(r)
    assert sr == [["CLIP-S", "62.5", "50.0"]]


def test_write_report_files_are_consistent_and_self_contained(tmp_path):
    r = _results()
    img = (np.arange(32 * 48 * 3) % 251).astype(np.uint8).reshape(32, 48, 3)
    g = GalleryItem(image=img, image_id="q.jpg", gold_caption="a <b>dog</b> & a cat",
                    columns={"TRI5 (classical)": [("a dog", True), ("a cat", False)]})
    paths = write_report(r, tmp_path, outcomes=_outcomes(r), gallery=[g], seed=0)
    assert json.loads(paths["results"].read_text(encoding="utf-8")) == r
    md = paths["md"].read_text(encoding="utf-8")
    html_text = paths["html"].read_text(encoding="utf-8")
    assert "Images skipped because they are missing on disk: 3" in md
    assert "a note about the corpus" in md
    for name in r["systems"]:
        assert name in md and name in html_text
    for section in ("Retrieval", "Relevance-based metrics", "Correlation with human judgments",
                    "Specificity rate"):
        assert section in md and section in html_text
    for plot in ("recall", "rank_cdf", "r_precision"):
        assert (tmp_path / "plots" / f"{plot}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert external_references(html_text) == []
    assert html_text.count("data:image/png;base64,") == 4  # three plots + the gallery thumbnail
    assert "<b>dog</b>" not in html_text and "&lt;b&gt;dog&lt;/b&gt;" in html_text  # captions escaped
    assert "**TRI5 (classical)** top-2:" in md  # as many as the column lists
    assert "ann. median rank" in md and "median_rank" not in md.split("## Retrieval")[1].split("\n\n")[2]
    # The same inputs give byte-identical files (seeded bootstrap, no timestamps in the report).
    again = write_report(r, tmp_path / "again", outcomes=_outcomes(r), gallery=[g], seed=0)
    assert again["md"].read_text(encoding="utf-8") == md
    assert again["results"].read_bytes() == paths["results"].read_bytes()
    # A later report without plots in the same folder does not leave the earlier run's plots behind.
    write_report(r, tmp_path)
    assert not list((tmp_path / "plots").glob("*.png"))


def test_summary_names_the_neural_backbone(tmp_path):
    """The backbone line uses the provenance dict the pipeline stores (``Backbone.provenance()``, whose
    name key is ``"backbone"``)."""
    r = _results()
    paths = write_report(r, tmp_path)
    md = paths["md"].read_text(encoding="utf-8")
    line = next(ln for ln in md.splitlines() if "Neural backbone" in ln)
    assert "tiny-clip(toy, seed=0)" in line, line
    assert "abc123" in line and "fp32" in line


def test_external_references_flags_everything_but_data_uris_and_anchors(tmp_path):
    ok = "<img src='data:image/png;base64,AAAA'><a href=\"#top\">x</a><a href=''>y</a>"
    assert external_references(ok) == []
    bad = ("<img src=\"plots/recall.png\"><link href='https://cdn.example.org/x.css'>"
           "<script SRC = 'file:///etc/passwd'></script>")
    assert external_references(bad) == ["plots/recall.png", "https://cdn.example.org/x.css", "file:///etc/passwd"]
    page = tmp_path / "r.html"
    page.write_text("<html><body><img src='x.png'></body></html>", encoding="utf-8")
    assert check_main([str(page)]) == 1
    assert check_main([str(tmp_path / "absent.html")]) == 1


def test_check_report_names_a_failing_browser_without_traceback(tmp_path, monkeypatch, capsys):
    """A Chromium that exits with an error gives one ``error:`` line and exit status 1."""
    import os
    import stat

    fake = tmp_path / "bin" / "chromium"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'cannot open display' >&2\nexit 7\n", encoding="utf-8")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    page = tmp_path / "r.html"
    page.write_text("<html><body><p>ok</p></body></html>", encoding="utf-8")
    assert check_main([str(page)]) == 1
    err = capsys.readouterr().err
    assert f"error: {page}: rendering failed: Chromium failed (exit 7)" in err and "cannot open display" in err


def test_check_report_refuses_files_that_are_not_html(tmp_path, capsys):
    """A binary file or a text file without <html> is one ``error:`` line, exit 1 (not a traceback, nor
    "self-contained")."""
    png = tmp_path / "report.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n\xff\x00")
    txt = tmp_path / "notes.txt"
    txt.write_text("just text", encoding="utf-8")
    for f, needle in ((png, "not a UTF-8 text file"), (txt, "not an HTML document")):
        assert check_main([str(f)]) == 1
        err = capsys.readouterr().err
        assert f"error: {f}: {needle}" in err and "Traceback" not in err


def test_report_says_what_the_numbers_are_and_writes_strict_json(tmp_path):
    """Captions name the pool, the tasks and the reference rule; a corpus whose only relevant pairs are the
    originals says S@k = R@k; the run line gives seed, permutations and command; the gallery image is in
    report.md too; a NaN or infinite correlation is written as null; correlations are rounded once."""
    r = _results()
    r["corpus"]["pools"]["test"]["relevant_pairs"] = 10            # = images: originals only
    r["provenance"].update(permutations=10000, command="flickr8k_kcca.py --seed 0")
    r["human_correlation"]["BLEU-4"]["expert_rho"] = 20.6500        # 20.65 → 20.6 (one rounding, half-even)
    r["human_correlation"]["CLIP-S"] = {"expert_tau_c": float("nan"), "n_expert": 100}
    r["human_correlation"]["PAC-S"] = {"expert_tau_c": np.float32("inf"), "n_expert": np.int64(100)}
    img = np.zeros((8, 8, 3), np.uint8)
    g = GalleryItem(image=img, image_id="q.jpg", gold_caption="a dog", columns={"TRI5 (classical)": [("a dog", True)]})
    paths = write_report(r, tmp_path, gallery=[g])
    md = paths["md"].read_text(encoding="utf-8")
    text = paths["results"].read_text(encoding="utf-8")
    assert "NaN" not in text and json.loads(text)["human_correlation"]["CLIP-S"]["expert_tau_c"] is None
    assert json.loads(text)["human_correlation"]["PAC-S"] == {"expert_tau_c": None, "n_expert": 100}
    assert "Test pool: 10 images × 10 captions, 20 queries per task." in md
    assert "ann. = image annotation" in md and "the system with the highest R@10" in md and "two-sided" in md
    assert "so S@k equals R@k" in md
    assert "Run: seed 0; 10,000 permutations per randomisation test; command `flickr8k_kcca.py --seed 0`" in md
    assert "<code>flickr8k_kcca.py --seed 0</code>" in paths["html"].read_text(encoding="utf-8")
    assert "![query image](plots/gallery-0.png)" in md and (tmp_path / "plots" / "gallery-0.png").is_file()
    assert "; total before the report 0.3" in md
    bleu = next(ln for ln in md.splitlines() if ln.startswith("| BLEU-4"))
    assert "| 38.0 |" not in bleu and "| 20.6 |" in bleu
    write_report(r, tmp_path)                                        # no gallery: its old image is removed
    assert not (tmp_path / "plots" / "gallery-0.png").exists()
    r["provenance"]["significance_reference_rule"] = "chosen (--reference)"
    md = write_report(r, tmp_path)["md"].read_text(encoding="utf-8")
    assert "the system chosen with --reference" in md and "highest R@10" not in md
    assert "R-precision equals R@1 in both tasks" in md
