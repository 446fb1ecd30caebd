"""Driver versions, CUDA toolkit ↔ driver (toolkit drivers, minor-version floors, branches) and the driver
branch lifecycle."""

from __future__ import annotations

import datetime
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from imagesmith import settings
from imagesmith.compat.tables import (
    TABLES,
    DataError,
    _did_you_mean,
    _field,
    _rows,
)
from imagesmith.errors import ConfigError

# ------------------------------------------------------------------------------------------------------------
# driver versions

_DRIVER_RE = re.compile(r"^\s*([0-9]{3,4})\.([0-9]{1,3})(?:\.([0-9]{1,3}))?\s*$", re.ASCII)


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class DriverVersion:
    """An NVIDIA driver version: ``535.104.05`` or ``570.26``. Ordered numerically; ``str()`` gives the input
    form.
    """

    major: int
    minor: int
    patch: int | None = None
    text: str = ""

    @classmethod
    def parse(cls, text: str) -> DriverVersion:
        """Parse ``535.104.05`` / ``570.26``. Raises :class:`ConfigError` on anything else."""
        match = _DRIVER_RE.match(text) if isinstance(text, str) else None
        if match is None:
            raise ConfigError(
                f"{text!r} is not an NVIDIA driver version",
                hint="give it the way nvidia-smi prints it, e.g. 535.104.05 or 570.26 "
                "(nvidia-smi --query-gpu=driver_version --format=csv,noheader)",
            )
        major, minor, patch = match.groups()
        return cls(int(major), int(minor), int(patch) if patch is not None else None, text.strip())

    @property
    def branch(self) -> int:
        """The driver branch, e.g. 535 for 535.104.05."""
        return self.major

    def _key(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch or 0)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return self._key() == other._key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, DriverVersion):
            return NotImplemented
        return self._key() < other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __str__(self) -> str:
        if self.text:
            return self.text
        if self.patch is None:
            return f"{self.major}.{self.minor:02d}"
        return f"{self.major}.{self.minor:02d}.{self.patch:02d}"


def parse_driver(text: str) -> DriverVersion:
    """Parse an NVIDIA driver version; :class:`ConfigError` with a clear message on junk."""
    return DriverVersion.parse(text)


def _as_driver(value: DriverVersion | str) -> DriverVersion:
    return value if isinstance(value, DriverVersion) else parse_driver(value)


# ------------------------------------------------------------------------------------------------------------
# CUDA toolkit ↔ driver

_CUDA_XY_RE = re.compile(r"^([0-9]{2})\.([0-9]{1,2})(?:\.([0-9]{1,2}))?$")
_CUDA_TAG_RE = re.compile(r"^cu([0-9]{2})([0-9])$", re.IGNORECASE)


@dataclass(frozen=True, kw_only=True)
class CudaRelease:
    """One CUDA toolkit release (``12.1.1``) and its minimum Linux x86_64 driver for the full feature set."""

    version: str
    min_driver: DriverVersion
    source: str
    verified: bool = True

    @property
    def xy(self) -> str:
        """``12.1`` for ``12.1.1``."""
        return ".".join(self.version.split(".")[:2])

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])


@dataclass(frozen=True, kw_only=True)
class MinDriver:
    """Minimum drivers for a CUDA release: ``full`` features, or the ``minor_version`` compatibility floor.

    ``toolkit`` is the release row the ``full`` value comes from (``12.1.0`` for ``12.1``).
    """

    full: DriverVersion
    minor_version: DriverVersion
    # where `full` comes from: provenance, not part of the requirement (a release index does not record it)
    toolkit: str = field(default="", compare=False)


@dataclass(frozen=True, kw_only=True)
class _Branch:
    branch: int
    cuda_version: str
    source: str
    verified: bool


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _major(version: str) -> int:
    """13 for ``13.0``."""
    return int(version.split(".")[0])


