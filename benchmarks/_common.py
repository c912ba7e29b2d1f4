"""What every benchmark script shares: peak memory and printing the result (one JSON object with
``--json``, else one ``key: value`` line per figure)."""
from __future__ import annotations

import json
import resource
import sys
from collections.abc import Iterable, Mapping


def peak_rss_mb(children: bool = False) -> float:
    """Peak resident memory in MB of this process (``children=True``: of its waited-for children, the
    largest one), from ``getrusage`` (kilobytes on Linux, bytes on macOS)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN if children else resource.RUSAGE_SELF).ru_maxrss
    return r / 2**20 if sys.platform == "darwin" else r / 1024.0


def emit(result: Mapping, as_json: bool, *, skip: Iterable[str] = (), indent: int | None = None) -> None:
    """Print ``result``: one JSON object (``as_json``), else its figures one per line, keys right-aligned
    (``skip``: keys left out of the table, e.g. a long provenance record)."""
    if as_json:
        print(json.dumps(result, indent=indent))
        return
    skip = set(skip)
    rows = [(str(k), v) for k, v in result.items() if k not in skip]
    width = max((len(k) for k, _ in rows), default=0)
    for k, v in rows:
        print(f"{k:>{width}}: {v}")


def comparable_numbers(results: Mapping, drop: Iterable[str] = ("command",)) -> dict:
    """A main job's ``results.json`` without what legitimately differs between runs of the same numbers:
    every key containing ``timings`` and the keys in ``drop`` (the command line; a run at another
    thread count also drops ``provenance``, which records the threads)."""
    drop = set(drop)

    def strip(o):
        if isinstance(o, Mapping):
            return {k: strip(v) for k, v in o.items() if "timings" not in k and k not in drop}
        if isinstance(o, list):
            return [strip(v) for v in o]
        return o

    return strip(results)
