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
- retries (:class:`RetryPolicy`) per request, with exponential backoff and jitter, a per-request timeout and a
  per-operation deadline, on transient faults (5xx, 429, timeouts, connection resets), never on
  ``UNAUTHORIZED``, ``DENIED``, ``MANIFEST_UNKNOWN`` or what a registry says will not change by itself
  (storage full, quota, invalid name or manifest: :func:`registry_fault` turns those bodies into a fix line);
- blob uploads in chunks (``PATCH`` with ``Content-Range``): a dropped chunk is resumed at the offset the
  registry reports, else the blob restarts from its first byte; an upload given up is cancelled (``DELETE`` of
  the upload session) so it does not stay on the registry's disk;
- copies that never trust a blob by its name alone (:func:`copy_blob`, :data:`VERIFY_LEVELS`): a blob the
  destination already holds is checked (HEAD digest and size, or a full re-read), a mismatch is repaired or
  reported as :class:`~imagesmith.errors.CorruptBlobError`; errors say which side failed (source/destination).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import math
import os
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar, get_args
from urllib.parse import urljoin, urlsplit

import requests
import urllib3
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_after_delay,
    wait_exponential_jitter,
)
from tenacity.stop import stop_base

from imagesmith.credentials import (
    DOCKER_HUB_API,
    CredentialChain,
    auth_hint,
    credential_chain,
    realm_problem,
    sends_credentials,
)
from imagesmith.credentials import Credentials as Credentials  # re-exported: callers may import it from here
from imagesmith.credentials import lookup_credentials as lookup_credentials
from imagesmith.errors import ConfigError, CorruptBlobError, ManifestUnknownError, RegistryError
from imagesmith.schema import HOST_PORT

T = TypeVar("T")

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST_V2 = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ACCEPT_MANIFESTS = ", ".join((MANIFEST_V2, MANIFEST_LIST_V2, OCI_MANIFEST, OCI_INDEX))
INDEX_TYPES = frozenset({MANIFEST_LIST_V2, OCI_INDEX})
_CHUNK = 8 << 20
_DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10
#: bytes per upload PATCH: what a refused request costs to send again, and held in memory per upload (ECR
#: wants at least 5 MiB; each PATCH costs the registry a round trip: 16 MiB chunks were 20 % slower here)
UPLOAD_CHUNK = 64 << 20

#: How far a copy trusts a blob (lowest to highest; ``off``, the pre-issue-18 behaviour, is for benchmarks):
#: ``head`` (default) — a blob the destination already holds must answer HEAD with its digest and the size the
#: manifest gives; ``read`` — such a blob is read back in full and hashed (a registry that is not trusted);
#: ``full`` — ``read``, plus every blob the copy uploaded is read back and hashed (the nightly's verify mode).
Verify = Literal["off", "head", "read", "full"]
VERIFY_LEVELS: tuple[str, ...] = get_args(Verify)
VERIFY_ENV = "IMAGESMITH_VERIFY"


def verify_level(value: str | None = None, *, allow_off: bool = False) -> Verify:
    """*value*, else ``$IMAGESMITH_VERIFY``, else ``head``; RegistryError for an unknown level (``off`` only
    with *allow_off*: benchmarks)."""
    level = (value or os.environ.get(VERIFY_ENV) or "head").strip().lower()
    if level not in VERIFY_LEVELS or (level == "off" and not allow_off):
        raise RegistryError(
            f"verify level {level!r} is not one of head, read, full",
            hint=f"--verify head|read|full (or {VERIFY_ENV}); full is the nightly's",
        )
    return level  # type: ignore[return-value]


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    """How hard one registry request is tried: ``attempts`` tries at most, waits from ``backoff`` doubling up
    to ``max_wait`` (plus up to ``backoff`` of jitter), never past ``deadline`` seconds for the operation (one
    request with its retries, one upload chunk, one blob commit), each request bounded by
    ``connect_timeout`` / ``read_timeout``. The defaults ride out an outage of about a minute;
    ``$IMAGESMITH_REGISTRY_ATTEMPTS`` and ``$IMAGESMITH_REGISTRY_DEADLINE`` change them."""

    attempts: int = 10
    backoff: float = 0.5
    max_wait: float = 10.0
    deadline: float = 180.0
    connect_timeout: float = 10.0
    read_timeout: float = 60.0
    #: times one blob upload may restart from its first byte: the registry lost the session, or cannot resume
    #: it (docker-registry 2.8 cannot after a PATCH whose answer was lost: its signed session state is stale)
    restarts: int = 10

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> RetryPolicy:
        env = os.environ if env is None else env
        policy = cls()
        attempts = env.get("IMAGESMITH_REGISTRY_ATTEMPTS", "").strip()
        if attempts:
            if not attempts.isdigit() or not 1 <= int(attempts) <= 1000:
                raise ConfigError(
                    f"IMAGESMITH_REGISTRY_ATTEMPTS={attempts[:40]!r} is not a number of attempts",
                    hint=f"a whole number from 1 to 1000 (default {cls.attempts}), or unset it",
                )
            policy = replace(policy, attempts=int(attempts))
        deadline = env.get("IMAGESMITH_REGISTRY_DEADLINE", "").strip()
        if deadline:
            try:
                seconds = float(deadline)
            except ValueError:
                seconds = math.nan
            if not 1.0 <= seconds <= 86400.0:  # also refuses nan and inf
                raise ConfigError(
                    f"IMAGESMITH_REGISTRY_DEADLINE={deadline[:40]!r} is not a number of seconds",
                    hint=f"seconds from 1 to 86400 (default {cls.deadline:g}), or unset it",
                )
            policy = replace(policy, deadline=seconds)
        return policy

    def retrying(self, retry: Any = None) -> Retrying:
        backoff = wait_exponential_jitter(multiplier=self.backoff, max=self.max_wait, jitter=self.backoff)

        def wait(state: RetryCallState) -> float:
            # a registry that says how long to wait (429/503 with Retry-After) is waited for that long
            asked = _asked_wait(state)
            return max(float(backoff(state)), asked or 0.0)

        return Retrying(
            stop=stop_after_attempt(self.attempts)
            | stop_after_delay(self.deadline)
            | _StopPastDeadline(self.deadline),
            wait=wait,
            retry=retry or retry_if_exception_type(_Transient),
            reraise=True,
        )

    def timeout(self, started: float) -> tuple[float, float]:
        """(connect, read) timeouts for a request of an operation that started at *started*."""
        left = max(1.0, self.deadline - (time.monotonic() - started))
        return (min(self.connect_timeout, left), min(self.read_timeout, left))


#: the largest manifest read: registries refuse to store larger ones (distribution and containerd: 4 MiB), so
#: a larger answer is not an image manifest and is not read into memory
MAX_MANIFEST_BYTES = 4 << 20
#: the largest other answer read whole (a tag list, a token, an error body): the release index's cap
MAX_ANSWER_BYTES = 32 << 20


class _TooLarge(Exception):
    """An answer past the size cap of what was asked for: never read further, never retried."""

    def __init__(self, limit: int, size: int | None) -> None:
        super().__init__(limit, size)
        self.limit = limit
        self.size = size

    def describe(self, what: str = "the answer") -> str:
        said = f"{self.size} bytes (Content-Length)" if self.size is not None else "longer"
        return f"{what} is {said}, past the {self.limit >> 20} MiB cap; it was not read"


class _Transient(Exception):
    """A fault worth retrying (5xx, 429, timeout, reset). Carries the last description, the seconds the
    registry asked to wait (``Retry-After``), and the host at fault when it is not the registry's own (a token
    service, blob storage a redirect led to)."""

    def __init__(self, what: str, *, retry_after: float | None = None, elsewhere: str | None = None) -> None:
        super().__init__(what)
        self.what = what
        self.retry_after = retry_after
        #: the host at fault when it is not the registry's own, as the fix line names it
        self.elsewhere = elsewhere


