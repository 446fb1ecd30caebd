"""A small fault-injecting HTTP proxy for registry tests: 127.0.0.1 only, seeded randomness, bounded run
time.

Put it in front of a real registry (``FaultProxy(reg.addr)``) and point a client at ``proxy.addr``. Every
request is forwarded unchanged (``Host`` too, so the registry's ``Location`` headers lead back through the
proxy) unless a fault is chosen:

- random faults: ``error_rate`` answers HTTP 500 (half of them before forwarding, half after the registry did
  the work: the nastier case), ``drop_rate`` closes the connection without an answer (half before, half after
  forwarding);
- ``rules``: callables ``rule(request) -> Action | None`` evaluated first (scripted faults: cut a blob
  download in the middle, refuse one tag, stall, rewrite a body);
- ``outage(seconds)``: every connection is closed at once until then.

The proxy stops by itself after ``max_seconds`` (a hung test fails instead of hanging CI). ``log`` records
``(method, path, action)`` of every request. The proxy never prints: its handler threads run in the test's
own process, so their output would land in the CLI's captured stderr; their exceptions (a client that hung up
on an answer it refused, mostly) are kept in ``errors`` (``unexpected()``: all but hang-ups).
"""

from __future__ import annotations

import http.client
import http.server
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Literal

from tests.localhttp import HANGUPS, QuietThreadingServer

Kind = Literal[
    "forward",
    "error_before",
    "error_after",
    "drop_before",
    "drop_after",
    "cut",
    "stall",
    "status",
    "rewrite",
    "trickle",
]


@dataclass(frozen=True)
class Action:
    kind: Kind
    status: int = 500
    body: bytes = b""
    seconds: float = 0.0
    #: for ``rewrite``: the upstream body → the body sent to the client
    rewrite: Callable[[bytes], bytes] | None = None
    #: for ``status``: headers sent with the answer (``Retry-After``, ``Location``); for ``rewrite``: headers
    #: that replace the upstream's of the same name (``Docker-Content-Digest``; an empty value removes it)
    headers: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    n: int  # how many requests with this method and path kind came before (0-based)

    @property
    def kind(self) -> str:
        """``blob``, ``upload``, ``manifest``, ``tags`` or ``other``."""
        for k in ("/blobs/uploads", "/blobs/", "/manifests/", "/tags/"):
            if k in self.path:
                return {"/blobs/uploads": "upload", "/blobs/": "blob", "/manifests/": "manifest"}.get(
                    k, "tags"
                )
        return "other"


Rule = Callable[[Request], Action | None]


