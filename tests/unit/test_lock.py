"""Lock files: parseable, exact, paired, honest about how they were made; uv resolution for real."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

from imagesmith import compat
from imagesmith.lock import (
    BUILDER_MARKER,
    HOST_ONLY_DEPS,
    IMAGESMITH_RUNTIME_DEPS,
    LockError,
    LockKey,
    needs_numpy1,
    parse_lock,
    read_lock,
)
from tests.repo import PROJECT, REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

LOCKS = sorted(PROJECT.locks_dir.glob("*.txt"))


def _key(path: Path) -> LockKey:
    torch, variant, py = path.stem.rsplit("-", 2)
    return LockKey(torch=torch, variant=variant, python=py.removeprefix("py"))


@pytest.mark.parametrize("path", LOCKS, ids=lambda p: p.stem)
def test_lock_file_is_exact_and_documented(path: Path, registry_hosts: list[str]) -> None:
    key = _key(path)
    lock = parse_lock(path.read_text(), path, key)
    header = dict(lock.header)
    assert header["date"]
    assert header["index"]
    assert "sources" in header
    text = path.read_text()
    for host in registry_hosts:
        assert host not in text
    names = [n for n, _ in lock.pins]
    assert len(names) == len(set(names)), "a package pinned twice"
    assert "pytest-testinfra" in names
    assert "rich" in names
    assert "typer" in names
    if key.torch == "suite":
        assert "torch" not in names
        return
    release = compat.torch_release(key.torch)
    suffix = "" if key.variant == release.pypi_default else f"+{key.variant}"
    assert lock.version("torch") == key.torch + suffix
    assert lock.version("torchvision") == release.torchvision + suffix
    if release.torchaudio:
        assert lock.version("torchaudio") == release.torchaudio + suffix
    numpy = Version(lock.version("numpy") or "0")
    if needs_numpy1(key.torch):
        assert numpy.major == 1
    major = release.variants[key.variant].cuda.split(".")[0]
    assert lock.builder_version(f"nvidia-nccl-cu{major}") == lock.version(f"nvidia-nccl-cu{major}")
    if suffix:
        assert not lock.verified
        assert "imagesmith lock" in (lock.unverified_reason or "")
    else:
        assert lock.verified
        assert header["command"].startswith("uv pip compile")


def test_cuda13_builder_pins_nvcc_matching_runtime() -> None:
    lock = read_lock(LockKey(torch="2.11.0", variant="cu130", python="3.11"), PROJECT.locks_dir)
    assert lock is not None
    runtime = lock.version("nvidia-cuda-runtime")
    nvcc = lock.builder_version("nvidia-cuda-nvcc")
    assert runtime
    assert nvcc
    assert nvcc.split(".")[:2] == runtime.split(".")[:2] == ["13", "0"]
    assert (lock.builder_version("nvidia-nvvm") or "").startswith("13.0.")


def test_runtime_deps_follow_pyproject() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    want = {Requirement(r).name for r in pyproject["project"]["dependencies"]}
    host_only = {Requirement(r).name for r in HOST_ONLY_DEPS}
    assert host_only <= want
    assert {Requirement(r).name for r in IMAGESMITH_RUNTIME_DEPS} == want - host_only


def test_the_suite_in_images_never_imports_host_only_deps() -> None:
    """The image installs imagesmith with --no-deps and only IMAGESMITH_RUNTIME_DEPS: importing the CLI and
    the suite must not pull a host-only dependency (signing is done on the host)."""
    code = (
        "import sys, imagesmith.cli, imagesmith.validate.cli, imagesmith.validate.runner; "
        "print(sorted(m for m in sys.modules "
        "if m == 'imagesmith.signing' or m.split('.')[0] == 'cryptography'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_malformed_lock_line(tmp_path: Path) -> None:
    key = LockKey(torch="2.11.0", variant="cu130", python="3.11")
    bad = tmp_path / "x.txt"
    with pytest.raises(LockError, match=r"x.txt:3: 'torch>=2' is not an exact"):
        parse_lock("# date: today\nnumpy==1.26.4\ntorch>=2\n", bad, key)
    with pytest.raises(LockError, match="no pins"):
        parse_lock(f"# date: today\n{BUILDER_MARKER}\n", bad, key)


def test_missing_lock_reads_as_none(tmp_path: Path) -> None:
    assert read_lock(LockKey(torch="2.1.2", variant="cu118", python="3.10"), tmp_path) is None


def test_needs_numpy1() -> None:
    assert needs_numpy1("2.1.2")
    assert needs_numpy1("2.3.1")
    assert not needs_numpy1("2.4.0")
    assert not needs_numpy1("2.11.0")
