"""Issue 31: the soak probe's worker in named steps (probes/soak.py runs on the target with only the stdlib
and torch, so it stays one file); the steps with a rule of their own, tested here without a GPU."""

from __future__ import annotations

import importlib.util
import json
from types import ModuleType
from typing import Any

import pytest

from tests.repo import REPO


@pytest.fixture(scope="module")
def probe() -> ModuleType:
    spec = importlib.util.spec_from_file_location("soak_probe", REPO / "imagesmith/validate/probes/soak.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _meter(probe: ModuleType, bus_factor: float | None) -> Any:
    ids = {"rank": 1, "cuda_index": 0, "uuid": "GPU-x", "name": "H200"}
    return probe.Meter(ids=ids, dtype="bfloat16", flops=4e12, copied=2e9, bus_factor=bus_factor)


def test_a_window_record_keeps_its_keys_and_figures(probe: ModuleType) -> None:
    win = probe.Window(3, 10.0)
    win.add(0.5, 0.25, 0.125)
    win.add(0.5, 0.25, 0.125)
    record = win.record(_meter(probe, 1.0), 15.00049)
    assert list(record) == [
        "kind", "rank", "cuda_index", "uuid", "name", "window", "t0", "t1", "iterations", "dtype",
        "matmul_tflops", "copy_gbps", "allreduce_busbw_gbps",
    ]  # fmt: skip
    assert record["window"] == 3
    assert record["t0"] == 10.0
    assert record["t1"] == 15.0
    assert record["iterations"] == 2
    assert record["matmul_tflops"] == 8.0  # 4e12 flops × 2 iterations in 1 s
    assert record["copy_gbps"] == 8.0  # 2e9 bytes × 2 in 0.5 s
    assert record["allreduce_busbw_gbps"] == pytest.approx(probe.ALLREDUCE_BYTES * 2 / 0.25 / 1e9)


def test_a_part_that_took_no_time_or_did_not_run_has_no_figure(probe: ModuleType) -> None:
    alone = probe.Window(0, 0.0)
    alone.add(0.0, 0.5, None)  # a worker alone runs no all_reduce
    record = alone.record(_meter(probe, None), 1.0)
    assert record["matmul_tflops"] is None
    assert record["allreduce_busbw_gbps"] is None
    assert record["copy_gbps"] == 4.0
    assert alone.ar_s == 0.0


def test_the_next_window_skips_the_intervals_an_iteration_overran(probe: ModuleType) -> None:
    assert probe.next_window_end(5.0, 5.2, 5.0) == 10.0
    assert probe.next_window_end(5.0, 17.0, 5.0) == 20.0  # 10 and 15 passed inside one iteration
    assert probe.next_window_end(5.0, 4.0, 5.0) == 5.0


class FakeLoad:
    """A Load whose iterations take 2 s of a fake clock; stops when told (a group's rank 0 decides)."""

    def __init__(self, clock: list[float], *, rank0_stops_at: float | None = None) -> None:
        self.clock, self.rank0_stops_at = clock, rank0_stops_at
        self.started = False

    def start(self) -> None:
        self.started = True

    def iteration(self, mm_reps: int, cp_reps: int) -> tuple[float, float, float | None]:
        assert self.started, "the stop flag is made before the first iteration"
        self.clock[0] += 2.0
        return 1.0, 0.5, None

    def agree_to_stop(self, stop: bool) -> bool:
        return stop if self.rank0_stops_at is None else self.clock[0] >= self.rank0_stops_at


def _run(
    probe: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: Any, load: FakeLoad, clock: list[float]
) -> Any:
    monkeypatch.setattr(probe.time, "time", lambda: clock[0])
    probe.run_load(load, (1, 1), 11.0, 5.0, _meter(probe, None))
    return [json.loads(line.split(" ", 1)[1]) for line in capsys.readouterr().out.splitlines()]


def test_run_load_emits_a_window_each_interval_and_the_last_partial_one(
    probe: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = [100.0]
    windows = _run(probe, monkeypatch, capsys, FakeLoad(clock), clock)
    assert [(w["window"], w["t0"], w["t1"], w["iterations"]) for w in windows] == [
        (0, 0.0, 6.0, 3),
        (1, 6.0, 10.0, 2),
        (2, 10.0, 12.0, 1),  # 12 s ≥ the 11 s asked: the last window, short
    ]


def test_run_load_stops_when_the_group_agrees_not_on_its_own_clock(
    probe: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = [0.0]
    windows = _run(probe, monkeypatch, capsys, FakeLoad(clock, rank0_stops_at=14.0), clock)
    assert windows[-1]["t1"] == 14.0
    assert [w["window"] for w in windows] == [0, 1, 2]
