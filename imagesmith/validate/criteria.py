"""Pure pass criteria: GPU expectations, visible-device counting, bandwidth floors, power limits.

Kept apart from the checks so they are unit-tested without a GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from imagesmith.inputs import is_digits
from imagesmith.nvsmi import SmiGpu
from imagesmith.validate.parsers import TopoMatrix

#: a GPU as nvidia-smi showed it (the one observed-GPU type, :class:`imagesmith.nvsmi.SmiGpu`)
Gpu = SmiGpu


def _norm(s: str) -> str:
    return re.sub(r"[-_]", " ", s).upper()


def gpu_mismatches(expect: str, gpu: Gpu) -> list[str]:
    """Why *gpu* is not what ``--expect-gpu`` asked for ("A100 80GB", "H100 SXM", "RTX 4090"); empty if it is.

    Tokens: ``<N>GB`` compares the memory nvidia-smi reports, in GiB or in decimal GB, whichever is closer
    (±6 %: 80 GB cards report 79.6–80 GiB, H200 140.4 GiB for 141 GB, L40S 46068 MiB = 48.3 GB for 48 GB,
    B200 183359 MiB = 179 GiB / 192 GB); ``PCIe`` needs PCIE in the name; ``SXM``/``SXM4``/``SXM5`` needs a
    name without PCIE (SXM parts are often named plainly, e.g. "NVIDIA H200"); any other token must appear in
    the name.
    """
    name = _norm(gpu.name)
    problems: list[str] = []
    for token in expect.split():
        t = token.upper()
        if m := re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)\s*GB", t):
            want = float(m.group(1))
            if gpu.memory_mib is None:
                problems.append(f"memory unknown (nvidia-smi printed no memory.total), expected {token}")
                continue
            # vendors write "48GB" for what nvidia-smi shows as 46068 MiB (L40S, A40: 45.0 GiB = 48.3 GB) and
            # "141GB" for 143771 MiB (H200: 140.4 GiB): either reading within 6 % matches; the SKUs this
            # tells apart (40 vs 80 GB, 16 vs 32 GB, 80 vs 94 GB) are much further apart
            gib = gpu.memory_mib / 1024
            gb = gpu.memory_mib * 1024**2 / 1e9
            if min(abs(gib - want), abs(gb - want)) / want > 0.06:
                problems.append(f"{gib:.1f} GiB ({gb:.1f} GB) of memory, expected {token}")
        elif t == "PCIE":
            if "PCIE" not in name:
                problems.append(f"not a PCIe card ({gpu.name!r})")
        elif t.startswith("SXM"):
            if "PCIE" in name:
                problems.append(f"a PCIe card ({gpu.name!r}), expected {token}")
        elif _norm(token) not in name:
            problems.append(f"model {gpu.name!r} does not contain {token!r}")
    return problems


def visible_count(cuda_visible_devices: str | None, gpus: list[Gpu]) -> int:
    """How many devices CUDA should enumerate under ``CUDA_VISIBLE_DEVICES`` (CUDA stops at the first bad
    entry).
    """
    if cuda_visible_devices is None:
        return len(gpus)
    seen: set[int] = set()
    for raw in cuda_visible_devices.split(","):
        entry = raw.strip()
        if not entry:
            break
        idx: int | None = None
        if is_digits(entry):
            idx = int(entry) if int(entry) < len(gpus) else None
        else:
            matches = [
                g.index
                for g in gpus
                if g.uuid and (g.uuid.startswith(entry) or g.uuid.startswith("GPU-" + entry))
            ]
            idx = matches[0] if len(matches) == 1 else None
        if idx is None or idx in seen:
            break
        seen.add(idx)
    return len(seen)


#: Vendor board power (W) by model keyword, for when nvidia-smi prints no power.default_limit.
# : NVIDIA datasheets: H200 SXM 700, H100 SXM 700, H100 PCIe 350, A100 SXM 400, A100 PCIe 300, L40S 350, RTX
# 4090 450.
def reference_power_w(gpu: Gpu) -> tuple[float | None, str]:
    """The power a healthy board of this model may draw: nvidia-smi's default limit, else the TDP of the model
    in ``imagesmith/data/gpus.toml`` (one table of facts; a name several models share needs one TDP for all).
    """
    if gpu.power_default_w:
        return gpu.power_default_w, "nvidia-smi power.default_limit"
    from imagesmith import compat

    models = [g for g in compat.gpu_candidates(gpu.name) if g.tdp_w]
    if gpu.memory_mib and len(models) > 1:
        models = [g for g in models if abs(g.memory_mib - gpu.memory_mib) <= max(1024, g.memory_mib // 20)]
    if models and len({g.tdp_w for g in models}) == 1:
        return float(models[0].tdp_w or 0), f"TDP of {models[0].key} (imagesmith/data/gpus.toml)"
    return None, "unknown"


@dataclass(frozen=True, kw_only=True)
class Floor:
    gbps: float
    basis: str


# : Conservative all-reduce bus-bandwidth floors (GB/s, large messages) per worst GPU-to-GPU path. They are
# set far
#: below healthy figures so that they catch the failures that matter — PCIe instead of NVLink, P2P disabled, a
#: fallback through host memory — and not noise. A recorded baseline (``--baseline``) is the precise gate.
# : NVLink: 5 GB/s per link in the bond (an NVLink 3/4 link carries 25 GB/s per direction; NV18 → 90, NV12 →
# 60).
PCIE_FLOORS = {"PIX": 8.0, "PXB": 8.0, "PHB": 5.0, "NODE": 5.0, "SYS": 3.0, "SOC": 3.0}
NVLINK_GBPS_PER_LINK_FLOOR = 5.0


def topology_floor(topo: TopoMatrix) -> Floor:
    pairs = topo.gpu_pairs()
    if not pairs:
        return Floor(gbps=0.0, basis="one GPU: no floor")
    nv = [TopoMatrix.nvlink_count(link) for _, _, link in pairs]
    if all(n is not None for n in nv):
        worst = min(n for n in nv if n is not None)
        return Floor(
            gbps=worst * NVLINK_GBPS_PER_LINK_FLOOR,
            basis=f"topology: all pairs NVLink, weakest NV{worst} × {NVLINK_GBPS_PER_LINK_FLOOR:g} GB/s/link",
        )
    worst_link = max(
        (link for _, _, link in pairs if link in PCIE_FLOORS), key=lambda k: -PCIE_FLOORS[k], default="SYS"
    )
    return Floor(gbps=PCIE_FLOORS[worst_link], basis=f"topology: weakest path {worst_link} (PCIe)")


def weakest_link(topo: TopoMatrix) -> str | None:
    """The weakest GPU-to-GPU path: ``NV18`` when every pair is NVLink (the fewest links), else the worst PCIe
    path (``SYS`` worse than ``NODE``, ``PHB``, ``PXB``, ``PIX``); None with one GPU."""
    pairs = topo.gpu_pairs()
    if not pairs:
        return None
    nv = [TopoMatrix.nvlink_count(link) for _, _, link in pairs]
    if all(n is not None for n in nv):
        return f"NV{min(n for n in nv if n is not None)}"
    order = ("SYS", "SOC", "NODE", "PHB", "PXB", "PIX")
    found = {link for _, _, link in pairs}
    return next((link for link in order if link in found), sorted(found)[0])


def spread(values: list[float]) -> float:
    """(max − min) / max, 0 for fewer than two values."""
    if len(values) < 2 or max(values) <= 0:
        return 0.0
    return (max(values) - min(values)) / max(values)


def explain_cuda_init_error(
    error: str, *, driver: str | None, driver_cuda: str | None, torch_cuda: str | None
) -> str:
    """Turn a raw CUDA initialisation error into the driver/runtime explanation users can act on (the minimum
    drivers come from the compat engine's CUDA table)."""
    low = error.lower()
    if "too old" in low or "insufficient" in low or "driver version" in low:
        need = ""
        if torch_cuda:
            from imagesmith import compat
            from imagesmith.errors import ConfigError

            try:
                md = compat.min_driver(torch_cuda)
                need = (
                    f"; CUDA {torch_cuda} needs driver ≥ {md.full} "
                    f"(≥ {md.minor_version} with minor-version compatibility)"
                )
            except ConfigError:
                need = ""
        return (
            f"the NVIDIA driver {driver or '?'} supports CUDA up to {driver_cuda or '?'} "
            f"(nvidia-smi 'CUDA Version'), but this torch was built for CUDA {torch_cuda or '?'}{need}: "
            "a driver older than the CUDA runtime "
            f"cannot run its kernels ({error.strip()})"
        )
    if "no cuda-capable device" in low or "no cuda gpus are available" in low:
        return f"CUDA sees no device although nvidia-smi does: device nodes missing ({error.strip()})"
    if "no kernel image" in low:
        return f"this torch has no kernels for this GPU's architecture ({error.strip()})"
    return error.strip()
