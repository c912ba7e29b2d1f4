"""The course kit (course/README.md): the kit check, one world per student, robust grading, the guide's commands.

The notebooks run in Jupyter kernels (nbclient), two at a time; the whole file takes a few minutes, most
of it the kit check (every assignment's solution, student version and wrong solutions graded).
"""
from __future__ import annotations

import csv
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("otter", reason="the course kit needs otter-grader (the test extra)")
pytest.importorskip("nbclient", reason="the course kit needs nbclient (the test extra)")

import nbformat  # noqa: E402

from course import notebooks, worlds  # noqa: E402
from course.assignments import REPO_ROOT, select  # noqa: E402
from course.cli import main  # noqa: E402
from course.handout import DEFAULT_KEY, read_roster, student_seed  # noqa: E402

GUIDE = REPO_ROOT / "course" / "README.md"
A1 = select("01")[0]


def _course(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "course", *args], cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=timeout)


def _guide_commands_raw(section: str) -> list[list[str]]:
    """The commands of a section's bash blocks in the instructor guide (comments dropped)."""
    text = GUIDE.read_text(encoding="utf-8")
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    out = []
    for block in re.findall(r"```bash\n(.*?)```", body, re.S):
        for line in block.splitlines():
            line = line.split("#", 1)[0].strip()
            if line:
                out.append(shlex.split(line))
    return out


def _guide_commands(section: str) -> list[list[str]]:
    """The ``python -m course`` commands of a section, to run with this interpreter."""
    out = _guide_commands_raw(section)
    assert out and all(c[:3] == ["python", "-m", "course"] for c in out), out
    return [[sys.executable, *c[1:]] for c in out]


def test_guide_build_and_check_the_kit():
    """`python -m course build` (the guide's command): solutions full, students zero, wrong solutions
    lose exactly their questions; course/student/ is up to date with the masters."""
    before = {p: p.read_bytes() for p in (REPO_ROOT / "course" / "student").rglob("*") if p.is_file()}
    (cmd,) = _guide_commands("Build and check the kit")
    done = _course(*cmd[3:])
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(("ok", "FAIL"))]
    expected = sum(2 + len(a.wrong_solutions) for a in select(None))
    assert len(lines) == expected and all(ln.startswith("ok") for ln in lines), done.stdout
    assert len(select(None)) >= 6 and all(len(a.wrong_solutions) >= 2 for a in select(None))
    after = {p: p.read_bytes() for p in (REPO_ROOT / "course" / "student").rglob("*") if p.is_file()}
    assert after == before, "course/student/ was out of date with the masters: commit the rebuilt files"


