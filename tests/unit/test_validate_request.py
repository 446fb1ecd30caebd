"""Issue 31: the validate command's layer — a typed request, the flag rules in one place (``prepare``), called
without the CLI."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError
from imagesmith.validate.request import ValidateRequest, prepare


def no_fleet(index: str | None, passed: str | None, source: str) -> tuple[list[dict[str, Any]], str]:
    assert index is None, "the fleet reader is reached only once every other rule held"
    return [], ""


def test_a_request_becomes_the_suites_options(tmp_path: Path) -> None:
    request = ValidateRequest(report=str(tmp_path / "r"), shm_min="8g", expect_count=8, soak="10m")
    p = prepare(request, read_fleet=no_fleet)
    assert (p.target.kind, p.signer, p.subject) == ("local", None, None)
    assert (p.options.shm_min_bytes, p.options.shm_min_source) == (8 * 1024**3, "--shm-min")
    assert (p.options.expect_count, p.options.soak_s, p.options.report_dir) == (8, 600.0, str(tmp_path / "r"))
    assert not (tmp_path / "r").exists()  # the writable probe leaves nothing behind


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        (ValidateRequest(shm_size="8g"), "--shm-size and --gpus apply only when TARGET is an image"),
        (ValidateRequest(ssh_identity="k"), "--ssh-config and --ssh-identity apply only to ssh:// targets"),
        (ValidateRequest(perf_fail_ratio=0.95), "--perf-fail-ratio 0.95 is above --perf-warn-ratio 0.9"),
        (ValidateRequest(soak="90"), "--soak 90: shorter than 2 minutes (a bare number is seconds"),
        (ValidateRequest(nccl_max_bytes="4"), "--nccl-max-bytes 4: below the"),
        (ValidateRequest(label="x@sha256:0123456789ab"), "--label 'x@sha256:0123456789ab' names a digest"),
    ],
)
def test_a_bad_flag_is_one_error_before_the_fleet_is_read(request_: ValidateRequest, says: str) -> None:
    asked: list[str | None] = []

    def reader(index: str | None, passed: str | None, source: str) -> tuple[list[dict[str, Any]], str]:
        asked.append(index)
        return [], ""

    with pytest.raises(ConfigError) as info:
        prepare(replace(request_, baseline_from="index.json"), read_fleet=reader)
    assert info.value.message.startswith(says), info.value.message
    assert asked == []


def test_the_fleet_reader_gets_the_flags_and_its_groups_reach_the_options(tmp_path: Path) -> None:
    groups = [{"gpu": "NVIDIA H200", "count": 1, "link": "", "figures": {"hbm_copy_gbps": 4200.0}}]
    seen: list[tuple[str | None, str | None, str]] = []

    def reader(index: str | None, passed: str | None, source: str) -> tuple[list[dict[str, Any]], str]:
        seen.append((index, passed, source))
        return groups, "index.json"

    request = ValidateRequest(report=str(tmp_path / "r"), baseline_from="index.json")
    p = prepare(request, read_fleet=reader)
    assert seen == [("index.json", None, "")]
    assert (p.options.fleet, p.options.fleet_source) == (groups, "index.json")


def test_the_images_shm_need_counts_on_a_host_target(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("IMAGESMITH_SHM_MIN_BYTES", "2147483648")
    p = prepare(ValidateRequest(report=str(tmp_path / "r")), read_fleet=no_fleet)
    assert (p.options.shm_min_bytes, p.options.shm_min_source) == (
        2147483648,
        "IMAGESMITH_SHM_MIN_BYTES (the image's need)",
    )
    monkeypatch.setenv("IMAGESMITH_SHM_MIN_BYTES", "٣")
    with pytest.raises(ConfigError, match="IMAGESMITH_SHM_MIN_BYTES='٣' is not a number of bytes"):
        prepare(ValidateRequest(report=str(tmp_path / "r")), read_fleet=no_fleet)
