"""One schema layer for imagesmith's input files: a declarative description that both checks a parsed file
(one error naming the file, the dotted key, the problem, the nearest valid value and the fix) and writes the
JSON Schema editors use (``imagesmith schema``, committed under ``docs/schemas/``).

Shape checks live here — unknown keys, types, required keys, enums, patterns; what needs the project or the
data tables (a path inside the project, a GPU imagesmith knows) stays with the loader, after this pass.
:class:`Schema` describes ``imagesmith.toml`` (:mod:`imagesmith.project`), the user config
(:mod:`imagesmith.config`) and ``registries.toml``; the matrix loader builds on the same :class:`Checker`
primitives, so every input file reports problems in one form.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from imagesmith.errors import ConfigError

Kind = Literal["string", "integer", "boolean", "array", "table", "map"]
_JSON_TYPES: dict[str, str] = {
    "string": "string",
    "integer": "integer",
    "boolean": "boolean",
    "array": "array",
    "table": "object",
    "map": "object",
}


@dataclass(frozen=True, kw_only=True)
class Field:
    """One key. ``items`` describes array items and map values; ``fields`` a table's keys."""

    kind: Kind
    description: str = ""
    #: the problem reported when the value does not fit (type, enum or pattern), after ``file: key:``;
    #: ``{value}`` is filled in. Default: what was expected and what was found.
    message: str = ""
    required: bool = False
    example: str = ""
    enum: tuple[Any, ...] = ()
    pattern: str | None = None
    items: Field | None = None
    fields: Mapping[str, Field] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Schema:
    """The schema of one input file."""

    title: str
    file_name: str
    root: Field
    docs: str = "docs/project.md"

    # -- checking
    def check(self, data: Any, *, source: str, error: type[ConfigError] = ConfigError) -> None:
        """Raise *error* for the first key of *data* that does not fit; return quietly when all do."""
        _check(self.root, data, "", Checker(source, error, docs=self.docs))

    # -- JSON Schema
    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"urn:imagesmith:schema:{self.file_name}",
            "title": self.title,
        }
        out.update(_json(self.root))
        return out


def _nearest(value: str, choices: list[str]) -> str | None:
    got = difflib.get_close_matches(value, choices, n=1, cutoff=0.0)
    return got[0] if got else None


TYPE_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    bool: "true/false",
    list: "a list",
    dict: "a table",
}


class Checker:
    """The checking primitives every input file goes through (the matrix loader builds on them, and so does
    :class:`Schema`): each problem is one *error* "``source: dotted.key: problem; nearest valid value: …``"
    with a fix line.
    """

    def __init__(self, source: str, error: type[ConfigError] = ConfigError, *, docs: str = "docs") -> None:
        self.source = source
        self.error = error
        self.docs = docs

    def fail(
        self, key: str, message: str, *, nearest: str | None = None, hint: str | None = None
    ) -> ConfigError:
        text = f"{self.source}: {key}: {message}" if key else f"{self.source}: {message}"
        if nearest is not None:
            text += f"; nearest valid value: {nearest!r}"
        return self.error(text, hint=hint or f"see {self.docs}")

    def keys(
        self, table: Mapping[str, Any], prefix: str, allowed: Sequence[str], required: Sequence[str]
    ) -> None:
        for key in table:
            if key not in allowed:
                dotted = f"{prefix}.{key}" if prefix else key
                inside = f" ([{prefix}] knows only {', '.join(allowed)})" if prefix else ""
                raise self.fail(
                    dotted,
                    f"unknown key {key!r}{inside}",
                    nearest=_nearest(str(key), list(allowed)),
                    hint=f"allowed keys here: {', '.join(allowed)}",
                )
        for key in required:
            if key not in table:
                dotted = f"{prefix}.{key}" if prefix else key
                raise self.fail(dotted, "missing required key", hint=f"add `{key} = …` (see {self.docs})")

    def typed(self, value: Any, key: str, kind: type) -> Any:
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if not ok:
            raise self.fail(key, f"expected {TYPE_NAMES[kind]}, got {type(value).__name__} {value!r}")
        return value

    def str_list(self, value: Any, key: str, *, nonempty: bool = True) -> tuple[str, ...]:
        self.typed(value, key, list)
        if nonempty and not value:
            raise self.fail(key, "must not be empty")
        out = []
        for i, item in enumerate(value):
            out.append(self.typed(item, f"{key}[{i}]", str))
        if len(set(out)) != len(out):
            dup = next(x for x in out if out.count(x) > 1)
            raise self.fail(key, f"{dup!r} is listed twice")
        return tuple(out)

    def choice(self, value: Any, key: str, choices: Sequence[str]) -> str:
        self.typed(value, key, str)
        if value not in choices:
            raise self.fail(key, f"unknown value {value!r}", nearest=_nearest(value, list(choices)))
        return str(value)


