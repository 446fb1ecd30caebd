"""CLI commands ``build`` and ``fetch-sources``. Registered on the root app by imagesmith.cli."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from imagesmith.commands import current_project, epilog, hold_project
from imagesmith.commands.flags import FromGit, FromPaths, OneMatrix, SourceMatrices, SourceMirrors

if TYPE_CHECKING:
    from imagesmith.build import Reporter
    from imagesmith.buildrequest import BuildResult
    from imagesmith.engine import BuildEvent


def _human(n: int) -> str:
    value = float(n)
    for unit in ("B", "kB", "MB", "GB"):
        if value < 1000 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1000
    return f"{n} B"  # pragma: no cover


BUILD_EPILOG = epilog(
    [
        "imagesmith build --matrix smoke",
        "imagesmith build --matrix a100 --only '*cu130*' --push -j 2 --summary build.json",
    ],
    [
        "0 = every cell built or skipped",
        "2 = bad matrix, project or flags, or the matrix plans no cell (every combination dropped)",
        "3 = --only matched no cell",
        "5 = a build failed, no Docker engine, or a pinned source is not cached",
        "6 = a push failed",
        "9 = a registry refused (auth, denied, unreachable)",
        "13 = a file could not be written whole (disk full, out of inodes, a link or no regular file there): "
        "the old one is left as it was",
        "14 = another imagesmith command holds the project's lock (it waits IMAGESMITH_LOCK_WAIT s first)",
    ],
)
FETCH_EPILOG = epilog(
    [
        "imagesmith fetch-sources",
        "imagesmith fetch-sources --from-git ../nccl-tests",
        "imagesmith fetch-sources --from archives/",
    ],
    [
        "0 = every pinned archive cached, checksums good",
        "2 = bad matrix, project or flags, or the matrix plans no cell (every combination dropped)",
        "5 = an archive could not be fetched or its sha256 differs",
    ],
)


def build_command(
    matrix: OneMatrix = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="Build only cells whose id matches this glob (repeatable)."),
    ] = None,
    push: Annotated[
        bool, typer.Option("--push", help="Push to the cell's registries (copied between them via the API).")
    ] = False,
    registries: Annotated[
        Path | None,
        typer.Option(
            "--registries",
            help="registries file the matrix's registry names are read from (default: a registries.toml "
            "beside the matrix, else the project's), e.g. the same names on registries you can reach.",
        ),
    ] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Cells built at the same time.")] = 1,
    force: Annotated[
        bool, typer.Option("--force", help="Build and push even when the fingerprint is already there.")
    ] = False,
    summary: Annotated[
        Path | None, typer.Option("--summary", help="Write a JSON summary to this file.")
    ] = None,
    extra_ca: Annotated[
        Path | None,
        typer.Option(
            "--extra-ca", help="PEM CA bundle trusted by pip during the build (TLS-intercepting proxies)."
        ),
    ] = None,
    registry_mirror: Annotated[
        list[str] | None,
        typer.Option(
            "--registry-mirror", help="HOST=PREFIX: pull base images of HOST from PREFIX (repeatable)."
        ),
    ] = None,
    wheels: Annotated[
        Path | None,
        typer.Option("--wheels", help="Copy these wheels (*.whl in DIR) into every build context's wheels/."),
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            "--backend",
            help="auto | buildkit (docker CLI) | sdk (Engine API: cannot build imagesmith's Dockerfiles, "
            "which use BuildKit's RUN --mount).",
        ),
    ] = "auto",
    allow_unhashed: Annotated[
        bool,
        typer.Option(
            "--allow-unhashed",
            help="Build cells whose lock has no sha256 for every pin (installed without --require-hashes).",
        ),
    ] = False,
    verify: Annotated[
        str | None,
        typer.Option(
            "--verify",
            help="How far copies trust blobs: head (default), read (re-read blobs a registry already "
            "holds), full (read, plus read back every copied blob; the nightly). "
            "Default: $IMAGESMITH_VERIFY.",
        ),
    ] = None,
) -> None:
    """Build (with --push: push) a matrix's images; cells whose fingerprint is already pushed are skipped."""
    from imagesmith.buildrequest import BuildRequest, build, engine_for, finish, prepare

    request = BuildRequest(
        matrix=matrix,
        only=tuple(only or ()),
        push=push,
        registries=registries,
        jobs=jobs,
        force=force,
        summary=summary,
        extra_ca=extra_ca,
        registry_mirror=tuple(registry_mirror or ()),
        wheels=wheels,
        backend=backend,
        allow_unhashed=allow_unhashed,
        verify=verify,
    )
    prepared = prepare(request, project_of=current_project, hold=hold_project)
    engine = engine_for(request)
    console = Console(stderr=True, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=True, highlight=False, width=200)
    m, plan, config = prepared.matrix, prepared.plan, prepared.options.config
    console.print(
        f"matrix [bold]{m.name}[/]: {len(plan.cells)} cell(s), engine backend {engine.backend}"
        + (", push" if push else "")
        + (f", mirrors {dict(config.registry_mirrors)}" if config.registry_mirrors else "")
    )
    progress = Progress(
        TextColumn("[bold]{task.fields[cell]}"),
        BarColumn(bar_width=20),
        TextColumn("{task.fields[phase]}"),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    with progress:
        tasks = {
            cell.id: progress.add_task("", cell=cell.id, phase="queued", detail="", total=None)
            for cell in plan.cells
        }
        result = build(prepared, engine=engine, report=_reporter(progress, tasks))
        for o in result.outcomes:
            progress.update(tasks[o.cell], phase=o.status, detail=o.reason, total=1, completed=1)
    _print_result(result)
    finish(request, result, note=console.print)


def _reporter(progress: Progress, tasks: dict[str, TaskID]) -> Reporter:
    """The progress line of each cell, told of its phases (an engine's step at most twice a second)."""
    last: dict[str, float] = {}

    def report(cell: str, phase: str, event: BuildEvent | None) -> None:
        now = time.monotonic()
        if event is not None and now - last.get(cell, 0.0) < 0.5:
            return
        last[cell] = now
        detail = ""
        total = None
        completed = None
        if event is not None:
            detail = f"{event.step[:60]}  ({event.steps_done} done, {event.steps_cached} cached"
            detail += f", {_human(event.bytes_done)})" if event.bytes_done else ")"
        if phase in ("failed",):
            completed, total = 1, 1
        progress.update(tasks[cell], phase=phase, detail=detail, total=total, completed=completed)

    return report


def _print_result(result: BuildResult) -> None:
    """The table of the cells (stdout), then why a cell was built when a base moved, and its notes."""
    table = Table(title=f"imagesmith build — {result.matrix}")
    for col in (
        "cell",
        "status",
        "digest",
        "size",
        "compressed",
        "build",
        "total",
        "cached",
        "pushed",
        "layers pushed/there",
        "copied",
    ):
        table.add_column(col)
    for o in result.outcomes:
        table.add_row(
            o.cell,
            o.status,
            o.digest[:19] if o.digest else "-",
            _human(o.size_uncompressed) if o.size_uncompressed else "-",
            _human(o.size_compressed) if o.size_compressed else "-",
            f"{o.build_s:.0f}s" if o.build_s else "-",
            f"{o.duration_s:.0f}s",
            f"{o.cached_steps}/{o.steps}" if o.steps else "-",
            _human(o.bytes_pushed_engine),
            f"{o.layers_pushed}/{o.layers_existing}" if o.layers_pushed or o.layers_existing else "-",
            _human(o.bytes_copied_api),
        )
    out = Console(highlight=False)
    if not out.is_terminal:  # logs and CI: do not squeeze the table into 80 columns
        out = Console(highlight=False, width=200)
    out.print(table)
    for o in result.outcomes:  # why a cell was built when a base moved; a base from escrow or made locally
        for line in ([o.reason] if o.base_moved else []) + o.notes:
            out.print(f"{o.cell}: {line}", markup=False)


def fetch_sources_command(
    matrix: SourceMatrices = None,
    from_git: FromGit = None,
    from_paths: FromPaths = None,
    mirror: SourceMirrors = None,
) -> None:
    """Fill the source cache (nccl-tests archives) pinned by the project's matrices; checks every sha256."""
    from imagesmith.sourcesrequest import SourcesRequest, fetch, prepare

    request = SourcesRequest(
        matrix=tuple(matrix or ()),
        from_git=from_git,
        from_paths=tuple(from_paths or ()),
        mirror=tuple(mirror or ()),
    )
    result = fetch(request, prepare(request, project_of=current_project), echo=typer.echo)
    typer.echo(f"source cache: {result.cache}")


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("build", epilog=BUILD_EPILOG)(build_command)
    app.command("fetch-sources", epilog=FETCH_EPILOG)(fetch_sources_command)
