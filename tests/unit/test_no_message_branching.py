"""No code in imagesmith/ decides on the text of an error (issue 24): errors carry fields (errors.py:
``registry``, ``side``, ``fault``, ``transient``, ``problem``, ``field``, ``said`` …) and control flow reads
those; the text is rendered once, at the edge (``cli.main``).

The guard reads every module's syntax tree. *Error text* is ``X.message`` and ``X.hint`` (any X: the fix line
is text too), pytest's rendering of a failure (``X.longrepr``, ``X.longreprtext``), and ``str(e)`` /
``repr(e)`` / ``format(e)`` / ``e.render()`` / ``e.text`` / an f-string of ``e`` where ``e`` is an error: a
name bound by ``except … as e`` or a parameter annotated with an ``…Error`` / ``…Exception`` type; a local
variable assigned from error text is error text too, and so is the call of a function of the same module that
returns error text (``return exc.message``: its caller would dissect the words). Also error text: ``e.args``
(the message it was raised with), ``str(e.__cause__)``, ``"{}".format(e)``, ``"%s" % e``, ``e.__str__()``,
``getattr(e, "message")``, ``traceback.format_exc()``, ``str(sys.exc_info()[1])``, and an attribute that some
module assigns error text to (``outcome.error = str(exc)``); an error is also a name annotated with an error
type, a new one (``err = RegistryError(…)``), an element of a collection of errors (a parameter annotated
``list[RegistryError]``, an exception group's ``exceptions``).
It is a finding when error text

- is looked into: compared (``==``, ``in``, …), or the receiver or argument of ``startswith``, ``endswith``,
  ``split``, ``rsplit``, ``partition``, ``rpartition``, ``find``, ``index``, ``count``, ``removeprefix``,
  ``removesuffix``, or an argument of ``re.search`` / ``match`` / ``fullmatch`` / ``findall`` / ``sub`` /
  ``split`` / ``finditer``;
- or appears inside a condition (``if``, ``while``, a conditional expression's test, a comprehension's
  ``if``, ``assert``) other than as a bare truth value (``if exc.message:`` asks whether there is one; so
  does ``x is None``) or as the owner of a data attribute (``result.rc``);
- or is the subject of a ``match``, a key looked up (``HINTS[exc.message]``, ``HINTS.get(…)``), an argument
  of a compiled pattern's ``search``/``match``/… or of ``fnmatch``, ``__contains__``'s receiver;
- or is handed to a module-level function that decides on that parameter's text (``_denied(exc.message)``
  where ``def _denied(t): return "denied" in t``), of the same module or imported by name from another:
  such functions are found by taking each of their ``str`` parameters for error text in turn.

imagesmith's own prose is read back the same way when it is not an error: a cell's ``reasons``, a
release's ``steps``, a verdict's ``notes`` or ``blockers``, a ``why`` (:data:`PROSE`; a name bound to an
element of one, ``for r in v.reasons``, is prose too). It is a finding when prose is the receiver of one of
the methods above (with an argument: ``why.split()`` only folds whitespace), an argument of ``re.…``, or
compared with words written in the code (``"needs driver" in r``, ``step == "tag"``). What decides is a
field beside the words (``Verdict.notes``, ``CellResult.tag_moves``, a cause).

``exc.said`` is not error text: it is a program's or service's own words (the engine's, a registry's),
kept verbatim as a field, which is the only thing those parties give (docker's API answers in prose).
"""

from __future__ import annotations

import ast
import re
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests import astcache
from tests.repo import REPO

