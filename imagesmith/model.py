"""The vocabulary the stages share: a plan's cells and what they point at.

Plain frozen dataclasses with no behaviour beyond views of themselves: the planner (:mod:`imagesmith.plan`)
makes them; the templating (:mod:`imagesmith.templating`), rendering, build and release read them. Modules
that need a cell import it from here, so no stage has to import the stage that produced it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Final, Literal

from imagesmith.compat import DistroToolkit, MinDriver
from imagesmith.errors import NothingToDoError
from imagesmith.layerplan import WheelLayer
from imagesmith.matrix import select
from imagesmith.refs import Registry

VENV: Final[str] = "/opt/venv"
NCCL_TESTS_BIN: Final[str] = "/opt/nccl-tests/bin"

#: How a cell's nccl-tests builder stage gets make/g++/nvcc and NCCL (and a pip-devel cell its toolkit): the
#: nvidia/cuda devel image, the CUDA 13 pip wheels, the base OS release's own ``nvidia-cuda-toolkit``
#: (``imagesmith/data/toolkits.toml``), or the base image's own. Each value is a Dockerfile fragment
#: ``imagesmith/templates/toolkit/<value>.j2`` (tests/unit/test_fragments.py).
NcclToolkit = Literal["devel-image", "pip", "distro", "base"]
#: Where a cell's Python comes from: the base OS, a uv-managed build, or the base image's own environment
#: (``imagesmith/templates/python/<value>.j2``).
PythonSource = Literal["distro", "uv", "base"]


#: The plan's JSON wire format (``Cell.to_json``, ``imagesmith plan --json``, read by CI fan-out): flat keys
#: in this order, whatever record of the cell holds them (then ``hashed`` and ``image_refs``). The Python
#: type is grouped; the wire is not, so no consumer of the JSON changes (tests/unit/test_plan_wire.py).
WIRE_KEYS: Final[tuple[str, ...]] = (
    "matrix", "id", "tag", "flavor", "torch", "torchvision", "torchaudio", "torch_source", "variant", "cuda",
    "python", "python_full", "python_source", "uv", "python_install_mirror", "os", "base_image",
    "builder_image", "devel_image", "nccl_toolkit", "distro_toolkit", "toolkit_note", "index_url",
    "pypi_default", "pins", "builder_pins", "interactive_pins", "lock_file", "lock_verified", "lock_note",
    "nccl_version", "min_driver", "require_cuda", "gpus", "gpu_families", "gpu_names", "archs",
    "nvcc_gencode", "arch_coverage", "shm_min", "shm_min_bytes", "nccl_tests_version", "nccl_tests_commit",
    "nccl_tests_sha256", "nccl_tests_url", "nccl_tests_archive", "mirror_build", "mirror_runtime",
    "registries", "labels", "venv", "dockerfile", "context", "fingerprint", "layers", "base_digests",
    "base_local", "base_moves", "base_read", "hashed", "image_refs",
)  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class TorchStack:
    """The wheels a cell installs and where pip finds them: torch and its companions for one CUDA variant."""

    torch: str
    torchvision: str
    torchaudio: str | None
    torch_source: str
    variant: str
    cuda: str
    index_url: str | None
    pypi_default: bool
    nccl_version: str | None

    @property
    def nccl_before_2_19(self) -> bool:
        """The cell's NCCL (its nvidia-nccl pin) is older than 2.19: nccl-tests compiled against its headers
        takes a path that allocates no buffers unless run with ``-p 1`` (the builder stage patches it in)."""
        if not self.nccl_version:
            return False
        parts = [int(p) for p in re.findall(r"[0-9]+", self.nccl_version)[:2]]
        return len(parts) == 2 and (parts[0], parts[1]) < (2, 19)


@dataclass(frozen=True, kw_only=True)
class Runtime:
    """The cell's Python: which version, where it comes from, and the environment it is installed into."""

    python: str
    python_full: str | None
    python_source: PythonSource
    uv: str | None
    python_install_mirror: str
    venv: str


