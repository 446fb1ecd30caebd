"""One schema layer for imagesmith's files: a declarative description that both checks a parsed file (one
error naming the file, the dotted key, the problem, the nearest valid value and the fix) and writes the JSON
Schema editors and other tools use (``imagesmith schema``, committed under ``docs/schemas/``).

Shape checks live here — unknown keys, types, required keys, enums, patterns, empty or repeated lists; what
needs the project or the data tables (a path inside the project, a GPU or torch release imagesmith knows,
one field against another) stays with the reader, after this pass. :class:`Schema` describes
``imagesmith.toml`` (:mod:`imagesmith.project`), the user config (:mod:`imagesmith.config`),
``registries.toml`` and the matrix files (:mod:`imagesmith.matrix`), the release index
(:mod:`imagesmith.index`) and the validation report (:mod:`imagesmith.validate.record`). Each reader words its
problems through a :class:`Checker`; the index and the report keep their own wording by subclassing it.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
import re
import sys
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from imagesmith import kinds
from imagesmith.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

#: the figures validation measures against a healthy host (imagesmith.validate.expected)
PERF_FIGURES: tuple[str, ...] = (
    "hbm_copy_gbps",
    "matmul_tflops",
    "h2d_gbps",
    "d2h_gbps",
    "allreduce_busbw_gbps",
    # issue 28: the soak (median over GPUs of the sustained means, the worst minute / the first, its
    # length) and the DDP scaling efficiency on all the host's GPUs
    "soak_matmul_tflops",
    "soak_copy_gbps",
    "soak_worst_minute_ratio",
    "soak_minutes",
    "scaling_efficiency",
    # issue 33: what a listing-validated host proved — the promises its listing made (all kept: only a passing
    # run is in the index), its vCPUs per GPU and RAM per GPU memory, its data and checkpoint folders
    "listing_promises_kept",
    "host_vcpu_per_gpu",
    "host_ram_per_gpu_memory",
    "storage_data_read_gbps",
    "storage_checkpoint_write_gbps",
)

Kind = Literal["string", "integer", "number", "boolean", "array", "table", "map"]
_JSON_TYPES: dict[str, str] = {
    "string": "string",
    "integer": "integer",
    "number": "number",
    "boolean": "boolean",
    "array": "array",
    "table": "object",
    "map": "object",
}
#: a problem's text: a ``str.format`` template with ``{value}``, or a function of the value
Problem = str | Callable[[Any], str]


@dataclass(frozen=True, kw_only=True)
class Field:
    """One key. ``items`` describes array items and map values, ``keys`` a map's keys; ``fields`` a table's
    keys (``open``: other keys are allowed too).
    """

    kind: Kind
    description: str = ""
    #: the problem reported when the value does not fit (type, enum or pattern), after ``file: key:``;
    #: ``{value}`` is filled in. Default: what was expected and what was found.
    message: str = ""
    #: the problem reported when the value has the right type but not an allowed value (enum, pattern);
    #: ``message`` when empty
    invalid: Problem = ""
    #: the fix line of such a problem (default: the reader's, see :meth:`Checker.value_hint`)
    hint: str = ""
    #: the nearest valid value of such a problem (default: the nearest enum value, none for a pattern)
    nearest: str | Callable[[Any], str | None] | None = None
    required: bool = False
    nullable: bool = False
    example: str = ""
    enum: tuple[Any, ...] = ()
    pattern: str | None = None
    #: arrays: at least this many items; strings: at least this many characters; integers: at least this
    min: int | None = None
    #: arrays: no item twice
    unique: bool = False
    items: Field | None = None
    keys: Field | None = None
    #: a map key that does not fit is named quoted (it may hold anything, spaces and quotes included)
    quote: bool = False
    fields: Mapping[str, Field] = field(default_factory=dict)
    open: bool = False


@dataclass(frozen=True, kw_only=True)
class Schema:
    """The schema of one file; its JSON Schema is ``docs/schemas/<file_name>.schema.json``."""

    title: str
    file_name: str
    root: Field
    docs: str = "docs/project.md"

    # -- checking
    def check(
        self,
        data: Any,
        *,
        source: str = "",
        error: type[ConfigError] = ConfigError,
        checker: Checker | None = None,
    ) -> None:
        """Raise an error for the first key of *data* that does not fit; return quietly when all do.
        *checker* words the problem (default: a :class:`Checker` of *source*, raising *error*).
        """
        _check(self.root, data, "", checker or Checker(source, error, docs=self.docs))

    # -- JSON Schema
    def json_schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"urn:imagesmith:schema:{self.file_name}",
            "title": self.title,
        }
        out.update(_json(self.root))
        return out


def check_toml_text(text: str, source: str, *, error: type[ConfigError] = ConfigError) -> str:
    """*text* of the TOML file *source*, refused with the fix where TOML parsers would only say "invalid
    statement at line 1": a UTF-8 byte-order mark (what some Windows editors save) or a UTF-16 file."""
    if text.startswith("\ufeff"):
        raise error(
            f"{source}: starts with a byte-order mark (U+FEFF), which TOML does not allow",
            hint="save the file as UTF-8 without BOM (e.g. `sed -i '1s/^\\xEF\\xBB\\xBF//' FILE`, "
            'or the editor\'s "UTF-8" rather than "UTF-8 with BOM")',
        )
    if "\x00" in text[:2]:
        raise error(
            f"{source}: holds NUL bytes at its start: saved as UTF-16, not UTF-8",
            hint="save the file as UTF-8 (e.g. `iconv -f UTF-16 -t UTF-8 FILE > FILE.new`)",
        )
    return text


