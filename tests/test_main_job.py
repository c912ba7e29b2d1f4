"""Reliability checks of the main job, ``python -m experiments.flickr8k_kcca`` (issue 9, section 4).

Every test runs the real command in a subprocess (``sys.executable -m experiments.flickr8k_kcca``,
``cwd`` = repository root, ``ITR_CACHE_DIR`` and ``--cache-dir`` pointing at a fresh temporary folder)
on a small configuration (``SMALL``: 90 teaching images, one baseline + one KCCA system, CLIP-S on a
5-step tiny CLIP, 200 permutations), so the whole file stays within a few minutes on 2 cores.  The
expensive clean runs are module-scoped fixtures shared by several tests.

What is checked:

1. a run killed (SIGKILL) in the middle of image-feature extraction resumes from its cache and gives the
   same numbers as an uninterrupted run on a separate fresh cache, leaving no temporary file behind;
2. two runs with the same seed on separate fresh caches write identical ``results.json`` (see
   ``VOLATILE`` for the fields left out, and why);
3. a corrupted cache entry is detected (warning in ``run.log``), rebuilt, and never used;
4. ``--data`` with the Kaggle ``Images/`` + ``captions.txt`` layout works;
5. the 14 shared JPEGs in the standard layout with ``--skip-missing-images`` produce a report that says
   how many images were skipped; without the flag the job stops with a clear message;
6. ``report.html`` is self-contained and renders in headless Chromium (when installed);
7. ``--help`` names every option and states each default;
plus the ``results.json`` schema of issue 9 section 2, and a warm re-run that takes the neural stage from
its cache without importing torch.
"""
from __future__ import annotations

import copy
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
N_TEACH = 90
SMALL = ["--teaching-size", str(N_TEACH), "--systems", "NN5_F1^idf,BoW1", "--metrics", "CLIP-S",
         "--permutations", "200", "--no-progress"]
SEED = ["--seed", "0"]
#: ``results.json`` fields that legitimately differ between two runs with the same seed: wall-clock
#: timings only – the top-level ``timings_s`` (the stages', and under ``"systems"`` each KCCA system's
#: model-selection timings) and ``provenance.neural_timings_s``; ``*`` matches any key.  The
#: recorded command line (``provenance.command``) is kept, its per-run paths (``--out``,
#: ``--cache-dir``) replaced by placeholders before comparing.
VOLATILE = (("timings_s",), ("provenance", "neural_timings_s"))
#: The numbers a resumed / rebuilt run must reproduce exactly.
NUMBERS = ("corpus", "systems", "significance_reference", "human_correlation", "specificity")
METRIC_KEYS = ("R@1", "R@5", "R@10", "median_rank", "S@1", "S@5", "S@10", "R-precision")


# ---------------------------------------------------------------------------------------------- helpers
def _env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["ITR_CACHE_DIR"] = str(cache)
    return env


def _cmd(args, cache: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "experiments.flickr8k_kcca", *args, "--cache-dir", str(cache),
            "--out", str(out)]


def run_job(args, *, cache: Path, out: Path, expect_ok: bool = True, timeout: float = 600
            ) -> subprocess.CompletedProcess:
    """Run the main job in a subprocess; with ``expect_ok`` fail the test (showing stderr) on a non-zero
    exit."""
    proc = subprocess.run(_cmd(args, cache, out), cwd=REPO, env=_env(cache), capture_output=True,
                          text=True, timeout=timeout)
    if expect_ok and proc.returncode != 0:
        pytest.fail(f"main job exited with {proc.returncode}: {' '.join(args)}\n"
                    f"--- stderr (tail) ---\n{proc.stderr[-6000:]}\n--- stdout ---\n{proc.stdout[-2000:]}")
    return proc


def load_results(out: Path) -> dict:
    return json.loads((out / "results.json").read_text(encoding="utf-8"))


def drop(node, path: tuple[str, ...]) -> None:
    """Remove ``path`` (``*`` = every key at that level) from a nested dict, in place."""
    if not isinstance(node, dict) or not path:
        return
    head, rest = path[0], path[1:]
    keys = list(node) if head == "*" else [head]
    for k in keys:
        if k not in node:
            continue
        if rest:
            drop(node[k], rest)
        else:
            del node[k]


