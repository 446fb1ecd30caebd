"""``imagesmith refresh-compat``: draft torch rows from PyPI, diff them against imagesmith/data/torch.toml."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from imagesmith import compat, drivertable, refresh
from imagesmith.commands.flags import (
    Boards,
    BoardsFile,
    DataFile,
    IndexUrl,
    NoArch,
    Offline,
    Record,
    RefreshJson,
    RefreshWrite,
    Releases,
)
from imagesmith.compatrequest import (
    BoardsResult,
    RefreshRequest,
    RefreshResult,
    prepare_refresh,
    run_boards,
    run_refresh,
)

EPILOG = (
    "Exit status: 0 = every checked field matches the data; "
    f"{refresh.EXIT_DIFFERENCES} = a field differs or PyPI has a release the data lacks (--boards: the "
    "clone's driver table gives another first driver, board or tag list than driver_table.toml; the weekly "
    "workflow opens a pull request then); 2 = bad flags or an incomplete --offline recording; "
    "12 = the package index or its file host could not be read; 130 = interrupted (Ctrl-C); 143 = stopped "
    "(SIGTERM); 141 = stdout "
    "closed by its reader (| head); 1 = imagesmith crashed (a bug: report it with the traceback). "
    "Examples: imagesmith refresh-compat --releases 2.10-2.15 ; "
    "imagesmith refresh-compat --no-arch --json ; imagesmith refresh-compat --write ; "
    "git clone https://github.com/NVIDIA/open-gpu-kernel-modules nv && imagesmith refresh-compat --boards nv"
)

DATA_FILE = Path(compat.__file__).parent.parent / "data" / "torch.toml"
BOARDS_FILE = Path(compat.__file__).parent.parent / "data" / drivertable.DATA_NAME


def _print_boards(b: BoardsResult, *, as_json: bool) -> None:
    """``--boards CLONE``: the differences from driver_table.toml, and the counts."""
    if as_json:
        typer.echo(json.dumps(b.to_json(), indent=2))
        return
    for d in b.differences:
        where = d.board or "tags"
        typer.echo(f"  ≠ {where}: {d.field}  data: {d.data} | clone: {d.clone}")
    if b.written:
        typer.echo(f"wrote: {b.boards_file}")
    derived = b.derived
    typer.echo(
        f"{len(derived.boards)} boards from {len(derived.tags_read)} release tags "
        f"({len(derived.tags_skipped)} out of order, skipped): "
        + (f"{len(b.differences)} differ" if b.differences else "the data agrees with the clone")
    )


def _echo_rows(result: refresh.Result) -> None:
    current = None
    for row in result.rows:
        if row.release != current:
            current = row.release
            d = result.drafts.get(row.release)
            where = f" (PyPI file {d.wheel.filename})" if d else ""
            typer.echo(f"torch {row.release}{where}")
        name = f"{row.variant} {row.field}" if row.variant else row.field
        mark = {"match": "=", "differs": "≠", "new": "+"}.get(row.status, "·")
        line = f"  {mark} {name:<20} data: {row.data or '-'}"
        if row.status != "not-checked" or row.pypi:
            line += f" | PyPI: {row.pypi or '-'}"
        line += f"  [{row.status}]"
        if row.note:
            line += f"  ({row.note})"
        typer.echo(line)
        if row.status in ("differs", "new") and row.source:
            typer.echo(f"      source: {row.source}")


def refresh_compat_command(
    releases: Releases = None,
    as_json: RefreshJson = False,
    write: RefreshWrite = False,
    no_arch: NoArch = False,
    index_url: IndexUrl = None,
    offline: Offline = None,
    record: Record = None,
    data_file: DataFile = DATA_FILE,
    boards: Boards = None,
    boards_file: BoardsFile = BOARDS_FILE,
) -> None:
    """Draft torch/torchvision/torchaudio rows from PyPI (Requires-Dist pins, cp tags, the CUDA arch list in
    the wheel's fatbins) and print where they differ from imagesmith's data. With --boards CLONE: every
    board's first driver from NVIDIA's driver table instead (no network)."""
    request = RefreshRequest(
        releases=releases,
        as_json=as_json,
        write=write,
        no_arch=no_arch,
        index_url=index_url,
        offline=offline,
        record=record,
        data_file=data_file,
        boards=boards,
        boards_file=boards_file,
    )
    prepared = prepare_refresh(request)
    if prepared.mode == "boards":
        board_result = run_boards(request, prepared)
        _print_boards(board_result, as_json=as_json)
        raise typer.Exit(board_result.exit_code)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = run_refresh(request, prepared, progress=progress)
    _print_refresh(result, as_json=as_json)
    raise typer.Exit(result.exit_code)


def _print_refresh(r: RefreshResult, *, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(r.to_json(), indent=2))
        return
    _echo_rows(r.result)
    for read in r.fatbin_reads:
        typer.echo(
            f"arch read: {read['file']}: {read['bytes_read'] / 1e6:.1f} MB of the wheel's "
            f"{read['wheel_bytes'] / 1e6:.1f} MB ({refresh.CUDA_LIBRARY}: "
            f"{read['member_compressed'] / 1e6:.1f} MB compressed), {read['seconds']} s"
        )
    if r.http is not None:
        typer.echo(f"read {r.http.bytes / 1e6:.1f} MB in {r.http.requests} requests")
    for line in r.written:
        typer.echo(f"wrote: {line}")
    counts = {s: sum(row.status == s for row in r.result.rows) for s in ("match", "differs", "new")}
    typer.echo(
        f"{counts['match']} match, {counts['differs']} differ, {counts['new']} new"
        + ("" if r.result.differs else ": the data agrees with PyPI")
    )


def register(app: typer.Typer) -> None:
    app.command("refresh-compat", epilog=EPILOG)(refresh_compat_command)
