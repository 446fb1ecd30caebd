"""User configuration: registry-mirror map, extra CA certificate, cache location.

Read from ``$IMAGESMITH_CONFIG`` or ``~/.config/imagesmith/config.toml`` (``$XDG_CONFIG_HOME`` respected)::

    [registry_mirrors]          # base images from these registries are pulled through the mirror prefix
    "docker.io" = "127.0.0.1:5000/hub"

    [build]
    extra_ca = "/path/to/ca-bundle.crt"   # trusted by pip/apt inside the build (TLS-intercepting proxies)

    [sources]                   # source archives (nccl-tests) through these URL templates first
    mirrors = ["https://mirror.example/{url}"]

The environment overrides the file
(``IMAGESMITH_REGISTRY_MIRRORS="docker.io=mirror.example/hub,ghcr.io=..."``, ``IMAGESMITH_EXTRA_CA``,
``IMAGESMITH_SOURCE_MIRRORS="https://a/{url} https://b{path}"``), and command-line flags override
both. Credentials are never read from here: see
:mod:`imagesmith.registry` (environment or the docker config).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from imagesmith import inputs, schema, settings
from imagesmith.errors import ConfigError
from imagesmith.project import check_mirror_template
from imagesmith.refs import _HUB_ALIASES, DOCKER_HUB, ImageRef

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover
    pass


@dataclass(frozen=True, kw_only=True)
class UserConfig:
    """Resolved user configuration (file < environment < flags)."""

    registry_mirrors: tuple[tuple[str, str], ...] = ()
    extra_ca: Path | None = None
    source_mirrors: tuple[str, ...] = ()
    #: ``[release] index_key`` (a path or the PEM text; the older ``[pick] verify_key``: a path) /
    #: $IMAGESMITH_INDEX_KEY: the public key the release index must be signed with
    index_key: Path | str | None = None
    #: what named :attr:`index_key`, for messages: ``$IMAGESMITH_INDEX_KEY`` or ``<file>: release.index_key``
    index_key_origin: str = ""
    source: str = "defaults"

    def mirror_for(self, registry: str) -> str | None:
        return dict(self.registry_mirrors).get(registry)

    def apply_mirror(self, image: str) -> str:
        """The reference to pull *image* through: rewritten when its registry has a mirror, else unchanged."""
        ref = ImageRef.parse(image)
        prefix = self.mirror_for(ref.registry)
        if prefix is None:
            return image
        out = f"{prefix.rstrip('/')}/{ref.path}"
        if ref.tag:
            out += f":{ref.tag}"
        if ref.digest:
            out += f"@{ref.digest}"
        return out

    def with_overrides(
        self, *, mirrors: Sequence[str] = (), extra_ca: Path | None = None, origin: str = "--registry-mirror"
    ) -> UserConfig:
        """Apply command-line overrides (``HOST=PREFIX`` strings, an extra CA file)."""
        merged = dict(self.registry_mirrors)
        merged.update(parse_mirror_items(mirrors, origin))
        cfg = replace(self, registry_mirrors=tuple(sorted(merged.items())))
        if extra_ca is not None:
            cfg = replace(cfg, extra_ca=_checked_ca(extra_ca, "--extra-ca"))
        return cfg


def config_path(env: Mapping[str, str] | None = None) -> Path:
    env = os.environ if env is None else env
    if settings.get("IMAGESMITH_CONFIG", env=env):
        return Path(str(settings.get("IMAGESMITH_CONFIG", env=env)))
    xdg = settings.get("XDG_CONFIG_HOME", env=env)
    base = Path(xdg) if xdg else Path.home() / ".config"
    return base / "imagesmith" / "config.toml"


def cache_root(env: Mapping[str, str] | None = None) -> Path:
    """``$IMAGESMITH_CACHE`` or ``~/.cache/imagesmith`` (``$XDG_CACHE_HOME`` respected)."""
    env = os.environ if env is None else env
    if settings.get("IMAGESMITH_CACHE", env=env):
        return Path(str(settings.get("IMAGESMITH_CACHE", env=env)))
    xdg = settings.get("XDG_CACHE_HOME", env=env)
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "imagesmith"


def parse_mirror_items(items: Sequence[str], origin: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        host, sep, prefix = item.partition("=")
        host, prefix = host.strip(), prefix.strip().rstrip("/")
        if not sep or not host or not prefix or "/" in host:
            raise ConfigError(
                f"{origin}: {item!r} is not HOST=PREFIX",
                hint="e.g. docker.io=127.0.0.1:5000/hub (base images from docker.io are pulled from there)",
            )
        mirror_host, _, path = prefix.partition("/")
        if not re.fullmatch(schema.HOST_PORT, host) or not re.fullmatch(schema.HOST_PORT, mirror_host):
            bad = host if not re.fullmatch(schema.HOST_PORT, host) else mirror_host
            raise ConfigError(
                f"{origin}: {item!r}: {bad!r} is not a registry host[:port]",
                hint="a DNS name or IPv4 address with an optional port 1-65535, no scheme: "
                "e.g. docker.io=127.0.0.1:5000/hub",
            )
        if path and not re.fullmatch(schema.REPO_PATH, path):
            raise ConfigError(
                f"{origin}: {item!r}: {path!r} is not a repository path",
                hint="lowercase letters and digits joined by '/', '.', '_' or '-': "
                "e.g. docker.io=127.0.0.1:5000/hub",
            )
        out[DOCKER_HUB if host in _HUB_ALIASES else host] = prefix
    return out


def _checked_ca(path: Path, origin: str) -> Path:
    data = inputs.read_user_file(
        path, f"{origin}: CA certificate file", hint="give the path of a PEM CA bundle"
    )
    text = data.decode("utf-8", errors="replace")
    if "-----BEGIN CERTIFICATE-----" not in text:
        raise ConfigError(f"{origin}: {path} holds no PEM certificate", hint="give a PEM CA bundle")
    key = _PRIVATE_KEY.search(text)
    if key is not None:
        raise ConfigError(
            f"{origin}: {path} holds a private key ({key.group(0).strip('-')}); a CA file for the build must "
            "hold certificates only",
            hint=f"give a file with only the CA certificate(s), e.g. `openssl x509 -in {path} -out ca.crt` "
            "(and keep the key away from build hosts)",
        )
    return inputs.resolved(path)


#: PEM armour of any private key (PKCS#8, encrypted, RSA/EC/DSA/OpenSSH)
_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----")


def _is_fingerprint(text: str) -> bool:
    from imagesmith.indextrust import is_fingerprint

    return is_fingerprint(text)


def load_config(env: Mapping[str, str] | None = None) -> UserConfig:
    """Read the config file (if any), then apply the environment."""
    env = os.environ if env is None else env
    path = config_path(env)
    mirrors: dict[str, str] = {}
    extra_ca: Path | None = None
    source_mirrors: list[str] = []
    index_key: Path | str | None = None
    index_key_origin = ""
    source = "defaults"
    if path.exists() and not path.is_file():
        raise ConfigError(
            f"{path}: the user config is not a file"
            + (" (IMAGESMITH_CONFIG)" if settings.get("IMAGESMITH_CONFIG", env=env) else ""),
            hint="point IMAGESMITH_CONFIG at a config.toml file (or unset it); docs/project.md",
        )
    if path.is_file():
        source = str(path)
        raw = inputs.read_user_text(path, "", hint="make it a readable UTF-8 TOML file")
        text = schema.check_toml_text(raw, str(path))
        data = inputs.loads_toml(text, str(path), syntax_hint="fix the file or remove it")
        schema.CONFIG.check(data, source=str(path))
        table = data.get("registry_mirrors", {})
        mirrors.update(
            parse_mirror_items([f"{k}={v}" for k, v in table.items()], f"{path}: registry_mirrors")
        )
        build = data.get("build", {})
        if "extra_ca" in build:
            extra_ca = _checked_ca(Path(build["extra_ca"]), f"{path}: build.extra_ca")
        raw = data.get("sources", {}).get("mirrors", [])
        source_mirrors = [check_mirror_template(t, f"{path}: sources.mirrors") for t in raw]
        if data.get("pick", {}).get("verify_key"):
            index_key = Path(data["pick"]["verify_key"]).expanduser()
            index_key_origin = f"{path}: pick.verify_key"
        if data.get("release", {}).get("index_key"):
            raw_key: str = data["release"]["index_key"]
            # the PEM text, a key fingerprint (sha256:<64 hex>, issue 34: the trust root a renter pastes), or
            # a path
            index_key = (
                raw_key
                if raw_key.lstrip().startswith("-----BEGIN") or _is_fingerprint(raw_key)
                else Path(raw_key).expanduser()
            )
            if isinstance(index_key, Path) and not index_key.is_absolute():
                index_key = path.parent / index_key  # relative to the config file, as a project's are
            index_key_origin = f"{path}: release.index_key"
    if value := settings.get("IMAGESMITH_INDEX_KEY", env=env):
        index_key = value.strip() if _is_fingerprint(value) else Path(value).expanduser()
        index_key_origin = "$IMAGESMITH_INDEX_KEY"
    if value := settings.get("IMAGESMITH_REGISTRY_MIRRORS", env=env):
        items = [i for i in value.split(",") if i.strip()]
        mirrors.update(parse_mirror_items(items, "IMAGESMITH_REGISTRY_MIRRORS"))
    if value := settings.get("IMAGESMITH_EXTRA_CA", env=env):
        extra_ca = _checked_ca(Path(value), "IMAGESMITH_EXTRA_CA")
    if value := settings.get("IMAGESMITH_SOURCE_MIRRORS", env=env):
        items = value.replace(",", " ").split()
        source_mirrors = [check_mirror_template(t, "IMAGESMITH_SOURCE_MIRRORS") for t in items]
    return UserConfig(
        registry_mirrors=tuple(sorted(mirrors.items())),
        extra_ca=extra_ca,
        source_mirrors=tuple(source_mirrors),
        index_key=index_key,
        index_key_origin=index_key_origin,
        source=source,
    )


__all__ = [
    "DOCKER_HUB",
    "ImageRef",
    "UserConfig",
    "cache_root",
    "config_path",
    "load_config",
    "parse_mirror_items",
]
