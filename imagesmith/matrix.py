"""Load and validate matrix files (``matrices/*.toml``) into a frozen :class:`Matrix`.

A matrix names what to build: target GPUs, torch versions and CUDA wheel variants, Python versions, the base
distro, flavors, mirror profiles, registries, the /dev/shm requirement, the nccl-tests pin and include/exclude
rules. The schema is documented in ``docs/matrix.md``.

Loading is pure apart from reading the matrix file and ``matrices/registries.toml``. Every problem is one
:class:`~imagesmith.errors.MatrixError` naming the file, the dotted key and the nearest valid value.
"""

from __future__ import annotations

import difflib
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

from packaging.version import InvalidVersion, Version

from imagesmith import compat, inputs, kinds, schema
from imagesmith.errors import ConfigError, MatrixError
from imagesmith.refs import Registry, expand_braces, matches

if TYPE_CHECKING:
    from imagesmith.project import Project

if sys.version_info >= (3, 11):
    pass
else:  # pragma: no cover - python 3.10
    pass

REGISTRIES_FILE: Final[str] = "registries.toml"

FLAVORS: Final[tuple[str, ...]] = schema.FLAVORS
TORCH_SOURCES: Final[tuple[str, ...]] = schema.TORCH_SOURCES
NCCL_TOOLKITS: Final[tuple[str, ...]] = schema.NCCL_TOOLKITS
REGISTRY_KINDS: Final[tuple[str, ...]] = schema.REGISTRY_KINDS


@dataclass(frozen=True, kw_only=True)
class MirrorProfile:
    """Package-mirror settings of one profile. Empty strings mean "tool default" (nothing written).

    ``apt_root`` is the mirror host root: apt's ``…/debian``, ``…/debian-security`` and ``…/ubuntu`` paths are
    kept and only the host part is replaced.
    """

    name: str
    pip_index_url: str
    apt_root: str
    conda_channel_alias: str
    source: str


#: Mirror profiles. ``none`` writes no configuration at all (tools keep their own defaults).
#: Sources: TUNA help pages (mirror-web ``_posts/help``), ustclug/mirrorhelp (docs/pypi.md, ubuntu.md,
#: anaconda.md), Aliyun developer mirror pages; see ../shared/reference/compat.md §6a (apt URL shapes of
#: TUNA/Aliyun are K there).
MIRROR_PROFILES: Final[Mapping[str, MirrorProfile]] = {
    "none": MirrorProfile(
        name="none",
        pip_index_url="",
        apt_root="",
        conda_channel_alias="",
        source="tool defaults",
    ),
    "tuna": MirrorProfile(
        name="tuna",
        pip_index_url="https://pypi.tuna.tsinghua.edu.cn/simple",
        apt_root="https://mirrors.tuna.tsinghua.edu.cn",
        conda_channel_alias="https://mirrors.tuna.tsinghua.edu.cn/anaconda",
        source="https://mirrors.tuna.tsinghua.edu.cn/help/pypi/ (pip: primary); apt/conda: TUNA help pages",
    ),
    "aliyun": MirrorProfile(
        name="aliyun",
        pip_index_url="https://mirrors.aliyun.com/pypi/simple/",
        apt_root="https://mirrors.aliyun.com",
        conda_channel_alias="https://mirrors.aliyun.com/anaconda",
        source="https://developer.aliyun.com/mirror/ (secondary copies; unverified here)",
    ),
    "ustc": MirrorProfile(
        name="ustc",
        pip_index_url="https://mirrors.ustc.edu.cn/pypi/simple",
        apt_root="https://mirrors.ustc.edu.cn",
        conda_channel_alias="https://mirrors.ustc.edu.cn/anaconda",
        source="ustclug/mirrorhelp docs/pypi.md, docs/ubuntu.md, docs/anaconda.md @062de3ff",
    ),
}


@dataclass(frozen=True, kw_only=True)
class Rule:
    """An ``[[exclude]]`` / ``[[include]]`` entry: globs over a cell's torch, variant, python and flavor."""

    torch: str = "*"
    variant: str = "*"
    python: str = "*"
    flavor: str = "*"
    reason: str = ""

    def matches(self, *, torch: str, variant: str, python: str, flavor: str) -> bool:
        return (
            matches(torch, self.torch)
            and matches(variant, self.variant)
            and matches(python, self.python)
            and matches(flavor, self.flavor)
        )


