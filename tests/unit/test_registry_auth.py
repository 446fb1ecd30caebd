"""The registry client's auth against tiny fake registries (an HTTP server thread in the test): challenges,
Bearer tokens, and a refused short-lived token refreshed once — never in a loop. Token commands are small fake
``aws`` / ``az`` programs on PATH (tests/unit/test_credentials.py has the chain itself)."""

from __future__ import annotations

import base64
import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from imagesmith.credentials import (
    CredentialChain,
    Credentials,
    DockerConfigProvider,
    EnvironmentProvider,
    clear_token_cache,
    token_provider,
)
from imagesmith.errors import ManifestUnknownError, RegistryError
from imagesmith.registry import RegistryApi, RegistryClient, parse_challenge
from tests.localhttp import QuietHTTPServer

ECR = "123456789012.dkr.ecr.eu-west-1.amazonaws.com"
ACR = "myreg.azurecr.io"


@pytest.fixture(autouse=True)
def _no_cached_tokens() -> Iterator[None]:
    clear_token_cache()
    yield
    clear_token_cache()


class _BearerRegistry:
    """A minimal HTTP server speaking the Docker Hub/ACR token dance (challenge → realm → Bearer token)."""

    def __init__(self, user: str, password: str) -> None:
        expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        self.token_requests: list[dict[str, str]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _send(
                self, code: int, body: dict[str, object], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                url = urlparse(self.path)
                if url.path == "/token":
                    query = {k: v[0] for k, v in parse_qs(url.query).items()}
                    outer.token_requests.append(query)
                    if self.headers.get("Authorization") != expected:
                        self._send(401, {"details": "bad credentials"})
                        return
                    self._send(200, {"token": "tok-" + query.get("scope", "")})
                    return
                want = "Bearer tok-repository:org/app:pull"
                if self.headers.get("Authorization") != want:
                    challenge = (
                        f'Bearer realm="http://{outer.addr}/token",service="test-registry",'
                        'scope="repository:org/app:pull"'
                    )
                    self._send(
                        401,
                        {"errors": [{"code": "UNAUTHORIZED", "message": "token needed"}]},
                        {"WWW-Authenticate": challenge},
                    )
                    return
                self._send(200, {"name": "org/app", "tags": ["1.0", "2.0"]})

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _ShortLivedRegistry:
    """A fake registry that accepts one password only (the token of the N-th run of the fake CLI).

    ``basic``: ECR's way (``WWW-Authenticate: Basic``). ``bearer``: ACR's way (the password goes to the token
    realm); with ``anonymous`` the realm also hands out a token without credentials (a public repository).
    Records every password it was shown.
    """

    def __init__(self, scheme: str, user: str, accept: str, *, anonymous: bool = False) -> None:
        self.seen: list[str] = []
        outer = self

        def password_of(header: str | None) -> str | None:
            if not header or not header.startswith("Basic "):
                return None
            got_user, _, got = base64.b64decode(header[6:]).decode().partition(":")
            outer.seen.append(got)
            return got if got_user == user else None

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _send(self, code: int, body: object, headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _unauthorized(self) -> None:
                challenge = (
                    'Basic realm="fake"'
                    if scheme == "basic"
                    else f'Bearer realm="http://{outer.addr}/token",service="fake"'
                )
                body = {"errors": [{"code": "UNAUTHORIZED", "message": "authentication required"}]}
                self._send(401, body, {"WWW-Authenticate": challenge})

            def do_GET(self) -> None:
                url = urlparse(self.path)
                auth = self.headers.get("Authorization")
                if url.path == "/token":
                    password = password_of(auth)
                    if password == accept or (anonymous and auth is None):
                        self._send(200, {"token": "granted" if auth else "anonymous"})
                    else:
                        self._send(401, {"details": "bad credentials"})
                    return
                ok = (
                    password_of(auth) == accept
                    if scheme == "basic"
                    else auth in ("Bearer granted", "Bearer anonymous")
                )
                if not ok:
                    self._unauthorized()
                    return
                self._send(200, {"name": "org/app", "tags": ["1.0"]})

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "bin"
    path.mkdir()
    monkeypatch.setenv("PATH", f"{path}{os.pathsep}{os.environ.get('PATH', '')}")
    return path


def _fake_cli(bin_dir: Path, name: str, body: str = "printf 'secret-%s\\n' \"$n\"") -> Path:
    """A program printing ``secret-<run>``; its run count is in ``<bin>/.<name>-count``."""
    count = bin_dir / f".{name}-count"
    script = bin_dir / name
    script.write_text(
        f'#!/bin/sh\nn=0\n[ -f "{count}" ] && read n < "{count}"\nn=$((n+1))\necho "$n" > "{count}"\n{body}\n'
    )
    script.chmod(0o755)
    return count


def _runs(count: Path) -> int:
    return int(count.read_text()) if count.is_file() else 0


def _chain(addr: str, tmp_path: Path, token: str) -> CredentialChain:
    """The real providers of an ECR / ACR registry, for a fake registry listening on *addr*."""
    env = {"DOCKER_CONFIG": str(tmp_path / "no-docker-config")}
    provider = token_provider(ECR if token == "ecr" else ACR, token, "registry fake")
    assert provider is not None
    return CredentialChain(addr, token, (EnvironmentProvider(env), DockerConfigProvider(env), provider))


# -- moved from tests/integration/test_registry.py (they need no service) ------------------------------------
def test_parse_challenge_bearer_as_docker_hub_sends_it() -> None:
    scheme, params = parse_challenge(
        'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:a/b:pull"'
    )
    assert scheme == "bearer"
    assert params == {
        "realm": "https://auth.docker.io/token",
        "service": "registry.docker.io",
        "scope": "repository:a/b:pull",
    }


def test_bearer_token_flow_as_docker_hub_and_acr_do_it(tmp_path: Path) -> None:
    reg = _BearerRegistry("robot", "token-secret")
    try:
        client = RegistryClient(
            reg.addr, insecure=True, credentials=Credentials("robot", "token-secret"), attempts=1
        )
        assert client.list_tags("org/app") == ["1.0", "2.0"]
        assert reg.token_requests == [{"service": "test-registry", "scope": "repository:org/app:pull"}]
        bad = RegistryClient(reg.addr, insecure=True, credentials=Credentials("robot", "nope"), attempts=1)
        with pytest.raises(RegistryError, match="token endpoint refused the credentials") as info:
            bad.list_tags("org/app")
        assert "nope" not in str(info.value)
    finally:
        reg.close()


# -- refresh once on 401 -------------------------------------------------------------------------------------
@pytest.mark.parametrize(("scheme", "token"), [("basic", "ecr"), ("bearer", "azure-acr")])
def test_a_refused_token_is_refreshed_once_and_the_request_retried(
    scheme: str, token: str, bin_dir: Path, tmp_path: Path
) -> None:
    count = _fake_cli(bin_dir, "aws" if token == "ecr" else "az")
    user = "AWS" if token == "ecr" else "00000000-0000-0000-0000-000000000000"
    reg = _ShortLivedRegistry(scheme, user, accept="secret-2")  # the first token has expired meanwhile
    try:
        client = RegistryClient(reg.addr, insecure=True, chain=_chain(reg.addr, tmp_path, token), attempts=1)
        assert client.list_tags("org/app") == ["1.0"]
        assert _runs(count) == 2
        assert reg.seen == ["secret-1", "secret-2"]
        assert client.list_tags("org/app") == ["1.0"]  # the fresh token is kept: no third run
        assert _runs(count) == 2
    finally:
        reg.close()


@pytest.mark.parametrize(("scheme", "token"), [("basic", "ecr"), ("bearer", "azure-acr")])
def test_a_refused_fresh_token_is_the_error_never_a_loop(
    scheme: str, token: str, bin_dir: Path, tmp_path: Path
) -> None:
    program = "aws" if token == "ecr" else "az"
    count = _fake_cli(bin_dir, program)
    user = "AWS" if token == "ecr" else "00000000-0000-0000-0000-000000000000"
    reg = _ShortLivedRegistry(scheme, user, accept="never-this")
    try:
        client = RegistryClient(
            reg.addr, name="cloud", insecure=True, chain=_chain(reg.addr, tmp_path, token), attempts=3
        )
        with pytest.raises(RegistryError) as info:
            client.list_tags("org/app")
        assert _runs(count) == 2  # the first token and one refresh
        assert reg.seen == ["secret-1", "secret-2"]
        text = str(info.value)
        assert "registry cloud" in text
        assert "unauthorized" in text
        assert "secret-" not in text
        assert f"`{program} " in text  # the fix line names the token command
    finally:
        reg.close()


def test_given_credentials_are_not_refreshed(bin_dir: Path, tmp_path: Path) -> None:
    count = _fake_cli(bin_dir, "aws")
    reg = _ShortLivedRegistry("basic", "AWS", accept="secret-1")
    try:
        client = RegistryClient(
            reg.addr,
            insecure=True,
            credentials=Credentials("AWS", "typed-by-hand"),
            chain=_chain(reg.addr, tmp_path, "ecr"),
            attempts=1,
        )
        with pytest.raises(RegistryError, match="credentials from environment were refused"):
            client.list_tags("org/app")
        assert _runs(count) == 0
    finally:
        reg.close()


def test_an_expired_token_is_renewed_before_it_is_sent(bin_dir: Path, tmp_path: Path) -> None:
    count = _fake_cli(bin_dir, "aws")
    client = RegistryClient("127.0.0.1:9", insecure=True, chain=_chain("127.0.0.1:9", tmp_path, "ecr"))
    first = client.credentials
    assert first is not None
    assert first.password == "secret-1"
    client._credentials = Credentials(  # as if 12 h had passed
        first.username, first.password, origin=first.origin, provider=first.provider, expires_at=0.0
    )
    renewed = client.credentials
    assert renewed is not None
    assert renewed.password == "secret-2"
    assert _runs(count) == 2


# -- a token command that cannot run -------------------------------------------------------------------------
def test_a_missing_program_is_the_error_when_the_registry_wants_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    reg = _ShortLivedRegistry("basic", "AWS", accept="x")
    try:
        client = RegistryClient(reg.addr, insecure=True, chain=_chain(reg.addr, tmp_path, "ecr"), attempts=1)
        with pytest.raises(
            RegistryError, match=r"`aws ecr get-login-password --region eu-west-1` cannot run"
        ):
            client.list_tags("org/app")
        assert reg.seen == []
    finally:
        reg.close()


def test_anonymous_pull_works_without_the_program_when_the_registry_allows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ACR with anonymous pull (a public release index): no `az` needed; its absence is only reported
    when the registry refuses to go without credentials."""
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    public = _ShortLivedRegistry("bearer", "u", accept="x", anonymous=True)
    private = _ShortLivedRegistry("bearer", "u", accept="x")
    try:
        client = RegistryClient(public.addr, insecure=True, chain=_chain(public.addr, tmp_path, "azure-acr"))
        assert client.list_tags("org/app") == ["1.0"]
        closed = RegistryClient(
            private.addr, insecure=True, chain=_chain(private.addr, tmp_path, "azure-acr"), attempts=1
        )
        with pytest.raises(RegistryError, match=r"`az acr login --name myreg .*` cannot run"):
            closed.list_tags("org/app")
    finally:
        public.close()
        private.close()


def test_the_http_client_is_the_registry_seam() -> None:
    client: RegistryApi = RegistryClient("r.example")
    assert (client.name, client.host) == ("r.example", "r.example")


# -- a token service that is down, or answers something else than a token -----------------------------------
class _ChallengeOnly:
    """A registry that challenges every request for a Bearer token at *realm* (a token service elsewhere)."""

    def __init__(self, realm: str) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                body = b'{"errors":[{"code":"UNAUTHORIZED","message":"token needed"}]}'
                self.send_response(401)
                self.send_header("WWW-Authenticate", f'Bearer realm="{realm}",service="t"')
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _TokenService:
    """A token service answering *status* with *body* (and counting requests)."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                outer.requests += 1
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_token_service_that_is_down_is_named_in_the_error_and_the_fix() -> None:
    down = f"127.0.0.1:{_closed_port()}"
    reg = _ChallengeOnly(f"http://{down}/token")
    try:
        client = RegistryClient(
            reg.addr, name="hub", insecure=True, credentials=Credentials("u", "p"), attempts=2, backoff=0.01
        )
        with pytest.raises(RegistryError) as info:
            client.list_tags("org/app")
        text = str(info.value)
        assert f"token endpoint http://{down}/token" in text
        assert f"registry hub's token service {down}" in text  # the fix names the host that is down
        assert "gave up after 2 attempt(s)" in text
    finally:
        reg.close()


@pytest.mark.parametrize(
    "body", [b"<html>sign in to the proxy</html>", b'["token"]', b'{"token": 7}', b'{"token": ""}', b"{}"]
)
def test_a_token_service_answering_no_token_is_an_error_not_a_traceback(body: bytes) -> None:
    service = _TokenService(200, body)
    reg = _ChallengeOnly(f"http://{service.addr}/token")
    try:
        client = RegistryClient(
            reg.addr, name="hub", insecure=True, credentials=Credentials("u", "p"), attempts=3
        )
        with pytest.raises(RegistryError, match="answered without a token") as info:
            client.list_tags("org/app")
        assert info.value.hint
        assert service.requests == 1  # an answer, not a fault: not retried
    finally:
        reg.close()
        service.close()


def test_a_rate_limited_token_service_is_retried_after_what_it_asks() -> None:
    service = _TokenService(429, b"", {"Retry-After": "3600"})
    reg = _ChallengeOnly(f"http://{service.addr}/token")
    try:
        client = RegistryClient(
            reg.addr, name="hub", insecure=True, credentials=Credentials("u", "p"), attempts=5, backoff=0.01
        )
        with pytest.raises(RegistryError) as info:
            client.list_tags("org/app")
        text = str(info.value)
        assert "Retry-After" in text
        assert service.requests == 1  # an hour is past the deadline: given up at once, saying why
    finally:
        reg.close()
        service.close()


def test_retry_after_seconds_reads_both_forms() -> None:
    from datetime import UTC, datetime

    from imagesmith.registry import retry_after_seconds

    now = datetime(2026, 12, 1, 6, 0, 0, tzinfo=UTC)
    assert retry_after_seconds("120", now=now) == 120.0
    assert retry_after_seconds(" 0 ", now=now) == 0.0
    assert retry_after_seconds("Tue, 01 Dec 2026 06:00:30 GMT", now=now) == 30.0
    assert retry_after_seconds("Tue, 01 Dec 2026 05:00:00 GMT", now=now) == 0.0  # in the past: now
    assert retry_after_seconds("86400", now=now) == 86400.0  # named as asked; past the deadline: not waited
    for junk in (None, "", "soon", "-5", "1.5e3", "Tue, 99 Foo"):
        assert retry_after_seconds(junk, now=now) is None


# -- answers read whole within the read timeout keep HTTP's encodings ----------------------------------------
@pytest.mark.parametrize("framing", ["chunked", "length"])
@pytest.mark.parametrize("encoding", ["identity", "gzip"])
def test_small_answers_are_read_whole_through_chunking_and_gzip(framing: str, encoding: str) -> None:
    import gzip

    body = json.dumps({"name": "x", "tags": [f"t{i}" for i in range(5000)]}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            data = gzip.compress(body) if encoding == "gzip" else body
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            if encoding == "gzip":
                self.send_header("Content-Encoding", "gzip")
            if framing == "length":
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(0, len(data), 1000):
                piece = data[i : i + 1000]
                self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            self.wfile.write(b"0\r\n\r\n")

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        client = RegistryClient(f"127.0.0.1:{server.server_address[1]}", insecure=True, attempts=1)
        for _ in range(3):  # the connection goes back to the pool and is used again
            assert len(client.list_tags("x")) == 5000
    finally:
        server.shutdown()
        server.server_close()


# -- ``said`` is the registry's words only (issue 24 re-check) -----------------------------------------------
@pytest.mark.parametrize(("status", "body"), [(400, b""), (400, b"bad request from the proxy")])
def test_said_holds_the_registry_s_words_never_imagesmith_s(status: int, body: bytes) -> None:
    """An answer without a body: the message says so in imagesmith's words ("no error body"), ``said`` —
    what callers classify — carries only what the registry sent (its status, and its body when it has one)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def do_GET(self) -> None:
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        client = RegistryClient(f"127.0.0.1:{server.server_address[1]}", insecure=True, attempts=1)
        with pytest.raises(RegistryError) as info:
            client.list_tags("x")
    finally:
        server.shutdown()
        server.server_close()
    if body:
        assert info.value.said == f"HTTP {status} {body.decode()}"
        assert f"HTTP {status} {body.decode()}" in info.value.message
    else:
        assert info.value.said == f"HTTP {status}"
        assert f"HTTP {status} (no error body)" in info.value.message


@pytest.mark.parametrize("repo", ["acme/manifests", "manifest-tools/torch"])
def test_a_bodyless_404_of_a_blob_is_not_manifest_unknown_whatever_the_repository_is_called(
    repo: str,
) -> None:
    """Whether a 404 without error codes is ``manifest unknown`` is said by the request (a manifest's), not
    read from the words describing it: a blob of a repository whose name holds "manifest" was taken for a
    manifest (ManifestUnknownError: never retried, "manifest unknown" for a blob)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            return None

        def _missing(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_HEAD = _missing

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    try:
        client = RegistryClient(f"127.0.0.1:{server.server_address[1]}", insecure=True, attempts=1)
        with pytest.raises(RegistryError) as blob:
            client.get_blob(repo, "sha256:" + "a" * 64)
        with pytest.raises(ManifestUnknownError):
            client.get_manifest(repo, "latest")
    finally:
        server.shutdown()
        server.server_close()
    assert not isinstance(blob.value, ManifestUnknownError)
    assert "manifest unknown" not in blob.value.message
