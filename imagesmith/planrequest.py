"""The plan and render commands' layer between their flags and the plan (issue 31): one typed request each
(:class:`PlanRequest`, :class:`RenderRequest`: what ``imagesmith plan`` / ``render`` was given), the rules
of the flags in one place (:func:`prepare_plan`, :func:`prepare_render`: every bad value or combination is
one error naming the flag — its ``field`` —, in a fixed order, before anything is planned or written), the
run (:func:`run_plan`, :func:`run_render`) and one typed result (:class:`PlanResult`, :class:`RenderResult`)
the command prints.

What only the command may do — find the project (the root's ``--project``) and hold its lock — it hands in
as functions (``project_of``, ``hold``); ``render`` says which folders under dockerfiles/ it leaves alone
line by line through ``echo`` (the command's ``typer.echo``). Nothing heavy is imported at module level:
``imagesmith --help`` loads this.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from imagesmith.errors import ConfigError, RenderError
from imagesmith.inputs import resolved

if TYPE_CHECKING:
    from imagesmith.layerplan import PlannedCell
    from imagesmith.matrix import Matrix
    from imagesmith.plan import BuildPlan
    from imagesmith.project import Project

#: ``--matrix`` → the project it is in (the command's: the root's ``--project``, ``$IMAGESMITH_PROJECT``)
ProjectOf = Callable[[str | None], "Project"]
#: (project, command) → hold the project's lock until the command ends (the command's resources)
Hold = Callable[["Project", str], None]


#: how a run says what it does: a line (the command's ``typer.echo``)
Echo = Callable[[str], Any]


def _silent(message: str) -> None:
    return None


# -- plan ----------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """What ``imagesmith plan`` was given: its flags as typed values (the defaults are the flags')."""

    matrix: str | None = None
    only: Sequence[str] = ()
    as_json: bool = False
    github: bool = False
    explain: bool = False


@dataclass(frozen=True, kw_only=True)
class PlannedMatrix:
    """A plan request the rules accepted: the project, the matrix and its plan (``--only`` applied)."""

    project: Project
    matrix: Matrix
    plan: BuildPlan


@dataclass(frozen=True, kw_only=True)
class PlanResult:
    """What ``plan`` shows: the matrix and its plan, how (``json``, ``github`` or the ``table``), and whether
    with the reasons (``--explain``)."""

    matrix: Matrix
    plan: BuildPlan
    view: Literal["json", "github", "table"]
    explain: bool

    def to_json(self) -> dict[str, Any]:
        """``--json``: ``{"cells": [...]}``; with ``--explain`` also the dropped combinations and the layer
        plan. ``--github``: the strategy matrix (:func:`github_matrix`)."""
        if self.view == "github":
            return github_matrix(self.plan)
        data = self.plan.to_json()
        if self.explain:
            data["dropped"] = [{"cell": d.combination, "reason": d.reason} for d in self.plan.dropped]
            data["layer_plan"] = layer_json(self.plan)
        return data


def prepare_plan(request: PlanRequest, *, project_of: ProjectOf) -> PlannedMatrix:
    """The rules of the flags, in one place and in this order: ``--json`` with ``--github``, ``--explain``
    with ``--github``, then the matrix (the project *project_of* finds) and ``--only`` (a glob matching no
    cell: exit 3)."""
    from imagesmith.buildrequest import load_plan

    r = request
    if r.as_json and r.github:
        raise ConfigError("--json and --github are exclusive", hint="pick one output format", field="--json")
    if r.explain and r.github:
        raise ConfigError(
            "--explain does not apply to --github: a strategy matrix has no place for dropped combinations",
            hint="run `imagesmith plan --explain` (or --json --explain) for the reasons, --github for CI",
            field="--explain",
        )
    project, m, plan = load_plan(project_of, r.matrix, r.only)
    return PlannedMatrix(project=project, matrix=m, plan=plan)


def run_plan(request: PlanRequest, p: PlannedMatrix) -> PlanResult:
    """The plan of *p*, to be shown as *request* asks (planning has no other effect)."""
    view: Literal["json", "github", "table"] = (
        "json" if request.as_json else "github" if request.github else "table"
    )
    return PlanResult(matrix=p.matrix, plan=p.plan, view=view, explain=request.explain)


def github_matrix(plan: BuildPlan) -> dict[str, Any]:
    """A GitHub Actions ``strategy.matrix``: one ``include`` entry per (cell, GPU family).

    ``gpu`` is the family key of a target GPU (``a100``, ``h200``): a nightly validates each cell on a
    runner of every GPU family the cell targets (runner label ``gpu-<gpu>``).
    """
    return {
        "include": [
            {
                "cell": c.id,
                "gpu": family,
                "tag": c.tag,
                "matrix": c.matrix,
                "torch": c.stack.torch,
                "cuda": c.stack.cuda,
                "variant": c.stack.variant,
                "python": c.runtime.python,
                "flavor": c.flavor,
                "dockerfile": c.publish.dockerfile,
                "fingerprint": c.publish.fingerprint,
            }
            for c in plan.cells
            for family in c.hardware.gpu_families
        ]
    }


def planned_cells(plan: BuildPlan) -> list[PlannedCell]:
    """The cells of *plan* that have a layer plan, as the layer planner takes them."""
    from imagesmith.layerplan import PlannedCell

    return [
        PlannedCell(
            id=c.id,
            python=c.runtime.python,
            base=c.bases.base_image,
            venv=c.runtime.venv,
            layers=c.publish.layers,
            # a renter tries another torch of the same CUDA variant and Python on the same OS: cells on
            # another base share no wheel layer by construction (the base is in the layer's key)
            group=f"{c.stack.variant} py{c.runtime.python} {c.bases.base_image}",
        )
        for c in plan.cells
        if c.publish.layers
    ]


def layer_json(plan: BuildPlan) -> dict[str, Any]:
    """``plan --json --explain``: which cells share each layer, and the matrix's estimate."""
    from imagesmith.layerplan import estimate, shared_layers

    cells = planned_cells(plan)
    sharing = shared_layers(cells)
    return {
        "sharing": {cid: {str(i): others for i, others in layers.items()} for cid, layers in sharing.items()},
        "estimate": estimate(cells).to_json(),
    }


# -- render --------------------------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class RenderRequest:
    """What ``imagesmith render`` was given: its flags as typed values (no ``--matrix``: every matrix)."""

    matrix: str | None = None
    check: bool = False


@dataclass(frozen=True, kw_only=True)
class RenderPrepared:
    """A render request the rules accepted: the project (its lock held unless ``--check``) and the
    matrices to render, each of the project's matrices/."""

    project: Project
    matrices: Sequence[Matrix]


@dataclass(frozen=True, kw_only=True)
class RenderResult:
    """What a render did: the files of the matrices, how many matrices; without ``--check`` the files
    written and removed (``--check`` writes nothing: a difference is its ``RenderError``)."""

    project: Project
    check: bool
    files: int
    matrices: int
    written: Sequence[Path] = ()
    removed: Sequence[Path] = ()


def prepare_render(request: RenderRequest, *, project_of: ProjectOf, hold: Hold) -> RenderPrepared:
    """The rules of the flags, in one place and in this order: the project (``--matrix`` names where it is;
    its lock is held from here on unless ``--check``), a matrix to render (none in the project: an error),
    each matrix read and in the project's matrices/ (what render writes into and compares with)."""
    from imagesmith.matrix import load_matrix

    r = request
    project = project_of(r.matrix)
    if not r.check:
        hold(project, "render")
    names = [r.matrix] if r.matrix else project.matrix_names()
    if not names:
        raise ConfigError(
            f"project {project.root}: no matrix in {project.rel(project.matrices_dir)}/",
            hint="add a matrix file there (`imagesmith init` writes a working example)",
            field="--matrix",
        )
    matrices = []
    for name in names:
        m = load_matrix(name, project=project)
        if resolved(m.path.parent) != project.matrices_dir:
            raise RenderError(
                f"{m.path}: render (and render --check) takes only matrices in "
                f"{project.rel(project.matrices_dir)}/ of project {project.root}: their files are rendered "
                f"into, and compared with, {project.dockerfiles_rel}/<matrix>/",
                hint=_render_elsewhere_hint(m.path, project),
                field="--matrix",
            )
        matrices.append(m)
    return RenderPrepared(project=project, matrices=tuple(matrices))


def run_render(request: RenderRequest, p: RenderPrepared, *, echo: Echo = _silent) -> RenderResult:
    """Render the matrices of *p*: their files compared with dockerfiles/ (``--check``: a ``RenderError``
    listing what differs) or written there; without ``--matrix`` the folders of matrices that are gone
    count too (their files are extra), and a folder imagesmith did not render is left (*echo* says so)."""
    from imagesmith.plan import build_plan
    from imagesmith.render import check_rendered, looks_rendered, matrix_dir, render_plan, write_rendered

    project = p.project
    rendered: dict[Path, str] = {}
    dirs: list[Path] = []
    for m in p.matrices:
        rendered.update(render_plan(build_plan(m, project=project), project))
        dirs.append(matrix_dir(m, project))
    count = len(dirs)
    if request.matrix is None:
        # folders of matrices that no longer exist are stale: all their files count as extra
        root = project.dockerfiles_dir
        known = {resolved(d) for d in dirs}
        for d in sorted(root.iterdir()) if root.is_dir() else []:
            if not d.is_dir() or resolved(d) in known:
                continue
            if looks_rendered(d):
                dirs.append(d)
            else:
                echo(f"left    {project.rel(d)} (not rendered by imagesmith: no GENERATED Dockerfile)")
    if request.check:
        check_rendered(rendered, dirs, project)
        return RenderResult(project=project, check=True, files=len(rendered), matrices=count)
    drift = write_rendered(rendered, dirs)
    return RenderResult(
        project=project,
        check=False,
        files=len(rendered),
        matrices=count,
        written=(*drift.missing, *drift.differing),
        removed=tuple(drift.extra),
    )


def _render_elsewhere_hint(path: Path, project: Project) -> str:
    from imagesmith.project import PROJECT_FILE, find_project_file

    owner = find_project_file(resolved(path).parent)
    if owner is not None and resolved(owner.parent) != project.root:
        return (
            f"the matrix belongs to the project at {owner.parent}: run `imagesmith -C {owner.parent} render "
            f"--matrix {path.stem}`"
        )
    return (
        f"copy the matrix into {project.rel(project.matrices_dir)}/ (its generated files are committed), "
        f"or make its folder's parent a project ({PROJECT_FILE}, `imagesmith init`); "
        f"`imagesmith plan --matrix {path}` shows its cells without rendering"
    )
