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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from imagesmith import inputs
from imagesmith.errors import (
    ConfigError,
    EngineError,
    IndexTrustError,
    ManifestUnknownError,
    NoImageFitsError,
    NothingToDoError,
    ParseError,
    RegistryError,
)
from imagesmith.index import (
    RegistryCopy,
    ReleasedImage,
    ReleaseIndex,
    parse_index,
)
from imagesmith.refs import split_reference
from imagesmith.tags import INDEX_ARTIFACT_TAG

if TYPE_CHECKING:
    from imagesmith.credentials import CredentialChain
    from imagesmith.engine import ContainerEngine
    from imagesmith.indextrust import Trust, Trusted, TrustStore
    from imagesmith.nvsmi import SmiGpu
    from imagesmith.signing import PublicKey

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
#: how a level reads in text and JSON: compat's mode names ("minor-version", never "minor compatibility")
MODE: Final[dict[str, str]] = {"full": "full", "minor": "minor-version"}


# ------------------------------------------------------------------------------------------------------------
# inputs


@dataclass(frozen=True, kw_only=True)
class Host:
    driver: str
    gpus: tuple[SmiGpu, ...]  # as nvidia-smi names them (maybe truncated), compute capability if known
    source: str
    cuda_umd: str | None = None


def _cuda_of(value: str) -> str:
    """``cu121`` → ``12.1``, ``cu130`` → ``13.0``; anything else as given."""
    m = re.fullmatch(r"\s*cu(\d{2})(\d)\s*", value, re.IGNORECASE | re.ASCII)
    return f"{m.group(1)}.{m.group(2)}" if m else value


