"""The soak's criteria (imagesmith.validate.soak) on time series captured on the lent 1×H200
(docs/evidence/h200x1-soak) — a healthy 9-minute soak, a matmul co-tenant at 30 % and at 20 % duty arriving
two minutes in — and on faults made from the healthy capture: a 10 % drop after the first minute, periodic
co-tenant bursts, hardware and thermal slowdown, new Xids, a host below its expected figures."""

from __future__ import annotations

import dataclasses
import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.validate.expected import Expected
from imagesmith.validate.parsers import parse_xid
from imagesmith.validate.soak import (
    SoakSeries,
    SoakSettings,
    judge_soak,
    new_kernel_events,
    read_csv,
    soak_series,
    write_csv,
    write_plots,
)
from tests.repo import REPO

CAPTURES = REPO / "tests" / "data" / "validate" / "h200x1" / "soak"
GPU = "GPU 0 (NVIDIA H200)"
EXPECTED = {
    GPU: {
        "matmul_tflops": Expected(value=668, kind="baseline", source="perf.toml"),
        "copy_gbps": Expected(value=4258, kind="baseline", source="perf.toml"),
    }
}


def healthy() -> SoakSeries:
    return read_csv(CAPTURES / "healthy-9m.csv")


def changed(series: SoakSeries, fn: Any) -> SoakSeries:
    """A copy of *series* with every row passed through ``fn(row) -> row``."""
    return dataclasses.replace(series, rows={k: [fn(r) for r in rows] for k, rows in series.rows.items()})


def scaled(row: Any, factor: float) -> Any:
    return dataclasses.replace(
        row, matmul_tflops=row.matmul_tflops * factor, copy_gbps=row.copy_gbps * factor
    )


def test_a_healthy_nine_minute_soak_passes_with_the_software_power_cap() -> None:
    """The real capture: SW power cap (0x4) in every sample, 694–702 TFLOP/s — a pass, never a failure."""
    series = healthy()
    assert series.duration_s > 535
    assert series.interval_s == 5
    result = judge_soak(series, expected=EXPECTED)
    assert result.failures == []
    assert result.warnings == []
    assert "SW power cap in 100% of" in result.sentence
    assert "no hardware slowdown" in result.sentence
    assert result.sentence.endswith("— passed.")
    assert result.summary["soak_worst_minute_ratio"] > 0.98
    assert 690 < result.summary["soak_matmul_tflops"] < 710
    assert all(j.verdict == "pass" for j in result.judgements)


@pytest.mark.parametrize(("capture", "worst"), [("cotenant-30pct.csv", 0.85), ("cotenant-20pct.csv", 0.89)])
def test_a_cotenant_arriving_after_the_first_minute_fails_naming_minute_and_ratio(
    capture: str, worst: float
) -> None:
    """Real captures: scripts/gpu_load.py matmul at 30 % / 20 % duty from about 2:05 of a 4-minute soak."""
    result = judge_soak(read_csv(CAPTURES / capture), expected=EXPECTED)
    matmul = next(f for f in result.failures if "dense matmul throughput fell" in f)
    assert matmul.startswith(
        f"{GPU}: dense matmul throughput fell to {worst:.2f}× the first minute in minute 4"
    )
    assert "below 0.92× in minutes 3–4 of 4 minutes" in matmul
    assert "other processes on this GPU meanwhile" in matmul
    assert "python3" in matmul
    assert any("device-memory copy bandwidth fell" in f for f in result.failures)


def test_a_ten_percent_drop_after_the_first_minute_is_caught() -> None:
    series = changed(healthy(), lambda r: scaled(r, 0.90) if r.t0 >= 60 else r)
    result = judge_soak(series)
    assert result.failures[0].startswith(f"{GPU}: dense matmul throughput fell to 0.90× the first minute")
    assert "below 0.92× in minutes 2–9 of 9 minutes" in result.failures[0]
    # five percent is a warning, not a failure
    mild = judge_soak(changed(healthy(), lambda r: scaled(r, 0.95) if r.t0 >= 60 else r))
    assert mild.failures == []
    assert any("at 0.95× the first minute" in w for w in mild.warnings)


