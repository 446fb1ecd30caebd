"""The vulnerability gate (imagesmith.vulngate): recorded grype/trivy/OSV files under tests/data/vuln/."""

from __future__ import annotations

import datetime
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith import vulngate
from imagesmith.errors import ConfigError
from imagesmith.index import VulnRecord, dump_index, parse_index
from imagesmith.project import ProjectError
from imagesmith.vulngate import reading

DATA = Path(__file__).parent.parent / "data" / "vuln"
RECORDED = "sha256:" + "ab" * 32  # the digest the recorded reports name
OTHER = "sha256:" + "cd" * 32
TODAY = datetime.date(2026, 12, 1)


def _scans(tmp_path: Path, digest: str = RECORDED, kinds: tuple[str, ...] = ("grype",)) -> Path:
    d = tmp_path / "scans"
    d.mkdir(exist_ok=True)
    for kind in kinds:
        src = {"cdx": "sbom.cdx.json"}.get(kind, f"{kind}.json")
        text = (DATA / src).read_text().replace(RECORDED, digest)
        (d / f"{vulngate.digest_stem(digest)}.{kind}.json").write_text(text)
    return d


def _policy(tmp_path: Path, body: str) -> vulngate.Policy:
    f = tmp_path / "imagesmith.toml"
    f.write_text("[release.vulnerabilities]\n" + body)
    policy = vulngate.load_policy(f)
    assert policy is not None
    return policy


def test_grype_report_findings_named_with_package_version_id_severity_fix() -> None:
    findings = vulngate.parse_grype(
        json.loads((DATA / "grype.json").read_text()), source="g", digest=RECORDED
    )
    assert findings[0] == vulngate.Finding(
        package="libexpat1",
        version="2.5.0-1",
        id="CVE-2024-45491",
        severity="critical",
        fixed="2.5.0-1+deb12u1",
        ecosystem="deb",
    )
    assert findings[1].severity == "medium"
    assert findings[1].package == "requests"


def test_trivy_report_findings() -> None:
    findings = vulngate.parse_trivy(
        json.loads((DATA / "trivy.json").read_text()), source="t", digest=RECORDED
    )
    assert [(f.package, f.id, f.severity, f.fixed) for f in findings] == [
        ("libexpat1", "CVE-2024-45491", "critical", "2.5.0-1+deb12u1"),
        ("apt", "CVE-2011-3374", "low", ""),
        ("requests", "CVE-2024-35195", "medium", "2.32.0"),
    ]


@pytest.mark.parametrize("kind", ["grype", "trivy"])
def test_critical_refuses_with_package_version_id_severity_fixed(tmp_path: Path, kind: str) -> None:
    verdict, reasons = vulngate.gate(
        [_scans(tmp_path, kinds=(kind,))], RECORDED, vulngate.Policy(fail_on="critical"), today=TODAY
    )
    assert verdict is not None
    assert not verdict.passed
    assert len(reasons) == 1
    assert "libexpat1 2.5.0-1: CVE-2024-45491 (critical, fixed in 2.5.0-1+deb12u1)" in reasons[0]


def test_fail_on_medium_blocks_more(tmp_path: Path) -> None:
    _, reasons = vulngate.gate(
        [_scans(tmp_path, kinds=("trivy",))], RECORDED, vulngate.Policy(fail_on="medium"), today=TODAY
    )
    assert len(reasons) == 2
    assert "requests 2.31.0" in reasons[1]


def test_allowlist_future_expiry_lets_through_and_records_it(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        '[[release.vulnerabilities.allowlist]]\nid = "CVE-2024-45491"\nreason = "no XML parsing"\n'
        'expires = "2027-01-31"\n',
    )
    verdict, reasons = vulngate.gate([_scans(tmp_path)], RECORDED, policy, today=TODAY)
    assert reasons == []
    assert verdict is not None
    assert verdict.allowlisted_ids() == ("CVE-2024-45491",)


def test_expired_allowlist_entry_counts_as_none_and_says_so(tmp_path: Path) -> None:
    policy = _policy(
        tmp_path,
        'allowlist = [{ id = "CVE-2024-45491", reason = "no XML parsing", expires = 2026-11-30 }]\n',
    )
    _, reasons = vulngate.gate([_scans(tmp_path)], RECORDED, policy, today=TODAY)
    assert len(reasons) == 1
    assert "expired on 2026-11-30" in reasons[0]


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ('{ id = "CVE-1", expires = "2027-01-01" }', "allowlist[0].reason"),
        ('{ id = "CVE-1", reason = "x" }', "allowlist[0].expires"),
        ('{ id = "CVE-1", reason = "x", expires = "soon" }', "allowlist[0].expires"),
        ('{ id = "CVE-1", reason = "", expires = "2027-01-01" }', "allowlist[0].reason"),
    ],
)
def test_allowlist_entry_without_reason_or_expiry_is_a_config_error(
    tmp_path: Path, entry: str, field: str
) -> None:
    with pytest.raises(ProjectError) as err:
        _policy(tmp_path, f"allowlist = [{entry}]\n")
    assert str(tmp_path / "imagesmith.toml") in err.value.message
    assert f"release.vulnerabilities.{field}" in err.value.message
    assert err.value.hint


def test_report_of_another_digest_is_refused(tmp_path: Path) -> None:
    scans = _scans(tmp_path)
    other = scans / f"{vulngate.digest_stem(OTHER)}.grype.json"
    (scans / f"{vulngate.digest_stem(RECORDED)}.grype.json").rename(other)  # named OTHER, about RECORDED
    with pytest.raises(ConfigError) as err:
        vulngate.gate([scans], OTHER, vulngate.Policy(fail_on="critical"), today=TODAY)
    assert str(other) in err.value.message
    assert "not of the candidate digest" in err.value.message


def test_no_report_for_the_digest_refuses_when_a_policy_is_set(tmp_path: Path) -> None:
    _, reasons = vulngate.gate([_scans(tmp_path)], OTHER, vulngate.Policy(fail_on="high"), today=TODAY)
    assert reasons
    assert "no vulnerability scan of " + OTHER in reasons[0]


def test_gate_off_without_policy_or_reports() -> None:
    assert vulngate.gate([], RECORDED, None, today=TODAY) == (None, [])


