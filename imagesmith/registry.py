"""Registry HTTP API v2 client (requests + tenacity).

What build, verify and release need from a registry (:class:`RegistryApi`, the seam they are typed with;
:class:`RegistryClient` speaks HTTP, tests pass fakes): manifests (HEAD/GET/PUT/DELETE), tags, blobs (HEAD,
cross-repository mount, streamed copy between registries), with

- Basic and Bearer-token auth: the ``WWW-Authenticate`` challenge is followed as Docker Hub, GHCR and ACR
  expect (token from the realm with ``service`` + ``scope``, Basic credentials sent to the realm when we
  have them);
- credentials from the registry's chain (:mod:`imagesmith.credentials`, chosen by its ``kind``): environment,
  docker config, then ECR/ACR token commands; resolved when the registry first asks for them, refreshed when
  they expire, and on an ``unauthorized`` answer refreshed once (a short-lived token or credential helper)
  and the request retried — never in a loop; never argv, never printed (``Credentials`` hides its repr);
- TLS with the registry's own CA: ``/etc/docker/certs.d/<host>/ca.crt`` (dockerd's convention) or an explicit
  file; never ``verify=False``; ``insecure`` registries are spoken to in plain HTTP;
- retries with exponential backoff on transient faults (5xx, 429, timeouts, connection resets), never on
  ``UNAUTHORIZED``, ``DENIED`` or ``MANIFEST_UNKNOWN``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import urljoin

import requests
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from imagesmith.credentials import DOCKER_HUB_API, CredentialChain, auth_hint, credential_chain
from imagesmith.credentials import Credentials as Credentials  # re-exported: callers may import it from here
from imagesmith.credentials import lookup_credentials as lookup_credentials
from imagesmith.errors import ManifestUnknownError, RegistryError

T = TypeVar("T")

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST_V2 = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ACCEPT_MANIFESTS = ", ".join((MANIFEST_V2, MANIFEST_LIST_V2, OCI_MANIFEST, OCI_INDEX))
INDEX_TYPES = frozenset({MANIFEST_LIST_V2, OCI_INDEX})
_CHUNK = 8 << 20


class _Transient(Exception):
    """A fault worth retrying (5xx, 429, timeout, reset). Carries the last description."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