def without_volatile(results: dict, *, out: Path | None = None, cache: Path | None = None) -> dict:
    r = copy.deepcopy(results)
    for path in VOLATILE:
        drop(r, path)
    prov = r.get("provenance", {})
    if isinstance(prov.get("command"), str):
        for value, placeholder in ((out, "<out>"), (cache, "<cache>")):
            if value is not None:
                prov["command"] = prov["command"].replace(str(value), placeholder)
    return r


def numbers(results: dict) -> dict:
    """The result numbers (everything but provenance), timings removed."""
    r = without_volatile(results)
    return {k: r.get(k) for k in NUMBERS}


def first_difference(a, b, path: str = "") -> str | None:
    """Where two JSON values first differ (for readable assertion messages)."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                return f"{path}/{k}: only in {'second' if k in b else 'first'}"
            d = first_difference(a[k], b[k], f"{path}/{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{path}: lengths {len(a)} != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path}: {a!r} != {b!r}"


def entries(cache: Path, namespace: str) -> list[Path]:
    d = cache / namespace
    return sorted(d.glob("*.npz")) if d.is_dir() else []


def entry_is_valid(path: Path) -> bool:
    """Whether a cache file passes the integrity check of :meth:`corpora.cache.DiskCache.load` (readable
    ``.npz`` whose stored SHA-256 digest matches its arrays), without deleting it when it fails."""
    import zipfile

    from corpora import cache as cache_mod

    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files if k not in (cache_mod._DIGEST_FIELD, cache_mod._KEY_FIELD)}
            stored = str(z[cache_mod._DIGEST_FIELD])
    except (OSError, ValueError, zipfile.BadZipFile, KeyError, EOFError):
        return False
    return stored == cache_mod._digest(arrays)


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    """One uninterrupted small run on a fresh cache: ``(out, cache, results, proc)``."""
    base = tmp_path_factory.mktemp("clean")
    out, cache = base / "out", base / "cache"
    proc = run_job(SMALL + SEED, cache=cache, out=out)
    return out, cache, load_results(out), proc


@pytest.fixture(scope="module")
def second_run(tmp_path_factory):
    """The same command as ``clean_run`` on another fresh cache."""
    base = tmp_path_factory.mktemp("second")
    out, cache = base / "out", base / "cache"
    run_job(SMALL + SEED, cache=cache, out=out)
    return out, cache, load_results(out)


# ---------------------------------------------------------------------------------------------- 7. --help
HELP_OPTIONS = ("--systems", "--metrics", "--quick", "--skip-missing-images", "--device", "--seed",
                "--cache-dir", "--no-cache", "--data", "--out", "--clip-model", "--clip-pretrained")


def test_help_lists_every_option_with_default():
    proc = subprocess.run([sys.executable, "-m", "experiments.flickr8k_kcca", "--help"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    for opt in HELP_OPTIONS:
        assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text), f"--help does not mention {opt}"
    # Every option that takes a value documents its default in its help text.
    from experiments.flickr8k_kcca import build_parser

    missing = []
    for action in build_parser()._actions:
        if not action.option_strings or action.nargs == 0 or action.dest == "help":
            continue  # flags (store_true) are off by default
        if "default" not in (action.help or "").lower():
            missing.append(action.option_strings[-1])
    assert not missing, f"options whose --help text states no default: {missing}"
    # ... and the lists the defaults refer to ("see below") are printed.
    for marker in ("default systems:", "--quick systems:", "default scorers:"):
        assert marker in text
    # Every environment variable the toolkit reads is explained in the epilog.
    read = set()
    for pkg in ("corpora", "kernels", "kcca", "neural", "evaluation", "experiments"):
        for path in (REPO / pkg).rglob("*.py"):
            read |= set(re.findall(r'"(ITR_[A-Z_]+)"', path.read_text(encoding="utf-8")))
    env_help = text.split("environment:", 1)[-1]
    assert {"ITR_CACHE_DIR", "ITR_NUM_THREADS", "ITR_OFFLINE"} <= read
    assert not [v for v in sorted(read | {"NLTK_DATA", "HF_HUB_OFFLINE"}) if v not in env_help], env_help


# ---------------------------------------------------------------------------------------------- schema
def test_results_schema_and_report_files(clean_run):
    out, _, r, proc = clean_run
    for name in ("report.md", "report.html", "results.json", "run.log"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert "Report:" in proc.stdout and str(out / "report.html") in proc.stdout
    # the two retrieval tables are printed too (issue 6 §4), one aligned row per system
    for title in ("Retrieval (Hodosh Table 3/11 style)", "Relevance-based metrics (Hodosh Table 4/5/12 style)"):
        assert title in proc.stdout
    rows = [ln for ln in proc.stdout.splitlines() if ln.split(" ", 1)[0] in ("NN5_F1^idf", "BoW1", "CLIP-S")]
    assert len(rows) == 6 and len({len(ln) for ln in rows[:3]}) == len({len(ln) for ln in rows[3:]}) == 1, rows
    for key in ("corpus", "systems", "human_correlation", "timings_s", "provenance"):
        assert key in r, key

    c = r["corpus"]
    assert c["name"] == "teaching" and c["images"] == N_TEACH
    assert sum(c["splits"].values()) == N_TEACH
    assert c["skipped_images"] == 0
    assert set(c["pools"]) == {"dev", "test"} and c["pools"]["test"]["images"] == c["splits"]["test"]

    assert set(r["systems"]) == {"NN5_F1^idf", "BoW1", "CLIP-S"}
    fam = {s: v["family"] for s, v in r["systems"].items()}
    assert fam == {"NN5_F1^idf": "baseline", "BoW1": "classical", "CLIP-S": "neural"}
    n_test = c["pools"]["test"]["images"]
    for s, v in r["systems"].items():
        for task in ("annotation", "search"):
            m = v[task]
            assert set(METRIC_KEYS) <= set(m), (s, task, sorted(m))
            for k in ("R@1", "R@5", "R@10", "S@1", "S@5", "S@10", "R-precision"):
                assert 0.0 <= m[k] <= 100.0, (s, task, k, m[k])
            assert m["R@1"] <= m["R@5"] <= m["R@10"]
            assert m["S@1"] <= m["S@5"] <= m["S@10"]
            assert m["R@1"] <= m["S@1"] and m["R@10"] <= m["S@10"]  # the original item is relevant
            assert 1 <= m["median_rank"] <= n_test
    assert set(r["significance_reference"]) == {"annotation", "search"}
    bow = r["systems"]["BoW1"]["config"]      # the default: p = 2, d = 1 fixed in advance, float32 KCCA
    assert (bow["powers_searched"], bow["diag_factors_searched"]) == ([2], [1.0])
    assert bow["kcca"] == {"dtype": "float32", "jitter": "auto"}
    assert r["provenance"]["significance_reference_rule"] == "best R@10 per task"
    assert r["provenance"]["command"].startswith("python -m experiments.flickr8k_kcca --teaching-size")

    # The teaching set has simulated Expert and CrowdFlower judgments: every pair scorer is correlated.
    hc = r["human_correlation"]
    assert {"BLEU-1", "BLEU-4", "ROUGE-L", "CIDEr-D", "CLIP-S"} <= set(hc)
    # ... including, as an extra, the KCCA affinity f(i, s) of a classical system (issue 9, section 1).
    assert any(k.startswith("KCCA") and "BoW1" in k for k in hc), sorted(hc)
    for scorer, row in hc.items():
        for k in ("expert_tau_c", "expert_tau_b", "cf_tau_b"):
            assert k in row and -100.0 <= row[k] <= 100.0, (scorer, k, row)
        assert row["n_expert"] > 0 and row["n_cf"] > 0, (scorer, row)

    if "specificity" in r and r["specificity"]:
        for scorer, row in r["specificity"].items():
            assert set(row) >= {"SR_pos", "SR_neg"}
            assert 0.0 <= row["SR_pos"] <= 1.0 and 0.0 <= row["SR_neg"] <= 1.0

    stages = {k: v for k, v in r["timings_s"].items() if k != "systems"}
    assert all(isinstance(v, (int, float)) and v >= 0 for v in stages.values())
    assert any(k.startswith("classical") for k in r["timings_s"])
    p = r["provenance"]
    assert p["seed"] == 0
    assert p["corpus_fingerprint"] == c["fingerprint"]
    for pkg in ("numpy", "torch", "open_clip_torch"):
        assert p["versions"].get(pkg), pkg
    assert p["backbone"]["weights_id"] and p["backbone"]["precision"] and p["backbone"]["device"]
    assert "data_checksums" in p

    md = (out / "report.md").read_text(encoding="utf-8")
    for s in r["systems"]:
        assert s in md
    assert "Correlation with human judgments" in md


# ---------------------------------------------------------------------------------------------- 2. seeds
def test_same_seed_gives_identical_results_json(clean_run, second_run):
    out1, cache1, r1, _ = clean_run
    out2, cache2, r2 = second_run
    a = without_volatile(r1, out=out1, cache=cache1)
    b = without_volatile(r2, out=out2, cache=cache2)
    assert a == b, f"results.json differ between two seed-0 runs at {first_difference(a, b)}"
    # The excluded fields are really there (the exclusion list is not stale) and hold only timings.
    assert r1["timings_s"] and "neural_timings_s" in r1["provenance"]
    sel = [v["selection"] for v in r1["timings_s"]["systems"].values() if "selection" in v]
    assert sel and all(isinstance(x, (int, float)) for t in sel for x in t.values())
    # ... and the systems block compares equal as it is: no timings inside it
    assert r1["systems"] == r2["systems"]


def _keys(node, path=()):
    """Every key path of a nested JSON value."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + (k,)
            yield from _keys(v, path + (k,))