def _asked_wait(state: RetryCallState) -> float | None:
    """The ``Retry-After`` seconds of the attempt that just failed, or None."""
    exc = state.outcome.exception() if state.outcome is not None and state.outcome.failed else None
    return exc.retry_after if isinstance(exc, _Transient) else None


class _StopPastDeadline(stop_base):
    """Stop when the registry's ``Retry-After`` would end past the deadline: give up now, saying so."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        asked = _asked_wait(retry_state)
        return asked is not None and (retry_state.seconds_since_start or 0.0) + asked > self.deadline


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: delta-seconds (``120``) or an HTTP-date (``Wed, 21 Oct
    2015 07:28:00 GMT``, RFC 9110 10.2.3); None when absent or unreadable (then the backoff alone counts)."""
    if not value or not value.strip():
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


@dataclass
class _Upload:
    """One upload session: where the registry said to send the next request."""

    location: str | None = None


class _Restart(Exception):
    """The registry lost an upload session (or refused to resume it): upload the blob again from byte 0."""


@dataclass(frozen=True)
class RegistryFault:
    """A registry error body translated: what it means, the fix, and whether waiting can help."""

    label: str
    hint: str
    transient: bool = False


_FAULTS: tuple[tuple[re.Pattern[str], RegistryFault], ...] = (
    (
        re.compile(r"no space left on device|ENOSPC|disk full|insufficient storage|not enough space", re.I),
        RegistryFault(
            "storage full",
            "free space on the registry's storage (delete old tags and run its garbage collection, or grow "
            "the disk), then rerun; the upload was abandoned and cancelled",
        ),
    ),
    (
        re.compile(r"quota|storage limit|exceeds? (the )?(limit|allowance)|TOOMANYREQUESTS.*storage", re.I),
        RegistryFault(
            "quota exceeded",
            "raise the project/repository quota in the registry (or delete old tags), then rerun",
        ),
    ),
    (
        re.compile(r"BLOB_UNKNOWN|blob unknown", re.I),
        RegistryFault(
            "blob unknown",
            "the registry lacks a blob the manifest names (an interrupted copy, or garbage collection "
            "removed it): rerun, which copies the blob again",
        ),
    ),
    (
        re.compile(r"NAME_INVALID|invalid repository name", re.I),
        RegistryFault(
            "repository name invalid",
            "repository names are lowercase [a-z0-9] parts joined by '/', '.', '_' or '-': fix namespace/"
            "repository in the registries file",
        ),
    ),
    (
        re.compile(r"NAME_UNKNOWN|repository name not known", re.I),
        RegistryFault(
            "repository unknown",
            "create the repository first (ECR: aws ecr create-repository; Harbor/ACR/SWR: the project or "
            "namespace), or fix namespace/repository in the registries file",
        ),
    ),
    (
        re.compile(r"MANIFEST_INVALID|manifest invalid|MANIFEST_BLOB_UNKNOWN", re.I),
        RegistryFault(
            "manifest invalid",
            "the registry refused the manifest (a blob it names is missing, or the registry does not accept "
            "its media type): rerun to copy missing blobs, or drop this registry from the cell",
        ),
    ),
    (
        re.compile(r"\bDENIED\b|requested access to the resource is denied", re.I),
        RegistryFault("denied", "check the account's push/pull rights on this repository"),
    ),
)


def registry_fault(text: str) -> RegistryFault | None:
    """The known registry error in *text* (an error body, a push stream's message), or None."""
    for pattern, fault in _FAULTS:
        if pattern.search(text):
            return fault
    return None


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


#: the most of an error answer read (of a streamed request: a blob GET whose error body is endless)
_ERROR_BODY_BYTES = 1 << 20


def _error_codes(resp: requests.Response) -> tuple[list[str], str]:
    if getattr(resp, "_content_consumed", True) is False and getattr(resp, "raw", None) is not None:
        try:  # a streamed answer: its error body is read up to a cap, never whole
            resp._content = resp.raw.read(_ERROR_BODY_BYTES, decode_content=True) or b""
        except (urllib3.exceptions.HTTPError, OSError):
            resp._content = b""
        setattr(resp, "_content_consumed", True)  # noqa: B010 (requests' own flag)
    try:
        data = resp.json()
        errors = (data.get("errors") if isinstance(data, dict) else None) or []
    except ValueError:
        return [], resp.text[:300].strip()
    codes = [str(e.get("code", "")) for e in errors if isinstance(e, dict)]
    messages = "; ".join(
        f"{e.get('code', '')}: {e.get('message', '')}" + _detail(e.get("detail"))
        for e in errors
        if isinstance(e, dict)
    )
    return codes, messages or resp.text[:300].strip()


def _detail(detail: Any) -> str:
    """An error's ``detail`` for a message: text as is; docker-registry's storage-driver errors
    (``{"DriverName": …, "Enclosed": {"Op": "write", "Err": 28}}``) as the errno's name."""
    if isinstance(detail, str) and detail:
        return f" ({detail})"
    if isinstance(detail, dict):
        enclosed = detail.get("Enclosed")
        if isinstance(enclosed, dict) and isinstance(enclosed.get("Err"), int):
            errno_name = {
                28: "no space left on device",
                122: "disk quota exceeded",
                30: "read-only file system",
            }
            err = int(enclosed["Err"])
            what = errno_name.get(err, f"errno {err}")
            return f" ({enclosed.get('Op', 'storage')} {enclosed.get('Path', '')}: {what})"
        if detail:
            return f" ({json.dumps(detail, sort_keys=True)[:200]})"
    return ""


@dataclass(frozen=True, kw_only=True)
class ManifestData:
    body: bytes
    media_type: str
    digest: str
    #: where it was read (``registry NAME (HOST) REPO@REF``), named in errors about its content
    origin: str = field(default="", compare=False)

    def _invalid(self, what: str) -> RegistryError:
        where = self.origin or f"manifest {self.digest}"
        return RegistryError(
            f"{where}: not a valid image manifest: {what}",
            hint="the registry serves a manifest that breaks the image spec (every descriptor needs a digest "
            "and a size): push the image again, or drop this registry from the cell",
        )

    def json(self) -> dict[str, Any]:
        try:
            data = json.loads(self.body)
        except ValueError as exc:
            raise self._invalid(f"not JSON ({exc})") from None
        if not isinstance(data, dict):
            raise self._invalid("not a JSON object")
        return data

    def blobs(self) -> list[tuple[str, int]]:
        """(digest, size) of the config and every layer of an image manifest."""
        data = self.json()
        out: list[tuple[str, int]] = []
        for where, desc in [("config", data.get("config"))] + [
            (f"layers[{i}]", layer) for i, layer in enumerate(data.get("layers") or [])
        ]:
            if not isinstance(desc, dict) or not isinstance(desc.get("digest"), str):
                raise self._invalid(f"{where}.digest is missing")
            size = desc.get("size")
            if isinstance(size, bool) or not isinstance(size, int) or size < 0:
                raise self._invalid(f"{where}.size is missing or not a byte count ({size!r})")
            out.append((desc["digest"], size))
        return out

    def compressed_size(self) -> int:
        """Bytes a pull downloads: the config plus every (compressed) layer."""
        return sum(size for _, size in self.blobs())