@dataclass(frozen=True, kw_only=True)
class Bases:
    """The images a cell is built from and what the project's base lock says about them."""

    os: str
    base_image: str
    builder_image: str
    devel_image: str | None
    #: (image, digest) of each base/builder/devel image the project's ``bases.toml`` pins (hashed into the
    #: fingerprint, rendered as ``name@digest``); empty without a base lock (bases go by name)
    base_digests: tuple[tuple[str, str], ...] = ()
    #: images of the cell the base lock marks ``origin = "local"`` (made on each machine: taken by name)
    base_local: tuple[str, ...] = ()
    #: (image, previous digest) of each pinned base whose lock entry records that it moved
    base_moves: tuple[tuple[str, str], ...] = ()
    #: (image, read date) of each pinned base
    base_read: tuple[tuple[str, str], ...] = ()

    def pinned(self, image: str) -> str:
        """*image* as the rendered Dockerfile names it: ``name@digest`` when the base lock pins it."""
        digest = dict(self.base_digests).get(image)
        return f"{image}@{digest}" if digest and "@" not in image else image

    def moved_notes(self) -> list[str]:
        """``base debian:bookworm moved sha256:a…→sha256:b… (read DATE)`` per moved base of the cell."""
        now, read = dict(self.base_digests), dict(self.base_read)
        return [
            f"base {image} moved {prev[:19]}…→{now[image][:19]}… (read {read.get(image, '?')})"
            for image, prev in self.base_moves
        ]


@dataclass(frozen=True, kw_only=True)
class Toolkit:
    """How the builder stage compiles nccl-tests: the toolkit it uses and the nccl-tests source it builds."""

    nccl_toolkit: NcclToolkit
    #: the distribution's toolkit the builder unpacks (nccl_toolkit "distro"), else None
    distro_toolkit: DistroToolkit | None = None
    #: one line: which toolkit builds nccl-tests and why, and any GPU that gets PTX only (plan --explain)
    toolkit_note: str = ""
    nccl_tests_version: str
    nccl_tests_commit: str
    nccl_tests_sha256: str
    nccl_tests_url: str
    nccl_tests_archive: str


@dataclass(frozen=True, kw_only=True)
class CellLock:
    """The cell's pins, read from its lock file."""

    pins: tuple[tuple[str, str], ...]
    builder_pins: tuple[tuple[str, str], ...]
    #: the interactive flavor's pins on top of ``pins`` (the lock's interactive section); empty for the others
    interactive_pins: tuple[tuple[str, str], ...] = ()
    #: (name, version, sha256s) of the lock's pins that carry ``--hash`` lines; rendered into the requirements
    #: files, which the build installs with ``pip --require-hashes``
    pin_hashes: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    lock_file: str
    lock_verified: bool
    lock_note: str | None

    @property
    def hashed(self) -> bool:
        """Every pin this cell installs (runtime, builder, interactive) has sha256 hashes in its lock."""
        have = {(n, v) for n, v, h in self.pin_hashes if h}
        return all(p in have for p in self.pins + self.builder_pins + self.interactive_pins)

    def hashes_of(self, name: str, version: str) -> tuple[str, ...]:
        return next((h for n, v, h in self.pin_hashes if (n, v) == (name, version)), ())


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """The hosts a cell is for: the driver it needs, the GPUs and architectures it is built for, /dev/shm."""

    min_driver: MinDriver
    require_cuda: str
    gpus: tuple[str, ...]
    gpu_families: tuple[str, ...]
    gpu_names: tuple[str, ...]
    archs: tuple[str, ...]
    nvcc_gencode: str
    arch_coverage: tuple[tuple[str, str], ...]
    shm_min: str
    shm_min_bytes: int


@dataclass(frozen=True, kw_only=True)
class Publish:
    """Where the cell's files go and its image is pushed: the build context, the mirrors the build installs
    from, the wheel layers, the fingerprint, the labels and the target registries."""

    mirror_build: str
    mirror_runtime: str
    registries: tuple[Registry, ...]
    labels: tuple[tuple[str, str], ...]
    dockerfile: str
    context: str
    fingerprint: str = ""
    #: the wheel layers of the final stage (:mod:`imagesmith.layerplan`); empty: torch comes from the base
    layers: tuple[WheelLayer, ...] = ()