_TARGET = b'{"source": {"target": {"manifestDigest": "' + RECORDED.encode() + b'"}}, '
_ONE_MATCH = json.dumps(json.loads((DATA / "grype.json").read_text())["matches"][:1]).encode()


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[1, 2]",
        b'{"matches": "x", "source": {"target": {"manifestDigest": "' + RECORDED.encode() + b'"}}}',
        b'{"matches": [{"vulnerability": {"id": 7}, "artifact": {"name": "a", "version": "1"}}], '
        b'"source": {"target": {"manifestDigest": "' + RECORDED.encode() + b'"}}}',
        b'{"matches": [], "source": {"target": {"manifestDigest": null}}}',
        b"[" * 100000 + b"]" * 100000,
        # b2: a key twice (Python kept the last: the matches read as none), NaN, an integer of thousands of
        # digits (int()'s ValueError was a traceback), a severity of another type (read as unknown: never
        # blocked), a related record that is no object
        _TARGET + b'"matches": ' + _ONE_MATCH + b', "matches": []}',
        _TARGET + b'"matches": [], "x": NaN}',
        _TARGET + b'"matches": [], "x": ' + b"9" * 5000 + b"}",
        _TARGET + b'"matches": ' + _ONE_MATCH.replace(b'"Critical"', b'["Critical"]') + b"}",
        _TARGET
        + b'"matches": '
        + _ONE_MATCH.replace(b'"relatedVulnerabilities": []', b'"relatedVulnerabilities": [1]')
        + b"}",
    ],
)
def test_hostile_report_is_one_error_naming_the_file(tmp_path: Path, body: bytes) -> None:
    d = tmp_path / "scans"
    d.mkdir()
    f = d / f"{vulngate.digest_stem(RECORDED)}.grype.json"
    f.write_bytes(body)
    with pytest.raises(ConfigError) as err:
        vulngate.gate([d], RECORDED, vulngate.Policy(fail_on="critical"), today=TODAY)
    assert str(f) in err.value.message
    assert err.value.hint


def test_oversized_report_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reading, "MAX_REPORT_BYTES", 1000)  # read by reading._read
    scans = _scans(tmp_path)
    with pytest.raises(ConfigError, match="more than"):
        vulngate.gate([scans], RECORDED, vulngate.Policy(fail_on="critical"), today=TODAY)


def test_sbom_matched_against_osv_data(tmp_path: Path) -> None:
    shutil.copy(DATA / "osv.json", tmp_path / "osv.json")
    policy = _policy(tmp_path, 'fail_on = "medium"\nosv = "osv.json"\n')
    verdict, reasons = vulngate.gate([_scans(tmp_path, kinds=("cdx",))], RECORDED, policy, today=TODAY)
    assert verdict is not None
    assert verdict.scan.scanner == "osv"
    ids = sorted(f.id for f in verdict.blocking)
    # PYSEC-2099-1 covers requests 2.0 to 2.10.0 only: 2.31.0 is outside (PEP 440 ordering, not strings)
    assert ids == ["DEBIAN-CVE-2024-45491", "GHSA-9wx4-h78v-vm56"]
    assert any(
        "libexpat1 2.5.0-1: DEBIAN-CVE-2024-45491 (critical, fixed in 2.5.0-1+deb12u1)" in r for r in reasons
    )


def test_sbom_of_another_digest_is_refused(tmp_path: Path) -> None:
    shutil.copy(DATA / "osv.json", tmp_path / "osv.json")
    policy = _policy(tmp_path, 'osv = "osv.json"\n')
    scans = _scans(tmp_path, kinds=("cdx",))
    (scans / f"{vulngate.digest_stem(RECORDED)}.cdx.json").rename(
        scans / f"{vulngate.digest_stem(OTHER)}.cdx.json"
    )
    with pytest.raises(ConfigError, match="not of the candidate digest"):
        vulngate.gate([scans], OTHER, policy, today=TODAY)


DPKG_PAIRS = [
    ("2.5.0-1", "2.5.0-1+deb12u1", -1),
    ("1.0~rc1", "1.0", -1),
    ("1:1.0", "2.0", 1),
    ("1.0-1", "1.0-1", 0),
    ("1.10", "1.9", 1),
    ("1.0a", "1.0+", -1),
    ("2.36-9+deb12u7", "2.36-9+deb12u10", -1),
    ("1.0", "1.0-0", 0),
    ("3.0.11-1~deb12u2", "3.0.11-1", -1),
    ("0:1.2", "1.2", 0),
]


@pytest.mark.parametrize(("a", "b", "want"), DPKG_PAIRS)
def test_dpkg_ordering(a: str, b: str, want: int) -> None:
    assert vulngate.dpkg_compare(a, b) == want
    assert vulngate.dpkg_compare(b, a) == -want


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="dpkg is not installed")
@pytest.mark.parametrize(("a", "b", "want"), DPKG_PAIRS)
def test_dpkg_ordering_agrees_with_dpkg(a: str, b: str, want: int) -> None:
    op = {-1: "lt", 0: "eq", 1: "gt"}[want]
    assert subprocess.run(["dpkg", "--compare-versions", a, op, b], check=False).returncode == 0


def test_index_entry_records_the_verdict_round_trip() -> None:
    base = json.loads((Path(__file__).parent.parent.parent / "docs/examples/release-index.json").read_text())
    base["images"][0]["vulnerabilities"] = {
        "scanner": "grype",
        "report": "sha256-ab.grype.json",
        "report_digest": "sha256:" + "0" * 64,
        "fail_on": "critical",
        "allowlisted": ["CVE-2024-45491"],
    }
    index = parse_index(json.dumps(base), source="x")
    tagged = {i.tag: i for i in index.images}[base["images"][0]["tag"]]
    assert tagged.vulnerabilities == VulnRecord(
        scanner="grype",
        report="sha256-ab.grype.json",
        report_digest="sha256:" + "0" * 64,
        fail_on="critical",
        allowlisted=("CVE-2024-45491",),
    )
    assert parse_index(dump_index(index), source="y") == index
    base["images"][0]["vulnerabilities"]["fail_on"] = "sometimes"
    with pytest.raises(ConfigError, match=r"vulnerabilities\.fail_on"):
        parse_index(json.dumps(base), source="x")