@functools.cache
def cuda_releases() -> tuple[CudaRelease, ...]:
    """Every CUDA toolkit release in the data, oldest first."""
    name = "cuda.toml"
    out = []
    for row in _rows(name, "release"):
        version = _field(name, "release", row, "version", str)
        if not _CUDA_XY_RE.match(version) or version.count(".") != 2:
            raise DataError(f"imagesmith/data/{name}: release {version!r} is not X.Y.Z")
        out.append(
            CudaRelease(
                version=version,
                min_driver=parse_driver(_field(name, "release", row, "min_driver", str)),
                source=row["source"],
                verified=bool(row.get("verified", True)),
            )
        )
    return tuple(sorted(out, key=lambda r: _vkey(r.version)))


@functools.cache
def _mvc_floors() -> Mapping[int, DriverVersion]:
    name = "cuda.toml"
    return MappingProxyType(
        {
            int(_field(name, "minor_version_floor", row, "major", int)): parse_driver(
                _field(name, "minor_version_floor", row, "min_driver", str)
            )
            for row in _rows(name, "minor_version_floor")
        }
    )


@functools.cache
def _branches() -> Mapping[int, _Branch]:
    name = "cuda.toml"
    return MappingProxyType(
        {
            int(row["branch"]): _Branch(
                branch=int(_field(name, "branch", row, "branch", int)),
                cuda_version=_field(name, "branch", row, "cuda_version", str),
                source=row["source"],
                verified=bool(row.get("verified", False)),
            )
            for row in _rows(name, "branch")
        }
    )


def normalize_cuda(text: str) -> tuple[str, str]:
    """``"12.1"``, ``"12.1.1"`` or ``"cu121"`` → ``("cu121", "12.1")``; :class:`ConfigError` on junk."""
    raw = text.strip() if isinstance(text, str) else ""
    tag = _CUDA_TAG_RE.match(raw)
    if tag:
        major, minor = int(tag.group(1)), int(tag.group(2))
        return f"cu{major}{minor}", f"{major}.{minor}"
    xy = _CUDA_XY_RE.match(raw)
    if xy and int(xy.group(2)) < 10:
        major, minor = int(xy.group(1)), int(xy.group(2))
        return f"cu{major}{minor}", f"{major}.{minor}"
    raise ConfigError(
        f"{text!r} is not a CUDA version",
        hint="write it as X.Y (12.1), X.Y.Z (12.1.1) or as the wheel variant (cu121)",
    )


def cuda_release(version: str) -> CudaRelease:
    """The release row for ``12.1.1``; for ``12.1`` / ``cu121`` the oldest update of 12.1 (see
    :func:`min_driver`).
    """
    releases = cuda_releases()
    raw = version.strip()
    if raw.count(".") == 2:
        if not _CUDA_XY_RE.match(raw):
            normalize_cuda(raw)  # raises the generic message
        for rel in releases:
            if rel.version == raw:
                return rel
        raise ConfigError(
            f"CUDA {raw} is not a CUDA toolkit release imagesmith knows (imagesmith/data/cuda.toml) "
            f"{_did_you_mean(raw, [r.version for r in releases])}".rstrip(),
            hint=f"known: {releases[0].version} … {releases[-1].version}",
        )
    _, xy = normalize_cuda(raw)
    for rel in releases:
        if rel.xy == xy:
            return rel
    raise ConfigError(
        f"CUDA {xy} is not a CUDA toolkit release imagesmith knows (imagesmith/data/cuda.toml) "
        f"{_did_you_mean(xy, sorted({r.xy for r in releases}, key=_vkey))}".rstrip(),
        hint=f"known: {releases[0].xy} … {releases[-1].xy} (there never was a CUDA 12.7)",
    )


