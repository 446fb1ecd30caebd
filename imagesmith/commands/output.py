"""How pick and release results read, as text and as JSON (the core modules return data, not strings)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from imagesmith.pick import Pick
    from imagesmith.release import Outcome


def endurance(figures: Mapping[str, float]) -> str:
    """What a validated host showed beyond a minute (issue 28): its soak and its DDP scaling efficiency; and
    what its listing run proved (issue 33): the promises kept, vCPUs and RAM per GPU, its folders' rates."""
    parts = []
    if figures.get("soak_minutes"):
        soak = f"soak {figures['soak_minutes']:g} min"
        if figures.get("soak_matmul_tflops"):
            soak += f" at {figures['soak_matmul_tflops']:.0f} TFLOP/s"
        if figures.get("soak_worst_minute_ratio"):
            soak += f", worst minute {figures['soak_worst_minute_ratio']:.2f}× the first"
        parts.append(soak)
    if figures.get("scaling_efficiency"):
        parts.append(f"DDP scaling {figures['scaling_efficiency']:.2f}")
    # issue 33: what a listing-validated host proved
    if figures.get("listing_promises_kept"):
        parts.append(f"listing: {figures['listing_promises_kept']:g} promises kept")
    if figures.get("host_vcpu_per_gpu"):
        parts.append(f"{figures['host_vcpu_per_gpu']:g} vCPU/GPU")
    if figures.get("host_ram_per_gpu_memory"):
        parts.append(f"RAM {figures['host_ram_per_gpu_memory']:.2f}× GPU memory")
    if figures.get("storage_data_read_gbps"):
        parts.append(f"data read {figures['storage_data_read_gbps']:.2g} GB/s")
    if figures.get("storage_checkpoint_write_gbps"):
        parts.append(f"checkpoint write {figures['storage_checkpoint_write_gbps']:.2g} GB/s")
    return f" [{'; '.join(parts)}]" if parts else ""


def pick_text(pick: Pick, *, verbose: bool = True) -> str:
    img = pick.image
    gpus = ", ".join(
        f"{g.name}" + (f" (sm_{g.compute_cap.replace('.', '')})" if g.compute_cap else "")
        for g in pick.host.gpus
    )
    lines = [
        f"host: driver {pick.host.driver}, {len(pick.host.gpus)} GPU(s): {gpus}  [{pick.host.source}]",
        f"picked: {img.tag}  torch {img.torch}, torchvision {img.torchvision}, CUDA {img.cuda}, "
        f"Python {img.python}  ({pick.mode} compatibility)",
        f"  digest {img.digest}; validated on "
        + "; ".join(
            f"{v.count}x {v.gpu} driver {v.driver} ({v.date[:10]}){endurance(v.figures)}"
            for v in img.validated_on
        ),
        f"  registry: {pick.registry_why}",
    ]
    if pick.cluster_line:  # issue 32: its signed multi-node validation
        lines.insert(3, f"  {pick.cluster_line}")
    if pick.alternatives:
        lines.append(
            "  also in (same digest; --pull tries them in this order): "
            + ", ".join(f"{c.name} ({c.host})" for c in pick.alternatives)
        )
    lines += [f"warning: {w}" for w in pick.warnings]
    if verbose and pick.rejected:
        lines.append("not picked:")
        lines += [f"  {r.tag}: {r.reason}" for r in pick.rejected]
    lines += ["", shlex.join(pick.pull_argv()), shlex.join(pick.run_argv())]
    return "\n".join(lines)


def pick_json(pick: Pick) -> str:
    return json.dumps(pick.to_json(), indent=2)


def release_text(outcome: Outcome) -> str:
    lines = [f"release {outcome.matrix}{' (dry run)' if outcome.dry_run else ''}:"]
    for c in outcome.cells:
        lines.append(f"  {c.cell}: {c.status}" + (f" {c.digest}" if c.digest else ""))
        lines += [f"    - {s}" for s in c.steps]
        lines += [f"    ! {r}" for r in c.reasons]
        if c.cluster is not None:
            from imagesmith.pick.ranking import cluster_sentence

            lines.append(f"    cluster: {cluster_sentence(c.cluster)}")
        if c.vulnerabilities is not None:
            v = c.vulnerabilities
            lines.append(
                f"    vulnerabilities: none at or above {v.fail_on} ({v.scanner} report {v.report})"
                + (f"; allowlisted: {', '.join(v.allowlisted)}" if v.allowlisted else "")
            )
    if outcome.index_file:
        verb = "would update" if outcome.dry_run else ("updated" if outcome.index_changed else "unchanged")
        lines.append(f"index {outcome.index_file}: {verb}")
    if outcome.index_signature:
        lines.append(f"index signature: {outcome.index_signature}")
    lines += [f"index published: {p}" for p in outcome.index_published]
    lines += [f"corrected: {c}" for c in outcome.corrections]
    return "\n".join(lines)


def release_json(outcome: Outcome) -> str:
    return json.dumps(
        {
            "matrix": outcome.matrix,
            "dry_run": outcome.dry_run,
            "cells": [{k: v for k, v in vars(c).items() if k != "facts"} for c in outcome.cells],
            "index_file": outcome.index_file,
            "index_changed": outcome.index_changed,
            "index_published": outcome.index_published,
            "index_signature": outcome.index_signature,
            "corrections": outcome.corrections,
        },
        indent=2,
        default=_record,
    )


def _record(obj: Any) -> Any:
    """A cell's records (its vulnerability verdict) as JSON objects."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serializable")