@dataclass(frozen=True, kw_only=True)
class BaseSpec:
    """The OS base: ``os`` is the tag component (``ubuntu22.04``), ``image`` the base image name."""

    os: str
    image: str
    python: str
    devel_images: tuple[tuple[str, str], ...] = ()
    venv: str | None = None
    #: an ``[[extra_bases]]`` entry builds only these variants / flavors on it (empty: all of the matrix's)
    variants: tuple[str, ...] = ()
    flavors: tuple[str, ...] = ()
    #: where the matrix says it, for errors and drop reasons: ``base`` or ``extra_bases[0]``
    key: str = "base"

    def devel_image(self, cuda: str) -> str | None:
        """The ``nvidia/cuda:<X.Y.Z>-devel-<os>`` image for CUDA *cuda* ("12.1"), if the matrix names one."""
        return dict(self.devel_images).get(cuda)

    def wants(self, variant: str, flavor: str) -> bool:
        """Whether cells of *variant* and *flavor* are built on this base."""
        return (not self.variants or variant in self.variants) and (
            not self.flavors or flavor in self.flavors
        )


@dataclass(frozen=True, kw_only=True)
class PythonSpec:
    """Python versions; those other than the distro's come from uv-managed downloads (``managed``)."""

    versions: tuple[str, ...]
    uv: str | None = None
    managed: tuple[tuple[str, str], ...] = ()
    install_mirror: str = ""

    def managed_version(self, minor: str) -> str | None:
        return dict(self.managed).get(minor)


@dataclass(frozen=True, kw_only=True)
class TorchSpec:
    versions: tuple[str, ...]
    variants: tuple[str, ...]
    source: Literal["wheels", "base"] = "wheels"


@dataclass(frozen=True, kw_only=True)
class NcclTestsPin:
    """nccl-tests at a commit; ``sha256`` is over the uncompressed ``git archive --format=tar`` stream."""

    version: str
    commit: str
    sha256: str
    url: str
    #: auto | base | pip | distro | devel-image (schema.NCCL_TOOLKITS; the planner picks per cell for auto)
    toolkit: Literal["auto", "base", "pip", "distro", "devel-image"] = "auto"

    @property
    def archive_name(self) -> str:
        """File name of the source archive inside the build context's ``sources/`` folder."""
        return f"nccl-tests-{self.commit}.tar"

    @property
    def prefix(self) -> str:
        return f"nccl-tests-{self.commit}"


@dataclass(frozen=True, kw_only=True)
class MirrorSpec:
    build: str = "none"
    runtime: str = "none"

    @property
    def build_profile(self) -> MirrorProfile:
        return MIRROR_PROFILES[self.build]

    @property
    def runtime_profile(self) -> MirrorProfile:
        return MIRROR_PROFILES[self.runtime]


@dataclass(frozen=True, kw_only=True)
class Matrix:
    name: str
    path: Path
    description: str
    gpus: tuple[compat.Gpu, ...]
    flavors: tuple[str, ...]
    shm_min: str
    shm_min_bytes: int
    torch: TorchSpec
    python: PythonSpec
    base: BaseSpec
    nccl_tests: NcclTestsPin
    mirror: MirrorSpec
    registries: tuple[Registry, ...]
    exclude: tuple[Rule, ...] = ()
    include: tuple[Rule, ...] = ()
    labels: tuple[tuple[str, str], ...] = field(default=())
    #: ``[[extra_bases]]``: more OS bases, each adding the cells of its variants and flavors (tagged: its os)
    extra_bases: tuple[BaseSpec, ...] = ()

    @property
    def bases(self) -> tuple[BaseSpec, ...]:
        """``base`` first, then the extra bases: the order the plan's cells come in."""
        return (self.base, *self.extra_bases)


# ------------------------------------------------------------------------------------------------------------
# selection helper shared with `build --only`


def select(ids: Iterable[str], patterns: Sequence[str]) -> list[str]:
    """The ids matching any of *patterns* (all when *patterns* is empty), in input order."""
    ids = list(ids)
    if not patterns:
        return ids
    return [i for i in ids if any(matches(i, p) for p in patterns)]