def test_scan_reports_are_searched_recursively(tmp_path: Path) -> None:
    """The nightly's artifacts land as reports/report-CELL-GPU/scans/…: --scan-reports reports finds them."""
    nested = tmp_path / "reports" / "report-c-h100" / "scans"
    nested.parent.mkdir(parents=True)
    _scans(tmp_path).rename(nested)
    verdict, reasons = vulngate.gate(
        [tmp_path / "reports"], RECORDED, vulngate.Policy(fail_on="critical"), today=TODAY
    )
    assert verdict is not None
    assert verdict.scan.source.startswith(str(nested))
    assert len(reasons) == 1


def test_an_unquoted_toml_date_as_expires_is_named_without_a_python_repr(
    tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    """`expires = 2027-01-01` (a TOML date) said `datetime.date(2027, 1, 1) is not a quoted date`."""
    project = tmp_path / "p"
    assert run_cli("init", str(project), "--gpu", "a100").exit_code == 0
    with (project / "imagesmith.toml").open("a") as fh:
        fh.write(
            '\n[release.vulnerabilities]\nallowlist = [{ id = "CVE-1", reason = "r",expires = 2027-01-01 }]\n'
        )
    out = run_cli("-C", str(project), "plan")
    assert out.exit_code == 2
    assert "datetime" not in out.stderr
    assert 'expires: 2027-01-01 is not a quoted date "YYYY-MM-DD"' in out.stderr


# -- issue 26 re-check: what syft's SBOMs and real OSV records look like ------------------------------------
#: purls exactly as syft 1.x writes them for debian:bookworm (read from the local registry's image)
SYFT_PURLS = (
    "pkg:deb/debian/libssl3@3.0.11-1~deb12u2?arch=amd64&distro=debian-12&upstream=openssl",
    "pkg:deb/debian/bsdutils@1:2.38.1-5%2Bdeb12u3?arch=amd64&distro=debian-12&upstream=util-linux%402.38.1-5%2Bdeb12u3",
    "pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64&distro=debian-12&upstream=zlib",
    "pkg:pypi/jinja2@3.1.2",
)


def _spdx(tmp_path: Path, purls: tuple[str, ...] = SYFT_PURLS) -> Path:
    packages: list[dict[str, Any]] = [
        {"SPDXID": "SPDXRef-DocumentRoot-Image", "name": "img", "versionInfo": RECORDED},
    ]
    for n, purl in enumerate(purls):
        packages.append(
            {
                "SPDXID": f"SPDXRef-Package-{n}",
                "name": purl.split("/")[-1].split("@")[0],
                "externalRefs": [{"referenceType": "purl", "referenceLocator": purl}],
            }
        )
    doc = {
        "spdxVersion": "SPDX-2.3",
        "name": "img",
        "documentDescribes": ["SPDXRef-DocumentRoot-Image"],
        "packages": packages,
    }
    d = tmp_path / "scans"
    d.mkdir(exist_ok=True)
    (d / f"{vulngate.digest_stem(RECORDED)}.spdx.json").write_text(json.dumps(doc))
    return d


def _osv_gate(tmp_path: Path, records: list[dict[str, Any]], fail_on: str = "low") -> list[vulngate.Finding]:
    (tmp_path / "osv.json").write_text(json.dumps(records))
    policy = _policy(tmp_path, f'fail_on = "{fail_on}"\nosv = "osv.json"\n')
    verdict, _ = vulngate.gate([_spdx(tmp_path)], RECORDED, policy, today=TODAY)
    assert verdict is not None
    return list(verdict.blocking)


def _deb(vid: str, source: str, events: list[dict[str, str]], release: str = "12") -> dict[str, Any]:
    return {
        "id": vid,
        "affected": [
            {
                "package": {"ecosystem": f"Debian:{release}", "name": source},
                "ranges": [{"type": "ECOSYSTEM", "events": events}],
            }
        ],
        "database_specific": {"severity": "HIGH"},
    }


def test_debian_records_name_source_packages_and_match_binary_packages_by_their_source(
    tmp_path: Path,
) -> None:
    """Debian's OSV records (DSA, DLA, DEBIAN-CVE) name the source package (openssl), the SBOM lists the
    binary one (libssl3, upstream=openssl): before, no Debian library advisory ever matched."""
    found = _osv_gate(
        tmp_path, [_deb("DSA-5999-1", "openssl", [{"introduced": "0"}, {"fixed": "3.0.15-1~deb12u1"}])]
    )
    assert [(f.package, f.version, f.id, f.fixed) for f in found] == [
        ("libssl3 (source openssl)", "3.0.11-1~deb12u2", "DSA-5999-1", "3.0.15-1~deb12u1")
    ]


def test_a_source_package_is_compared_in_its_own_version_not_the_binarys_epoch(tmp_path: Path) -> None:
    """bsdutils 1:2.38.1-5+deb12u3 is built from util-linux 2.38.1-5+deb12u3: the record's range is in
    source versions, and the binary's epoch 1 would put it above every fix."""
    found = _osv_gate(
        tmp_path, [_deb("DLA-4000-1", "util-linux", [{"introduced": "0"}, {"fixed": "2.38.1-5+deb12u4"}])]
    )
    assert [(f.package, f.version) for f in found] == [
        ("bsdutils (source util-linux 2.38.1-5+deb12u3)", "1:2.38.1-5+deb12u3")
    ]
    # and a source whose version is the binary's (syft then writes no @version): zlib 1:1.2.13.dfsg-1
    assert not _osv_gate(
        tmp_path, [_deb("DLA-4001-1", "zlib", [{"introduced": "0"}, {"fixed": "1:1.2.13.dfsg-1"}])]
    )


def test_a_record_of_another_debian_release_does_not_apply(tmp_path: Path) -> None:
    """A Debian:13 record (fixed in trixie's 3.5) said nothing about bookworm's openssl; before, it refused
    it. A record without a release, or of this one, still applies."""
    events = [{"introduced": "0"}, {"fixed": "3.5.1-1"}]
    assert not _osv_gate(tmp_path, [_deb("DEBIAN-CVE-2099-1", "openssl", events, release="13")])
    assert _osv_gate(tmp_path, [_deb("DEBIAN-CVE-2099-1", "openssl", events, release="12")])


def test_range_events_are_evaluated_in_version_order_not_list_order(tmp_path: Path) -> None:
    """[introduced 2.0, fixed 3.9, introduced 0, fixed 1.0] read as listed let jinja2 3.1.2 through."""
    rec = {
        "id": "PYSEC-2099-7",
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": "Jinja2"},
                "ranges": [
                    {
                        "type": "ECOSYSTEM",
                        "events": [
                            {"introduced": "2.0"},
                            {"fixed": "3.9"},
                            {"introduced": "0"},
                            {"fixed": "1.0"},
                        ],
                    }
                ],
            }
        ],
        "database_specific": {"severity": "HIGH"},
    }
    assert [f.id for f in _osv_gate(tmp_path, [rec])] == ["PYSEC-2099-7"]


