"""Performance of each GPU against what a healthy board delivers (imagesmith/data/perf.toml, or a baseline):
device-memory copy bandwidth, host↔device bandwidth for the PCIe link, sustained dense matmul, and the clock
events nvidia-smi shows while that load runs. One GPU of eight that is slow is named with its figures.

Each figure is judged by :func:`imagesmith.validate.expected.judge`: a baseline fails below 0.80 × and warns
below 0.90 × (``--perf-fail-ratio``/``--perf-warn-ratio``); a datasheet estimate fails below half.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from imagesmith.inputs import is_digits
from imagesmith.validate.context import CheckRecord, Context, fail, skip_no_gpu
from imagesmith.validate.criteria import Gpu
from imagesmith.validate.expected import (
    Bands,
    Expected,
    Judgement,
    clock_events,
    gpu_expected,
    judge,
    link_expected,
    match_device,
    options_expected,
    pcie_link,
)
from imagesmith.validate.facts import GpuFacts

SLOW_FIX = (
    "this host delivers less than a healthy one: check for other processes on the GPU (nvidia-smi), "
    "power or clock limits and cooling, then show the report to the provider and ask for another machine"
)


@pytest.fixture(scope="module")
def perf(ctx: Context, gpu_facts: GpuFacts) -> list[tuple[dict[str, Any], Gpu | None]]:
    if not gpu_facts.visible:
        skip_no_gpu(gpu_facts.reason)
    o = ctx.options
    data = ctx.probe_one("perf", f"{o.perf_seconds:g}", timeout=int(60 + 30 * o.perf_seconds * 8))
    ctx.facts["perf"] = data
    if data.get("error"):  # torch missing or CUDA not initialising: the CUDA checks fail with the reason
        pytest.skip(f"the performance probe could not run: {data['error']}")
    devices = data.get("devices") or []
    if not devices:
        pytest.skip("torch sees no CUDA device (the CUDA checks say why)")
    broken = [d for d in devices if d.get("error")]
    if broken:
        full = any("out of memory" in str(d["error"]).lower() for d in broken)
        fail(
            "the performance probe failed on "
            + "; ".join(f"cuda:{d['index']}: {d['error']}" for d in broken),
            "another process holds this GPU's memory (nvidia-smi lists it): stop it, or ask for a machine "
            "whose GPUs are free"
            if full
            else "a GPU that cannot run a copy or a matmul is broken: ask the provider for another machine",
        )
    return [(d, match_device(d, gpu_facts.gpus, i)) for i, d in enumerate(devices)]


def _where(device: dict[str, Any], gpu: Gpu | None) -> str:
    if gpu is None:
        return f"cuda:{device['index']} ({device.get('name', '?')})"
    return f"GPU {gpu.index} ({gpu.name})"


def _expected(
    ctx: Context, figure: str, fallback: Expected | None, host_kind: tuple[str, int, str]
) -> Expected | None:
    """--baseline report, else the fleet of --baseline-from, else imagesmith/data/perf.toml."""
    return options_expected(ctx.options, figure, fallback, host_kind)


def _verdict(
    check: CheckRecord, judgements: list[Judgement], fix: str, extra: dict[str, str] | None = None
) -> None:
    check.figures["judgements"] = [j.to_json() for j in judgements]
    missing = [j for j in judgements if j.verdict == "no-baseline"]
    if missing:
        check.figures["no_baseline"] = "; ".join(j.sentence() for j in missing)
    for j in judgements:
        if j.verdict == "warn":
            check.warnings.append(j.sentence())
    bad = [j for j in judgements if j.verdict == "fail"]
    if bad:
        notes = extra or {}
        if all(not math.isfinite(j.measured) for j in bad):
            fix = (
                "the probe could not time this GPU (a kernel that never finished or a broken clock): rerun; "
                "if it repeats, read dmesg for Xid errors and ask the provider for another machine"
            )
        fail("; ".join(j.sentence() + notes.get(j.where, "") for j in bad), fix)


def _figure(device: dict[str, Any], figure: str) -> float:
    """The probe's figure; one it did not print, or printed as something else than a number, is NaN, which
    :func:`judge` fails as "not a measured figure"."""
    value = device.get(figure)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan


def _bands(ctx: Context) -> Bands:
    return Bands(fail_ratio=ctx.options.perf_fail_ratio, warn_ratio=ctx.options.perf_warn_ratio)


def _judge_each_gpu(
    ctx: Context,
    figure: str,
    perf: list[tuple[dict[str, Any], Gpu | None]],
    host_kind: tuple[str, int, str],
) -> list[Judgement]:
    return [
        judge(
            figure,
            _where(d, g),
            _figure(d, figure),
            _expected(ctx, figure, gpu_expected(g, figure), host_kind),
            _bands(ctx),
        )
        for d, g in perf
    ]


def test_gpu_memory_bandwidth(
    ctx: Context,
    check: CheckRecord,
    perf: list[tuple[dict[str, Any], Gpu | None]],
    host_kind: tuple[str, int, str],
) -> None:
    _verdict(check, _judge_each_gpu(ctx, "hbm_copy_gbps", perf, host_kind), SLOW_FIX)


def test_matmul_throughput(
    ctx: Context,
    check: CheckRecord,
    perf: list[tuple[dict[str, Any], Gpu | None]],
    host_kind: tuple[str, int, str],
) -> None:
    check.figures["dtype"] = sorted({str(d.get("matmul_dtype")) for d, _ in perf})
    _verdict(check, _judge_each_gpu(ctx, "matmul_tflops", perf, host_kind), SLOW_FIX)


def test_host_device_bandwidth(
    ctx: Context,
    check: CheckRecord,
    perf: list[tuple[dict[str, Any], Gpu | None]],
    host_kind: tuple[str, int, str],
) -> None:
    out: list[Judgement] = []
    links: dict[str, dict[str, int | None]] = {}
    notes: dict[str, str] = {}
    for d, g in perf:
        where = _where(d, g)
        link = pcie_link(d.get("pcie_samples") or [])
        links[where] = link
        expect = link_expected(link["gen_max"], link["width_max"])
        if (link["gen"], link["width"]) != (link["gen_max"], link["width_max"]) and link["gen"]:
            notes[where] = (
                f" — the link runs at Gen{link['gen']} x{link['width']} under load, the slot allows "
                f"Gen{link['gen_max']} x{link['width_max']}"
            )
        for figure in ("h2d_gbps", "d2h_gbps"):
            out.append(
                judge(
                    figure, where, _figure(d, figure), _expected(ctx, figure, expect, host_kind), _bands(ctx)
                )
            )
    check.figures["pcie_link"] = links
    if any(not v["gen_max"] for v in links.values()):
        errors = sorted({str(d.get("smi_error")) for d, _ in perf if d.get("smi_error")})
        check.figures["pcie_link_unknown"] = "; ".join(errors) or "nvidia-smi printed no PCIe link figures"
    _verdict(
        check,
        out,
        "the GPU's PCIe link is slower than its slot allows (a riser, a Gen3 slot or a link trained at fewer "
        "lanes): show the report to the provider; loading data and checkpoints will be slow",
        notes,
    )


def test_clocks_under_load(check: CheckRecord, perf: list[tuple[dict[str, Any], Gpu | None]]) -> None:
    rows: dict[str, Any] = {}
    failing: list[str] = []
    for d, g in perf:
        where = _where(d, g)
        samples = d.get("load_samples") or []
        if not samples:
            rows[where] = {"samples": 0, "why": d.get("smi_error") or "no nvidia-smi samples"}
            continue
        bad, odd = clock_events(samples)
        clocks = [
            int(s["clocks.sm"].split()[0]) for s in samples if is_digits(s.get("clocks.sm", "").split()[0])
        ]
        temps = [int(s["temperature.gpu"]) for s in samples if is_digits(s.get("temperature.gpu", ""))]
        rows[where] = {
            "samples": len(samples),
            "sm_clock_mhz_min": min(clocks) if clocks else None,
            "sm_clock_mhz_max": max(clocks) if clocks else None,
            "sm_clock_max_mhz": samples[-1].get("clocks.max.sm"),
            "temperature_c_max": max(temps) if temps else None,
            "power_draw": [s.get("power.draw") for s in samples][-3:],
            "events": bad + odd,
        }
        if bad:
            failing.append(f"{where}: {', '.join(bad)}")
        for text in odd:
            check.warnings.append(f"{where}: {text} under load")
    check.figures["under_load"] = rows
    if failing:
        fail(
            "GPUs slow themselves down under load: " + "; ".join(failing),
            "a board that throttles in hardware is overheating or power-starved: ask the provider to check "
            "cooling and power, or for another machine",
        )
