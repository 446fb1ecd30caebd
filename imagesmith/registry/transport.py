"""The auth and redirect transport of one registry host: credentials from the registry's chain
(resolved when first asked for, refreshed once on ``unauthorized``), Basic and Bearer challenges, TLS with
the registry's own CA, redirects followed hop by hop (credentials only to the registry's own origin), the
whole answer read within the read timeout, retries by the :mod:`~imagesmith.registry.faults` policy, and
an answer turned into a :class:`~imagesmith.errors.RegistryError` naming the registry
(:meth:`Transport._check`)."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import requests
import urllib3

from imagesmith import settings
from imagesmith.credentials import (
    DOCKER_HUB_API,
    CredentialChain,
    Credentials,
    auth_hint,
    credential_chain,
    realm_problem,
    sends_credentials,
)
from imagesmith.errors import Fault, ManifestUnknownError, RegistryError
from imagesmith.inputs import is_digits
from imagesmith.registry.api import UPLOAD_CHUNK
from imagesmith.registry.faults import (
    MAX_ANSWER_BYTES,
    RetryPolicy,
    _error_codes,
    _TooLarge,
    _Transient,
    answer_codes,
    lasting_fault,
    registry_fault,
    retry_after_seconds,
)
from imagesmith.schema import HOST_PORT

T = TypeVar("T")

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_REDIRECTS = 10


def docker_ca_file(host: str) -> Path | None:
    """dockerd's per-registry CA: ``/etc/docker/certs.d/<host>/ca.crt`` (also under ``$DOCKER_CERT_DIR``)."""
    roots = [
        Path(settings.get("IMAGESMITH_CERTS_D") or "/etc/docker/certs.d"),
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


class Transport:
    """One registry host: credentials, auth, redirects, retries and the answer checked (what
    :class:`~imagesmith.registry.client.RegistryClient` builds its API on). Every error names the
    registry."""

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

    def _fail(
        self,
        what: str,
        message: str,
        hint: str | None = None,
        *,
        fault: Fault | None = None,
        transient: bool = False,
        said: str | None = None,
    ) -> RegistryError:
        return RegistryError(
            f"registry {self.name} ({self.host}): {what}: {message}",
            hint=hint,
            registry=self.name,
            host=self.host,
            fault=fault,
            transient=transient,
            said=said,
        )

    def _gave_up(self, exc: _Transient, attempts: int) -> RegistryError:
        where = f"registry {self.name} ({self.host})"
        if exc.elsewhere:
            where = f"registry {self.name}'s {exc.elsewhere}"
        if exc.stalled is not None:
            return self._stall(exc, attempts, where)
        if exc.retry_after is not None and exc.retry_after > 0:
            return self._fail(
                "rate limited or unavailable",
                f"{exc.what}; it asks to retry after {exc.retry_after:.0f} s (Retry-After), which would pass "
                f"the {self.policy.deadline:g} s deadline (gave up after {attempts} attempt(s))",
                hint=f"wait until {where} takes requests again (a pull/push rate limit: use an account with "
                "a higher limit), then rerun; IMAGESMITH_REGISTRY_DEADLINE gives a longer wait more time",
                fault=Fault.RATE_LIMITED,
                transient=True,
            )
        return self._fail(
            "unreachable or failing",
            f"{exc.what} (gave up after {attempts} attempt(s) within {self.policy.deadline:g} s)",
            hint=f"check that {where} is up and reachable, then rerun (what is "
            "already copied is not sent again); IMAGESMITH_REGISTRY_DEADLINE gives a longer outage more time",
            fault=Fault.UNREACHABLE,
            transient=True,
        )

    def _stall(self, exc: _Transient, attempts: int, where: str) -> RegistryError:
        """A request phase given up on a stall: the registry (or its token service, its storage) sent no
        byte for the read timeout on the last attempt (issue 37)."""
        phase = exc.phase or "request"
        sender = where if exc.elsewhere else f"registry {self.name}"
        error = self._fail(
            phase,
            f"no bytes for {exc.stalled:g} s from {sender} ({exc.what}; gave up after {attempts} "
            f"attempt(s) within the {self.policy.deadline:g} s deadline)",
            hint=f"check that {where} is up and not overloaded, then rerun (what is already copied is not "
            "sent again); IMAGESMITH_REGISTRY_STALL gives a slow registry longer to send a byte, "
            "IMAGESMITH_REGISTRY_DEADLINE more time in all",
            fault=Fault.UNREACHABLE,
            transient=True,
        )
        return error.replace(phase=phase, stalled=exc.stalled)

    def _retrying(self, fn: Callable[[float], T]) -> T:
        """*fn(started)* with the policy's retries on _Transient; RegistryError once they are spent."""
        started = time.monotonic()
        retrying = self.policy.retrying()
        try:
            return retrying(fn, started)
        except _Transient as exc:
            raise self._gave_up(exc, retrying.statistics.get("attempt_number", self.policy.attempts)) from exc

    def _token(self, params: dict[str, str], scope: str, timeout: tuple[float, float]) -> str | int:
        """A Bearer header value from the realm, or the status (401/403) it refused the credentials with;
        within the request's *timeout* (a token service that sends no byte for the read timeout: a stall)."""
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
        service = f"token service {urlsplit(realm).netloc}"
        try:
            resp = self.session.get(
                realm,
                params=query,
                headers=headers,
                timeout=timeout,
                verify=self.verify,
                allow_redirects=False,  # a redirect must not carry the credentials on to another host
                stream=True,
            )
            _read_within(
                resp, time.monotonic() + timeout[1], f"token endpoint {_short(realm)}", stall=timeout[1]
            )
        except _Transient as exc:
            exc.elsewhere, exc.phase = service, "token fetch"
            raise
        except requests.exceptions.SSLError as exc:
            raise self._fail(
                "auth",
                f"token endpoint {_short(realm)}: certificate not trusted ({exc.__class__.__name__})",
                hint=f"trust the token service's CA (the host's CA store), or fix registry {self.name}'s "
                "host",
            ) from exc
        except requests.RequestException as exc:
            stalled = timeout[1] if isinstance(exc, requests.exceptions.ReadTimeout) else None
            raise _Transient(
                f"token endpoint {_short(realm)}: "
                + ("no answer" if stalled is not None else type(exc).__name__),
                elsewhere=service,
                stalled=stalled,
                phase="token fetch",
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
        or ``Link`` elsewhere, goes without them; a 401 from another host is not answered.

        Each read waits at most the read timeout (``IMAGESMITH_REGISTRY_STALL``) for a byte: a registry
        that sends none for that long (no headers, or a body stopped mid-way) is a stall, a _Transient that
        names it (issue 37), the token service's too."""
        full = url if url.startswith("http") else self.base + url
        timeout = self.policy.timeout(time.monotonic() if started is None else started)
        request = _Request(method, full, headers, data, params, stream, allow_redirects, timeout, limit)
        own = sends_credentials(self.base, full)
        resp = self._attempt(request, (self._auth.get(scope) or self._auth.get("*")) if own else None)
        if resp.status_code != 401 or "WWW-Authenticate" not in resp.headers:
            return resp
        if not own or not sends_credentials(self.base, resp.url or full):
            return self._foreign_challenge(resp, full)
        scheme, params_ = parse_challenge(resp.headers["WWW-Authenticate"])
        if scheme not in ("basic", "bearer"):
            return resp
        resp.close()
        return self._challenged(request, scheme, params_, scope)

    def _challenged(
        self, request: _Request, scheme: str, params: dict[str, str], scope: str
    ) -> requests.Response:
        """The answer to *request* once its Basic or Bearer challenge is answered (fresh credentials once
        more when refused); the error that names the refusal otherwise."""

        def attempt(auth: str | None) -> requests.Response:
            return self._attempt(request, auth)

        full = request.url
        answered = self._answer(scheme, params, scope, attempt, request.timeout)
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
            answered = self._answer(scheme, params, scope, attempt, request.timeout)
        if not isinstance(answered, int):
            return answered
        if self._deferred is not None:
            raise self._deferred
        if self._withheld is not None:
            raise self._fail(
                "unauthorized",
                "the token endpoint refused an anonymous request; credentials were not sent: "
                + self._withheld,
                hint=self._withheld_hint(),
                fault=Fault.UNAUTHORIZED,
            )
        raise self._fail(
            "unauthorized",
            f"token endpoint refused the credentials (HTTP {answered})",
            hint=self._hint(),
            fault=Fault.UNAUTHORIZED,
        )

    def _attempt(self, request: _Request, auth: str | None) -> requests.Response:
        """*request* sent with *auth* (to the registry's own origin only), its redirects followed hop by hop;
        a 5xx or 429 that waiting may fix is a _Transient."""
        verb, target, body = request.method, request.url, request.data
        resp = None
        for _hop in range(_MAX_REDIRECTS + 1):
            h = dict(request.headers or {})
            if auth and sends_credentials(self.base, target):
                h["Authorization"] = auth
            resp = self._one(request, verb, target, h, body)
            location = resp.headers.get("Location")
            if not (request.allow_redirects and resp.status_code in _REDIRECTS and location):
                break
            if body is not None and not isinstance(body, bytes | str) and resp.status_code in (307, 308):
                break  # a streamed body cannot be sent again: the caller sees the redirect
            resp.close()
            target = urljoin(resp.url or target, location)
            if resp.status_code == 303 or (resp.status_code in (301, 302) and verb not in ("GET", "HEAD")):
                verb, body = ("HEAD" if verb == "HEAD" else "GET"), None
        assert resp is not None
        if resp.status_code >= 500 or resp.status_code == 429:
            _codes, msg = _error_codes(resp)
            if lasting_fault(resp.status_code, msg) is not None:
                return resp  # storage full, quota, …: waiting does not help; _check reports it
            resp.close()
            raise _Transient(
                f"{request.method} {_short(request.url)}: HTTP {resp.status_code} {msg}".strip(),
                retry_after=retry_after_seconds(resp.headers.get("Retry-After")),
            )
        return resp

    def _one(
        self, request: _Request, verb: str, target: str, h: dict[str, str], body: Any
    ) -> requests.Response:
        """One hop of *request*: *verb* *target*, its answer read whole within the read timeout unless
        streamed; a fault of the connection (a stall: no byte for the read timeout) is a _Transient."""
        phase = _phase(request.method, request.url)
        other = urlsplit(target).netloc
        elsewhere = (
            None
            if other.lower() == self.api_host.lower()
            else f"storage {other}, where the registry redirected the request"
        )
        stall = request.timeout[1]
        try:
            resp = self.session.request(
                verb,
                target,
                headers=h,
                data=body,
                params=request.params if target == request.url else None,
                stream=True,
                timeout=request.timeout,
                verify=self.verify,
                allow_redirects=False,
            )
            if not request.stream:  # the whole answer within the read timeout, not one byte per timeout
                _read_within(
                    resp,
                    time.monotonic() + stall,
                    f"{verb} {_short(target)}",
                    request.limit,
                    head=verb == "HEAD",
                    stall=stall,
                )
            return resp
        except _Transient as exc:
            exc.phase, exc.elsewhere = phase, exc.elsewhere or elsewhere
            raise
        except requests.exceptions.SSLError as exc:
            raise self._fail(
                "TLS",
                f"certificate not trusted ({exc.__class__.__name__})",
                hint=f"put the registry's CA in /etc/docker/certs.d/{self.host}/ca.crt",
            ) from exc
        except requests.exceptions.ReadTimeout as exc:  # the answer's headers did not come: a stall
            raise _Transient(
                f"{verb} {_short(target)}: no answer", elsewhere=elsewhere, stalled=stall, phase=phase
            ) from exc
        except (
            requests.ConnectionError,
            requests.Timeout,
            requests.exceptions.ChunkedEncodingError,
        ) as exc:
            raise _Transient(
                f"{verb} {_short(target)}: {type(exc).__name__}", elsewhere=elsewhere, phase=phase
            ) from exc

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
        timeout: tuple[float, float],
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
        token = self._token(params, scope, timeout)
        if isinstance(token, int):
            return token
        self._auth[scope] = token
        return attempt(token)

    def _call(self, method: str, url: str, **kw: Any) -> requests.Response:
        """:meth:`_send` with the policy's retries; an answer past its size cap (``limit``) is one error
        naming the registry and the request, never retried."""
        try:
            return self._retrying(lambda started: self._send(method, url, started=started, **kw))
        except _TooLarge as exc:
            raise self._fail(
                f"{method} {_short(url)}",
                exc.describe(),
                hint=f"registry {self.name} (or a proxy in front of it) serves something that is not what "
                "the registry API answers there: check the reference and the registry, or drop it from the "
                "registries file",
                fault=Fault.TOO_LARGE,
            ) from None

    def _check(
        self, resp: requests.Response, what: str, ok: tuple[int, ...], *, manifest: bool = False
    ) -> requests.Response:
        """*resp* when its status is in *ok*, else the typed error of the answer. *manifest*: the request was
        for a manifest (a 404 without error codes is then ``manifest unknown``) — said by the caller, never
        read from the words of *what* (a repository named ``…/manifests`` is not a manifest request)."""
        if resp.status_code in ok:
            return resp
        codes, body = answer_codes(resp)
        resp.close()
        message = body or f"HTTP {resp.status_code} (no error body)"
        # the registry's own words (its status and body, never imagesmith's), for callers to classify
        said = f"HTTP {resp.status_code} {body}" if body else f"HTTP {resp.status_code}"
        if resp.status_code == 401 or "UNAUTHORIZED" in codes:
            hint = self._hint()
            if self._withheld is not None:
                message = f"{message}; credentials were not sent: {self._withheld}"
                hint = self._withheld_hint()
            elif self._credentials:
                message = f"credentials from {self._credentials.origin} were refused ({message})"
            raise self._fail(what, f"unauthorized: {message}", hint=hint, fault=Fault.UNAUTHORIZED, said=said)
        if "MANIFEST_UNKNOWN" in codes or (resp.status_code == 404 and manifest and not codes):
            raise ManifestUnknownError(
                f"registry {self.name} ({self.host}): {what}: manifest unknown ({message})",
                registry=self.name,
                host=self.host,
                fault=Fault.MANIFEST_UNKNOWN,
                said=said,
            )
        fault = registry_fault(" ".join(codes) + " " + (body or ""))
        if fault is not None:
            raise self._fail(what, f"{fault.label}: {message}", hint=fault.hint, fault=fault.label, said=said)
        if resp.status_code == 403:
            raise self._fail(
                what,
                f"denied: {message}",
                hint="check the account's push/pull rights on this repository",
                fault=Fault.DENIED,
                said=said,
            )
        if resp.status_code == 405:
            raise self._fail(
                what,
                f"HTTP 405 {message}",
                hint="the registry refuses writes (read-only/maintenance mode) or deletes are disabled",
                fault=Fault.READ_ONLY,
                said=said,
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
            f"HTTP {resp.status_code} {body}" if body and not body.startswith("HTTP ") else message,
            hint=f"registry {self.name} answered what the registry API does not: check its host in the "
            "registries file and any proxy in between, then rerun",
            said=said,
        )

    @staticmethod
    def _scope(repo: str, actions: str = "pull") -> str:
        return f"repository:{repo}:{actions}"


class _ReadBy:
    """A response's raw stream that gives up at *until* (what :func:`_read_within` reads through): requests
    reads it as it reads any urllib3 stream (``stream``), here chunk by chunk as the bytes arrive (``read1``),
    raising _Transient once the deadline has passed or no byte came for *stall* seconds (the socket's read
    timeout: a body stopped mid-way), and ChunkedEncodingError for a broken stream."""

    def __init__(
        self,
        resp: requests.Response,
        until: float,
        what: str,
        limit: int = MAX_ANSWER_BYTES,
        stall: float | None = None,
    ) -> None:
        self._resp, self._raw, self._until, self._what = resp, resp.raw, until, what
        self._limit, self._stall = limit, stall

    def stream(self, amt: int | None = None, decode_content: bool | None = None) -> Iterator[bytes]:
        got = 0
        try:
            while chunk := self._raw.read1(1 << 16, decode_content=True):
                got += len(chunk)
                if got > self._limit:  # past the cap: closed, not read on
                    self._resp.close()
                    raise _TooLarge(self._limit, None)
                yield chunk
                if time.monotonic() > self._until:
                    self._resp.close()
                    raise _Transient(
                        f"{self._what}: the answer arrived too slowly (not complete within the read timeout)"
                    )
        except (urllib3.exceptions.ReadTimeoutError, TimeoutError) as exc:
            self._resp.close()
            raise _Transient(
                f"{self._what}: the answer stopped after {got} bytes", stalled=self._stall
            ) from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._resp.close()
            raise requests.exceptions.ChunkedEncodingError(str(exc)) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _read_within(
    resp: requests.Response,
    until: float,
    what: str,
    limit: int = MAX_ANSWER_BYTES,
    *,
    head: bool = False,
    stall: float | None = None,
) -> None:
    """Read *resp*'s body into it (as ``stream=False`` does: ``resp.content``), giving up at *until*: a
    registry that sends its answer a byte at a time (each read quick, so no read timeout fires) is a transient
    fault, not a hang; one that stops sending for the read timeout (*stall* seconds) is a stall. requests
    itself reads and keeps the body; only its stream is the deadline's. At most *limit* bytes: a larger
    ``Content-Length`` (not of a HEAD, which has no body) or body is
    :class:`~imagesmith.registry.faults._TooLarge`, closed without reading on."""
    length = resp.headers.get("Content-Length", "").strip()
    if not head and is_digits(length) and int(length) > limit:
        resp.close()
        raise _TooLarge(limit, int(length))
    raw = resp.raw
    resp.raw = _ReadBy(resp, until, what, limit, stall)
    try:
        resp.content  # noqa: B018 (read and kept by requests)
    finally:
        resp.raw = raw
    raw.release_conn()  # read to its end: the connection goes back to the pool


def _length(resp: requests.Response) -> int:
    """A HEAD's ``Content-Length``; -1 when missing or not a byte count (never equal to a manifest's size)."""
    text = resp.headers.get("Content-Length", "").strip()
    resp.close()
    return int(text) if is_digits(text) else -1


@dataclass(frozen=True)
class _Request:
    """One request of :meth:`Transport._send`, as its hops and its challenge's answer send it again."""

    method: str
    url: str
    headers: Mapping[str, str] | None
    data: Any
    params: Mapping[str, str] | None
    stream: bool
    allow_redirects: bool
    timeout: tuple[float, float]
    limit: int


def _phase(method: str, url: str) -> str:
    """The request phase *method* *url* is, as a stall names it: ``manifest PUT``, ``tag list``, ``blob
    GET``, ``blob upload PATCH`` (from the path's API shape: ``/v2/<name>/manifests/<reference>``)."""
    parts = urlsplit(url).path.rstrip("/").split("/")
    if len(parts) >= 2 and parts[-2] == "manifests":
        return f"manifest {method}"
    if parts[-2:] == ["tags", "list"]:
        return "tag list"
    if "uploads" in parts[-2:]:
        return f"blob upload {method}"
    if len(parts) >= 2 and parts[-2] == "blobs":
        return f"blob {method}"
    return "ping" if parts[-1:] == ["v2"] else f"{method} request"


def _same_host(a: str, b: str) -> bool:
    return (urlsplit(a).hostname or "").lower() == (urlsplit(b).hostname or "").lower()


def _short(url: str) -> str:
    """A URL for messages: without the query (upload state is long and says nothing to a user)."""
    return url.split("?", 1)[0]
