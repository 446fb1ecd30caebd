"""Function-local imports in ``imagesmith/``, before and after (issue 31: "function-local imports only where
start-up time needs them"): an AST count of the ``import`` / ``from … import`` statements inside a function
(a nested function's counted once), for each git ref given, with the modules that hold the most.

usage: .venv/bin/python scripts/count_local_imports.py [--top 10] [REF ...]   (default: main HEAD)
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sources(ref: str) -> dict[str, str]:
    """The text of each ``imagesmith/**.py`` at *ref*."""
    names = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "-r", "--name-only", ref, "imagesmith/"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    show = ["git", "-C", str(REPO), "show"]
    return {
        n: subprocess.run([*show, f"{ref}:{n}"], capture_output=True, text=True, check=True).stdout
        for n in names
        if n.endswith(".py")
    }


def local_imports(text: str) -> int:
    found: set[int] = set()
    for fn in ast.walk(ast.parse(text)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found |= {id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))}
    return len(found)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("refs", nargs="*", default=["main", "HEAD"])
    ap.add_argument("--top", type=int, default=10)
    a = ap.parse_args()
    for ref in a.refs:
        per = Counter({name: local_imports(text) for name, text in sources(ref).items()})
        top = ", ".join(f"{n.removeprefix('imagesmith/')} {c}" for n, c in per.most_common(a.top))
        holding = sum(1 for c in per.values() if c)
        print(f"{ref}: {sum(per.values())} function-local imports in {holding} modules")
        print(f"  most: {top}")


if __name__ == "__main__":
    main()