def _nearest(value: str, choices: list[str]) -> str | None:
    got = difflib.get_close_matches(value, choices, n=1, cutoff=0.0)
    return got[0] if got else None


def shown(value: Any) -> str:
    """*value* of a TOML/JSON file as the user wrote it, with what it is — never a Python repr
    (``datetime.datetime(1979, 5, 27, …)``, ``{'opencontainers': {…}}``)."""
    if isinstance(value, bool):
        return f"a boolean {str(value).lower()}"
    if isinstance(value, (_dt.datetime, _dt.date, _dt.time)):
        kind = {_dt.datetime: "a date-time", _dt.date: "a date", _dt.time: "a time"}[type(value)]
        return f"{kind} {value.isoformat()} (an unquoted date; quote it to make it a string)"
    if isinstance(value, str):
        return f"a string {json.dumps(value[:80])}"
    if isinstance(value, int):
        text = str(value) if value.bit_length() < 200 else f"{str(value)[:12]}… ({len(str(value))} digits)"
        return f"an integer {text}"
    if isinstance(value, float):
        return f"a number {value}"
    if isinstance(value, dict):
        keys = ", ".join(list(map(str, value))[:5])
        return f"a table (keys: {keys})" if keys else "an empty table"
    if isinstance(value, list):
        return f"a list of {len(value)} item(s)"
    return type(value).__name__


def _dotted_hint(key: str, value: Any) -> str | None:
    """A key written ``org.opencontainers.image.source = …`` is, in TOML, a path of tables: the fix line says
    to quote it (``"org.opencontainers.image.source" = …``)."""
    if not isinstance(value, dict) or not value:
        return None
    parts = [key.rsplit(".", 1)[-1]]
    node: Any = value
    while isinstance(node, dict) and len(node) == 1:
        ((k, node),) = node.items()
        parts.append(str(k))
    if len(parts) < 2:
        return None
    dotted = ".".join(parts)
    return f'a key with dots is a path of tables in TOML: quote it, "{dotted}" = …'


TYPE_NAMES: dict[type, str] = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true/false",
    list: "a list",
    dict: "a table",
}


