"""The console scripts' entry points, kept light: Ctrl-C or SIGTERM while imagesmith is still importing (the
first few tenths of a second) ends like one at any later time — one ``aborted`` line, exit 130 or 143 — not a
KeyboardInterrupt traceback or a silent death. Nothing heavy is imported before the ``try``."""

from __future__ import annotations

import signal
import sys
from typing import Any

_ABORTED = "\nerror: aborted ({})\n  fix: run the command again to finish it\n"


class _Terminated(BaseException):
    """SIGTERM before imagesmith.cli took over the signal."""


#: the signals our handler took (it may see its exception come out as another one: see :func:`run`)
_caught: set[int] = set()


def _terminated(signum: int, frame: Any) -> None:
    _caught.add(signum)
    raise _Terminated


def _exit_aborted(why: str = "Ctrl-C", code: int = 130) -> None:
    try:
        sys.stderr.write(_ABORTED.format(why))
        sys.stderr.flush()
    finally:
        sys.exit(code)


def run() -> None:
    """``imagesmith``."""
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, _terminated)
        from imagesmith.cli import main

        code = main()
        # the work is done: a SIGTERM from here on ends the process by default (never a traceback on the way)
        signal.signal(signal.SIGTERM, previous)
    except KeyboardInterrupt:
        _exit_aborted()
    except _Terminated:
        _exit_aborted("SIGTERM", 128 + signal.SIGTERM)
    except Exception:
        # raised inside the C code of an import, the handler's exception can come out as another one: the CI
        # saw _Terminated, raised while ssl.py's `from _ssl import RAND_egd` built its ImportError, end as
        # "TypeError: expected a message argument" (exit 1, a traceback). The SIGTERM still ends the run.
        if signal.SIGTERM in _caught:
            _exit_aborted("SIGTERM", 128 + signal.SIGTERM)
        raise
    sys.exit(code)
