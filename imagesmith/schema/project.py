"""The shapes of ``imagesmith.toml`` (:data:`PROJECT`, read by :mod:`imagesmith.project`) and of the user
config (:data:`CONFIG`, read by :mod:`imagesmith.config`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from imagesmith.schema.core import Field, Schema

# ------------------------------------------------------------------------------------------------------------
# the files

_PATH = Field(kind="string", description="a path relative to imagesmith.toml's folder", example='"…"')
#: a matrix name (the file's name without .toml)
MATRIX_NAME: Final[str] = r"[A-Za-z0-9][A-Za-z0-9._-]*"
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


def _index_key(path: str, example: str) -> Field:
    return Field(
        kind="string",
        min=1,
        message=f"release.index_key must be {path} or an inline PEM public key",
        description="the public key the release index must be signed with (pick, index; the .pub of the "
        f"release's --sign-key): {path}, or the PEM text itself; --verify-key and $IMAGESMITH_INDEX_KEY "
        "override it",
        example=example,
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
                pattern=r"[a-z0-9][a-z0-9._-]{0,63}",
                message="{value!r} is not a project name "
                "(at most 64 lowercase letters, digits, '.', '_', '-')",
                description="project name (default: the folder's name)",
                example='"gpu-images"',
            ),
            "default_matrix": Field(
                kind="string",
                pattern=MATRIX_NAME,
                invalid="{value!r} is not a matrix name",
                hint='the name of a file in the matrices folder without .toml, e.g. default_matrix = "h100"',
                description="--matrix when none is given",
                example='"smoke"',
            ),
            "paths": Field(
                kind="table",
                description="where the project's files are, relative to this file",
                fields={
                    "matrices": _PATH,
                    "dockerfiles": _PATH,
                    "locks": _PATH,
                    "registries": _PATH,
                    "release_index": replace(
                        _PATH,
                        description="the release index imagesmith release extends and rewrites "
                        "(default release/index.json): the only place the previous index is read from",
                    ),
                },
            ),
            "sources": _source_mirrors("tried in order before a source archive's pinned URL"),
            "bases": Field(
                kind="table",
                description="base images by digest (locks/bases.toml, `imagesmith lock --bases`)",
                fields={
                    "escrow": Field(
                        kind="string",
                        pattern=r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
                        message="{value!r} is not a registry name",
                        description="a registry of the registries file: every pinned base is copied there by "
                        "digest, and a build whose upstream tag is gone or unreachable uses that copy",
                        example='"local-plain"',
                    ),
                },
            ),
            "release": Field(
                kind="table",
                description="what `imagesmith release` trusts",
                fields={
                    "trusted_keys": Field(
                        kind="array",
                        items=_PATH,
                        description="PEM public keys (relative paths) whose signed validation attestations "
                        "release accepts; a report without one is never enough",
                        message="release.trusted_keys must be a list of relative paths to .pub files",
                        example='["keys/validation.pub"]',
                    ),
                    "index_key": _index_key("a relative path to a .pub file", '"keys/release.pub"'),
                    "index_valid_for": Field(
                        kind="string",
                        pattern=r"[1-9][0-9]{0,3}[dh]",
                        message="release.index_valid_for must be a duration like 14d or 36h",
                        hint='e.g. index_valid_for = "14d" (days, d, or hours, h; at most 9999)',
                        description="how long an index release writes stays valid (its expires field; "
                        "default 14d): pick and index refuse it afterwards; release renews it once less than "
                        "half is left (the nightly's run)",
                        example='"14d"',
                    ),
                    "vulnerabilities": Field(
                        kind="table",
                        description="the vulnerability gate (imagesmith.vulngate, docs/release.md): a cell "
                        "whose scan shows an advisory at or above fail_on is refused",
                        fields={
                            "fail_on": Field(
                                kind="string",
                                enum=("critical", "high", "medium", "low"),
                                description="the lowest severity that refuses a cell (default critical)",
                                example='"high"',
                            ),
                            "allowlist_max_days": Field(
                                kind="integer",
                                min=1,
                                description="the furthest an allowlist entry may expire, in days from the "
                                "release run (default 365): an entry expiring later counts as none",
                                example="365",
                            ),
                            "osv": replace(
                                _PATH,
                                description="OSV data file an SBOM (sha256-<hex>.cdx.json / .spdx.json in "
                                "--scan-reports) is matched against",
                            ),
                            "allowlist": Field(
                                kind="array",
                                description="advisories let through, each with a reason and an expiry date "
                                "(an expired entry counts as none)",
                                items=Field(
                                    kind="table",
                                    fields={
                                        "id": Field(
                                            kind="string", required=True, min=1, example='"CVE-2024-1"'
                                        ),
                                        "reason": Field(kind="string", required=True, min=1),
                                        "expires": Field(
                                            kind="string",
                                            required=True,
                                            pattern=r"\d{4}-\d{2}-\d{2}",
                                            message='{value} is not a quoted date "YYYY-MM-DD"',
                                            hint='write expires = "2027-03-31" (the last day it counts)',
                                            example='"2027-03-31"',
                                        ),
                                    },
                                ),
                            ),
                        },
                    ),
                },
            ),
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
            "release": Field(
                kind="table",
                fields={
                    "index_key": _index_key("a path to a .pub file", '"~/.config/imagesmith/release.pub"')
                },
            ),
            "pick": Field(
                kind="table",
                fields={
                    "verify_key": Field(
                        kind="string",
                        message="pick.verify_key must be a path string",
                        description="PEM public key the release index must be signed with (pick, index); "
                        "$IMAGESMITH_INDEX_KEY and --verify-key override it",
                        example='"~/.config/imagesmith/release.pub"',
                    )
                },
            ),
        },
    ),
)