def test_timings_are_only_under_timings_s(clean_run):
    """results.json's ``systems`` block carries no per-run timings (each KCCA system's model-selection
    timings are under ``timings_s["systems"][name]``), so two runs with the same numbers have equal
    ``systems`` blocks; the report's timings line still lists the stages."""
    out, _, r, _ = clean_run
    assert not [p for p in _keys(r["systems"]) if "timings" in p[-1]]
    bow = r["timings_s"]["systems"]["BoW1"]["selection"]
    assert {"fit", "total"} <= set(bow) and all(v >= 0 for v in bow.values())
    stages = {k: v for k, v in r["timings_s"].items() if k != "systems"}
    line = next(ln for ln in (out / "report.md").read_text(encoding="utf-8").splitlines()
                if "Timings (s):" in ln)
    assert "Timings (s): " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items()) + "; total" in line, line
    assert line.endswith(f"; total before the report {sum(stages.values()):.1f}") and "{" not in line, line


# ---------------------------------------------------------------------------------------------- warm re-run
#: Runs the main job like ``python -m`` and reports on stderr whether torch was imported.
# The job's main() in-process (running the module as __main__ would end the process in exit_now, before
# the probe could look), then whether torch was imported.
_TORCH_PROBE = ("import sys\n"
                "import experiments.flickr8k_kcca as job\n"
                "sys.argv[0] = job.__file__\n"   # as under python -m (the provenance's command line)
                "rc = job.main(sys.argv[1:])\n"
                "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n"
                "sys.exit(rc)\n")


