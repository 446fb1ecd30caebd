"""The project's policy: ``[release.vulnerabilities]`` of imagesmith.toml (``fail_on``, the allowlist with
a reason and an expiry each, the OSV data file), read into a :class:`~imagesmith.vulngate.records.Policy`.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from imagesmith.project import ProjectError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from imagesmith.vulngate.records import (
    _DATE,
    _DOCS,
    DEFAULT_ALLOWLIST_MAX_DAYS,
    FAIL_ON,
    MAX_ALLOWLIST_MAX_DAYS,
    AllowEntry,
    Policy,
)

# ------------------------------------------------------------------------------------------------------------
# policy


def load_policy(project_file: Path | None) -> Policy | None:
    """``[release.vulnerabilities]`` of imagesmith.toml (None when the table is absent). A missing reason or
    expiry, or a date that is not YYYY-MM-DD, is a ProjectError naming the file and the field."""
    if project_file is None or not project_file.is_file():
        return None
    try:
        data = tomllib.loads(project_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProjectError(f"{project_file}: cannot read: {exc}", hint="fix imagesmith.toml") from None
    table = data.get("release", {}).get("vulnerabilities")
    if table is None:
        return None
    return parse_policy(table, source=str(project_file), root=project_file.parent)


def parse_policy(table: Any, *, source: str, root: Path) -> Policy:
    where = f"{source}: release.vulnerabilities"
    if not isinstance(table, Mapping):
        raise ProjectError(f"{where}: expected a table", hint="write [release.vulnerabilities]")
    unknown = sorted(set(table) - {"fail_on", "allowlist", "osv", "allowlist_max_days"})
    if unknown:
        raise ProjectError(
            f"{where}.{unknown[0]}: unknown field",
            hint="known: fail_on, allowlist, osv, allowlist_max_days (see " + _DOCS + ")",
        )
    max_days = table.get("allowlist_max_days", DEFAULT_ALLOWLIST_MAX_DAYS)
    if type(max_days) is not int or not 1 <= max_days <= MAX_ALLOWLIST_MAX_DAYS:
        raise ProjectError(
            f"{where}.allowlist_max_days: {max_days!r} is not a number of days from 1 to "
            f"{MAX_ALLOWLIST_MAX_DAYS}",
            hint=f"write allowlist_max_days = {DEFAULT_ALLOWLIST_MAX_DAYS} (an accepted risk is looked at "
            "again at least this often)",
        )
    fail_on = table.get("fail_on", "critical")
    if fail_on not in FAIL_ON:
        raise ProjectError(
            f"{where}.fail_on: {fail_on!r} is not a severity", hint=f"write one of {', '.join(FAIL_ON)}"
        )
    raw = table.get("allowlist", [])
    if not isinstance(raw, list):
        raise ProjectError(
            f"{where}.allowlist: expected a list of tables",
            hint='write [[release.vulnerabilities.allowlist]] with id, reason and expires = "YYYY-MM-DD"',
        )
    entries: list[AllowEntry] = []
    for i, e in enumerate(raw):
        key = f"{where}.allowlist[{i}]"
        if not isinstance(e, Mapping):
            raise ProjectError(f"{key}: expected a table with id, reason, expires", hint=_allow_hint())
        for name in ("id", "reason", "expires"):
            if name not in e:
                raise ProjectError(
                    f"{key}.{name}: missing (every allowlist entry needs an id, a reason and an expiry date)",
                    hint=_allow_hint(),
                )
        for name in ("id", "reason"):
            if not isinstance(e[name], str) or not e[name].strip():
                raise ProjectError(f"{key}.{name}: expected a non-empty string", hint=_allow_hint())
        unknown = sorted(set(e) - {"id", "reason", "expires"})
        if unknown:
            raise ProjectError(f"{key}.{unknown[0]}: unknown field", hint=_allow_hint())
        expires = e["expires"]
        if isinstance(expires, datetime.date) and not isinstance(expires, datetime.datetime):
            date = expires
        elif isinstance(expires, str) and _DATE.fullmatch(expires):
            try:
                date = datetime.date.fromisoformat(expires)
            except ValueError:
                raise ProjectError(f"{key}.expires: {expires!r} is not a date", hint=_allow_hint()) from None
        else:
            raise ProjectError(f"{key}.expires: {expires!r} is not a date (YYYY-MM-DD)", hint=_allow_hint())
        entry = AllowEntry(id=e["id"].strip(), reason=e["reason"].strip(), expires=date)
        twin = next((n for n, x in enumerate(entries) if x.id.casefold() == entry.id.casefold()), None)
        if twin is not None:  # two expiries for one advisory: which one holds would be the file's order
            raise ProjectError(
                f"{key}.id: {entry.id!r} is already allowlisted by allowlist[{twin}] (expires "
                f"{entries[twin].expires.isoformat()}, this one {date.isoformat()})",
                hint="keep one entry per advisory id: merge the reasons and keep the expiry you mean",
            )
        entries.append(entry)
    osv = table.get("osv")
    if osv is not None and not isinstance(osv, str):
        raise ProjectError(f"{where}.osv: expected a relative path", hint='write osv = "vuln/osv.json"')
    return Policy(
        fail_on=fail_on,
        allowlist=tuple(entries),
        osv=(root / osv) if osv else None,
        source=source,
        max_days=max_days,
    )


def _allow_hint() -> str:
    return (
        'write each entry as { id = "CVE-…", reason = "why it does not apply", expires = "YYYY-MM-DD" } '
        f"(see {_DOCS})"
    )
