"""Choosing: assessing each released image on the host through :mod:`imagesmith.compat`, ranking them, and the
``docker run`` flags of the pick."""

from __future__ import annotations

import datetime
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, Literal

from imagesmith.errors import (
    ConfigError,
    NoImageFitsError,
)
from imagesmith.index import (
    ClusterSummary,
    RegistryCopy,
    ReleasedImage,
    ReleaseIndex,
)

if TYPE_CHECKING:
    from imagesmith.nvsmi import SmiGpu

from imagesmith.pick.fetching import allowed_copies
from imagesmith.pick.hosts import Constraints, Host, _vkey
from imagesmith.pick.platforms import Platform, choose_registry, rank_registries

#: NGC-style ulimits for PyTorch containers: pinned memory unlimited, 64 MiB stacks.
ULIMITS: Final[tuple[str, ...]] = ("--ulimit", "memlock=-1", "--ulimit", "stack=67108864")

Level = Literal["full", "minor"]
#: how a level reads in text and JSON: compat's mode names ("minor-version", never "minor compatibility")
MODE: Final[dict[str, str]] = {"full": "full", "minor": "minor-version"}


# ------------------------------------------------------------------------------------------------------------
# choosing


@dataclass(frozen=True, kw_only=True)
class Assessment:
    """compat's verdict for one image on this host: level None = does not run."""

    level: Level | None
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    needs_driver: str | None = None


@dataclass(frozen=True, kw_only=True)
class Rejected:
    tag: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class Pick:
    image: ReleasedImage
    level: Level
    registry: RegistryCopy
    registry_why: str
    host: Host
    warnings: tuple[str, ...]
    rejected: tuple[Rejected, ...]
    runner_up: tuple[ReleasedImage, ...] = field(default=())
    #: the part of ``warnings`` about the host itself (end-of-life driver branch, a GPU's last branch)
    host_warnings: tuple[str, ...] = ()
    #: the image's other registries (same digest), best first: what --pull tries when ``registry`` fails
    alternatives: tuple[RegistryCopy, ...] = ()

    @property
    def mode(self) -> str:
        """The level as compat names it: ``full`` or ``minor-version``."""
        return MODE[self.level]

    @property
    def reference(self) -> str:
        """``host/repo:tag@sha256:…``: readable, and pins exactly the validated digest."""
        return f"{self.registry.reference}@{self.registry.digest}"

    @property
    def cluster_line(self) -> str:
        """Issue 32: what the picked image's signed multi-node validation showed ("" without one)."""
        return cluster_sentence(self.image.cluster)

    def pull_argv(self) -> list[str]:
        return ["docker", "pull", self.reference]

    def run_argv(self) -> list[str]:
        return ["docker", "run", *run_flags(self.image), "-it", "--rm", self.reference]

    def to_json(self) -> dict[str, Any]:
        img = self.image
        return {
            "tag": img.tag,
            "reference": self.reference,
            "registry": {"name": self.registry.name, "kind": self.registry.kind, "why": self.registry_why},
            "other_registries": [
                {"name": c.name, "kind": c.kind, "reference": f"{c.reference}@{c.digest}"}
                for c in self.alternatives
            ],
            "digest": img.digest,
            "compatibility": self.mode,
            "torch": img.torch,
            "torchvision": img.torchvision,
            "cuda": img.cuda,
            "python": img.python,
            "min_driver": {"full": str(img.min_driver.full), "minor": str(img.min_driver.minor_version)},
            "host": {
                "driver": self.host.driver,
                "gpus": [{"name": g.name, "cc": g.compute_cap} for g in self.host.gpus],
                "source": self.host.source,
            },
            "validated_on": [
                {
                    "gpu": v.gpu,
                    "count": v.count,
                    "driver": v.driver,
                    "date": v.date,
                    "figures": dict(v.figures),
                }
                for v in img.validated_on
            ],
            "cluster": (
                {
                    "nodes": img.cluster.nodes,
                    "gpus_per_node": img.cluster.gpus_per_node,
                    "fabric": img.cluster.fabric,
                    "date": img.cluster.date,
                    "report_digest": img.cluster.report_digest,
                    "artifact": img.cluster.artifact or None,
                }
                if img.cluster is not None
                else None
            ),
            "pull": shlex.join(self.pull_argv()),
            "run": shlex.join(self.run_argv()),
            "warnings": list(self.warnings),
            "host_warnings": list(self.host_warnings),
            "rejected": [{"tag": r.tag, "reason": r.reason} for r in self.rejected],
        }


