"""Every error a user can hit on the project/plan/render/lock/build/sources/init paths carries a fix line.

Walks the source of those modules: each ``raise SomethingError(...)`` of imagesmith's hierarchy must pass a
non-empty ``hint=`` (the ``fix:`` line the CLI prints), so no path ends in a bare message or an empty fix.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from imagesmith import errors
from imagesmith.errors import ImagesmithError
from tests import astcache
from tests.repo import REPO

MODULES = [
    "imagesmith/project.py",
    "imagesmith/scaffold.py",
    "imagesmith/sources.py",
    "imagesmith/distribution.py",
    "imagesmith/credentials.py",
    "imagesmith/config.py",
    "imagesmith/lock.py",
    "imagesmith/render.py",
    "imagesmith/plan.py",
    "imagesmith/build.py",
    "imagesmith/commands/__init__.py",
    "imagesmith/commands/init.py",
    "imagesmith/commands/plan.py",
    "imagesmith/commands/build.py",
    "imagesmith/commands/release.py",
    "imagesmith/commands/schema.py",
    "imagesmith/commands/refresh.py",
    "imagesmith/refresh/pypi.py",
    "imagesmith/refresh/transfer.py",
    "imagesmith/refresh/drafts.py",
    "imagesmith/refresh/diff.py",
    "imagesmith/refresh/torchtoml.py",
    "imagesmith/commands/compat.py",
    "imagesmith/planrequest.py",
    "imagesmith/compatrequest.py",
    "imagesmith/sourcesrequest.py",
    "imagesmith/schemarequest.py",
    "imagesmith/schema/core.py",
    "imagesmith/schema/project.py",
    "imagesmith/schema/registries.py",
    "imagesmith/schema/matrix.py",
    "imagesmith/schema/index.py",
    "imagesmith/schema/report.py",
    "imagesmith/compat/tables.py",
    "imagesmith/compat/drivers.py",
    "imagesmith/compat/torchwheels.py",
    "imagesmith/compat/hardware.py",
    "imagesmith/compat/verdicts.py",
    "imagesmith/compat/distros.py",
    "imagesmith/matrix.py",
    "imagesmith/pick/hosts.py",
    "imagesmith/pick/platforms.py",
    "imagesmith/pick/fetching.py",
    "imagesmith/pick/ranking.py",
    "imagesmith/pick/pulling.py",
    "imagesmith/pick/flavors.py",
    "imagesmith/release/artifacts.py",
    "imagesmith/release/base.py",
    "imagesmith/release/blobs.py",
    "imagesmith/release/carried.py",
    "imagesmith/release/checks.py",
    "imagesmith/release/evidence.py",
    "imagesmith/release/facts.py",
    "imagesmith/release/gates.py",
    "imagesmith/release/outcome.py",
    "imagesmith/release/promotion.py",
    "imagesmith/release/publish.py",
    "imagesmith/release/run.py",
    "imagesmith/release/state.py",
    "imagesmith/release/steps.py",
    "imagesmith/validate/runner.py",
    # issue 31: the command layers of keygen, sbom, index and candidates
    "imagesmith/keyrequest.py",
    "imagesmith/sbomrequest.py",
    "imagesmith/pick/indexrequest.py",
    "imagesmith/release/request.py",
]
ERROR_NAMES = {
    name for name, obj in vars(errors).items() if isinstance(obj, type) and issubclass(obj, Exception)
}
ERROR_NAMES |= {"ProjectError", "LockError"}


def _raises_without_hint(path: Path) -> list[str]:
    tree = astcache.parse(path.read_text(encoding="utf-8"), str(path))
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)):
            continue
        func = node.exc.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
        if name not in ERROR_NAMES:
            continue
        hint = next((k.value for k in node.exc.keywords if k.arg == "hint"), None)
        empty = isinstance(hint, ast.Constant) and not str(hint.value).strip()
        if hint is None or empty:
            bad.append(f"{path.relative_to(REPO)}:{node.lineno}: raise {name}(...) without a fix (hint=)")
    return bad


@pytest.mark.parametrize("module", MODULES)
def test_every_raise_has_a_fix_line(module: str) -> None:
    assert _raises_without_hint(REPO / module) == []


def test_the_walker_catches_a_missing_hint(tmp_path: Path) -> None:
    sample = REPO / "tests" / "unit" / "_sample_raise.py"
    try:
        sample.write_text(
            'def f():\n    raise ConfigError("x")\n\ndef g():\n    raise ConfigError("x", hint="")\n'
        )
        assert len(_raises_without_hint(sample)) == 2
    finally:
        sample.unlink()


def test_an_empty_fix_is_never_printed() -> None:
    assert str(ImagesmithError("broken", hint="  ")) == "broken"
    assert str(ImagesmithError("broken", hint="do this")) == "broken\n  fix: do this"
