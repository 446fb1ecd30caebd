"""CLI commands ``plan``, ``render`` and ``lock``. Registered on the root app by imagesmith.cli."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from imagesmith.commands import current_project, epilog, hold_project
from imagesmith.errors import ConfigError, ImagesmithError, RenderError, UpstreamError, join_hints
from imagesmith.inputs import resolved

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from imagesmith.layerplan import PlannedCell, PullFigures
    from imagesmith.lock import LockKey
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
    """Shared by ``build``: find the project, load a matrix (its registries from *registries_file* when
    given), plan it, apply ``--only`` globs."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan

    project = current_project(matrix)
    m = load_matrix(project.resolve_matrix_name(matrix), project=project, registries_file=registries_file)
    plan = build_plan(m, project=project)
    return project, m, plan.select(only or [])


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
    from imagesmith import compat
    from imagesmith.lock import (
        LockError,
        LockKey,
        add_interactive,
        compile_lock,
        lock_path,
        read_lock,
        seal_lock,
    )
    from imagesmith.matrix import load_matrix

    project = current_project(matrix)
    hold_project(project, "lock")
    if sizes and no_sizes:
        raise ConfigError("--sizes and --no-sizes contradict each other", hint="give one of them")
    if bases:
        other = [
            f for f, on in (("--sizes", sizes), ("--force", force), ("--keep-versions", keep_versions)) if on
        ]
        if other:
            raise ConfigError(
                f"--bases and {other[0]} do not go together: --bases pins base images only",
                hint="run `imagesmith lock --bases` and the wheel lock as two commands",
            )
        _lock_bases(project, matrix)
        return
    if sizes:
        _record_sizes(project)
        return
    m = load_matrix(project.resolve_matrix_name(matrix), project=project)
    keys: list[LockKey] = []
    if m.torch.source == "base":
        keys = [LockKey(torch="suite", variant="any", python=p) for p in m.python.versions]
    else:
        combos = {(t, v, p) for t in m.torch.versions for v in m.torch.variants for p in m.python.versions}
        combos |= {(r.torch, r.variant, r.python) for r in m.include}
        for t, v, p in sorted(combos):
            release = compat.torch_release(t)
            if v in release.variants and release.python.contains(f"{p}.0"):
                keys.append(LockKey(torch=t, variant=v, python=p))
    # the interactive flavor's packages are a section of the same lock, resolved against its runtime pins
    interactive = "interactive" in m.flavors or any(r.flavor == "interactive" for r in m.include)
    failures: list[LockError] = []
    written: list[LockKey] = []
    for key in keys:
        path = lock_path(key, project.locks_dir)
        try:
            if path.exists() and keep_versions:
                existing = read_lock(key, project.locks_dir)
                with_section = interactive or (existing is not None and bool(existing.interactive_pins))
                # one write: the runtime, builder and interactive pins together (a kill leaves old or new)
                compile_lock(
                    key,
                    lock_dir=project.locks_dir,
                    keep=existing,
                    interactive=(existing or True) if with_section else False,
                )
                typer.echo(f"wrote   {project.rel(path)} (versions kept, hashes added)")
                written.append(key)
                continue
            if path.exists() and not force:
                try:
                    existing = read_lock(key, project.locks_dir)
                except LockError as exc:
                    if exc.problem != "cut short":
                        raise
                    _restore_lock(key, path, project, interactive=interactive)
                    written.append(key)
                    continue
                if existing is not None and not existing.sealed:
                    seal_lock(existing)
                    typer.echo(f"sealed  {project.rel(path)} (end line added; every pin as it was)")
                    existing = read_lock(key, project.locks_dir)
                if interactive and existing is not None and not existing.interactive_pins:
                    add_interactive(key, lock_dir=project.locks_dir)
                    typer.echo(f"added   {project.rel(path)} (interactive pins; runtime pins kept)")
                else:
                    typer.echo(f"kept    {project.rel(path)}")
                continue
            compile_lock(key, lock_dir=project.locks_dir, interactive=interactive)
        except LockError as exc:
            failures.append(exc)
            # the whole answer (uv's last lines: an unreachable index, a conflict) under the cell it stopped
            detail = "".join(f"\n        {line}" for line in exc.message.splitlines()[1:])
            typer.echo(f"FAILED  {key}{detail}", err=True)
            continue
        typer.echo(f"wrote   {project.rel(path)}")
        written.append(key)
    if written and not no_sizes:
        _record_sizes(project, keys=written, soft=True)
    if failures:
        raise ConfigError(
            "could not lock: " + "; ".join(e.message.splitlines()[0].rstrip(":") for e in failures),
            hint=join_hints(
                *(e.hint for e in failures),
                "until then those cells are dropped from the plan (see `imagesmith plan --explain`)",
            ),
        )


def _restore_lock(key: LockKey, path: Path, project: Project, *, interactive: bool) -> None:
    """A lock cut short (no end line): resolved again with every pin it still holds in full as a constraint
    (``--keep-versions`` on what survived), so no version it had moves; written whole."""
    from imagesmith.lock import compile_lock, salvage_lock

    text = path.read_text(encoding="utf-8", errors="replace")
    kept = salvage_lock(text, path, key)
    # its header says whether it had an interactive section (the section itself may be what was cut off)
    had = kept is not None and any(k == "interactive-command" for k, _ in kept.header)
    compile_lock(
        key,
        lock_dir=project.locks_dir,
        keep=kept,
        interactive=(kept or True) if interactive or had else False,
    )
    held = len(kept.pins + kept.builder_pins + kept.interactive_pins) if kept is not None else 0
    typer.echo(f"restored {project.rel(path)} (it was cut short: {held} whole pins kept, the rest resolved)")