def docker_ca_file(host: str) -> Path | None:
    """dockerd's per-registry CA: ``/etc/docker/certs.d/<host>/ca.crt`` (also under ``$DOCKER_CERT_DIR``)."""
    roots = [
        Path(os.environ.get("IMAGESMITH_CERTS_D", "/etc/docker/certs.d")),
        Path.home() / ".docker/certs.d",
    ]
    for root in roots:
        path = root / host / "ca.crt"
        if path.is_file():
            return path
    return None


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="…",service="…",scope="…"`` → ("bearer", {...})."""
    scheme, _, rest = header.strip().partition(" ")
    params = {m.group(1).lower(): m.group(2) for m in re.finditer(r'(\w+)="([^"]*)"', rest)}
    return scheme.lower(), params


def _error_codes(resp: requests.Response) -> tuple[list[str], str]:
    try:
        errors = resp.json().get("errors") or []
    except ValueError:
        return [], resp.text[:300].strip()
    codes = [str(e.get("code", "")) for e in errors if isinstance(e, dict)]
    messages = "; ".join(
        f"{e.get('code', '')}: {e.get('message', '')}" for e in errors if isinstance(e, dict)
    )
    return codes, messages or resp.text[:300].strip()


@dataclass(frozen=True, kw_only=True)
class ManifestData:
    body: bytes
    media_type: str
    digest: str

    def json(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.body)
        return data

    def blobs(self) -> list[tuple[str, int]]:
        """(digest, size) of the config and every layer of an image manifest."""
        data = self.json()
        out = [(data["config"]["digest"], int(data["config"]["size"]))]
        out += [(layer["digest"], int(layer["size"])) for layer in data.get("layers", [])]
        return out

    def compressed_size(self) -> int:
        """Bytes a pull downloads: the config plus every (compressed) layer."""
        return sum(size for _, size in self.blobs())


class BlobStream(Protocol):
    """A blob being read (``requests.Response`` for HTTP): chunks, closed by the ``with`` block."""

    def iter_content(self, chunk_size: int) -> Iterator[bytes]: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, *args: Any) -> Any: ...


class RegistryApi(Protocol):
    """What build, release and pick ask of one registry: the seam they are typed with.

    :class:`RegistryClient` is the HTTP implementation; :func:`client_for` the one factory. Fakes in tests
    implement what a test path reaches.
    """

    @property
    def name(self) -> str: ...
    @property
    def host(self) -> str: ...

    def ping(self) -> None: ...
    def manifest_digest(self, repo: str, reference: str) -> str | None: ...
    def get_manifest(self, repo: str, reference: str) -> ManifestData: ...
    def put_manifest(self, repo: str, reference: str, manifest: ManifestData) -> str: ...
    def delete_manifest(self, repo: str, digest: str) -> None: ...
    def list_tags(self, repo: str) -> list[str]: ...
    def blob_size(self, repo: str, digest: str) -> int | None: ...
    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool: ...
    def get_blob(self, repo: str, digest: str) -> BlobStream: ...
    def upload_blob(self, repo: str, digest: str, chunks: Callable[[], Iterator[bytes]]) -> None: ...

    def resolve_credentials(self) -> Credentials | None:
        """The credentials for an engine push to this registry (its chain), or None."""
        ...

    def refresh_credentials(self, refused: Credentials) -> Credentials | None:
        """Other credentials after the engine's push was refused with *refused*, or None."""
        ...


