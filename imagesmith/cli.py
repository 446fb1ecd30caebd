"""Command-line entry point.

Commands live in ``imagesmith.commands.*``; each module registers its own commands on ``app``. This module is
the only place that catches ``ImagesmithError`` and turns it into one clear message and an exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer
from rich.console import Console
from rich.markup import escape

from imagesmith import __version__
from imagesmith.commands import build as build_commands
from imagesmith.commands import compat as compat_commands
from imagesmith.commands import init as init_commands
from imagesmith.commands import plan as plan_commands
from imagesmith.commands import refresh as refresh_commands
from imagesmith.commands import release as release_commands
from imagesmith.commands import schema as schema_commands
from imagesmith.commands import set_project_option
from imagesmith.commands import validate as validate_commands
from imagesmith.errors import ImagesmithError

app = typer.Typer(
    name="imagesmith",
    help="Build, push and prove GPU training images from a driver/CUDA/PyTorch compatibility matrix.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"imagesmith {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version."
    ),
    project: str | None = typer.Option(
        None,
        "--project",
        "-C",
        help="Project root (folder with imagesmith.toml). Default: $IMAGESMITH_PROJECT, else the first "
        "imagesmith.toml above the working directory.",
    ),
) -> None:
    """imagesmith: images people who rent GPUs by the hour pull first."""
    set_project_option(project)


for _module in (
    init_commands,
    compat_commands,
    plan_commands,
    build_commands,
    validate_commands,
    release_commands,
    schema_commands,
    refresh_commands,
):
    _module.register(app)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return the exit code. Errors are printed once, to stderr, without a traceback."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    set_project_option(None)
    try:
        result = app(args=list(argv) if argv is not None else None, standalone_mode=False)
    except ImagesmithError as exc:
        # the message is plain text: build logs and TOML keys contain [brackets] that are not rich markup
        err.print(f"[bold red]error:[/] {escape(str(exc))}", markup=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err.print("aborted")
        return 130
    except typer.TyperException as exc:
        show = getattr(exc, "show", None)
        if callable(show):
            show(file=sys.stderr)
        else:
            err.print(f"error: {exc.format_message()}")
        return exc.exit_code
    return result if isinstance(result, int) else 0


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
