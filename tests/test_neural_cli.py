"""``python -m neural.score``: per-instance JSON, averages, reference metrics, clear errors offline."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

from neural.score import main

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from neural.backbone import load_backbone
    from neural.checkpoints import save_state_dict

    d = tmp_path_factory.mktemp("cli")
    imgs = d / "imgs"
    imgs.mkdir()
    rng = np.random.default_rng(0)
    for k in range(3):
        Image.fromarray(rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)).save(imgs / f"im{k}.png")
    torch.manual_seed(0)
    bb = load_backbone("itr-tiny-clip", None, device="cpu", show_progress=False)
    w = save_state_dict(bb.model, d / "tiny.safetensors")
    (d / "cands.json").write_text(json.dumps({f"im{k}": f"a caption number {k}" for k in range(3)}))
    (d / "refs.json").write_text(json.dumps({f"im{k}": [f"a reference {k}", "another one"] for k in range(3)}))
    return d, imgs, w, bb


def test_cli_refclip_s_per_instance_json(setup, capsys):
    d, imgs, w, bb = setup
    out = d / "out.json"
    rc = main(["--candidates", str(d / "cands.json"), "--images", str(imgs), "--references", str(d / "refs.json"),
               "--metric", "refclip-s", "--clip-model", "itr-tiny-clip", "--clip-pretrained", str(w),
               "--device", "cpu", "--out", str(out), "--no-cache", "--quiet"])
    assert rc == 0
    res = json.loads(out.read_text())
    assert res["n"] == 3 and set(res["per_instance"]) == {"im0", "im1", "im2"}
    assert set(res["averages"]) == {"CLIP-S", "RefCLIP-S"}
    assert res["backbone"]["precision"] == "fp32" and res["backbone"]["torch"] == torch.__version__
    printed = capsys.readouterr().out
    assert "RefCLIP-S:" in printed and "CLIP-S:" in printed
    # the per-instance numbers equal the library's
    from corpora.images import read_image
    from neural.clipscore import RefCLIPScore

    images = [read_image(imgs / f"im{k}.png") for k in range(3)]
    lib = RefCLIPScore(bb).score(images, [f"a caption number {k}" for k in range(3)],
                                 [[f"a reference {k}", "another one"] for k in range(3)])
    np.testing.assert_allclose([res["per_instance"][f"im{k}"]["RefCLIP-S"] for k in range(3)], lib, atol=1e-5)


def test_cli_errors_are_clear(setup, tmp_path, monkeypatch):
    d, imgs, w, _ = setup
    monkeypatch.setenv("ITR_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(SystemExit, match="--clip-pretrained"):
        main(["--candidates", str(d / "cands.json"), "--images", str(imgs), "--no-cache", "--quiet"])
    with pytest.raises(SystemExit, match="needs --references"):
        main(["--candidates", str(d / "cands.json"), "--images", str(imgs), "--metric", "refpac-s"])
    bad = tmp_path / "bad.json"
    bad.write_text('{"im0": "x",\n "im1": }')
    with pytest.raises(SystemExit, match=r"bad.json:2"):
        main(["--candidates", str(bad), "--images", str(imgs)])
    missing = tmp_path / "m.json"
    missing.write_text(json.dumps({"nope": "a caption"}))
    with pytest.raises(SystemExit, match="not found"):
        main(["--candidates", str(missing), "--images", str(imgs), "--clip-model", "itr-tiny-clip",
              "--clip-pretrained", str(w)])


def test_cli_refuses_options_the_tiny_clip_would_ignore(setup, tmp_path):
    d, imgs, w, _ = setup
    base = ["--candidates", str(d / "cands.json"), "--images", str(imgs), "--no-cache", "--quiet"]
    with pytest.raises(SystemExit, match="--clip-pretrained .* does not apply to --clip-model tiny"):
        main(base + ["--clip-model", "tiny", "--clip-pretrained", str(w)])
    with pytest.raises(SystemExit, match="--precision fp16 does not apply to --clip-model tiny-clip"):
        main(base + ["--clip-model", "tiny-clip", "--precision", "fp16"])
    # a reference given as one string would be scored character by character
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps({f"im{k}": "a single reference string" for k in range(3)}))
    with pytest.raises(SystemExit, match="must be a list of strings, got str"):
        main(base + ["--references", str(refs), "--metric", "refclip-s", "--clip-model", "itr-tiny-clip",
                     "--clip-pretrained", str(w)])


def test_cli_damaged_image_unknown_model_and_bad_device_fail_cleanly(setup, tmp_path, monkeypatch, capsys):
    d, imgs, w, _ = setup
    import neural.score as score_mod

    # a damaged image is named before any backbone is loaded or trained
    folder = tmp_path / "imgs"
    shutil.copytree(imgs, folder)
    (folder / "im1.png").write_bytes((folder / "im1.png").read_bytes()[:60])
    monkeypatch.setattr(score_mod, "_backbone", lambda *a, **k: pytest.fail("backbone loaded first"))
    with pytest.raises(SystemExit, match=r"im1.png: cannot read image"):
        main(["--candidates", str(d / "cands.json"), "--images", str(folder), "--clip-model", "tiny"])
    monkeypatch.undo()
    base = ["--candidates", str(d / "cands.json"), "--images", str(imgs), "--no-cache", "--quiet"]
    with pytest.raises(SystemExit, match=r"unknown CLIP architecture 'NoSuchModel'"):
        main(base + ["--clip-model", "NoSuchModel"])
    with pytest.raises(SystemExit, match=r"pretrained='no-such-tag' is neither a file nor a known tag"):
        main(base + ["--clip-model", "ViT-B-32", "--clip-pretrained", "no-such-tag"])
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a checkpoint")
    with pytest.raises(SystemExit, match=r"^error: .*bad.pt"):
        main(base + ["--clip-model", "ViT-B-32", "--clip-pretrained", str(bad)])
    # refused before the tiny CLIP is trained or loaded (torch made to see no CUDA, as on a CPU machine)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("neural.tiny_clip.train_tiny_clip", lambda *a, **k: pytest.fail("trained first"))
    with pytest.raises(SystemExit, match=r"^error: --device: .*no CUDA device"):
        main(base + ["--clip-model", "tiny", "--device", "cuda"])
    monkeypatch.undo()
    with pytest.raises(SystemExit) as e:
        main(base + ["--device", "foo"])
    assert e.value.code == 2 and "invalid choice: 'foo'" in capsys.readouterr().err
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"im0": "  "}))
    with pytest.raises(SystemExit, match=r"candidate of 'im0' is empty"):
        main(["--candidates", str(empty), "--images", str(imgs)])
    with pytest.raises(SystemExit, match=r"--candidates .*nope.json: file not found"):
        main(["--candidates", str(tmp_path / "nope.json"), "--images", str(imgs)])


def _no_backbone(monkeypatch):
    import neural.score as score_mod

    monkeypatch.setattr(score_mod, "_backbone", lambda *a, **k: pytest.fail("backbone loaded first"))


def test_cli_out_is_checked_before_any_model_and_never_overwrites_an_input(setup, tmp_path, monkeypatch, capsys):
    d, imgs, w, _ = setup
    cands = tmp_path / "cands.json"
    cands.write_text((d / "cands.json").read_text())
    refs = tmp_path / "refs.json"
    refs.write_text((d / "refs.json").read_text())
    before = cands.read_bytes(), refs.read_bytes()
    base = ["--candidates", str(cands), "--images", str(imgs), "--references", str(refs), "--metric",
            "refclip-s", "--clip-model", "itr-tiny-clip", "--clip-pretrained", str(w), "--no-cache", "--quiet"]
    _no_backbone(monkeypatch)
    (tmp_path / "link.json").symlink_to(cands)
    cases = [(str(cands), r"^error: --out .*cands.json is the --candidates file .*would be overwritten"),
             (str(tmp_path / "." / "refs.json"), r"^error: --out .* is the --references file"),
             (str(tmp_path / "link.json"), r"^error: --out .*link.json is the --candidates file"),
             (str(imgs / "im0.png"), r"^error: --out .*im0.png is the --images file"),
             (str(tmp_path), r"^error: --out .* is a folder; give a file name"),
             (str(cands / "sub" / "out.json"), r"^error: --out .*: .*cands.json is a file, not a folder"),
             (str(imgs / "scores.json"), r"^error: --out .*scores.json lies inside the --images folder"),
             (str(w), r"^error: --out .* is the --clip-pretrained file")]
    for out, message in cases:
        with pytest.raises(SystemExit, match=message) as e:
            main(base + ["--out", out])
        assert "\n" not in str(e.value.code)
    assert (cands.read_bytes(), refs.read_bytes()) == before
    assert not (tmp_path / "sub").exists()


def test_cli_junk_weights_file_gets_the_main_jobs_message(setup, tmp_path, monkeypatch):
    from experiments.options import OptionError, check_pretrained
    from neural.checkpoints import WeightsError, read_state_dict

    d, imgs, _, _ = setup
    junk = tmp_path / "junk.pt"
    junk.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    if junk.read_bytes()[:1] == b"\x80":   # not a pickle header by chance
        junk.write_bytes(b"\x00" + junk.read_bytes()[1:])
    with pytest.raises(OptionError) as main_job:
        check_pretrained("ViT-B-32", str(junk))
    assert str(main_job.value) == f"--clip-pretrained {junk}: not a weights file (neither safetensors, a " \
                                  "PyTorch zip archive / TorchScript nor a legacy torch.save file)"
    _no_backbone(monkeypatch)   # refused up front
    base = ["--candidates", str(d / "cands.json"), "--images", str(imgs), "--no-cache", "--quiet"]
    for model in ("ViT-B-32", "itr-tiny-clip", "auto"):
        with pytest.raises(SystemExit) as e:
            main(base + ["--clip-model", model, "--clip-pretrained", str(junk)])
        assert e.value.code == f"error: {main_job.value}"
    # the library says the same (not "would need unpickling")
    with pytest.raises(WeightsError, match="not a weights file") as lib:
        read_state_dict(junk)
    assert "unpickling" not in str(lib.value)


def test_cli_empty_reference_is_refused_like_an_empty_candidate(setup, tmp_path, monkeypatch):
    d, imgs, w, _ = setup
    _no_backbone(monkeypatch)
    base = ["--candidates", str(d / "cands.json"), "--images", str(imgs), "--metric", "refclip-s",
            "--clip-model", "itr-tiny-clip", "--clip-pretrained", str(w), "--no-cache", "--quiet"]
    for empty in ("", " \t\n"):
        refs = tmp_path / "refs.json"
        refs.write_text(json.dumps({"im0": ["a reference"], "im1": ["fine", empty], "im2": ["x"]}))
        with pytest.raises(SystemExit, match=r"^error: .*refs.json: reference 1 of 'im1' is empty$"):
            main(base + ["--references", str(refs)])


def test_cli_counts_the_captions_cut_at_the_context_length(setup, tmp_path, capsys):
    d, imgs, w, bb = setup
    ctx = bb.context_length
    long = " ".join(["word"] * ctx)   # ctx words + prompt: beyond the context
    cands = tmp_path / "cands.json"
    cands.write_text(json.dumps({"im0": long, "im1": "short", "im2": "also short"}))
    refs = tmp_path / "refs.json"
    refs.write_text(json.dumps({"im0": ["short"], "im1": [long, long, "short"], "im2": ["fine"]}))
    out = tmp_path / "out.json"
    common = ["--images", str(imgs), "--clip-model", "itr-tiny-clip", "--clip-pretrained", str(w),
              "--device", "cpu", "--no-cache", "--quiet", "--out", str(out)]
    assert main(["--candidates", str(cands), "--references", str(refs), "--metric", "refclip-s"] + common) == 0
    assert json.loads(out.read_text())["truncated"] == {"candidates": 1, "references": 2, "context_length": ctx}
    err = capsys.readouterr().err
    assert f"note: 1 candidate(s) and 2 reference(s) are longer than the {ctx}-token context" in err
    # a caption that fills the context exactly once the prompt is included is not counted
    fits = " ".join(["word"] * (ctx - 2 - len(bb.tokenizer.encode("A photo depicts"))))
    assert bb.token_lengths(["A photo depicts " + fits]) == [ctx]
    (tmp_path / "fit.json").write_text(json.dumps({"im0": fits, "im1": "short", "im2": "short"}))
    assert main(["--candidates", str(tmp_path / "fit.json")] + common) == 0
    assert json.loads(out.read_text())["truncated"] == {"candidates": 0, "references": 0, "context_length": ctx}
    assert "truncated" not in capsys.readouterr().err


def test_cli_user_mistakes_exit_2_with_one_error_line(setup, tmp_path):
    import os
    import subprocess
    import sys

    d, imgs, _, _ = setup
    env = dict(os.environ, ITR_OFFLINE="1")
    for extra, message in ((["--out", str(tmp_path)], "error: --out "),
                           (["--metric", "refclip-s"], "error: --metric refclip-s needs --references")):
        done = subprocess.run([sys.executable, "-m", "neural.score", "--candidates", str(d / "cands.json"),
                               "--images", str(imgs)] + extra, capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith(message) and done.stderr.count("\n") == 1, done.stderr


def test_cli_input_oddities_are_one_error_line(setup, tmp_path, capsys):
    """A folder given as --candidates / --references, a duplicate image id in the candidates or references
    JSON (json would keep the last value silently): one ``error:`` line naming the file and the key."""
    from neural.score import run

    d, imgs, w, _ = setup
    dup = tmp_path / "dup.json"
    dup.write_text('{"im0": "a caption", "im1": "another", "im0": "a third"}')
    dup_refs = tmp_path / "dup_refs.json"
    dup_refs.write_text('{"im0": ["a"], "im0": ["b"]}')
    base = ["--images", str(imgs), "--clip-model", "itr-tiny-clip", "--clip-pretrained", str(w), "--no-cache"]
    cases = [(["--candidates", str(tmp_path)], f"error: --candidates {tmp_path} is a folder; give the JSON file"),
             (["--candidates", str(d / "cands.json"), "--references", str(tmp_path), "--metric", "refclip-s"],
              f"error: --references {tmp_path} is a folder; give the JSON file"),
             (["--candidates", str(dup)], f"error: --candidates {dup}: duplicate key 'im0'"),
             (["--candidates", str(d / "cands.json"), "--references", str(dup_refs), "--metric", "refclip-s"],
              f"error: --references {dup_refs}: duplicate key 'im0'")]
    for argv, needle in cases:
        assert run(argv + base) == 2
        err = capsys.readouterr().err
        assert err.startswith(needle) and err.count("\n") == 1, err


@pytest.mark.parametrize("command", ["neural.score", "neural.train_scorer",
                                     "experiments.caption_metrics_vs_humans", "experiments.published_numbers",
                                     "experiments.pretrain_teaching_clip", "experiments.train_shipped_scorers"])
def test_every_seed_option_has_one_range(command, capsys):
    """--seed −1, 1e20 and 2^31 are argparse errors (exit 2, naming --seed) in every command line; the range
    is the evaluation seeds'."""
    import importlib

    from corpora.cli_values import SEEDS
    from corpora.teaching import EVALUATION_SEEDS

    assert SEEDS == EVALUATION_SEEDS
    parser = importlib.import_module(command).build_parser()
    for bad in ("-1", "1e20", "100000000000000000000", str(2 ** 31)):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["--seed", bad])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert "--seed" in err and "error:" in err and "Traceback" not in err
    assert "--seed" in parser.format_help()


