"""The schema layer itself: :class:`Field` (one key's shape), :class:`Schema` (one file), :class:`Checker`
(walks a parsed file against its schema and words each problem as one error naming the key, the nearest
valid value and the fix) and the JSON Schema each writes for editors (:func:`_json`).
"""

from __future__ import annotations

import datetime as _dt
import difflib
import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

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