def min_driver(cuda: str) -> MinDriver:
    """Minimum Linux drivers for CUDA ``12.1`` / ``12.1.1`` / ``cu121``.

    The X.Y form (and the ``cuXY`` wheel tag) uses the **oldest update** of X.Y (the GA row, ``12.1.0``): the
    CUDA runtime checks the driver against its X.Y only (``CUDART_VERSION`` is 12010 for every 12.1.x update,
    and ``cuDriverGetVersion``/nvidia-smi report X.Y), so the lowest driver that reports X.Y runs every X.Y.z
    runtime. Give X.Y.Z to get that exact update's row (``12.4.1`` → 550.54.15 instead of 550.54.14).

    ``minor_version`` is the minor-version-compatibility floor of the major, or the ``full`` value when that
    is lower (CUDA 11.0 predates its family floor 450.80.02).
    """
    rel = cuda_release(cuda)
    floor = _mvc_floors().get(rel.major)
    if floor is None:
        raise DataError(f"imagesmith/data/cuda.toml: no minor-version floor for CUDA {rel.major}.x")
    return MinDriver(full=rel.min_driver, minor_version=min(floor, rel.min_driver), toolkit=rel.version)


def _max_cuda(driver: DriverVersion) -> str | None:
    best: str | None = None
    for rel in cuda_releases():
        if rel.min_driver <= driver and (best is None or _vkey(rel.xy) > _vkey(best)):
            best = rel.xy
    row = _branches().get(driver.branch)
    if row is not None and (best is None or _vkey(row.cuda_version) > _vkey(best)):
        best = row.cuda_version
    return best


def max_cuda_for_driver(driver: DriverVersion | str) -> str:
    """Newest CUDA X.Y that *driver* runs with full features (what its nvidia-smi prints as "CUDA Version").

    From the toolkit table; for branches newer than the newest toolkit row (R610 → 13.3) from the observed
    per-branch value in ``cuda.toml``.
    """
    drv = _as_driver(driver)
    best = _max_cuda(drv)
    if best is None:
        oldest = cuda_releases()[0]
        raise ConfigError(
            f"driver {drv} predates CUDA {oldest.xy} (needs ≥ {oldest.min_driver}); imagesmith covers "
            "CUDA 11.0 and newer",
            hint="upgrade the NVIDIA driver",
        )
    return best


def driver_branch_cuda(branch: int) -> tuple[str, str, bool] | None:
    """(nvidia-smi "CUDA Version", source, verified) for a driver branch such as 535, or None when not
    tabulated.

    Derived from the toolkit table except where the source says it was observed; see ``cuda.toml``.
    """
    row = _branches().get(branch)
    return None if row is None else (row.cuda_version, row.source, row.verified)


# ------------------------------------------------------------------------------------------------------------
# driver branch lifecycle (NVIDIA's data-center driver lifecycle) and the CUDA runtime a wheel ships

TODAY_ENV = "IMAGESMITH_TODAY"


def today() -> datetime.date:
    """The date end-of-life checks and allowlist expiries are made against: ``$IMAGESMITH_TODAY``
    (``YYYY-MM-DD``) when set, else the real date **in UTC** — never the machine's time zone: the nightly on a
    UTC runner and a release from a laptop at UTC-8 (or UTC+14) at the same moment see the same day, as the
    base lock's ``read`` and the index's times do. Tests and reproducible runs set it (or pass ``today=`` to
    the functions that take it).
    """
    raw = (settings.get(TODAY_ENV) or "").strip()
    if not raw:
        return datetime.datetime.now(datetime.timezone.utc).date()
    try:
        return datetime.date.fromisoformat(raw)
    except ValueError:
        raise ConfigError(
            f"{TODAY_ENV}={raw!r} is not a date", hint=f"write it as YYYY-MM-DD, or unset {TODAY_ENV}"
        ) from None


def _today() -> datetime.date:
    return today()  # looked up at call time: the functions below take a parameter named ``today``


_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


Designation = Literal["long-term", "production", "new-feature"]
_DESIGNATIONS: Mapping[str, str] = MappingProxyType(
    {
        "long-term": "long-term support branch",
        "production": "production branch",
        "new-feature": "new feature branch",
    }
)


