"""The layer plan of a cell (pure): which pinned wheels get a layer of their own, and in which order.

A torch image's wheels are most of its bytes (≈ 2.8 GB compressed for torch 2.11 cu130), and consecutive torch
releases of one CUDA variant pin many identical nvidia-* wheels. One ``pip install -r requirements.txt`` puts
them all in one layer that every image stores, pushes and pulls whole; the plan instead gives each large
wheel (:data:`MIN_LAYER_BYTES` or more by the lock folder's ``wheel-sizes.toml``,
:mod:`imagesmith.wheelsizes`) its own layer, installed with ``pip install --no-deps`` against its exact pin,
and the small rest one layer after them. A wheel of unknown size (no row: a ``+cu118`` build only its
variant's index serves, or a project whose sizes were never recorded) is kept apart only when it is of a
family that is large (:func:`likely_large`: the CUDA and NCCL wheels, torch, triton, or a local ``+variant``
build); any other unsized wheel joins the small rest, so an unsized lock still gets a handful of layers, not
one per wheel.

Order (stable, so cells that share wheels share the chain of layers that BuildKit caches):

1. CUDA libraries (``nvidia-*``, ``cuda-*``) — pinned alike by several torch releases of one variant;
2. NCCL (``nvidia-nccl-*``) — changes more often than the maths libraries;
3. torch and the other large wheels (triton, …) — new with every release;
4. the rest, one layer.

Within a group the wheel pinned by more locks of the project (same Python) comes first, then by name.
A layer's content is the same bytes in every cell that installs the same wheel into the same venv (the
template fixes mtimes and compiles .pyc by hash), so a registry stores it once and a host that pulled one
image downloads only the layers the next one adds (:func:`shared_layers`, :func:`estimate`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from imagesmith.wheelsizes import SizeTable

#: a wheel of this many compressed bytes or more gets a layer of its own (32 MiB: the CUDA maths libraries,
#: NCCL, cuDNN, triton and torch; not numpy, pillow or the small CUDA runtime pieces)
MIN_LAYER_BYTES: Final[int] = 32 * 1024 * 1024

#: the mtime every path a wheel layer writes gets, and SOURCE_DATE_EPOCH (.pyc by hash): 1980-01-01, the
#: earliest time a zip (a wheel) can hold
LAYER_EPOCH: Final[int] = 315532800

LayerKind = Literal["cuda", "nccl", "torch", "rest"]
KIND_ORDER: Final[dict[str, int]] = {"cuda": 0, "nccl": 1, "torch": 2, "rest": 3}
KIND_TITLE: Final[dict[str, str]] = {
    "cuda": "CUDA library",
    "nccl": "NCCL",
    "torch": "torch & co",
    "rest": "the small rest",
}


#: project names whose wheels are large whatever their version (the CUDA and NCCL wheels match by prefix)
LARGE_NAMES: Final[frozenset[str]] = frozenset({"torch", "triton", "pytorch-triton", "pytorch-triton-rocm"})


def likely_large(name: str, version: str) -> bool:
    """Whether a wheel of unknown size gets a layer of its own: the CUDA/NCCL libraries, torch and triton,
    and any local ``+variant`` build (served by a variant's own index, which sizes do not cover)."""
    return name.startswith(("nvidia-", "cuda-")) or name in LARGE_NAMES or "+" in version


def kind_of(name: str) -> LayerKind:
    """The group of a large wheel by its project name."""
    if name.startswith("nvidia-nccl"):
        return "nccl"
    if name.startswith(("nvidia-", "cuda-")):
        return "cuda"
    return "torch"


@dataclass(frozen=True, kw_only=True)
class WheelLayer:
    """One layer of the plan: one large wheel, or (kind ``rest``) every small one."""

    index: int
    kind: LayerKind
    pins: tuple[tuple[str, str], ...]
    #: compressed bytes of the pins whose size is recorded
    size: int
    #: pins without a recorded size
    unsized: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return "rest" if self.kind == "rest" else self.pins[0][0]

    @property
    def file(self) -> str:
        """The layer's requirements file in the build context (rendered from the lock's pins)."""
        return f"layers/{self.index:02d}-{self.name}.txt"

    @property
    def label(self) -> str:
        if self.kind == "rest":
            return f"rest ({len(self.pins)} wheels)"
        name, version = self.pins[0]
        return f"{name}=={version}"

    def key(self, python: str, base: str, venv: str) -> str:
        """What makes two cells' layers the same bytes: the pins, the Python, the base and the venv path."""
        text = "\n".join([base, venv, python, *(f"{n}=={v}" for n, v in self.pins)])
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, object]:
        return {
            "index": self.index,
            "kind": self.kind,
            "name": self.name,
            "file": self.file,
            "pins": [f"{n}=={v}" for n, v in self.pins],
            "size": self.size,
            "unsized": list(self.unsized),
        }


