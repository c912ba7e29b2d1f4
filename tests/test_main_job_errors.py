"""User mistakes and damaged inputs in the main job (``python -m experiments.flickr8k_kcca``): a clear
``error:`` line (exit 2, no traceback), also written to ``run.log``; options checked before any work.

The real-data cases use a small Flickr8k folder in the standard layout made from the shared bundle:
the 14 shared JPEGs (copied, so one can be damaged), the real caption files, and split files naming
8 / 3 / 3 of the 14 images.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINY = ["--teaching-size", "60", "--no-progress"]


def run_job(args, tmp_path: Path, *, out: Path | None = None, **env_extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, ITR_CACHE_DIR=str(tmp_path / "cache"), **env_extra)
    cmd = [sys.executable, "-m", "experiments.flickr8k_kcca", *args, "--cache-dir", str(tmp_path / "cache")]
    if out is not None:
        cmd += ["--out", str(out)]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def assert_clean_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for n in needles:
        assert n in proc.stderr, (n, proc.stderr[-3000:])


@pytest.fixture(scope="module")
def mini_flickr8k(flickr8k_dir, tmp_path_factory):
    jpgs = sorted((flickr8k_dir / "Flicker8k_Dataset").glob("*.jpg"))
    if len(jpgs) < 14:
        pytest.skip(f"needs the 14 shared Flickr8k JPEGs in {flickr8k_dir / 'Flicker8k_Dataset'}")
    root = tmp_path_factory.mktemp("mini8k")
    (root / "Flicker8k_Dataset").mkdir()
    text = root / "Flickr8k_text"
    text.mkdir()
    for p in jpgs:
        shutil.copyfile(p, root / "Flicker8k_Dataset" / p.name)
    for name in ("Flickr8k.token.txt", "Flickr8k.lemma.token.txt"):
        (text / name).symlink_to(flickr8k_dir / "Flickr8k_text" / name)
    names = [p.name for p in jpgs]
    for split, ids in (("train", names[:8]), ("dev", names[8:11]), ("test", names[11:14])):
        (text / f"Flickr_8k.{split}Images.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    return root, names


def test_options_are_checked_before_any_work(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    assert_clean_error(run_job(TINY + ["--systems", "BoW1", "--metrics", "none"], tmp_path, out=afile),
                       f"--out {afile}: exists and is not a folder")
    out = tmp_path / "out"
    proc = run_job(TINY + ["--systems", "none", "--metrics", "CLIP-S", "--clip-model", "ViT-B-23"], tmp_path,
                   out=out)
    assert_clean_error(proc, "--clip-model: unknown CLIP architecture 'ViT-B-23'", "did you mean")
    proc = run_job(TINY + ["--systems", "none", "--metrics", "CLIP-S", "--clip-model", "ViT-B-32",
                           "--clip-pretrained", str(tmp_path / "nope.pt")], tmp_path, out=out)
    assert_clean_error(proc, "nope.pt: weights file not found")
    # a pretrained tag that is not cached, with downloads off: refused before the corpus is made
    proc = run_job(TINY + ["--systems", "BoW1", "--metrics", "CLIP-S", "--clip-model", "ViT-B-32"], tmp_path,
                   out=out, ITR_OFFLINE="1", HF_HOME=str(tmp_path / "hf"), XDG_CACHE_HOME=str(tmp_path / "xdg"))
    assert_clean_error(proc, "CLIP weights ViT-B-32/openai are not available", "downloads are off",
                       "--clip-pretrained /path/to/file")
    proc = run_job(TINY + ["--systems", "none", "--metrics", "CLIP-S", "--clip-model", "ViT-B-32",
                           "--clip-pretrained", "no-such-tag"], tmp_path, out=out)
    assert_clean_error(proc, "pretrained='no-such-tag' is neither a file nor a known tag")
    # no CUDA device visible to the job on any machine: the refusal is checked with or without a GPU
    proc = run_job(TINY + ["--systems", "none", "--metrics", "CLIP-S", "--device", "cuda"], tmp_path, out=out,
                   CUDA_VISIBLE_DEVICES="")
    assert_clean_error(proc, "--device", "no CUDA device", "--device cpu")
    proc = run_job(TINY + ["--systems", "none", "--metrics", "CLIP-S"], tmp_path, out=out,
                   CUDA_VISIBLE_DEVICES="", ITR_DEVICE="cuda")
    assert_clean_error(proc, "--device", "$ITR_DEVICE='cuda'", "set ITR_DEVICE=cpu, or unset it")
    assert not out.exists()  # nothing was loaded, trained or written
    assert "corpus …" not in proc.stderr


def test_damaged_image_is_named_without_traceback_and_logged(mini_flickr8k, tmp_path):
    root, names = mini_flickr8k
    bad = root / "Flicker8k_Dataset" / names[12]
    data = bad.read_bytes()
    try:
        bad.write_bytes(data[:2000])
        out = tmp_path / "out"
        proc = run_job(["--data", str(root), "--systems", "BoW1", "--metrics", "none", "--no-progress"],
                       tmp_path, out=out)
        assert_clean_error(proc, f"{bad}: cannot read image")
        log = (out / "run.log").read_text(encoding="utf-8")
        assert "ERROR" in log and f"{bad}: cannot read image" in log
        # loader notes are logged as plain messages, not as 'file.py:N: UserWarning' + source line
        assert "warning: Flickr8k.token.txt: image id '2258277193_586949ec62.jpg.1'" in proc.stderr
        assert "UserWarning" not in proc.stderr and "pipeline.py:" not in proc.stderr
    finally:
        bad.write_bytes(data)


def test_requested_methods_are_checked_and_recorded_when_retrieval_is_skipped(fourteen_images_standard,
                                                                                 tmp_path):
    """With too few images on disk retrieval is skipped; the neural options are still checked, and
    results.json / the report say what was requested and not run."""
    root = fourteen_images_standard
    common = ["--data", str(root), "--skip-missing-images", "--no-progress", "--metrics", "CLIP-S",
              "--systems", "NN5_F1^idf"]
    proc = run_job(common + ["--clip-model", "ViT-B-32", "--clip-pretrained", "/nonexistent/w.pt"], tmp_path,
                   out=tmp_path / "bad")
    assert_clean_error(proc, "/nonexistent/w.pt: weights file not found")
    out = tmp_path / "out"
    proc = run_job(common, tmp_path, out=out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads((out / "results.json").read_text(encoding="utf-8"))
    prov = r["provenance"]
    assert prov["systems_requested"] == ["NN5_F1^idf"] and prov["neural_requested"] == ["CLIP-S"]
    assert prov["systems_run"] == [] and prov["neural_run"] == []
    assert any(n.startswith("not run (retrieval skipped): NN5_F1^idf, CLIP-S") for n in r["corpus"]["notes"])
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "not run (retrieval skipped)" in md and "test pool: empty (none of its images is on disk)" in md
    # a second run into the same folder says that it replaces the earlier report
    proc = run_job(common, tmp_path, out=out)
    assert proc.returncode == 0 and "holds an earlier run's report" in proc.stderr, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def fourteen_images_standard(flickr8k_dir, tmp_path_factory):
    """The real split files with the 14 shared JPEGs: every pool has fewer than 2 images on disk."""
    root = tmp_path_factory.mktemp("flickr8k14e")
    (root / "Flicker8k_Dataset").symlink_to(flickr8k_dir / "Flicker8k_Dataset", target_is_directory=True)
    (root / "Flickr8k_text").symlink_to(flickr8k_dir / "Flickr8k_text", target_is_directory=True)
    return root


def test_missing_images_message_names_the_option_not_the_keyword(mini_flickr8k, tmp_path):
    root, names = mini_flickr8k
    moved = root / "Flicker8k_Dataset" / names[9]
    hidden = tmp_path / names[9]
    shutil.move(moved, hidden)
    try:
        proc = run_job(["--data", str(root), "--systems", "BoW1", "--metrics", "none", "--no-progress"],
                       tmp_path, out=tmp_path / "out")
        assert_clean_error(proc, "needs 3 images, 1 is missing", "pass --skip-missing-images to run on the 2 "
                           "images present")
        assert "skip_missing_images=True" not in proc.stderr
    finally:
        shutil.move(hidden, moved)


def test_scorer_names_are_case_insensitive_and_unknown_ones_listed():
    from experiments.errors import PipelineError
    from experiments.options import parse_list
    from neural.registry import scorer_names

    assert parse_list("clip-s, refpac-s,l-clipscore", (), scorer_names(), "--metrics") == [
        "CLIP-S", "RefPAC-S", "L-CLIPScore"]
    with pytest.raises(PipelineError, match=r"unknown metrics: clip-x \(choose from CLIP-S, "):
        parse_list("clip-s,clip-x", (), scorer_names(), "--metrics")


@pytest.fixture()
def console_logger(request):
    """``(logger, buffer)``: a logger printing through the main job's console handler into a buffer."""
    import io
    import logging

    from experiments.runlog import ConsoleHandler

    buf = io.StringIO()
    handler = ConsoleHandler(buf)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger = logging.getLogger(f"test.{request.node.name}")
    logger.addHandler(handler)
    logger.propagate = False
    yield logger, buf
    logger.removeHandler(handler)