@dataclass(frozen=True, kw_only=True)
class BranchLifecycle:
    """A driver branch in NVIDIA's data-center driver lifecycle: a Long Term Support, Production or New
    Feature Branch (NFB); support ends in month ``end_of_life`` (None: NVIDIA gives none, as for NFBs)."""

    branch: int
    designation: Designation
    end_of_life: tuple[int, int] | None  # (year, month)
    source: str

    @property
    def kind(self) -> str:
        """``long-term support branch``, ``production branch`` or ``new feature branch``."""
        return _DESIGNATIONS[self.designation]

    @property
    def end_text(self) -> str:
        """``June 2026`` (``no end-of-life date`` for an NFB without one)."""
        if self.end_of_life is None:
            return "no end-of-life date"
        return f"{_MONTHS[self.end_of_life[1] - 1]} {self.end_of_life[0]}"

    def ended(self, on: datetime.date) -> bool:
        """True once the end-of-life month is over (never for a branch without one)."""
        return self.end_of_life is not None and (on.year, on.month) > self.end_of_life

    def describe(self) -> str:
        return f"R{self.branch} ({self.kind}, supported to {self.end_text})"


@functools.cache
def _lifecycles() -> Mapping[int, BranchLifecycle]:
    name = "cuda.toml"
    out: dict[int, BranchLifecycle] = {}
    for row in _rows(name, "lifecycle"):
        branch = int(_field(name, "lifecycle", row, "branch", int))
        designation = _field(name, "lifecycle", row, "designation", str)
        if designation not in _DESIGNATIONS:
            raise DataError(
                f"imagesmith/data/{name}: [[lifecycle]] {branch}: designation {designation!r} is not "
                "long-term, production or new-feature"
            )
        eol = row.get("end_of_life")
        end: tuple[int, int] | None = None
        if eol is None and designation != "new-feature":
            raise DataError(
                f"imagesmith/data/{name}: [[lifecycle]] {branch}: a {_DESIGNATIONS[designation]} needs an "
                "end_of_life (YYYY-MM); only a new feature branch may have none"
            )
        if eol is not None:
            match = re.fullmatch(r"([0-9]{4})-([0-9]{2})", eol) if isinstance(eol, str) else None
            if match is None or not 1 <= int(match.group(2)) <= 12:
                raise DataError(
                    f"imagesmith/data/{name}: [[lifecycle]] {branch}: end_of_life {eol!r} is not YYYY-MM"
                )
            end = (int(match.group(1)), int(match.group(2)))
        if branch in out:
            raise DataError(f"imagesmith/data/{name}: [[lifecycle]] {branch} is listed twice")
        out[branch] = BranchLifecycle(
            branch=branch,
            designation=designation,
            end_of_life=end,
            source=row["source"],
        )
    return MappingProxyType(dict(sorted(out.items())))


def branch_lifecycle(branch: int) -> BranchLifecycle | None:
    """NVIDIA's lifecycle row of a driver branch (535 → long-term, June 2026), or None when not listed."""
    return _lifecycles().get(branch)


def _supported_branches(on: datetime.date) -> list[BranchLifecycle]:
    """The Long Term Support and Production branches not past end of life on *on* (what NVIDIA's table lists
    for production use; New Feature Branches are not among them)."""
    return [row for row in _lifecycles().values() if not row.ended(on) and row.designation != "new-feature"]


@functools.cache
def _unlisted_ended_below() -> tuple[int, str]:
    """(branch, source): NVIDIA called every branch older than this that its table did not list EOL."""
    name = "cuda.toml"
    table = TABLES.load(name).get("unlisted_branches")
    if (
        not isinstance(table, dict)
        or not isinstance(table.get("ended_below"), int)
        or not isinstance(table.get("source"), str)
        or not table["source"].strip()
    ):
        raise DataError(
            f"imagesmith/data/{name}: [unlisted_branches] needs `ended_below` (a branch) and `source`"
        )
    return int(table["ended_below"]), str(table["source"])


