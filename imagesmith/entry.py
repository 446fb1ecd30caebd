"""The console scripts' entry points, kept light: Ctrl-C while imagesmith is still importing (the first few
tenths of a second) ends like Ctrl-C at any later time — one ``aborted`` line, exit 130 — not a
KeyboardInterrupt traceback. Nothing heavy is imported before the ``try``."""

from __future__ import annotations

import sys

_ABORTED = "\nerror: aborted (Ctrl-C)\n  fix: run the command again to finish it\n"


def _exit_aborted() -> None:
    try:
        sys.stderr.write(_ABORTED)
        sys.stderr.flush()
    finally:
        sys.exit(130)


def run() -> None:
    """``imagesmith``."""
    try:
        from imagesmith.cli import main

        code = main()
    except KeyboardInterrupt:
        _exit_aborted()
    sys.exit(code)