class RegistryClient:
    """One registry host, over the HTTP API v2 (implements :class:`RegistryApi`). Every method names the
    registry in its errors."""

    def __init__(
        self,
        host: str,
        *,
        name: str | None = None,
        kind: str = "generic",
        insecure: bool = False,
        credentials: Credentials | None = None,
        chain: CredentialChain | None = None,
        ca_file: Path | None = None,
        attempts: int = 4,
        backoff: float = 0.5,
        timeout: float = 60.0,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.host = host
        self.api_host = DOCKER_HUB_API if host in ("docker.io", "index.docker.io") else host
        self.name = name or host
        self.kind = kind
        self.scheme = "http" if insecure else "https"
        #: where credentials come from (given *credentials* are used as they are and never refreshed)
        self.chain = chain if chain is not None else credential_chain(host, kind, name=self.name, env=env)
        self._credentials = credentials
        self._resolved = credentials is not None
        self._deferred: RegistryError | None = None  # the chain's error, while anonymous access may do
        self._lock = threading.Lock()
        ca = ca_file or docker_ca_file(host)
        # requests lets $REQUESTS_CA_BUNDLE override Session.verify, so verify is passed on every request
        self.verify: str | bool = str(ca) if ca else True
        self.attempts = attempts
        self.backoff = backoff
        self.timeout = timeout
        self.session = requests.Session()
        self._auth: dict[str, str] = {}  # scope → Authorization header value
        self._basic_ok = False

    # -- credentials ----------------------------------------------------------------------------------------
    @property
    def credentials(self) -> Credentials | None:
        """The credentials in use: resolved through the chain when first needed, renewed when expired."""
        with self._lock:
            if not self._resolved:
                self._credentials = self.chain.resolve()
                self._resolved = True
            elif self._credentials is not None and self._credentials.expired():
                renewed = self.chain.refresh(self._credentials)
                if renewed is not None:
                    self._credentials = renewed
                    self._auth.clear()  # Basic headers and tokens made from the old secret
            return self._credentials

    def resolve_credentials(self) -> Credentials | None:
        """What the engine's push to this registry should send (the same chain and cache as the API)."""
        return self.credentials

    def refresh_credentials(self, refused: Credentials) -> Credentials | None:
        """Other credentials after *refused* was refused (a token or helper run again), or None."""
        fresh = self.chain.refresh(refused)
        if fresh is not None:
            with self._lock:
                self._credentials, self._resolved = fresh, True
                self._auth.clear()
        return fresh

    def _refresh(self) -> bool:
        """After a refusal: True when the chain gave other credentials (the caller tries once more)."""
        current = self._credentials
        return current is not None and self.refresh_credentials(current) is not None

    def _optional_credentials(self) -> Credentials | None:
        """For a Bearer challenge: credentials if the chain has them; its error waits, since the registry may
        hand out an anonymous token (public repositories)."""
        try:
            return self.credentials
        except RegistryError as exc:
            with self._lock:
                self._resolved, self._deferred = True, exc
            return None

    def _hint(self) -> str:
        kind = self.chain.kind if self.kind == "generic" else self.kind
        return auth_hint(self.host, kind, self.chain.token_command)

    # -- plumbing -------------------------------------------------------------------------------------------
    @property
    def base(self) -> str:
        return f"{self.scheme}://{self.api_host}"

    def _fail(self, what: str, message: str, hint: str | None = None) -> RegistryError:
        return RegistryError(f"registry {self.name} ({self.host}): {what}: {message}", hint=hint)

    def _retrying(self, fn: Callable[[], T]) -> T:
        retrying = Retrying(
            stop=stop_after_attempt(self.attempts),
            wait=wait_exponential(multiplier=self.backoff, max=8),
            retry=retry_if_exception_type(_Transient),
            reraise=True,
        )
        try:
            return retrying(fn)
        except _Transient as exc:
            raise self._fail(
                "unreachable or failing", f"{exc.what} (gave up after {self.attempts} attempts)"
            ) from exc

    def _token(self, params: dict[str, str], scope: str) -> str | int:
        """A Bearer header value from the realm, or the status (401/403) it refused the credentials with."""
        realm = params.get("realm")
        if not realm:
            raise self._fail("auth", "Bearer challenge without a realm")
        query = {
            k: v
            for k, v in (("service", params.get("service")), ("scope", scope or params.get("scope")))
            if v
        }
        creds = self._optional_credentials()
        headers = {"Authorization": creds.basic()} if creds else {}
        try:
            resp = self.session.get(
                realm, params=query, headers=headers, timeout=self.timeout, verify=self.verify
            )
        except requests.RequestException as exc:
            raise _Transient(f"token endpoint {realm}: {type(exc).__name__}") from exc
        if resp.status_code >= 500:
            raise _Transient(f"token endpoint {realm} answered HTTP {resp.status_code}")
        if resp.status_code in (401, 403):
            resp.close()
            return resp.status_code
        if resp.status_code != 200:
            raise self._fail("auth", f"token endpoint answered HTTP {resp.status_code}")
        data = resp.json()
        token = data.get("token") or data.get("access_token")
        if not token:
            raise self._fail("auth", "token endpoint answered without a token")
        return f"Bearer {token}"

    def _send(
        self,
        method: str,
        url: str,
        *,
        scope: str = "",
        headers: Mapping[str, str] | None = None,
        data: Any = None,
        params: Mapping[str, str] | None = None,
        stream: bool = False,
        allow_redirects: bool = True,
    ) -> requests.Response:
        """One request with auth (challenge answered once). Raises _Transient on retryable faults."""
        full = url if url.startswith("http") else self.base + url

        def attempt(auth: str | None) -> requests.Response:
            h = dict(headers or {})
            if auth:
                h["Authorization"] = auth
            try:
                resp = self.session.request(
                    method,
                    full,
                    headers=h,
                    data=data,
                    params=params,
                    stream=stream,
                    timeout=self.timeout,
                    verify=self.verify,
                    allow_redirects=allow_redirects,
                )
            except requests.exceptions.SSLError as exc:
                raise self._fail(
                    "TLS",
                    f"certificate not trusted ({exc.__class__.__name__})",
                    hint=f"put the registry's CA in /etc/docker/certs.d/{self.host}/ca.crt",
                ) from exc
            except (
                requests.ConnectionError,
                requests.Timeout,
                requests.exceptions.ChunkedEncodingError,
            ) as exc:
                raise _Transient(f"{method} {full}: {type(exc).__name__}") from exc
            if resp.status_code >= 500 or resp.status_code == 429:
                _, msg = _error_codes(resp)
                resp.close()
                raise _Transient(f"{method} {full}: HTTP {resp.status_code} {msg}".strip())
            return resp

        resp = attempt(self._auth.get(scope) or self._auth.get("*"))
        if resp.status_code != 401 or "WWW-Authenticate" not in resp.headers:
            return resp
        scheme, params_ = parse_challenge(resp.headers["WWW-Authenticate"])
        if scheme not in ("basic", "bearer"):
            return resp
        resp.close()
        answered = self._answer(scheme, params_, scope, attempt)
        refused = isinstance(answered, int) or answered.status_code == 401
        if refused and self._refresh():  # a short-lived token or helper: once more with fresh ones, no loop
            if isinstance(answered, requests.Response):
                answered.close()
            answered = self._answer(scheme, params_, scope, attempt)
        if isinstance(answered, int):
            if self._deferred is not None:
                raise self._deferred
            raise self._fail(
                "unauthorized",
                f"token endpoint refused the credentials (HTTP {answered})",
                hint=self._hint(),
            )
        return answered

    def _answer(
        self,
        scheme: str,
        params: dict[str, str],
        scope: str,
        attempt: Callable[[str | None], requests.Response],
    ) -> requests.Response | int:
        """Answer a Basic or Bearer challenge: the response, or the status the token endpoint refused with."""
        if scheme == "basic":
            creds = self.credentials
            if not creds and self._deferred is not None:
                raise self._deferred
            if not creds:
                raise self._fail(
                    "unauthorized", "the registry wants credentials and none are set", hint=self._hint()
                )
            self._auth["*"] = creds.basic()
            return attempt(self._auth["*"])
        token = self._token(params, scope)
        if isinstance(token, int):
            return token
        self._auth[scope] = token
        return attempt(token)

    def _call(self, method: str, url: str, **kw: Any) -> requests.Response:
        return self._retrying(lambda: self._send(method, url, **kw))

    def _check(self, resp: requests.Response, what: str, ok: tuple[int, ...]) -> requests.Response:
        if resp.status_code in ok:
            return resp
        codes, message = _error_codes(resp)
        resp.close()
        if resp.status_code == 401 or "UNAUTHORIZED" in codes:
            hint = self._hint()
            if self._credentials:
                message = f"credentials from {self._credentials.origin} were refused ({message})"
            raise self._fail(what, f"unauthorized: {message}", hint=hint)
        if resp.status_code == 403 or "DENIED" in codes:
            raise self._fail(
                what, f"denied: {message}", hint="check the account's push/pull rights on this repository"
            )
        if "MANIFEST_UNKNOWN" in codes or (resp.status_code == 404 and "manifest" in what):
            raise ManifestUnknownError(
                f"registry {self.name} ({self.host}): {what}: manifest unknown ({message})"
            )
        if resp.status_code == 405:
            raise self._fail(
                what,
                f"HTTP 405 {message}",
                hint="the registry refuses writes (read-only/maintenance mode) or deletes are disabled",
            )
        raise self._fail(what, f"HTTP {resp.status_code} {message}")

    @staticmethod
    def _scope(repo: str, actions: str = "pull") -> str:
        return f"repository:{repo}:{actions}"

    # -- API ------------------------------------------------------------------------------------------------
    def ping(self) -> None:
        """GET /v2/ (authenticating if asked). Raises RegistryError when the registry cannot be used."""
        resp = self._call("GET", "/v2/")
        self._check(resp, "ping /v2/", (200,))

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        """HEAD the manifest; its digest, or None when the registry does not hold it."""
        resp = self._call(
            "HEAD",
            f"/v2/{repo}/manifests/{reference}",
            scope=self._scope(repo),
            headers={"Accept": ACCEPT_MANIFESTS},
        )
        if resp.status_code == 404:
            return None
        self._check(resp, f"HEAD manifest {repo}:{reference}", (200,))
        digest = resp.headers.get("Docker-Content-Digest")
        if digest:
            return digest
        return self.get_manifest(repo, reference).digest

    def get_manifest(self, repo: str, reference: str) -> ManifestData:
        resp = self._call(
            "GET",
            f"/v2/{repo}/manifests/{reference}",
            scope=self._scope(repo),
            headers={"Accept": ACCEPT_MANIFESTS},
        )
        self._check(resp, f"GET manifest {repo}:{reference}", (200,))
        body = resp.content
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
        if not media_type or media_type == "application/json":
            media_type = json.loads(body).get("mediaType", MANIFEST_V2)
        return ManifestData(body=body, media_type=media_type, digest=digest)

    def put_manifest(self, repo: str, reference: str, manifest: ManifestData) -> str:
        resp = self._call(
            "PUT",
            f"/v2/{repo}/manifests/{reference}",
            scope=self._scope(repo, "pull,push"),
            headers={"Content-Type": manifest.media_type},
            data=manifest.body,
        )
        self._check(resp, f"PUT manifest {repo}:{reference}", (201, 200))
        digest = resp.headers.get("Docker-Content-Digest", manifest.digest)
        if digest != manifest.digest:
            raise self._fail(
                f"PUT manifest {repo}:{reference}", f"stored digest {digest} ≠ sent {manifest.digest}"
            )
        return digest

    def delete_manifest(self, repo: str, digest: str) -> None:
        resp = self._call(
            "DELETE", f"/v2/{repo}/manifests/{digest}", scope=self._scope(repo, "pull,push,delete")
        )
        self._check(resp, f"DELETE manifest {repo}@{digest}", (202, 200))

    def list_tags(self, repo: str) -> list[str]:
        tags: list[str] = []
        url = f"/v2/{repo}/tags/list"
        while url:
            resp = self._call("GET", url, scope=self._scope(repo))
            if resp.status_code == 404:
                return tags
            self._check(resp, f"list tags of {repo}", (200,))
            tags += resp.json().get("tags") or []
            link = resp.headers.get("Link", "")
            m = re.match(r"<([^>]+)>", link)
            url = urljoin(self.base + "/", m.group(1)) if m else ""
        return tags

    def blob_size(self, repo: str, digest: str) -> int | None:
        """HEAD the blob: its size, or None when absent."""
        resp = self._call("HEAD", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo))
        if resp.status_code == 404:
            return None
        self._check(resp, f"HEAD blob {repo}@{digest[:19]}", (200,))
        return int(resp.headers.get("Content-Length", "0"))

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool:
        """Cross-repository mount on this registry; False when the registry started an upload instead."""
        resp = self._call(
            "POST",
            f"/v2/{repo}/blobs/uploads/",
            scope=f"{self._scope(repo, 'pull,push')} {self._scope(from_repo)}",
            params={"mount": digest, "from": from_repo},
        )
        self._check(resp, f"mount blob {digest[:19]} from {from_repo} into {repo}", (201, 202))
        return resp.status_code == 201

    def get_blob(self, repo: str, digest: str) -> requests.Response:
        """Streamed GET of a blob (follows redirects to storage). The caller closes the response."""
        resp = self._call("GET", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo), stream=True)
        return self._check(resp, f"GET blob {repo}@{digest[:19]}", (200,))

    def upload_blob(self, repo: str, digest: str, chunks: Callable[[], Iterator[bytes]]) -> None:
        """Upload a blob: POST an upload, PATCH the stream (chunked transfer), PUT ?digest=.

        *chunks* is called once per attempt so that a retried upload restarts from the first byte.
        """
        scope = self._scope(repo, "pull,push")

        def once() -> None:
            resp = self._send("POST", f"/v2/{repo}/blobs/uploads/", scope=scope)
            self._check(resp, f"start upload of {digest[:19]} to {repo}", (202,))
            location = urljoin(self.base + "/", resp.headers["Location"])
            resp = self._send(
                "PATCH",
                location,
                scope=scope,
                data=chunks(),
                headers={"Content-Type": "application/octet-stream"},
            )
            self._check(resp, f"upload {digest[:19]} to {repo}", (202, 204))
            location = urljoin(self.base + "/", resp.headers.get("Location", location))
            sep = "&" if "?" in location else "?"
            resp = self._send("PUT", f"{location}{sep}digest={digest}", scope=scope)
            self._check(resp, f"finish upload of {digest[:19]} to {repo}", (201,))

        self._retrying(once)


