"""The teaching CLIP: disjoint seed ranges, the pretraining stream, resumable pretraining, the shipped
file's size, its SHA-256 check and generator-version warning, and (once shipped) its model-card figure."""
from __future__ import annotations

import json
import warnings

import pytest
import torch

from corpora.teaching import (
    EVALUATION_SEEDS, HELDOUT_SEEDS, PRETRAIN_SEEDS, SCORER_TRAINING_SEEDS, heldout_pool_set, make_teaching_set,
    pretraining_chunk, scorer_training_set,
    scene_fingerprints, seed_purpose,
)
from experiments.pretrain_teaching_clip import main as pretrain_main
from neural import teaching_clip as tc
from neural.checkpoints import file_sha256
from neural.teaching_stream import HeldOutPool, StreamSpec, TeachingStream

TINY = ["--steps", "4", "--batch-size", "4", "--chunk-size", "6", "--warmup", "2", "--eval-every", "2",
        "--eval-images", "6", "--checkpoint-every", "1", "--quiet"]


def tiny_cfg() -> tc.PretrainConfig:
    return tc.PretrainConfig(steps=4, batch_size=4, chunk_size=6, warmup=2, eval_every=2, eval_images=6,
                             checkpoint_every=1)


def test_seed_ranges_are_disjoint_and_cover_32_bits():
    ranges = [EVALUATION_SEEDS, PRETRAIN_SEEDS, SCORER_TRAINING_SEEDS, HELDOUT_SEEDS]
    assert [r.start for r in ranges] == [0, 2 ** 31, 2 ** 31 + 2 ** 29, 2 ** 31 + 2 ** 30]
    assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:])) and HELDOUT_SEEDS.stop == 2 ** 32
    assert "evaluation" in seed_purpose(0) and "pretraining" in seed_purpose(2 ** 31)
    assert "scorers' training" in seed_purpose(2 ** 31 + 2 ** 29)
    assert pretraining_chunk(3, size=4).seed == PRETRAIN_SEEDS.start + 3
    assert scorer_training_set(2, n_images=6, n_train=2, n_dev=2).seed == SCORER_TRAINING_SEEDS.start + 2
    assert heldout_pool_set(5).seed == HELDOUT_SEEDS.start
    with pytest.raises(ValueError, match="index must be in"):
        pretraining_chunk(len(PRETRAIN_SEEDS), size=4)
    with pytest.raises(ValueError, match="evaluation corpora take seeds"):
        make_teaching_set(n_images=6, n_train=2, n_dev=2, seed=SCORER_TRAINING_SEEDS.start)


def test_pretraining_stream_holds_no_scene_of_the_default_corpus():
    """Scene fingerprints (every continuous coordinate) of the default seed-0 corpus are absent from the
    first 5000 images of the pretraining stream and from the held-out pool; the same check finds the
    overlap of a set with itself, so it could fail."""
    default = scene_fingerprints(make_teaching_set())
    assert len(default) == 2000
    assert scene_fingerprints(make_teaching_set(n_images=300, n_train=100, n_dev=100)) & default
    stream = set()
    for c in range(5):
        stream |= scene_fingerprints(pretraining_chunk(c))
    assert len(stream) == 5000
    assert not stream & default
    assert not scene_fingerprints(heldout_pool_set(300)) & (default | stream)


def test_stream_batches_are_distinct_images_and_each_pair_comes_once_per_chunk():
    spec = StreamSpec(chunk_size=10, batch_size=4, seed=1, prompt_rate=0.0)
    a, b = TeachingStream(spec, lambda im: torch.zeros(1)), TeachingStream(spec, lambda im: torch.zeros(1))
    texts = [a.batch(s)[1] for s in range(spec.steps_per_chunk)]
    assert [len(t) for t in texts[:3]] == [4, 4, 2] and spec.pairs_until(spec.steps_per_chunk) == 50
    chunk = pretraining_chunk(0, size=10)
    all_pairs = sorted(c.text for i in chunk.image_ids for c in chunk.captions[i])
    assert sorted(t for batch in texts for t in batch) == all_pairs
    assert b.batch(7)[1] == texts[7] and b.batch(2)[1] == texts[2]   # any order, same batch
    assert a.batch(spec.steps_per_chunk)[1] != texts[0]                # next chunk: new images


