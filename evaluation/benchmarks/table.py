"""Any scorer on any standard benchmark, printed in the layout of PAC-S (Sarto et al. 2023) Tables 1–3.

Columns (τ and accuracies × 100):

* Flickr8k-Expert τ-c, Flickr8k-CF τ-b, Composite τ-c (Table 1; :func:`~evaluation.correlation.
  human_correlation` on :class:`~evaluation.correlation.JudgmentRows`; the other τ variant is in the
  result too);
* Pascal-50S HC, HI, HM, MM and their mean (Table 2; :func:`~evaluation.correlation.pairwise_accuracy`
  with 5 references sampled from the 48 per draw, averaged over 5 draws, seeded);
* FOIL 1-ref and 4-ref (Table 3; :func:`~evaluation.correlation.foil_accuracy` on the records with
  their first 1 / 4 references).

Rows are scorers (any :class:`~corpora.scoring.PairScorer`: an n-gram metric through
:func:`~evaluation.correlation.text_metric`, the KCCA caption metric, a neural scorer); a benchmark not
given is shown as ``–``.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from corpora.scoring import PairScorer
from evaluation.benchmarks.common import BenchmarkFormatError
from evaluation.benchmarks.composite import load_composite
from evaluation.benchmarks.foil import load_foil, with_first_references
from evaluation.benchmarks.pascal50s import PASCAL50S_CATEGORIES, load_pascal50s
from evaluation.correlation import FoilRecord, JudgmentRows, PairwiseRecord, foil_accuracy, human_correlation, \
    pairwise_accuracy

__all__ = ["BENCHMARKS", "TABLE_COLUMNS", "LoadedBenchmarks", "load_benchmarks", "benchmark_table",
           "format_benchmark_table"]

#: Benchmark key -> what :func:`benchmark_table` expects under it.
BENCHMARKS = {"flickr8k_expert": JudgmentRows, "flickr8k_cf": JudgmentRows, "composite": JudgmentRows,
              "pascal50s": PairwiseRecord, "foil": FoilRecord}
_CATS = tuple(PASCAL50S_CATEGORIES.values())
#: (group, column header, result key) in printing order.
TABLE_COLUMNS = (
    ("Flickr8k-Expert", "τ-c", "flickr8k_expert_tau_c"), ("Flickr8k-CF", "τ-b", "flickr8k_cf_tau_b"),
    ("Composite", "τ-c", "composite_tau_c"),
    *(("Pascal-50S", c, f"pascal50s_{c}") for c in _CATS), ("Pascal-50S", "mean", "pascal50s_mean"),
    ("FOIL", "1-ref", "foil_1ref"), ("FOIL", "4-ref", "foil_4ref"),
)
_RESULT_KEYS = tuple(k for tag in ("flickr8k_expert", "flickr8k_cf", "composite")
                     for k in (f"{tag}_tau_b", f"{tag}_tau_c")) + tuple(c[2] for c in TABLE_COLUMNS[3:])


@dataclass
class LoadedBenchmarks:
    """The benchmarks :func:`load_benchmarks` could read (``benchmarks``, keyed as :data:`BENCHMARKS`)
    and, per benchmark it could not, the one error naming the file (``errors``)."""

    benchmarks: dict = field(default_factory=dict)
    errors: dict[str, BenchmarkFormatError] = field(default_factory=dict)


def load_benchmarks(*, composite: str | Path | None = None, pascal50s: str | Path | None = None,
                    foil: str | Path | None = None, foil_coco_captions: str | Path | None = None,
                    composite_captions_per_row: int | None = None, seed: int = 0) -> LoadedBenchmarks:
    """Load the benchmarks whose location is given; a malformed or missing file costs only its own
    benchmark.

    Parameters
    ----------
    composite : str or Path, optional
        Folder for :func:`load_composite` (``composite_captions_per_row`` is its ``captions_per_row``).
    pascal50s : str or Path, optional
        Folder for :func:`load_pascal50s` (``seed`` breaks its tied votes).
    foil : str or Path, optional
        File for :func:`load_foil`, with ``foil_coco_captions`` (``captions_val2014.json``) as its
        reference source when given.
    composite_captions_per_row : int, optional
    foil_coco_captions : str or Path, optional
    seed : int

    Returns
    -------
    LoadedBenchmarks
        ``benchmarks`` keyed ``"composite"`` / ``"pascal50s"`` / ``"foil"`` (ready for
        :func:`benchmark_table`) for those that loaded; ``errors``: the :class:`BenchmarkFormatError`
        (file and line / record in its message) of each that did not.
    """
    out = LoadedBenchmarks()
    loaders = {"composite": (composite, lambda p: load_composite(p, captions_per_row=composite_captions_per_row)),
               "pascal50s": (pascal50s, lambda p: load_pascal50s(p, seed=seed)),
               "foil": (foil, lambda p: load_foil(p, coco_captions=foil_coco_captions))}
    for key, (where, load) in loaders.items():
        if where is None:
            continue
        try:
            out.benchmarks[key] = load(where)
        except BenchmarkFormatError as exc:
            out.errors[key] = exc
    return out


def _check_benchmarks(benchmarks: Mapping[str, object]) -> None:
    for key, value in benchmarks.items():
        if key not in BENCHMARKS:
            raise ValueError(f"benchmark_table: unknown benchmark {key!r} (known: {list(BENCHMARKS)})")
        want = BENCHMARKS[key]
        ok = isinstance(value, want) if want is JudgmentRows else \
            isinstance(value, (list, tuple)) and len(value) > 0 and all(isinstance(r, want) for r in value)
        if not ok:
            raise ValueError(f"benchmark_table: {key!r} must be "
                             f"{'JudgmentRows' if want is JudgmentRows else f'a non-empty list of {want.__name__}'}, "
                             f"got {type(value).__name__}")


def _benchmark_values(tag: str, data, scorer: PairScorer, seed: int, pascal: tuple[int, int]) -> dict:
    """The result keys of one benchmark for one scorer."""
    if tag == "pascal50s":
        cats = pairwise_accuracy(data, scorer, n_refs=pascal[0], n_draws=pascal[1], seed=seed)["per_category"]
        present = [cats[c] for c in _CATS if c in cats]
        return {**{f"pascal50s_{c}": cats.get(c) for c in _CATS}, "pascal50s_mean": sum(present) / len(present)}
    if tag == "foil":
        return {f"foil_{k}ref": foil_accuracy(with_first_references(data, k), scorer)["accuracy"] for k in (1, 4)}
    c = human_correlation(data, scorer)
    return {f"{tag}_tau_b": 100 * c["tau_b"], f"{tag}_tau_c": 100 * c["tau_c"]}


def _scorer_row(name: str, scorer: PairScorer, benchmarks: Mapping[str, object], seed: int,
                pascal: tuple[int, int], errors: dict) -> dict:
    """One scorer's row; a benchmark it cannot be run on stays ``None`` and its message goes to
    ``errors["<scorer> on <benchmark>"]``: the protocol's ``ValueError`` (e.g. a reference-based metric
    on records without references), a ``LookupError`` or ``OSError`` of a scorer that cannot find an
    image (an image-based scorer given no loader for the benchmark's image folder)."""
    row = dict.fromkeys(_RESULT_KEYS)
    for tag in BENCHMARKS:
        if tag in benchmarks:
            try:
                row.update(_benchmark_values(tag, benchmarks[tag], scorer, seed, pascal))
            except (ValueError, LookupError, OSError) as exc:
                errors[f"{name} on {tag}"] = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) \
                    else str(exc)
    return row


