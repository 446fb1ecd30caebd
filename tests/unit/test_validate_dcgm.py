"""The DCGM tier and the listing through the real suite (issue 33): ``imagesmith validate local://`` with the
fake ``nvidia-smi`` of test_validate_host_faults (the real 2×H200 capture) and a fake ``dcgmi`` that prints a
recorded document; and the DCGM parser on both document shapes (tests/data/dcgm/README.md)."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.validate.dcgm import FAIL, PASS, SKIP, UNKNOWN, WARN, judge_dcgm, parse_dcgm
from imagesmith.validate.suite.test_02_dcgm import dcgm_level
from tests.repo import REPO
from tests.unit.test_validate_host_faults import FAKE_DMESG, FAKE_SMI, FAULTS, H200, NVLINK_UP

DCGM = REPO / "tests" / "data" / "dcgm"


def test_dcgm3_document_with_its_banner() -> None:
    run = parse_dcgm((DCGM / "dcgm3-r1-pass.txt").read_text())
    assert (run.version, run.driver) == ("3.3.9", "580.159.04")
    assert len(run.results) == 7
    assert {r.status for r in run.results} == {PASS}
    assert [r.gpu for r in run.results if r.test == "PCIe"] == ["0", "1"]
    verdict = judge_dcgm(run, level=1)
    assert verdict.failures == []
    assert verdict.warnings == []


def test_dcgm4_document_fails_naming_test_gpu_and_dcgms_words() -> None:
    run = parse_dcgm((DCGM / "dcgm4-r3-fail.json").read_text())
    assert (run.version, run.driver) == ("4.2.3", "580.159.04")
    by = {(r.test, r.gpu): r.status for r in run.results}
    assert by[("memory", "1")] == FAIL
    assert by[("pcie", "0")] == SKIP
    assert by[("targeted_power", "0")] == WARN
    assert by[("targeted_power", "1")] == UNKNOWN
    verdict = judge_dcgm(run, level=3)
    (failure,) = verdict.failures
    assert failure == (
        "DCGM level 3 memory on GPU 1 failed: A double-bit ECC error was found on GPU 1 during the memory "
        "test."
    )
    assert any("targeted_power on GPU 0 warned: GPU 0 reached 640 W" in w for w in verdict.warnings)
    assert any(
        "'Inconclusive' is not one imagesmith knows (not read as a pass)" in w for w in verdict.warnings
    )


@pytest.mark.parametrize(
    "text", ["", "Error: unable to connect to host engine", "{not json", "[1, 2]", '{"other": {}}']
)
def test_no_dcgm_document_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match=r"dcgmi|DCGM"):
        parse_dcgm(text)


def test_an_empty_run_fails() -> None:
    run = parse_dcgm('{"DCGM GPU Diagnostic": {"test_categories": []}}')
    assert judge_dcgm(run, level=1).failures == ["dcgmi diag -r 1 reported no test result"]


def test_the_level_follows_the_soak() -> None:
    assert dcgm_level(0.0, -1) == 1
    assert dcgm_level(600.0, -1) == 3
    assert dcgm_level(600.0, 2) == 2
    assert dcgm_level(0.0, 0) == 0


FAKE_DCGMI = """#!/bin/sh
echo "$@" >> "@DIR@/dcgmi.args"
cat "@DIR@/dcgmi.out"
exit 226
"""


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The healthy 2×H200 capture (as test_validate_host_faults builds it) and, where a test writes
    dcgmi.out, a dcgmi that prints it."""
    d = tmp_path / "host"
    d.mkdir()
    shutil.copy(H200 / "nvidia-smi.txt", d / "default")
    shutil.copy(H200 / "nvidia-smi-L.txt", d / "L")
    shutil.copy(H200 / "topo-m.txt", d / "topo-m")
    shutil.copy(H200 / "topo-p2p-n.txt", d / "topo-p2p-n")
    shutil.copy(FAULTS / "h200x2-query-health.csv", d / "query")
    (d / "nvlink-s").write_text(NVLINK_UP)
    (d / "dmesg").write_text("")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("nvidia-smi", FAKE_SMI), ("dmesg", FAKE_DMESG)):
        script = bin_dir / name
        script.write_text(text.replace("@DIR@", str(d)))
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin")
    return d


