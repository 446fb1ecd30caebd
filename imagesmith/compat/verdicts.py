"""Whether a PyTorch release runs on a GPU with a driver: the verdict."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass, field
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
    TorchVariant,
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


@dataclass(frozen=True)
class _Case:
    """What a verdict is asked about, resolved: the driver, the GPU, the torch release and its variant."""

    drv: DriverVersion
    g: Gpu
    rel: TorchRelease
    var: TorchVariant
    vname: str
    xy: str
    md: MinDriver


@dataclass
class _Findings:
    """What the steps of :func:`verdict` found, each list in the order the verdict shows it."""

    blockers: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    hints: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: drivers that would lift a blocker (the verdict names the highest)
    needs: list[DriverVersion] = field(default_factory=list)
    #: a blocker no driver lifts: no kernel for the GPU, its architecture past its last branch, a Python
    arch_blocked: bool = False


def _unpublished(
    rel: TorchRelease, vname: str, xy: str, warnings: tuple[str, ...], base: _VerdictIds
) -> Verdict:
    """The verdict when torch *rel* was never published for *vname*: where that variant exists instead."""
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


def _gpu_floor(c: _Case, f: _Findings) -> bool:
    """Whether the driver cannot drive the GPU at all, whatever the wheel (a branch older than the GPU, a
    board whose first driver is newer): its blocker and the driver that lifts it go to *f*."""
    floor = gpu_min_driver(c.g)
    if floor is not None and c.drv < floor[0]:
        f.blockers.append(
            f"{c.g.name} ({c.g.sm}) needs driver ≥ {floor[0]}: driver {c.drv} cannot drive it at all "
            f"({floor[1]})"
        )
        f.needs.append(floor[0])
        return True
    gap = board_gap(c.g, c.drv)
    if gap is None:
        return False
    f.blockers.append(f"{c.g.name} ({c.g.sm}): {gap}")
    fix = board_fix(c.g, c.drv)
    if fix is not None:
        f.needs.append(fix)
    return True


def _driver_mode(c: _Case, f: _Findings, *, too_old: bool) -> Literal["full", "minor-version", "none"]:
    """The driver against the wheel's CUDA: full, minor-version (with its limits) or none (with the
    variants this driver runs, and forward compatibility where the GPU can still be driven)."""
    md, vname = c.md, c.vname
    max_cuda = _max_cuda(c.drv)
    supports = (
        f"driver {c.drv} supports CUDA ≤ {max_cuda}" if max_cuda else f"driver {c.drv} predates CUDA 11.0"
    )
    if c.drv >= md.full:
        f.reasons.append(f"{supports}; {vname} needs ≥ {md.full} for full compatibility: met")
        return "full"
    if c.drv >= md.minor_version:
        f.reasons.append(
            f"{supports}; {vname} needs ≥ {md.full} for full, ≥ {md.minor_version} under minor-version "
            "compatibility: CUDA minor-version compatibility applies"
            + (" to the wheel, but not to a GPU the driver cannot drive" if too_old else "")
        )
        if not too_old:
            f.reasons.append(
                "minor-version compatibility limits: the driver cannot JIT-compile PTX newer than itself "
                "(cudaErrorUnsupportedPtxVersion — PTX-only kernels, NVRTC/JIT-built extensions), and CUDA "
                "APIs newer than the driver fail with cudaErrorCallRequiresNewerDriver; upgrade the driver "
                f"to ≥ {md.full} for the full feature set"
            )
        if c.g.segment == "datacenter" and not too_old:
            f.hints.append(_forward_compat_note(c.g, c.var.cuda, md.full))
        return "minor-version"
    f.blockers.append(
        f"{supports}; {vname} needs ≥ {md.minor_version} under minor-version compatibility, "
        f"≥ {md.full} for full"
    )
    f.needs.append(md.minor_version)
    runnable = _runnable_variants(c.rel, c.drv, c.g)
    if runnable:
        f.hints.append(
            f"torch {c.rel.version} variants this driver runs on {c.g.name}: {', '.join(runnable)}"
        )
    if not too_old:  # cuda-compat cannot make a driver drive a GPU newer than itself
        f.hints.append(_forward_compat_note(c.g, c.var.cuda, md.full))
    return "none"


def _runtime_row(c: _Case) -> str | None:
    """Why the driver row of the wheel's CUDA is not its runtime's own (a wheel shipping an older update's
    cudart), or None when they are the same."""
    runtime = wheel_runtime(c.rel.version, c.vname)
    if runtime is None or runtime.runtime == c.md.toolkit:
        return None
    return (
        f"{c.md.full} is NVIDIA's {_update_name(c.md.toolkit)} driver row; torch {c.rel.version}+{c.vname} "
        f"wheels ship the {_update_name(runtime.runtime)} runtime (cudart {runtime.cudart}), which "
        f"checks the driver against CUDA {c.xy} only, so the {_update_name(c.md.toolkit)} driver runs it"
    )


def _architecture_end(c: _Case, f: _Findings) -> None:
    """An architecture past its last driver branch, or a CUDA past its last toolkit: no driver lifts these."""
    drv, g, last = c.drv, c.g, gpu_last_branch(c.g)
    if last is None:
        return
    if last.last_branch is not None and drv.branch > last.last_branch:
        f.arch_blocked = True
        f.blockers.append(
            f"driver {drv} (R{drv.branch}) does not support {last.name} GPUs such as {g.name}: "
            f"R{last.last_branch} is their last driver branch"
        )
    if last.last_cuda_major is not None and _major(c.var.cuda) > last.last_cuda_major:
        f.arch_blocked = True
        f.blockers.append(
            f"{g.name} ({last.name}) cannot run CUDA {c.var.cuda}: CUDA {last.last_toolkit} is NVIDIA's last "
            f"CUDA toolkit for {last.name} GPUs (R{last.last_branch} their last driver branch)"
        )


def _covering_release(cc: str, asked: str, *, dropped: bool) -> tuple[str | None, str]:
    """The torch release+variant to name for a GPU of *cc* that wheel *asked* has no kernel for, and how it
    is named: the newest with kernels when the wheels *dropped* the GPU, else the first from *asked* on (the
    first ever only when no later one has any)."""
    other = _first_covering(cc, newest=dropped)
    which = "newest" if dropped else "first"
    if not dropped and other is not None and _vkey(other.partition("+")[0]) < _vkey(asked):
        # the first ever is older than what was asked for: name the first from this release on instead
        later = _first_covering(cc, since=asked)
        other, which = (later, f"first torch release from {asked} on") if later else (other, which)
    return other, which if " " in which else f"{which} torch release"


def _kernel_coverage(c: _Case, f: _Findings) -> ArchCoverage:
    """The wheel's kernels for the GPU: none (a blocker naming a release that has some), PTX only under
    minor-version compatibility (a blocker, lifted by the full driver), else the coverage as a reason."""
    g, md = c.g, c.md
    cov = arch_coverage(c.var.arch_list, g.cc)
    if cov.kind == "none":
        f.arch_blocked = True
        other, which = _covering_release(g.cc, c.rel.version, dropped=_dropped(c.var.arch_list, g.cc))
        hint = f"; the {which} with kernels for {g.sm} is {other}" if other else ""
        f.blockers.append(
            f"{g.name} with CUDA capability {g.sm} is not compatible with the current PyTorch installation: "
            f"{c.vname} wheels of torch {c.rel.version} carry no {g.sm} kernels (built for "
            f"TORCH_CUDA_ARCH_LIST={c.var.torch_cuda_arch_list}: "
            f"{' '.join(torch_arch_names(c.var.arch_list))}){hint}"
        )
    elif cov.kind == "ptx" and c.drv < md.full:
        f.needs.append(md.full)
        f.blockers.append(
            f"the wheel's only kernel for {g.sm} is PTX ({cov.kernel}), which the driver must JIT-compile: "
            f"not possible under minor-version compatibility; needs driver ≥ {md.full}"
        )
    else:
        f.reasons.append(f"{g.name}: {cov.detail}")
    return cov


def _python_fit(c: _Case, python: str | None, f: _Findings) -> None:
    """The image's Python against the paired torchvision: an exact version it refuses is a blocker no
    driver lifts; a Python (or, left out, every Python) with excluded versions gets a note."""
    rel = c.rel
    refused = rel.torchvision_refuses(python) if python is not None else None
    if python is not None and refused is not None:
        f.arch_blocked = True  # no driver fixes it
        f.blockers.append(f"{refused}: use another Python {'.'.join(python.split('.')[:2])}.x")
        return
    if rel.torchvision_python is None:
        return
    excluded = [
        sp.version
        for sp in rel.torchvision_python
        if sp.operator == "!="
        and (python is None or sp.version.split(".")[:2] == python.strip().split(".")[:2])
    ]
    if excluded:
        f.notes.append(
            f"note: torchvision {rel.torchvision} (paired with torch {rel.version}) requires Python "
            f"{rel.torchvision_python}: an image on Python {', '.join(excluded)} cannot install it"
        )


def _needs_driver(f: _Findings, drv: DriverVersion) -> DriverVersion | None:
    """The lowest driver that makes the verdict compatible: only when a driver is all that is in the way
    (there are blockers, none of them one no driver lifts) and *drv* is below it."""
    if not f.blockers or not f.needs or f.arch_blocked:
        return None
    need = max(f.needs)
    return need if drv < need else None


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
    var = rel.variants.get(vname)
    if var is None:
        return _unpublished(rel, vname, xy, warnings, base)
    c = _Case(drv=drv, g=g, rel=rel, var=var, vname=vname, xy=xy, md=min_driver(var.cuda))
    f = _Findings()
    # a driver branch older than the GPU cannot drive it at all, whatever the wheel: say that first
    too_old = _gpu_floor(c, f)
    mode = _driver_mode(c, f, too_old=too_old)
    runtime_row = _runtime_row(c)
    if runtime_row is not None:
        f.reasons.insert(1, runtime_row)
    _architecture_end(c, f)
    cov = _kernel_coverage(c, f)
    if f.arch_blocked and mode != "none":  # the driver hint (mode none) lists them already
        runnable = _runnable_variants(rel, drv, g)
        f.hints.append(
            f"torch {rel.version} variants this driver runs on {g.name}: {', '.join(runnable)}"
            if runnable
            else f"no variant of torch {rel.version} runs on {g.name} with driver {drv}"
        )
    _python_fit(c, python, f)
    if not var.verified or not rel.verified:
        f.notes.append(
            f"note: imagesmith's data for torch {rel.version}+{vname} is partly unverified "
            "(its `source` in imagesmith/data/torch.toml says which part)"
        )
    final: Literal["full", "minor-version", "none"] = "none" if f.blockers else mode
    ordered = f.blockers + f.reasons + f.hints + f.notes  # what stops it first, then the rest
    return Verdict(
        compatible=final != "none",
        mode=final,
        reasons=tuple(ordered),
        arch=cov,
        min_driver=c.md,
        blockers=tuple(f.blockers),
        needs_driver=_needs_driver(f, drv),
        warnings=warnings,
        notes=tuple(f.notes),
        **base,
    )