def test_train_scorer_out_is_checked_and_a_failed_save_is_one_error_line(setup, tmp_path, monkeypatch, capsys):
    """--out that is the parent's weights file (or a folder holding it) is refused before training; a disk
    that fills up while the scorer is saved gives one error line naming --out."""
    import errno

    import neural.saved
    import neural.train_scorer as ts_mod

    d, imgs, w, bb = setup
    monkeypatch.setattr("neural.factory.backbone_for", lambda *a, **k: bb)
    monkeypatch.setattr(ts_mod, "train_scorer", lambda *a, **k: object())
    for out, needle in ((w, "is a file; give a folder"), (d, f"contains the --clip-pretrained file {w}")):
        assert ts_mod.run(["--metric", "specs", "--clip-model", "itr-tiny-clip", "--clip-pretrained", str(w),
                           "--out", str(out), "--no-cache", "--quiet"]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, err

    def full(scorer, folder):
        raise OSError(errno.ENOSPC, "No space left on device", str(folder))

    monkeypatch.setattr(neural.saved, "save_scorer", full)
    out = tmp_path / "scorer"
    assert ts_mod.run(["--metric", "specs", "--out", str(out), "--no-cache", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"error: --out {out}: cannot write the scorer (No space left on device" in err and "Traceback" not in err
