"""Issue 31: no module of imagesmith/ over 1,000 lines, no function over 120 lines or of cyclomatic
complexity over 25 (McCabe's, as the ``mccabe`` package counts it: a closure counts in its function). What was
over on the day the ratchet came is listed below with its figures then; an entry may only shrink, and one that
is back within the limits must leave the list (the ratchet then holds it there)."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import mccabe  # type: ignore[import-untyped]

from tests import astcache
from tests.repo import REPO

MAX_MODULE_LINES = 1000
MAX_FUNCTION_LINES = 120
MAX_COMPLEXITY = 25
LIMITS = (MAX_FUNCTION_LINES, MAX_COMPLEXITY)

#: modules over MAX_MODULE_LINES: their lines (2026-12-02, issue 31; with the branches merged that day)
MODULES: dict[str, int] = {}

#: functions over a limit: (module, function) → (lines, complexity) (2026-12-02, issue 31)
FUNCTIONS: dict[tuple[str, str], tuple[int, int]] = {}


def measure(path: Path) -> tuple[int, dict[tuple[str, int], tuple[int, int]]]:
    """(the lines of *path*, its functions: (name, line) → (lines, complexity))."""
    text = path.read_text(encoding="utf-8")
    tree = astcache.parse(text, str(path))
    visitor = mccabe.PathGraphingAstVisitor()
    visitor.preorder(tree, visitor)
    complexity = {graph.lineno: graph.complexity() for graph in visitor.graphs.values()}
    functions = {
        (node.name, node.lineno): (node.end_lineno - node.lineno + 1, complexity.get(node.lineno, 1))  # type: ignore[operator]
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    return len(text.splitlines()), functions


@cache
def figures() -> tuple[dict[str, int], dict[tuple[str, str], tuple[int, int]]]:
    """Every module's lines, and the figures of each function over a limit (the largest of a name)."""
    modules: dict[str, int] = {}
    over: dict[tuple[str, str], tuple[int, int]] = {}
    for path in sorted((REPO / "imagesmith").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        modules[rel], functions = measure(path)
        for (name, _), (lines, cc) in functions.items():
            if lines > MAX_FUNCTION_LINES or cc > MAX_COMPLEXITY:
                old = over.get((rel, name), (0, 0))
                over[rel, name] = (max(old[0], lines), max(old[1], cc))
    return modules, over


def test_no_module_grows_past_the_limit_or_its_listed_figure() -> None:
    modules, _ = figures()
    grew = {
        m: f"{n} lines (limit {MODULES.get(m, MAX_MODULE_LINES)})"
        for m, n in modules.items()
        if n > MODULES.get(m, MAX_MODULE_LINES)
    }
    assert grew == {}, "split the module (docs/architecture.md), don't raise its figure"


def test_no_function_grows_past_the_limits_or_its_listed_figures() -> None:
    _, over = figures()
    grew = {
        key: f"{lines} lines, complexity {cc} (allowed {FUNCTIONS.get(key, LIMITS)})"
        for key, (lines, cc) in over.items()
        if lines > max(MAX_FUNCTION_LINES, FUNCTIONS.get(key, (0, 0))[0])
        or cc > max(MAX_COMPLEXITY, FUNCTIONS.get(key, (0, 0))[1])
    }
    assert grew == {}, "split the function into named steps, don't raise its figures"


def test_an_exception_back_within_the_limits_leaves_the_list() -> None:
    modules, over = figures()
    stale = [m for m, n in MODULES.items() if modules.get(m, 0) <= MAX_MODULE_LINES]
    stale += [f"{m}:{f}" for m, f in FUNCTIONS if (m, f) not in over]
    assert stale == [], "remove these from the lists: the ratchet holds them within the limits now"


def test_release_has_no_exception() -> None:
    """The release package is the ratchet's own work (issue 31: release.py was 2,171 lines, release_cell 316
    lines of complexity 79): none of it may come back onto the lists."""
    listed = [m for m in MODULES if m.startswith("imagesmith/release")]
    listed += [f"{m}:{f}" for m, f in FUNCTIONS if m.startswith("imagesmith/release")]
    assert listed == []
    _, over = figures()
    assert [key for key in over if key[0].startswith("imagesmith/release")] == []


def test_the_measure_sees_a_long_and_a_branchy_function(tmp_path: Path) -> None:
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(30))
    (tmp_path / "m.py").write_text("def long():\n" + "    x = 1\n" * 130 + "\n\ndef branchy(x):\n" + branches)
    lines, functions = measure(tmp_path / "m.py")
    assert functions[("long", 1)] == (131, 1)
    assert functions[("branchy", 134)] == (61, 31)
    assert lines == 194