class Checker:
    """The checking primitives every file goes through: each problem is one *error*
    "``source: dotted.key: problem; nearest valid value: …``" with a fix line. :class:`Schema` calls
    :meth:`keys`, :meth:`wrong_type`, :meth:`too_small`, :meth:`repeated` and :meth:`invalid`; a reader
    with its own wording overrides them.
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
        return self.error(
            text, hint=hint or f"see {self.docs}", file=self.source, field=key or None, problem=message
        )

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
        if not _is(value, kind):
            raise self.fail(
                key, f"expected {TYPE_NAMES[kind]}, got {shown(value)}", hint=_dotted_hint(key, value)
            )
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

    # -- the problems Schema.check finds; a reader with its own wording overrides these
    def wrong_type(self, spec: Field, value: Any, key: str) -> ConfigError:
        """*value* at *key* is not of *spec*'s kind."""
        where = key or "(top level)"
        if spec.message:
            return self.fail(
                where,
                _text(spec.message, value),
                hint=_dotted_hint(key, value) or spec.hint or _example(spec, key),
            )
        kind = _PY_TYPES[spec.kind]
        return self.fail(
            where, f"expected {TYPE_NAMES[kind]}, got {shown(value)}", hint=_dotted_hint(key, value)
        )

    def too_small(self, spec: Field, value: Any, key: str) -> ConfigError:
        """An empty list or string, or an integer below ``spec.min``."""
        if spec.kind == "integer":
            return self.fail(key, f"{value!r} is below {spec.min}", hint=spec.hint or None)
        return self.fail(key, "must not be empty", hint=spec.hint or None)

    def repeated(self, spec: Field, value: Any, key: str) -> ConfigError:
        """*value* is listed twice in the list at *key*."""
        return self.fail(key, f"{value!r} is listed twice")

    def invalid(self, spec: Field, value: Any, key: str, problem: str, nearest: str | None) -> ConfigError:
        """*value* has the right type but is not one *spec* allows (enum, pattern). The fix line writes the
        nearest valid value where there is one (not the field's example: "nearest 'acr'" then "fix: kind =
        \"ghcr\"" contradicted itself)."""
        if not spec.hint and nearest is not None and spec.enum and isinstance(value, str):
            leaf = re.sub(r"\[[0-9]+\]$", "", key.rsplit(".", 1)[-1])
            return self.fail(key, problem, nearest=nearest, hint=f"{leaf} = {json.dumps(nearest)}")
        return self.fail(key, problem, nearest=nearest, hint=spec.hint or self.value_hint(spec, key))

    def value_hint(self, spec: Field, key: str) -> str | None:
        """The fix line of an :meth:`invalid` value when its field names none: ``key = <example>``."""
        return _example(spec, key)


_PY_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "table": dict,
    "map": dict,
}