@dataclass(frozen=True)
class BlobStat:
    """What HEAD says of a blob: its size and the digest the registry names it by (None when not sent)."""

    size: int
    digest: str | None = None


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
    def stat_blob(self, repo: str, digest: str) -> BlobStat | None: ...
    def delete_blob(self, repo: str, digest: str) -> bool: ...
    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool: ...
    def get_blob(self, repo: str, digest: str, offset: int = 0) -> BlobStream: ...
    def upload_blob(self, repo: str, digest: str, chunks: Callable[[], Iterator[bytes]]) -> None: ...
    def delete_tag(self, repo: str, tag: str) -> bool: ...
    def probe_write(self, repo: str) -> None: ...

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
        attempts: int | None = None,
        backoff: float | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        policy: RetryPolicy | None = None,
        chunk_size: int = UPLOAD_CHUNK,
        env: Mapping[str, str] | None = None,
    ) -> None:
        if not re.fullmatch(HOST_PORT, host):
            raise RegistryError(
                f"registry {name or host!r}: {host!r} is not a registry host[:port]",
                hint="a DNS name or IPv4 address, optional :port (ghcr.io, 127.0.0.1:5000); no scheme, "
                "user@, path or spaces",
            )
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
        policy = policy or RetryPolicy.from_env(env)
        overrides: dict[str, Any] = {}
        if attempts is not None:
            overrides["attempts"] = attempts
        if backoff is not None:
            overrides["backoff"] = backoff
            overrides["max_wait"] = max(backoff, min(policy.max_wait, backoff * 16))
        if timeout is not None:
            overrides["read_timeout"] = timeout
            overrides["connect_timeout"] = min(policy.connect_timeout, timeout)
        if deadline is not None:
            overrides["deadline"] = deadline
        self.policy = replace(policy, **overrides)
        self.chunk_size = max(1, chunk_size)
        self.session = requests.Session()
        self._auth: dict[str, str] = {}  # scope → Authorization header value
        self._basic_ok = False
        #: why credentials were kept from a token realm (named when the registry then refuses)
        self._withheld: str | None = None

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
        """What the engine's push to this registry should send (the same chain and cache as the API); None for
        a registry spoken to in plain HTTP on a host other than loopback (credentials never go there)."""
        if not self.sends_credentials:
            return None
        return self.credentials

    @property
    def sends_credentials(self) -> bool:
        """False for an ``insecure`` registry off loopback: no credentials over plain HTTP."""
        return sends_credentials(self.base, self.base + "/v2/")

    def refresh_credentials(self, refused: Credentials) -> Credentials | None:
        """Other credentials after *refused* was refused (a token or helper run again), or None (always for a
        registry that gets no credentials: plain HTTP off loopback)."""
        if not self.sends_credentials:
            return None
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

    def _gave_up(self, exc: _Transient, attempts: int) -> RegistryError:
        where = f"registry {self.name} ({self.host})"
        if exc.elsewhere:
            where = f"registry {self.name}'s {exc.elsewhere}"
        if exc.retry_after is not None and exc.retry_after > 0:
            return self._fail(
                "rate limited or unavailable",
                f"{exc.what}; it asks to retry after {exc.retry_after:.0f} s (Retry-After), which would pass "
                f"the {self.policy.deadline:.0f} s deadline (gave up after {attempts} attempt(s))",
                hint=f"wait until {where} takes requests again (a pull/push rate limit: use an account with "
                "a higher limit), then rerun; IMAGESMITH_REGISTRY_DEADLINE gives a longer wait more time",
            )
        return self._fail(
            "unreachable or failing",
            f"{exc.what} (gave up after {attempts} attempt(s) within {self.policy.deadline:.0f} s)",
            hint=f"check that {where} is up and reachable, then rerun (what is "
            "already copied is not sent again); IMAGESMITH_REGISTRY_DEADLINE gives a longer outage more time",
        )

    def _retrying(self, fn: Callable[[float], T]) -> T:
        """*fn(started)* with the policy's retries on _Transient; RegistryError once they are spent."""
        started = time.monotonic()
        retrying = self.policy.retrying()
        try:
            return retrying(fn, started)
        except _Transient as exc:
            raise self._gave_up(exc, retrying.statistics.get("attempt_number", self.policy.attempts)) from exc

    def _token(self, params: dict[str, str], scope: str) -> str | int:
        """A Bearer header value from the realm, or the status (401/403) it refused the credentials with."""
        realm = params.get("realm")
        if not realm:
            raise self._fail(
                "auth",
                "Bearer challenge without a realm",
                hint=f"registry {self.name} (or a proxy in front of it) asks for a token without saying "
                "where to get one: check its auth configuration (token.realm)",
            )
        query = {
            k: v
            for k, v in (("service", params.get("service")), ("scope", scope or params.get("scope")))
            if v
        }
        problem = realm_problem(self.base, self.host, self.kind, realm)
        if problem is None and not self.sends_credentials:
            problem = (
                "the registry is spoken to in plain HTTP on a host other than loopback (insecure = true)"
            )
        creds = None if problem else self._optional_credentials()
        if problem and self._withheld is None:
            self._withheld = problem  # an anonymous token may do (a public repository); named if not
        headers = {"Authorization": creds.basic()} if creds else {}
        try:
            resp = self.session.get(
                realm,
                params=query,
                headers=headers,
                timeout=(self.policy.connect_timeout, self.policy.read_timeout),
                verify=self.verify,
                allow_redirects=False,  # a redirect must not carry the credentials on to another host
                stream=True,
            )
            try:
                _read_within(
                    resp, time.monotonic() + self.policy.read_timeout, f"token endpoint {_short(realm)}"
                )
            except _Transient as exc:
                exc.elsewhere = f"token service {urlsplit(realm).netloc}"
                raise
        except requests.exceptions.SSLError as exc:
            raise self._fail(
                "auth",
                f"token endpoint {_short(realm)}: certificate not trusted ({exc.__class__.__name__})",
                hint=f"trust the token service's CA (the host's CA store), or fix registry {self.name}'s "
                "host",
            ) from exc
        except requests.RequestException as exc:
            raise _Transient(
                f"token endpoint {_short(realm)}: {type(exc).__name__}",
                elsewhere=f"token service {urlsplit(realm).netloc}",
            ) from exc
        if resp.status_code >= 500 or resp.status_code == 429:
            resp.close()
            raise _Transient(
                f"token endpoint {_short(realm)} answered HTTP {resp.status_code}",
                retry_after=retry_after_seconds(resp.headers.get("Retry-After")),
                elsewhere=f"token service {urlsplit(realm).netloc}",
            )
        if resp.status_code in (401, 403):
            resp.close()
            return resp.status_code
        if resp.status_code != 200:
            resp.close()
            raise self._fail(
                "auth",
                f"token endpoint {_short(realm)} answered HTTP {resp.status_code}",
                hint=f"check registry {self.name}'s host and kind in the registries file: its token service "
                "does not answer as a registry token service does",
            )
        try:
            data = resp.json()
        except ValueError:
            data = None
        token = data.get("token") or data.get("access_token") if isinstance(data, dict) else None
        if not isinstance(token, str) or not token.strip():
            raise self._fail(
                "auth",
                f"token endpoint {_short(realm)} answered without a token (not a JSON object with a "
                '"token" or "access_token" string)',
                hint=f"check registry {self.name}'s host and kind in the registries file; a proxy in front "
                "of the token service may be answering instead of it",
            )
        return f"Bearer {token.strip()}"

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
        started: float | None = None,
        limit: int = MAX_ANSWER_BYTES,
    ) -> requests.Response:
        """One request with auth (challenge answered once). Raises _Transient on retryable faults; a 5xx whose
        body says the fault will not pass by itself (storage full, quota) is returned for :meth:`_check`.

        Credentials (Basic, or a cached token) go only with requests to the registry's own origin over https
        (plain HTTP only on loopback, :func:`~imagesmith.credentials.sends_credentials`): redirects are
        followed here, hop by hop, and a hop to another host (blob storage, a CDN), an absolute ``Location``
        or ``Link`` elsewhere, goes without them; a 401 from another host is not answered."""
        full = url if url.startswith("http") else self.base + url
        timeout = self.policy.timeout(time.monotonic() if started is None else started)

        def one(verb: str, target: str, h: dict[str, str], body: Any) -> requests.Response:
            try:
                resp = self.session.request(
                    verb,
                    target,
                    headers=h,
                    data=body,
                    params=params if target == full else None,
                    stream=True,
                    timeout=timeout,
                    verify=self.verify,
                    allow_redirects=False,
                )
                if not stream:  # the whole answer within the read timeout, not one byte per timeout
                    _read_within(
                        resp,
                        time.monotonic() + timeout[1],
                        f"{verb} {_short(target)}",
                        limit,
                        head=verb == "HEAD",
                    )
                return resp
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
                other = urlsplit(target).netloc
                raise _Transient(
                    f"{verb} {_short(target)}: {type(exc).__name__}",
                    elsewhere=None
                    if other.lower() == self.api_host.lower()
                    else f"storage {other}, where the registry redirected the request",
                ) from exc

        def attempt(auth: str | None) -> requests.Response:
            verb, target, body = method, full, data
            resp = None
            for _hop in range(_MAX_REDIRECTS + 1):
                h = dict(headers or {})
                if auth and sends_credentials(self.base, target):
                    h["Authorization"] = auth
                resp = one(verb, target, h, body)
                location = resp.headers.get("Location")
                if not (allow_redirects and resp.status_code in _REDIRECTS and location):
                    break
                if body is not None and not isinstance(body, bytes | str) and resp.status_code in (307, 308):
                    break  # a streamed body cannot be sent again: the caller sees the redirect
                resp.close()
                target = urljoin(resp.url or target, location)
                if resp.status_code == 303 or (
                    resp.status_code in (301, 302) and verb not in ("GET", "HEAD")
                ):
                    verb, body = ("HEAD" if verb == "HEAD" else "GET"), None
            assert resp is not None
            if resp.status_code >= 500 or resp.status_code == 429:
                _codes, msg = _error_codes(resp)
                fault = registry_fault(msg)
                if fault is not None and not fault.transient and resp.status_code != 429:
                    resp._content = (msg or "").encode()  # read already: _check reports it
                    return resp
                resp.close()
                raise _Transient(
                    f"{method} {_short(full)}: HTTP {resp.status_code} {msg}".strip(),
                    retry_after=retry_after_seconds(resp.headers.get("Retry-After")),
                )
            return resp

        own = sends_credentials(self.base, full)
        resp = attempt((self._auth.get(scope) or self._auth.get("*")) if own else None)
        if resp.status_code != 401 or "WWW-Authenticate" not in resp.headers:
            return resp
        if not own or not sends_credentials(self.base, resp.url or full):
            return self._foreign_challenge(resp, full)
        scheme, params_ = parse_challenge(resp.headers["WWW-Authenticate"])
        if scheme not in ("basic", "bearer"):
            return resp
        resp.close()
        answered = self._answer(scheme, params_, scope, attempt)
        if (
            isinstance(answered, requests.Response)
            and answered.status_code == 401
            and not sends_credentials(self.base, answered.url or full)  # a redirect led elsewhere
        ):
            return self._foreign_challenge(answered, full)
        refused = isinstance(answered, int) or answered.status_code == 401
        if refused and self._refresh():  # a short-lived token or helper: once more with fresh ones, no loop
            if isinstance(answered, requests.Response):
                answered.close()
            answered = self._answer(scheme, params_, scope, attempt)
        if isinstance(answered, int):
            if self._deferred is not None:
                raise self._deferred
            if self._withheld is not None:
                raise self._fail(
                    "unauthorized",
                    "the token endpoint refused an anonymous request; credentials were not sent: "
                    + self._withheld,
                    hint=self._withheld_hint(),
                )
            raise self._fail(
                "unauthorized",
                f"token endpoint refused the credentials (HTTP {answered})",
                hint=self._hint(),
            )
        return answered

    def _foreign_challenge(self, resp: requests.Response, full: str) -> requests.Response:
        """A 401 from where this registry's credentials may not go: explained when it is this registry over
        plain HTTP; another host's is returned unanswered (the caller's check reports it)."""
        where = resp.url or full
        if _same_host(self.base, full) and not self.sends_credentials:
            resp.close()
            raise self._fail(
                "unauthorized",
                "the registry wants credentials, but it is spoken to in plain HTTP (insecure = true) on "
                f"{self.api_host}, not a loopback host: imagesmith sends no credentials over plain HTTP",
                hint="serve the registry over https (its CA in /etc/docker/certs.d/HOST/ca.crt) and drop "
                "`insecure = true`, or reach it on 127.0.0.1 (an SSH tunnel)",
            )
        if _same_host(self.base, where) and urlsplit(where).scheme == "http" and self.scheme == "https":
            resp.close()
            raise self._fail(
                "unauthorized",
                f"the registry sent this request to plain HTTP ({_short(where)}) and asks for credentials "
                "there: imagesmith sends no credentials over plain HTTP",
                hint="the registry's proxy builds http:// URLs (a TLS proxy that does not pass "
                "X-Forwarded-Proto: https, or the registry's http.host setting): make it answer https URLs",
            )
        return resp  # another host's challenge is not answered with this registry's credentials

    def _withheld_hint(self) -> str:
        return (
            f"check registry {self.name}'s host and kind in the registries file (kind {self.kind}); a "
            "registry whose real token service lives on another host needs a row in "
            "imagesmith/data/registry_realms.toml (with its source) — credentials never go to a realm "
            "imagesmith does not know for that registry, nor over plain HTTP off loopback"
        )

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
        try:
            return self._retrying(lambda started: self._send(method, url, started=started, **kw))
        except _TooLarge as exc:
            raise self._fail(
                f"{method} {_short(url)}",
                exc.describe(),
                hint=f"registry {self.name} (or a proxy in front of it) serves something that is not what "
                "the registry API answers there: check the reference and the registry, or drop it from the "
                "registries file",
            ) from None

    def _check(self, resp: requests.Response, what: str, ok: tuple[int, ...]) -> requests.Response:
        if resp.status_code in ok:
            return resp
        codes, message = _error_codes(resp)
        resp.close()
        message = message or f"HTTP {resp.status_code} (no error body)"
        if resp.status_code == 401 or "UNAUTHORIZED" in codes:
            hint = self._hint()
            if self._withheld is not None:
                message = f"{message}; credentials were not sent: {self._withheld}"
                hint = self._withheld_hint()
            elif self._credentials:
                message = f"credentials from {self._credentials.origin} were refused ({message})"
            raise self._fail(what, f"unauthorized: {message}", hint=hint)
        if "MANIFEST_UNKNOWN" in codes or (resp.status_code == 404 and "manifest" in what and not codes):
            raise ManifestUnknownError(
                f"registry {self.name} ({self.host}): {what}: manifest unknown ({message})"
            )
        fault = registry_fault(" ".join(codes) + " " + message)
        if fault is not None:
            raise self._fail(what, f"{fault.label}: {message}", hint=fault.hint)
        if resp.status_code == 403:
            raise self._fail(
                what, f"denied: {message}", hint="check the account's push/pull rights on this repository"
            )
        if resp.status_code == 405:
            raise self._fail(
                what,
                f"HTTP 405 {message}",
                hint="the registry refuses writes (read-only/maintenance mode) or deletes are disabled",
            )
        if resp.status_code in _REDIRECTS:
            raise self._fail(
                what,
                f"HTTP {resp.status_code} redirect "
                + (f"to {_short(resp.headers.get('Location', ''))} " if resp.headers.get("Location") else "")
                + f"not followed (more than {_MAX_REDIRECTS} hops, a loop, or a redirect of an upload)",
                hint=f"registry {self.name} (or a proxy in front of it) redirects in a loop: check its "
                "configuration (http.host, the proxy's rewrite rules), then rerun",
            )
        raise self._fail(
            what,
            message if message.startswith("HTTP ") else f"HTTP {resp.status_code} {message}",
            hint=f"registry {self.name} answered what the registry API does not: check its host in the "
            "registries file and any proxy in between, then rerun",
        )

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
        digest = (resp.headers.get("Docker-Content-Digest") or "").strip()
        # a header that is no sha256 digest, or names another digest than the one asked for, is not taken at
        # its word: the manifest is read and hashed (get_manifest refuses content that does not match)
        if _DIGEST.fullmatch(digest) and (not _DIGEST.fullmatch(reference) or digest == reference):
            return digest
        return self.get_manifest(repo, reference).digest

    def get_manifest(self, repo: str, reference: str) -> ManifestData:
        """The manifest *reference* (tag or digest). Its content must hash to the digest asked for, and to
        the ``Docker-Content-Digest`` the registry names: a body cut or altered on the way is read again
        (twice more), then refused — never handed on to be copied or tagged."""
        what = f"GET manifest {repo}:{reference}"
        problem = ""
        for _ in range(3):
            try:
                resp = self._retrying(
                    lambda started: self._send(
                        "GET",
                        f"/v2/{repo}/manifests/{reference}",
                        scope=self._scope(repo),
                        headers={"Accept": ACCEPT_MANIFESTS},
                        started=started,
                        limit=MAX_MANIFEST_BYTES,
                    )
                )
            except _TooLarge as exc:
                raise self._fail(
                    what,
                    exc.describe("the manifest") + " (no registry stores a larger one)",
                    hint=f"registry {self.name} (or a proxy in front of it) serves something that is not an "
                    "image manifest there: check the reference, the registry's storage and any proxy in "
                    "between, or drop that registry",
                ) from None
            self._check(resp, what, (200,))
            body = resp.content
            digest = "sha256:" + hashlib.sha256(body).hexdigest()
            named = (resp.headers.get("Docker-Content-Digest") or "").strip()
            if _DIGEST.fullmatch(reference) and digest != reference:
                problem = f"its content hashes to {digest}, not the digest asked for"
                continue
            if named.startswith("sha256:") and named != digest:
                problem = (
                    f"the registry names it {named} (Docker-Content-Digest), its content hashes to {digest}"
                )
                continue
            origin = f"registry {self.name} ({self.host}) {repo}@{reference}"
            media_type = resp.headers.get("Content-Type", "").split(";")[0].strip()
            if not media_type or media_type == "application/json":
                doc = ManifestData(body=body, media_type="", digest=digest, origin=origin).json()
                media_type = str(doc.get("mediaType") or MANIFEST_V2)
            return ManifestData(body=body, media_type=media_type, digest=digest, origin=origin)
        raise CorruptBlobError(
            f"registry {self.name} ({self.host}): {what}: {problem} (3 reads); nothing was copied or tagged "
            "from it",
            hint=f"the manifest registry {self.name} serves (or a proxy in front of it) does not match its "
            "digest: check the registry's storage and any proxy or cache in between, then rerun",
        )

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
                f"PUT manifest {repo}:{reference}",
                f"stored digest {digest} ≠ sent {manifest.digest}",
                hint=f"registry {self.name} rewrites manifests (or a proxy in front of it does): push to it "
                "directly, or drop it from the cell's registries",
            )
        return digest

    def delete_manifest(self, repo: str, digest: str) -> None:
        resp = self._call(
            "DELETE", f"/v2/{repo}/manifests/{digest}", scope=self._scope(repo, "pull,push,delete")
        )
        self._check(resp, f"DELETE manifest {repo}@{digest}", (202, 200))

    def delete_tag(self, repo: str, tag: str) -> bool:
        """DELETE a tag alone (OCI distribution 1.1); False when the registry does not support it (Debian's
        docker-registry 2.8 answers 405/UNSUPPORTED or deletes by digest only)."""
        if tag.startswith("sha256:"):
            raise ValueError("delete_tag takes a tag, not a digest")
        resp = self._call(
            "DELETE", f"/v2/{repo}/manifests/{tag}", scope=self._scope(repo, "pull,push,delete")
        )
        if resp.status_code in (200, 202, 404):
            resp.close()
            return resp.status_code != 404 or self.manifest_digest(repo, tag) is None
        resp.close()
        return False

    def list_tags(self, repo: str) -> list[str]:
        tags: list[str] = []
        url = f"/v2/{repo}/tags/list"
        while url:
            resp = self._call("GET", url, scope=self._scope(repo))
            if resp.status_code == 404:
                return tags
            self._check(resp, f"list tags of {repo}", (200,))
            try:
                data = resp.json()
            except ValueError:
                data = None
            page = data.get("tags") if isinstance(data, dict) else None
            if page is not None and (not isinstance(page, list) or not all(isinstance(t, str) for t in page)):
                data = None
            if not isinstance(data, dict):
                raise self._fail(
                    f"list tags of {repo}",
                    'the answer is not a tag list (a JSON object with a "tags" list of strings)',
                    hint=f"check that {self.host} is a registry (not a web page or proxy error page) and "
                    "rerun",
                )
            tags += page or []
            link = resp.headers.get("Link", "")
            m = re.match(r"<([^>]+)>", link)
            url = urljoin(self.base + "/", m.group(1)) if m else ""
        return tags

    def stat_blob(self, repo: str, digest: str) -> BlobStat | None:
        """HEAD the blob: its size and the digest the registry names (``Docker-Content-Digest``), or None."""
        resp = self._call("HEAD", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo))
        if resp.status_code == 404:
            return None
        self._check(resp, f"HEAD blob {repo}@{digest[:19]}", (200,))
        return BlobStat(size=_length(resp), digest=resp.headers.get("Docker-Content-Digest") or None)

    def blob_size(self, repo: str, digest: str) -> int | None:
        """HEAD the blob: its size, or None when absent."""
        stat = self.stat_blob(repo, digest)
        return None if stat is None else stat.size

    def delete_blob(self, repo: str, digest: str) -> bool:
        """DELETE the blob from *repo*; False when the registry does not allow deletes (405, UNSUPPORTED)."""
        resp = self._call("DELETE", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo, "pull,push,delete"))
        if resp.status_code in (200, 202, 404):
            resp.close()
            return True
        codes, _ = _error_codes(resp)
        if resp.status_code in (400, 403, 405) or "UNSUPPORTED" in codes:
            resp.close()
            return False
        self._check(resp, f"DELETE blob {repo}@{digest[:19]}", (202,))
        return True

    def mount_blob(self, repo: str, digest: str, from_repo: str) -> bool:
        """Cross-repository mount on this registry; False when the registry started an upload instead (that
        upload session is cancelled at once, so nothing is left behind)."""
        resp = self._call(
            "POST",
            f"/v2/{repo}/blobs/uploads/",
            scope=f"{self._scope(repo, 'pull,push')} {self._scope(from_repo)}",
            params={"mount": digest, "from": from_repo},
        )
        self._check(resp, f"mount blob {digest[:19]} from {from_repo} into {repo}", (201, 202))
        if resp.status_code == 202 and resp.headers.get("Location"):
            self._cancel_upload(
                urljoin(self.base + "/", resp.headers["Location"]), self._scope(repo, "pull,push")
            )
        return resp.status_code == 201

    def get_blob(self, repo: str, digest: str, offset: int = 0) -> requests.Response:
        """Streamed GET of a blob (follows redirects to storage), from byte *offset* (``Range``; a registry
        that ignores it answers 200 with the whole blob). The caller closes the response."""
        headers = {"Range": f"bytes={offset}-"} if offset else None
        resp = self._call(
            "GET", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo), stream=True, headers=headers
        )
        return self._check(resp, f"GET blob {repo}@{digest[:19]}", (200, 206))

    # -- blob upload: chunked, resumable, cancelled when given up --------------------------------------------
    def upload_blob(self, repo: str, digest: str, chunks: Callable[[], Iterator[bytes]]) -> None:
        """Upload a blob: POST an upload session, PATCH it chunk by chunk (``Content-Range``), PUT ?digest=.

        Each request is retried on its own. A chunk whose PATCH failed is resumed at the offset the registry
        reports for the session; when the registry lost or refuses the session, *chunks* is called again and
        the blob restarts from its first byte (at most ``policy.restarts`` times). An upload that fails for
        good is cancelled (``DELETE`` of the session) so its bytes do not stay on the registry's disk.
        """
        scope = self._scope(repo, "pull,push")
        restarts = 0
        while True:
            up = self._start_upload(repo, digest, scope)
            try:
                self._upload_chunks(repo, digest, scope, up, chunks)
                return
            except _Restart as exc:
                self._cancel_upload(up, scope)
                restarts += 1
                if restarts > self.policy.restarts:
                    raise self._fail(
                        f"upload {digest[:19]} to {repo}",
                        f"the registry dropped the upload session {restarts} times ({exc})",
                        hint=f"check registry {self.name}'s storage and logs, then rerun",
                    ) from None
            except _Transient as exc:
                self._cancel_upload(up, scope)
                raise self._gave_up(exc, self.policy.attempts) from exc
            except BaseException:
                self._cancel_upload(up, scope)
                raise

    def _start_upload(self, repo: str, digest: str, scope: str) -> _Upload:
        resp = self._call("POST", f"/v2/{repo}/blobs/uploads/", scope=scope)
        self._check(resp, f"start upload of {digest[:19]} to {repo}", (202,))
        return _Upload(urljoin(self.base + "/", self._location(resp, f"start upload of {digest[:19]}")))

    def _location(self, resp: requests.Response, what: str) -> str:
        """The ``Location`` an upload answer must carry (a RegistryError naming the registry when absent)."""
        location = resp.headers.get("Location", "").strip()
        resp.close()
        if not location:
            raise self._fail(
                what,
                f"HTTP {resp.status_code} without a Location header (the registry API requires one)",
                hint=f"registry {self.name} (or a proxy in front of it) drops the Location header: fix the "
                "proxy, or push to the registry directly",
            )
        return location

    def _upload_status(self, up: _Upload, scope: str, started: float) -> int | None:
        """Bytes the registry holds for the session (its location updated), or None when it lost it."""
        assert up.location is not None
        resp = self._send("GET", up.location, scope=scope, started=started)
        if resp.status_code in (404, 400, 416):
            resp.close()
            return None
        self._check(resp, "upload status", (204, 200))
        rng = re.match(r"(?:bytes=)?0-(\d+)", resp.headers.get("Range", ""))
        up.location = urljoin(self.base + "/", resp.headers.get("Location", up.location))
        # docker-registry answers "0-0" for an empty session too: read it as empty (a registry holding one
        # byte then refuses the resent chunk with 416, and the blob restarts)
        return int(rng.group(1)) + 1 if rng and rng.group(1) != "0" else 0

    def _upload_chunks(
        self, repo: str, digest: str, scope: str, up: _Upload, chunks: Callable[[], Iterator[bytes]]
    ) -> None:
        """PATCH the blob chunk by chunk. Each chunk's body is streamed from *chunks* as it arrives (the
        source keeps sending while the destination writes) and its pieces are kept until the registry took
        it, so a failed PATCH is resumed from them. ``Content-Range`` needs the chunk's end: with a known
        size (:class:`SizedChunks`) it is computed, else each chunk is gathered before it is sent."""
        size: int | None = getattr(chunks, "size", None)
        source = iter(chunks())
        carry = b""
        ended = False
        failed: list[BaseException] = []  # the source's error, raised once the registry's session is current

        def pull(limit: int) -> bytes:
            nonlocal carry, ended
            while not carry and not ended:
                try:
                    carry = next(source)
                except StopIteration:
                    ended = True
            take, carry = carry[:limit], carry[limit:]
            return take

        offset = 0
        while True:
            if size is None:
                pending: list[bytes] = []
                held = 0
                while held < self.chunk_size and (piece := pull(self.chunk_size - held)):
                    pending.append(piece)
                    held += len(piece)
                if not pending:
                    break
                self._patch(repo, digest, scope, up, offset, held, pending, None)
                offset += held
                continue
            length = min(self.chunk_size, size - offset)
            if length <= 0:
                break
            pending = []

            def more(length: int = length, pending: list[bytes] = pending) -> Iterator[bytes]:
                got = sum(len(p) for p in pending)
                while got < length and not failed:
                    try:
                        piece = pull(length - got)
                    except BaseException as exc:  # the source failed: end this PATCH cleanly, raise later
                        failed.append(exc)
                        return
                    if not piece:
                        return
                    pending.append(piece)
                    got += len(piece)
                    yield piece

            self._patch(repo, digest, scope, up, offset, length, pending, more)
            if failed:
                raise failed[0]
            offset += sum(len(p) for p in pending)
            if sum(len(p) for p in pending) < length:
                break  # the source ended early: read_blob's size check (below) says so
        if size is not None:
            extra = pull(1)  # runs the source to its end: its digest and size checks
            if extra:
                raise RegistryError(f"blob {digest}: the source sends more than the {size} bytes expected")
        self._finish_upload(repo, digest, scope, up, offset)

    def _patch(
        self,
        repo: str,
        digest: str,
        scope: str,
        up: _Upload,
        offset: int,
        length: int,
        pending: list[bytes],
        more: Callable[[], Iterator[bytes]] | None,
    ) -> None:
        """PATCH bytes [offset, offset+length) — *pending* plus, when streaming, what *more* pulls — with
        retries; after a failure the registry is asked what it holds and the rest is sent from *pending*."""
        pos = 0  # bytes of the chunk the registry holds
        for attempt in self.policy.retrying():
            with attempt:
                started = time.monotonic()
                if attempt.retry_state.attempt_number > 1:
                    held = self._upload_status(up, scope, started)
                    if held is None:
                        raise _Restart("upload session unknown after a failed chunk")
                    if not offset <= held <= offset + sum(len(p) for p in pending):
                        raise _Restart(f"the registry holds {held} bytes, the chunk starts at {offset}")
                    pos = held - offset
                    if pos == length:
                        break

                def body(pos: int = pos) -> Iterator[bytes]:
                    yield from _pieces_from(list(pending), pos)
                    if more is not None:
                        yield from more()

                assert up.location is not None
                resp = self._send(
                    "PATCH",
                    up.location,
                    scope=scope,
                    data=body(),
                    started=started,
                    headers={
                        "Content-Type": "application/octet-stream",
                        "Content-Range": f"{offset + pos}-{offset + length - 1}",
                    },
                )
                if resp.status_code in (404, 416):
                    _codes, message = _error_codes(resp)
                    resp.close()
                    raise _Restart(f"PATCH answered HTTP {resp.status_code} {message}")
                self._check(resp, f"upload {digest[:19]} to {repo}", (202, 204))
                up.location = urljoin(self.base + "/", resp.headers.get("Location", up.location))

    def _finish_upload(self, repo: str, digest: str, scope: str, up: _Upload, size: int) -> None:
        """PUT ?digest=; a PUT whose answer was lost is done when the blob is there with its size."""
        what = f"finish upload of {digest[:19]} to {repo}"
        for attempt in self.policy.retrying():
            with attempt:
                started = time.monotonic()
                if attempt.retry_state.attempt_number > 1:
                    stat = self._head_once(repo, digest, started)
                    if stat is not None and stat.size == size:
                        up.location = None
                        return
                assert up.location is not None
                sep = "&" if "?" in up.location else "?"
                resp = self._send("PUT", f"{up.location}{sep}digest={digest}", scope=scope, started=started)
                if resp.status_code in (201, 204):
                    resp.close()
                    up.location = None
                    return
                codes, message = _error_codes(resp)
                if (
                    "BLOB_UPLOAD_UNKNOWN" in codes
                    or "BLOB_UPLOAD_INVALID" in codes
                    or resp.status_code == 404
                ):
                    resp.close()
                    stat = self._head_once(repo, digest, started)
                    if stat is not None and stat.size == size:
                        up.location = None
                        return
                    raise _Restart(f"PUT answered {message}")
                self._check(resp, what, (201,))

    def _head_once(self, repo: str, digest: str, started: float) -> BlobStat | None:
        resp = self._send("HEAD", f"/v2/{repo}/blobs/{digest}", scope=self._scope(repo), started=started)
        if resp.status_code != 200:
            resp.close()
            return None
        return BlobStat(size=_length(resp), digest=None)

    def _cancel_upload(self, up: _Upload | str | None, scope: str) -> None:
        """DELETE an upload session (best effort, one quick try): its bytes leave the registry's disk."""
        location = up.location if isinstance(up, _Upload) else up
        if isinstance(up, _Upload):
            up.location = None
        if not location:
            return
        try:
            resp = self._send(
                "DELETE", location, scope=scope, started=time.monotonic() - self.policy.deadline
            )
            resp.close()
        except (_Transient, RegistryError):
            pass

    def probe_write(self, repo: str) -> None:
        """Write 1 MiB into an upload session of *repo* and cancel it (nothing is stored). RegistryError with
        the translated fault when the registry cannot take a write now (storage full, quota, denied,
        read-only); transient faults pass silently (the caller's retries deal with them)."""
        scope = self._scope(repo, "pull,push")
        up = _Upload()
        try:
            resp = self._send("POST", f"/v2/{repo}/blobs/uploads/", scope=scope)  # one try: a probe
            self._check(resp, f"write probe into {repo}", (202,))
            up.location = urljoin(self.base + "/", self._location(resp, f"write probe into {repo}"))
            resp = self._send(
                "PATCH",
                up.location,
                scope=scope,
                data=bytes(1 << 20),
                headers={"Content-Type": "application/octet-stream", "Content-Range": f"0-{(1 << 20) - 1}"},
            )
            if resp.status_code in (202, 204):
                up.location = urljoin(self.base + "/", resp.headers.get("Location", up.location))
            self._check(resp, f"write probe into {repo}", (202, 204))
        except _Transient:
            pass
        finally:
            self._cancel_upload(up, scope)