_PY_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "boolean": bool,
    "array": list,
    "table": dict,
    "map": dict,
}


def _example(spec: Field, key: str) -> str:
    name = key.rsplit(".", 1)[-1] or "key"
    return f"{name} = {spec.example}" if spec.example else f"{name} = <{spec.kind}>"


def _problem(spec: Field, value: Any, default: str) -> str:
    return (spec.message.format(value=value) if spec.message else default)[:300]


def _check(spec: Field, value: Any, key: str, checker: Checker) -> None:
    kind = _PY_TYPES[spec.kind]
    if spec.message and not (isinstance(value, kind) and not (kind is int and isinstance(value, bool))):
        raise checker.fail(key or "(top level)", _problem(spec, value, ""), hint=_example(spec, key))
    checker.typed(value, key or "(top level)", kind)
    if spec.enum and value not in spec.enum:
        raise checker.fail(
            key,
            _problem(spec, value, f"unknown value {value!r}"),
            nearest=_nearest(str(value), [str(e) for e in spec.enum]),
            hint=_example(spec, key),
        )
    if spec.pattern and isinstance(value, str) and not re.fullmatch(spec.pattern, value):
        raise checker.fail(
            key, _problem(spec, value, f"{value!r} does not match {spec.pattern}"), hint=_example(spec, key)
        )
    if spec.kind == "array" and spec.items is not None:
        for i, item in enumerate(value):
            _check(spec.items, item, f"{key}[{i}]", checker)
    elif spec.kind == "map" and spec.items is not None:
        for k, item in value.items():
            _check(spec.items, item, f"{key}.{k}" if key else str(k), checker)
    elif spec.kind == "table":
        checker.keys(value, key, list(spec.fields), [k for k, v in spec.fields.items() if v.required])
        for k, sub in spec.fields.items():
            if k in value:
                _check(sub, value[k], f"{key}.{k}" if key else k, checker)


def _json(spec: Field) -> dict[str, Any]:
    out: dict[str, Any] = {"type": _JSON_TYPES[spec.kind]}
    if spec.description:
        out["description"] = spec.description
    if spec.enum:
        out["enum"] = list(spec.enum)
    if spec.pattern:
        out["pattern"] = f"^(?:{spec.pattern})$"  # JSON Schema patterns search; the check matches the whole
    if spec.kind == "array" and spec.items is not None:
        out["items"] = _json(spec.items)
    if spec.kind == "map" and spec.items is not None:
        out["additionalProperties"] = _json(spec.items)
    if spec.kind == "table":
        out["properties"] = {k: _json(v) for k, v in spec.fields.items()}
        out["additionalProperties"] = False
        required = [k for k, v in spec.fields.items() if v.required]
        if required:
            out["required"] = required
    return out


# ------------------------------------------------------------------------------------------------------------
# the files

_PATH = Field(kind="string", description="a path relative to imagesmith.toml's folder", example='"…"')
_TEMPLATE = Field(
    kind="string",
    description="URL template: {url} {path} {host} {name} {version} {commit} {file}",
    pattern=r"https?://[^/{}]+.*",
    message="{value!r} is not an http(s) URL template",
    example='"https://mirror.example/{url}"',
)

_VERSION = Field(
    kind="integer",
    enum=(1,),
    description="file format version",
    message="{value!r} is not supported by this imagesmith",
    example="1",
)