TEXT_ATTRS = frozenset({"message", "hint", "longrepr", "longreprtext"})
#: text only of an error (``exc.text``; ``exc.args[0]``: the message it was raised with)
ERROR_TEXT_ATTRS = frozenset({"text", "args"})
#: an error's own cause is an error too (``str(exc.__cause__)``)
ERROR_ATTRS = frozenset({"__cause__", "__context__"})
#: ``traceback``'s renderings of the error being handled
TRACEBACK_TEXT = frozenset({"format_exc", "format_exception", "format_exception_only"})
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
        "__contains__",
    }
)
REGEX = frozenset({"search", "match", "fullmatch", "findall", "sub", "split", "finditer"})
#: a compiled pattern's methods (``PATTERN.search(exc.message)``), and fnmatch's
PATTERN = frozenset({"search", "match", "fullmatch", "findall", "finditer", "fnmatch", "fnmatchcase"})
#: a mapping looked up by error text (``HINTS.get(exc.message)``: a table keyed on the words)
LOOKUP = frozenset({"get", "pop", "setdefault"})
#: names of imagesmith's own prose: why a cell was refused, what a step did, a verdict's reasons and notes —
#: text for a person, built from parts the code had as data; deciding on it reads the words back
#: (a field with a fixed set of values, e.g. ``PromotionError.step``, is data: not listed)
PROSE = frozenset({"reason", "reasons", "why", "what", "steps", "notes", "warnings", "blockers"})

#: (module, function): decisions on text that is not an error's, with the reason
ALLOWED = {
    # reports of schema 1 and 2 (no ``skip`` field): their no-GPU skips are known by the fixed words those
    # versions wrote first ("no GPU visible: …", report data, not an error); schema 3 reads the field
    ("imagesmith/validate/report.py", "outcomes_of"),
    # the terminal's escaping of a message about to be printed: it looks at character classes (a control
    # character is written as its escape), never at words, and every message goes through it alike
    ("imagesmith/cli.py", "shown_plain"),
}


def _parse(source: str, path: str) -> ast.Module:
    return astcache.parse(source, path)


def _walk(node: ast.AST) -> list[ast.AST]:
    """``ast.walk(node)`` as a list, kept on the node (the guard walks each function several times)."""
    walked: list[ast.AST] | None = getattr(node, "_walked", None)
    if walked is None:
        walked = list(ast.walk(node))
        node._walked = walked  # type: ignore[attr-defined]
    return walked


#: the nodes :meth:`_Finder._bind` reads (it binds names from nothing else)
_BINDING = (
    ast.ExceptHandler,
    ast.Assign,
    ast.AnnAssign,
    ast.AugAssign,
    ast.NamedExpr,
    ast.For,
    ast.AsyncFor,
    ast.comprehension,
)


def _binding(node: ast.AST) -> list[ast.AST]:
    """The nodes of ``_walk(node)`` that bind a name (:data:`_BINDING`), in the same order, kept on the node:
    ``_bind`` runs twice per function and again for each function around it, and ~9 of 10 nodes bind
    nothing (the guard took ~8 s of CPU isinstance-testing them; issue 31)."""
    found: list[ast.AST] | None = getattr(node, "_binding", None)
    if found is None:
        found = [n for n in _walk(node) if isinstance(n, _BINDING)]
        node._binding = found  # type: ignore[attr-defined]
    return found


def _is_error_type(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation)
    return any(part.strip().endswith(("Error", "Exception")) for part in text.replace("|", ",").split(","))


_ERROR_NAME = re.compile(r"\b\w*(Error|Exception)\b")


def _holds_errors(annotation: ast.expr | None) -> bool:
    """``list[RegistryError]``, ``Sequence[tuple[str, ImagesmithError]]``: a collection of errors (its
    elements, in a loop, are errors)."""
    return (
        annotation is not None
        and not _is_error_type(annotation)
        and bool(_ERROR_NAME.search(ast.unparse(annotation)))
    )


def _constructs_error(node: ast.AST) -> bool:
    """``RegistryError(…)``, ``errors.ConfigError(…)``: a new error."""
    if not isinstance(node, ast.Call):
        return False
    fn = node.func
    name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
    return name.endswith(("Error", "Exception"))