@dataclass(frozen=True)
class SizedChunks:
    """*chunks* of a blob whose size is known (the manifest says it): uploads stream each PATCH as the bytes
    arrive instead of gathering a chunk first."""

    chunks: Callable[[], Iterator[bytes]]
    size: int

    def __call__(self) -> Iterator[bytes]:
        return self.chunks()


def _pieces_from(pieces: list[bytes], pos: int) -> Iterator[bytes]:
    """The bytes of *pieces* from offset *pos* on (a generator: requests streams it, chunked)."""
    for piece in pieces:
        if pos >= len(piece):
            pos -= len(piece)
            continue
        yield piece[pos:] if pos else piece
        pos = 0


def _read_within(
    resp: requests.Response, until: float, what: str, limit: int = MAX_ANSWER_BYTES, *, head: bool = False
) -> None:
    """Read *resp*'s body into it (as ``stream=False`` does), giving up at *until*: a registry that sends its
    answer a byte at a time (each read quick, so no read timeout fires) is a transient fault, not a hang.
    At most *limit* bytes: a larger ``Content-Length`` (not for a HEAD, which has no body) or body is
    :class:`_TooLarge`, closed without reading on."""
    parts: list[bytes] = []
    length = resp.headers.get("Content-Length", "").strip()
    if not head and length.isdigit() and int(length) > limit:
        resp.close()
        raise _TooLarge(limit, int(length))
    got = 0
    try:
        while chunk := resp.raw.read1(1 << 16, decode_content=True):
            got += len(chunk)
            if got > limit:
                resp.close()
                raise _TooLarge(limit, None)
            parts.append(chunk)
            if time.monotonic() > until:
                resp.close()
                raise _Transient(
                    f"{what}: the answer arrived too slowly (not complete within the read timeout)"
                )
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        resp.close()
        raise requests.exceptions.ChunkedEncodingError(str(exc)) from exc
    resp._content = b"".join(parts)
    setattr(resp, "_content_consumed", True)  # noqa: B010 (requests' own flag, not in its type stubs)
    resp.raw.release_conn()  # read to its end: the connection goes back to the pool


