"""Whether a PyTorch release runs on a GPU with a driver: the verdict."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypedDict

from imagesmith.compat import torchwheels  # looked up at call time: tests swap torch_release there
from imagesmith.compat.drivers import (
    DriverVersion,
    MinDriver,
    _as_driver,
    _major,
    _max_cuda,
    _update_name,
    _vkey,
    driver_warnings,
    min_driver,
    normalize_cuda,
    wheel_runtime,
)
from imagesmith.compat.hardware import (
    ArchCoverage,
    Gpu,
    _lookup_gpu,
    _parse_arch,
    _parse_cc,
    arch_coverage,
    board_fix,
    board_gap,
    gpu_last_branch,
    gpu_min_driver,
    gpu_warnings,
    torch_arch_names,
)
from imagesmith.compat.torchwheels import (
    TorchRelease,
)
from imagesmith.errors import ConfigError

# ------------------------------------------------------------------------------------------------------------
# verdicts


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Whether torch *variant* runs on *gpu* with *driver*, how (``mode``) and why (``reasons``, in words a
    user acts on).

    ``blockers`` is the subset of ``reasons`` that makes the verdict ``none`` (empty when compatible);
    ``needs_driver`` is the lowest driver that would make it compatible when only the driver is in the way
    (None otherwise, e.g. when the wheel has no kernel for the GPU). ``notes`` is the subset of ``reasons``
    that is a note (``note: …``: partly unverified data, a Python torchvision refuses): what a caller passes
    on as a warning, read from this field, never from the words.
    """

    compatible: bool
    mode: Literal["full", "minor-version", "none"]
    reasons: tuple[str, ...]
    arch: ArchCoverage | None
    min_driver: MinDriver | None
    driver: str = ""
    gpu: str = ""
    torch: str = ""
    cuda: str = ""
    variant: str = ""
    blockers: tuple[str, ...] = ()
    needs_driver: DriverVersion | None = None
    #: about the host, not this wheel: an end-of-life driver branch, a GPU whose last branch caps its CUDA
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


class _VerdictIds(TypedDict):
    driver: str
    gpu: str
    torch: str
    cuda: str
    variant: str


def _first_covering(cc: str, *, newest: bool = False, since: str | None = None) -> str | None:
    """The first (or *newest*) torch release+variant with SASS for *cc*; with *since*: the first from that
    release on."""
    releases = reversed(torchwheels.torch_releases()) if newest else iter(torchwheels.torch_releases())
    for rel in releases:
        if since is not None and _vkey(rel.version) < _vkey(since):
            continue
        for var in rel.variants.values():
            if arch_coverage(var.arch_list, cc).kind in ("native", "binary-compatible"):
                return f"{rel.version}+{var.name}"
    return None


def _dropped(arch_list: Sequence[str], cc: str) -> bool:
    """True when every SASS target of the wheel is newer than *cc*: the wheel dropped this GPU."""
    return all(_parse_arch(e)[:2] > _parse_cc(cc) for e in arch_list)


def _forward_compat_note(g: Gpu, xy: str, full: DriverVersion) -> str:
    package = "cuda-compat-" + xy.replace(".", "-")
    if g.segment == "datacenter":
        return (
            f"{g.name} is a data-center GPU: NVIDIA's forward-compatibility package {package} inside "
            f"the image can run CUDA {xy} on an older driver branch (only the branches NVIDIA supports "
            "for it; see docs.nvidia.com/deploy/cuda-compatibility/forward-compatibility.html) — or "
            f"upgrade the driver to ≥ {full}"
        )
    if g.segment == "workstation":
        return (
            f"forward compatibility ({package}) covers only NVIDIA's 'NGC Server Ready' RTX SKUs; "
            f"for {g.name} upgrade the driver to ≥ {full}"
        )
    return (
        f"forward compatibility ({package}) is not available for consumer GPUs such as {g.name}: "
        f"upgrade the driver to ≥ {full}"
    )


def _runnable_variants(rel: TorchRelease, drv: DriverVersion, g: Gpu) -> list[str]:
    """The variants of *rel* that run on *g* with *drv*: a kernel for the GPU, a CUDA the GPU's last driver
    branch reaches, a driver new enough (full, or minor-version when the kernel is SASS)."""
    last = gpu_last_branch(g)
    if last is not None and last.last_branch is not None and drv.branch > last.last_branch:
        return []
    floor = gpu_min_driver(g)
    if (floor is not None and drv < floor[0]) or board_gap(g, drv) is not None:
        return []
    out = []
    for var in rel.variants.values():
        try:
            need = min_driver(var.cuda)
        except ConfigError:
            continue
        if last is not None and last.last_cuda_major is not None and _major(var.cuda) > last.last_cuda_major:
            continue
        cov = arch_coverage(var.arch_list, g.cc).kind
        if cov == "none":
            continue
        if drv >= need.full or (drv >= need.minor_version and cov != "ptx"):
            out.append(var.name)
    return out


