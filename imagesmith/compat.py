"""Driver ↔ CUDA ↔ PyTorch ↔ GPU compatibility: versions, packaged data, arch coverage and verdicts.

Pure: the only input/output is reading the packaged TOML tables in ``imagesmith/data`` (``cuda.toml``,
``torch.toml``, ``gpus.toml``) through :mod:`importlib.resources`; each table is loaded once and cached. Every
row names its ``source``; rows resting on secondary sources or assumptions say ``verified = false`` (see
docs/compat.md).

Rules applied (NVIDIA "CUDA Compatibility" documentation, PyTorch release matrix):

* A CUDA X.Y program runs with **full** features on a driver ≥ the toolkit driver of CUDA X.Y (release notes,
  Table 3). Newer drivers always run older CUDA (backward compatibility).
* Under **minor-version compatibility** it runs on any driver ≥ the floor of its major (11.x ≥ 450.80.02, 12.x
  ≥ 525.60.13, 13.x ≥ 580.65.06) with a limited feature set: PTX newer than the driver cannot be JIT-compiled
  and APIs newer than the driver fail. A wheel whose only kernel for the GPU is PTX therefore needs full
  compatibility.
* A wheel runs on a GPU of compute capability M.m when it carries SASS for M.m (**native**), SASS for M.n with
  n < m (**binary-compatible**: same major, lower minor), or PTX for any ≤ M.m (**ptx**: JIT-compiled by the
  driver at first start); otherwise torch reports "sm_Mm is not compatible with the current PyTorch
  installation".
"""

from __future__ import annotations

import datetime
import difflib
import functools
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib import resources
from types import MappingProxyType
from typing import Any, Literal, TypedDict

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from imagesmith import settings
from imagesmith.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised only on Python 3.10
    import tomli as tomllib


DATA_HINT = (
    "imagesmith's packaged data is broken: reinstall imagesmith (pip install --force-reinstall imagesmith), "
    "or in a checkout fix the data file named"
)


class DataError(ConfigError):
    """imagesmith's own data files (``imagesmith/data/*.toml``) are wrong: a packaging or editing bug."""

    def __init__(self, message: str, *, hint: str | None = None, **fields: Any) -> None:
        super().__init__(message, hint=hint or DATA_HINT, **fields)


__all__ = [
    "ArchCoverage",
    "ArchFamily",
    "BranchLifecycle",
    "CudaRelease",
    "DistroToolkit",
    "DriverVersion",
    "Gpu",
    "MinDriver",
    "TorchRelease",
    "TorchVariant",
    "Verdict",
    "WheelRuntime",
    "arch_coverage",
    "arch_families",
    "branch_lifecycle",
    "cuda_release",
    "cuda_releases",
    "distro_toolkit",
    "distro_toolkits",
    "driver_branch_cuda",
    "driver_warnings",
    "gpu",
    "gpu_arch",
    "gpu_candidates",
    "gpu_family",
    "gpu_last_branch",
    "gpu_min_driver",
    "gpu_or_adhoc",
    "gpu_warnings",
    "gpus",
    "max_cuda_for_driver",
    "min_driver",
    "nearest",
    "nearest_gpu",
    "normalize_cuda",
    "parse_driver",
    "today",
    "torch_release",
    "torch_releases",
    "torch_variant",
    "verdict",
    "vgpu",
    "wheel_runtime",
]

_PACKAGE = "imagesmith"

# ------------------------------------------------------------------------------------------------------------
# helpers


def nearest(value: str, choices: Iterable[str]) -> str | None:
    """The choice spelled most like *value* (case-insensitive, :mod:`difflib`), or None when nothing is close.

    Meant for "did you mean …?" messages.
    """
    options = list(dict.fromkeys(choices))
    if not options:
        return None
    folded: dict[str, str] = {}
    for option in options:
        folded.setdefault(option.casefold(), option)
    if value.casefold() in folded:
        return folded[value.casefold()]
    hits = difflib.get_close_matches(value.casefold(), list(folded), n=1, cutoff=0.5)
    return folded[hits[0]] if hits else None


def _did_you_mean(value: str, choices: Iterable[str]) -> str:
    guess = nearest(value, choices)
    return f"did you mean {guess}?" if guess else ""


# ------------------------------------------------------------------------------------------------------------
# driver versions

_DRIVER_RE = re.compile(r"^\s*(\d{3,4})\.(\d{1,3})(?:\.(\d{1,3}))?\s*$", re.ASCII)


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
# data loading


@functools.cache
def _load(name: str) -> dict[str, Any]:
    text = resources.files(_PACKAGE).joinpath("data").joinpath(name).read_text(encoding="utf-8")
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # a packaging bug, but say where
        raise DataError(f"imagesmith/data/{name}: invalid TOML: {exc}") from None