def _length(resp: requests.Response) -> int:
    """A HEAD's ``Content-Length``; -1 when missing or not a byte count (never equal to a manifest's size)."""
    text = resp.headers.get("Content-Length", "").strip()
    resp.close()
    return int(text) if text.isdigit() else -1


def _same_host(a: str, b: str) -> bool:
    return (urlsplit(a).hostname or "").lower() == (urlsplit(b).hostname or "").lower()


def _short(url: str) -> str:
    """A URL for messages: without the query (upload state is long and says nothing to a user)."""
    return url.split("?", 1)[0]


# -- copies -------------------------------------------------------------------------------------------------
def _sided(side: str, exc: RegistryError) -> RegistryError:
    """*exc* with the side of the copy that failed in front (``source registry r1 …``), its fix kept."""
    if exc.message.startswith(("source ", "destination ")):
        return exc
    cls = type(exc)
    return cls(f"{side} {exc.message}", hint=exc.hint)


def read_blob(
    client: RegistryApi,
    repo: str,
    digest: str,
    *,
    side: str = "source",
    size: int | None = None,
    policy: RetryPolicy | None = None,
) -> Iterator[bytes]:
    """The bytes of blob *digest*, sha256-checked: a stream cut in the middle is resumed (``Range``) at the
    byte it stopped; a content that does not hash to *digest* (or has another size than *size*) is a
    :class:`CorruptBlobError` naming *side*, the registry, the repository and the digest."""
    policy = policy or getattr(client, "policy", None) or RetryPolicy()
    h = hashlib.sha256()
    got = 0
    cuts = 0
    started = time.monotonic()
    while True:
        try:
            with client.get_blob(repo, digest, got) if got else client.get_blob(repo, digest) as resp:
                skip = got if got and getattr(resp, "status_code", 206) == 200 else 0
                for chunk in resp.iter_content(_CHUNK):
                    if skip:
                        drop = min(skip, len(chunk))
                        chunk, skip = chunk[drop:], skip - drop
                        if not chunk:
                            continue
                    h.update(chunk)
                    got += len(chunk)
                    yield chunk
            break
        except RegistryError as exc:
            raise _sided(side, exc) from None
        except (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError) as exc:
            cuts += 1
            if cuts >= policy.attempts or time.monotonic() - started > policy.deadline:
                raise RegistryError(
                    f"{side} registry {client.name} ({client.host}): GET blob {repo}@{digest[:19]}: the "
                    f"download broke {cuts} time(s), last at byte {got} ({type(exc).__name__})",
                    hint=f"check that registry {client.name} is up and reachable, then rerun (blobs already "
                    "copied are not sent again)",
                ) from None
            time.sleep(min(policy.max_wait, policy.backoff * 2 ** (cuts - 1)))
    actual = "sha256:" + h.hexdigest()
    if actual != digest or (size is not None and got != size):
        raise CorruptBlobError(
            f"{side} registry {client.name} ({client.host}): blob {digest} in {repo} is corrupt: its "
            f"content hashes to {actual} ({got} bytes" + (f", the manifest says {size})" if size else ")"),
            hint="the registry's copy of the blob is damaged: delete it there (and run the registry's "
            "garbage collection, which removes the stored file), then rerun to copy it again",
        )


