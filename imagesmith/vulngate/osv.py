"""An SBOM's packages (CycloneDX or SPDX JSON, by purl) matched against OSV records: which versions an
advisory affects (Debian by dpkg's ordering, PyPI by PEP 440) and its severity (the record's own, or a
CVSS v3 base score).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from imagesmith.vulngate.dpkg import dpkg_compare
from imagesmith.vulngate.rating import _cvss_vectors_rating, _highest, _rated
from imagesmith.vulngate.reading import _bad, _check_digest, _digests_in, _json, _list, _obj, _read, _str
from imagesmith.vulngate.records import Finding

#: the largest OSV data file read
MAX_OSV_BYTES: Final[int] = 256 << 20


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