def run_probed(args, *, cache: Path, out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", _TORCH_PROBE, *args, "--cache-dir", str(cache), "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(cache), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        pytest.fail(f"main job exited with {proc.returncode}\n{proc.stderr[-6000:]}")
    return proc


def test_warm_rerun_reads_the_neural_stage_without_torch(clean_run, tmp_path):
    """A warm re-run takes the neural stage from its one cache entry: no torch import, no backbone, the
    same results.json; without the cached human-judgment scores the deferred pair scorers rebuild the
    scorers from their own caches and give the same numbers again."""
    out1, cache1, ref, _ = clean_run
    cache = tmp_path / "cache"
    shutil.copytree(cache1, cache)
    assert len(entries(cache, "neural_stage")) == 1
    want = without_volatile(ref, out=out1, cache=cache1)

    out = tmp_path / "warm"
    proc = run_probed(SMALL + SEED, cache=cache, out=out)
    assert "torch imported: False" in proc.stderr, proc.stderr[-3000:]
    got = without_volatile(load_results(out), out=out, cache=cache)
    assert got == want, f"warm run differs from the cold run at {first_difference(got, want)}"
    assert "cached stage" in load_results(out)["provenance"]["neural_timings_s"]

    shutil.rmtree(cache / "human_scores")
    out = tmp_path / "rescored"
    proc = run_probed(SMALL + SEED, cache=cache, out=out)
    assert "torch imported: True" in proc.stderr
    assert "human-judgment score is not cached; building the scorers" in (out / "run.log").read_text()
    got = without_volatile(load_results(out), out=out, cache=cache)
    assert got == want, f"re-scored run differs from the cold run at {first_difference(got, want)}"

    out = tmp_path / "other-seed"                        # another key: the stage is computed again
    run_job(SMALL + ["--seed", "1"], cache=cache, out=out)
    assert len(entries(cache, "neural_stage")) == 2


# ---------------------------------------------------------------------------------------------- 1. kill
def test_killed_during_feature_extraction_resumes_with_same_numbers(clean_run, tmp_path):
    _, _, ref, _ = clean_run
    cache, out = tmp_path / "cache", tmp_path / "out"
    log_out, log_err = (tmp_path / "stdout.txt").open("w"), (tmp_path / "stderr.txt").open("w")
    proc = subprocess.Popen(_cmd(SMALL + SEED, cache, out), cwd=REPO, env=_env(cache), stdout=log_out,
                            stderr=log_err, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the job ended (exit {proc.returncode}) before any image feature was cached:\n"
                            + (tmp_path / "stderr.txt").read_text()[-4000:])
            if entries(cache, "image_words"):
                break
            time.sleep(0.01)
        else:
            pytest.fail("no image-feature cache entry appeared within 300 s")
        os.killpg(proc.pid, signal.SIGKILL)  # the job's own process group (start_new_session)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
        log_out.close()
        log_err.close()
    assert proc.returncode == -signal.SIGKILL
    n_at_kill = len(entries(cache, "image_words"))
    assert 1 <= n_at_kill < N_TEACH, f"killed with {n_at_kill} of {N_TEACH} image features cached"
    assert not (out / "results.json").exists()
    kept = set(entries(cache, "image_words"))

    run_job(SMALL + SEED, cache=cache, out=out)
    assert kept <= set(entries(cache, "image_words"))
    # a write cut by the kill left at most a temporary of a dead writer, which the resumed run removed
    assert not list(cache.rglob("*.tmp")), list(cache.rglob("*.tmp"))
    assert len(entries(cache, "image_words")) == N_TEACH
    got = numbers(load_results(out))
    want = numbers(ref)
    assert got == want, f"resumed run differs from an uninterrupted one at {first_difference(got, want)}"


# ---------------------------------------------------------------------------------------------- 3. corrupt
def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_bytes(path: Path) -> None:
    """Invert 16 bytes in the middle of the first array's payload (a silent bit-rot: the zip structure
    stays readable, only the digest can tell)."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = z.infolist()[0]
    data = bytearray(path.read_bytes())
    _, _, _, _, _, _, _, _, _, n_name, n_extra = struct.unpack("<4s5H3L2H", data[info.header_offset:
                                                                             info.header_offset + 30])
    start = info.header_offset + 30 + n_name + n_extra
    assert info.file_size > 160, f"{path}: first array too small to corrupt its payload"
    mid = start + 128 + (info.file_size - 128) // 2  # past the .npy header (≤ 128 bytes)
    for i in range(mid, min(mid + 16, start + info.file_size)):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupted_cache_entry_is_detected_and_rebuilt(clean_run, tmp_path):
    _, cache1, ref, _ = clean_run
    cache, out = tmp_path / "cache", tmp_path / "out"
    shutil.copytree(cache1, cache)
    # Entries a warm re-run must read: the neural stage's results (truncated: no longer a zip file)
    # and the image Gram matrices of the classical systems (bytes of the matrix flipped: only the
    # checksums can tell).
    targets = {}
    affinity = entries(cache, "neural_stage")
    grams = entries(cache, "image_gram")
    assert affinity and grams, f"cache layout changed: {sorted(p.name for p in cache.iterdir())}"
    _truncate(affinity[0])
    targets[affinity[0]] = "truncated"
    for g in grams:
        _flip_bytes(g)
        targets[g] = "bytes flipped"
    for p in targets:
        assert not entry_is_valid(p)

    proc = run_job(SMALL + SEED, cache=cache, out=out)
    log = (out / "run.log").read_text(encoding="utf-8")
    warned = {Path(m) for m in re.findall(r"cache entry (\S+\.npz) is corrupt", log)}
    assert "corrupt" in log, "a corrupted cache entry was read without a warning in run.log"
    assert warned, log[-3000:]
    assert warned <= set(targets), f"warnings about entries that were not corrupted: {warned - set(targets)}"
    assert affinity[0] in warned, "the truncated neural-stage entry was not detected"
    assert warned & set(grams), "no corrupted image Gram entry was detected"
    for p in warned:
        assert p.is_file() and entry_is_valid(p), f"{p} was not rebuilt"
    assert "corrupt" in proc.stderr  # the warning also reaches the console
    got, want = numbers(load_results(out)), numbers(ref)
    assert got == want, f"run on a repaired cache differs at {first_difference(got, want)}"


# ---------------------------------------------------------------------------------------------- 6. HTML
def test_html_report_is_self_contained_and_renders(clean_run, tmp_path):
    from experiments.check_report import external_references, find_browser, screenshot

    out, _, r, _ = clean_run
    html_text = (out / "report.html").read_text(encoding="utf-8")
    assert external_references(html_text) == []
    assert html_text.count("data:image/png;base64,") >= 4  # recall, rank CDF, R-precision, gallery
    for s in r["systems"]:
        assert s in html_text
    if find_browser() is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium); static self-containment "
                    "check passed, rendering check skipped")
    png = screenshot(out / "report.html", tmp_path / "report.png", height=1600)
    from PIL import Image

    with Image.open(png) as im:
        assert im.size[0] >= 1000
        arr = np.asarray(im.convert("L"), dtype=np.float32)
    assert arr.std() > 10.0, "the rendered report looks blank"


# ---------------------------------------------------------------------------------------------- 4. Kaggle
def _shared_jpegs(flickr8k_dir: Path) -> list[Path]:
    jpgs = sorted((flickr8k_dir / "Flicker8k_Dataset").glob("*.jpg"))
    if not jpgs:
        pytest.skip(f"no shared Flickr8k JPEGs under {flickr8k_dir / 'Flicker8k_Dataset'}")
    return jpgs


def test_full_selection_searches_p_and_d_on_dev_in_float64(tmp_path):
    """--full-selection chooses the image power p ∈ {2, 3} and text diagonal factor d ∈ {1, 2, 5, 10, 15}
    on dev (Hodosh Sec. 4.1.3) with float64 KCCA; the chosen pair is one of the grid's."""
    out = tmp_path / "out"
    run_job(["--teaching-size", "60", "--systems", "BoW1", "--metrics", "none", "--full-selection",
             "--permutations", "200", "--no-progress"], cache=tmp_path / "cache", out=out)
    cfg = load_results(out)["systems"]["BoW1"]["config"]
    assert cfg["powers_searched"] == [2, 3] and cfg["diag_factors_searched"] == [1.0, 2.0, 5.0, 10.0, 15.0]
    assert cfg["image_power"] in (2, 3) and cfg["text_diag"] in cfg["diag_factors_searched"]
    assert cfg["kcca"] == {}                      # the estimator's defaults: float64, jitter 1e-10


def test_kaggle_captions_txt_layout(flickr8k_dir, tmp_path):
    jpgs = _shared_jpegs(flickr8k_dir)
    data = tmp_path / "kaggle"
    (data / "Images").mkdir(parents=True)
    names = {p.name for p in jpgs}
    for p in jpgs:
        shutil.copy(p, data / "Images" / p.name)
    rows = []
    for line in (flickr8k_dir / "Flickr8k_text" / "Flickr8k.token.txt").read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        cid, text = line.split("\t", 1)
        if cid.split("#")[0] in names:
            rows.append((cid.split("#")[0], text))
    assert len(rows) == 5 * len(jpgs)
    with (data / "captions.txt").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["image", "caption"])
        w.writerows(rows)

    out = tmp_path / "out"
    proc = run_job(["--data", str(data), "--systems", "NN5_F1^idf", "--metrics", "CLIP-S",
                    "--permutations", "200", "--no-progress"], cache=tmp_path / "cache", out=out)
    assert proc.returncode == 0
    for name in ("report.html", "report.md", "results.json"):
        assert (out / name).is_file(), name
    c = load_results(out)["corpus"]
    assert c["images"] == len(jpgs) and c["captions"] == len(rows)
    assert sum(c["splits"].values()) == len(jpgs)
    assert c["skipped_images"] == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert f"{len(jpgs)} images, {len(rows)} captions" in md
    assert any("captions.txt" in n for n in c["notes"])


