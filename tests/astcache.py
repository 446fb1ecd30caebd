"""imagesmith's syntax trees, parsed once per process for the guards that read them (issue 31).

A dozen guards (test_no_message_branching, test_settings, test_error_fields, test_http_policy, …) each read
every module of ``imagesmith/``; parsing the package takes ~1.2 s of CPU, so the suite parsed it ~16 times.
:func:`parse` keeps one tree per source *text*: a file that changed (or a snippet, or a module as an older
commit had it) is a text of its own and is parsed anew, so no guard ever reads a stale tree.

The trees are shared: a guard reads them (``ast.walk``, a ``NodeVisitor``) and never changes a node.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.repo import REPO

PACKAGE = REPO / "imagesmith"

_TREES: dict[str, ast.Module] = {}


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, once per distinct *source* in this process (*filename* names the
    file in a SyntaxError; it does not change the tree)."""
    tree = _TREES.get(source)
    if tree is None:
        tree = _TREES[source] = ast.parse(source, filename)
    return tree


def package_files() -> list[Path]:
    """Every module of ``imagesmith/``, sorted."""
    return sorted(PACKAGE.rglob("*.py"))


def package_trees() -> dict[Path, ast.Module]:
    """Every module of ``imagesmith/`` (read now, so an edited file is parsed again) → its syntax tree."""
    return {path: parse(path.read_text(encoding="utf-8"), str(path)) for path in package_files()}