@pytest.mark.parametrize(
    ("vector", "score", "rating"),
    [
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H", 9.8, "critical"),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H", 10.0, "critical"),
        ("CVSS:3.0/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H", 7.8, "high"),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H", 7.5, "high"),
        ("CVSS:3.1/AV:N/AC:L/PR:N/UI:R/S:C/C:L/I:L/A:N", 6.1, "medium"),
        ("CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:L/I:N/A:N", 3.1, "low"),
        ("CVSS:3.1/AV:P/AC:H/PR:H/UI:R/S:U/C:N/I:N/A:N", 0.0, "unknown"),
    ],
)
def test_cvss3_base_scores_and_ratings(vector: str, score: float, rating: str) -> None:
    """FIRST's CVSS v3.1 calculator gives these scores (typical RCE, scope change, local, DoS, XSS, ...)."""
    assert vulngate.cvss3_base_score(vector) == score
    assert vulngate.cvss_rating(score) == rating


@pytest.mark.parametrize(
    "vector",
    [
        "CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N",
        "AV:N/AC:L/Au:N/C:P/I:P/A:P",
        "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H",
        "CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "CVSS:3.1/AV:N/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H",
        "",
    ],
)
def test_what_is_no_cvss3_vector_scores_nothing(vector: str) -> None:
    assert vulngate.cvss3_base_score(vector) is None


def test_a_record_rated_only_by_its_cvss_vector_blocks_at_its_rating(tmp_path: Path) -> None:
    """Most PYSEC (and many other) records carry `severity: [{type: CVSS_V3, score: vector}]` and no
    severity word: before, they read as unknown, which never blocks — a 9.8 passed the gate."""
    rec = {
        "id": "PYSEC-2099-9",
        "affected": [
            {
                "package": {"ecosystem": "PyPI", "name": "jinja2"},
                "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "3.1.3"}]}],
            }
        ],
        "severity": [{"type": "CVSS_V3", "score": "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"}],
    }
    (found,) = _osv_gate(tmp_path, [rec], fail_on="critical")
    assert (found.id, found.severity) == ("PYSEC-2099-9", "critical")


def test_two_allowlist_entries_for_one_advisory_are_refused(tmp_path: Path) -> None:
    """Before: the later entry silently won (an expired one could hide a current one, or the reverse)."""
    body = (
        'fail_on = "high"\n'
        '[[allowlist]]\nid = "CVE-2024-45491"\nreason = "a"\nexpires = "2027-01-01"\n'
        '[[allowlist]]\nid = "cve-2024-45491"\nreason = "b"\nexpires = "2026-01-01"\n'
    )
    f = tmp_path / "imagesmith.toml"
    f.write_text(
        "[release.vulnerabilities]\n" + body.replace("[[allowlist]]", "[[release.vulnerabilities.allowlist]]")
    )
    with pytest.raises(
        ProjectError, match=r"allowlist\[1\]\.id: 'cve-2024-45491' is already allowlisted by"
    ) as err:
        vulngate.load_policy(f)
    assert "allowlist[0]" in err.value.message


def test_a_fifo_named_as_a_report_is_refused_without_blocking(tmp_path: Path) -> None:
    """Before: release opened it and waited for a writer forever."""
    import os
    import threading

    scans = tmp_path / "scans"
    scans.mkdir()
    os.mkfifo(scans / f"{vulngate.digest_stem(RECORDED)}.grype.json")
    outcome: list[object] = []

    def run() -> None:
        try:
            vulngate.gate([scans], RECORDED, vulngate.Policy(fail_on="critical"), today=TODAY)
        except ConfigError as exc:
            outcome.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "the gate blocked on a FIFO"
    (exc,) = outcome
    assert isinstance(exc, ConfigError)
    assert "FIFO" in exc.message


