"""Issue 31: the named steps of :func:`imagesmith.validate.container.run_in_image` that carry a rule of their
own, tested directly (test_validate_scratch.py runs the whole of it against hostile images)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagesmith.engine import RunResult
from imagesmith.errors import ConfigError, ValidationFailed
from imagesmith.validate import container
from imagesmith.validate.container import (
    HOST_SIGNED,
    ScratchFiles,
    _claim_bytes,
    _gpu_choice,
    _inspected,
    _unsigned,
)


class Engine:
    def __init__(self, *, runtime: bool, image_id: str | None = "sha256:" + "1" * 64) -> None:
        self.runtime, self.image_id, self.asked = runtime, image_id, 0

    def has_nvidia_runtime(self) -> bool:
        self.asked += 1
        return self.runtime

    def inspect(self, reference: str) -> dict[str, Any] | None:
        return None if self.image_id is None else {"Id": self.image_id}


def test_gpu_choice_gives_gpus_only_where_asked_and_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(container, "Path", lambda _: Path("/nonexistent-dev-folder"))
    assert _gpu_choice("none", Engine(runtime=True)) == (None, "auto")  # type: ignore[arg-type]
    assert _gpu_choice("toolkit", Engine(runtime=False)) == ("all", "toolkit")  # type: ignore[arg-type]
    assert _gpu_choice("devices", Engine(runtime=False)) == ("all", "devices")  # type: ignore[arg-type]
    assert _gpu_choice("auto", Engine(runtime=True)) == ("all", "auto")  # type: ignore[arg-type]
    # auto on a host with neither the NVIDIA runtime nor /dev/nvidiaN: no GPUs, said as none visible
    assert _gpu_choice("auto", Engine(runtime=False)) == (None, "auto")  # type: ignore[arg-type]


def test_inspected_refuses_a_missing_image_and_one_that_moved_before_the_run() -> None:
    assert _inspected(Engine(runtime=False), "img", None)["Id"] == "sha256:" + "1" * 64  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="is not in the Docker engine"):
        _inspected(Engine(runtime=False, image_id=None), "img", None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="it moved before the run; nothing ran"):
        _inspected(Engine(runtime=False), "img", ("sha256:" + "d" * 64, "sha256:" + "2" * 64))  # type: ignore[arg-type]


def test_a_planted_signature_is_dropped_and_refused_with_why() -> None:
    planted = ScratchFiles(files={"report.json": b"{}", HOST_SIGNED: b"sig"}, refused=("x: a link",))
    kept = _unsigned(planted)
    assert dict(kept.files) == {"report.json": b"{}"}
    assert kept.refused == (
        "x: a link",
        f"{HOST_SIGNED}: only the host signs evidence; the suite never writes one",
    )
    clean = ScratchFiles(files={"report.json": b"{}"}, refused=())
    assert _unsigned(clean) is clean


def test_no_report_in_the_scratch_folder_fails_with_the_output_tail_and_what_was_refused() -> None:
    result = RunResult(exit_code=127, output="\n".join(f"line {i}" for i in range(30)), duration_s=1.0)
    assert _claim_bytes(ScratchFiles(files={"report.json": b"{}"}, refused=()), result, "img") == b"{}"
    with pytest.raises(ValidationFailed) as err:
        _claim_bytes(ScratchFiles(files={}, refused=("report.json: a symbolic link",)), result, "img")
    text = str(err.value)
    assert "inside img (exit code 127)" in text
    assert "(refused: report.json: a symbolic link)" in text
    assert "line 15" in text
    assert "line 29" in text
    assert "line 14" not in text