def cluster_sentence(cluster: ClusterSummary | None) -> str:
    """``validated on 3 nodes × 8 GPUs, fabric ib (InfiniBand) (2026-12-02; cluster report sha256:…)``; ""
    without a cluster summary."""
    if cluster is None:
        return ""
    from imagesmith.validate import fabrics  # how pick names a fabric: imagesmith/data/fabrics.toml's title

    name = fabrics.titles().get(cluster.fabric)
    fabric = f"{cluster.fabric} ({name})" if name else cluster.fabric
    return (
        f"validated on {cluster.nodes} nodes × {cluster.gpus_per_node} GPUs, fabric {fabric} "
        f"({cluster.date[:10]}; cluster report {cluster.report_digest[:19]}…)"
    )


def run_flags(image: ReleasedImage) -> list[str]:
    """``--gpus all``, the image's shm requirement, and the NGC ulimits."""
    flags = ["--gpus", "all"]
    if image.shm.ipc_host:
        flags.append("--ipc=host")
    if image.shm.size:
        flags.append(f"--shm-size={image.shm.size}")
    return [*flags, *ULIMITS]


def _rank(image: ReleasedImage, level: Level) -> tuple[Any, ...]:
    return (
        0 if level == "full" else 1,
        tuple(-p for p in _vkey(image.torch)),
        tuple(-p for p in _vkey(image.cuda)),
        tuple(-p for p in _vkey(image.python)),
        image.tag,
    )


