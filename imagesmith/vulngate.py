"""The vulnerability gate of ``imagesmith release`` (issue 26).

A candidate digest is released only when a scan of *that digest* shows no advisory at or above the project's
``fail_on`` severity, except those on the allowlist (each entry with a reason and an expiry date; an expired
entry counts as none). The scan is read, never run: the nightly runs the scanner where its database is
reachable and leaves its report beside the validation reports.

What is read for a digest ``sha256:<hex>`` (``release --scan-reports DIR``; files named by the digest):

- ``DIR/sha256-<hex>.grype.json`` — grype's JSON output (``grype -o json registry:IMAGE@DIGEST``);
  ``source.target.manifestDigest`` or one of ``source.target.repoDigests`` must be the digest.
- ``DIR/sha256-<hex>.trivy.json`` — trivy's JSON output (``trivy image -f json IMAGE@DIGEST``);
  one of ``Metadata.RepoDigests`` must name the digest.
- ``DIR/sha256-<hex>.cdx.json`` / ``.spdx.json`` — an SBOM of the digest (CycloneDX or SPDX JSON, e.g. the one
  ``imagesmith`` attaches), whose packages are matched against the OSV data file ``[release.vulnerabilities]
  osv`` (OSV JSON: one record, a list of records, or ``{"vulns": [...]}``). Debian versions are compared with
  dpkg's ordering (:func:`dpkg_compare`), PyPI versions with PEP 440 (``packaging``).

A report is untrusted input: a file larger than :data:`MAX_REPORT_BYTES`, not JSON, of the wrong shape or
about another digest is one :class:`~imagesmith.errors.ConfigError` naming the file and the fix.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import math
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from imagesmith import inputs
from imagesmith.errors import ConfigError
from imagesmith.inputs import is_digits
from imagesmith.project import ProjectError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

#: severities, lowest first; ``unknown`` (a report that rates nothing) sits below ``low``
SEVERITIES: Final[tuple[str, ...]] = ("unknown", "negligible", "low", "medium", "high", "critical")
FAIL_ON: Final[tuple[str, ...]] = ("critical", "high", "medium", "low")
#: the largest scan report or SBOM read (the smoke image's grype report is a few MiB)
MAX_REPORT_BYTES: Final[int] = 64 << 20
#: the largest OSV data file read
MAX_OSV_BYTES: Final[int] = 256 << 20
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
#: how far ahead an allowlist entry may expire by default (days), and the most ``allowlist_max_days`` takes
DEFAULT_ALLOWLIST_MAX_DAYS: Final[int] = 365
MAX_ALLOWLIST_MAX_DAYS: Final[int] = 3 * 365
_DOCS = "docs/release.md (The vulnerability gate)"


def _rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


def normalize_severity(raw: Any) -> str:
    s = str(raw or "").strip().lower()
    if s in ("moderate",):
        return "medium"
    if s in ("important",):
        return "high"
    return s if s in SEVERITIES else "unknown"


@dataclass(frozen=True, kw_only=True)
class Finding:
    package: str
    version: str
    id: str
    severity: str
    fixed: str = ""  # the fixed version(s), "" when the advisory has no fix
    ecosystem: str = ""
    #: other ids of the same advisory (OSV ``aliases``/``upstream``, grype ``relatedVulnerabilities``): an
    #: allowlist entry for CVE-2024-45491 covers DEBIAN-CVE-2024-45491 and DSA-… that name it
    aliases: tuple[str, ...] = ()
    #: the rating each alias's own record gives (grype's related records), where it gives one: an allowlist
    #: entry for an alias covers this finding only at that severity (issue 34: an allowlisted Low CVE that a
    #: Critical lists as related does not let the Critical through)
    alias_ratings: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        fix = f"fixed in {self.fixed}" if self.fixed else "no fixed version"
        return f"{self.package} {self.version}: {self.id} ({self.severity}, {fix})"


@dataclass(frozen=True, kw_only=True)
class AllowEntry:
    id: str
    reason: str
    expires: datetime.date


@dataclass(frozen=True, kw_only=True)
class Policy:
    fail_on: str
    allowlist: tuple[AllowEntry, ...] = ()
    osv: Path | None = None
    source: str = ""
    #: the furthest an allowlist entry may expire, in days from the release run (issue 34: an entry that
    #: expires in 9999 is no expiry); ``allowlist_max_days`` of ``[release.vulnerabilities]``
    max_days: int = 365


@dataclass(frozen=True, kw_only=True)
class Scan:
    """What a scan report (or SBOM × OSV match) says about one digest."""

    digest: str
    source: str  # the file read
    sha: str  # sha256 of its bytes
    scanner: str  # grype | trivy | osv
    findings: tuple[Finding, ...]


@dataclass(frozen=True, kw_only=True)
class Verdict:
    scan: Scan
    blocking: tuple[Finding, ...] = ()
    allowlisted: tuple[tuple[Finding, AllowEntry], ...] = ()
    expired: tuple[tuple[Finding, AllowEntry], ...] = ()
    notes: tuple[str, ...] = field(default=())
    #: the day it was judged (an entry that had not expired then was too far ahead)
    today: datetime.date | None = None

    @property
    def passed(self) -> bool:
        return not self.blocking

    def reasons(self, policy: Policy) -> list[str]:
        out = []
        expired = {f: e for f, e in self.expired}
        for f in self.blocking:
            line = f"vulnerability {f.describe()} is at or above fail_on = {policy.fail_on!r}"
            if f in expired and self.today is not None and expired[f].expires >= self.today:
                line += (
                    f"; its allowlist entry expires {expired[f].expires.isoformat()}, more than "
                    f"allowlist_max_days = {policy.max_days} days ahead (such an entry counts as none: write "
                    "a nearer expiry)"
                )
            elif f in expired:
                line += (
                    f"; its allowlist entry expired on {expired[f].expires.isoformat()} (an expired entry "
                    "counts as none)"
                )
            out.append(line + f" [{self.scan.scanner} report {self.scan.source}]")
        return out

    def allowlisted_ids(self) -> tuple[str, ...]:
        return tuple(sorted({f.id for f, _ in self.allowlisted}))


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
    from imagesmith import inputs

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
    from imagesmith import inputs

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


def _rated(*candidates: Any) -> str:
    """The first of *candidates* (severity words, in order of authority) that rates anything: a word that
    reads as ``unknown`` ("Unknown", "", "untriaged", none) is no rating and never hides one given by a later
    source — a Debian match grype rates "Unknown" whose NVD record says Critical is critical."""
    for c in candidates:
        severity = normalize_severity(c)
        if severity != "unknown":
            return severity
    return "unknown"


def _cvss_vectors_rating(vectors: Iterable[Any]) -> str:
    """The rating of the highest CVSS v3 base score among *vectors* (computed from the vector, never a score
    field a report may fill with anything), ``unknown`` when none is a v3 vector."""
    scores = [s for v in vectors if isinstance(v, str) and (s := cvss3_base_score(v)) is not None]
    return cvss_rating(max(scores)) if scores else "unknown"


def _highest(severities: Iterable[str]) -> str:
    return max(severities, key=_rank, default="unknown")


def _grype_cvss(holder: Mapping[str, Any]) -> list[Any]:
    cvss = holder.get("cvss")
    return [c.get("vector") for c in (cvss if isinstance(cvss, list) else ()) if isinstance(c, Mapping)]


#: grype's built-in ignore rules (its ``ignoreLinuxKernelHeaders``: kernel headers and linux-libc-dev matched
#: through their source package against kernel CVEs, a false positive): (package name pattern, upstream name
#: pattern, package type), each with ``match-type: exact-indirect-match`` and nothing else. Only a rule that
#: is exactly one of these, applied to a package it names, keeps a match ignored (issue 34: a rule *shaped*
#: like them — any upstream-name — hid a Critical openssl match)
GRYPE_DEFAULT_IGNORE_RULES: Final[tuple[tuple[str, str, str], ...]] = (
    ("kernel-headers", "kernel", "rpm"),
    ("linux(-.*)?-headers-.*", "linux.*", "deb"),
    ("linux-libc-dev", "linux", "deb"),
)


def _set(value: Any) -> bool:
    return value not in (None, "", False, {}, [])


def _grype_default_rule(rule: Any, artifact: Mapping[str, Any]) -> bool:
    """Is *rule* (an ``appliedIgnoreRules`` entry) exactly one of grype's built-in rules
    (:data:`GRYPE_DEFAULT_IGNORE_RULES`), and is *artifact* (the ignored match's package) one it names — its
    name, type and an upstream matching the rule's? Anything else is a policy decision (an advisory id,
    ``fix-state`` as ``--only-fixed`` writes, a VEX status, a package) and the match counts."""
    if not isinstance(rule, Mapping) or {k for k, v in rule.items() if _set(v)} != {"package", "match-type"}:
        return False
    pkg = rule.get("package")
    if rule.get("match-type") != "exact-indirect-match" or not isinstance(pkg, Mapping):
        return False
    named = {k: v for k, v in pkg.items() if _set(v)}
    upstreams = (
        [u.get("name") for u in (artifact.get("upstreams") or ()) if isinstance(u, Mapping)]
        if isinstance(artifact.get("upstreams"), list)
        else []
    )
    for name, upstream, kind in GRYPE_DEFAULT_IGNORE_RULES:
        if named != {"name": name, "upstream-name": upstream, "type": kind}:
            continue
        return (
            artifact.get("type") == kind
            and isinstance(artifact.get("name"), str)
            and re.fullmatch(name, artifact["name"]) is not None
            and any(isinstance(u, str) and re.fullmatch(upstream, u) for u in upstreams)
        )
    return False


def _grype_finding(m: Any, source: str, where: str) -> Finding:
    m = _obj(m, source, where)
    vuln = _obj(m.get("vulnerability"), source, f"{where}.vulnerability")
    art = _obj(m.get("artifact"), source, f"{where}.artifact")
    fix = vuln.get("fix")
    fixed: list[Any] = []
    if fix is not None:
        fixed = _list(
            _obj(fix, source, f"{where}.vulnerability.fix").get("versions"),
            source,
            f"{where}.vulnerability.fix.versions",
        )
    related = [
        _obj(r, source, f"{where}.relatedVulnerabilities[{k}]")
        for k, r in enumerate(
            _list(m.get("relatedVulnerabilities"), source, f"{where}.relatedVulnerabilities")
        )
    ]
    # the match's own namespace rates it (Debian's urgency for a Debian package); where that rates nothing,
    # the related records (NVD's, GitHub's) do, then the CVSS v3 vectors of all of them
    severity = _rated(
        _str(vuln, "severity", source, f"{where}.vulnerability", required=False),
        _highest(
            normalize_severity(
                _str(r, "severity", source, f"{where}.relatedVulnerabilities[{k}]", required=False)
            )
            for k, r in enumerate(related)
        ),
        _cvss_vectors_rating([*_grype_cvss(vuln), *(v for r in related for v in _grype_cvss(r))]),
    )
    return Finding(
        package=_str(art, "name", source, f"{where}.artifact"),
        version=_str(art, "version", source, f"{where}.artifact"),
        id=_str(vuln, "id", source, f"{where}.vulnerability"),
        severity=severity,
        fixed=", ".join(str(x) for x in fixed if isinstance(x, str)),
        ecosystem=str(art.get("type") or ""),
        aliases=tuple(str(r["id"]) for r in related if isinstance(r.get("id"), str)),
        alias_ratings=tuple(
            (str(r["id"]), rating)
            for r in related
            if isinstance(r.get("id"), str)
            and (rating := _rated(r.get("severity"), _cvss_vectors_rating(_grype_cvss(r)))) != "unknown"
        ),
    )


def parse_grype(doc: Any, *, source: str, digest: str) -> list[Finding]:
    """The findings of a grype JSON report. ``matches`` must be there (grype always writes it, ``[]`` when
    nothing matched: a report without it is cut short or made by hand). A match grype's *own* ignore rules
    moved to ``ignoredMatches`` (``.grype.yaml`` ``ignore:``, ``--only-fixed``, a VEX) counts like any other:
    the project's allowlist, with its reason and expiry, is what lets an advisory through — only grype's
    built-in rule for indirect kernel-header matches (a false positive, not a policy) stays ignored."""
    doc = _obj(doc, source, "(top level)")
    src = _obj(doc.get("source"), source, "source")
    target = _obj(src.get("target"), source, "source.target")
    found = _digests_in(
        [target.get("manifestDigest"), *_list(target.get("repoDigests"), source, "source.target.repoDigests")]
    )
    _check_digest(found, digest, source, "source.target.manifestDigest / repoDigests")
    # issue 34: the report's own target is what was scanned; repoDigests are other names of that image and may
    # list the candidate beside another image's digest
    own = _digests_in([target.get("manifestDigest")])
    if own != {digest}:
        raise _bad(
            source,
            f"scanned {', '.join(sorted(own)) or 'an image without a manifestDigest'} (source.target."
            f"manifestDigest), not the candidate {digest}; repoDigests naming it does not make it its scan — "
            "scan the image by digest (grype registry:IMAGE@sha256:…)",
        )
    if "matches" not in doc:
        raise _bad(
            source,
            "has no `matches` (grype writes it in every JSON report, [] when nothing matched): the report is "
            "cut short or not grype's; scan the image again",
        )
    out = [
        _grype_finding(m, source, f"matches[{i}]")
        for i, m in enumerate(_list(doc["matches"], source, "matches"))
    ]
    for i, m in enumerate(_list(doc.get("ignoredMatches"), source, "ignoredMatches")):
        where = f"ignoredMatches[{i}]"
        rules = _list(_obj(m, source, where).get("appliedIgnoreRules"), source, f"{where}.appliedIgnoreRules")
        raw_art = _obj(m, source, where).get("artifact")
        art = raw_art if isinstance(raw_art, Mapping) else {}
        if not rules or not all(_grype_default_rule(r, art) for r in rules):
            f = _grype_finding(m, source, where)
            out.append(replace(f, package=f"{f.package} (hidden by grype's own ignore rule)"))
    return out


def parse_trivy(doc: Any, *, source: str, digest: str) -> list[Finding]:
    doc = _obj(doc, source, "(top level)")
    meta = _obj(doc.get("Metadata"), source, "Metadata")
    found = _digests_in(_list(meta.get("RepoDigests"), source, "Metadata.RepoDigests"))
    _check_digest(found, digest, source, "Metadata.RepoDigests")
    # issue 34: the report's own target (ArtifactName, scanned by digest) is the candidate, and every name
    # it lists is of that image: a report of another image whose RepoDigests also name the candidate is not
    # its scan
    own = _digests_in([doc.get("ArtifactName")])
    if found != {digest} or (own and own != {digest}):
        raise _bad(
            source,
            f"is a scan of {', '.join(sorted(found | own))} (ArtifactName, Metadata.RepoDigests), not only "
            f"of the candidate {digest}: scan the image by digest (trivy image IMAGE@sha256:…)",
        )
    if not isinstance(doc.get("Results"), list) or not doc["Results"]:
        raise _bad(
            source,
            "has no Results: trivy scanned nothing (no packages found, or the scan was cut short) — scan the "
            "image again (trivy image --scanners vuln IMAGE@sha256:…), or use grype",
        )
    results = [
        _obj(r, source, f"Results[{i}]") for i, r in enumerate(_list(doc.get("Results"), source, "Results"))
    ]
    unclassed = next((i for i, r in enumerate(results) if not isinstance(r.get("Class"), str)), None)
    if unclassed is not None:
        raise _bad(
            source,
            f"Results[{unclassed}] has no Class (trivy writes os-pkgs or lang-pkgs on each result): a result "
            "that says nothing of what was scanned cannot show the OS packages were — scan again with a "
            "current trivy, or use grype",
        )
    raw_os = meta.get("OS")
    os_info: Mapping[str, Any] = raw_os if isinstance(raw_os, Mapping) else {}
    family = os_info.get("Family")
    if not isinstance(family, str) or not family:
        raise _bad(
            source,
            "names no OS (Metadata.OS.Family): trivy detected no OS, so the OS packages (openssl, glibc, …) "
            "were never scanned — scan an image trivy knows the OS of, or use grype",
        )
    # trivy writes one result for the OS packages whenever it scanned them (Class "os-pkgs", Type the family;
    # no Vulnerabilities when clean): an OS it detected without that result was never looked at —
    # `--pkg-types library`, `--scanners secret`, or an OS release its database does not cover
    if not any(r.get("Class") == "os-pkgs" for r in results):
        raise _bad(
            source,
            f"found the OS ({family} {os_info.get('Name') or ''}) but has no result for its packages "
            "(Class os-pkgs): they were not scanned (--pkg-types library, --scanners without vuln, or an OS "
            "release trivy does not support) — scan them (trivy image --scanners vuln, with os in "
            "--pkg-types), or use grype",
        )
    out = []
    for i, r in enumerate(results):
        for j, v in enumerate(_list(r.get("Vulnerabilities"), source, f"Results[{i}].Vulnerabilities")):
            where = f"Results[{i}].Vulnerabilities[{j}]"
            v = _obj(v, source, where)
            cvss = v.get("CVSS")
            vendor = v.get("VendorSeverity")
            out.append(
                Finding(
                    package=_str(v, "PkgName", source, where),
                    version=_str(v, "InstalledVersion", source, where),
                    id=_str(v, "VulnerabilityID", source, where),
                    # trivy's own pick (the vendor's, else NVD's); where it rates nothing, its CVSS
                    # v3 vectors, then the highest vendor rating (0 unknown … 4 critical)
                    severity=_rated(
                        _str(v, "Severity", source, where, required=False),
                        _cvss_vectors_rating(
                            c.get("V3Vector")
                            for c in (cvss.values() if isinstance(cvss, Mapping) else ())
                            if isinstance(c, Mapping)
                        ),
                        _highest(
                            _TRIVY_VENDOR[n]
                            for n in (vendor.values() if isinstance(vendor, Mapping) else ())
                            if type(n) is int and 0 <= n < len(_TRIVY_VENDOR)
                        ),
                    ),
                    fixed=_str(v, "FixedVersion", source, where, required=False),
                    ecosystem=str(r.get("Type") or ""),
                )
            )
    return out


#: trivy's ``VendorSeverity`` numbers
_TRIVY_VENDOR: Final[tuple[str, ...]] = ("unknown", "low", "medium", "high", "critical")


# ------------------------------------------------------------------------------------------------------------
# SBOM packages × OSV records


@dataclass(frozen=True)
class Package:
    ecosystem: str  # "Debian" | "PyPI" | … (OSV's ecosystem names, without the release suffix)
    name: str
    version: str
    #: a Debian binary package's source package and its version (the purl's ``upstream=NAME[@VERSION]``):
    #: Debian's OSV records (DSA, DLA, DEBIAN-CVE) name source packages — libssl3 is built from openssl,
    #: bsdutils 1:2.38.1-5 from util-linux 2.38.1-5 — and their ranges are in source versions
    source: str = ""
    source_version: str = ""
    #: the distribution release the purl names (``distro=debian-12`` → "12"); "" when it names none
    release: str = ""


#: the OSV ecosystems of dpkg-versioned packages, by the purl's namespace (``pkg:deb/<namespace>/…``)
DEB_ECOSYSTEMS: Final[dict[str, str]] = {"debian": "Debian", "ubuntu": "Ubuntu"}


def _purl(purl: str) -> Package | None:
    m = re.fullmatch(r"pkg:([a-z]+)/(?:([^/@]+)/)?([^/@?#]+)@([^?#]+)(?:\?([^#]*))?(?:#.*)?", purl)
    if not m:
        return None
    from urllib.parse import parse_qsl, unquote

    kind, namespace = m.group(1), unquote(m.group(2) or "").lower()
    name, version = unquote(m.group(3)), unquote(m.group(4))
    if kind == "pypi":
        return Package("PyPI", name, version)
    # a deb package is Debian's or Ubuntu's by its namespace: an Ubuntu image's packages were matched against
    # Debian's records (other versions) and never against Ubuntu's
    eco = DEB_ECOSYSTEMS.get(namespace) if kind == "deb" else None
    if eco is None:
        return None
    qualifiers = dict(parse_qsl(m.group(5) or "", keep_blank_values=True))
    src, _, src_version = qualifiers.get("upstream", "").partition("@")
    distro = re.fullmatch(rf"{namespace}-(\d+(?:\.\d+)?)(?:\.\d+)*", qualifiers.get("distro", ""))
    return Package(
        eco,
        name,
        version,
        source=src,
        source_version=src_version if src else "",
        release=distro.group(1) if distro else "",
    )


def sbom_packages(doc: Any, *, source: str, digest: str) -> list[Package]:
    """The Debian, Ubuntu and PyPI packages of a CycloneDX or SPDX JSON SBOM of *digest* (by their purls).
    The SBOM must name the digest (CycloneDX ``metadata.component``; SPDX: the described package or the
    document)."""
    doc = _obj(doc, source, "(top level)")
    purls: list[str] = []
    if doc.get("bomFormat") == "CycloneDX":
        meta = _obj(doc.get("metadata", {}), source, "metadata")
        comp = meta.get("component") or {}
        _check_digest(
            _digests_in(json.dumps(comp).replace("%3A", ":").split('"')), digest, source, "metadata.component"
        )
        # components nest (an application's packages inside it: cdxgen, trivy and others write them so);
        # a nested one is as installed as a top-level one
        todo: list[tuple[str, Any]] = [
            (f"components[{i}]", c) for i, c in enumerate(_list(doc.get("components"), source, "components"))
        ]
        n = 0
        while n < len(todo):  # in document order; a nested list is appended as it is met
            where, c = todo[n]
            n += 1
            c = _obj(c, source, where)
            if isinstance(c.get("purl"), str):
                purls.append(c["purl"])
            todo += [
                (f"{where}.components[{k}]", sub)
                for k, sub in enumerate(_list(c.get("components"), source, f"{where}.components"))
            ]
    elif isinstance(doc.get("spdxVersion"), str):
        described = set(x for x in _list(doc.get("documentDescribes"), source, "documentDescribes"))
        for r in _list(doc.get("relationships"), source, "relationships"):
            if isinstance(r, Mapping) and r.get("relationshipType") == "DESCRIBES":
                described.add(r.get("relatedSpdxElement"))
        heads: list[Any] = [doc.get("name"), doc.get("documentNamespace")]
        for i, p in enumerate(_list(doc.get("packages"), source, "packages")):
            p = _obj(p, source, f"packages[{i}]")
            refs = _list(p.get("externalRefs"), source, f"packages[{i}].externalRefs")
            locs = [r.get("referenceLocator") for r in refs if isinstance(r, Mapping)]
            if p.get("SPDXID") in described:
                heads += [p.get("versionInfo"), p.get("name"), *locs]
            purls += [x for x in locs if isinstance(x, str) and x.startswith("pkg:")]
        _check_digest(
            _digests_in(str(h).replace("%3A", ":") for h in heads if h), digest, source, "described package"
        )
    else:
        raise _bad(source, "is neither CycloneDX (bomFormat) nor SPDX (spdxVersion) JSON")
    packages = [p for p in (_purl(u) for u in purls) if p is not None]
    # OS packages the match cannot compare (Alpine's apk, RPM, a deb of another distribution) would pass
    # unmatched: the image's whole distribution unchecked, read as "no advisory"
    unread = sorted({u.split("@")[0] for u in purls if _purl(u) is None and _purl_type(u) in _OS_PURL_TYPES})
    if unread:
        raise _bad(
            source,
            f"lists {len(unread)} OS package(s) the OSV match does not compare (e.g. {unread[0]}; it reads "
            "pkg:deb/debian, pkg:deb/ubuntu and pkg:pypi): gate this image with a grype or trivy report "
            "instead",
        )
    if not packages:
        raise _bad(
            source,
            "lists no Debian, Ubuntu or PyPI package (purl): there is nothing to match, which is no proof "
            "of no advisory — make the SBOM from the image by digest (imagesmith sbom) or gate it with a "
            "grype or trivy report",
        )
    return packages


#: purl types of OS package managers (a package of one of them is installed system software)
_OS_PURL_TYPES: Final[frozenset[str]] = frozenset({"deb", "rpm", "apk", "alpm", "opkg", "ebuild", "qpkg"})


def _purl_type(purl: str) -> str:
    m = re.match(r"pkg:([A-Za-z0-9.+-]+)/", purl)
    return m.group(1).lower() if m else ""


def load_osv(path: Path) -> list[Mapping[str, Any]]:
    """OSV records: one record, a list of them, or ``{"vulns": [...]}`` (osv.dev's query answer)."""
    source = str(path)
    doc = _json(
        _read(
            path,
            MAX_OSV_BYTES,
            "OSV data file (release.vulnerabilities.osv)",
            "point release.vulnerabilities.osv of imagesmith.toml at the OSV JSON file (a regular file)",
        ),
        source,
    )
    if isinstance(doc, Mapping) and "vulns" in doc:
        doc = doc["vulns"]
    records = doc if isinstance(doc, list) else [doc]
    out = []
    for i, r in enumerate(records):
        r = _obj(r, source, f"[{i}]")
        _str(r, "id", source, f"[{i}]")
        _list(r.get("affected"), source, f"[{i}].affected")
        out.append(r)
    return out


def _osv_aliases(rec: Mapping[str, Any]) -> tuple[str, ...]:
    out: list[str] = []
    for key in ("aliases", "upstream"):
        values = rec.get(key)
        out += [v for v in (values if isinstance(values, list) else ()) if isinstance(v, str)]
    return tuple(dict.fromkeys(out))


def _osv_severity(rec: Mapping[str, Any], affected: Mapping[str, Any]) -> str:
    """The record's severity word (the affected entry's, else the record's ``database_specific``), else the
    rating of its CVSS v3 base score (``severity: [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/…"}]``, the
    affected entry's first): most PyPI (PYSEC) and many other records carry only the vector. A word that
    rates nothing (``UNKNOWN``, Ubuntu's ``untriaged``) is no word: the next source rates it. Neither:
    ``unknown``."""
    words: list[Any] = []
    for holder in (affected.get("ecosystem_specific"), affected.get("database_specific")):
        if isinstance(holder, Mapping):
            words.append(holder.get("severity"))
    db = rec.get("database_specific")
    if isinstance(db, Mapping):
        words.append(db.get("severity"))
    for holder in (affected, rec):
        scores = holder.get("severity")
        for entry in scores if isinstance(scores, list) else ():
            if isinstance(entry, Mapping) and entry.get("type") == "Ubuntu":  # its priority word
                words.append(entry.get("score"))
            if isinstance(entry, Mapping) and entry.get("type") == "CVSS_V3":
                words.append(_cvss_vectors_rating([entry.get("score")]))
    return _rated(*(w for w in words if isinstance(w, str)))


#: CVSS v3.x base metric weights (FIRST, CVSS v3.1 Specification, section 7.4)
_CVSS3: Final[dict[str, dict[str, float]]] = {
    "AV": {"N": 0.85, "A": 0.62, "L": 0.55, "P": 0.2},
    "AC": {"L": 0.77, "H": 0.44},
    "UI": {"N": 0.85, "R": 0.62},
    "C": {"H": 0.56, "L": 0.22, "N": 0.0},
    "I": {"H": 0.56, "L": 0.22, "N": 0.0},
    "A": {"H": 0.56, "L": 0.22, "N": 0.0},
}


def _roundup(x: float) -> float:
    """CVSS v3.1's Roundup: the smallest one-decimal number >= *x* (free of float noise)."""
    n = round(x * 100000)
    return n / 100000.0 if n % 10000 == 0 else (math.floor(n / 10000) + 1) / 10.0


def cvss3_base_score(vector: str) -> float | None:
    """The base score of a CVSS v3.0/v3.1 vector (``CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H`` → 9.8),
    or None when it is not one (another version, a base metric missing or unknown)."""
    parts = vector.strip().split("/")
    if not parts or parts[0] not in ("CVSS:3.0", "CVSS:3.1"):
        return None
    metrics: dict[str, str] = {}
    for part in parts[1:]:
        key, sep, value = part.partition(":")
        if not sep or key in metrics:
            return None
        metrics[key] = value
    try:
        scope = metrics["S"]
        if scope not in ("U", "C"):
            return None
        changed = scope == "C"
        pr = {"N": 0.85, "L": 0.68 if changed else 0.62, "H": 0.5 if changed else 0.27}[metrics["PR"]]
        w = {k: table[metrics[k]] for k, table in _CVSS3.items()}
    except KeyError:
        return None
    iss = 1 - (1 - w["C"]) * (1 - w["I"]) * (1 - w["A"])
    impact = 6.42 * iss if scope == "U" else 7.52 * (iss - 0.029) - 3.25 * (iss - 0.02) ** 15
    if impact <= 0:
        return 0.0
    exploitability = 8.22 * w["AV"] * w["AC"] * pr * w["UI"]
    total = impact + exploitability if scope == "U" else 1.08 * (impact + exploitability)
    return _roundup(min(total, 10.0))


def cvss_rating(score: float) -> str:
    """CVSS's qualitative rating of a base score (None 0.0 reads as unknown here: it rates nothing)."""
    if score >= 9.0:
        return "critical"
    if score >= 7.0:
        return "high"
    if score >= 4.0:
        return "medium"
    if score > 0.0:
        return "low"
    return "unknown"


def compare(ecosystem: str, a: str, b: str) -> int:
    """-1, 0, 1: *a* against *b* in *ecosystem*'s version ordering."""
    if ecosystem in DEB_ECOSYSTEMS.values():
        return dpkg_compare(a, b)
    from packaging.version import InvalidVersion, Version

    try:
        va, vb = Version(a), Version(b)
    except InvalidVersion:
        return (a > b) - (a < b)
    return (va > vb) - (va < vb)


def _affected(pkg: Package, affected: Mapping[str, Any], source: str, where: str) -> tuple[bool, str]:
    """(is *pkg* affected, the fixed versions)."""
    versions = _list(affected.get("versions"), source, f"{where}.versions")
    fixed: list[str] = []
    hit = pkg.version in versions
    for k, rng in enumerate(_list(affected.get("ranges"), source, f"{where}.ranges")):
        rng = _obj(rng, source, f"{where}.ranges[{k}]")
        if rng.get("type") not in ("ECOSYSTEM", "SEMVER"):
            continue
        inside = False
        events = [
            _obj(ev, source, f"{where}.ranges[{k}].events")
            for ev in _list(rng.get("events"), source, f"{where}.ranges[{k}].events")
        ]
        # evaluated in version order whatever order the record lists them in (OSV does not promise one:
        # [introduced 2.0, fixed 2.5, introduced 0, fixed 1.0] read as listed let 2.2 through)
        if len(events) > 2 or (events and str(events[0].get("introduced")) != "0"):  # [0, fixed X]: in order
            events.sort(key=functools.cmp_to_key(lambda a, b: _event_order(pkg.ecosystem, a, b)))
        for ev in events:
            if "introduced" in ev:
                intro = str(ev["introduced"])
                if intro == "0" or compare(pkg.ecosystem, pkg.version, intro) >= 0:
                    inside = True
            elif "fixed" in ev:
                fixed.append(str(ev["fixed"]))
                if inside and compare(pkg.ecosystem, pkg.version, str(ev["fixed"])) >= 0:
                    inside = False
            elif (
                "last_affected" in ev
                and inside
                and compare(pkg.ecosystem, pkg.version, str(ev["last_affected"])) > 0
            ):
                inside = False
        hit = hit or inside
    return hit, ", ".join(fixed)


def _same_release(ecosystem: str, osv_release: str, purl_release: str) -> bool:
    """Does the OSV ecosystem's release (``Debian:12`` → "12", ``Ubuntu:22.04:LTS`` and
    ``Ubuntu:Pro:22.04:LTS`` → "22.04") name the purl's (``distro=debian-12.5`` → "12", ``ubuntu-22.04``)?"""
    parts = [
        x for x in osv_release.split(":") if x not in ("Pro", "LTS", "FIPS", "FIPS-preview", "FIPS-updates")
    ]
    if not parts:
        return True
    if ecosystem == "Debian":
        return parts[0].split(".")[0] == purl_release.split(".")[0]
    return parts[0] == purl_release


def _event_version(ev: Mapping[str, Any]) -> str | None:
    for key in ("introduced", "fixed", "last_affected", "limit"):
        if key in ev:
            return str(ev[key])
    return None


def _event_order(ecosystem: str, a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    """Events by version ("introduced": "0" first; an event without a version last)."""
    va, vb = _event_version(a), _event_version(b)
    if va is None or vb is None:
        return (va is None) - (vb is None)
    if va == "0" or vb == "0":
        return (va != "0") - (vb != "0")
    return compare(ecosystem, va, vb)


def match_osv(
    packages: Sequence[Package], records: Sequence[Mapping[str, Any]], source: str
) -> list[Finding]:
    """Every (package, record) where the package's version is affected. A Debian binary package is matched
    by its own name and by its source package's (the purl's ``upstream``), the source version compared for
    the latter; a record of another Debian release (``Debian:11`` for a ``distro=debian-12`` package) does not
    apply to it."""
    by_key: dict[tuple[str, str], list[Package]] = {}
    for p in packages:
        by_key.setdefault((p.ecosystem, _norm(p.ecosystem, p.name)), []).append(p)
        if p.source and p.source != p.name:
            by_key.setdefault((p.ecosystem, _norm(p.ecosystem, p.source)), []).append(p)
    # a record's other ids (aliases, upstream) that are records of the same file: Debian's DEBIAN-CVE-… and
    # DSA records carry no rating, the CVE-… record they name (NVD's CVSS) does
    by_id: dict[str, list[Mapping[str, Any]]] = {}
    for rec in records:
        if rec.get("withdrawn") in (None, "") and isinstance(rec.get("id"), str):
            by_id.setdefault(rec["id"].casefold(), []).append(rec)
    out = []
    for i, rec in enumerate(records):
        if rec.get("withdrawn") not in (None, ""):  # OSV: the advisory was withdrawn (a mistake, a duplicate)
            continue
        for j, aff in enumerate(_list(rec.get("affected"), source, f"[{i}].affected")):
            where = f"[{i}].affected[{j}]"
            aff = _obj(aff, source, where)
            pkg = _obj(aff.get("package"), source, f"{where}.package")
            eco, _, release = _str(pkg, "ecosystem", source, f"{where}.package").partition(":")
            name = _str(pkg, "name", source, f"{where}.package")
            for p in dict.fromkeys(by_key.get((eco, _norm(eco, name)), [])):
                if release and p.release and not _same_release(eco, release, p.release):
                    continue
                by_source = bool(p.source) and _norm(eco, name) == _norm(eco, p.source)
                version = (p.source_version or p.version) if by_source else p.version
                hit, fixed = _affected(replace(p, version=version), aff, source, where)
                if hit:
                    shown = p.name
                    own = p.source_version if by_source and p.source_version not in ("", p.version) else ""
                    if by_source and p.source != p.name:
                        shown += f" (source {p.source}{' ' + own if own else ''})"
                    elif own:  # a binNMU (bash 5.2.15-2+b13 of source 5.2.15-2)
                        shown += f" (source version {own})"
                    out.append(
                        Finding(
                            package=shown,
                            version=p.version,
                            id=str(rec["id"]),
                            severity=_rated(_osv_severity(rec, aff), _related_rating(rec, by_id)),
                            fixed=fixed,
                            ecosystem=eco,
                            aliases=_osv_aliases(rec),
                        )
                    )
    return out


def _related_rating(rec: Mapping[str, Any], by_id: Mapping[str, Sequence[Mapping[str, Any]]]) -> str:
    """The highest rating among the records of the same file that *rec* names as its other ids."""
    return _highest(
        _osv_severity(other, {})
        for alias in _osv_aliases(rec)
        for other in by_id.get(alias.casefold(), ())
        if other is not rec
    )


def _norm(ecosystem: str, name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower() if ecosystem == "PyPI" else name


# ------------------------------------------------------------------------------------------------------------
# dpkg's version ordering (deb-version(7); lib/dpkg/version.c verrevcmp)


def _order(c: str) -> int:
    if c == "~":
        return -1
    if is_digits(c):
        return 0
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _verrevcmp(a: str, b: str) -> int:
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not is_digits(a[i])) or (j < len(b) and not is_digits(b[j])):
            ac = _order(a[i]) if i < len(a) else 0
            bc = _order(b[j]) if j < len(b) else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and is_digits(a[i]) and j < len(b) and is_digits(b[j]):
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and is_digits(a[i]):
            return 1
        if j < len(b) and is_digits(b[j]):
            return -1
        if first_diff:
            return first_diff
    return 0


def _split_deb(v: str) -> tuple[int, str, str]:
    epoch = 0
    if ":" in v:
        e, v = v.split(":", 1)
        epoch = int(e) if is_digits(e) else 0
    upstream, _, revision = v.rpartition("-") if "-" in v else (v, "", "")
    return epoch, upstream, revision


def dpkg_compare(a: str, b: str) -> int:
    """-1, 0 or 1 as dpkg --compare-versions orders Debian versions *a* and *b*."""
    ea, ua, ra = _split_deb(a)
    eb, ub, rb = _split_deb(b)
    if ea != eb:
        return -1 if ea < eb else 1
    r = _verrevcmp(ua, ub) or _verrevcmp(ra, rb)
    return (r > 0) - (r < 0)


# ------------------------------------------------------------------------------------------------------------
# the gate


def digest_stem(digest: str) -> str:
    return digest.replace(":", "-")


def find_scan(dirs: Sequence[Path], digest: str, policy: Policy | None) -> Scan | None:
    """The scan of *digest* in *dirs* (None when no file is named by it). Several files for one digest are
    read together: every finding of every report counts."""
    stem = digest_stem(digest)
    scans: list[Scan] = []
    for d in dirs:
        if problem := inputs.folder_problem(d):
            raise ConfigError(
                f"--scan-reports {d}: {problem}",
                hint="pass the folder the scanner reports were saved in",
            )
        for path in sorted(d.rglob(f"{stem}.*.json")):  # searched recursively, like --reports
            if path.name.endswith(".dsse.json"):
                continue  # a signed attestation (the SBOM's), not a scan
            if path.name.endswith((".cdx.json", ".spdx.json")) and (policy is None or policy.osv is None):
                continue  # an SBOM is a scan only against OSV data
            scans.append(read_scan(path, digest, policy))
    if not scans:
        return None
    if len(scans) == 1:
        return scans[0]
    return Scan(
        digest=digest,
        source=", ".join(s.source for s in scans),
        sha=",".join(s.sha for s in scans),
        scanner="+".join(s.scanner for s in scans),
        findings=tuple(f for s in scans for f in s.findings),
    )


def read_scan(path: Path, digest: str, policy: Policy | None) -> Scan:
    source = str(path)
    body = _read(path)
    doc = _json(body, source)
    kind = path.name.removeprefix(digest_stem(digest) + ".").removesuffix(".json")
    if kind == "grype":
        findings = parse_grype(doc, source=source, digest=digest)
    elif kind == "trivy":
        findings = parse_trivy(doc, source=source, digest=digest)
    elif kind in ("cdx", "spdx"):
        if policy is None or policy.osv is None:
            raise ConfigError(
                f"scan report {source}: an SBOM is matched against an OSV data file, and none is configured",
                hint='set osv = "path/to/osv.json" in [release.vulnerabilities] of imagesmith.toml',
            )
        packages = sbom_packages(doc, source=source, digest=digest)
        findings = match_osv(packages, load_osv(policy.osv), str(policy.osv))
        kind = "osv"
    else:
        raise _bad(source, f"unknown report kind {kind!r} in the file name (grype, trivy, cdx, spdx)")
    return Scan(
        digest=digest,
        source=source,
        sha="sha256:" + hashlib.sha256(body).hexdigest(),
        scanner=kind,
        findings=tuple(findings),
    )


def _covers(entry_id: str, f: Finding) -> bool:
    """Does the allowlist entry *entry_id* (casefolded) name *f*: its own id, or an alias of it at the
    finding's severity — an alias whose own record rates it lower is another advisory (issue 34: an
    allowlisted Low CVE that a Critical lists as related is not the Critical)."""
    if f.id.casefold() == entry_id:
        return True
    ratings = {a.casefold(): r for a, r in f.alias_ratings}
    return any(
        alias.casefold() == entry_id and _rank(ratings.get(entry_id, f.severity)) >= _rank(f.severity)
        for alias in f.aliases
    )


def judge(scan: Scan, policy: Policy, *, today: datetime.date) -> Verdict:
    """Which findings block (at or above ``fail_on``, not allowlisted by an entry that is still valid: not
    expired, and expiring no further than ``allowlist_max_days`` from *today*)."""
    floor = _rank(policy.fail_on)
    horizon = today + datetime.timedelta(days=policy.max_days)
    blocking, allowed, expired = [], [], []
    for f in dict.fromkeys(scan.findings):
        if _rank(f.severity) < floor:
            continue
        # the finding's own id, then its aliases: the entry still valid counts, else the first expired one
        entries = [e for e in policy.allowlist if _covers(e.id.casefold(), f)]
        entries.sort(key=lambda e: e.id.casefold() != f.id.casefold())
        valid = next((e for e in entries if today <= e.expires <= horizon), None)
        if valid is not None:
            allowed.append((f, valid))
            continue
        far = next((e for e in entries if e.expires > horizon), None)  # said in the refusal
        if entries:
            expired.append((f, far or entries[0]))
        blocking.append(f)
    return Verdict(
        scan=scan,
        blocking=tuple(blocking),
        allowlisted=tuple(allowed),
        expired=tuple(expired),
        today=today,
    )


def gate(
    dirs: Sequence[Path], digest: str, policy: Policy | None, *, today: datetime.date
) -> tuple[Verdict | None, list[str]]:
    """(the verdict, the refusal reasons) for *digest*. No policy and no --scan-reports → (None, []): the
    gate is off. A policy without a report of the digest refuses the cell."""
    if policy is None and not dirs:
        return None, []
    policy = policy or Policy(fail_on="critical")
    scan = find_scan(dirs, digest, policy)
    if scan is None:
        where = ", ".join(str(d) for d in dirs) or "(no --scan-reports given)"
        return None, [
            f"no vulnerability scan of {digest} in {where}: the gate ([release.vulnerabilities], fail_on = "
            f"{policy.fail_on!r}) needs one (save grype -o json or trivy -f json of the image by digest as "
            f"{digest_stem(digest)}.grype.json or .trivy.json, and pass --scan-reports DIR)"
        ]
    verdict = judge(scan, policy, today=today)
    return verdict, verdict.reasons(policy)
