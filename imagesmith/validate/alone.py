""" "Yours alone" for the whole run, not only its first seconds (issue 33): the free rule of
:mod:`imagesmith.validate.free` — memory held by other processes above ``--foreign-memory-max`` — applied to
every sample the soak probe takes of the compute processes (every 5 s), and again at the end of the suite
(``test_gpus_still_free``). A process that arrives mid-soak and holds more than the limit fails the run,
named with its pid, the memory it held, when it came and what it cost (the GPU's matmul and copy throughput
after it came against before).

Pure: :func:`soak_intruders` reads the probe's raw records (the ``start`` record names the soak's own
pids; ``apps`` records list the compute processes, ``smi`` records each GPU's memory in use) and the
:class:`~imagesmith.validate.soak.SoakSeries` built from them, so unit tests replay captures over time.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from imagesmith.nvsmi import SmiGpu
from imagesmith.validate.free import foreign_limit_mib, nvsmi_count
from imagesmith.validate.soak import SoakSeries


@dataclass(frozen=True)
class Intruder:
    gpu: int
    label: str
    pid: int | None
    name: str
    #: the most memory it held in a sample, MiB; when it was first seen, seconds into the soak
    mib: float
    since_s: float
    #: the foreign total that first broke the limit, and when
    breach_mib: float
    breach_s: float
    limit_mib: float
    #: the GPU's throughput after it came / before, per figure (None: not enough windows on a side)
    cost: Mapping[str, float | None]

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "pid": self.pid,
            "name": self.name,
            "gib": round(self.mib / 1024, 2),
            "since_s": self.since_s,
            "breach_gib": round(self.breach_mib / 1024, 2),
            "breach_s": self.breach_s,
            "limit_gib": round(self.limit_mib / 1024, 2),
            "cost": {k: (round(v, 3) if v is not None else None) for k, v in self.cost.items()},
        }


def _clock(t: float) -> str:
    return f"{int(t // 60)}:{int(t % 60):02d}"


def _ratio(before: Sequence[float], after: Sequence[float]) -> float | None:
    if len(before) < 2 or len(after) < 2:
        return None
    ref = statistics.fmean(before)
    return statistics.fmean(after) / ref if ref > 0 else None


def soak_intruders(
    records: Iterable[Mapping[str, Any]],
    series: SoakSeries,
    gpus: Sequence[SmiGpu],
    *,
    limit: str,
) -> list[Intruder]:
    """Per GPU, the other processes (not the soak's own pids) whose memory, summed over a sample, went above
    *limit*: each that was there at that sample, with when it first came and the throughput it cost."""
    recs = [r for r in records if isinstance(r, Mapping)]
    label_of = {idx: label for label, idx in series.gpu_index.items()}
    out: list[Intruder] = []
    for g in gpus:
        if not g.uuid or not g.memory_mib:
            continue
        limit_mib = foreign_limit_mib(limit, float(g.memory_mib))
        first_seen: dict[tuple[int | None, str], float] = {}
        most: dict[tuple[int | None, str], float] = {}
        breach: tuple[float, float, list[tuple[int | None, str]]] | None = None
        for a in sorted(
            (r for r in recs if r.get("kind") == "apps"), key=lambda r: nvsmi_count(str(r.get("t"))) or 0.0
        ):
            t = nvsmi_count(str(a.get("t"))) or 0.0
            total = 0.0
            here: list[tuple[int | None, str]] = []
            for p in a.get("apps") or []:
                if not isinstance(p, Mapping) or p.get("uuid") != g.uuid:
                    continue
                pid_f = nvsmi_count(str(p.get("pid")))
                pid = int(pid_f) if pid_f is not None else None
                if pid is not None and pid in series.ours:
                    continue
                key = (pid, str(p.get("name") or "?"))
                mib = nvsmi_count(str(p.get("mib"))) or 0.0
                first_seen.setdefault(key, t)
                most[key] = max(most.get(key, 0.0), mib)
                total += mib
                here.append(key)
            if breach is None and total > limit_mib:
                breach = (t, total, here)
        if breach is None:
            continue
        t_breach, total, who = breach
        label = label_of.get(g.index, f"GPU {g.index} ({g.name})")
        rows = series.rows.get(label, [])
        for key in who:
            since = first_seen[key]
            cost: dict[str, float | None] = {}
            for figure in ("matmul_tflops", "copy_gbps"):
                before = [v for r in rows if r.t1 <= since and (v := r.value(figure)) is not None]
                after = [v for r in rows if r.t0 >= since and (v := r.value(figure)) is not None]
                cost[figure] = _ratio(before, after)
            out.append(
                Intruder(
                    gpu=g.index,
                    label=label,
                    pid=key[0],
                    name=key[1],
                    mib=most[key],
                    since_s=since,
                    breach_mib=total,
                    breach_s=t_breach,
                    limit_mib=limit_mib,
                    cost=cost,
                )
            )
    return out


def intruder_sentence(i: Intruder, *, limit: str) -> str:
    """One failure line: who, how much, when, what it cost."""
    cost = ", ".join(
        f"{what} {i.cost[figure]:.2f}× of before it came"
        for figure, what in (("matmul_tflops", "matmul"), ("copy_gbps", "copy"))
        if i.cost.get(figure) is not None
    )
    pid = f"pid {i.pid}" if i.pid is not None else "pid ?"
    return (
        f"{i.label}: not yours alone during the soak — {pid} {i.name} came at {_clock(i.since_s)} and held "
        f"{i.mib / 1024:.1f} GiB; other processes held {i.breach_mib / 1024:.1f} GiB at "
        f"{_clock(i.breach_s)}, "
        f"above --foreign-memory-max {limit} ({i.limit_mib / 1024:.1f} GiB)"
        + (f"; it cost {cost}" if cost else "")
    )


# ------------------------------------------------------------------------------- SM use of other processes
#: mean SM use (%) of another process over its pmon samples at which it counts as running kernels beside the
#: soak (the free check's bar for a busy idle GPU)
BUSY_SM_PCT = 10.0
#: pmon samples a process needs before it is judged (one sample can catch a start-up kernel)
MIN_PMON_SAMPLES = 2


def parse_pmon(text: str) -> list[tuple[int, int, float | None, str]]:
    """``nvidia-smi pmon -c 1 -s u`` → (GPU index, pid, SM %, name) per process. The columns are found by the
    header (``# gpu pid type sm mem enc dec [jpg ofa] command``: drivers differ); ``-`` is no figure."""
    header: list[str] = []
    out: list[tuple[int, int, float | None, str]] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#"):
            words = line.lstrip("#").split()
            if "pid" in words and "sm" in words and not header:
                header = words
            continue
        cells = line.split()
        if not header or len(cells) < len(header) - 1:
            continue
        try:
            gpu = int(cells[header.index("gpu")]) if "gpu" in header else int(cells[0])
            pid = int(cells[header.index("pid")])
        except (ValueError, IndexError):
            continue  # "-" for a GPU with no process, or a line nvidia-smi printed instead
        sm = nvsmi_count(cells[header.index("sm")])
        name = " ".join(cells[header.index("command") :]) if "command" in header else ""
        out.append((gpu, pid, sm, name))
    return out


@dataclass(frozen=True)
class SmUser:
    gpu: int
    label: str
    pid: int
    name: str
    since_s: float
    mean_sm: float
    samples: int

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "pid": self.pid,
            "name": self.name,
            "since_s": self.since_s,
            "mean_sm_pct": round(self.mean_sm, 1),
            "samples": self.samples,
        }


def soak_sm_users(
    records: Iterable[Mapping[str, Any]], series: SoakSeries, gpus: Sequence[SmiGpu]
) -> list[SmUser]:
    """Other processes (not the soak's pids) whose SM use, in the probe's ``pmon`` samples, averaged
    :data:`BUSY_SM_PCT` or more over :data:`MIN_PMON_SAMPLES` or more samples: kernels of someone else's
    beside the soak's, which utilization.gpu (100 % under the soak) cannot show."""
    label_of = {idx: label for label, idx in series.gpu_index.items()}
    listed = {g.index: g for g in gpus}
    seen: dict[tuple[int, int], list[tuple[float, float]]] = {}
    names: dict[tuple[int, int], str] = {}
    for r in records:
        if not isinstance(r, Mapping) or r.get("kind") != "pmon":
            continue
        t = nvsmi_count(str(r.get("t"))) or 0.0
        for gpu, pid, sm, name in parse_pmon(str(r.get("text") or "")):
            if pid in series.ours or gpu not in listed or sm is None:
                continue
            seen.setdefault((gpu, pid), []).append((t, sm))
            names[(gpu, pid)] = name
    out: list[SmUser] = []
    for (gpu, pid), samples in sorted(seen.items()):
        mean = statistics.fmean(sm for _, sm in samples)
        if len(samples) >= MIN_PMON_SAMPLES and mean >= BUSY_SM_PCT:
            g = listed[gpu]
            out.append(
                SmUser(
                    gpu=gpu,
                    label=label_of.get(gpu, f"GPU {gpu} ({g.name})"),
                    pid=pid,
                    name=names[(gpu, pid)] or "?",
                    since_s=min(t for t, _ in samples),
                    mean_sm=mean,
                    samples=len(samples),
                )
            )
    return out


def sm_user_sentence(u: SmUser) -> str:
    return (
        f"{u.label}: not yours alone during the soak — pid {u.pid} {u.name} ran kernels on it from "
        f"{_clock(u.since_s)}: SM {u.mean_sm:.0f} % on average over {u.samples} nvidia-smi pmon samples "
        f"(at or above {BUSY_SM_PCT:g} %; the soak's own processes are not counted)"
    )
