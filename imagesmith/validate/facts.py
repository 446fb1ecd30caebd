"""Facts read once per run from the target and shared by the checks: GPUs (nvidia-smi), topology, versions."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from imagesmith import nvsmi
from imagesmith.errors import ParseError
from imagesmith.validate.context import Context, fail
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


def gather_gpus(ctx: Context) -> GpuFacts:
    smi = ctx.run("nvidia-smi", timeout=60)
    ctx.save_log("nvidia-smi.txt", smi.output)
    if smi.rc == 127 or ("not found" in smi.stderr and smi.rc != 0):
        return GpuFacts(visible=False, reason="no GPU visible: nvidia-smi is not on the target's PATH")
    if smi.rc != 0:
        first = (smi.output.strip().splitlines() or ["(no output)"])[0]
        return GpuFacts(visible=False, reason=f"no GPU visible: nvidia-smi failed (exit {smi.rc}): {first}")
    if "No devices were found" in smi.output:
        return GpuFacts(visible=False, reason="no GPU visible: nvidia-smi found no devices")
    problem: ParseError | None = None
    try:
        table = nvsmi.parse_table(smi.stdout, source="nvidia-smi")
    except ParseError as exc:
        problem = exc
    if problem is not None:
        fail(f"cannot read nvidia-smi's output: {problem.message}", "see nvidia-smi.txt in the report")
    facts = GpuFacts(visible=True, smi_text=smi.stdout, driver_cuda=table.cuda_version)
    base = ctx.run(
        f"nvidia-smi --query-gpu={','.join(BASE_FIELDS)} --format=csv,noheader,nounits", timeout=60
    )
    if base.rc != 0:
        return GpuFacts(
            visible=False, reason=f"no GPU visible: nvidia-smi --query-gpu failed: {base.output.strip()}"
        )
    try:
        report = nvsmi.parse_query_csv(base.stdout, source="nvidia-smi --query-gpu", fields=BASE_FIELDS)
    except ParseError as exc:
        problem = exc
    if problem is not None:
        fail(
            f"cannot read nvidia-smi --query-gpu: {problem.message}", "see nvidia-smi-query.csv in the report"
        )
    driver = str(report.driver) if report.driver else ""
    extra: dict[str, list[dict[str, str]]] = {}
    for group in EXTRA_FIELDS:
        r = ctx.run(f"nvidia-smi --query-gpu={','.join(group)} --format=csv,noheader,nounits", timeout=60)
        if r.rc == 0:
            parsed = parse_extra_csv(r.stdout, group, source="nvidia-smi --query-gpu")
            if len(parsed) == len(report.gpus):
                for f in group:
                    extra[f] = parsed
    ctx.save_log("nvidia-smi-query.csv", ",".join(BASE_FIELDS) + "\n" + base.stdout)

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
    lst = ctx.run("nvidia-smi -L", timeout=60)
    facts.smi_list = lst.stdout
    facts.mig_devices = [ln.strip() for ln in lst.stdout.splitlines() if ln.strip().startswith("MIG ")]
    if not facts.gpus:
        return GpuFacts(visible=False, reason="no GPU visible: nvidia-smi lists no GPU")
    return facts


def versions_summary(v: dict[str, Any]) -> dict[str, Any]:
    keys = ("python", "torch", "torch_cuda", "cuda_runtime", "cudnn", "nccl", "numpy")
    return {k: v.get(k) for k in keys}
