"""Base images by digest: the project's ``bases.toml`` lock, resolving it, escrow copies.

``<locks>/bases.toml`` (beside the wheel locks) pins every base, builder and devel image of the project's
matrices to a manifest digest, one line per image so a moved base is a one-line diff::

    schema = 1

    [bases]
    "debian:bookworm" = { digest = "sha256:…", registry = "127.0.0.1:5000/hub", read = "2026-12-01" }
    "ubuntu:24.04" = { origin = "local" }

``digest`` is what ``imagesmith lock --bases`` read (one HEAD of the manifest, index and manifest media types
accepted) through the registry-mirror map; ``registry`` where it read it (the mirror prefix, or the image's
own registry), ``read`` the UTC date; ``previous`` the digest it had before it last moved. The plan hashes
the digest into each cell's fingerprint and renders ``ARG BASE_IMAGE=name@digest``; the build pulls
``mirror/path:tag@digest`` — so a re-published tag changes the fingerprint of exactly the cells on it, and a
build never silently lands on another base.

``origin = "local"`` marks a base made on each machine (this project's own CI imports a debootstrap of Debian
on every machine, so its digest differs from one machine to the next) or one the lock's writer cannot reach:
it is not pinned in the project (a lock must not depend on the machine that wrote it): the plan and the build
take it by name, exactly as without a lock, and the build summary says so.

Escrow (``[bases] escrow = "<registry name>"`` in ``imagesmith.toml``): ``lock --bases`` copies every
pinned base by digest into that registry of the project's registries file (the verified cross-registry copy
of :mod:`imagesmith.registry`), under ``<namespace>/bases/<path>`` tagged ``sha256-<hex>``; a build whose
upstream no longer serves the digest (tag deleted, registry unreachable) builds from the escrow copy by
digest, and says so.

Reading and checking the lock is pure; :func:`resolve` and :func:`escrow_copy` speak to registries.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
import json
import os
import re
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from imagesmith import atomicio, inputs, kinds
from imagesmith.errors import ConfigError, ImagesmithError
from imagesmith.refs import ImageRef, Registry

if TYPE_CHECKING:
    from imagesmith.config import UserConfig
    from imagesmith.project import Project
    from imagesmith.registry import RegistryApi

BASES_FILE: Final[str] = "bases.toml"
ORIGINS: Final[tuple[str, ...]] = ("registry", "local")
_DIGEST: Final = re.compile(r"sha256:[0-9a-f]{64}")
_DATE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_WHERE: Final = re.compile(r"[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[a-z0-9._/-]+)?")
_KEYS: Final[frozenset[str]] = frozenset({"origin", "digest", "registry", "read", "previous"})
LOCK_FIX: Final[str] = "run `imagesmith lock --bases` where the base's registry (or its mirror) is reachable"


class BaseLockError(ImagesmithError):
    """``bases.toml`` is malformed, or does not cover a matrix's base images."""

    exit_code = 2


@dataclass(frozen=True, kw_only=True)
class BaseEntry:
    """One base image of the lock."""

    name: str
    origin: str = "registry"
    digest: str | None = None
    registry: str | None = None
    read: str | None = None
    previous: str | None = None

    @property
    def pinned(self) -> bool:
        return self.origin == "registry" and self.digest is not None

    def line(self) -> str:
        """The entry's one line of ``bases.toml``."""
        fields: dict[str, str] = {}
        if self.origin != "registry":
            fields["origin"] = self.origin
        for key in ("digest", "registry", "read", "previous"):
            value = getattr(self, key)
            if value is not None:
                fields[key] = value
        body = ", ".join(f"{k} = {json.dumps(v)}" for k, v in fields.items())
        return f"{json.dumps(self.name)} = {{ {body} }}"

    def moved(self) -> str | None:
        """``base debian:bookworm moved sha256:a…→sha256:b… (read DATE)`` when it has moved."""
        if not self.pinned or self.previous is None or self.digest is None:
            return None
        return f"base {self.name} moved {_short(self.previous)}→{_short(self.digest)} (read {self.read})"