class _Finder(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[str] = []
        self.scopes: list[tuple[str, set[str], set[str]]] = [("<module>", set(), set())]
        #: functions of this module that return error text (``return exc.message``): their calls are text
        self.text_functions: set[str] = set()
        #: names bound to our own prose (an element of ``reasons``, ``for step in steps``)
        self.prose: list[set[str]] = [set()]
        #: attributes assigned error text somewhere (``outcome.error = str(exc)``): reading one is error text
        self.text_attrs: set[str] = set()
        #: functions that decide on a parameter's text (``def _denied(t): return "denied" in t``): name →
        #: the positions (not counting ``self``) and names of those parameters; error text passed there is
        #: decided on
        self.deciders: dict[str, set[int | str]] = {}
        #: names bound to a collection of errors (a parameter annotated ``list[RegistryError]``)
        self.collections: list[set[str]] = [set()]
        #: parameter names to treat as error text in the next function visited (finding deciders)
        self.seed: set[str] = set()

    # -- scopes ---------------------------------------------------------------------------------------------
    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        errors = {
            a.arg
            for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            if _is_error_type(a.annotation)
        }
        self.scopes.append((node.name, errors, set(self.seed)))
        self.seed = set()
        self.prose.append(set())
        self.collections.append(
            {
                a.arg
                for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                if _holds_errors(a.annotation)
            }
        )
        # two passes: names bound later in the body (a loop) are known when a condition reads them
        for _ in range(2):
            self._bind(node)
        for ret in _walk(node):
            if isinstance(ret, ast.Return) and ret.value is not None and self._text_valued(ret.value):
                self.text_functions.add(node.name)
        self.generic_visit(node)
        self.collections.pop()
        self.prose.pop()
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
        for node in _binding(fn):
            if isinstance(node, ast.ExceptHandler) and node.name:
                self.errors.add(node.name)
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                if _is_error_type(node.annotation):
                    self.errors.add(node.target.id)
                elif _holds_errors(node.annotation):
                    self.collections[-1].add(node.target.id)
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
                value = node.value
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name) and self._error(value):
                        self.errors.add(target.id)  # err = RegistryError(…); e = exc.__cause__
                    if isinstance(target, ast.Attribute) and self._text_valued(value):
                        self.text_attrs.add(target.attr)  # outcome.error = str(exc)
            if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension) and self._errors_in(node.iter):
                for name in ast.walk(node.target):
                    if isinstance(name, ast.Name):
                        self.errors.add(name.id)  # for e in errors / for e in group.exceptions
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
                names = target.elts if isinstance(target, ast.Tuple) else [target]  # line, fix = e.render()
                for name in names:
                    if isinstance(name, ast.Name) and self._text_valued(value):
                        self.tainted.add(name.id)
            loops: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                loops.append((node.target, node.iter))
            for target, value in [*targets, *loops]:
                if isinstance(target, ast.Name) and self._is_prose(value):
                    self.prose[-1].add(target.id)

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
            if node.attr in TEXT_ATTRS or node.attr in self.text_attrs:
                return True
            return node.attr in ERROR_TEXT_ATTRS and self._error(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            fn = node.func
            if fn.attr in ("__str__", "__repr__", "__format__") and self._error(fn.value):
                return True  # exc.__str__()
            if fn.attr == "format" and isinstance(fn.value, ast.Constant):
                return any(self._error(a) for a in [*node.args, *(k.value for k in node.keywords)])
            if fn.attr in TRACEBACK_TEXT and isinstance(fn.value, ast.Name) and fn.value.id == "traceback":
                return True
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Mod)
            and isinstance(node.left, ast.Constant)
        ):
            parts = node.right.elts if isinstance(node.right, ast.Tuple) else [node.right]
            return any(self._error(p) for p in parts)  # "%s" % exc
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
        ):
            attr = node.args[1].value
            return attr in TEXT_ATTRS or (attr in ERROR_TEXT_ATTRS and self._error(node.args[0]))
        if isinstance(node, ast.Name):
            return node.id in self.tainted
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "render"
            and self._error(node.func.value)
        ):
            return True  # exc.render(): the (error line, fix line) the edge prints
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in self.text_functions
        ):
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("str", "repr", "format")
            and node.args
        ):
            return self._error(node.args[0])
        if isinstance(node, ast.JoinedStr):
            return any(isinstance(v, ast.FormattedValue) and self._error(v.value) for v in node.values)
        return False

    def _error(self, node: ast.AST) -> bool:
        """*node* is an error: a name bound to one, its ``__cause__``/``__context__``, ``sys.exc_info()[1]``,
        a new one (``RegistryError(…)``)."""
        if isinstance(node, ast.Name):
            return node.id in self.errors
        if isinstance(node, ast.Attribute) and node.attr in ERROR_ATTRS:
            return self._error(node.value)
        if (
            isinstance(node, ast.Subscript)
            and isinstance(node.value, ast.Call)
            and ast.unparse(node.value.func) in ("sys.exc_info", "exc_info")
        ):
            return True
        return _constructs_error(node)

    def _errors_in(self, node: ast.AST) -> bool:
        """*node* holds errors: a name bound to a collection of them, ``group.exceptions``."""
        if isinstance(node, ast.Name):
            return node.id in self.collections[-1]
        if isinstance(node, ast.Attribute) and node.attr == "exceptions":
            return self._error(node.value)
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("enumerate", "reversed", "sorted", "list", "tuple")
        ):
            return any(self._errors_in(a) for a in node.args)
        return False

    def _is_prose(self, node: ast.AST) -> bool:
        """*node* is imagesmith's own prose (:data:`PROSE`), an element or slice of it, or a name bound to
        one (``for r in v.reasons``)."""
        if isinstance(node, ast.Subscript):
            return self._is_prose(node.value)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            return node.func.attr in ("lower", "casefold", "strip", "lstrip", "rstrip") and self._is_prose(
                node.func.value
            )
        if isinstance(node, ast.Attribute):
            return node.attr in PROSE
        if isinstance(node, ast.Name):
            return node.id in PROSE or node.id in self.prose[-1]
        return False

    def _has_text(self, node: ast.AST) -> bool:
        """Error text anywhere in *node*, except as the owner of a data attribute: ``result.rc`` reads a field
        of the value, not its words (``exc.message.lower()`` — a method of the text — is text)."""
        stack = [node]
        while stack:
            n = stack.pop()
            if self._is_text(n):
                return True
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute):
                stack += [n.func.value, *n.args, *(k.value for k in n.keywords)]
            elif not isinstance(n, ast.Attribute):
                stack += list(ast.iter_child_nodes(n))
        return False

    # -- findings -------------------------------------------------------------------------------------------
    def _find(self, node: ast.AST, why: str) -> None:
        if (self.path, self.scopes[-1][0]) not in ALLOWED:
            self.findings.append(
                f"{self.path}:{getattr(node, 'lineno', '?')}: {why}: {ast.unparse(node)[:120]}"
            )

    def visit_Compare(self, node: ast.Compare) -> None:
        sides = [node.left, *node.comparators]
        if _presence(node):
            pass  # ``problem is None``: whether there is one, as a bare truth value
        elif any(self._has_text(x) for x in sides):
            self._find(node, "compares error text")
        elif any(self._is_prose(x) for x in sides) and any(_literal(x) for x in sides):
            self._find(node, "compares imagesmith's own prose with words")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        fn = node.func
        if isinstance(fn, ast.Attribute):
            if fn.attr in LOOKS_INTO and (
                self._has_text(fn.value) or any(self._has_text(a) for a in node.args)
            ):
                self._find(node, f"looks into error text ({fn.attr})")
            elif fn.attr in LOOKS_INTO and self._is_prose(fn.value) and (node.args or node.keywords):
                # (``" ".join(why.split())`` only folds its whitespace)
                self._find(node, f"looks into imagesmith's own prose ({fn.attr})")
            elif (
                fn.attr in REGEX
                and isinstance(fn.value, ast.Name)
                and fn.value.id == "re"
                and any(self._has_text(a) or self._is_prose(a) for a in node.args)
            ):
                self._find(node, f"matches error text or prose (re.{fn.attr})")
            elif fn.attr in PATTERN and any(self._has_text(a) for a in node.args):
                self._find(node, f"matches error text ({fn.attr})")
            elif (
                fn.attr in LOOKUP
                and node.args
                and self._has_text(node.args[0])
                and not self._has_text(fn.value)
            ):
                self._find(node, f"looks up by error text ({fn.attr})")
        elif isinstance(fn, ast.Name) and fn.id in PATTERN and any(self._has_text(a) for a in node.args):
            self._find(node, f"matches error text ({fn.id})")
        decided = self._decided(node)
        if decided:
            self._find(node, f"passes error text to {decided}, which decides on it")
        self.generic_visit(node)

    def _decided(self, node: ast.Call) -> str | None:
        """The name of the function *node* calls when it passes error text where that function decides on
        its parameter's text (a module-level function, called by its name)."""
        fn = node.func
        name = fn.id if isinstance(fn, ast.Name) else ""
        params = self.deciders.get(name)
        if not params:
            return None
        given: list[ast.AST] = [a for i, a in enumerate(node.args) if i in params]
        given += [k.value for k in node.keywords if k.arg in params]
        return name if any(self._has_text(a) for a in given) else None

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, ast.Load) and self._has_text(node.slice) and not self._has_text(node.value):
            self._find(node, "looks up by error text")
        self.generic_visit(node)

    def visit_Match(self, node: ast.Match) -> None:
        if self._has_text(node.subject):
            self._find(node.subject, "matches on error text (match)")
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
            elif isinstance(n, ast.Compare) and _presence(n):
                stack.append(n.left)
        todo: list[ast.AST] = [test]
        while todo:
            node = todo.pop()
            if id(node) not in bare and self._is_text(node):
                self._find(test, "decides on error text")
                return
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                todo += [node.func.value, *node.args, *(k.value for k in node.keywords)]
            elif not isinstance(node, ast.Attribute):  # ``result.rc``: a field of the value, not its words
                todo += list(ast.iter_child_nodes(node))

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


