"""What grading writes: ``grades.csv`` (points per question per student) and per-student feedback.

Feedback names every failed *public* check with its message (which, for an error in the student's
function, is the student's own traceback) and the errors raised by the student's cells; of the hidden
tests it says only how many points they gave, never what they test.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

from course.grading import Outcome, outcome_dict


def write_csv(outcomes: list[Outcome], path: Path) -> Path:
    """One row per (student, assignment): points of each question, total, maximum, status, reason."""
    questions = sorted({q for o in outcomes for q in o.max_points}, key=lambda q: int(q[1:]))
    with path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["student", "assignment", "seed", *questions, "total", "max", "status", "reason"])
        for o in outcomes:
            w.writerow([o.student, o.assignment, o.seed,
                        *[("" if q not in o.max_points else f"{o.points.get(q, 0.0):g}") for q in questions],
                        f"{o.total:g}", f"{sum(o.max_points.values()):g}", o.status, o.reason])
    return path


def feedback_text(o: Outcome) -> str:
    lines = [f"# {o.assignment} — {o.student}", "",
             f"Total: {o.total:g} / {sum(o.max_points.values()):g} points (your world's seed: {o.seed})."]
    if o.reason:
        lines += ["", f"**{o.reason}**"]
    for q, top in o.max_points.items():
        cases = o.cases.get(q, [])
        lines += ["", f"## {q}: {o.points.get(q, 0.0):g} / {top:g}"]
        for c in cases:
            if not c["hidden"] and not c["passed"]:
                lines += [f"- failed public check `{c['name']}`:", "", "```", c["message"].strip(), "```"]
        hidden = [c for c in cases if c["hidden"]]
        if hidden:
            got = sum(c["points"] for c in hidden if c["passed"])
            lines.append(f"- hidden tests: {got:g} of {sum(c['points'] for c in hidden):g} points")
    if o.cell_errors:
        lines += ["", "## Errors raised by your cells", ""]
        for e in o.cell_errors[:10]:
            lines += ["```", e.strip()[-3000:], "```"]
    return "\n".join(lines) + "\n"


def write_feedback(outcomes: list[Outcome], out: Path) -> None:
    """``OUT/feedback/<student>/<assignment>.md`` and the full record ``OUT/results.json``."""
    for o in outcomes:
        p = out / "feedback" / o.student / f"{o.assignment}.md"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(feedback_text(o), encoding="utf-8")
    (out / "results.json").write_text(json.dumps([outcome_dict(o) for o in outcomes], indent=1), encoding="utf-8")
