"""Command-line entry point.

Commands live in ``imagesmith.commands.*``; each module registers its own commands on ``app``. This module is
the only place that catches ``ImagesmithError`` and turns it into one clear message and an exit code.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import sys
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from typer.core import TyperOption

from imagesmith import __version__
from imagesmith.commands import build as build_commands
from imagesmith.commands import command_resources, set_project_option
from imagesmith.commands import compat as compat_commands
from imagesmith.commands import init as init_commands
from imagesmith.commands import keys as keys_commands
from imagesmith.commands import plan as plan_commands
from imagesmith.commands import refresh as refresh_commands
from imagesmith.commands import release as release_commands
from imagesmith.commands import sbom as sbom_commands
from imagesmith.commands import schema as schema_commands
from imagesmith.commands import validate as validate_commands
from imagesmith.errors import ImagesmithError
from imagesmith.scrub import scrub

_display_type_rich = TyperOption.display_type_rich


def _flag_type(self: TyperOption, ctx: Any) -> str | None:
    """Help shows no ``<bool>`` after an on/off flag: it takes no value."""
    return None if self.is_flag and not self.count else _display_type_rich(self, ctx)


TyperOption.display_type_rich = _flag_type  # type: ignore[method-assign]


def _rich_broken_pipe(self: Console) -> None:
    """rich ends the process with exit status 1 (imagesmith's crash code) when stdout's reader goes away;
    imagesmith's closed-pipe rule (exit 141, quietly) is applied where every error is: in :func:`_run`."""
    raise BrokenPipeError


Console.on_broken_pipe = _rich_broken_pipe  # type: ignore[method-assign]

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


#: how many digits a number given on the command line may have: a count, a port, a second, a size in bytes
#: (build --jobs, validate --expect-count, --nccl-timeout) is never longer
MAX_FLAG_DIGITS = 12
#: how long a value typed for a flag may be: a path, a glob, a URL, a version (hidden flags, which imagesmith
#: passes to itself, are exempt)
MAX_FLAG_CHARS = 4096


_INT_FORM = re.compile(r"[+-]?[0-9]+")
_FLOAT_FORM = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _flag(param: Any) -> str:
    opts = [o for o in param.opts if o.startswith("--")] or list(param.opts)
    return opts[0] if opts and param.param_type_name == "option" else (param.name or "argument").upper()


def _check_raw_values(cmd: Any, opts: dict[str, Any], order: list[Any]) -> None:
    """The rules every command's flags follow, checked on what the user typed (before conversion, where
    ``Path("")`` would already be ``.``):

    * an empty or blank value of a text or path flag (or argument) is an error naming it — never "the working
      folder" or the default;
    * a flag that takes one value given twice is an error (the last would silently win);
    * a number that is not finite (nan, inf) or longer than :data:`MAX_FLAG_DIGITS` digits is an error;
    * a value longer than :data:`MAX_FLAG_CHARS` is an error (it would reach parsers and messages whole).
    """
    from imagesmith.errors import ConfigError

    seen: dict[str, int] = {}
    for param in order:
        seen[param.name] = seen.get(param.name, 0) + 1
    for param in cmd.params:
        flag = _flag(param)
        single = param.param_type_name == "option" and not (param.multiple or param.count or param.is_flag)
        if single and seen.get(param.name, 0) > 1:
            raise ConfigError(
                f"{flag} is given {seen[param.name]} times; it takes one value (the last would win)",
                hint=f"give {flag} once",
            )
        if param.name not in opts:
            continue
        raw = opts[param.name]
        values = raw if isinstance(raw, (list, tuple)) else [raw]
        annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
        for value in values:
            if not isinstance(value, str) or getattr(param, "is_flag", False):
                continue
            if not value.strip():
                raise ConfigError(
                    f"{flag} is empty", hint=f"give {flag} a value, or leave it out (see its --help)"
                )
            if len(value) > MAX_FLAG_CHARS and not getattr(param, "hidden", False):
                raise ConfigError(
                    f"{flag} {value[:40]}…: {len(value)} characters, more than any value of it has "
                    f"(at most {MAX_FLAG_CHARS})",
                    hint=f"give {flag} the real value (see its --help)",
                )
            control = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf")), None)
            if control is not None and not getattr(param, "hidden", False):
                raise ConfigError(
                    f"{flag} {value[:40]!r}: holds a control character ({control!r}), which no value of it "
                    "has (a newline or tab pasted with it?)",
                    hint=f"give {flag} the value alone, without line breaks or control characters",
                )
            if annotation in (int, float):
                text = value.strip().lower().lstrip("+-")
                if text in ("nan", "inf", "infinity"):
                    raise ConfigError(f"{flag} {value}: not a finite number", hint=f"give {flag} a number")
                digits = sum(c in "0123456789" for c in text)
                if digits > MAX_FLAG_DIGITS:
                    raise ConfigError(
                        f"{flag} {value[:20]}…: a number of {digits} digits, more than any real value has",
                        hint=f"give {flag} the real value (see its --help for the range)",
                    )
                # int() and float() also take '1_6', '٨' and (pydantic) '8.0' for an int: a flag's number is
                # written in plain ASCII decimal, as its --help shows
                form = _INT_FORM if annotation is int else _FLOAT_FORM
                if not form.fullmatch(value.strip()):
                    kind = "a whole number" if annotation is int else "a decimal number"
                    raise ConfigError(
                        f"{flag} {value[:40]!r}: not {kind} (ASCII digits 0-9"
                        + (")" if annotation is int else ", an optional . and exponent)"),
                        hint=f"give {flag} e.g. {'8' if annotation is int else '0.8'} (see its --help)",
                    )


def _harden(cmd: Any) -> None:
    """Give *cmd* (and its subcommands) :func:`_check_raw_values` before click converts the values."""
    original = cmd.parse_args

    def parse_args(ctx: Any, args: list[str]) -> Any:
        if not ctx.resilient_parsing and args:
            parser = cmd.make_parser(ctx)
            opts, _, order = parser.parse_args(args=list(args))
            _check_raw_values(cmd, opts, order)
        return original(ctx, args)

    cmd.parse_args = parse_args
    for sub in getattr(cmd, "commands", {}).values():
        _harden(sub)


#: the click command of each Typer app, built and hardened once per process: typer builds it from every
#: command's signature (tens of ms each time), and a process that calls :func:`main` again (the unit suite,
#: a few thousand times) gets the same command; click makes a new context for every call
_CLICK_COMMANDS: dict[int, tuple[typer.Typer, Any]] = {}


def _click_command(application: typer.Typer) -> Any:
    """``typer.main.get_command(application)`` with :func:`_harden` applied, made once for *application*."""
    cached = _CLICK_COMMANDS.get(id(application))
    if cached is None or cached[0] is not application:
        click_command = typer.main.get_command(application)
        _harden(click_command)
        cached = _CLICK_COMMANDS[id(application)] = (application, click_command)
    return cached[1]


def _tolerant_streams() -> None:
    """stdout and stderr that never raise on a character their encoding lacks (``PYTHONIOENCODING=ascii``, a
    C locale, a Windows console): ``✔`` becomes ``\\u2714`` there instead of a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if reconfigure is not None and encoding != "utf8" and getattr(stream, "errors", "") == "strict":
            with contextlib.suppress(ValueError, OSError):  # a stream that cannot change any more
                reconfigure(errors="backslashreplace")


def _run(application: typer.Typer, argv: Sequence[str] | None, prog: str) -> int:
    """Run *application*; every error is one ``error:`` line (the message) and one ``fix:`` line on stderr,
    without a traceback. Exit codes are the error's (errors.py); usage errors 2; Ctrl-C 130 with an
    ``aborted`` line. An exception that is not imagesmith's is a bug: it propagates (traceback, exit 1)."""
    _tolerant_streams()
    _sane_terminal_size()
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    args = list(argv) if argv is not None else sys.argv[1:]
    if sys.stdout is None:  # started with stdout closed (>&-): whatever the command prints would be lost
        err.print(
            "error: standard output is closed (>&-): what the command prints would be lost\n"
            "  fix: give it somewhere to write: a file (> out.txt), a pipe, or > /dev/null to discard it",
            markup=False,
        )
        return EXIT_OUTPUT_CLOSED
    set_project_option(None)
    previous = _catch_interrupts()
    try:
        click_command = _click_command(application)
        with command_resources():  # the project lock a command takes is let go however it ends
            result = click_command.main(args=args, standalone_mode=False, prog_name=prog)
    except _Interrupted as exc:
        return _aborted(exc.signum)
    except KeyboardInterrupt:
        return _aborted()
    except SystemExit as exc:
        # typer answers a closed pipe (EPIPE from click's echo) with sys.exit(1), imagesmith's crash code
        if exc.code == 1 and type(sys.stdout).__name__ == "PacifyFlushWrapper":
            return _broken_pipe()
        raise
    except ImagesmithError as exc:
        # the message is plain text: build logs and TOML keys contain [brackets] that are not rich markup
        message, fix = exc.render()  # the one place an error becomes text
        hint = fix or f"see `{_command_of(application, args, prog)} --help`"
        message, hint = shown_plain(scrub(message)), shown_plain(scrub(hint))  # issue 34: no credential shown
        err.print(f"[bold red]error:[/] {escape(message)}\n  fix: {escape(hint)}", markup=True)
        return exc.exit_code
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        return _aborted()
    except BrokenPipeError:
        return _broken_pipe()
    except OSError as exc:
        command = _command_of(application, args, prog)
        if not exc.filename and _working_folder_gone():
            err.print(
                "error: the working folder no longer exists (it was deleted or moved after the shell "
                "entered it)\n  fix: cd to an existing folder (cd .. or cd ~) and run the command again",
                markup=False,
            )
            return 2
        if not exc.filename and exc.errno in _WRITE_ERRNOS:
            # a write failed (> /dev/full, a disk or quota that filled up): no path is at fault
            _drop_buffered_output()
            err.print(
                f"error: cannot write: {exc.strerror or exc} (the output, or a file the command writes)\n"
                "  fix: free space where the output and the project's files go (df -h), or redirect the "
                "output elsewhere, then run the command again",
                markup=False,
            )
            return 2
        # a path given on the command line that the OS refuses (too long, a folder for a file, no permission)
        # where no command checked it first: still one error and one fix, exit 2 (bad input)
        where = f"{str(exc.filename)[:200]}: " if exc.filename else ""
        err.print(
            shown_plain(
                scrub(f"error: {where}{exc.strerror or exc}\n  fix: check that path (see `{command} --help`)")
            ),
            markup=False,
        )
        return 2
    except typer.TyperException as exc:  # usage errors: missing/unknown option, bad value
        command = _command_of(application, args, prog)
        ctx = getattr(exc, "ctx", None)
        usage = f" (usage: {ctx.get_usage().removeprefix('Usage: ').strip()})" if ctx is not None else ""
        message = shown_plain(scrub(" ".join(exc.format_message().split())))
        if not message:  # no command given: the help went to stdout above
            message = f"no command given: {prog} does nothing on its own"
        err.print(f"error: {message}\n  fix: see `{command} --help`{usage}", markup=False)
        return exc.exit_code if exc.exit_code not in (0, 1) else 2
    finally:
        _restore_handlers(previous)
    return result if isinstance(result, int) else 0


def shown_plain(text: str) -> str:
    """*text* for a terminal: every control character but the line break (an ANSI escape sequence that came
    with a value from a file, the environment, a registry or an index, a carriage return, a bell) written as
    its escape (``\\x1b``), so that what a message quotes can never recolour, move or clear the terminal."""
    if text.isprintable() or not any(unicodedata.category(c) in ("Cc", "Cf") and c != "\n" for c in text):
        return text
    return "".join(
        c.encode("unicode_escape").decode("ascii")
        if c != "\n" and unicodedata.category(c) in ("Cc", "Cf")
        else c
        for c in text
    )


def _sane_terminal_size() -> None:
    """``COLUMNS``/``LINES`` that are no size (``0``, ``-5``, ``abc``, ``٨٠``, twenty digits) are dropped
    before rich reads them: with ``COLUMNS=0`` rich printed every error as nothing at all (exit 2, empty
    stderr). Without them rich asks the terminal, else uses 80 columns."""
    for name in ("COLUMNS", "LINES"):
        value = os.environ.get(name)
        if value is not None and not (value.isascii() and value.isdigit() and 0 < int(value[:7]) <= 100_000):
            del os.environ[name]


def _working_folder_gone() -> bool:
    try:
        Path.cwd()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


#: exit status when standard output is closed at start: the invocation is wrong (as a bad flag is)
EXIT_OUTPUT_CLOSED = 2


#: errors of a write itself (no file name): a full disk or quota, a file too large, an I/O error
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


def _drop_buffered_output() -> None:
    """What is still buffered for a standard output that failed must not fail again at interpreter exit."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except (OSError, ValueError):
        _broken_pipe()


class _Interrupted(BaseException):
    """Ctrl-C (SIGINT) or SIGTERM (``kill``, ``docker stop``, a cancelled CI job) while a command runs. Not a
    KeyboardInterrupt: typer turns that into a silent exit 130, and the rule is one ``aborted`` line
    (:func:`_aborted`), whatever was running. Raised in the main thread, it unwinds every ``with`` block: a
    child process run through ``subprocess.run`` is killed and waited for, temp files are removed, locks let
    go."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signum)
        self.signum = signum


def _interrupted(signum: int, frame: Any) -> None:
    raise _Interrupted(signum)


#: the signals a command ends on as on Ctrl-C
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _catch_interrupts() -> dict[int, Any] | None:
    """SIGINT and SIGTERM raise :class:`_Interrupted` while :func:`_run` runs; returns the handlers to
    restore (None where no handler can be set: not the main thread). A signal its parent ignores stays
    ignored (``nohup``, a shell's background job)."""
    previous: dict[int, Any] = {}
    try:
        for signum in _STOP_SIGNALS:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                previous[signum] = signal.signal(signum, _interrupted)
    except ValueError:  # not the main thread
        return None
    return previous


def _restore_handlers(previous: dict[int, Any] | None) -> None:
    for signum, handler in (previous or {}).items():
        signal.signal(signum, handler)


def _aborted(signum: int = signal.SIGINT) -> int:
    """Ctrl-C or SIGTERM: the one ``aborted`` line, exit 128 + the signal (130, 143), whatever was
    running."""
    # after the first signal the next one kills (a second Ctrl-C while the unwinding waits on a child)
    for s in _STOP_SIGNALS:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(s, signal.SIG_DFL)
    why = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
    try:
        sys.stderr.write(f"\nerror: aborted ({why})\n  fix: run the command again to finish it\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return 128 + signum


#: what a command whose reader went away (``imagesmith plan | head -1``) exits with: 128 + SIGPIPE, as a Unix
#: tool killed by SIGPIPE does; quietly (the reader has what it wanted)
EXIT_BROKEN_PIPE = 141


def _broken_pipe() -> int:
    # what is still buffered for the closed pipe must not fail again at interpreter exit
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_BROKEN_PIPE


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return the exit code. Errors are printed once, to stderr, without a traceback."""
    code = _run(app, argv, "imagesmith")
    return _flushed(code)


def _flushed(code: int) -> int:
    """*code*, after stdout is flushed: output still buffered for a reader that went away is a closed pipe
    (exit 141, quietly), not a traceback at interpreter exit."""
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        return _broken_pipe()
    except (OSError, ValueError):
        pass
    return code


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
    return _flushed(_run(validate_app, argv, "imagesmith-validate"))


def run() -> None:
    """Console-script entry point."""
    sys.exit(main())