def test_guide_hand_out_collect_grade(tmp_path):
    """The guide's hand-out / grade commands, run as written in a course folder with the example roster:
    the untouched copies of assignment 1, collected as submissions, score 0 each, with feedback naming the
    failed public checks."""
    shutil.copy(REPO_ROOT / "course" / "example_roster.csv", tmp_path / "roster.csv")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    handout_cmd, grade_cmd = _guide_commands("Hand out, collect, grade")
    done = subprocess.run(handout_cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for student in ("ada", "alan", "grace"):                          # the instructor collects assignment 1
        shutil.copytree(tmp_path / "handout" / student / A1.key, tmp_path / "submissions" / student / A1.key)
        assert len(list((tmp_path / "handout" / student).iterdir())) == len(select(None))
    done = subprocess.run(grade_cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(csv.DictReader((tmp_path / "grades" / "grades.csv").open()))
    assert sorted(r["student"] for r in rows) == ["ada", "alan", "grace"]
    assert all(float(r["total"]) == 0 and r["status"] == "graded" for r in rows)
    fb = (tmp_path / "grades" / "feedback" / "ada" / f"{A1.key}.md").read_text()
    assert "failed public check" in fb and "gold_rank is not implemented yet" in fb


def test_guide_student_commands():
    """The students' two commands: the notebook they open exists, and the course extra installs JupyterLab."""
    install, lab = _guide_commands_raw("For students: two commands")
    assert install == ["pip", "install", "-e", ".[course]"] and lab[:2] == ["jupyter", "lab"]
    assert (REPO_ROOT / lab[2]).is_file()
    setup = (REPO_ROOT / "setup.py").read_text()
    assert '"course": [' in setup and "jupyterlab" in setup


def test_handout_gives_each_student_an_own_world(tmp_path):
    roster = tmp_path / "roster.csv"
    roster.write_text("id,name\nada,A\nalan,B\ngrace,C\n")
    assert main(["handout", "--students", str(roster), "--out", str(tmp_path / "h"), "--assignments", "01"]) == 0
    seeds = {r["student"]: int(r["seed"]) for r in csv.DictReader((tmp_path / "h" / "seeds.csv").open())}
    assert len(set(seeds.values())) == 3 and all(0 < s < 2 ** 31 for s in seeds.values())
    assert not set(seeds.values()) & set(worlds.HIDDEN_SEEDS)
    for student, seed in seeds.items():
        assert seed == student_seed(student, DEFAULT_KEY)
        nb = nbformat.read(tmp_path / "h" / student / A1.key / f"{A1.notebook}.ipynb", as_version=4)
        assert nb.metadata["course"]["seed"] == seed
        assert f"SEED = {seed}" in notebooks.tagged_cell(nb, "seed").source
        assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")
        assert "BEGIN SOLUTION" not in nbformat.writes(nb)
        assert (tmp_path / "h" / student / A1.key / "tests" / "q1.py").is_file()
    captions = {s: tuple(c.text for c in worlds.pool(seed).captions) for s, seed in seeds.items()}
    assert len(set(captions.values())) == 3, "three students, three different data sets"


def test_roster_problems_are_one_error_line(tmp_path, capsys):
    bad = tmp_path / "roster.csv"
    bad.write_text("id\nada\nada\n")
    assert main(["handout", "--students", str(bad), "--out", str(tmp_path / "h")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --students") and "twice" in err and err.count("\n") == 1
    assert main(["grade", str(tmp_path / "nothing"), "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a folder" in err
    assert main(["build", "--assignments", "99"]) == 2
    assert "matches 0 assignments" in capsys.readouterr().err


BUGGY_Q1 = """def gold_rank(scores, gold):
    return helper(scores)


def helper(s):
    return s.missing_attribute


def recall_at_k(ranks, k):
    return 0.0


def median_rank(ranks):
    return 0.0
"""


def _submission(root: Path, student: str, nb: nbformat.NotebookNode, seed: int, extra: list[str] = ()) -> Path:
    nb = notebooks.set_seed(nbformat.reads(nbformat.writes(nb), as_version=4), seed)
    for src in extra:
        nb.cells.append(nbformat.v4.new_code_cell(src))
    return notebooks.write(nb, root / student / A1.key / f"{A1.notebook}.ipynb")


def test_grading_copies_crashes_loops_and_tampering(tmp_path):
    master = notebooks.read_master(A1.master)
    solution = notebooks.solution_version(master)
    wrong_q1 = notebooks.wrong_version(master, "q1", A1.wrong_solutions[0].source)
    subs = tmp_path / "subs"
    seed = student_seed("ada")
    _submission(subs, "ada", solution, seed)                                     # own work
    _submission(subs, "alan", solution, seed)                                    # copied from ada
    _submission(subs, "crash", solution, seed, ["import os\nos._exit(1)"])
    _submission(subs, "endless", solution, seed, ["while True:\n    pass"])
    buggy = notebooks.wrong_version(master, "q1", BUGGY_Q1)                      # a raising gold_rank ...
    edited = _submission(subs, "editor", buggy, student_seed("editor"))           # ... and edited public tests
    (edited.parent / "tests").mkdir()
    (edited.parent / "tests" / "q1.py").write_text("from otter.test_files import test_case\nname = 'q1'\n"
                                                   "@test_case(points=3)\ndef t():\n    pass\n")
    _submission(subs, "patcher", wrong_q1, student_seed("patcher"),
                ["import course.checks\ncourse.checks.assert_close = lambda *a, **k: None"])
    hidden = REPO_ROOT / "course" / "assignments" / A1.key / "hidden" / "q1.py"
    _submission(subs, "peeker", solution, student_seed("peeker"), [f"print(open({str(hidden)!r}).read()[:20])"])
    (subs / "broken" / A1.key).mkdir(parents=True)
    (subs / "broken" / A1.key / f"{A1.notebook}.ipynb").write_text("{not json")

    done = _course("grade", str(subs), "--out", str(tmp_path / "g"), "--timeout", "60")
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["student"]: r for r in csv.DictReader((tmp_path / "g" / "grades.csv").open())}
    full = {"q1": 3, "q2": 3, "q3": 3, "q4": 2}
    pts = {s: {q: float(r[q]) for q in full} for s, r in rows.items()}
    assert pts["ada"] == full and rows["ada"]["status"] == "graded"
    assert pts["alan"] == {**full, "q4": 0}, "a copied world answer fails the copier's hidden test"
    for who, status, why in (("crash", "crashed", "crashed"), ("endless", "timeout", "60 s")):
        assert rows[who]["status"] == status and float(rows[who]["total"]) == 0 and why in rows[who]["reason"]
    assert rows["broken"]["status"] == "unreadable" and float(rows["broken"]["total"]) == 0
    assert pts["editor"] == {**full, "q1": 0, "q4": 0}, "edited public tests are not used"
    assert rows["patcher"]["status"] == "tampered" and float(rows["patcher"]["total"]) == 0
    assert "course.checks.assert_close" in rows["patcher"]["reason"]
    assert "hidden tests" in rows["peeker"]["reason"]
    assert pts["peeker"] == {"q1": 1, "q2": 1, "q3": 1, "q4": 0}, "only the public checks count for a peeker"
    # feedback: failed public checks by name, the hidden tests never shown
    fb = (tmp_path / "g" / "feedback" / "editor" / f"{A1.key}.md").read_text()
    assert "test_small_example_with_ties" in fb and "hidden tests: 0 of 2 points" in fb
    assert "evaluate(" not in fb and "HIDDEN_SEEDS" not in fb
    # an error in the student's function: their own traceback, not the grader's frames
    assert "gold_rank raised an error" in fb and "in helper" in fb and "AttributeError" in fb
    assert "course/checks.py" not in fb and "exception_test" not in fb
    results = json.loads((tmp_path / "g" / "results.json").read_text())
    assert {r["student"] for r in results} == set(rows)


def test_read_roster_first_column(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("s1\ns2\n")
    assert read_roster(p) == ["s1", "s2"]
