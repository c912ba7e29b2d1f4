"""Grade notebooks locally: run each in its own Jupyter kernel (nbclient) under a time limit, then run
the public and hidden tests (otter-grader's test runner) in that kernel.

One submission's crash, endless loop or tampering costs only its own points: each notebook runs in a
separate worker process with its own kernel and a wall-clock limit; a kernel that dies, a notebook that
does not finish in time or cannot be read is graded 0 with the reason, and the next one is graded.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from course.assignments import ASSIGNMENTS_DIR, REPO_ROOT, Assignment, all_assignments
from course.guard import BASE_WATCH, grade_source, guard_source, parse_grade_output

#: A student's public-check cell (``grader.check("q1")``): not run when grading (the tests run after).
CHECK_CELL = re.compile(r"""^\s*grader\.check\(["']q\d+["']\)\s*$""")
#: Default wall-clock limit per notebook (seconds); every assignment runs in well under a minute.
DEFAULT_TIMEOUT = 300


@dataclass
class Outcome:
    """The grade of one notebook."""
    student: str
    assignment: str
    seed: int
    status: str = "graded"                  # graded | timeout | crashed | unreadable | tampered
    reason: str = ""
    points: dict[str, float] = field(default_factory=dict)
    max_points: dict[str, float] = field(default_factory=dict)
    cases: dict[str, list[dict]] = field(default_factory=dict)
    cell_errors: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def total(self) -> float:
        return float(sum(self.points.values()))


def grading_env() -> dict[str, str]:
    """The kernel's environment: the repository root on ``PYTHONPATH`` (``course`` and the toolkit),
    one BLAS thread per kernel (several kernels share the CPU)."""
    env = dict(os.environ)
    rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *rest])
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env.setdefault(var, "1")
    env.setdefault("MPLBACKEND", "Agg")
    return env


def _cell_error(index: int, output) -> str:
    tb = "\n".join(output.get("traceback", []))
    return f"cell {index}: {output.get('ename')}: {output.get('evalue')}\n{_strip_ansi(tb)}"


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def run_notebook(nb: nbformat.NotebookNode, assignment: Assignment, seed: int, timeout: float,
                 workdir: Path, run_checks: bool = False) -> dict:
    """Execute ``nb`` (guard cell + its cells + grade cell) in a fresh kernel; the raw result as a dict.

    ``run_checks``: also run the notebook's ``grader.check`` cells, on the kit's public tests (the kit
    check does it for the solutions, so that a public check that cannot run is caught)."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    marker = f"@@course-grade-{secrets.token_hex(8)}@@"
    watch = BASE_WATCH + assignment.watch
    cells = [nbformat.v4.new_code_cell(guard_source([str(ASSIGNMENTS_DIR)], watch))] + \
        [c for c in nb.cells if c.cell_type == "code" and (run_checks or not CHECK_CELL.match(c.source))] + \
        [nbformat.v4.new_code_cell(grade_source(assignment.grading_tests(), seed, marker, watch))]
    run = nbformat.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "language": "python",
                                                                            "display_name": "Python 3"}})
    client = NotebookClient(run, timeout=timeout, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(workdir)}})
    if run_checks:
        (workdir / "tests").mkdir()
        for q, src in assignment.public_tests().items():
            (workdir / "tests" / f"{q}.py").write_text(src, encoding="utf-8")
    deadline = time.monotonic() + timeout
    errors: list[str] = []
    with client.setup_kernel(env=grading_env(), cwd=str(workdir)):
        for index, cell in enumerate(run.cells):
            last = index == len(run.cells) - 1     # the tests get their own limit
            client.timeout = max(60, int(timeout)) if last else max(1, int(deadline - time.monotonic()))
            if index < len(run.cells) - 1 and time.monotonic() >= deadline:
                raise CellTimeoutError(f"out of time before cell {index}")
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                return {"status": "crashed", "reason": f"the notebook crashed the Python kernel (in cell {index})"}
            except CellTimeoutError:
                return {"status": "timeout", "reason": f"the notebook did not finish within {timeout:.0f} s "
                                                       f"(stopped in cell {index})"}
            if 0 < index < len(run.cells) - 1:
                errors += [_cell_error(index, o) for o in cell.outputs if o.get("output_type") == "error"]
    text = "".join(o.get("text", "") for o in run.cells[-1].outputs if o.get("output_type") == "stream")
    parsed = parse_grade_output(text, marker)
    if parsed is None:
        failed = [o for o in run.cells[-1].outputs if o.get("output_type") == "error"]
        why = _cell_error(len(run.cells) - 1, failed[0]) if failed else "no results"
        return {"status": "crashed", "reason": f"the tests could not run after the notebook ({why.splitlines()[0]})"}
    parsed["cell_errors"] = errors
    return parsed


def _worker(args: list[str]) -> int:
    """``python -m course.grading NOTEBOOK ASSIGNMENT SEED TIMEOUT OUT.json [checks]`` (one submission)."""
    nb_path, key, seed, timeout, out = args[:5]
    assignment = next(a for a in all_assignments() if a.key == key)
    try:
        nb = nbformat.read(nb_path, as_version=4)
    except Exception as exc:   # any unreadable file is one graded line, not a crash of the grader
        result = {"status": "unreadable", "reason": f"not a readable notebook ({type(exc).__name__}: "
                                                    f"{str(exc).splitlines()[0][:120] if str(exc) else ''})"}
    else:
        with tempfile.TemporaryDirectory(prefix="course-grade-") as work:
            result = run_notebook(nb, assignment, int(seed), float(timeout), Path(work), args[5:] == ["checks"])
    Path(out).write_text(json.dumps(result), encoding="utf-8")
    return 0


def max_points(assignment: Assignment) -> dict[str, float]:
    """Points of every question: the sum of its test cases' points (public and hidden)."""
    from otter.test_files.exception_test import ExceptionTestFile
    out = {}
    for q, sources in assignment.grading_tests().items():
        out[q] = float(sum(tc.points or 0 for src in sources
                           for tc in ExceptionTestFile.from_string(src, path=f"{q}.py").test_cases))
    return out