def test_pretraining_resumes_to_the_uninterrupted_result(tmp_path):
    """The command runs a few steps on a tiny stream, stops at a checkpoint, and a rerun resumes from it
    to exactly the weights and losses of one uninterrupted run."""
    assert pretrain_main(["--out", str(tmp_path / "a"), *TINY, "--stop-at", "2"]) == 0
    rec = json.loads((tmp_path / "a" / "checkpoint.json").read_text())
    assert rec["step"] == 2
    assert pretrain_main(["--out", str(tmp_path / "a"), *TINY]) == 0
    model_b, log_b = tc.pretrain(tmp_path / "b", tiny_cfg(), show_progress=False)
    resumed, _ = tc.pretrain(tmp_path / "a", tiny_cfg(), show_progress=False)  # already done: loads only
    for (k, v), w in zip(resumed.state_dict().items(), model_b.state_dict().values()):
        assert torch.equal(v, w), k
    log_a = json.loads((tmp_path / "a" / "log.json").read_text())
    assert [e[:2] for e in log_a["loss"]] == [e[:2] for e in log_b["loss"]] and len(log_a["loss"]) == 4
    assert [e["step"] for e in log_a["eval"]] == [0, 2, 4]
    assert set(log_a["eval"][-1]["annotation"]) >= {"R@1", "R@5", "R@10"} and "search" in log_a["eval"][-1]
    # a finished run exports from its checkpoint without training again
    out = tmp_path / "w" / "tc.safetensors"
    assert pretrain_main(["--out", str(tmp_path / "a"), *TINY, "--export", str(out), "--card-pools", "6"]) == 0
    rec = json.loads(tc.weights_record_path(out).read_text())
    assert rec["metadata"]["steps"] == "4" and set(rec["heldout"]) == {"6"}
    assert tc.load_teaching_clip(out, device="cpu", show_progress=False).weights_id
    assert pretrain_main(["--out", str(tmp_path / "c"), *TINY, "--stop-at", "1", "--export", str(out)]) == 1
    with pytest.raises(ValueError, match="another recipe"):
        tc.pretrain(tmp_path / "a", tc.PretrainConfig(steps=4, batch_size=4, chunk_size=6, lr=5e-4),
                    show_progress=False)


def test_shipped_size_of_the_real_architecture_fits():
    n = tc.parameter_count(tc.TEACHING_ARCH)
    assert 3_000_000 < n and tc.fp16_file_bytes() == 2 * n
    assert tc.fp16_file_bytes() + 64_000 <= tc.MAX_WEIGHTS_BYTES   # header and metadata: a few KB
    # the factorised embedding is what makes it fit: a full 49,408 x 128 table alone would take 12.6 MB
    assert 2 * (n + 49408 * (128 - 32) - 32 * 128) > tc.MAX_WEIGHTS_BYTES


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("tc")
    model, log = tc.pretrain(d / "run", tc.PretrainConfig(steps=1, batch_size=4, chunk_size=6, eval_every=0),
                             show_progress=False)
    rec = tc.export_weights(model, d / "w.safetensors", tc.PretrainConfig(steps=1, batch_size=4, chunk_size=6),
                            1, log=log, pools=(8,), show_progress=False)
    return d / "w.safetensors", rec


def test_export_records_sha_and_loads(exported):
    path, rec = exported
    assert rec["bytes"] == path.stat().st_size and rec["sha256"] == file_sha256(path)
    assert rec["metadata"]["generator_version"] and rec["metadata"]["pretrain_seeds"].startswith(f"[{2 ** 31}, ")
    bb = tc.load_teaching_clip(path, device="cpu", show_progress=False)
    assert bb.arch == tc.TEACHING_ARCH and bb.encode_texts(["a red circle"]).shape == (1, 128)
    again = HeldOutPool(8, bb.preprocess, bb.tokenizer).evaluate(bb.model)
    assert again == rec["heldout"]["8"]
    table = tc.card_table(rec)
    assert rec["sha256"] in table and "held-out (8 images) search R@1 / R@5 / R@10" in table


def test_damaged_or_missing_weights_stop_with_one_error(exported, tmp_path):
    path, _ = exported
    bad = tmp_path / "w.safetensors"
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    bad.write_bytes(bytes(data))
    tc.weights_record_path(bad).write_text(tc.weights_record_path(path).read_text())
    for target, why in ((bad, "damaged"), (tmp_path / "none.safetensors", "not found")):
        with pytest.raises(tc.TeachingCLIPError, match=why) as err:
            tc.load_teaching_clip(target, device="cpu", show_progress=False)
        assert str(target) in str(err.value) and tc.REBUILD_COMMAND in str(err.value)
    tc.weights_record_path(bad).unlink()
    with pytest.raises(tc.TeachingCLIPError, match="record"):
        tc.load_teaching_clip(bad, device="cpu", show_progress=False)


