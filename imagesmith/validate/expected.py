"""What a healthy host delivers (``imagesmith/data/perf.toml``) and the verdict bands measured figures get.

Pure: no target, no pytest. The suite's performance checks and the NCCL check ask :func:`gpu_expected`,
:func:`link_expected` and :func:`allreduce_expected` for an :class:`Expected` and hand it, with the measured
figure, to :func:`judge`.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from imagesmith import compat, schema
from imagesmith.index import ReleaseIndex
from imagesmith.inputs import is_digits

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 images
    import tomli as tomllib
from imagesmith.nvsmi import SmiGpu

DATA_FILE = "imagesmith/data/perf.toml"
#: an estimate (datasheet peak × the probe's efficiency) fails only below this fraction
ESTIMATE_FAIL_RATIO = 0.5
FIGURES = schema.PERF_FIGURES
UNITS = {
    "hbm_copy_gbps": "GB/s",
    "matmul_tflops": "TFLOP/s",
    "h2d_gbps": "GB/s",
    "d2h_gbps": "GB/s",
    "allreduce_busbw_gbps": "GB/s",
    "scaling_efficiency": "×",
}
LABELS = {
    "hbm_copy_gbps": "device-memory copy bandwidth",
    "matmul_tflops": "dense matmul throughput",
    "h2d_gbps": "host-to-device bandwidth",
    "d2h_gbps": "device-to-host bandwidth",
    "allreduce_busbw_gbps": "all_reduce bus bandwidth at 1 GiB",
    "scaling_efficiency": "DDP scaling efficiency",
}

Kind = Literal["baseline", "estimate"]
Verdict = Literal["pass", "warn", "fail", "no-baseline"]


class PerfDataError(compat.DataError):
    """perf.toml is broken (a packaging bug, not user input)."""


@dataclass(frozen=True, kw_only=True)
class Expected:
    """An expected figure: ``baseline`` = measured on a healthy host (bands apply), ``estimate`` = derived."""

    value: float
    kind: Kind
    source: str


@dataclass(frozen=True, kw_only=True)
class Judgement:
    figure: str
    where: str
    measured: float
    expected: float | None
    ratio: float | None
    kind: Kind | None
    source: str
    verdict: Verdict

    def to_json(self) -> dict[str, Any]:
        return {
            "figure": self.figure,
            "where": self.where,
            # NaN/inf are not JSON: a figure the probe could not measure is null (and its verdict "fail")
            "measured": round(self.measured, 3) if math.isfinite(self.measured) else None,
            "expected": None if self.expected is None else round(self.expected, 3),
            "ratio": None if self.ratio is None else round(self.ratio, 4),
            "kind": self.kind,
            "source": self.source,
            "verdict": self.verdict,
        }

    def sentence(self) -> str:
        unit = UNITS.get(self.figure, "")
        text = f"{self.where}: {LABELS.get(self.figure, self.figure)} {self.measured:.4g} {unit}"
        if not math.isfinite(self.measured) or self.measured < 0:
            return (
                f"{self.where}: {LABELS.get(self.figure, self.figure)} came out as {self.measured:g}, not a "
                "measured figure (the probe's timing failed: a crashed or stalled GPU)"
            )
        if self.expected is None or self.ratio is None:
            return text + f" (no baseline: {self.source})"
        return (
            text
            + f" = {self.ratio:.2f} × the expected {self.expected:.4g} {unit} ({self.kind}: {self.source})"
        )


@dataclass(frozen=True, kw_only=True)
class Bands:
    fail_ratio: float = 0.80
    warn_ratio: float = 0.90

    def __post_init__(self) -> None:
        if not 0 < self.fail_ratio <= self.warn_ratio <= 1.5:
            raise ValueError(
                f"performance bands need 0 < fail ratio ({self.fail_ratio}) ≤ warn ratio "
                f"({self.warn_ratio}) ≤ 1.5"
            )


def judge(figure: str, where: str, measured: float, expected: Expected | None, bands: Bands) -> Judgement:
    """The verdict of one measured figure. A baseline fails below ``bands.fail_ratio`` and warns below
    ``bands.warn_ratio``; an estimate fails below :data:`ESTIMATE_FAIL_RATIO` and warns below the fail band.
    """
    if not math.isfinite(measured) or measured < 0:
        # a probe that printed NaN/inf measured nothing: never a pass, never "no baseline"
        return Judgement(
            figure=figure,
            where=where,
            measured=measured,
            expected=expected.value if expected else None,
            ratio=None,
            kind=expected.kind if expected else None,
            source=expected.source if expected else "",
            verdict="fail",
        )
    if expected is None or expected.value <= 0:
        return Judgement(
            figure=figure,
            where=where,
            measured=measured,
            expected=None,
            ratio=None,
            kind=None,
            source=f"{DATA_FILE} has no row for it",
            verdict="no-baseline",
        )
    ratio = measured / expected.value
    if expected.kind == "baseline":
        fail_at, warn_at = bands.fail_ratio, bands.warn_ratio
    else:
        fail_at, warn_at = min(ESTIMATE_FAIL_RATIO, bands.fail_ratio), bands.fail_ratio
    verdict: Verdict = "fail" if ratio < fail_at else "warn" if ratio < warn_at else "pass"
    return Judgement(
        figure=figure,
        where=where,
        measured=measured,
        expected=expected.value,
        ratio=ratio,
        kind=expected.kind,
        source=expected.source,
        verdict=verdict,
    )


# ------------------------------------------------------------------------------------------------------------
# the data


@dataclass(frozen=True, kw_only=True)
class GpuPerf:
    gpu: str
    hbm_copy_gbps: float | None
    matmul_tflops: float | None
    measured: str
    date: str
    hbm_peak_gbps: float | None
    matmul_peak_tflops: float | None
    datasheet: str


@dataclass(frozen=True, kw_only=True)
class AllreduceRow:
    gpu: str
    count: int
    link: str
    busbw_gbps: float
    source: str
    date: str


@dataclass(frozen=True, kw_only=True)
class ScalingRow:
    """The expected DDP scaling efficiency over one class of link (``topo``: nvidia-smi topo -m codes)."""

    link: str
    topo: tuple[str, ...]
    efficiency: float
    source: str
    date: str

    def covers(self, code: str) -> bool:
        return code in self.topo or ("NV#" in self.topo and code.startswith("NV") and is_digits(code[2:]))


@dataclass(frozen=True, kw_only=True)
class PerfData:
    hbm_copy_efficiency: float
    matmul_efficiency: float
    pcie_efficiency: float
    efficiency_source: str
    pcie_gbps_per_lane: Mapping[int, float]
    gpus: Mapping[str, GpuPerf]
    allreduce: tuple[AllreduceRow, ...]
    scaling: tuple[ScalingRow, ...] = ()


def _num(row: Mapping[str, Any], key: str, where: str, *, required: bool = False) -> float | None:
    value = row.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise PerfDataError(f"{DATA_FILE}: {where}.{key} must be a positive number, not {value!r}")
    return float(value)


def _text(row: Mapping[str, Any], key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise PerfDataError(
            f"{DATA_FILE}: {where}.{key} must be a non-empty string (every row has its source)"
        )
    return value


def parse_perf(data: Mapping[str, Any], *, known_gpus: Iterable[str]) -> PerfData:
    known = set(known_gpus)
    probe = data.get("probe")
    if not isinstance(probe, dict):
        raise PerfDataError(f"{DATA_FILE}: [probe] is missing")
    eff = {
        key: _num(probe, key, "probe", required=True)
        for key in ("hbm_copy_efficiency", "matmul_efficiency", "pcie_efficiency")
    }
    lanes: dict[int, float] = {}
    for i, row in enumerate(data.get("pcie", [])):
        gen = row.get("gen")
        if not isinstance(gen, int) or gen in lanes:
            raise PerfDataError(f"{DATA_FILE}: pcie[{i}].gen must be a unique integer, not {gen!r}")
        _text(row, "source", f"pcie[{i}]")
        lanes[gen] = float(_num(row, "gbps_per_lane", f"pcie[{i}]", required=True) or 0)
    gpus: dict[str, GpuPerf] = {}
    for i, row in enumerate(data.get("gpu", [])):
        where = f"gpu[{i}]"
        key = _text(row, "gpu", where)
        if key not in known or key in gpus:
            raise PerfDataError(f"{DATA_FILE}: {where}.gpu {key!r} is not a gpus.toml key or is listed twice")
        measured = row.get("measured", "")
        perf = GpuPerf(
            gpu=key,
            hbm_copy_gbps=_num(row, "hbm_copy_gbps", where),
            matmul_tflops=_num(row, "matmul_tflops", where),
            measured=_text(row, "measured", where) if measured else "",
            date=_text(row, "date", where) if measured else "",
            hbm_peak_gbps=_num(row, "hbm_peak_gbps", where),
            matmul_peak_tflops=_num(row, "matmul_peak_tflops", where),
            datasheet=_text(row, "source", where),
        )
        if (perf.hbm_copy_gbps or perf.matmul_tflops) and not perf.measured:
            raise PerfDataError(f"{DATA_FILE}: {where} has measured figures but no `measured` source")
        gpus[key] = perf
    rows = []
    for i, row in enumerate(data.get("allreduce", [])):
        where = f"allreduce[{i}]"
        key = _text(row, "gpu", where)
        count = row.get("count")
        if key not in known or not isinstance(count, int) or count < 2:
            raise PerfDataError(f"{DATA_FILE}: {where}: gpu {key!r} unknown or count {count!r} < 2")
        rows.append(
            AllreduceRow(
                gpu=key,
                count=count,
                link=_text(row, "link", where),
                busbw_gbps=float(_num(row, "busbw_gbps", where, required=True) or 0),
                source=_text(row, "source", where),
                date=_text(row, "date", where),
            )
        )
    scaling = []
    for i, row in enumerate(data.get("scaling", [])):
        where = f"scaling[{i}]"
        topo = row.get("topo")
        if not isinstance(topo, list) or not topo or not all(isinstance(t, str) and t for t in topo):
            raise PerfDataError(f"{DATA_FILE}: {where}.topo must be a list of nvidia-smi topo codes")
        eff_value = _num(row, "efficiency", where, required=True) or 0.0
        if eff_value > 1:
            raise PerfDataError(f"{DATA_FILE}: {where}.efficiency {eff_value} is above 1")
        scaling.append(
            ScalingRow(
                link=_text(row, "link", where),
                topo=tuple(topo),
                efficiency=eff_value,
                source=_text(row, "source", where),
                date=_text(row, "date", where),
            )
        )
    return PerfData(
        scaling=tuple(scaling),
        hbm_copy_efficiency=float(eff["hbm_copy_efficiency"] or 0),
        matmul_efficiency=float(eff["matmul_efficiency"] or 0),
        pcie_efficiency=float(eff["pcie_efficiency"] or 0),
        efficiency_source=_text(probe, "source", "probe"),
        pcie_gbps_per_lane=lanes,
        gpus=gpus,
        allreduce=tuple(rows),
    )


@cache
def perf_data() -> PerfData:
    text = resources.files("imagesmith.data").joinpath("perf.toml").read_text(encoding="utf-8")
    return parse_perf(tomllib.loads(text), known_gpus=[g.key for g in compat.gpus()])


# ------------------------------------------------------------------------------------------------------------
# lookups


def model_of(gpu: SmiGpu) -> compat.Gpu | None:
    """The gpus.toml row of an observed GPU: its name, narrowed by memory when several models share it."""
    models = list(compat.gpu_candidates(gpu.name))
    if gpu.memory_mib and len(models) > 1:
        models = [g for g in models if abs(g.memory_mib - gpu.memory_mib) <= max(1024, g.memory_mib // 20)]
    return models[0] if len(models) == 1 else None


def gpu_expected(gpu: SmiGpu | None, figure: str, data: PerfData | None = None) -> Expected | None:
    """hbm_copy_gbps / matmul_tflops of a healthy board of this GPU's model."""
    data = data or perf_data()
    model = model_of(gpu) if gpu is not None else None
    row = data.gpus.get(model.key) if model else None
    if row is None:
        return None
    value = getattr(row, figure, None)
    if value:
        return Expected(value=value, kind="baseline", source=f"{row.gpu}: {row.measured} ({row.date})")
    peak, eff = (
        (row.hbm_peak_gbps, data.hbm_copy_efficiency)
        if figure == "hbm_copy_gbps"
        else (row.matmul_peak_tflops, data.matmul_efficiency)
    )
    if not peak:
        return None
    return Expected(
        value=peak * eff,
        kind="estimate",
        source=f"{row.gpu}: datasheet peak {peak:g} × probe efficiency {eff:g} ({row.datasheet})",
    )


