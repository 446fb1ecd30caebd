"""A draft row of one torch release from what the index says: the pins of each wheel's ``METADATA``
(:class:`Pins`), the Python range of its wheels, torchvision's and torchaudio's companions (:class:`Draft`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from email.parser import HeaderParser
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet

from imagesmith import compat
from imagesmith.fatbin import FatbinReport
from imagesmith.refresh.pypi import LINUX_X86, DistFile, Source

# ------------------------------------------------------------------------------------------------------------
# drafts


@dataclass
class Pins:
    """What a torch wheel's Requires-Dist pins for Linux x86_64."""

    cuda: str | None = None  # "12.8"
    cuda_pin: str | None = None  # "nvidia-cuda-runtime-cu12==12.8.90"
    nccl: str | None = None
    cudnn: str | None = None
    torch: SpecifierSet | None = None  # torchvision / torchaudio: their torch requirement
    requires_python: str | None = None


def parse_metadata(text: str) -> Pins:
    """The pins of one METADATA file (Linux x86_64 markers)."""
    msg = HeaderParser().parsestr(text)
    pins = Pins(requires_python=msg.get("Requires-Python"))
    for line in msg.get_all("Requires-Dist") or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({**LINUX_X86, "extra": ""}):
            continue
        name = req.name.lower().replace("_", "-")
        exact = next((s.version for s in req.specifier if s.operator == "=="), None)
        if name == "torch":
            pins.torch = req.specifier
        elif re.fullmatch(r"nvidia-nccl-cu[0-9]+", name) and exact:
            pins.nccl = exact
        elif re.fullmatch(r"nvidia-cudnn-cu[0-9]+", name) and exact:
            pins.cudnn = exact
        elif _is_cuda_runtime(name) and exact and (pins.cuda_pin is None or name == "cuda-toolkit"):
            pins.cuda = ".".join(exact.split(".")[:2])
            pins.cuda_pin = f"{req.name}=={exact}"
    return pins


def _is_cuda_runtime(name: str) -> bool:
    """The packages whose ``==`` pin says which CUDA a torch wheel was built for (12.x: the runtime; 13.x: the
    ``cuda-toolkit`` metapackage)."""
    return name in ("cuda-toolkit", "nvidia-cuda-runtime") or bool(
        re.fullmatch(r"nvidia-cuda-runtime-cu[0-9]+", name)
    )


def python_range(wheels: Sequence[DistFile]) -> str | None:
    """``>=3.10,<3.15`` from the cp tags of a release's Linux x86_64 wheels."""
    minors = sorted({cp[1] for w in wheels if (cp := w.cpython)})
    if not minors:
        return None
    return f">=3.{minors[0]},<3.{minors[-1] + 1}"


@dataclass
class Draft:
    """One torch release as PyPI shows it."""

    version: str
    wheel: DistFile
    python: str | None
    pins: Pins
    arch: FatbinReport | None = None
    torchvision: tuple[str, DistFile, SpecifierSet | None] | None = None
    torchaudio: tuple[str, DistFile, SpecifierSet | None] | None = None
    #: the paired torchvision's Requires-Python (0.26 …: ``>=3.10,!=3.14.1``)
    torchvision_python: str | None = None

    @property
    def variant(self) -> str | None:
        return "cu" + self.pins.cuda.replace(".", "") if self.pins.cuda else None


def _final(files: Sequence[DistFile]) -> dict[str, list[DistFile]]:
    """Final releases → their Linux x86_64 wheels (the highest build tag per file tag)."""
    by: dict[str, dict[frozenset[Any], DistFile]] = {}
    for f in files:
        v = f.version
        if v.is_prerelease or v.is_devrelease or v.local or not f.linux_x86:
            continue
        slot = by.setdefault(str(v), {})
        old = slot.get(f.tags)
        if old is None or f.build > old.build:
            slot[f.tags] = f
    return {v: list(s.values()) for v, s in by.items()}


def _pick_wheel(wheels: Sequence[DistFile]) -> DistFile:
    """The wheel to read: cp312 when there is one (mid-range), else the newest CPython, else any."""
    cps = [w for w in wheels if w.cpython and not any(t.abi.endswith("t") for t in w.tags)]
    for w in cps:
        if w.cpython == (3, 12):
            return w
    if cps:
        return max(cps, key=lambda w: w.cpython or (0, 0))
    return wheels[0]


def _companion(
    source: Source, project: str, torch: str, torch_upload: str, wanted: str | None
) -> tuple[str, DistFile, SpecifierSet | None] | None:
    """torchvision / torchaudio for *torch*: *wanted* (the data's value) when given, else the release that
    pins ``torch==`` it, else the first one uploaded on or after it whose requirement admits it."""
    releases = _final(source.files(project))
    if wanted is not None:
        wheels = releases.get(wanted)
        if not wheels:
            return None
        wheel = _pick_wheel(wheels)
        return wanted, wheel, parse_metadata(source.metadata(wheel)).torch
    day = torch_upload[:10]
    window = sorted(
        (v for v, ws in releases.items() if min(w.upload_time for w in ws)[:10] >= day),
        key=lambda v: min(w.upload_time for w in releases[v]),
    )[:4]
    admits = None
    for v in window:
        wheel = _pick_wheel(releases[v])
        spec = parse_metadata(source.metadata(wheel)).torch
        if spec is not None and any(s.operator == "==" and s.version == torch for s in spec):
            return v, wheel, spec
        if admits is None and spec is not None and spec.contains(torch):
            admits = (v, wheel, spec)
    return admits


def draft(
    source: Source,
    version: str,
    wheels: Sequence[DistFile],
    *,
    arch: bool = True,
    data: compat.TorchRelease | None = None,
) -> Draft:
    wheel = _pick_wheel(wheels)
    pins = parse_metadata(source.metadata(wheel))
    d = Draft(version=version, wheel=wheel, python=python_range(wheels), pins=pins)
    if arch and pins.cuda:
        d.arch = source.fatbin(wheel)
    upload = min(w.upload_time for w in wheels)
    d.torchvision = _companion(source, "torchvision", version, upload, data.torchvision if data else None)
    if d.torchvision is not None:
        d.torchvision_python = parse_metadata(source.metadata(d.torchvision[1])).requires_python
    d.torchaudio = _companion(
        source, "torchaudio", version, upload, data.torchaudio if data and data.torchaudio else None
    )
    return d