def _is(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _example(spec: Field, key: str) -> str:
    name = key.rsplit(".", 1)[-1] or "key"
    return f"{name} = {spec.example}" if spec.example else f"{name} = <{spec.kind}>"


def _text(problem: Problem, value: Any) -> str:
    return (problem(value) if callable(problem) else problem.format(value=value))[:300]


def _invalid(spec: Field, value: Any, key: str, default: str, nearest: str | None, checker: Checker) -> None:
    if spec.nearest is not None:
        nearest = spec.nearest(value) if callable(spec.nearest) else spec.nearest
    template = spec.invalid or spec.message
    # *default* holds the value already: formatting it again would read a '{' in the value as a field
    problem = _text(template, value) if template else default[:300]
    raise checker.invalid(spec, value, key, problem, nearest)


def _check(spec: Field, value: Any, key: str, checker: Checker) -> None:
    if value is None and spec.nullable:
        return
    if not _is(value, _PY_TYPES[spec.kind]):
        raise checker.wrong_type(spec, value, key)
    if spec.min is not None and (value if spec.kind == "integer" else len(value)) < spec.min:
        raise checker.too_small(spec, value, key)
    if spec.enum and value not in spec.enum:
        folded = [
            str(e) for e in spec.enum if isinstance(value, str) and str(e).lower() == value.strip().lower()
        ]
        near = folded[0] if folded else _nearest(str(value), [str(e) for e in spec.enum])
        problem = f"unknown value {value!r}" + (
            f" (write it {near!r}: values are case-sensitive)" if folded else ""
        )
        _invalid(spec, value, key, problem, near, checker)
    if spec.pattern and isinstance(value, str) and not re.fullmatch(spec.pattern, value, re.ASCII):
        _invalid(spec, value, key, f"{value!r} does not match {spec.pattern}", None, checker)
    if spec.kind == "array" and spec.items is not None:
        for i, item in enumerate(value):
            _check(spec.items, item, f"{key}[{i}]", checker)
    if spec.kind == "array" and spec.unique:
        dup = next((x for x in value if value.count(x) > 1), None)
        if dup is not None:
            raise checker.repeated(spec, dup, key)
    elif spec.kind == "map":
        for k, item in value.items():
            dotted = f"{key}.{k}" if key else str(k)
            if spec.keys is not None:
                _check(spec.keys, k, f"{key}.{k!r}" if spec.keys.quote and key else dotted, checker)
            if spec.items is not None:
                _check(spec.items, item, dotted, checker)
    elif spec.kind == "table":
        if not spec.open:
            checker.keys(value, key, list(spec.fields), [k for k, v in spec.fields.items() if v.required])
        else:
            missing = [k for k, v in spec.fields.items() if v.required and k not in value]
            if missing:
                checker.keys({}, key, list(spec.fields), missing)
        for k, sub in spec.fields.items():
            if k in value:
                _check(sub, value[k], f"{key}.{k}" if key else k, checker)


def _json(spec: Field) -> dict[str, Any]:
    kind = _JSON_TYPES[spec.kind]
    out: dict[str, Any] = {"type": [kind, "null"] if spec.nullable else kind}
    if spec.description:
        out["description"] = spec.description
    if spec.enum:
        out["enum"] = list(spec.enum) + ([None] if spec.nullable else [])
    if spec.pattern:
        out["pattern"] = f"^(?:{spec.pattern})$"  # JSON Schema patterns search; the check matches the whole
    if spec.min is not None:
        out[{"array": "minItems", "string": "minLength"}.get(spec.kind, "minimum")] = spec.min
    if spec.unique:
        out["uniqueItems"] = True
    if spec.kind == "array" and spec.items is not None:
        out["items"] = _json(spec.items)
    if spec.kind == "map":
        if spec.keys is not None:
            out["propertyNames"] = _json(spec.keys)
        if spec.items is not None:
            out["additionalProperties"] = _json(spec.items)
    if spec.kind == "table":
        out["properties"] = {k: _json(v) for k, v in spec.fields.items()}
        if not spec.open:
            out["additionalProperties"] = False
        required = [k for k, v in spec.fields.items() if v.required]
        if required:
            out["required"] = required
    example = _example_value(spec)
    if example is not None:
        out["examples"] = [example]
    return out


def _example_value(spec: Field) -> Any:
    """``example`` (TOML) as a value; none for a placeholder ("…")."""
    if not spec.example or "…" in spec.example:
        return None
    try:
        value = tomllib.loads(f"x = {spec.example}")["x"]
    except tomllib.TOMLDecodeError:
        return None
    return value


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


# -- the release index (imagesmith.index: reference form, digests that must agree, repeated tags and registry
# names stay in its reader). Its reader words problems its own way (imagesmith.index._Reader).

#: the ``schema`` value of a release index this imagesmith reads and writes
RELEASE_INDEX_SCHEMA: Final[str] = "imagesmith.release-index/v1"
_DIGEST = r"sha256:[0-9a-f]{64}"
_DRIVER = r"\d{3}(\.\d{1,3}){1,2}"
_DATE = r"\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:?\d{2})?)?"
#: a full UTC timestamp (an index's expiry: compared to the clock, so no date alone, no zone but Z)
_TIMESTAMP = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z"


#: a dotted version (torch, torchvision, CUDA, Python) of the release index: ASCII digits, bounded (a version
#: part of thousands of digits would reach int())
_DOTTED_VERSION = r"[0-9]{1,6}(\.[0-9]{1,6}){1,3}"


def _text_field(description: str = "", pattern: str | None = None, what: str = "", **more: Any) -> Field:
    """A non-empty string; with *pattern*, a problem reads "'x' is not <what>", fixed by "write <what>"."""
    if pattern is None:
        return Field(kind="string", min=1, description=description, **more)
    return Field(
        kind="string",
        min=1,
        pattern=pattern,
        invalid=f"{{value!r}} is not {what}",
        hint=f"write {what} (docs/release.md)",
        description=description or what,
        **more,
    )


RELEASE_INDEX: Schema = Schema(
    title="imagesmith release index (index.json, written by imagesmith release)",
    file_name=RELEASE_INDEX_SCHEMA.removeprefix("imagesmith.").split("/")[0],  # named after its schema id
    docs="docs/release.md",
    root=Field(
        kind="table",
        fields={
            "schema": Field(
                kind="string",
                required=True,
                enum=(RELEASE_INDEX_SCHEMA,),
                message=f"{{value!r}} is not {RELEASE_INDEX_SCHEMA!r}",
                hint="this imagesmith reads only that schema; upgrade imagesmith or regenerate the index",
            ),
            "generated": _text_field("when the index was written", _DATE, "an ISO timestamp", required=True),
            "serial": Field(
                kind="integer",
                min=1,
                description="raised by every index the publisher writes (imagesmith release): pick and index "
                "refuse one lower than the newest they have seen for the source (a replayed older index); "
                "absent in indexes written before issue 25",
                example="1764385920",
            ),
            "expires": _text_field(
                "until when the index is valid ([release] index_valid_for after it was written, renewed by "
                "release): pick and index refuse it afterwards; absent in indexes written before issue 25",
                _TIMESTAMP,
                "a UTC timestamp like 2026-12-13T03:12:00Z",
            ),
            "fresh_until": _text_field(
                "issue 34, the freshness bound: until when a renter takes this index as current (written by "
                "imagesmith release, [release] index_fresh_for after it was issued, renewed by every nightly "
                "run): pick and index refuse it afterwards (a frozen mirror can serve it at most this long); "
                "absent in indexes written before it",
                _TIMESTAMP,
                "a UTC timestamp like 2026-12-03T15:12:00Z",
            ),
            "successor_key": _text_field(
                "issue 34, key rotation: the fingerprint of the key that signs the publisher's next indexes; "
                "this index is signed by the current key and the successor, and a renter that pinned the "
                "current key moves its pin to the successor",
                r"sha256:[0-9a-f]{64}",
                "sha256: and 64 lowercase hex digits",
            ),
            "registries": Field(
                kind="array",
                description="the registry hosts the publisher releases to (written by imagesmith release): "
                "pick takes an image only from a host listed here; absent in indexes written before it",
                items=_text_field(
                    pattern=r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:" + PORT + ")?",
                    what="a registry host[:port] (no scheme, no path)",
                ),
            ),
            "published_to": Field(
                kind="array",
                description="every repository the publisher publishes this index to, as host/repository "
                "(written by imagesmith release): pick and index refuse the index read from an oci:// "
                "repository not listed here (a copy of another repository's index); absent in indexes "
                "written before it",
                items=_text_field(
                    pattern=r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:" + PORT + r")?/[a-z0-9]+([._/-]+[a-z0-9]+)*",
                    what="a registry host[:port]/repository (lower case, no tag)",
                ),
            ),
            "images": Field(
                kind="array",
                required=True,
                description="one entry per released tag",
                items=Field(
                    kind="table",
                    fields={
                        "tag": _text_field(
                            "the released tag",
                            r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}",
                            "a Docker tag ([A-Za-z0-9_.-], at most 128 characters)",
                            required=True,
                        ),
                        "matrix": _text_field("the matrix it was built from", required=True),
                        "cell": _text_field("the matrix cell", required=True),
                        "digest": _text_field(
                            "the validated manifest digest",
                            _DIGEST,
                            "a digest sha256:<64 hex>",
                            required=True,
                        ),
                        "registries": Field(
                            kind="array",
                            required=True,
                            min=1,
                            description="where the tag was pushed; every copy has the image's digest",
                            items=Field(
                                kind="table",
                                fields={
                                    "name": _text_field("registries.toml name", required=True),
                                    "kind": _text_field("registry kind (default: generic)"),
                                    "reference": _text_field(
                                        "where the tag was pushed",
                                        rf"{HOST_PORT}/{REPO_PATH}:[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}}",
                                        "a reference host[:port]/repository:tag (lowercase repository, "
                                        "no digest, no spaces)",
                                        required=True,
                                    ),
                                    "digest": _text_field(
                                        pattern=_DIGEST, what="a digest sha256:<64 hex>", required=True
                                    ),
                                },
                            ),
                        ),
                        "torch": _text_field(
                            pattern=_DOTTED_VERSION, what="a version like 2.5.1", required=True
                        ),
                        "torchvision": _text_field(
                            pattern=_DOTTED_VERSION, what="a version like 0.20.1", required=True
                        ),
                        "cuda": _text_field(
                            pattern=_DOTTED_VERSION, what="a CUDA version like 12.4", required=True
                        ),
                        "python": _text_field(
                            pattern=_DOTTED_VERSION, what="a Python version like 3.11", required=True
                        ),
                        "min_driver": Field(
                            kind="table",
                            required=True,
                            description="the oldest driver that runs it (full; minor-version compatibility)",
                            fields={
                                "full": _text_field(
                                    pattern=_DRIVER, what="a driver version like 550.54.14", required=True
                                ),
                                "minor": _text_field(
                                    pattern=_DRIVER, what="a driver version like 525.60.13", required=True
                                ),
                            },
                        ),
                        "arch": Field(
                            kind="array",
                            required=True,
                            min=1,
                            description="TORCH_CUDA_ARCH_LIST of the wheels",
                            items=_text_field(
                                pattern=r"\d{1,2}\.\d[af]?(\+PTX)?",
                                what="a TORCH_CUDA_ARCH_LIST entry like 9.0 or 12.0+PTX",
                            ),
                        ),
                        "shm": Field(
                            kind="table",
                            required=True,
                            description="what it needs of /dev/shm",
                            fields={
                                "size": _text_field(
                                    "for --shm-size", r"\d+[kmgKMG]?", "a size like 16g", nullable=True
                                ),
                                "ipc_host": Field(kind="boolean", description="needs --ipc=host"),
                            },
                        ),
                        "validated_on": Field(
                            kind="array",
                            required=True,
                            min=1,
                            description="passing validation runs of this digest",
                            items=Field(
                                kind="table",
                                fields={
                                    "gpu": _text_field("GPU model", required=True),
                                    "count": Field(kind="integer", required=True, min=1, description="GPUs"),
                                    "driver": _text_field(
                                        pattern=_DRIVER, what="a driver version like 580.65.06", required=True
                                    ),
                                    "date": _text_field(
                                        pattern=_DATE, what="an ISO date like 2026-11-29", required=True
                                    ),
                                    "report_digest": _text_field(
                                        pattern=_DIGEST, what="sha256:<64 hex>", required=True
                                    ),
                                    "host": Field(kind="string", description="the host's name"),
                                    "link": Field(
                                        kind="string",
                                        description="the weakest GPU-to-GPU link (NV18, SYS, …)",
                                        example='"NV18"',
                                    ),
                                    "figures": Field(
                                        kind="map",
                                        description="what the host measured (the fleet baseline)",
                                        example='{ "hbm_copy_gbps" = 4238.4 }',
                                        keys=Field(
                                            kind="string",
                                            enum=PERF_FIGURES,
                                        ),
                                        items=Field(
                                            kind="number", description="GB/s, TFLOP/s, a ratio or minutes"
                                        ),
                                    ),
                                },
                            ),
                        ),
                        "fingerprint": _text_field("the cell's build fingerprint", required=True),
                        "released": _text_field(
                            "when it was released", _DATE, "an ISO date like 2026-11-29", required=True
                        ),
                        "platform": _text_field("OCI platform (default: linux/amd64)"),
                        "vulnerabilities": Field(
                            kind="table",
                            description="the vulnerability gate's verdict (imagesmith.vulngate)",
                            fields={
                                "scanner": _text_field(
                                    "grype, trivy or osv (SBOM × OSV data)", required=True
                                ),
                                "report": _text_field("the scan report's file name", required=True),
                                "report_digest": _text_field(
                                    pattern=r"sha256:[0-9a-f]{64}(,sha256:[0-9a-f]{64})*",
                                    what="sha256:<64 hex> of the report file(s)",
                                    required=True,
                                ),
                                "fail_on": Field(
                                    kind="string", required=True, enum=("critical", "high", "medium", "low")
                                ),
                                "allowlisted": Field(
                                    kind="array",
                                    description="advisories at or above fail_on let through by the allowlist",
                                    items=_text_field(what="an advisory id"),
                                ),
                            },
                        ),
                        "sbom": Field(
                            kind="table",
                            description="the SBOM attested beside the validation attestation",
                            fields={
                                "format": Field(kind="string", required=True, enum=("spdx", "cyclonedx")),
                                "predicate_type": _text_field("the in-toto predicateType", required=True),
                                "digest": _text_field(
                                    pattern=_DIGEST, what="sha256 of the SBOM document", required=True
                                ),
                                "packages": Field(kind="integer", min=0, description="packages it lists"),
                            },
                        ),
                    },
                ),
            ),
        },
    ),
)