def choose(
    index: ReleaseIndex,
    host: Host,
    constraints: Constraints,
    *,
    platform: Platform,
    region: str | None = None,
    machine: str = "x86_64",
    today: datetime.date | None = None,
) -> Pick:
    """The best released image for *host* within *constraints* (see the module docstring for the rule).

    Host warnings (an end-of-life driver branch on *today*, default :func:`imagesmith.compat.today`; a GPU
    whose last driver branch caps its CUDA) come after the image's own warnings, and in the error when nothing
    fits.
    """
    from imagesmith import compat

    on = today if today is not None else compat.today()
    host_warns = host_warnings(host, today=on)
    if not index.images:
        raise NoImageFitsError("the release index lists no image", hint="run imagesmith release first")
    constraints.check_against(index.images)
    arch = {"x86_64": "linux/amd64", "amd64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64"}
    want_platform = arch.get(machine, f"linux/{machine}")
    fits: list[tuple[ReleasedImage, Assessment]] = []
    rejected: list[Rejected] = []
    driver_needs: list[str] = []
    skipped_copies: dict[str, tuple[str, ...]] = {}
    for listed in index.images:
        copies, skipped_copies[listed.tag] = allowed_copies(index, listed)
        if not copies:
            rejected.append(Rejected(tag=listed.tag, reason="; ".join(skipped_copies[listed.tag])))
            continue
        image = replace(listed, registries=copies)
        reason = constraints.rejects(image)
        if reason is None and image.platform != want_platform:
            reason = f"built for {image.platform}, this host is {want_platform}"
        if reason is not None:
            rejected.append(Rejected(tag=image.tag, reason=reason))
            continue
        verdict = assess(image, host, today=on)
        if verdict.level is None:
            rejected.append(Rejected(tag=image.tag, reason="; ".join(verdict.reasons)))
            if verdict.needs_driver:
                driver_needs.append(verdict.needs_driver)
            continue
        fits.append((image, verdict))
    index_warns = (
        []
        if index.registries
        else [
            "the release index lists no publisher registries (written by an imagesmith before issue 17): "
            "every registry host in it is taken; rerun imagesmith release to add them"
        ]
    )
    if not fits:
        message, fix = _nothing_fits(host, constraints, rejected, driver_needs)
        message += "".join(f"\nwarning: {w}" for w in host_warns)
        raise NoImageFitsError(message, hint=fix)
    fits.sort(key=lambda pair: _rank(pair[0], pair[1].level or "minor"))
    best, verdict = fits[0]
    assert verdict.level is not None
    warnings = list(verdict.warnings) + list(skipped_copies.get(best.tag, ()))
    if verdict.level == "minor":
        warnings.insert(
            0,
            f"runs through CUDA minor-version compatibility only (driver {host.driver} < "
            f"{best.min_driver.full}, the CUDA {best.cuda} toolkit driver): limited feature set, "
            "no JIT of newer PTX; "
            f"upgrade the driver to >= {best.min_driver.full} for full support",
        )
    newer = [
        (img, v)
        for img, v in fits[1:]
        if v.level == "minor" and verdict.level == "full" and _vkey(img.torch) > _vkey(best.torch)
    ]
    if newer:
        img, _ = max(newer, key=lambda pair: _vkey(pair[0].torch))
        warnings.append(
            f"{img.tag} (torch {img.torch}, CUDA {img.cuda}) would run only with minor-version compatibility "
            f"on driver {host.driver}; with a driver >= {img.min_driver.full} it would be picked instead"
        )
    for img, v in fits[1:]:
        rejected.append(
            Rejected(
                tag=img.tag,
                reason=f"ranked lower ({MODE[v.level or 'minor']} compatibility, torch {img.torch})",
            )
        )
    copy, why, reg_warnings = choose_registry(best.registries, platform, region)
    if platform.name == "generic" and region is None:
        from imagesmith.kinds import china_kinds

        in_china = [c.name for c in best.registries if c.kind in china_kinds()]
        if in_china and copy.kind not in china_kinds():
            reg_warnings.append(
                f"no --platform or --region given and none detected: {copy.name} ({copy.host}) comes first; "
                f"on a mainland-China host (AutoDL, Aliyun, Tencent, Huawei) Docker Hub and GHCR are "
                f"unreachable: pass --platform autodl (or aliyun, tencent, huawei) or --region cn to get "
                f"{', '.join(in_china)}"
            )
    others = [c for c in rank_registries(best.registries, platform, region) if c != copy]
    return Pick(
        image=best,
        level=verdict.level,
        registry=copy,
        registry_why=why,
        host=host,
        warnings=tuple(warnings + list(host_warns) + reg_warnings + index_warns),
        rejected=tuple(rejected),
        runner_up=tuple(img for img, _ in fits[1:]),
        host_warnings=host_warns,
        alternatives=tuple(c for c in others if c.digest == copy.digest),
    )


def _nothing_fits(
    host: Host, constraints: Constraints, rejected: list[Rejected], needs: list[str]
) -> tuple[str, str]:
    """(message, fix) of the error when no released image runs on *host*."""
    gpus = ", ".join(sorted({g.name for g in host.gpus})) or "no GPU"
    lines = [f"no released image runs on this host (driver {host.driver}, {gpus}):"]
    lines += [f"  {r.tag}: {r.reason}" for r in rejected]
    fixes = []
    if needs:
        lowest = min(needs, key=_vkey)
        fixes.append(f"a driver >= {lowest} would run at least one of them")
    given = [flag for flag, _, _ in constraints.given()]
    if given:
        fixes.append(f"drop or change {'/'.join(given)}: the images they exclude may run here")
    if not fixes:
        fixes.append(
            "no image of this index targets these GPUs: build a matrix for them, or try another --index"
        )
    return "\n".join(lines), "; or ".join(fixes)


# ------------------------------------------------------------------------------------------------------------
# verdicts: imagesmith.compat decides, pick only condenses its reasons into one line per image

# compat.Verdict.blockers are the reasons that stop an image; needs_driver the driver that would unblock it


