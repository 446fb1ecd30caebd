"""The gate: the scan filed under a digest (:func:`find_scan`, :func:`read_scan`), judged against the
policy and its allowlist (:func:`judge`), and the release's question answered (:func:`gate`).
"""

from __future__ import annotations

import datetime
import hashlib
from collections.abc import Sequence
from pathlib import Path

from imagesmith import inputs
from imagesmith.errors import ConfigError
from imagesmith.vulngate.osv import load_osv, match_osv, sbom_packages
from imagesmith.vulngate.reading import _bad, _json, _read
from imagesmith.vulngate.records import Finding, Policy, Scan, Verdict, _rank
from imagesmith.vulngate.scanners import parse_grype, parse_trivy

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