def _presence(node: ast.Compare) -> bool:
    """``x is None`` / ``x is not None``: asks whether there is one, not what it says."""
    return all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops) and all(
        isinstance(c, ast.Constant) and c.value is None for c in node.comparators
    )


def _literal(node: ast.AST) -> bool:
    """Words written in the code: a non-empty string constant, an f-string, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value != ""
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_literal(e) for e in node.elts)
    return False


@dataclass
class Known:
    """What one module tells the others: its functions that return error text, the attributes it assigns
    error text to, its functions that decide on a parameter's text."""

    text_functions: set[str] = field(default_factory=set)
    text_attrs: set[str] = field(default_factory=set)
    deciders: dict[str, set[int | str]] = field(default_factory=dict)

    def __or__(self, other: Known) -> Known:
        deciders = {k: set(v) for k, v in self.deciders.items()}
        for k, v in other.deciders.items():
            deciders.setdefault(k, set()).update(v)
        return Known(self.text_functions | other.text_functions, self.text_attrs | other.text_attrs, deciders)


def _finder(path: str, known: Known) -> _Finder:
    finder = _Finder(path)
    finder.text_functions = set(known.text_functions)
    finder.text_attrs = set(known.text_attrs)
    finder.deciders = known.deciders
    return finder


def learn(source: str, path: str, elsewhere: Known | None = None) -> Known:
    """What *source* tells other modules (see :class:`Known`), with what *elsewhere* told it."""
    tree = _parse(source, path)
    known = elsewhere or Known()
    first = _finder(path, known)
    first._bind(tree)
    first.visit(tree)
    known = known | Known(first.text_functions, first.text_attrs)
    return known | Known(deciders=_deciders(tree, path, known))