def test_other_generator_version_warns_with_the_command(exported, tmp_path, monkeypatch):
    path, _ = exported
    with warnings.catch_warnings():
        warnings.simplefilter("error", tc.GeneratorVersionWarning)
        tc.load_teaching_clip(path, device="cpu", show_progress=False)   # same version: silent
    monkeypatch.setattr(tc, "GENERATOR_VERSION", tc.GENERATOR_VERSION + 1)
    with pytest.warns(tc.GeneratorVersionWarning, match="re-pretrain with: python -m experiments.pretrain"):
        tc.load_teaching_clip(path, device="cpu", show_progress=False)


def test_shipped_weights_reproduce_the_model_card_figure():
    """The shipped file (package data, <= 10 MB) passes its SHA-256 check and reproduces its record's
    held-out figure on the small pool."""
    assert tc.WEIGHTS_FILE.stat().st_size <= tc.MAX_WEIGHTS_BYTES
    record = json.loads(tc.weights_record_path(tc.WEIGHTS_FILE).read_text())
    n = min(int(k) for k in record["heldout"])
    bb = tc.load_teaching_clip(device="cpu", show_progress=False)
    got = HeldOutPool(n, bb.preprocess, bb.tokenizer).evaluate(bb.model)
    for task in ("annotation", "search"):
        for k in ("R@1", "R@5", "R@10"):   # within one query (fp32 reductions may differ across CPUs)
            assert abs(got[task][k] - record["heldout"][str(n)][task][k]) <= 100.0 / n + 1e-9, (task, k)


def test_backbone_for_names_the_teaching_clip(tmp_path):
    """``--clip-model teaching`` reaches the verified loader (never a training run); ``tiny-trained`` stays
    the explicit in-run training."""
    from neural.factory import backbone_for
    from neural.names import is_teaching_model, is_tiny_model

    assert is_teaching_model("teaching") and is_teaching_model("Teaching-CLIP") and not is_teaching_model(None)
    assert is_tiny_model("tiny-trained") and not is_tiny_model("teaching")
    missing = tmp_path / "absent.safetensors"
    with pytest.raises(tc.TeachingCLIPError, match="rebuild them with"):
        backbone_for(None, "teaching", missing, device="cpu", show_progress=False)


def test_score_cli_uses_the_teaching_clip_and_stops_on_a_missing_file(exported, tmp_path, capsys,
                                                                      write_score_inputs):
    from neural.score import main as score_main

    path, _ = exported
    imgs, cands = write_score_inputs(tmp_path, 2, "a red circle {k}")
    base = ["--candidates", str(cands), "--images", str(imgs), "--no-cache", "--quiet",
            "--clip-model", "teaching", "--device", "cpu", "--out", str(tmp_path / "out.json")]
    score_main(base + ["--clip-pretrained", str(path)])
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["backbone"]["arch"] == tc.TEACHING_ARCH and len(out["per_instance"]) == 2
    with pytest.raises(SystemExit, match="rebuild them with: python -m experiments.pretrain_teaching_clip"):
        score_main(base + ["--clip-pretrained", str(tmp_path / "absent.safetensors")])


def test_lclip_student_starts_from_the_factorised_teaching_embedding(exported):
    """L-CLIPScore's student takes the teacher's token table by SVD; the teaching CLIP's table is itself
    factorised (E = A B, rank 32), so a rank-32 factorisation reproduces it and the student is smaller."""
    import torch

    from neural.architectures import token_embedding_matrix
    from neural.lclip import MultiplexedCLIP

    path, _ = exported
    teacher = tc.load_teaching_clip(path, device="cpu", show_progress=False).model
    student = MultiplexedCLIP(teacher)
    assert student.embed_rank == 32
    assert sum(p.numel() for p in student.parameters()) < sum(p.numel() for p in teacher.parameters())
    e_teacher = token_embedding_matrix(teacher.token_embedding)
    assert e_teacher.shape == (49408, 128)
    assert torch.allclose(token_embedding_matrix(student.token_embedding), e_teacher, atol=1e-5)