# ------------------------------------------------------------------------------------------------------------
# loading


#: label prefixes imagesmith writes itself (templates/Dockerfile.j2); a matrix may set only the ones below
_RESERVED_LABELS: Final[tuple[str, ...]] = ("io.imagesmith.", "org.opencontainers.image.")
_USER_IMAGESMITH_LABELS: Final[tuple[str, ...]] = ("io.imagesmith.ulimits",)
#: the ulimit names ``docker run --ulimit`` takes (the io.imagesmith.ulimits label names them)
ULIMIT_NAMES: Final[tuple[str, ...]] = (
    "core", "cpu", "data", "fsize", "locks", "memlock", "msgqueue", "nice", "nofile", "nproc", "rss",
    "rtprio", "rttime", "sigpending", "stack",
)  # fmt: skip
_ULIMIT = re.compile(r"([a-z]+)=(-1|[0-9]{1,19})(?::(-1|[0-9]{1,19}))?")
#: the most /dev/shm a matrix may ask for (it is host memory: 2 TiB is already more than rentals give)
SHM_MAX_BYTES: Final[int] = 2048 * 1024**3
_SHM_RE = re.compile(r"^([0-9]+)([kmgKMG]?)$", re.ASCII)
_SHM_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def parse_shm(text: str) -> int:
    """``"8g"`` → bytes. Raises ValueError on anything else."""
    m = _SHM_RE.match(text.strip())
    if m is None:
        raise ValueError(f"not a size: {text!r}")
    digits = m.group(1).lstrip("0") or "0"
    if len(digits) > 19:  # above any cap, and int() of thousands of digits raises: say "more than" at once
        return 2**64
    return int(digits) * _SHM_UNITS[m.group(2).lower()]


def load_matrix(
    name_or_path: str | Path, *, project: Project | None = None, registries_file: Path | None = None
) -> Matrix:
    """Load and validate one matrix of *project* (default: the project found from the working directory).

    ``NAME`` is ``<project matrices>/NAME.toml``; a path (with a slash or ending in ``.toml``) is read as
    it is.
    The registries come from *registries_file*, else a ``registries.toml`` beside the matrix file, else the
    project's registries file. Raises MatrixError with file, dotted key and nearest valid value.
    """
    if project is None:
        from imagesmith.project import discover

        text = str(name_or_path)
        near = Path(text) if "/" in text or text.endswith(".toml") else None
        project = discover(near=near)
    path = project.matrix_path(name_or_path)
    data = _read_toml(path)
    beside = path.parent / REGISTRIES_FILE
    reg_path = registries_file or (beside if beside.is_file() else project.registries_file)
    loader = _Loader(path, reg_path)
    loader.registries_order = (
        f"registries are looked up in --registries FILE when given, else {REGISTRIES_FILE} beside the matrix "
        f"({beside}), else the project's registries file ({project.registries_file}); "
        + (
            f"this matrix used {reg_path} (--registries)"
            if registries_file
            else f"this matrix used {reg_path}"
            + (" (beside the matrix)" if reg_path == beside else " (the project's)")
        )
    )
    return loader.matrix(data)


#: the longest image name (host/namespace/repository) registries take (the distribution reference grammar)
MAX_IMAGE_NAME: Final[int] = 255


def load_registries(path: Path) -> dict[str, Registry]:
    """Load ``registries.toml`` (``[registries.<name>]`` tables)."""
    data = _read_toml(path)
    return _Loader(path, path).registries(data)


def _read_toml(path: Path) -> dict[str, Any]:
    text = inputs.read_user_text(
        path,
        "",
        error=MatrixError,
        hint="give a readable UTF-8 TOML file, or fix the path that names it (imagesmith.toml [paths])",
    )
    schema.check_toml_text(text, str(path), error=MatrixError)
    return inputs.loads_toml(text, str(path), error=MatrixError)


_EXACT_RELEASE = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+", re.ASCII)