def _decision_names(fn: ast.AST) -> set[str]:
    """Names that appear where a decision could read them (a comparison, a condition, a lookup key, a match
    subject, a call that looks into text): the parameters worth taking for error text."""
    out: set[str] = set()
    for node in _walk(fn):
        parts: list[ast.AST] = []
        if isinstance(node, ast.Compare | ast.Match):
            parts.append(node)
        elif isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
            parts.append(node.test)
        elif isinstance(node, ast.Subscript):
            parts.append(node.slice)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            fn_name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if fn_name in LOOKS_INTO | REGEX | PATTERN | LOOKUP:
                parts.append(node)
        out |= {n.id for part in parts for n in ast.walk(part) if isinstance(n, ast.Name)}
    return out


def _deciders(tree: ast.Module, path: str, known: Known) -> dict[str, set[int | str]]:
    """The module-level functions of *tree* that decide on a parameter's text: the guard finds something in
    the function when that parameter is taken for error text, and nothing without."""
    out: dict[str, set[int | str]] = {}
    for fn in tree.body:
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        seen = _decision_names(fn)
        candidates = [
            (i, a.arg)
            for i, a in enumerate([*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs])
            if a.arg in seen and ast.unparse(a.annotation or ast.Constant("str")) in _TEXTUAL
        ]
        if not candidates:
            continue

        def found(seed: set[str], fn: ast.FunctionDef | ast.AsyncFunctionDef = fn) -> int:
            finder = _finder(path, known)
            finder.seed = seed
            finder.visit(fn)
            return len(finder.findings)

        plain = found(set())
        if found({name for _, name in candidates}) == plain:
            continue
        for index, name in candidates:
            if found({name}) > plain:
                out.setdefault(fn.name, set()).update({index, name})
    return out


