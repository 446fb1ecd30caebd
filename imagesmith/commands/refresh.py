"""``imagesmith refresh-compat``: draft torch rows from PyPI, diff them against imagesmith/data/torch.toml."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import tomllib
import typer

from imagesmith import compat, drivertable, refresh
from imagesmith.errors import ConfigError

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


def _boards(clone: Path, boards_file: Path, *, as_json: bool, write: bool) -> None:
    """``--boards CLONE``: re-derive driver_table.toml from a clone of open-gpu-kernel-modules, and diff."""
    if write:
        from imagesmith.commands import check_output_file

        check_output_file(boards_file, "--boards-file")
    try:
        data = tomllib.loads(boards_file.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"{boards_file}: cannot read it as TOML ({exc})",
            hint="give the driver table (imagesmith/data/driver_table.toml) with --boards-file",
            file=str(boards_file),
        ) from None
    names = {n for g in compat.gpus() for n in (g.name, *g.smi_names)}
    derived = drivertable.derive(drivertable.read_clone(clone), names)
    diffs = drivertable.compare(drivertable.boards_from_data(data), derived)
    if write and diffs:
        boards_file.write_text(drivertable.render_toml(derived), encoding="utf-8")
    if as_json:
        payload = {
            "differs": bool(diffs),
            "differences": [d.to_json() for d in diffs],
            "tags_read": len(derived.tags_read),
            "tags_skipped": len(derived.tags_skipped),
            "boards": len(derived.boards),
            "written": bool(write and diffs),
        }
        typer.echo(json.dumps(payload, indent=2))
    else:
        for d in diffs:
            where = d.board or "tags"
            typer.echo(f"  ≠ {where}: {d.field}  data: {d.data} | clone: {d.clone}")
        if write and diffs:
            typer.echo(f"wrote: {boards_file}")
        typer.echo(
            f"{len(derived.boards)} boards from {len(derived.tags_read)} release tags "
            f"({len(derived.tags_skipped)} out of order, skipped): "
            + (f"{len(diffs)} differ" if diffs else "the data agrees with the clone")
        )
    raise typer.Exit(refresh.EXIT_DIFFERENCES if diffs else 0)


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
    releases: Annotated[
        str | None,
        typer.Option(
            "--releases",
            help="Minor versions to check: 2.10-2.15, 2.12 or 2.10- "
            "(default: the data's newest minor and later).",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the diff as JSON.")] = False,
    write: Annotated[
        bool,
        typer.Option(
            "--write",
            help="Write new releases and differing fields into torch.toml as verified = false, the PyPI file "
            "in their source (rows are never removed).",
        ),
    ] = False,
    no_arch: Annotated[
        bool,
        typer.Option(
            "--no-arch", help="Skip the arch lists (each one streams a few hundred MB of one wheel)."
        ),
    ] = False,
    index_url: Annotated[
        str | None,
        typer.Option(
            "--index-url",
            envvar="IMAGESMITH_INDEX_URL",
            help="A PEP 691 Simple API (default: $PIP_INDEX_URL, pip's configured index-url, else PyPI).",
        ),
    ] = None,
    offline: Annotated[
        Path | None,
        typer.Option("--offline", help="Replay a folder written by --record instead of reading the index."),
    ] = None,
    record: Annotated[
        Path | None,
        typer.Option("--record", help="Keep what was read (trimmed) in this folder, for --offline."),
    ] = None,
    data_file: Annotated[
        Path, typer.Option("--data-file", help="The torch.toml --write edits.", show_default=False)
    ] = DATA_FILE,
    boards: Annotated[
        Path | None,
        typer.Option(
            "--boards",
            help="Instead of PyPI: re-derive every board's first driver from this clone of "
            "NVIDIA/open-gpu-kernel-modules (its release tags, read with git) and diff it against "
            "driver_table.toml; with --write, rewrite that file.",
        ),
    ] = None,
    boards_file: Annotated[
        Path,
        typer.Option("--boards-file", help="The driver_table.toml --boards compares.", show_default=False),
    ] = BOARDS_FILE,
) -> None:
    """Draft torch/torchvision/torchaudio rows from PyPI (Requires-Dist pins, cp tags, the CUDA arch list in
    the wheel's fatbins) and print where they differ from imagesmith's data. With --boards CLONE: every
    board's first driver from NVIDIA's driver table instead (no network)."""
    if boards is not None:
        _boards(boards, boards_file, as_json=as_json, write=write)
    if write:
        from imagesmith.commands import check_output_file

        check_output_file(data_file, "--data-file")
    source: refresh.LiveSource | refresh.RecordedSource
    http = None
    if offline is not None:
        source = refresh.RecordedSource(offline)
    else:
        http = refresh.Http(verify=refresh.ca_bundle())
        url = refresh.check_index_url(index_url, "--index-url") if index_url else refresh.default_index_url()
        source = refresh.LiveSource(url, http, record)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    result = refresh.run(source, releases, arch=not no_arch, progress=progress)
    if isinstance(source, refresh.LiveSource):
        source.save_listings()
    changes = refresh.write(result, data_file) if write else []
    if as_json:
        payload = {
            "differs": result.differs,
            "rows": [r.to_json() for r in result.rows],
            "new_releases": result.new,
            "written": changes,
            "fatbin_reads": source.fatbin_reads,
            "bytes_read": http.bytes if http else 0,
        }
        typer.echo(json.dumps(payload, indent=2))
    else:
        _echo_rows(result)
        for read in source.fatbin_reads:
            typer.echo(
                f"arch read: {read['file']}: {read['bytes_read'] / 1e6:.1f} MB of the wheel's "
                f"{read['wheel_bytes'] / 1e6:.1f} MB ({refresh.CUDA_LIBRARY}: "
                f"{read['member_compressed'] / 1e6:.1f} MB compressed), {read['seconds']} s"
            )
        if http is not None:
            typer.echo(f"read {http.bytes / 1e6:.1f} MB in {http.requests} requests")
        for line in changes:
            typer.echo(f"wrote: {line}")
        counts = {s: sum(r.status == s for r in result.rows) for s in ("match", "differs", "new")}
        typer.echo(
            f"{counts['match']} match, {counts['differs']} differ, {counts['new']} new"
            + ("" if result.differs else ": the data agrees with PyPI")
        )
    raise typer.Exit(result.exit_code)


def register(app: typer.Typer) -> None:
    app.command("refresh-compat", epilog=EPILOG)(refresh_compat_command)