_END = object()


def _prefetched(source: Iterator[bytes], depth: int = 4) -> Iterator[bytes]:
    """*source* read ahead by a thread (up to *depth* pieces): the source registry sends the next pieces while
    the destination takes this one. The source's errors are raised here, in the consumer; a consumer that
    stops early stops the thread, which closes *source*."""
    pieces: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                pieces.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def pump() -> None:
        try:
            for piece in source:
                if not put(piece):
                    return
            put(_END)
        except BaseException as exc:  # handed to the consumer, raised there
            put(exc)
        finally:
            close = getattr(source, "close", None)
            if callable(close):
                close()

    threading.Thread(target=pump, name="imagesmith-blob-read", daemon=True).start()
    try:
        while True:
            item = pieces.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, bytes)
            yield item
    finally:
        stop.set()


def blob_digest(client: RegistryApi, repo: str, digest: str, *, side: str, size: int | None = None) -> None:
    """Read *digest* back from *client* in full and check it (CorruptBlobError when it does not hash)."""
    for _ in read_blob(client, repo, digest, side=side, size=size):
        pass


def _dst_problem(dst: RegistryApi, repo: str, digest: str, size: int | None, verify: Verify) -> str | None:
    """Why the blob *dst* already holds cannot be trusted, or None (it checks out at *verify*'s level)."""
    stat = dst.stat_blob(repo, digest)
    if stat is None:
        return "missing"
    if verify == "off":
        return None
    if stat.digest and stat.digest != digest:
        return f"HEAD names it {stat.digest}"
    if size is not None and stat.size != size:
        return f"HEAD gives {stat.size} bytes, the manifest says {size}"
    if verify in ("read", "full"):
        try:
            blob_digest(dst, repo, digest, side="destination", size=size)
        except CorruptBlobError as exc:
            return exc.message.split(" is corrupt: ", 1)[-1]
    return None


