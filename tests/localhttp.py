"""HTTP servers for tests that run in the test's own process (127.0.0.1 only), and the check that a CLI's
captured output holds no traceback of its own.

An in-process server thread shares ``sys.stderr`` with the CLI the test runs (``run_cli`` captures the whole
process): socketserver's default ``handle_error`` prints a traceback there whenever a client hangs up early
(the client refused an oversized answer, timed out, or gave up) — output that is not the CLI's, and whose
file paths depend on where the checkout lives. :class:`QuietHTTPServer` keeps such errors in
``server.errors`` instead: a client hanging up is expected and only recorded; anything else is recorded
too, so a test can assert on it (``server.unexpected()``).

:func:`cli_traceback` is what "no traceback of the CLI's own" means, independent of the checkout's folder
name: a ``Traceback (most recent call last)`` header, or a frame line naming a file of the installed
``imagesmith`` package.
"""

from __future__ import annotations

import http.server
import socketserver
import sys
import threading
from pathlib import Path
from typing import Any

import imagesmith

#: errors of a client that went away: the server's answer was cut short by the other side, nothing to report
HANGUPS: tuple[type[BaseException], ...] = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)

_PACKAGE = str(Path(imagesmith.__file__).resolve().parent)


class QuietErrors:
    """Mixin for a ``socketserver`` server: handler exceptions go to ``self.errors``, never to stderr."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.errors: list[BaseException] = []
        self._errors_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def serve_forever(self, poll_interval: float = 0.05) -> None:
        """``shutdown()`` waits for the loop's next poll: every 0.05 s here, not socketserver's 0.5 s (half a
        second of nothing at the end of every test that stops a server)."""
        super().serve_forever(poll_interval)  # type: ignore[misc]  # a mixin: the server class is next in the MRO

    def handle_error(self, request: object, client_address: object) -> None:
        exc = sys.exc_info()[1]
        if exc is not None:
            with self._errors_lock:
                self.errors.append(exc)

    def unexpected(self) -> list[BaseException]:
        """The recorded handler errors that are not a client hanging up."""
        with self._errors_lock:
            return [e for e in self.errors if not isinstance(e, HANGUPS)]


class QuietHTTPServer(QuietErrors, http.server.ThreadingHTTPServer):
    """``http.server.ThreadingHTTPServer`` that records handler errors instead of printing them."""

    daemon_threads = True


class QuietThreadingServer(QuietErrors, socketserver.ThreadingMixIn, http.server.HTTPServer):
    """A threading HTTP server (``allow_reuse_address``) that records handler errors instead of printing."""

    daemon_threads = True
    allow_reuse_address = True


def cli_traceback(text: str) -> str | None:
    """The first line of *text* that shows a Python traceback of the CLI (a ``Traceback`` header, or a frame
    in a file of the imagesmith package), or None."""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("Traceback (most recent call last)"):
            return line
        if stripped.startswith('File "') and stripped[6:].startswith(_PACKAGE):
            return line
    return None
