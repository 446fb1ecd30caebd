"""The soak (``imagesmith validate --soak DURATION``): the time series of probes/soak.py and its verdict.

Pure: :func:`soak_series` turns the probe's records (JSON lines: windows of what each GPU delivered,
nvidia-smi samples, the compute processes) into one row per GPU and window; :func:`judge_soak` judges the
rows; the CSV and the timeline pictures are written from the same rows. Unit tests replay captured series
(healthy with the software power cap, a drop after the first minute, periodic co-tenant bursts, hardware
slowdown, a new Xid).

The criteria, per GPU and figure (bf16 matmul TFLOP/s, memory-copy GB/s, all_reduce busbw with 2+ GPUs):

- **the run's own first minute** is the reference: a later minute whose mean is below ``fail_ratio`` × the
  first minute's is a sustained drop (fail, naming the GPU, the minute, the figure and the ratio); below
  ``warn_ratio`` a warning. Windows below ``fail_ratio`` in at least 10 % of the windows after the first
  minute (3 at least) without a minute below it are recurring drops — a co-tenant's bursts, periodic
  throttling (fail); fewer warn;
- **the expected figures** (perf.toml, ``--baseline``, ``--baseline-from``): every minute's mean of the matmul
  and copy figures against them, with the performance bands of the other figures;
- **clock-event reasons** over every nvidia-smi sample: hardware slowdown, hardware thermal slowdown and the
  power brake fail; software thermal slowdown and lowered application clocks warn; the software power cap
  (0x4), which a healthy H100/H200 shows in every window at full load, is recorded, never judged;
- **Xid/SXid** lines the kernel log gained during the soak: hardware ones fail, others warn;
- **completeness** (:func:`completeness`): the probe's end record missing, a worker that exited non-zero or
  was killed by a signal without reporting an error, a GPU whose windows stop before the end, fewer GPUs
  measured than loaded — minutes that were not measured cannot have passed.
"""

from __future__ import annotations

import csv
import importlib
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagesmith.inputs import is_decimal
from imagesmith.validate.expected import (
    CLOCK_EVENTS_FAIL,
    CLOCK_EVENTS_WARN,
    Bands,
    Expected,
    Judgement,
    judge,
)
from imagesmith.validate.parsers import XidEvent, parse_xid

#: the software power cap: normal for a board at full load (NVML nvmlClocksEventReasonSwPowerCap)
SW_POWER_CAP = 0x4
FIGURES: tuple[str, ...] = ("matmul_tflops", "copy_gbps", "allreduce_busbw_gbps")
#: which expected figure (imagesmith/data/perf.toml) each soak figure is judged against
EXPECTED_FIGURE = {"matmul_tflops": "matmul_tflops", "copy_gbps": "hbm_copy_gbps"}
SOAK_LABELS = {
    "matmul_tflops": "dense matmul throughput",
    "copy_gbps": "device-memory copy bandwidth",
    "allreduce_busbw_gbps": "all_reduce busbw at 256 MiB",
}
SOAK_UNITS = {"matmul_tflops": "TFLOP/s", "copy_gbps": "GB/s", "allreduce_busbw_gbps": "GB/s"}
FIRST_MINUTE_S = 60.0
#: windows after the first minute below the fail ratio that make recurring drops: this share, and at least
RECURRING_SHARE = 0.10
RECURRING_MIN = 3
CSV_COLUMNS = (
    "gpu",
    "name",
    "window",
    "t_start_s",
    "t_end_s",
    "minute",
    "matmul_tflops",
    "copy_gbps",
    "allreduce_busbw_gbps",
    "sm_clock_mhz_min",
    "sm_clock_mhz_max",
    "temperature_c_max",
    "power_w_mean",
    "utilization_pct_mean",
    "clock_event_reasons",
    "sw_power_cap_samples",
    "smi_samples",
    "other_processes",
)