def link_expected(gen: int | None, width: int | None, data: PerfData | None = None) -> Expected | None:
    """Host↔device bandwidth of a healthy PCIe link of this generation and width."""
    data = data or perf_data()
    if not gen or not width or gen not in data.pcie_gbps_per_lane:
        return None
    per_lane = data.pcie_gbps_per_lane[gen]
    return Expected(
        value=per_lane * width * data.pcie_efficiency,
        kind="baseline",
        source=f"PCIe Gen{gen} x{width}: {per_lane:g} GB/s/lane × {width} × {data.pcie_efficiency:g} "
        f"(efficiency: {data.efficiency_source})",
    )


def allreduce_expected(
    gpu: SmiGpu | None, count: int, link: str | None, data: PerfData | None = None
) -> Expected | None:
    """The all_reduce busbw of a healthy host of this model and GPU count. A row measured over another link
    still applies — a host whose NVLink bond is narrower than the model's (NV12 where H200 SXM has NV18) is a
    degraded host, not another kind — and the source says so."""
    data = data or perf_data()
    model = model_of(gpu) if gpu is not None else None
    if model is None:
        return None
    rows = [r for r in data.allreduce if r.gpu == model.key and r.count == count]
    row = next((r for r in rows if r.link == link), rows[0] if rows else None)
    if row is None:
        return None
    note = (
        "" if row.link == link else f"; measured over {row.link}, this host's weakest link is {link or '?'}"
    )
    return Expected(
        value=row.busbw_gbps,
        kind="baseline",
        source=f"{row.count}×{row.gpu} {row.link}: {row.source} ({row.date}){note}",
    )


