"""Registry credentials: one chain per registry, chosen by the registry's ``kind``.

The chain asks its providers in order and takes the first answer:

1. **environment** — ``IMAGESMITH_REGISTRY_<HOST>_USERNAME`` / ``_PASSWORD`` (``<HOST>``: :func:`env_key`, the
   host upper-cased, ``.`` and ``:`` → ``_``, ``-`` → ``__``: one name per host). Explicit: never replaced
   by a refresh.
2. **docker config** — ``$DOCKER_CONFIG/config.json`` (else ``~/.docker/config.json``): ``auths`` entries
   (what ``docker login`` writes), then the ``credHelpers`` entry of the host or the ``credsStore``
   (``docker-credential-<name> get``).
3. **token command** (kinds ``ecr`` and ``azure-acr`` only, or a ``generic`` registry whose host is an
   ECR / Azure host): a short-lived password from the cloud's CLI, cached in the process until shortly
   before it expires:

   - ``ecr``: ``aws ecr get-login-password --region REGION`` (region from
     ``ACCOUNT.dkr.ecr[-fips].REGION.amazonaws.com[.cn]``; ``public.ecr.aws``:
     ``aws ecr-public get-login-password --region us-east-1``), username ``AWS``, valid 12 h;
   - ``azure-acr`` (``NAME.azurecr.io``): ``az acr login --name NAME --expose-token --output tsv --query
     accessToken``, username ``00000000-0000-0000-0000-000000000000``, valid about 3 h (the token's own
     ``exp`` when it carries one).

A result carries where it came from (``origin``, shown in errors) and, for token commands, when it expires.
:meth:`CredentialChain.refresh` gives a *different* secret after the registry refused one: the provider
that gave it is asked again (a credential helper, a token command, bypassing its cache), then the providers
after it — so a stale ``docker login`` of an ECR or ACR host is replaced by the token command when its program
is installed. Environment credentials are never replaced: the refusal is reported as it is.

A token command that is missing or fails is one :class:`~imagesmith.errors.RegistryError` naming the registry,
the command and the fix. Secrets never reach argv, reprs, logs or messages.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

from imagesmith import inputs, kinds, settings
from imagesmith.errors import RegistryError
from imagesmith.inputs import is_digits

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

DOCKER_HUB_API = "registry-1.docker.io"
DOCKER_HUB_CONFIG_KEY = "https://index.docker.io/v1/"
#: refresh a token this long before it expires (a build's push and copies take minutes)
EXPIRY_MARGIN_S = 300.0
_TOKEN_TIMEOUT_S = 120


@dataclass(frozen=True)
class Credentials:
    """Username + secret. The repr never shows the secret.

    ``origin`` says where they came from (named in errors); ``provider`` is the chain's provider that gave
    them (empty for credentials handed over directly: those are never refreshed); ``expires_at`` is a
    ``time.time()`` instant for short-lived tokens, else ``None``.
    """

    username: str
    password: str = field(repr=False)
    origin: str = "environment"
    provider: str = field(default="", compare=False)
    expires_at: float | None = field(default=None, compare=False)

    def basic(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()

    def expired(self, now: float | None = None, margin: float = EXPIRY_MARGIN_S) -> bool:
        if self.expires_at is None:
            return False
        return (time.time() if now is None else now) >= self.expires_at - margin


#: a registry host as a credential variable can name it: a DNS name or IPv4 address, optional ``:port``
_HOST = re.compile(
    r"^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?$"
)
_IPV4 = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3}){3}$")


def env_key(host: str) -> str:
    """The host part of the credential variables' names: upper-cased, ``.`` and ``:`` → ``_``, ``-`` → ``__``.

    ``ghcr.io`` → ``GHCR_IO``, ``127.0.0.1:5443`` → ``127_0_0_1_5443``,
    ``registry.cn-hangzhou.aliyuncs.com`` → ``REGISTRY_CN__HANGZHOU_ALIYUNCS_COM``, its look-alike
    ``registry.cn-hangzhou-aliyuncs.com`` → ``REGISTRY_CN__HANGZHOU__ALIYUNCS_COM``.

    Injective over the hosts it accepts (one host, one name; case does not matter, as in DNS): a name's
    labels never start or end with ``-``, so a run of ``_`` is one ``.``/``:`` (odd: 1) or ``-``s (even: 2 per
    ``-``); and ``:port`` reads apart from a ``.`` because a host's last label is never all digits (IPv4 has
    four labels, so ``127_0_0_1_5443`` is 127.0.0.1 port 5443). A host outside this (an IPv6 literal, a
    numeric last label, ``_``) is a RegistryError: its credentials come from the docker config.
    """
    name = host.split(":", 1)[0]
    last = name.rsplit(".", 1)[-1]
    if not _HOST.match(host) or (is_digits(last) and not _IPV4.match(name)):
        raise RegistryError(
            f"registry host {host!r} cannot be named in a credential variable",
            hint="give it a DNS name or IPv4 address (optional :port), or put its credentials in the docker "
            "config (`docker login HOST`)",
        )
    return re.sub(r"[.:]", "_", host.upper().replace("-", "__"))


def legacy_env_key(host: str) -> str:
    """The name before issue 17 (every non-alphanumeric character → ``_``): ambiguous for hosts with ``-``
    (``a-b.c`` and ``a.b-c`` shared one), so it is no longer read for them (:class:`EnvironmentProvider`)."""
    return re.sub(r"[^A-Z0-9]", "_", host.upper())


def credential_env_names(host: str) -> tuple[str, str]:
    key = env_key(host)
    return f"IMAGESMITH_REGISTRY_{key}_USERNAME", f"IMAGESMITH_REGISTRY_{key}_PASSWORD"


def env_hint(host: str) -> str:
    """``set IMAGESMITH_REGISTRY_…_USERNAME and …_PASSWORD`` for *host*, or the docker config when the host
    cannot be named in a variable."""
    try:
        user_var, pass_var = credential_env_names(host)
    except RegistryError:
        return "put them in the docker config"
    return f"set {user_var} and {pass_var}"


def docker_config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    given = settings.get("DOCKER_CONFIG", env=env)
    base = Path(given) if given else Path.home() / ".docker"
    return base / "config.json"


def _config_keys(host: str) -> list[str]:
    if host in ("docker.io", "index.docker.io", DOCKER_HUB_API):
        return [DOCKER_HUB_CONFIG_KEY, "docker.io", "index.docker.io", DOCKER_HUB_API]
    return [host, f"https://{host}", f"http://{host}", f"https://{host}/v1/", f"https://{host}/v2/"]


# -- providers -----------------------------------------------------------------------------------------------
class CredentialProvider(Protocol):
    """One source of credentials for a host. ``fresh`` bypasses a cache (after the registry refused)."""

    @property
    def name(self) -> str: ...

    def get(self, host: str, *, fresh: bool = False) -> Credentials | None: ...

    def available(self) -> bool:
        """False when asking would only fail for want of a program (a refresh then skips this provider)."""
        ...


@dataclass(frozen=True)
class EnvironmentProvider:
    """``IMAGESMITH_REGISTRY_<HOST>_USERNAME`` / ``_PASSWORD``; both or neither."""

    env: Mapping[str, str] | None = None
    name: str = "environment"

    def available(self) -> bool:
        return True

    def get(self, host: str, *, fresh: bool = False) -> Credentials | None:
        def read(name: str) -> str | None:
            return settings.get(name, env=self.env)

        try:
            user_var, pass_var = credential_env_names(host)
        except RegistryError:
            return None  # a host no variable can name: the docker config's
        if not (read(user_var) or read(pass_var)):
            legacy = legacy_env_key(host)
            old_user, old_pass = (
                f"IMAGESMITH_REGISTRY_{legacy}_USERNAME",
                f"IMAGESMITH_REGISTRY_{legacy}_PASSWORD",
            )
            if old_user != user_var and (read(old_user) or read(old_pass)):
                raise RegistryError(
                    f"registry {host}: {old_user} / _PASSWORD are set, but names in that old form are no "
                    f"longer read for hosts with '-': they also match look-alike hosts (a '.' and a '-' "
                    "gave the same name), so they could hand these credentials to another host",
                    hint=f"rename them to {user_var} and {pass_var} ('-' is now '__'), for the host you mean",
                )
            return None
        if not (read(user_var) and read(pass_var)):
            raise RegistryError(
                f"registry {host}: only one of {user_var} / {pass_var} is set", hint="set both or neither"
            )
        return Credentials(
            str(read(user_var)), str(read(pass_var)), origin=f"${user_var}", provider=self.name
        )


@dataclass(frozen=True)
class DockerConfigProvider:
    """The docker config: ``auths`` entries, then the host's ``credHelpers`` entry or the ``credsStore``."""

    env: Mapping[str, str] | None = None
    name: str = "docker config"

    def available(self) -> bool:
        return True

    def get(self, host: str, *, fresh: bool = False) -> Credentials | None:
        path = docker_config_path(self.env)
        if not path.is_file():
            return None
        # a user file: read as every other (size cap, UTF-8 named, JSON depth and integer bounds), and its
        # shape checked before use (a list where docker writes an object was an AttributeError traceback)
        text = inputs.read_user_text(path, "docker config", error=RegistryError, hint="fix or remove it")
        try:
            cfg = inputs.loads_json(
                text, f"docker config {path}", error=RegistryError, hint="fix or remove it"
            )
        except ValueError as exc:
            raise RegistryError(
                f"docker config {path} is not valid JSON ({exc})", hint="fix or remove it"
            ) from None
        if not isinstance(cfg, dict) or not all(
            isinstance(cfg.get(k, {}), dict) for k in ("auths", "credHelpers")
        ):
            raise RegistryError(
                f"docker config {path}: not a docker config (an object with `auths` and `credHelpers` "
                "objects)",
                hint="fix or remove it (`docker login` writes a new one)",
            )
        keys = _config_keys(host)
        helpers = cfg.get("credHelpers", {})
        helper = next((helpers.get(k) for k in keys if helpers.get(k)), None)
        for key in keys:
            entry = cfg.get("auths", {}).get(key)
            if not isinstance(entry, dict):
                continue
            if entry.get("auth"):
                try:
                    user, _, secret = base64.b64decode(entry["auth"]).decode().partition(":")
                except (ValueError, UnicodeDecodeError) as exc:
                    raise RegistryError(
                        f"docker config {path}: auths[{key!r}].auth is not base64 of user:password",
                        hint=f"run `docker login {host}` again",
                    ) from exc
                return Credentials(user, secret, origin=f"{path} auths[{key}]", provider=self.name)
            if entry.get("username") and entry.get("password"):
                return Credentials(
                    entry["username"], entry["password"], origin=f"{path} auths[{key}]", provider=self.name
                )
        helper = helper or cfg.get("credsStore")
        if helper:
            return _from_helper(str(helper), host, path, self.name)
        return None