@dataclass(frozen=True)
class SoakRow:
    """What one GPU delivered in one window, with what nvidia-smi showed meanwhile."""

    gpu: str  #: "GPU 0 (NVIDIA H200)" (or "cuda:0 (…)" where nvidia-smi did not match it)
    name: str
    window: int
    t0: float
    t1: float
    matmul_tflops: float | None
    copy_gbps: float | None
    allreduce_busbw_gbps: float | None
    sm_clock_min: float | None = None
    sm_clock_max: float | None = None
    temperature_max: float | None = None
    power_mean: float | None = None
    utilization_mean: float | None = None
    #: OR of every sample's clocks_event_reasons.active in the window
    reasons: int = 0
    #: per reason bit, how many samples showed it
    reason_samples: Mapping[int, int] = field(default_factory=dict)
    samples: int = 0
    other_processes: tuple[str, ...] = ()
    #: per figure, what the window's record said where it was not a positive number (NaN, inf, -3, 0, "fast")
    unreadable: Mapping[str, str] = field(default_factory=dict)

    @property
    def minute(self) -> int:
        """1-based minute of the soak the window's middle falls in."""
        return int(((self.t0 + self.t1) / 2) // 60) + 1

    def value(self, figure: str) -> float | None:
        v = getattr(self, figure)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else None


@dataclass
class SoakSeries:
    rows: dict[str, list[SoakRow]] = field(default_factory=dict)
    duration_s: float = 0.0
    interval_s: float = 5.0
    world: int = 0
    errors: list[str] = field(default_factory=list)
    smi_errors: list[str] = field(default_factory=list)
    ours: frozenset[int] = frozenset()
    #: whether the probe's ``end`` record came (None: not known, a series read back from soak.csv)
    ended: bool | None = None
    #: the workers' exit codes from the ``end`` record (None: still running when the probe ended)
    exitcodes: tuple[int | None, ...] = ()
    #: the ranks that reported an error themselves, and the GPU label each rank measured
    error_ranks: frozenset[int] = frozenset()
    rank_gpu: Mapping[int, str] = field(default_factory=dict)
    #: CUDA devices the probe's torch saw
    cuda_devices: int = 0
    #: the nvidia-smi index of the GPU behind each label of ``rows`` (a label is words for the report: what
    #: the GPU is, is read from here, never from the label)
    gpu_index: dict[str, int] = field(default_factory=dict)

    def all_rows(self) -> list[SoakRow]:
        return [r for rows in self.rows.values() for r in rows]


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        first = value.strip().split()[:1]
        if not first or not is_decimal(first[0]):  # "[N/A]", "١٠": float() would take the latter
            return None
        v = float(first[0])
        return v if math.isfinite(v) else None
    return None


def _reasons(value: Any) -> int:
    if not isinstance(value, str):
        return 0
    try:
        return int(value.strip().split()[0], 0)
    except (ValueError, IndexError):
        return 0


def soak_series(
    records: Iterable[Mapping[str, Any]], *, smi_names: Mapping[str, int] | None = None
) -> SoakSeries:
    """The probe's records → one row per GPU and window. nvidia-smi samples and compute processes are matched
    to a worker's GPU by UUID (by CUDA index where the probe saw none) and to its window by time.
    *smi_names* maps a UUID to nvidia-smi's index (the GPU's name in the report)."""
    recs = [r for r in records if isinstance(r, Mapping)]
    series = SoakSeries()
    start = next((r for r in recs if r.get("kind") == "start"), {})
    series.duration_s = _num(start.get("duration_s")) or 0.0
    series.interval_s = _num(start.get("interval_s")) or 5.0
    series.world = int(_num(start.get("world")) or 0)
    series.ours = frozenset(int(p) for p in start.get("pids") or [] if isinstance(p, int))
    series.cuda_devices = int(_num(start.get("cuda_devices")) or 0)
    end = next((r for r in recs if r.get("kind") == "end"), None)
    series.ended = end is not None
    codes = end.get("exitcodes") if end is not None else None
    series.exitcodes = tuple(
        c if isinstance(c, int) and not isinstance(c, bool) else None
        for c in (codes if isinstance(codes, list) else [])
    )
    series.error_ranks = frozenset(
        int(r["rank"])
        for r in recs
        if r.get("kind") == "error" and isinstance(r.get("rank"), int) and not isinstance(r.get("rank"), bool)
    )
    rank_gpu: dict[int, str] = {}
    series.errors = [
        f"rank {r.get('rank')}: {r.get('error')}" if r.get("rank") is not None else str(r.get("error"))
        for r in recs
        if r.get("kind") == "error"
    ]
    series.smi_errors = sorted({str(r.get("error")) for r in recs if r.get("kind") == "smi_error"})
    # nvidia-smi's samples of a GPU, by ("uuid", UUID), or ("index", nvidia-smi's index) where it printed none
    smi: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for r in recs:
        if r.get("kind") == "smi":
            key = ("uuid", str(r["uuid"])) if r.get("uuid") else ("index", str(r.get("index")))
            smi.setdefault(key, []).append(r)
    apps = [r for r in recs if r.get("kind") == "apps"]
    index_of = dict(smi_names or {})
    for (by, gpu_id), samples in smi.items():
        if by == "uuid" and gpu_id not in index_of:
            idx = _num(samples[0].get("index"))
            if idx is not None:
                index_of[gpu_id] = int(idx)
    for w in sorted((r for r in recs if r.get("kind") == "window"), key=lambda r: _num(r.get("t0")) or 0.0):
        uuid = str(w.get("uuid") or "")
        name = str(w.get("name") or "?")
        cuda = int(_num(w.get("cuda_index")) or 0)
        key = ("uuid", uuid) if uuid and ("uuid", uuid) in smi else ("index", str(cuda))
        label = f"GPU {index_of[uuid]} ({name})" if uuid in index_of else f"cuda:{cuda} ({name})"
        if uuid in index_of:
            series.gpu_index[label] = index_of[uuid]
        t0, t1 = _num(w.get("t0")) or 0.0, _num(w.get("t1")) or 0.0
        inside = [s for s in smi.get(key, []) if t0 <= (_num(s.get("t")) or -1.0) < t1]
        clocks = [v for v in (_num(s.get("clocks.sm")) for s in inside) if v is not None]
        temps = [v for v in (_num(s.get("temperature.gpu")) for s in inside) if v is not None]
        power = [v for v in (_num(s.get("power.draw")) for s in inside) if v is not None]
        util = [v for v in (_num(s.get("utilization.gpu")) for s in inside) if v is not None]
        bits: dict[int, int] = {}
        ored = 0
        for s in inside:
            value = _reasons(s.get("clocks_event_reasons.active") or s.get("clocks_throttle_reasons.active"))
            ored |= value
            for bit in range(16):
                if value & (1 << bit):
                    bits[1 << bit] = bits.get(1 << bit, 0) + 1
        others: dict[str, float | None] = {}
        for a in apps:
            if t0 - series.interval_s <= (_num(a.get("t")) or -1.0) < t1:
                for p in a.get("apps") or []:
                    if not isinstance(p, Mapping) or (uuid and p.get("uuid") != uuid):
                        continue
                    pid = _num(p.get("pid"))
                    if pid is not None and int(pid) in series.ours:
                        continue
                    mib = _num(p.get("mib"))
                    who = f"pid {int(pid) if pid is not None else '?'} {p.get('name') or '?'}"
                    others[who] = (
                        max(mib or 0.0, others.get(who) or 0.0) if mib is not None else others.get(who)
                    )
        figures: dict[str, float | None] = {}
        unreadable: dict[str, str] = {}
        for figure in FIGURES:
            said = w.get(figure)
            measured = _num(said)
            figures[figure] = measured if measured is not None and measured > 0 else None
            if said is not None and figures[figure] is None:
                unreadable[figure] = repr(said)[:40]
        rank = _num(w.get("rank"))
        if rank is not None:
            rank_gpu.setdefault(int(rank), label)
        series.rows.setdefault(label, []).append(
            SoakRow(
                gpu=label,
                name=name,
                window=int(_num(w.get("window")) or 0),
                t0=t0,
                t1=t1,
                matmul_tflops=figures["matmul_tflops"],
                copy_gbps=figures["copy_gbps"],
                allreduce_busbw_gbps=figures["allreduce_busbw_gbps"],
                sm_clock_min=min(clocks) if clocks else None,
                sm_clock_max=max(clocks) if clocks else None,
                temperature_max=max(temps) if temps else None,
                power_mean=sum(power) / len(power) if power else None,
                utilization_mean=sum(util) / len(util) if util else None,
                reasons=ored,
                reason_samples=bits,
                samples=len(inside),
                other_processes=tuple(
                    who + (f" ({mib / 1024:.1f} GiB)" if mib is not None else "")
                    for who, mib in others.items()
                ),
                unreadable=unreadable,
            )
        )
    series.rank_gpu = rank_gpu
    return series


def _signal_name(code: int) -> str:
    import signal

    try:
        return f"signal {-code} ({signal.Signals(-code).name})"
    except ValueError:
        return f"signal {-code}"


def completeness(series: SoakSeries) -> list[str]:
    """What the probe did not finish: its end record missing (the probe was killed or its output cut), a
    worker that exited non-zero or was killed by a signal without saying why (the OOM killer, a segfault in
    the driver), a GPU whose windows stop before the soak's end, fewer GPUs measured than the probe loaded.
    Each is a failure: the minutes that were not measured cannot have passed. Not judged for a series read
    back from soak.csv (it keeps no end record)."""
    if series.ended is None:
        return []
    out: list[str] = []
    if not series.ended and not series.errors:
        out.append(
            "the soak probe stopped before its end: no end record (killed, or its output was cut short)"
        )
    for rank, code in enumerate(series.exitcodes):
        if code in (0, None) or rank in series.error_ranks:
            continue
        where = series.rank_gpu.get(rank, f"worker {rank}")
        how = f"was killed by {_signal_name(code)}" if code < 0 else f"exited with code {code}"
        out.append(f"{where}: the load worker (rank {rank}) {how} without reporting an error")
    if series.duration_s > 0:
        slack = 2 * series.interval_s + 5.0
        for label, rows in sorted(series.rows.items()):
            last = max(r.t1 for r in rows)
            if last < series.duration_s - slack:
                out.append(
                    f"{label}: its windows stop at {_clock(last)} of the {_clock(series.duration_s)} soak: "
                    "the load on this GPU stopped before the end"
                )
    loaded = min(series.world, series.cuda_devices) if series.world and series.cuda_devices else 0
    if series.rows and loaded and len(series.rows) < loaded:
        out.append(
            f"only {len(series.rows)} of the {loaded} GPUs the probe loaded reported a window "
            f"({', '.join(sorted(series.rows))})"
        )
    return out


def unloaded(series: SoakSeries, listed: Mapping[int, str]) -> list[str]:
    """The GPUs nvidia-smi listed when the suite started (*listed*: index → name) that the soak put no load
    on: one that fell off the bus or was taken away since, or a torch that sees fewer devices — a soak of
    the GPUs that are left says nothing about it. By nvidia-smi index where every GPU of the series has one
    (matched by UUID), else by count."""
    if not series.rows or not listed:
        return []
    if len(series.gpu_index) == len(series.rows):
        loaded = set(series.gpu_index.values())
        missing = [i for i in sorted(listed) if i not in loaded]
    else:
        missing = sorted(listed)[len(series.rows) :]
    seen = f"torch saw {series.cuda_devices} CUDA device(s)" if series.cuda_devices else "no window from it"
    return [
        f"GPU {i} ({listed[i]}): nvidia-smi listed it when the suite started, but the soak put no load on it "
        f"({seen}): it was lost or taken away since, or is hidden from CUDA"
        for i in missing
    ]


@dataclass(frozen=True, kw_only=True)
class SoakSettings:
    fail_ratio: float = 0.92
    warn_ratio: float = 0.96
    bands: Bands = field(default_factory=Bands)
    first_minute_s: float = FIRST_MINUTE_S


@dataclass
class SoakResult:
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: per GPU and figure: the first minute and every minute's mean and ratio
    minutes: list[dict[str, Any]] = field(default_factory=list)
    judgements: list[Judgement] = field(default_factory=list)
    summary: dict[str, float] = field(default_factory=dict)
    sentence: str = ""


def _full(rows: Sequence[SoakRow], interval: float) -> list[SoakRow]:
    """Windows long enough to count (the last one of a run is cut short when the time is up)."""
    return [r for r in rows if r.t1 - r.t0 >= 0.5 * interval]


def unmeasured(label: str, rows: Sequence[SoakRow], *, interval: float, world: int) -> list[str]:
    """What one GPU's windows leave unmeasured — each a failure, as minutes that were not measured cannot have
    passed: windows whose end is not after their start (0 s or a clock running backwards), stretches of the
    soak no window covers (from its start on; the end is :func:`completeness`'s), and windows that carry no
    figure where the load measures one (NaN, inf, 0, a negative number, text, nothing: what a broken torch or
    driver or a modified probe prints). The matmul and copy figures are in every window, all_reduce busbw with
    2+ workers (or where this GPU's other windows have it)."""
    out: list[str] = []
    backwards = [r for r in rows if r.t1 <= r.t0]
    if backwards:
        r = backwards[0]
        out.append(
            f"{label}: {len(backwards)} window(s) end before they start or take no time (window {r.window}: "
            f"{r.t0:g} s to {r.t1:g} s, minute {r.minute}): the probe's clock or its output is broken"
        )
    reach, slack = 0.0, 0.5 * interval
    for r in sorted((r for r in rows if r.t1 > r.t0), key=lambda r: r.t0):
        if r.t0 > reach + slack:
            first = int(reach // 60) + 1
            last = max(math.ceil((r.t0 - 1) / 60), first)  # a gap ending at 6:00 is minutes up to 6
            out.append(
                f"{label}: no window from {_clock(reach)} to {_clock(r.t0)} "
                f"({_minutes_text(range(first, last + 1))}): the load on this GPU was not measured then"
            )
        reach = max(reach, r.t1)
    full = _full([r for r in rows if r.t1 > r.t0], interval)
    for figure in FIGURES:
        if figure == "allreduce_busbw_gbps" and world < 2 and all(r.value(figure) is None for r in rows):
            continue
        missing = [r for r in full if r.value(figure) is None]
        if missing:
            r = missing[0]
            out.append(
                f"{label}: {SOAK_LABELS[figure]}: {len(missing)} of {len(full)} windows carry no figure, in "
                f"{_minutes_text(x.minute for x in missing)} (window {r.window} at {_clock(r.t0)} said "
                f"{r.unreadable.get(figure, 'nothing')}): not a measurement, those minutes were not judged"
            )
    return out


def _minutes_text(minutes: Iterable[int]) -> str:
    ms = sorted(set(minutes))
    if not ms:
        return ""
    spans: list[str] = []
    lo = prev = ms[0]
    for m in [*ms[1:], None]:
        if m is not None and m == prev + 1:
            prev = m
            continue
        spans.append(f"{lo}" if lo == prev else f"{lo}–{prev}")
        if m is not None:
            lo = prev = m
    return ("minute " if len(ms) == 1 else "minutes ") + ", ".join(spans)


def _clock(t: float) -> str:
    return f"{int(t // 60)}:{int(t % 60):02d}"


def judge_soak(
    series: SoakSeries,
    *,
    expected: Mapping[str, Mapping[str, Expected | None]] | None = None,
    new_xids: Sequence[tuple[XidEvent, str, int | None]] = (),
    settings: SoakSettings | None = None,
    listed: Mapping[int, str] | None = None,
    not_alone: Sequence[str] = (),
) -> SoakResult:
    """The verdict of a soak. *expected* maps a GPU's label and a soak figure to its expected value;
    *new_xids* are the kernel-log events that appeared during the soak (event, where, minute or None);
    *listed* the GPUs nvidia-smi listed when the suite started (index → name): each must be loaded;
    *not_alone* the failures of other processes that broke the free rule mid-soak
    (:func:`imagesmith.validate.alone.soak_intruders`)."""
    s = settings or SoakSettings()
    expected = expected or {}
    out = SoakResult()
    for e in series.errors:
        out.failures.append(f"the soak load failed: {e}")
    if not series.rows:
        out.failures.append("the soak produced no measurement (no worker reported a window)")
    out.failures += completeness(series)
    out.failures += unloaded(series, listed or {})
    ratios_all: list[float] = []
    per_gpu_means: dict[str, list[float]] = {f: [] for f in FIGURES}
    for label, rows in sorted(series.rows.items()):
        full = _full(rows, series.interval_s)
        first = [r for r in full if r.t1 <= s.first_minute_s + 0.5 * series.interval_s]
        later = [r for r in full if r not in first]
        most: dict[str, str] = {}
        for r in rows:
            for p in r.other_processes:
                who = p.split(" (")[0]
                most[who] = max(most.get(who, p), p, key=lambda t: _num(t.split("(")[-1]) or 0.0)
        others = sorted(most.values())
        since = min((r.minute for r in rows if r.other_processes), default=None)
        cotenant = (
            f" — other processes on this GPU meanwhile (from minute {since}): {'; '.join(others[:4])}"
            if others
            else ""
        )
        gpu_failures = unmeasured(label, rows, interval=series.interval_s, world=series.world)
        for figure in FIGURES:
            _judge_figure(
                label,
                figure,
                full,
                first,
                later,
                series=series,
                s=s,
                expected=expected,
                out=out,
                gpu_failures=gpu_failures,
                ratios_all=ratios_all,
                per_gpu_means=per_gpu_means,
            )
        out.failures += [f + cotenant for f in gpu_failures]
        if others and not gpu_failures:
            out.warnings.append(
                f"{label}: other processes used this GPU during the soak: {'; '.join(others[:4])}"
            )
        _clock_events(label, rows, out)
        if not any(r.samples for r in rows):
            out.warnings.append(f"{label}: no nvidia-smi sample matched this GPU: clocks and events unknown")
    for event, where, when in new_xids:
        line = f"{where}: {event.label} appeared in the kernel log during the soak" + (
            f" (minute {when})" if when else ""
        )
        (out.failures if event.hardware else out.warnings).append(line)
    out.failures += list(not_alone)
    for e in series.smi_errors:
        out.warnings.append(f"nvidia-smi sampling: {e}")
    out.summary = _summary(series, per_gpu_means, ratios_all)
    out.sentence = soak_sentence(series, out, new_xids=len(new_xids))
    return out


def _judge_figure(
    label: str,
    figure: str,
    full: Sequence[SoakRow],
    first: Sequence[SoakRow],
    later: Sequence[SoakRow],
    *,
    series: SoakSeries,
    s: SoakSettings,
    expected: Mapping[str, Mapping[str, Expected | None]],
    out: SoakResult,
    gpu_failures: list[str],
    ratios_all: list[float],
    per_gpu_means: dict[str, list[float]],
) -> None:
    """One figure of one GPU over the soak: each minute against the first minute (a low minute fails, a
    recurring drop fails, a single one warns), then the worst minute against the expected figure; into
    *out*, *gpu_failures*, *ratios_all* and *per_gpu_means*."""
    values = [(r, r.value(figure)) for r in full]
    have = [(r, v) for r, v in values if v is not None]
    if not have:
        return
    per_gpu_means[figure].append(statistics.fmean(v for _, v in have))
    ref_vals = [v for r, v in have if r in first]
    unit, what = SOAK_UNITS[figure], SOAK_LABELS[figure]
    if len(ref_vals) < 3:
        gpu_failures.append(
            f"{label}: {what}: {len(ref_vals)} window(s) with a figure in the first minute, 3 "
            "needed: no reference, so no later minute could be judged against it"
        )
        return
    ref = statistics.fmean(ref_vals)
    by_minute: dict[int, list[float]] = {}
    for r, v in have:
        by_minute.setdefault(r.minute, []).append(v)
    per_minute = max(1, round(60 / series.interval_s))
    table: list[dict[str, Any]] = []
    low_minutes: list[tuple[int, float, float]] = []
    warn_minutes: list[tuple[int, float, float]] = []
    for minute, vals in sorted(by_minute.items()):
        mean = statistics.fmean(vals)
        ratio = mean / ref if ref > 0 else 0.0
        partial = len(vals) < max(2, per_minute // 2)
        table.append(
            {"minute": minute, "mean": round(mean, 3), "ratio": round(ratio, 4), "windows": len(vals)}
        )
        if minute == 1 or partial:
            continue
        ratios_all.append(ratio)
        if ratio < s.fail_ratio:
            low_minutes.append((minute, mean, ratio))
        elif ratio < s.warn_ratio:
            warn_minutes.append((minute, mean, ratio))
    out.minutes.append(
        {
            "gpu": label,
            "figure": figure,
            "first_minute": round(ref, 3),
            "unit": unit,
            "minutes": table,
        }
    )
    if low_minutes:
        worst = min(low_minutes, key=lambda x: x[2])
        gpu_failures.append(
            f"{label}: {what} fell to {worst[2]:.2f}× the first minute in minute {worst[0]} "
            f"({worst[1]:.4g} vs {ref:.4g} {unit}); below {s.fail_ratio:.2f}× in "
            f"{_minutes_text(m for m, _, _ in low_minutes)} of {max(by_minute)} minutes"
        )
    else:
        dips = [(r, v / ref) for r, v in have if r in later and v / ref < s.fail_ratio]
        n_later = sum(1 for r, _ in have if r in later)
        if dips and len(dips) >= max(RECURRING_MIN, math.ceil(RECURRING_SHARE * n_later)):
            w = min(dips, key=lambda x: x[1])
            gpu_failures.append(
                f"{label}: {what} dropped below {s.fail_ratio:.2f}× the first minute in "
                f"{len(dips)} of {n_later} windows after it, in "
                f"{_minutes_text(r.minute for r, _ in dips)} (worst "
                f"{w[1]:.2f}× at {_clock(w[0].t0)}): recurring drops, as a co-tenant's bursts or "
                "periodic throttling make"
            )
        elif dips:
            w = min(dips, key=lambda x: x[1])
            out.warnings.append(
                f"{label}: {what} below {s.fail_ratio:.2f}× the first minute in {len(dips)} of "
                f"{n_later} windows (worst {w[1]:.2f}× at {_clock(w[0].t0)})"
            )
        if warn_minutes:
            worst = min(warn_minutes, key=lambda x: x[2])
            out.warnings.append(
                f"{label}: {what} at {worst[2]:.2f}× the first minute in minute {worst[0]} "
                f"({worst[1]:.4g} vs {ref:.4g} {unit})"
            )
    exp_figure = EXPECTED_FIGURE.get(figure)
    exp = (expected.get(label) or {}).get(figure) if exp_figure else None
    if exp_figure and exp is not None:
        judged = [
            judge(exp_figure, f"{label} minute {m}", statistics.fmean(v), exp, s.bands)
            for m, v in sorted(by_minute.items())
            if len(v) >= max(2, per_minute // 2) or m == 1
        ]
        if judged:
            worst_j = min(judged, key=lambda j: j.ratio if j.ratio is not None else -1.0)
            out.judgements.append(worst_j)
            if worst_j.verdict == "fail":
                gpu_failures.append(worst_j.sentence() + " (the worst minute of the soak)")
            elif worst_j.verdict == "warn":
                out.warnings.append(worst_j.sentence() + " (the worst minute of the soak)")


def _clock_events(label: str, rows: Sequence[SoakRow], out: SoakResult) -> None:
    """The clock events of one GPU over every sample of every window: a failing one fails, the others warn."""
    for bit, text in {**CLOCK_EVENTS_FAIL, **CLOCK_EVENTS_WARN}.items():
        hit = [r for r in rows if r.reasons & bit]
        if not hit:
            continue
        n = sum(r.reason_samples.get(bit, 0) for r in hit)
        line = (
            f"{label}: {text} in {n} of {sum(r.samples for r in rows)} nvidia-smi samples, "
            f"{_minutes_text(r.minute for r in hit)}"
        )
        (out.failures if bit in CLOCK_EVENTS_FAIL else out.warnings).append(line)


def _summary(series: SoakSeries, means: Mapping[str, list[float]], ratios: list[float]) -> dict[str, float]:
    summary: dict[str, float] = {}
    if series.duration_s:
        summary["soak_minutes"] = round(series.duration_s / 60, 2)
    if means.get("matmul_tflops"):
        summary["soak_matmul_tflops"] = round(statistics.median(means["matmul_tflops"]), 3)
    if means.get("copy_gbps"):
        summary["soak_copy_gbps"] = round(statistics.median(means["copy_gbps"]), 3)
    if ratios:
        summary["soak_worst_minute_ratio"] = round(min(ratios), 4)
    return summary


def _range(values: Iterable[float | None], fmt: str = ".0f") -> str | None:
    vs = [v for v in values if v is not None]
    if not vs:
        return None
    lo, hi = min(vs), max(vs)
    return f"{lo:{fmt}}" if f"{lo:{fmt}}" == f"{hi:{fmt}}" else f"{lo:{fmt}}–{hi:{fmt}}"


def soak_sentence(series: SoakSeries, result: SoakResult, *, new_xids: int = 0) -> str:
    """What the soak saw, in one sentence."""
    rows = [r for r in series.all_rows() if r.t1 - r.t0 >= 0.5 * series.interval_s]
    names = sorted({r.name for r in rows})
    parts = [
        f"Soak of {series.duration_s / 60:.1f} min on {len(series.rows)} GPU(s)"
        + (f" ({', '.join(names)})" if names else "")
        + f", {series.interval_s:g} s windows"
    ]
    figures = []
    for figure, label in (
        ("matmul_tflops", "matmul"),
        ("copy_gbps", "memory copy"),
        ("allreduce_busbw_gbps", "all_reduce busbw"),
    ):
        span = _range(r.value(figure) for r in rows)
        if span is None:
            continue
        worst = [
            min((m["ratio"] for m in entry["minutes"] if m["minute"] > 1), default=None)
            for entry in result.minutes
            if entry["figure"] == figure
        ]
        ws = [w for w in worst if w is not None]
        figures.append(
            f"{label} {span} {SOAK_UNITS[figure]} per window"
            + (f" (worst minute {min(ws):.2f}× the first)" if ws else "")
        )
    if figures:
        parts.append(", ".join(figures))
    clocks = _range(v for r in rows for v in (r.sm_clock_min, r.sm_clock_max))
    temp = _range((r.temperature_max for r in rows), ".0f")
    power = _range((r.power_mean for r in rows), ".0f")
    env = []
    if clocks:
        env.append(f"SM clock {clocks} MHz")
    if temp:
        env.append(f"up to {temp.split('–')[-1]} °C")
    if power:
        env.append(f"{power} W")
    if env:
        parts.append(", ".join(env))
    samples = sum(r.samples for r in rows)
    cap = sum(r.reason_samples.get(SW_POWER_CAP, 0) for r in rows)
    events = sorted(
        {
            text
            for r in rows
            for bit, text in {**CLOCK_EVENTS_FAIL, **CLOCK_EVENTS_WARN}.items()
            if r.reasons & bit
        }
    )
    ev = "clock events: " + (
        f"SW power cap in {cap / samples:.0%} of {samples} samples (normal at full load)"
        if samples and cap
        else "no SW power cap"
    )
    ev += "; " + (", ".join(e.split(" (")[0] for e in events) if events else "no hardware slowdown")
    parts.append(ev)
    parts.append(f"{new_xids} new Xid" if new_xids else "no new Xid")
    verdict = f"failed ({len(result.failures)} problem(s) below)" if result.failures else "passed"
    return "; ".join(parts) + f" — {verdict}."


# -- the kernel log around the soak ------------------------------------------------------------

_STAMP = re.compile(r"^\[\s*([0-9]+(?:\.[0-9]+)?)\]")


def new_kernel_events(
    before: str, after: str, *, uptime_at_start: float | None
) -> list[tuple[XidEvent, int | None]]:
    """Xid/SXid events in *after* (the kernel log after the soak) that were not in *before*, each with the
    1-based minute of the soak it came in (from dmesg's seconds-since-boot stamp and the uptime at the start),
    or None where the line has no stamp."""
    seen: dict[str, int] = {}
    for line in before.splitlines():
        seen[line] = seen.get(line, 0) + 1
    fresh: list[str] = []
    for line in after.splitlines():
        if seen.get(line, 0):
            seen[line] -= 1
        else:
            fresh.append(line)
    out: list[tuple[XidEvent, int | None]] = []
    for line in fresh:
        for event in parse_xid(line):
            m = _STAMP.match(line.strip())
            minute = None
            if m and uptime_at_start is not None:
                minute = max(1, int((float(m.group(1)) - uptime_at_start) // 60) + 1)
            out.append((event, minute))
    return out


# -- the evidence: CSV and pictures ------------------------------------------------------------


def write_csv(series: SoakSeries, path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(CSV_COLUMNS)
        for r in sorted(series.all_rows(), key=lambda r: (r.gpu, r.t0)):

            def f(v: float | None, digits: int = 3) -> str:
                return "" if v is None else f"{v:.{digits}f}"

            w.writerow(
                [
                    r.gpu,
                    r.name,
                    r.window,
                    f(r.t0),
                    f(r.t1),
                    r.minute,
                    f(r.matmul_tflops),
                    f(r.copy_gbps),
                    f(r.allreduce_busbw_gbps),
                    f(r.sm_clock_min, 0),
                    f(r.sm_clock_max, 0),
                    f(r.temperature_max, 0),
                    f(r.power_mean, 1),
                    f(r.utilization_mean, 1),
                    f"0x{r.reasons:x}",
                    r.reason_samples.get(SW_POWER_CAP, 0),
                    r.samples,
                    "; ".join(r.other_processes),
                ]
            )


def read_csv(path: Path) -> SoakSeries:
    """A soak.csv back into a series (unit tests replay committed captures this way)."""
    series = SoakSeries()
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            reasons = int(row["clock_event_reasons"] or "0", 0)
            samples = int(row["smi_samples"] or 0)
            cap = int(row["sw_power_cap_samples"] or 0)
            bits = {1 << b: samples for b in range(16) if reasons & (1 << b)}
            if reasons & SW_POWER_CAP:
                bits[SW_POWER_CAP] = cap
            r = SoakRow(
                gpu=row["gpu"],
                name=row["name"],
                window=int(row["window"]),
                t0=float(row["t_start_s"]),
                t1=float(row["t_end_s"]),
                matmul_tflops=_num(row["matmul_tflops"]),
                copy_gbps=_num(row["copy_gbps"]),
                allreduce_busbw_gbps=_num(row["allreduce_busbw_gbps"]),
                sm_clock_min=_num(row["sm_clock_mhz_min"]),
                sm_clock_max=_num(row["sm_clock_mhz_max"]),
                temperature_max=_num(row["temperature_c_max"]),
                power_mean=_num(row["power_w_mean"]),
                utilization_mean=_num(row["utilization_pct_mean"]),
                reasons=reasons,
                reason_samples=bits,
                samples=samples,
                other_processes=tuple(p for p in row["other_processes"].split("; ") if p),
            )
            series.rows.setdefault(r.gpu, []).append(r)
    rows = series.all_rows()
    if rows:
        series.duration_s = max(r.t1 for r in rows)
        widths = sorted(r.t1 - r.t0 for r in rows)
        series.interval_s = round(widths[len(widths) // 2])
    return series


def write_plots(
    series: SoakSeries, result: SoakResult, folder: Path, *, fail_ratio: float
) -> tuple[list[str], str]:
    """One timeline picture per GPU (``soak-gpu<N>.png``): each figure relative to its first minute with the
    fail line, the SM clock and temperature, the power and the windows with a hardware clock event. Needs
    matplotlib (``pip install 'imagesmith[plot]'``); without it, the CSV alone and a note."""
    if not series.rows:
        return [], "skipped: no soak window"
    try:
        matplotlib = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return (
            [],
            "skipped: matplotlib is not installed (pip install 'imagesmith[plot]'); soak.csv has the series",
        )
    refs = {(m["gpu"], m["figure"]): m["first_minute"] for m in result.minutes}
    written: list[str] = []
    for n, (label, rows) in enumerate(sorted(series.rows.items())):
        m = re.match(r"(?:GPU |cuda:)([0-9]+)", label)
        name = f"soak-gpu{m.group(1) if m else n}.png"
        fig, axes = plt.subplots(3, 1, figsize=(10, 7.5), dpi=100, sharex=True)
        mids = [(r.t0 + r.t1) / 2 / 60 for r in rows]
        ax = axes[0]
        for figure in FIGURES:
            ref = refs.get((label, figure))
            vals = [r.value(figure) for r in rows]
            if not ref or not any(v is not None for v in vals):
                continue
            ax.plot(
                [x for x, v in zip(mids, vals, strict=True) if v is not None],
                [v / ref for v in vals if v is not None],
                marker="o",
                markersize=2,
                label=f"{SOAK_LABELS[figure]} (1.00 = {ref:.4g} {SOAK_UNITS[figure]})",
            )
        ax.axhline(
            fail_ratio, color="red", linestyle="--", linewidth=1, label=f"fail below {fail_ratio:.2f}×"
        )
        ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
        ax.set_ylabel("× the first minute")
        ax.legend(fontsize=7, loc="lower left")
        ax.grid(True, alpha=0.3)
        ax.set_title(f"{label}: soak timeline")
        ax2 = axes[1]
        ax2.plot(
            mids, [r.sm_clock_min for r in rows], color="tab:blue", linewidth=1, label="SM clock min (MHz)"
        )
        ax2.plot(
            mids, [r.sm_clock_max for r in rows], color="tab:cyan", linewidth=1, label="SM clock max (MHz)"
        )
        ax2.set_ylabel("MHz")
        ax2.grid(True, alpha=0.3)
        ax2b = ax2.twinx()
        ax2b.plot(
            mids, [r.temperature_max for r in rows], color="tab:red", linewidth=1, label="temperature (°C)"
        )
        ax2b.set_ylabel("°C")
        ax2.legend(fontsize=7, loc="lower left")
        ax2b.legend(fontsize=7, loc="lower right")
        ax3 = axes[2]
        ax3.plot(mids, [r.power_mean for r in rows], color="tab:orange", linewidth=1, label="power (W)")
        for r in rows:
            bad = r.reasons & sum(CLOCK_EVENTS_FAIL)
            if bad:
                ax3.axvspan(r.t0 / 60, r.t1 / 60, color="red", alpha=0.2)
            if r.other_processes:
                ax3.axvspan(r.t0 / 60, r.t1 / 60, color="purple", alpha=0.1)
        ax3.set_ylabel("W")
        ax3.set_xlabel("minutes (red: hardware clock event; purple: another process on the GPU)")
        ax3.grid(True, alpha=0.3)
        ax3.legend(fontsize=7, loc="lower left")
        fig.tight_layout()
        fig.savefig(folder / name)
        plt.close(fig)
        written.append(name)
    return written, ", ".join(written)
