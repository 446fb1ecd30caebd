"""Guards of docs/architecture.md's recipes that no other test holds.

"Add a GPU" was re-done by hand on a scratch copy (issue 24): a ``[[gpu]]`` row without ``tdp_w`` or
``form_factor`` passed every other test, because the loader defaults them (no TDP: validation's power check
has nothing to compare against). This test fails on such a row, naming it and the field.
"""

from __future__ import annotations

import sys

from tests.repo import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

GPUS = REPO / "imagesmith" / "data" / "gpus.toml"
#: what the recipe "Add a GPU" says a row holds (docs/architecture.md)
GPU_FIELDS = (
    "key",
    "name",
    "cc",
    "memory_mib",
    "tdp_w",
    "form_factor",
    "segment",
    "family",
    "smi_names",
    "source",
)


def _said_unknown(row: dict[str, object], name: str) -> bool:
    """A board whose TDP no source at hand gives may leave ``tdp_w`` out — only when the row is unverified and
    its source says so (the power check then has no TDP for it; never a guessed figure)."""
    source = str(row.get("source", ""))
    return name == "tdp_w" and row.get("verified") is False and "TDP not read" in source


def test_every_gpu_row_has_the_fields_the_recipe_names() -> None:
    with GPUS.open("rb") as fh:
        rows = tomllib.load(fh)["gpu"]
    problems = [
        f"[[gpu]] {row.get('key', f'row {i}')}: no {name}"
        for i, row in enumerate(rows, 1)
        for name in GPU_FIELDS
        if row.get(name) in (None, "", []) and not _said_unknown(row, name)
    ]
    problems += [
        f"[[gpu]] {row['key']}: tdp_w {row['tdp_w']!r} is not a positive number of watts"
        for row in rows
        if "tdp_w" in row and not (isinstance(row["tdp_w"], int) and row["tdp_w"] > 0)
    ]
    assert not problems, "\n".join(problems)


def test_the_recipe_names_the_fields_this_test_checks() -> None:
    text = (REPO / "docs" / "architecture.md").read_text()
    recipe = text.split("### Add a GPU", 1)[1].split("\n### ", 1)[0]
    missing = [name for name in GPU_FIELDS if f"`{name}`" not in recipe]
    assert not missing, f"docs/architecture.md, Add a GPU: name {missing}"


def _suite_checks() -> set[str]:
    import ast

    names = set()
    for path in sorted((REPO / "imagesmith" / "validate" / "suite").glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                names.add(node.name)
    return names


def test_every_validation_check_has_its_row_in_the_docs() -> None:
    """Recipe "Add a validation check": its row in the checks table of docs/validation.md. Re-done by hand
    (issue 24 re-check): a new ``test_shm_writable`` passed every other test without one, and three
    interactive checks had none."""
    import re

    text = (REPO / "docs" / "validation.md").read_text()
    table = text.split("## The checks", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `(test_\w+)`", table, flags=re.MULTILINE))
    checks = _suite_checks()
    assert checks - rows == set(), "docs/validation.md, The checks: add a row for each"
    assert rows - checks == set(), "docs/validation.md, The checks: a row for a check that is gone"