def test_an_ubuntu_images_packages_meet_ubuntus_records_not_debians(tmp_path: Path) -> None:
    """syft writes pkg:deb/ubuntu/… for an Ubuntu image (this project's a100/h100/rtx4090 bases and the
    nvidia/cuda devel images): before, they were read as Debian packages — Debian's openssl record (its own
    versions) refused jammy's, and Ubuntu's records (`Ubuntu:22.04:LTS`, priority `medium`) never matched."""
    purls = ("pkg:deb/ubuntu/libssl3@3.0.2-0ubuntu1.15?arch=amd64&upstream=openssl&distro=ubuntu-22.04",)
    (tmp_path / "osv.json").write_text(
        json.dumps(
            [
                _deb("DSA-5999-1", "openssl", [{"introduced": "0"}, {"fixed": "3.0.15-1~deb12u1"}]),
                {
                    "id": "UBUNTU-CVE-2099-1",
                    "affected": [
                        {
                            "package": {"ecosystem": f"Ubuntu:{rel}", "name": "openssl"},
                            "ranges": [
                                {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": fix}]}
                            ],
                        }
                        for rel, fix in (
                            ("22.04:LTS", "3.0.2-0ubuntu1.18"),
                            ("24.04:LTS", "3.0.13-0ubuntu3.5"),
                        )
                    ],
                    "severity": [{"type": "Ubuntu", "score": "medium"}],
                },
            ]
        )
    )
    policy = _policy(tmp_path, 'fail_on = "medium"\nosv = "osv.json"\n')
    verdict, _ = vulngate.gate([_spdx(tmp_path, purls)], RECORDED, policy, today=TODAY)
    assert verdict is not None
    assert [(f.package, f.id, f.severity, f.fixed, f.ecosystem) for f in verdict.blocking] == [
        ("libssl3 (source openssl)", "UBUNTU-CVE-2099-1", "medium", "3.0.2-0ubuntu1.18", "Ubuntu")
    ]


def test_an_allowlist_entry_covers_the_advisorys_other_ids_and_any_case(tmp_path: Path) -> None:
    """Before: allowlisting CVE-2024-45491 (what people write) did not cover Debian's DEBIAN-CVE-2024-45491
    record naming it in `aliases`/`upstream`, nor grype's GHSA match whose relatedVulnerabilities name the
    CVE; an entry written `cve-…` matched nothing."""
    rec = _deb("DEBIAN-CVE-2024-45491", "openssl", [{"introduced": "0"}, {"fixed": "3.0.15-1~deb12u1"}])
    rec["upstream"] = ["CVE-2024-45491"]
    (tmp_path / "osv.json").write_text(json.dumps([rec]))
    body = (
        'fail_on = "high"\nosv = "osv.json"\n[[release.vulnerabilities.allowlist]]\nid = "cve-2024-45491"\n'
        'reason = "no untrusted input"\nexpires = "2027-01-31"\n'
    )
    verdict, reasons = vulngate.gate([_spdx(tmp_path)], RECORDED, _policy(tmp_path, body), today=TODAY)
    assert reasons == []
    assert verdict is not None
    assert verdict.allowlisted_ids() == ("DEBIAN-CVE-2024-45491",)
    expired = body.replace("2027-01-31", "2026-11-30")
    verdict, reasons = vulngate.gate([_spdx(tmp_path)], RECORDED, _policy(tmp_path, expired), today=TODAY)
    assert len(reasons) == 1
    assert "its allowlist entry expired on 2026-11-30" in reasons[0]
    findings = vulngate.parse_grype(
        {
            "source": {"target": {"manifestDigest": RECORDED}},
            "matches": [
                {
                    "vulnerability": {"id": "GHSA-xxxx-yyyy-zzzz", "severity": "Critical"},
                    "relatedVulnerabilities": [{"id": "CVE-2024-45491"}],
                    "artifact": {"name": "requests", "version": "2.31.0"},
                }
            ],
        },
        source="r.grype.json",
        digest=RECORDED,
    )
    scan = vulngate.Scan(digest=RECORDED, source="r", sha="s", scanner="grype", findings=tuple(findings))
    verdict = vulngate.judge(scan, _policy(tmp_path, body), today=TODAY)
    assert verdict.passed


def test_a_binnmu_is_compared_in_its_source_version(tmp_path: Path) -> None:
    """syft names bash 5.2.15-2+b13 (a binNMU) `upstream=bash@5.2.15-2`: a record listing the affected source
    versions (`versions`, no ranges) names 5.2.15-2, never the binNMU's own version — it was missed."""
    purls = ("pkg:deb/debian/bash@5.2.15-2%2Bb13?arch=amd64&distro=debian-12&upstream=bash%405.2.15-2",)
    rec = {
        "id": "DEBIAN-CVE-2099-5",
        "affected": [{"package": {"ecosystem": "Debian:12", "name": "bash"}, "versions": ["5.2.15-2"]}],
        "database_specific": {"severity": "HIGH"},
    }
    (tmp_path / "osv.json").write_text(json.dumps([rec]))
    policy = _policy(tmp_path, 'fail_on = "high"\nosv = "osv.json"\n')
    verdict, _ = vulngate.gate([_spdx(tmp_path, purls)], RECORDED, policy, today=TODAY)
    assert verdict is not None
    assert [(f.package, f.version) for f in verdict.blocking] == [
        ("bash (source version 5.2.15-2)", "5.2.15-2+b13")
    ]


# -- issue 26 re-check (b2): what a scanner's own filters and ratings do to the gate -------------------------


def _grype_doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "grype.json").read_text())
    return doc


def _grype_gate_policy(tmp_path: Path, doc: dict[str, Any], policy: vulngate.Policy) -> list[str]:
    d = tmp_path / "scans"
    d.mkdir(exist_ok=True)
    (d / f"{vulngate.digest_stem(RECORDED)}.grype.json").write_text(json.dumps(doc))
    return vulngate.gate([d], RECORDED, policy, today=TODAY)[1]


def _grype_gate(tmp_path: Path, doc: dict[str, Any], fail_on: str = "critical") -> list[str]:
    d = tmp_path / "scans"
    d.mkdir(exist_ok=True)
    (d / f"{vulngate.digest_stem(RECORDED)}.grype.json").write_text(json.dumps(doc))
    _, reasons = vulngate.gate([d], RECORDED, vulngate.Policy(fail_on=fail_on), today=TODAY)
    return reasons


@pytest.mark.parametrize(
    "rule",
    [
        {"vulnerability": "CVE-2024-45491", "reason": "we said so in .grype.yaml"},  # an id ignored
        {"fix-state": "not-fixed"},  # what --only-fixed / --only-notfixed apply
        {"vex-status": "not_affected", "vex-justification": "vulnerable_code_not_in_execute_path"},
        {"package": {"name": "libexpat1"}},  # a whole package
        {"package": {"name": "libexpat1"}, "match-type": "exact-direct-match"},
    ],
)
def test_a_match_grypes_own_ignore_rules_hid_still_counts(tmp_path: Path, rule: dict[str, Any]) -> None:
    """Before: a critical match grype's config moved to `ignoredMatches` (`.grype.yaml` `ignore:`,
    `--only-fixed`, a VEX) was never read: the cell released with no allowlist entry, no reason, no expiry
    and nothing in the index."""
    doc = _grype_doc()
    critical = doc["matches"].pop(0)
    doc["ignoredMatches"] = [{**critical, "appliedIgnoreRules": [rule]}]
    (reason,) = _grype_gate(tmp_path, doc, fail_on="high")
    assert "CVE-2024-45491 (critical, fixed in 2.5.0-1+deb12u1)" in reason


def test_the_ignored_matches_count_and_the_refusal_says_grype_hid_it(tmp_path: Path) -> None:
    doc = _grype_doc()
    critical = doc["matches"].pop(0)
    doc["ignoredMatches"] = [{**critical, "appliedIgnoreRules": [{"fix-state": "not-fixed"}]}]
    (reason,) = _grype_gate(tmp_path, doc)
    assert "libexpat1 (hidden by grype's own ignore rule) 2.5.0-1: CVE-2024-45491 (critical" in reason


def test_grypes_built_in_rule_for_indirect_kernel_header_matches_stays_ignored(tmp_path: Path) -> None:
    doc = _grype_doc()
    critical = doc["matches"].pop(0)
    kernel_rule = {
        "package": {"name": "linux(-.*)?-headers-.*", "type": "deb", "upstream-name": "linux.*"},
        "match-type": "exact-indirect-match",
        "vulnerability": "",
        "fix-state": "",
    }
    headers = {
        **critical["artifact"],
        "name": "linux-headers-6.1.0-18-amd64",
        "type": "deb",
        "upstreams": [{"name": "linux"}],
    }
    doc["ignoredMatches"] = [{**critical, "artifact": headers, "appliedIgnoreRules": [kernel_rule]}]
    assert _grype_gate(tmp_path, doc) == []


