"""Locks say they are whole (issue 37): a lock cut anywhere is refused, naming the file and the plain command
that restores it, and that command (`imagesmith lock`, no --force) restores it; an older lock without the end
line is read and sealed."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import lock as lockmod
from imagesmith.lock import END_MARKER, LockError, LockKey, read_lock, unsealed
from imagesmith.project import PROJECT_FILE
from tests import fakeuv
from tests.conftest import CliResult
from tests.repo import PROJECT

KEY = LockKey(torch="2.11.0", variant="cu130", python="3.11")
REF = PROJECT.locks_dir / KEY.filename
TEXT = REF.read_text(encoding="utf-8")


def _project(root: Path) -> Path:
    (root / "matrices").mkdir(parents=True)
    (root / PROJECT_FILE).write_text('schema = 1\ndefault_matrix = "smoke"\n')
    shutil.copy(PROJECT.matrices_dir / "smoke.toml", root / "matrices" / "smoke.toml")
    shutil.copy(PROJECT.registries_file, root / "matrices" / "registries.toml")
    (root / "locks").mkdir()
    shutil.copy(REF, root / "locks" / KEY.filename)
    return root


def _cut_points() -> list[int]:
    rng = random.Random(37)
    pins = [i for i, ln in enumerate(TEXT.splitlines(keepends=True)) if ln[:1].isalpha()]
    at_30th_pin = sum(len(ln) for ln in TEXT.splitlines(keepends=True)[: pins[30]])
    inside_version = TEXT.index("torch==2.11.0") + len("torch==2.1")
    return sorted(
        {at_30th_pin, inside_version, *(rng.randrange(1, len(TEXT) - len(END_MARKER) - 1) for _ in range(40))}
    )


def test_the_reference_locks_are_sealed() -> None:
    for path in sorted(PROJECT.locks_dir.glob("*.txt")):
        assert path.read_text().rstrip("\n").endswith("\n" + END_MARKER), path


@pytest.mark.parametrize("cut", _cut_points())
def test_a_lock_cut_anywhere_is_refused_naming_the_file_and_the_plain_command(
    tmp_path: Path, cut: int
) -> None:
    path = tmp_path / KEY.filename
    path.write_text(TEXT[:cut], encoding="utf-8")
    with pytest.raises(LockError) as err:
        read_lock(KEY, tmp_path)
    assert err.value.problem == "cut short"
    assert err.value.file == str(path)
    assert str(path) in err.value.message
    assert err.value.hint is not None
    assert "imagesmith lock" in err.value.hint
    assert "--force" not in err.value.hint.replace("no --force", "")


def test_plan_names_the_matrix_in_the_command_that_restores_it(
    tmp_path: Path, run_cli: Callable[..., CliResult]
) -> None:
    root = _project(tmp_path / "p")
    lock = root / "locks" / KEY.filename
    lines = TEXT.splitlines(keepends=True)
    lock.write_text("".join(lines[:100]), encoding="utf-8")  # 30-odd pins, no builder section
    for command in (["plan"], ["render"]):
        result = run_cli("-C", str(root), *command, "--matrix", "smoke")
        assert result.exit_code == 2, result.stderr
        assert "cut short" in result.stderr
        assert KEY.filename in result.stderr
        assert "imagesmith lock --matrix smoke" in result.stderr
    assert not (root / "dockerfiles").exists()


def _fake_resolver(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    seen: list[list[str]] = []

    def fake(
        inputs: Any, key: LockKey, extra: Any, constraints: Any = (), ca: Any = None
    ) -> tuple[str, list[str]]:
        seen.append(list(constraints))
        return fakeuv.answer(TEXT, list(inputs)), ["uv", "pip", "compile", "--generate-hashes"]

    monkeypatch.setattr(lockmod, "_compile", fake)
    return seen


@pytest.mark.parametrize("cut", [_cut_points()[0], _cut_points()[1], _cut_points()[-1]])
def test_a_plain_lock_restores_a_cut_lock_keeping_what_it_holds(
    tmp_path: Path, run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch, cut: int
) -> None:
    root = _project(tmp_path / "p")
    lock = root / "locks" / KEY.filename
    lock.write_text(TEXT[:cut], encoding="utf-8")
    seen = _fake_resolver(monkeypatch)
    result = run_cli("-C", str(root), "lock", "--matrix", "smoke", "--no-sizes")
    assert result.exit_code == 0, result.stderr
    assert "restored" in result.stdout
    restored = read_lock(KEY, root / "locks")
    assert restored is not None
    assert restored.sealed
    reference = read_lock(KEY, PROJECT.locks_dir)
    assert reference is not None
    assert restored.pins == reference.pins
    assert restored.builder_pins == reference.builder_pins
    if "# interactive-command:" in TEXT[:cut]:  # the header that says it had one survived: it comes back
        assert restored.interactive_pins == reference.interactive_pins
    else:  # cut inside the header: the smoke matrix needs no interactive section, none is resolved
        assert restored.interactive_pins == ()
    survived = lockmod.salvage_lock(TEXT[:cut], lock, KEY)
    if survived is not None:  # every whole pin the cut file held was a constraint of the resolution
        assert {f"{n}=={v}" for n, v in survived.pins} <= set(seen[0])
    assert run_cli("-C", str(root), "plan", "--matrix", "smoke").exit_code == 0


def test_a_lock_from_before_the_end_line_is_read_and_a_plain_lock_seals_it(
    tmp_path: Path, run_cli: Callable[..., CliResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _project(tmp_path / "p")
    lock = root / "locks" / KEY.filename
    lock.write_text(unsealed(TEXT), encoding="utf-8")
    old = read_lock(KEY, root / "locks")
    assert old is not None
    assert not old.sealed
    seen = _fake_resolver(monkeypatch)
    result = run_cli("-C", str(root), "lock", "--matrix", "smoke", "--no-sizes")
    assert result.exit_code == 0, result.stderr
    assert "sealed" in result.stdout
    assert seen == []  # nothing resolved: the pins are as they were
    assert lock.read_text(encoding="utf-8") == TEXT
    assert run_cli("-C", str(root), "lock", "--matrix", "smoke", "--no-sizes").stdout.startswith("kept")


def test_text_after_the_end_line_is_refused(tmp_path: Path) -> None:
    (tmp_path / KEY.filename).write_text(TEXT + "torch==2.10.0\n", encoding="utf-8")
    with pytest.raises(LockError, match="after its end line"):
        read_lock(KEY, tmp_path)
