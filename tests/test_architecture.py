"""The layer contract of docs/architecture.md, checked on the source tree.

* import-linter's contracts in ``.importlinter`` (corpora → kernels → kcca | neural → evaluation →
  experiments: a layer imports only the layers below it);
* no import cycle between the project's modules (package ``__init__`` files included);
* no module imports another module's private (``_name``) helpers.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("corpora", "kernels", "kcca", "neural", "evaluation", "experiments")

grimp = pytest.importorskip("grimp", reason="import-linter (the test extra) is not installed")


def _graph():
    return grimp.build_graph(*PACKAGES, cache_dir=None)


def test_import_linter_contracts_are_kept():
    # in a child process: import-linter reconfigures logging, which would hide later tests' log records
    code = ("import sys; from importlinter.cli import lint_imports; "
            f"sys.exit(lint_imports(config_filename={str(ROOT / '.importlinter')!r}, no_cache=True, no_logo=True))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def test_no_import_cycle_between_project_modules():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles: " + "; ".join(" ↔ ".join(c) for c in cycles)


def test_cycle_finder_finds_a_planted_cycle():
    g = grimp.ImportGraph()
    for a, b in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"), ("p.c", "p.d")):
        g.add_import(importer=a, imported=b)
    assert _cycles(g) == [["p.a", "p.b", "p.c"]]


def private_imports(paths) -> list[str]:
    """``file:line: from M import _name`` for every import of a private name of a project module."""
    found = []
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} "
                                     f"import {alias.name}")
    return found


def test_no_module_imports_another_modules_private_names():
    files = [p for pkg in (*PACKAGES, "benchmarks") for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert files
    assert private_imports(files) == []


def test_private_import_scan_sees_one(tmp_path):
    probe = ROOT / "corpora" / "_probe_private_import.py"
    try:
        probe.write_text("from corpora.base import _something\n", encoding="utf-8")
        assert private_imports([probe]) == ["corpora/_probe_private_import.py:1: from corpora.base import _something"]
    finally:
        probe.unlink()


def size_findings(paths, *, max_function: int = 85, max_module: int = 600) -> list[str]:
    """Functions longer than ``max_function`` lines, and modules longer than ``max_module`` lines whose
    first line does not give the reason (``# Size (...): why``)."""
    found = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > max_module and not text.startswith("# Size"):
            found.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines without a '# Size' reason")
        for node in ast.walk(ast.parse(text, filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > max_function:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name} is {n} lines")
    return found


def test_functions_are_short_and_long_modules_say_why():
    files = [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
    assert size_findings(files) == []


def test_size_scan_sees_a_long_function_and_an_unexplained_long_module(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    long_fn = tmp_path / "a.py"
    long_fn.write_text("def f():\n" + "    x = 1\n" * 90, encoding="utf-8")
    long_mod = tmp_path / "b.py"
    long_mod.write_text("x = 1\n" * 601, encoding="utf-8")
    found = size_findings([long_fn, long_mod])
    assert found == ["a.py:1: f is 91 lines", "b.py: 601 lines without a '# Size' reason"]
    long_mod.write_text("# Size (~600 lines): one reason.\n" + "x = 1\n" * 601, encoding="utf-8")
    assert size_findings([long_mod]) == []


def test_no_toolkit_package_imports_the_course_kit():
    # course/ is material above the toolkit (not an installed package: import-linter finds it on
    # sys.path from the repository root); the forbidden contract in .importlinter states it, and this
    # checks the same on the graph so that a contract edited away is noticed too.
    config = (ROOT / ".importlinter").read_text(encoding="utf-8")
    assert "[importlinter:contract:course]" in config and "forbidden_modules =\n    course" in config
    graph = grimp.build_graph(*PACKAGES, "course", cache_dir=None)
    importers = {m for course_module in graph.find_children("course") | {"course"}
                 for m in graph.find_modules_that_directly_import(course_module)}
    assert not {m for m in importers if m.split(".")[0] in PACKAGES}
