"""validate's file arguments are checked before any check runs: one error, exit 2, never a traceback
(issue 12, item 4)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def test_report_on_an_existing_file(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    f = tmp_path / "taken"
    f.write_text("x")
    out = run_cli("validate", "local://", "--report", str(f))
    assert out.exit_code == 2
    assert "exists and is not a folder" in out.stderr
    assert "Traceback" not in out.stderr


def test_report_where_nothing_can_be_written(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    out = run_cli("validate", "local://", "--report", "/proc/imagesmith-report")
    assert out.exit_code == 2
    assert "cannot write the evidence bundle there" in out.stderr
    assert "fix:" in out.stderr


@pytest.mark.parametrize(
    "content",
    [b"\xff\xfe\x00binary", b"[1, 2]", b'{"checks": [5, {"name": "test_nccl_allreduce", "figures": 3}]}'],
)
def test_baseline_that_is_not_a_report(tmp_path: Path, run_cli: Callable[..., Any], content: bytes) -> None:
    f = tmp_path / "baseline.json"
    f.write_bytes(content)
    out = run_cli("validate", "local://", "--baseline", str(f), "--report", str(tmp_path / "r"))
    assert out.exit_code == 2
    assert "--baseline" in out.stderr
    assert "Traceback" not in out.stderr