def outcome_from(raw: dict, student: str, assignment: Assignment, seed: int, maxima: dict[str, float],
                 seconds: float) -> Outcome:
    out = Outcome(student, assignment.key, seed, max_points=maxima, seconds=round(seconds, 1))
    out.points = {q: 0.0 for q in maxima}
    if "results" not in raw:
        out.status = raw.get("status", "tampered" if raw.get("tampered") else "crashed")
        out.reason = raw.get("reason") or f"the notebook changed the grader ({raw.get('tampered')}): no points"
        return out
    out.cell_errors = raw.get("cell_errors", [])
    out.cases = raw["results"]
    if raw.get("tampered"):
        out.status = "tampered"
        out.reason = f"the notebook replaced functions the tests use ({raw['tampered']}): no points"
        return out
    read_hidden = bool(raw.get("read_hidden"))
    if read_hidden:
        out.reason = f"the notebook read the hidden tests from disk ({raw['read_hidden'][0]}): no points for them"
    for q, cases in out.cases.items():
        out.points[q] = float(sum(c["points"] for c in cases if c["passed"] and not (read_hidden and c["hidden"])))
    return out


def grade_one(nb_path: Path, student: str, assignment: Assignment, seed: int, timeout: float,
              maxima: dict[str, float], run_checks: bool = False) -> Outcome:
    """Grade one notebook in a worker process (its kernel is its child), killed after ``timeout`` + 60 s."""
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="course-worker-") as tmp:
        out = Path(tmp) / "result.json"
        proc = subprocess.Popen([sys.executable, "-m", "course.grading", str(Path(nb_path).resolve()), assignment.key,
                                 str(seed), str(timeout), str(out)] + (["checks"] if run_checks else []),
                                cwd=str(REPO_ROOT), env=grading_env(),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, err = proc.communicate(timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raw = {"status": "timeout", "reason": f"the notebook did not finish within {timeout:.0f} s"}
        else:
            if out.is_file():
                raw = json.loads(out.read_text(encoding="utf-8"))
            else:
                last = (err or b"").decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
                raw = {"status": "crashed", "reason": f"the grader's worker failed: {last[0][:200]}"}
    return outcome_from(raw, student, assignment, seed, maxima, time.monotonic() - t0)


def grade_many(jobs: list[tuple[Path, str, Assignment, int]], timeout: float, n_jobs: int = 2,
               run_checks: set[int] = frozenset()) -> list[Outcome]:
    """Grade ``(notebook, student, assignment, seed)`` jobs, ``n_jobs`` at a time, in the given order
    (the jobs whose index is in ``run_checks`` also run their ``grader.check`` cells)."""
    maxima = {a.key: max_points(a) for a in {j[2].key: j[2] for j in jobs}.values()}
    with ThreadPoolExecutor(max_workers=max(1, n_jobs)) as pool:
        futures = [pool.submit(grade_one, nb, st, a, seed, timeout, maxima[a.key], k in run_checks)
                   for k, (nb, st, a, seed) in enumerate(jobs)]
        return [f.result() for f in futures]


def outcome_dict(o: Outcome) -> dict:
    d = asdict(o)
    d["total"] = o.total
    return d


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1:]))
