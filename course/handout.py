"""Hand out one teaching world per student: ``python -m course handout --students roster.csv --out DIR``.

Every student's seed is derived from the course key and the student's id (SHA-256), so the grader
recomputes it from the id alone and a re-run of the handout gives the same seeds.  Seeds lie in the
teaching set's evaluation range ``[1, 2^31)`` — never the default seed 0, never one of the hidden tests'
seeds (:data:`course.worlds.HIDDEN_SEEDS`) — and are distinct within a roster.
"""
from __future__ import annotations

import csv
import hashlib
import re
import shutil
from pathlib import Path

from course import notebooks
from course.assignments import Assignment
from course.worlds import HIDDEN_SEEDS

#: Default course key (``--key``): change it per course offering so that seeds differ between years.
DEFAULT_KEY = "image-text-ranking-course"
STUDENT_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")


class HandoutError(ValueError):
    """A roster or output problem, reported as one ``error:`` line."""


def student_seed(student: str, key: str = DEFAULT_KEY) -> int:
    """The student's world seed: ``1 + SHA-256(key, id) mod (2^31 − 1)``, skipping the hidden seeds."""
    salt = ""
    while True:
        digest = hashlib.sha256(f"{key}\x00{student}{salt}".encode("utf-8")).digest()
        seed = 1 + int.from_bytes(digest[:8], "big") % (2 ** 31 - 1)
        if seed not in HIDDEN_SEEDS:
            return seed
        salt += "+"


def read_roster(path: str | Path) -> list[str]:
    """Student ids from a CSV roster: the column ``id`` (or ``student``), else the first column."""
    path = Path(path)
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except OSError as exc:
        raise HandoutError(f"--students {path}: cannot read it ({exc.strerror or exc})") from None
    if not rows:
        raise HandoutError(f"--students {path}: the roster is empty")
    header = [h.strip().lower() for h in rows[0]]
    col = next((header.index(h) for h in ("id", "student") if h in header), None)
    body = rows[1:] if col is not None else rows
    col = col or 0
    ids = [r[col].strip() for r in body if len(r) > col and r[col].strip()]
    bad = [s for s in ids if not STUDENT_ID.match(s)]
    if bad:
        raise HandoutError(f"--students {path}: student id {bad[0]!r} is not usable as a folder name "
                           f"(letters, digits, . _ @ -; at most 64 characters)")
    dupes = sorted({s for s in ids if ids.count(s) > 1})
    if dupes:
        raise HandoutError(f"--students {path}: student id {dupes[0]!r} appears twice")
    if not ids:
        raise HandoutError(f"--students {path}: no student ids found")
    return ids


def write_student_copy(assignment: Assignment, folder: Path, seed: int) -> Path:
    """The student version of ``assignment`` with ``seed`` in its seed cell, and its public checks."""
    nb = notebooks.set_seed(notebooks.student_version(notebooks.read_master(assignment.master)), seed)
    path = notebooks.write(nb, folder / f"{assignment.notebook}.ipynb")
    tests = folder / "tests"
    if tests.exists():
        shutil.rmtree(tests)
    tests.mkdir(parents=True)
    for q, src in assignment.public_tests().items():
        (tests / f"{q}.py").write_text(src, encoding="utf-8")
    return path


def handout(roster: str | Path, out: str | Path, assignments: list[Assignment],
            key: str = DEFAULT_KEY) -> list[tuple[str, int]]:
    """Write ``OUT/<student>/<NN_name>/<notebook>.ipynb`` (+ ``tests/``) per student and ``OUT/seeds.csv``."""
    ids = read_roster(roster)
    seeds = [(s, student_seed(s, key)) for s in ids]
    if len({seed for _, seed in seeds}) != len(seeds):
        raise HandoutError("two students got the same seed: use another --key")
    out = Path(out)
    for student, seed in seeds:
        for a in assignments:
            write_student_copy(a, out / student / a.key, seed)
    with (out / "seeds.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["student", "seed"])
        w.writerows(seeds)
    return seeds