def _short(digest: str) -> str:
    return digest[: len("sha256:") + 12] + "…"


@dataclass(frozen=True, kw_only=True)
class BasesLock:
    path: Path
    entries: Mapping[str, BaseEntry]

    def get(self, image: str) -> BaseEntry | None:
        return self.entries.get(image)


def bases_path(lock_dir: Path) -> Path:
    return lock_dir / BASES_FILE


#: the fix for a line (or file) lock --bases cannot read: lock --bases reads the file first, so "run lock
#: --bases" alone would send the user back to the same error
REPAIR_FIX: Final[str] = (
    "correct that line by hand, or delete it and run `imagesmith lock --bases` (it reads the base again and "
    "writes the line anew); or restore the file from git"
)


def _bad(shown: str, what: str, hint: str = REPAIR_FIX) -> BaseLockError:
    return BaseLockError(f"{shown}: {what}", hint=hint)


def _toml(value: object) -> str:
    """*value* as the file wrote it (TOML-ish, never a Python repr), with its kind when it is no string."""
    if isinstance(value, str):
        return json.dumps(value[:80])
    if isinstance(value, bool):
        return f"{str(value).lower()} (a boolean)"
    if isinstance(value, (int, float)):
        return f"{value} (a number)"
    if isinstance(value, (_dt.date, _dt.time)):
        return f"{value.isoformat()} (an unquoted TOML date or time)"
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "a list"
    return type(value).__name__  # pragma: no cover - tomllib makes no other type


def read_bases(lock_dir: Path, shown: str | None = None) -> BasesLock | None:
    """The project's base lock, or None when it has none (bases then go by name, as before)."""
    path = bases_path(lock_dir)
    shown = shown or str(path)
    if not os.path.lexists(path):
        return None
    # something by that name that is no readable regular file (a dangling symlink, a folder, a FIFO) is an
    # error, never "no lock": the bases would silently go by their moving names again
    fix = (
        "make it a regular UTF-8 TOML file (restore it from git, or delete it and run "
        "`imagesmith lock --bases`)"
    )
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise _bad(shown, "a symbolic link to nothing: no base lock can be read from it", fix) from None
    except OSError as exc:
        raise _bad(shown, f"cannot read: {exc.strerror or type(exc).__name__}", fix) from None
    if not stat.S_ISREG(mode):
        raise _bad(shown, "is not a regular file: no base lock can be read from it", fix)
    # read and parsed as every user file: UTF-8 named, integers within 64 bits, nesting bounded (a huge
    # integer or arrays nested thousands deep were ValueError / RecursionError tracebacks)
    body = inputs.read_user_file(path, "base lock", error=BaseLockError, hint=fix)
    text = inputs.decode_text(
        body, shown, error=BaseLockError, hint="make it readable UTF-8 TOML (or restore it from git)"
    )
    data: dict[str, Any] = inputs.loads_toml(
        text, shown, error=BaseLockError, syntax_hint="fix the line named (or restore it from git)"
    )
    unknown = sorted(set(data) - {"schema", "bases"})
    if unknown:
        raise _bad(
            shown, f"unknown key {unknown[0]!r}", "the file holds `schema = 1` and a [bases] table only"
        )
    if "schema" not in data:
        raise _bad(
            shown,
            "no `schema` key: this imagesmith reads schema = 1",
            "add the line `schema = 1` above [bases] (or restore the file from git)",
        )
    if data["schema"] != 1:
        shown_value = json.dumps(data["schema"], default=str)[:40]  # TOML-ish, never a Python repr
        raise _bad(
            shown,
            f"schema = {shown_value}: this imagesmith reads schema = 1",
            "a newer imagesmith wrote it: upgrade imagesmith (or restore the file from git, or delete it and "
            "run `imagesmith lock --bases`)",
        )
    table = data.get("bases", {})
    if not isinstance(table, dict):
        raise _bad(shown, "bases must be a table of image = { digest = … }")
    entries: dict[str, BaseEntry] = {}
    for name, raw in table.items():
        entries[name] = _entry(shown, name, raw)
    return BasesLock(path=path, entries=entries)


