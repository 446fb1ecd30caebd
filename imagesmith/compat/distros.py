"""OS bases, default source pins, OS families and the distributions' own CUDA toolkits."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from imagesmith.compat.drivers import (
    _CUDA_XY_RE,
    _vkey,
)
from imagesmith.compat.tables import (
    TABLES,
    DataError,
    _field,
    _rows,
)
from imagesmith.inputs import is_digits

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
    table = TABLES.load("sources.toml").get(name)
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
        if not _CUDA_XY_RE.match(cuda) or not is_digits(arch):
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
