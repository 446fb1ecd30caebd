"""CLI commands ``plan``, ``render`` and ``lock``. Registered on the root app by imagesmith.cli."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from imagesmith.commands import current_project, epilog, hold_project
from imagesmith.commands.flags import (
    MATRIX_HELP,
    EveryMatrix,
    OneMatrix,
    PlanExplain,
    PlanGithub,
    PlanJson,
    PlanOnly,
    RenderCheck,
)
from imagesmith.planrequest import github_matrix, planned_cells

if TYPE_CHECKING:
    from rich.console import Console

    from imagesmith.layerplan import PullFigures
    from imagesmith.matrix import Matrix
    from imagesmith.plan import BuildPlan
    from imagesmith.planrequest import PlanResult, RenderResult
    from imagesmith.project import Project

__all__ = ["MATRIX_HELP", "github_matrix", "load_plan"]

# Heavy modules (matrix, plan, compat data, rich) are imported inside the commands so that
# `imagesmith pick` starts fast.


def load_plan(
    matrix: str | None, only: list[str] | None = None, registries_file: Path | None = None
) -> tuple[Project, Matrix, BuildPlan]:
    """Find the project, load a matrix (its registries from *registries_file* when given), plan it, apply
    ``--only`` globs (:func:`imagesmith.buildrequest.load_plan` in the command's project)."""
    from imagesmith import buildrequest

    return buildrequest.load_plan(current_project, matrix, only or (), registries_file)


def _out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, width=200)


PLAN_EPILOG = epilog(
    [
        "imagesmith plan --matrix a100 --explain",
        "imagesmith plan --github --only '*cu130*'",
        "imagesmith plan --matrix path/to/m.toml --json --explain",
    ],
    [
        "0 = planned",
        "2 = bad matrix, project or flags (--github with --json or --explain)",
        "3 = --only matched no cell",
    ],
)
RENDER_EPILOG = epilog(
    [
        "imagesmith render",
        "imagesmith render --check --matrix smoke",
        "imagesmith render --check --matrix matrices/smoke.toml",
    ],
    [
        "0 = written, or (--check) current",
        "2 = bad matrix or project",
        "4 = (--check) files differ, a template failed, or the matrix is outside the project's matrices/",
        "13 = a file could not be written whole (disk full, out of inodes, a link or no regular file there): "
        "the old one is left as it was",
        "14 = another imagesmith command holds the project's lock (it waits IMAGESMITH_LOCK_WAIT s first)",
    ],
)
LOCK_EPILOG = epilog(
    [
        "imagesmith lock --matrix a100",
        "imagesmith lock --matrix a100 --force",
        "imagesmith lock --matrix a100 --keep-versions",
        "imagesmith lock --sizes",
        "imagesmith lock --bases",
    ],
    [
        "0 = every lock written or kept",
        "2 = bad matrix or project, or a lock could not be resolved (uv), or the index URL is not one",
        "12 = (--sizes) the package index could not be read",
        "13 = a file could not be written whole (disk full, out of inodes, a link or no regular file there): "
        "the old one is left as it was",
        "14 = another imagesmith command holds the project's lock (it waits IMAGESMITH_LOCK_WAIT s first)",
    ],
)


def plan_command(
    matrix: OneMatrix = None,
    only: PlanOnly = None,
    as_json: PlanJson = False,
    github: PlanGithub = False,
    explain: PlanExplain = False,
) -> None:
    """Plan a matrix: the cells to build, with pins, drivers and fingerprints."""
    from imagesmith.planrequest import PlanRequest, prepare_plan, run_plan

    request = PlanRequest(
        matrix=matrix, only=tuple(only or ()), as_json=as_json, github=github, explain=explain
    )
    _print_plan(run_plan(request, prepare_plan(request, project_of=current_project)))


def _print_plan(result: PlanResult) -> None:
    """The plan as JSON (``--json``, ``--github``) or as a table, with ``--explain`` its reasons."""
    from rich.table import Table

    if result.view == "json":
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    if result.view == "github":
        typer.echo(json.dumps(result.to_json(), separators=(",", ":")))
        return
    m, plan = result.matrix, result.plan
    console = _out()
    table = Table(title=f"matrix {m.name}: {len(plan.cells)} cell(s)", show_lines=False)
    for col in ("cell", "torch", "cuda", "min driver (full / minor-version)", "pins", "fingerprint"):
        table.add_column(col)
    for c in plan.cells:
        pins = f"{len(c.lock.pins)}" + ("" if c.lock.lock_verified else " (unverified)")
        table.add_row(
            c.id,
            f"{c.stack.torch} / {c.stack.torchvision} / {c.stack.torchaudio or '-'}",
            f"{c.stack.cuda} ({c.stack.variant})",
            f"{c.hardware.min_driver.full} / {c.hardware.min_driver.minor_version}",
            pins,
            c.publish.fingerprint[:12],
        )
    console.print(table)
    if result.explain:
        _print_explain(console, m, plan)
    elif plan.dropped:
        console.print(f"({len(plan.dropped)} combination(s) dropped; --explain lists why)")


