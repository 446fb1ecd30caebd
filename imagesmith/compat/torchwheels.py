"""PyTorch releases, their CUDA variants and the CUDA runtime each wheel ships."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from imagesmith.compat.drivers import (
    normalize_cuda,
)
from imagesmith.compat.tables import (
    TABLES,
    DataError,
    _field,
    _rows,
    nearest,
)
from imagesmith.errors import ConfigError

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


_ARCH_RE = re.compile(r"^([0-9]{1,2})\.([0-9])(a|f)?(\+PTX)?$")


@functools.cache
def torch_releases() -> tuple[TorchRelease, ...]:
    """Every torch release in the data, oldest first."""
    name = "torch.toml"
    data = TABLES.load(name)
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
