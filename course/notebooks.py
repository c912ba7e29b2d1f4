"""Master notebooks → solution, student and wrong-solution notebooks.

A master is a jupytext "percent" file (``master.py``: reviewable, no outputs).  Its code cells mark the
solution in one of two ways:

* a block ``# BEGIN SOLUTION`` … ``# END SOLUTION``: the student version replaces it with
  ``# YOUR CODE HERE`` and ``raise NotImplementedError`` at the block's indentation;
* a line ending in ``# SOLUTION``, ``name = expression  # SOLUTION`` or a dict entry
  ``"key": expression,  # SOLUTION``: the student version reads ``name = ...  # YOUR ANSWER HERE``
  (``"key": ...,``).

Cells are found by their jupytext tags: ``seed`` (the one line ``SEED = <int>``, rewritten per student)
and ``q1``, ``q2`` … (the cell that holds a question's code, which a wrong solution replaces).
"""
from __future__ import annotations

import re
from pathlib import Path

import jupytext
import nbformat

SOLUTION_BLOCK = re.compile(r"^([ \t]*)# BEGIN SOLUTION[^\n]*\n.*?^[ \t]*# END SOLUTION[^\n]*(?:\n|$)",
                            re.MULTILINE | re.DOTALL)
SOLUTION_LINE = re.compile(r"^([ \t]*)(\S.*?)(\s=\s|:\s)(.*?)(,?)[ \t]*#\s*SOLUTION[ \t]*$", re.MULTILINE)
SEED_LINE = re.compile(r"^SEED = \d+\b.*$", re.MULTILINE)


def read_master(path: str | Path) -> nbformat.NotebookNode:
    """The master notebook (outputs empty: it is read from its text source)."""
    nb = jupytext.read(str(path), fmt="py:percent")
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb


def _strip_solution(source: str) -> str:
    source = SOLUTION_BLOCK.sub(lambda m: f"{m.group(1)}# YOUR CODE HERE\n{m.group(1)}raise NotImplementedError\n",
                                source)
    return SOLUTION_LINE.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}...{m.group(5)}  # YOUR ANSWER HERE",
                             source)


def _clean(source: str) -> str:
    """The solution as it reads in the solution notebook: markers removed."""
    lines = [ln for ln in source.split("\n") if not re.match(r"^\s*# (BEGIN|END) SOLUTION", ln)]
    return re.sub(r"\s*#\s*SOLUTION\s*$", "", "\n".join(lines), flags=re.MULTILINE)


def _copy(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    return nbformat.reads(nbformat.writes(nb), as_version=4)


def solution_version(master: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = _copy(master)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = _clean(cell.source)
    return nb


def student_version(master: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = _copy(master)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = _strip_solution(cell.source)
    return nb


def tagged_cell(nb: nbformat.NotebookNode, tag: str) -> nbformat.NotebookNode:
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"expected exactly one cell tagged {tag!r}, found {len(cells)}")
    return cells[0]


def wrong_version(master: nbformat.NotebookNode, cell_tag: str, source: str) -> nbformat.NotebookNode:
    """The solution with the code cell tagged ``cell_tag`` replaced by ``source`` (a wrong solution)."""
    nb = solution_version(master)
    tagged_cell(nb, cell_tag).source = source.rstrip("\n")
    return nb


def set_seed(nb: nbformat.NotebookNode, seed: int) -> nbformat.NotebookNode:
    """Write ``seed`` into the notebook's seed cell and its metadata (``course.seed``)."""
    cell = tagged_cell(nb, "seed")
    if not SEED_LINE.search(cell.source):
        raise ValueError("the seed cell must hold a line 'SEED = <integer>'")
    cell.source = SEED_LINE.sub(f"SEED = {int(seed)}  # your own teaching world: do not change it", cell.source,
                                count=1)
    nb.metadata.setdefault("course", {})["seed"] = int(seed)
    return nb


def strip_outputs(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cell.get("metadata", {}).pop("execution", None)
    return nb


def write(nb: nbformat.NotebookNode, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    for k, cell in enumerate(nb.cells):   # stable ids: rebuilding gives byte-identical files
        cell["id"] = f"cell-{k:03d}"
    path.write_text(nbformat.writes(strip_outputs(nb)) + "\n", encoding="utf-8")
    return path
