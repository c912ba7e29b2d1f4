"""The registry of scorer families (:class:`neural.family.ScorerFamily`): the one place the main job's
neural stage, ``neural.score``, ``neural.train_scorer``, :mod:`neural.saved`, :mod:`neural.shipped_scorers`
and the main job's option lists learn which CLIP-family metrics exist.

The built-in families (:mod:`neural.families`) are registered here, in the order the command lines list
them; :func:`register_family` adds another (a researcher's metric, or a test's): from then on the main
job's ``--metrics``, ``neural.score --metric``, ``neural.train_scorer --metric``, saving and loading all
know it.  Nothing here imports torch.

Example
-------
::

    from neural.family import ScorerFamily
    from neural.registry import register_family

    class MyFamily(ScorerFamily):
        name, metric, help = "MY-S", "my-s", "MY-S = ... (paper, Eq. n)"
        ...

    register_family(MyFamily())
"""
from __future__ import annotations

from neural.families.bridge import FAMILY as BRIDGE_FAMILY
from neural.families.clipscore import FAMILY as CLIPSCORE_FAMILY
from neural.families.lclip import FAMILY as LCLIP_FAMILY
from neural.families.pacs import FAMILY as PACS_FAMILY
from neural.families.specs import FAMILY as SPECS_FAMILY
from neural.family import ScorerFamily

__all__ = ["register_family", "unregister_family", "families", "family_for", "family_of_scorer", "scorer_names",
           "reference_names", "trained_names", "metric_names", "metric_entry", "recipe_for", "trained_family", "metrics_help",
           "shipped_folders"]

_FAMILIES: dict[str, ScorerFamily] = {}


def register_family(family: ScorerFamily, *, replace: bool = False) -> ScorerFamily:
    """Add ``family`` (checked, :meth:`~neural.family.ScorerFamily.check`) to the registry.

    Raises
    ------
    ValueError
        Its declaration cannot work, or one of its names is taken (unless ``replace`` and the name is
        the family's own).
    """
    family.check()
    if family.name in _FAMILIES and not replace:
        raise ValueError(f"scorer family {family.name!r} is registered already")
    others = [f for f in _FAMILIES.values() if f.name != family.name]
    taken = {n.lower() for f in others for n in (*f.names(), *f.metrics())}
    clash = [n for n in (*family.names(), *family.metrics()) if n.lower() in taken]
    if clash:
        raise ValueError(f"scorer family {family.name}: names {', '.join(clash)} are another family's")
    _FAMILIES[family.name] = family
    return family


def unregister_family(name: str) -> None:
    """Remove the family called ``name`` (a test's metric, after the test)."""
    _FAMILIES.pop(name, None)


def families(*, trained: bool | None = None) -> tuple[ScorerFamily, ...]:
    """The registered families in registration order (``trained``: only the trained / untrained ones)."""
    return tuple(f for f in _FAMILIES.values() if trained is None or f.trained == trained)


def family_for(name: str) -> ScorerFamily:
    """The family of a main-job name (``PAC-S``, ``RefPAC-S``) or a ``--metric`` name (``refpac-s``),
    case-insensitively.

    Raises
    ------
    KeyError
        Unknown, listing the names.
    """
    key = str(name).lower()
    for f in _FAMILIES.values():
        if key in {n.lower() for n in (*f.names(), *f.metrics())}:
            return f
    raise KeyError(f"unknown scorer {name!r} (choose from {', '.join(scorer_names())})")


def family_of_scorer(scorer) -> ScorerFamily:
    """The family whose :meth:`~neural.family.ScorerFamily.owns` claims ``scorer`` (the save dispatch).

    Raises
    ------
    TypeError
        No family owns it.
    """
    for f in _FAMILIES.values():
        if f.owns(scorer):
            return f
    raise TypeError(f"cannot save a {type(scorer).__name__}: saved scorers are "
                    f"{', '.join(f.name for f in families() if f.savable)} (CLIP-S has no trained weights: its "
                    "backbone is the whole scorer)")


def scorer_names() -> tuple[str, ...]:
    """The main job's neural scorers (``--metrics``): each family's name, then its reference-based variant."""
    return tuple(n for f in _FAMILIES.values() for n in f.names())


def reference_names() -> tuple[str, ...]:
    """The reference-based variants (they only score pairs: a pool's own references would leak the answer)."""
    return tuple(f.reference_name for f in _FAMILIES.values() if f.reference_name)


def trained_names() -> tuple[str, ...]:
    """The families trained here (they have recipes)."""
    return tuple(f.name for f in families(trained=True))


def metric_names() -> tuple[str, ...]:
    """The command lines' ``--metric`` names (``clip-s``, ``refclip-s``, …)."""
    return tuple(m for f in _FAMILIES.values() for m in f.metrics())


def metric_entry(metric: str) -> tuple[ScorerFamily, bool]:
    """``(family, reference-based)`` of a ``--metric`` name."""
    f = family_for(metric)
    return f, bool(f.reference_metric) and metric.lower() == f.reference_metric.lower()


def recipe_for(scorer: str, backbone, family: str = "auto"):
    """The recipe to train ``scorer`` (a main-job or ``--metric`` name; a reference-based name maps to its
    family) on ``backbone`` (a Backbone or a ``--clip-model`` name; ``None``: the teaching CLIP):
    :meth:`neural.family.ScorerFamily.recipe` (``auto``: the small recipes for the small offline CLIPs,
    each paper's for any other backbone; ``small`` / ``paper``: that one)."""
    return trained_family(scorer).recipe(backbone, family)


def trained_family(name: str) -> ScorerFamily:
    """The family of ``name`` (:func:`family_for`), which must be trained.

    Raises
    ------
    ValueError
        Unknown, or not trained (CLIP-S); the message lists the trained scorers.
    """
    try:
        f = family_for(name)
    except KeyError:
        f = None
    if f is None or not f.trained:
        raise ValueError(f"no training recipe for scorer {name!r} (trained scorers: {', '.join(trained_names())})")
    return f


def shipped_folders() -> dict[str, str]:
    """``{family name: sub-folder}`` of the families with a shipped copy (:mod:`neural.shipped_scorers`)."""
    return {f.name: f.shipped_folder for f in _FAMILIES.values() if f.shipped_folder}


def metrics_help() -> str:
    """The ``--metric`` list of the command lines' help: one entry per name with its formula."""
    lines = []
    for f in _FAMILIES.values():
        for metric, text in ((f.metric, f.help), (f.reference_metric, f.reference_help)):
            if metric:
                first, *rest = text.split("\n")
                lines.append(f"  {metric:<15} {first}")
                lines += [" " * 18 + r for r in rest]
    return "\n".join(lines)


for _family in (CLIPSCORE_FAMILY, PACS_FAMILY, LCLIP_FAMILY, BRIDGE_FAMILY, SPECS_FAMILY):
    register_family(_family)
