"""experiments.published_numbers end to end on stand-in files: a random-weight small CLIP (itr-tiny-clip) saved
as an OpenAI-layout state dict and as a PAC-S-format file, a Flickr8k folder made from the real text files
restricted to a few judged images (with small generated images), and small Composite and Pascal-50S files in
their release formats.  The figures are not the published ones; what is checked is the table, that each
figure is what the toolkit's own pipeline computes for the same inputs, Δ, the exit status with
--tolerance, and the skip messages."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import torch
from PIL import Image

from corpora.base import Corpus
from corpora.flickr8k import load_flickr8k
from corpora.images import PathImageLoader
from evaluation.benchmarks import load_composite, load_pascal50s
from evaluation.correlation import flickr8k_cf_rows, flickr8k_expert_rows, human_correlation, pairwise_accuracy
from experiments import published_numbers as pn
from neural.architectures import create_architecture
from neural.backbone import load_backbone
from neural.base import CorpusPairScorer
from neural.clipscore import CLIPScore
from neural.pacs import RefPACScore


def _image(path: Path, seed: int) -> None:
    """A small seeded image (coloured blocks), written as JPEG."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (4, 5, 3), dtype=np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.kron(blocks, np.ones((10, 10, 1), dtype=np.uint8))).save(path, quality=90)