def test_periodic_cotenant_bursts_fail_as_recurring_drops() -> None:
    """Two windows of every minute at 0.6×: every minute's mean stays above 0.92×, the dips recur."""
    series = changed(healthy(), lambda r: scaled(r, 0.6) if r.t0 >= 60 and int(r.t0) % 60 < 10 else r)
    result = judge_soak(series)
    recurring = [f for f in result.failures if "recurring drops" in f]
    assert recurring
    assert recurring[0].startswith(f"{GPU}: dense matmul throughput dropped below 0.92×")
    assert (
        "in 16 of 96 windows after it" in recurring[0] or "windows after it, in minutes 2–9" in recurring[0]
    )
    # one stray window is a warning
    once = judge_soak(changed(healthy(), lambda r: scaled(r, 0.6) if r.window == 40 else r))
    assert once.failures == []
    assert any("below 0.92× the first minute in 1 of" in w for w in once.warnings)


@pytest.mark.parametrize(
    ("bit", "words", "fails"),
    [
        (0x40, "hardware thermal slowdown (HW_THERMAL_SLOWDOWN)", True),
        (0x8, "hardware slowdown (HW_SLOWDOWN", True),
        (0x80, "hardware power-brake slowdown", True),
        (0x20, "software thermal slowdown (SW_THERMAL_SLOWDOWN)", False),
    ],
)
def test_clock_events_during_the_soak(bit: int, words: str, fails: bool) -> None:
    def slowed(r: Any) -> Any:
        if 240 <= r.t0 < 360:
            return dataclasses.replace(
                r, reasons=r.reasons | bit, reason_samples={**r.reason_samples, bit: 2}
            )
        return r

    result = judge_soak(changed(healthy(), slowed))
    found = [x for x in (result.failures if fails else result.warnings) if words in x]
    assert found, (result.failures, result.warnings)
    assert found[0].startswith(GPU)
    assert "minutes 5–6" in found[0]
    assert (result.failures == []) is (not fails)


def test_the_software_power_cap_alone_never_fails() -> None:
    capped = changed(
        healthy(), lambda r: dataclasses.replace(r, reasons=0x4, reason_samples={0x4: r.samples})
    )
    assert judge_soak(capped).failures == []


def test_new_xids_during_the_soak() -> None:
    before = "[   10.000000] NVRM: loading NVIDIA UNIX Open Kernel Module  580.159.04\n"
    after = before + (
        "[  700.500000] NVRM: Xid (PCI:0000:00:06): 79, pid=0, name=python3, GPU has fallen off the bus.\n"
        "[  702.000000] NVRM: Xid (PCI:0000:00:06): 13, pid=1234, Graphics Exception\n"
    )
    events = new_kernel_events(before, after, uptime_at_start=600.0)
    assert [(e.code, m) for e, m in events] == [(79, 2), (13, 2)]
    assert new_kernel_events(after, after, uptime_at_start=600.0) == []  # the same lines again: nothing new
    xids = [(e, f"GPU 0 ({e.bus})", m) for e, m in events]
    result = judge_soak(healthy(), new_xids=xids)
    assert any(f.startswith("GPU 0 (0000:00:06): ") and "minute 2" in f for f in result.failures)
    assert any("13" in w and "during the soak" in w for w in result.warnings)
    assert "2 new Xid" in result.sentence
    assert parse_xid(after)  # the lines are the kernel's own format


def test_a_host_below_its_expected_figures_fails_even_when_steady() -> None:
    """From the first minute on at 0.7×: no drop against itself, but 0.74× the expected 668 TFLOP/s."""
    result = judge_soak(changed(healthy(), lambda r: scaled(r, 0.7)), expected=EXPECTED)
    assert any(
        "= 0.73 × the expected 668 TFLOP/s" in f or "= 0.74 × the expected 668" in f for f in result.failures
    )
    assert all("the first minute" not in f for f in result.failures)


