"""No code in imagesmith/ decides on the text of an error (issue 24): errors carry fields (errors.py:
``registry``, ``side``, ``fault``, ``transient``, ``problem``, ``field``, ``said`` …) and control flow reads
those; the text is rendered once, at the edge (``cli.main``).

The guard reads every module's syntax tree. *Error text* is ``X.message`` (any X), pytest's rendering of
a failure (``X.longrepr``, ``X.longreprtext``), and ``str(e)`` / ``repr(e)`` / ``format(e)`` / ``e.text`` /
an f-string of ``e`` where ``e`` is an error: a name bound by ``except … as e`` or a parameter annotated with
an ``…Error`` / ``…Exception`` type; a local variable assigned from error text is error text too. It is a
finding when error text

- is looked into: compared (``==``, ``in``, …), or the receiver or argument of ``startswith``, ``endswith``,
  ``split``, ``rsplit``, ``partition``, ``rpartition``, ``find``, ``index``, ``count``, ``removeprefix``,
  ``removesuffix``, or an argument of ``re.search`` / ``match`` / ``fullmatch`` / ``findall`` / ``sub`` /
  ``split`` / ``finditer``;
- or appears inside a condition (``if``, ``while``, a conditional expression's test, a comprehension's
  ``if``, ``assert``) other than as a bare truth value (``if exc.message:`` asks whether there is one).

``exc.said`` is not error text: it is a program's or service's own words (the engine's, a registry's),
kept verbatim as a field, which is the only thing those parties give (docker's API answers in prose).
"""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from tests.repo import REPO

TEXT_ATTRS = frozenset({"message", "longrepr", "longreprtext"})
ERROR_TEXT_ATTRS = frozenset({"text"})
LOOKS_INTO = frozenset(
    {
        "startswith",
        "endswith",
        "split",
        "rsplit",
        "partition",
        "rpartition",
        "find",
        "index",
        "count",
        "removeprefix",
        "removesuffix",
    }
)
REGEX = frozenset({"search", "match", "fullmatch", "findall", "sub", "split", "finditer"})

#: (module, function): decisions on text that is not an error's, with the reason
ALLOWED = {
    # reports of schema 1 and 2 (no ``skip`` field): their no-GPU skips are known by the fixed words those
    # versions wrote first ("no GPU visible: …", report data, not an error); schema 3 reads the field
    ("imagesmith/validate/report.py", "outcomes_of"),
}


