"""The paired image bootstrap of correlation differences (evaluation.correlation_tests), the "Paper
effects" block (experiments.paper_effects) and the standard benchmarks in the main job
(experiments.benchmark_stage): on constructed data, and on one small main-job run given real-format
benchmark files (Composite with its images, FOIL without, a malformed Pascal-50S)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from corpora.cache import DiskCache
from evaluation.caption_metrics import bleu
from evaluation.correlation_tests import GroupedKendall, bootstrap_pvalue, paired_bootstrap_correlation
from experiments.benchmark_stage import FolderImageScorer, find_benchmark_image
from experiments.human_stage import ngram_scorers
from experiments.paper_effects import paper_effects, take_specificity_hits, take_student_timing

REPO = Path(__file__).resolve().parent.parent


def _judged(n_images: int = 40, seed: int = 0):
    """Rows grouped by image (1–6 judged rows each), 1–4 human scores, a good and a noisy scorer."""
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"im{i}.jpg" for i in range(n_images)], rng.integers(1, 7, n_images))
    h = rng.integers(1, 5, groups.size).astype(float)
    good = h + rng.normal(0, 0.7, h.size)
    noisy = np.round(h + rng.normal(0, 3.0, h.size))
    return groups, h, good, noisy


# ---------------------------------------------------------------------------------------------- bootstrap
@pytest.mark.parametrize("variant", ["b", "c"])
def test_identical_scorers_give_zero_difference_and_p_one(variant):
    groups, h, good, _ = _judged()
    r = paired_bootstrap_correlation(good, good.copy(), h, groups, variant=variant, n_resamples=300, seed=1)
    assert r.delta == 0.0 and r.pvalue == 1.0 and r.ci == (0.0, 0.0) and r.marker == ""


@pytest.mark.parametrize("variant", ["b", "c"])
def test_observed_taus_are_scipys_and_a_better_scorer_gets_a_small_p(variant):
    groups, h, good, noisy = _judged()
    r = paired_bootstrap_correlation(good, noisy, h, groups, variant=variant, n_resamples=500, seed=0)
    assert r.tau_a == pytest.approx(stats.kendalltau(good, h, variant=variant).statistic, abs=1e-12)
    assert r.tau_b == pytest.approx(stats.kendalltau(noisy, h, variant=variant).statistic, abs=1e-12)
    assert r.delta > 0.2 and r.ci[0] > 0 and r.pvalue <= 2 / 501 + 1e-12 and r.marker == "***"
    # the other way round: the same effect, negative, with the same p
    back = paired_bootstrap_correlation(noisy, good, h, groups, variant=variant, n_resamples=500, seed=0)
    assert back.delta == pytest.approx(-r.delta) and back.pvalue == r.pvalue
    assert back.ci == pytest.approx((-r.ci[1], -r.ci[0]))


def test_same_seed_same_result_other_seed_other_interval():
    groups, h, good, noisy = _judged()
    noisy2 = h + np.random.default_rng(5).normal(0, 1.0, h.size)
    a = paired_bootstrap_correlation(good, noisy2, h, groups, n_resamples=300, seed=3)
    b = paired_bootstrap_correlation(good, noisy2, h, groups, n_resamples=300, seed=3)
    c = paired_bootstrap_correlation(good, noisy2, h, groups, n_resamples=300, seed=4)
    assert a == b
    assert c.delta == a.delta and c.ci != a.ci


@pytest.mark.parametrize("variant", ["b", "c"])
def test_resamples_draw_whole_images(variant):
    """Every resample's τ equals scipy's τ on the rows of the drawn images, each image's rows repeated
    as often as it was drawn (and never a row without the other rows of its image)."""
    groups, h, good, noisy = _judged(n_images=25, seed=2)
    gk = GroupedKendall(h, groups, variant)
    blocks = gk.blocks(noisy)
    counts = gk.resample_counts(6, seed=7)
    assert (counts.sum(axis=1) == 25).all()
    names = np.unique(groups)                   # the resampling units, in GroupedKendall's order
    for r, tau in enumerate(gk.taus(blocks, counts)):
        idx = np.concatenate([np.flatnonzero(groups == names[g]) for g in range(25) for _ in range(counts[r, g])])
        assert tau == pytest.approx(stats.kendalltau(noisy[idx], h[idx], variant=variant).statistic, abs=1e-12)


def test_image_bootstrap_is_wider_than_a_row_bootstrap_when_rows_of_an_image_agree():
    """Three identical rows per judged pair (as the Expert protocol's three scores of one candidate could
    be): resampling images sees 1/3 of the independent units a row bootstrap would pretend to have."""
    rng = np.random.default_rng(0)
    n = 60
    h1 = rng.integers(1, 5, n).astype(float)
    a1, b1 = h1 + rng.normal(0, 1.0, n), h1 + rng.normal(0, 1.3, n)
    groups = np.repeat(np.arange(n), 3)
    per_image = paired_bootstrap_correlation(np.repeat(a1, 3), np.repeat(b1, 3), np.repeat(h1, 3), groups,
                                             n_resamples=400, seed=0)
    per_row = paired_bootstrap_correlation(np.repeat(a1, 3), np.repeat(b1, 3), np.repeat(h1, 3),
                                           np.arange(3 * n), n_resamples=400, seed=0)
    assert per_image.delta == per_row.delta
    assert per_image.ci[1] - per_image.ci[0] > 1.3 * (per_row.ci[1] - per_row.ci[0])


def _reference_blocks(x, h, groups):
    """The per-image pair sums by definition: every ``n × n`` sign, summed per pair of images (O(n²))."""
    names, g = np.unique(np.asarray([str(v) for v in groups]), return_inverse=True)
    onehot = np.zeros((x.size, names.size))
    onehot[np.arange(x.size), g] = 1.0
    sx, sh = np.sign(x[:, None] - x[None, :]), np.sign(h[:, None] - h[None, :])
    return onehot.T @ (sx * sh) @ onehot, onehot.T @ np.abs(sx) @ onehot


@pytest.mark.parametrize("n_images, levels, seed", [
    (40, 4, 0),         # few human levels: divide and conquer over them
    (150, 12, 1),       # more levels: divide and conquer at the top, pairs summed directly below
    (30, None, 2),      # continuous human scores: pairs summed directly
    (200, 3, 3),        # many images, few levels
])
def test_blocks_equal_the_pairwise_sums_and_scipy(monkeypatch, n_images, levels, seed):
    """The concordance / untied sums are exactly those of all row pairs (ties in both variables), also with
    tiny work chunks; the full sample's τ-b / τ-c are scipy's."""
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"im{i}.jpg" for i in range(n_images)], rng.integers(1, 9, n_images))
    rng.shuffle(groups)
    h = rng.integers(0, levels, groups.size) / max(1, levels - 1) if levels else rng.normal(size=groups.size)
    scorers = [np.round(h + rng.normal(0, 0.5, h.size), 1), rng.integers(0, 3, h.size).astype(float),
               rng.normal(size=h.size)]
    reference = [_reference_blocks(x, h, groups) for x in scorers]
    human_untied = _reference_blocks(h, h, groups)[1]
    for chunk in (4_000_000, 20_000):       # one chunk; many row / column chunks
        monkeypatch.setattr("evaluation.correlation_tests._CHUNK_CELLS", chunk)
        for variant in ("b", "c"):
            gk = GroupedKendall(h, groups, variant)
            assert np.array_equal(gk.human_blocks.untied, human_untied)
            for x, (conc, untied) in zip(scorers, reference):
                b = gk.blocks(x)
                assert np.array_equal(b.concordance, conc) and np.array_equal(b.untied, untied)
                assert b.concordance.dtype == np.float64
                tau = gk.taus(b, np.ones((1, gk.n_groups)))[0]
                assert tau == pytest.approx(stats.kendalltau(x, h, variant=variant).statistic, abs=1e-12)


@pytest.mark.parametrize("variant", ["b", "c"])
def test_comparisons_sharing_one_grouping_equal_separate_ones(variant):
    """One GroupedKendall comparing a scorer with several (its resampled τs kept between comparisons), with
    seeds and resamples changing in between, gives exactly the separately computed results."""
    groups, h, good, noisy = _judged()
    third = np.round(good + np.random.default_rng(9).normal(0, 1.0, h.size))
    gk = GroupedKendall(h, groups, variant)
    blk = {k: gk.blocks(v) for k, v in (("good", good), ("noisy", noisy), ("third", third))}
    scores = {"good": good, "noisy": noisy, "third": third}
    for a, b, r, seed in [("good", "noisy", 200, 0), ("third", "good", 200, 0), ("good", "noisy", 200, 1),
                          ("good", "third", 150, 1), ("noisy", "third", 200, 0)]:
        assert gk.compare(blk[a], blk[b], n_resamples=r, seed=seed) == paired_bootstrap_correlation(
            scores[a], scores[b], h, groups, variant=variant, n_resamples=r, seed=seed)


def test_bootstrap_pvalue_counts_flips_on_the_other_side():
    assert bootstrap_pvalue(0.0, np.ones(9)) == 1.0
    assert bootstrap_pvalue(0.1, np.full(9, 0.2)) == pytest.approx(2 / 10)
    assert bootstrap_pvalue(0.1, np.array([0.2] * 7 + [0.0, -0.1])) == pytest.approx(2 * 3 / 10)
    assert bootstrap_pvalue(-0.1, np.array([np.nan] + [-0.2] * 8)) == pytest.approx(2 * 2 / 10)


def test_bad_inputs_are_refused():
    groups, h, good, _ = _judged()
    with pytest.raises(ValueError, match="variant"):
        GroupedKendall(h, groups, "a")
    with pytest.raises(ValueError, match="one image"):
        GroupedKendall(h, ["x"] * h.size)
    with pytest.raises(ValueError, match="finite"):
        GroupedKendall(h, groups).blocks(np.full(h.size, np.nan))


# ---------------------------------------------------------------------------------------------- effects
class _Rows:
    def __init__(self, groups, human):
        self.image_ids, self.human = list(groups), np.asarray(human)


def test_paper_effects_rows_findings_and_specificity_mcnemar():
    groups, h, good, noisy = _judged()
    bleu4 = noisy.copy()
    bleu4[:3] = np.nan                          # rows a scorer did not see are left out of that pair only
    per_row = {"expert": {"rows": _Rows(groups, h), "scores": {"CLIP-S": good, "BLEU-4": bleu4, "PAC-S": noisy}}}
    spec = {"SPECS": {"SR_pos": 0.9, "SR_neg": 0.5, "hits_pos": [True] * 40 + [False] * 4,
                      "hits_neg": [True, False] * 22},
            "CLIP-S": {"SR_pos": 0.5, "SR_neg": 0.5, "hits_pos": [True, False] * 22, "hits_neg": [True, False] * 22}}
    hits = take_specificity_hits(spec)
    assert spec["SPECS"] == {"SR_pos": 0.9, "SR_neg": 0.5}          # the outcomes leave the results block
    prov = {"lclip_vs_teacher": {"student_params": 40, "teacher_params": 100,
                                 "timing": {"student": {"captions_per_s": 9.0}, "teacher": {"captions_per_s": 5.0}}}}
    student, timing = take_student_timing(prov)
    assert prov == {} and student == {"student_params": 40, "teacher_params": 100, "ratio": 0.4}
    assert timing["L-CLIPScore"]["pair_scoring"]["captions_per_s"] == 9.0
    pe = paper_effects(per_row, hits, student, seed=0, n_resamples=300)
    rows = {(r["effect"], r["measure"]): r for r in pe["rows"]}
    clip_bleu = rows[("CLIP-S vs BLEU-4", "Flickr8k-Expert τ-c")]
    assert clip_bleu["n_rows"] == h.size - 3 and clip_bleu["delta"] > 0 and clip_bleu["p"] < 0.01
    assert clip_bleu["finding"].startswith("Appears: CLIP-S beats BLEU-4")
    pacs = rows[("PAC-S vs CLIP-S", "Flickr8k-Expert τ-c")]
    assert pacs["delta"] < 0 and pacs["finding"].startswith("Does not appear")     # not hidden
    sr_pos, sr_neg = rows[("SPECS vs CLIP-S", "SR_pos (%)")], rows[("SPECS vs CLIP-S", "SR_neg (%)")]
    assert sr_pos["delta"] == pytest.approx(100 * (40 / 44 - 0.5)) and sr_pos["p"] < 0.01
    assert sr_pos["ci"][0] < sr_pos["delta"] < sr_pos["ci"][1] and "mcnemar" in sr_pos["test"]
    assert sr_neg["delta"] == 0 and sr_neg["p"] == 1.0 and sr_neg["finding"].startswith("Does not appear")
    assert pe["lclip_vs_teacher"]["ratio"] == 0.4 and pe["bootstrap"]["unit"] == "judged image"


def test_paper_effects_are_read_from_the_cache_on_a_re_run(tmp_path, monkeypatch):
    """A second run with the same per-row scores, seed and resamples reads every comparison from the cache
    (no bootstrap is built) and returns the same block; other scores or another seed are recomputed."""
    groups, h, good, noisy = _judged()
    per_row = {"expert": {"rows": _Rows(groups, h), "scores": {"CLIP-S": good, "BLEU-4": noisy, "PAC-S": noisy + 1}}}
    cache = DiskCache(tmp_path)
    first = paper_effects(per_row, {}, None, seed=0, n_resamples=200, cache=cache)
    assert first == paper_effects(per_row, {}, None, seed=0, n_resamples=200)        # the same numbers uncached
    assert cache.misses == 2 and cache.hits == 0

    def refuse(*args, **kwargs):
        raise AssertionError("recomputed")

    monkeypatch.setattr("experiments.paper_effects.GroupedKendall", refuse)
    again = DiskCache(tmp_path)
    assert paper_effects(per_row, {}, None, seed=0, n_resamples=200, cache=again) == first
    assert again.hits == 2 and again.misses == 0
    with pytest.raises(AssertionError, match="recomputed"):
        paper_effects(per_row, {}, None, seed=1, n_resamples=200, cache=again)
    per_row["expert"]["scores"]["PAC-S"] = noisy + 2 * (np.arange(h.size) == 0)
    with pytest.raises(AssertionError, match="recomputed"):
        paper_effects(per_row, {}, None, seed=0, n_resamples=200, cache=again)


def test_bleu_1_and_4_scorers_share_one_count_and_equal_bleu():
    """BLEU-1 taken from the 4-order computation is bit-identical to a 1-order BLEU."""
    cands = ["a dog runs on the grass", "two people walk", "a dog", "the the the cat"]
    refs = [["a brown dog is running", "dog on grass"], ["people walking on a beach"], ["a dog runs"],
            ["a cat sits", "the cat"]]
    scorers = ngram_scorers()
    b1, b4 = scorers["BLEU-1"](None, cands, refs), scorers["BLEU-4"](None, cands, refs)
    assert np.array_equal(b1, bleu(cands, refs, n=1)[:, 0]) and np.array_equal(b4, bleu(cands, refs, n=4)[:, 3])
    assert np.array_equal(ngram_scorers(["BLEU-1"])["BLEU-1"](None, cands, refs), b1)
    assert not np.array_equal(b1, b4)


# ---------------------------------------------------------------------------------------------- images
class _Scorer:
    def score(self, images, candidates, references=None):
        return np.array([float(im.mean()) + (len(references[i]) if references else 0) for i, im in enumerate(images)])


class _Pair:
    def __init__(self, use_references):
        self.scorer, self.use_references = _Scorer(), use_references


def test_folder_image_scorer_reads_benchmark_images_or_says_why_not(tmp_path):
    jpg = sorted((Path(os.environ.get("ITR_SHARED", REPO.parent / "shared")) / "data/flickr8k/Flicker8k_Dataset")
                 .glob("*.jpg"))
    if not jpg:
        pytest.skip("the shared Flickr8k JPEGs are not here (set ITR_SHARED)")
    (tmp_path / "flickr8k").mkdir()
    shutil.copy(jpg[0], tmp_path / "flickr8k" / jpg[0].name)
    assert find_benchmark_image(tmp_path, jpg[0].name) == tmp_path / "flickr8k" / jpg[0].name
    assert find_benchmark_image(tmp_path, "flickr8k/" + jpg[0].name) == tmp_path / "flickr8k" / jpg[0].name
    s = FolderImageScorer(_Pair(True), tmp_path, "CLIP-S")
    s.chunk = 1                                  # rows scored one call at a time give the same scores
    out = s([jpg[0].name] * 2, ["a", "b"], [["r"], ["r", "s"]])
    assert out.shape == (2,) and out[1] - out[0] == 1.0                          # references passed on
    with pytest.raises(LookupError, match="1 of the benchmark's images .*first: nope.jpg"):
        s(["nope.jpg", jpg[0].name], ["a", "b"], [["r"], ["r"]])
    with pytest.raises(LookupError, match="--benchmark-images"):
        FolderImageScorer(_Pair(False), None, "CLIP-S")(["x.jpg"], ["a"], [["r"]])
    with pytest.raises(LookupError, match="own corpus images"):
        FolderImageScorer(object(), tmp_path, "KCCA")([jpg[0].name], ["a"], [["r"]])


# ---------------------------------------------------------------------------------------------- main job
SMALL = ["--teaching-size", "90", "--systems", "BoW1", "--metrics", "CLIP-S",
         "--permutations", "200", "--no-progress", "--seed", "0"]
_AMT_HEAD = ["HITId", "WorkerId", "Input.image_url", "Input.text1", "Input.text2", "Input.text3",
             "Answer.Q1Answer", "Answer.Q2Answer", "Answer.Q3Answer", "Approve"]


def _benchmark_files(base: Path, jpgs: list[Path]) -> dict[str, Path]:
    """Composite (Flickr8k part, two images), FOIL (two COCO images, not on disk), a malformed Pascal-50S."""
    comp = base / "composite"
    comp.mkdir()
    caps = {jpgs[0].name: ["a dog runs on the grass .", "a brown dog is running outside .", "a dog plays ."],
            jpgs[1].name: ["two people walk on a beach .", "people walking near the sea .", "a beach walk ."]}
    (comp / "Flickr8k.token.txt").write_text(
        "".join(f"{im}#{i}\t{c}\n" for im, cs in caps.items() for i, c in enumerate(cs)), encoding="utf-8")
    lines = [";".join(_AMT_HEAD),
             ";".join(["H1", "W1", f"http://x/Flicker8k_Dataset/{jpgs[0].name}", "a dog runs on the grass .",
                       "a cat sleeps on a sofa", "a dog outside", "5", "1", "3", ""]),
             ";".join(["H2", "W2", f"http://x/Flicker8k_Dataset/{jpgs[1].name}", "two people walk on a beach .",
                       "a red car on a road", "people near water", "5", "1", "4", ""])]
    (comp / "8k_correctness.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    coco = {391895: ("COCO_val2014_000000391895.jpg", ["A man riding a motorcycle on a dirt road.",
                                                        "A man on a motor bike.", "A person rides a motorbike."]),
            522418: ("COCO_val2014_000000522418.jpg", ["A woman cutting a large white sheet cake.",
                                                        "A woman cuts a cake.", "A cake is being cut."])}
    images = [{"id": i, "file_name": f} for i, (f, _) in coco.items()]
    anns = [{"id": 1001, "image_id": 391895, "caption": coco[391895][1][0], "foil": False,
             "target_word": "ORIG", "foil_word": "ORIG"},
            {"id": 1001, "image_id": 391895, "caption": "A man riding a horse on a dirt road.", "foil": True,
             "target_word": "motorcycle", "foil_word": "horse"},
            {"id": 1002, "image_id": 391895, "caption": coco[391895][1][1], "foil": False,
             "target_word": "ORIG", "foil_word": "ORIG"},
            {"id": 1006, "image_id": 522418, "caption": coco[522418][1][0], "foil": False,
             "target_word": "ORIG", "foil_word": "ORIG"},
            {"id": 1006, "image_id": 522418, "caption": "A woman cutting a large white sheet pizza.", "foil": True,
             "target_word": "cake", "foil_word": "pizza"},
            {"id": 1007, "image_id": 522418, "caption": coco[522418][1][1], "foil": False,
             "target_word": "ORIG", "foil_word": "ORIG"}]
    foil = base / "foilv1.0_test_2017.json"
    foil.write_text(json.dumps({"images": images, "annotations": anns}), encoding="utf-8")
    pascal = base / "pascal"
    pascal.mkdir()
    (pascal / "pair_pascal.mat").write_bytes(b"MATLAB 5.0 MAT-file, truncated\n")
    (pascal / "consensus_pascal.mat").write_bytes(b"not a mat file")
    imgs = base / "images" / "flickr8k"
    imgs.mkdir(parents=True)
    for j in jpgs[:2]:
        shutil.copy(j, imgs / j.name)
    return {"composite": comp, "foil": foil, "pascal50s": pascal, "images": base / "images"}


@pytest.fixture(scope="module")
def benchmark_run(tmp_path_factory):
    jpgs = sorted((Path(os.environ.get("ITR_SHARED", REPO.parent / "shared")) / "data/flickr8k/Flicker8k_Dataset")
                  .glob("*.jpg"))
    if len(jpgs) < 2:
        pytest.skip("the shared Flickr8k JPEGs are not here (set ITR_SHARED)")
    base = tmp_path_factory.mktemp("bench")
    files = _benchmark_files(base, jpgs)
    out, cache = base / "out", base / "cache"
    cmd = [sys.executable, "-m", "experiments.flickr8k_kcca", *SMALL, "--composite", str(files["composite"]),
           "--foil", str(files["foil"]), "--pascal50s", str(files["pascal50s"]),
           "--benchmark-images", str(files["images"]), "--cache-dir", str(cache), "--out", str(out)]
    env = {**os.environ, "ITR_CACHE_DIR": str(cache)}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return out, json.loads((out / "results.json").read_text(encoding="utf-8")), files


def test_main_job_reports_paper_effects_with_paired_tests(benchmark_run):
    out, r, _ = benchmark_run
    pe = r["paper_effects"]
    got = {(x["effect"], x["measure"]) for x in pe["rows"]}
    assert {("CLIP-S vs BLEU-4", "Flickr8k-Expert τ-c"), ("CLIP-S vs CIDEr-D", "Flickr8k-CF τ-b")} <= got
    for x in pe["rows"]:
        assert x["ci"][0] <= x["delta"] <= x["ci"][1] and 0 < x["p"] <= 1 and x["finding"]
        hc = r["human_correlation"]
        a, b = x["effect"].split(" vs ")
        key = "expert_tau_c" if x["measure"].startswith("Flickr8k-Expert") else "cf_tau_b"
        assert x["value_a"] == pytest.approx(hc[a][key], abs=1e-3) and x["value_b"] == pytest.approx(hc[b][key], abs=1e-3)
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Paper effects" in md and "paired bootstrap over the judged images" in md
    assert "CLIP-S vs BLEU-4" in md and "Paper effects" in (out / "report.html").read_text(encoding="utf-8")


def test_main_job_scores_benchmarks_and_reports_what_it_could_not(benchmark_run):
    out, r, files = benchmark_run
    b = r["benchmarks"]
    assert b["benchmarks"]["composite"] == 6 and b["benchmarks"]["foil"] == 2 and "pascal50s" not in b["benchmarks"]
    # n-gram metrics: every loaded benchmark; CLIP-S: Composite from --benchmark-images, FOIL's COCO images absent
    assert b["rows"]["BLEU-4"]["composite_tau_c"] is not None and b["rows"]["BLEU-4"]["foil_4ref"] is not None
    assert b["rows"]["CLIP-S"]["composite_tau_c"] is not None and b["rows"]["CLIP-S"]["foil_1ref"] is None
    assert "not in --benchmark-images" in b["errors"]["CLIP-S on foil"]
    assert "own corpus images" in b["errors"]["KCCA f(i,s) [BoW1]" + " on composite"]
    assert b["rows"]["CLIP-S"]["flickr8k_expert_tau_c"] == r["human_correlation"]["CLIP-S"]["expert_tau_c"]
    # the malformed Pascal-50S file: one error naming the file; the rest of the report is written
    err = b["load_errors"]["pascal50s"]
    assert str(files["pascal50s"] / "pair_pascal.mat") in err and "MATLAB" in err
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Standard benchmarks (PAC-S Tables 1–3 layout)" in md and "Composite τ-c" in md
    assert "Benchmark pascal50s not loaded" in md and "## Correlation with human judgments" in md
    assert "error: benchmark pascal50s not scored" in (out / "run.log").read_text(encoding="utf-8")


def test_benchmark_options_are_checked_before_the_run(tmp_path):
    from experiments.errors import PipelineError
    from experiments.flickr8k_kcca import build_parser, parse_options

    text = build_parser().format_help()
    for opt in ("--composite", "--pascal50s", "--foil", "--foil-coco-captions", "--benchmark-images"):
        assert opt in text
    f = tmp_path / "captions_val2014.json"
    f.write_text("{}", encoding="utf-8")
    with pytest.raises(PipelineError, match="--foil-coco-captions .*--foil"):
        parse_options(["--foil-coco-captions", str(f), "--out", str(tmp_path / "o")])
    with pytest.raises(PipelineError, match="--composite .*no such folder"):
        parse_options(["--composite", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    with pytest.raises(PipelineError, match="--benchmark-images"):
        parse_options(["--benchmark-images", str(tmp_path), "--out", str(tmp_path / "o")])


# ---------------------------------------------------------------------------------------------- inputs
def test_specificity_rate_returns_the_per_step_outcomes_behind_the_rates():
    from neural.specificity import specificity_rate

    img = [np.zeros((4, 4, 3), np.uint8), np.ones((4, 4, 3), np.uint8)]
    units = [["a dog", "on grass", "with a ball"], ["a cat", "on a sofa"]]
    sr = specificity_rate(lambda ims, ts: np.array([len(t) for t in ts], float), img, units, ["red", "blue"])
    # a longer text always scores higher: every correct unit raises the score, every wrong one too
    assert sr["hits_pos"].tolist() == [True] * 3 and sr["hits_neg"].tolist() == [False] * 5
    assert sr["SR_pos"] == sr["hits_pos"].mean() and sr["n_neg_steps"] == sr["hits_neg"].size


def test_student_vs_teacher_counts_parameters_and_times_the_test_pool(random_tiny_backbone, small_teaching_set):
    from corpora.protocol import hodosh_pool
    from neural.families.lclip import student_vs_teacher
    from neural.clipscore import CLIPScore
    from neural.lclip import LCLIPScore, count_parameters

    pool = hodosh_pool(small_teaching_set, "test")
    m = student_vs_teacher(LCLIPScore(random_tiny_backbone), CLIPScore(random_tiny_backbone), small_teaching_set,
                           pool, repeats=1)
    assert m["student_params"] == m["teacher_params"] == count_parameters(random_tiny_backbone.model) > 0
    for role in ("student", "teacher"):
        t = m["timing"][role]
        assert t["captions"] == len(pool.captions) and t["seconds"] > 0
        assert t["captions_per_s"] == pytest.approx(t["captions"] / t["seconds"], rel=0.01, abs=0.002)
