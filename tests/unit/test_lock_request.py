"""Issue 31: the lock command's layer — a typed request, the flag rules in one place (``prepare``), the run
(``lock``), called without the CLI."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import imagesmith.lock as lockmod
from imagesmith.errors import ConfigError
from imagesmith.lock import LockError, LockKey
from imagesmith.lockrequest import LockRequest, lock, prepare
from imagesmith.project import PROJECT_FILE, Project, load_project
from tests.repo import PROJECT
from tests.seams import Seams


@pytest.mark.parametrize(
    ("request_", "field", "says"),
    [
        (LockRequest(sizes=True, no_sizes=True), "--sizes", "--sizes and --no-sizes contradict each other"),
        (LockRequest(bases=True, sizes=True), "--bases", "--bases and --sizes do not go together"),
        (LockRequest(bases=True, force=True), "--bases", "--bases and --force do not go together"),
        (LockRequest(bases=True, keep_versions=True), "--bases", "--bases and --keep-versions do not go"),
    ],
)
def test_a_bad_combination_is_one_error_naming_the_flag(request_: LockRequest, field: str, says: str) -> None:
    seams = Seams()
    with pytest.raises(ConfigError) as info:
        prepare(request_, project_of=seams.project_of, hold=seams.hold)
    assert info.value.field == field
    assert info.value.message.startswith(says), info.value.message
    assert seams.held == ["lock"]  # the project's lock is held first: one writer at a time, as before


def test_bases_and_sizes_read_no_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_matrix(*_: Any, **__: Any) -> None:
        raise AssertionError("a matrix was read")

    monkeypatch.setattr("imagesmith.matrix.load_matrix", no_matrix)
    for request, mode in ((LockRequest(bases=True), "bases"), (LockRequest(sizes=True), "sizes")):
        p = prepare(request, project_of=Seams().project_of, hold=Seams().hold)
        assert (p.mode, p.matrix, tuple(p.keys)) == (mode, None, ())


def test_the_wheel_locks_of_a_matrix_and_its_interactive_section() -> None:
    seams = Seams()
    p = prepare(LockRequest(matrix="smoke-interactive"), project_of=seams.project_of, hold=seams.hold)
    assert seams.asked == ["smoke-interactive"]
    assert p.mode == "wheels"
    assert p.interactive
    assert [k.filename for k in p.keys] == ["2.11.0-cu130-py3.11.txt"]
    plain = prepare(LockRequest(matrix="smoke"), project_of=seams.project_of, hold=seams.hold)
    assert not plain.interactive


def _project(root: Path) -> Project:
    (root / "matrices").mkdir(parents=True)
    (root / PROJECT_FILE).write_text('schema = 1\ndefault_matrix = "smoke"\n')
    shutil.copy(PROJECT.matrices_dir / "smoke.toml", root / "matrices" / "smoke.toml")
    shutil.copy(PROJECT.registries_file, root / "matrices" / "registries.toml")
    (root / "locks").mkdir()
    return load_project(root / PROJECT_FILE)


def test_the_run_writes_what_resolves_and_ends_with_one_error_for_the_rest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project = _project(tmp_path / "p")
    seams = Seams(project)
    p = prepare(LockRequest(matrix="smoke", no_sizes=True), project_of=seams.project_of, hold=seams.hold)
    extra = LockKey(torch="2.11.0", variant="cu130", python="3.12")
    p = type(p)(project=p.project, mode=p.mode, matrix=p.matrix, keys=(*p.keys, extra))
    compiled: list[str] = []

    def compile_lock(key: LockKey, *, lock_dir: Path, **_: Any) -> Path:
        if key == extra:
            raise LockError(
                f"cannot resolve {key}: uv pip compile failed:\ncause: conflict", hint="relax a pin"
            )
        compiled.append(key.filename)
        return lock_dir / key.filename

    monkeypatch.setattr(lockmod, "compile_lock", compile_lock)
    monkeypatch.setattr("imagesmith.lockrequest.record_sizes", lambda *a, **k: pytest.fail("--no-sizes"))
    lines: list[tuple[str, bool]] = []
    result = lock(
        LockRequest(matrix="smoke", no_sizes=True), p, echo=lambda m, *, err=False: lines.append((m, err))
    )
    assert compiled == ["2.11.0-cu130-py3.11.txt"]
    assert [k.filename for k in result.written] == compiled
    assert (f"wrote   locks/{compiled[0]}", False) in lines
    assert (f"FAILED  {extra}\n        cause: conflict", True) in lines
    assert isinstance(result.failure, ConfigError)
    assert result.failure.message == f"could not lock: cannot resolve {extra}: uv pip compile failed"
    assert "relax a pin" in (result.failure.hint or "")


def test_the_sizes_of_the_locks_written_are_recorded_softly(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    project = _project(tmp_path / "p")
    seams = Seams(project)
    p = prepare(LockRequest(matrix="smoke"), project_of=seams.project_of, hold=seams.hold)
    monkeypatch.setattr(lockmod, "compile_lock", lambda key, *, lock_dir, **_: lock_dir / key.filename)
    recorded: list[tuple[list[str], bool]] = []

    def record_sizes(project: Project, *, keys: Any = None, soft: bool = False, echo: Any = None) -> None:
        recorded.append(([k.filename for k in keys], soft))

    monkeypatch.setattr("imagesmith.lockrequest.record_sizes", record_sizes)
    result = lock(LockRequest(matrix="smoke"), p)
    assert result.failure is None
    assert recorded == [(["2.11.0-cu130-py3.11.txt"], True)]