def test_the_probe_records_become_the_series() -> None:
    """The raw records of the 20 % co-tenant run (soak-samples.jsonl) → the CSV committed beside it."""
    records = [
        json.loads(line) for line in (CAPTURES / "cotenant-20pct-samples.jsonl").read_text().splitlines()
    ]
    series = soak_series(records, smi_names={"GPU-b12d1044-bf05-b762-9c8a-9c36fe89f685": 0})
    assert list(series.rows) == [GPU]
    assert series.gpu_index == {GPU: 0}  # which GPU a label is, as data (the check's expected figures)
    assert series.world == 1
    assert series.duration_s == 240
    rows = series.rows[GPU]
    assert all(r.samples >= 4 for r in rows[:-1])
    assert not rows[10].other_processes
    assert any("python3" in p for p in rows[-2].other_processes)
    assert series.ours  # the probe's own PIDs are never "other processes"
    from_csv = read_csv(CAPTURES / "cotenant-20pct.csv").rows[GPU]
    assert [round(r.matmul_tflops or 0, 3) for r in rows] == [
        round(r.matmul_tflops or 0, 3) for r in from_csv
    ]


def test_a_worker_error_or_no_window_fails() -> None:
    series = soak_series(
        [
            {"kind": "start", "duration_s": 120, "interval_s": 5, "world": 2, "pids": [1]},
            {"kind": "error", "rank": 1, "error": "RuntimeError: CUDA error: out of memory"},
        ]
    )
    result = judge_soak(series)
    assert result.failures == [
        "the soak load failed: rank 1: RuntimeError: CUDA error: out of memory",
        "the soak produced no measurement (no worker reported a window)",
    ]


def test_csv_round_trip_and_the_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    series = healthy()
    write_csv(series, tmp_path / "soak.csv")
    assert (tmp_path / "soak.csv").read_text() == (CAPTURES / "healthy-9m.csv").read_text()
    result = judge_soak(series)
    pytest.importorskip("matplotlib")
    written, _note = write_plots(series, result, tmp_path, fail_ratio=0.92)
    assert written == ["soak-gpu0.png"]
    assert (tmp_path / "soak-gpu0.png").read_bytes()[:4] == b"\x89PNG"
    real = importlib.import_module

    def no_matplotlib(name: str, *args: Any) -> Any:
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", no_matplotlib)
    assert write_plots(series, result, tmp_path, fail_ratio=0.92) == (
        [],
        "skipped: matplotlib is not installed (pip install 'imagesmith[plot]'); soak.csv has the series",
    )


def test_settings_bands() -> None:
    series = changed(healthy(), lambda r: scaled(r, 0.90) if r.t0 >= 60 else r)
    assert judge_soak(series, settings=SoakSettings(fail_ratio=0.85, warn_ratio=0.95)).failures == []


def test_the_healthy_raw_records_give_the_committed_series() -> None:
    """docs/evidence/h200x1-soak: the 9-minute soak's raw records (soak-samples.jsonl) → its soak.csv."""
    folder = REPO / "docs" / "evidence" / "h200x1-soak" / "healthy-soak-9m"
    records = [json.loads(line) for line in (folder / "soak-samples.jsonl").read_text().splitlines()]
    series = soak_series(records, smi_names={"GPU-b12d1044-bf05-b762-9c8a-9c36fe89f685": 0})
    committed = read_csv(folder / "soak.csv")
    assert [round(r.copy_gbps or 0, 3) for r in series.rows[GPU]] == [
        round(r.copy_gbps or 0, 3) for r in committed.rows[GPU]
    ]
    assert judge_soak(series, expected=EXPECTED).failures == []


def _raw() -> list[dict[str, Any]]:
    folder = REPO / "docs" / "evidence" / "h200x1-soak" / "healthy-soak-9m"
    return [json.loads(line) for line in (folder / "soak-samples.jsonl").read_text().splitlines()]