#: the annotations of a parameter that may be handed error text
_TEXTUAL = frozenset({"str", "'str'", "str | None", "object", "Any"})


def text_functions(source: str, path: str) -> set[str]:
    """The functions of *source* that return error text (``return exc.message``)."""
    return learn(source, path).text_functions


def findings(source: str, path: str, elsewhere: Collection[str] | Known = ()) -> list[str]:
    """The guard's findings in *source*; *elsewhere*: what other modules told (:func:`learn`; a collection:
    names of their functions that return error text — their calls here are error text too)."""
    tree = _parse(source, path)
    if isinstance(elsewhere, Known):
        known = elsewhere  # learnt from every module, this one too
    else:
        known = learn(source, path, Known(text_functions=set(elsewhere)))
    finder = _finder(path, known)
    finder._bind(tree)
    finder.visit(tree)
    return sorted(set(finder.findings))


def test_no_code_in_imagesmith_decides_on_error_text() -> None:
    sources = {
        str(path.relative_to(REPO)): path.read_text() for path in sorted((REPO / "imagesmith").rglob("*.py"))
    }
    # a function that returns error text, an attribute assigned it, a function that decides on a parameter's
    # text — each used from another module (release._with_fix, …)
    known = Known()
    for rel, text in sources.items():
        known = known | learn(text, rel)
    found: list[str] = []
    for rel, text in sources.items():
        found += findings(text, rel, known)
    assert found == []


#: a snippet's head: an error bound by ``except``
_T = "try:\n    f()\nexcept E as exc:\n"


def _at(commit: str, path: str) -> str:
    """*path* as it was at *commit* (skipped in a checkout without that history)."""
    try:
        return subprocess.run(
            ["git", "-C", str(REPO), "show", f"{commit}:{path}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:  # a checkout without that history
        pytest.skip(f"git show {commit}:{path}: {exc}")


def _at_7f0dc7b(path: str) -> str:
    """*path* as it was before issue 24 (the commit the issue reads, 7f0dc7b)."""
    return _at("7f0dc7b", path)


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
        "try:\n    f()\nexcept E as exc:\n    if 'docker login' in exc.hint:\n        pass\n",
        "try:\n    f()\nexcept E as exc:\n    line, fix = exc.render()\n    ok = line.startswith('r')\n",
    ],
)
def test_the_guard_finds_each_kind_of_decision(snippet: str) -> None:
    assert findings(snippet, "snippet.py") != []