def _rows(name: str, table: str) -> list[dict[str, Any]]:
    data = _load(name)
    rows = data.get(table)
    if not isinstance(rows, list) or not rows:
        raise DataError(f"imagesmith/data/{name}: no [[{table}]] rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not isinstance(row.get("source"), str) or not row["source"].strip():
            raise DataError(f"imagesmith/data/{name}: [[{table}]] row {i + 1} has no `source`")
    return rows


def _field(name: str, table: str, row: Mapping[str, Any], key: str, kind: type) -> Any:
    value = row.get(key)
    if not isinstance(value, kind):
        ident = row.get("version") or row.get("key") or row.get("name") or row.get("branch") or "?"
        raise DataError(
            f"imagesmith/data/{name}: [[{table}]] {ident}: `{key}` must be a {kind.__name__}, got {value!r}"
        )
    return value


# ------------------------------------------------------------------------------------------------------------
# CUDA toolkit ↔ driver

_CUDA_XY_RE = re.compile(r"^(\d{2})\.(\d{1,2})(?:\.(\d{1,2}))?$")
_CUDA_TAG_RE = re.compile(r"^cu(\d{2})(\d)$", re.IGNORECASE)


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
    """The date end-of-life checks are made against: ``$IMAGESMITH_TODAY`` (``YYYY-MM-DD``) when set, else the
    real date. Tests and reproducible runs set it (or pass ``today=`` to the functions that take it).
    """
    raw = (settings.get(TODAY_ENV) or "").strip()
    if not raw:
        return datetime.date.today()
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
            match = re.fullmatch(r"(\d{4})-(\d{2})", eol) if isinstance(eol, str) else None
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
    table = _load(name).get("unlisted_branches")
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


# ------------------------------------------------------------------------------------------------------------
# PyTorch


@dataclass(frozen=True, kw_only=True)
class TorchVariant:
    """One CUDA wheel variant of a torch release (``cu121``)."""

    name: str
    cuda: str
    arch_list: tuple[str, ...]
    nccl: str
    cudnn: str
    index_url: str
    verified: bool = True
    source: str = ""

    @property
    def torch_cuda_arch_list(self) -> str:
        """The ``TORCH_CUDA_ARCH_LIST`` string the wheels were built with (``7.5;8.0;…;12.0+PTX``)."""
        return ";".join(self.arch_list)


@dataclass(frozen=True, kw_only=True)
class TorchRelease:
    """One torch patch release with its paired packages and CUDA variants."""

    version: str
    torchvision: str
    torchaudio: str | None
    python: SpecifierSet
    variants: Mapping[str, TorchVariant] = field(hash=False)
    pypi_default: str
    source: str
    verified: bool
    #: False when ``torchaudio`` is one wheel for every CUDA variant (2.11.1, py3-none): pin it without +cuXYZ
    torchaudio_local: bool = True
    #: the paired torchvision's Requires-Python where it is narrower than torch's (0.26 … 0.29: ``!=3.14.1``)
    torchvision_python: SpecifierSet | None = None

    def torchvision_refuses(self, python: str) -> str | None:
        """Why the paired torchvision cannot be installed on Python *python* (``3.14.1``), or None."""
        if self.torchvision_python is None or python.count(".") != 2:
            return None
        if self.torchvision_python.contains(python, prereleases=True):
            return None
        return (
            f"torchvision {self.torchvision} (paired with torch {self.version}) requires Python "
            f"{self.torchvision_python}: pip cannot install it on Python {python}"
        )

    def variant(self, cuda: str) -> TorchVariant:
        """The variant for ``cu121`` / ``12.1``; :class:`ConfigError` when this release was never published
        for it.
        """
        name, xy = normalize_cuda(cuda)
        found = self.variants.get(name)
        if found is None:
            raise ConfigError(
                f"torch {self.version} was never published for {name} (CUDA {xy})",
                hint=f"its CUDA variants are {', '.join(self.variants)} (PyPI default {self.pypi_default})",
            )
        return found

    @property
    def default_variant(self) -> TorchVariant:
        return self.variants[self.pypi_default]


_ARCH_RE = re.compile(r"^(\d{1,2})\.(\d)(a|f)?(\+PTX)?$")


@functools.cache
def torch_releases() -> tuple[TorchRelease, ...]:
    """Every torch release in the data, oldest first."""
    name = "torch.toml"
    data = _load(name)
    pattern = data.get("index_url")
    if not isinstance(pattern, str) or "{variant}" not in pattern:
        raise DataError(f"imagesmith/data/{name}: `index_url` must be a string containing {{variant}}")
    out = []
    for row in _rows(name, "release"):
        version = _field(name, "release", row, "version", str)
        try:
            Version(version)
            python = SpecifierSet(_field(name, "release", row, "python", str))
        except (InvalidVersion, InvalidSpecifier) as exc:
            raise DataError(f"imagesmith/data/{name}: release {version}: {exc}") from None
        variants: dict[str, TorchVariant] = {}
        for vrow in row.get("variant", []):
            vname = _field(name, "release.variant", vrow, "name", str)
            if not isinstance(vrow.get("source"), str):
                raise DataError(f"imagesmith/data/{name}: release {version} variant {vname} has no `source`")
            arch = tuple(_field(name, "release.variant", vrow, "arch_list", list))
            for entry in arch:
                if not isinstance(entry, str) or not _ARCH_RE.match(entry):
                    raise DataError(f"imagesmith/data/{name}: {version} {vname}: bad arch {entry!r}")
            variants[vname] = TorchVariant(
                name=vname,
                cuda=_field(name, "release.variant", vrow, "cuda", str),
                arch_list=arch,
                nccl=_field(name, "release.variant", vrow, "nccl", str),
                cudnn=_field(name, "release.variant", vrow, "cudnn", str),
                index_url=pattern.format(variant=vname),
                verified=bool(vrow.get("verified", True)),
                source=vrow["source"],
            )
        default = _field(name, "release", row, "pypi_default", str)
        if default not in variants:
            raise DataError(
                f"imagesmith/data/{name}: release {version}: pypi_default {default} is not a variant"
            )
        torchaudio = row.get("torchaudio")
        tv_python = row.get("torchvision_python")
        try:
            tv_spec = SpecifierSet(tv_python) if isinstance(tv_python, str) else None
        except InvalidSpecifier as exc:
            raise DataError(f"imagesmith/data/{name}: release {version}: torchvision_python: {exc}") from None
        torchaudio_local = row.get("torchaudio_local", True)
        if not isinstance(torchaudio_local, bool):
            raise DataError(
                f"imagesmith/data/{name}: release {version}: `torchaudio_local` must be true or false"
            )
        out.append(
            TorchRelease(
                version=version,
                torchvision=_field(name, "release", row, "torchvision", str),
                torchaudio=torchaudio if isinstance(torchaudio, str) else None,
                python=python,
                variants=MappingProxyType(variants),
                pypi_default=default,
                source=row["source"],
                verified=bool(row.get("verified", True)),
                torchaudio_local=torchaudio_local,
                torchvision_python=tv_spec,
            )
        )
    return tuple(sorted(out, key=lambda r: Version(r.version)))


def _nearest_version(value: str, known: Sequence[str]) -> str | None:
    if len(value) > 64:  # no version is that long (and int() of thousands of digits raises)
        return None
    try:
        wanted = Version(value)
    except InvalidVersion:
        return nearest(value, known)
    same_minor = [k for k in known if Version(k).release[:2] == wanted.release[:2]]
    if same_minor and len(wanted.release) < 3:  # "2.1" means the 2.1 series: its newest patch
        return max(same_minor, key=Version)
    pool = same_minor or list(known)

    def distance(k: str) -> tuple[int, ...]:
        a = [*Version(k).release, 0, 0, 0][:3]
        b = [*wanted.release, 0, 0, 0][:3]
        return tuple(abs(x - y) for x, y in zip(a, b, strict=True))

    return min(pool, key=distance)


def torch_release(version: str) -> TorchRelease:
    """The release ``2.1.2``; :class:`ConfigError` naming the nearest known version when unknown.

    A local suffix (``2.1.2+cu121``) is accepted and ignored.
    """
    raw = version.strip().split("+", 1)[0] if isinstance(version, str) else ""
    releases = torch_releases()
    for rel in releases:
        if rel.version == raw:
            return rel
    known = [r.version for r in releases]
    guess = _nearest_version(raw, known) if raw else None
    raise ConfigError(
        f"torch {version!r} is not in imagesmith's data (imagesmith/data/torch.toml)"
        + (f"; did you mean {guess}?" if guess else ""),
        hint=f"known releases: {known[0]} … {known[-1]}; give an exact patch version such as {known[-1]}",
    )


def torch_variant(torch: str, cuda: str) -> TorchVariant:
    """Shortcut for ``torch_release(torch).variant(cuda)`` (raises when never published)."""
    return torch_release(torch).variant(cuda)


# ------------------------------------------------------------------------------------------------------------
# GPUs


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """A GPU model. ``cc`` is the compute capability (``"8.0"``); ``memory_gib`` = nvidia-smi MiB / 1024."""

    key: str
    name: str
    cc: str
    memory_gib: float
    tdp_w: int | None
    smi_names: tuple[str, ...]
    source: str
    memory_mib: int = 0
    form_factor: str = ""
    segment: Literal["datacenter", "workstation", "consumer"] = "datacenter"
    family: str = ""
    #: the first driver that drives this GPU at all: the row's own ``min_driver`` where NVIDIA names one for
    #: the board, else its architecture's ``first_driver`` (``[[arch]]`` in gpus.toml); None for a model of no
    #: known architecture
    min_driver: DriverVersion | None = None
    #: where ``min_driver`` comes from ("derived: …" when inferred from the first CUDA toolkit of the arch)
    min_driver_source: str = ""
    verified: bool = True
    #: the vGPU profile name nvidia-smi printed in a vGPU guest ("GRID A100-40C"); this Gpu is then the
    #: physical model the profile slices ("" on bare metal)
    vgpu: str = ""
    #: True for a model not in gpus.toml, built from the compute capability nvidia-smi reported
    adhoc: bool = False
    #: the CPU of the hosts this GPU comes in (GH200/GB200/GB300/GB10: aarch64, so linux/arm64 images only)
    host_arch: Literal["x86_64", "aarch64"] = "x86_64"

    @property
    def sm(self) -> str:
        """``sm_80`` for cc 8.0."""
        return "sm_" + self.cc.replace(".", "")


@functools.cache
def gpus() -> tuple[Gpu, ...]:
    """Every GPU model in the data, in file order."""
    name = "gpus.toml"
    out = []
    seen: set[str] = set()
    for row in _rows(name, "gpu"):
        key = _field(name, "gpu", row, "key", str)
        if key in seen:
            raise DataError(f"imagesmith/data/{name}: duplicate gpu key {key}")
        seen.add(key)
        cc = _field(name, "gpu", row, "cc", str)
        if not re.match(r"^\d{1,2}\.\d$", cc):
            raise DataError(f"imagesmith/data/{name}: gpu {key}: cc {cc!r} is not M.m")
        mib = int(_field(name, "gpu", row, "memory_mib", int))
        segment = row.get("segment", "datacenter")
        if segment not in ("datacenter", "workstation", "consumer"):
            raise DataError(f"imagesmith/data/{name}: gpu {key}: unknown segment {segment!r}")
        md = row.get("min_driver")
        md_source = row.get("min_driver_source")
        if md is not None and (
            not isinstance(md, str) or not isinstance(md_source, str) or not md_source.strip()
        ):
            raise DataError(
                f"imagesmith/data/{name}: gpu {key}: `min_driver` needs a driver version and a "
                "`min_driver_source` saying where it comes from"
            )
        if md is None:
            arch = _arch_of(cc)
            if arch is None:
                raise DataError(
                    f"imagesmith/data/{name}: gpu {key}: no [[arch]] row covers compute capability {cc}, so "
                    "its first driver is unknown: add one (first_driver and its source) or give the row "
                    "a min_driver"
                )
            floor, md_source = arch.first_driver, f"{arch.name}: {arch.first_driver_source}"
        else:
            floor = parse_driver(md)
        host_arch = row.get("host_arch", "x86_64")
        if host_arch not in ("x86_64", "aarch64"):
            raise DataError(f"imagesmith/data/{name}: gpu {key}: unknown host_arch {host_arch!r}")
        out.append(
            Gpu(
                key=key,
                name=_field(name, "gpu", row, "name", str),
                cc=cc,
                memory_gib=round(mib / 1024, 1),
                tdp_w=row.get("tdp_w") if isinstance(row.get("tdp_w"), int) else None,
                smi_names=tuple(_field(name, "gpu", row, "smi_names", list)),
                source=row["source"],
                memory_mib=mib,
                form_factor=str(row.get("form_factor", "")),
                segment=segment,
                family=str(row.get("family", key)),
                min_driver=floor,
                min_driver_source=str(md_source),
                verified=bool(row.get("verified", True)),
                host_arch=host_arch,
            )
        )
    return tuple(out)


@functools.cache
def _families() -> Mapping[str, str]:
    name = "gpus.toml"
    keys = {g.key for g in gpus()}
    out = {}
    for row in _rows(name, "family"):
        fam = _field(name, "family", row, "key", str)
        default = _field(name, "family", row, "default", str)
        if default not in keys:
            raise DataError(f"imagesmith/data/{name}: family {fam}: default {default} is not a gpu key")
        out[fam] = default
    return MappingProxyType(out)


def _alnum(text: str) -> str:
    return re.sub(r"[^0-9a-z]", "", text.casefold())


_BRAND_WORDS = re.compile(r"\b(nvidia|tesla|geforce)\b", re.IGNORECASE)


@functools.cache
def _name_index() -> Mapping[str, tuple[str, ...]]:
    index: dict[str, list[str]] = {}

    def add(alias: str, key: str) -> None:
        for form in {_alnum(alias), _alnum(_BRAND_WORDS.sub(" ", alias))}:
            if form and key not in index.setdefault(form, []):
                index[form].append(key)

    for g in gpus():
        add(g.key, g.key)
        add(g.name, g.key)
        for smi in g.smi_names:
            add(smi, g.key)
    return MappingProxyType({k: tuple(v) for k, v in index.items()})


def gpu_family(family: str) -> tuple[Gpu, ...]:
    """All models of a family (``a100`` → the A100 40/80 GB PCIe/SXM4 SKUs)."""
    members = tuple(g for g in gpus() if g.family == family.strip().casefold())
    if not members:
        guess = nearest(family, [f for f in _families() if f == nearest_gpu(family)]) if family else None
        raise ConfigError(
            f"unknown GPU family {family!r}" + (f" did you mean {guess}?" if guess else ""),
            hint=f"families: {', '.join(sorted(_families()))}",
            fault="unknown GPU",
        )
    return members


def gpu_candidates(text: str) -> tuple[Gpu, ...]:
    """Every model *text* may mean: key, family key, full or truncated nvidia-smi name (any case)."""
    by_key = {g.key: g for g in gpus()}
    raw = " ".join(text.split())
    folded = raw.casefold()
    if folded in by_key:
        return (by_key[folded],)
    if folded in _families():
        return (by_key[_families()[folded]],)
    if raw.endswith(("...", "…")):
        prefix = raw.rstrip(".…").casefold()
        if not prefix:
            return ()
        return tuple(g for g in gpus() if any(s.casefold().startswith(prefix) for s in g.smi_names))
    # every row with that exact name: the H20 96 GB and 141 GB boards both print "NVIDIA H20" (memory tells)
    exact = tuple(
        g for g in gpus() if folded == g.name.casefold() or folded in (s.casefold() for s in g.smi_names)
    )
    if exact:
        return exact
    keys = _name_index().get(_alnum(raw)) or _name_index().get(_alnum(_BRAND_WORDS.sub(" ", raw))) or ()
    return tuple(by_key[k] for k in keys)


def gpu(key_or_smi_name: str, *, memory_mib: int | None = None, driver: DriverVersion | None = None) -> Gpu:
    """Resolve a key (``h100-sxm``), a family key (``a100`` → its ``default`` SKU) or a full or truncated
    nvidia-smi name, case-insensitively.

    A truncated name of nvidia-smi's default table (``NVIDIA A100-SXM...``) can fit several SKUs: *memory_mib*
    (memory.total as nvidia-smi reports it) picks the one within 3 %; SKUs left over that are of one family
    and one compute capability resolve to the family's default. Anything else still ambiguous, or unknown, is
    a :class:`ConfigError` (unknown ones name the nearest known). *driver* (the host's, from the same
    nvidia-smi output) rules out SKUs it cannot drive (a ``min_driver`` above it).
    """
    if not isinstance(key_or_smi_name, str) or not key_or_smi_name.strip():
        raise ConfigError("empty GPU name", hint="give a key such as h100-sxm or the name nvidia-smi prints")
    found = gpu_candidates(key_or_smi_name)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        if memory_mib is not None:
            # older drivers report a little less (A100 80GB: 81251 vs 81920 MiB); SKUs whose memory differs by
            # less than that (RTX 3090 24576 vs RTX 4090 24564 MiB) stay ambiguous
            close = tuple(g for g in found if abs(g.memory_mib - memory_mib) <= 0.03 * g.memory_mib)
            if len(close) == 1:
                return close[0]
            found = close or found
        if driver is not None:
            drivable = tuple(g for g in found if g.min_driver is None or g.min_driver <= driver)
            if len(drivable) == 1:
                return drivable[0]
            found = drivable or found
        families = {g.family for g in found}
        ccs = {g.cc for g in found}
        if len(families) == 1 and len(ccs) == 1:
            default = _families().get(next(iter(families)))
            chosen = [g for g in found if g.key == default]
            if chosen:
                return chosen[0]
        cut = key_or_smi_name.rstrip().endswith("...")
        raise ConfigError(
            f"GPU name {key_or_smi_name!r} is ambiguous: it fits {', '.join(g.key for g in found)}"
            + (" (nvidia-smi's narrow table of drivers up to R525 cuts names short)" if cut else ""),
            hint="save the full names and give that file: nvidia-smi --query-gpu=index,name,memory.total,"
            "driver_version --format=csv > smi.csv"
            if cut
            else "give the key, or the full name (nvidia-smi --query-gpu=name,memory.total --format=csv)",
        )
    sliced = vgpu(key_or_smi_name)
    if sliced is not None:
        return sliced
    guess = nearest_gpu(key_or_smi_name)
    profile = _VGPU.match(" ".join(key_or_smi_name.split()))
    board = f" (a vGPU profile of {profile.group('board')}, not a known board)" if profile else ""
    raise ConfigError(
        f"unknown GPU {key_or_smi_name!r}{board}" + (f" did you mean {guess}?" if guess else ""),
        hint=f"known keys: {', '.join(g.key for g in gpus())} (add new models to imagesmith/data/gpus.toml)",
        fault="unknown GPU",
    )


def gpu_or_adhoc(
    name: str,
    *,
    memory_mib: int | None = None,
    compute_cap: str | None = None,
    driver: DriverVersion | None = None,
) -> Gpu:
    """:func:`gpu`, or, for a name not in gpus.toml whose compute capability nvidia-smi reported
    (``--query-gpu=…,compute_cap``), an ad hoc model of that capability (``adhoc`` is True; treated as a
    consumer GPU: no forward compatibility is promised for it).
    """
    try:
        return gpu(name, memory_mib=memory_mib, driver=driver)
    except ConfigError:
        if compute_cap is None or not re.fullmatch(r"\d{1,2}\.\d", compute_cap.strip(), re.ASCII):
            raise
    newest = max((g.cc for g in gpus()), key=_parse_cc)
    if _parse_cc(compute_cap.strip())[0] > _parse_cc(newest)[0] + 1:
        raise ConfigError(
            f"GPU {name!r}: compute capability {compute_cap.strip()} as nvidia-smi reported it: no NVIDIA "
            f"architecture has it (the newest imagesmith knows is {newest}, sm_{newest.replace('.', '')})",
            hint="check the capture (nvidia-smi --query-gpu=name,compute_cap --format=csv), or give the GPU "
            "with --gpu KEY",
        )
    return Gpu(
        key=" ".join(name.split()).casefold(),
        name=" ".join(name.split()),
        cc=compute_cap.strip(),
        memory_gib=round((memory_mib or 0) / 1024, 1),
        tdp_w=None,
        smi_names=(name,),
        source="nvidia-smi compute_cap (model not in imagesmith/data/gpus.toml)",
        memory_mib=memory_mib or 0,
        segment="consumer",
        adhoc=True,
    )


# vGPU profiles as a guest's nvidia-smi names them: "GRID A100-40C", "GRID T4-16Q", "GRID A100D-80C",
# "GRID A100-4-20C" (MIG-backed: 4 compute slices, 20 GB), "NVIDIA H100XM-80C", "NVIDIA L40S-48Q",
# "GRID M60-2B4":
# physical board, an optional board-variant suffix (D, X, XM, DX, L, S: memory/form variants of one chip),
# frame buffer in GB and the profile series (A apps, B desktops, C compute, Q workstation)
_VGPU = re.compile(
    r"^(?:(?:NVIDIA|GRID|Tesla)\s+)+(?P<board>[A-Z]+\d+[A-Z]*?)(?:-(?P<slices>\d)(?=-))?-(?P<fb>\d{1,3})"
    r"(?P<series>[ABCQ])\d?$",
    re.IGNORECASE,
)
_BOARD_SUFFIXES = ("XM", "DX", "D", "X", "L")


def vgpu(name: str) -> Gpu | None:
    """The physical model behind a vGPU profile name (``GRID A100-40C`` → the A100 family's default SKU,
    with ``vgpu`` set to the profile), or None when *name* is not a vGPU profile of a known model.

    Only the compute capability matters to imagesmith's verdicts: a profile resolves when the family it names
    has one compute capability.
    """
    m = _VGPU.match(" ".join(name.split()))
    if m is None:
        return None
    board = m.group("board").upper()
    tries = [board] + [board[: -len(s)] for s in _BOARD_SUFFIXES if board.endswith(s) and len(board) > len(s)]
    for attempt in tries:
        found = next((f for w in ("", "NVIDIA ", "Tesla ") if (f := gpu_candidates(w + attempt))), ())
        if not found:
            continue
        families = {g.family for g in found}
        if len(families) != 1 or len({g.cc for g in found}) != 1:
            continue
        family = next(iter(families))
        by_key = {g.key: g for g in gpus()}
        physical = by_key.get(_families().get(family, ""), found[0])
        if len({g.cc for g in gpus() if g.family == family}) != 1:
            physical = found[0]
        return replace(physical, vgpu=" ".join(name.split()))
    return None


_MODEL_TOKEN = re.compile(r"^(?P<letters>[a-z]*)(?P<digits>\d+)(?P<suffix>[a-z0-9]*)$")
_SERIES_WORDS = {"rtx", "gtx", "quadro", "titan", "pro"}


def _model(text: str) -> tuple[str, str] | None:
    """(letters, digits) of the model a GPU name or key is about: "NVIDIA GeForce RTX 2080 Ti" →
    ("rtx", "2080"), "Tesla V100-SXM2-32GB" → ("v", "100"), "rtx-a6000" → ("rtxa", "6000")."""
    words = [w for w in re.split(r"[^0-9a-z]+", _BRAND_WORDS.sub(" ", text.casefold())) if w and w != "grid"]
    for i, word in enumerate(words):
        m = _MODEL_TOKEN.match(word)
        if m is None:
            continue
        series = "".join(w for w in words[:i] if w in _SERIES_WORDS)
        return series + m.group("letters"), m.group("digits")
    return None


def _digits_typo(a: str, b: str) -> bool:
    """*a* and *b* are equal or one typo apart that does not make another model number: one digit doubled or
    dropped (h1000 / h100), or two neighbours swapped (4009 / 4090). A different digit (3070 / 3090) is
    another model, not a typo."""
    if a == b:
        return True
    if abs(len(a) - len(b)) == 1:
        short, long = sorted((a, b), key=len)
        return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        i = diff[0] if len(diff) == 2 and diff[1] == diff[0] + 1 else -1
        return i >= 0 and a[i] == b[i + 1] and a[i + 1] == b[i]
    return False


def nearest_gpu(text: str) -> str | None:
    """A "did you mean" answer for an unknown GPU: a known key, name or family of the same model series and
    number (or one typo of it), the closest spelled; None rather than another model ("RTX 2080 Ti" never
    suggests "RTX 5090 D", "NVIDIA Foo" suggests nothing)."""
    wanted = _model(text)
    if wanted is None:
        return None
    choices = [g.key for g in gpus()] + [s for g in gpus() for s in g.smi_names] + list(_families())
    fitting = []
    for choice in dict.fromkeys(choices):
        got = _model(choice)
        if got is not None and got[0] == wanted[0] and _digits_typo(got[1], wanted[1]):
            fitting.append(choice)
    return nearest(text, fitting) or (
        max(fitting, key=lambda c: difflib.SequenceMatcher(None, text.casefold(), c.casefold()).ratio())
        if fitting
        else None
    )


_lookup_gpu = gpu  # verdict() has a parameter named ``gpu``


@dataclass(frozen=True, kw_only=True)
class ArchFamily:
    """GPUs of compute capability ``cc_min`` … ``cc_max`` (an ``[[arch]]`` row of gpus.toml): the first driver
    that drives them at all, and, for an architecture whose support ended, its last driver branch (R580) and
    last CUDA toolkit major (``12.x``).
    """

    name: str
    cc_min: tuple[int, int]
    cc_max: tuple[int, int]
    first_toolkit: str
    first_driver: DriverVersion
    first_driver_source: str
    source: str
    last_branch: int | None = None
    last_toolkit: str | None = None  # "12.x"

    def covers(self, cc: str) -> bool:
        return self.cc_min <= _parse_cc(cc) <= self.cc_max

    @property
    def last_cuda_major(self) -> int | None:
        """12 for ``12.x``: no CUDA toolkit of a newer major targets these GPUs."""
        return None if self.last_toolkit is None else int(self.last_toolkit.split(".")[0])


@functools.cache
def arch_families() -> tuple[ArchFamily, ...]:
    """Every GPU architecture row of ``gpus.toml`` (``[[arch]]``), Kepler … Blackwell."""
    name = "gpus.toml"
    out: list[ArchFamily] = []
    for row in _rows(name, "arch"):
        arch = _field(name, "arch", row, "name", str)
        bounds = []
        for key in ("cc_min", "cc_max"):
            cc = _field(name, "arch", row, key, str)
            if not re.match(r"^\d{1,2}\.\d$", cc):
                raise DataError(f"imagesmith/data/{name}: [[arch]] {arch}: {key} {cc!r} is not M.m")
            bounds.append(_parse_cc(cc))
        if bounds[0] > bounds[1]:
            raise DataError(f"imagesmith/data/{name}: [[arch]] {arch}: cc_min is above cc_max")
        if any(a.cc_min <= bounds[1] and bounds[0] <= a.cc_max for a in out):
            raise DataError(
                f"imagesmith/data/{name}: [[arch]] {arch}: its compute capabilities overlap a row above"
            )
        first_source = _field(name, "arch", row, "first_driver_source", str)
        if not first_source.strip():
            raise DataError(f"imagesmith/data/{name}: [[arch]] {arch}: empty `first_driver_source`")
        last_branch = row.get("last_branch")
        last_toolkit = row.get("last_toolkit")
        if (last_branch is None) != (last_toolkit is None) or (
            last_branch is not None
            and (not isinstance(last_branch, int) or not re.fullmatch(r"\d{1,2}\.x", str(last_toolkit)))
        ):
            raise DataError(
                f"imagesmith/data/{name}: [[arch]] {arch}: `last_branch` (an integer such as 580) and "
                '`last_toolkit` ("12.x") go together'
            )
        if last_branch is not None and last_branch not in _branches():
            raise DataError(
                f"imagesmith/data/{name}: [[arch]] {arch}: last_branch {last_branch} has no [[branch]] row "
                "in imagesmith/data/cuda.toml"
            )
        out.append(
            ArchFamily(
                name=arch,
                cc_min=bounds[0],
                cc_max=bounds[1],
                first_toolkit=_field(name, "arch", row, "first_toolkit", str),
                first_driver=parse_driver(_field(name, "arch", row, "first_driver", str)),
                first_driver_source=first_source,
                source=row["source"],
                last_branch=last_branch,
                last_toolkit=last_toolkit,
            )
        )
    return tuple(out)


def _arch_of(cc: str) -> ArchFamily | None:
    try:
        return next((a for a in arch_families() if a.covers(cc)), None)
    except ConfigError:  # a compute capability that is no M.m: no architecture
        return None


def gpu_arch(g: Gpu | str) -> ArchFamily | None:
    """The architecture row of *g* (H100 → Hopper), or None for a compute capability no row covers."""
    model = g if isinstance(g, Gpu) else _lookup_gpu(g)
    return _arch_of(model.cc)


def gpu_last_branch(g: Gpu | str) -> ArchFamily | None:
    """The architecture row capping *g*'s driver branch (V100 → Volta, R580), or None."""
    arch = gpu_arch(g)
    return arch if arch is not None and arch.last_branch is not None else None


def gpu_min_driver(g: Gpu | str) -> tuple[DriverVersion, str] | None:
    """(the first driver that drives *g* at all, where that comes from): the GPU row's own ``min_driver``, or
    for a model not in the table (ad hoc, from nvidia-smi's compute_cap) its architecture's first driver."""
    model = g if isinstance(g, Gpu) else _lookup_gpu(g)
    if model.min_driver is not None:
        return model.min_driver, model.min_driver_source
    arch = _arch_of(model.cc)
    if arch is None:
        return None
    return arch.first_driver, f"{arch.name}: {arch.first_driver_source}"


def gpu_warnings(g: Gpu | str) -> tuple[str, ...]:
    """Warnings about the GPU model itself: its last driver branch caps the CUDA it can ever run."""
    model = g if isinstance(g, Gpu) else _lookup_gpu(g)
    out: list[str] = []
    if model.vgpu:
        out.append(
            f"{model.vgpu} is a vGPU profile: a slice of a physical {model.name} ({model.sm}) shared through "
            "NVIDIA vGPU; judged as that GPU. The guest driver must be the one paired with the host's vGPU "
            "manager, and a slice has less memory and compute than the whole board"
        )
    if model.adhoc:
        out.append(
            f"{model.name} is not in imagesmith's GPU table (imagesmith/data/gpus.toml): judged only by the "
            f"compute capability nvidia-smi reported ({model.cc}, {model.sm}); add the model there for "
            "checked data"
        )
    arch = gpu_last_branch(model)
    if arch is not None:
        out.append(
            f"{model.name} ({arch.name}, {model.sm}): R{arch.last_branch} is NVIDIA's last driver branch for "
            f"{arch.name} GPUs and CUDA {arch.last_toolkit} their last CUDA toolkit: no newer driver or CUDA "
            "toolkit will run on it"
        )
    return tuple(out)


# ------------------------------------------------------------------------------------------------------------
# arch coverage


@dataclass(frozen=True, kw_only=True)
class ArchCoverage:
    """How a wheel's compiled architectures cover a GPU. ``kernel``: the arch used (``sm_86``,
    ``compute_120``).
    """

    kind: Literal["native", "binary-compatible", "ptx", "none"]
    detail: str
    kernel: str | None = None


def _parse_arch(entry: str) -> tuple[int, int, bool, bool]:
    match = _ARCH_RE.match(entry.strip())
    if match is None:
        raise ConfigError(
            f"{entry!r} is not a TORCH_CUDA_ARCH_LIST entry",
            hint="entries look like 8.0, 8.6 or 12.0+PTX",
        )
    major, minor, specific, ptx = match.groups()
    return int(major), int(minor), bool(specific), bool(ptx)


def _parse_cc(cc: str) -> tuple[int, int]:
    match = re.match(r"^\s*(?:sm_)?(\d{1,2})\.?(\d)\s*$", cc)
    if match is None:
        raise ConfigError(f"{cc!r} is not a compute capability", hint="write it as M.m, e.g. 8.0 or 12.0")
    return int(match.group(1)), int(match.group(2))


def torch_arch_names(arch_list: Sequence[str]) -> list[str]:
    """What ``torch.cuda.get_arch_list()`` lists for a TORCH_CUDA_ARCH_LIST: ``sm_XY`` each, ``compute_XY``
    for PTX.
    """
    sms, ptx = [], []
    for entry in arch_list:
        major, minor, specific, has_ptx = _parse_arch(entry)
        sms.append(f"sm_{major}{minor}{'a' if specific else ''}")
        if has_ptx:
            ptx.append(f"compute_{major}{minor}")
    return sms + ptx


def arch_coverage(arch_list: Sequence[str], cc: str) -> ArchCoverage:
    """Coverage of a GPU of compute capability *cc* (``"8.9"``) by a wheel built for *arch_list*.

    SASS for the same M.m → native; SASS for M.n, n < m → binary-compatible (the newest such is used); PTX for
    any ≤ M.m → ptx (JIT-compiled by the driver at first start, needs a driver ≥ the wheel's toolkit); else
    none, with torch's own wording. Arch-specific targets (``9.0a``) count only for exactly that GPU.
    """
    major, minor = _parse_cc(cc)
    sm = f"sm_{major}{minor}"
    parsed = [_parse_arch(e) for e in arch_list]
    if any(m == major and n == minor for m, n, _, _ in parsed):
        return ArchCoverage(kind="native", detail=f"the wheel carries native SASS for {sm}", kernel=sm)
    lower = sorted({n for m, n, specific, _ in parsed if m == major and n < minor and not specific})
    if lower:
        used = f"sm_{major}{lower[-1]}"
        return ArchCoverage(
            kind="binary-compatible",
            detail=f"no {sm} SASS in the wheel; the GPU runs its {used} SASS "
            f"(same major {major}, lower minor: binary-compatible)",
            kernel=used,
        )
    ptx = sorted((m, n) for m, n, _, has_ptx in parsed if has_ptx and (m, n) <= (major, minor))
    if ptx:
        used = f"compute_{ptx[-1][0]}{ptx[-1][1]}"
        return ArchCoverage(
            kind="ptx",
            detail=f"no SASS usable on {sm}; the driver JIT-compiles the wheel's {used} PTX: slow first "
            "start (minutes; cached in ~/.nv/ComputeCache, raise CUDA_CACHE_MAXSIZE to keep it) and the "
            "driver must be at least as new as the wheel's CUDA toolkit",
            kernel=used,
        )
    names = " ".join(torch_arch_names(arch_list))
    return ArchCoverage(
        kind="none",
        detail=f"{sm} is not compatible with the current PyTorch installation. "
        f"The current PyTorch install supports CUDA capabilities {names}.",
    )


# ------------------------------------------------------------------------------------------------------------
# verdicts


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """Whether torch *variant* runs on *gpu* with *driver*, how (``mode``) and why (``reasons``, in words a
    user acts on).

    ``blockers`` is the subset of ``reasons`` that makes the verdict ``none`` (empty when compatible);
    ``needs_driver`` is the lowest driver that would make it compatible when only the driver is in the way
    (None otherwise, e.g. when the wheel has no kernel for the GPU).
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


class _VerdictIds(TypedDict):
    driver: str
    gpu: str
    torch: str
    cuda: str
    variant: str


def _first_covering(cc: str, *, newest: bool = False, since: str | None = None) -> str | None:
    """The first (or *newest*) torch release+variant with SASS for *cc*; with *since*: the first from that
    release on."""
    releases = reversed(torch_releases()) if newest else iter(torch_releases())
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
    if floor is not None and drv < floor[0]:
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
    rel = torch_release(torch)
    vname, xy = normalize_cuda(cuda)
    base = _VerdictIds(driver=str(drv), gpu=g.key, torch=rel.version, cuda=xy, variant=vname)
    max_cuda = _max_cuda(drv)
    supports = f"driver {drv} supports CUDA ≤ {max_cuda}" if max_cuda else f"driver {drv} predates CUDA 11.0"

    var = rel.variants.get(vname)
    if var is None:
        others = [r.version for r in torch_releases() if vname in r.variants]
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
        **base,
    )


# ------------------------------------------------------------------------------------------------------------
# OS bases and default source pins (what `imagesmith init` scaffolds)


@dataclass(frozen=True, kw_only=True)
class OsBase:
    """An OS base image and the Python it ships as ``python3``."""

    os: str
    image: str
    python: str
    source: str
    devel_images: tuple[tuple[str, str], ...] = ()

    def devel_image(self, cuda: str) -> str | None:
        return dict(self.devel_images).get(cuda)


@functools.cache
def os_bases() -> tuple[OsBase, ...]:
    """Every row of ``bases.toml``, in file order."""
    name = "bases.toml"
    return tuple(
        OsBase(
            os=_field(name, "base", row, "os", str),
            image=_field(name, "base", row, "image", str),
            python=_field(name, "base", row, "python", str),
            source=row["source"],
            devel_images=tuple(
                sorted((str(k), str(v)) for k, v in dict(row.get("devel_images", {})).items())
            ),
        )
        for row in _rows(name, "base")
    )


@functools.cache
def default_source_pin(name: str) -> Mapping[str, str]:
    """The packaged default pin of source archive *name* (``nccl_tests``): version, commit, sha256."""
    table = _load("sources.toml").get(name)
    if not isinstance(table, dict) or not all(
        isinstance(table.get(k), str) for k in ("version", "commit", "sha256")
    ):
        raise DataError(
            f"imagesmith/data/sources.toml: no complete [{name}] pin (version, commit, sha256)",
            hint="reinstall imagesmith",
        )
    return MappingProxyType({k: str(v) for k, v in table.items()})


@dataclass(frozen=True, kw_only=True)
class OsFamily:
    """How a family of base images installs system packages (``os_families.toml``)."""

    name: str
    os_prefixes: tuple[str, ...]
    packages: Mapping[str, str]
    source: str

    def package_names(self, logical: Sequence[str]) -> list[str]:
        """The family's package names for imagesmith's logical names (an empty name: nothing to install)."""
        missing = [n for n in logical if n not in self.packages]
        if missing:
            raise DataError(
                f"imagesmith/data/os_families.toml: family {self.name} has no package for {missing}"
            )
        return [self.packages[n] for n in logical if self.packages[n]]


@functools.cache
def os_families() -> tuple[OsFamily, ...]:
    name = "os_families.toml"
    return tuple(
        OsFamily(
            name=_field(name, "family", row, "name", str),
            os_prefixes=tuple(str(p) for p in _field(name, "family", row, "os_prefixes", list)),
            packages=MappingProxyType(
                {str(k): str(v) for k, v in _field(name, "family", row, "packages", dict).items()}
            ),
            source=row["source"],
        )
        for row in _rows(name, "family")
    )


def os_family(os_tag: str) -> OsFamily | None:
    """The family of a base's ``os`` tag (``ubuntu22.04`` → apt), or None when imagesmith knows none."""
    return next((f for f in os_families() if any(os_tag.startswith(p) for p in f.os_prefixes)), None)


# ------------------------------------------------------------------------------------------------------------
# distributions' CUDA toolkits (nccl_tests.toolkit = "distro")


@dataclass(frozen=True, kw_only=True)
class DistroToolkit:
    """A base OS release's own ``nvidia-cuda-toolkit`` (``toolkits.toml``)."""

    os: str
    release: str
    component: str
    cuda: str
    version: str
    max_arch: int
    host_cxx: str
    toolkit_package: str
    nvvm_package: str
    dev_package: str
    #: installed with the builder's make/g++ (apt-get install, small, header-only): what the -dev package's
    #: CUDA headers include but the distribution packages apart (CCCL's libcu++-dev: trixie's CUDA 12.4
    #: cuda_fp16.h includes <nv/target>)
    header_packages: tuple[str, ...]
    verified: bool
    source: str

    def serves(self, cuda: str) -> bool:
        """Whether a cell of CUDA *cuda* may use it: the toolkit's CUDA is no newer than the cell's."""
        return _vkey(self.cuda) <= _vkey(cuda)


@functools.cache
def distro_toolkits() -> tuple[DistroToolkit, ...]:
    name, table = "toolkits.toml", "distro"
    out: list[DistroToolkit] = []
    for row in _rows(name, table):

        def text(key: str, row: Mapping[str, Any] = row) -> str:
            return str(_field(name, table, row, key, str))

        cuda, arch = text("cuda"), text("max_arch")
        if not _CUDA_XY_RE.match(cuda) or not arch.isdigit():
            raise DataError(
                f"imagesmith/data/{name}: [[{table}]] {row.get('os')}: cuda {cuda!r} / max_arch {arch!r} "
                "must look like 11.8 / 90"
            )
        out.append(
            DistroToolkit(
                os=text("os"),
                release=text("release"),
                component=text("component"),
                cuda=cuda,
                version=text("version"),
                max_arch=int(arch),
                host_cxx=text("host_cxx"),
                toolkit_package=text("toolkit_package"),
                nvvm_package=text("nvvm_package"),
                dev_package=text("dev_package"),
                header_packages=_header_packages(name, table, row),
                verified=bool(_field(name, table, row, "verified", bool)),
                source=row["source"],
            )
        )
    return tuple(out)


def _header_packages(name: str, table: str, row: Mapping[str, Any]) -> tuple[str, ...]:
    value = row.get("header_packages", [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise DataError(
            f"imagesmith/data/{name}: [[{table}]] {row.get('os')}: `header_packages` must be a list of "
            f"package names, got {value!r}"
        )
    return tuple(value)


def distro_toolkit(os_tag: str) -> DistroToolkit | None:
    """The CUDA toolkit the base OS *os_tag* (``debian12``) carries, or None when its release has none."""
    return next((t for t in distro_toolkits() if t.os == os_tag), None)