def driver_warnings(driver: DriverVersion | str, *, today: datetime.date | None = None) -> tuple[str, ...]:
    """Warnings about the driver's branch itself, in the words of NVIDIA's data-center driver lifecycle:

    * a listed branch whose end-of-life month is over (a Long Term Support, Production or New Feature Branch);
    * an unlisted branch older than ``[unlisted_branches] ended_below`` (R580): NVIDIA's R580-era page called
      every such branch end of life;
    * a New Feature Branch without an end-of-life date (R590): not end of life, but short-lived and not what
      NVIDIA lists for production.

    Empty for a supported LTSB/PB, and for an unlisted branch from R580 on (R615): NVIDIA's current pages list
    only Long Term Support and Production branches, so nothing is known about its end of life.
    """
    drv = _as_driver(driver)
    on = today if today is not None else _today()
    rows = _lifecycles()
    supported = ", ".join(row.describe() for row in _supported_branches(on))
    move = f"; branches NVIDIA supports for production on {on.isoformat()}: {supported}" if supported else ""
    row = rows.get(drv.branch)
    if row is not None:
        if row.ended(on):
            return (
                f"driver {drv} is on branch R{row.branch}, a {row.kind} that reached end of life in "
                f"{row.end_text} (NVIDIA Data Center Driver lifecycle): no more bug or security fixes{move}",
            )
        if row.designation == "new-feature" and row.end_of_life is None:
            return (
                f"driver {drv} is on branch R{row.branch}, a new feature branch: NVIDIA calls these "
                "short-lived and gives them no end-of-life date; it is not end of life, but not a branch "
                f"NVIDIA's Data Center Driver lifecycle lists for production{move}",
            )
        return ()
    ended_below, _ = _unlisted_ended_below()
    if drv.branch < ended_below:
        return (
            f"driver {drv} is on branch R{drv.branch}, which NVIDIA's Data Center Driver lifecycle (R580 "
            f"edition) counts among the end-of-life branches: every branch before R{ended_below} it did not "
            f"list is end of life{move}",
        )
    return ()


@dataclass(frozen=True, kw_only=True)
class WheelRuntime:
    """The CUDA runtime torch wheels of ``variant`` ship (``cu128`` → 12.8.1, cudart 12.8.90), for the torch
    releases in ``torch``.
    """

    variant: str
    torch: SpecifierSet
    runtime: str
    cudart: str
    source: str


@functools.cache
def _wheel_runtimes() -> tuple[WheelRuntime, ...]:
    name = "cuda.toml"
    out = []
    for row in _rows(name, "wheel_runtime"):
        variant = _field(name, "wheel_runtime", row, "variant", str)
        runtime = _field(name, "wheel_runtime", row, "runtime", str)
        if not _CUDA_TAG_RE.match(variant) or not _CUDA_XY_RE.match(runtime) or runtime.count(".") != 2:
            raise DataError(
                f"imagesmith/data/{name}: [[wheel_runtime]] {variant}: variant must be cuXY and runtime X.Y.Z"
            )
        try:
            spec = SpecifierSet(_field(name, "wheel_runtime", row, "torch", str))
        except InvalidSpecifier as exc:
            raise DataError(f"imagesmith/data/{name}: [[wheel_runtime]] {variant}: {exc}") from None
        out.append(
            WheelRuntime(
                variant=variant,
                torch=spec,
                runtime=runtime,
                cudart=_field(name, "wheel_runtime", row, "cudart", str),
                source=row["source"],
            )
        )
    return tuple(out)


def wheel_runtime(torch: str, variant: str) -> WheelRuntime | None:
    """The CUDA runtime torch *torch* + *variant* wheels ship, when the data records it."""
    version = Version(torch.split("+", 1)[0])
    return next((w for w in _wheel_runtimes() if w.variant == variant and w.torch.contains(version)), None)


def _update_name(version: str) -> str:
    """``12.8.1`` → ``CUDA 12.8 Update 1``; ``12.8.0`` → ``CUDA 12.8 GA``."""
    major, minor, patch = version.split(".")
    return f"CUDA {major}.{minor} " + ("GA" if patch == "0" else f"Update {patch}")