@pytest.mark.parametrize(
    "snippet",
    [
        # the forms the first guard missed (issue 24 re-check, b5): each decides on an error's words
        _T + "    if 'x' in exc.args[0]:\n        pass\n",
        _T + "    ok = exc.args == ('x',)\n",
        _T + "    ok = 'x' in str(exc.__cause__)\n",
        _T + "    ok = 'x' in '{}'.format(exc)\n",
        _T + "    ok = 'x' in '%s' % exc\n",
        _T + "    ok = 'x' in exc.__str__()\n",
        _T + "    ok = 'x' in getattr(exc, 'message', '')\n",
        "import traceback\nok = 'x' in traceback.format_exc()\n",
        "import sys\nok = 'x' in str(sys.exc_info()[1])\n",
        _T + "    match exc.message:\n        case 'x':\n            pass\n",
        _T + "    fix = HINTS[exc.message]\n",
        _T + "    fix = HINTS.get(exc.message)\n",
        _T + "    ok = exc.message.__contains__('x')\n",
        _T + "    ok = PATTERN.search(exc.message)\n",
        _T + "    ok = fnmatch.fnmatch(exc.message, '*x*')\n",
        # a helper that decides on its parameter, handed error text (assigned, returned, not in an ``if``)
        "def _denied(t: str) -> bool:\n    return 'denied' in t\n"
        + _T
        + "    refused = _denied(exc.message)\n",
        "def _denied(t: str) -> bool:\n    return 'denied' in t\n"
        "def g() -> bool:\n    try:\n        f()\n    except E as exc:\n        return _denied(str(exc))\n"
        "    return False\n",
        # errors not bound by ``except``: a collection, a new one, an exception group, a stored rendering
        "def g(errs: list[RegistryError]) -> None:\n    for e in errs:\n        if 'x' in str(e):\n"
        "            pass\n",
        "err = RegistryError('a')\nok = 'x' in err.text\n",
        "try:\n    f()\nexcept* E as eg:\n    ok = any('x' in str(e) for e in eg.exceptions)\n",
        _T + "    outcome.error = str(exc)\nif 'denied' in outcome.error:\n    pass\n",
    ],
)
def test_the_guard_finds_the_forms_it_first_missed(snippet: str) -> None:
    assert findings(snippet, "snippet.py") != []


def test_a_helper_that_decides_is_followed_across_modules() -> None:
    """``from imagesmith.x import _denied``: error text handed to another module's deciding function."""
    helper = "def _denied(t: str) -> bool:\n    return 'denied' in t\n"
    caller = "from imagesmith.x import _denied\n" + _T + "    refused = _denied(exc.message)\n"
    assert findings(caller, "other.py") == []
    assert findings(caller, "other.py", learn(helper, "imagesmith/x.py")) != []


@pytest.mark.parametrize(
    ("commit", "path", "line"),
    [
        # found by the re-check of issue 24 on main (aff70b8), each rewritten to read a field
        ("aff70b8", "imagesmith/scaffold.py", 196),  # all("needs driver >=" in r for r in reasons)
        ("aff70b8", "imagesmith/scaffold.py", 197),  # the driver parsed back: r.rsplit(">=", 1)
        ("aff70b8", "imagesmith/scaffold.py", 204),  # "no kernels for" in r
        ("aff70b8", "imagesmith/pick/ranking.py", 376),  # r.startswith("note:") over a verdict's reasons
        ("aff70b8", "imagesmith/release.py", 1805),  # step.startswith("tag "): did the tag move
        ("aff70b8", "imagesmith/release.py", 634),  # index_problem's returned message .split(": ", 2)
        ("aff70b8", "imagesmith/registry/copy.py", 215),  # problem != "missing": a sentinel in words
        ("aff70b8", "imagesmith/registry/transport.py", 560),  # "manifest" in what: a request's description
        # fixed after the guard was first written, by hand (11d620a, 27381ae): the guard finds them now
        ("11d620a~1", "imagesmith/commands/build.py", 230),  # o.reason.startswith("rebuilt:")
        ("11d620a~1", "imagesmith/release.py", 1616),  # why.startswith("error: ")
        ("27381ae~1", "imagesmith/validate/report.py", 71),  # "left out" in why
    ],
)
def test_the_guard_finds_prose_read_back(commit: str, path: str, line: int) -> None:
    found = findings(_at(commit, path), path)
    assert str(line) in [f.split(":")[1] for f in found], found