def test_main_job_defaults_to_the_teaching_clip(exported, tmp_path):
    """No --clip-model: the shipped teaching CLIP zero-shot (never trained in the run); --clip-steps needs
    the explicit in-run training; a missing or damaged file stops before the corpus with the rebuild
    command."""
    from experiments.flickr8k_kcca import build_parser
    from experiments.options import (OptionError, RunOptions, check_neural_options, uses_small_clip,
                                     uses_teaching_clip, uses_tiny_clip)

    def options(*argv):
        return RunOptions.from_args(build_parser().parse_args(["--out", str(tmp_path / "run"), *argv]))

    default = options()
    assert uses_teaching_clip(default) and not uses_tiny_clip(default) and uses_small_clip(default)
    tiny = options("--clip-model", "tiny-trained", "--clip-steps", "3")
    assert uses_tiny_clip(tiny) and uses_small_clip(tiny) and not uses_teaching_clip(tiny)
    with pytest.raises(OptionError, match="--clip-steps .*--clip-model tiny"):
        options("--clip-steps", "3")
    path, _ = exported
    check_neural_options(options("--clip-pretrained", str(path)))   # a verified file of it: accepted
    with pytest.raises(OptionError, match="rebuild them with: python -m experiments.pretrain_teaching_clip"):
        check_neural_options(options("--clip-pretrained", str(tmp_path / "absent.safetensors")))


def _run_pretrain(argv, capsys):
    """``(exit status, stderr)`` of the command line run in this process (argparse's errors included)."""
    from experiments.pretrain_teaching_clip import run

    capsys.readouterr()
    try:
        rc = run(argv)
    except SystemExit as exc:   # argparse's own option errors
        rc = exc.code
    return rc, capsys.readouterr().err


def test_every_refusal_of_pretraining_is_one_error_line(tmp_path, capsys):
    """Option values that cannot work (including ``--steps -4``, ``--prompt-rate 2``, ``--warmup -5``,
    ``--seed -1`` and a NaN or negative learning rate), ``--out`` a file, ``--no-resume`` on an existing
    run, another recipe on resume and a damaged checkpoint: exit 2 and one ``error:`` line, no traceback."""
    from experiments.pretrain_teaching_clip import run

    afile = tmp_path / "afile"
    afile.write_text("x")
    run_dir = tmp_path / "run"
    assert run(["--out", str(run_dir), *TINY, "--stop-at", "1"]) == 0
    bad_values = [["--batch-size", "0"], ["--chunk-size", "0"], ["--checkpoint-every", "0"], ["--eval-images", "0"],
                  ["--lr", "nan"], ["--lr", "-0.1"], ["--lr", "0"], ["--seed", "-1"], ["--seed", "1e20"],
                  ["--steps", "-4"], ["--prompt-rate", "2"], ["--warmup", "-5"], ["--n-pairs", "1000000000000"],
                  ["--card-pools", "0"]]
    for extra in bad_values:
        rc, err = _run_pretrain(["--out", str(tmp_path / "new"), *TINY, *extra], capsys)
        assert rc == 2 and "error:" in err and extra[0] in err, (extra, err)
    assert not (tmp_path / "new").exists()
    rec = run_dir / "checkpoint.json"
    cases = [(["--out", str(afile), *TINY], f"error: --out {afile} is a file"),
             (["--out", str(afile / "sub"), *TINY], "is a file, not a folder"),
             (["--out", str(run_dir), *TINY, "--no-resume"], "error: --no-resume:"),
             (["--out", str(run_dir), *TINY[:-1], "--lr", "0.002", "--quiet"], "another recipe")]
    for argv, needle in cases:
        rc, err = _run_pretrain(argv, capsys)
        assert rc == 2 and needle in err and err.count("error:") == 1, (argv, err)
    ckpt = run_dir / "checkpoint.safetensors"
    ckpt.write_bytes(ckpt.read_bytes()[:100])   # a damaged checkpoint
    rc, err = _run_pretrain(["--out", str(run_dir), *TINY], capsys)
    assert rc == 2 and f"error: --out {run_dir}: cannot resume" in err, err
    rec.write_text("{not json")                 # a damaged record
    rc, err = _run_pretrain(["--out", str(run_dir), *TINY], capsys)
    assert rc == 2 and "cannot resume" in err, err