def benchmark_table(scorers: Mapping[str, PairScorer], benchmarks: Mapping[str, object], *, seed: int = 0,
                    pascal_refs: int = 5, pascal_draws: int = 5) -> dict:
    """Run every scorer on every benchmark given.

    Parameters
    ----------
    scorers : mapping of str to PairScorer
        Row name -> scorer ``f(image_ids, candidates, references) -> scores``.
    benchmarks : mapping
        Any of :data:`BENCHMARKS`: ``"flickr8k_expert"`` / ``"flickr8k_cf"`` / ``"composite"`` ->
        :class:`~evaluation.correlation.JudgmentRows`; ``"pascal50s"`` -> list of
        :class:`~evaluation.correlation.PairwiseRecord`; ``"foil"`` -> list of
        :class:`~evaluation.correlation.FoilRecord`.
    seed : int
        Seeds the Pascal-50S reference draws (the same draws for every scorer).
    pascal_refs, pascal_draws : int
        References sampled per draw and draws averaged (PAC-S: 5 and 5).

    Returns
    -------
    dict
        ``{"rows": {scorer: {key: value × 100 or None}}, "benchmarks": {key: n}, "seed", "pascal_refs",
        "pascal_draws"}``; the keys of a row are ``<flickr8k_expert|flickr8k_cf|composite>_tau_<b|c>``,
        ``pascal50s_<HC|HI|HM|MM|mean>`` (mean = mean of the categories present) and ``foil_<1|4>ref``;
        ``None`` where the benchmark was not given; ``"errors"``: ``{"<scorer> on <benchmark>": message}``
        for each cell that could not be computed (a scorer that does not return one finite score per
        item, a reference-based metric on items without references, an image-based scorer that cannot
        find an image: ``ValueError``, ``LookupError``, ``OSError``), whose values stay ``None`` while
        the rest of the table is computed.

    Raises
    ------
    ValueError
        For an unknown benchmark key, a value of the wrong kind or no scorer.
    """
    if not scorers:
        raise ValueError("benchmark_table: no scorers")
    _check_benchmarks(benchmarks)
    errors: dict[str, str] = {}
    rows = {name: _scorer_row(name, s, benchmarks, seed, (pascal_refs, pascal_draws), errors)
            for name, s in scorers.items()}
    return {"rows": rows, "benchmarks": {k: len(v) for k, v in benchmarks.items()}, "seed": seed,
            "pascal_refs": pascal_refs, "pascal_draws": pascal_draws, "errors": errors}


