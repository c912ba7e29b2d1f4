"""Which device ``auto`` means: ``$ITR_DEVICE`` when set, else CUDA where torch sees it, else the CPU
(``neural.backbone.resolve_device``); the main job's option checks and its CPU-training guard follow the
same rule.  These run on any machine: torch's view of CUDA is patched where a test needs one."""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch

from experiments.option_checks import check_neural_options
from experiments.option_choices import trains_on_cpu
from experiments.option_lists import OptionError
from experiments.options import RunOptions
from neural.backbone import resolve_device
from neural.names import DEVICE_ENV, auto_device_setting


def options(**kw) -> RunOptions:
    base = dict(seed=0, skip_missing_images=False, quick=True, no_progress=True, clip_model=None,
                clip_pretrained=None, clip_steps=None, pacs_positives=None)
    return RunOptions(**{**base, **kw})


def test_the_suite_runs_auto_on_the_cpu():
    """tests/conftest.py pins ``auto`` to the CPU for every test and its subprocesses."""
    assert os.environ[DEVICE_ENV] == "cpu"
    assert resolve_device("auto") == torch.device("cpu") == resolve_device(None)


@pytest.mark.parametrize("cuda", [False, True])
def test_auto_without_the_setting_is_cuda_where_torch_sees_it(cuda, monkeypatch):
    monkeypatch.delenv(DEVICE_ENV)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert auto_device_setting() is None
    assert resolve_device("auto").type == ("cuda" if cuda else "cpu")
    assert trains_on_cpu(options(device="auto")) is not cuda


def test_the_setting_names_the_device_auto_picks(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert resolve_device("auto").type == "cpu" and trains_on_cpu(options(device="auto"))
    monkeypatch.setenv(DEVICE_ENV, " cuda:1 ")
    assert resolve_device("auto") == torch.device("cuda", 1)
    assert not trains_on_cpu(options(device="auto"))
    assert resolve_device("cpu").type == "cpu"            # a device named outright is not overridden
    monkeypatch.setenv(DEVICE_ENV, "")                    # empty: as if unset
    assert resolve_device("auto").type == "cuda"


def test_a_setting_that_cannot_work_is_one_message_naming_it(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    with pytest.raises(RuntimeError, match=r"^\$ITR_DEVICE='cuda' was requested but torch finds no CUDA device"
                                           r".*set ITR_DEVICE=cpu, or unset it$"):
        resolve_device("auto")
    with pytest.raises(OptionError, match=r"^--device: \$ITR_DEVICE='cuda' was requested"):
        check_neural_options(options(device="auto"))
    monkeypatch.setenv(DEVICE_ENV, "gpu")
    with pytest.raises(RuntimeError, match=r"^\$ITR_DEVICE='gpu' is not a torch device name; set ITR_DEVICE=cpu"):
        resolve_device("auto")
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    with pytest.raises(RuntimeError, match=r"^device 'cuda' was requested .*use --device cpu, or auto$"):
        resolve_device("cuda")
    check_neural_options(options(device="auto"))          # cpu: accepted


def test_device_checks_script_reports_each_step_and_keeps_its_output(benchmark_module, tmp_path):
    """benchmarks/device_checks.py: a step's figures from its JSON or pytest's last line, and a failed or
    timed-out step reported as such with its output kept (the next step still runs)."""
    dc = benchmark_module("device_checks")
    py = sys.executable
    curve = {"cores": 16, "speedup_16_vs_2": 6.1, "identical_numbers": True,
             "curve": [{"threads": 2, "classical_stage_s": 61.0}, {"threads": 16, "classical_stage_s": 10.0}]}
    ok = dc.run_step("threads", [py, "-c", f"print({json.dumps(json.dumps(curve))})"], 60, True, tmp_path)
    assert ok == {"step": "threads", "status": "ok", "seconds": ok["seconds"], "cores": 16,
                  "speedup_16_vs_2": 6.1, "identical_numbers": True, "curve_s": {"2": 61.0, "16": 10.0}}
    tests = dc.run_step("cuda_tests", [py, "-c", "print('5 passed in 3.0s')"], 60, False, tmp_path)
    assert tests["status"] == "ok" and tests["pytest"] == "5 passed in 3.0s"
    failed = dc.run_step("suite", [py, "-c", "import sys; print('boom'); sys.exit(3)"], 60, False, tmp_path)
    assert failed["status"] == "exit 3" and "boom" in (tmp_path / "suite.log").read_text()
    slow = dc.run_step("workers", [py, "-c", "import time; time.sleep(30)"], 1, True, tmp_path)
    assert slow["status"] == "timed out" and (tmp_path / "workers.log").is_file()
    garbled = dc.run_step("neural_overhead", [py, "-c", "print('not json')"], 60, True, tmp_path)
    assert garbled["status"].startswith("unreadable output")
    km_figures = {"speedup_16": 2.1, "identical_16": True, "init_s": 3.0, "rows": 9}
    km = dc.run_step("kmeans", [py, "-c", f"print({json.dumps(json.dumps(km_figures))})"], 60, True, tmp_path)
    assert {k: km[k] for k in ("speedup_16", "identical_16", "init_s")} == {"speedup_16": 2.1, "identical_16": True,
                                                                          "init_s": 3.0} and "rows" not in km
    assert set(dc.step_commands(16)) == {"cuda_tests", "neural_overhead", "kmeans", "threads", "workers", "suite"}
    assert dc.step_commands(16)["kmeans"][0][-3:] == ["--threads", "1,2,4,8,16", "--json"]
    assert dc.step_commands(2)["kmeans"][0][-3:] == ["--threads", "1,2", "--json"]
    assert dc.step_commands(16)["threads"][0][-3:] == ["--threads", "2,16", "--json"]
    assert dc.step_commands(16)["workers"][0][-3:] == ["--workers", "1,4,16", "--json"]
    assert dc.step_commands(2)["threads"][0][-3:] == ["--threads", "1,2", "--json"]
    assert dc.step_commands(2)["workers"][0][-3:] == ["--workers", "1,2", "--json"]
