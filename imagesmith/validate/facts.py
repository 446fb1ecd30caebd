"""Facts read once per run from the target and shared by the checks: GPUs (nvidia-smi), topology, versions."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from imagesmith import nvsmi
from imagesmith.errors import Fault, ParseError
from imagesmith.validate.context import Context, Result, fail
from imagesmith.validate.criteria import Gpu

BASE_FIELDS = ("index", "name", "uuid", "pci.bus_id", "driver_version", "memory.total")
#: optional groups, queried separately so a driver that lacks one field does not lose the others
EXTRA_FIELDS = (
    ("compute_cap",),
    ("mig.mode.current",),
    ("ecc.mode.current", "ecc.errors.uncorrected.volatile.total"),
    ("power.limit", "power.default_limit", "power.max_limit"),
    ("retired_pages.pending",),
    ("remapped_rows.pending", "remapped_rows.failure"),
    ("persistence_mode",),
    # clock events at idle (R535+ names; older drivers call them clocks_throttle_reasons.*)
    tuple(
        f"clocks_event_reasons.{r}" for r in ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
    ),
    tuple(
        f"clocks_throttle_reasons.{r}"
        for r in ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
    ),
)
#: what the clock-event fields mean, for the verdict (the same words as the under-load check)
IDLE_CLOCK_EVENTS = {
    "hw_slowdown": "hardware slowdown",
    "hw_thermal_slowdown": "hardware thermal slowdown",
    "hw_power_brake_slowdown": "hardware power brake",
}
#: where the kernel log is read from, first that works (dmesg needs CAP_SYSLOG where dmesg_restrict is 1)
KERNEL_LOG_COMMANDS = ("dmesg", "journalctl -k -b --no-pager -q -o short")
SMI_TIMEOUT_S = 60
HUNG_FIX = (
    "nvidia-smi must answer within seconds: one that hangs means a stuck driver or GPU (dmesg shows Xid "
    "errors for it): the host needs a GPU reset or a reboot — ask the provider, or for another machine"
)
BROKEN_FIX = (
    "run `nvidia-smi` on the target by hand: when it does not print its GPU table the driver or a GPU is "
    "broken (dmesg shows why): reboot the host or ask the provider for another machine"
)


@dataclass
class GpuFacts:
    visible: bool
    reason: str = ""
    gpus: list[Gpu] = field(default_factory=list)
    driver_cuda: str | None = None
    smi_text: str = ""
    smi_list: str = ""
    mig_devices: list[str] = field(default_factory=list)
    #: per GPU index, the idle clock events nvidia-smi shows Active ("hardware slowdown", …)
    idle_clock_events: dict[int, list[str]] = field(default_factory=dict)
    #: per GPU index, "Enabled"/"Disabled" (None where nvidia-smi does not say)
    persistence_mode: dict[int, str | None] = field(default_factory=dict)
    #: the optional --query-gpu groups this driver does not know (their checks say so)
    unavailable: list[str] = field(default_factory=list)


def _na(value: str) -> str | None:
    v = value.strip()
    return None if not v or v.startswith("[") or v.upper() in {"N/A", "[N/A]", "NOT SUPPORTED"} else v


def _num(value: str) -> float | None:
    v = _na(value)
    if v is None:
        return None
    try:
        return float(v.split()[0])
    except ValueError:
        return None


#: what nvidia-smi prints in a --query-gpu cell of a GPU in trouble (beside [N/A] / [Not Supported], which
#: only mean the field does not apply)
FAULT_VALUES = ("[GPU requires reset]", "[GPU is lost]", "[Unknown Error]")


def fault_cells(text: str, fields: tuple[str, ...]) -> list[tuple[int, str, str]]:
    """(row, field, value) of every cell that says the GPU is in trouble."""
    found = []
    for row, line in enumerate(ln for ln in text.splitlines() if ln.strip()):
        for f, cell in zip(fields, (c.strip() for c in line.split(",")), strict=False):
            if cell in FAULT_VALUES:
                found.append((row, f, cell))
    return found


def _fail_on_fault_cells(text: str, fields: tuple[str, ...], names: list[str]) -> None:
    cells = fault_cells(text, fields)
    if cells:
        fail(
            "nvidia-smi reports GPUs in trouble: "
            + "; ".join(
                f"{names[row] if row < len(names) else f'row {row + 1}'} {field}: {value}"
                for row, field, value in cells
            ),
            "a GPU that needs a reset keeps failing until it gets one: ask the provider to reset it "
            "(nvidia-smi -r -i N, with nothing running on it) or reboot the host — or for another machine",
        )


def parse_extra_csv(text: str, fields: tuple[str, ...], *, source: str) -> list[dict[str, str]]:
    """The optional ``--query-gpu`` groups (ECC, power, …) that imagesmith.nvsmi does not model.

    The GPU identity (name, memory, uuid, bus id, driver) is parsed by ``nvsmi.parse_query_csv``.
    """
    rows = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(fields):
            raise ParseError(f"{source}: line {n} has {len(cells)} values for {len(fields)} fields: {line!r}")
        rows.append(dict(zip(fields, cells, strict=True)))
    return rows


def _smi(ctx: Context, args: str, log: str | None = None, header: str = "") -> Result:
    """One nvidia-smi call; a hang or an error nvidia-smi explains (a lost GPU, a broken driver, NVML that
    does not start) fails every GPU check with its fix. *log* is saved before anything is parsed."""
    r = ctx.run(f"nvidia-smi {args}", timeout=SMI_TIMEOUT_S)
    if log:
        ctx.save_log(log, header + r.output)
    return _judge_smi(args, r)


def _judge_smi(args: str, r: Result) -> Result:
    if r.timed_out:
        last = (r.output.strip().splitlines() or ["(no output)"])[-1]
        fail(
            f"`{f'nvidia-smi {args}'.strip()}` did not answer within {SMI_TIMEOUT_S} s and was killed "
            f"(last line: {last!r})",
            HUNG_FIX,
        )
    known = nvsmi.known_failure(r.output, f"nvidia-smi {args}".strip())
    if known is not None and known.fault is not Fault.NO_DEVICES:
        fail(known.message, known.hint or BROKEN_FIX)
    return r


def gather_gpus(ctx: Context) -> GpuFacts:
    smi = ctx.run("nvidia-smi", timeout=SMI_TIMEOUT_S)
    ctx.save_log("nvidia-smi.txt", smi.output)
    if smi.rc == 127 or ("not found" in smi.stderr and smi.rc != 0 and "nvidia-smi" in smi.stderr):
        return GpuFacts(visible=False, reason="no GPU visible: nvidia-smi is not on the target's PATH")
    if "No devices were found" in smi.output:
        return GpuFacts(visible=False, reason="no GPU visible: nvidia-smi found no devices")
    # nvidia-smi is there: from here on, whatever goes wrong is a broken host, never "no GPU"
    _judge_smi("", smi)
    if not smi.stdout.strip():
        fail(f"nvidia-smi printed nothing (exit {smi.rc}): {smi.stderr.strip()[:300]}", BROKEN_FIX)
    if smi.rc != 0:
        first = (smi.output.strip().splitlines() or ["(no output)"])[0]
        fail(f"nvidia-smi failed (exit {smi.rc}): {first[:300]}", BROKEN_FIX)
    problem: ParseError | None = None
    try:
        table = nvsmi.parse_table(smi.stdout, source="nvidia-smi")
    except ParseError as exc:
        problem = exc
    if problem is not None:
        fail(
            f"cannot read nvidia-smi's output: {problem.message}"
            + (f" ({problem.hint})" if problem.hint else ""),
            BROKEN_FIX + "; the output is in nvidia-smi.txt of the report",
        )
    facts = GpuFacts(visible=True, smi_text=smi.stdout, driver_cuda=table.cuda_version)
    query = f"--query-gpu={','.join(BASE_FIELDS)} --format=csv,noheader,nounits"
    base = _smi(ctx, query, "nvidia-smi-query.csv", ",".join(BASE_FIELDS) + "\n")
    if base.rc != 0 or not base.stdout.strip():
        fail(
            f"`nvidia-smi {query}` failed (exit {base.rc}): {base.output.strip()[:300] or 'no output'}",
            BROKEN_FIX,
        )
    rows = [ln.split(",") for ln in base.stdout.splitlines() if ln.strip()]
    _fail_on_fault_cells(base.stdout, BASE_FIELDS, [f"GPU {r[0].strip()}" for r in rows])
    try:
        report = nvsmi.parse_query_csv(base.stdout, source="nvidia-smi --query-gpu", fields=BASE_FIELDS)
    except ParseError as exc:
        problem = exc
    if problem is not None:
        fail(
            f"cannot read nvidia-smi --query-gpu: {problem.message}",
            BROKEN_FIX + "; the output is in nvidia-smi-query.csv of the report",
        )
    names = [f"GPU {g.index} ({g.bus_id or g.name})" for g in report.gpus]
    if len(report.gpus) != len(table.gpus):
        fail(
            f"nvidia-smi's table shows {len(table.gpus)} GPU(s) but its --query-gpu lists {len(report.gpus)}:"
            " its output is cut short, or a GPU comes and goes",
            BROKEN_FIX,
        )
    driver = str(report.driver) if report.driver else ""
    extra: dict[str, list[dict[str, str]]] = {}
    for group in EXTRA_FIELDS:
        r = _smi(ctx, f"--query-gpu={','.join(group)} --format=csv,noheader,nounits")
        if r.rc != 0:  # a field this driver does not know ("Field … is not a valid field to query")
            facts.unavailable.extend(group)
            continue
        _fail_on_fault_cells(r.stdout, group, names)
        try:
            parsed = parse_extra_csv(r.stdout, group, source=f"nvidia-smi --query-gpu={','.join(group)}")
        except ParseError as exc:
            problem = exc
        if problem is not None:
            fail(problem.message, BROKEN_FIX)
        if len(parsed) != len(report.gpus):
            fail(
                f"`nvidia-smi --query-gpu={','.join(group)}` answered for {len(parsed)} GPU(s), the GPU list "
                f"has {len(report.gpus)}: the driver loses GPUs between calls",
                BROKEN_FIX,
            )
        for f in group:
            extra[f] = parsed

    def get(i: int, f: str) -> str:
        return extra[f][i][f] if f in extra else ""

    for i, g in enumerate(report.gpus):
        ecc_unc = _num(get(i, "ecc.errors.uncorrected.volatile.total"))
        facts.gpus.append(
            replace(
                g,
                driver=driver,
                compute_cap=_na(get(i, "compute_cap")) or g.compute_cap,
                mig_mode=_na(get(i, "mig.mode.current")),
                ecc_mode=_na(get(i, "ecc.mode.current")),
                ecc_uncorrected=int(ecc_unc) if ecc_unc is not None else None,
                power_limit_w=_num(get(i, "power.limit")),
                power_default_w=_num(get(i, "power.default_limit")),
                power_max_w=_num(get(i, "power.max_limit")),
                retired_pages_pending=_na(get(i, "retired_pages.pending")),
                remapped_rows_pending=_na(get(i, "remapped_rows.pending")),
                remapped_rows_failure=_na(get(i, "remapped_rows.failure")),
            )
        )
        facts.persistence_mode[g.index] = _na(get(i, "persistence_mode"))
        events = []
        for key, words in IDLE_CLOCK_EVENTS.items():
            value = get(i, f"clocks_event_reasons.{key}") or get(i, f"clocks_throttle_reasons.{key}")
            if value.strip().lower() == "active":
                events.append(words)
        facts.idle_clock_events[g.index] = events
    lst = _smi(ctx, "-L")
    facts.smi_list = lst.stdout
    facts.mig_devices = [ln.strip() for ln in lst.stdout.splitlines() if ln.strip().startswith("MIG ")]
    if not facts.gpus:
        return GpuFacts(visible=False, reason="no GPU visible: nvidia-smi lists no GPU")
    return facts


def versions_summary(v: dict[str, Any]) -> dict[str, Any]:
    keys = ("python", "torch", "torch_cuda", "cuda_runtime", "cudnn", "nccl", "numpy")
    return {k: v.get(k) for k in keys}
