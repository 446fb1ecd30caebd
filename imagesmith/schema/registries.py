"""The shape of ``registries.toml`` (:data:`REGISTRIES`, read by :mod:`imagesmith.matrix`) and the host,
port and repository patterns other readers share (:data:`HOST_PORT`, :data:`REPO_PATH`).
"""

from __future__ import annotations

from typing import Final

from imagesmith import kinds
from imagesmith.schema.core import Field, Schema
from imagesmith.schema.project import _VERSION

#: a TCP port, 1–65535 (no leading zero): ``:99999`` is no port, and a registry or mirror with it is refused
#: when the file is read, not by the first push
PORT: Final[str] = r"(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
#: a registry host as the credential lookup, URLs and image references need it (issue 17): a DNS name or IPv4
#: address with an optional port, or a bracketed IPv6 literal — never user@host, a path or a query
HOST_PORT: Final[str] = (
    r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::" + PORT + ")?"
)
#: a repository path inside a registry: lowercase parts joined by '/', '.', '_', '__' or '-'
REPO_PATH: Final[str] = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"

#: registry kinds: what imagesmith knows of a registry beyond its host (login hints, token flows), one row
#: each in imagesmith/data/registry_kinds.toml
REGISTRY_KINDS: tuple[str, ...] = kinds.kind_names()

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
                            pattern=HOST_PORT,
                            message="{value!r} is not a registry host[:port]",
                            hint="a DNS name or IPv4 address, optional :port (ghcr.io, 127.0.0.1:5000); "
                            "no scheme, user@, path or spaces",
                            example='"ghcr.io"',
                        ),
                        "namespace": Field(
                            kind="string",
                            required=True,
                            pattern=f"/*(?:{REPO_PATH})?/*",
                            invalid="{value!r} is not a repository path",
                            hint="lowercase letters and digits joined by '/', '.', '_' or '-' (e.g. team/ml)",
                            example='"team"',
                        ),
                        "repository": Field(
                            kind="string",
                            pattern=REPO_PATH,
                            invalid="{value!r} is not a repository name",
                            hint="lowercase letters and digits joined by '/', '.', '_' or '-' (e.g. torch)",
                            description="default: torch",
                            example='"torch"',
                        ),
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
