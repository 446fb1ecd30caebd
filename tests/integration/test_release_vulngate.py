"""The vulnerability gate of ``imagesmith release`` against the real local registries (issue 26).

A validated cell whose recorded scan (tests/data/vuln/, grype's and trivy's JSON, rewritten to the candidate's
digest as the scanner would name it) carries a critical advisory is refused, naming package, installed
version, advisory, severity and fixed version; allowlisted with a future expiry it is released and the index
entry records the allowlisted advisory; with an expired entry it is refused again. No internet: the reports
are recorded.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import vulngate
from imagesmith.index import load_index
from imagesmith.release import Outcome, collect_reports, release_cells, vulnerability_gate
from tests.integration.test_release import (
    KEY,
    TRUSTED,
    cell,
    clients_for,
    push_image,
    smoke_labels,
    smoke_setup,
    targets,
    write_report,
)
from tests.localinfra import LocalRegistries, local_registries

pytestmark = pytest.mark.registry

DATA = Path(__file__).parent.parent / "data" / "vuln"
RECORDED = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def _project(tmp_path: Path, allowlist: str = "") -> Path:
    f = tmp_path / "imagesmith.toml"
    f.write_text('[release.vulnerabilities]\nfail_on = "high"\n' + allowlist)
    return f


def _scan(folder: Path, digest: str, kind: str, image: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    text = (DATA / f"{kind}.json").read_text().replace(RECORDED, digest)
    text = text.replace("127.0.0.1:5000/imagesmith-test/torch", image)
    path = folder / f"{vulngate.digest_stem(digest)}.{kind}.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("kind", ["grype", "trivy"])
def test_critical_refused_allowlisted_released_expired_refused(
    regs: LocalRegistries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    repo = f"imagesmith-test/vulngate-{uuid.uuid4().hex[:10]}"
    digest = push_image(regs.plain_client(), repo, "v-candidate", f"vulnerable {repo}")
    write_report(tmp_path / "reports" / "v", f"{regs.plain}/{repo}@{digest}", "passed")
    reports = collect_reports([tmp_path / "reports"], TRUSTED)
    scans = tmp_path / "scans"
    report = _scan(scans, digest, kind, f"{regs.plain}/{repo}")
    cells = [cell("v", targets(regs, repo))]
    index_file = tmp_path / "index.json"
    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-12-01")

    def release(project: Path) -> Outcome:
        return release_cells(
            cells,
            matrix="t",
            reports=reports,
            index_file=index_file,
            client_for=clients_for(regs),
            trusted=TRUSTED,
            gate=vulnerability_gate([scans], project),
        )

    # 1. the critical advisory refuses the validated cell: nothing is tagged
    out = release(_project(tmp_path))
    (res,) = out.cells
    assert res.status == "refused", res.reasons
    assert res.reasons[0].startswith(
        "vulnerability libexpat1 2.5.0-1: CVE-2024-45491 (critical, fixed in 2.5.0-1+deb12u1) is at or above "
        "fail_on = 'high'"
    )
    assert str(report) in res.reasons[0]
    assert regs.plain_client().manifest_digest(repo, "v") is None
    assert regs.auth_client().manifest_digest(repo, "v") is None
    assert not index_file.exists()

    # 2. an expired allowlist entry counts as none, and the refusal says it expired
    expired = (
        "[[release.vulnerabilities.allowlist]]\n"
        'id = "CVE-2024-45491"\nreason = "the image parses no untrusted XML"\nexpires = "2026-11-30"\n'
    )
    (res,) = release(_project(tmp_path, expired)).cells
    assert res.status == "refused"
    assert "its allowlist entry expired on 2026-11-30" in res.reasons[0]
    assert regs.plain_client().manifest_digest(repo, "v") is None

    # 3. allowlisted until a future date: released, and the index says which advisory was let through
    future = expired.replace("2026-11-30", "2027-01-31")
    out = release(_project(tmp_path, future))
    (res,) = out.cells
    assert res.status == "promoted", res.reasons
    assert regs.auth_client().manifest_digest(repo, "v") == digest
    entry = load_index(index_file).images[0]
    assert entry.vulnerabilities is not None
    assert entry.vulnerabilities.allowlisted == ("CVE-2024-45491",)
    assert entry.vulnerabilities.scanner == kind
    assert entry.vulnerabilities.report == report.name
    assert entry.vulnerabilities.fail_on == "high"
    assert entry.vulnerabilities.report_digest.startswith("sha256:")


def test_scan_of_another_digest_refuses_naming_the_file(
    regs: LocalRegistries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = f"imagesmith-test/vulngate-{uuid.uuid4().hex[:10]}"
    digest = push_image(regs.plain_client(), repo, "w-candidate", f"other {repo}")
    write_report(tmp_path / "reports" / "w", f"{regs.plain}/{repo}@{digest}", "passed")
    scans = tmp_path / "scans"
    path = _scan(scans, RECORDED, "grype", f"{regs.plain}/{repo}")  # a scan of another image…
    renamed = path.with_name(f"{vulngate.digest_stem(digest)}.grype.json")  # …filed under this digest
    path.rename(renamed)
    out = release_cells(
        [cell("w", targets(regs, repo))],
        matrix="t",
        reports=collect_reports([tmp_path / "reports"], TRUSTED),
        index_file=tmp_path / "index.json",
        client_for=clients_for(regs),
        trusted=TRUSTED,
        gate=vulnerability_gate([scans], _project(tmp_path)),
    )
    (res,) = out.cells
    assert res.status == "refused"
    assert (
        f"scan report {renamed}: is a scan of {RECORDED}, not of the candidate digest {digest}"
        in res.reasons[0]
    )
    assert "(fix: " in res.reasons[0]
    assert regs.plain_client().manifest_digest(repo, "w") is None


def test_cli_release_scan_reports(
    regs: LocalRegistries,
    tmp_path: Path,
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real command: --scan-reports turns the gate on (fail_on critical without a policy table); a
    critical advisory is exit 8 naming it, a clean scan releases and the index records the scan; a rerun
    without --scan-reports keeps the record."""
    repo = f"imagesmith-test/vulngate-{uuid.uuid4().hex[:10]}"
    matrix, registries, cid = smoke_setup(regs, repo, tmp_path, monkeypatch)
    # the labels imagesmith build gives the smoke cell's image (issue 34: release compares them with the plan)
    labels = smoke_labels(matrix, registries)
    digest = push_image(regs.plain_client(), repo, f"{cid}-candidate", f"cli {repo}", labels=labels)
    write_report(tmp_path / "reports" / cid, f"{regs.plain}/{repo}@{digest}", "passed")
    pub = tmp_path / "validation.pub"
    pub.write_bytes(KEY.public.pem)
    index_file = tmp_path / "index.json"
    args = [
        "release", "--matrix", str(matrix), "--registries", str(registries), "--index-file", str(index_file),
        "--trusted-key", str(pub), "--reports", str(tmp_path / "reports"),
    ]  # fmt: skip
    scans = tmp_path / "scans"
    _scan(scans, digest, "trivy", f"{regs.plain}/{repo}")
    res = run_cli(*args, "--scan-reports", str(scans))
    assert res.exit_code == 8
    named = "vulnerability libexpat1 2.5.0-1: CVE-2024-45491 (critical, fixed in 2.5.0-1+deb12u1)"
    assert f"{cid}: refused: {named}" in res.stderr
    assert "Traceback" not in res.stderr
    assert regs.plain_client().manifest_digest(repo, cid) is None

    clean = scans / f"{vulngate.digest_stem(digest)}.trivy.json"
    doc = json.loads(clean.read_text())
    # the OS packages scanned and clean (trivy leaves out an empty Vulnerabilities list), the Python ones
    # with only a medium advisory; a report without the os-pkgs result at all is one that never scanned them
    doc["Results"] = [
        {k: v for k, v in r.items() if k != "Vulnerabilities"} if r["Class"] == "os-pkgs" else r
        for r in doc["Results"]
    ]
    clean.write_text(json.dumps(doc))
    res = run_cli(*args, "--scan-reports", str(scans))
    assert res.exit_code == 0, res.stderr
    assert "vulnerabilities: none at or above critical (trivy report" in res.stdout
    entry = load_index(index_file).images[0]
    assert entry.vulnerabilities is not None
    assert entry.vulnerabilities.allowlisted == ()
    before = index_file.read_bytes()
    res = run_cli(*args)
    assert res.exit_code == 0, res.stderr
    assert index_file.read_bytes() == before