def scaling_expected(link: str | None, data: PerfData | None = None) -> Expected | None:
    """The DDP scaling efficiency a healthy host whose weakest GPU pair is *link* (``NV18``, ``PXB``, ``SYS``)
    reaches with the suite's step (perf.toml ``[[scaling]]``)."""
    data = data or perf_data()
    row = next((r for r in data.scaling if link and r.covers(link)), None)
    if row is None:
        return None
    return Expected(
        value=row.efficiency,
        kind="baseline",
        source=f"{row.link} ({link}): {row.source} ({row.date})",
    )


def median_expected(values: Iterable[float], source: str) -> Expected | None:
    """A fleet or report baseline: the median of healthy measurements."""
    vals = [float(v) for v in values if v]
    if not vals:
        return None
    return Expected(value=statistics.median(vals), kind="baseline", source=source)


# ------------------------------------------------------------------------------------------------------------
# what the perf probe saw


#: nvidia-smi clocks_event_reasons bits (NVML nvmlClocksEventReason*): those that mean the board slows itself
#: down because something is wrong (fail), those a user should know about (warn); the rest (idle, the software
#: power cap every busy H100/H200 runs at, sync boost, display clocks) are normal under load.
CLOCK_EVENTS_FAIL = {
    0x8: "hardware slowdown (HW_SLOWDOWN: overheating or an external power brake)",
    0x40: "hardware thermal slowdown (HW_THERMAL_SLOWDOWN)",
    0x80: "hardware power-brake slowdown (HW_POWER_BRAKE_SLOWDOWN)",
}
CLOCK_EVENTS_WARN = {
    0x2: "application clocks set below the default (APPLICATIONS_CLOCKS_SETTING)",
    0x20: "software thermal slowdown (SW_THERMAL_SLOWDOWN)",
}