@pytest.mark.parametrize(
    ("package", "rule_package"),
    [
        # issue 34: a rule shaped like the kernel-header rule (any upstream-name) hid a Critical openssl match
        ("libssl3", {"name": "libssl3", "upstream-name": "openssl", "type": "deb"}),
        ("libssl3", {"name": ".*", "upstream-name": ".*", "type": "deb"}),
        # grype's own rule, but applied to a package it does not name
        ("libssl3", {"name": "linux(-.*)?-headers-.*", "type": "deb", "upstream-name": "linux.*"}),
        ("linux-libc-dev", {"name": "linux-libc-dev", "upstream-name": "linux"}),  # no type: not grype's
    ],
)
def test_only_grypes_exact_default_ignore_rules_keep_a_match_ignored(
    tmp_path: Path, package: str, rule_package: dict[str, str]
) -> None:
    doc = _grype_doc()
    critical = doc["matches"].pop(0)
    art = {**critical["artifact"], "name": package, "type": "deb", "upstreams": [{"name": "openssl"}]}
    rule = {"package": rule_package, "match-type": "exact-indirect-match"}
    doc["ignoredMatches"] = [{**critical, "artifact": art, "appliedIgnoreRules": [rule]}]
    (reason,) = _grype_gate(tmp_path, doc)
    assert f"{package} (hidden by grype's own ignore rule)" in reason
    assert "(critical" in reason
    # the correct run: the real linux-libc-dev rule on linux-libc-dev keeps it ignored
    art = {**art, "name": "linux-libc-dev", "upstreams": [{"name": "linux"}]}
    rule = {
        "package": {"name": "linux-libc-dev", "upstream-name": "linux", "type": "deb"},
        "match-type": "exact-indirect-match",
    }
    doc["ignoredMatches"] = [{**critical, "artifact": art, "appliedIgnoreRules": [rule]}]
    assert _grype_gate(tmp_path, doc) == []


def test_a_grype_report_of_another_image_listing_the_candidate_in_repo_digests_is_refused(
    tmp_path: Path,
) -> None:
    """issue 34: a grype report whose manifestDigest is another image was taken because repoDigests also
    listed the candidate."""
    doc = _grype_doc()
    other = "sha256:" + "cd" * 32
    doc["source"]["target"]["manifestDigest"] = other
    doc["source"]["target"]["repoDigests"].append(f"r.example/x@{RECORDED}")
    with pytest.raises(
        ConfigError, match=f"scanned {other} \\(source.target.manifestDigest\\), not the candidate"
    ):
        _grype_gate(tmp_path, doc)
    # the correct report: its own target is the candidate
    assert len(_grype_gate(tmp_path, _grype_doc())) == 1


def test_a_trivy_report_naming_another_image_beside_the_candidate_is_refused() -> None:
    doc: dict[str, Any] = json.loads((DATA / "trivy.json").read_text())
    other = "sha256:" + "cd" * 32
    doc["ArtifactName"] = f"r.example/x@{other}"
    with pytest.raises(ConfigError, match="not only of the candidate"):
        vulngate.parse_trivy(doc, source="t", digest=RECORDED)
    doc = json.loads((DATA / "trivy.json").read_text())
    doc["Metadata"]["RepoDigests"].append(f"r.example/x@{other}")
    with pytest.raises(ConfigError, match="not only of the candidate"):
        vulngate.parse_trivy(doc, source="t", digest=RECORDED)


def test_an_allowlist_entry_expiring_too_far_ahead_counts_as_none(tmp_path: Path) -> None:
    """issue 34: ``expires = 9999-12-31`` was accepted: an accepted risk never looked at again."""
    far = _policy(
        tmp_path,
        '[[release.vulnerabilities.allowlist]]\nid = "CVE-2024-45491"\nreason = "r"\n'
        'expires = "9999-12-31"\n',
    )
    (reason,) = _grype_gate_policy(tmp_path, _grype_doc(), far)
    assert "expires 9999-12-31, more than allowlist_max_days = 365 days ahead" in reason
    near = replace(far, allowlist=(replace(far.allowlist[0], expires=TODAY + datetime.timedelta(days=365)),))
    assert _grype_gate_policy(tmp_path, _grype_doc(), near) == []
    # configurable, bounded
    longer = _policy(
        tmp_path,
        'allowlist_max_days = 730\n[[release.vulnerabilities.allowlist]]\nid = "CVE-2024-45491"\n'
        'reason = "r"\nexpires = "2028-06-30"\n',
    )
    assert _grype_gate_policy(tmp_path, _grype_doc(), longer) == []
    for bad in ("0", "100000", '"365"'):
        with pytest.raises(ProjectError, match="allowlist_max_days"):
            _policy(tmp_path, f"allowlist_max_days = {bad}\n")


def test_an_allowlisted_low_cve_does_not_cover_a_critical_listing_it_as_related(tmp_path: Path) -> None:
    body = (
        '[[release.vulnerabilities.allowlist]]\nid = "CVE-2099-0001"\nreason = "low, no impact"\n'
        'expires = "2027-01-31"\n'
    )
    policy = _policy(tmp_path, body)

    def judged(related_severity: str) -> vulngate.Verdict:
        findings = vulngate.parse_grype(
            {
                "source": {"target": {"manifestDigest": RECORDED}},
                "matches": [
                    {
                        "vulnerability": {"id": "CVE-2099-9999", "severity": "Critical"},
                        "relatedVulnerabilities": [{"id": "CVE-2099-0001", "severity": related_severity}],
                        "artifact": {"name": "openssl", "version": "3.0.0"},
                    }
                ],
            },
            source="r.grype.json",
            digest=RECORDED,
        )
        scan = vulngate.Scan(digest=RECORDED, source="r", sha="s", scanner="grype", findings=tuple(findings))
        return vulngate.judge(scan, policy, today=TODAY)

    assert not judged("Low").passed  # another advisory, at its own (lower) severity: not covered
    assert judged("Critical").passed  # the same advisory under another id, at the severity allowlisted


