"""The findings of grype's (:func:`parse_grype`, with grype's default ignore rules) and trivy's
(:func:`parse_trivy`) JSON reports of a digest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from imagesmith.vulngate.rating import _cvss_vectors_rating, _highest, _rated
from imagesmith.vulngate.reading import _bad, _check_digest, _digests_in, _list, _obj, _str
from imagesmith.vulngate.records import Finding, normalize_severity


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
