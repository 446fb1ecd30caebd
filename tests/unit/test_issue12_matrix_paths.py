"""Issue 12, item 13: shm_min bounds, `render --check --matrix PATH`, the registries lookup order."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import MatrixError
from imagesmith.matrix import SHM_MAX_BYTES, load_matrix
from tests.repo import PROJECT, REPO

Run = Callable[..., Any]
SMOKE = REPO / "matrices" / "smoke.toml"


def _copy(tmp_path: Path, shm: str | None = None, registries: str | None = None) -> Path:
    text = SMOKE.read_text(encoding="utf-8")
    lines = []
    for line in text.splitlines():
        if shm is not None and line.startswith("shm_min"):
            line = f'shm_min = "{shm}"'
        if registries is not None and line.startswith("registries ="):
            line = f"registries = {registries}"
        lines.append(line)
    path = tmp_path / "smoke.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("shm", ["2049g", "2097153m", "99999999999999999999999999g", str(SHM_MAX_BYTES + 1)])
def test_absurd_shm_min_is_refused(tmp_path: Path, shm: str) -> None:
    with pytest.raises(MatrixError, match=r"is more than 2048g") as info:
        load_matrix(_copy(tmp_path, shm=shm), project=PROJECT)
    assert info.value.hint


def test_shm_min_at_the_cap_loads(tmp_path: Path) -> None:
    assert load_matrix(_copy(tmp_path, shm="2048g"), project=PROJECT).shm_min_bytes == SHM_MAX_BYTES


@pytest.mark.parametrize("how", ["relative", "absolute"])
def test_render_check_takes_a_path_into_matrices(
    run_cli: Run, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    path = "matrices/smoke.toml" if how == "relative" else str(SMOKE)
    result = run_cli("render", "--check", "--matrix", path)
    assert result.exit_code == 0, result.stderr
    assert "is current" in result.stdout


def test_render_check_of_a_matrix_elsewhere_says_why_and_what_to_do(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    path = _copy(tmp_path)
    result = run_cli("render", "--check", "--matrix", str(path))
    assert result.exit_code == 4
    assert "render (and render --check) takes only matrices in matrices/" in result.stderr
    assert f"imagesmith plan --matrix {path}" in result.stderr  # the fix says how to look at it anyway


def test_render_of_another_projects_matrix_names_that_project(
    run_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    (other / "matrices").mkdir(parents=True)
    shutil.copy(REPO / "imagesmith.toml", other / "imagesmith.toml")
    path = other / "matrices" / "smoke.toml"
    shutil.copy(SMOKE, path)
    monkeypatch.chdir(REPO)
    result = run_cli("render", "--check", "--matrix", str(path))
    assert result.exit_code == 4
    assert f"imagesmith -C {other} render --matrix smoke" in result.stderr


def test_unknown_registry_error_states_the_lookup_order(run_cli: Run, tmp_path: Path) -> None:
    path = _copy(tmp_path, registries='["nope"]')
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2
    fix = result.stderr.split("fix:")[1]
    assert f"registries.toml beside the matrix ({tmp_path / 'registries.toml'})" in fix
    assert f"the project's registries file ({PROJECT.registries_file})" in fix
    assert "(the project's)" in fix  # which one was used
    # a registries.toml beside the matrix wins, and the error says so
    (tmp_path / "registries.toml").write_text(
        'schema = 1\n[registries.other]\nhost = "127.0.0.1:5000"\nnamespace = "x"\n', encoding="utf-8"
    )
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2
    assert f"no registry 'nope' in {tmp_path / 'registries.toml'}" in result.stderr
    assert "(beside the matrix)" in result.stderr


def test_missing_registries_file_error_states_the_lookup_order(tmp_path: Path) -> None:
    path = _copy(tmp_path)
    with pytest.raises(MatrixError) as info:
        load_matrix(path, project=PROJECT, registries_file=tmp_path / "none.toml")
    assert "does not exist" in info.value.message
    assert info.value.hint is not None
    assert "(--registries)" in info.value.hint