def popularity(locks: Iterable[tuple[str, Sequence[tuple[str, str]]]]) -> Counter[tuple[str, str, str]]:
    """How many locks pin each (python, name, version); *locks* are (python, pins) pairs."""
    count: Counter[tuple[str, str, str]] = Counter()
    for python, pins in locks:
        for name, version in pins:
            count[(python, name, version)] += 1
    return count


def plan_layers(
    pins: Sequence[tuple[str, str]],
    python: str,
    sizes: SizeTable,
    *,
    shared: Mapping[tuple[str, str, str], int] | None = None,
    min_bytes: int = MIN_LAYER_BYTES,
) -> tuple[WheelLayer, ...]:
    """The layers of a cell whose lock pins *pins* for CPython *python*; *shared* = :func:`popularity` of the
    project's locks (the order within a group)."""
    shared = shared or {}
    big: list[tuple[LayerKind, int, str, str, int | None]] = []
    small: list[tuple[str, str]] = []
    small_size = 0
    small_unsized: list[str] = []
    for name, version in pins:
        size = sizes.size(name, version, python)
        if size is None and not likely_large(name, version):
            small.append((name, version))
            small_unsized.append(f"{name}=={version}")
        elif size is not None and size < min_bytes:
            small.append((name, version))
            small_size += size
        else:
            big.append((kind_of(name), shared.get((python, name, version), 0), name, version, size))
    big.sort(key=lambda b: (KIND_ORDER[b[0]], -b[1], b[2]))
    layers = [
        WheelLayer(
            index=i,
            kind=kind,
            pins=((name, version),),
            size=size or 0,
            unsized=() if size is not None else (f"{name}=={version}",),
        )
        for i, (kind, _, name, version, size) in enumerate(big, 1)
    ]
    if small:
        layers.append(
            WheelLayer(
                index=len(layers) + 1,
                kind="rest",
                pins=tuple(sorted(small)),
                size=small_size,
                unsized=tuple(sorted(small_unsized)),
            )
        )
    return tuple(layers)


# ------------------------------------------------------------------------------------------------------------
# what cells share


@dataclass(frozen=True, kw_only=True)
class PlannedCell:
    """What the sharing analysis needs of a cell."""

    id: str
    python: str
    base: str
    venv: str
    layers: tuple[WheelLayer, ...]
    #: cells of one group (CUDA variant and Python) are the pairs a renter is likely to try one after another
    group: str = ""

    def single_key(self) -> str:
        """What makes two single-layer images' wheel layer the same bytes: every pin, Python, base, venv."""
        pins = sorted(p for layer in self.layers for p in layer.pins)
        whole = WheelLayer(index=0, kind="rest", pins=tuple(pins), size=0)
        return whole.key(self.python, self.base, self.venv)

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self.layers)

    def keys(self) -> dict[str, WheelLayer]:
        return {layer.key(self.python, self.base, self.venv): layer for layer in self.layers}


