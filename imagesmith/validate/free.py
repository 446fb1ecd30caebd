"""Is each GPU free? What nvidia-smi shows before the suite puts any load on the GPUs: memory in use, the
compute processes on them, utilization sampled over a few seconds, compute mode and MIG.

Pure: :data:`FREE_COMMAND` is what the check runs on the target, :func:`parse_free` reads its output and
:func:`judge_free` gives the verdict, so unit tests replay captures of busy and shared GPUs without one.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from imagesmith.errors import ConfigError
from imagesmith.inputs import is_decimal
from imagesmith.nvsmi import SmiGpu

FREE_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "memory.used",
    "memory.total",
    "utilization.gpu",
    "compute_mode",
    "mig.mode.current",
)
APP_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")
SAMPLES = 6
SAMPLE_GAP_S = 0.5
#: the default of ``--foreign-memory-max``: memory others may hold on a GPU before the check fails
DEFAULT_FOREIGN_MAX = "3%"
#: an idle board's own use (0 MiB on H100/H200, a few MiB elsewhere) is below this; above it warns
WARN_MIB = 256
#: mean utilization (%) over the samples at which an idle GPU counts as busy
BUSY_UTIL_PCT = 10.0

FREE_COMMAND = (
    f'for i in $(seq {SAMPLES}); do echo "# sample $i"; '
    f"nvidia-smi --query-gpu={','.join(FREE_FIELDS)} --format=csv,noheader,nounits 2>&1; "
    f"sleep {SAMPLE_GAP_S}; done; "
    'echo "# apps"; '
    f"nvidia-smi --query-compute-apps={','.join(APP_FIELDS)} --format=csv,noheader,nounits 2>&1"
)


@dataclass(frozen=True)
class App:
    uuid: str
    pid: int | None
    name: str
    mib: float | None

    def text(self) -> str:
        mem = f", {self.mib / 1024:.1f} GiB" if self.mib is not None else ""
        pid = f"pid {self.pid}" if self.pid is not None else "pid ?"
        return f"{pid} {self.name or '(name not visible)'}{mem}"


@dataclass
class FreeCapture:
    #: one list of rows (field → value) per sample
    samples: list[list[dict[str, str]]] = field(default_factory=list)
    apps: list[App] = field(default_factory=list)
    #: what nvidia-smi said instead of rows (an unknown field, an error)
    problems: list[str] = field(default_factory=list)


def _num(text: str | None) -> float | None:
    """A count nvidia-smi printed (MiB, %, a PID, an index), or None where it printed no such figure:
    ``[N/A]``, ``[Insufficient Permissions]``, and ``nan``, ``inf`` or a negative number (no memory, use or
    PID is negative or infinite) — unknown, never taken as a value (a NaN compared with a limit is never
    above it, and would land in report.json as a bare NaN)."""
    if text is None:
        return None
    first = text.strip().split()[:1]
    if not first or not is_decimal(first[0]):
        return None
    value = float(first[0])
    return value if math.isfinite(value) and value >= 0 else None


#: a count nvidia-smi printed, or None (for the other readers of its output: imagesmith.validate.alone)
nvsmi_count = _num


def parse_free(text: str) -> FreeCapture:
    """The output of :data:`FREE_COMMAND`: ``# sample i`` blocks of --query-gpu rows, then ``# apps`` and the
    compute processes (none, or a line nvidia-smi prints instead, in a container that hides them)."""
    cap = FreeCapture()
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("# sample"):
            section = "sample"
            cap.samples.append([])
            continue
        if line == "# apps":
            section = "apps"
            continue
        cells = [c.strip() for c in line.split(",")]
        if section == "sample" and len(cells) == len(FREE_FIELDS):
            cap.samples[-1].append(dict(zip(FREE_FIELDS, cells, strict=True)))
        elif section == "apps" and len(cells) >= len(APP_FIELDS):
            # nvidia-smi does not quote: a process name with commas in it spans several cells
            uuid, pid_text, rest = line.split(",", 2)
            name, mib = rest.rsplit(",", 1)
            pid = _num(pid_text)
            cap.apps.append(
                App(
                    uuid=uuid.strip(),
                    pid=int(pid) if pid is not None else None,
                    name=name.strip(),
                    mib=_num(mib),
                )
            )
        elif section == "apps" and "no running" in line.lower():
            continue
        else:
            cap.problems.append(line[:200])
    cap.samples = [s for s in cap.samples if s]
    return cap


def foreign_limit_mib(spec: str, total_mib: float) -> float:
    """``--foreign-memory-max``: a percentage of the board (``3%``) or a size (``2g``, ``512m``) → MiB."""
    s = spec.strip().lower()
    if m := re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*%", s):
        return float(m.group(1)) / 100 * total_mib
    if m := re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)i?b?", s):
        scale = {"": 1 / 1024**2, "k": 1 / 1024, "m": 1.0, "g": 1024.0, "t": 1024.0**2}[m.group(2)]
        return float(m.group(1)) * scale
    raise ConfigError(
        f"--foreign-memory-max {spec!r}: not a percentage of the board or a size",
        hint="give e.g. 3% (of each GPU's memory) or 4g",
    )


def check_limit_spec(spec: str) -> None:
    """Refuse a ``--foreign-memory-max`` that cannot be read, before anything runs."""
    value = foreign_limit_mib(spec, 100.0)
    if spec.strip().endswith("%") and not 0 <= value <= 100:
        raise ConfigError(
            f"--foreign-memory-max {spec!r}: a percentage from 0 to 100", hint="give e.g. 3% or 4g"
        )


@dataclass
class FreeVerdict:
    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def _gib(mib: float) -> str:
    return f"{mib / 1024:.1f} GiB"


def judge_free(
    capture: FreeCapture, gpus: Sequence[SmiGpu], *, limit: str = DEFAULT_FOREIGN_MAX
) -> FreeVerdict:
    """Per GPU: memory held by others above *limit* (``--foreign-memory-max``) or a busy idle GPU fails,
    naming the GPU, the amount and the processes seen; smaller amounts, visible processes, a little
    utilization, Exclusive_Process and MIG warn; compute mode Prohibited fails (no process may use it).
    Nothing of the suite runs yet when this is sampled: everything in use is someone else's."""
    out = FreeVerdict()
    for g in gpus:
        rows = [
            r
            for sample in capture.samples
            for r in sample
            if (g.uuid and r.get("uuid") == g.uuid) or (not g.uuid and _num(r.get("index")) == g.index)
        ]
        where = f"GPU {g.index} ({g.name})"
        if not rows:
            out.failures.append(f"{where}: nvidia-smi gave no memory/utilization sample for it")
            continue
        used = [v for v in (_num(r.get("memory.used")) for r in rows) if v is not None]
        total = next((v for v in (_num(r.get("memory.total")) for r in rows) if v), None) or float(
            g.memory_mib or 0
        )
        utils = [v for v in (_num(r.get("utilization.gpu")) for r in rows) if v is not None]
        mode = rows[-1].get("compute_mode", "")
        mig = rows[-1].get("mig.mode.current", "")
        apps = [a for a in capture.apps if g.uuid and a.uuid == g.uuid]
        # no number for memory.used ([N/A]: some vGPU and virtualised boards): what the visible processes hold
        held = max(used) if used else sum(a.mib or 0.0 for a in apps)
        limit_mib = foreign_limit_mib(limit, total) if total else 0.0
        mean_util = sum(utils) / len(utils) if utils else None
        row: dict[str, Any] = {
            "gpu": g.index,
            "name": g.name,
            "memory_used_mib": held,
            "memory_total_mib": total,
            "limit_mib": round(limit_mib, 1),
            "utilization_samples": utils,
            "utilization_mean": round(mean_util, 1) if mean_util is not None else None,
            "compute_mode": mode,
            "mig": mig,
            "processes": [{"pid": a.pid, "name": a.name, "mib": a.mib} for a in apps],
        }
        procs = "; ".join(a.text() for a in apps) or (
            "no process visible here: it belongs to another container or VM on the same GPU"
            if held > WARN_MIB
            else "no process"
        )
        share = f"{held / total:.0%} of {_gib(total)}" if total else "of an unknown total"
        verdict = "free"
        if held > limit_mib:
            verdict = "held"
            out.failures.append(
                f"{where}: {_gib(held)} ({share}) of its memory is held by other processes, above the "
                f"--foreign-memory-max {limit} ({_gib(limit_mib)}) — {procs}"
            )
        elif held > WARN_MIB or apps:
            verdict = "shared"
            out.warnings.append(
                f"{where}: {held:.0f} MiB of its memory is in use by others before the suite started "
                f"(below --foreign-memory-max {limit}) — {procs}"
            )
        if not used:
            out.warnings.append(
                f"{where}: nvidia-smi reports no figure for its memory in use "
                f"({rows[-1].get('memory.used') or 'nothing'}): whether others hold its memory cannot be "
                f"told from here — {procs}"
            )
        if mean_util is None:
            out.warnings.append(
                f"{where}: nvidia-smi reports no figure for its utilization "
                f"({rows[-1].get('utilization.gpu') or 'nothing'}"
                + (", as with MIG enabled" if mig.lower() == "enabled" else "")
                + "): whether someone else runs kernels on it cannot be told from here"
            )
        elif mean_util >= BUSY_UTIL_PCT:
            verdict = "busy"
            out.failures.append(
                f"{where}: busy while nothing of the suite runs — utilization {mean_util:.0f} % on average "
                f"over {len(utils)} samples in {SAMPLES * SAMPLE_GAP_S:g} s "
                f"({', '.join(f'{u:g}' for u in utils)} %) — {procs}"
            )
        elif utils and max(utils) > 0:
            out.warnings.append(
                f"{where}: utilization up to {max(utils):g} % while idle (someone else ran kernels on it)"
            )
        if mode.lower() == "prohibited":
            verdict = "prohibited"
            out.failures.append(
                f"{where}: compute mode is Prohibited: no process may use this GPU (the host set it aside)"
            )
        elif mode.lower().startswith("exclusive"):
            # one context at a time: memory in use is a context, listed here or not (in a container the
            # holder is often not visible)
            if apps or held > WARN_MIB:
                verdict = "held"
                out.failures.append(
                    f"{where}: compute mode {mode} and another process holds it ({procs}"
                    + ("" if apps else f"; {held:.0f} MiB of its memory in use")
                    + "): your process gets 'CUDA-capable device is busy or unavailable'"
                )
            else:
                out.warnings.append(
                    f"{where}: compute mode {mode}: one process at a time may use it (DataLoader workers or "
                    "tools that touch CUDA are refused while training runs)"
                )
        if mig.lower() == "enabled":
            out.warnings.append(
                f"{where}: MIG is enabled: its slices may be other tenants' (test_mig has the details)"
            )
        row["verdict"] = verdict
        out.rows.append(row)
    return out
