"""What the gate works on: the severities (lowest first) and the records — one advisory on one package
(:class:`Finding`), an allowlist entry, the project's :class:`Policy`, a read :class:`Scan` and the
:class:`Verdict` of judging it.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

#: severities, lowest first; ``unknown`` (a report that rates nothing) sits below ``low``
SEVERITIES: Final[tuple[str, ...]] = ("unknown", "negligible", "low", "medium", "high", "critical")
FAIL_ON: Final[tuple[str, ...]] = ("critical", "high", "medium", "low")
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
