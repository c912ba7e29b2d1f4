"""Resumable training checkpoints: a model's weights and its optimiser's state in one safetensors file, a
JSON record beside it, and the run's log.

Files of a checkpoint folder (each written atomically — temporary file, then rename — in this order, so an
interruption leaves the previous complete checkpoint):

* ``checkpoint.safetensors``: the model's state dict under ``model::<name>`` and the optimiser's per-parameter
  state under ``opt::<param index>::<name>`` (AdamW: ``step``, ``exp_avg``, ``exp_avg_sq``);
* ``checkpoint.json``: ``step`` (optimiser steps done), ``config`` (what determines the trained weights: a
  resumed run must have the same), ``param_groups`` (the optimiser's hyper-parameters, learning rate
  included), ``state`` (small JSON-able extras of the run, e.g. the training stage), the SHA-256 of the
  safetensors file and the torch version;
* ``log.json``: the run's log (anything JSON-able).

Nothing is unpickled: tensors come from safetensors, everything else from JSON.  Used by the teaching CLIP's
pretraining (:func:`neural.teaching_clip.pretrain`) and the L-CLIPScore distillation
(:func:`neural.lclip.train_lclip`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file

from corpora.jsondata import write_json_atomic
from neural.checkpoints import WeightsError, file_sha256, save_safetensors_atomic

__all__ = ["CHECKPOINT_FILE", "RECORD_FILE", "LOG_FILE", "CHECKPOINT_FILES", "Checkpoint", "save_checkpoint",
           "read_checkpoint", "restore_optimizer", "remove_checkpoint"]

CHECKPOINT_FILE, RECORD_FILE, LOG_FILE = "checkpoint.safetensors", "checkpoint.json", "log.json"
#: The files a checkpoint folder holds.
CHECKPOINT_FILES = (CHECKPOINT_FILE, RECORD_FILE, LOG_FILE)


@dataclass
class Checkpoint:
    """A checkpoint read back (:func:`read_checkpoint`): the step, the record, the tensors and the log."""

    step: int
    record: dict
    tensors: dict[str, torch.Tensor]
    log: object | None

    def model_state(self) -> dict[str, torch.Tensor]:
        """The model's state dict."""
        return {k[len("model::"):]: v for k, v in self.tensors.items() if k.startswith("model::")}


def save_checkpoint(folder: str | Path, model: torch.nn.Module, opt: torch.optim.Optimizer, step: int,
                    config: dict, log: object, state: dict | None = None) -> None:
    """Write the checkpoint of ``model`` and ``opt`` after ``step`` optimiser steps into ``folder``
    (module docstring); ``config`` is what a resumed run must match, ``state`` small JSON-able extras."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    sd = opt.state_dict()
    tensors = {f"model::{k}": v.detach().cpu() for k, v in model.state_dict().items()}
    for pid, st in sd["state"].items():
        for name, v in st.items():
            tensors[f"opt::{pid}::{name}"] = (v if torch.is_tensor(v) else torch.tensor(v)).detach().cpu()
    save_safetensors_atomic(out / CHECKPOINT_FILE, tensors)
    groups = [{k: (list(v) if isinstance(v, tuple) else v) for k, v in g.items()} for g in sd["param_groups"]]
    write_json_atomic(out / RECORD_FILE, {"step": int(step), "config": config, "param_groups": groups,
                                          "state": state or {}, "sha256": file_sha256(out / CHECKPOINT_FILE),
                                          "torch": torch.__version__})
    write_json_atomic(out / LOG_FILE, log)


def read_checkpoint(folder: str | Path, config: dict) -> Checkpoint | None:
    """The checkpoint in ``folder``, or ``None`` when there is none.

    Raises
    ------
    ValueError
        The checkpoint was made with another ``config`` (the message names the differing fields).
    WeightsError
        The safetensors file is missing or is not the one the record names (an interrupted copy).
    """
    out = Path(folder)
    rec_path, ckpt = out / RECORD_FILE, out / CHECKPOINT_FILE
    if not rec_path.exists():
        return None
    rec = json.loads(rec_path.read_text(encoding="utf-8"))
    want = json.loads(json.dumps(config))
    have = rec.get("config", {})
    if have != want:
        diff = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        raise ValueError(f"{rec_path}: the checkpoint was made with another recipe (differs in {diff}); "
                         f"use another folder or the same options")
    if not ckpt.exists() or file_sha256(ckpt) != rec.get("sha256"):
        raise WeightsError(f"{ckpt}: missing or not the file {rec_path} records (interrupted copy?); "
                           f"delete {out} to start over")
    log_path = out / LOG_FILE
    log = json.loads(log_path.read_text(encoding="utf-8")) if log_path.exists() else None
    return Checkpoint(int(rec["step"]), rec, load_file(str(ckpt)), log)


def restore_optimizer(opt: torch.optim.Optimizer, checkpoint: Checkpoint) -> None:
    """Load the optimiser state and hyper-parameters (learning rates included) of ``checkpoint`` into
    ``opt`` (an optimiser over the same parameters, in the same order)."""
    state: dict[int, dict] = {}
    for k, v in checkpoint.tensors.items():
        if k.startswith("opt::"):
            _, pid, name = k.split("::")
            state.setdefault(int(pid), {})[name] = v
    opt.load_state_dict({"state": state, "param_groups": checkpoint.record["param_groups"]})


def remove_checkpoint(folder: str | Path) -> None:
    """Delete the checkpoint files in ``folder`` (:data:`CHECKPOINT_FILES`), then the folder if that
    leaves it empty; anything else in it is left alone."""
    out = Path(folder)
    for name in CHECKPOINT_FILES:
        (out / name).unlink(missing_ok=True)
    try:
        out.rmdir()
    except OSError:   # absent, or holds other files
        pass
