"""GPUs: model, memory and count against the expectation; ECC errors; MIG; power limit vs TDP (warning)."""

from __future__ import annotations

from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu, gpu_mismatches, reference_power_w
from imagesmith.validate.facts import GpuFacts


def test_gpu_inventory(ctx: Context, check: CheckRecord, gpus: list[Gpu]) -> None:
    check.figures["count"] = len(gpus)
    check.figures["gpus"] = [
        {
            "index": g.index,
            "name": g.name,
            "memory_mib": g.memory_mib,
            "bus_id": g.bus_id,
            "uuid": g.uuid,
            "compute_cap": g.compute_cap,
            "driver": g.driver,
        }
        for g in gpus
    ]
    problems: list[str] = []
    opts = ctx.options
    if opts.expect_count is not None and len(gpus) != opts.expect_count:
        problems.append(
            f"expected {opts.expect_count} GPUs, nvidia-smi shows {len(gpus)}: "
            + ", ".join(f"{g.index}: {g.name}" for g in gpus)
        )
    if opts.expect_gpu:
        for g in gpus:
            for p in gpu_mismatches(opts.expect_gpu, g):
                problems.append(f"GPU {g.index}: {p}")
    if problems:
        fail(
            "; ".join(problems),
            "this is not the hardware that was ordered: show the provider this report and ask for the "
            "GPUs you pay "
            "for; if the container was started with fewer devices, start it with all of them (--gpus all)",
        )


def test_ecc_errors(check: CheckRecord, gpus: list[Gpu]) -> None:
    check.figures["ecc"] = {
        g.index: {
            "mode": g.ecc_mode,
            "uncorrected_volatile": g.ecc_uncorrected,
            "retired_pages_pending": g.retired_pages_pending,
            "remapped_rows_pending": g.remapped_rows_pending,
            "remapped_rows_failure": g.remapped_rows_failure,
        }
        for g in gpus
    }
    bad = [g for g in gpus if g.ecc_uncorrected]
    off = [g for g in gpus if g.ecc_mode == "Disabled"]
    if off:
        check.warnings.append("ECC is disabled on GPU " + ", ".join(str(g.index) for g in off))
    if bad:
        fail(
            "uncorrected ECC errors since the driver loaded: "
            + ", ".join(f"GPU {g.index}: {g.ecc_uncorrected}" for g in bad),
            "the memory of these GPUs is failing: ask the provider for another machine (do not train on it)",
        )
    failed = [g for g in gpus if (g.remapped_rows_failure or "").lower() == "yes"]
    if failed:
        fail(
            "row remapping failed on GPU "
            + ", ".join(f"{g.index} ({g.name})" for g in failed)
            + ": its memory has more bad rows than it can spare",
            "this GPU must be replaced: ask the provider for another machine",
        )
    pending = []
    for g in gpus:
        if (g.remapped_rows_pending or "").lower() == "yes":
            pending.append(f"{g.index} (rows to remap)")
        elif (g.retired_pages_pending or "").lower() == "yes":
            pending.append(f"{g.index} (pages to retire)")
    if pending:
        fail(
            "memory repairs are pending on GPU "
            + ", ".join(pending)
            + ": the bad memory stays in use until the GPU is reset",
            "ask the provider to reset these GPUs (nvidia-smi -r, or a reboot) before you train",
        )


def test_mig(check: CheckRecord, gpus: list[Gpu], gpu_facts: GpuFacts) -> None:
    check.figures["mig_mode"] = {g.index: g.mig_mode for g in gpus}
    check.figures["mig_devices"] = gpu_facts.mig_devices
    enabled = [g for g in gpus if (g.mig_mode or "").lower() == "enabled"]
    if enabled or gpu_facts.mig_devices:
        fail(
            "MIG is enabled on GPU "
            + ", ".join(str(g.index) for g in enabled)
            + (
                f" ({len(gpu_facts.mig_devices)} MIG slices: {'; '.join(gpu_facts.mig_devices[:4])})"
                if gpu_facts.mig_devices
                else ""
            )
            + ": each process sees a slice with a fraction of the memory and no NVLink/P2P",
            "ask for whole GPUs, or have the host admin disable MIG (nvidia-smi -mig 0, then a GPU reset)",
        )


def test_power_limit(check: CheckRecord, gpus: list[Gpu]) -> None:
    rows = {}
    for g in gpus:
        ref, basis = reference_power_w(g)
        rows[g.index] = {
            "limit_w": g.power_limit_w,
            "reference_w": ref,
            "basis": basis,
            "max_w": g.power_max_w,
        }
        if g.power_limit_w and ref and g.power_limit_w < 0.95 * ref:
            check.warnings.append(
                f"GPU {g.index} ({g.name}) is power-capped at {g.power_limit_w:g} W, below its {ref:g} W "
                f"({basis}): expect lower throughput; ask the provider why the limit was lowered"
            )
    check.figures["power"] = rows
