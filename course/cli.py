"""``python -m course {build,handout,grade}``: the course kit's command line (course/README.md)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from course import assignments as A
from course.build import check, write_student_versions
from course.grading import DEFAULT_TIMEOUT, grade_many
from course.handout import DEFAULT_KEY, HandoutError, handout, student_seed
from course.reports import write_csv, write_feedback


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--assignments", metavar="LIST", default=None,
                   help="comma-separated assignment folders or prefixes, e.g. '01,04' (default: all)")


def _grading(p: argparse.ArgumentParser) -> None:
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"wall-clock limit per notebook; a notebook over it gets 0 (default {DEFAULT_TIMEOUT})")
    p.add_argument("--jobs", type=int, default=2, metavar="N",
                   help="notebooks graded at once, each in its own kernel (default 2)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m course", description=(
        "The course kit: graded assignments on image-text ranking, one teaching world per student. "
        "Instructor guide: course/README.md."))
    sub = ap.add_subparsers(dest="command", required=True, metavar="{build,handout,grade}")

    b = sub.add_parser("build", help="write course/student/ and check solutions, stubs and wrong solutions",
                       description="Write the student versions (course/student/<assignment>/) from the masters, "
                                   "then grade every solution (full points expected), every student version "
                                   "(zero expected) and every plausible wrong solution (zero on exactly the "
                                   "questions it gets wrong). Exit status 1 when any notebook does not behave.")
    _common(b)
    _grading(b)
    b.add_argument("--no-check", action="store_true", help="only write the student versions")
    b.add_argument("--work", metavar="DIR", default=None,
                   help="keep the graded variants (solution, student, wrong_*) in DIR (default: a temporary folder)")

    h = sub.add_parser("handout", help="one student version per student, each with its own world seed",
                       description="Write OUT/<student>/<assignment>/<notebook>.ipynb with its public checks "
                                   "(tests/) for every student of the roster, each with the student's own "
                                   "teaching-world seed, and OUT/seeds.csv (keep it: it is the instructor's record).")
    h.add_argument("--students", required=True, metavar="CSV",
                   help="roster: a CSV with a column 'id' (or 'student'), else the first column is the id")
    h.add_argument("--out", required=True, metavar="DIR", help="output folder")
    h.add_argument("--key", default=DEFAULT_KEY, help="course key the seeds derive from; grade needs the same "
                                                      "(default %(default)r)")
    _common(h)

    g = sub.add_parser("grade", help="grade a folder of submitted notebooks",
                       description="Grade SUBMISSIONS/<student>/**/<notebook>.ipynb (the layout handout writes) on "
                                   "each student's own world. Writes OUT/grades.csv (points per question per "
                                   "student), OUT/feedback/<student>/<assignment>.md and OUT/results.json.")
    g.add_argument("submissions", metavar="SUBMISSIONS", help="folder with one sub-folder per student")
    g.add_argument("--out", required=True, metavar="DIR", help="output folder")
    g.add_argument("--key", default=DEFAULT_KEY, help="course key used by handout (default %(default)r)")
    _common(g)
    _grading(g)
    return ap


def _submissions(root: Path, chosen: list[A.Assignment]) -> list[tuple[Path, str, A.Assignment]]:
    if not root.is_dir():
        raise HandoutError(f"SUBMISSIONS {root}: not a folder")
    by_stem = {a.notebook: a for a in chosen}
    found = []
    for student_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for nb in sorted(student_dir.rglob("*.ipynb")):
            if ".ipynb_checkpoints" in nb.parts:
                continue
            a = by_stem.get(nb.stem)
            if a is not None:
                found.append((nb, student_dir.name, a))
    if not found:
        raise HandoutError(f"SUBMISSIONS {root}: no submitted notebooks found "
                           f"(expected <student>/.../{{{','.join(by_stem)}}}.ipynb)")
    return found


def run(args: argparse.Namespace) -> int:
    chosen = A.select(args.assignments)
    if args.command == "build":
        paths = write_student_versions(chosen)
        print(f"wrote {len(paths)} student notebooks under {A.COURSE_DIR / 'student'}")
        if args.no_check:
            return 0
        t0 = time.monotonic()
        ok = check(chosen, args.timeout, args.jobs, Path(args.work) if args.work else None)
        print(f"kit check {'passed' if ok else 'FAILED'} in {time.monotonic() - t0:.0f} s")
        return 0 if ok else 1
    if args.command == "handout":
        seeds = handout(args.students, args.out, chosen, args.key)
        print(f"handed out {len(chosen)} assignments to {len(seeds)} students in {args.out} "
              f"(seeds: {Path(args.out) / 'seeds.csv'})")
        return 0
    subs = _submissions(Path(args.submissions), chosen)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    outcomes = grade_many([(nb, st, a, student_seed(st, args.key)) for nb, st, a in subs], args.timeout, args.jobs)
    write_csv(outcomes, out / "grades.csv")
    write_feedback(outcomes, out)
    for o in outcomes:
        print(f"{o.student:<20} {o.assignment:<28} {o.total:g}/{sum(o.max_points.values()):g} {o.status}"
              f"{' — ' + o.reason if o.reason else ''}")
    print(f"grades: {out / 'grades.csv'}; feedback: {out / 'feedback'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    for name in ("jobs",):
        if getattr(args, name, 1) < 1:
            print(f"error: --{name} must be at least 1", file=sys.stderr)
            return 2
    if getattr(args, "timeout", 1) <= 0:
        print("error: --timeout must be positive", file=sys.stderr)
        return 2
    try:
        return run(args)
    except (HandoutError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