def _int(text: str | None) -> int | None:
    if not text:
        return None
    try:
        return int(str(text).split()[0], 0)
    except ValueError:
        return None


def clock_events(samples: Iterable[Mapping[str, str]]) -> tuple[list[str], list[str]]:
    """(failing reasons, warning reasons) seen in any sample taken under load."""
    seen = 0
    for s in samples:
        seen |= _int(s.get("clocks_event_reasons.active")) or 0
    fails = [text for bit, text in CLOCK_EVENTS_FAIL.items() if seen & bit]
    warns = [text for bit, text in CLOCK_EVENTS_WARN.items() if seen & bit]
    return fails, warns


def pcie_link(samples: Iterable[Mapping[str, str]]) -> dict[str, int | None]:
    """The PCIe link under load: the best current generation/width seen, and the maxima the slot allows."""
    rows = list(samples)

    def best(key: str) -> int | None:
        values = [v for v in (_int(s.get(key)) for s in rows) if v is not None]
        return max(values) if values else None

    return {
        "gen": best("pcie.link.gen.current"),
        "gen_max": best("pcie.link.gen.max"),
        "width": best("pcie.link.width.current"),
        "width_max": best("pcie.link.width.max"),
    }


def match_device(device: Mapping[str, Any], gpus: list[SmiGpu], position: int) -> SmiGpu | None:
    """The nvidia-smi GPU of a torch device: by UUID (or PCI bus id) when the probe saw one, else by position
    (torch and nvidia-smi both order by PCI bus id when CUDA_VISIBLE_DEVICES does not reorder)."""
    ident = str(device.get("smi_id") or "")
    if ident:
        for g in gpus:
            if g.uuid and g.uuid.lower() == ident.lower():
                return g
            if g.bus_id and ":" in ident and g.bus_id.lower().endswith(ident.lower()[-7:]):
                return g
    return gpus[position] if position < len(gpus) else None


