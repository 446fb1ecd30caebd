"""Reading a scan report, an SBOM or OSV data, untrusted input: a capped read, strict JSON (no repeated
key, no NaN), typed fields, and the digest a report must be about; each problem one
:class:`~imagesmith.errors.ConfigError` naming the file and the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Final

from imagesmith import inputs
from imagesmith.errors import ConfigError
from imagesmith.vulngate.records import _DOCS

#: the largest scan report or SBOM read (the smoke image's grype report is a few MiB)
MAX_REPORT_BYTES: Final[int] = 64 << 20


# ------------------------------------------------------------------------------------------------------------
# reading reports


_REPORT_HINT: Final[str] = (
    "pass the JSON report grype (-o json) or trivy (-f json) wrote for this exact digest, named "
    f"sha256-<hex>.grype.json / .trivy.json in --scan-reports (see {_DOCS})"
)


def _bad(source: str, problem: str) -> ConfigError:
    return ConfigError(f"scan report {source}: {problem}", hint=_REPORT_HINT)


def _read(path: Path, limit: int | None = None, what: str = "scan report", hint: str = _REPORT_HINT) -> bytes:
    """A report's bytes: a regular file only, never blocking (a FIFO named like a report would otherwise hold
    release forever), at most *limit* bytes."""
    limit = limit or MAX_REPORT_BYTES
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise _bad(str(path), f"cannot read ({exc.strerror})") from None
    if size > limit:
        raise _bad(str(path), f"{size} bytes, more than the {limit >> 20} MiB a report may have")
    return inputs.read_user_file(path, what, hint=hint, max_bytes=limit)


class _NotPlainJSON(ValueError):
    """A report Python's json would read but no scanner writes: a key twice in one object (which one counts
    would be the reader's choice: ``"matches": [...], "matches": []`` read as clean), NaN or Infinity."""


def _once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _NotPlainJSON(f"the key {json.dumps(key)[:80]} appears twice in one object")
        out[key] = value
    return out


def _no_constant(name: str) -> Any:
    raise _NotPlainJSON(f"{name} is no JSON number")


def _json(body: bytes, source: str) -> Any:
    try:
        return json.loads(
            body,
            object_pairs_hook=_once,
            parse_constant=_no_constant,
            # an integer of thousands of digits is one error naming the file, not int()'s ValueError
            parse_int=inputs.json_int_parser(f"scan report {source}", hint=_REPORT_HINT),
        )
    except _NotPlainJSON as exc:
        raise _bad(source, f"not plain JSON: {exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise _bad(source, f"not valid JSON ({exc})") from None
    except RecursionError:
        raise _bad(source, "JSON nested deeper than a parser follows") from None


def _str(obj: Mapping[str, Any], key: str, source: str, where: str, *, required: bool = True) -> str:
    v = obj.get(key)
    if v is None and not required:
        return ""
    if not isinstance(v, str) or (required and not v):
        raise _bad(source, f"{where}.{key}: expected a string, got {type(v).__name__}")
    return v


def _obj(v: Any, source: str, where: str) -> Mapping[str, Any]:
    if not isinstance(v, Mapping):
        raise _bad(source, f"{where}: expected an object, got {type(v).__name__}")
    return v


def _list(v: Any, source: str, where: str) -> list[Any]:
    if v is None:
        return []
    if not isinstance(v, list):
        raise _bad(source, f"{where}: expected a list, got {type(v).__name__}")
    return v


def _digests_in(values: Iterable[Any]) -> set[str]:
    out = set()
    for v in values:
        if isinstance(v, str):
            # a whole digest only: the first 64 hex of a longer run ("sha256:<candidate>00", another
            # algorithm's or a truncated paste) are not the candidate
            out |= set(re.findall(r"(?<![0-9A-Za-z])sha256:[0-9a-f]{64}(?![0-9A-Za-z])", v))
    return out


def _check_digest(found: set[str], digest: str, source: str, field_name: str) -> None:
    if not found:
        raise _bad(
            source,
            f"names no image digest ({field_name}): it cannot be bound to {digest}; scan the image by digest "
            "(IMAGE@sha256:…)",
        )
    if digest not in found:
        raise _bad(
            source,
            f"is a scan of {', '.join(sorted(found))}, not of the candidate digest {digest} (a report of "
            "another image, or a stale one)",
        )