def _entry(shown: str, name: str, raw: object) -> BaseEntry:
    where = f"bases.{json.dumps(name)}"
    if not name.isprintable() or len(name) > 255:
        raise _bad(shown, f"{where}: not an image reference")
    try:
        ref = ImageRef.parse(name)
    except ConfigError:
        raise _bad(
            shown, f"{where}: {name!r} is not an image reference", 'write e.g. "debian:bookworm"'
        ) from None
    if ref.digest is not None:
        raise _bad(
            shown,
            f"{where}: the name carries a digest; the lock maps a name (as the matrix writes it) to a digest",
            "delete the line: a base the matrix names by digest is pinned there (lock --bases writes no line "
            "for it); to pin a tag, name it without the digest in the matrix and write "
            f'"{name.split("@")[0]}" = {{ digest = "{ref.digest}", … }}',
        )
    if not isinstance(raw, dict):
        raise _bad(shown, f"{where} must be a table {{ digest = …, registry = …, read = … }}")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise _bad(shown, f"{where}.{unknown[0]}: unknown key (known: {', '.join(sorted(_KEYS))})")
    for key, value in raw.items():
        if not isinstance(value, str) or not value.isprintable():
            raise _bad(
                shown, f"{where}.{key} = {_toml(value)} must be a quoted string of printable characters"
            )
    origin = raw.get("origin", "registry")
    if origin not in ORIGINS:
        raise _bad(shown, f"{where}.origin = {_toml(origin)} is not one of {', '.join(ORIGINS)}")
    if origin == "local":
        extra = sorted(set(raw) - {"origin"})
        if extra:
            raise _bad(
                shown,
                f'{where}.{extra[0]}: a base made locally (origin = "local") carries no {extra[0]}: '
                "it is taken by name on each machine",
                f'write "{name}" = {{ origin = "local" }}, or drop origin to pin it',
            )
        return BaseEntry(name=name, origin="local")
    for key in ("digest", "registry", "read"):
        if key not in raw:
            raise _bad(shown, f"{where}.{key} is missing")
    for key in ("digest", "previous"):
        if key in raw and not _DIGEST.fullmatch(raw[key]):
            raise _bad(shown, f"{where}.{key} = {_toml(raw[key])} is not a sha256 digest (sha256:<64 hex>)")
    if not _WHERE.fullmatch(raw["registry"]):
        raise _bad(shown, f"{where}.registry = {_toml(raw['registry'])} is not a registry host[:port][/path]")
    try:
        if not _DATE.fullmatch(raw["read"]):
            raise ValueError
        _dt.date.fromisoformat(raw["read"])
    except ValueError:
        raise _bad(shown, f"{where}.read = {_toml(raw['read'])} is not a date (YYYY-MM-DD, UTC)") from None
    if raw.get("previous") == raw["digest"]:
        raise _bad(
            shown,
            f"{where}.previous = {_toml(raw['digest'])} is its digest: a base does not move to where it was",
        )
    return BaseEntry(
        name=name,
        digest=raw["digest"],
        registry=raw["registry"],
        read=raw["read"],
        previous=raw.get("previous"),
    )


def write_bases(lock_dir: Path, entries: Iterable[BaseEntry]) -> Path:
    """Write the lock (entries sorted by name), atomically."""
    path = bases_path(lock_dir)
    lines = [
        '# Base images by digest: `imagesmith lock --bases` (docs/build.md, "Base images by digest").',
        '# One line per image; origin = "local": made on each machine, taken by name.',
        "schema = 1",
        "",
        "[bases]",
        *(e.line() for e in sorted(entries, key=lambda e: e.name)),
    ]
    return atomicio.write_atomic(path, "\n".join(lines) + "\n")


# ------------------------------------------------------------------------------------------------------------
# registries