def copy_blob(
    src: RegistryApi,
    src_repo: str,
    dst: RegistryApi,
    dst_repo: str,
    digest: str,
    *,
    size: int | None = None,
    verify: Verify = "head",
) -> int:
    """Make *dst* hold a verified blob *digest*; returns the bytes transferred (0 when present or mounted).

    A blob *dst* already holds is trusted only when it checks out at the *verify* level (see
    :data:`Verify`); one that does not is deleted and uploaded again, then read back; when the registry keeps
    the damaged file (Debian's docker-registry does until garbage collection) the copy fails with a
    :class:`CorruptBlobError` naming the destination, the repository and the digest — nothing is tagged.
    Errors name the side that failed (``source registry …`` / ``destination registry …``).
    """
    try:
        problem = _dst_problem(dst, dst_repo, digest, size, verify)
    except RegistryError as exc:
        raise _sided("destination", exc) from None
    if problem is None:
        return 0
    repairing = problem != "missing"
    if repairing:
        try:
            deleted = dst.delete_blob(dst_repo, digest)
        except RegistryError as exc:
            raise _sided("destination", exc) from None
        if not deleted:
            raise _corrupt_at_destination(dst, dst_repo, digest, problem, repaired=False)
    elif src.host == dst.host and src_repo != dst_repo:
        try:
            if dst.mount_blob(dst_repo, digest, src_repo):
                return 0
        except RegistryError as exc:
            raise _sided("destination", exc) from None
    sent = 0

    def stream() -> Iterator[bytes]:
        nonlocal sent
        sent = 0
        # read ahead one upload chunk: the source sends chunk k+1 while the destination takes chunk k
        depth = max(2, getattr(dst, "chunk_size", UPLOAD_CHUNK) // _CHUNK + 1)
        for chunk in _prefetched(read_blob(src, src_repo, digest, side="source", size=size), depth):
            sent += len(chunk)
            yield chunk

    try:
        dst.upload_blob(dst_repo, digest, stream if size is None else SizedChunks(stream, size))
    except RegistryError as exc:
        raise _sided("destination", exc) from None
    if repairing or verify == "full":
        try:
            again = _dst_problem(dst, dst_repo, digest, size, "read")
        except RegistryError as exc:
            raise _sided("destination", exc) from None
        if again is not None:
            raise _corrupt_at_destination(dst, dst_repo, digest, again, repaired=repairing)
    return sent


def _corrupt_at_destination(
    dst: RegistryApi, repo: str, digest: str, problem: str, *, repaired: bool
) -> CorruptBlobError:
    tried = (
        "deleting it and uploading it again did not help (the registry keeps the damaged file)"
        if repaired
        else "the registry does not allow deleting it"
    )
    return CorruptBlobError(
        f"destination registry {dst.name} ({dst.host}): blob {digest} in {repo} is corrupt ({problem}); "
        f"{tried}; nothing was tagged",
        hint=f"remove the blob from registry {dst.name}'s storage (Debian's docker-registry: delete it "
        "through the API, then run `docker-registry garbage-collect` on its config), then rerun",
    )


def ensure_blob(client: RegistryApi, repo: str, data: bytes) -> str:
    """Make *client* hold the small blob *data* (an artifact's layer or config): uploaded when missing; one
    the registry already holds is trusted only when HEAD gives its size (and digest, when sent), else it is
    deleted and uploaded again. Returns its digest; CorruptBlobError when the registry keeps a damaged one."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()

    def chunks() -> Iterator[bytes]:
        yield data

    for attempt in range(2):
        stat = client.stat_blob(repo, digest)
        if stat is not None and stat.size == len(data) and stat.digest in (None, digest):
            return digest
        if stat is not None and not client.delete_blob(repo, digest):
            break
        if attempt == 0:
            client.upload_blob(repo, digest, chunks)
    raise _corrupt_at_destination(
        client,
        repo,
        digest,
        f"HEAD gives {stat.size if stat else 'nothing'} bytes, the blob has {len(data)}",
        repaired=stat is not None,
    )


_FOREIGN_ARTIFACT = (
    "the registry serves an artifact imagesmith did not write: republish it (imagesmith release)"
)


def read_small_blob(
    client: RegistryApi, repo: str, digest: Any, size: Any, *, limit: int, what: str, where: str
) -> bytes:
    """The bytes of a small blob a descriptor names (an index, an attestation envelope): *digest* must be a
    sha256 digest and *size* a byte count up to *limit*; nothing past *size* is read, and the bytes must hash
    to *digest*. RegistryError naming *where* (the registry and reference) otherwise — a hostile registry's
    descriptor is never a traceback nor an unbounded read."""
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise RegistryError(
            f"{where}: the {what} layer's digest is not a sha256 digest ({digest!r})",
            hint=_FOREIGN_ARTIFACT,
        )
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= limit:
        raise RegistryError(
            f"{where}: the {what} layer's size is {size!r}, not a byte count up to {limit} "
            f"({limit >> 20} MiB)",
            hint=_FOREIGN_ARTIFACT,
        )
    h, parts, got = hashlib.sha256(), [], 0
    with client.get_blob(repo, digest) as resp:
        for chunk in resp.iter_content(1 << 16):
            got += len(chunk)
            if got > size:
                break
            h.update(chunk)
            parts.append(chunk)
    if got != size or "sha256:" + h.hexdigest() != digest:
        raise CorruptBlobError(
            f"{where}: {what} blob {digest} arrived with a different "
            + ("size" if got != size else "sha256"),
            hint="a proxy or mirror altered it, or the registry's copy is damaged: read it again, or from "
            "another source",
        )
    return b"".join(parts)


def verify_blobs(client: RegistryApi, repo: str, manifest: ManifestData, *, side: str) -> None:
    """Read every blob of *manifest* back from *client* and check digest and size (the nightly's verify)."""
    for child in _children(manifest):
        verify_blobs(client, repo, client.get_manifest(repo, child), side=side)
    if manifest.media_type not in INDEX_TYPES:
        for digest, size in manifest.blobs():
            blob_digest(client, repo, digest, side=side, size=size)


def _children(manifest: ManifestData) -> list[str]:
    if manifest.media_type not in INDEX_TYPES:
        return []
    out = []
    for i, child in enumerate(manifest.json().get("manifests") or []):
        if not isinstance(child, dict) or not isinstance(child.get("digest"), str):
            raise manifest._invalid(f"manifests[{i}].digest is missing")
        out.append(child["digest"])
    return out


def copy_manifest(
    src: RegistryApi,
    src_repo: str,
    reference: str,
    dst: RegistryApi,
    dst_repo: str,
    *,
    put_as: str | None = None,
    verify: Verify = "head",
) -> tuple[str, int]:
    """Copy an image (or index, recursively) by reference; every blob (verified, see :func:`copy_blob`)
    before the manifest.

    Returns (digest, bytes transferred). The manifest is put under *put_as* (default: its digest, so
    nothing is tagged by the copy itself).
    """
    try:
        manifest = src.get_manifest(src_repo, reference)
    except RegistryError as exc:
        raise _sided("source", exc) from None
    sent = 0
    children = _children(manifest)
    if children:
        for child in children:
            _, n = copy_manifest(src, src_repo, child, dst, dst_repo, verify=verify)
            sent += n
    else:
        try:
            blobs = manifest.blobs()
        except RegistryError as exc:
            raise _sided("source", exc) from None
        for digest, size in blobs:
            sent += copy_blob(src, src_repo, dst, dst_repo, digest, size=size, verify=verify)
    try:
        dst.put_manifest(dst_repo, put_as or manifest.digest, manifest)
    except RegistryError as exc:
        raise _sided("destination", exc) from None
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
