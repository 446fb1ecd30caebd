"""Issue 31: the build command's layer — a typed request, the flag rules in one place (``prepare``), the run
and its end (``build``, ``finish``), called without the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.build import BuildOptions, CellOutcome
from imagesmith.buildrequest import BuildRequest, BuildResult, build, finish, prepare
from imagesmith.errors import BuildError, ConfigError, MatrixError
from imagesmith.matrix import Matrix
from imagesmith.plan import BuildPlan
from imagesmith.project import Project
from tests.repo import PROJECT


def no_project(matrix: str | None) -> Project:
    raise AssertionError("the project was looked for before the flags were checked")


def no_hold(project: Project, command: str) -> None:
    raise AssertionError("the project's lock was taken before the flags were checked")


@pytest.fixture
def preflights(monkeypatch: pytest.MonkeyPatch) -> list[BuildOptions]:
    """The build's preflight, recorded (it reads the source cache, which a unit test has not filled)."""
    seen: list[BuildOptions] = []
    monkeypatch.setattr("imagesmith.build.preflight", lambda m, p, options: seen.append(options))
    monkeypatch.setenv("IMAGESMITH_CONFIG", "/nonexistent/imagesmith-config.toml")
    return seen


def test_an_unknown_backend_is_refused_before_the_project_is_looked_for() -> None:
    with pytest.raises(ConfigError) as info:
        prepare(BuildRequest(backend="podman"), project_of=no_project, hold=no_hold)
    assert info.value.field == "--backend"
    assert info.value.message == "--backend 'podman': expected auto, buildkit or sdk"


def test_a_summary_that_cannot_be_written_is_refused_before_the_matrix_is_read(
    tmp_path: Path, preflights: list[BuildOptions]
) -> None:
    with pytest.raises(ConfigError) as info:
        prepare(BuildRequest(matrix="smoke", summary=tmp_path), project_of=no_project, hold=no_hold)
    assert info.value.field == "--summary"
    assert "is a folder" in info.value.message
    assert preflights == []


def test_a_request_becomes_the_builds_options(preflights: list[BuildOptions]) -> None:
    held: list[tuple[Project, str]] = []
    asked: list[str | None] = []

    def project_of(matrix: str | None) -> Project:
        asked.append(matrix)
        return PROJECT

    request = BuildRequest(
        matrix="smoke",
        push=True,
        jobs=2,
        force=True,
        verify="full",
        registry_mirror=("docker.io=m.example/",),
    )
    p = prepare(request, project_of=project_of, hold=lambda project, command: held.append((project, command)))
    assert asked == ["smoke"]
    assert held == [(PROJECT, "build")]  # the project's lock: held before any cell is built
    assert p.matrix.name == "smoke"
    assert p.plan.cells
    assert (p.options.push, p.options.jobs, p.options.force, p.options.verify) == (True, 2, True, "full")
    assert dict(p.options.config.registry_mirrors) == {"docker.io": "m.example"}
    assert preflights == [p.options]  # the preflight ran on these options, before the run


def test_a_plan_of_no_cell_is_refused_naming_the_matrix(
    monkeypatch: pytest.MonkeyPatch, preflights: list[BuildOptions]
) -> None:
    from dataclasses import replace

    import imagesmith.buildrequest as buildrequest

    real = buildrequest.load_plan

    def emptied(*args: Any, **kwargs: Any) -> tuple[Project, Matrix, BuildPlan]:
        project, m, plan = real(*args, **kwargs)
        return project, m, replace(plan, cells=())

    monkeypatch.setattr(buildrequest, "load_plan", emptied)
    with pytest.raises(MatrixError, match="matrix smoke: no cell to build"):
        prepare(BuildRequest(matrix="smoke"), project_of=lambda _: PROJECT, hold=lambda *_: None)
    assert preflights == []


def test_the_first_failure_counts_the_others_and_ends_the_run_after_the_summary(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, preflights: list[BuildOptions]
) -> None:
    from tests.unit.test_build_push import MemoryEngine

    p = prepare(BuildRequest(matrix="smoke"), project_of=lambda _: PROJECT, hold=lambda *_: None)
    cells = [c.id for c in p.plan.cells]
    failed = [BuildError(f"cell {c}: failed") for c in ("a", "b", "c")]

    def run_build(matrix: Matrix, plan: BuildPlan, options: BuildOptions, **kw: Any) -> Any:
        assert (matrix, plan, options) == (p.matrix, p.plan, p.options)
        return [CellOutcome(cell=c, tag="t", fingerprint="f", status="failed") for c in cells], list(failed)

    monkeypatch.setattr("imagesmith.build.run_build", run_build)
    result = build(p, engine=MemoryEngine(registries={}, backend="buildkit"))
    assert isinstance(result, BuildResult)
    assert (result.matrix, result.backend, [o.cell for o in result.outcomes]) == ("smoke", "buildkit", cells)
    assert result.failure is failed[0]
    assert result.failure.message == "cell a: failed\n  (2 more cell(s) failed; see the summary)"
    summary = tmp_path / "build.json"
    notes: list[str] = []
    with pytest.raises(BuildError) as info:
        finish(BuildRequest(summary=summary), result, note=notes.append)
    assert info.value is failed[0]
    data = json.loads(summary.read_text())  # written before the failure ends the run
    assert (data["matrix"], data["backend"], [c["cell"] for c in data["cells"]]) == (
        "smoke",
        "buildkit",
        cells,
    )
    assert notes == [f"summary written to {summary}"]


def test_a_run_without_failures_ends_quietly_without_a_summary(tmp_path: Path) -> None:
    finish(BuildRequest(), BuildResult(matrix="smoke", backend="buildkit", outcomes=()))
    assert list(tmp_path.iterdir()) == []