# -- the validation report: report.json of imagesmith validate, read by imagesmith release
# (imagesmith.validate.record). Its tables are open: an image may carry a newer imagesmith-validate that
# records more.

#: the report schema imagesmith validate writes, and those a reader takes
REPORT_SCHEMA: Final[int] = 3
REPORT_SCHEMAS: Final[tuple[int, ...]] = (1, 2, 3)
#: a report's verdicts
VERDICTS: Final[tuple[str, ...]] = ("passed", "failed", "not validated")
_OPTIONAL_TEXT = Field(kind="string", nullable=True)

#: one GPU of a schema-2 report's ``gpus`` (nvidia-smi's view)
REPORT_GPU: Field = Field(
    kind="table",
    open=True,
    description="one GPU the suite saw",
    fields={
        "index": Field(kind="integer", description="nvidia-smi index"),
        "name": Field(kind="string", description="model, e.g. NVIDIA H200"),
        "driver": Field(kind="string", description="driver version"),
        "memory_mib": Field(kind="integer", nullable=True),
        "compute_cap": replace(_OPTIONAL_TEXT, description="compute capability, e.g. 9.0"),
        "bus_id": _OPTIONAL_TEXT,
        "uuid": _OPTIONAL_TEXT,
    },
)

VALIDATION_REPORT: Schema = Schema(
    title="imagesmith validation report (report.json, written by imagesmith validate)",
    file_name="validation-report",
    docs="docs/validation.md",
    root=Field(
        kind="table",
        open=True,
        message="no 'verdict' key",
        hint="pass the report.json imagesmith validate wrote",
        fields={
            "schema": Field(
                kind="integer",
                enum=REPORT_SCHEMAS,
                message=f"report schema {{value!r}} is not one this imagesmith reads ({REPORT_SCHEMAS})",
                hint="release with the imagesmith version that validated, or upgrade imagesmith",
                description=(
                    "report format (absent: 1); 2 records the GPU inventory as `gpus`; 3 records why as "
                    "values: `verdict_cause` and each skipped check's `skip`"
                ),
            ),
            "verdict": Field(kind="string", required=True, enum=VERDICTS),
            "verdict_reason": Field(kind="string", description="why, in one line"),
            "verdict_cause": Field(
                kind="string",
                description=(
                    "why, as a value (schema 3): suite-error, failed, no-gpu, no-check, left-out, "
                    "no-gpus-given, refused; empty when passed"
                ),
            ),
            "target": Field(kind="string", description="what was validated: an image reference or host"),
            "started": Field(kind="string", description="UTC start time"),
            "duration_s": Field(kind="number"),
            "image": Field(
                kind="table",
                open=True,
                fields={"digest": Field(kind="string", pattern=_DIGEST, description="the image's digest")},
            ),
            "options": Field(kind="table", open=True, description="the suite's options"),
            "gpus": Field(kind="array", items=REPORT_GPU, description="every GPU the suite saw (schema 2)"),
            "checks": Field(
                kind="array",
                description="one entry per check",
                items=Field(
                    kind="table",
                    open=True,
                    fields={
                        "name": Field(kind="string"),
                        "module": Field(kind="string"),
                        "status": Field(
                            kind="string", description="passed, failed, skipped (empty: errored)"
                        ),
                        "message": Field(kind="string"),
                        "fix": Field(kind="string"),
                        "duration_s": Field(kind="number"),
                        "figures": Field(kind="table", open=True, description="measured values"),
                        "warnings": Field(kind="array", items=Field(kind="string")),
                        "skip": Field(
                            kind="string",
                            description=(
                                "a skipped check's cause (schema 3): no-gpu when the target showed no GPU"
                            ),
                        ),
                    },
                ),
            ),
            "warnings": Field(kind="array", items=Field(kind="string")),
            "topology_matrix": Field(
                kind="map", nullable=True, items=Field(kind="string"), description="nvidia-smi topo -m links"
            ),
            "plot": Field(kind="string"),
            "logs": Field(kind="array", items=Field(kind="string")),
        },
    ),
)


