"""CLI commands ``plan``, ``render`` and ``lock``. Registered on the root app by imagesmith.cli."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from imagesmith.commands import current_project, epilog, hold_project
from imagesmith.errors import ConfigError, RenderError
from imagesmith.inputs import resolved

if TYPE_CHECKING:
    from rich.console import Console

    from imagesmith.layerplan import PlannedCell, PullFigures
    from imagesmith.matrix import Matrix
    from imagesmith.plan import BuildPlan
    from imagesmith.project import Project

# Heavy modules (matrix, plan, compat data, rich) are imported inside the commands so that
# `imagesmith pick` starts fast.

MATRIX_HELP = (
    "Matrix name (<project>/matrices/NAME.toml) or path to a matrix file. "
    "Default: the project's default_matrix."
)


def load_plan(
    matrix: str | None, only: list[str] | None = None, registries_file: Path | None = None
) -> tuple[Project, Matrix, BuildPlan]:
    """Find the project, load a matrix (its registries from *registries_file* when given), plan it, apply
    ``--only`` globs (:func:`imagesmith.buildrequest.load_plan` in the command's project)."""
    from imagesmith import buildrequest

    return buildrequest.load_plan(current_project, matrix, only or (), registries_file)


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
    matrix: str | None = typer.Option(None, "--matrix", "-m", help=MATRIX_HELP),
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Glob over cell ids ({a,b} allowed); repeatable.")
    ] = None,
    as_json: bool = typer.Option(False, "--json", help='Print {"cells": [...]} as JSON.'),
    github: bool = typer.Option(
        False, "--github", help="Print a GitHub Actions strategy matrix (include list)."
    ),
    explain: bool = typer.Option(
        False, "--explain", help="Also list every dropped combination with its reason."
    ),
) -> None:
    """Plan a matrix: the cells to build, with pins, drivers and fingerprints."""
    if as_json and github:
        raise ConfigError("--json and --github are exclusive", hint="pick one output format")
    if explain and github:
        raise ConfigError(
            "--explain does not apply to --github: a strategy matrix has no place for dropped combinations",
            hint="run `imagesmith plan --explain` (or --json --explain) for the reasons, --github for CI",
        )
    from rich.table import Table

    _, m, plan = load_plan(matrix, only)
    if as_json:
        data = plan.to_json()
        if explain:
            data["dropped"] = [{"cell": d.combination, "reason": d.reason} for d in plan.dropped]
            data["layer_plan"] = _layer_json(plan)
        typer.echo(json.dumps(data, indent=2))
        return
    if github:
        typer.echo(json.dumps(github_matrix(plan), separators=(",", ":")))
        return
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
    if explain:
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
    elif plan.dropped:
        console.print(f"({len(plan.dropped)} combination(s) dropped; --explain lists why)")


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


def _planned(plan: BuildPlan) -> list[PlannedCell]:
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


def _layer_json(plan: BuildPlan) -> dict[str, Any]:
    """``plan --json --explain``: which cells share each layer, and the matrix's estimate."""
    from imagesmith.layerplan import estimate, shared_layers

    cells = _planned(plan)
    sharing = shared_layers(cells)
    return {
        "sharing": {cid: {str(i): others for i, others in layers.items()} for cid, layers in sharing.items()},
        "estimate": estimate(cells).to_json(),
    }


def _mb(n: float) -> str:
    return f"{n / 1e6:,.0f} MB"


def _print_layers(console: Console, plan: BuildPlan) -> None:
    """``plan --explain``: each lock's layer plan (cells of one lock have the same one), the cells sharing
    each layer, and the totals."""
    from rich.table import Table

    from imagesmith.layerplan import KIND_TITLE, MIN_LAYER_BYTES, estimate, shared_layers

    cells = _planned(plan)
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


def render_command(
    matrix: str | None = typer.Option(None, "--matrix", "-m", help=MATRIX_HELP + " Default: every matrix."),
    check: bool = typer.Option(False, "--check", help="Write nothing; fail listing files that differ."),
) -> None:
    """Render Dockerfiles and build contexts into <project>/dockerfiles/<matrix>/<cell>/."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from imagesmith.render import check_rendered, looks_rendered, matrix_dir, render_plan, write_rendered

    project = current_project(matrix)
    if not check:
        hold_project(project, "render")
    names = [matrix] if matrix else project.matrix_names()
    if not names:
        raise ConfigError(
            f"project {project.root}: no matrix in {project.rel(project.matrices_dir)}/",
            hint="add a matrix file there (`imagesmith init` writes a working example)",
        )
    rendered: dict[Path, str] = {}
    dirs: list[Path] = []
    for name in names:
        m = load_matrix(name, project=project)
        if resolved(m.path.parent) != project.matrices_dir:
            raise RenderError(
                f"{m.path}: render (and render --check) takes only matrices in "
                f"{project.rel(project.matrices_dir)}/ of project {project.root}: their files are rendered "
                f"into, and compared with, {project.dockerfiles_rel}/<matrix>/",
                hint=_render_elsewhere_hint(m.path, project),
            )
        rendered.update(render_plan(build_plan(m, project=project), project))
        dirs.append(matrix_dir(m, project))
    count = len(dirs)
    if matrix is None:
        # folders of matrices that no longer exist are stale: all their files count as extra
        root = project.dockerfiles_dir
        known = {resolved(d) for d in dirs}
        for d in sorted(root.iterdir()) if root.is_dir() else []:
            if not d.is_dir() or resolved(d) in known:
                continue
            if looks_rendered(d):
                dirs.append(d)
            else:
                typer.echo(f"left    {project.rel(d)} (not rendered by imagesmith: no GENERATED Dockerfile)")
    if check:
        check_rendered(rendered, dirs, project)
        typer.echo(f"{project.dockerfiles_rel}/ is current ({len(rendered)} files, {count} matrices)")
        return
    drift = write_rendered(rendered, dirs)
    for label, paths in (("wrote", drift.missing + drift.differing), ("removed", drift.extra)):
        for p in paths:
            typer.echo(f"{label} {project.rel(p)}")
    typer.echo(
        f"{len(rendered)} files for {count} matrices; {len(drift.missing) + len(drift.differing)} written"
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


def lock_command(
    matrix: str | None = typer.Option(None, "--matrix", "-m", help=MATRIX_HELP),
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
