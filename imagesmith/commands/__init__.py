"""Command modules; each exposes register(app).

:func:`current_project` is how a command gets its :class:`~imagesmith.project.Project`: the root's
``--project DIR`` option, else ``$IMAGESMITH_PROJECT``, else the first ``imagesmith.toml`` above the working
directory (or above a matrix file named by path).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

# its home is imagesmith.inputs: the stages' command layers (buildrequest) use it too
from imagesmith.inputs import check_output_file as check_output_file

if TYPE_CHECKING:
    from imagesmith.project import Project

#: the root command's ``--project`` value of the invocation running now (set by imagesmith.cli's callback,
#: which runs, and so resets it, on every invocation)
_PROJECT_OPTION: list[str | None] = [None]


#: every command's help ends with its examples and exit statuses; 1 is never a handled error: it means
#: imagesmith crashed (a bug, please report it with the traceback)
CRASH = "1 = imagesmith crashed (a bug: report it with the traceback)"
#: every command: Ctrl-C, SIGTERM and a reader of stdout that went away (the CLI edge, imagesmith.cli)
SIGNALS = (
    "130 = interrupted (Ctrl-C)",
    "143 = stopped (SIGTERM)",
    "141 = stdout closed by its reader (| head)",
)


def epilog(examples: list[str], codes: list[str]) -> str:
    """A command's help epilog: ``Examples: …`` then ``Exit status: …`` (2 = bad input is always there)."""
    return (
        "Examples: " + " ; ".join(examples) + ". Exit status: " + ", ".join([*codes, *SIGNALS, CRASH]) + "."
    )


def set_project_option(value: str | None) -> None:
    _PROJECT_OPTION[0] = value


def project_option() -> Path | None:
    """The root command's ``--project`` value, when a CLI invocation is running. An empty or blank one is an
    error (never "the working directory": ``-C "$UNSET_VAR"`` must not silently pick whatever project is
    here)."""
    from imagesmith.errors import ConfigError

    value = _PROJECT_OPTION[0]
    if value is not None and not value.strip():
        raise ConfigError(
            "--project is empty",
            hint="give the project root (the folder with imagesmith.toml), or leave --project/-C out",
        )
    return Path(value) if value is not None else None


def current_project(matrix: str | None = None) -> Project:
    """The project this command works in (see the module docstring)."""
    from imagesmith.errors import ConfigError
    from imagesmith.project import discover

    if matrix is not None and not matrix.strip():
        raise ConfigError(
            "--matrix is empty", hint="give a matrix NAME or the path of a matrix file, or leave --matrix out"
        )
    near = Path(matrix) if matrix and ("/" in matrix or matrix.endswith(".toml")) else None
    return discover(project_option(), near=near)


def hold_project(project: Project, command: str) -> None:
    """One writer at a time: hold *project*'s lock (imagesmith.projectlock) until the running command ends,
    however it ends (the click context lets go of it). Waits up to IMAGESMITH_LOCK_WAIT for another command
    that holds it, then fails naming that command and its pid."""
    from imagesmith import projectlock

    if _RESOURCES:  # a command function called outside the CLI (a test) takes no lock
        _RESOURCES[-1].enter_context(projectlock.hold(project.root, command=command))


#: what the running command holds until it ends (:func:`command_resources`, entered by imagesmith.cli)
_RESOURCES: list[contextlib.ExitStack] = []


@contextlib.contextmanager
def command_resources() -> Iterator[None]:
    """The block one command runs in (imagesmith.cli): what it holds (:func:`hold_project`) is let go when it
    ends, however it ends (an error, Ctrl-C, SIGTERM)."""
    with contextlib.ExitStack() as stack:
        _RESOURCES.append(stack)
        try:
            yield
        finally:
            _RESOURCES.remove(stack)