# ---------------------------------------------------------------------------------------------- 5. skipping
@pytest.fixture(scope="module")
def fourteen_images(flickr8k_dir, tmp_path_factory):
    """Standard layout: ``Flicker8k_Dataset/`` with links to the 14 shared JPEGs + ``Flickr8k_text/``."""
    jpgs = _shared_jpegs(flickr8k_dir)
    root = tmp_path_factory.mktemp("flickr8k14")
    (root / "Flicker8k_Dataset").mkdir()
    for p in jpgs:
        (root / "Flicker8k_Dataset" / p.name).symlink_to(p)
    (root / "Flickr8k_text").symlink_to(flickr8k_dir / "Flickr8k_text", target_is_directory=True)
    return root, [p.name for p in jpgs]


def _split_ids(text_dir: Path, split: str) -> list[str]:
    f = text_dir / f"Flickr_8k.{split}Images.txt"
    return [ln.strip() for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]


def test_skip_missing_images_reports_how_many(fourteen_images, tmp_path):
    root, present = fourteen_images
    out = tmp_path / "out"
    run_job(["--data", str(root), "--skip-missing-images", "--systems", "NN5_F1^idf", "--metrics", "CLIP-S",
             "--permutations", "200", "--no-progress"], cache=tmp_path / "cache", out=out)
    r = load_results(out)
    c = r["corpus"]
    text = root / "Flickr8k_text"
    # Expected skips per evaluation split, from the split files themselves.
    for split in ("dev", "test"):
        ids = _split_ids(text, split)
        kept = sum(i in present for i in ids)
        pool = c["pools"][split]
        assert pool["images"] == kept, (split, pool)
        assert pool["skipped_images"] == len(ids) - kept, (split, pool)
    train_ids = _split_ids(text, "train")
    train_skipped = len(train_ids) - sum(i in present for i in train_ids)
    assert c["skipped_images_by_split"] == {"train": train_skipped, "dev": c["pools"]["dev"]["skipped_images"],
                                            "test": c["pools"]["test"]["skipped_images"]}
    total = sum(c["skipped_images_by_split"].values())
    assert c["skipped_images"] == total > 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert re.search(rf"skipped[^\n]*\b{total}\b", md), "report.md summary does not state the skip count"
    html_text = (out / "report.html").read_text(encoding="utf-8")
    assert str(total) in html_text
    # With almost every image missing, retrieval is skipped but said so, and the text-only
    # human-correlation tables (real Flickr8k-Expert / CF judgments) are still computed.
    assert any("retrieval skipped" in n for n in c["notes"])
    assert {"BLEU-1", "CIDEr-D"} <= set(r["human_correlation"])
    assert r["human_correlation"]["CIDEr-D"]["n_expert"] > 1000