SMI = {"GPU-b12d1044-bf05-b762-9c8a-9c36fe89f685": 0}


def test_a_soak_the_probe_did_not_finish_fails() -> None:
    """Minutes that were not measured cannot have passed: the healthy 9-minute capture with its load worker
    killed at minute 4 (the OOM killer, a driver segfault: no error record, windows stop), with the probe's
    end record missing (the probe killed, its output cut), and with a second GPU that reported nothing."""
    raw = _raw()
    assert judge_soak(soak_series(raw, smi_names=SMI), expected=EXPECTED).failures == []

    def killed(r: dict[str, Any]) -> dict[str, Any] | None:
        if r.get("kind") == "window" and r["t0"] >= 240:
            return None
        return dict(r, exitcodes=[-9]) if r.get("kind") == "end" else r

    cut = [x for x in map(killed, raw) if x is not None]
    failures = judge_soak(soak_series(cut, smi_names=SMI), expected=EXPECTED).failures
    assert any("the load worker (rank 0) was killed by signal 9 (SIGKILL)" in f for f in failures), failures
    assert any(f.startswith(f"{GPU}: its windows stop at 4:00 of the 9:00 soak") for f in failures), failures
    no_end = [r for r in raw if r.get("kind") != "end"]
    assert judge_soak(soak_series(no_end, smi_names=SMI), expected=EXPECTED).failures == [
        "the soak probe stopped before its end: no end record (killed, or its output was cut short)"
    ]
    two = [dict(r, world=2, cuda_devices=2) if r.get("kind") == "start" else r for r in raw]
    two = [dict(r, exitcodes=[0, 0]) if r.get("kind") == "end" else r for r in two]
    assert judge_soak(soak_series(two, smi_names=SMI), expected=EXPECTED).failures == [
        f"only 1 of the 2 GPUs the probe loaded reported a window ({GPU})",
        # two workers measure all_reduce in every window: windows without it are not measurements
        f"{GPU}: all_reduce busbw at 256 MiB: 108 of 108 windows carry no figure, in minutes 1–9 "
        "(window 0 at 0:00 said nothing): not a measurement, those minutes were not judged",
    ]
    exit1 = [dict(r, exitcodes=[3]) if r.get("kind") == "end" else r for r in raw]
    assert judge_soak(soak_series(exit1, smi_names=SMI), expected=EXPECTED).failures == [
        f"{GPU}: the load worker (rank 0) exited with code 3 without reporting an error"
    ]
    # a worker that reported its error is not named twice; a series read back from soak.csv is not judged
    told = [*raw[:-1], {"kind": "error", "rank": 0, "error": "RuntimeError: x"}, dict(raw[-1], exitcodes=[1])]
    assert judge_soak(soak_series(told, smi_names=SMI), expected=EXPECTED).failures == [
        "the soak load failed: rank 0: RuntimeError: x"
    ]
    assert judge_soak(healthy(), expected=EXPECTED).failures == []


def test_a_gpu_is_keyed_by_its_uuid_as_data_not_by_a_prefix_of_words() -> None:
    """nvidia-smi's samples are keyed (uuid, …) or (index, …), not "index:N" strings told apart by their
    prefix: a UUID that reads like the other key (hostile or broken nvidia-smi output) is still a UUID."""
    odd = "index:0"
    records = [
        {"kind": "start", "duration_s": 10, "interval_s": 5, "world": 1, "pids": [1]},
        {"kind": "smi", "t": 1.0, "uuid": odd, "index": 3, "clocks.sm": 1980},
        {
            "kind": "window",
            "uuid": odd,
            "name": "NVIDIA H200",
            "cuda_index": 0,
            "window": 0,
            "t0": 0,
            "t1": 5,
        },
    ]
    series = soak_series(records)
    assert list(series.rows) == ["GPU 3 (NVIDIA H200)"]
    assert series.gpu_index == {"GPU 3 (NVIDIA H200)": 3}
    assert series.rows["GPU 3 (NVIDIA H200)"][0].samples == 1


