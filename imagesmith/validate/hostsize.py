"""Host sizing: the vCPUs and RAM the suite's own processes get (the cgroup limits of the container, not the
host's totals), swap, and the usual advice for a training host — at least 8 vCPUs per GPU and RAM of at least
twice the GPUs' memory (data loading, pinned buffers, a checkpoint gathered in host memory).

Pure: :data:`HOST_COMMAND` is what the check runs on the target, :func:`parse_host` reads its output and
:func:`judge_host` words the figures and the warnings, so unit tests replay captures of hosts and containers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from imagesmith.inputs import is_digits

#: the usual sizing advice (vendor PoC guides, cloud GPU sizing notes): below it warns, never fails
ADVICE_VCPU_PER_GPU = 8
ADVICE_RAM_PER_GPU_MEMORY = 2.0

#: nproc (affinity, cpusets), the memory and swap totals, and each cgroup v2 level from the suite's own up to
#: the root (the effective limit is the smallest); cgroup v1's files where there is no v2
HOST_COMMAND = (
    'echo "# nproc"; nproc; echo "# meminfo"; grep -E "^(MemTotal|SwapTotal):" /proc/meminfo; '
    'p=$(sed -n "s/^0:://p" /proc/self/cgroup); '
    "if [ -e /sys/fs/cgroup/cgroup.controllers ]; "
    'then while :; do d="/sys/fs/cgroup$p"; echo "# cgroup ${p:-/}"; '
    'for f in cpu.max memory.max memory.swap.max; do [ -r "$d/$f" ] && echo "$f $(cat "$d/$f")"; done; '
    '[ -z "$p" ] || [ "$p" = / ] && break; p="${p%/*}"; done; '
    "else for f in /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us "
    "/sys/fs/cgroup/memory/memory.limit_in_bytes; do "
    '[ -r "$f" ] && echo "# v1 $(basename "$f") $(cat "$f")"; done; fi'
)

#: cgroup v1 writes "no limit" as a huge number (PAGE_COUNTER_MAX pages): above this is no limit
_V1_UNLIMITED = 2**62


@dataclass
class HostCapture:
    nproc: int | None = None
    mem_total: int | None = None
    swap_total: int | None = None
    #: the smallest cgroup CPU quota in CPUs (cpu.max quota / period), None where none is set
    cpu_quota: float | None = None
    cpu_quota_at: str = ""
    memory_max: int | None = None
    memory_max_at: str = ""
    swap_max: int | None = None
    cgroup: str = "none seen"
    problems: list[str] = field(default_factory=list)


def _kib(line: str) -> int | None:
    parts = line.split()
    return int(parts[1]) * 1024 if len(parts) >= 2 and is_digits(parts[1]) else None


def parse_host(text: str) -> HostCapture:
    """The output of :data:`HOST_COMMAND`."""
    cap = HostCapture()
    section = ""
    level = ""
    v1: dict[str, int] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("# cgroup "):
            section, level = "cgroup", line[len("# cgroup ") :]
            cap.cgroup = "v2"
            continue
        if line.startswith("# v1 "):
            parts = line.split()
            if len(parts) == 4 and is_digits(parts[3].lstrip("-")):
                v1[parts[2]] = int(parts[3])
            cap.cgroup = "v1"
            continue
        if line.startswith("# "):
            section = line[2:]
            continue
        if section == "nproc" and is_digits(line):
            cap.nproc = int(line)
        elif section == "meminfo" and line.startswith("MemTotal:"):
            cap.mem_total = _kib(line)
        elif section == "meminfo" and line.startswith("SwapTotal:"):
            cap.swap_total = _kib(line)
        elif section == "cgroup":
            name, _, value = line.partition(" ")
            words = value.split()
            if name == "cpu.max" and len(words) == 2 and is_digits(words[0]) and is_digits(words[1]):
                quota = int(words[0]) / max(int(words[1]), 1)
                if cap.cpu_quota is None or quota < cap.cpu_quota:
                    cap.cpu_quota, cap.cpu_quota_at = quota, level
            elif name == "memory.max" and words and is_digits(words[0]):
                if cap.memory_max is None or int(words[0]) < cap.memory_max:
                    cap.memory_max, cap.memory_max_at = int(words[0]), level
            elif name == "memory.swap.max" and words and is_digits(words[0]):
                cap.swap_max = min(int(words[0]), cap.swap_max if cap.swap_max is not None else 2**63)
            elif words and words[0] != "max":
                cap.problems.append(line[:200])
        else:
            cap.problems.append(line[:200])
    quota, period = v1.get("cpu.cfs_quota_us", -1), v1.get("cpu.cfs_period_us", 0)
    if quota > 0 and period > 0:
        cap.cpu_quota, cap.cpu_quota_at = quota / period, "cgroup v1"
    limit = v1.get("memory.limit_in_bytes")
    if limit is not None and 0 < limit < _V1_UNLIMITED:
        cap.memory_max, cap.memory_max_at = limit, "cgroup v1"
    return cap


@dataclass
class HostSize:
    vcpu: int | None
    vcpu_basis: str
    ram: int | None
    ram_basis: str
    figures: dict[str, object]
    warnings: list[str]


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def judge_host(cap: HostCapture, *, gpus: int, gpu_memory_mib: float) -> HostSize:
    """The vCPUs and RAM this container gets (the smaller of the host's and its cgroup's), with warnings
    below the usual advice (:data:`ADVICE_VCPU_PER_GPU`, :data:`ADVICE_RAM_PER_GPU_MEMORY`)."""
    warnings: list[str] = []
    vcpu: int | None = cap.nproc
    vcpu_basis = "nproc"
    if cap.cpu_quota is not None and (vcpu is None or cap.cpu_quota < vcpu):
        vcpu = max(1, math.floor(cap.cpu_quota))
        vcpu_basis = (
            f"cgroup cpu.max quota of {cap.cpu_quota:g} CPUs at {cap.cpu_quota_at}, nproc {cap.nproc}"
        )
    ram: int | None = cap.mem_total
    ram_basis = "MemTotal"
    if cap.memory_max is not None and (ram is None or cap.memory_max < ram):
        ram = cap.memory_max
        ram_basis = f"cgroup memory.max at {cap.memory_max_at}" + (
            f"; the host has {_gib(cap.mem_total)}" if cap.mem_total else ""
        )
    elif cap.memory_max is not None:
        ram_basis = (
            f"MemTotal; the cgroup's memory.max ({_gib(cap.memory_max)} at {cap.memory_max_at}) is above it"
        )
    elif cap.cgroup != "none seen":
        ram_basis = "MemTotal; no cgroup memory limit"
    gpu_mem = gpu_memory_mib * 2**20
    figures: dict[str, object] = {
        "vcpu": vcpu,
        "vcpu_basis": vcpu_basis,
        "nproc": cap.nproc,
        "cpu_quota": cap.cpu_quota,
        "ram_bytes": ram,
        "ram_basis": ram_basis,
        "mem_total_bytes": cap.mem_total,
        "memory_max_bytes": cap.memory_max,
        "swap_bytes": cap.swap_total,
        "swap_max_bytes": cap.swap_max,
        "cgroup": cap.cgroup,
        "gpus": gpus,
        "gpu_memory_bytes": gpu_mem,
        "vcpu_per_gpu": round(vcpu / gpus, 2) if vcpu and gpus else None,
        "ram_per_gpu_memory": round(ram / gpu_mem, 3) if ram and gpu_mem else None,
    }
    if vcpu is None:
        warnings.append("nproc printed no CPU count: vCPUs per GPU unknown")
    elif gpus and vcpu / gpus < ADVICE_VCPU_PER_GPU:
        warnings.append(
            f"{vcpu} vCPUs for {gpus} GPU(s): {vcpu / gpus:.1f} per GPU ({vcpu_basis}), below the usual "
            f"advice of {ADVICE_VCPU_PER_GPU} per GPU (data loading and the NCCL/CUDA threads of each rank "
            "starve)"
        )
    if ram is None:
        warnings.append("/proc/meminfo gave no MemTotal: RAM against GPU memory unknown")
    elif gpu_mem and ram / gpu_mem < ADVICE_RAM_PER_GPU_MEMORY:
        warnings.append(
            f"RAM {_gib(ram)} ({ram_basis}) is {ram / gpu_mem:.2f}× the GPUs' {_gib(gpu_mem)} of memory, "
            f"below the usual advice of {ADVICE_RAM_PER_GPU_MEMORY:g}× (a checkpoint gathered in host "
            "memory, pinned buffers and DataLoader workers need it)"
        )
    if cap.swap_total:
        warnings.append(
            f"swap of {_gib(cap.swap_total)} is on: a host short of RAM pages to disk instead of failing fast"
        )
    return HostSize(vcpu, vcpu_basis, ram, ram_basis, figures, warnings)


#: the host's physical NICs (those with a device) and their link speed in Mb/s, and the RDMA ports: rate and
#: link layer (InfiniBand, or Ethernet for RoCE)
NIC_COMMAND = (
    'for i in /sys/class/net/*; do [ -e "$i/device" ] && '
    'echo "net $(basename "$i") $(cat "$i/speed" 2>/dev/null)"; '
    'done; for p in /sys/class/infiniband/*/ports/*; do [ -r "$p/rate" ] && '
    'echo "rdma $(cat "$p/link_layer" 2>/dev/null) $(cat "$p/rate")"; done; true'
)


@dataclass
class Nics:
    #: the fastest link in bytes per second, and where it is
    rate: float | None = None
    basis: str = ""
    fabrics: list[str] = field(default_factory=list)


def parse_nics(text: str) -> Nics:
    """The output of :data:`NIC_COMMAND`: ``net eth0 100000`` (Mb/s; -1 where the link is down) and
    ``rdma InfiniBand 400 Gb/sec (4X NDR)``."""
    out = Nics()
    best: tuple[float, str] | None = None
    fabrics: set[str] = set()
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) >= 3 and parts[0] == "net" and is_digits(parts[2]):
            fabrics.add("ethernet")
            rate = int(parts[2]) * 1e6 / 8
            if best is None or rate > best[0]:
                best = (rate, f"{parts[1]} link {int(parts[2]) / 1000:g} Gb/s")
        elif len(parts) >= 4 and parts[0] == "rdma":
            fabrics.add("infiniband" if parts[1].lower() == "infiniband" else "roce")
            try:
                rate = float(parts[2]) * 1e9 / 8
            except ValueError:
                continue
            if best is None or rate > best[0]:
                best = (rate, f"RDMA port {' '.join(parts[1:])}")
    if best is not None:
        out.rate, out.basis = best
    out.fabrics = sorted(fabrics)
    return out
