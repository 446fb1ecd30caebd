"""Command-line entry point.

Commands live in ``imagesmith.commands.*``; each module registers its own commands on ``app``. This module is
the only place that catches ``ImagesmithError`` and turns it into one clear message and an exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperOption

from imagesmith import __version__
from imagesmith.commands import build as build_commands
from imagesmith.commands import compat as compat_commands
from imagesmith.commands import init as init_commands
from imagesmith.commands import keys as keys_commands
from imagesmith.commands import plan as plan_commands
from imagesmith.commands import refresh as refresh_commands
from imagesmith.commands import release as release_commands
from imagesmith.commands import sbom as sbom_commands
from imagesmith.commands import schema as schema_commands
from imagesmith.commands import set_project_option
from imagesmith.commands import validate as validate_commands
from imagesmith.errors import ImagesmithError

_display_type_rich = TyperOption.display_type_rich


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """Help shows no ``<bool>`` after an on/off flag: it takes no value."""
    return None if self.is_flag and not self.count else _display_type_rich(self, ctx)


TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]

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
    keys_commands,
    sbom_commands,
    schema_commands,
    refresh_commands,
):
    _module.register(app)


def _command_of(application: typer.Typer, argv: Sequence[str], prog: str) -> str:
    """``imagesmith plan`` for ``-C DIR plan --json``: what a fix line tells the user to ask --help of."""
    names = {c.name for c in application.registered_commands if c.name}
    return next((f"{prog} {a}" for a in argv if a in names), prog)


def _run(application: typer.Typer, argv: Sequence[str] | None, prog: str) -> int:
    """Run *application*; every error is one ``error:`` line (the message) and one ``fix:`` line on stderr,
    without a traceback. Exit codes are the error's (errors.py); usage errors 2. An exception that is not
    imagesmith's is a bug: it propagates (traceback, exit 1)."""
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    args = list(argv) if argv is not None else sys.argv[1:]
    set_project_option(None)
    try:
        result = application(args=args, standalone_mode=False, prog_name=prog)
    except ImagesmithError as exc:
        # the message is plain text: build logs and TOML keys contain [brackets] that are not rich markup
        message, fix = exc.render()  # the one place an error becomes text
        hint = fix or f"see `{_command_of(application, args, prog)} --help`"
        err.print(f"[bold red]error:[/] {escape(message)}\n  fix: {escape(hint)}", markup=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        err.print("error: aborted\n  fix: run the command again to finish it", markup=False)
        return 130
    except OSError as exc:
        # a path given on the command line that the OS refuses (too long, a folder for a file, no permission)
        # where no command checked it first: still one error and one fix, exit 2 (bad input)
        where = f"{str(exc.filename)[:200]}: " if exc.filename else ""
        command = _command_of(application, args, prog)
        err.print(
            f"error: {where}{exc.strerror or exc}\n  fix: check that path (see `{command} --help`)",
            markup=False,
        )
        return 2
    except typer.TyperException as exc:  # usage errors: missing/unknown option, bad value
        command = _command_of(application, args, prog)
        ctx = getattr(exc, "ctx", None)
        usage = f" (usage: {ctx.get_usage().removeprefix('Usage: ').strip()})" if ctx is not None else ""
        message = " ".join(exc.format_message().split())
        err.print(f"error: {message}\n  fix: see `{command} --help`{usage}", markup=False)
        return exc.exit_code if exc.exit_code not in (0, 1) else 2
    return result if isinstance(result, int) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return the exit code. Errors are printed once, to stderr, without a traceback."""
    return _run(app, argv, "imagesmith")


#: ``imagesmith-validate`` (baked into every image): the validate command as a program of its own, so that its
#: usage line is one that works (``imagesmith-validate [OPTIONS] [TARGET]``)
validate_app = typer.Typer(
    name="imagesmith-validate",
    add_completion=False,
    pretty_exceptions_enable=False,
)
validate_commands.register(validate_app)


def validate_main(argv: Sequence[str] | None = None) -> int:
    """``imagesmith-validate ARGS`` = ``imagesmith validate ARGS``, with its own usage line."""
    return _run(validate_app, argv, "imagesmith-validate")


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
