"""CLI commands ``plan``, ``render`` and ``lock``. Registered on the root app by imagesmith.cli."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from imagesmith.errors import ConfigError, RenderError

if TYPE_CHECKING:
    from rich.console import Console

    from imagesmith.matrix import Matrix
    from imagesmith.plan import BuildPlan

# Heavy modules (matrix, plan, compat data, rich) are imported inside the commands so that
# `imagesmith pick` starts fast.
DEFAULT_MATRIX = "smoke"  # = imagesmith.matrix.DEFAULT_MATRIX (tests/test_plan.py checks they agree)

MATRIX_HELP = "Matrix name (matrices/NAME.toml) or path to a matrix file."


def load_plan(matrix: str, only: list[str] | None = None) -> tuple[Matrix, BuildPlan]:
    """Shared by ``build``: load a matrix, plan it, apply ``--only`` globs."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan

    m = load_matrix(matrix)
    plan = build_plan(m)
    return m, plan.select(only or [])


def _out() -> Console:
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True, width=200)


def plan_command(
    matrix: str = typer.Option(DEFAULT_MATRIX, "--matrix", "-m", help=MATRIX_HELP),
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
    from rich.table import Table

    m, plan = load_plan(matrix, only)
    if as_json:
        data = plan.to_json()
        if explain:
            data["dropped"] = [{"cell": d.combination, "reason": d.reason} for d in plan.dropped]
        typer.echo(json.dumps(data, indent=2))
        return
    if github:
        typer.echo(json.dumps(plan.github_matrix(), separators=(",", ":")))
        return
    console = _out()
    table = Table(title=f"matrix {m.name}: {len(plan.cells)} cell(s)", show_lines=False)
    for col in ("cell", "torch", "cuda", "min driver (full / minor-version)", "pins", "fingerprint"):
        table.add_column(col)
    for c in plan.cells:
        pins = f"{len(c.pins)}" + ("" if c.lock_verified else " (unverified)")
        table.add_row(
            c.id,
            f"{c.torch} / {c.torchvision} / {c.torchaudio or '-'}",
            f"{c.cuda} ({c.variant})",
            f"{c.min_driver.full} / {c.min_driver.minor_version}",
            pins,
            c.fingerprint[:12],
        )
    console.print(table)
    if explain:
        console.print(f"\ndropped {len(plan.dropped)} combination(s):")
        for d in plan.dropped:
            console.print(f"  {d.combination}: {d.reason}", markup=False)
    elif plan.dropped:
        console.print(f"({len(plan.dropped)} combination(s) dropped; --explain lists why)")


def _matrices(matrix: str | None) -> list[str]:
    from imagesmith.matrix import MATRICES_DIR, matrix_names

    return [matrix] if matrix else matrix_names(MATRICES_DIR)


def render_command(
    matrix: str | None = typer.Option(None, "--matrix", "-m", help=MATRIX_HELP + " Default: every matrix."),
    check: bool = typer.Option(False, "--check", help="Write nothing; fail listing files that differ."),
) -> None:
    """Render Dockerfiles and build contexts into dockerfiles/<matrix>/<cell>/."""
    from imagesmith.matrix import MATRICES_DIR, load_matrix
    from imagesmith.plan import REPO_ROOT, build_plan
    from imagesmith.render import check_rendered, matrix_dir, render_plan, write_rendered

    rendered: dict[Path, str] = {}
    dirs: list[Path] = []
    for name in _matrices(matrix):
        m = load_matrix(name)
        if m.path.parent.resolve() != MATRICES_DIR.resolve():
            raise RenderError(
                f"{m.path}: only matrices in {MATRICES_DIR} render into dockerfiles/",
                hint="copy the matrix into matrices/ (its generated files are committed)",
            )
        rendered.update(render_plan(build_plan(m)))
        dirs.append(matrix_dir(m))
    count = len(dirs)
    if matrix is None:
        # folders of matrices that no longer exist are stale: all their files count as extra
        root = REPO_ROOT / "dockerfiles"
        known = {d.resolve() for d in dirs}
        dirs += (
            [d for d in sorted(root.iterdir()) if d.is_dir() and d.resolve() not in known]
            if root.is_dir()
            else []
        )
    if check:
        check_rendered(rendered, dirs)
        typer.echo(f"dockerfiles/ is current ({len(rendered)} files, {count} matrices)")
        return
    drift = write_rendered(rendered, dirs)
    for label, paths in (("wrote", drift.missing + drift.differing), ("removed", drift.extra)):
        for p in paths:
            typer.echo(f"{label} {p.relative_to(REPO_ROOT)}")
    typer.echo(
        f"{len(rendered)} files for {count} matrices; {len(drift.missing) + len(drift.differing)} written"
    )


def lock_command(
    matrix: str = typer.Option(DEFAULT_MATRIX, "--matrix", "-m", help=MATRIX_HELP),
    force: bool = typer.Option(False, "--force", help="Re-resolve locks that exist already."),
) -> None:
    """Resolve exact transitive pins per (torch, variant, python) with uv into imagesmith/data/locks/."""
    from imagesmith import compat
    from imagesmith.lock import LockError, LockKey, compile_lock, lock_path
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import REPO_ROOT

    m = load_matrix(matrix)
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
    failures: list[str] = []
    for key in keys:
        path = lock_path(key)
        if path.exists() and not force:
            typer.echo(f"kept    {path.relative_to(REPO_ROOT)}")
            continue
        try:
            compile_lock(key)
        except LockError as exc:
            failures.append(exc.message.splitlines()[0].rstrip(":"))
            typer.echo(f"FAILED  {key}", err=True)
            continue
        typer.echo(f"wrote   {path.relative_to(REPO_ROOT)}")
    if failures:
        raise ConfigError(
            "could not lock " + "; ".join(failures),
            hint="run `imagesmith lock` where the variants' wheel indexes are reachable; "
            "until then those cells are dropped from the plan (see `imagesmith plan --explain`)",
        )


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("plan")(plan_command)
    app.command("render")(render_command)
    app.command("lock")(lock_command)