def _cell(v, width: int) -> str:
    return f"{'–' if v is None else f'{v:.1f}':>{width}}"


def _separator(i: int) -> str:
    """`` |`` before column ``i`` when it starts a new group (not before the first one)."""
    return " |" if i > 0 and TABLE_COLUMNS[i][0] != TABLE_COLUMNS[i - 1][0] else ""


def format_benchmark_table(result: Mapping, errors: Mapping[str, Exception] | None = None) -> str:
    """The PAC-S (Sarto et al. 2023) Tables 1–3 layout of a :func:`benchmark_table` result.

    Parameters
    ----------
    result : mapping
        What :func:`benchmark_table` returned.
    errors : mapping of str to Exception, optional
        Benchmarks that could not be loaded, e.g. :attr:`LoadedBenchmarks.errors`.

    Returns
    -------
    str
        A title, two header lines (benchmark groups separated by ``|``, then τ-c / τ-b / HC … / 1-ref
        4-ref), one line per scorer (one decimal, ``–`` for a benchmark not run), a line with the
        benchmark sizes and the protocol, and one ``error: <what>: <message>`` line per benchmark in
        ``errors`` and per cell the protocol refused (``result["errors"]``).
    """
    names = list(result["rows"])
    w = max([len(n) for n in names] + [6]) + 2
    widths = [len(g) + 1 if i < 3 else 6 for i, (g, _, _) in enumerate(TABLE_COLUMNS)]
    top = " " * w
    for i, ((g, _, _), cw) in enumerate(zip(TABLE_COLUMNS, widths)):
        if i == 0 or _separator(i):
            span = sum(c for (g2, _, _), c in zip(TABLE_COLUMNS, widths) if g2 == g)
            top += _separator(i) + (f"{g:>{span}}" if span <= len(g) + 2 else f"{g:^{span}}")
    head = f"{'scorer':<{w}}"
    for i, ((g, h, _), cw) in enumerate(zip(TABLE_COLUMNS, widths)):
        head += _separator(i) + f"{h:>{cw}}"
    lines = ["Standard benchmarks (Kendall τ × 100 | accuracy %): PAC-S (Sarto et al. 2023) Tables 1–3 layout",
             top, head, "-" * len(head)]
    for n in names:
        r, line = result["rows"][n], f"{n:<{w}}"
        for i, ((g, _, key), cw) in enumerate(zip(TABLE_COLUMNS, widths)):
            line += _separator(i) + _cell(r[key], cw)
        lines.append(line)
    sizes = ", ".join(f"{k} n = {v}" for k, v in result["benchmarks"].items()) or "none"
    lines.append(f"benchmarks: {sizes}; Pascal-50S: {result['pascal_refs']} references sampled per draw, mean of "
                 f"{result['pascal_draws']} draws (seed {result['seed']}); FOIL: first 1 / 4 references")
    lines.extend(f"error: {k}: {e}" for k, e in {**(errors or {}), **result.get("errors", {})}.items())
    return "\n".join(lines)