def _print_explain(console: Console, m: Matrix, plan: BuildPlan) -> None:
    """``plan --explain`` after the table: the builder, unhashed locks and bases per cell, the dropped
    combinations with their reasons, the layer plan."""
    console.print("\nnccl-tests builder per cell:")
    for c in plan.cells:
        console.print(f"  {c.id}: {c.toolkit.toolkit_note}", markup=False)
    unhashed = [c for c in plan.cells if not c.lock.hashed]
    if unhashed:  # a hand-written lock (an index unreachable where it was made) says so, per cell
        console.print(
            f"\n{len(unhashed)} cell(s) whose lock has no sha256 for every pin (build refuses them "
            "unless --allow-unhashed):"
        )
        for c in unhashed:
            console.print(
                f"  {c.id}: lock {Path(c.lock.lock_file).name}: "
                + (c.lock.lock_note or "no hashes")
                + f"; fix: imagesmith lock --matrix {m.name} --force where its index is reachable",
                markup=False,
            )
    console.print("\nbase images per cell:")
    for c in plan.cells:
        console.print(f"  {c.id}: {_bases_line(c)}", markup=False)
    console.print(f"\ndropped {len(plan.dropped)} combination(s):")
    for d in plan.dropped:
        console.print(f"  {d.combination}: {d.reason}", markup=False)
    _print_layers(console, plan)


def _bases_line(cell: Any) -> str:
    """``plan --explain``: how the cell's bases are pinned; "rebuilt: base X moved a…→b…" when one moved."""
    images = dict.fromkeys(
        i for i in (cell.bases.base_image, cell.bases.builder_image, cell.bases.devel_image) if i
    )
    pinned = dict(cell.bases.base_digests)
    if not pinned and not cell.bases.base_local:
        return ", ".join(images) + " by name (no locks/bases.toml: `imagesmith lock --bases` pins them)"
    parts = [
        f"{i} (pinned by the matrix)"
        if "@" in i
        else f"{i}@{pinned[i][:19]}…"
        if i in pinned
        else f"{i} (made locally: by name)"
        for i in images
    ]
    moved = cell.bases.moved_notes()
    return ", ".join(parts) + (f"; rebuilt: {'; '.join(moved)}" if moved else "")


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def _print_layers(console: Console, plan: BuildPlan) -> None:
    """``plan --explain``: each lock's layer plan (cells of one lock have the same one), the cells sharing
    each layer, and the totals."""
    from rich.table import Table

    from imagesmith.layerplan import KIND_TITLE, MIN_LAYER_BYTES, estimate, shared_layers

    cells = planned_cells(plan)
    if not cells:
        why = "no cell is planned" if not plan.cells else "torch comes from the base image"
        console.print(f"\nlayer plan: none ({why})")
        return
    sharing = shared_layers(cells)
    by_cell = {c.id: c for c in plan.cells}
    groups: dict[str, list[str]] = {}
    for c in cells:
        groups.setdefault(by_cell[c.id].lock.lock_file, []).append(c.id)
    lock_of = {cid: lock for lock, ids in groups.items() for cid in ids}
    console.print(
        f"\nlayer plan (a wheel of {MIN_LAYER_BYTES // 2**20} MiB or more gets its own layer; sizes from "
        "the locks' wheel-sizes.toml):"
    )
    for lock, ids in groups.items():
        first = by_cell[ids[0]]
        table = Table(title=f"{lock} — {', '.join(ids)}", title_justify="left")
        for col in ("#", "layer", "group", "compressed", "shared with (other locks: cells)"):
            table.add_column(col)
        for layer in first.publish.layers:
            others = [o for o in sharing[first.id][layer.index] if lock_of[o] != lock]
            per_lock: dict[str, int] = {}
            for o in others:
                per_lock[lock_of[o].rsplit("/", 1)[-1]] = per_lock.get(lock_of[o].rsplit("/", 1)[-1], 0) + 1
            size = _mb(layer.size) if layer.size else "-"
            if len(layer.unsized) > 2:
                size += f" (+ {len(layer.unsized)} unsized wheels)"
            elif layer.unsized:
                size += " (unsized: " + ", ".join(layer.unsized) + ")"
            table.add_row(
                str(layer.index),
                layer.label,
                KIND_TITLE[layer.kind],
                size,
                ", ".join(f"{k}: {v}" for k, v in sorted(per_lock.items())) or "-",
            )
        console.print(table)
    est = estimate(cells)

    def pulls(p: PullFigures, what: str) -> str:
        if not p.pairs:
            return f"  {what}: no such pair of cells"
        return (
            f"  {what} ({p.pairs} ordered pairs): {_mb(p.layered_mean)} vs {_mb(p.single_mean)} "
            f"({p.fraction:.2f}x; worst {_mb(p.layered_max)})"
        )

    console.print(
        f"totals over {est.cells} cell(s), wheel layers only (base, apt and venv layers are not planned):\n"
        f"  registry: {_mb(est.registry)} with the plan vs {_mb(est.single)} with one wheel layer per lock "
        f"({est.registry_fraction:.2f}x)\n"
        + pulls(est.second_pull, "a renter's second pull, mean over cells of different locks")
        + "\n"
        + pulls(est.second_pull_group, "… of the same CUDA variant, Python and base"),
        markup=False,
    )
    if est.unsized:
        console.print(
            f"  not counted (no recorded size): {', '.join(est.unsized)}; "
            "`imagesmith lock --sizes` records what the default index carries",
            markup=False,
        )