def _standin_flickr8k(src: Path, dst: Path, n_expert: int = 3, n_cf: int = 2) -> list[str]:
    """The real Flickr8k text files restricted to the first judged images (their Expert / CF rows and the
    captions these name), generated images for the judged ones; returns the judged image ids."""
    text = src / "Flickr8k_text"
    expert = (text / "ExpertAnnotations.txt").read_text(encoding="utf-8").splitlines()
    crowd = (text / "CrowdFlowerAnnotations.txt").read_text(encoding="utf-8").splitlines()
    e_ims = list(dict.fromkeys(ln.split("\t")[0] for ln in expert))[:n_expert]
    c_ims = list(dict.fromkeys(ln.split("\t")[0] for ln in crowd))[:n_cf]
    expert = [ln for ln in expert if ln.split("\t")[0] in e_ims]
    crowd = [ln for ln in crowd if ln.split("\t")[0] in c_ims]
    needed = set(e_ims) | set(c_ims) | {ln.split("\t")[1].split("#")[0] for ln in expert + crowd}
    tokens = [ln for ln in (text / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines()
              if ln.split("#")[0] in needed]
    out = dst / "Flickr8k_text"
    out.mkdir(parents=True)
    for name, lines in (("Flickr8k.token.txt", tokens), ("ExpertAnnotations.txt", expert),
                        ("CrowdFlowerAnnotations.txt", crowd)):
        (out / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    judged = list(dict.fromkeys(e_ims + c_ims))
    for k, im in enumerate(judged):
        _image(dst / "Flicker8k_Dataset" / im, seed=k)
    return judged


def _composite(dst: Path, f8k: Path, judged: list[str]) -> None:
    """An 8k_correctness.csv (';'-separated AMT results) on two judged Flickr8k images, rated captions taken
    from other images' captions, the stand-in token file as references and the images under images/flickr8k."""
    tokens = (f8k / "Flickr8k_text" / "Flickr8k.token.txt").read_text(encoding="utf-8")
    others = [ln.split("\t")[1] for ln in tokens.splitlines() if ln.split("#")[0] not in judged[:2]][:6]
    header = ["HITId", "WorkerId", "Input.image_url", "Input.text1", "Input.text2", "Input.text3",
              "Answer.Q1Answer", "Answer.Q2Answer", "Answer.Q3Answer"]
    own = {ln.split("#")[0]: ln.split("\t")[1] for ln in tokens.splitlines()}
    rows = [[f"H{k}", f"W{k}", f"http://example.org/Flicker8k_Dataset/{im}", own[im], others[2 * k],
             others[2 * k + 1], "5", str(2 + k), str(1 + 2 * k)] for k, im in enumerate(judged[:2])]
    dst.mkdir(parents=True)
    (dst / "8k_correctness.csv").write_text("\n".join(";".join(r) for r in [header] + rows) + "\n", encoding="utf-8")
    (dst / "Flickr8k.token.txt").write_text(tokens, encoding="utf-8")
    for k, im in enumerate(judged[:2]):
        _image(dst / "images" / "flickr8k" / im, seed=10 + k)


def _cell(text: str) -> np.ndarray:
    c = np.empty((1, 1), dtype=object)
    c[0, 0] = text
    return c


#: (image, candidate A, candidate B, category, sources, votes for A of 48): one pair per category.
PAIRS = [("2008_000032.jpg", "a plane on the runway", "an airplane parked at an airport", 1, (6, 6), 30),
         ("2008_000033.jpg", "a plane flying in the sky", "a cat on a sofa", 2, (6, 7), 45),
         ("2008_000037.jpg", "a boat in a harbour", "boat boat water", 3, (6, 2), 10),
         ("2008_000041.jpg", "a man on a horse", "a person riding a horse", 4, (1, 4), 30)]


def _pascal(dst: Path) -> None:
    """pair_pascal.mat / consensus_pascal.mat in the CIDEr release layout (48 triplets per pair), images."""
    dst.mkdir(parents=True)
    new_input = np.zeros((1, len(PAIRS)), dtype=[("image", object), ("sent1", object), ("sent2", object)])
    trip = np.zeros((1, 48 * len(PAIRS)), dtype=[("ref", object), ("c1", object), ("c2", object), ("vote", object)])
    for i, (im, a, b, _, _, va) in enumerate(PAIRS):
        new_input[0, i] = (im, a, b)
        for j in range(48):
            trip[0, 48 * i + j] = (_cell(f"reference {j}: {a if j % 2 else b}"), _cell(a), _cell(b),
                                   np.array([[1.0 if j < va else -1.0]]))
        _image(dst / "images" / im, seed=20 + i)
    scipy.io.savemat(str(dst / "pair_pascal.mat"), {"new_input": new_input,
                                                    "category": np.array([[p[3] for p in PAIRS]], dtype=float),
                                                    "new_data": np.array([p[4] for p in PAIRS], dtype=float)})
    scipy.io.savemat(str(dst / "consensus_pascal.mat"), {"triplets": trip})


@pytest.fixture(scope="module")
def standin(tmp_path_factory, flickr8k_dir) -> dict:
    root = tmp_path_factory.mktemp("published")
    judged = _standin_flickr8k(flickr8k_dir, root / "flickr8k")
    _composite(root / "composite", root / "flickr8k", judged)
    _pascal(root / "pascal")
    torch.manual_seed(1)
    torch.save(create_architecture("itr-tiny-clip")[0].state_dict(), root / "clip_tiny.pt")     # OpenAI layout
    torch.manual_seed(2)
    torch.save({"state_dict": create_architecture("itr-tiny-clip")[0].state_dict()}, root / "pacs_tiny.pth")
    return {"root": root, "flickr8k": root / "flickr8k", "composite": root / "composite",
            "pascal": root / "pascal", "clip": root / "clip_tiny.pt", "pacs": root / "pacs_tiny.pth"}


def _args(s: dict, *extra: str, data=("flickr8k", "composite", "pascal")) -> list[str]:
    opts = {"flickr8k": "--flickr8k", "composite": "--composite", "pascal": "--pascal50s"}
    out = [x for d in data for x in (opts[d], str(s[d]))]
    return out + ["--clip-model", "itr-tiny-clip", "--clip-weights", str(s["clip"]), "--device", "cpu",
                  "--cache-dir", str(s["root"] / "cache"), *extra]


@pytest.fixture(scope="module")
def full_run(standin):
    """One run with every input and both models; (exit status, printed table, JSON)."""
    import contextlib
    import io

    out = standin["root"] / "check.json"
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = pn.main(_args(standin, "--pacs-weights", str(standin["pacs"]), "--out", str(out)))
    return rc, buf.getvalue(), json.loads(out.read_text(encoding="utf-8"))


def test_every_published_row_is_computed_with_its_difference(full_run, standin):
    rc, text, res = full_run
    assert rc == 0 and res["skipped"] == [] and res["tolerance"] is None
    assert [(r["metric"], r["key"]) for r in res["rows"]] == [(p.metric, p.key) for p in pn.PUBLISHED]
    assert len(res["rows"]) == 4 * (3 + 5)                      # 4 metrics × (3 τ + 4 categories + mean)
    for r, p in zip(res["rows"], pn.PUBLISHED):
        assert r["published"] == p.value and r["source"] == p.source and r["confirmed"] == p.confirmed
        assert r["difference"] == pytest.approx(r["ours"] - r["published"], abs=1e-12) and not r["exceeds"]
        line = next(ln for ln in text.splitlines()
                    if ln.startswith(f"{r['metric']:<10}{r['benchmark']:<17}{r['statistic']:<6}"))
        assert f"{r['ours']:.1f}" in line and f"{r['difference']:+.1f}" in line and p.source in line
        assert (f"{p.value:.1f}*" in line) == (p.confirmed is None)
    crowd = (standin["flickr8k"] / "Flickr8k_text" / "CrowdFlowerAnnotations.txt").read_text().splitlines()
    n = res["benchmarks"]
    assert n["Flickr8k-CF"] == len(crowd) and n["Flickr8k-Expert"] % 3 == 0   # one row per pair / per expert score
    assert (n["Composite"], n["Pascal-50S"]) == (6, 4)
    assert set(res["models"]) == {"CLIP", "PAC-S"} and res["models"]["CLIP"]["weights_source"].startswith("file")
    pascal = [r for r in res["rows"] if r["key"].startswith("pascal50s_") and r["statistic"] != "mean"]
    for m in pn.METRICS:   # the mean is the mean of the four categories
        cats = [r["ours"] for r in pascal if r["metric"] == m]
        assert next(r["ours"] for r in res["rows"] if r["metric"] == m and r["statistic"] == "mean") == \
            pytest.approx(np.mean(cats))


def test_figures_equal_the_toolkit_pipeline_on_the_same_inputs(full_run, standin):
    _, _, res = full_run
    ours = {(r["metric"], r["key"]): r["ours"] for r in res["rows"]}
    with pytest.warns(UserWarning, match="no split files found"):    # the stand-in has no split files
        corpus = load_flickr8k(standin["flickr8k"])
    clip = load_backbone("itr-tiny-clip", standin["clip"], device="cpu", quick_gelu=True, show_progress=False)
    clip_s = CorpusPairScorer(CLIPScore(clip), corpus, None, use_references=False)
    assert ours[("CLIP-S", "flickr8k_expert_tau_c")] == pytest.approx(
        100 * human_correlation(flickr8k_expert_rows(corpus), clip_s)["tau_c"], abs=1e-9)
    assert ours[("CLIP-S", "flickr8k_cf_tau_b")] == pytest.approx(
        100 * human_correlation(flickr8k_cf_rows(corpus), clip_s)["tau_b"], abs=1e-9)
    comp = load_composite(standin["composite"], captions_per_row=3)
    images = {i: standin["composite"] / "images" / i for i in comp.image_ids}
    comp_corpus = Corpus("composite-test", tuple(images), {}, {}, PathImageLoader(images), images)
    assert ours[("CLIP-S", "composite_tau_c")] == pytest.approx(
        100 * human_correlation(comp, CorpusPairScorer(CLIPScore(clip), comp_corpus, use_references=False))["tau_c"],
        abs=1e-9)
    pacs = load_backbone("itr-tiny-clip", standin["pacs"], device="cpu", quick_gelu=True, show_progress=False)
    recs = load_pascal50s(standin["pascal"])
    images = {r.image_id: standin["pascal"] / "images" / r.image_id for r in recs}
    pas_corpus = Corpus("pascal-test", tuple(images), {}, {}, PathImageLoader(images), images)
    acc = pairwise_accuracy(recs, CorpusPairScorer(RefPACScore(pacs), pas_corpus, use_references=True),
                            n_refs=5, n_draws=5, seed=0)["per_category"]
    for cat in ("HC", "HI", "HM", "MM"):
        assert ours[("RefPAC-S", f"pascal50s_{cat}")] == pytest.approx(acc[cat], abs=1e-9)
    # the two models differ, so PAC-S is not CLIP-S rescaled
    assert ours[("PAC-S", "flickr8k_cf_tau_b")] != pytest.approx(ours[("CLIP-S", "flickr8k_cf_tau_b")])


def test_tolerance_makes_it_a_check(standin, full_run, capsys):
    _, _, res = full_run
    worst = max(abs(r["difference"]) for r in res["rows"] if r["metric"].endswith("CLIP-S"))
    assert pn.main(_args(standin, "--tolerance", f"{worst + 0.01}")) == 0
    text = capsys.readouterr().out
    assert "0 of 16 rows exceed it" in text and "  !" not in text
    out = standin["root"] / "tight.json"
    assert pn.main(_args(standin, "--tolerance", f"{worst - 0.01}", "--out", str(out))) == 1
    text = capsys.readouterr().out
    rows = json.loads(out.read_text(encoding="utf-8"))["rows"]
    flagged = [r for r in rows if r["exceeds"]]
    assert flagged and all(abs(r["difference"]) > worst - 0.01 for r in flagged)
    assert all(not r["exceeds"] for r in rows if abs(r["difference"]) <= worst - 0.01)
    assert text.count("  !") == len(flagged) and f"{len(flagged)} of 16 rows exceed it (marked !)" in text


def test_missing_inputs_skip_their_rows_with_the_reason(standin, tmp_path, capsys):
    out = tmp_path / "o.json"
    # no PAC-S weights, no Composite; Pascal-50S without its images
    rc = pn.main(_args(standin, "--out", str(out), "--pascal50s-images", str(tmp_path / "nowhere"),
                       data=("flickr8k", "pascal")))
    text = capsys.readouterr().out
    assert rc == 0
    assert "skipped: PAC-S, RefPAC-S on all benchmarks: no --pacs-weights given" in text
    assert "skipped: all metrics on Composite: no --composite given" in text
    assert f"skipped: all metrics on Pascal-50S: 4 of 4 images not found under {tmp_path / 'nowhere'}" in text
    res = json.loads(out.read_text(encoding="utf-8"))
    assert {(r["metric"], r["benchmark"]) for r in res["rows"]} == {
        (m, b) for m in ("CLIP-S", "RefCLIP-S") for b in ("Flickr8k-Expert", "Flickr8k-CF")}
    assert len(res["skipped"]) == 3
    # a PAC-S file that does not exist, and a malformed Composite file
    bad = tmp_path / "composite"
    bad.mkdir()
    (bad / "8k_correctness.csv").write_text("a;b\n1;2\n", encoding="utf-8")
    assert pn.main(_args(standin, "--pacs-weights", str(tmp_path / "clip_ViT-B-32.pth"), "--composite", str(bad),
                         data=("flickr8k",))) == 0
    text = capsys.readouterr().out
    assert f"--pacs-weights {tmp_path / 'clip_ViT-B-32.pth'}: no such file" in text
    assert "skipped: all metrics on Composite: " in text and "8k_correctness.csv:1: no Input.text1" in text


def test_nothing_to_run_and_missing_weights_offline(standin, tmp_path, monkeypatch, capsys):
    assert pn.main(["--clip-model", "itr-tiny-clip", "--clip-weights", str(standin["clip"])]) == 2
    err = capsys.readouterr().err
    assert "error: nothing to run: no benchmark could be loaded" in err and "no --flickr8k given" in err
    monkeypatch.setenv("ITR_OFFLINE", "1")
    rc = pn.main(["--flickr8k", str(standin["flickr8k"]), "--clip-weights", "openai",
                  "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert rc == 2 and "error: nothing to run: no model could be loaded" in err
    assert "CLIP weights ViT-B-32/openai are not available (not in the local cache and downloads are off)" in err
    assert "(here: --clip-weights FILE)" in err and "no --pacs-weights given" in err


def test_help_and_option_errors(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        pn.main(["--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for opt in ("--flickr8k", "--composite", "--composite-images", "--pascal50s", "--pascal50s-images",
                "--clip-weights", "--pacs-weights", "--clip-model", "--device", "--clip-precision", "--out", "--tolerance", "--seed"):
        assert opt in text
    assert "itr-tiny-clip" in text and "exit status is 1" in text
    for bad, msg in ((["--tolerance", "-1"], "--tolerance must be a number ≥ 0"),
                     (["--out", str(tmp_path)], "is a folder"),
                     (["--device", "tpu"], "--device must be auto, cpu or cuda")):
        with pytest.raises(SystemExit):
            pn.main(bad)
        assert msg in capsys.readouterr().err


def test_published_table_is_complete_and_labelled():
    keys = {(p.metric, p.key) for p in pn.PUBLISHED}
    assert len(keys) == len(pn.PUBLISHED) == 32
    assert {pn.statistic_of(p.key) for p in pn.PUBLISHED} == {"τ-c", "τ-b", "HC", "HI", "HM", "MM", "mean"}
    by = {(p.metric, p.key): p for p in pn.PUBLISHED}
    assert by[("CLIP-S", "flickr8k_expert_tau_c")].value == 51.2 and by[("RefPAC-S", "pascal50s_mean")].value == 84.7
    assert all(p.confirmed for p in pn.PUBLISHED if p.metric.endswith("CLIP-S"))


def test_out_never_overwrites_or_enters_an_input(standin, capsys):
    """``--out`` that is the --clip-weights file, a file inside the --flickr8k folder (its
    ExpertAnnotations.txt) or a folder containing an input is refused before anything is read or written."""
    expert = next(standin["flickr8k"].rglob("ExpertAnnotations.txt"))
    link = standin["root"] / "weights-link.pt"
    link.unlink(missing_ok=True)
    link.symlink_to(standin["clip"])
    before = {p: p.read_bytes() for p in (standin["clip"], expert)}
    for out, says in ((standin["clip"], "is the --clip-weights file"), (link, "is the --clip-weights file"),
                      (expert, "lies inside the --flickr8k folder"),
                      (standin["flickr8k"] / "new.json", "lies inside the --flickr8k folder")):
        with pytest.raises(SystemExit) as exc:
            pn.main(_args(standin, "--out", str(out)))
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert says in err and "error:" in err and "Traceback" not in err
    assert {p: p.read_bytes() for p in before} == before
    assert not (standin["flickr8k"] / "new.json").exists()


@pytest.mark.parametrize("seed", ["-1", "1e20", "100000000000000000000", "2147483648"])
def test_a_seed_out_of_range_is_an_option_error(seed, capsys):
    with pytest.raises(SystemExit) as exc:
        pn.main(["--seed", seed])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--seed" in err and "error:" in err and "Traceback" not in err


def test_an_output_that_cannot_be_written_is_one_error_line(standin, tmp_path, monkeypatch, capsys):
    """A disk that fills up while ``--out`` is written: one error line, exit 2, no temporary file left."""
    import errno
    import os

    out = tmp_path / "o.json"
    real_fsync = os.fsync

    def full(fd):   # the disk fills up while the output is written (the cache check writes fine)
        real_fsync(fd)
        if os.readlink(f"/proc/self/fd/{fd}").startswith(str(out)):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    rc = pn.main(_args(standin, "--out", str(out), data=("flickr8k",)))
    err = capsys.readouterr().err
    assert rc == 2 and f"error: --out {out}: cannot write (No space left on device)" in err
    assert list(tmp_path.iterdir()) == []
