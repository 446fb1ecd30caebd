"""Shared fixtures. ``run_cli`` runs the real CLI entry point (imagesmith.cli.main) in-process."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagesmith.cli import main
from imagesmith.project import Project
from tests.repo import PROJECT, REPO

__all__ = ["PROJECT", "REPO"]

# A suite started in the background of a non-interactive shell (`.ci/run &`, nohup) inherits SIGINT
# ignored, and an ignored signal stays ignored across exec: every `imagesmith` the Ctrl-C tests start would
# never see the interrupt they send (exit 7 or a 60 s timeout instead of 130). A handler of our own is reset
# to the default in each child at exec, so the children get the disposition a terminal gives them.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str


@pytest.fixture(autouse=True)
def _no_inherited_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test that isolates imagesmith's cache with XDG_CACHE_HOME (index copies, pinned index keys) is not
    pointed elsewhere by an IMAGESMITH_CACHE of the shell that runs the suite; tests that need one set it."""
    monkeypatch.delenv("IMAGESMITH_CACHE", raising=False)


@pytest.fixture
def project() -> Project:
    return PROJECT


@pytest.fixture
def run_cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    def _run(*args: str) -> CliResult:
        capsys.readouterr()
        code = main(list(args))
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return _run


@pytest.fixture(scope="session")
def registry_hosts() -> list[str]:
    """Host names of the package registries this machine reaches (pip's default index and its file host, apt's
    sources), read from the machine itself: committed and generated files must never name them."""
    hosts: set[str] = set()
    try:
        from pip._internal.models.index import PyPI

        hosts |= {PyPI.netloc, PyPI.file_storage_domain}
    except ImportError:  # pragma: no cover - pip is in every venv made by scripts/setup.sh
        pass
    apt = Path("/etc/apt")
    for src in [apt / "sources.list", *sorted((apt / "sources.list.d").glob("*"))]:
        if src.is_file():
            hosts |= set(re.findall(r"(?:URIs:|deb)\s+[a-z]+://([^/\s]+)", src.read_text(errors="replace")))
    return sorted(hosts)
