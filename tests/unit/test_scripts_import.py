"""Every script under scripts/ imports against the current package (benchmarks rot silently otherwise)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).resolve().parents[2] / "scripts").glob("*.py"))


@pytest.mark.parametrize("path", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_imports(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    name = f"_imagesmith_script_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(sys, "path", list(sys.path))  # scripts insert the repository root
    try:
        spec.loader.exec_module(module)  # imports and definitions only: main() runs under __main__
    except ModuleNotFoundError as e:
        if e.name != "torch":  # GPU-host scripts need torch, which only GPU hosts have
            raise
        pytest.skip(f"{path.name} runs on GPU hosts (needs torch)")
    assert callable(getattr(module, "main", None)), f"{path.name} has no main()"


def test_there_are_scripts() -> None:
    assert len(SCRIPTS) >= 5
