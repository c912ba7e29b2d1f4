"""The main job's method lists and their parsing: the default classical systems and the neural scorers,
:func:`parse_list` (the comma-separated list rule of every command line of :mod:`experiments`),
:func:`requested_methods`, :func:`reference_choice`, :class:`OptionError` and the standard-benchmark file
options shared by the command lines."""
from __future__ import annotations

from collections.abc import Callable, Sequence

from experiments.backbone_specs import BackboneSpec, qualify_scorers
from experiments.errors import PipelineError
from neural.registry import scorer_names


#: Default classical systems: NN, BoW1, BoW5, TagRank, TRI5, TRI5SEM and the ^Histo contrasts.
DEFAULT_SYSTEMS = ("NN5_F1^idf", "BoW1", "BoW5", "BoW5^Histo", "TagRank", "TRI5", "TRI5^Histo",
                   "TRI5SEM")
QUICK_SYSTEMS = ("NN5_F1^idf", "BoW1", "BoW5", "TRI5", "TRI5^Histo", "TRI5SEM")


class OptionError(PipelineError, ValueError):
    """An option value that cannot work; the message names the option."""


def available_systems() -> list[str]:
    """The classical systems ``--systems all`` runs (the paper's grid, canonical names)."""
    from kcca.systems import list_systems  # the system registry: only when names are listed

    return list_systems()


def split_commas(value: str) -> list[str]:
    """The non-empty, stripped pieces of a comma-separated ``value``."""
    return [v.strip() for v in value.split(",") if v.strip()]


def parse_list(value: str | None, default: Sequence[str], allowed: Sequence[str] | None, option: str, *,
               split: Callable[[str], list[str]] = split_commas, keywords: bool = True,
               all_names: Sequence[str] | None = None) -> list[str]:
    """A comma-separated list option, one rule for every command line: no names is an error.

    Parameters
    ----------
    value : str or None
        The option's value; ``None`` when it was not given.
    default : sequence of str
        The names when the option is not given.
    allowed : sequence of str or None
        The known names: matched case-insensitively and returned in this spelling; another name is an
        error listing them.  ``None``: the names are returned as ``split`` gives them.
    option : str
        The option (``"--metrics"``), named in messages.
    split : callable, optional
        ``value -> names`` (e.g. one that keeps names with commas together); its errors
        (``ValueError``) become :class:`OptionError`.
    keywords : bool, optional
        Whether ``none`` (no names) and ``all`` (``all_names``, else ``allowed``, when either is given)
        are keywords.
    all_names : sequence of str, optional
        The names ``all`` stands for (default: ``allowed``).

    Returns
    -------
    list of str
        The names.

    Raises
    ------
    OptionError
        ``value`` holds no names (``""``, ``","``), or an unknown name.
    """
    if value is None:
        return list(default)
    word = value.strip().lower()
    everything = all_names if all_names is not None else allowed
    if keywords and word == "none":
        return []
    if keywords and word == "all" and everything is not None:
        return list(everything)
    try:
        items = split(value)
    except ValueError as exc:
        raise OptionError(f"{option}: {exc}") from exc
    if not items:
        choices = "a comma-separated list" + (", 'all'," if keywords and everything is not None else "")
        rest = f" or 'none' to run no {option.lstrip('-')}" if keywords else ""
        raise OptionError(f"{option}: no names in {value!r} (give {choices}{rest})")
    if allowed is not None:
        by_lower = {a.lower(): a for a in allowed}  # clip-s == CLIP-S
        items = [by_lower.get(v.lower(), v) for v in items]
        bad = [v for v in items if v not in allowed]
        if bad:
            raise OptionError(f"unknown {option.lstrip('-')}: {', '.join(bad)} (choose from {', '.join(allowed)})")
    return items