def _lock_bases(project: Project, matrix: str | None) -> None:
    """``imagesmith lock --bases``: re-read every base image of the matrices into bases.toml."""
    import time

    from imagesmith import bases as b
    from imagesmith.config import load_config
    from imagesmith.matrix import load_matrix, load_registries
    from imagesmith.plan import matrix_bases

    config = load_config()
    known = (
        list(load_registries(project.registries_file).values()) if project.registries_file.is_file() else []
    )
    shown = f"{project.rel(project.locks_dir)}/{b.BASES_FILE}"
    lock = b.read_bases(project.locks_dir, shown)
    entries = dict(lock.entries) if lock else {}
    names = [matrix] if matrix else project.matrix_names()
    images = list(
        dict.fromkeys(image for n in names for _, image in matrix_bases(load_matrix(n, project=project)))
    )
    escrow = b.escrow_registry(project)
    failures: list[str] = []
    for image in images:
        old = entries.get(image)
        if old is not None and old.origin == "local":
            typer.echo(f"local   {image} (made on each machine: taken by name, not pinned)")
            continue
        started = time.monotonic()
        try:
            got = b.resolve(image, config, known=known, pinned=old.digest if old is not None else None)
        except ImagesmithError as exc:
            failures.append(f"{image}: {exc.message.splitlines()[0]}")
            typer.echo(f"FAILED  {image}: {exc.message.splitlines()[0]}", err=True)
            continue
        took = f"{(time.monotonic() - started) * 1000:.0f} ms"
        if b.own_digest(image) is not None:  # pinned by the matrix itself: checked, escrowed, no line
            new = b.BaseEntry(name=image, digest=got.digest, registry=got.where, read="")
            typer.echo(f"served  {image} (the matrix pins it by digest: no line in {shown}, {took})")
        elif old is None:
            new = entries[image] = b.refreshed(old, image, got)
            typer.echo(f"pinned  {image} {got.digest} (read from {got.where}, {took})")
        elif (new := b.refreshed(old, image, got)) is old:
            typer.echo(f"kept    {image} {got.digest} ({took})")
        else:
            entries[image] = new
            typer.echo(f"moved   {new.moved()} from {got.where} ({took})")
        if escrow is not None:
            try:
                ref, sent = b.escrow_copy(new, config, escrow, known=known)
            except ImagesmithError as exc:
                failures.append(f"{image}: escrow copy: {exc.message.splitlines()[0]}")
                typer.echo(f"FAILED  escrow copy of {image}: {exc.message.splitlines()[0]}", err=True)
                continue
            typer.echo(f"escrow  {ref} ({sent / 1e6:.1f} MB copied)")
    if (
        matrix is None
    ):  # every matrix read: a line none of them names pins nothing (a renamed or dropped base)
        for name in sorted(set(entries) - set(images)):
            typer.echo(
                f"unused  {name} (no matrix of the project names it: kept; delete the line if it is gone)"
            )
    path = b.write_bases(project.locks_dir, entries.values())
    typer.echo(f"wrote   {project.rel(path)} ({len(entries)} base(s))")
    if failures:
        raise ConfigError(
            "could not pin: " + "; ".join(failures),
            hint=b.LOCK_FIX
            + " (the other bases were written; the plan refuses a matrix with an unpinned base)",
        )


def _record_sizes(project: Project, *, keys: Sequence[LockKey] | None = None, soft: bool = False) -> None:
    """``imagesmith lock --sizes``: wheel-sizes.toml for every lock of the project's locks folder (*keys*:
    only those, merged into the table). *soft*: an index that does not answer is a warning, not an error
    (the locks were written; the plan then treats their wheels as unsized)."""
    from imagesmith import refresh
    from imagesmith.lock import lock_keys_in, read_lock
    from imagesmith.wheelsizes import collect_sizes, merge, read_sizes, write_sizes

    if keys is None:
        keys = lock_keys_in(project.locks_dir)
    locks = [lock for k in keys if (lock := read_lock(k, project.locks_dir)) is not None]
    if not locks:
        raise ConfigError(
            f"no lock files in {project.rel(project.locks_dir)} to size",
            hint="write them first: imagesmith lock --matrix NAME",
        )
    http = refresh.Http(verify=refresh.ca_bundle(), fix=refresh.Http.PIP_FIX)
    source = refresh.LiveSource(refresh.default_index_url(), http)

    class Lister:
        def files(self, name: str) -> list[tuple[str, int]]:
            return [(f.filename, f.size) for f in source.files(name)]

    try:
        rows, missing = collect_sizes(locks, Lister())
    except UpstreamError as exc:
        if not soft:
            raise
        typer.echo(
            f"warning: wheel sizes not recorded ({exc.message.splitlines()[0]}); the layer plan keeps only "
            "the CUDA, NCCL, torch and triton wheels apart until `imagesmith lock --sizes` runs where the "
            "index answers",
            err=True,
        )
        return
    path = write_sizes(project.locks_dir, merge(read_sizes(project.locks_dir), rows), missing)
    typer.echo(
        f"wrote   {project.rel(path)} ({len(rows)} wheels of {len(locks)} locks, "
        f"{http.requests} index requests, {http.bytes / 1e6:.1f} MB read)"
    )
    for pin in missing:
        typer.echo(
            f"unsized {pin}: not on the default index (its own layer if it is a CUDA, NCCL, torch, triton or "
            "+variant wheel, else in the small rest)"
        )


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("plan", epilog=PLAN_EPILOG)(plan_command)
    app.command("render", epilog=RENDER_EPILOG)(render_command)
    app.command("lock", epilog=LOCK_EPILOG)(lock_command)