@dataclass(frozen=True, kw_only=True)
class Constraints:
    """User constraints; each is a version prefix: ``torch="2.1"`` accepts 2.1.0 and 2.1.2, not 2.10.0."""

    torch: str | None = None
    cuda: str | None = None
    python: str | None = None

    @classmethod
    def parse(cls, *, torch: str | None, cuda: str | None, python: str | None) -> Constraints:
        """From the flags: version prefixes (``2.1``, ``12.1``, ``3.10``); ``--cuda cu121`` means 12.1."""
        if torch is not None and "+" in torch:  # 2.4.1+cu121, as pip and compat write it
            version, _, local = torch.partition("+")
            tag = re.fullmatch(r"\s*cu(\d{2,3})\s*", local, re.IGNORECASE | re.ASCII)
            if tag is None:
                raise ConfigError(
                    f"--torch {torch!r}: {local!r} is not a CUDA wheel variant (cu121, cu130, …)",
                    hint="give --torch 2.4.1 and the variant as --cuda 12.1 (or --torch 2.4.1+cu121)",
                )
            as_cuda = f"cu{tag.group(1)}"
            if cuda is not None and cuda.strip().lower() != as_cuda and _cuda_of(cuda) != _cuda_of(as_cuda):
                raise ConfigError(
                    f"--torch {torch} says CUDA {_cuda_of(as_cuda)}, --cuda says {cuda}",
                    hint=f"give one of them: --torch {version} --cuda {cuda}, or --torch {torch}",
                )
            torch, cuda = version, cuda if cuda is not None else as_cuda
        if cuda is not None:
            cuda = _cuda_of(cuda)
        for flag, value, example in (
            ("--torch", torch, "2.1"),
            ("--cuda", cuda, "12.1"),
            ("--python", python, "3.10"),
        ):
            if value is not None and not re.fullmatch(r"\d+(\.\d+){0,2}", value.strip(), re.ASCII):
                raise ConfigError(
                    f"{flag} {value!r} is not a version", hint=f"give a version prefix, e.g. {flag} {example}"
                )
        return cls(
            torch=torch.strip() if torch else None,
            cuda=cuda.strip() if cuda else None,
            python=python.strip() if python else None,
        )

    def given(self) -> list[tuple[str, str, str]]:
        """(flag, value, the image field it filters) of every constraint given."""
        return [
            (flag, value, key)
            for flag, value, key in (
                ("--torch", self.torch, "torch"),
                ("--cuda", self.cuda, "cuda"),
                ("--python", self.python, "python"),
            )
            if value is not None
        ]

    def check_against(self, images: Sequence[ReleasedImage]) -> None:
        """NothingToDoError when the flags match no image of the index at all, naming the flag that matches
        nothing (or the combination) and listing what the index has; a host problem is :func:`choose`'s."""
        given = self.given()
        if not given or not images or any(self.rejects(img) is None for img in images):
            return
        names = {"torch": "torch", "cuda": "CUDA", "python": "Python"}
        for flag, value, key in given:
            have = sorted({getattr(img, key) for img in images}, key=_vkey)
            if any(version_matches(v, value) for v in have):
                continue
            hint = f"use one of these, e.g. {flag} {have[-1]}, or drop {flag}"
            if key == "cuda" and value.count(".") == 2:
                hint = (
                    f"the index records the wheel's CUDA as X.Y: --cuda {'.'.join(value.split('.')[:2])}"
                    f" (or one of the versions above), or drop --cuda"
                )
            raise NothingToDoError(
                f"{flag} {value} matches no image of the release index: its {names[key]} versions are "
                + ", ".join(have),
                hint=hint,
            )
        flags = " ".join(f"{flag} {value}" for flag, value, _ in given)
        combos = sorted(
            {(img.torch, img.cuda, img.python) for img in images},
            key=lambda t: (_vkey(t[0]), _vkey(t[1]), _vkey(t[2])),
        )
        raise NothingToDoError(
            f"{flags}: each matches some image, but no image matches them together; the index has "
            + ", ".join(f"torch {t} with CUDA {c}, Python {p}" for t, c, p in combos),
            hint="drop one of " + ", ".join(flag for flag, _, _ in given) + " or pick a combination above",
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


@dataclass(frozen=True, kw_only=True)
class Detected:
    platform: str
    signal: str  # what was seen, for the user: "/root/autodl-tmp exists", "RUNPOD_POD_ID is set"


def detect_platform(
    *,
    root: Path = Path("/"),
    env: dict[str, str] | None = None,
    path: Path | None = None,
) -> Detected | None:
    """The platform this machine runs on, from the documented signals of platforms.toml's ``[[detect]]``
    rows (a path, an environment variable, the DMI vendor/product); None when nothing matches. *root*
    prefixes every path read (tests)."""
    package, name = PLATFORMS_RESOURCE
    try:
        text = (
            path.read_text(encoding="utf-8")
            if path is not None
            else resources.files(package).joinpath(name).read_text(encoding="utf-8")
        )
        rows = tomllib.loads(text).get("detect", [])
    except (OSError, tomllib.TOMLDecodeError):
        return None  # load_platforms reports a broken file
    environ = os.environ if env is None else env
    for row in rows:
        kind, value = row.get("kind"), str(row.get("value", ""))
        if kind == "env" and environ.get(value):
            return Detected(platform=row["platform"], signal=f"${value} is set")
        if kind == "path" and (root / value.lstrip("/")).exists():
            return Detected(platform=row["platform"], signal=f"{value} exists")
        if kind == "dmi":
            file = root / "sys/class/dmi/id" / str(row.get("file", "sys_vendor"))
            try:
                seen = file.read_text(encoding="utf-8", errors="replace").strip()
            except OSError:
                continue
            if seen.startswith(value):
                return Detected(platform=row["platform"], signal=f"/sys/class/dmi/id/{file.name} is {seen!r}")
    return None


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
    if region is not None and not _CLOUD_REGION.fullmatch(region.strip().lower()):
        raise ConfigError(
            f"--region {region!r} is not a cloud region imagesmith knows",
            hint="give the region as the host's cloud names it: cn for mainland China, or "
            + ", ".join(KNOWN_REGION_FORMS)
            + "; or name the platform instead: --platform "
            + "|".join(sorted(platforms)),
        )
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


#: the region names of the clouds platforms.toml covers, by shape: Aliyun (cn-hangzhou, ap-southeast-1),
#: Tencent (ap-shanghai, na-siliconvalley, eu-frankfurt), Huawei (cn-north-4, la-south-2), AWS (us-east-1,
#: cn-northwest-1), GCP (us-central1, europe-west4, asia-east1); and "cn" alone
_CLOUD_REGION = re.compile(
    r"cn|(?:cn|us|eu|ap|sa|me|af|ca|il|mx|na|la)-[a-z]+(?:-[a-z]+)?(?:-\d+)?"
    r"|(?:africa|asia|australia|europe|me|northamerica|southamerica|us)-[a-z]+\d+"
)
KNOWN_REGION_FORMS: Final[tuple[str, ...]] = (
    "cn-hangzhou (Aliyun)",
    "ap-shanghai (Tencent)",
    "cn-north-4 (Huawei)",
    "us-east-1 (AWS)",
    "europe-west4 (GCP)",
)


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


def rank_registries(
    copies: Sequence[RegistryCopy], platform: Platform, region: str | None
) -> list[RegistryCopy]:
    """*copies* best first for *platform*/*region* (preferred kinds in order, same region first among
    equals, avoided kinds last, then the index's order)."""

    def score(c: RegistryCopy) -> tuple[int, int, int]:
        same_region = 0 if region and registry_region(c.host) == region.lower() else 1
        if c.kind in platform.prefer:
            rank = platform.prefer.index(c.kind)
        elif c.kind in platform.avoid:
            rank = 1000
        else:
            rank = 100
        return (rank, same_region, copies.index(c))

    return sorted(copies, key=score)


def choose_registry(
    copies: Sequence[RegistryCopy], platform: Platform, region: str | None
) -> tuple[RegistryCopy, str, list[str]]:
    """Best registry copy for *platform*/*region*: (copy, why, warnings)."""
    best = rank_registries(copies, platform, region)[0]
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


def host_from_text(text: str, *, source: str, driver: str | None = None) -> Host:
    """Any nvidia-smi output imagesmith.nvsmi reads (default table incl. the R610 header; --query-gpu csv;
    ``-L``, which shows no driver: then *driver*, the ``--driver`` flag, gives it)."""
    from imagesmith import compat, nvsmi

    report = nvsmi.parse(text, source)
    flag = compat.parse_driver(driver) if driver is not None else None
    if report.driver is None and flag is None:
        raise ParseError(
            f"{source}: this nvidia-smi output does not show the driver version ({report.format} format)",
            hint="add --driver (e.g. --driver 580.95.05), or save the plain `nvidia-smi` output or "
            "`nvidia-smi --query-gpu=index,name,memory.total,compute_cap,driver_version --format=csv`",
        )
    if report.driver is not None and flag is not None and flag != report.driver:
        raise ConfigError(
            f"--driver {driver} contradicts {source}, which shows driver {report.driver}",
            hint="drop --driver: the driver is read from the nvidia-smi output",
        )
    if not report.gpus:
        raise ParseError(f"{source}: nvidia-smi lists no GPU", hint="check the driver and the GPU (dmesg)")
    return Host(
        driver=str(report.driver if report.driver is not None else flag),
        gpus=report.gpus,
        source=source,
        cuda_umd=report.cuda_version,
    )


# ------------------------------------------------------------------------------------------------------------
# host input (thin I/O)


def read_smi_text(path: str | Path, flag: str = "--nvidia-smi") -> tuple[str, str]:
    """(text, source) of ``--nvidia-smi PATH`` (compat and pick); ``-`` reads standard input. A FIFO, a
    folder, a device, a UTF-16 capture and bytes that are not text are each one error naming the flag."""
    hint = "give the file the output was saved to (nvidia-smi > smi.txt), or - to read it from stdin"
    if str(path) == "-":
        data = sys.stdin.buffer.read(inputs.MAX_USER_FILE_BYTES + 1) if hasattr(sys.stdin, "buffer") else None
        if data is None:
            return sys.stdin.read(), "<stdin>"
        return inputs.decode_text(data, f"{flag} - (stdin)", hint=hint), "<stdin>"
    data = inputs.read_user_file(path, flag, hint=hint)
    return inputs.decode_text(data, f"{flag} {path}", hint=hint), str(path)


def read_host(
    *,
    nvidia_smi_file: str | Path | None = None,
    driver: str | None = None,
    gpus: Sequence[str] = (),
    run: bool = True,
) -> Host:
    """The host from ``--driver/--gpu``, a saved nvidia-smi output (``-`` = stdin; with ``--driver`` for
    ``nvidia-smi -L``), or by running nvidia-smi."""
    if nvidia_smi_file is not None:
        if gpus:
            raise ConfigError(
                "--gpu and --nvidia-smi both name the GPU",
                hint="drop --gpu: the GPUs are read from the nvidia-smi output",
            )
        text, source = read_smi_text(nvidia_smi_file)
        return host_from_text(text, source=source, driver=driver)
    if driver is not None or gpus:
        if driver is None or not gpus:
            raise ConfigError(
                "--driver and --gpu go together",
                hint="e.g. --driver 535.104.05 --gpu 'NVIDIA A100-SXM4-80GB' (or --nvidia-smi FILE, "
                "with --driver when FILE is `nvidia-smi -L` output)",
            )
        return host_from_flags(driver, gpus)
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
    """Where index copies and trust records live: ``$IMAGESMITH_CACHE``, else ``$XDG_CACHE_HOME/imagesmith``
    or ``~/.cache/imagesmith`` (:func:`imagesmith.config.cache_root`, as every other cache of imagesmith)."""
    from imagesmith.config import cache_root

    return cache_root()


def _cache_path(source: str) -> Path:
    return cache_dir() / "index" / (hashlib.sha256(source.encode()).hexdigest()[:24] + ".json")


def fetch_index(
    source: str,
    *,
    refresh: bool = False,
    ttl_s: int = DEFAULT_TTL_S,
    warn: Callable[[str], None] | None = None,
    insecure: bool = False,
    trust: Trust | None = None,
    note: Callable[[str], None] | None = None,
) -> ReleaseIndex:
    """Load the release index from a file, an ``https://`` URL (``http://`` with *insecure*) or
    ``oci://host/repo[:tag]`` (the artifact ``imagesmith release`` publishes). Remote sources are cached for
    *ttl_s* seconds under ~/.cache/imagesmith. When the source cannot be reached, an older cached copy is used
    **with a warning** (*warn*, default: a ``warning:`` line on stderr) — never with *refresh* (the user asked
    for the source's current index), and never when the source answers that the index is not there (HTTP
    404/410, MANIFEST_UNKNOWN): a withdrawn index is not silently replaced by an old one. Plain HTTP
    (``http://``, ``oci+http://``) only with *insecure* (:func:`check_index_scheme`).

    Verified by default (*trust*; :mod:`imagesmith.indextrust`): a DSSE signature over exactly these bytes
    (``INDEX.sig`` beside a file or URL, the signature layer of the artifact) by the user's key, else the key
    pinned for the source, else (first use) the key published beside it (``INDEX.pub``, the key layer), which
    is then pinned; a serial no lower than the newest seen for the source; an expiry in the future. A cached
    copy is checked again each time it is used (bytes and signature the same key verified before, by their
    sha256: the signature is not computed again). *note* gets one line naming the key trusted.
    ``Trust(verify=False)`` (``--no-verify``) skips all of it.
    """
    from imagesmith.indextrust import KEY_SUFFIX, MAX_KEY_BYTES, Trust, TrustStore

    trust = trust if trust is not None else Trust()
    say = note or (lambda _: None)
    scheme = re.match(r"([A-Za-z][A-Za-z0-9+.-]*)://", source)
    if scheme and not source.startswith(("http://", "https://", "oci://", "oci+http://")):
        raise ConfigError(
            f"--index {source[:200]}: {scheme.group(1)}:// is not a scheme pick reads",
            hint="give a file, an https:// URL or oci://HOST/REPOSITORY[:TAG] (http:// and oci+http:// only "
            "with --insecure)",
        )
    if not source.startswith(("http://", "https://", "oci://", "oci+http://")):
        from imagesmith.index import MAX_INDEX_BYTES, load_index

        path = Path(source).expanduser()
        try:
            small = path.is_file() and path.stat().st_size <= MAX_INDEX_BYTES
        except OSError:
            small = False
        signed = _read_or_none(path) if small and trust.verify else None
        if signed is None:  # not verified, or unreadable/too big: load_index reads it or says why not
            return load_index(path)
        store = TrustStore(_trust_dir(), "file:" + str(path.resolve()))
        sig, pub = path.with_name(path.name + ".sig"), path.with_name(path.name + KEY_SUFFIX)
        signature = _read_or_none(sig)
        index, trusted = _verify_index(
            signed,
            signature,
            lambda: _read_or_none(pub, MAX_KEY_BYTES),
            source=source,
            where=str(sig),
            published_where=str(pub),
            trust=trust,
            store=store,
        )
        store.record(index, signed, trusted, signature)
        say(trusted.line(source))
        return index
    check_index_scheme(source, insecure=insecure)
    cached = _cache_path(source)
    cached_sig = cached.with_suffix(".sig")
    store = TrustStore(_trust_dir(), _trust_key(source))

    def from_cache(label: str) -> ReleaseIndex:
        body = cached.read_bytes()
        if not trust.verify:
            return parse_index(body, source=label)
        index, trusted = _verify_index(
            body,
            _read_or_none(cached_sig),
            lambda: None,  # a cached copy is checked against the user's or the pinned key only
            source=label,
            where=str(cached_sig),
            published_where="(not read for a cached copy)",
            trust=trust,
            store=store,
        )
        say(trusted.line(source))
        return index

    if not refresh and cached.is_file() and time.time() - cached.stat().st_mtime < ttl_s:
        try:
            return from_cache(f"{source} (cached {cached})")
        except IndexTrustError:
            pass  # a copy cached unverified, or expired since: read the source again
    gone: ConfigError | RegistryError | None = None
    envelope: bytes | None = None
    published: bytes | None = None
    want_key = trust.verify and trust.key is None
    try:
        if source.startswith(("http://", "https://")):
            status, body = _download_http(source)
            if status in (404, 410):
                gone = ConfigError(f"--index {source}: HTTP {status}", hint="check the URL")
            elif status != 200:
                raise ConfigError(f"--index {source}: HTTP {status}", hint="check the URL")
            elif trust.verify:
                sig_status, sig_body = _download_http(source + ".sig")
                envelope = sig_body if sig_status == 200 else None
                if want_key:
                    key_status, key_body = _download_http(source + KEY_SUFFIX)
                    published = key_body if key_status == 200 else None
        else:
            body, envelope, published = _download_oci(source, with_key=want_key)
    except ManifestUnknownError as exc:
        gone = exc
    except (RegistryError, ConfigError) as exc:
        if isinstance(exc, IndexTrustError) or not cached.is_file():
            raise
        when = _cache_age(cached)
        if refresh:
            raise type(exc)(
                exc.message + f" (--refresh: the cached copy from {when} is not used)",
                hint=(exc.hint + "; or " if exc.hint else "")
                + "drop --refresh to use the cached copy until the source is back",
            ) from None
        (warn or _stderr_warning)(
            f"--index {source} cannot be reached ({exc.message}); using the cached copy from {when}: "
            "it may miss images released since (pass --refresh to fail instead)"
        )
        return from_cache(f"{source} (stale cache {cached})")
    if gone is not None:
        if not cached.is_file():
            raise type(gone)(
                f"--index {source}: {gone.message}",
                hint=gone.hint
                or f"check --index {source}: the repository and tag (`imagesmith release` publishes the tag "
                f"{INDEX_ARTIFACT_TAG})",
            )
        raise type(gone)(
            gone.message + f" (a cached copy from {_cache_age(cached)} exists, but the source says the index "
            "is not there)",
            hint=f"check --index {source} (`imagesmith release` publishes the tag {INDEX_ARTIFACT_TAG})",
        )
    fresh: Trusted | None = None
    if trust.verify:
        where = f"{source}.sig" if source.startswith(("http://", "https://")) else f"{source} signature layer"
        index, fresh = _verify_index(
            body,
            envelope,
            lambda: published,
            source=source,
            where=where,
            published_where=f"{source}{KEY_SUFFIX}"
            if source.startswith(("http://", "https://"))
            else f"{source} key layer",
            trust=trust,
            store=store,
        )
    else:
        index = parse_index(body, source=source)
    cached.parent.mkdir(parents=True, exist_ok=True)
    for path, data in ((cached_sig, envelope), (cached, body)):
        if data is None:
            path.unlink(missing_ok=True)
            continue
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_bytes(data)
        tmp.replace(path)
    if fresh is not None:
        store.record(index, body, fresh, envelope)
        say(fresh.line(source))
    return index


def _trust_dir() -> Path:
    return cache_dir() / "index"


def _trust_key(source: str) -> str:
    """What the pinned key and the newest serial are kept under: one index, however its source is spelled
    (``oci://h/r`` and ``oci+http://h/r:release-index`` are the same artifact)."""
    if source.startswith(("oci://", "oci+http://")):
        host, repo, tag, _ = parse_oci_source(source)
        return f"oci://{host.lower()}/{repo}:{tag}"
    return source


def _verify_index(
    body: bytes,
    envelope: bytes | None,
    published: Callable[[], bytes | None],
    *,
    source: str,
    where: str,
    published_where: str,
    trust: Trust,
    store: TrustStore,
) -> tuple[ReleaseIndex, Trusted]:
    """Signature (by the key :func:`~imagesmith.indextrust.choose_key` names), then the index, then its
    serial and expiry against what *store* saw: the checks of :mod:`imagesmith.indextrust`, in that order."""
    from imagesmith import indextrust

    trusted = indextrust.verified_before(body, envelope, trust, store)
    if trusted is None:
        offered = published() if trust.key is None else None
        trusted = indextrust.choose_key(trust, store, offered, source=source, published_where=published_where)
        assert trusted.key is not None
        indextrust.check_signature(body, envelope, [trusted.key], source=source, where=where)
    index = parse_index(body, source=source)
    indextrust.check_fresh(index, body, source=source, store=store, trust=trust)
    return index, trusted


def check_index_scheme(source: str, *, insecure: bool) -> None:
    """A remote index only over TLS: ``http://`` and ``oci+http://`` are refused unless *insecure* (``pick
    --insecure``: a registry or server on a network you trust, such as a local test registry)."""
    if insecure or not source.startswith(("http://", "oci+http://")):
        return
    secure = (
        "https://" + source.removeprefix("http://")
        if source.startswith("http://")
        else ("oci://" + source.removeprefix("oci+http://"))
    )
    raise ConfigError(
        f"--index {source}: plain HTTP (anyone on the path can change the index, and with it the digests "
        "you pull)",
        hint=f"use {secure}, or pass --insecure for a server on a network you trust (a local registry)",
    )


def allowed_copies(
    index: ReleaseIndex, image: ReleasedImage
) -> tuple[tuple[RegistryCopy, ...], tuple[str, ...]]:
    """The copies of *image* on a registry host the index's publisher lists (``registries``), and one reason
    for each copy skipped. An index without the list (written before it existed) keeps every copy."""
    if not index.registries:
        return image.registries, ()
    keep = tuple(c for c in image.registries if c.host in index.registries)
    skipped = tuple(
        f"{image.tag}: registry {c.name} ({c.host}) is not one the index's publisher lists "
        f"({', '.join(index.registries)}); skipped"
        for c in image.registries
        if c.host not in index.registries
    )
    return keep, skipped


def _read_or_none(path: Path, limit: int | None = None) -> bytes | None:
    """The bytes of a regular file, None when it cannot be read (a FIFO is never opened for reading: it would
    block); at most *limit* bytes (default: an index's :data:`~imagesmith.index.MAX_INDEX_BYTES`) plus one, so
    a huge file beside the index (``.sig``, ``.pub``) is never read into memory — what is cut off then fails
    its check."""
    from imagesmith.index import MAX_INDEX_BYTES

    if not inputs.is_regular_file(path):
        return None
    try:
        with path.open("rb") as f:
            return f.read((limit or MAX_INDEX_BYTES) + 1)
    except OSError:
        return None


def check_index_signature(
    body: bytes, envelope: bytes | None, keys: Sequence[PublicKey], *, source: str, where: str
) -> None:
    """Refuse the index unless *envelope* is a DSSE signature by one of *keys* over exactly *body*."""
    from imagesmith.indextrust import check_signature

    check_signature(body, envelope, list(keys), source=source, where=where)


def _stderr_warning(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _cache_age(path: Path) -> str:
    mtime = path.stat().st_mtime
    stamp = datetime.datetime.fromtimestamp(mtime, tz=datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    hours = max(0.0, time.time() - mtime) / 3600
    age = f"{hours:.0f} h" if hours < 48 else f"{hours / 24:.0f} days"
    return f"{stamp}, {age} old"


def _download_http(url: str) -> tuple[int, bytes]:
    """(status, body) of *url*; a body past :data:`~imagesmith.index.MAX_INDEX_BYTES` is refused unread."""
    import requests

    from imagesmith import http
    from imagesmith.index import MAX_INDEX_BYTES

    policy = replace(http.RELEASE_INDEX, max_bytes=MAX_INDEX_BYTES)
    try:
        with http.get(url, policy, stream=True) as resp:
            try:
                return resp.status_code, b"".join(http.capped(resp.iter_content(1 << 16), policy))
            except http.TooLarge:
                raise ConfigError(
                    f"--index {url}: more than {MAX_INDEX_BYTES >> 20} MiB (an index takes a few): not a "
                    "release index",
                    hint="point --index at the index imagesmith release writes or publishes",
                ) from None
    except requests.RequestException as exc:
        raise ConfigError(
            f"--index {url}: cannot download ({exc.__class__.__name__}: {exc})",
            hint="check the URL / network, or pass a local file",
        ) from None


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


def _download_oci(source: str, *, with_key: bool = False) -> tuple[bytes, bytes | None, bytes | None]:
    """(index JSON, its signature envelope or None, the published key or None) of the artifact."""
    from imagesmith.index import read_published_index
    from imagesmith.refs import Registry
    from imagesmith.registry import client_for

    host, repo, tag, insecure = parse_oci_source(source)
    # one retry, quickly: a refused connection is not transient, and a cached copy may answer instead
    from imagesmith.http import INDEX_ARTIFACT as quick

    target = Registry(name=host, host=host, repository=repo, insecure=insecure)
    client = client_for(target, attempts=quick.attempts, backoff=quick.backoff, timeout=quick.read_timeout)
    try:
        return read_published_index(client, repo, tag, with_key=with_key)
    except ManifestUnknownError:
        raise
    except RegistryError as exc:
        if exc.hint and exc.fault != "unreachable":
            raise  # denied, not found, …: the registry client's own fix applies
        raise RegistryError(
            f"--index {source}: {exc.message}",
            hint=f"check that {host} is up and reachable from this host (network, proxy, firewall"
            + ("" if insecure else "; a plain-HTTP registry needs oci+http://")
            + "), or pass the index as a file or http(s) URL",
        ) from None


# ------------------------------------------------------------------------------------------------------------
# --pull (through imagesmith.engine, the only module that talks to a Docker engine)


def pull_image(
    pick: Pick,
    *,
    echo: Callable[[str], None],
    engine: ContainerEngine | None = None,
    chain_for: Callable[[RegistryCopy], CredentialChain] | None = None,
) -> str:
    """Pull the picked image by its released digest (``repo@sha256:…``, never by tag) and check that the
    engine now holds exactly that digest.

    Each registry of the image (same digest) is tried in turn, the picked one first, with its credential
    chain (environment, docker config, the kind's token command: ECR, ACR); a registry that cannot be pulled
    from, or serves another digest under the tag, is named and the next one tried. RegistryError when none
    works (each one's reason in the message).
    """
    from imagesmith.credentials import credential_chain
    from imagesmith.errors import ImagesmithError

    if engine is None:
        from imagesmith.engine import Engine

        engine = Engine()
    chains = chain_for or (lambda c: credential_chain(c.host, c.kind, name=c.name))
    copies = [pick.registry, *pick.alternatives]
    failures: list[tuple[RegistryCopy, ImagesmithError]] = []
    for n, copy in enumerate(copies):
        try:
            return _pull_one(copy, engine, chains(copy), echo)
        except (RegistryError, EngineError, ConfigError) as exc:
            failures.append((copy, exc))
            rest = copies[n + 1 :]
            echo(
                f"pull from {copy.name} ({copy.host}) failed: {exc.message}"
                + (
                    f"; trying {rest[0].name} ({rest[0].host}), same digest"
                    if rest
                    else " — no other registry holds this image"
                )
            )
    if len(failures) == 1:
        only = failures[0][1]
        raise RegistryError(only.message, hint=only.hint or "check the registry and the network") from None
    raise RegistryError(
        f"--pull: no registry holding {pick.image.tag} ({pick.image.digest[:19]}…) could be pulled from: "
        + "; ".join(f"{c.name} ({c.host}): {e.message}" for c, e in failures),
        hint="; ".join(dict.fromkeys(f"{c.name}: {e.hint}" for c, e in failures if e.hint))
        or "check the network and the registries' credentials",
    )


def _pull_one(copy: RegistryCopy, engine: ContainerEngine, chain: CredentialChain, echo: Any) -> str:
    """Pull ``repo@digest`` (never the tag: a moved tag must not reach this host) and check that the engine
    now holds that digest."""
    reference = copy.pinned
    creds = chain.resolve()
    echo(f"pulling {reference} (released as {copy.reference})" + (f" as {creds.username}" if creds else ""))
    started = time.monotonic()
    try:
        image_id = engine.pull(reference, credentials=creds)
    except EngineError as exc:
        # what the engine said (its own words, not the reference pulled: a digest may hold "401")
        fresh = chain.refresh(creds) if creds is not None and _refused(exc.said or "") else None
        if fresh is None:
            raise
        image_id = engine.pull(reference, credentials=fresh)  # an expired token (ECR 12 h, ACR 3 h)
    info = engine.inspect(reference) or {}
    digests = [d for d in info.get("RepoDigests", []) if isinstance(d, str)]
    if reference not in digests:
        raise RegistryError(
            f"registry {copy.name}: the engine pulled {reference} but holds "
            f"{', '.join(digests) or 'an unknown digest'}, not the released {copy.digest}",
            hint="the registry served other content for the digest: pull from another registry of the "
            "image, or report it to the registry's operator",
        )
    echo(f"pulled {reference} as {image_id[:19]} in {time.monotonic() - started:.0f}s")
    return str(image_id)


def _refused(message: str) -> bool:
    low = message.lower()
    return any(w in low for w in ("unauthorized", "denied", "authentication required", "401", "403"))


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