def _with_dcgmi(host: Path, document: Path) -> None:
    shutil.copy(document, host / "dcgmi.out")
    script = host.parent / "bin" / "dcgmi"
    script.write_text(FAKE_DCGMI.replace("@DIR@", str(host)))
    script.chmod(0o755)


def _validate(run_cli: Callable[..., Any], tmp_path: Path, *args: str) -> tuple[Any, dict[str, Any], str]:
    report = tmp_path / "report"
    r = run_cli("validate", "local://", *args, "--report", str(report))
    data = json.loads((report / "report.json").read_text())
    return r, {c["name"]: c for c in data["checks"]}, (report / "report.md").read_text()


def test_a_failing_dcgm_level_fails_the_suite(
    host: Path, run_cli: Callable[..., Any], tmp_path: Path
) -> None:
    _with_dcgmi(host, DCGM / "dcgm4-r3-fail.json")
    r, checks, md = _validate(run_cli, tmp_path, "-k", "test_dcgm_diag", "--dcgm-level", "3")
    assert r.exit_code == 7
    c = checks["test_dcgm_diag"]
    assert c["status"] == "failed"
    assert "DCGM level 3 memory on GPU 1 failed: A double-bit ECC error" in c["message"]
    assert (host / "dcgmi.args").read_text().strip() == "diag -r 3 -j"
    assert "dcgm-diag.txt" in (tmp_path / "report" / "report.json").read_text()
    assert c["message"] in md


def test_a_passing_dcgm_level_1_passes(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    _with_dcgmi(host, DCGM / "dcgm3-r1-pass.txt")
    _, checks, _ = _validate(run_cli, tmp_path, "-k", "test_dcgm_diag")
    assert checks["test_dcgm_diag"]["status"] == "passed"
    assert checks["test_dcgm_diag"]["figures"]["version"] == "3.3.9"
    assert (host / "dcgmi.args").read_text().strip() == "diag -r 1 -j"


def test_no_dcgmi_is_said_not_silent(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    _, checks, md = _validate(run_cli, tmp_path, "-k", "test_dcgm_diag or test_gpu_inventory")
    c = checks["test_dcgm_diag"]
    assert c["status"] == "skipped"
    assert "dcgmi is not on this host: the DCGM tier (dcgmi diag -r 1) did not run" in c["message"]
    assert "dcgmi is not on this host" in md


def test_a_listing_judged_through_the_suite(host: Path, run_cli: Callable[..., Any], tmp_path: Path) -> None:
    """The real 2×H200 capture against a listing: NVLink and the model kept, 8 GPUs broken — and the same
    promise fails test_gpu_inventory (the flags' code path), listed first in report.md."""
    listing = tmp_path / "listing.toml"
    listing.write_text(
        '[gpu]\nmodel = "H200"\ncount = 8\nmemory = "141 GB"\ninterconnect = "nvlink"\ndriver = "580"\n'
    )
    r, checks, md = _validate(
        run_cli,
        tmp_path,
        "--listing",
        str(listing),
        "-k",
        "test_gpu_inventory or test_topology or test_listing",
    )
    assert r.exit_code == 7
    rows = {row["promise"]: row["verdict"] for row in checks["test_listing"]["figures"]["promises"]}
    assert rows == {
        "gpu.model": "kept",
        "gpu.count": "broken",
        "gpu.memory": "kept",
        "gpu.interconnect": "kept",
        "gpu.driver": "kept",
    }
    assert (
        "1 of 5 promise(s) broken: gpu.count: promised 8, measured 2 GPU(s)"
        in checks["test_listing"]["message"]
    )
    assert "expected 8 GPUs, nvidia-smi shows 2" in checks["test_gpu_inventory"]["message"]
    assert checks["test_topology"]["status"] == "passed"
    assert md.index("## Promised vs measured") < md.index("- target:")
    assert md.index("## Promised vs measured") < md.index("## Failures and fixes")