def _windows(fn: Any) -> list[dict[str, Any]]:
    """The healthy 9-minute raw records, every window record passed through ``fn(record) -> record|None``."""
    out = []
    for r in _raw():
        x = fn(dict(r)) if r.get("kind") == "window" else r
        if x is not None:
            out.append(x)
    return out


@pytest.mark.parametrize(
    ("said", "shown"),
    [
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (-695.6, "-695.6"),
        (0.0, "0.0"),
        ("fast", "'fast'"),
        (None, "nothing"),
    ],
)
def test_windows_that_carry_no_figure_fail_naming_gpu_minute_and_figure(said: Any, shown: str) -> None:
    """A broken torch/driver or a modified probe prints NaN, inf, 0, a negative number, text or nothing for a
    figure from minute 3 on: those minutes were not measured and cannot pass (before: they were left out of
    the judgement without a word and the soak passed)."""

    def broken(r: dict[str, Any]) -> dict[str, Any]:
        return dict(r, matmul_tflops=said) if r["t0"] >= 120 else r

    failures = judge_soak(soak_series(_windows(broken), smi_names=SMI), expected=EXPECTED).failures
    assert failures == [
        f"{GPU}: dense matmul throughput: 84 of 108 windows carry no figure, in minutes 3–9 (window 24 at "
        f"2:00 said {shown}): not a measurement, those minutes were not judged"
    ]


def test_a_first_minute_without_figures_is_no_reference_and_fails() -> None:
    """The reference is the run's own first minute: with no usable window in it, no minute was judged."""
    missing = judge_soak(soak_series(_windows(lambda r: r if r["t0"] >= 60 else None), smi_names=SMI))
    assert missing.failures[0] == (
        f"{GPU}: no window from 0:00 to 1:00 (minute 1): the load on this GPU was not measured then"
    )
    assert (
        f"{GPU}: dense matmul throughput: 0 window(s) with a figure in the first minute, 3 needed: no "
        "reference, so no later minute could be judged against it"
    ) in missing.failures
    assert missing.sentence.endswith("problem(s) below).")


def test_minutes_no_window_covers_fail() -> None:
    """Two minutes of windows lost in the middle (output lines dropped, a stalled reader): before, the soak
    passed on the minutes it had."""
    gap = judge_soak(soak_series(_windows(lambda r: None if 240 <= r["t0"] < 360 else r), smi_names=SMI))
    assert gap.failures == [
        f"{GPU}: no window from 4:00 to 6:00 (minutes 5–6): the load on this GPU was not measured then"
    ]


@pytest.mark.parametrize("shift", [0.0, -5.0])
def test_windows_of_no_time_or_running_backwards_fail(shift: float) -> None:
    def broken(r: dict[str, Any]) -> dict[str, Any]:
        return dict(r, t1=r["t0"] + shift) if r["window"] == 30 else r

    failures = judge_soak(soak_series(_windows(broken), smi_names=SMI)).failures
    assert failures[1:] == [  # and the 5 s it should have covered are a gap
        f"{GPU}: no window from 2:30 to 2:35 (minute 3): the load on this GPU was not measured then"
    ]
    assert failures[0].startswith(
        f"{GPU}: 1 window(s) end before they start or take no time (window 30: 150."
    ), failures
    assert "minute 3): the probe's clock or its output is broken" in failures[0]


