"""The assignments of the course kit: what each one is made of, read from ``course/assignments/NN_name/``.

Each folder holds ``master.py`` (the master notebook, jupytext percent format), ``assignment.json``
(title, notebook name, hours, the plausible wrong solutions and which questions each must fail),
``tests/qK.py`` (public checks, shipped to students) and ``hidden/qK.py`` (hidden tests, never shipped),
both in otter-grader's exception-based test format, and ``wrong/<name>.py`` (the replacement of one
tagged code cell of the solution).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

COURSE_DIR = Path(__file__).resolve().parent
ASSIGNMENTS_DIR = COURSE_DIR / "assignments"
REPO_ROOT = COURSE_DIR.parent


@dataclass(frozen=True)
class WrongSolution:
    name: str
    cell: str
    fails: tuple[str, ...]
    why: str
    source: str


@dataclass(frozen=True)
class Assignment:
    folder: Path

    @property
    def key(self) -> str:
        """``NN_name``, the folder name (also the folder of its student version)."""
        return self.folder.name

    @cached_property
    def config(self) -> dict:
        return json.loads((self.folder / "assignment.json").read_text(encoding="utf-8"))

    @property
    def title(self) -> str:
        return self.config["title"]

    @property
    def notebook(self) -> str:
        """File stem of the student notebook (``<notebook>.ipynb``)."""
        return self.config["notebook"]

    @property
    def watch(self) -> tuple[str, ...]:
        """Extra modules whose functions the grader guards against monkey-patching."""
        return tuple(self.config.get("watch", ()))

    @property
    def master(self) -> Path:
        return self.folder / "master.py"

    @cached_property
    def questions(self) -> tuple[str, ...]:
        names = {p.stem for p in (self.folder / "tests").glob("q*.py")} | \
                {p.stem for p in (self.folder / "hidden").glob("q*.py")}
        return tuple(sorted(names, key=lambda q: int(q[1:])))

    def public_tests(self) -> dict[str, str]:
        return {p.stem: p.read_text(encoding="utf-8") for p in sorted((self.folder / "tests").glob("q*.py"))}

    def grading_tests(self) -> dict[str, list[str]]:
        """Per question, the sources of its public and hidden test files (grading runs both)."""
        out: dict[str, list[str]] = {q: [] for q in self.questions}
        for sub in ("tests", "hidden"):
            for p in sorted((self.folder / sub).glob("q*.py")):
                out[p.stem].append(p.read_text(encoding="utf-8"))
        return out

    @cached_property
    def wrong_solutions(self) -> tuple[WrongSolution, ...]:
        return tuple(WrongSolution(w["name"], w["cell"], tuple(w["fails"]), w.get("why", ""),
                                   (self.folder / "wrong" / f"{w['name']}.py").read_text(encoding="utf-8"))
                     for w in self.config.get("wrong", ()))


def all_assignments() -> list[Assignment]:
    return [Assignment(p) for p in sorted(ASSIGNMENTS_DIR.iterdir()) if (p / "assignment.json").is_file()]


def select(keys: str | None) -> list[Assignment]:
    """Assignments by comma-separated prefixes (``"01,04"`` or ``"01_ranking_metrics"``); all for ``None``."""
    found = all_assignments()
    if not keys:
        return found
    out = []
    for k in (s.strip() for s in keys.split(",") if s.strip()):
        match = [a for a in found if a.key.startswith(k)]
        if len(match) != 1:
            raise ValueError(f"--assignments: {k!r} matches {len(match)} assignments "
                             f"(known: {', '.join(a.key for a in found)})")
        out.append(match[0])
    return out


def by_notebook(stem: str) -> Assignment | None:
    return next((a for a in all_assignments() if a.notebook == stem), None)
