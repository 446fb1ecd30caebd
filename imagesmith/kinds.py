"""Registry kinds, from ``imagesmith/data/registry_kinds.toml``: the one place a kind is defined.

The registries-file schema takes its ``kind`` values from here (:func:`kind_names`), ``imagesmith init`` tells
a host's kind (:func:`kind_of_host`), credentials get a kind's token command and fix line
(:func:`token_kind`, :func:`token_command`, :func:`auth_tail`), the realm allow-list takes a kind's
``[[kind.realm]]`` rows, and pick its ``china`` flag. Adding a kind is a row there (docs/architecture.md,
recipe "A registry kind"); ``tests/unit/test_registry_kinds.py`` guards that no module names a kind.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from importlib import resources
from typing import Any

from imagesmith.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib

RESOURCE = "data/registry_kinds.toml"
_FIX = "reinstall imagesmith; if you edited imagesmith/data/registry_kinds.toml, fix the row it names"


@dataclass(frozen=True)
class TokenRow:
    """A cloud CLI that prints a short-lived registry password, for hosts matching ``host``."""

    host: re.Pattern[str]
    argv: tuple[str, ...]
    username: str
    valid_s: float
    install: str
    login: str
    source: str


@dataclass(frozen=True)
class Command:
    """A token command formed for one host: argv with the host's parts filled in, and why it cannot run
    (``problem``: the host does not say what the command needs)."""

    argv: tuple[str, ...]
    username: str
    valid_s: float
    install: str
    login: str
    problem: str = ""


@dataclass(frozen=True)
class RealmRow:
    registry: str
    realm: str
    source: str
    generic: bool


@dataclass(frozen=True)
class Kind:
    name: str
    hosts: tuple[re.Pattern[str], ...]
    china: bool
    hint: str
    command_example: str
    tokens: tuple[TokenRow, ...]
    unmatched: str
    unmatched_argv: tuple[str, ...]
    realms: tuple[RealmRow, ...]
    source: str


@dataclass(frozen=True)
class Retired:
    """A kind name that is no longer one (``[[retired]]``): the kinds that replaced it."""

    name: str
    split: tuple[str, ...]
    since: str


@dataclass(frozen=True)
class HostHint:
    contains: str
    hint: str


def _bad(where: str, what: str) -> ConfigError:
    return ConfigError(f"imagesmith/data/registry_kinds.toml: {where}: {what}", hint=_FIX)


def _str(row: dict[str, Any], key: str, where: str, *, required: bool = False) -> str:
    value = row.get(key, "")
    if not isinstance(value, str) or (required and not value.strip()):
        raise _bad(where, f"{key} must be a non-empty string" if required else f"{key} must be a string")
    return value


def _argv(row: dict[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = row.get(key, [])
    if not isinstance(value, list) or not all(isinstance(a, str) and a for a in value):
        raise _bad(where, f"{key} must be a list of non-empty strings")
    return tuple(value)


def _pattern(text: str, where: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise _bad(where, f"{text!r} is not a regular expression ({exc})") from None


_Parsed = tuple[tuple[Kind, ...], tuple[HostHint, ...], tuple[Retired, ...]]


def parse(text: str) -> _Parsed:
    """The kinds, host hints and retired kind names of a registry_kinds.toml text (ConfigError naming the row
    when broken)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _bad("TOML", str(exc)) from None
    if data.get("schema") != 1:
        raise _bad("schema", "must be 1")
    kinds: list[Kind] = []
    for i, row in enumerate(data.get("kind", [])):
        where = f"kind[{i}]"
        name = _str(row, "name", where, required=True)
        if not re.fullmatch(r"[a-z][a-z0-9-]*", name) or name in {k.name for k in kinds}:
            raise _bad(where, f"name {name!r} is not a new lowercase kind name")
        where = f"kind {name}"
        tokens = tuple(
            TokenRow(
                host=_pattern(_str(t, "host", f"{where} token[{j}]", required=True), f"{where} token[{j}]"),
                argv=_argv(t, "argv", f"{where} token[{j}]"),
                username=_str(t, "username", f"{where} token[{j}]", required=True),
                valid_s=float(t.get("valid_hours", 1)) * 3600.0,
                install=_str(t, "install", f"{where} token[{j}]", required=True),
                login=_str(t, "login", f"{where} token[{j}]", required=True),
                source=_str(t, "source", f"{where} token[{j}]", required=True),
            )
            for j, t in enumerate(row.get("token", []))
        )
        if any(not t.argv for t in tokens):
            raise _bad(where, "a token row needs argv")
        realms = tuple(
            RealmRow(
                registry=_str(r, "registry", f"{where} realm[{j}]", required=True),
                realm=_str(r, "realm", f"{where} realm[{j}]", required=True),
                source=_str(r, "source", f"{where} realm[{j}]", required=True),
                generic=bool(r.get("generic", False)),
            )
            for j, r in enumerate(row.get("realm", []))
        )
        kinds.append(
            Kind(
                name=name,
                hosts=tuple(_pattern(h, where) for h in row.get("hosts", [])),
                china=bool(row.get("china", False)),
                hint=_str(row, "hint", where),
                command_example=_str(row, "command_example", where),
                tokens=tokens,
                unmatched=_str(row, "unmatched", where),
                unmatched_argv=_argv(row, "unmatched_argv", where),
                realms=realms,
                source=_str(row, "source", where, required=True),
            )
        )
        if kinds[-1].unmatched and not (kinds[-1].unmatched_argv and tokens):
            raise _bad(where, "unmatched needs unmatched_argv and a token row")
    if not kinds or kinds[0].name != "generic":
        raise _bad("kind[0]", 'the first kind must be "generic"')
    hints = tuple(
        HostHint(
            contains=_str(h, "contains", f"host_hint[{i}]", required=True),
            hint=_str(h, "hint", f"host_hint[{i}]", required=True),
        )
        for i, h in enumerate(data.get("host_hint", []))
    )
    return tuple(kinds), hints, _retired(data.get("retired", []), {k.name for k in kinds})


