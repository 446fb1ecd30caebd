"""The build command's layer between its flags and the build stage (issue 31): one typed request
(:class:`BuildRequest`, what ``imagesmith build`` was given), the rules of the flags in one place
(:func:`prepare`: every bad value or combination is one error naming the flag, in a fixed order, before any
cell is built), the run (:func:`build`) and one typed result (:class:`BuildResult`) the command prints, and
the run's end (:func:`finish`: the summary, the first failure).

What only the command may do — find the project (the root's ``--project``) and hold its lock for as long as
the command runs — it hands in as functions (``project_of``, ``hold``), called where the rules reach them.
Nothing heavy is imported at module level: ``imagesmith --help`` loads this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesmith.errors import ConfigError, ImagesmithError, MatrixError

if TYPE_CHECKING:
    from imagesmith.build import BuildOptions, CellOutcome, Reporter
    from imagesmith.engine import ContainerEngine
    from imagesmith.matrix import Matrix
    from imagesmith.plan import BuildPlan
    from imagesmith.project import Project

BACKENDS = ("auto", "buildkit", "sdk")

#: ``--matrix`` → the project it is in (the command's: the root's ``--project``, ``$IMAGESMITH_PROJECT``)
ProjectOf = Callable[[str | None], "Project"]
#: (project, command) → hold the project's lock until the command ends (the command's resources)
Hold = Callable[["Project", str], None]


@dataclass(frozen=True, kw_only=True)
class BuildRequest:
    """What ``imagesmith build`` was given: its flags as typed values (the defaults are the flags')."""

    matrix: str | None = None
    only: Sequence[str] = ()
    push: bool = False
    registries: Path | None = None
    jobs: int = 1
    force: bool = False
    summary: Path | None = None
    extra_ca: Path | None = None
    registry_mirror: Sequence[str] = ()
    wheels: Path | None = None
    backend: str = "auto"
    allow_unhashed: bool = False
    verify: str | None = None


@dataclass(frozen=True, kw_only=True)
class Prepared:
    """A request the rules accepted: the project, the matrix and its plan (``--only`` applied), the options
    of the build."""

    project: Project
    matrix: Matrix
    plan: BuildPlan
    options: BuildOptions


@dataclass(frozen=True, kw_only=True)
class BuildResult:
    """What a build did: one outcome per cell, the engine backend it ran on, and the first failure (its
    message counting the other failed cells), raised by :func:`finish`."""

    matrix: str
    backend: str
    outcomes: Sequence[CellOutcome]
    failure: ImagesmithError | None = None


def load_plan(
    project_of: ProjectOf,
    matrix: str | None,
    only: Sequence[str] = (),
    registries_file: Path | None = None,
) -> tuple[Project, Matrix, BuildPlan]:
    """Find the project (*project_of*), load a matrix (its registries from *registries_file* when given),
    plan it, apply the ``--only`` globs."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan

    project = project_of(matrix)
    m = load_matrix(project.resolve_matrix_name(matrix), project=project, registries_file=registries_file)
    plan = build_plan(m, project=project)
    return project, m, plan.select(list(only))


def prepare(request: BuildRequest, *, project_of: ProjectOf, hold: Hold) -> Prepared:
    """The rules of the flags, in one place and in this order: ``--backend``, ``--registry-mirror`` and
    ``--extra-ca``, ``--summary`` (a file that can be written), the matrix, ``--only`` and ``--registries``
    (the project's lock is held from here on), a plan of no cell, ``--verify``, then the build's preflight
    (``--jobs``, ``--wheels``, current dockerfiles/, sources in the cache)."""
    from imagesmith.build import BuildOptions, preflight
    from imagesmith.config import load_config
    from imagesmith.inputs import check_output_file
    from imagesmith.registry import verify_level

    r = request
    if r.backend not in BACKENDS:
        raise ConfigError(
            f"--backend {r.backend!r}: expected auto, buildkit or sdk",
            hint="--backend auto picks for you",
            field="--backend",
        )
    config = load_config().with_overrides(mirrors=list(r.registry_mirror), extra_ca=r.extra_ca)
    if r.summary is not None:
        check_output_file(r.summary, "--summary")
    project, m, plan = load_plan(project_of, r.matrix, r.only, r.registries)
    hold(project, "build")
    if not plan.cells:
        raise MatrixError(
            f"matrix {m.name}: no cell to build, every combination is dropped: "
            + "; ".join(f"{d.combination}: {d.reason}" for d in plan.dropped[:3])
            + (f" (and {len(plan.dropped) - 3} more)" if len(plan.dropped) > 3 else ""),
            hint=f"change the matrix as the reason says; `imagesmith plan --matrix {m.name} --explain` lists "
            "every dropped combination",
        )
    options = BuildOptions(
        push=r.push,
        force=r.force,
        jobs=r.jobs,
        config=config,
        wheels_dir=r.wheels,
        project=project,
        verify=verify_level(r.verify or None),
        allow_unhashed=r.allow_unhashed,
    )
    preflight(m, plan, options)
    return Prepared(project=project, matrix=m, plan=plan, options=options)


def engine_for(request: BuildRequest) -> Any:
    """The Docker engine of ``--backend`` (EngineError when none answers)."""
    from imagesmith.engine import Engine

    return Engine(backend=request.backend)  # type: ignore[arg-type]


def build(p: Prepared, *, engine: ContainerEngine, report: Reporter | None = None) -> BuildResult:
    """Build (with ``--push``: push) the cells of *p* on *engine*, *report* told of each cell's phases."""
    from imagesmith.build import run_build

    if report is None:
        outcomes, errors = run_build(p.matrix, p.plan, p.options, engine=engine)
    else:
        outcomes, errors = run_build(p.matrix, p.plan, p.options, engine=engine, report=report)
    failure = errors[0] if errors else None
    if failure is not None and len(errors) > 1:
        failure.message += f"\n  ({len(errors) - 1} more cell(s) failed; see the summary)"
    return BuildResult(
        matrix=p.matrix.name,
        backend=str(getattr(engine, "backend", "")),
        outcomes=tuple(outcomes),
        failure=failure,
    )


def finish(
    request: BuildRequest, result: BuildResult, *, note: Callable[[str], Any] = lambda _: None
) -> None:
    """The end of a build, once its result is shown: ``--summary`` written (*note* says where), then the
    first failure raised (the exit status of the cell that failed)."""
    from imagesmith.build import write_summary

    if request.summary is not None:
        write_summary(request.summary, result.matrix, list(result.outcomes), result.backend)
        note(f"summary written to {request.summary}")
    if result.failure is not None:
        raise result.failure