def _compat_gpu(g: SmiGpu, driver: str | None = None) -> Any:
    """compat's model for a host GPU; an unknown model with a known compute capability: ad hoc. The host's
    *driver* rules out SKUs of a cut-short name that it cannot drive."""
    from imagesmith import compat

    try:
        drv = compat.parse_driver(driver) if driver else None
    except ConfigError:
        drv = None
    try:
        return compat.gpu(g.name, memory_mib=g.memory_mib, driver=drv)
    except ConfigError:
        if g.compute_cap is None:
            raise
        return compat.Gpu(
            key=g.name.casefold(),
            name=g.name,
            cc=g.compute_cap,
            memory_gib=round((g.memory_mib or 0) / 1024, 1),
            tdp_w=None,
            smi_names=(g.name,),
            source="nvidia-smi compute_cap (model not in imagesmith/data/gpus.toml)",
            memory_mib=g.memory_mib or 0,
            segment="consumer",
        )


def mig_warnings(gpus: Sequence[SmiGpu]) -> tuple[str, ...]:
    """One warning when nvidia-smi shows MIG on (``MIG M.: Enabled``, or MIG devices under a GPU in ``-L``):
    the verdicts hold per slice, but validation's test_mig fails on such a host (the same reasons)."""
    enabled = [g for g in gpus if (g.mig_mode or "").lower() == "enabled" or g.mig_devices]
    if not enabled:
        return ()
    slices = [f"{p}" for g in enabled for p in g.mig_devices]
    where = ", ".join(f"{g.index} ({g.name})" for g in enabled)
    return (
        f"MIG is enabled on GPU {where}"
        + (f", {len(slices)} MIG slice(s): {', '.join(slices[:6])}" if slices else "")
        + ": a process sees one slice, with a fraction of the GPU's memory and compute, and slices have no "
        "NVLink/P2P, so multi-GPU (NCCL) training and jobs sized for the whole GPU fail or crawl — "
        "`imagesmith validate` fails test_mig on this host; fix: ask for whole GPUs, or have the host admin "
        "disable MIG (nvidia-smi -i N -mig 0, then a GPU reset)",
    )


def host_warnings(host: Host, *, today: datetime.date | None = None) -> tuple[str, ...]:
    """Warnings about the host itself: MIG enabled (:func:`mig_warnings`), and compat's: its driver branch
    past end of life on *today*, and each distinct GPU model whose last driver branch caps its CUDA. GPUs
    compat cannot model are skipped here (assess says so).
    """
    from imagesmith import compat

    out = list(mig_warnings(host.gpus))
    out += compat.driver_warnings(host.driver, today=today)
    for hg in host.gpus:
        try:
            out += compat.gpu_warnings(_compat_gpu(hg, host.driver))
        except ConfigError:
            continue
    return tuple(dict.fromkeys(out))


def assess(image: ReleasedImage, host: Host, *, today: datetime.date | None = None) -> Assessment:
    """compat.verdict for every distinct GPU of the host; the image's level is the worst of them."""
    from imagesmith import compat

    levels: list[Level] = []
    blocking: list[str] = []
    warnings: list[str] = []
    needs: list[str] = []
    seen: set[str] = set()
    for hg in host.gpus:
        if hg.name in seen:
            continue
        seen.add(hg.name)
        try:
            gpu = _compat_gpu(hg, host.driver)
            v = compat.verdict(host.driver, gpu, image.torch, image.cuda, today=today, python=image.python)
        except ConfigError as exc:
            return Assessment(level=None, reasons=(f"cannot judge: {exc.message}",))
        if v.mode == "full":
            levels.append("full")
        elif v.mode == "minor-version":
            levels.append("minor")
        else:
            blocking += [r for r in v.blockers if r not in blocking] or ["; ".join(v.reasons)]
            if v.needs_driver is not None:
                needs.append(str(v.needs_driver))
        warnings += [n for n in v.notes if n not in warnings]
    if blocking or len(levels) < len(seen):
        return Assessment(
            level=None,
            reasons=tuple(blocking) or ("no compatible mode",),
            needs_driver=max(needs, key=_vkey) if needs else None,
        )
    level: Level = "minor" if "minor" in levels else "full"
    return Assessment(level=level, warnings=tuple(dict.fromkeys(warnings)))