def _promise(kind: Kind, description: str, example: str, **kw: Any) -> Field:
    return Field(kind=kind, description=description, example=example, **kw)


def _folder(name: str) -> Field:
    return Field(
        kind="table",
        description=f"the {name} folder and what the listing promised of it",
        fields={
            "path": _promise(
                "string", f"absolute path of the {name} folder on the host", '"/data"', required=True
            ),
            "read": _promise("string", "sequential 1 MiB read, a rate (GB/s: bytes, Gb/s: bits)", '"5 GB/s"'),
            "write": _promise("string", "sequential 1 MiB write, a rate", '"2 GB/s"'),
            "iops": _promise("integer", "4 KiB random-read IOPS", "200000"),
            "free": _promise("string", "free space you need there, a size (GB or GiB)", '"2 TB"'),
        },
    )


LISTING: Schema = Schema(
    title="what a GPU rental promised (imagesmith validate --listing FILE)",
    file_name="listing.toml",
    docs="docs/validation.md",
    root=Field(
        kind="table",
        fields={
            "gpu": Field(
                kind="table",
                fields={
                    "model": _promise("string", "as --expect-gpu: tokens of nvidia-smi's name", '"H200"'),
                    "count": _promise("integer", "number of GPUs (1-1024)", "8"),
                    "memory": _promise("string", "memory per GPU, a size (GB or GiB)", '"141 GB"'),
                    "interconnect": _promise(
                        "string", "how GPU pairs connect: nvlink or pcie", '"nvlink"', enum=("nvlink", "pcie")
                    ),
                    "mig": _promise("boolean", "MIG enabled (true) or whole GPUs (false)", "false"),
                    "driver": _promise("string", "least driver version", '"580"'),
                    "cuda": _promise("string", "least CUDA version of the driver", '"13.0"'),
                },
            ),
            "host": Field(
                kind="table",
                fields={
                    "vcpu": _promise("integer", "vCPUs the container gets", "128"),
                    "ram": _promise("string", "RAM the container gets, a size", '"2 TiB"'),
                },
            ),
            "network": Field(
                kind="table",
                fields={
                    "nic_rate": _promise("string", "link rate of the fastest NIC, a rate", '"400 Gb/s"'),
                    "fabric": _promise(
                        "string",
                        "infiniband, roce or ethernet",
                        '"infiniband"',
                        enum=("infiniband", "roce", "ethernet"),
                    ),
                },
            ),
            "storage": Field(
                kind="table",
                fields={"data": _folder("data"), "checkpoint": _folder("checkpoint")},
            ),
            "price": Field(
                kind="table",
                fields={
                    "per_hour": _promise("number", "price per hour of the rental", "23.92"),
                    "currency": _promise("string", "its currency", '"USD"'),
                },
            ),
        },
    ),
)


#: every file the schema layer describes, in the order `imagesmith schema` writes them
SCHEMAS: tuple[Schema, ...] = (
    PROJECT,
    CONFIG,
    REGISTRIES,
    MATRIX,
    RELEASE_INDEX,
    VALIDATION_REPORT,
    LISTING,
)