def test_a_grype_report_without_matches_is_cut_short_not_clean(tmp_path: Path) -> None:
    doc = _grype_doc()
    del doc["matches"]
    with pytest.raises(ConfigError, match=r"has no `matches`") as err:
        _grype_gate(tmp_path, doc)
    assert f"{vulngate.digest_stem(RECORDED)}.grype.json" in err.value.message


def _trivy_vuln(**fields: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / "trivy.json").read_text())
    vuln = doc["Results"][0]["Vulnerabilities"][0]
    for k in ("Severity", "CVSS", "VendorSeverity", "SeveritySource"):
        vuln.pop(k, None)
    vuln.update(fields)
    return doc


CRITICAL_VECTOR = "CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H"  # 9.8


@pytest.mark.parametrize(
    ("edit", "want"),
    [
        # grype: Debian's urgency not yet assigned, NVD's record (related) rates it
        (
            lambda v, m: (
                v.update(severity="Unknown"),
                m.update(
                    relatedVulnerabilities=[
                        {"id": "CVE-2024-45491", "namespace": "nvd:cpe", "severity": "Critical"}
                    ]
                ),
            ),
            "critical",
        ),
        (
            lambda v, m: (
                v.update(severity=""),
                m.update(
                    relatedVulnerabilities=[
                        {"id": "CVE-2024-45491", "cvss": [{"version": "3.1", "vector": CRITICAL_VECTOR}]}
                    ]
                ),
            ),
            "critical",
        ),
        (
            lambda v, m: v.update(
                severity=None, cvss=[{"vector": CRITICAL_VECTOR, "metrics": {"baseScore": 1}}]
            ),
            "critical",
        ),
        # an explicit low word is a rating: NVD's higher one does not override the distribution's
        (
            lambda v, m: (
                v.update(severity="Negligible"),
                m.update(relatedVulnerabilities=[{"id": "CVE-2024-45491", "severity": "Critical"}]),
            ),
            "negligible",
        ),
        (lambda v, m: v.update(severity="Critical "), "critical"),
        (lambda v, m: v.update(severity="CRITICAL"), "critical"),
    ],
)
def test_grype_a_severity_that_rates_nothing_does_not_hide_the_related_rating(
    edit: Callable[[dict[str, Any], dict[str, Any]], Any], want: str
) -> None:
    """Before: a Debian match grype rates "Unknown" (Debian had not assigned an urgency yet) read as unknown,
    which never blocks, though its NVD record in `relatedVulnerabilities` says Critical (9.8)."""
    doc = _grype_doc()
    edit(doc["matches"][0]["vulnerability"], doc["matches"][0])
    (first, _) = vulngate.parse_grype(doc, source="g", digest=RECORDED)
    assert first.severity == want


@pytest.mark.parametrize(
    ("fields", "want"),
    [
        ({"Severity": "UNKNOWN", "CVSS": {"nvd": {"V3Vector": CRITICAL_VECTOR, "V3Score": 9.8}}}, "critical"),
        ({"Severity": "UNKNOWN", "VendorSeverity": {"debian": 0, "nvd": 4}}, "critical"),
        ({"Severity": "UNKNOWN", "VendorSeverity": {"nvd": 99, "x": "4", "y": True}}, "unknown"),
        ({"Severity": "critical"}, "critical"),
        ({"Severity": "LOW", "CVSS": {"nvd": {"V3Vector": CRITICAL_VECTOR}}}, "low"),
    ],
)
def test_trivy_a_severity_that_rates_nothing_falls_back_to_its_cvss_and_vendors(
    fields: dict[str, Any], want: str
) -> None:
    findings = vulngate.parse_trivy(_trivy_vuln(**fields), source="t", digest=RECORDED)
    assert findings[0].severity == want


def test_an_osv_word_that_rates_nothing_does_not_hide_the_cvss_vector(tmp_path: Path) -> None:
    """Before: `database_specific.severity = "UNKNOWN"` (or Ubuntu's "untriaged") ended the search: the
    record's CVSS 9.8 vector was never read and the advisory never blocked."""
    recs = []
    for n, word in enumerate(("UNKNOWN", "")):
        recs.append(
            {
                "id": f"PYSEC-2099-{n}",
                "affected": [
                    {
                        "package": {"ecosystem": "PyPI", "name": "jinja2"},
                        "ranges": [
                            {"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": "3.1.3"}]}
                        ],
                    }
                ],
                "database_specific": {"severity": word},
                "severity": [
                    {"type": "Ubuntu", "score": "untriaged"},
                    {"type": "CVSS_V3", "score": CRITICAL_VECTOR},
                ],
            }
        )
    found = _osv_gate(tmp_path, recs, fail_on="critical")
    assert sorted((f.id, f.severity) for f in found) == [
        ("PYSEC-2099-0", "critical"),
        ("PYSEC-2099-1", "critical"),
    ]


def test_a_trivy_report_that_never_scanned_the_os_packages_is_refused(tmp_path: Path) -> None:
    """Before: `trivy image --pkg-types library` (or `--scanners secret`, or a Debian release trivy's database
    does not cover) wrote no os-pkgs result; the gate read that as "no OS advisories" and released the cell
    with its critical libexpat1 unscanned."""
    doc: dict[str, Any] = json.loads((DATA / "trivy.json").read_text())
    doc["Results"] = [r for r in doc["Results"] if r["Class"] != "os-pkgs"]
    d = tmp_path / "scans"
    d.mkdir()
    f = d / f"{vulngate.digest_stem(RECORDED)}.trivy.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(
        ConfigError, match=r"found the OS \(debian 12\.7\) but has no result for its packages"
    ) as err:
        vulngate.gate([d], RECORDED, vulngate.Policy(fail_on="critical"), today=TODAY)
    assert str(f) in err.value.message


def test_a_trivy_report_whose_os_packages_were_scanned_clean_is_read() -> None:
    doc: dict[str, Any] = json.loads((DATA / "trivy.json").read_text())
    doc["Results"][0].pop("Vulnerabilities")  # scanned, clean
    findings = vulngate.parse_trivy(doc, source="t", digest=RECORDED)
    assert "requests" in {f.package for f in findings}


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        # issue 34: each of these passed as a clean scan
        (lambda doc: doc["Results"][0].pop("Class"), "Results[0] has no Class"),
        (lambda doc: (doc["Metadata"].pop("OS"), doc["Results"].pop(0)), "names no OS (Metadata.OS.Family)"),
        (lambda doc: doc["Metadata"].pop("OS"), "names no OS"),
        (lambda doc: doc.pop("Results"), "has no Results: trivy scanned nothing"),
        (lambda doc: doc.update(Results=[]), "has no Results"),
    ],
)
def test_a_trivy_report_that_scanned_no_os_packages_is_refused(
    edit: Callable[[Any], Any], words: str
) -> None:
    doc: dict[str, Any] = json.loads((DATA / "trivy.json").read_text())
    edit(doc)
    with pytest.raises(ConfigError, match=re.escape(words)):
        vulngate.parse_trivy(doc, source="t", digest=RECORDED)
    # the correct report is read
    assert vulngate.parse_trivy(json.loads((DATA / "trivy.json").read_text()), source="t", digest=RECORDED)


