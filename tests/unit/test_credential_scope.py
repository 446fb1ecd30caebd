"""Where a registry's credentials may go (issue 17): only to the registry's own origin and to token realms on
https hosts its kind allows; never to another host through a redirect, an absolute ``Location`` or a ``Link``;
never over plain HTTP except to loopback; one credential variable name per host.

Fake registries are HTTP servers on 127.0.0.1; "another host" is 127.0.0.2 (loopback too, so plain HTTP is
allowed there, but a different host name); a non-loopback host name is resolved to 127.0.0.1 by a patched
``getaddrinfo``. Every server records the ``Authorization`` header of every request it saw.
"""

from __future__ import annotations

import base64
import functools
import http.server
import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagesmith.credentials import (
    CredentialChain,
    Credentials,
    EnvironmentProvider,
    credential_env_names,
    env_key,
    is_loopback,
    realm_problem,
    realm_rules,
    sends_credentials,
)
from imagesmith.errors import RegistryError
from imagesmith.registry import RegistryClient
from tests.localhttp import QuietHTTPServer

USER, PASSWORD = "bot", "s3cr3t-password"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()

Handler = Callable[["_Server", http.server.BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]]


class _Server:
    """One HTTP server on *ip*; ``handle(server, request)`` → (status, headers, body). Records
    ``(method, path, Authorization)`` of every request."""

    def __init__(self, ip: str, handle: Handler, tls: tuple[Path, Path] | None = None) -> None:
        self.seen: list[tuple[str, str, str | None]] = []
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def _any(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                outer.seen.append((self.command, self.path, self.headers.get("Authorization")))
                code, headers, body = handle(outer, self)
                self.send_response(code)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self.server = QuietHTTPServer((ip, 0), H)
        if tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(tls[0], tls[1])
            self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.addr = f"{ip}:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def auths(self) -> list[str | None]:
        return [auth for _, _, auth in self.seen]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def servers() -> Iterator[Callable[[str, Handler], _Server]]:
    made: list[_Server] = []

    def make(ip: str, handle: Handler) -> _Server:
        made.append(_Server(ip, handle))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _json(body: object) -> bytes:
    return json.dumps(body).encode()


def _client(addr: str, **kw: Any) -> RegistryClient:
    return RegistryClient(
        addr, insecure=True, credentials=Credentials(USER, PASSWORD), attempts=1, deadline=10.0, **kw
    )


TAGS_OK = (200, {"Content-Type": "application/json"}, _json({"name": "org/app", "tags": ["1.0"]}))


def _bearer_registry(realm: Callable[[], str]) -> Handler:
    """A registry accepting ``Bearer granted`` or ``Bearer anonymous``; its challenge names *realm()*."""

    def handle(server: _Server, req: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if req.headers.get("Authorization") in ("Bearer granted", "Bearer anonymous"):
            return TAGS_OK
        challenge = f'Bearer realm="{realm()}",service="fake",scope="repository:org/app:pull"'
        return 401, {"WWW-Authenticate": challenge}, _json({"errors": [{"code": "UNAUTHORIZED"}]})

    return handle


def _token_service(anonymous: bool) -> Handler:
    def handle(server: _Server, req: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        auth = req.headers.get("Authorization")
        if auth == BASIC:
            return 200, {}, _json({"token": "granted"})
        if auth is None and anonymous:
            return 200, {}, _json({"token": "anonymous"})
        return 401, {}, _json({"details": "no"})

    return handle


# -- token realms --------------------------------------------------------------------------------------------
def test_a_realm_on_an_attacker_host_gets_no_credentials(servers: Callable[[str, Handler], _Server]) -> None:
    attacker = servers("127.0.0.2", _token_service(anonymous=True))
    registry = servers("127.0.0.1", _bearer_registry(lambda: f"http://{attacker.addr}/token"))
    assert _client(registry.addr).list_tags("org/app") == ["1.0"]  # a public repository still pulls
    assert attacker.seen
    assert attacker.auths() == [None] * len(attacker.seen)


def test_a_realm_on_an_attacker_host_that_wants_credentials_is_a_clear_error(
    servers: Callable[[str, Handler], _Server],
) -> None:
    attacker = servers("127.0.0.2", _token_service(anonymous=False))
    registry = servers("127.0.0.1", _bearer_registry(lambda: f"http://{attacker.addr}/token"))
    with pytest.raises(RegistryError) as info:
        _client(registry.addr).list_tags("org/app")
    assert "credentials were not sent" in info.value.message
    assert "127.0.0.2" in info.value.message
    assert info.value.hint
    assert "registry_realms.toml" in info.value.hint
    assert attacker.auths() == [None] * len(attacker.seen)


def test_a_realm_on_the_registrys_own_host_gets_the_credentials(
    servers: Callable[[str, Handler], _Server],
) -> None:
    token = _token_service(anonymous=False)
    reg = _bearer_registry(lambda: f"http://{registry.addr}/token")

    def handle(server: _Server, req: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        return token(server, req) if req.path.startswith("/token") else reg(server, req)

    registry = servers("127.0.0.1", handle)
    assert _client(registry.addr).list_tags("org/app") == ["1.0"]
    assert BASIC in registry.auths()


def test_the_realm_decision() -> None:
    hub = "https://registry-1.docker.io"
    assert realm_problem(hub, "docker.io", "dockerhub", "https://auth.docker.io/token") is None
    assert realm_problem(hub, "docker.io", "generic", "https://auth.docker.io/token?x=1") is None
    assert "plain HTTP" in str(realm_problem(hub, "docker.io", "dockerhub", "http://auth.docker.io/token"))
    assert "evil.example" in str(realm_problem(hub, "docker.io", "dockerhub", "https://evil.example/token"))
    assert realm_problem(hub, "docker.io", "dockerhub", "https://u:p@auth.docker.io/token") is not None
    assert realm_problem(hub, "docker.io", "dockerhub", "file:///etc/passwd") is not None
    # a realm the allow-list gives Docker Hub is not given to other registries or kinds
    assert realm_problem("https://ghcr.io", "ghcr.io", "ghcr", "https://auth.docker.io/token") is not None
    assert realm_problem(hub, "docker.io", "ecr", "https://auth.docker.io/token") is not None
    # own host: always fine over https (ghcr, Azure ACR, Tencent, GCR put their realm there)
    assert realm_problem("https://ghcr.io", "ghcr.io", "ghcr", "https://ghcr.io/token") is None
    acr = "https://myreg.azurecr.io"
    assert (
        realm_problem(acr, "myreg.azurecr.io", "azure-acr", "https://myreg.azurecr.io/oauth2/token") is None
    )
    assert (
        realm_problem(acr, "myreg.azurecr.io", "azure-acr", "https://login.example/oauth2/token") is not None
    )
    # Aliyun: the realm of the registry's own region only, and not for a look-alike host
    ali = "registry.cn-hangzhou.aliyuncs.com"
    auth = "https://dockerauth.cn-hangzhou.aliyuncs.com/auth"
    assert realm_problem(f"https://{ali}", ali, "aliyun-acr", auth) is None
    ee = "team-registry.cn-hangzhou.cr.aliyuncs.com"
    assert realm_problem(f"https://{ee}", ee, "aliyun-acr", auth) is None
    assert realm_problem(f"https://{ali}", ali, "aliyun-acr", auth.replace("hangzhou", "beijing")) is not None
    fake = "registry.cn-hangzhou-aliyuncs.com"
    assert realm_problem(f"https://{fake}", fake, "aliyun-acr", auth) is not None
    # loopback may be plain HTTP (the local test registries)
    assert (
        realm_problem("http://127.0.0.1:5000", "127.0.0.1:5000", "generic", "http://127.0.0.1:5001/t") is None
    )
    assert (
        realm_problem("http://reg.lan:5000", "reg.lan:5000", "generic", "http://reg.lan:5000/t") is not None
    )


def test_every_allowed_realm_row_is_https_data_with_a_source() -> None:
    rules = realm_rules()
    assert rules
    for rule in rules:
        assert rule.source
        assert rule.kinds
        assert "/" not in rule.realm
        assert ":" not in rule.realm


# -- another host: redirects, Location, Link -----------------------------------------------------------------
def _redirect_to(
    target: _Server, req: http.server.BaseHTTPRequestHandler
) -> tuple[int, dict[str, str], bytes]:
    """A 302 to *target*'s ``/blob`` over plain HTTP."""
    return 302, {"Location": f"http://{target.addr}/blob"}, b""


def _basic_registry(
    route: Callable[[http.server.BaseHTTPRequestHandler], tuple[int, dict[str, str], bytes]],
) -> Handler:
    def handle(server: _Server, req: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if req.headers.get("Authorization") != BASIC:
            return 401, {"WWW-Authenticate": 'Basic realm="fake"'}, b""
        return route(req)

    return handle


def test_a_redirect_to_another_host_carries_no_authorization(
    servers: Callable[[str, Handler], _Server],
) -> None:
    blob = b"layer bytes"
    storage = servers("127.0.0.2", lambda s, r: (200, {}, blob))
    registry = servers(
        "127.0.0.1",
        _basic_registry(lambda r: (307, {"Location": f"http://{storage.addr}/blobs/x?sig=1"}, b"")),
    )
    with _client(registry.addr).get_blob("org/app", "sha256:" + "0" * 64) as resp:
        assert resp.content == blob
    assert storage.auths() == [None]
    assert BASIC in registry.auths()


def test_a_redirect_on_the_same_host_keeps_the_authorization(
    servers: Callable[[str, Handler], _Server],
) -> None:
    def route(req: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        if req.path.startswith("/v2/org/app/blobs/"):
            return 302, {"Location": "/storage/x"}, b""
        return 200, {}, b"ok"

    registry = servers("127.0.0.1", _basic_registry(route))
    with _client(registry.addr).get_blob("org/app", "sha256:" + "0" * 64) as resp:
        assert resp.content == b"ok"
    assert registry.seen[-1] == ("GET", "/storage/x", BASIC)


def test_a_link_to_another_host_carries_no_authorization(servers: Callable[[str, Handler], _Server]) -> None:
    other = servers("127.0.0.2", lambda s, r: (200, {}, _json({"tags": ["2.0"]})))

    def route(req: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        link = f'<http://{other.addr}/v2/org/app/tags/list?last=1.0>; rel="next"'
        return 200, {"Link": link}, _json({"tags": ["1.0"]})

    registry = servers("127.0.0.1", _basic_registry(route))
    assert _client(registry.addr).list_tags("org/app") == ["1.0", "2.0"]
    assert other.auths() == [None]


def test_an_upload_location_on_another_host_carries_no_authorization(
    servers: Callable[[str, Handler], _Server],
) -> None:
    storage = servers("127.0.0.2", lambda s, r: (201 if r.command == "PUT" else 202, {}, b""))

    def route(req: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        return 202, {"Location": f"http://{storage.addr}/upload/1"}, b""

    registry = servers("127.0.0.1", _basic_registry(route))
    _client(registry.addr).upload_blob("org/app", "sha256:" + "1" * 64, lambda: iter([b"abc"]))
    assert storage.seen
    assert storage.auths() == [None] * len(storage.seen)


def test_the_origin_decision() -> None:
    base = "https://reg.example:5443"
    assert sends_credentials(base, "https://reg.example:5443/v2/x")
    assert sends_credentials(base, "https://REG.example:5443/v2/x")
    assert not sends_credentials(base, "https://reg.example/v2/x")  # another port
    assert not sends_credentials(base, "https://cdn.example:5443/v2/x")
    assert not sends_credentials(base, "http://reg.example:5443/v2/x")  # downgraded
    assert sends_credentials("https://reg.example", "https://reg.example:443/v2/")
    assert sends_credentials("http://127.0.0.1:5000", "http://127.0.0.1:5000/v2/")
    assert sends_credentials("http://localhost:5000", "http://localhost:5000/v2/")
    assert not sends_credentials("http://reg.lan:5000", "http://reg.lan:5000/v2/")
    assert is_loopback("127.8.0.1")
    assert is_loopback("::1")
    assert not is_loopback("10.0.0.1")


@pytest.fixture
def tls_cert(tmp_path: Path) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (cert, key)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


def test_a_redirect_from_https_to_plain_http_on_the_same_host_carries_no_authorization(
    tls_cert: tuple[Path, Path],
) -> None:
    plain = _Server("127.0.0.1", lambda s, r: (200, {}, b"layer"))
    asks = _Server("127.0.0.1", lambda s, r: (401, {"WWW-Authenticate": 'Basic realm="x"'}, b""))
    try:
        for target, ok in ((plain, True), (asks, False)):
            route = _basic_registry(functools.partial(_redirect_to, target))
            registry = _Server("127.0.0.1", route, tls=tls_cert)
            client = RegistryClient(
                registry.addr, credentials=Credentials(USER, PASSWORD), ca_file=tls_cert[0], attempts=1
            )
            try:
                if ok:
                    with client.get_blob("org/app", "sha256:" + "0" * 64) as resp:
                        assert resp.content == b"layer"
                else:
                    with pytest.raises(RegistryError, match="plain HTTP") as info:
                        client.get_blob("org/app", "sha256:" + "0" * 64)
                    assert "X-Forwarded-Proto" in (info.value.hint or "")
                assert BASIC in registry.auths()  # the registry itself got them, over TLS
            finally:
                registry.close()
        assert plain.auths() == [None]
        assert asks.auths() == [None]
    finally:
        plain.close()
        asks.close()


# -- plain HTTP off loopback ---------------------------------------------------------------------------------
@pytest.fixture
def lan_name(monkeypatch: pytest.MonkeyPatch) -> str:
    """``registry.lan.test``, a host name that is not loopback, resolved to 127.0.0.1."""
    real = socket.getaddrinfo
    name = "registry.lan.test"

    def fake(host: Any, *args: Any, **kw: Any) -> Any:
        return real("127.0.0.1" if host == name else host, *args, **kw)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    return name


def test_an_insecure_registry_off_loopback_gets_no_credentials(
    servers: Callable[[str, Handler], _Server], lan_name: str
) -> None:
    registry = servers("127.0.0.1", _basic_registry(lambda r: TAGS_OK))
    port = registry.addr.rsplit(":", 1)[1]
    client = _client(f"{lan_name}:{port}")
    assert client.resolve_credentials() is None  # nor does the engine's push get them
    assert client.refresh_credentials(Credentials(USER, PASSWORD)) is None
    with pytest.raises(RegistryError) as info:
        client.list_tags("org/app")
    assert "plain HTTP" in info.value.message
    assert "insecure" in info.value.message
    assert info.value.hint
    assert "https" in info.value.hint
    assert registry.seen
    assert registry.auths() == [None] * len(registry.seen)
    # the same registry on loopback gets them
    assert _client(registry.addr).list_tags("org/app") == ["1.0"]


def test_an_insecure_registry_off_loopback_sends_nothing_to_its_realm(
    servers: Callable[[str, Handler], _Server], lan_name: str
) -> None:
    token = _token_service(anonymous=False)
    port: list[str] = []
    reg = _bearer_registry(lambda: f"http://{lan_name}:{port[0]}/token")

    def handle(server: _Server, req: http.server.BaseHTTPRequestHandler) -> tuple[int, dict[str, str], bytes]:
        return token(server, req) if req.path.startswith("/token") else reg(server, req)

    registry = servers("127.0.0.1", handle)
    port.append(registry.addr.rsplit(":", 1)[1])
    with pytest.raises(RegistryError, match="plain HTTP"):
        _client(f"{lan_name}:{port[0]}").list_tags("org/app")
    assert registry.auths() == [None] * len(registry.seen)
    assert not [path for _, path, _ in registry.seen if path.startswith("/token")]  # no token asked for


# -- one variable name per host ------------------------------------------------------------------------------
def test_look_alike_hosts_have_different_variable_names() -> None:
    real, fake = "x.cn-hangzhou.aliyuncs.com", "x.cn-hangzhou-aliyuncs.com"
    assert credential_env_names(real) != credential_env_names(fake)
    assert env_key(real) == "X_CN__HANGZHOU_ALIYUNCS_COM"
    # names of hosts without '-' are unchanged (backwards compatible)
    assert env_key("ghcr.io") == "GHCR_IO"
    assert env_key("127.0.0.1:5443") == "127_0_0_1_5443"


def test_credentials_for_one_host_are_not_given_to_its_look_alike(tmp_path: Path) -> None:
    user_var, pass_var = credential_env_names("x.cn-hangzhou.aliyuncs.com")
    env = {user_var: "u", pass_var: "p"}
    provider = EnvironmentProvider(env)
    assert provider.get("x.cn-hangzhou.aliyuncs.com") == Credentials("u", "p", origin=f"${user_var}")
    assert provider.get("x.cn-hangzhou-aliyuncs.com") is None
    assert CredentialChain("x-cn.hangzhou.aliyuncs.com", "aliyun-acr", (provider,)).resolve() is None


def test_an_old_style_name_of_a_host_with_a_dash_is_refused_with_the_new_name() -> None:
    env = {
        "IMAGESMITH_REGISTRY_X_CN_HANGZHOU_ALIYUNCS_COM_USERNAME": "u",
        "IMAGESMITH_REGISTRY_X_CN_HANGZHOU_ALIYUNCS_COM_PASSWORD": "p",
    }
    for host in ("x.cn-hangzhou.aliyuncs.com", "x.cn-hangzhou-aliyuncs.com"):
        with pytest.raises(RegistryError) as info:
            EnvironmentProvider(env).get(host)
        assert info.value.hint
        assert credential_env_names(host)[0] in info.value.hint


def test_a_host_no_variable_can_name_is_left_to_the_docker_config() -> None:
    with pytest.raises(RegistryError, match="cannot be named"):
        env_key("[::1]:5000")
    assert EnvironmentProvider({}).get("[::1]:5000") is None


_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
_host = st.builds(
    lambda labels, tld, port: ".".join([*labels, tld]) + (f":{port}" if port else ""),
    st.lists(_label, min_size=0, max_size=3),
    st.from_regex(r"[a-z]([a-z0-9-]{0,4}[a-z0-9])?", fullmatch=True),
    st.one_of(st.none(), st.integers(1, 65535)),
)
_ipv4 = st.builds(
    lambda parts, port: ".".join(map(str, parts)) + (f":{port}" if port else ""),
    st.lists(st.integers(0, 255), min_size=4, max_size=4),
    st.one_of(st.none(), st.integers(1, 65535)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_host, _ipv4), min_size=2, max_size=6, unique_by=str.lower))
def test_variable_names_are_injective(hosts: list[str]) -> None:
    keys = [env_key(h) for h in hosts]
    assert len(set(keys)) == len(keys), list(zip(hosts, keys, strict=True))


@pytest.mark.parametrize(
    "host", ["user@evil.example", "evil.example/x", "https://r.example", "r.example?x", "a b"]
)
def test_a_registry_host_that_is_not_host_and_port_is_refused(host: str) -> None:
    with pytest.raises(RegistryError, match="is not a registry host"):
        RegistryClient(host)
