"""Reading validation reports (report.json of ``imagesmith validate``): digest, verdict, host, failures."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError
from imagesmith.release import collect_reports, read_report
from imagesmith.tags import attestation_tag

D = "sha256:" + "d" * 64


def write(path: Path, doc: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def inventory(n: int = 8, name: str = "NVIDIA H100 80GB HBM3", driver: str = "570.133.20") -> dict[str, Any]:
    gpus = [{"index": i, "name": name, "driver": driver} for i in range(n)]
    return {"name": "test_gpu_inventory", "status": "passed", "figures": {"count": n, "gpus": gpus}}


def test_passing_report_by_target_digest(tmp_path: Path) -> None:
    doc = {
        "schema": 1,
        "verdict": "passed",
        "target": f"ghcr.io/acme/torch:x-candidate@{D}",
        "started": "2026-11-29T01:02:03Z",
        "checks": [inventory()],
    }
    r = read_report(write(tmp_path / "report.json", doc))
    assert r.digest == D
    assert r.passed
    assert r.host_known
    v = r.validated_on()
    assert (v.gpu, v.count, v.driver, v.date) == (
        "NVIDIA H100 80GB HBM3",
        8,
        "570.133.20",
        "2026-11-29T01:02:03Z",
    )
    assert v.report_digest == r.sha != D


def test_image_digest_key_wins_over_target(tmp_path: Path) -> None:
    other = "sha256:" + "e" * 64
    doc = {
        "verdict": "passed",
        "target": f"x@{other}",
        "image": {"reference": "x", "digest": D},
        "checks": [],
    }
    assert read_report(write(tmp_path / "report.json", doc)).digest == D


def test_target_without_digest_has_none(tmp_path: Path) -> None:
    doc = {"verdict": "passed", "target": "ghcr.io/acme/torch:latest", "checks": [inventory()]}
    assert read_report(write(tmp_path / "report.json", doc)).digest is None


def test_failed_checks_are_named(tmp_path: Path) -> None:
    doc = {
        "verdict": "failed",
        "target": f"x@{D}",
        "checks": [
            inventory(),
            {"name": "test_shm_size", "status": "failed", "message": "/dev/shm is 64M < 1g\nmore"},
        ],
    }
    r = read_report(write(tmp_path / "report.json", doc))
    assert not r.passed
    assert r.failed == ("test_shm_size: /dev/shm is 64M < 1g",)


def test_no_inventory_means_host_unknown(tmp_path: Path) -> None:
    r = read_report(write(tmp_path / "report.json", {"verdict": "passed", "target": f"x@{D}", "checks": []}))
    assert not r.host_known


@pytest.mark.parametrize(
    ("content", "expect"),
    [("{nope", "not JSON"), ("[]", "no 'verdict' key"), ('{"target": "x"}', "no 'verdict' key")],
)
def test_bad_reports(tmp_path: Path, content: str, expect: str) -> None:
    path = write(tmp_path / "r" / "report.json", content)
    with pytest.raises(ConfigError, match=expect) as err:
        read_report(path)
    assert str(path) in str(err.value)


def test_collect_walks_folders(tmp_path: Path) -> None:
    for i in range(3):
        write(tmp_path / f"cell{i}" / "gpu" / "report.json", {"verdict": "passed", "target": f"x@{D}"})
    write(tmp_path / "cell0" / "notes.json", {"verdict": "ignored"})
    # a validate run's temp folder and the bundle a rerun set aside (issue 37 item 5) are not read
    write(
        tmp_path / "cell1" / ".gpu.tmp-4242-0a1b" / "report.json", {"verdict": "passed", "target": f"x@{D}"}
    )
    write(tmp_path / ".cell2.old-4242-0a1b" / "report.json", {"verdict": "passed", "target": f"x@{D}"})
    found = collect_reports([tmp_path])
    assert len(found) == 3
    # a report file alone is never evidence, whatever it claims
    assert all(not r.evidence and r.digest == D and "not signed" in str(r.problem) for r in found)
    with pytest.raises(ConfigError, match="no such folder"):
        collect_reports([tmp_path / "absent"])


def test_attestation_tag() -> None:
    assert attestation_tag(D) == "sha256-" + "d" * 64 + ".validation"


def test_schema_2_carries_the_inventory_as_a_field(tmp_path: Path) -> None:
    gpus = [
        {"index": i, "name": "NVIDIA H200", "driver": "580.159.04", "memory_mib": 143771} for i in range(2)
    ]
    doc = {
        "schema": 2,
        "verdict": "passed",
        "target": f"img@{D}",
        "started": "2026-11-30T00:00:00Z",
        "gpus": gpus,
    }
    r = read_report(write(tmp_path / "report.json", doc))
    assert (r.gpu, r.gpu_count, r.driver) == ("NVIDIA H200", 2, "580.159.04")
    # schema 2 never looks the inventory up by a check's name
    doc2 = {"schema": 2, "verdict": "passed", "target": f"img@{D}", "checks": [inventory()]}
    assert not read_report(write(tmp_path / "r2.json", doc2)).host_known


def test_unknown_report_schema_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="report schema 4 is not one this imagesmith reads") as info:
        read_report(write(tmp_path / "report.json", {"schema": 4, "verdict": "passed"}))
    assert "fix:" in str(info.value)


def test_the_suite_writes_schema_3_with_its_gpu_facts_and_verdict_cause(tmp_path: Path) -> None:
    import time

    from imagesmith.validate.context import SuiteOptions
    from imagesmith.validate.criteria import Gpu
    from imagesmith.validate.facts import GpuFacts
    from imagesmith.validate.report import write_bundle

    gpu = Gpu(
        index=0,
        name="NVIDIA H200",
        uuid="GPU-1",
        bus_id="00000000:01:00.0",
        driver="580.159.04",
        memory_mib=143771,
    )
    options = SuiteOptions(target="local://", report_dir=str(tmp_path))
    now = time.time()
    write_bundle(
        options, [], facts={"gpus": GpuFacts(visible=True, gpus=[gpu])}, logs=[], started=now, finished=now
    )
    r = read_report(tmp_path / "report.json")
    written = json.loads((tmp_path / "report.json").read_text())
    assert (written["schema"], written["verdict"], written["verdict_cause"]) == (
        3,
        "not validated",
        "no-check",
    )
    assert (r.gpu, r.gpu_count, r.driver) == ("NVIDIA H200", 1, "580.159.04")