def test_the_probe_reads_a_process_name_with_commas_as_one_process(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """probes/soak.py's sampler: nvidia-smi does not quote its CSV, so a process whose path has a comma
    spans five cells; before, it was dropped and the soak never named the co-tenant."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("soak_probe", REPO / "imagesmith/validate/probes/soak.py")
    assert spec is not None
    assert spec.loader is not None
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    uuid = "GPU-b12d1044-bf05-b762-9c8a-9c36fe89f685"
    answers = {
        "--query-gpu": f"0, {uuid}, 1980, 1980, 40, 120.5, 0x0000000000000004, 100, 9000\n",
        "--query-compute-apps": f"{uuid}, 31337, /srv/a,b/venv/bin/python3, 9000\n",
        "pmon": "# gpu pid type sm mem enc dec command\n# Idx # C/G % % % % name\n"
        " 0 31337 C 12 3 - - python3\n",
    }
    sampler = probe.Sampler(1.0, 0.0)
    sampler.query = lambda args: (0, next(v for k, v in answers.items() if args[0].startswith(k)), "")
    sampler.sample(0)
    records = [json.loads(line.split(" ", 1)[1]) for line in capsys.readouterr().out.splitlines()]
    apps = next(r for r in records if r["kind"] == "apps")["apps"]
    assert apps == [{"uuid": uuid, "pid": "31337", "name": "/srv/a,b/venv/bin/python3", "mib": "9000"}]
    # issue 33: the processes' SM use goes beside them as nvidia-smi printed it
    pmon = next(r for r in records if r["kind"] == "pmon")
    assert pmon["text"] == answers["pmon"]


def test_a_gpu_listed_at_the_start_that_the_soak_did_not_load_fails() -> None:
    """nvidia-smi listed 2 GPUs when the suite started; by the soak torch sees one (GPU 1 fell off the bus or
    was taken away): before, the soak of the GPU that was left passed."""
    series = soak_series(_raw(), smi_names=SMI)
    listed = {0: "NVIDIA H200", 1: "NVIDIA H200"}
    assert judge_soak(series, expected=EXPECTED, listed=listed).failures == [
        "GPU 1 (NVIDIA H200): nvidia-smi listed it when the suite started, but the soak put no load on it "
        "(torch saw 1 CUDA device(s)): it was lost or taken away since, or is hidden from CUDA"
    ]
    assert judge_soak(series, expected=EXPECTED, listed={0: "NVIDIA H200"}).failures == []
    # windows without a UUID (labels cuda:N): judged by count
    no_uuid = soak_series([dict(r, uuid=None) if r.get("kind") == "window" else r for r in _raw()])
    assert list(no_uuid.rows) == ["cuda:0 (NVIDIA H200)"]
    assert [f.split(":")[0] for f in judge_soak(no_uuid, listed=listed).failures] == ["GPU 1 (NVIDIA H200)"]


def test_judge_figure_alone_skips_minute_one_and_judges_every_later_minute() -> None:
    """soak._judge_figure, one figure of one GPU: minute 1 is the reference (never judged against itself),
    and each later full minute is judged: a drop in minute 3 fails even after a steady minute 2."""
    from imagesmith.validate.soak import SoakResult, SoakRow, SoakSettings, _judge_figure

    def w(i: int, tflops: float) -> SoakRow:
        return SoakRow("GPU 0", "H200", i, i * 10.0, i * 10.0 + 10.0, tflops, None, None)

    rows = [w(i, 100.0 if i < 12 else 50.0) for i in range(18)]  # minutes 1 and 2 steady, 3 at half
    first = [r for r in rows if r.minute == 1]
    later = [r for r in rows if r.minute > 1]
    out, failures, ratios, means = SoakResult(), [], [], {"matmul_tflops": []}  # type: ignore[var-annotated]
    series = SoakSeries(rows={"GPU 0": rows}, interval_s=10.0)
    _judge_figure(
        "GPU 0",
        "matmul_tflops",
        rows,
        first,
        later,
        series=series,
        s=SoakSettings(),
        expected={},
        out=out,
        gpu_failures=failures,
        ratios_all=ratios,
        per_gpu_means=means,
    )
    assert ratios == [1.0, 0.5]
    assert len(failures) == 1
    assert "minute 3" in failures[0]
    assert [m["minute"] for m in out.minutes[0]["minutes"]] == [1, 2, 3]
