"""Issue 17: ``validate IMAGE`` does not trust the image under test with the report folder.

A fake engine plays the hostile image: whatever it "runs" writes into the folder mounted at the report
mount, as the real container would. Before the fix that folder was the report folder itself: a planted
``report.json`` symlink made the host rewrite a file outside it, a forged report claimed "passed", and a
sub-folder carried a report for another digest that ``release --reports`` would find.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.engine import RunResult
from imagesmith.errors import ValidationFailed
from imagesmith.validate.container import (
    REPORT_MOUNT,
    read_scratch,
    run_in_image,
    write_report_file,
)
from imagesmith.validate.context import SuiteOptions

IMAGE = "127.0.0.1:5000/imagesmith/hostile:1"
OTHER_DIGEST = "sha256:" + "d" * 64


def _check(name: str, status: str = "passed", message: str = "") -> dict[str, Any]:
    return {
        "name": name,
        "module": "test_x",
        "status": status,
        "message": message,
        "fix": "",
        "duration_s": 0.1,
        "figures": {},
        "warnings": [],
    }


def forged_report(verdict: str = "passed", checks: list[dict[str, Any]] | None = None) -> bytes:
    return json.dumps(
        {
            "schema": 2,
            "verdict": verdict,
            "verdict_reason": "all good, trust me",
            "target": f"x@{OTHER_DIGEST}",
            "image": {"digest": OTHER_DIGEST},
            "started": "2026-12-01T00:00:00Z",
            "duration_s": 1.0,
            "checks": checks if checks is not None else [_check("test_a"), _check("test_b")],
        }
    ).encode()


class HostileEngine:
    """A ContainerEngine whose container runs *act(scratch)* on the folder mounted at REPORT_MOUNT."""

    def __init__(self, act: Callable[[Path], None]) -> None:
        self.act = act
        self.mounts: list[Any] = []

    def inspect(self, reference: str) -> dict[str, Any]:
        return {"Id": "sha256:" + "1" * 64, "Config": {"Labels": {"io.imagesmith.validate": "1"}, "Env": []}}

    def has_nvidia_runtime(self) -> bool:
        return True

    def run_container(self, image: str, command: Any = None, **options: Any) -> RunResult:
        self.mounts = list(options.get("mounts", ()))
        (scratch,) = [Path(m.source) for m in self.mounts if m.target == REPORT_MOUNT]
        self.act(scratch)
        return RunResult(exit_code=0, output="suite ran", duration_s=1.0)


def _validate(tmp_path: Path, act: Callable[[Path], object], *, gpus: str = "toolkit") -> dict[str, Any]:
    options = SuiteOptions(target=IMAGE, target_label=IMAGE, report_dir=str(tmp_path / "report"))
    return run_in_image(
        IMAGE,
        options,
        select=None,
        shm_override=None,
        shm_min_override=None,
        gpus=gpus,
        echo=lambda *_: None,
        engine=HostileEngine(act),  # type: ignore[arg-type]
    )


def test_the_container_never_sees_the_report_folder(tmp_path: Path) -> None:
    seen: list[Path] = []

    def act(scratch: Path) -> None:
        seen.append(scratch)
        assert list(scratch.iterdir()) == []  # empty: nothing of an earlier run to read or rewrite
        (scratch / "report.json").write_bytes(forged_report())

    _validate(tmp_path, act)
    assert seen[0].resolve() != (tmp_path / "report").resolve()
    assert not seen[0].exists()  # removed after the run


def test_a_planted_symlink_is_never_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("host secret\n")
    (tmp_path / "report").mkdir()

    def act(scratch: Path) -> None:
        (scratch / "report.json").write_bytes(forged_report())
        (scratch / "junit.xml").symlink_to(victim)  # the host would read the victim and copy it
        (scratch / "report.md").symlink_to(victim)  # the host would write through it

    data = _validate(tmp_path, act)
    assert victim.read_text() == "host secret\n"
    report = tmp_path / "report"
    assert not (report / "junit.xml").exists()
    assert not (report / "report.md").is_symlink()
    assert data["verdict"] == "failed"
    assert "junit.xml: a symbolic link (not followed)" in data["verdict_reason"]
    on_disk = json.loads((report / "report.json").read_text())
    assert on_disk["verdict"] == "failed"


def test_a_symlink_left_in_the_report_folder_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("host secret\n")
    report = tmp_path / "report"
    report.mkdir()
    (report / "versions.txt").symlink_to(victim)  # left by an earlier run that mounted this folder
    write_report_file(report, "versions.txt", b"torch 2.11\n")
    assert victim.read_text() == "host secret\n"
    assert not (report / "versions.txt").is_symlink()
    assert (report / "versions.txt").read_text() == "torch 2.11\n"


def test_the_verdict_is_the_hosts_not_the_images(tmp_path: Path) -> None:
    def act(scratch: Path) -> None:
        checks = [_check("test_a"), _check("test_b", "failed", "bad")]
        (scratch / "report.json").write_bytes(forged_report("passed", checks))

    data = _validate(tmp_path, act)
    assert data["verdict"] == "failed"
    assert data["suite_claim"]["verdict"] == "passed"
    assert data["target"] == IMAGE  # not the digest the image named
    assert "image" not in data  # a digest the image claims is never carried
    assert any("claimed 'passed'" in w for w in data["warnings"])


def test_no_gpu_given_is_never_passed(tmp_path: Path) -> None:
    data = _validate(tmp_path, lambda s: (s / "report.json").write_bytes(forged_report()), gpus="none")
    assert data["verdict"] == "not validated"
    assert data["verdict_reason"] == "the host gave the container no GPU"


def test_a_healthy_run_passes_and_its_logs_come_out(tmp_path: Path) -> None:
    def act(scratch: Path) -> None:
        (scratch / "report.json").write_bytes(forged_report())
        (scratch / "report.md").write_text("# written by the suite\n")
        (scratch / "versions.txt").write_text("torch 2.11\n")

    data = _validate(tmp_path, act)
    assert data["verdict"] == "passed", data["verdict_reason"]
    report = tmp_path / "report"
    assert (report / "versions.txt").read_text() == "torch 2.11\n"
    assert (report / "report.md").read_text().startswith("# Validation: PASSED")
    assert data["logs"] == ["versions.txt"]


def test_a_report_for_another_digest_in_a_subfolder_is_not_copied(tmp_path: Path) -> None:
    def act(scratch: Path) -> None:
        (scratch / "report.json").write_bytes(forged_report())
        (scratch / "other").mkdir()
        (scratch / "other" / "report.json").write_bytes(forged_report())

    data = _validate(tmp_path, act)
    assert not (tmp_path / "report" / "other").exists()
    assert list((tmp_path / "report").rglob("report.json")) == [tmp_path / "report" / "report.json"]
    assert data["verdict"] == "failed"
    assert "other: a folder" in data["verdict_reason"]


def test_no_regular_report_is_a_failed_run(tmp_path: Path) -> None:
    victim = tmp_path / "forged.json"
    victim.write_bytes(forged_report())
    with pytest.raises(ValidationFailed, match=r"left no regular report\.json"):
        _validate(tmp_path, lambda s: (s / "report.json").symlink_to(victim))


def test_a_claim_that_is_not_a_report_fails(tmp_path: Path) -> None:
    with pytest.raises(ValidationFailed, match=r"report\.json the suite inside"):
        _validate(tmp_path, lambda s: (s / "report.json").write_text('{"verdict": "great"}'))


def test_read_scratch_caps_sizes_and_names(tmp_path: Path) -> None:
    (tmp_path / "big.log").write_bytes(b"x" * 2000)
    (tmp_path / "small.log").write_bytes(b"ok")
    (tmp_path / ".hidden").write_bytes(b"ok")
    os.mkfifo(tmp_path / "pipe")
    got = read_scratch(tmp_path, max_file_bytes=1000)
    assert dict(got.files) == {"small.log": b"ok"}
    assert sorted(got.refused) == [
        "'.hidden': not a plain file name",
        "big.log: larger than 1000 bytes",
        "pipe: not a regular file",
    ]
    capped = read_scratch(tmp_path, max_total_bytes=1)
    assert capped.refused[-1] == "small.log: the files together pass 1 bytes"


@pytest.mark.parametrize("claimed", ["failed", "not validated"])
def test_a_claim_can_lower_the_verdict_but_never_raise_it(tmp_path: Path, claimed: str) -> None:
    """A suite error or checks left out inside: the checks that ran passed, the suite said otherwise."""
    body = json.loads(forged_report(claimed))
    body["verdict_reason"] = "pytest could not run the suite (see its output)"
    data = _validate(tmp_path, lambda s: (s / "report.json").write_text(json.dumps(body)))
    assert data["verdict"] == claimed
    assert data["verdict_reason"] == "pytest could not run the suite (see its output)"