def _from_helper(helper: str, host: str, config: Path, provider: str) -> Credentials | None:
    program = f"docker-credential-{helper}"
    server = DOCKER_HUB_CONFIG_KEY if host in ("docker.io", DOCKER_HUB_API) else host
    try:
        proc = subprocess.run(
            [program, "get"], input=server, capture_output=True, text=True, timeout=30, check=False
        )
    except FileNotFoundError as exc:
        raise RegistryError(
            f"docker config {config} names credential helper {helper!r}, but {program} is not installed",
            hint=f"install {program} or {env_hint(host)}",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise RegistryError(
            f"credential helper {program} did not answer for {host} within 30 s",
            hint=f"check that {program} works (`echo {server} | {program} get`)",
        ) from exc
    if proc.returncode != 0:
        return None  # helpers exit non-zero for "no credentials for this server"
    try:
        data = json.loads(proc.stdout)
        return Credentials(data["Username"], data["Secret"], origin=program, provider=provider)
    except (ValueError, KeyError, TypeError) as exc:
        raise RegistryError(
            f"credential helper {program} answered something that is not its JSON",
            hint=f"check that {program} works (`echo {server} | {program} get`)",
        ) from exc


# token commands: one run per (program, argv) and process until shortly before the token expires
_TOKENS: dict[tuple[str, ...], Credentials] = {}
_TOKENS_LOCK = threading.Lock()


def clear_token_cache() -> None:
    """Forget every cached token (tests; a long-lived process that changed cloud accounts)."""
    with _TOKENS_LOCK:
        _TOKENS.clear()


@dataclass(frozen=True)
class TokenCommandProvider:
    """A cloud CLI that prints a short-lived registry password on stdout (ECR, ACR).

    *argv* is run as it is (no shell), in the process environment; the secret is read from stdout only.
    *problem* (set when the command cannot be formed for this host) is raised instead of running anything.
    """

    registry: str  # "registry NAME (HOST)", for messages
    host: str
    argv: tuple[str, ...]
    username: str
    valid_s: float
    install_hint: str
    login_hint: str
    problem: str = ""
    name: str = "token command"

    @property
    def command(self) -> str:
        return " ".join(self.argv)

    def _fallback(self) -> str:
        return f"or {env_hint(self.host)}, or `docker login {self.host}`"

    def available(self) -> bool:
        return not self.problem and shutil.which(self.argv[0]) is not None

    def get(self, host: str, *, fresh: bool = False) -> Credentials | None:
        if self.problem:
            raise RegistryError(f"{self.registry}: {self.problem}", hint=self._fallback())
        exe = shutil.which(self.argv[0])
        if exe is None:
            raise RegistryError(
                f"{self.registry}: no credentials are configured and `{self.command}` cannot run: "
                f"{self.argv[0]} is not installed (not on PATH)",
                hint=f"{self.install_hint}, {self._fallback()}",
            )
        key = (exe, *self.argv[1:])
        with _TOKENS_LOCK:
            cached = _TOKENS.get(key)
            if cached is not None and not fresh and not cached.expired():
                return cached
            creds = self._run(exe)
            _TOKENS[key] = creds
            return creds

    def _run(self, exe: str) -> Credentials:
        try:
            proc = subprocess.run(
                [exe, *self.argv[1:]],
                capture_output=True,
                text=True,
                timeout=_TOKEN_TIMEOUT_S,
                check=False,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            raise RegistryError(
                f"{self.registry}: `{self.command}` did not answer within {_TOKEN_TIMEOUT_S} s",
                hint=f"{self.login_hint}, {self._fallback()}",
            ) from exc
        except OSError as exc:
            raise RegistryError(
                f"{self.registry}: `{self.command}` could not be started ({exc.strerror or exc})",
                hint=f"{self.install_hint}, {self._fallback()}",
            ) from exc
        secret = proc.stdout.strip()
        if proc.returncode != 0 or not secret or len(secret.split()) != 1:
            said = _last_lines(proc.stderr) or ("no password on stdout" if proc.returncode == 0 else "")
            raise RegistryError(
                f"{self.registry}: `{self.command}` failed (exit {proc.returncode})"
                + (f": {said}" if said else ""),
                hint=f"{self.login_hint}, {self._fallback()}",
            )
        now = time.time()
        expires = _jwt_expiry(secret) or now + self.valid_s
        return Credentials(
            self.username, secret, origin=f"`{self.command}`", provider=self.name, expires_at=expires
        )


def _last_lines(text: str, keep: int = 3) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return " | ".join(lines[-keep:])[:500]


def _jwt_expiry(token: str) -> float | None:
    """The ``exp`` claim of a JWT (ACR's tokens are), else None; the signature is not checked (only dates)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        exp = payload.get("exp") if isinstance(payload, dict) else None
    except (ValueError, UnicodeDecodeError):
        return None
    return float(exp) if isinstance(exp, int | float) and not isinstance(exp, bool) else None


def token_provider(host: str, kind: str, registry: str) -> TokenCommandProvider | None:
    """The token command of a registry of *kind* at *host* (``[[kind.token]]`` rows of
    ``imagesmith/data/registry_kinds.toml``), or None when its kind has none for that host."""
    command = kinds.token_command(host, kind)
    if command is None:
        return None
    return TokenCommandProvider(
        registry,
        host,
        command.argv,
        command.username,
        command.valid_s,
        command.install,
        command.login,
        command.problem,
    )


def token_kind(host: str, kind: str) -> str:
    """The kind whose token command applies: *kind*, or for ``generic`` the kind its host reveals."""
    return kinds.token_kind(host, kind)


# -- the chain -----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CredentialChain:
    """One registry's providers, in order: ``resolve`` takes the first answer, ``refresh`` replaces it."""

    host: str
    kind: str
    providers: tuple[CredentialProvider, ...]

    def resolve(self) -> Credentials | None:
        for provider in self.providers:
            creds = provider.get(self.host)
            if creds is not None:
                return creds
        return None

    def refresh(self, refused: Credentials) -> Credentials | None:
        """Credentials with another secret than *refused* (refused by the registry, or expired); None when
        there are none. Environment credentials and credentials given directly are never replaced."""
        names = [p.name for p in self.providers]
        if refused.provider not in names or refused.provider == EnvironmentProvider.name:
            return None
        start = names.index(refused.provider)
        for i, provider in enumerate(self.providers[start:]):
            if i > 0 and not provider.available():
                continue  # a later token command that cannot run: keep the first refusal's message
            creds = provider.get(self.host, fresh=True)
            if creds is not None and (creds.username, creds.password) != (refused.username, refused.password):
                return creds
        return None

    @property
    def token_command(self) -> str | None:
        """The token command of this chain (for hints), if any."""
        for provider in self.providers:
            if isinstance(provider, TokenCommandProvider) and not provider.problem:
                return provider.command
        return None


def credential_chain(
    host: str, kind: str = "generic", *, name: str | None = None, env: Mapping[str, str] | None = None
) -> CredentialChain:
    """The chain for a registry: environment, docker config, then the kind's token command (ecr,
    azure-acr)."""
    registry = f"registry {name} ({host})" if name and name != host else f"registry {host}"
    providers: list[CredentialProvider] = [EnvironmentProvider(env), DockerConfigProvider(env)]
    token = token_provider(host, kind, registry)
    if token is not None:
        providers.append(token)
    return CredentialChain(host, kind, tuple(providers))


def lookup_credentials(host: str, env: Mapping[str, str] | None = None) -> Credentials | None:
    """Credentials for *host* from the environment, else the docker config; ``None`` when there are none.

    No token command: use :func:`credential_chain` with the registry's kind for that.
    """
    return CredentialChain(host, "generic", (EnvironmentProvider(env), DockerConfigProvider(env))).resolve()


def auth_hint(host: str, kind: str, token_command: str | None = None) -> str:
    """The fix line of an ``unauthorized`` answer: where credentials come from, and what expires (the kind's
    ``hint`` in ``imagesmith/data/registry_kinds.toml``)."""
    base = f"{env_hint(host)}, or `docker login {host}`"
    tail = kinds.auth_tail(host, kind, token_command)
    return f"{base} — {tail}" if tail else base


# -- where credentials may go --------------------------------------------------------------------------------
REALMS_RESOURCE = "data/registry_realms.toml"


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1`` (a host name, no port; never resolved)."""
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port or {"https": 443, "http": 80}.get(scheme)
    except ValueError:
        port = -1
    return scheme, (parts.hostname or "").lower(), port


def sends_credentials(base: str, url: str) -> bool:
    """Whether a request to *url* may carry the credentials (Basic or a token) of the registry spoken to at
    *base* (``https://host[:port]``): the same scheme, host and port, and not plain HTTP to a host other than
    loopback. Anything else — a redirect or ``Location`` to blob storage or a CDN, a ``Link`` to another host,
    a registry declared ``insecure`` on a non-loopback host — goes without."""
    scheme, host, port = _origin(url)
    if (scheme, host, port) != _origin(base) or not host:
        return False
    return scheme == "https" or (scheme == "http" and is_loopback(host))


@dataclass(frozen=True)
class RealmRule:
    """One row of ``imagesmith/data/registry_realms.toml``: a token realm host a registry kind may use."""

    kinds: tuple[str, ...]
    registry: re.Pattern[str]
    realm: str
    source: str

    def allows(self, registry_host: str, kind: str, realm_host: str) -> bool:
        if kind not in self.kinds:
            return False
        m = self.registry.fullmatch(registry_host.split(":", 1)[0].lower())
        if m is None:
            return False
        groups = {k: v for k, v in m.groupdict().items() if v is not None}
        try:
            return realm_host == self.realm.format(**groups).lower()
        except (KeyError, IndexError):
            return False


_REALMS: list[tuple[RealmRule, ...]] = []


def realm_rules() -> tuple[RealmRule, ...]:
    """The packaged allow-list of token realms on other hosts (read once)."""
    if not _REALMS:
        text = resources.files("imagesmith").joinpath(REALMS_RESOURCE).read_text(encoding="utf-8")
        rows = tomllib.loads(text).get("realm", [])
        rules = tuple(
            RealmRule(
                kinds=tuple(row["kinds"]),
                registry=re.compile(row["registry"]),
                realm=str(row["realm"]),
                source=str(row["source"]),
            )
            for row in rows
        ) + tuple(
            RealmRule(kinds=names, registry=re.compile(registry), realm=realm, source=source)
            for names, registry, realm, source in kinds.realm_rows()
        )
        _REALMS.append(rules)
    return _REALMS[0]


def realm_problem(base: str, registry_host: str, kind: str, realm: str) -> str | None:
    """Why the credentials of the registry at *base* (host *registry_host*, kind *kind*) must not go to the
    token realm *realm*; None when they may: an https realm (http only on loopback) on the registry's own
    host, or on a host that ``imagesmith/data/registry_realms.toml`` allows for the kind."""
    scheme, host, _port = _origin(realm)
    parts = urlsplit(realm)
    if scheme not in ("http", "https") or not host:
        return f"token realm {realm!r} is not an http(s) URL"
    if parts.username or parts.password:
        return f"token realm {_no_query(realm)} carries user information"
    if scheme == "http" and not is_loopback(host):
        return f"token realm {_no_query(realm)} is plain HTTP to a host other than loopback"
    if host == _origin(base)[1]:
        return None
    if any(rule.allows(registry_host, kind, host) for rule in realm_rules()):
        return None
    return (
        f"token realm {_no_query(realm)} is on {host}, neither the registry's own host nor a realm that kind "
        f"{kind} allows for {registry_host} (imagesmith/data/registry_realms.toml)"
    )


def _no_query(url: str) -> str:
    return url.split("?", 1)[0]