@dataclass
class FaultProxy:
    upstream: str
    error_rate: float = 0.0
    drop_rate: float = 0.0
    seed: int = 0
    max_seconds: float = 120.0
    rules: list[Rule] = field(default_factory=list)
    log: list[tuple[str, str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}
        self._down_until = 0.0
        self._server: QuietThreadingServer | None = None
        #: exceptions of the proxy's handler threads (recorded, never printed: the proxy shares stderr with
        #: the CLI under test); a client that hung up is expected, anything else is :meth:`unexpected`
        self.errors: list[BaseException] = []
        self.addr = ""

    # -- control ---------------------------------------------------------------------------------------------
    def outage(self, seconds: float) -> None:
        self._down_until = time.monotonic() + seconds

    def count(self, method: str, kind: str | None = None, action: str | None = None) -> int:
        with self._lock:
            return sum(
                1
                for m, p, a in self.log
                if m == method
                and (kind is None or Request(m, p, {}, 0).kind == kind)
                and (action is None or a == action)
            )

    def start(self) -> FaultProxy:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = 30

            def log_message(self, *args: object) -> None:
                return None

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def _drop(self) -> None:
                self.close_connection = True
                with suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

            def _trickle(
                self, status: int, headers: list[tuple[str, str]], body: bytes, every: float
            ) -> None:
                """The answer with its full length, its body one byte every *every* seconds (each read is
                quick: a read timeout never fires), until the proxy stops or the client hangs up."""
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    for i in range(len(body)):
                        if proxy._server is None:
                            break
                        self.wfile.write(body[i : i + 1])
                        self.wfile.flush()
                        time.sleep(every)
                except OSError:
                    pass
                self._drop()

            def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes, *, cut: bool) -> None:
                self.send_response(status)
                for k, v in headers:
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                length = next((v for k, v in headers if k.lower() == "content-length"), None)
                if self.command == "HEAD":
                    self.send_header("Content-Length", length or "0")
                else:
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body[: len(body) // 2] if cut else body)
                if cut:
                    self.wfile.flush()
                    self._drop()

            def _error(
                self, status: int = 500, body: bytes | None = None, extra: tuple[tuple[str, str], ...] = ()
            ) -> None:
                data = (
                    body
                    if body is not None
                    else json.dumps(
                        {"errors": [{"code": "UNKNOWN", "message": "fault injected by the test proxy"}]}
                    ).encode()
                )
                headers = [("Content-Type", "application/json")] if data else []
                self._reply(status, headers + list(extra), data, cut=False)

            def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
                conn = http.client.HTTPConnection(proxy.upstream, timeout=60)
                try:
                    headers = {
                        k: v
                        for k, v in self.headers.items()
                        if k.lower() not in ("connection", "transfer-encoding", "content-length")
                    }
                    if body or self.command in ("PUT", "PATCH", "POST"):
                        headers["Content-Length"] = str(len(body))
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read() if self.command != "HEAD" else b""
                    return resp.status, resp.getheaders(), data
                finally:
                    conn.close()

            def _handle(self) -> None:
                body = self._body()
                action = proxy._choose(self.command, self.path, dict(self.headers.items()))
                if time.monotonic() < proxy._down_until:
                    action = Action("drop_before")
                proxy._record(self.command, self.path, action.kind)
                if action.kind == "drop_before":
                    return self._drop()
                if action.kind == "error_before":
                    return self._error()
                if action.kind == "status":
                    return self._error(action.status, action.body, action.headers)
                if action.kind == "stall":
                    time.sleep(action.seconds)
                    return self._drop()
                try:
                    status, headers, data = self._forward(body)
                except OSError:
                    return self._drop()
                if action.kind == "drop_after":
                    return self._drop()
                if action.kind == "error_after":
                    return self._error()
                if action.kind == "trickle":
                    return self._trickle(status, headers, data, action.seconds)
                if action.kind == "rewrite" and action.rewrite is not None:
                    data = action.rewrite(data)
                if action.kind == "rewrite" and action.headers:
                    names = {k.lower() for k, _ in action.headers}
                    headers = [(k, v) for k, v in headers if k.lower() not in names]
                    headers += [(k, v) for k, v in action.headers if v]  # an empty value removes the header
                self._reply(status, headers, data, cut=action.kind == "cut")

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

        self._server = QuietThreadingServer(("127.0.0.1", 0), Handler)
        self.errors = self._server.errors
        self.addr = f"127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        timer = threading.Timer(self.max_seconds, self.stop)
        timer.daemon = True
        timer.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def unexpected(self) -> list[BaseException]:
        """The handler errors that are not a client hanging up (a bug of the proxy or of the test)."""
        return [e for e in list(self.errors) if not isinstance(e, HANGUPS)]

    # -- decisions -------------------------------------------------------------------------------------------
    def _record(self, method: str, path: str, action: str) -> None:
        with self._lock:
            self.log.append((method, path.split("?", 1)[0], action))

    def _choose(self, method: str, path: str, headers: dict[str, str]) -> Action:
        with self._lock:
            key = (method, Request(method, path, {}, 0).kind)
            n = self._counts.get(key, 0)
            self._counts[key] = n + 1
            req = Request(method, path, headers, n)
            for rule in self.rules:
                action = rule(req)
                if action is not None:
                    return action
            r = self._rng.random()
            if r < self.error_rate:
                return Action("error_before" if self._rng.random() < 0.5 else "error_after")
            if r < self.error_rate + self.drop_rate:
                return Action("drop_before" if self._rng.random() < 0.5 else "drop_after")
            return Action("forward")


@contextmanager
def fault_proxy(upstream: str, **kw: object) -> Iterator[FaultProxy]:
    proxy = FaultProxy(upstream, **kw).start()  # type: ignore[arg-type]
    try:
        yield proxy
    finally:
        proxy.stop()
