"""The shape of ``matrices/*.toml`` (:data:`MATRIX`, read by :mod:`imagesmith.matrix`) and the strict
shapes of values that reach a Dockerfile or a shell (image references, paths, versions, URLs, labels).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import replace
from typing import Any, Final

from imagesmith.schema.core import Field, Schema
from imagesmith.schema.project import MATRIX_NAME
from imagesmith.schema.registries import PORT

# -- matrices/*.toml (imagesmith.matrix: what needs the data tables — GPUs, torch releases, CUDA versions, OS
# families — and one key against another stays in its loader)

#: image flavors a matrix may build
FLAVORS: Final[tuple[str, ...]] = ("runtime", "devel", "interactive")
#: where a cell's torch comes from: pip wheels, or the base image (NGC-style bases)
TORCH_SOURCES: Final[tuple[str, ...]] = ("wheels", "base")
#: the CUDA toolkit nccl-tests is built with
NCCL_TOOLKITS: Final[tuple[str, ...]] = ("auto", "base", "pip", "distro", "devel-image")
#: package-mirror profiles (imagesmith.matrix.MIRROR_PROFILES holds their settings)
MIRROR_PROFILE_NAMES: Final[tuple[str, ...]] = ("none", "tuna", "aliyun", "ustc")
#: characters a label value may not hold: quotes, backslashes, $ and `, and whatever can break a line
#: (Unicode categories Cc, Zl and Zp)
_LABEL_BREAKERS: Final[frozenset[str]] = frozenset({"Cc", "Zl", "Zp"})
#: bidirectional controls ("Trojan Source", CVE-2021-42574): shown in review as other text than they are, so
#: no generated file may hold one
BIDI_CONTROLS: Final[str] = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


# -- values that reach a Dockerfile or a shell (issue 17): strict shapes, so none can hold whitespace, a
# quote, a backslash or a shell metacharacter ($ ` ; & | < > ( ) { } * ? ! # ~ at a word's start) — the
# loader refuses them with the field and the fix; imagesmith.templating checks rendered values again
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_PATH_PART = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
#: an image reference as docker reads it: [host[:port]/]path[:tag][@sha256:digest]
IMAGE_REF: Final[str] = (
    rf"(?:{_LABEL}(?:\.{_LABEL})*(?::{PORT})?/)?{_PATH_PART}(?:/{_PATH_PART})*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?"
)
#: an absolute POSIX path of safe characters: /opt/venv, /opt/torch/.venv
ABS_PATH: Final[str] = r"(?:/[A-Za-z0-9._+-]+)+/?"
#: a version: digits first (a leading v allowed), then letters, digits and . _ + - : 2.17.6, v2.19.6, 0.9.5
VERSION: Final[str] = r"v?[0-9]+(?:[._+-]?[A-Za-z0-9]+)*"
#: an http(s) URL without a query, quotes, whitespace or shell metacharacters
URL: Final[str] = rf"https?://{_LABEL}(?:\.{_LABEL})*(?::{PORT})?(?:/[A-Za-z0-9._~%/+=,@:-]*)?"
_SAFE_HINT = "no spaces, quotes, backslashes or shell characters ($ ` ; & | < > ( ) …)"


def _minor_guess(value: Any) -> str:
    text = str(value)
    return ".".join(text.split(".")[:2]) if re.match(r"^3\.[0-9]+\.[0-9]+$", text) else "3.11"


def _label_value_problem(text: Any) -> str:
    bad = sorted(
        {
            c
            for c in str(text)
            if c in '"\\$`' or c in BIDI_CONTROLS or unicodedata.category(c) in _LABEL_BREAKERS
        }
    )
    return f"value {str(text)[:60]!r} contains {', '.join(repr(c) for c in bad)}"


_MINOR = Field(
    kind="string",
    pattern=r"3\.[0-9]{1,3}",
    invalid="{value!r} is not a Python minor version (X.Y)",
    nearest=_minor_guess,
    description="a Python minor version",
    example='"3.11"',
)


def _names(
    description: str,
    example: str,
    *,
    items: Field | None = None,
    nonempty: bool = True,
    required: bool = False,
) -> Field:
    return Field(
        kind="array",
        required=required,
        items=items or Field(kind="string"),
        min=1 if nonempty else None,
        unique=True,
        description=description,
        example=example,
    )


def _rule(*, exclude: bool) -> Field:
    glob = "a glob ({a,b} allowed)" if exclude else "one exact value"
    return Field(
        kind="array",
        description=(
            "cells to leave out: globs over torch, variant, python and flavor, and why"
            if exclude
            else "cells to add: one exact torch, variant, python and flavor each"
        ),
        items=Field(
            kind="table",
            fields={
                "torch": Field(kind="string", required=not exclude, description=f"torch version: {glob}"),
                "variant": Field(kind="string", required=not exclude, description=f"CUDA variant: {glob}"),
                "python": (
                    Field(kind="string", description=f"Python minor: {glob}")
                    if exclude
                    else replace(_MINOR, required=True)
                ),
                "flavor": Field(
                    kind="string",
                    required=not exclude,
                    enum=() if exclude else FLAVORS,
                    description=f"flavor: {glob}",
                ),
                "reason": Field(kind="string", required=exclude, description="why (shown by plan)"),
            },
        ),
    )


#: the keys of [base] (and of each [[extra_bases]] table, which adds variants and flavors)
_BASE_FIELDS: Final[dict[str, Field]] = {
    "os": Field(
        kind="string",
        required=True,
        pattern=r"[a-z][a-z0-9.]{0,31}",
        invalid="{value!r} is not a tag component",
        hint="a lowercase letter, then at most 31 of a-z, 0-9 and '.' (every image tag ends "
        'in it; a tag holds at most 128 characters), e.g. os = "ubuntu22.04"',
        nearest="ubuntu22.04",
        description="OS tag component",
        example='"ubuntu22.04"',
    ),
    "image": Field(
        kind="string",
        required=True,
        pattern=IMAGE_REF,
        invalid="{value!r} is not an image reference",
        nearest="ubuntu:22.04",
        hint="[host[:port]/]path[:tag][@sha256:…], lowercase path, e.g. ubuntu:22.04",
        description="base image of the runtime flavor",
        example='"ubuntu:22.04"',
    ),
    "python": replace(_MINOR, required=True, description="the distro's Python minor"),
    "devel_images": Field(
        kind="map",
        items=Field(
            kind="string",
            pattern=IMAGE_REF,
            invalid="{value!r} is not an image reference",
            hint="[host[:port]/]path[:tag][@sha256:…], e.g. nvidia/cuda:12.8.1-devel-ubuntu22.04",
        ),
        description="devel base per CUDA X.Y",
        example='{ "12.8" = "nvidia/cuda:12.8.1-devel-ubuntu22.04" }',
    ),
    "venv": Field(
        kind="string",
        pattern=ABS_PATH,
        invalid="{value!r} is not an absolute path of safe characters",
        nearest="/opt/venv",
        hint="an absolute path of letters, digits and . _ + - between slashes (/opt/venv)",
        description="the base image's Python environment (torch.source = 'base')",
        example='"/opt/venv"',
    ),
}


MATRIX: Schema = Schema(
    title="imagesmith matrix (matrices/<name>.toml)",
    file_name="matrix",
    docs="docs/matrix.md",
    root=Field(
        kind="table",
        fields={
            "schema": Field(
                kind="integer",
                required=True,
                enum=(1,),
                invalid="unsupported schema {value}",
                description="matrix format version",
                example="1",
            ),
            "name": Field(
                kind="string",
                pattern=MATRIX_NAME,
                invalid="{value!r} is not a matrix name",
                hint="letters, digits, '.', '_' and '-', starting with a letter or digit (the file's name "
                "without .toml)",
                description="the file's name without .toml",
                example='"smoke"',
            ),
            "description": Field(kind="string", description="one line for `imagesmith plan`"),
            "gpus": _names(
                "target GPUs (names or aliases from `imagesmith compat --list-gpus`)",
                '["h200", "h100"]',
                required=True,
            ),
            "flavors": _names(
                "image flavors to build",
                '["runtime"]',
                items=Field(kind="string", enum=FLAVORS),
                required=True,
            ),
            "shm_min": Field(
                kind="string",
                required=True,
                pattern=r" *[0-9]+[kmgKMG]? *",
                invalid="{value!r} is not a size",
                nearest="8g",
                hint="write a number with an optional k, m or g suffix, e.g. '8g'",
                description="the /dev/shm the images need (64m to 2048g), e.g. 16g",
                example='"16g"',
            ),
            "registries": _names("registries.toml entries to push to", '["local"]', nonempty=False),
            "labels": Field(
                kind="map",
                description="image labels to add: name = one line of text",
                example='{ "com.example.team" = "ml-platform" }',
                keys=Field(
                    kind="string",
                    pattern=r"[a-z0-9]([a-z0-9._-]*[a-z0-9])?",
                    invalid="{value!r} is not a label name",
                    hint="lowercase letters, digits, '.', '-' and '_', starting and ending with a letter or "
                    "digit (reverse-DNS, e.g. com.example.team)",
                    quote=True,
                ),
                items=Field(
                    kind="string",
                    pattern=r'[^"\\$`\x00-\x1f\x7f-\x9f\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]*',
                    invalid=_label_value_problem,
                    hint="a label value is one line of text without quotes, backslashes, $, ` or "
                    "bidirectional controls (U+202E …)",
                ),
            ),
            "torch": Field(
                kind="table",
                required=True,
                fields={
                    "versions": _names(
                        "torch releases (`imagesmith compat --list-torch`)", '["2.11.0"]', required=True
                    ),
                    "variants": _names("CUDA wheel variants (cu126, cu130, …)", '["cu130"]', required=True),
                    "source": Field(
                        kind="string",
                        enum=TORCH_SOURCES,
                        description="pip wheels (default) or the base image's own torch",
                        example='"wheels"',
                    ),
                },
            ),
            "python": Field(
                kind="table",
                required=True,
                fields={
                    "versions": _names("Python minors", '["3.11"]', items=_MINOR, required=True),
                    "uv": Field(
                        kind="string",
                        pattern=VERSION,
                        invalid="{value!r} is not a version",
                        nearest="0.9.5",
                        hint=f"a uv release such as 0.9.5 ({_SAFE_HINT})",
                        description="uv version for managed Pythons",
                        example='"0.9.5"',
                    ),
                    "managed": Field(
                        kind="map",
                        keys=_MINOR,
                        items=Field(
                            kind="string",
                            pattern=VERSION,
                            invalid="{value!r} is not a Python release",
                            hint=f"a full release such as 3.12.11 ({_SAFE_HINT})",
                            example='"3.12.11"',
                        ),
                        description="uv-managed builds for minors other than the distro's: minor = full",
                        example='{ "3.12" = "3.12.11" }',
                    ),
                    "install_mirror": Field(
                        kind="string",
                        pattern=f"(?:{URL})?",
                        invalid="{value!r} is not an http(s) URL of safe characters",
                        hint=f"an https:// URL without a query ({_SAFE_HINT}), or leave it out",
                        description="uv python-install mirror URL",
                        example='"https://mirror.example/python-build-standalone/releases/download"',
                    ),
                },
            ),
            "base": Field(kind="table", required=True, fields=_BASE_FIELDS),
            "extra_bases": Field(
                kind="array",
                description=(
                    "more OS bases: each adds the cells of its variants and flavors on it, tagged with its "
                    "os "
                    "(e.g. debian12 cells beside the ubuntu22.04 ones where only Debian bases can be pulled)"
                ),
                items=Field(
                    kind="table",
                    fields={
                        **_BASE_FIELDS,
                        "variants": _names(
                            "the torch.variants built on this base (default: all)", '["cu121"]'
                        ),
                        "flavors": _names(
                            "the flavors built on this base (default: all)",
                            '["runtime"]',
                            items=Field(kind="string", enum=FLAVORS),
                        ),
                    },
                ),
            ),
            "nccl_tests": Field(
                kind="table",
                required=True,
                fields={
                    "version": Field(
                        kind="string",
                        required=True,
                        pattern=VERSION,
                        invalid="{value!r} is not a version",
                        hint=f"the nccl-tests release the commit is, e.g. v2.19.6 ({_SAFE_HINT})",
                        example='"v2.19.6"',
                    ),
                    "commit": Field(
                        kind="string",
                        required=True,
                        pattern="[0-9a-f]{40}",
                        invalid="{value!r} is not a 40-hex commit id",
                        hint="use the full sha1",
                        description="the full sha1 of the nccl-tests commit",
                    ),
                    "sha256": Field(
                        kind="string",
                        required=True,
                        pattern="[0-9a-f]{64}",
                        invalid="{value!r} is not a sha256",
                        hint="git archive --format=tar --prefix=nccl-tests-<commit>/ <commit> | sha256sum",
                        description="sha256 of `git archive --format=tar` of that commit",
                    ),
                    "url": Field(
                        kind="string",
                        pattern=URL,
                        invalid="{value!r} is not an http(s) URL of safe characters",
                        hint=f"an https:// URL without a query ({_SAFE_HINT})",
                        description="archive URL (default: GitHub's)",
                    ),
                    "toolkit": Field(
                        kind="string",
                        enum=NCCL_TOOLKITS,
                        description=(
                            "CUDA toolkit to build with: auto (pip for CUDA >= 13, else the distribution's, "
                            "else base.devel_images), base (the base image's), pip, distro, devel-image"
                        ),
                        example='"auto"',
                        hint="one of: auto (picks per cell; `imagesmith plan --explain` says which and why), "
                        'base, pip, distro, devel-image (docs/matrix.md, "nccl-tests toolkit sources")',
                    ),
                },
            ),
            "mirror": Field(
                kind="table",
                fields={
                    "build": Field(
                        kind="string",
                        enum=MIRROR_PROFILE_NAMES,
                        description="package mirrors during the build",
                        example='"none"',
                    ),
                    "runtime": Field(
                        kind="string",
                        enum=MIRROR_PROFILE_NAMES,
                        description="package mirrors configured in the image",
                        example='"none"',
                    ),
                },
            ),
            "exclude": _rule(exclude=True),
            "include": _rule(exclude=False),
        },
    ),
)
