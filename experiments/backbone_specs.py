"""Several neural backbones in one run of the main job: ``--backbone NAME=ARCH[:WEIGHTS]`` names a backbone
once, and a neural scorer in ``--metrics`` picks one with ``SCORER@NAME`` (``CLIP-S@openai``); a scorer
without ``@NAME`` uses the default backbone of ``--clip-model`` / ``--clip-pretrained``, called
:data:`DEFAULT_BACKBONE`.  Torch-free: the options are checked and the neural stage's cache key computed
before anything decides whether torch is needed.

Syntax of one ``--backbone`` value: the name runs up to the first ``=``; the rest is the architecture up to
its first ``:`` and, after it, the weights (a pretrained tag or a file path, which may itself contain
``:``).  ``openai=ViT-B-32:openai``, ``mine=ViT-B-32-quickgelu:/data/run:3/clip.pth`` (weights
``/data/run:3/clip.pth``), ``t=tiny`` (the tiny CLIP trained here), ``teach=teaching`` (the shipped
teaching CLIP).  Without weights an open_clip architecture gets the ``openai`` tag, as ``--clip-model``
alone does.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from neural.names import is_tiny_model

#: The name of the ``--clip-model`` / ``--clip-pretrained`` backbone (scorers without ``@NAME``).
DEFAULT_BACKBONE = "default"
#: A backbone name: a letter or digit, then letters, digits, ``_``, ``-`` or ``.`` (at most 32).
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,31}")
#: Separates a scorer from its backbone's name in ``--metrics``.
QUALIFIER = "@"


@dataclass(frozen=True)
class BackboneSpec:
    """One backbone of a run, as named on the command line.

    Attributes
    ----------
    name : str
        ``--backbone``'s name, or :data:`DEFAULT_BACKBONE`.
    model : str or None
        The open_clip architecture, ``tiny`` / ``teaching``, or ``auto`` (``None``: the tiny CLIP).
    pretrained : str or None
        A pretrained tag or a weights file (``None``: none given).
    """

    name: str
    model: str | None
    pretrained: str | None = None

    @property
    def is_default(self) -> bool:
        """Whether this is the ``--clip-model`` / ``--clip-pretrained`` backbone."""
        return self.name == DEFAULT_BACKBONE

    @property
    def is_tiny(self) -> bool:
        """Whether the backbone is the tiny CLIP trained in the run."""
        return is_tiny_model(self.model)

    @property
    def option(self) -> str:
        """How messages name the option that set it: ``--backbone NAME`` or ``--clip-pretrained``."""
        return "--clip-pretrained" if self.is_default else f"--backbone {self.name}"


def parse_backbone(value: str) -> BackboneSpec:
    """One ``--backbone NAME=ARCH[:WEIGHTS]`` value (see the module docstring).

    Parameters
    ----------
    value : str
        The option's value.

    Returns
    -------
    BackboneSpec

    Raises
    ------
    ValueError
        No ``=``, a bad or reserved name, no architecture, an empty weights part, or weights for the tiny
        CLIP (always trained here); the message quotes the value.
    """
    name, eq, spec = value.partition("=")
    name, spec = name.strip(), spec.strip()
    if not eq:
        raise ValueError(f"--backbone {value!r}: expected NAME=ARCH[:WEIGHTS], e.g. openai=ViT-B-32:openai")
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"--backbone {value!r}: the name {name!r} must be 1-32 letters, digits, '_', '-' or "
                         f"'.', starting with a letter or digit")
    if name.lower() == DEFAULT_BACKBONE:
        raise ValueError(f"--backbone {value!r}: {DEFAULT_BACKBONE!r} is the backbone of --clip-model / "
                         f"--clip-pretrained; choose another name")
    arch, colon, weights = spec.partition(":")   # the first ':' only: a path may hold more
    arch, weights = arch.strip(), weights.strip()
    if not arch:
        raise ValueError(f"--backbone {value!r}: no architecture after '{name}=' (e.g. ViT-B-32, tiny, teaching)")
    if colon and not weights:
        raise ValueError(f"--backbone {value!r}: nothing after ':' (give a pretrained tag or a weights file, "
                         f"or drop the ':')")
    if is_tiny_model(arch) and weights:
        raise ValueError(f"--backbone {value!r}: {arch!r} is the tiny CLIP, which is always trained here; it "
                         f"takes no weights")
    return BackboneSpec(name=name, model=arch, pretrained=weights or None)


def parse_backbones(values: Sequence[str] | None) -> tuple[list[BackboneSpec], list[str]]:
    """Every ``--backbone`` value: the backbones and one problem message per value that cannot work
    (:func:`parse_backbone`'s, and a name given twice, case-insensitively)."""
    specs: list[BackboneSpec] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    for value in values or ():
        try:
            spec = parse_backbone(value)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        if spec.name.lower() in seen:
            problems.append(f"--backbone {value!r}: the name {spec.name!r} is already given to "
                            f"--backbone {seen[spec.name.lower()]!r}")
            continue
        seen[spec.name.lower()] = value
        specs.append(spec)
    return specs, problems


def split_scorer(label: str) -> tuple[str, str]:
    """``"CLIP-S@openai"`` → ``("CLIP-S", "openai")``; ``"CLIP-S"`` → ``("CLIP-S", DEFAULT_BACKBONE)``."""
    base, at, name = label.partition(QUALIFIER)
    return base, (name if at else DEFAULT_BACKBONE)


def scorer_label(base: str, backbone: str) -> str:
    """The row label of scorer ``base`` on ``backbone``: ``base`` itself on the default backbone, else
    ``base@backbone``."""
    return base if backbone == DEFAULT_BACKBONE else f"{base}{QUALIFIER}{backbone}"


def qualify_scorers(items: Sequence[str], known: Sequence[str], backbones: Sequence[BackboneSpec]
                    ) -> tuple[list[str], list[str]]:
    """``--metrics`` items (``SCORER`` or ``SCORER@NAME``) as canonical labels, and one problem message per
    item that cannot work.

    Parameters
    ----------
    items : sequence of str
        The list's names as given.
    known : sequence of str
        The scorers (matched case-insensitively, returned in this spelling).
    backbones : sequence of BackboneSpec
        The ``--backbone`` backbones (their names are matched case-insensitively); ``SCORER@default`` is
        ``SCORER``.

    Returns
    -------
    labels : list of str
        Canonical, in the order given, each once.
    problems : list of str
        An unknown scorer, an empty or unknown backbone name.
    """
    by_lower = {k.lower(): k for k in known}
    names = {b.name.lower(): b.name for b in backbones}
    names[DEFAULT_BACKBONE] = DEFAULT_BACKBONE
    labels: list[str] = []
    problems: list[str] = []
    for item in items:
        base, at, name = item.partition(QUALIFIER)
        scorer = by_lower.get(base.strip().lower())
        if scorer is None:
            problems.append(f"unknown metrics: {base.strip()} (choose from {', '.join(known)})")
            continue
        if at and names.get(name.strip().lower()) is None:
            given = ", ".join(b.name for b in backbones) or "none"
            problems.append(f"--metrics {item}: no backbone named {name.strip()!r} (--backbone names: {given}; "
                            f"a scorer without @NAME uses --clip-model / --clip-pretrained)")
            continue
        labels.append(scorer_label(scorer, names[name.strip().lower()] if at else DEFAULT_BACKBONE))
    return list(dict.fromkeys(labels)), problems


def unused_backbones(backbones: Sequence[BackboneSpec], labels: Sequence[str]) -> list[str]:
    """One problem message per ``--backbone`` that no scorer in ``labels`` uses."""
    used = {split_scorer(lb)[1] for lb in labels}
    return [f"--backbone {b.name}: no scorer uses it (add SCORER@{b.name} to --metrics, e.g. CLIP-S@{b.name}, "
            f"or drop it)" for b in backbones if b.name not in used]


def scorer_groups(labels: Sequence[str]) -> dict[str, list[str]]:
    """``{backbone name: [scorer, …]}`` in the order the backbones first occur in ``labels`` (one neural
    pass per backbone)."""
    groups: dict[str, list[str]] = {}
    for label in labels:
        base, name = split_scorer(label)
        groups.setdefault(name, []).append(base)
    return groups


__all__ = ["DEFAULT_BACKBONE", "BackboneSpec", "parse_backbone", "parse_backbones", "split_scorer",
           "scorer_label", "qualify_scorers", "unused_backbones", "scorer_groups"]