def _source_mirrors(description: str) -> Field:
    return Field(
        kind="table",
        fields={
            "mirrors": Field(
                kind="array",
                items=_TEMPLATE,
                description=description,
                message="sources.mirrors must be a list of URL templates",
                example='["https://mirror.example/{url}"]',
            )
        },
    )


PROJECT: Schema = Schema(
    title="imagesmith project (imagesmith.toml)",
    file_name="imagesmith.toml",
    root=Field(
        kind="table",
        fields={
            "schema": _VERSION,
            "name": Field(
                kind="string",
                pattern=r"[a-z0-9][a-z0-9._-]*",
                message="{value!r} is not a project name (lowercase letters, digits, '.', '_', '-')",
                description="project name (default: the folder's name)",
                example='"gpu-images"',
            ),
            "default_matrix": Field(
                kind="string", description="--matrix when none is given", example='"smoke"'
            ),
            "paths": Field(
                kind="table",
                description="where the project's files are, relative to this file",
                fields={
                    "matrices": _PATH,
                    "dockerfiles": _PATH,
                    "locks": _PATH,
                    "registries": _PATH,
                },
            ),
            "sources": _source_mirrors("tried in order before a source archive's pinned URL"),
        },
    ),
)

CONFIG: Schema = Schema(
    title="imagesmith user configuration (~/.config/imagesmith/config.toml)",
    file_name="config.toml",
    root=Field(
        kind="table",
        fields={
            "registry_mirrors": Field(
                kind="map",
                items=Field(
                    kind="string",
                    message='registry_mirrors must map host = "prefix" strings',
                    example='"mirror.example/hub"',
                ),
                message='registry_mirrors must map host = "prefix" strings',
                description='base images from a registry pulled through a prefix: "docker.io" = "mirror/hub"',
                example='{ "docker.io" = "mirror.example/hub" }',
            ),
            "build": Field(
                kind="table",
                fields={
                    "extra_ca": Field(
                        kind="string",
                        message="build.extra_ca must be a path string",
                        description="PEM CA bundle trusted by pip/apt inside builds",
                        example='"/path/ca.crt"',
                    )
                },
            ),
            "sources": _source_mirrors("source-archive mirror templates, before the project's"),
        },
    ),
)

#: registry kinds: what imagesmith knows of a registry beyond its host (login hints, token flows)
REGISTRY_KINDS: tuple[str, ...] = (
    "generic",
    "dockerhub",
    "ghcr",
    "acr",
    "tcr",
    "swr",
    "ecr",
    "quay",
    "artifact-registry",
)

REGISTRIES: Schema = Schema(
    title="imagesmith registries (matrices/registries.toml)",
    file_name="registries.toml",
    root=Field(
        kind="table",
        fields={
            "schema": _VERSION,
            "registries": Field(
                kind="map",
                required=True,
                description="registries by name; a matrix lists the names it pushes to",
                example='{ main = { host = "ghcr.io", namespace = "team" } }',
                items=Field(
                    kind="table",
                    description="one registry: <host>/<namespace>/<repository>:<cell tag>",
                    fields={
                        "host": Field(
                            kind="string",
                            required=True,
                            pattern=r"[^/\s]+",
                            message="{value!r} is not a registry host[:port]",
                            example='"ghcr.io"',
                        ),
                        "namespace": Field(kind="string", required=True, example='"team"'),
                        "repository": Field(kind="string", description="default: torch", example='"torch"'),
                        "kind": Field(
                            kind="string",
                            enum=REGISTRY_KINDS,
                            description="login hints and token flows (default: generic)",
                            example='"ghcr"',
                        ),
                        "insecure": Field(
                            kind="boolean", description="plain HTTP (a local registry)", example="true"
                        ),
                        "cells": Field(
                            kind="array",
                            items=Field(kind="string", example='"*-runtime-*"'),
                            description="globs over cell ids this registry takes (default: all)",
                            example='["*-runtime-*"]',
                        ),
                    },
                ),
            ),
        },
    ),
)

SCHEMAS: tuple[Schema, ...] = (PROJECT, CONFIG, REGISTRIES)
