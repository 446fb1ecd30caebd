"""One writer at a time: an advisory lock per project (``lock``, ``render``, ``build``, ``release``) and per
cache (``pick``'s trust store).

:func:`hold` takes an exclusive ``flock`` on a lock file (the project's ``.imagesmith.lock`` beside
imagesmith.toml; a cache's ``.imagesmith.lock`` in the cache folder) and writes who holds it (pid, command,
since when) into it. A second command waits for it up to ``IMAGESMITH_LOCK_WAIT`` seconds (default 30; 0:
do not wait), then fails with one :class:`~imagesmith.errors.BusyError`: "another imagesmith render (pid N)
holds …". The kernel lets go of the lock when its holder exits, however it exits (a kill, a crash): a lock
file that is left behind holds nothing, and the next command takes it. Re-entrant within one process (a
command that calls another stage's code takes the lock once).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from imagesmith import settings
from imagesmith.errors import BusyError, ConfigError, Fault

LOCK_FILE: Final[str] = ".imagesmith.lock"
DEFAULT_WAIT_S: Final[float] = 30.0
_POLL_S: Final[float] = 0.1
_held: dict[str, int] = {}


def wait_seconds() -> float:
    """``IMAGESMITH_LOCK_WAIT`` (seconds, 0 or more), else :data:`DEFAULT_WAIT_S`."""
    text = settings.get("IMAGESMITH_LOCK_WAIT")
    if text is None or text == "":
        return DEFAULT_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86400:
        raise ConfigError(
            f"IMAGESMITH_LOCK_WAIT={text!r} is not a number of seconds (0 to 86400)",
            hint="set it to how long a command waits for another one's lock, e.g. IMAGESMITH_LOCK_WAIT=30",
            field="IMAGESMITH_LOCK_WAIT",
        )
    return value


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        return "another imagesmith command"
    fields = dict(part.split("=", 1) for part in text.split() if "=" in part)
    command, pid = fields.get("command", "").replace("+", " "), fields.get("pid", "")
    if not pid:
        return "another imagesmith command"
    return f"another imagesmith {command or 'command'} (pid {pid})"


def command_name(argv: list[str] | None = None) -> str:
    """The imagesmith command this process runs (``render``, ``build``), for the holder line."""
    words = [a for a in (argv if argv is not None else sys.argv[1:]) if not a.startswith("-")]
    return words[0] if words else "command"


@contextlib.contextmanager
def hold(folder: Path, *, command: str | None = None, wait: float | None = None) -> Iterator[Path]:
    """Hold the lock of *folder* (a project root, a cache folder) for the block. See the module."""
    path = folder / LOCK_FILE
    key = str(path.resolve()) if folder.exists() else str(path)
    if key in _held:  # re-entrant: this process holds it already
        _held[key] += 1
        try:
            yield path
        finally:
            _held[key] -= 1
        return
    folder.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise ConfigError(
            f"cannot open the lock file {path}: {exc.strerror or exc}",
            hint=f"make {folder} writable (imagesmith takes a lock there so that two commands never write "
            "the same files at once)",
            file=str(path),
        ) from None
    try:
        budget = wait_seconds() if wait is None else wait
        deadline = time.monotonic() + budget
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise BusyError(
                        f"{_holder(fd)} holds {path}: waited {budget:g} s for it",
                        hint="wait for that command to finish and run this one again (or raise "
                        "IMAGESMITH_LOCK_WAIT); a lock whose holder was killed is let go at once",
                        file=str(path),
                        fault=Fault.BUSY,
                        transient=True,
                    ) from None
                time.sleep(_POLL_S)
        what = (command or command_name()).replace(" ", "+")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        with contextlib.suppress(OSError):  # who holds it: for the message of the next one only
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid={os.getpid()} command={what} since={stamp}\n".encode(), 0)
        _held[key] = 1
        try:
            yield path
        finally:
            del _held[key]
    finally:
        os.close(fd)  # lets go of the flock