def test_counts_must_be_positive_and_teaching_size_needs_no_data(fourteen_images, tmp_path):
    """0 is not "the default": counts below 1 are refused by the parser, and --teaching-size with --data
    is an error naming both options (both before any work starts)."""
    from experiments.flickr8k_kcca import build_parser

    for opt in ("--teaching-size", "--clip-steps", "--permutations"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([opt, "0"])
    assert build_parser().parse_args(["--clip-steps", "3"]).clip_steps == 3
    root, _ = fourteen_images
    proc = run_job(["--data", str(root), "--teaching-size", "600", "--no-progress"],
                   cache=tmp_path / "cache", out=tmp_path / "out", expect_ok=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "--teaching-size" in proc.stderr and "--data" in proc.stderr, proc.stderr[-3000:]


def test_missing_images_without_flag_fail_clearly(fourteen_images, tmp_path):
    root, present = fourteen_images
    out = tmp_path / "out"
    proc = run_job(["--data", str(root), "--systems", "NN5_F1^idf", "--metrics", "none", "--no-progress"],
                   cache=tmp_path / "cache", out=out, expect_ok=False)
    assert proc.returncode != 0
    err = proc.stderr
    assert "Traceback" not in err, err[-3000:]
    assert "missing" in err and "--skip-missing-images" in err, err[-3000:]
    # The message says how many images are missing: the first evaluation split checked is dev.
    dev = _split_ids(root / "Flickr8k_text", "dev")
    n_missing = sum(i not in present for i in dev)
    assert re.search(rf"\b{n_missing}\b[^\n]*missing", err), err[-3000:]
    assert not (out / "results.json").exists()
