"""Deadlines that hold (issue 37): a registry request phase (manifest GET/PUT/HEAD, tag list, token fetch),
pick's index download and a Docker engine call that stall end within their bound, with one error naming the
registry (or source, or command), the phase and the seconds — never a hang, never a bare ``ReadTimeout``.

The servers are :class:`~tests.localhttp.QuietHTTPServer` threads on loopback: one answers nothing (it reads
the request and waits), one sends its headers and the first bytes of the body, then waits. The deadlines are
set small through the settings seam (``IMAGESMITH_REGISTRY_STALL=1`` …) so the file runs in seconds."""

from __future__ import annotations

import http.server
import json
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from imagesmith.errors import BuildError, ConfigError, EngineError, Fault, RegistryError
from imagesmith.registry import RegistryClient
from imagesmith.registry.api import ManifestData
from tests.localhttp import QuietHTTPServer

STALL = 1.0
#: the slack a loaded CI machine gets on top of a bound (the stalls themselves are 1 s each)
SLACK = 2.5
#: how long a stalling handler waits before it lets go (the old code waited it out: longer than any bound)
HOLD = 12.0
REPO = "org/app"
DIGEST = "sha256:" + "0" * 64


class _Stalling:
    """A loopback server whose every answer stalls: ``silent`` (nothing at all) or ``headers`` (the status,
    the headers and 10 bytes of a 1000-byte body, then nothing); ``token`` challenges every ``/v2/`` request
    with a Bearer realm on itself, whose ``/token`` answers nothing."""

    def __init__(self, mode: str) -> None:
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return None

            def _stall(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if mode == "headers":
                    self.send_response(200 if self.command != "PUT" else 201)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Docker-Content-Digest", DIGEST)
                    self.send_header("Content-Length", "1000")
                    self.end_headers()
                    self.wfile.write(b'{"tags": [')
                    self.wfile.flush()
                outer.release.wait(HOLD)
                self.close_connection = True

            def _challenge(self) -> None:
                self.send_response(401)
                self.send_header(
                    "WWW-Authenticate", f'Bearer realm="http://{outer.addr}/token",service="test"'
                )
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _any(self) -> None:
                if mode == "token" and not self.path.startswith("/token"):
                    self._challenge()
                    return
                self._stall()

            do_GET = do_PUT = do_HEAD = _any

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[_Stalling]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.release.set()
            self.server.shutdown()
            self.server.server_close()


def _client(addr: str, deadline: float = 3.0, attempts: int = 1) -> RegistryClient:
    """One attempt unless the test is about retries (each stalled attempt costs a whole stall)."""
    env = {"IMAGESMITH_REGISTRY_STALL": str(STALL), "IMAGESMITH_REGISTRY_DEADLINE": str(deadline)}
    return RegistryClient(addr, insecure=True, attempts=attempts, backoff=0.1, env=env)


_MANIFEST = ManifestData(
    body=b'{"schemaVersion": 2}', media_type="application/vnd.oci.image.manifest.v1+json", digest=DIGEST
)
PHASES = {
    "manifest GET": lambda c: c.get_manifest(REPO, "v1"),
    "manifest PUT": lambda c: c.put_manifest(REPO, "v1", _MANIFEST),
    "manifest HEAD": lambda c: c.manifest_digest(REPO, "v1"),
    "tag list": lambda c: c.list_tags(REPO),
}


def _stalled(client: RegistryClient, call: object, bound: float) -> tuple[RegistryError, float]:
    start = time.monotonic()
    with pytest.raises(RegistryError) as info:
        call(client)  # type: ignore[operator]
    took = time.monotonic() - start
    assert took < bound + SLACK, f"took {took:.1f} s, the bound is {bound} s"
    return info.value, took


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_a_registry_that_never_answers_ends_each_phase_naming_the_stall(phase: str) -> None:
    with _Stalling("silent").running() as server:
        exc, _ = _stalled(_client(server.addr), PHASES[phase], 3.0)
    assert exc.phase == phase
    assert exc.stalled == STALL
    assert exc.registry == server.addr
    assert exc.fault is Fault.UNREACHABLE
    assert exc.transient
    assert f"no bytes for 1 s from registry {server.addr}" in exc.message
    assert "IMAGESMITH_REGISTRY_STALL" in (exc.hint or "")


@pytest.mark.parametrize("phase", ["manifest GET", "manifest PUT", "tag list"])
def test_a_registry_that_stops_mid_answer_ends_each_phase_naming_the_stall(phase: str) -> None:
    with _Stalling("headers").running() as server:
        exc, _ = _stalled(_client(server.addr), PHASES[phase], 3.0)
    assert (exc.phase, exc.stalled, exc.registry) == (phase, STALL, server.addr)
    assert f"no bytes for 1 s from registry {server.addr}" in exc.message
    assert "stopped after 10 bytes" in exc.message


def test_a_stalled_phase_is_retried_within_the_deadline() -> None:
    """The house rule: a stall is transient, tried again (2 attempts here), never past the deadline."""
    with _Stalling("silent").running() as server:
        exc, took = _stalled(
            _client(server.addr, deadline=30.0, attempts=2), PHASES["manifest GET"], 2 * STALL + 1
        )
    assert took >= 2 * STALL
    assert "gave up after 2 attempt(s)" in exc.message


def test_a_token_service_that_never_answers_ends_the_token_fetch() -> None:
    """The old token fetch waited the fixed 60 s read timeout, whatever the deadline said."""
    with _Stalling("token").running() as server:
        exc, _ = _stalled(_client(server.addr), PHASES["manifest GET"], 3.0)
    assert (exc.phase, exc.stalled) == ("token fetch", STALL)
    assert f"no bytes for 1 s from registry {server.addr}'s token service {server.addr}" in exc.message


# -- pick's index ----------------------------------------------------------------------------------------
@pytest.fixture
def index_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("IMAGESMITH_INDEX_STALL", str(STALL))
    monkeypatch.setenv("IMAGESMITH_INDEX_DEADLINE", "4")
    monkeypatch.setenv("IMAGESMITH_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("mode", ["silent", "headers"])
def test_a_stalling_index_download_ends_naming_the_source_and_the_stall(mode: str, index_env: None) -> None:
    from imagesmith.indextrust import Trust
    from imagesmith.pick.fetching import fetch_index

    with _Stalling(mode).running() as server:
        url = f"http://{server.addr}/index.json"
        start = time.monotonic()
        with pytest.raises(ConfigError) as info:
            fetch_index(url, insecure=True, trust=Trust(verify=False))
        took = time.monotonic() - start
    assert took < STALL + SLACK
    exc = info.value
    assert (exc.phase, exc.stalled, exc.fault) == ("index download", STALL, Fault.UNREACHABLE)
    assert f"{url}: no bytes for 1 s from {server.addr}" in exc.message
    assert "IMAGESMITH_INDEX_STALL" in (exc.hint or "")


def test_a_signature_download_that_stalls_is_named_as_such(index_env: None) -> None:
    from imagesmith.pick.fetching import _download_http

    with _Stalling("silent").running() as server, pytest.raises(ConfigError) as info:
        _download_http(f"http://{server.addr}/index.json.sig")
    assert info.value.phase == "index signature download"


def test_an_index_that_trickles_ends_at_the_whole_download_deadline(
    index_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes that keep coming restart the stall, never the download's own deadline."""
    monkeypatch.setenv("IMAGESMITH_INDEX_DEADLINE", "2")

    class Trickle(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(1 << 20))
            self.end_headers()
            for _ in range(40):
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.25)

    from imagesmith.pick.fetching import _download_http

    server = QuietHTTPServer(("127.0.0.1", 0), Trickle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        start = time.monotonic()
        with pytest.raises(ConfigError) as info:
            _download_http(f"http://127.0.0.1:{server.server_address[1]}/index.json")
        took = time.monotonic() - start
    finally:
        server.shutdown()
        server.server_close()
    assert took < 2 + SLACK
    assert "not complete within 2 s" in info.value.message
    assert info.value.phase == "index download"


# -- the Docker engine -----------------------------------------------------------------------------------
def _fake_docker(tmp_path: Path, script: str) -> Path:
    exe = tmp_path / "docker"
    exe.write_text("#!/bin/sh\n" + script)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return exe


def test_a_build_that_prints_nothing_for_the_stall_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A docker build that printed one line, then nothing (a step that hangs): killed after the stall, with
    one error naming it and the last line; the old code waited for the build however long it hung."""
    from imagesmith.engine import BuildKitCliBuilder, BuildRequest

    monkeypatch.setenv("IMAGESMITH_BUILD_STALL", str(STALL))
    exe = _fake_docker(tmp_path, f"echo '#1 [internal] load build definition'\nexec sleep {HOLD:.0f}\n")
    (tmp_path / "ctx").mkdir()
    request = BuildRequest(context=tmp_path / "ctx", tags=("x:1",), what="cell smoke")
    start = time.monotonic()
    with pytest.raises(BuildError) as info:
        BuildKitCliBuilder(str(exe)).build(request, None)
    assert time.monotonic() - start < STALL + SLACK
    exc = info.value
    assert (exc.phase, exc.stalled) == ("docker build", STALL)
    assert "build of cell smoke: no output for 1 s from docker build" in exc.message
    assert "last line: #1 [internal] load build definition" in exc.message
    assert "IMAGESMITH_BUILD_STALL" in (exc.hint or "")


def test_a_build_that_keeps_printing_is_not_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stall restarts on each line: 1.8 s of output every 0.3 s outlive a 1 s stall."""
    from imagesmith.engine import BuildKitCliBuilder, BuildRequest

    monkeypatch.setenv("IMAGESMITH_BUILD_STALL", str(STALL))
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    exe = _fake_docker(
        tmp_path,
        'i=0; while [ $i -lt 6 ]; do echo "#2 step $i"; sleep 0.3; i=$((i+1)); done\n'
        f'while [ $# -gt 1 ]; do [ "$1" = --iidfile ] && echo sha256:{"a" * 64} > "$2"; shift; done\n',
    )
    built = BuildKitCliBuilder(str(exe)).build(BuildRequest(context=ctx, tags=("x:1",)), None)
    assert built.image_id == "sha256:" + "a" * 64


class _HungEngine:
    """A Docker Engine API on loopback that answers its ping and version, and leaves every other call
    unanswered (a dockerd stuck on a lock)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return None

            def _answer(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Api-Version", "1.41")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                if self.path.endswith("/_ping"):
                    self._answer(b"OK")
                elif self.path.endswith("/version"):
                    self._answer(json.dumps({"ApiVersion": "1.41", "Version": "20.10.0"}).encode())
                else:
                    outer.release.wait(HOLD)
                    self.close_connection = True

            do_GET = do_POST = do_DELETE = _any

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"tcp://127.0.0.1:{self.server.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[_HungEngine]:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        try:
            yield self
        finally:
            self.release.set()
            self.server.shutdown()
            self.server.server_close()


ENGINE_CALLS = {
    "docker image inspect": lambda e: e.inspect("org/app:v1"),
    "docker tag": lambda e: e.tag("org/app:v1", "org/app:v2"),
    "docker push": lambda e: e.push("127.0.0.1:5999/org/app:v1", attempts=1),
}


@pytest.mark.parametrize("phase", sorted(ENGINE_CALLS))
def test_an_engine_call_that_never_returns_ends_naming_the_command(
    phase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from imagesmith.engine import Engine
    from imagesmith.errors import PushError

    monkeypatch.setenv("IMAGESMITH_ENGINE_TIMEOUT", str(STALL))
    with _HungEngine().running() as dockerd:
        engine = Engine(backend="sdk", base_url=dockerd.url)
        start = time.monotonic()
        with pytest.raises((EngineError, PushError)) as info:
            ENGINE_CALLS[phase](engine)
        took = time.monotonic() - start
    assert took < STALL + SLACK
    exc = info.value
    assert phase in exc.message
    assert "the Docker engine gave no answer for 1 s" in exc.message
    assert "IMAGESMITH_ENGINE_TIMEOUT" in (exc.hint or "")
    if isinstance(exc, EngineError):
        assert (exc.phase, exc.stalled) == (phase, STALL)


def test_a_deadline_that_is_not_a_number_of_seconds_is_one_error_naming_it() -> None:
    from imagesmith import settings

    for value in ("0", "-1", "nan", "inf", "1e3", "soon"):
        with pytest.raises(ConfigError, match="IMAGESMITH_BUILD_STALL") as info:
            settings.seconds("IMAGESMITH_BUILD_STALL", env={"IMAGESMITH_BUILD_STALL": value})
        assert info.value.field == "IMAGESMITH_BUILD_STALL"
    assert settings.seconds("IMAGESMITH_BUILD_STALL", env={}) == 3600.0
    assert settings.seconds("IMAGESMITH_REGISTRY_STALL", env={"IMAGESMITH_REGISTRY_STALL": "2.5"}) == 2.5


def test_a_fractional_deadline_is_printed_as_set() -> None:
    """IMAGESMITH_BUILD_STALL=2.5 is allowed (seconds from 1): the message says 2.5 s, not a rounded "2 s"."""
    from imagesmith.buildlog import _build_stalled

    exc = _build_stalled("cell smoke", 2.5, ["#3 RUN pip install"], "docker build")
    assert "no output for 2.5 s from docker build" in exc.message
    assert "no output for 3600 s" in _build_stalled("cell smoke", 3600.0, [], "docker build").message
