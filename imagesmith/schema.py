"""One schema layer for imagesmith's input files: a declarative description that both checks a parsed file
(one error naming the file, the dotted key, the problem, the nearest valid value and the fix) and writes the
JSON Schema editors use (``imagesmith schema``, committed under ``docs/schemas/``).

Shape checks live here — unknown keys, types, required keys, enums, patterns; what needs the project or the
data tables (a path inside the project, a GPU imagesmith knows) stays with the loader, after this pass.
Used by ``imagesmith.toml`` (:mod:`imagesmith.project`) and the user config (:mod:`imagesmith.config`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
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

    # -- checking
    def check(self, data: Any, *, source: str, error: type[ConfigError] = ConfigError) -> None:
        """Raise *error* for the first key of *data* that does not fit; return quietly when all do."""
        _check(self.root, data, "", source, error)

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


def _fail(error: type[ConfigError], source: str, key: str, problem: str, fix: str) -> ConfigError:
    where = f"{source}: {key}" if key else source
    return error(f"{where}: {problem}", hint=fix)


def _type_ok(spec: Field, value: Any) -> bool:
    if spec.kind == "string":
        return isinstance(value, str)
    if spec.kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if spec.kind == "boolean":
        return isinstance(value, bool)
    if spec.kind == "array":
        return isinstance(value, list)
    return isinstance(value, dict)


def _example(spec: Field, key: str) -> str:
    name = key.rsplit(".", 1)[-1] or "key"
    if spec.example:
        return f"{name} = {spec.example}"
    return f"{name} = <{spec.kind}>"


def _problem(spec: Field, key: str, value: Any, default: str) -> str:
    if not spec.message:
        return default[:300]
    return spec.message.format(name=key.rsplit(".", 1)[-1], value=value)[:300]


def _check(spec: Field, value: Any, key: str, source: str, error: type[ConfigError]) -> None:
    if not _type_ok(spec, value):
        problem = _problem(spec, key, value, f"must be a {spec.kind}, not {type(value).__name__} {value!r}")
        raise _fail(error, source, key or "(top level)", problem, _example(spec, key))
    if spec.enum and value not in spec.enum:
        near = _nearest(str(value), [str(e) for e in spec.enum])
        default = f"{value!r} is not one of {', '.join(map(str, spec.enum))}"
        raise _fail(
            error,
            source,
            key,
            _problem(spec, key, value, default) + (f"; nearest valid value: {near!r}" if near else ""),
            _example(spec, key),
        )
    if spec.pattern and isinstance(value, str) and not re.fullmatch(spec.pattern, value):
        problem = _problem(spec, key, value, f"{value!r} does not match {spec.pattern}")
        raise _fail(error, source, key, problem, _example(spec, key))
    if spec.kind == "array" and spec.items is not None:
        for i, item in enumerate(value):
            _check(spec.items, item, f"{key}[{i}]", source, error)
    elif spec.kind == "map" and spec.items is not None:
        for k, item in value.items():
            _check(spec.items, item, f"{key}.{k}" if key else str(k), source, error)
    elif spec.kind == "table":
        known = list(spec.fields)
        for k in value:
            if k not in spec.fields:
                near = _nearest(str(k), known)
                nearest = f"; nearest valid key: {near!r}" if near else ""
                if key:  # a nested table: name the dotted key, and what its table knows
                    problem = f"unknown key ([{key}] knows only {', '.join(known)}){nearest}"
                    raise _fail(
                        error, source, f"{key}.{k}", problem, f"known keys of [{key}]: {', '.join(known)}"
                    )
                raise _fail(
                    error, source, "", f"unknown key {k!r}{nearest}", f"known keys: {', '.join(known)}"
                )
        for k, sub in spec.fields.items():
            dotted = f"{key}.{k}" if key else k
            if k in value:
                _check(sub, value[k], dotted, source, error)
            elif sub.required:
                raise _fail(error, source, dotted, "missing required key", f"add {_example(sub, dotted)}")


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
