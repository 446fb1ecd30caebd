"""Topology: `nvidia-smi topo -m` and `topo -p2p n`, NVLink or PCIe per GPU pair, CPU/NUMA affinity."""

from __future__ import annotations

from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu
from imagesmith.validate.parsers import P2PMatrix, TopoMatrix


def test_topology(
    ctx: Context, check: CheckRecord, gpus: list[Gpu], topology: tuple[TopoMatrix, P2PMatrix | None]
) -> None:
    topo, p2p = topology
    pairs = topo.gpu_pairs()
    check.figures["pairs"] = [{"a": a, "b": b, "link": link} for a, b, link in pairs]
    check.figures["cpu_affinity"] = topo.cpu_affinity
    check.figures["numa_affinity"] = topo.numa_affinity
    check.figures["nics"] = {n: topo.nic_names.get(n, "") for n in topo.nics}
    if p2p is not None:
        check.figures["p2p_nvlink"] = {f"{a}-{b}": s for (a, b), s in p2p.status.items() if a < b}
    if len(topo.gpus) != len(gpus):
        fail(
            f"`nvidia-smi topo -m` shows {len(topo.gpus)} GPUs, --query-gpu shows {len(gpus)}",
            "the driver's view is inconsistent: reboot or ask the provider",
        )
    if not ctx.options.expect_nvlink:
        return
    if len(gpus) < 2:
        # the caller paid for NVLink; one visible GPU has no pair to link, which is not a pass
        fail(
            f"NVLink was expected (--expect-nvlink), but this target shows {len(gpus)} GPU: there is no GPU "
            "pair to link",
            "give the container all GPUs (--gpus all; check CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES), "
            "ask the provider for the multi-GPU machine you ordered, or leave --expect-nvlink out on a "
            "single-GPU machine",
        )
    not_nv = [(a, b, link) for a, b, link in pairs if not link.startswith("NV")]
    not_ok = p2p.not_ok() if p2p is not None else []
    problems = []
    if not_nv:
        problems.append(
            "NVLink expected but these pairs are not NV#: "
            + ", ".join(f"{a}-{b} {lk}" for a, b, lk in not_nv)
        )
    if not_ok:
        problems.append(
            "`topo -p2p n` reports NVLink P2P not OK for " + ", ".join(f"{a}-{b} {s}" for a, b, s in not_ok)
        )
    if problems:
        fail(
            "; ".join(problems),
            "these GPUs talk over PCIe, not NVLink (a PCIe board sold as SXM, or NVLink down): ask the "
            "provider for "
            "an NVLink (SXM/HGX) machine, or run without --expect-nvlink if PCIe is what you ordered",
        )
