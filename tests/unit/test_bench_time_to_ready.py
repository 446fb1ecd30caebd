"""The pure parts of the time-to-ready and nightly benchmarks (issue 36): arguments, the engine's pull events
turned into phases, the ratios, the lock edit. Never a timing: the figures live in docs/benchmarks.md."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module


ttr = _load("bench_time_to_ready")
nightly = _load("bench_nightly")


def test_rates_parse_in_order() -> None:
    assert ttr.parse_rates("1000, 200,50") == [1000, 200, 50]


@pytest.mark.parametrize("text", ["", "fast", "0", "200,200", "100001", "-5", "1.5"])
def test_bad_rates_are_one_error_naming_the_flag(text: str) -> None:
    with pytest.raises(ValueError, match="--rates"):
        ttr.parse_rates(text)


def test_rounds_one_for_all_or_one_per_rate() -> None:
    assert ttr.parse_rounds("2", [1000, 200, 50]) == {1000: 2, 200: 2, 50: 2}
    assert ttr.parse_rounds("2,2,1", [1000, 200, 50]) == {1000: 2, 200: 2, 50: 1}


@pytest.mark.parametrize("text", ["0", "2,1", "x", "1,,1"])
def test_bad_rounds(text: str) -> None:
    with pytest.raises(ValueError, match="--rounds"):
        ttr.parse_rounds(text, [1000, 200, 50])


def test_pull_phases_from_the_engines_events() -> None:
    events: list[tuple[float, dict[str, Any]]] = [
        (100.5, {"id": "a", "status": "Pulling fs layer"}),
        (100.6, {"id": "b", "status": "Pulling fs layer"}),
        (104.0, {"id": "a", "status": "Download complete"}),
        (104.1, {"id": "a", "status": "Extracting"}),
        (105.0, {"id": "a", "status": "Extracting"}),
        (106.0, {"id": "a", "status": "Pull complete"}),
        (109.0, {"id": "b", "status": "Download complete"}),
        (109.5, {"id": "b", "status": "Extracting"}),
        (112.5, {"id": "b", "status": "Pull complete"}),
        (112.6, {"status": "Digest: sha256:00"}),
    ]
    got = ttr.pull_phases(events, start=100.0, end=113.0)
    assert got["pull_s"] == pytest.approx(13.0)
    assert got["download_s"] == pytest.approx(9.0)  # the last layer's download
    assert got["extract_tail_s"] == pytest.approx(4.0)
    assert got["extract_busy_s"] == pytest.approx(1.9 + 3.0)
    assert got["layers"] == 2


def test_layers_already_there_count_as_downloaded() -> None:
    events: list[tuple[float, dict[str, Any]]] = [(101.0, {"id": "a", "status": "Already exists"})]
    got = ttr.pull_phases(events, start=100.0, end=102.0)
    assert got["download_s"] == pytest.approx(1.0)
    assert got["extract_busy_s"] == 0


def _row(image: str, rate: int, scale: float, **extra: Any) -> dict[str, Any]:
    row = {m: scale for m in ttr.METRICS}
    return {"image": image, "rate_mbit": rate, "bytes": 10 * scale, **row, **extra}


def test_ratios_are_medians_ours_over_fat_per_rate() -> None:
    rows = [
        _row("ours", 200, 6.0),
        _row("ours", 200, 8.0),
        _row("ours", 200, 100.0),
        _row("fat", 200, 10.0),
        _row("ours", 1000, 3.0),
        _row("fat", 1000, 4.0),
    ]
    got = ttr.ratios(rows)
    assert list(got) == ["1000", "200"]
    assert got["200"]["ours"]["ready_torch_s"] == 8.0
    assert got["200"]["ours_over_fat"]["ready_torch_s"] == pytest.approx(0.8)
    assert got["1000"]["ours_over_fat"]["pull_s"] == pytest.approx(0.75)


def test_a_timed_out_pull_gives_no_ratio() -> None:
    got = ttr.ratios([_row("ours", 50, 5.0, timed_out=True), _row("fat", 50, 10.0)])
    assert got["50"]["ours"]["pull_s"] is None
    assert got["50"]["ours_over_fat"]["pull_s"] is None


def test_tbf_burst_grows_with_the_rate() -> None:
    assert ttr.tbf_args(50)[:3] == ["tbf", "rate", "50mbit"]
    assert int(ttr.tbf_args(50)[4]) == 32 * 1024
    assert int(ttr.tbf_args(1000)[4]) == 500_000


LOCK = """# header
filelock==4.3.1 \\
    --hash=sha256:aa
    # via torch
tenacity==9.2.1 \\
    --hash=sha256:bb \\
    --hash=sha256:cc
    # via imagesmith
torch==2.12.0 \\
    --hash=sha256:dd
"""


def test_replace_pin_changes_one_pin_and_its_hashes() -> None:
    got = nightly.replace_pin(LOCK, "tenacity", "9.2.0", "ee")
    assert "tenacity==9.2.0 \\\n    --hash=sha256:ee\n    # via imagesmith\n" in got
    assert "sha256:bb" not in got
    assert "sha256:cc" not in got
    assert got.replace("tenacity==9.2.0 \\\n    --hash=sha256:ee\n", "") == LOCK.replace(
        "tenacity==9.2.1 \\\n    --hash=sha256:bb \\\n    --hash=sha256:cc\n", ""
    )
    assert nightly.pinned(got, "tenacity") == "9.2.0"


def test_replace_pin_of_a_package_the_lock_lacks() -> None:
    with pytest.raises(ValueError, match="pins no requests"):
        nightly.replace_pin(LOCK, "requests", "1.0", "ff")


def test_nightly_ratios_against_the_first_cold_cell() -> None:
    cold = {
        "wall_s": 600.0,
        "bytes_pushed": 4000,
        "cells": [{"duration_s": 300.0, "bytes_pushed_engine": 2000}] + [{"duration_s": 60.0}] * 5,
    }
    changed = {"wall_s": 120.0, "bytes_pushed": 500}
    got = nightly.ratios(cold, changed)
    assert got["cells"] == 6
    assert got["cold_total_over_one_cell"] == pytest.approx(2.0)
    assert got["goal_1_plus_0.1_n_minus_1"] == pytest.approx(1.5)
    assert got["cold_bytes_pushed_over_one_cell"] == pytest.approx(2.0)
    assert got["changed_total_over_one_cell"] == pytest.approx(0.4)
    assert got["changed_bytes_over_one_cell"] == pytest.approx(0.25)


def test_the_sorted_variant_gets_its_own_ratio() -> None:
    got = ttr.ratios([_row("ours", 200, 8.0), _row("sorted", 200, 6.0), _row("fat", 200, 10.0)])
    assert got["200"]["sorted_over_fat"]["pull_s"] == pytest.approx(0.6)
    assert got["200"]["ours_over_fat"]["pull_s"] == pytest.approx(0.8)
    assert "fat_over_fat" not in got["200"]


def test_an_image_measured_at_one_rate_only_is_not_in_the_others() -> None:
    got = ttr.ratios([_row("sorted", 200, 6.0), _row("fat", 200, 10.0), _row("fat", 50, 30.0)])
    assert "sorted_over_fat" in got["200"]
    assert "sorted" not in got["50"]
    assert "sorted_over_fat" not in got["50"]