@pytest.mark.parametrize(
    "named", [RECORDED + "00", "x" + RECORDED, RECORDED.upper().replace("SHA256", "sha256")]
)
def test_a_report_naming_a_longer_hex_run_that_starts_with_the_digest_is_not_about_it(
    tmp_path: Path, named: str
) -> None:
    """Before: `sha256:<candidate>00` (66 hex) read as the candidate: its first 64 hex matched."""
    doc = _grype_doc()
    doc["source"]["target"]["manifestDigest"] = named
    doc["source"]["target"]["repoDigests"] = [f"127.0.0.1:5000/x@{named}"]
    with pytest.raises(ConfigError, match="names no image digest"):
        _grype_gate(tmp_path, doc)


def test_a_withdrawn_osv_record_does_not_refuse(tmp_path: Path) -> None:
    """Before: a record OSV marks `withdrawn` (published by mistake, or a duplicate of another) still refused
    the cell; only an allowlist entry with a reason and an expiry got it out."""
    live = _deb("DEBIAN-CVE-2099-1", "openssl", [{"introduced": "0"}, {"fixed": "3.0.13-1~deb12u1"}])
    gone = {
        **_deb("DEBIAN-CVE-2099-2", "openssl", [{"introduced": "0"}]),
        "withdrawn": "2026-11-01T00:00:00Z",
    }
    assert [f.id for f in _osv_gate(tmp_path, [live, gone])] == ["DEBIAN-CVE-2099-1"]


def _cdx(tmp_path: Path, components: list[dict[str, Any]]) -> Path:
    doc = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "metadata": {"component": {"type": "container", "name": "img", "version": RECORDED}},
        "components": components,
    }
    d = tmp_path / "scans"
    d.mkdir(exist_ok=True)
    (d / f"{vulngate.digest_stem(RECORDED)}.cdx.json").write_text(json.dumps(doc))
    (tmp_path / "osv.json").write_text(
        json.dumps([_deb("DEBIAN-CVE-2099-7", "openssl", [{"introduced": "0"}])])
    )
    return d


def test_a_cyclonedx_sboms_nested_components_are_matched(tmp_path: Path) -> None:
    """Before: only top-level `components` were read: a package nested inside another component (cdxgen,
    trivy and others nest an application's packages so) was never matched."""
    d = _cdx(
        tmp_path,
        [
            {"type": "library", "name": "x", "purl": "pkg:pypi/x@1"},
            {
                "type": "operating-system",
                "name": "debian",
                "components": [
                    {"type": "library", "name": "libssl3", "purl": SYFT_PURLS[0]},
                ],
            },
        ],
    )
    policy = _policy(tmp_path, 'fail_on = "high"\nosv = "osv.json"\n')
    _, reasons = vulngate.gate([d], RECORDED, policy, today=TODAY)
    assert len(reasons) == 1
    assert "libssl3 (source openssl) 3.0.11-1~deb12u2: DEBIAN-CVE-2099-7" in reasons[0]


@pytest.mark.parametrize(
    ("purls", "expect"),
    [
        # an Alpine (or RPM) image: before, none of its OS packages was compared, and the cell passed
        (
            ["pkg:apk/alpine/openssl@3.1.4-r0?distro=alpine-3.19", "pkg:pypi/x@1"],
            "OS package(s) the OSV match",
        ),
        (["pkg:rpm/redhat/openssl@3.0.7-25.el9?distro=rhel-9.3"], "OS package(s) the OSV match"),
        (["pkg:deb/raspbian/openssl@3.0.11-1"], "OS package(s) the OSV match"),
        # nothing the match reads at all: before, "no advisory"
        ([], "lists no Debian, Ubuntu or PyPI package"),
        (["pkg:golang/example.com/x@v1.0.0"], "lists no Debian, Ubuntu or PyPI package"),
    ],
)
def test_an_sbom_the_osv_match_cannot_read_is_refused_not_passed(
    tmp_path: Path, purls: list[str], expect: str
) -> None:
    d = _cdx(tmp_path, [{"type": "library", "name": u, "purl": u} for u in purls])
    policy = _policy(tmp_path, 'fail_on = "high"\nosv = "osv.json"\n')
    with pytest.raises(ConfigError, match=re.escape(expect)) as err:
        vulngate.gate([d], RECORDED, policy, today=TODAY)
    assert f"{vulngate.digest_stem(RECORDED)}.cdx.json" in err.value.message


def test_an_unrated_debian_record_is_rated_by_the_cve_record_it_names_in_the_same_file(
    tmp_path: Path,
) -> None:
    """Before: Debian's records (DEBIAN-CVE-…, DSA-…) carry no severity and read as unknown, which never
    blocks: with an SBOM × OSV gate no Debian advisory could ever refuse a cell, even with the CVE's own
    record (CVSS 9.8) in the same OSV file."""
    debian = _deb("DEBIAN-CVE-2099-5", "openssl", [{"introduced": "0"}, {"fixed": "3.0.13-1~deb12u1"}])
    del debian["database_specific"]
    debian["upstream"] = ["CVE-2099-5"]
    cve = {"id": "CVE-2099-5", "severity": [{"type": "CVSS_V3", "score": CRITICAL_VECTOR}], "affected": []}
    (found,) = _osv_gate(tmp_path, [debian, cve], fail_on="critical")
    assert (found.id, found.severity) == ("DEBIAN-CVE-2099-5", "critical")
    # without it: unknown, as before (nothing rates it)
    assert _osv_gate(tmp_path, [debian], fail_on="low") == []
    # a withdrawn CVE record rates nothing
    assert _osv_gate(tmp_path, [debian, {**cve, "withdrawn": "2026-01-01T00:00:00Z"}], fail_on="low") == []
