"""What the rental promised (``--listing FILE``, and the ``--expect-*`` shorthands) against what the suite
measured: one row per promise — kept, broken or not measured — in report.md's first table. Any broken promise
fails, naming each (imagesmith.validate.listing)."""

from __future__ import annotations

from typing import Any

import pytest

from imagesmith.errors import ParseError
from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import gpu_mismatches, weakest_link
from imagesmith.validate.facts import GpuFacts
from imagesmith.validate.hostsize import (
    HOST_COMMAND,
    NIC_COMMAND,
    HostSize,
    judge_host,
    parse_host,
    parse_nics,
)
from imagesmith.validate.listing import (
    BROKEN,
    FolderMeasure,
    Listing,
    Measured,
    judge_listing,
)
from imagesmith.validate.parsers import parse_topo_matrix

LISTING_FIX = (
    "this rental is not what its listing promised: show this report (the promised-vs-measured table) to the "
    "provider and ask for what you pay for, or a refund for the difference"
)


def _host_size(ctx: Context, gpu_facts: GpuFacts) -> HostSize:
    size = ctx.facts.get("host_size")
    if isinstance(size, HostSize):
        return size
    r = ctx.run(HOST_COMMAND, timeout=30)
    gpus = gpu_facts.gpus
    return judge_host(
        parse_host(r.stdout), gpus=len(gpus), gpu_memory_mib=sum(float(g.memory_mib or 0) for g in gpus)
    )


def test_listing(ctx: Context, check: CheckRecord, gpu_facts: GpuFacts) -> None:
    listing = Listing.from_json(ctx.options.listing)
    if listing.empty:
        pytest.skip("no listing: pass --listing FILE (or --expect-*) to judge what the rental promised")
    why: dict[str, str] = {}
    gpus = gpu_facts.gpus if gpu_facts.visible else None
    if gpus is None:
        for key in ("gpu.model", "gpu.count", "gpu.memory", "gpu.interconnect", "gpu.mig", "gpu.driver"):
            why[key] = f"no GPU visible ({gpu_facts.reason})"
    mismatches = [
        f"GPU {g.index}: {p}" for g in gpus or [] for p in gpu_mismatches(listing.gpu_model or "", g)
    ]
    link: str | None = None
    topo_seen = False
    if gpus:
        topo = ctx.facts.get("topology")
        if topo is None:
            r = ctx.run("nvidia-smi topo -m", timeout=60)
            try:
                topo = parse_topo_matrix(r.stdout) if r.rc == 0 else None
            except ParseError as exc:
                why["gpu.interconnect"] = f"`nvidia-smi topo -m` unreadable: {exc.message}"
        if topo is not None:
            topo_seen = True
            link = weakest_link(topo)
        else:
            why.setdefault("gpu.interconnect", "`nvidia-smi topo -m` failed")
    size = _host_size(ctx, gpu_facts)
    nic_r = ctx.run(NIC_COMMAND, timeout=30)
    ctx.save_log("nics.txt", f"$ {NIC_COMMAND}\n{nic_r.output}")
    nics = parse_nics(nic_r.stdout)
    if nics.rate is None:
        why["network.nic_rate"] = (
            "no physical NIC with a link speed in /sys/class/net (a VM's NIC may show none)"
        )
    storage: dict[str, Any] = ctx.facts.get("storage") or {}
    missing = ctx.facts.get("storage_missing")
    for name, folder in listing.folders():
        if name in storage:
            continue
        text = (
            f"{name} folder {folder.path} does not exist or is not writable"
            if missing
            else "test_storage did not run (-k left it out)"
        )
        for attr in ("read", "write", "iops", "free"):
            why[f"storage.{name}.{attr}"] = text
    for name in storage:
        if not storage[name].fio:
            why[f"storage.{name}.iops"] = "fio is not on this host (dd measures no IOPS)"
    measured = Measured(
        gpu_names=[g.name for g in gpus] if gpus is not None else None,
        gpu_memory_mib=[float(g.memory_mib) if g.memory_mib else None for g in gpus] if gpus else None,
        gpu_mismatches=mismatches,
        weakest_link=link,
        topology_seen=topo_seen,
        mig_modes=[g.mig_mode for g in gpus] if gpus else None,
        driver=(gpus[0].driver or None) if gpus else None,
        driver_cuda=gpu_facts.driver_cuda,
        vcpu=size.vcpu,
        vcpu_basis=size.vcpu_basis,
        ram=size.ram,
        ram_basis=size.ram_basis,
        nic_rate=nics.rate,
        nic_basis=nics.basis,
        fabrics=nics.fabrics if nic_r.rc == 0 else None,
        folders={
            name: FolderMeasure(
                path=fig.path,
                read=fig.read_bps,
                write=fig.write_bps,
                iops=fig.randread_iops,
                free=fig.free_bytes,
                tool=fig.tool,
            )
            for name, fig in storage.items()
        },
        why_not=why,
    )
    rows = judge_listing(listing, measured)
    check.figures["promises"] = [r.__dict__ for r in rows]
    check.figures["summary"] = {"listing_promises_kept": sum(r.verdict == "kept" for r in rows)}
    if listing.price_per_hour is not None:
        check.figures["price_per_hour"] = listing.price_per_hour
        check.figures["currency"] = listing.currency
    unmeasured = [r for r in rows if r.verdict not in (BROKEN, "kept")]
    check.warnings.extend(f"promise not measured: {r.sentence()}" for r in unmeasured)
    bad = [r for r in rows if r.verdict == BROKEN]
    if bad:
        fail(
            f"{len(bad)} of {len(rows)} promise(s) broken: " + "; ".join(r.sentence() for r in bad),
            LISTING_FIX,
        )
