"""The stages depend one way (pyproject.toml [tool.importlinter], docs/architecture.md): the contracts hold on
this tree, and a deliberate back-import breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.repo import REPO

LINT = Path(sys.executable).with_name("lint-imports")


def _lint(root: Path) -> subprocess.CompletedProcess[str]:
    if not LINT.exists():
        pytest.fail(f"{LINT} is missing: pip install -e '.[dev]' (import-linter is in the dev extra)")
    env = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run(
        [str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    root.mkdir()
    shutil.copy(REPO / "pyproject.toml", root / "pyproject.toml")
    shutil.copytree(REPO / "imagesmith", root / "imagesmith", ignore=shutil.ignore_patterns("__pycache__"))
    return root


def test_contracts_hold() -> None:
    proc = _lint(REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "9 kept, 0 broken" in proc.stdout


@pytest.mark.parametrize(
    ("module", "back_import", "contract"),
    [
        ("plan.py", "from imagesmith.render import write_rendered  # noqa", "stages depend one way"),
        ("release/run.py", "from imagesmith.pick import pick  # noqa", "stages depend one way"),
        # issue 31: a command layer knows no command, those of one layer are independent of each other, and
        # planrequest (which plans as build does) stands to their right
        (
            "lockrequest.py",
            "from imagesmith.commands import current_project  # noqa",
            "stages depend one way",
        ),
        ("initrequest.py", "from imagesmith.buildrequest import load_plan  # noqa", "stages depend one way"),
        # the command layers of keygen and sbom (issue 31 item 3) likewise; index's is pick's, above fetching
        ("keyrequest.py", "from imagesmith.commands import flags  # noqa", "stages depend one way"),
        ("sbomrequest.py", "from imagesmith.lockrequest import LockRequest  # noqa", "stages depend one way"),
        (
            "pick/fetching.py",
            "from imagesmith.pick.indexrequest import index_trust  # noqa",
            "the pick package depends one way",
        ),
        ("compatrequest.py", "from imagesmith.schemarequest import prepare  # noqa", "stages depend one way"),
        (
            "sourcesrequest.py",
            "from imagesmith.planrequest import prepare_plan  # noqa",
            "stages depend one way",
        ),
        (
            "schemarequest.py",
            "from imagesmith.commands import current_project  # noqa",
            "stages depend one way",
        ),
        (
            "release/checks.py",
            "from imagesmith.release.steps import STEPS  # noqa",
            "the release package depends one way",
        ),
        (
            "matrix.py",
            "from imagesmith.plan import build_plan  # noqa",
            "data and infrastructure know no stage",
        ),
        (
            "registry/transport.py",
            "from imagesmith.registry.copy import copy_blob  # noqa",
            "the registry package depends one way",
        ),
        (
            "registry/copy.py",
            "from imagesmith.build import BuildOptions  # noqa",
            "data and infrastructure know no stage",
        ),
        (
            "compat/tables.py",
            "from imagesmith.compat.verdicts import verdict  # noqa",
            "the compat package depends one way",
        ),
        (
            "compat/hardware.py",
            "from imagesmith.plan import build_plan  # noqa",
            "data and infrastructure know no stage",
        ),
        (
            "pick/hosts.py",
            "from imagesmith.pick.ranking import choose  # noqa",
            "the pick package depends one way",
        ),
        (
            "schema/core.py",
            "from imagesmith.schema.matrix import MATRIX  # noqa",
            "the schema package depends one way",
        ),
        (
            "refresh/transfer.py",
            "from imagesmith.refresh.pypi import LiveSource  # noqa",
            "the refresh package depends one way",
        ),
        (
            "vulngate/records.py",
            "from imagesmith.vulngate.gating import gate  # noqa",
            "the vulngate package depends one way",
        ),
    ],
)
def test_a_back_import_breaks_them(tmp_path: Path, module: str, back_import: str, contract: str) -> None:
    root = _copy(tmp_path)
    path = root / "imagesmith" / module
    text = path.read_text()
    marker = "from __future__ import annotations\n"
    path.write_text(text.replace(marker, marker + "\n" + back_import + "\n", 1))
    proc = _lint(root)
    assert proc.returncode != 0
    assert f"{contract} BROKEN" in proc.stdout
    assert f"imagesmith.{module.removesuffix('.py').replace('/', '.')} -> " in proc.stdout


def test_a_service_test_in_tests_unit_is_refused(tmp_path: Path) -> None:
    """tests/unit/conftest.py turns a docker/registry/e2e/gpu-marked unit test into a collection error."""
    unit = tmp_path / "tests" / "unit"
    unit.mkdir(parents=True)
    shutil.copy(REPO / "tests" / "unit" / "conftest.py", unit / "conftest.py")
    (unit / "test_probe.py").write_text("import pytest\n\n@pytest.mark.docker\ndef test_x():\n    pass\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    docker: d\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", str(unit)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0
    assert "belongs in tests/integration" in proc.stdout + proc.stderr


# -- the package indirection the layer contracts ignore hides no back-import (issue 24 re-check) -----------
def _package_layers() -> list[tuple[str, list[list[str]]]]:
    """(package, its layers top first) of the compat-layers and pick-layers contracts in pyproject.toml."""
    import tomllib

    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    return [
        (c["containers"][0].split(".")[-1], [[m.strip() for m in row.split("|")] for row in c["layers"]])
        for c in contracts
        if c["id"] in ("compat-layers", "pick-layers")
    ]


PACKAGE_LAYERS = _package_layers()


def _reached_through_package(package: str, source: str) -> set[str]:
    """The names a submodule looks up on its own package (``compat.X``, ``pick.X``) at call time."""
    import ast

    from tests import astcache

    tree = astcache.parse(source)
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == package
    }


def _back_reaches(package: str, layers: list[list[str]]) -> list[str]:
    import importlib
    import inspect

    pkg = importlib.import_module(f"imagesmith.{package}")
    rank = {m: i for i, row in enumerate(layers) for m in row}
    out = []
    for module in rank:
        source = (REPO / "imagesmith" / package / f"{module}.py").read_text()
        for name in sorted(_reached_through_package(package, source)):
            obj = getattr(pkg, name, None)
            home = (obj.__name__ if inspect.ismodule(obj) else getattr(obj, "__module__", "")).split(".")[-1]
            if home in rank and rank[home] < rank[module]:
                out.append(f"{package}.{module} reaches {package}.{name} of the higher layer {home}")
    return out


@pytest.mark.parametrize(("package", "layers"), PACKAGE_LAYERS)
def test_the_package_indirection_hides_no_back_import(package: str, layers: list[list[str]]) -> None:
    """``ignore_imports = ["imagesmith.compat.* -> imagesmith.compat"]`` (and pick's) lets a submodule look
    names up on its package, for the names tests monkeypatch; through it a lower layer could call a higher one
    unseen by lint-imports (``compat.verdict`` from ``drivers``). Each name reached so is of its own layer
    or below."""
    assert _back_reaches(package, layers) == []


def test_both_packages_are_checked() -> None:
    assert sorted(p for p, _ in PACKAGE_LAYERS) == ["compat", "pick"]


def test_the_indirection_check_finds_a_back_reach(monkeypatch: pytest.MonkeyPatch) -> None:
    real = Path.read_text

    def with_back_reach(self: Path, *args: object, **kwargs: object) -> str:
        text = real(self, *args, **kwargs)  # type: ignore[arg-type]
        return text + "\n\ndef _x():\n    return compat.verdict\n" if self.name == "drivers.py" else text

    monkeypatch.setattr(Path, "read_text", with_back_reach)
    assert _back_reaches("compat", dict(PACKAGE_LAYERS)["compat"]) == [
        "compat.drivers reaches compat.verdict of the higher layer verdicts"
    ]


def _modules() -> set[str]:
    """The modules and packages directly under imagesmith/ (``registry``, ``pick``, ``errors`` …)."""
    root = REPO / "imagesmith"
    names = {p.stem for p in root.glob("*.py") if p.stem not in ("__init__", "__main__")}
    return names | {p.parent.name for p in root.glob("*/__init__.py")}


def test_every_module_is_in_the_figure_and_in_a_contract() -> None:
    """docs/architecture.md's figure and pyproject.toml's contracts name every module there is (issue 24
    re-check: ``entry`` was in neither, ``scaffold`` was drawn as ``init``), and nothing that is gone."""
    import re
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib

    text = (REPO / "docs" / "architecture.md").read_text()
    figure = text.split("```", 2)[1]
    drawn = set(re.findall(r"[a-z_]+", figure)) - {"data", "infrastructure"}
    modules = _modules()
    assert modules - drawn == set(), "docs/architecture.md: draw these modules"
    assert drawn - modules == set(), "docs/architecture.md: these modules are gone"
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    named: set[str] = set()
    for contract in contracts:
        for key in ("layers", "source_modules"):
            for entry in contract.get(key, []):
                named |= {
                    m.strip().split(".")[1] for m in entry.split("|") if m.strip().startswith("imagesmith.")
                }
    assert modules - named == set(), "pyproject.toml: put these modules in a contract"