def _loopback(host: str) -> bool:
    name = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def pull_ref(image: str, config: UserConfig) -> ImageRef:
    """Where *image* is pulled from: the registry-mirror map applied."""
    return ImageRef.parse(config.apply_mirror(image))


def endpoint(ref: ImageRef, known: Iterable[Registry] = ()) -> Registry:
    """A registry target for *ref*'s host: a project registry on that host lends its kind and ``insecure``;
    else loopback is plain HTTP (as dockerd treats 127.0.0.0/8), anything else HTTPS."""
    for reg in known:
        if reg.host == ref.registry:
            return replace(reg, name=reg.name, repository=ref.path)
    kind = kinds.kind_of_host(ref.registry)  # docker.io → its kind's row (data/registry_kinds.toml)
    return Registry(
        name=ref.registry, host=ref.registry, repository=ref.path, kind=kind, insecure=_loopback(ref.registry)
    )


def where_read(image: str, config: UserConfig) -> str:
    """The ``registry`` field: the mirror prefix the image was read through, or its own registry."""
    ref = ImageRef.parse(image)
    return config.mirror_for(ref.registry) or ref.registry


@dataclass(frozen=True)
class Resolved:
    digest: str
    where: str


def resolve(
    image: str,
    config: UserConfig,
    *,
    client: RegistryApi | None = None,
    known: Iterable[Registry] = (),
    pinned: str | None = None,
) -> Resolved:
    """One HEAD of *image*'s manifest through the mirror map (index and manifest types accepted). A digest
    other than *pinned* (the lock's line: a new base, or one that moved) is taken only once the manifest
    itself has been read by that digest and hashed to it — a ``Docker-Content-Digest`` the registry (or a
    cache in front of it) names without serving it never becomes a lock line no build could pull."""
    from imagesmith.registry import client_for

    ref = pull_ref(image, config)
    api = client or client_for(endpoint(ref, known))
    own = own_digest(image)
    # a name the matrix already pins by digest is read by that digest: its tag (if any) is not what it means
    digest = api.manifest_digest(ref.path, own or ref.tag or "latest")
    if digest is not None and own is None and digest != pinned:
        try:
            api.get_manifest(ref.path, digest)  # its content must hash to the digest, or this raises
        except ImagesmithError as exc:
            raise BaseLockError(
                f"base image {image}: registry {ref.registry} names {ref} {digest} (Docker-Content-Digest), "
                f"but does not serve that manifest: {exc.message.splitlines()[0]}",
                hint=f"the registry (or a cache or proxy in front of it) answers for {ref} inconsistently: "
                "check it, or read the base through another mirror; the lock keeps its line",
                registry=ref.registry,
                digest=digest,
            ) from None
    if digest is None:
        gone = "no longer served or never pushed" if own else "tag gone or never pushed"
        raise BaseLockError(
            f"base image {image}: {ref} is not in registry {ref.registry} ({gone})",
            hint="check the name in the matrix and the registry-mirror map (`imagesmith build --help`), "
            'or mark a base made on each machine origin = "local" in bases.toml',
        )
    return Resolved(digest=digest, where=where_read(image, config))


def own_digest(image: str) -> str | None:
    """The digest *image* carries itself (``name[:tag]@sha256:…``, as a matrix may write a base), else None.
    Such a base is pinned by the matrix: the lock holds no line for it, the plan and the build take it by that
    digest (escrow included)."""
    try:
        return ImageRef.parse(image).digest
    except ConfigError:
        return None


def refreshed(old: BaseEntry | None, name: str, got: Resolved, today: str | None = None) -> BaseEntry:
    """The new entry for *name* after reading *got*: an unchanged digest keeps its line (date included)."""
    if old is not None and old.pinned and old.digest == got.digest:
        return old
    today = today or _dt.datetime.now(_dt.timezone.utc).date().isoformat()
    previous = old.digest if old is not None and old.pinned else None
    return BaseEntry(name=name, digest=got.digest, registry=got.where, read=today, previous=previous)


