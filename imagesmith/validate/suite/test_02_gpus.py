"""GPUs: model, memory and count against the expectation; ECC errors; MIG; power limit vs TDP (warning); the
health of a host that still works but is degraded: clock slowdowns at idle, persistence mode, Xid errors in
the kernel log, NVLinks down."""

from __future__ import annotations

import pytest

from imagesmith.errors import ParseError
from imagesmith.inputs import is_digits
from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu, gpu_mismatches, reference_power_w
from imagesmith.validate.facts import KERNEL_LOG_COMMANDS, GpuFacts
from imagesmith.validate.parsers import XidEvent, parse_nvlink_status, parse_xid


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


def test_gpu_health(check: CheckRecord, gpus: list[Gpu], gpu_facts: GpuFacts) -> None:
    """Idle GPUs must not be slowed down by hardware (thermal, power brake, slowdown signal); persistence mode
    off is a warning (the driver state is torn down between jobs: slow starts, lost settings)."""
    check.figures["persistence_mode"] = {g.index: gpu_facts.persistence_mode.get(g.index) for g in gpus}
    check.figures["idle_clock_events"] = {g.index: gpu_facts.idle_clock_events.get(g.index, []) for g in gpus}
    if gpu_facts.unavailable:
        check.figures["fields_unavailable"] = sorted(gpu_facts.unavailable)
    off = [g for g in gpus if (gpu_facts.persistence_mode.get(g.index) or "").lower() == "disabled"]
    if off:
        check.warnings.append(
            "persistence mode is off on GPU "
            + ", ".join(str(g.index) for g in off)
            + ": every CUDA start re-initialises the GPU (seconds) and clock settings are lost between jobs; "
            "ask the provider to run nvidia-persistenced (or nvidia-smi -pm 1)"
        )
    slowed = [
        (g, gpu_facts.idle_clock_events[g.index]) for g in gpus if gpu_facts.idle_clock_events.get(g.index)
    ]
    if slowed:
        fail(
            "GPUs slowed down by hardware while idle: "
            + "; ".join(f"GPU {g.index} ({g.name}, {g.bus_id}): {', '.join(ev)}" for g, ev in slowed),
            "an idle board that throttles in hardware is overheating, power-starved or told to slow down by "
            "the system (a failing PSU or fan): ask the provider to check cooling and power, or for another "
            "machine",
        )


#: every NVIDIA display/3D controller on the PCI bus with the driver it is bound to ("0000:3b:00.0 nvidia");
#: NVSwitches (class 0x0680) are not GPUs; then how many /dev/nvidiaN nodes the target has ("devnodes 8"):
#: a container given some of the GPUs has only their nodes, although it sees the host's whole PCI bus (a
#: /.dockerenv says nothing: the lent H200 VM has one). Paths are read under ``$IMAGESMITH_HOST_ROOT``
#: (unset: /), which tests point at a fake tree.
PCI_GPUS = (
    'R="${IMAGESMITH_HOST_ROOT:-}"; '
    'for d in "$R"/sys/bus/pci/devices/*; do '
    '[ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] || continue; '
    'case "$(cat "$d/class" 2>/dev/null)" in 0x03*) ;; *) continue ;; esac; '
    'drv=$(readlink "$d/driver" 2>/dev/null); echo "${d##*/} ${drv##*/}"; done; '
    'echo "devnodes $(ls "$R/dev" 2>/dev/null | grep -cE \'^nvidia[0-9]+$\')"'
)


def _bus(address: str) -> str:
    """``00000000:3B:00.0`` and ``0000:3b:00.0`` → ``3b:00.0``."""
    return ":".join(address.lower().split(":")[-2:])


def test_gpus_on_the_pci_bus(ctx: Context, check: CheckRecord, gpus: list[Gpu]) -> None:
    """Every GPU the nvidia driver holds on the PCI bus is one nvidia-smi lists: a GPU that fell off the bus
    or failed to initialise is bound but missing from the list — without --expect-count nothing else would
    notice the host has one GPU fewer than it was sold with."""
    r = ctx.run(PCI_GPUS, timeout=60)
    lines = [ln.split() for ln in r.stdout.splitlines() if ln.strip()]
    nodes = next(
        (int(p[1]) for p in lines if len(p) == 2 and p[0] == "devnodes" and is_digits(p[1])),
        0,
    )
    bound = sorted(p[0] for p in lines if len(p) == 2 and p[1] == "nvidia" and p[0] != "devnodes")
    check.figures.update(pci_nvidia_bound=bound, dev_nvidia_nodes=nodes)
    if not bound:
        pytest.skip("no NVIDIA GPU bound to the nvidia driver is visible in /sys/bus/pci here")
    listed = {_bus(g.bus_id) for g in gpus if g.bus_id}
    missing = [b for b in bound if _bus(b) not in listed]
    if not missing:
        return
    what = (
        f"{len(missing)} GPU(s) bound to the nvidia driver on the PCI bus are not in nvidia-smi's list of "
        f"{len(gpus)}: {', '.join(missing)}"
    )
    if nodes < len(bound):
        # fewer /dev/nvidiaN than GPUs on the bus: a container given only some of the host's GPUs
        check.warnings.append(
            what + f" — this target has {nodes} /dev/nvidiaN device(s), so it was given only some of the "
            "host's GPUs; if it should have them all, the host has lost these"
        )
        return
    fail(
        what,
        "the driver holds these GPUs but cannot use them (fallen off the bus or failed to initialise: dmesg "
        "shows Xid 79 or 'RmInitAdapter failed'): the host needs a reboot or the GPU a replacement — ask the "
        "provider",
    )