def _retired(rows: list[dict[str, Any]], names: set[str]) -> tuple[Retired, ...]:
    out: list[Retired] = []
    for i, row in enumerate(rows):
        where = f"retired[{i}]"
        name = _str(row, "name", where, required=True)
        split = _argv(row, "split", where)
        if name in names or not split or not set(split) <= names:
            raise _bad(
                where, f"{name!r} must be no kind's name and split must list kinds ({', '.join(split)})"
            )
        out.append(Retired(name=name, split=split, since=_str(row, "since", where, required=True)))
        _str(row, "source", where, required=True)
    return tuple(out)


_LOADED: list[_Parsed] = []


def _data() -> _Parsed:
    if not _LOADED:
        _LOADED.append(parse(resources.files("imagesmith").joinpath(RESOURCE).read_text(encoding="utf-8")))
    return _LOADED[0]


def kinds() -> tuple[Kind, ...]:
    return _data()[0]


def kind_names() -> tuple[str, ...]:
    """Every kind, ``generic`` first (the schema's enum of a registries-file entry's ``kind``)."""
    return tuple(k.name for k in kinds())


def retired(name: str) -> Retired | None:
    """The ``[[retired]]`` row of a kind name that is no longer one (``acr``), or None."""
    return next((r for r in _data()[2] if r.name == name), None)


def successor(name: str, host: str) -> str | None:
    """For a retired kind name: the kind of its ``split`` whose ``hosts`` match *host* (``acr`` on
    ``x.azurecr.io`` → ``azure-acr``), or None when none does (or *name* is not retired)."""
    row = retired(name)
    for new in row.split if row is not None else ():
        k = get(new)
        if k is not None and any(p.fullmatch(host) for p in k.hosts):
            return new
    return None


def current(name: str, host: str) -> str:
    """*name*, or for a retired kind name its successor for *host* (``generic`` when none matches): how a
    release index written before the split reads."""
    return (successor(name, host) or "generic") if retired(name) is not None else name


def get(name: str) -> Kind | None:
    return next((k for k in kinds() if k.name == name), None)


def kind_of_host(host: str) -> str:
    """The kind a host is known as (``imagesmith init --registry``): the first kind with a ``hosts``
    expression matching it in full; ``generic`` otherwise."""
    for k in kinds():
        if any(p.fullmatch(host) for p in k.hosts):
            return k.name
    return "generic"


def china_kinds() -> tuple[str, ...]:
    return tuple(k.name for k in kinds() if k.china)


def _token_row(kind: Kind, host: str) -> tuple[TokenRow, dict[str, str]] | None:
    for row in kind.tokens:
        m = row.host.fullmatch(host.lower())
        if m is not None:
            return row, {k: v for k, v in m.groupdict().items() if v is not None}
    return None


def host_part(kind: str, host: str, group: str) -> str | None:
    """The named *group* of the first token row of *kind* that matches *host* (ECR's region), or None."""
    k = get(kind)
    found = _token_row(k, host) if k is not None else None
    return None if found is None else found[1].get(group)


def token_kind(host: str, kind: str) -> str:
    """The kind whose token command applies: *kind*, or for ``generic`` the kind whose token rows match the
    host."""
    if kind not in ("", "generic"):
        return kind
    for k in kinds():
        if _token_row(k, host) is not None:
            return k.name
    return kind or "generic"


def token_command(host: str, kind: str) -> Command | None:
    """The token command of a registry (its kind as :func:`token_kind` says), or None when it has none."""
    k = get(token_kind(host, kind))
    if k is None:
        return None
    found = _token_row(k, host)
    if found is not None:
        row, parts = found
        fill: defaultdict[str, str] = defaultdict(lambda: "?", parts)
        return Command(
            argv=tuple(a.format_map(fill) for a in row.argv),
            username=row.username,
            valid_s=row.valid_s,
            install=row.install.format_map(fill),
            login=row.login.format_map(fill),
        )
    if k.unmatched:
        last = k.tokens[-1]
        return Command(
            argv=k.unmatched_argv,
            username=last.username,
            valid_s=last.valid_s,
            install=last.install,
            login=last.login,
            problem=k.unmatched.format(host=host),
        )
    return None


def auth_tail(host: str, kind: str, command: str | None) -> str:
    """What follows "set IMAGESMITH_REGISTRY_…, or `docker login HOST`" in an ``unauthorized`` fix line:
    a host hint (``[[host_hint]]``) unless the host has a token command of its kind, else the kind's
    ``hint`` (with its token command); empty when there is none."""
    name = token_kind(host, kind)
    k = get(name)
    own = k is not None and _token_row(k, host) is not None
    if not own:
        for h in _data()[1]:
            if h.contains in host:
                return h.hint
    if k is None or not k.hint:
        return ""
    return k.hint.format(command=command or k.command_example)


def realm_rows() -> tuple[tuple[tuple[str, ...], str, str, str], ...]:
    """The ``[[kind.realm]]`` rows as (kinds, registry regex, realm host, source)."""
    return tuple(
        ((k.name, "generic") if r.generic else (k.name,), r.registry, r.realm, r.source)
        for k in kinds()
        for r in k.realms
    )