def escrow_registry(project: Project) -> Registry | None:
    """The project's ``[bases] escrow`` registry (a name of its registries file), or None."""
    if project.bases_escrow is None:
        return None
    from imagesmith.matrix import load_registries

    known = load_registries(project.registries_file) if project.registries_file.is_file() else {}
    if project.bases_escrow not in known:
        raise ConfigError(
            f"{project.file}: bases.escrow = {project.bases_escrow!r} is no registry of "
            f"{project.rel(project.registries_file)}",
            hint="name one of its [registries.<name>] tables"
            + (f" ({', '.join(sorted(known))})" if known else "; add one there first"),
        )
    return known[project.bases_escrow]


def escrow_repo(escrow: Registry, image: str) -> str:
    """The repository of *image*'s escrow copies: ``<namespace>/bases/<path>``."""
    path = ImageRef.parse(image).path
    ns = escrow.namespace or escrow.repository
    return f"{ns}/bases/{path}" if ns else f"bases/{path}"


def escrow_tag(digest: str) -> str:
    return digest.replace(":", "-")


def escrow_ref(escrow: Registry, image: str, digest: str) -> str:
    return f"{escrow.host}/{escrow_repo(escrow, image)}@{digest}"


def escrow_holds(dst: RegistryApi, repo: str, digest: str, *, depth: int = 0) -> bool:
    """Whether *dst* holds the escrow copy *repo@digest* by its content (issue 34: a HEAD alone — a tag that
    answers the digest — was trusted): the manifest read by digest hashes to it, and every manifest it lists
    (an index) and every blob (config, layers) is there with its size. Any answer short of that is False:
    the copy is made again (what is there is not sent twice)."""
    import hashlib

    from imagesmith.registry.api import INDEX_TYPES

    try:
        manifest = dst.get_manifest(repo, digest)
        if "sha256:" + hashlib.sha256(manifest.body).hexdigest() != digest:
            return False
        if manifest.media_type in INDEX_TYPES:
            children = manifest.json().get("manifests")
            if not isinstance(children, list) or depth > 2:
                return False
            return all(
                isinstance(c, dict)
                and isinstance(c.get("digest"), str)
                and escrow_holds(dst, repo, c["digest"], depth=depth + 1)
                for c in children
            )
        return all(dst.blob_size(repo, d) == size for d, size in manifest.blobs())
    except (ImagesmithError, OSError, ValueError):
        return False


def escrow_copy(
    entry: BaseEntry,
    config: UserConfig,
    escrow: Registry,
    *,
    src: RegistryApi | None = None,
    dst: RegistryApi | None = None,
    known: Iterable[Registry] = (),
) -> tuple[str, int]:
    """Copy *entry*'s manifest (and its blobs, verified) by digest into *escrow*; tagged ``sha256-<hex>`` so
    the registry keeps it. Returns (escrow reference, bytes copied)."""
    from imagesmith.registry import client_for, copy_manifest

    assert entry.digest is not None
    ref = pull_ref(entry.name, config)
    src = src or client_for(endpoint(ref, known))
    dst = dst or client_for(escrow)
    repo = escrow_repo(escrow, entry.name)
    if dst.manifest_digest(repo, escrow_tag(entry.digest)) == entry.digest and escrow_holds(
        dst, repo, entry.digest
    ):
        return escrow_ref(escrow, entry.name, entry.digest), 0
    digest, sent = copy_manifest(src, ref.path, entry.digest, dst, repo, put_as=escrow_tag(entry.digest))
    if digest != entry.digest:  # pragma: no cover - get_manifest checks content against the digest asked
        raise BaseLockError(f"escrow copy of {entry.name}: got {digest}, asked {entry.digest}", hint=LOCK_FIX)
    return escrow_ref(escrow, entry.name, entry.digest), sent


__all__ = [
    "BASES_FILE",
    "BaseEntry",
    "BaseLockError",
    "BasesLock",
    "Resolved",
    "bases_path",
    "escrow_copy",
    "escrow_ref",
    "own_digest",
    "read_bases",
    "refreshed",
    "resolve",
    "write_bases",
]
