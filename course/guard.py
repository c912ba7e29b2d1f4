"""The two cells the grader adds around a submission: a guard before the student's cells, the tests after.

The guard cell runs before any student code.  It installs a Python audit hook (PEP 578, which the
notebook cannot remove) that records every attempt to open or list a file under the course's master
folder (``course/assignments/``, where the solutions and hidden tests live), and it keeps the objects
the tests rely on (numpy's comparisons, builtins, the toolkit's reference functions, otter's test
runner), so that the grade cell can tell whether the notebook replaced any of them.

The grade cell holds the test sources as string literals: the hidden tests are never on disk while the
submission runs.  It runs them with otter-grader's exception-based test runner against the notebook's
global names plus the grader's seed, and prints the results behind a random marker.
"""
from __future__ import annotations

import json

#: Modules whose functions (and classes' methods) must be unchanged when the tests run.
BASE_WATCH = ("builtins", "math", "json", "numpy", "numpy.testing", "course.checks", "course.worlds", "evaluation",
              "evaluation.ranking", "evaluation.correlation", "otter.test_files.exception_test",
              "otter.test_files.abstract_test")

_GUARD = r'''
def __course_guard(protected, watch):
    import importlib, os, sys, types
    events = []
    roots = tuple(os.path.realpath(p) + os.sep for p in protected)
    def audit(event, args):
        if event not in ("open", "os.listdir", "os.scandir", "glob.glob", "os.stat") or not args:
            return
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            try:
                full = os.path.realpath(os.fsdecode(path)) + os.sep
            except Exception:
                return
            if full.startswith(roots):
                events.append(f"{event} {full.rstrip(os.sep)}")
    def snapshot(mods):
        out = {}
        for name in mods:
            mod = importlib.import_module(name)
            for attr, obj in list(vars(mod).items()):
                # ipykernel replaces builtins.input per request (and the site helpers are not used by tests)
                if callable(obj) and not (name == "builtins" and attr in ("input", "help", "exit", "quit")):
                    out[f"{name}.{attr}"] = obj
                    if isinstance(obj, type) and obj.__module__ == name:
                        for m, f in list(vars(obj).items()):
                            if callable(f):
                                out[f"{name}.{attr}.{m}"] = f
        return out
    watched = snapshot(watch)
    sys.addaudithook(audit)
    sys.modules["__course_guard__"] = types.SimpleNamespace(events=events, watched=watched, snapshot=snapshot)
__course_guard(%(protected)r, %(watch)r)
del __course_guard
'''

_GRADE = r'''
def __course_grade(tests, seed, marker, watch):
    import json, sys
    guard = sys.modules.get("__course_guard__")
    if guard is None:
        print(marker + json.dumps({"tampered": "the grader's guard was removed"}))
        return
    now = guard.snapshot(watch)
    changed = sorted(k for k, f in guard.watched.items() if now.get(k) is not f)
    from otter.test_files.exception_test import ExceptionTestFile
    env = dict(globals())
    env["GRADER_SEED"] = seed
    results = {}
    for q, sources in tests.items():
        cases = []
        for k, src in enumerate(sources):
            try:
                tf = ExceptionTestFile.from_string(src, path=f"{q}.py")
                tf.run(env)
            except Exception as exc:
                cases.append({"name": f"{q} ({k})", "hidden": k > 0, "points": 0, "passed": False,
                              "message": f"test file error: {type(exc).__name__}: {exc}"})
                continue
            for r in tf.test_case_results:
                func = getattr(r.test_case.body, "test_func", None)
                cases.append({"name": getattr(func, "__name__", r.test_case.name), "hidden": bool(r.test_case.hidden),
                              "points": float(r.test_case.points or 0), "passed": bool(r.passed),
                              "message": r.message})
        results[q] = cases
    print(marker + json.dumps({"results": results, "read_hidden": list(guard.events[:5]),
                               "tampered": ", ".join(changed[:5])}))
__course_grade(%(tests)r, %(seed)d, %(marker)r, %(watch)r)
'''


def guard_source(protected: list[str], watch: tuple[str, ...]) -> str:
    return _GUARD % {"protected": list(protected), "watch": list(watch)}


def grade_source(tests: dict[str, list[str]], seed: int, marker: str, watch: tuple[str, ...]) -> str:
    return _GRADE % {"tests": tests, "seed": int(seed), "marker": marker, "watch": list(watch)}


def parse_grade_output(text: str, marker: str) -> dict | None:
    for line in text.splitlines()[::-1]:
        if line.startswith(marker):
            return json.loads(line[len(marker):])
    return None