def verdict(
    driver: DriverVersion | str,
    gpu: Gpu | str,
    torch: str,
    cuda: str,
    *,
    today: datetime.date | None = None,
    python: str | None = None,
) -> Verdict:
    """Can torch *torch* built for *cuda* (``12.1`` or ``cu121``) run on *gpu* with *driver*?

    ``full``: the driver is at least the toolkit driver of the variant's CUDA and the wheel has a kernel for
    the GPU. ``minor-version``: the driver is only at the major's minor-version floor — it runs, with the
    limits listed in ``reasons``; a wheel whose only kernel for the GPU is PTX then cannot run. ``none``: it
    does not run; ``reasons`` says why and what to change. Unknown torch versions, GPUs, junk drivers or CUDA
    strings raise ConfigError.

    *python* (``3.12`` or ``3.14.1``, the Python the image runs): an exact version the paired torchvision
    cannot be installed on (``torchvision_python``) is a blocker; a minor with such a version gets a note.
    Left out, the note names every excluded Python of that torchvision.

    ``warnings`` are about the host, whatever the wheel: a driver branch past end of life on *today* (default
    :func:`today`), a GPU whose last driver branch caps its CUDA. They never change ``mode``.
    """
    drv = _as_driver(driver)
    g = gpu if isinstance(gpu, Gpu) else _lookup_gpu(gpu)
    warnings = driver_warnings(drv, today=today) + gpu_warnings(g)
    rel = torchwheels.torch_release(torch)
    vname, xy = normalize_cuda(cuda)
    base = _VerdictIds(driver=str(drv), gpu=g.key, torch=rel.version, cuda=xy, variant=vname)
    max_cuda = _max_cuda(drv)
    supports = f"driver {drv} supports CUDA ≤ {max_cuda}" if max_cuda else f"driver {drv} predates CUDA 11.0"

    var = rel.variants.get(vname)
    if var is None:
        others = [r.version for r in torchwheels.torch_releases() if vname in r.variants]
        where = (
            f"{vname} wheels exist for torch {others[0]} … {others[-1]}"
            if others
            else f"no torch release has {vname}"
        )
        try:
            md: MinDriver | None = min_driver(xy)
        except ConfigError:
            md = None
        never = (
            f"torch {rel.version} was never published for {vname} (CUDA {xy}): its CUDA variants are "
            f"{', '.join(rel.variants)} (PyPI default {rel.pypi_default}); {where}"
        )
        return Verdict(
            compatible=False,
            mode="none",
            reasons=(never,),
            arch=None,
            min_driver=md,
            blockers=(never,),
            warnings=warnings,
            **base,
        )

    md = min_driver(var.cuda)
    reasons: list[str] = []
    blockers: list[str] = []
    hints: list[str] = []
    # a driver branch older than the GPU cannot drive it at all, whatever the wheel: say that first
    floor = gpu_min_driver(g)
    too_old = floor is not None and drv < floor[0]
    if floor is not None and too_old:
        blockers.append(
            f"{g.name} ({g.sm}) needs driver ≥ {floor[0]}: driver {drv} cannot drive it at all ({floor[1]})"
        )
    gap = None if too_old else board_gap(g, drv)
    if gap is not None:
        too_old = True
        blockers.append(f"{g.name} ({g.sm}): {gap}")

    if drv >= md.full:
        mode: Literal["full", "minor-version", "none"] = "full"
        reasons.append(f"{supports}; {vname} needs ≥ {md.full} for full compatibility: met")
    elif drv >= md.minor_version:
        mode = "minor-version"
        reasons.append(
            f"{supports}; {vname} needs ≥ {md.full} for full, ≥ {md.minor_version} under minor-version "
            "compatibility: CUDA minor-version compatibility applies"
            + (" to the wheel, but not to a GPU the driver cannot drive" if too_old else "")
        )
        if not too_old:
            reasons.append(
                "minor-version compatibility limits: the driver cannot JIT-compile PTX newer than itself "
                "(cudaErrorUnsupportedPtxVersion — PTX-only kernels, NVRTC/JIT-built extensions), and CUDA "
                "APIs newer than the driver fail with cudaErrorCallRequiresNewerDriver; upgrade the driver "
                f"to ≥ {md.full} for the full feature set"
            )
        if g.segment == "datacenter" and not too_old:
            hints.append(_forward_compat_note(g, var.cuda, md.full))
    else:
        mode = "none"
        blockers.append(
            f"{supports}; {vname} needs ≥ {md.minor_version} under minor-version compatibility, "
            f"≥ {md.full} for full"
        )
        runnable = _runnable_variants(rel, drv, g)
        if runnable:
            hints.append(f"torch {rel.version} variants this driver runs on {g.name}: {', '.join(runnable)}")
        if not too_old:  # cuda-compat cannot make a driver drive a GPU newer than itself
            hints.append(_forward_compat_note(g, var.cuda, md.full))

    runtime = wheel_runtime(rel.version, vname)
    if runtime is not None and runtime.runtime != md.toolkit:
        reasons.insert(
            1,
            f"{md.full} is NVIDIA's {_update_name(md.toolkit)} driver row; torch {rel.version}+{vname} "
            f"wheels ship the {_update_name(runtime.runtime)} runtime (cudart {runtime.cudart}), which "
            f"checks the driver against CUDA {xy} only, so the {_update_name(md.toolkit)} driver runs it",
        )

    needs: list[DriverVersion] = [] if mode != "none" else [md.minor_version]
    fix = board_fix(g, drv) if gap is not None else None
    if fix is not None:
        needs.append(fix)
    if floor is not None and too_old:
        needs.append(floor[0])
        if mode == "none":  # both: the GPU's floor, then the wheel's CUDA
            needs.append(md.minor_version)

    arch_blocked = False
    last = gpu_last_branch(g)
    if last is not None and last.last_branch is not None and drv.branch > last.last_branch:
        arch_blocked = True  # no driver fixes it
        blockers.append(
            f"driver {drv} (R{drv.branch}) does not support {last.name} GPUs such as {g.name}: "
            f"R{last.last_branch} is their last driver branch"
        )
    if last is not None and last.last_cuda_major is not None and _major(var.cuda) > last.last_cuda_major:
        arch_blocked = True
        blockers.append(
            f"{g.name} ({last.name}) cannot run CUDA {var.cuda}: CUDA {last.last_toolkit} is NVIDIA's last "
            f"CUDA toolkit for {last.name} GPUs (R{last.last_branch} their last driver branch)"
        )

    cov = arch_coverage(var.arch_list, g.cc)
    if cov.kind == "none":
        arch_blocked = True
        dropped = _dropped(var.arch_list, g.cc)
        other = _first_covering(g.cc, newest=dropped)
        which = "newest" if dropped else "first"
        if not dropped and other is not None and _vkey(other.partition("+")[0]) < _vkey(rel.version):
            # the first ever is older than what was asked for: name the first from this release on instead
            later = _first_covering(g.cc, since=rel.version)
            other, which = (later, f"first torch release from {rel.version} on") if later else (other, which)
        which = which if " " in which else f"{which} torch release"
        hint = f"; the {which} with kernels for {g.sm} is {other}" if other else ""
        blockers.append(
            f"{g.name} with CUDA capability {g.sm} is not compatible with the current PyTorch installation: "
            f"{vname} wheels of torch {rel.version} carry no {g.sm} kernels (built for "
            f"TORCH_CUDA_ARCH_LIST={var.torch_cuda_arch_list}: {' '.join(torch_arch_names(var.arch_list))})"
            f"{hint}"
        )
    elif cov.kind == "ptx" and drv < md.full:
        needs.append(md.full)
        blockers.append(
            f"the wheel's only kernel for {g.sm} is PTX ({cov.kernel}), which the driver must JIT-compile: "
            f"not possible under minor-version compatibility; needs driver ≥ {md.full}"
        )
    else:
        reasons.append(f"{g.name}: {cov.detail}")
    if arch_blocked and mode != "none":  # the driver hint (mode none) lists them already
        runnable = _runnable_variants(rel, drv, g)
        hints.append(
            f"torch {rel.version} variants this driver runs on {g.name}: {', '.join(runnable)}"
            if runnable
            else f"no variant of torch {rel.version} runs on {g.name} with driver {drv}"
        )

    notes = []
    refused = rel.torchvision_refuses(python) if python is not None else None
    if python is not None and refused is not None:
        arch_blocked = True  # no driver fixes it
        blockers.append(f"{refused}: use another Python {'.'.join(python.split('.')[:2])}.x")
    elif rel.torchvision_python is not None:
        excluded = [
            sp.version
            for sp in rel.torchvision_python
            if sp.operator == "!="
            and (python is None or sp.version.split(".")[:2] == python.strip().split(".")[:2])
        ]
        if excluded:
            notes.append(
                f"note: torchvision {rel.torchvision} (paired with torch {rel.version}) requires Python "
                f"{rel.torchvision_python}: an image on Python {', '.join(excluded)} cannot install it"
            )
    if not var.verified or not rel.verified:
        notes.append(
            f"note: imagesmith's data for torch {rel.version}+{vname} is partly unverified "
            "(its `source` in imagesmith/data/torch.toml says which part)"
        )

    final: Literal["full", "minor-version", "none"] = "none" if blockers else mode
    ordered = blockers + reasons + hints + notes  # what stops it first, then the rest
    return Verdict(
        compatible=final != "none",
        mode=final,
        reasons=tuple(ordered),
        arch=cov,
        min_driver=md,
        blockers=tuple(blockers),
        needs_driver=max(needs) if blockers and needs and not arch_blocked and drv < max(needs) else None,
        warnings=warnings,
        notes=tuple(notes),
        **base,
    )
