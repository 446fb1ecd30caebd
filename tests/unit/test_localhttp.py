"""The in-process test servers print nothing into the output the CLI under test shares with them, and "no
traceback of the CLI's own" is checked the same wherever the checkout lives (issue 38)."""

from __future__ import annotations

import ast
import http.client
import http.server
import socket
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from imagesmith import inputs
from tests.faultproxy import Action, Request, fault_proxy
from tests.localhttp import HANGUPS, QuietHTTPServer, cli_traceback

TESTS = Path(__file__).resolve().parents[1]
BIG = b"x" * (8 << 20)  # larger than the socket buffers: the writer is still writing when the client hangs up


class _Big(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        if self.path == "/boom":
            raise ValueError("a bug of the handler")
        self.send_response(200)
        self.send_header("Content-Length", str(len(BIG)))
        self.end_headers()
        for i in range(0, len(BIG), 1 << 16):
            self.wfile.write(BIG[i : i + (1 << 16)])


@contextmanager
def _server() -> Iterator[QuietHTTPServer]:
    server = QuietHTTPServer(("127.0.0.1", 0), _Big)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def _hang_up_after_headers(addr: str, path: str = "/") -> None:
    host, port = addr.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request("GET", path)
    try:
        resp = conn.getresponse()
        resp.read(10)
    except (http.client.HTTPException, OSError):
        pass
    # close with unread data pending: the kernel answers the server's next write with a reset
    sock = conn.sock
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    conn.close()


def _wait_for(pred: object, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if callable(pred) and pred():
            return
        time.sleep(0.02)


def test_a_client_hanging_up_is_recorded_never_printed(capfd: pytest.CaptureFixture[str]) -> None:
    with _server() as server:
        addr = f"127.0.0.1:{server.server_address[1]}"
        _hang_up_after_headers(addr)
        _wait_for(lambda: server.errors)
        assert server.errors, "the server's write after the hang-up did not fail"
        assert all(isinstance(e, HANGUPS) for e in server.errors), server.errors
        assert server.unexpected() == []
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")


def test_a_handler_bug_is_kept_as_unexpected_not_printed(capfd: pytest.CaptureFixture[str]) -> None:
    with _server() as server:
        addr = f"127.0.0.1:{server.server_address[1]}"
        _hang_up_after_headers(addr, "/boom")
        _wait_for(lambda: server.errors)
        assert [type(e) for e in server.unexpected()] == [ValueError]
    assert capfd.readouterr().err == ""


def test_the_fault_proxy_prints_nothing_when_the_client_refuses_an_answer(
    capfd: pytest.CaptureFixture[str],
) -> None:
    def swell(req: Request) -> Action | None:
        return Action("rewrite", rewrite=lambda _: BIG) if req.method == "GET" else None

    with _server() as up, fault_proxy(f"127.0.0.1:{up.server_address[1]}", rules=[swell]) as proxy:
        _hang_up_after_headers(proxy.addr)
        _wait_for(lambda: proxy.errors)
        assert proxy.errors, "the proxy's write after the hang-up did not fail"
        assert proxy.unexpected() == [], proxy.unexpected()
    assert capfd.readouterr().err == ""


def _imagesmith_traceback() -> str:
    try:
        inputs.is_digits(None)  # type: ignore[arg-type]  # a bug inside the package: a real frame of it
    except Exception:
        return traceback.format_exc()
    raise AssertionError("expected the call to fail")


def test_cli_traceback_finds_a_traceback_of_the_package() -> None:
    text = _imagesmith_traceback()
    assert cli_traceback("error: something\n" + text) is not None
    frames_only = "\n".join(x for x in text.splitlines() if not x.startswith("Traceback"))
    assert cli_traceback(frames_only) is not None, "a frame in the package without its header"


@pytest.mark.parametrize("checkout", ["/srv/imagesmith", "/home/u/imagesmith-main", "/tmp/x"])
def test_cli_traceback_does_not_depend_on_the_checkout_folder(checkout: str) -> None:
    # the words of a normal error naming files of a checkout called imagesmith are no traceback
    text = (
        f"error: registry swollen (127.0.0.1:1): {checkout}/imagesmith/release.py is not the point\n"
        f'fix: see {checkout}/tests/faultproxy.py, line 3, "File"\n'
    )
    assert cli_traceback(text) is None


def test_no_test_builds_an_http_server_that_prints_into_the_cli_output() -> None:
    """Every in-process HTTP/socket server of the tests is a quiet one (tests/localhttp.py): a class of
    ``http.server``/``socketserver`` built or subclassed directly prints handler tracebacks to stderr."""
    servers = {"HTTPServer", "ThreadingHTTPServer", "TCPServer", "ThreadingTCPServer", "ThreadingMixIn"}
    found: list[str] = []
    for path in sorted(TESTS.rglob("*.py")):
        if path.name == "localhttp.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            refs: list[ast.expr] = []
            if isinstance(node, ast.Call):
                refs = [node.func]
            elif isinstance(node, ast.ClassDef):
                refs = list(node.bases)
            for ref in refs:
                name = ref.attr if isinstance(ref, ast.Attribute) else getattr(ref, "id", "")
                if name in servers:
                    found.append(f"{path.relative_to(TESTS)}:{ref.lineno}")
    assert found == [], f"use tests.localhttp.QuietHTTPServer / QuietThreadingServer: {found}"
