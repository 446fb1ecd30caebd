"""The host beyond the GPUs: the vCPUs and RAM this container gets (its cgroup limits, not the host's
totals), swap (imagesmith.validate.hostsize); the data folder, the checkpoint folder and /dev/shm measured
with fio, or dd where fio is missing (imagesmith.validate.storage). Below the usual advice or the default
floors warns; what the listing promised is judged by test_listing."""

from __future__ import annotations

import shlex
from typing import Any

from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu
from imagesmith.validate.hostsize import HOST_COMMAND, judge_host, parse_host
from imagesmith.validate.listing import Listing, format_rate
from imagesmith.validate.storage import (
    DEFAULT_READ_FLOOR,
    DEFAULT_WRITE_FLOOR,
    parse_storage,
    storage_command,
    storage_timeout_s,
)


def test_host_size(ctx: Context, check: CheckRecord, gpus: list[Gpu]) -> None:
    r = ctx.run(HOST_COMMAND, timeout=30)
    ctx.save_log("host-size.txt", f"$ {HOST_COMMAND}\n{r.output}")
    cap = parse_host(r.stdout)
    if cap.nproc is None and cap.mem_total is None:
        fail(
            f"nproc and /proc/meminfo gave nothing (exit {r.rc}): {r.output.strip()[:200]}",
            "the target needs coreutils' nproc and /proc (see host-size.txt)",
        )
    size = judge_host(cap, gpus=len(gpus), gpu_memory_mib=sum(float(g.memory_mib or 0) for g in gpus))
    ctx.facts["host_size"] = size
    check.figures.update(size.figures)
    check.figures["summary"] = {
        "host_vcpu_per_gpu": size.figures.get("vcpu_per_gpu"),
        "host_ram_per_gpu_memory": size.figures.get("ram_per_gpu_memory"),
    }
    check.warnings.extend(size.warnings)


def storage_folders(listing: Listing) -> list[tuple[str, str]]:
    """(name, path) of every folder the storage check measures: the listing's, then /dev/shm."""
    return [(name, f.path) for name, f in listing.folders()] + [("shm", "/dev/shm")]


def test_storage(ctx: Context, check: CheckRecord) -> None:
    listing = Listing.from_json(ctx.options.listing)
    measured: dict[str, Any] = {}
    missing: list[str] = []
    for name, path in storage_folders(listing):
        q = shlex.quote(path)
        exists = ctx.run(f"test -d {q} && test -w {q}", timeout=30)
        if exists.rc != 0:
            missing.append(f"{name} folder {path} does not exist or is not writable here")
            continue
        mib = max(1, ctx.options.checkpoint_bytes // 2**20)
        command = storage_command(path, direct=name != "shm", checkpoint_mib=mib)
        r = ctx.run(command, timeout=storage_timeout_s(mib))
        ctx.save_log(f"storage-{name}.txt", f"$ {command}\n{r.output}")
        fig = parse_storage(path, r.output)
        measured[name] = fig
        check.figures[name] = fig.to_json()
        check.warnings.extend(f"storage {name} ({path}): {p}" for p in fig.problems)
        if not fig.fio:
            check.warnings.append(
                f"storage {name} ({path}): fio is not on this host: sequential figures from dd "
                "(write + fsync, read), no IOPS or latency (install fio for them)"
            )
        promised = next((f for n, f in listing.folders() if n == name), None)
        if name == "shm":
            continue
        for what, got, floor, said in (
            ("read", fig.read_bps, DEFAULT_READ_FLOOR, promised.read if promised else None),
            ("write", fig.write_bps, DEFAULT_WRITE_FLOOR, promised.write if promised else None),
        ):
            if said is None and got is not None and got < floor:
                check.warnings.append(
                    f"storage {name} ({path}): sequential {what} {format_rate(got)}, below the default floor "
                    f"of {format_rate(floor)} (the listing promised no {what} rate)"
                )
    ctx.facts["storage"] = measured
    data, ckpt = measured.get("data"), measured.get("checkpoint")
    check.figures["summary"] = {
        "storage_data_read_gbps": data.read_bps / 1e9 if data and data.read_bps else None,
        "storage_checkpoint_write_gbps": ckpt.write_bps / 1e9 if ckpt and ckpt.write_bps else None,
    }
    ctx.facts["storage_missing"] = missing
    check.figures["missing"] = missing
    if not listing.folders():
        check.warnings.append(
            "no data or checkpoint folder was named ([storage.data] / [storage.checkpoint] path in "
            "--listing): only /dev/shm was measured"
        )
    if missing:
        fail("; ".join(missing), "create the folder, or fix its path in the listing")
