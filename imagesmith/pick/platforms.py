"""Platform → registry preference (data: ``imagesmith/data/platforms.toml``): detecting the platform, ranking
registries by region."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Final

from imagesmith import kinds
from imagesmith.errors import (
    ConfigError,
)
from imagesmith.index import (
    RegistryCopy,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib


#: packaged platform data, read through importlib.resources
PLATFORMS_RESOURCE: Final[tuple[str, str]] = ("imagesmith", "data/platforms.toml")
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
        p = out[row["name"]]
        unknown = [k for k in (*p.prefer, *p.avoid) if kinds.get(k) is None]
        if unknown:
            raise ConfigError(
                f"{where}: platform {p.name}: {', '.join(map(repr, unknown))} is no registry kind",
                hint=f"name kinds of imagesmith/data/registry_kinds.toml: {', '.join(kinds.kind_names())}",
            )
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
    r"cn|(?:cn|us|eu|ap|sa|me|af|ca|il|mx|na|la)-[a-z]+(?:-[a-z]+)?(?:-[0-9]+)?"
    r"|(?:africa|asia|australia|europe|me|northamerica|southamerica|us)-[a-z]+[0-9]+"
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
    r"(?:^|[.-])((?:cn|us|eu|ap|sa|me|af|ca|il|mx)-[a-z]+-?[0-9]*|[a-z]+-[a-z]+[0-9])(?:[.]|$)"
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