CellRecord = TorchStack | Runtime | Bases | Toolkit | CellLock | Hardware | Publish


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One image to build. ``id`` doubles as the image tag.

    A cell is its identity (matrix, id, tag, flavor: what selects, names and tags it) and seven records: the
    torch ``stack``, the Python ``runtime``, the ``bases``, the nccl-tests ``toolkit``, the ``lock``, the
    ``hardware`` it is for and what it ``publish``-es. Only the Python type is grouped: :meth:`to_json` (the
    plan's wire format, ``imagesmith plan --json``) stays flat, keys and values as before the grouping
    (:data:`WIRE_KEYS`).
    """

    matrix: str
    id: str
    tag: str
    flavor: str
    stack: TorchStack
    runtime: Runtime
    bases: Bases
    toolkit: Toolkit
    lock: CellLock
    hardware: Hardware
    publish: Publish

    def records(self) -> tuple[CellRecord, ...]:
        return (self.stack, self.runtime, self.bases, self.toolkit, self.lock, self.hardware, self.publish)

    def leaves(self) -> list[tuple[str, Any]]:
        """(field name, value) of every field of the cell, identity first, then each record's own."""
        out: list[tuple[str, Any]] = [(n, getattr(self, n)) for n in ("matrix", "id", "tag", "flavor")]
        for record in self.records():
            out += [(f.name, getattr(record, f.name)) for f in fields(record)]
        return out

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"matrix": self.matrix, "id": self.id, "tag": self.tag, "flavor": self.flavor}
        for record in self.records():
            data.update(asdict(record))
        del data["pin_hashes"]  # thousands of digests: the rendered requirements files carry them
        data["hashed"] = self.lock.hashed
        lock, bases, pub = self.lock, self.bases, self.publish
        data["pins"] = dict(lock.pins)
        data["builder_pins"] = dict(lock.builder_pins)
        data["interactive_pins"] = dict(lock.interactive_pins)
        data["arch_coverage"] = dict(self.hardware.arch_coverage)
        data["labels"] = dict(pub.labels)
        data["base_digests"] = dict(bases.base_digests)
        data["base_moves"] = dict(bases.base_moves)
        data["base_read"] = dict(bases.base_read)
        data["layers"] = [layer.to_json() for layer in pub.layers]
        data["min_driver"] = {
            "full": str(self.hardware.min_driver.full),
            "minor_version": str(self.hardware.min_driver.minor_version),
        }
        data["registries"] = [
            {
                "name": r.name,
                "host": r.host,
                "image": r.image,
                "ref": r.ref(self.tag),
                "insecure": r.insecure,
                "kind": r.kind,
                "repository": r.repository,
            }
            for r in pub.registries
        ]
        data["image_refs"] = [r.ref(self.tag) for r in pub.registries]
        return {key: data[key] for key in WIRE_KEYS}


@dataclass(frozen=True, kw_only=True)
class Dropped:
    combination: str
    reason: str


@dataclass(frozen=True, kw_only=True)
class BuildPlan:
    matrix: str
    cells: tuple[Cell, ...]
    dropped: tuple[Dropped, ...] = field(default=())

    def cell(self, cell_id: str) -> Cell:
        for c in self.cells:
            if c.id == cell_id:
                return c
        raise KeyError(cell_id)

    def select(self, patterns: Sequence[str]) -> BuildPlan:
        """Cells whose id matches any glob (``{a,b}`` allowed). NothingToDoError when none does."""
        if not patterns:
            return self
        ids = set(select([c.id for c in self.cells], patterns))
        if not ids:
            raise NothingToDoError(
                f"--only {' '.join(patterns)} matched no cell of matrix {self.matrix!r}",
                hint="cells: " + ", ".join(c.id for c in self.cells),
            )
        return replace(self, cells=tuple(c for c in self.cells if c.id in ids))

    def to_json(self) -> dict[str, Any]:
        return {"matrix": self.matrix, "cells": [c.to_json() for c in self.cells]}


# ------------------------------------------------------------------------------------------------------------