def test_console_log_lines_do_not_land_inside_progress_bars(console_logger):
    """A warning logged while nested progress bars are on screen is printed on its own line: the bars are
    cleared first (tqdm.write) and redrawn after it, instead of the message continuing a bar's line."""
    import re

    from tqdm.auto import tqdm

    logger, buf = console_logger
    for i in tqdm(range(2), file=buf, desc="outer"):
        for j in tqdm(range(2), file=buf, desc="inner", leave=False):
            if i == j == 1:
                logger.warning("warning: the kernel is not PSD")
    out = buf.getvalue()
    assert re.search(r"\r {10,}\r(\x1b\[A)*warning: the kernel is not PSD\n", out), out
    assert "outer:" in out[out.index("warning: the kernel"):]          # the bars come back below it


def test_console_handler_does_not_deadlock_with_tqdms_lock(console_logger):
    """tqdm warns while holding its write lock (its monitor thread); the job logs warnings.  The console
    handler must not take its own lock around tqdm.write, or that thread and one logging at the same time
    wait for each other forever."""
    import threading
    import time

    from tqdm.auto import tqdm

    logger, buf = console_logger
    holding = threading.Event()

    def warns_under_tqdm_lock():
        with tqdm.get_lock():
            holding.set()
            time.sleep(0.3)          # the other thread is inside the handler by now
            logger.warning("warning: from under tqdm's lock")

    def logs_meanwhile():
        holding.wait()
        logger.warning("warning: from the main work")

    threads = [threading.Thread(target=f, daemon=True) for f in (warns_under_tqdm_lock, logs_meanwhile)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert not any(t.is_alive() for t in threads), "deadlock between the handler and tqdm's lock"
    out = buf.getvalue()
    assert "from under tqdm's lock" in out and "from the main work" in out


def test_data_checksums_follow_a_linked_text_folder(flickr8k_dir, tmp_path):
    """results.json's data_checksums cover the caption files also when Flickr8k_text is a symbolic link
    (a common set-up, and what benchmarks/flickr8k_standin.py makes); they used to be empty then."""
    from experiments.provenance import data_checksums

    root = tmp_path / "f8k"
    root.mkdir()
    (root / "Flickr8k_text").symlink_to(flickr8k_dir / "Flickr8k_text", target_is_directory=True)
    (root / "loop").symlink_to(root, target_is_directory=True)       # a link cycle ends
    sums = data_checksums(str(root))
    assert "Flickr8k_text/Flickr8k.token.txt" in sums and "Flickr8k_text/CrowdFlowerAnnotations.txt" in sums
    assert list(sums) == sorted(sums)
    assert not any(k.startswith("loop/loop") for k in sums)


def test_more_mistakes_are_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """Data options, an empty request, PAC-S tuple files, an untrusted TorchScript archive and folders that
    cannot be created: one ``error:`` line and exit 2 before the corpus is made or ``--out`` is written."""
    import zipfile

    from experiments.flickr8k_kcca import main

    monkeypatch.delenv("ITR_TRUST_TORCHSCRIPT", raising=False)
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    (tmp_path / "img.jpg").write_bytes(b"")
    tuples = {
        "absent": tmp_path / "absent.json",
        "not_a_list": tmp_path / "dict.json",
        "missing_field": tmp_path / "field.json",
        "missing_image": tmp_path / "image.json",
    }
    tuples["not_a_list"].write_text('{"image": "img.jpg"}')
    tuples["missing_field"].write_text('[{"image": "img.jpg", "caption": "a dog"}]')
    tuples["missing_image"].write_text('[{"image": "img.jpg", "caption": "a dog", '
                                       '"generated_image": "gen/0.jpg", "generated_caption": "a puppy"}]')
    script = tmp_path / "ViT-B-32.pt"
    with zipfile.ZipFile(script, "w") as z:   # the members that make a file a TorchScript archive
        z.writestr("ViT-B-32/code/__torch__/model.py", "def forward(self): ...")
        z.writestr("ViT-B-32/constants.pkl", b"")
    two = {"image": "img.jpg", "caption": "a dog", "generated_image": "img.jpg", "generated_caption": "a puppy"}
    tuples["too_few"] = tmp_path / "two.json"
    tuples["too_few"].write_text(json.dumps([two, two]))
    garbage = tmp_path / "garbage.pt"
    garbage.write_text("not weights")
    pacs = ["--systems", "none", "--metrics", "PAC-S", "--pacs-positives"]
    clip = ["--systems", "none", "--metrics", "CLIP-S"]
    out = tmp_path / "out"
    cases = [
        (["--data", str(tmp_path / "nope")], f"error: --data {tmp_path / 'nope'}: no such folder"),
        (["--data", str(afile)], f"error: --data {afile}: is a file; give the Flickr8k root folder"),
        (["--systems", ","], "error: --systems: no names in ','"),
        (["--seed", str(2 ** 32)], "error: --seed must be in [0, 2^31) (got 4294967296;"),
        (["--seed", str(2 ** 31)], "error: --seed must be in [0, 2^31) (got 2147483648;"),
        (["--systems", "BoW1", "--metrics", " , "], "error: --metrics: no names in ' , '"),
        (pacs + [str(tuples["too_few"])], f"{tuples['too_few']}: holds 2 tuple(s), need at least 4"),
        (clip + ["--clip-model", "auto"], "error: --clip-model auto infers the architecture from a weights file"),
        (clip + ["--clip-model", "ViT-B-32", "--clip-pretrained", str(garbage)],
         f"error: --clip-pretrained {garbage}: not a weights file"),
        (clip + ["--clip-model", "tiny", "--clip-pretrained", str(garbage)],
         "--clip-model tiny is the tiny CLIP, which is always trained here"),
        (["--teaching-size", "30"], "error: --teaching-size must be at least 60 (got 30)"),
        (["--data", str(tmp_path), "--teaching-size", "100"], "it does not apply with --data"),
        (["--systems", "none", "--metrics", "none"], "error: --systems none and --metrics none: nothing to run"),
        (pacs + [str(tuples["absent"])], f"error: --pacs-positives: {tuples['absent']}: cannot read positive tuples"),
        (pacs + [str(tuples["not_a_list"])], f"{tuples['not_a_list']}: expected a JSON list of tuples"),
        (pacs + [str(tuples["missing_field"])],
         f"{tuples['missing_field']}: entry 0 lacks image / caption / generated_image / generated_caption"),
        (pacs + [str(tuples["missing_image"])],
         f"{tuples['missing_image']}: entry 0: generated_image {tmp_path / 'gen' / '0.jpg'} not found"),
        (["--systems", "none", "--metrics", "CLIP-S", "--pacs-positives", str(tuples["missing_image"])],
         "error: --pacs-positives fine-tunes PAC-S / RefPAC-S, which --metrics does not request"),
        (["--systems", "none", "--metrics", "CLIP-S", "--clip-model", "ViT-B-32", "--clip-pretrained", str(script)],
         f"error: --clip-pretrained {script}: refused — this is a TorchScript archive"),
    ]
    for argv, needle in cases:
        assert main(argv + ["--no-progress", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]) == 2, argv
        err = capsys.readouterr().err
        assert needle in err, (argv, err)
        assert "Traceback" not in err and "corpus …" not in err
        assert not out.exists() and not (tmp_path / "cache").exists()
    ok = ["--systems", "BoW1", "--metrics", "none", "--teaching-size", "60", "--no-progress"]
    assert main(ok + ["--cache-dir", str(tmp_path / "cache"), "--out", str(afile / "sub")]) == 2
    err = capsys.readouterr().err
    assert f"error: --out {afile / 'sub'}: cannot create the folder (Not a directory" in err, err
    assert main(ok + ["--cache-dir", str(afile), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"error: --cache-dir {afile}: exists and is not a folder" in err, err
    assert "corpus …" not in err and not out.exists()
    # a bad --data is refused before the default output folder (runs/<name>-<time>/) is made
    monkeypatch.chdir(tmp_path)
    assert main(["--data", str(tmp_path / "nope"), "--no-progress", "--cache-dir", str(tmp_path / "cache")]) == 2
    assert "no such folder" in capsys.readouterr().err and not (tmp_path / "runs").exists()


def test_a_library_logger_with_its_own_console_handler_is_printed_once(tmp_path, capsys):
    """huggingface_hub puts a stderr handler on its own logger and lets records propagate: the job's
    console handler must not print them a second time, and run.log must still get them."""
    import logging
    import sys

    from experiments.runlog import ConsoleHandler

    lib = logging.getLogger("itr_test_library")
    own = logging.StreamHandler(sys.stderr)
    lib.addHandler(own)
    plain = logging.getLogger("itr_test_plain")
    console = ConsoleHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(message)s"))
    runlog = logging.FileHandler(tmp_path / "run.log", encoding="utf-8")
    root = logging.getLogger()
    root.addHandler(console)
    root.addHandler(runlog)
    try:
        logging.getLogger("itr_test_library.download").warning("retrying the download")
        plain.warning("a note of our own")
        own.setLevel(logging.ERROR)   # the library's handler does not print warnings: the job's does
        lib.warning("below its handler's level")
        lib.propagate = False     # a logger that does not propagate never reaches the job's handlers
        lib.warning("not propagated")
    finally:
        root.removeHandler(console)
        root.removeHandler(runlog)
        runlog.close()
        lib.removeHandler(own)
        lib.propagate = True
    err = capsys.readouterr().err
    assert err.count("retrying the download") == 1
    assert err.count("a note of our own") == 1
    assert err.count("below its handler's level") == 1
    log = (tmp_path / "run.log").read_text(encoding="utf-8")
    assert "retrying the download" in log and "a note of our own" in log and "not propagated" not in log


def test_reference_option_chooses_the_significance_reference(small_teaching_set, tmp_path, capsys):
    """--reference NAME tests every system against NAME in both tasks (the paper's TRI5SEM); 'best' is the
    highest R@10 per task; a name that is not requested is refused before any work."""
    import numpy as np

    from corpora.protocol import hodosh_pool
    from evaluation import ScoreMatrices
    from experiments.errors import PipelineError
    from experiments.evaluation_stage import evaluate_systems
    from experiments.flickr8k_kcca import main
    from experiments.options import reference_choice
    from experiments.outputs import SystemOutput

    pool = hodosh_pool(small_teaching_set, "test")
    n = pool.n_images
    rng = np.random.default_rng(0)
    good = np.eye(n) + 0.5 * rng.random((n, n))                     # the gold item mostly on top
    outputs = {name: SystemOutput(name, "classical", ScoreMatrices.from_affinity(S))
               for name, S in (("TRI5SEM", rng.random((n, n))), ("BoW5", good))}
    _, _, best = evaluate_systems(outputs, pool, permutations=200, seed=0)
    assert best == {"annotation": "BoW5", "search": "BoW5"}
    systems, _, ref = evaluate_systems(outputs, pool, permutations=200, seed=0, reference_system="TRI5SEM")
    assert ref == {"annotation": "TRI5SEM", "search": "TRI5SEM"}
    assert systems["TRI5SEM"]["p_values"] == {"annotation": {}, "search": {}}
    assert systems["BoW5"]["significance"]["annotation"]["R@10"] == "***"
    with pytest.raises(PipelineError, match="did not run"):
        evaluate_systems(outputs, pool, permutations=200, seed=0, reference_system="TRI5")

    assert reference_choice("tri5_a,d_ext+ic^sqrtidf", ["BoW5", "TRI5SEM"], ["CLIP-S"]) == "TRI5SEM"  # the paper's
    assert reference_choice("clip-s", ["BoW5"], ["CLIP-S"]) == "CLIP-S"
    assert reference_choice("best", ["BoW5"], []) is None
    out = tmp_path / "out"
    assert main(["--systems", "BoW1", "--metrics", "none", "--reference", "TRI5SEM", "--no-progress",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: --reference TRI5SEM: not among the requested systems and scorers (BoW1)" in err, err
    assert not out.exists()


def test_options_are_checked_once_into_frozen_run_options(tmp_path, monkeypatch):
    """The command line becomes one frozen RunOptions: each check runs exactly once (the data folder, the
    neural options), the values are resolved (canonical system names, the reference), and no stage
    reads the command line again."""
    import dataclasses

    from experiments import options as options_module
    from experiments.errors import PipelineError
    from experiments.flickr8k_kcca import parse_options
    from experiments.options import RunOptions

    calls: dict[str, int] = {}

    def counting(name):
        real = getattr(options_module, name)

        def wrapper(*a, **k):
            calls[name] = calls.get(name, 0) + 1
            return real(*a, **k)
        return wrapper

    for name in ("check_data_folder", "check_neural_options", "make_folders"):
        monkeypatch.setattr(options_module, name, counting(name))
    opts = parse_options(["--systems", "bow5,tri5_a,d_ext+ic^sqrtidf", "--metrics", "clip-s",
                          "--reference", "TRI5_A,D_ext+ic^sqrtidf", "--teaching-size", "60",
                          "--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
    assert calls == {"check_data_folder": 1, "check_neural_options": 1, "make_folders": 1}
    assert opts.systems == ("BoW5", "TRI5SEM") and opts.neural == ("CLIP-S",) and opts.reference == "TRI5SEM"
    assert opts.n_teaching_images == 60 and opts.out == tmp_path / "out" and (tmp_path / "cache").is_dir()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.seed = 1
    # the values are checked among themselves on every construction (also dataclasses.replace)
    with pytest.raises(PipelineError, match="--clip-pretrained needs an open_clip architecture"):
        dataclasses.replace(opts, clip_model="tiny", clip_pretrained="openai")
    with pytest.raises(PipelineError, match="--seed must be in"):
        RunOptions(seed=-1)
    assert dataclasses.replace(opts, neural=(), clip_model="tiny", clip_pretrained="openai").clip_pretrained == "openai"


def test_cache_dir_that_cannot_be_written_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    """--cache-dir is checked up front with corpora.cache.check_cache_dir (not only created): its error
    names the folder, exit 2, nothing written."""
    import experiments.option_checks
    from corpora.cache import CacheDirError
    from experiments.flickr8k_kcca import main

    seen = []

    def refuse(path):
        seen.append(path)
        raise CacheDirError(f"cache folder {path} is not writable: Permission denied")

    monkeypatch.setattr(experiments.option_checks, "check_cache_dir", refuse)
    out = tmp_path / "out"
    assert main(["--systems", "BoW1", "--metrics", "none", "--teaching-size", "60", "--no-progress",
                 "--cache-dir", str(tmp_path / "cache"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert seen and f"cache folder {tmp_path / 'cache'}" in err and "Traceback" not in err
    assert not out.exists()


def test_exit_now_flushes_output_and_logs_and_keeps_the_status(tmp_path):
    """The main job ends without the interpreter's teardown (experiments.flickr8k_kcca.exit_now): buffered
    stdout and log records must still be written, and the status must be the job's."""
    log_file = tmp_path / "job.log"
    code = ("import logging, sys\n"
            "from experiments.flickr8k_kcca import exit_now\n"
            "lg = logging.getLogger('exit-test'); lg.addHandler(logging.FileHandler(sys.argv[1]))\n"
            "lg.warning('last record')\n"
            "print('buffered line', end='')\n"
            "exit_now(3)\n"
            "print('never')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(log_file)], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert proc.stdout == "buffered line"
    assert log_file.read_text(encoding="utf-8").strip() == "last record"


def test_out_never_replaces_a_users_files_or_an_input(tmp_path, capsys):
    """``--out`` on a non-empty folder that is not a run of the job (report.md, run.log, plots/ of
    something else), equal to ``--data``, containing it or inside it: one error line, nothing written;
    an empty folder and a previous run's folder (results.json) are accepted."""
    from experiments.flickr8k_kcca import main, parse_options

    foreign = tmp_path / "foreign"
    (foreign / "plots").mkdir(parents=True)
    for name in ("report.md", "run.log", "plots/keep.png"):
        (foreign / name).write_text("mine")
    data = tmp_path / "data" / "flickr8k"
    (data / "Flickr8k_text").mkdir(parents=True)
    tiny = ["--systems", "BoW1", "--metrics", "none", "--teaching-size", "60", "--no-progress",
            "--cache-dir", str(tmp_path / "cache")]
    cases = [(tiny + ["--out", str(foreign)], f"error: --out {foreign} is a non-empty folder that is not a run"),
             (["--data", str(data), "--out", str(data)], f"--out {data} is the --data folder"),
             (["--data", str(data), "--out", str(data.parent)], f"--out {data.parent} contains the --data folder"),
             (["--data", str(data), "--out", str(data / "run")], f"--out {data / 'run'} lies inside the --data folder")]
    for argv, needle in cases:
        assert main(argv + ["--no-progress", "--cache-dir", str(tmp_path / "cache")]) == 2, argv
        err = capsys.readouterr().err
        assert needle in err and "Traceback" not in err and err.count("\n") == 1, err
    assert sorted(p.name for p in foreign.rglob("*")) == ["keep.png", "plots", "report.md", "run.log"]
    assert all(p.read_text() == "mine" for p in foreign.rglob("*") if p.is_file())
    assert sorted(p.name for p in data.rglob("*")) == ["Flickr8k_text"]
    previous = tmp_path / "previous"
    previous.mkdir()
    (previous / "results.json").write_text("{}")
    (previous / "report.md").write_text("old")
    for ok in (tmp_path / "empty", previous):
        ok.mkdir(exist_ok=True)
        assert parse_options(tiny + ["--out", str(ok)]).out == ok
    with_cache = tmp_path / "with-cache"   # the run's own cache folder inside --out is not a foreign file
    assert parse_options(tiny + ["--out", str(with_cache), "--cache-dir", str(with_cache / "cache")]).out == with_cache
    assert "--out DIR" in subprocess.run([sys.executable, "-m", "experiments.flickr8k_kcca", "--help"], cwd=REPO,
                                         capture_output=True, text=True).stdout


def test_sizes_past_their_documented_maximum_are_refused_up_front(tmp_path, capsys):
    from corpora.cli_values import MAX_TEACHING_SIZE
    from experiments.flickr8k_kcca import main

    out = tmp_path / "out"
    for size in (MAX_TEACHING_SIZE + 1, 10 ** 12):
        assert main(["--teaching-size", str(size), "--out", str(out), "--cache-dir", str(tmp_path / "c")]) == 2
        err = capsys.readouterr().err
        assert f"error: --teaching-size must be at most {MAX_TEACHING_SIZE:,}" in err
    assert not out.exists()


def _full_disk_at(monkeypatch, name: str):
    """``os.fsync`` of a file whose name starts with ``name`` fails as on a full disk."""
    import errno

    real = os.fsync

    def fsync(fd):
        real(fd)
        if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(name):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", fsync)


def test_a_full_output_location_is_one_error_line(tmp_path, capsys, monkeypatch):
    """Full before the run (the folder's first write) and full while the report is written: one ``error:``
    line naming --out, exit 2, no ``report.html.tmp`` left behind."""
    from experiments.flickr8k_kcca import main

    tiny = ["--systems", "BoW1", "--metrics", "none", "--teaching-size", "60", "--no-progress",
            "--cache-dir", str(tmp_path / "cache"), "--permutations", "10"]
    with monkeypatch.context() as m:
        _full_disk_at(m, ".itr-run")
        out = tmp_path / "full-at-start"
        assert main(tiny + ["--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"error: --out {out}: cannot write into the folder (No space left on device" in err
        assert "corpus …" not in err and list(out.iterdir()) == []
    with monkeypatch.context() as m:
        _full_disk_at(m, "report.html")
        out = tmp_path / "full-at-report"
        assert main(tiny + ["--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"error: --out {out}: cannot write the report (No space left on device" in err, err[-2000:]
        assert "Traceback" not in err
        assert not list(out.rglob("*.tmp"))


def test_a_run_log_that_cannot_be_written_is_one_warning(tmp_path, capsys):
    """A disk that fills up under run.log: one ``warning:`` line, no logging traceback per record."""
    import errno
    import logging

    from experiments.runlog import setup_logging, teardown_logging

    handler = setup_logging(tmp_path)
    try:
        def full(*a, **k):
            raise OSError(errno.ENOSPC, "No space left on device")

        handler.stream.write = full
        for k in range(3):
            logging.getLogger("itr.test").warning("line %d", k)
    finally:
        handler.stream.write = lambda s: len(s)
        teardown_logging(handler)
    err = capsys.readouterr().err
    assert err.count("cannot write the log (No space left on device)") == 1
    assert "Traceback" not in err and "--- Logging error ---" not in err
