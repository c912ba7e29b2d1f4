"""Loaders for Composite, Pascal-50S and FOIL on tiny files written in the public release formats, their
errors on malformed files, and the PAC-S Tables 1–3 table (evaluation/benchmarks)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.io

from evaluation import bleu, foil_accuracy, pairwise_accuracy, text_metric
from evaluation.benchmarks import (
    BenchmarkFormatError,
    benchmark_table,
    format_benchmark_table,
    load_benchmarks,
    load_composite,
    load_foil,
    load_pascal50s,
    with_first_references,
)

# ---------------------------------------------------------------------------------------- Composite
#: The AMT batch-results header of the release (bookkeeping columns, then inputs, answers, approve).
_AMT = ["HITId", "HITTypeId", "Title", "Description", "Keywords", "Reward", "CreationTime", "MaxAssignments",
        "RequesterAnnotation", "AssignmentDurationInSeconds", "AutoApprovalDelayInSeconds", "Expiration",
        "NumberOfSimilarHITs", "LifetimeInSeconds", "AssignmentId", "WorkerId", "AssignmentStatus", "AcceptTime",
        "SubmitTime", "AutoApprovalTime", "ApprovalTime", "RejectionTime", "RequesterFeedback",
        "WorkTimeInSeconds", "LifetimeApprovalRate", "Last30DaysApprovalRate", "Last7DaysApprovalRate"]

F8K = {"1000268201_693b08cb0e.jpg": ["A child in a pink dress is climbing up a set of stairs .",
                                     "A girl going into a wooden building .",
                                     "A little girl climbing into a wooden playhouse .",
                                     "A little girl climbing the stairs to her playhouse .",
                                     "A little girl in a pink dress going into a wooden cabin ."],
       "1001773457_577c3a7d70.jpg": ["A black dog and a spotted dog are fighting",
                                     "A black dog and a tri-colored dog playing with each other on the road .",
                                     "A black dog and a white dog with brown spots are staring at each other .",
                                     "Two dogs of different breeds looking at each other on the road .",
                                     "Two dogs on pavement moving toward each other ."]}
F30K = {"1000092795.jpg": ["Two young guys with shaggy hair look at their hands while hanging out in the yard .",
                           "Two young , White males are outside near many bushes .",
                           "Two men in green shirts are standing in a yard .",
                           "A man in a blue shirt standing in a garden .",
                           "Two friends enjoy time spent together ."]}
COCO = {391895: ("COCO_val2014_000000391895.jpg",
                 ["A man with a red helmet on a small moped on a dirt road.",
                  "Man riding a motor bike on a dirt road on the countryside.",
                  "A man riding on the back of a motorcycle.",
                  "A dirt path with a young person on a motor bike rests to the foreground of a verdant area.",
                  "A man in a red shirt and a red hat is on a motorcycle on a hill side."]),
        522418: ("COCO_val2014_000000522418.jpg",
                 ["A woman wearing a net on her head cutting a cake.",
                  "A woman cutting a large white sheet cake.",
                  "A woman wearing a hair net cutting a large sheet cake.",
                  "there is a woman that is cutting a white cake",
                  "A woman marking a cake with the back of a chef's knife."])}


def _amt_csv(path: Path, k: int, rows: list[tuple[str, list[str], list[str]]], trailing: int = 2) -> None:
    """A ';'-separated AMT results file: ``rows`` = (image url, k captions, k answers)."""
    header = _AMT + ["Input.image_url"] + [f"Input.text{i}" for i in range(1, k + 1)] \
        + [f"Answer.Q{i}Answer" for i in range(1, k + 1)] + ["Approve", "Reject"]
    lines = [";".join(header)]
    for n, (url, caps, answers) in enumerate(rows):
        book = [f"2ZQ{n}", "2AX", "Rate the sentences", "How correct is each sentence, 1-5", "image, caption",
                "$0.05", "Thu Jan 24 10:00:00 PST 2013", "3", "BatchId:1", "600", "86400",
                "Thu Jan 31 10:00:00 PST 2013", "", "604800", f"2A{n}", f"W{n}", "Approved",
                "Thu Jan 24 10:01:00 PST 2013", "Thu Jan 24 10:02:00 PST 2013", "", "", "", "", "60",
                "100% (5/5)", "100% (5/5)", "100% (5/5)"]
        lines.append(";".join(book + [url] + caps + answers + ["", ""]))
    lines += [";" * (len(header) - 1)] * trailing
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _token_file(path: Path, caps: dict) -> None:
    path.write_text("".join(f"{im}#{i}\t{c}\n" for im, cs in caps.items() for i, c in enumerate(cs)),
                    encoding="utf-8")


def _coco_captions(path: Path) -> None:
    images = [{"license": 3, "file_name": f, "coco_url": "", "height": 480, "width": 640, "id": i}
              for i, (f, _) in COCO.items()]
    anns, aid = [], 1000
    for i, (_, caps) in COCO.items():
        for c in caps:
            anns.append({"image_id": i, "id": aid, "caption": c})
            aid += 1
    path.write_text(json.dumps({"info": {}, "images": images, "licenses": [], "annotations": anns}), encoding="utf-8")


@pytest.fixture()
def composite_dir(tmp_path) -> Path:
    d = tmp_path / "composite"
    d.mkdir()
    url8k = "http://nlp.cs.illinois.edu/HockenmaierGroup/Framing_Image_Description/Flicker8k_Dataset/"
    _amt_csv(d / "8k_correctness.csv", 3, [
        (url8k + "1000268201_693b08cb0e.jpg",
         ["A little girl climbing into a wooden playhouse .", "a girl in pink climbs stairs", "a dog runs"],
         ["5", "4", "1"]),
        (url8k + "1001773457_577c3a7d70.jpg",
         ["two dogs on the road", "Two dogs on pavement moving toward each other .", "a cat sleeps"],
         ["4", "5", ""]),                                                  # one caption unrated
    ])
    _amt_csv(d / "30k_correctness.csv", 4, [
        ("http://example.org/flickr30k-images/1000092795.jpg",
         ["Two men in green shirts are standing in a yard .", "two men in a garden", "a man rides a horse",
          "people in a yard"], ["5", "3", "1", "2"])])
    _amt_csv(d / "coco_correctness.csv", 4, [
        ("http://mscoco.org/images/COCO_val2014_000000391895.jpg",
         ["A man riding on the back of a motorcycle.", "a man on a motorbike on a dirt road", "a red car",
          "a person rides a bike"], ["5", "4", "1", "3"])])
    _token_file(d / "Flickr8k.token.txt", F8K)
    _token_file(d / "results_20130124.token", F30K)
    _coco_captions(d / "captions_val2014.json")
    return d


def test_composite_reads_rows_references_and_scores(composite_dir):
    rows = load_composite(composite_dir)
    assert rows.protocol == "composite"
    assert len(rows) == 3 + 2 + 4 + 4                                      # the unrated caption is skipped
    assert rows.human.tolist() == [5, 4, 1, 4, 5, 5, 3, 1, 2, 5, 4, 1, 3]
    assert rows.image_ids[0] == "flickr8k/1000268201_693b08cb0e.jpg"
    assert rows.image_ids[5] == "flickr30k/1000092795.jpg"
    assert rows.image_ids[-1] == "coco/COCO_val2014_000000391895.jpg"
    assert rows.candidate_ids[:3] == [f"flickr8k/1000268201_693b08cb0e.jpg#{k}" for k in (1, 2, 3)]
    # the judged human caption is removed from the references of every row of its image, the rest kept
    first = F8K["1000268201_693b08cb0e.jpg"]
    assert rows.references[0] == [c for c in first if c != "A little girl climbing into a wooden playhouse ."]
    assert rows.references[1] == rows.references[0]
    assert len(rows.references[3]) == 4 and "Two dogs on pavement moving toward each other ." not in rows.references[3]
    assert rows.references[5] == [c for c in F30K["1000092795.jpg"] if not c.startswith("Two men in green")]
    assert rows.references[-1] == [c for c in COCO[391895][1] if c != "A man riding on the back of a motorcycle."]
    assert rows.pair_index.tolist() == list(range(13))
    assert "2 rows without an image URL skipped" in rows.notes[0] and "1 unrated skipped" in rows.notes[0]


def test_composite_image_url_without_extension_matches_by_stem(composite_dir):
    _amt_csv(composite_dir / "30k_correctness.csv", 4, [
        ("http://example.org/flickr30k/1000092795", ["two men", "a yard", "a horse", "people"], ["5", "3", "1", "2"])])
    rows = load_composite(composite_dir)
    assert [i for i in rows.image_ids if i.startswith("flickr30k/")] == ["flickr30k/1000092795.jpg"] * 4


def test_composite_captions_per_row_keeps_the_first_columns(composite_dir):
    rows = load_composite(composite_dir, captions_per_row=3)
    assert len(rows) == 3 + 2 + 3 + 3
    assert [c.rsplit("#", 1)[1] for c in rows.candidate_ids] == ["1", "2", "3", "1", "2", "1", "2", "3", "1", "2", "3"]
    # a dropped fourth caption was still judged: the reference equal to it stays out of the references
    _amt_csv(composite_dir / "coco_correctness.csv", 4, [
        ("http://mscoco.org/images/COCO_val2014_000000391895.jpg",
         ["a man on a motorbike", "a red car", "a person rides a bike", COCO[391895][1][0]], ["4", "1", "3", "5"])])
    rows = load_composite(composite_dir, captions_per_row=3)
    assert rows.references[-1] == COCO[391895][1][1:] and COCO[391895][1][0] not in rows.candidates
    with pytest.raises(ValueError, match="captions_per_row"):
        load_composite(composite_dir, captions_per_row=0)


def test_composite_repeated_assignments_share_an_item(composite_dir):
    url = "http://mscoco.org/images/COCO_val2014_000000522418.jpg"
    caps = ["A woman cutting a large white sheet cake.", "a woman cuts a cake", "a cake", "a knife"]
    _amt_csv(composite_dir / "coco_correctness.csv", 4, [(url, caps, ["5", "4", "2", "1"]),
                                                          (url, caps, ["4", "4", "3", "1"])])
    rows = load_composite(composite_dir)
    coco = [i for i, im in enumerate(rows.image_ids) if im.startswith("coco/")]
    assert len(coco) == 8 and rows.n_pairs == 9 + 4
    assert rows.pair_index[coco].tolist() == [9, 10, 11, 12, 9, 10, 11, 12]


def _error(fn, *args, **kwargs) -> str:
    with pytest.raises(BenchmarkFormatError) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    return str(info.value)


def test_composite_missing_column_names_file_and_header_line(composite_dir):
    p = composite_dir / "30k_correctness.csv"
    p.write_text(p.read_text().replace("Answer.Q4Answer", "Answer.Q4"), encoding="utf-8")
    msg = _error(load_composite, composite_dir)
    assert msg.startswith(f"{p}:1: ") and "'Answer.Q4Answer'" in msg


def test_composite_bad_score_names_file_and_line(composite_dir):
    p = composite_dir / "8k_correctness.csv"
    lines = p.read_text().splitlines()
    lines[2] = lines[2].replace(";4;5;;", ";4;seven;;")
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    msg = _error(load_composite, composite_dir)
    assert msg.startswith(f"{p}:3: ") and "Answer.Q2Answer" in msg and "'seven'" in msg
    lines[2] = lines[2].replace(";4;seven;;", ";4;6;;")                    # out of the 1–5 scale
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert _error(load_composite, composite_dir).startswith(f"{p}:3: ")


def test_composite_short_row_and_missing_references(composite_dir):
    p = composite_dir / "coco_correctness.csv"
    lines = p.read_text().splitlines()
    p.write_text("\n".join([lines[0], lines[1].rsplit(";", 6)[0]]) + "\n", encoding="utf-8")
    assert _error(load_composite, composite_dir).startswith(f"{p}:2: ")
    _amt_csv(p, 4, [("http://mscoco.org/images/COCO_val2014_000000000042.jpg", ["a", "b", "c", "d"],
                     ["1", "2", "3", "4"])])
    msg = _error(load_composite, composite_dir)
    assert msg.startswith(f"{p}:2: ") and "COCO_val2014_000000000042.jpg" in msg
    (composite_dir / "results_20130124.token").unlink()
    assert "results_20130124.token" in _error(load_composite, composite_dir)


def test_composite_needs_a_judgment_file(tmp_path):
    assert "8k_correctness.csv" in _error(load_composite, tmp_path)


# ---------------------------------------------------------------------------------------- Pascal-50S
def _cell(text: str) -> np.ndarray:
    c = np.empty((1, 1), dtype=object)
    c[0, 0] = text
    return c


#: (image, candidate A, candidate B, category, sources in new_data, votes for A of 48)
PAIRS = [("2008_000032.jpg", "a plane on the runway", "an airplane parked at an airport", 1, (6, 6), 30),
         ("2008_000033.jpg", "a plane flying in the sky", "a cat on a sofa", 2, (6, 7), 45),
         ("2008_000037.jpg", "a boat in a harbour", "boat boat water", 3, (6, 2), 10),
         ("2008_000041.jpg", "a man on a horse", "a person riding a horse", 4, (1, 4), 24)]     # 24–24: a tie


def _write_pascal(folder: Path, pairs=PAIRS, *, category=None, drop=None, n_votes=48, swap_pair=None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    new_input = np.zeros((1, len(pairs)), dtype=[("image", object), ("sent1", object), ("sent2", object)])
    trip = np.zeros((1, n_votes * len(pairs)),
                    dtype=[("ref", object), ("cand1", object), ("cand2", object), ("vote", object)])
    for i, (im, a, b, _, _, va) in enumerate(pairs):
        new_input[0, i] = (im, a, b)
        for j in range(n_votes):
            first, second = (b, a) if swap_pair == i else (a, b)
            vote_a = j < va
            vote = 1.0 if vote_a == (first == a) else -1.0
            trip[0, i * n_votes + j] = (_cell(f"reference {j} of {im}"), _cell(first), _cell(second),
                                        np.array([[vote]]))
    pair = {"new_input": new_input,
            "category": np.array([[p[3] for p in pairs]], dtype=np.float64) if category is None else category,
            "new_data": np.array([p[4] for p in pairs], dtype=np.float64)}
    cons = {"triplets": trip}
    for d in (pair, cons):
        d.pop(drop, None)
    scipy.io.savemat(str(folder / "pair_pascal.mat"), pair)
    scipy.io.savemat(str(folder / "consensus_pascal.mat"), cons)


def test_pascal50s_reads_pairs_categories_votes_and_references(tmp_path):
    _write_pascal(tmp_path / "pascal" / "pyCIDErConsensus")                 # the unpacked release's layout
    recs = load_pascal50s(tmp_path / "pascal")
    assert [r.image_id for r in recs] == [p[0] for p in PAIRS]
    assert [r.category for r in recs] == ["HC", "HI", "HM", "MM"]
    assert [(r.candidate_a, r.candidate_b) for r in recs] == [(p[1], p[2]) for p in PAIRS]
    assert [r.preferred for r in recs[:3]] == [0, 0, 1]                     # 30 / 45 / 10 votes of 48 for A
    assert len(recs[0].references) == 48 and recs[0].references[5] == "reference 5 of 2008_000032.jpg"


def test_pascal50s_tie_is_broken_by_the_seed(tmp_path):
    _write_pascal(tmp_path)
    outcomes = {s: load_pascal50s(tmp_path, seed=s)[3].preferred for s in range(12)}
    assert set(outcomes.values()) == {0, 1}
    assert all(load_pascal50s(tmp_path, seed=s)[3].preferred == o for s, o in list(outcomes.items())[:3])


def test_pascal50s_vote_order_follows_the_triplet_candidates(tmp_path):
    _write_pascal(tmp_path, swap_pair=0)           # triplets list the pair as (B, A): votes still count for A
    assert load_pascal50s(tmp_path)[0].preferred == 0


def test_pascal50s_missing_variable_names_file_and_variable(tmp_path):
    _write_pascal(tmp_path, drop="triplets")
    msg = _error(load_pascal50s, tmp_path)
    assert msg.startswith(f"{tmp_path / 'consensus_pascal.mat'}: ") and "'triplets' missing" in msg


def test_pascal50s_category_out_of_range_names_the_element(tmp_path):
    _write_pascal(tmp_path, category=np.array([[1, 2, 5, 4]], dtype=np.float64))
    msg = _error(load_pascal50s, tmp_path)
    assert msg.startswith(f"{tmp_path / 'pair_pascal.mat'}: category[0, 2]: ") and "out of range" in msg


def test_pascal50s_category_contradicting_sources(tmp_path):
    _write_pascal(tmp_path, category=np.array([[1, 2, 4, 4]], dtype=np.float64))
    assert "new_data[2]" in _error(load_pascal50s, tmp_path)


def test_pascal50s_wrong_number_of_votes_and_unreadable_file(tmp_path):
    _write_pascal(tmp_path, n_votes=47)
    msg = _error(load_pascal50s, tmp_path)
    assert "consensus_pascal.mat" in msg and "48 per pair" in msg
    (tmp_path / "pair_pascal.mat").write_bytes(b"MATLAB 5.0 MAT-file, truncated")
    assert _error(load_pascal50s, tmp_path).startswith(f"{tmp_path / 'pair_pascal.mat'}: ")
    (tmp_path / "pair_pascal.mat").unlink()
    assert "pair_pascal.mat" in _error(load_pascal50s, tmp_path)


def test_pascal50s_mismatched_triplet_names_the_element(tmp_path):
    pairs = list(PAIRS)
    _write_pascal(tmp_path, pairs)
    mat = scipy.io.loadmat(str(tmp_path / "consensus_pascal.mat"))
    trip = mat["triplets"]
    trip[0, 50]["cand1"] = _cell("something else")
    scipy.io.savemat(str(tmp_path / "consensus_pascal.mat"), {"triplets": trip})
    assert "triplets[0, 50]: " in _error(load_pascal50s, tmp_path)


# ---------------------------------------------------------------------------------------- FOIL
def _foil_json(path: Path) -> None:
    images = [{"license": 3, "file_name": f, "coco_url": "", "height": 480, "width": 640, "id": i}
              for i, (f, _) in COCO.items()]
    a = [{"id": 1001, "image_id": 391895, "caption": COCO[391895][1][2], "foil": False,
          "target_word": "ORIG", "foil_word": "ORIG", "foil_id": 5000},
         {"id": 1001, "image_id": 391895, "caption": "A man riding on the back of a horse.", "foil": True,
          "target_word": "motorcycle", "foil_word": "horse", "foil_id": 5001},
         {"id": 1001, "image_id": 391895, "caption": "A man riding on the back of a bus.", "foil": True,
          "target_word": "motorcycle", "foil_word": "bus", "foil_id": 5002},
         {"id": 1006, "image_id": 522418, "caption": COCO[522418][1][1], "foil": False,
          "target_word": "ORIG", "foil_word": "ORIG", "foil_id": 5003},
         {"id": 1006, "image_id": 522418, "caption": "A woman cutting a large white sheet pizza.", "foil": True,
          "target_word": "cake", "foil_word": "pizza", "foil_id": 5004},
         {"id": 1007, "image_id": 522418, "caption": COCO[522418][1][2], "foil": False,
          "target_word": "ORIG", "foil_word": "ORIG", "foil_id": 5005}]
    path.write_text(json.dumps({"info": {}, "images": images, "licenses": [], "annotations": a}, indent=1),
                    encoding="utf-8")


@pytest.fixture()
def foil_files(tmp_path) -> tuple[Path, Path]:
    _foil_json(tmp_path / "foilv1.0_test_2017.json")
    _coco_captions(tmp_path / "captions_val2014.json")
    return tmp_path / "foilv1.0_test_2017.json", tmp_path / "captions_val2014.json"


def test_foil_pairs_each_foil_with_its_original_and_coco_references(foil_files):
    foil, coco = foil_files
    recs = load_foil(foil, coco_captions=coco)
    assert [(r.image_id, r.foil) for r in recs] == [
        ("COCO_val2014_000000391895.jpg", "A man riding on the back of a horse."),
        ("COCO_val2014_000000391895.jpg", "A man riding on the back of a bus."),
        ("COCO_val2014_000000522418.jpg", "A woman cutting a large white sheet pizza.")]
    assert recs[0].correct == recs[1].correct == COCO[391895][1][2]
    assert recs[0].references == tuple(c for k, c in enumerate(COCO[391895][1]) if k != 2)   # the other four
    assert recs[2].references == tuple(c for k, c in enumerate(COCO[522418][1]) if k != 1)
    assert [len(r.references) for r in with_first_references(recs, 1)] == [1, 1, 1]
    assert with_first_references(recs, 1)[0].references == (COCO[391895][1][0],)


def test_foil_without_coco_uses_the_other_originals_and_filters_images(foil_files):
    foil, _ = foil_files
    recs = load_foil(foil)
    assert recs[0].references == () and recs[2].references == (COCO[522418][1][2],)
    only = load_foil(foil, images=["COCO_val2014_000000522418.jpg"])
    assert [r.foil for r in only] == ["A woman cutting a large white sheet pizza."]


def test_foil_truncated_json_names_file_and_line(foil_files):
    foil, coco = foil_files
    text = foil.read_text()
    foil.write_text(text[: len(text) // 2], encoding="utf-8")
    msg = _error(load_foil, foil, coco_captions=coco)
    assert msg.startswith(f"{foil}:") and "not valid JSON" in msg
    assert int(msg[len(str(foil)) + 1:].split(":")[0]) == len(text[: len(text) // 2].splitlines())


def test_foil_record_errors_name_the_annotation(foil_files):
    foil, coco = foil_files
    data = json.loads(foil.read_text())
    del data["annotations"][4]["foil"]
    foil.write_text(json.dumps(data), encoding="utf-8")
    assert _error(load_foil, foil).startswith(f"{foil}: annotations[4]: missing key 'foil'")
    data["annotations"][4]["foil"] = "yes"
    foil.write_text(json.dumps(data), encoding="utf-8")
    assert "annotations[4]: 'foil' has the wrong type" in _error(load_foil, foil)
    data["annotations"][4].update(foil=True, id=999)
    foil.write_text(json.dumps(data), encoding="utf-8")
    assert "annotations[4]: foil caption of id 999 has no original" in _error(load_foil, foil)


# ---------------------------------------------------------------------------------------- the table
BLEU4 = text_metric(lambda c, r: bleu(c, r, n=4)[:, 3], identity={"metric": "BLEU-4"})
LENGTH = text_metric(lambda c, r: np.array([-len(x) for x in c], dtype=float), identity={"metric": "-length"})
CONSTANT = text_metric(lambda c, r: np.zeros(len(c)), identity={"metric": "constant"})


@pytest.fixture()
def benchmarks(composite_dir, tmp_path, foil_files):
    _write_pascal(tmp_path / "pascal")
    return {"composite": load_composite(composite_dir), "pascal50s": load_pascal50s(tmp_path / "pascal"),
            "foil": load_foil(foil_files[0], coco_captions=foil_files[1])}


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")   # the constant scorer's τ is NaN
def test_table_runs_ngram_scorers_on_every_benchmark(benchmarks):
    res = benchmark_table({"BLEU-4": BLEU4, "length": LENGTH, "constant": CONSTANT}, benchmarks, seed=3)
    b4 = res["rows"]["BLEU-4"]
    assert b4["flickr8k_expert_tau_c"] is None and b4["flickr8k_cf_tau_b"] is None
    assert np.isfinite(b4["composite_tau_c"]) and np.isfinite(b4["composite_tau_b"])
    acc = pairwise_accuracy(benchmarks["pascal50s"], BLEU4, n_refs=5, n_draws=5, seed=3)
    assert [b4[f"pascal50s_{c}"] for c in ("HC", "HI", "HM", "MM")] == [acc["per_category"][c] for c in
                                                                        ("HC", "HI", "HM", "MM")]
    assert b4["pascal50s_mean"] == pytest.approx(np.mean([acc["per_category"][c] for c in ("HC", "HI", "HM", "MM")]))
    one = foil_accuracy(with_first_references(benchmarks["foil"], 1), BLEU4)["accuracy"]
    assert b4["foil_1ref"] == one
    # a constant scorer ties every pair: ½ on Pascal-50S, never right on FOIL (a tie is a failure)
    const = res["rows"]["constant"]
    assert [const[f"pascal50s_{c}"] for c in ("HC", "HI", "HM", "MM", "mean")] == [50.0] * 5
    assert const["foil_1ref"] == const["foil_4ref"] == 0.0
    assert np.isnan(const["composite_tau_c"])                              # τ of a constant is undefined
    # "shorter is better" picks candidate B of the HM pair, which won its vote (38 of 48)
    assert res["rows"]["length"]["pascal50s_HM"] == 100.0
    assert res["benchmarks"] == {"composite": 13, "pascal50s": 4, "foil": 3}


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
def test_table_layout(benchmarks):
    res = benchmark_table({"BLEU-4": BLEU4, "constant": CONSTANT}, benchmarks)
    text = format_benchmark_table(res, errors={"foil": BenchmarkFormatError("bad", "x.json", 3)})
    lines = text.splitlines()
    assert "Flickr8k-Expert" in lines[1] and "Pascal-50S" in lines[1] and "FOIL" in lines[1]
    head = lines[2].split()
    assert head == ["scorer", "τ-c", "|", "τ-b", "|", "τ-c", "|", "HC", "HI", "HM", "MM", "mean", "|", "1-ref",
                    "4-ref"]
    assert lines[1].split() == ["Flickr8k-Expert", "|", "Flickr8k-CF", "|", "Composite", "|", "Pascal-50S", "|",
                                "FOIL"]
    assert [ln.index("|") for ln in lines[1:3]] == [lines[4].index("|")] * 2   # the groups line up
    row = lines[4].split()
    assert row[0] == "BLEU-4" and row[1] == "–" and row[3] == "–"           # no Flickr8k rows given
    assert row[5] == f"{res['rows']['BLEU-4']['composite_tau_c']:.1f}"
    assert lines[5].split()[7:12] == ["50.0"] * 5
    assert lines[-1] == "error: foil: x.json:3: bad"


def test_table_refuses_unknown_or_wrong_benchmarks(benchmarks):
    with pytest.raises(ValueError, match="unknown benchmark 'pascal'"):
        benchmark_table({"b": BLEU4}, {"pascal": benchmarks["pascal50s"]})
    with pytest.raises(ValueError, match="'foil' must be a non-empty list of FoilRecord"):
        benchmark_table({"b": BLEU4}, {"foil": benchmarks["pascal50s"]})


def test_load_benchmarks_keeps_going_past_a_malformed_file(composite_dir, foil_files, tmp_path):
    _write_pascal(tmp_path / "pascal", drop="category")
    loaded = load_benchmarks(composite=composite_dir, pascal50s=tmp_path / "pascal", foil=foil_files[0],
                             foil_coco_captions=foil_files[1], composite_captions_per_row=3)
    assert len(loaded.benchmarks["composite"]) == 11 and loaded.benchmarks["foil"][0].references
    assert set(loaded.benchmarks) == {"composite", "foil"} and set(loaded.errors) == {"pascal50s"}
    assert str(loaded.errors["pascal50s"]).startswith(f"{tmp_path / 'pascal' / 'pair_pascal.mat'}: ")
    res = benchmark_table({"BLEU-4": BLEU4}, loaded.benchmarks)
    text = format_benchmark_table(res, loaded.errors)
    assert res["rows"]["BLEU-4"]["pascal50s_mean"] is None and "error: pascal50s: " in text


def test_table_keeps_the_other_cells_when_a_scorer_cannot_run_on_a_benchmark(benchmarks, foil_files):
    # without the COCO captions the first FOIL image has no reference left: BLEU refuses it, -length does not
    benchmarks = {**benchmarks, "foil": load_foil(foil_files[0])}
    res = benchmark_table({"BLEU-4": BLEU4, "length": LENGTH}, benchmarks)
    assert res["rows"]["BLEU-4"]["foil_1ref"] is None and res["rows"]["BLEU-4"]["foil_4ref"] is None
    assert res["rows"]["BLEU-4"]["composite_tau_c"] is not None and res["rows"]["BLEU-4"]["pascal50s_mean"] is not None
    assert res["rows"]["length"]["foil_1ref"] is not None
    assert list(res["errors"]) == ["BLEU-4 on foil"] and "references[0] is empty" in res["errors"]["BLEU-4 on foil"]
    assert format_benchmark_table(res).splitlines()[-1].startswith("error: BLEU-4 on foil: bleu: references[0]")


def test_table_keeps_going_when_an_image_scorer_cannot_find_an_image(benchmarks):
    features = {"COCO_val2014_000000391895.jpg": 1.0}                     # a scorer that knows one image

    def image_score(image_ids, candidates, references):
        return np.array([features[i] for i in image_ids])

    res = benchmark_table({"length": LENGTH, "lookup": image_score}, benchmarks)
    assert set(res["errors"]) == {"lookup on composite", "lookup on pascal50s", "lookup on foil"}
    assert res["errors"]["lookup on pascal50s"] == "KeyError: '2008_000032.jpg'"
    assert all(v is None for v in res["rows"]["lookup"].values())
    assert all(v is not None for k, v in res["rows"]["length"].items() if not k.startswith("flickr8k"))


def test_errors_of_reused_corpus_readers_are_benchmark_errors(composite_dir, foil_files):
    tok = composite_dir / "Flickr8k.token.txt"
    tok.write_text(tok.read_text() + "no tab on this line\n", encoding="utf-8")
    msg = _error(load_composite, composite_dir)
    assert msg == f"{tok}:11: no TAB between caption id and caption"
    csv8k = composite_dir / "8k_correctness.csv"
    csv8k.write_bytes(csv8k.read_bytes().replace(b"a dog runs", b"a dog r\xfcns"))
    assert _error(load_composite, composite_dir).startswith(f"{csv8k}:2: not valid UTF-8")
    foil_files[0].write_bytes(b'{"images": [], "annotations": [\n{"caption": "\xff"}]}')
    assert _error(load_foil, foil_files[0]).startswith(f"{foil_files[0]}:2: not valid UTF-8")


def test_table_with_the_real_flickr8k_rows_reproduces_clipscore_table_1(flickr8k_dir, benchmarks):
    """The Flickr8k columns on the real files: BLEU-4 Expert τ-c 30.8 and CF τ-b 16.9 (CLIPScore, Hessel
    et al. 2021, Table 1; PAC-S Table 1), next to the tiny Composite / Pascal-50S / FOIL files."""
    import warnings

    from corpora.flickr8k import load_flickr8k
    from evaluation import flickr8k_cf_rows, flickr8k_expert_rows

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        corpus = load_flickr8k(flickr8k_dir)
    res = benchmark_table({"BLEU-4": BLEU4}, {"flickr8k_expert": flickr8k_expert_rows(corpus),
                                              "flickr8k_cf": flickr8k_cf_rows(corpus), **benchmarks})
    row = format_benchmark_table(res).splitlines()[4].split()
    assert row[:4] == ["BLEU-4", "30.8", "|", "16.9"]
    assert res["benchmarks"]["flickr8k_expert"] == 16992 and res["benchmarks"]["flickr8k_cf"] == 47830


SHARED_FLICKR = Path(__import__("os").environ.get("ITR_SHARED", Path(__file__).resolve().parents[2] / "shared")) \
    / "data" / "flickr8k"


@pytest.mark.skipif(not SHARED_FLICKR.is_dir(), reason=f"shared Flickr8k text bundle not found at {SHARED_FLICKR}")
def test_caption_metrics_vs_humans_prints_the_benchmarks_and_survives_a_malformed_one(
        composite_dir, foil_files, tmp_path, capsys):
    """--composite / --pascal50s / --foil wire the loaders into the command: the PAC-S layout follows the
    τ table, with the Flickr8k columns filled; a malformed Pascal-50S file costs only its own columns."""
    from experiments.caption_metrics_vs_humans import main

    _write_pascal(tmp_path / "pascal", drop="category")
    argv = ["--data", str(SHARED_FLICKR), "--metrics", "BLEU-4", "--no-cache", "--no-progress",
            "--composite", str(composite_dir), "--pascal50s", str(tmp_path / "pascal"),
            "--foil", str(foil_files[0]), "--foil-coco-captions", str(foil_files[1])]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["Flickr8k-Expert"])
    row = next(ln for ln in lines[head:] if ln.startswith("BLEU-4")).split()
    assert row[1] == "30.8" and row[3] == "16.9"           # CLIPScore Table 1-2's BLEU-4, on the real files
    assert row[5] != "–" and row[-2] != "–"                 # Composite and FOIL computed
    assert row[7:12] == ["–"] * 5                            # Pascal-50S lost to its malformed file ...
    assert any(ln.startswith("error: pascal50s: ") for ln in lines)   # ... and said so