def copy_blob(src: RegistryApi, src_repo: str, dst: RegistryApi, dst_repo: str, digest: str) -> int:
    """Make *dst* hold blob *digest*; returns the bytes transferred (0 when present or mounted)."""
    if dst.blob_size(dst_repo, digest) is not None:
        return 0
    if src.host == dst.host and src_repo != dst_repo and dst.mount_blob(dst_repo, digest, src_repo):
        return 0
    sent = 0

    def stream() -> Iterator[bytes]:
        nonlocal sent
        sent = 0
        h = hashlib.sha256()
        with src.get_blob(src_repo, digest) as resp:
            for chunk in resp.iter_content(_CHUNK):
                h.update(chunk)
                sent += len(chunk)
                yield chunk
        if "sha256:" + h.hexdigest() != digest:
            raise RegistryError(f"registry {src.name}: blob {digest} streamed with a different sha256")

    dst.upload_blob(dst_repo, digest, stream)
    return sent


def copy_manifest(
    src: RegistryApi,
    src_repo: str,
    reference: str,
    dst: RegistryApi,
    dst_repo: str,
    *,
    put_as: str | None = None,
) -> tuple[str, int]:
    """Copy an image (or index, recursively) by reference; every blob before the manifest.

    Returns (digest, bytes transferred). The manifest is put under *put_as* (default: its digest, so
    nothing is tagged by the copy itself).
    """
    manifest = src.get_manifest(src_repo, reference)
    sent = 0
    if manifest.media_type in INDEX_TYPES:
        for child in manifest.json().get("manifests", []):
            _, n = copy_manifest(src, src_repo, child["digest"], dst, dst_repo)
            sent += n
    else:
        for digest, _ in manifest.blobs():
            sent += copy_blob(src, src_repo, dst, dst_repo, digest)
    dst.put_manifest(dst_repo, put_as or manifest.digest, manifest)
    return manifest.digest, sent


class Endpoint(Protocol):
    """What :func:`client_for` needs of a registry target (:class:`imagesmith.refs.Registry`)."""

    @property
    def name(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def insecure(self) -> bool: ...


def client_for(target: Endpoint) -> RegistryClient:
    """The one factory of registry clients for a cell's registries (build and release take it as a seam).

    The target's ``kind`` chooses the credential chain (:func:`imagesmith.credentials.credential_chain`).
    """
    return RegistryClient(
        target.host,
        name=target.name,
        kind=target.kind,
        insecure=target.insecure,
        chain=credential_chain(target.host, target.kind, name=target.name),
    )


_: type[RegistryApi] = RegistryClient  # mypy checks that the HTTP client implements the seam