def render_command(matrix: EveryMatrix = None, check: RenderCheck = False) -> None:
    """Render Dockerfiles and build contexts into <project>/dockerfiles/<matrix>/<cell>/."""
    from imagesmith.planrequest import RenderRequest, prepare_render, run_render

    request = RenderRequest(matrix=matrix, check=check)
    prepared = prepare_render(request, project_of=current_project, hold=hold_project)
    _print_render(run_render(request, prepared, echo=typer.echo))


def _print_render(result: RenderResult) -> None:
    project = result.project
    if result.check:
        typer.echo(
            f"{project.dockerfiles_rel}/ is current ({result.files} files, {result.matrices} matrices)"
        )
        return
    for label, paths in (("wrote", result.written), ("removed", result.removed)):
        for p in paths:
            typer.echo(f"{label} {project.rel(p)}")
    typer.echo(f"{result.files} files for {result.matrices} matrices; {len(result.written)} written")


def lock_command(
    matrix: OneMatrix = None,
    force: bool = typer.Option(False, "--force", help="Re-resolve locks that exist already."),
    keep_versions: bool = typer.Option(
        False,
        "--keep-versions",
        help="Re-resolve existing locks with their own pins as constraints: adds --hash lines and applies "
        "new constraints (imagesmith/data/lock_constraints.toml) without moving any other version.",
    ),
    bases: bool = typer.Option(
        False,
        "--bases",
        help="Only pin the base, builder and devel images of the matrices (all of the project's, or "
        "--matrix) "
        "to digests in locks/bases.toml: one manifest HEAD per image through the registry-mirror map (a new "
        "or moved digest is read once more and must hash to itself); with "
        "bases.escrow in imagesmith.toml, copies each pinned base there by digest. Resolves no wheels.",
    ),
    sizes: bool = typer.Option(
        False,
        "--sizes",
        help="Only record the wheel sizes of every lock in locks/ (wheel-sizes.toml, for the layer plan) "
        "from the package index's JSON Simple API; resolves nothing.",
    ),
    no_sizes: bool = typer.Option(
        False,
        "--no-sizes",
        help="Do not record the sizes of the wheels of the locks written (by default they go into "
        "wheel-sizes.toml, so the layer plan sizes its layers).",
    ),
) -> None:
    """Resolve exact transitive pins (with sha256 hashes) per (torch, variant, python) with uv into the
    project's locks/."""
    from imagesmith.lockrequest import LockRequest, lock, prepare

    request = LockRequest(
        matrix=matrix, force=force, keep_versions=keep_versions, bases=bases, sizes=sizes, no_sizes=no_sizes
    )
    result = lock(request, prepare(request, project_of=current_project, hold=hold_project), echo=typer.echo)
    if result.failure is not None:
        raise result.failure


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("plan", epilog=PLAN_EPILOG)(plan_command)
    app.command("render", epilog=RENDER_EPILOG)(render_command)
    app.command("lock", epilog=LOCK_EPILOG)(lock_command)
