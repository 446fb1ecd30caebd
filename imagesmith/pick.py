"""``imagesmith pick``: choose the released image for a GPU host (a fresh rental), and say how to run it.

Pure core: :func:`choose` takes a :class:`~imagesmith.index.ReleaseIndex`, a :class:`Host` and the user's
:class:`Constraints` and returns a :class:`Pick` (or raises ``NoImageFitsError`` saying why and which driver
would be needed). Compatibility verdicts come from :mod:`imagesmith.compat` (driver ↔ CUDA, GPU arch ↔ the
wheel's arch list); this module only ranks them. Thin I/O around it: :func:`read_host` (nvidia-smi, a saved
output file, or ``--driver/--gpu``) and :func:`fetch_index` (file, URL or registry artifact, cached under
~/.cache/imagesmith).

Ranking rule (documented in docs/release.md):

1. an image that runs with the *full* CUDA feature set on this driver beats one that runs only through CUDA
   minor-version compatibility (MVC: no JIT of newer PTX, limited features), whatever their torch versions:
   a 535 driver gets the cu121 image over a newer cu124 one (12.4 needs 550.54.14 for full support) and the
   user is told which driver would unlock the newer one;
2. then the newest torch, then the newest CUDA, then the newest Python, then the tag (for a stable order).

Nothing here imports a heavy module at import time: the path with a cached index stays well under a second.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from imagesmith.errors import ConfigError, NoImageFitsError, ParseError, RegistryError
from imagesmith.index import (
    RegistryCopy,
    ReleasedImage,
    ReleaseIndex,
    parse_index,
    read_index_artifact,
)
from imagesmith.refs import split_reference
from imagesmith.tags import INDEX_ARTIFACT_TAG

if TYPE_CHECKING:
    from imagesmith.nvsmi import SmiGpu

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib

#: packaged platform data, read through importlib.resources
PLATFORMS_RESOURCE: Final[tuple[str, str]] = ("imagesmith", "data/platforms.toml")
#: NGC-style ulimits for PyTorch containers: pinned memory unlimited, 64 MiB stacks.
ULIMITS: Final[tuple[str, ...]] = ("--ulimit", "memlock=-1", "--ulimit", "stack=67108864")
DEFAULT_TTL_S: Final[int] = 3600

Level = Literal["full", "minor"]


# ------------------------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True, kw_only=True)
class Host:
    driver: str
    gpus: tuple[SmiGpu, ...]  # as nvidia-smi names them (maybe truncated), compute capability if known
    source: str
    cuda_umd: str | None = None


@dataclass(frozen=True, kw_only=True)
class Constraints:
    """User constraints; each is a version prefix: ``torch="2.1"`` accepts 2.1.0 and 2.1.2, not 2.10.0."""

    torch: str | None = None
    cuda: str | None = None
    python: str | None = None

    @classmethod
    def parse(cls, *, torch: str | None, cuda: str | None, python: str | None) -> Constraints:
        """From the flags: version prefixes (``2.1``, ``12.1``, ``3.10``); ``--cuda cu121`` means 12.1."""
        if cuda is not None:
            m = re.fullmatch(r"\s*cu(\d{2})(\d)\s*", cuda, re.IGNORECASE)
            cuda = f"{m.group(1)}.{m.group(2)}" if m else cuda
        for flag, value, example in (
            ("--torch", torch, "2.1"),
            ("--cuda", cuda, "12.1"),
            ("--python", python, "3.10"),
        ):
            if value is not None and not re.fullmatch(r"\d+(\.\d+){0,2}", value.strip()):
                raise ConfigError(
                    f"{flag} {value!r} is not a version", hint=f"give a version prefix, e.g. {flag} {example}"
                )
        return cls(
            torch=torch.strip() if torch else None,
            cuda=cuda.strip() if cuda else None,
            python=python.strip() if python else None,
        )

    def rejects(self, image: ReleasedImage) -> str | None:
        for what, want, have in (
            ("torch", self.torch, image.torch),
            ("CUDA", self.cuda, image.cuda),
            ("Python", self.python, image.python),
        ):
            if want is not None and not version_matches(have, want):
                return f"{what} {have} does not match --{what.lower()} {want}"
        return None


def version_matches(version: str, prefix: str) -> bool:
    """``2.1.2`` matches ``2.1`` and ``2.1.2``; ``2.10.0`` does not match ``2.1``."""
    have = version.split("+", 1)[0].split(".")
    want = prefix.strip().split(".")
    return have[: len(want)] == want


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", version.split("+", 1)[0]))


# ------------------------------------------------------------------------------------------------------------
# platform → registry preference (data: imagesmith/data/platforms.toml)


@dataclass(frozen=True, kw_only=True)
class Platform:
    name: str
    region: str
    prefer: tuple[str, ...]
    avoid: tuple[str, ...]
    rationale: str
    source: str
    verified: bool
    note: str = ""


def load_platforms(path: Path | None = None) -> dict[str, Platform]:
    """The platform table: *path* when given, else the packaged ``imagesmith/data/platforms.toml``."""
    package, name = PLATFORMS_RESOURCE
    where = str(path) if path is not None else f"{package}/{name}"
    try:
        text = (
            path.read_text(encoding="utf-8")
            if path is not None
            else resources.files(package).joinpath(name).read_text(encoding="utf-8")
        )
        data = tomllib.loads(text)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"{where}: cannot read platform data ({exc})", hint="reinstall imagesmith"
        ) from None
    out: dict[str, Platform] = {}
    for i, row in enumerate(data.get("platform", [])):
        try:
            out[row["name"]] = Platform(
                name=row["name"],
                region=row["region"],
                prefer=tuple(row["prefer"]),
                avoid=tuple(row.get("avoid", ())),
                rationale=row["rationale"],
                source=row["source"],
                verified=bool(row["verified"]),
                note=row.get("note", ""),
            )
        except (KeyError, TypeError) as exc:
            raise ConfigError(
                f"{path}: platform[{i}]: missing or bad field {exc}", hint="fix the data row"
            ) from None
    return out


def platform_for(platforms: dict[str, Platform], name: str | None, region: str | None) -> Platform:
    if name is not None:
        key = name.strip().lower()
        if key not in platforms:
            raise ConfigError(
                f"--platform {name!r} is not a known platform",
                hint="use one of: " + ", ".join(sorted(platforms)) + " (or --region)",
            )
        return platforms[key]
    generic = platforms["generic"]
    if region is not None and _is_china(region):
        china = platforms["aliyun"]
        return Platform(
            name=f"region {region}",
            region="cn",
            prefer=china.prefer,
            avoid=china.avoid,
            rationale=china.rationale,
            source=china.source,
            verified=china.verified,
        )
    return generic


def _is_china(region: str) -> bool:
    r = region.strip().lower()
    return r == "cn" or r.startswith(
        ("cn-", "cn_", "ap-beijing", "ap-shanghai", "ap-guangzhou", "ap-chengdu")
    )


_REGION_IN_HOST = re.compile(
    r"(?:^|[.-])((?:cn|us|eu|ap|sa|me|af|ca|il|mx)-[a-z]+-?\d*|[a-z]+-[a-z]+\d)(?:[.]|$)"
)


def registry_region(host: str) -> str | None:
    """The cloud region a registry host names (``registry.cn-hangzhou.aliyuncs.com`` → cn-hangzhou)."""
    m = _REGION_IN_HOST.search(host.lower())
    return m.group(1) if m else None


def choose_registry(
    copies: Sequence[RegistryCopy], platform: Platform, region: str | None
) -> tuple[RegistryCopy, str, list[str]]:
    """Best registry copy for *platform*/*region*: (copy, why, warnings)."""

    def score(c: RegistryCopy) -> tuple[int, int, int]:
        same_region = 0 if region and registry_region(c.host) == region.lower() else 1
        if c.kind in platform.prefer:
            rank = platform.prefer.index(c.kind)
        elif c.kind in platform.avoid:
            rank = 1000
        else:
            rank = 100
        return (rank, same_region, copies.index(c))

    best = min(copies, key=score)
    warnings: list[str] = []
    if best.kind in platform.avoid:
        warnings.append(
            f"only registries that are a poor fit for {platform.name} hold this image "
            f"({best.name}, {best.kind}): {platform.rationale}"
        )
    if best.kind in platform.prefer:
        why = f"{best.name} ({best.kind}) is preferred on {platform.name}: {platform.rationale}"
    else:
        kinds = ", ".join(platform.prefer)
        why = f"{best.name} ({best.kind}): no registry of a preferred kind ({kinds}) holds it"
    if region and registry_region(best.host) == region.lower():
        why += f"; same region {region}"
    if platform.note:
        warnings.append(platform.note)
    return best, why, warnings


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

    @property
    def reference(self) -> str:
        """``host/repo:tag@sha256:…``: readable, and pins exactly the validated digest."""
        return f"{self.registry.reference}@{self.registry.digest}"

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
            "digest": img.digest,
            "compatibility": self.level,
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
                {"gpu": v.gpu, "count": v.count, "driver": v.driver, "date": v.date} for v in img.validated_on
            ],
            "pull": shlex.join(self.pull_argv()),
            "run": shlex.join(self.run_argv()),
            "warnings": list(self.warnings),
            "host_warnings": list(self.host_warnings),
            "rejected": [{"tag": r.tag, "reason": r.reason} for r in self.rejected],
        }


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
    arch = {"x86_64": "linux/amd64", "amd64": "linux/amd64", "aarch64": "linux/arm64", "arm64": "linux/arm64"}
    want_platform = arch.get(machine, f"linux/{machine}")
    fits: list[tuple[ReleasedImage, Assessment]] = []
    rejected: list[Rejected] = []
    driver_needs: list[str] = []
    for image in index.images:
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
    if not fits:
        message, fix = _nothing_fits(host, constraints, rejected, driver_needs)
        message += "".join(f"\nwarning: {w}" for w in host_warns)
        raise NoImageFitsError(message, hint=fix)
    fits.sort(key=lambda pair: _rank(pair[0], pair[1].level or "minor"))
    best, verdict = fits[0]
    assert verdict.level is not None
    warnings = list(verdict.warnings)
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
            Rejected(tag=img.tag, reason=f"ranked lower ({v.level} compatibility, torch {img.torch})")
        )
    copy, why, reg_warnings = choose_registry(best.registries, platform, region)
    return Pick(
        image=best,
        level=verdict.level,
        registry=copy,
        registry_why=why,
        host=host,
        warnings=tuple(warnings + list(host_warns) + reg_warnings),
        rejected=tuple(rejected),
        runner_up=tuple(img for img, _ in fits[1:]),
        host_warnings=host_warns,
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
    if any((constraints.torch, constraints.cuda, constraints.python)):
        fixes.append("or relax --torch/--cuda/--python")
    if not fixes:
        fixes.append(
            "no image of this index targets these GPUs: build a matrix for them, or try another --index"
        )
    return "\n".join(lines), "; ".join(fixes)


# ------------------------------------------------------------------------------------------------------------
# verdicts: imagesmith.compat decides, pick only condenses its reasons into one line per image

# compat.Verdict.blockers are the reasons that stop an image; needs_driver the driver that would unblock it


def _compat_gpu(g: SmiGpu) -> Any:
    """compat's model for a host GPU; an unknown model with a known compute capability: ad hoc."""
    from imagesmith import compat

    try:
        return compat.gpu(g.name, memory_mib=g.memory_mib)
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


def host_warnings(host: Host, *, today: datetime.date | None = None) -> tuple[str, ...]:
    """compat's warnings about the host itself: its driver branch past end of life on *today*, and each
    distinct GPU model whose last driver branch caps its CUDA. GPUs compat cannot model are skipped here
    (assess says so).
    """
    from imagesmith import compat

    out = list(compat.driver_warnings(host.driver, today=today))
    for hg in host.gpus:
        try:
            out += compat.gpu_warnings(_compat_gpu(hg))
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
            gpu = _compat_gpu(hg)
            v = compat.verdict(host.driver, gpu, image.torch, image.cuda, today=today)
        except ConfigError as exc:
            return Assessment(level=None, reasons=(f"cannot judge: {exc.message}",))
        if v.mode == "full":
            levels.append("full")
        elif v.mode == "minor-version":
            levels.append("minor")
            warnings += [r for r in v.reasons if r.startswith("note:")]
        else:
            blocking += [r for r in v.blockers if r not in blocking] or ["; ".join(v.reasons)]
            if v.needs_driver is not None:
                needs.append(str(v.needs_driver))
        warnings += [r for r in v.reasons if r.startswith("note:") and r not in warnings]
    if blocking or len(levels) < len(seen):
        return Assessment(
            level=None,
            reasons=tuple(blocking) or ("no compatible mode",),
            needs_driver=max(needs, key=_vkey) if needs else None,
        )
    level: Level = "minor" if "minor" in levels else "full"
    return Assessment(level=level, warnings=tuple(dict.fromkeys(warnings)))


def host_from_flags(driver: str, gpus: Sequence[str]) -> Host:
    """``--driver 535.104.05 --gpu h100 --gpu 'NVIDIA A100-SXM...'`` (names or keys compat knows)."""
    from imagesmith import compat
    from imagesmith.nvsmi import SmiGpu

    drv = compat.parse_driver(driver)
    found = []
    for i, name in enumerate(gpus):
        g = compat.gpu(name)
        found.append(SmiGpu(index=i, name=g.name, compute_cap=g.cc, memory_mib=g.memory_mib or None))
    return Host(driver=str(drv), gpus=tuple(found), source="--driver/--gpu")


def host_from_text(text: str, *, source: str) -> Host:
    """Any nvidia-smi output imagesmith.nvsmi reads (default table incl. the R610 header; --query-gpu csv)."""
    from imagesmith import nvsmi

    report = nvsmi.parse(text, source)
    if report.driver is None:
        raise ParseError(
            f"{source}: this nvidia-smi output does not show the driver version ({report.format} format)",
            hint="save the plain `nvidia-smi` output or `nvidia-smi --query-gpu=index,name,memory.total,"
            "compute_cap,driver_version --format=csv`, or pass --driver",
        )
    if not report.gpus:
        raise ParseError(f"{source}: nvidia-smi lists no GPU", hint="check the driver and the GPU (dmesg)")
    return Host(
        driver=str(report.driver),
        gpus=report.gpus,
        source=source,
        cuda_umd=report.cuda_version,
    )


# ------------------------------------------------------------------------------------------------------------
# host input (thin I/O)


def read_host(
    *,
    nvidia_smi_file: Path | None = None,
    driver: str | None = None,
    gpus: Sequence[str] = (),
    run: bool = True,
) -> Host:
    """The host from ``--driver/--gpu``, a saved nvidia-smi output, or by running nvidia-smi."""
    if driver is not None or gpus:
        if driver is None or not gpus:
            raise ConfigError(
                "--driver and --gpu go together",
                hint="e.g. --driver 535.104.05 --gpu 'NVIDIA A100-SXM4-80GB' (or --nvidia-smi FILE)",
            )
        return host_from_flags(driver, gpus)
    if nvidia_smi_file is not None:
        try:
            text = nvidia_smi_file.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ConfigError(
                f"--nvidia-smi {nvidia_smi_file}: cannot read ({exc.strerror})", hint="check the path"
            ) from None
        return host_from_text(text, source=str(nvidia_smi_file))
    if not run:
        raise ConfigError("no host given", hint="pass --nvidia-smi FILE or --driver/--gpu")
    query = ["nvidia-smi", "--query-gpu=index,name,memory.total,compute_cap,driver_version", "--format=csv"]
    try:
        done = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        raise ConfigError(
            "nvidia-smi not found on this machine",
            hint="run pick on the GPU host, or pass --nvidia-smi FILE (its saved output) or --driver/--gpu",
        ) from None
    except subprocess.TimeoutExpired:
        raise ParseError("nvidia-smi did not answer within 30 s", hint="check the driver (dmesg)") from None
    if done.returncode != 0:
        raise ParseError(
            f"nvidia-smi failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[:300]}",
            hint="is the NVIDIA driver loaded? (nvidia-smi must work before an image can be picked)",
        )
    return host_from_text(done.stdout, source="nvidia-smi")


# ------------------------------------------------------------------------------------------------------------
# index input (thin I/O, cached)


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "imagesmith"


def _cache_path(source: str) -> Path:
    return cache_dir() / "index" / (hashlib.sha256(source.encode()).hexdigest()[:24] + ".json")


def fetch_index(source: str, *, refresh: bool = False, ttl_s: int = DEFAULT_TTL_S) -> ReleaseIndex:
    """Load the release index from a file, an ``http(s)://`` URL or ``oci://host/repo[:tag]`` (the
    artifact ``imagesmith release`` publishes). Remote sources are cached for *ttl_s* seconds under
    ~/.cache/imagesmith; a stale cache is used only when the source is unreachable.
    """
    if not source.startswith(("http://", "https://", "oci://", "oci+http://")):
        from imagesmith.index import load_index

        return load_index(Path(source).expanduser())
    cached = _cache_path(source)
    if not refresh and cached.is_file() and time.time() - cached.stat().st_mtime < ttl_s:
        return parse_index(cached.read_bytes(), source=f"{source} (cached {cached})")
    try:
        body = _download_http(source) if source.startswith(("http://", "https://")) else _download_oci(source)
    except (RegistryError, ConfigError):
        if cached.is_file():
            return parse_index(cached.read_bytes(), source=f"{source} (stale cache {cached})")
        raise
    index = parse_index(body, source=source)
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_name(f".{cached.name}.{os.getpid()}")
    tmp.write_bytes(body)
    tmp.replace(cached)
    return index


def _download_http(url: str) -> bytes:
    import requests

    try:
        resp = requests.get(url, timeout=30)
    except requests.RequestException as exc:
        raise ConfigError(
            f"--index {url}: cannot download ({exc.__class__.__name__}: {exc})",
            hint="check the URL / network, or pass a local file",
        ) from None
    if resp.status_code != 200:
        raise ConfigError(f"--index {url}: HTTP {resp.status_code}", hint="check the URL")
    return resp.content


def parse_oci_source(source: str) -> tuple[str, str, str, bool]:
    """``oci://host[:port]/repo/path[:tag]`` → (host, repo, tag, insecure); tag default ``release-index``.
    ``oci+http://`` speaks plain HTTP (a local test registry)."""
    insecure = source.startswith("oci+http://")
    rest = source.split("://", 1)[1]
    if "/" not in rest:
        raise ConfigError(
            f"--index {source}: expected oci://HOST/REPOSITORY[:TAG]",
            hint=f"e.g. oci://ghcr.io/acme/torch:{INDEX_ARTIFACT_TAG}",
        )
    host, path = rest.split("/", 1)
    repo, tag, _ = split_reference(path)
    return host, repo, tag or INDEX_ARTIFACT_TAG, insecure


def _download_oci(source: str) -> bytes:
    from imagesmith.registry import RegistryClient

    host, repo, tag, insecure = parse_oci_source(source)
    client = RegistryClient(host, insecure=insecure)
    return read_index_artifact(client, repo, tag)


# ------------------------------------------------------------------------------------------------------------
# --pull (through imagesmith.engine, the only module that talks to a Docker engine)


def pull_image(pick: Pick, *, echo: Any) -> str:
    """Pull the picked tag and check that the engine now holds exactly the released digest."""
    from imagesmith.engine import Engine

    reference = pick.registry.reference
    engine = Engine()
    echo(f"pulling {reference} ({pick.image.digest[:19]}…)")
    started = time.monotonic()
    image_id = engine.pull(reference)
    info = engine.inspect(reference) or {}
    repo = reference.rsplit(":", 1)[0]
    digests = [d for d in info.get("RepoDigests", []) if isinstance(d, str)]
    if f"{repo}@{pick.registry.digest}" not in digests:
        raise RegistryError(
            f"registry {pick.registry.name}: {reference} now points at "
            f"{', '.join(digests) or 'an unknown digest'}, not the released {pick.registry.digest}",
            hint="the tag was moved after the release; pull by digest: docker pull " + pick.reference,
        )
    echo(f"pulled {reference} as {image_id[:19]} in {time.monotonic() - started:.0f}s")
    return str(image_id)


# ------------------------------------------------------------------------------------------------------------
# --flavor: the released images of one flavor; the interactive flavor's access (platforms.toml)


def image_flavor(image: ReleasedImage) -> str:
    """The flavor of a released image, from its cell id (``<torch>-<variant>-py<X.Y>-<flavor>-<os>``)."""
    rest = image.cell.rsplit("-py", 1)[-1].split("-")
    return rest[1] if len(rest) > 2 else ""


@dataclass(frozen=True, kw_only=True)
class Access:
    """How a rental reaches an interactive image on a platform: its persistent folder and the ports the
    image's start command listens on (SSH_PORT, JUPYTER_PORT, TENSORBOARD_PORT), with the source of those
    facts."""

    platform: str
    workspace: str
    ssh_port: int
    jupyter_port: int
    tensorboard_port: int
    source: str
    verified: bool
    note: str = ""

    def variables(self) -> list[tuple[str, str]]:
        """(variable, what to set it to) for `docker run -e`: the secrets come from the user's shell."""
        out = [
            ("PUBLIC_KEY", 'your SSH public key, e.g. export PUBLIC_KEY="$(cat ~/.ssh/id_ed25519.pub)"'),
            ("JUPYTER_PASSWORD", "JupyterLab's token, e.g. export JUPYTER_PASSWORD=$(openssl rand -hex 16)"),
        ]
        defaults: list[tuple[str, str | int, str | int]] = [
            ("IMAGESMITH_WORKSPACE", self.workspace, "/workspace"),
            ("SSH_PORT", self.ssh_port, 22),
            ("JUPYTER_PORT", self.jupyter_port, 8888),
            ("TENSORBOARD_PORT", self.tensorboard_port, 6006),
        ]
        out += [(name, str(value)) for name, value, default in defaults if value != default]
        return out

    def run_argv(self, pick: Pick) -> list[str]:
        """`docker run` on a plain Docker host: detached, the ports published (SSH on host port 2222: the
        host's own sshd holds 22), a named volume as the workspace, the secrets passed from the shell."""
        ports = [
            f"2222:{self.ssh_port}",
            f"{self.jupyter_port}:{self.jupyter_port}",
            f"{self.tensorboard_port}:{self.tensorboard_port}",
        ]
        argv = ["docker", "run", "-d", *run_flags(pick.image)]
        for p in ports:
            argv += ["-p", p]
        argv += ["-v", f"imagesmith-workspace:{self.workspace}"]
        for name, value in self.variables():
            argv += ["-e", name if name in ("PUBLIC_KEY", "JUPYTER_PASSWORD") else f"{name}={value}"]
        argv += ["-e", f"TENSORBOARD_LOGDIR={self.workspace}/runs", pick.reference]
        return argv

    def lines(self, pick: Pick) -> list[str]:
        where = f"{self.platform}: " if self.platform != "generic" else ""
        lines = [
            f"interactive ({where}workspace {self.workspace}; ports {self.ssh_port} SSH, {self.jupyter_port} "
            f"JupyterLab, {self.tensorboard_port} TensorBoard){'' if self.verified else ' [unverified]'}:",
        ]
        lines += [f"  set {name}: {what}" for name, what in self.variables()]
        lines += [
            "  TENSORBOARD_LOGDIR starts TensorBoard over that folder (no login: publish its port with care)"
        ]
        if self.note:
            lines.append(f"  note: {self.note}")
        lines += [
            f"  source: {self.source}",
            "",
            shlex.join(self.run_argv(pick)),
            "ssh -p 2222 root@HOST    # JupyterLab: http://HOST:"
            f"{self.jupyter_port}/lab?token=$JUPYTER_PASSWORD",
        ]
        return lines


def interactive_access(platform: str | None, path: Path | None = None) -> Access:
    """The interactive access of *platform* (its ``interactive`` table in platforms.toml), else generic's."""
    package, name = PLATFORMS_RESOURCE
    text = (
        path.read_text(encoding="utf-8")
        if path is not None
        else resources.files(package).joinpath(name).read_text(encoding="utf-8")
    )
    rows = {row["name"]: row for row in tomllib.loads(text).get("platform", [])}
    key = (platform or "generic").strip().lower()
    row = rows.get(key) if key in rows and "interactive" in rows[key] else rows["generic"]
    assert row is not None
    data = row["interactive"]
    try:
        return Access(
            platform=str(row["name"]),
            workspace=str(data["workspace"]),
            ssh_port=int(data["ssh_port"]),
            jupyter_port=int(data["jupyter_port"]),
            tensorboard_port=int(data["tensorboard_port"]),
            source=str(data["source"]),
            verified=bool(data["verified"]),
            note=str(data.get("note", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"platforms.toml: platform {row['name']}: interactive: missing or bad field {exc}",
            hint="fix the data row",
        ) from None
