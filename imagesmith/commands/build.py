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
from imagesmith.commands.plan import MATRIX_HELP
from imagesmith.errors import ConfigError

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
    matrix: Annotated[str | None, typer.Option("--matrix", "-m", help=MATRIX_HELP)] = None,
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
    matrix: Annotated[
        list[str] | None, typer.Option("--matrix", "-m", help=MATRIX_HELP + " Default: every matrix.")
    ] = None,
    from_git: Annotated[
        Path | None,
        typer.Option(
            "--from-git", help="Fill the cache from this local clone (git archive), not the network."
        ),
    ] = None,
    from_paths: Annotated[
        list[Path] | None,
        typer.Option(
            "--from",
            help="Fill the cache from this folder of archives or this archive file (.tar or .tar.gz), "
            "not the network (repeatable).",
        ),
    ] = None,
    mirror: Annotated[
        list[str] | None,
        typer.Option(
            "--mirror",
            help="URL template tried before the configured mirrors and the pinned URL, e.g. "
            "https://mirror.example/{url} (fields {url} {path} {host} {name} {version} {commit} {file}).",
        ),
    ] = None,
) -> None:
    """Fill the source cache (nccl-tests archives) pinned by the project's matrices; checks every sha256."""
    from imagesmith.config import load_config
    from imagesmith.matrix import load_matrix
    from imagesmith.project import check_mirror_template
    from imagesmith.sources import ensure_cached, nccl_tests_archive, sources_dir

    if from_git is not None and from_paths:
        raise ConfigError("--from-git and --from are exclusive", hint="give one local source")
    _check_local_sources(from_git, from_paths or [])
    project = current_project(matrix[0] if matrix else None)
    names = matrix or project.matrix_names()
    if not names:
        raise ConfigError(
            f"project {project.root}: no matrix in {project.rel(project.matrices_dir)}/",
            hint="add a matrix file (`imagesmith init` writes a working example)",
        )
    mirrors = [check_mirror_template(t, "--mirror") for t in mirror or []]
    mirrors += [*load_config().source_mirrors, *project.source_mirrors]
    seen: set[str] = set()
    for name in names:
        archive = nccl_tests_archive(load_matrix(name, project=project).nccl_tests)
        if archive.file_name in seen:
            continue
        seen.add(archive.file_name)
        path, how = ensure_cached(archive, from_git=from_git, from_paths=from_paths or (), mirrors=mirrors)
        typer.echo(f"{archive.label}: {path} ({how}, sha256 {archive.sha256[:16]}… ok)")
    typer.echo(f"source cache: {sources_dir()}")


def _check_local_sources(from_git: Path | None, from_paths: list[Path]) -> None:
    """--from and --from-git name what is on this machine: a path that is not there, or not a folder or a
    regular file (a FIFO, a device), is a bad flag (exit 2), found before any matrix is read."""
    from imagesmith.inputs import is_regular_file

    hint = "give a folder of source archives or one archive (nccl-tests-<commit>.tar.gz)"
    for given in from_paths:
        try:
            there, folder = given.exists(), given.is_dir()
        except OSError:
            there, folder = False, False
        if not there:
            raise ConfigError(f"--from {given}: no such file or folder", hint=hint)
        if not folder and not is_regular_file(given):
            raise ConfigError(f"--from {given}: neither a folder nor a regular file", hint=hint)
    if from_git is not None:
        try:
            folder = from_git.is_dir()
        except OSError:
            folder = False
        if not folder:
            raise ConfigError(
                f"--from-git {from_git}: not a folder", hint="give a local clone of nccl-tests (git clone …)"
            )


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("build", epilog=BUILD_EPILOG)(build_command)
    app.command("fetch-sources", epilog=FETCH_EPILOG)(fetch_sources_command)