# ------------------------------------------------------------------------------------------------------------
# the fleet: what validated hosts of a release index measured


def fleet_groups(index: ReleaseIndex) -> list[dict[str, Any]]:
    """The index's validated hosts grouped by GPU model, count and link, each figure the median over the
    hosts of a group (a report counted once, however many images it validated)."""
    seen: set[str] = set()
    groups: dict[tuple[str, int, str], dict[str, list[float]]] = {}
    hosts: dict[tuple[str, int, str], int] = {}
    for image in index.images:
        for v in image.validated_on:
            if v.report_digest in seen or not v.figures:
                continue
            seen.add(v.report_digest)
            key = (v.gpu, v.count, v.link)
            hosts[key] = hosts.get(key, 0) + 1
            for figure, value in v.figures.items():
                groups.setdefault(key, {}).setdefault(figure, []).append(float(value))
    return [
        {
            "gpu": gpu,
            "count": count,
            "link": link,
            "hosts": hosts[(gpu, count, link)],
            "figures": {f: statistics.median(vals) for f, vals in sorted(figures.items())},
        }
        for (gpu, count, link), figures in sorted(groups.items())
    ]


def fleet_expected(
    groups: Iterable[Mapping[str, Any]], *, gpu: str, count: int, link: str, figure: str, source: str
) -> Expected | None:
    """The fleet median of *figure* for hosts of the same GPU model, count and link (same model and count
    over another link when the index has none over this one, and the source says so)."""
    same = [
        g
        for g in groups
        if (g.get("gpu"), g.get("count")) == (gpu, count) and (g.get("figures") or {}).get(figure)
    ]
    exact = [g for g in same if (g.get("link") or "") == (link or "")]
    for g in exact or same:
        value = float(g["figures"][figure])
        note = (
            "" if g in exact else f" (over {g.get('link') or '?'}; this host's weakest link is {link or '?'})"
        )
        return Expected(
            value=value,
            kind="baseline",
            source=f"fleet median of {g.get('hosts')} validated {count}× {gpu} host(s)"
            + (f" over {g.get('link')}" if g.get("link") and g in exact else "")
            + f" in {source}{note}",
        )
    return None


def chosen_expected(
    figure: str,
    fallback: Expected | None,
    *,
    baseline_figures: Mapping[str, float],
    baseline_source: str,
    fleet: Iterable[Mapping[str, Any]],
    fleet_source: str,
    host_kind: tuple[str, int, str],
) -> Expected | None:
    """--baseline report, else the fleet of --baseline-from (same GPU model, count and link), else
    *fallback* (imagesmith/data/perf.toml)."""
    value = baseline_figures.get(figure)
    if value:
        return Expected(value=value, kind="baseline", source=baseline_source or "--baseline")
    gpu, count, link = host_kind
    found = fleet_expected(fleet, gpu=gpu, count=count, link=link, figure=figure, source=fleet_source)
    return found or fallback


def options_expected(
    options: Any, figure: str, fallback: Expected | None, host_kind: tuple[str, int, str]
) -> Expected | None:
    """:func:`chosen_expected` with the baselines of a run's SuiteOptions."""
    return chosen_expected(
        figure,
        fallback,
        baseline_figures=options.baseline_figures,
        baseline_source=options.baseline_source,
        fleet=options.fleet,
        fleet_source=options.fleet_source,
        host_kind=host_kind,
    )