def _is_error_type(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return any(part.strip().endswith(("Error", "Exception")) for part in text.replace("|", ",").split(","))


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[str] = []
        self.scopes: list[tuple[str, set[str], set[str]]] = [("<module>", set(), set())]

    # -- scopes ---------------------------------------------------------------------------------------------
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        errors = {
            a.arg
            for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            if _is_error_type(a.annotation)
        }
        self.scopes.append((node.name, errors, set()))
        # two passes: names bound later in the body (a loop) are known when a condition reads them
        for _ in range(2):
            self._bind(node)
        self.generic_visit(node)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    @property
    def errors(self) -> set[str]:
        return self.scopes[-1][1]

    @property
    def tainted(self) -> set[str]:
        return self.scopes[-1][2]

    def _bind(self, fn: ast.AST) -> None:
        for node in ast.walk(fn):
            if isinstance(node, ast.ExceptHandler) and node.name:
                self.errors.add(node.name)
            targets: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        targets += list(zip(target.elts, node.value.elts, strict=False))
                    else:
                        targets.append((target, node.value))
            elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value is not None:
                targets.append((node.target, node.value))
            for target, value in targets:
                if isinstance(target, ast.Name) and self._text_valued(value):
                    self.tainted.add(target.id)

    def _text_valued(self, node: ast.AST) -> bool:
        """*node*'s value is error text or made of it (``.lower()``, a slice, ``+``, ``or``, an f-string);
        what a function computes from error text is not followed (its argument is checked where it is
        decided on)."""
        if self._is_text(node):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return self._text_valued(node.func.value)
        if isinstance(node, ast.Subscript):
            return self._text_valued(node.value)
        if isinstance(node, ast.BinOp):
            return self._text_valued(node.left) or self._text_valued(node.right)
        if isinstance(node, ast.BoolOp):
            return any(self._text_valued(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self._text_valued(node.body) or self._text_valued(node.orelse)
        if isinstance(node, ast.JoinedStr):
            return any(isinstance(v, ast.FormattedValue) and self._text_valued(v.value) for v in node.values)
        return False

    # -- what is error text ---------------------------------------------------------------------------------
    def _is_text(self, node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            if node.attr in TEXT_ATTRS:
                return True
            return (
                node.attr in ERROR_TEXT_ATTRS and isinstance(node.value, ast.Name) and self._error(node.value)
            )
        if isinstance(node, ast.Name):
            return node.id in self.tainted
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("str", "repr", "format")
            and node.args
        ):
            return isinstance(node.args[0], ast.Name) and self._error(node.args[0])
        if isinstance(node, ast.JoinedStr):
            return any(
                isinstance(v, ast.FormattedValue) and isinstance(v.value, ast.Name) and self._error(v.value)
                for v in node.values
            )
        return False

    def _error(self, name: ast.Name) -> bool:
        return name.id in self.errors

    def _has_text(self, node: ast.AST) -> bool:
        return any(self._is_text(n) for n in ast.walk(node))

    # -- findings -------------------------------------------------------------------------------------------
    def _find(self, node: ast.AST, why: str) -> None:
        if (self.path, self.scopes[-1][0]) not in ALLOWED:
            self.findings.append(
                f"{self.path}:{getattr(node, 'lineno', '?')}: {why}: {ast.unparse(node)[:120]}"
            )

    def visit_Compare(self, node: ast.Compare) -> None:
        if any(self._has_text(x) for x in [node.left, *node.comparators]):
            self._find(node, "compares error text")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        fn = node.func
        if isinstance(fn, ast.Attribute):
            if fn.attr in LOOKS_INTO and (
                self._has_text(fn.value) or any(self._has_text(a) for a in node.args)
            ):
                self._find(node, f"looks into error text ({fn.attr})")
            elif (
                fn.attr in REGEX
                and isinstance(fn.value, ast.Name)
                and fn.value.id == "re"
                and any(self._has_text(a) for a in node.args)
            ):
                self._find(node, f"matches error text (re.{fn.attr})")
        self.generic_visit(node)

    def _condition(self, test: ast.expr) -> None:
        """Error text anywhere in *test* except as a bare truth value (the test itself, an operand of
        and/or/not)."""
        bare: set[int] = set()
        stack = [test]
        while stack:
            n = stack.pop()
            bare.add(id(n))
            if isinstance(n, ast.BoolOp):
                stack += n.values
            elif isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
                stack.append(n.operand)
        for node in ast.walk(test):
            if id(node) not in bare and self._is_text(node):
                self._find(test, "decides on error text")
                return

    def visit_If(self, node: ast.If) -> None:
        self._condition(node.test)
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        self._condition(node.test)
        self.generic_visit(node)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self._condition(node.test)
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        self._condition(node.test)
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        for test in node.ifs:
            self._condition(test)
        self.generic_visit(node)


def findings(source: str, path: str) -> list[str]:
    finder = _Finder(path)
    tree = ast.parse(source, path)
    finder._bind(tree)
    finder.visit(tree)
    return sorted(set(finder.findings))


def test_no_code_in_imagesmith_decides_on_error_text() -> None:
    found: list[str] = []
    for path in sorted((REPO / "imagesmith").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        found += findings(path.read_text(), rel)
    assert found == []


def _at_7f0dc7b(path: str) -> str:
    """*path* as it was before issue 24 (the commit the issue reads, 7f0dc7b)."""
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), "show", f"7f0dc7b:{path}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:  # a checkout without that history
        pytest.skip(f"git show 7f0dc7b:{path}: {exc}")


@pytest.mark.parametrize(
    ("path", "line"),
    [
        ("imagesmith/registry.py", 1443),  # _sided: exc.message.startswith(("source ", "destination "))
        ("imagesmith/registry.py", 1569),  # _dst_problem: exc.message.split(" is corrupt: ")
        ("imagesmith/pick.py", 1084),  # "unreachable or failing" not in exc.message
        ("imagesmith/pick.py", 1158),  # _refused(exc.message)
        ("imagesmith/attestation.py", 233),  # "layer's" not in exc.message
        ("imagesmith/commands/compat.py", 122),  # "unknown GPU" in exc.message
        ("imagesmith/validate/plugin.py", 49),  # "\nfix: " in report.longreprtext
        ("imagesmith/validate/container.py", 366),  # "rlimit" not in str(exc)
        ("imagesmith/validate/container.py", 450),  # "imagesmith-validate" in str(exc)
        ("imagesmith/validate/facts.py", 144),  # "No devices were found" not in known.message
        ("imagesmith/build.py", 224),  # target.name in exc.message
        ("imagesmith/engine.py", 557),  # _denied(exc.message)
    ],
)
def test_the_guard_finds_what_issue_24_removed(path: str, line: int) -> None:
    """Each decision on error text the code made before issue 24 is a finding of the guard."""
    lines = [f.split(":")[1] for f in findings(_at_7f0dc7b(path), path)]
    assert str(line) in lines, findings(_at_7f0dc7b(path), path)


@pytest.mark.parametrize(
    "snippet",
    [
        "try:\n    f()\nexcept E as exc:\n    if 'x' in exc.message:\n        pass\n",
        "try:\n    f()\nexcept E as exc:\n    text = str(exc)\n    ok = text.startswith('a')\n",
        "def g(exc: RegistryError) -> bool:\n    return exc.message.split(': ')[0] == 'r'\n",
        "try:\n    f()\nexcept E as e:\n    y = 1 if re.search('x', f'{e}') else 2\n",
        "try:\n    f()\nexcept E as exc:\n    bad = [p for p in ps if p in exc.message]\n",
        "try:\n    f()\nexcept E as exc:\n    while exc.text != 'x':\n        pass\n",
    ],
)
def test_the_guard_finds_each_kind_of_decision(snippet: str) -> None:
    assert findings(snippet, "snippet.py") != []


@pytest.mark.parametrize(
    "snippet",
    [
        "try:\n    f()\nexcept E as exc:\n    raise F(f'--index: {exc.message}', hint=exc.hint) from None\n",
        "try:\n    f()\nexcept E as exc:\n    if exc.fault == 'unreachable' and exc.message:\n        pass\n",
        "try:\n    f()\nexcept E as exc:\n    if 'rlimit' in (exc.said or ''):\n        pass\n",
        "def g(exc: RegistryError) -> str:\n    return exc.message.splitlines()[0]\n",
    ],
)
def test_the_guard_lets_fields_and_rendering_pass(snippet: str) -> None:
    assert findings(snippet, "snippet.py") == []


def test_allowed_functions_exist() -> None:
    for path, function in ALLOWED:
        tree = ast.parse(Path(REPO / path).read_text())
        assert any(isinstance(n, ast.FunctionDef) and n.name == function for n in ast.walk(tree)), (
            path,
            function,
        )