def test_export_never_destroys_the_checkpoint_or_an_unrelated_file(tmp_path, capsys):
    """``--export`` onto the run's own checkpoint, or onto ``X.safetensors`` beside an unrelated ``X.json``
    (or an unrelated ``X.safetensors``), is refused before any training; the files are intact."""
    from experiments.pretrain_teaching_clip import run

    run_dir = tmp_path / "run"
    assert run(["--out", str(run_dir), *TINY, "--stop-at", "1"]) == 0
    ckpt = run_dir / "checkpoint.safetensors"
    before = {p: p.read_bytes() for p in run_dir.iterdir()}
    unrelated = tmp_path / "X.json"
    unrelated.write_text('{"mine": true}')
    other = tmp_path / "Y.safetensors"
    other.write_bytes(b"user data")
    for export, needle in ((ckpt, "is the --out file"), (run_dir / "log.safetensors", "is the --out file"),
                           (tmp_path / "X.safetensors", "X.json exists and is not an earlier export"),
                           (other, "Y.safetensors exists and is not an earlier export"),
                           (tmp_path / "Z.bin", "give a .safetensors file name")):
        rc, err = _run_pretrain(["--out", str(run_dir), *TINY, "--export", str(export)], capsys)
        assert rc == 2 and needle in err and err.count("error:") == 1, (export, err)
    assert {p: p.read_bytes() for p in run_dir.iterdir()} == before
    assert unrelated.read_text() == '{"mine": true}' and other.read_bytes() == b"user data"


def _damaged_weights(tmp_path, how: str):
    """A copy of the shipped teaching-CLIP weights damaged ``how``, with a record that matches its bytes."""
    import hashlib

    from safetensors import safe_open
    from safetensors.torch import save_file

    src = tc.WEIGHTS_FILE
    with safe_open(str(src), framework="pt") as f:
        meta = dict(f.metadata() or {})
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    p = tmp_path / f"{how}.safetensors"
    name = sorted(k for k, v in tensors.items() if v.ndim >= 2)[0]
    if how == "truncated":
        p.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    elif how == "not-safetensors":
        p.write_bytes(b"PK\x03\x04 this is no safetensors file" * 100)
    else:
        if how == "wrong-shape":
            tensors[name] = torch.zeros(tuple(s + 1 for s in tensors[name].shape), dtype=tensors[name].dtype)
        elif how == "missing-key":
            tensors.pop(name)
        elif how == "int8":
            tensors = {k: v.to(torch.int8) for k, v in tensors.items()}
        elif how == "nan":
            tensors[name] = tensors[name].clone()
            tensors[name].view(-1)[7] = float("nan")
        elif how == "inf-bf16":
            tensors = {k: v.to(torch.bfloat16) for k, v in tensors.items()}
            tensors[name].view(-1)[3] = float("inf")
        save_file(tensors, str(p), metadata=meta)
    tc.weights_record_path(p).write_text(json.dumps({"file": p.name, "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}))
    return p


DAMAGE = {"truncated": "truncated", "not-safetensors": "not a safetensors file", "wrong-shape": "does not fit",
          "missing-key": "does not fit", "int8": "weights must be floating point", "nan": "NaN or infinite",
          "inf-bf16": "NaN or infinite"}


@pytest.mark.parametrize("how", sorted(DAMAGE))
def test_teaching_weights_are_checked_for_what_they_hold(how, tmp_path, capsys):
    """Weights whose record matches their bytes but that cannot score (truncated, not safetensors, a wrong
    shape, a missing key, int8, NaN / infinity): the loader, neural.score and the main job's option check
    each give one error naming the file (and the option), never a traceback, ``nan`` or all-zero scores."""
    from experiments.options import OptionError, check_backbone
    from experiments.backbone_specs import BackboneSpec, DEFAULT_BACKBONE
    from neural.score import run as score_run

    p = _damaged_weights(tmp_path, how)
    with pytest.raises(tc.TeachingCLIPError, match=rf"{p.name}: .*{DAMAGE[how]}.*rebuild them with"):
        tc.load_teaching_clip(p, device="cpu", show_progress=False)
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    from PIL import Image
    Image.new("RGB", (40, 30), (10, 200, 10)).save(imgs / "a.png")
    cands = tmp_path / "c.json"
    cands.write_text('{"a": "a green picture"}')
    capsys.readouterr()
    assert score_run(["--candidates", str(cands), "--images", str(imgs), "--clip-model", "teaching",
                      "--clip-pretrained", str(p), "--no-cache", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --clip-pretrained") and str(p) in err and DAMAGE[how] in err, err
    assert err.count("\n") == 1
    if how not in ("wrong-shape", "missing-key"):   # found from the file alone, without torch
        with pytest.raises(OptionError, match=rf"--clip-pretrained: teaching CLIP weights {p}: .*{DAMAGE[how]}"):
            check_backbone(BackboneSpec(DEFAULT_BACKBONE, "teaching", str(p)))