def shared_layers(cells: Sequence[PlannedCell]) -> dict[str, dict[int, list[str]]]:
    """For each cell, for each of its layers (by index), the other cells that have the same layer."""
    owners: dict[str, list[str]] = {}
    for c in cells:
        for key in c.keys():  # noqa: SIM118 - PlannedCell.keys() is a method, not a dict
            owners.setdefault(key, []).append(c.id)
    return {
        c.id: {layer.index: [o for o in owners[key] if o != c.id] for key, layer in c.keys().items()}
        for c in cells
    }


@dataclass(frozen=True, kw_only=True)
class PullFigures:
    """A renter who pulled cell A pulls cell B: wheel-layer bytes downloaded, over ordered pairs (A, B)."""

    pairs: int
    layered_mean: float
    single_mean: float
    layered_max: int

    @property
    def fraction(self) -> float:
        return self.layered_mean / self.single_mean if self.single_mean else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "pairs": self.pairs,
            "layered_mean_bytes": round(self.layered_mean),
            "single_layer_mean_bytes": round(self.single_mean),
            "fraction": round(self.fraction, 4),
            "layered_max_bytes": self.layered_max,
        }


@dataclass(frozen=True, kw_only=True)
class Estimate:
    """Wheel-layer bytes of a set of cells, from the plan (compressed wheel sizes stand for layer sizes)."""

    cells: int
    #: what the registry stores with today's single wheel layer (cells of one lock share it)
    single: int
    #: each distinct layer once (what a registry stores with the plan)
    registry: int
    #: over every ordered pair of cells with different locks
    second_pull: PullFigures
    #: over ordered pairs of the same group (CUDA variant and Python), different locks
    second_pull_group: PullFigures
    unsized: tuple[str, ...] = field(default=())

    @property
    def registry_fraction(self) -> float:
        return self.registry / self.single if self.single else 0.0

    def to_json(self) -> dict[str, object]:
        return {
            "cells": self.cells,
            "single_layer_registry_bytes": self.single,
            "registry_bytes": self.registry,
            "registry_fraction": round(self.registry_fraction, 4),
            "second_pull": self.second_pull.to_json(),
            "second_pull_same_variant_python": self.second_pull_group.to_json(),
            "unsized": list(self.unsized),
        }


def _pulls(pairs: Sequence[tuple[PlannedCell, PlannedCell]]) -> PullFigures:
    layered: list[int] = []
    single: list[int] = []
    for a, b in pairs:
        have = a.keys()
        layered.append(sum(layer.size for key, layer in b.keys().items() if key not in have))
        single.append(0 if a.single_key() == b.single_key() else b.size)
    n = len(pairs)
    return PullFigures(
        pairs=n,
        layered_mean=sum(layered) / n if n else 0.0,
        single_mean=sum(single) / n if n else 0.0,
        layered_max=max(layered, default=0),
    )


def estimate(cells: Sequence[PlannedCell]) -> Estimate:
    """Registry bytes and a renter's second-pull bytes of *cells*' wheel layers, with the plan and with one
    wheel layer per image (base, apt and venv layers are not in the plan and are left out on both sides).
    Wheels of unknown size count 0 and are listed."""
    distinct: dict[str, int] = {}
    for c in cells:
        for key, layer in c.keys().items():
            distinct[key] = layer.size
    single: dict[str, int] = {c.single_key(): c.size for c in cells}
    pairs = [(a, b) for a in cells for b in cells if a.single_key() != b.single_key()]
    return Estimate(
        cells=len(cells),
        single=sum(single.values()),
        registry=sum(distinct.values()),
        second_pull=_pulls(pairs),
        second_pull_group=_pulls([(a, b) for a, b in pairs if a.group == b.group]),
        unsized=tuple(sorted({u for c in cells for layer in c.layers for u in layer.unsized})),
    )


__all__ = [
    "LARGE_NAMES",
    "LAYER_EPOCH",
    "MIN_LAYER_BYTES",
    "Estimate",
    "PlannedCell",
    "PullFigures",
    "WheelLayer",
    "estimate",
    "kind_of",
    "likely_large",
    "plan_layers",
    "popularity",
    "shared_layers",
]