def _exact_torch(loader: Any, key: str, value: str, known: Sequence[str]) -> None:
    """A matrix names torch releases exactly as ``X.Y.Z``: no spaces, no line ends, no ``+local`` part (the
    variant comes from torch.variants) — such a value would otherwise reach cell ids and tags."""
    if isinstance(value, str) and _EXACT_RELEASE.fullmatch(value):
        return
    base = value.strip().split("+", 1)[0].strip() if isinstance(value, str) else ""
    why = (
        "has a +local part (the CUDA variant goes in torch.variants)"
        if isinstance(value, str) and "+" in value
        else "is not an exact release X.Y.Z (no spaces or other characters)"
    )
    raise loader.fail(
        key,
        f"{value!r} {why}",
        nearest=base if base in known else _nearest_version(base, known),
    )


def _nearest_word(value: str, choices: Sequence[str]) -> str | None:
    got = difflib.get_close_matches(value, list(choices), n=1, cutoff=0.0)
    return got[0] if got else None


def _nearest_version(value: str, choices: Sequence[str]) -> str | None:
    """compat's "did you mean" answer, else the closest spelling (always answers when there are choices)."""
    return compat.nearest(value, list(choices)) or _nearest_word(value, choices)


class _Loader(schema.Checker):
    """Walks the parsed TOML with the file path at hand so every error names file and dotted key."""

    def __init__(self, path: Path, registries_path: Path) -> None:
        super().__init__(str(path), MatrixError, docs="docs/matrix.md")
        self.path = path
        self.registries_path = registries_path
        #: how load_matrix chose registries_path (said in the errors about registries)
        self.registries_order = ""

    # -- sections
    # ----------------------------------------------------------------------------------------------

    def value_hint(self, spec: schema.Field, key: str) -> str | None:
        return None  # a value the schema refuses points at docs/matrix.md (see Checker.fail)

    def matrix(self, data: Mapping[str, Any]) -> Matrix:
        """Shape first (:data:`imagesmith.schema.MATRIX`, also its JSON Schema), then what needs the data
        tables and one key against another.
        """
        schema.MATRIX.check(data, checker=self)
        name = data.get("name", self.path.stem)
        if name != self.path.stem:
            raise self.fail("name", f"{name!r} differs from the file name", nearest=self.path.stem)
        if not re.fullmatch(schema.MATRIX_NAME, name):  # the file's name: it is rendered into the Dockerfile
            raise self.fail(
                "name",
                f"{name!r} (the file's name) is not a matrix name",
                hint="rename the file: letters, digits, '.', '_' and '-', starting with a letter or digit",
            )
        description = data.get("description", "")

        gpus = self.gpus(data["gpus"])
        flavors = tuple(data["flavors"])
        shm_text = data["shm_min"].strip()
        shm_bytes = parse_shm(shm_text)
        if shm_bytes < 64 * 1024**2:
            raise self.fail(
                "shm_min", f"{shm_text!r} is below Docker's 64m default, so it guards nothing", nearest="64m"
            )
        if shm_bytes > SHM_MAX_BYTES:
            raise self.fail(
                "shm_min",
                f"{shm_text!r} is more than {SHM_MAX_BYTES // 1024**3}g: no GPU host has that much memory "
                "to give /dev/shm",
                nearest="16g",
                hint="ask for what the DataLoader workers and NCCL need (8g–64g for 8-GPU training hosts)",
            )

        torch = self.torch_spec(data["torch"])
        base = self.base(data["base"], torch)
        python = self.python(data["python"], base)
        extra = self.extra_bases(data.get("extra_bases", []), base, torch, flavors)
        nccl = self.nccl(data["nccl_tests"])
        if torch.source == "base" and nccl.toolkit != "base":
            raise self.fail(
                "nccl_tests.toolkit",
                "torch.source = 'base' needs the base's own CUDA toolkit for the builder stage",
                nearest="base",
            )
        mirror = MirrorSpec(**data.get("mirror", {}))
        registries = self.matrix_registries(data.get("registries", []))
        labels = self.labels(data.get("labels", {}))
        exclude = self.rules(data.get("exclude", []), "exclude", torch, python, flavors, need_reason=True)
        include = self.rules(data.get("include", []), "include", torch, python, flavors, need_reason=False)
        return Matrix(
            name=name,
            path=self.path,
            description=description,
            gpus=gpus,
            flavors=flavors,
            shm_min=shm_text,
            shm_min_bytes=shm_bytes,
            torch=torch,
            python=python,
            base=base,
            nccl_tests=nccl,
            mirror=mirror,
            registries=registries,
            exclude=exclude,
            include=include,
            labels=labels,
            extra_bases=extra,
        )

    def gpus(self, names: Sequence[str]) -> tuple[compat.Gpu, ...]:
        out: list[compat.Gpu] = []
        for i, name in enumerate(names):
            try:
                found = compat.gpu(name)
            except ConfigError:
                near = compat.nearest_gpu(name)
                raise self.fail(f"gpus[{i}]", f"unknown GPU {name!r}", nearest=near) from None
            if found.vgpu:  # a vGPU profile name: the matrix targets the physical model
                found = compat.gpu(found.key)
            if any(g.key == found.key for g in out):
                raise self.fail(f"gpus[{i}]", f"{name!r} is {found.key!r}, which is listed already")
            if found.host_arch != "x86_64":
                raise self.fail(
                    f"gpus[{i}]",
                    f"{found.name} hosts are {found.host_arch} (linux/arm64 images only), and imagesmith "
                    "builds and locks linux/amd64 images (x86_64-manylinux_2_28): an image of this matrix "
                    "would not start there",
                    hint=f"remove {name!r} (its x86 sibling, e.g. b200 for gb200, runs these images)",
                )
            out.append(found)
        return tuple(out)

    def torch_spec(self, table: Mapping[str, Any]) -> TorchSpec:
        versions = tuple(table["versions"])
        known = [r.version for r in compat.torch_releases()]
        variants_seen: set[str] = set()
        for i, v in enumerate(versions):
            _exact_torch(self, f"torch.versions[{i}]", v, known)
            try:
                release = compat.torch_release(v)
            except ConfigError:
                raise self.fail(
                    f"torch.versions[{i}]", f"unknown torch version {v!r}", nearest=_nearest_version(v, known)
                ) from None
            variants_seen.update(release.variants)
        variants = tuple(table["variants"])
        for i, variant in enumerate(variants):
            if variant not in variants_seen:
                raise self.fail(
                    f"torch.variants[{i}]",
                    f"variant {variant!r} is published for none of torch {', '.join(versions)}",
                    nearest=_nearest_word(variant, sorted(variants_seen)),
                )
        source = table.get("source", "wheels")
        return TorchSpec(
            versions=versions, variants=variants, source="base" if source == "base" else "wheels"
        )

    def base(self, table: Mapping[str, Any], torch: TorchSpec, key: str = "base") -> BaseSpec:
        os_tag = table["os"]
        if compat.os_family(os_tag) is None:
            families = compat.os_families()
            raise self.fail(
                f"{key}.os",
                f"{os_tag!r} belongs to no OS family imagesmith can install packages on",
                nearest="debian12",
                hint="known: "
                + "; ".join(f"{f.name} ({', '.join(p + '*' for p in f.os_prefixes)})" for f in families)
                + " — a new family is a row in imagesmith/data/os_families.toml and a templates/os/ fragment",
            )
        self.known_base(table, key)
        devel: list[tuple[str, str]] = []
        for cuda, img in table.get("devel_images", {}).items():
            try:
                compat.min_driver(cuda)
            except ConfigError:
                known = sorted(
                    {r.xy for r in compat.cuda_releases()}, key=lambda v: tuple(map(int, v.split(".")))
                )
                raise self.fail(
                    f"{key}.devel_images.{cuda}",
                    f"unknown CUDA version {cuda!r}",
                    nearest=_nearest_version(cuda, known),
                ) from None
            devel.append((cuda, img))
        venv = table.get("venv")
        if torch.source == "base" and venv is None:
            raise self.fail(
                f"{key}.venv",
                "missing: torch.source = 'base' needs the base image's Python environment",
                nearest="/opt/venv",
            )
        return BaseSpec(
            os=os_tag,
            image=table["image"],
            python=table["python"],
            devel_images=tuple(sorted(devel)),
            venv=venv,
            key=key,
        )

    def extra_bases(
        self,
        entries: Sequence[Mapping[str, Any]],
        base: BaseSpec,
        torch: TorchSpec,
        flavors: Sequence[str],
    ) -> tuple[BaseSpec, ...]:
        """``[[extra_bases]]``: each a ``[base]`` table plus optional ``variants`` / ``flavors`` (of the
        matrix's own); no two bases may share an os tag (their cells would share ids and tags)."""
        out: list[BaseSpec] = []
        seen = {base.os: "base"}
        for i, entry in enumerate(entries):
            key = f"extra_bases[{i}]"
            if torch.source == "base":
                raise self.fail(
                    key,
                    "torch.source = 'base' takes torch from the one base image: another base has no torch",
                    hint="remove [[extra_bases]], or make a matrix of its own for the other base",
                )
            spec = self.base(entry, torch, key)
            if spec.os in seen:
                raise self.fail(
                    f"{key}.os",
                    f"{spec.os!r} is {seen[spec.os]}'s os too: the cells of both would get the same ids and "
                    "tags",
                    hint="give each base its own os tag, or remove one",
                )
            seen[spec.os] = key
            for name, given, pool in (
                ("variants", entry.get("variants", []), torch.variants),
                ("flavors", entry.get("flavors", []), flavors),
            ):
                for j, value in enumerate(given):
                    if value not in pool:
                        raise self.fail(
                            f"{key}.{name}[{j}]",
                            f"{value!r} is not one of the matrix's {name} ({', '.join(pool)})",
                            nearest=_nearest_word(value, list(pool)),
                        )
            out.append(
                replace(
                    spec,
                    variants=tuple(entry.get("variants", ())),
                    flavors=tuple(entry.get("flavors", ())),
                )
            )
        return tuple(out)

    def known_base(self, table: Mapping[str, Any], where: str = "base") -> None:
        """A base image imagesmith knows (``imagesmith/data/bases.toml``) must be given with its own OS tag
        and distro Python: ``image = "debian:bookworm"`` with ``os = "ubuntu22.04"`` or ``python = "3.12"``
        would tag the cells with another OS and install a Python the image does not have."""
        image = str(table["image"]).removeprefix("docker.io/").removeprefix("library/")
        row = next((b for b in compat.os_bases() if b.image == image), None)
        if row is None:
            return
        for key, want in (("os", row.os), ("python", row.python)):
            if table.get(key) != want:
                raise self.fail(
                    f"{where}.{key}",
                    f"{table.get(key)!r} is not {row.image}'s {'OS tag' if key == 'os' else 'python3'} "
                    f"({want!r}: {row.source})",
                    hint=f'{where}.{key} = "{want}" for image = "{table["image"]}", or another image '
                    "(imagesmith/data/bases.toml lists the ones imagesmith knows)",
                )

    def python(self, table: Mapping[str, Any], base: BaseSpec) -> PythonSpec:
        versions = tuple(table["versions"])
        uv = table.get("uv")
        if uv is not None:
            try:
                Version(uv)
            except InvalidVersion:
                raise self.fail("python.uv", f"{uv!r} is not a version", nearest="0.9.5") from None
        managed: list[tuple[str, str]] = []
        for minor, full in table.get("managed", {}).items():
            if not full.startswith(minor + "."):
                raise self.fail(
                    f"python.managed.{minor}", f"{full!r} is not a {minor}.x release", nearest=f"{minor}.0"
                )
            managed.append((minor, full))
        spec = PythonSpec(
            versions=versions,
            uv=uv,
            managed=tuple(sorted(managed)),
            install_mirror=table.get("install_mirror", ""),
        )
        for i, v in enumerate(versions):
            if v == base.python:
                continue
            if spec.managed_version(v) is None:
                raise self.fail(
                    f"python.versions[{i}]",
                    f"Python {v} is not the distro's ({base.python}) and has no uv-managed build",
                    nearest=base.python,
                    hint=f'add `managed = {{ "{v}" = "{v}.<patch>" }}` and `uv = "<version>"` to the '
                    "python table",
                )
            if uv is None:
                raise self.fail("python.uv", f"Python {v} is uv-managed, so pin uv", nearest="0.9.5")
        return spec

    def nccl(self, table: Mapping[str, Any]) -> NcclTestsPin:
        commit = table["commit"]
        return NcclTestsPin(
            version=table["version"],
            commit=commit,
            sha256=table["sha256"],
            url=table.get("url", f"https://github.com/NVIDIA/nccl-tests/archive/{commit}.tar.gz"),
            toolkit=table.get("toolkit", "auto"),
        )

    def labels(self, table: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """Image labels the matrix adds. They are rendered into the Dockerfile's LABEL instruction, so a key
        is a label name and a value one line of plain text (the schema's patterns); a matrix may not set the
        labels imagesmith writes itself.
        """
        for key in table:
            if key.startswith(_RESERVED_LABELS) and key not in _USER_IMAGESMITH_LABELS:
                raise self.fail(
                    f"labels.{key}",
                    f"{key!r} is a label imagesmith sets itself",
                    hint=f"use your own prefix (e.g. com.example.{key.rsplit('.', 1)[-1]}); of "
                    f"io.imagesmith.* a matrix may set only {', '.join(_USER_IMAGESMITH_LABELS)}",
                )
        ulimits = table.get("io.imagesmith.ulimits")
        if ulimits is not None:
            for item in ulimits.split(","):
                m = _ULIMIT.fullmatch(item.strip())
                if m is None or m.group(1) not in ULIMIT_NAMES:
                    raise self.fail(
                        'labels."io.imagesmith.ulimits"',
                        f"{item.strip()!r} is not NAME=SOFT[:HARD] of a ulimit docker knows (`imagesmith "
                        "validate IMAGE` starts the image with these: a bad one fails only there)",
                        nearest=None
                        if item.partition("=")[0].strip() in ULIMIT_NAMES
                        else _nearest_word(item.partition("=")[0].strip(), ULIMIT_NAMES),
                        hint="e.g. memlock=-1,stack=67108864 (names: " + ", ".join(ULIMIT_NAMES) + ")",
                    )
        return tuple(sorted(table.items()))

    def matrix_registries(self, names: Sequence[str]) -> tuple[Registry, ...]:
        if not names:
            return ()
        order = self.registries_order or f"registries are read from {self.registries_path}"
        if not self.registries_path.is_file():
            raise self.fail(
                "registries",
                f"{self.registries_path} {inputs.not_a_file(self.registries_path) or 'cannot be read'}",
                hint=f"{order}: create that file, put a {REGISTRIES_FILE} beside the matrix, or pass "
                "--registries FILE where the command has it (see docs/matrix.md)",
            )
        known = _Loader(self.registries_path, self.registries_path).registries(
            _read_toml(self.registries_path)
        )
        out = []
        for i, name in enumerate(names):
            if name not in known:
                raise self.fail(
                    f"registries[{i}]",
                    f"no registry {name!r} in {self.registries_path}",
                    nearest=compat.nearest(name, sorted(known)),
                    hint=f"{order}: add [registries.{name}] there, or fix the name (see docs/matrix.md)",
                )
            out.append(known[name])
        return tuple(out)

    def registries(self, data: Mapping[str, Any]) -> dict[str, Registry]:
        """``registries.toml``: its shape is :data:`imagesmith.schema.REGISTRIES` (also its JSON Schema)."""
        self._retired_kinds(data)
        schema.REGISTRIES.check(data, source=str(self.path), error=MatrixError)
        out: dict[str, Registry] = {}
        for name, entry in data["registries"].items():
            path = [entry["namespace"].strip("/"), entry.get("repository", "torch")]
            full = "/".join([entry["host"], *(p for p in path if p)])
            if len(full) > MAX_IMAGE_NAME:
                raise self.fail(
                    f"registries.{name}",
                    f"{full[:60]}… is {len(full)} characters: an image name (host/namespace/repository) "
                    f"holds at most {MAX_IMAGE_NAME}",
                    hint="shorten the namespace or the repository",
                )
            for j, glob in enumerate(entry.get("cells", [])):
                try:
                    expand_braces(glob)
                except ConfigError as exc:
                    raise self.fail(f"registries.{name}.cells[{j}]", exc.message, hint=exc.hint) from None
            out[name] = Registry(
                name=name,
                host=entry["host"],
                repository="/".join(p for p in path if p),
                kind=entry.get("kind", "generic"),
                insecure=entry.get("insecure", False),
                cells=tuple(entry.get("cells", ["*"])),
            )
        seen: dict[str, str] = {}
        for name, reg in out.items():
            where = f"{reg.host}/{reg.repository}"
            if where in seen:
                raise self.fail(
                    f"registries.{name}",
                    f"the same image name {where} as registries.{seen[where]}: every image would be pushed "
                    "and listed twice",
                    hint=f"remove one of [registries.{seen[where]}] and [registries.{name}], or give it "
                    "another namespace or repository",
                )
            seen[where] = name
        return out

    def _retired_kinds(self, data: Mapping[str, Any]) -> None:
        """A kind name that is no longer one (``acr``, split into Aliyun's and Azure's): one error naming the
        kind to write for that entry's host."""
        table = data.get("registries")
        for name, entry in table.items() if isinstance(table, Mapping) else ():
            kind = entry.get("kind") if isinstance(entry, Mapping) else None
            row = kinds.retired(kind) if isinstance(kind, str) else None
            if row is None:
                continue
            host = entry.get("host")
            new = kinds.successor(row.name, host) if isinstance(host, str) else None
            raise self.fail(
                f"registries.{name}.kind",
                f"{kind!r} is no longer a registry kind: it was split into "
                f"{' and '.join(map(repr, row.split))} ({row.since})",
                hint=f'kind = "{new}"'
                if new
                else f"kind = one of {', '.join(row.split)}, by the host's cloud",
            )

    def rules(
        self,
        entries: Sequence[Mapping[str, str]],
        key: str,
        torch: TorchSpec,
        python: PythonSpec,
        flavors: Sequence[str],
        *,
        need_reason: bool,
    ) -> tuple[Rule, ...]:
        out = []
        fields = ("torch", "variant", "python", "flavor", "reason")
        for i, entry in enumerate(entries):
            prefix = f"{key}[{i}]"
            rule = Rule(**{k: entry[k] for k in fields if k in entry})
            if need_reason:
                if not rule.reason.strip():
                    raise self.fail(
                        f"{prefix}.reason",
                        "is empty: an exclude says why the combination is not built",
                        hint='e.g. reason = "no cu118 wheel of torch 2.7 for Python 3.13"',
                    )
                if rule == Rule(reason=rule.reason):
                    given = [f'{k} = "*"' for k in fields[:4] if k in entry]
                    raise self.fail(
                        prefix,
                        "matches every cell"
                        + (f" ({', '.join(given)} matches anything)" if given else " (it names no field)"),
                        hint="narrow it: give at least one of torch/variant/python/flavor a value other than "
                        '"*", e.g. torch = "2.1.*"',
                    )
                for name, pool in (
                    ("torch", torch.versions),
                    ("variant", torch.variants),
                    ("python", python.versions),
                    ("flavor", flavors),
                ):
                    pattern = getattr(rule, name)
                    try:
                        expand_braces(pattern)
                    except ConfigError as exc:
                        raise self.fail(f"{prefix}.{name}", exc.message, hint=exc.hint) from None
                    if not any(matches(v, pattern) for v in pool):
                        raise self.fail(
                            f"{prefix}.{name}",
                            f"{pattern!r} matches none of {', '.join(pool)}",
                            nearest=_nearest_word(pattern, list(pool)),
                        )
            else:
                self.include_rule(rule, prefix)
            out.append(rule)
        return tuple(out)

    def include_rule(self, rule: Rule, prefix: str) -> None:
        """An include names one exact combination; check the torch release has the variant (the schema
        checked the python minor and the flavor).
        """
        known = [r.version for r in compat.torch_releases()]
        _exact_torch(self, f"{prefix}.torch", rule.torch, known)
        try:
            release = compat.torch_release(rule.torch)
        except ConfigError:
            raise self.fail(
                f"{prefix}.torch",
                f"unknown torch version {rule.torch!r}",
                nearest=_nearest_version(rule.torch, known),
            ) from None
        if rule.variant not in release.variants:
            raise self.fail(
                f"{prefix}.variant",
                f"torch {rule.torch} has no variant {rule.variant!r}",
                nearest=_nearest_word(rule.variant, sorted(release.variants)),
            )