def test_kernel_xid(ctx: Context, check: CheckRecord, gpus: list[Gpu]) -> None:
    """No hardware Xid errors in the kernel log since boot (ECC, fallen off the bus, NVLink, GSP); other Xids
    (usually an application's own fault) are warnings."""
    tried = []
    text = None
    for command in KERNEL_LOG_COMMANDS:
        r = ctx.run(command, timeout=60)
        if r.rc == 0 and r.stdout.strip():
            text, check.figures["source"] = r.stdout, command
            break
        tried.append(f"{command.split()[0]}: {(r.output.strip().splitlines() or ['no output'])[-1][:160]}")
    if text is None:
        pytest.skip(
            "cannot read the kernel log here (" + "; ".join(tried) + "): Xid errors were not checked — run "
            "imagesmith validate on the host itself (local:// or ssh://root@HOST) to check them"
        )
    events = parse_xid(text)
    ctx.save_log("kernel-xid.txt", "\n".join(ln for ln in text.splitlines() if "Xid (" in ln) + "\n")

    def where(e: XidEvent) -> str:
        if e.switch:
            return f"NVSwitch {e.bus}"
        g = next((g for g in gpus if e.matches(g.bus_id)), None)
        return f"GPU {g.index} ({e.bus})" if g else f"PCI {e.bus} (not one of the GPUs nvidia-smi lists)"

    check.figures["xid"] = [
        {"bus": e.bus, "code": e.code, "switch": e.switch, "text": e.text[:200]} for e in events
    ]
    hard: dict[str, list[str]] = {}
    soft: dict[str, list[str]] = {}
    for e in events:
        bucket = hard if e.hardware else soft
        label = e.label
        found = bucket.setdefault(where(e), [])
        if label not in found:
            found.append(label)
    for w, labels in soft.items():
        check.warnings.append(f"{w}: {', '.join(labels)} in the kernel log since boot")
    if hard:
        fail(
            "hardware Xid/SXid errors in the kernel log since boot: "
            + "; ".join(f"{w}: {', '.join(labels)}" for w, labels in hard.items()),
            "these GPUs reported hardware faults (kernel-xid.txt in the report): ask the provider to reset "
            "or replace them, or for another machine (a reboot clears the log; Xids that come back mean a "
            "failing GPU)",
        )


def test_nvlink_links(ctx: Context, check: CheckRecord, gpus: list[Gpu]) -> None:
    """Every NVLink a GPU has is up: a GPU with some links up and others inactive, or an NVLink GPU whose
    links are all down while its neighbours' are up, is degraded (all_reduce falls to a fraction)."""
    r = ctx.run("nvidia-smi nvlink -s", timeout=60)
    ctx.save_log("nvlink-status.txt", r.output)
    if r.timed_out:
        fail(
            "`nvidia-smi nvlink -s` hung for 60 s",
            "a stuck driver or NVLink: ask the provider to reset the GPUs",
        )
    if r.rc != 0:
        pytest.skip(f"nvidia-smi nvlink -s is not supported here (exit {r.rc}): {r.output.strip()[:160]}")
    problem: ParseError | None = None
    try:
        states = parse_nvlink_status(r.stdout)
    except ParseError as exc:
        problem = exc
    if problem is not None:
        fail(problem.message, problem.hint or "see nvlink-status.txt in the report")
    check.figures["links"] = {
        s.index: {"active": len(s.active), "inactive": list(s.inactive)} for s in states
    }
    problems = [
        f"GPU {s.index} ({s.name}): link {', '.join(map(str, s.inactive))} inactive, {len(s.active)} up"
        for s in states
        if s.active and s.inactive
    ]
    if any(s.active for s in states):
        problems += [
            f"GPU {s.index} ({s.name}): all {len(s.inactive)} NVLinks inactive while other GPUs' are up"
            for s in states
            if s.inactive and not s.active
        ]
    if problems:
        fail(
            "NVLinks down: " + "; ".join(problems),
            "a degraded NVLink fabric cuts all_reduce bandwidth: ask the provider to reset the GPUs (and "
            "restart nvidia-fabricmanager on NVSwitch systems) or for another machine",
        )
