"""Issue 31: the plan and render commands' layer — a typed request, the flag rules in one place
(``prepare_plan``, ``prepare_render``), the run (``run_plan``, ``run_render``), called without the CLI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from imagesmith.errors import ConfigError, NothingToDoError, RenderError
from imagesmith.planrequest import (
    PlanRequest,
    RenderRequest,
    github_matrix,
    prepare_plan,
    prepare_render,
    run_plan,
    run_render,
)
from imagesmith.project import PROJECT_FILE, Project, load_project
from tests.repo import PROJECT
from tests.seams import Seams


def _project(root: Path, *, matrices: bool = True) -> Project:
    """A project of the smoke matrix with its lock (or of no matrix at all)."""
    (root / "matrices").mkdir(parents=True)
    (root / PROJECT_FILE).write_text("schema = 1\n" + ('default_matrix = "smoke"\n' if matrices else ""))
    shutil.copy(PROJECT.registries_file, root / "matrices" / "registries.toml")
    (root / "locks").mkdir()
    if matrices:
        shutil.copy(PROJECT.matrices_dir / "smoke.toml", root / "matrices" / "smoke.toml")
        for name in ("2.11.0-cu130-py3.11.txt", "bases.toml", "wheel-sizes.toml"):
            if (PROJECT.locks_dir / name).is_file():
                shutil.copy(PROJECT.locks_dir / name, root / "locks" / name)
    return load_project(root / PROJECT_FILE)


# -- plan ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("request_", "field", "says"),
    [
        (PlanRequest(as_json=True, github=True), "--json", "--json and --github are exclusive"),
        (PlanRequest(explain=True, github=True), "--explain", "--explain does not apply to --github"),
        # the first rule first: both bad, the first one is said
        (PlanRequest(as_json=True, explain=True, github=True), "--json", "--json and --github"),
    ],
)
def test_a_bad_plan_combination_is_one_error_naming_the_flag_before_the_project(
    request_: PlanRequest, field: str, says: str
) -> None:
    seams = Seams()
    with pytest.raises(ConfigError) as info:
        prepare_plan(request_, project_of=seams.project_of)
    assert info.value.field == field
    assert info.value.message.startswith(says), info.value.message
    assert seams.asked == []  # refused before a project is looked for or a matrix read


def test_only_matching_no_cell_is_exit_3() -> None:
    with pytest.raises(NothingToDoError) as info:
        prepare_plan(PlanRequest(matrix="smoke", only=("nomatch*",)), project_of=Seams().project_of)
    assert info.value.exit_code == 3


def test_the_plan_of_the_matrix_the_project_resolves() -> None:
    seams = Seams()
    p = prepare_plan(PlanRequest(matrix="smoke"), project_of=seams.project_of)
    assert seams.asked == ["smoke"]
    assert p.matrix.name == "smoke"
    assert [c.id for c in p.plan.cells] == ["2.11.0-cu130-py3.11-runtime-debian12"]


@pytest.mark.parametrize(
    ("request_", "view"),
    [
        (PlanRequest(matrix="a100"), "table"),
        (PlanRequest(matrix="a100", as_json=True), "json"),
        (PlanRequest(matrix="a100", github=True), "github"),
    ],
)
def test_the_result_is_shown_as_the_flags_ask(request_: PlanRequest, view: str) -> None:
    result = run_plan(request_, prepare_plan(request_, project_of=Seams().project_of))
    assert result.view == view


def test_json_with_explain_adds_the_dropped_combinations_and_the_layer_plan() -> None:
    plain = PlanRequest(matrix="a100", as_json=True)
    explained = PlanRequest(matrix="a100", as_json=True, explain=True)
    p = prepare_plan(plain, project_of=Seams().project_of)
    assert set(run_plan(plain, p).to_json()) == set(p.plan.to_json())
    data = run_plan(explained, p).to_json()
    assert data["dropped"] == [{"cell": d.combination, "reason": d.reason} for d in p.plan.dropped]
    assert data["dropped"]  # a100 drops some combinations
    assert set(data["layer_plan"]) == {"sharing", "estimate"}


def test_github_is_one_entry_per_cell_and_gpu_family() -> None:
    request = PlanRequest(matrix="a100", github=True)
    p = prepare_plan(request, project_of=Seams().project_of)
    data = run_plan(request, p).to_json()
    assert data == github_matrix(p.plan)
    assert len(data["include"]) == sum(len(c.hardware.gpu_families) for c in p.plan.cells)


# -- render --------------------------------------------------------------------------------------------------
def test_render_holds_the_lock_and_check_does_not() -> None:
    seams = Seams()
    prepare_render(RenderRequest(matrix="smoke"), project_of=seams.project_of, hold=seams.hold)
    assert (seams.asked, seams.held) == (["smoke"], ["render"])
    checking = Seams()
    prepare_render(
        RenderRequest(matrix="smoke", check=True), project_of=checking.project_of, hold=checking.hold
    )
    assert checking.held == []


def test_a_project_of_no_matrix_is_one_error_naming_the_flag(tmp_path: Path) -> None:
    seams = Seams(_project(tmp_path / "p", matrices=False))
    with pytest.raises(ConfigError) as info:
        prepare_render(RenderRequest(check=True), project_of=seams.project_of, hold=seams.hold)
    assert info.value.field == "--matrix"
    assert "no matrix in matrices/" in info.value.message


def test_a_matrix_outside_the_projects_matrices_is_refused_before_anything_is_rendered(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("imagesmith.plan.build_plan", lambda *a, **k: pytest.fail("planned"))
    outside = tmp_path / "smoke.toml"
    shutil.copy(PROJECT.matrices_dir / "smoke.toml", outside)
    shutil.copy(PROJECT.registries_file, tmp_path / "registries.toml")
    seams = Seams()
    with pytest.raises(RenderError) as info:
        prepare_render(
            RenderRequest(matrix=str(outside), check=True), project_of=seams.project_of, hold=seams.hold
        )
    assert info.value.field == "--matrix"
    assert "render (and render --check) takes only matrices in matrices/" in info.value.message


def test_every_matrix_is_read_before_one_is_planned(monkeypatch: pytest.MonkeyPatch) -> None:
    planned: list[str] = []
    monkeypatch.setattr("imagesmith.plan.build_plan", lambda m, **_: planned.append(m.name))
    p = prepare_render(RenderRequest(check=True), project_of=Seams().project_of, hold=Seams().hold)
    assert sorted(m.name for m in p.matrices) == PROJECT.matrix_names()
    assert planned == []


def test_the_run_writes_then_check_finds_it_current(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    seams = Seams(project)
    (project.dockerfiles_dir / "notours").mkdir(parents=True)
    request = RenderRequest()
    lines: list[str] = []
    result = run_render(
        request, prepare_render(request, project_of=seams.project_of, hold=seams.hold), echo=lines.append
    )
    assert not result.check
    assert result.matrices == 1
    assert result.files == len(result.written) > 0
    assert all(p.is_file() for p in result.written)
    assert lines == ["left    dockerfiles/notours (not rendered by imagesmith: no GENERATED Dockerfile)"]
    check = RenderRequest(check=True)
    again = run_render(check, prepare_render(check, project_of=seams.project_of, hold=seams.hold))
    assert (again.check, again.files, again.written) == (True, result.files, ())


def test_check_raises_listing_what_differs(tmp_path: Path) -> None:
    project = _project(tmp_path / "p")
    seams = Seams(project)
    request = RenderRequest(check=True)
    with pytest.raises(RenderError) as info:
        run_render(request, prepare_render(request, project_of=seams.project_of, hold=seams.hold))
    assert "Dockerfile" in info.value.message
    assert not project.dockerfiles_dir.exists()  # --check writes nothing
