"""``python -m course build``: write the student versions and check that the tests tell right from wrong.

The check grades, for every assignment, on the master's practice seed:

* the solution notebook — it must run top to bottom, its public checks (``grader.check`` cells) included,
  without an error, and score full points;
* the student version — it must run top to bottom and score **zero** on every question (no test passes
  on a stub);
* every plausible wrong solution of ``assignment.json`` — it must score zero on exactly the questions it
  lists under ``fails`` and full points on every other one.
"""
from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from course import notebooks
from course.assignments import COURSE_DIR, Assignment
from course.grading import Outcome, grade_many
from course.handout import write_student_copy

STUDENT_DIR = COURSE_DIR / "student"


def master_seed(assignment: Assignment) -> int:
    """The practice seed in the master's seed cell (the seed of ``course/student/``)."""
    cell = notebooks.tagged_cell(notebooks.read_master(assignment.master), "seed")
    return int(re.search(r"SEED = (\d+)", cell.source).group(1))


def write_student_versions(assignments: list[Assignment], out: Path = STUDENT_DIR) -> list[Path]:
    """``course/student/<NN_name>/<notebook>.ipynb`` and its public checks, on the practice seed."""
    return [write_student_copy(a, out / a.key, master_seed(a)) for a in assignments]


@dataclass
class Expectation:
    assignment: Assignment
    variant: str                  # "solution", "student" or a wrong solution's name
    fails: tuple[str, ...]        # questions that must score 0 (all of them for "student")

    def problems(self, o: Outcome) -> list[str]:
        out = []
        if o.status != "graded" or o.reason:
            out.append(f"{o.status}: {o.reason}")
        if self.variant == "solution" and o.cell_errors:
            out.append(f"a cell of the solution (or its public check) raised: {o.cell_errors[0].splitlines()[0]}")
        for q, top in o.max_points.items():
            want = 0.0 if q in self.fails else top
            if o.points.get(q, 0.0) != want:
                out.append(f"{q}: {o.points.get(q, 0.0):g} points, expected {want:g}")
        return out


def variants(assignment: Assignment, work: Path) -> list[tuple[Path, Expectation]]:
    master = notebooks.read_master(assignment.master)
    folder = work / assignment.key
    out = [(notebooks.write(notebooks.solution_version(master), folder / "solution.ipynb"),
            Expectation(assignment, "solution", ())),
           (notebooks.write(notebooks.student_version(master), folder / "student.ipynb"),
            Expectation(assignment, "student", assignment.questions))]
    for w in assignment.wrong_solutions:
        nb = notebooks.wrong_version(master, w.cell, w.source)
        out.append((notebooks.write(nb, folder / f"wrong_{w.name}.ipynb"), Expectation(assignment, w.name, w.fails)))
    return out


def check(assignments: list[Assignment], timeout: float, n_jobs: int, work: Path | None = None,
          echo=print) -> bool:
    """Grade every variant of every assignment; print one line per notebook; True when all behave."""
    tmp = None
    if work is None:
        tmp = tempfile.mkdtemp(prefix="course-build-")
        work = Path(tmp)
    try:
        pairs = [v for a in assignments for v in variants(a, work)]
        outcomes = grade_many([(nb, exp.variant, exp.assignment, master_seed(exp.assignment)) for nb, exp in pairs],
                              timeout, n_jobs, {k for k, (_, exp) in enumerate(pairs) if exp.variant == "solution"})
        ok = True
        for (_, exp), o in zip(pairs, outcomes):
            problems = exp.problems(o)
            ok &= not problems
            pts = " ".join(f"{q}={o.points.get(q, 0):g}/{m:g}" for q, m in o.max_points.items())
            echo(f"{'ok  ' if not problems else 'FAIL'} {exp.assignment.key:<28} {exp.variant:<22} {pts}  "
                 f"({o.seconds:.0f} s){'  ' + '; '.join(problems) if problems else ''}")
        return ok
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