def requested_methods(systems: str | None, metrics: str | None, *, quick: bool,
                      backbones: Sequence[BackboneSpec] = ()) -> tuple[list[str], list[str]]:
    """The classical systems (canonical names) and neural scorers asked for.

    Parameters
    ----------
    systems, metrics : str or None
        ``--systems`` / ``--metrics`` as given (``None``: the defaults, :data:`DEFAULT_SYSTEMS` or
        :data:`QUICK_SYSTEMS`, and every registered neural scorer, :func:`neural.registry.scorer_names`).
    quick : bool
        ``--quick`` (its smaller default system list).
    backbones : sequence of BackboneSpec, optional
        The ``--backbone`` backbones a scorer may name (``CLIP-S@openai``,
        :func:`experiments.backbone_specs.qualify_scorers`).

    Returns
    -------
    systems, neural : list of str
        The neural scorers as row labels (``CLIP-S``, ``CLIP-S@openai``).

    Raises
    ------
    OptionError
        An empty list or an unknown name (the message lists the choices); every problem of ``--metrics``
        and ``--backbone`` at once, one per line.
    """
    from kcca.systems import canonical_name, split_system_list  # the system registry's name rules

    def system_names(value: str) -> list[str]:   # names may contain commas themselves (TRI5_A,D_ext)
        return list(dict.fromkeys(split_system_list(value)))

    default = [canonical_name(s) for s in (QUICK_SYSTEMS if quick else DEFAULT_SYSTEMS)]
    chosen = parse_list(systems, default, None, "--systems", split=system_names, all_names=available_systems())
    items = parse_list(metrics, scorer_names(), None, "--metrics", all_names=scorer_names())
    neural, problems = qualify_scorers(items, scorer_names(), backbones)
    if problems:
        raise OptionError(problem_lines(problems))
    return chosen, neural


def problem_lines(problems: Sequence[str]) -> str:
    """Several problems as one message that the command line prints as one ``error:`` line each."""
    return "\nerror: ".join(problems)


def reference_choice(value: str | None, systems: Sequence[str], neural: Sequence[str]) -> str | None:
    """``--reference`` as the name of a requested system or scorer.

    Parameters
    ----------
    value : str or None
        The option as given; ``best`` (or ``None``) for the best system per task.
    systems, neural : sequence of str
        The requested classical systems and neural scorers.

    Returns
    -------
    str or None
        The canonical spelling, or ``None`` for 'best'.

    Raises
    ------
    OptionError
        A name that is not requested.
    """
    value = (value or "best").strip()
    if value.lower() == "best":
        return None
    from kcca.systems import canonical_name  # the system registry's name rules

    by_lower = {n.lower(): n for n in neural}
    try:
        name = by_lower.get(value.lower()) or canonical_name(value)
    except ValueError:
        name = value
    if name not in set(systems) | set(neural):
        raise OptionError(f"--reference {value}: not among the requested systems and scorers "
                          f"({', '.join(list(systems) + list(neural)) or 'none'}); use one of them or 'best'")
    return name


# ---------------------------------------------------------------------------- the standard-benchmark options
def add_benchmark_file_options(g) -> None:
    """``--composite`` / ``--pascal50s`` / ``--foil`` / ``--foil-coco-captions``: the standard benchmarks'
    files in their release formats (:mod:`evaluation.benchmarks`), the same options for the main job and
    ``experiments.caption_metrics_vs_humans``."""
    g.add_argument("--composite", metavar="DIR", default=None,
                   help="Composite (Aditya et al. 2015): the folder of 8k_correctness.csv / 30k_correctness.csv "
                        "/ coco_correctness.csv with their reference caption files (τ-c; default: not run)")
    g.add_argument("--pascal50s", metavar="DIR", default=None,
                   help="Pascal-50S: the folder of pair_pascal.mat and consensus_pascal.mat (accuracy per HC / "
                        "HI / HM / MM, 5 references × 5 draws; default: not run)")
    g.add_argument("--foil", metavar="FILE", default=None,
                   help="FOIL-COCO test JSON (foilv1.0_test_2017.json; accuracy with 1 and 4 references; "
                        "default: not run)")
    g.add_argument("--foil-coco-captions", metavar="FILE", default=None,
                   help="COCO captions_val2014.json, the references of the FOIL images (default: the FOIL "
                        "file's own original captions)")
