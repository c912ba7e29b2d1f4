"""The parts every saved scorer is made of (:mod:`neural.saved`), shared by the scorer families that save
and load themselves (:mod:`neural.families`): the identity record of a backbone, the parent a trained
backbone records, tensors loaded into a model with their names and shapes checked, a model wrapped as a
backbone, and a parent architecture rebuilt from its record.  Errors are :class:`ScorerFormatError`,
whose message names the ``scorer.json``.
"""
from __future__ import annotations

from pathlib import Path

import torch

from neural.backbone import Backbone, backbone_from_model
from neural.checkpoints import WeightsError, state_dict_sha256

__all__ = ["ScorerFormatError", "quick_gelu", "structure_record", "backbone_record", "parent_of", "rebuilt_parent",
           "load_tensors", "wrap_model"]


class ScorerFormatError(WeightsError):
    """A saved scorer cannot be read or does not match (its parent, its recorded hashes); the message
    names the file."""


def quick_gelu(model: torch.nn.Module) -> bool:
    return any(type(m).__name__ == "QuickGELU" for m in model.modules())


def structure_record(bb: Backbone) -> dict:
    """The parts of :func:`backbone_record` that do not depend on the weights."""
    return {"structure": bb.model_config_id, "preprocess": repr(bb.preprocess),
            "tokenizer": f"{type(bb.tokenizer).__module__}.{type(bb.tokenizer).__name__}/{int(bb.context_length)}"}


def backbone_record(bb: Backbone) -> dict:
    """The identity of a backbone as a saved scorer records it (its parent's, or its own).

    Returns
    -------
    dict
        ``name``, ``arch``, ``weights_id``, ``state_dict_sha256`` (the full hash of the current weights),
        ``structure`` (:attr:`~neural.backbone.Backbone.model_config_id`), ``quick_gelu``, ``preprocess``
        (its ``repr``), ``tokenizer`` (class and context length), ``context_length``, ``precision`` and
        ``source``.
    """
    return {"name": bb.name, "arch": bb.arch, "weights_id": bb.current_weights_id(),
            "state_dict_sha256": state_dict_sha256(bb.model.state_dict()), **structure_record(bb),
            "quick_gelu": quick_gelu(bb.model), "context_length": int(bb.context_length),
            "precision": bb.precision, "source": bb.source}


def parent_of(bb: Backbone, metric: str) -> Backbone:
    """The parent a trained backbone records (``ValueError`` naming ``metric`` when it records none)."""
    parent = getattr(bb, "parent", None)
    if parent is None:
        raise ValueError(f"{metric}: the backbone {bb.name!r} records no parent (it was not trained here by "
                         f"this toolkit's {metric} trainer), so there is no trained scorer to save")
    return parent


def rebuilt_parent(cfg_path: Path, config: dict, device) -> Backbone:
    """The parent's architecture, untrained, rebuilt from its record (structure, preprocessing and
    tokenizer checked against the record)."""
    from neural.architectures import create_architecture

    rec = config["parent"]
    try:
        with torch.random.fork_rng(devices=[]):
            net, pre, tok = create_architecture(str(rec.get("arch")), quick_gelu=bool(rec.get("quick_gelu")))
    except (ValueError, KeyError, WeightsError) as exc:
        raise ScorerFormatError(f"{cfg_path}: cannot rebuild the parent architecture {rec.get('arch')!r} "
                                f"({exc}); pass the parent backbone") from exc
    bb = backbone_from_model(net, pre, tok, name=str(rec.get("name")), arch=str(rec.get("arch")),
                             source="rebuilt (untrained) from a saved scorer's record", device=device,
                             precision="fp32", show_progress=False)
    got = structure_record(bb)
    want = {k: rec.get(k) for k in got}
    if got != want:
        diff = sorted(k for k in got if got[k] != want[k])
        raise ScorerFormatError(f"{cfg_path}: the parent {rec.get('name')!r} cannot be rebuilt from its "
                                f"architecture name alone ({', '.join(diff)} differ); pass the parent backbone "
                                "(--clip-model / --clip-pretrained on the command line)")
    return bb


def load_tensors(model: torch.nn.Module, tensors: dict, cfg_path: Path, strict: bool = True) -> None:
    """Copy ``tensors`` into ``model``'s state (each cast to the entry's dtype) after checking that every
    name is the model's and every shape its entry's; with ``strict`` every entry of the model must be
    given (:class:`ScorerFormatError` naming ``cfg_path`` otherwise)."""
    own = model.state_dict()
    unknown = sorted(set(tensors) - set(own))
    if unknown:
        raise ScorerFormatError(f"{cfg_path}: weights entries {unknown[:5]} are not in the architecture")
    bad = sorted(k for k in tensors if tensors[k].shape != own[k].shape)
    if bad:
        raise ScorerFormatError(f"{cfg_path}: weights entries {bad[:5]} have other shapes than the architecture's")
    with torch.no_grad():
        for k, v in tensors.items():
            own[k].copy_(v.to(own[k].dtype))
    if strict and set(own) - set(tensors):
        raise ScorerFormatError(f"{cfg_path}: weights lack entries {sorted(set(own) - set(tensors))[:5]}")


def wrap_model(model, like: Backbone, config: dict, arch: str, precision: str | None = None) -> Backbone:
    """``model`` as a backbone with ``like``'s preprocessing, tokenizer and device and the name, source and
    precision of ``config``'s ``backbone`` record."""
    rec = config["backbone"]
    return backbone_from_model(model, like.preprocess, like.tokenizer, name=str(rec.get("name")), arch=arch,
                               source=str(rec.get("source")), device=like.device,
                               precision=precision or str(rec.get("precision", "fp32")),
                               show_progress=like.show_progress)