@pytest.mark.parametrize(
    "snippet",
    [
        "def g(v: V) -> list[str]:\n    return [r for r in v.reasons if r.startswith('note:')]\n",
        "ok = all('needs driver >=' in r for r in reasons)\n",
        "def g(res: R) -> bool:\n    return any(s.startswith('tag ') for s in res.steps)\n",
        "for why in whys:\n    pass\nif why == 'missing':\n    pass\n",
        "def p() -> str:\n    try:\n        f()\n    except E as exc:\n        return exc.message\n"
        "    return ''\nx = p().split(': ', 2)\n",
        "def p() -> str | None:\n    try:\n        f()\n    except E as exc:\n        return exc.message\n"
        "    return None\nproblem = p()\nif problem is not None and problem != 'missing':\n    pass\n",
        "m = re.search('x', reason)\n",
    ],
)
def test_the_guard_finds_each_kind_of_prose_read_back(snippet: str) -> None:
    assert findings(snippet, "snippet.py") != []


@pytest.mark.parametrize(
    "snippet",
    [
        "warnings += [n for n in v.notes if n not in warnings]\n",
        "text = '; '.join(reasons)\nif reasons:\n    pass\n",
        "step = ' '.join(step.split())\n",
        "def p() -> str | None:\n    try:\n        f()\n    except E as exc:\n        return exc.message\n"
        "    return None\nproblem = p()\nif problem is None:\n    pass\n",
        "try:\n    f()\nexcept PromotionError as exc:\n    if exc.step == 'put':\n        pass\n",
    ],
)
def test_the_guard_lets_prose_be_written_and_joined(snippet: str) -> None:
    assert findings(snippet, "snippet.py") == []


@pytest.mark.parametrize(
    "snippet",
    [
        "try:\n    f()\nexcept E as exc:\n    raise F(f'--index: {exc.message}', hint=exc.hint) from None\n",
        "try:\n    f()\nexcept E as exc:\n    if exc.fault == 'unreachable' and exc.message:\n        pass\n",
        "try:\n    f()\nexcept E as exc:\n    if 'rlimit' in (exc.said or ''):\n        pass\n",
        "def g(exc: RegistryError) -> str:\n    return exc.message.splitlines()[0]\n",
        # a foreign exception's data, not its words (testinfra raises RuntimeError(CommandResult))
        _T + "    result = exc.args[0] if exc.args else None\nif result is not None and result.rc == 0:\n"
        "    pass\n",
        # a helper that decides on a parameter, handed a field
        "def _denied(t: str) -> bool:\n    return 'denied' in t\n"
        + _T
        + "    refused = _denied(exc.said or '')\n",
        # a rendering kept for a person
        _T + "    outcome.error = str(exc)\nprint(outcome.error)\n",
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


def test_a_function_of_another_module_that_returns_error_text_is_followed() -> None:
    """``release._with_fix(exc)`` returns the message and its fix: a caller elsewhere that dissects it is a
    finding (the whole-package test collects such functions from every module first)."""
    snippet = "from imagesmith.release import _with_fix\nwhy = _with_fix(err).split(' (fix: ')[0]\n"
    assert findings(snippet, "other.py") == []
    assert findings(snippet, "other.py", {"_with_fix"}) != []
    assert "_with_fix" in text_functions((REPO / "imagesmith" / "release" / "base.py").read_text(), "base.py")
