"""The diff of drafts against ``data/torch.toml``: one :class:`Row` a field, the releases asked for
(:func:`parse_releases`) and the whole run (:func:`run` → :class:`Result`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from imagesmith import compat
from imagesmith.errors import ConfigError
from imagesmith.refresh.drafts import Draft, _final, draft
from imagesmith.refresh.pypi import DistFile, Source

#: exit status of ``imagesmith refresh-compat`` when PyPI differs from the data or has releases it lacks
EXIT_DIFFERENCES = 11


# ------------------------------------------------------------------------------------------------------------
# the diff


@dataclass(frozen=True)
class Row:
    """One compared field. ``status``: match, differs, new, not-checked, not-on-pypi."""

    release: str
    variant: str | None
    field: str
    data: str | None
    pypi: str | None
    status: str
    source: str = ""
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class Result:
    rows: list[Row] = field(default_factory=list)
    drafts: dict[str, Draft] = field(default_factory=dict)
    new: list[str] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return any(r.status in ("differs", "new") for r in self.rows)

    @property
    def exit_code(self) -> int:
        return EXIT_DIFFERENCES if self.differs else 0


def _same_arch(a: Sequence[str], b: Sequence[str]) -> bool:
    def key(x: str) -> tuple[float, str]:
        return float(x.split("+")[0].rstrip("af")), x

    return sorted(a, key=key) == sorted(b, key=key)


def _companion_row(
    rel: str, name: str, data: str | None, found: tuple[str, DistFile, SpecifierSet | None] | None
) -> Row:
    if found is None:
        return Row(rel, None, name, data, None, "differs" if data else "match", note=f"no {name} on PyPI")
    version, wheel, spec = found
    pin = f"{version} (torch{spec})" if spec is not None else version
    if data is None:
        return Row(rel, None, name, None, pin, "new", wheel.url)
    exact = spec is not None and any(s.operator == "==" and s.version == rel for s in spec)
    if spec is not None and not spec.contains(rel):
        return Row(
            rel, None, name, data, pin, "differs", wheel.url, note=f"{name} {version} does not admit {rel}"
        )
    if spec is None:
        note = "its METADATA has no torch requirement"
    else:
        note = "" if exact else f"requirement admits torch {rel} without pinning it"
    return Row(rel, None, name, data, pin, "match", wheel.url, note=note)


def _excluded(spec: SpecifierSet | str | None) -> list[str]:
    """The exact Pythons a Requires-Python excludes (``!=3.14.1``): what ``torchvision_python`` records."""
    if spec is None:
        return []
    try:
        parsed = spec if isinstance(spec, SpecifierSet) else SpecifierSet(spec)
    except InvalidSpecifier:
        return [str(spec)]
    return sorted(sp.version for sp in parsed if sp.operator == "!=")


def _torchvision_python_row(version: str, data: SpecifierSet | None, d: Draft, *, new: bool = False) -> Row:
    """The paired torchvision's Requires-Python exclusions against ``torchvision_python`` (a person edits it:
    ``--write`` leaves this field alone)."""
    have = str(data) if data is not None else None
    if d.torchvision is None or d.torchvision_python is None:
        return Row(version, None, "torchvision_python", have, None, "not-checked", note="no Requires-Python")
    url = d.torchvision[1].url
    note = f"torchvision {d.torchvision[0]} Requires-Python"
    if _excluded(data) == _excluded(d.torchvision_python):
        return Row(version, None, "torchvision_python", have, d.torchvision_python, "match", url, note)
    status = "new" if new else "differs"
    return Row(version, None, "torchvision_python", have, d.torchvision_python, status, url, note)


def compare(data: compat.TorchRelease | None, d: Draft | None, version: str) -> list[Row]:
    """The rows for one release."""
    if d is None:
        return [
            Row(version, None, "release", version, None, "not-on-pypi", note="no Linux x86_64 wheel on PyPI")
        ]
    url = d.wheel.url
    arch = d.arch.arch_list() if d.arch else None
    arch_note = ("also: " + ", ".join(d.arch.extras())) if d.arch and d.arch.extras() else ""
    if data is None:
        rows = [
            Row(version, None, "python", None, d.python, "new", url),
            Row(version, None, "pypi_default", None, d.variant, "new", url),
            Row(version, d.variant, "cuda", None, d.pins.cuda, "new", url, note=d.pins.cuda_pin or ""),
            Row(version, d.variant, "nccl", None, d.pins.nccl, "new", url),
            Row(version, d.variant, "cudnn", None, d.pins.cudnn, "new", url),
            Row(version, d.variant, "arch_list", None, _fmt(arch), "new", url, note=arch_note),
            _companion_row(version, "torchvision", None, d.torchvision),
            _torchvision_python_row(version, None, d, new=True),
            _companion_row(version, "torchaudio", None, d.torchaudio),
        ]
        return rows

    def row(variant: str | None, name: str, have: Any, got: Any, note: str = "") -> Row:
        if got is None:
            return Row(
                version, variant, name, _fmt(have), None, "not-checked", url, note or "not in the metadata"
            )
        same = _same_arch(have, got) if name == "arch_list" else str(have) == str(got)
        if name == "python":
            same = SpecifierSet(str(have)) == SpecifierSet(str(got))
        return Row(version, variant, name, _fmt(have), _fmt(got), "match" if same else "differs", url, note)

    rows = [
        row(None, "python", _spec(data.python), d.python),
        row(None, "pypi_default", data.pypi_default, d.variant),
    ]
    variant = data.variants.get(d.variant or "")
    if variant is None:
        rows.append(
            Row(
                version,
                d.variant,
                "variant",
                None,
                d.variant,
                "differs",
                url,
                note="the data has no such variant",
            )
        )
    else:
        note = d.pins.cuda_pin or ""
        rows += [
            row(variant.name, "cuda", variant.cuda, d.pins.cuda, note),
            row(variant.name, "nccl", variant.nccl, d.pins.nccl),
            row(variant.name, "cudnn", variant.cudnn, d.pins.cudnn),
            row(
                variant.name, "arch_list", list(variant.arch_list), arch, arch_note if d.arch else "--no-arch"
            ),
        ]
    rows += [
        _companion_row(version, "torchvision", data.torchvision, d.torchvision),
        _torchvision_python_row(version, data.torchvision_python, d),
        _companion_row(version, "torchaudio", data.torchaudio, d.torchaudio),
    ]
    for other in data.variants:
        if other != d.variant:
            rows.append(
                Row(version, other, "variant", other, None, "not-checked", note="not on PyPI, not checked")
            )
    return rows


def _spec(spec: SpecifierSet) -> str:
    """``>=3.10,<3.15`` (lower bound first, as the data writes it)."""
    return ",".join(sorted((str(s) for s in spec), key=lambda s: (not s.startswith(">"), s)))


def _fmt(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, list | tuple):
        return ", ".join(value)
    return str(value)


def parse_releases(text: str | None, default_from: str) -> tuple[Version, Version | None]:
    """``2.10-2.15`` → (2.10, 2.15); ``2.12`` → that minor; ``2.10-`` → 2.10 and later; None →
    *default_from* and later."""
    spec = text or f"{default_from}-"
    low, dash, high = spec.partition("-")
    try:
        lo = Version(low.strip())
        hi = Version(high.strip()) if dash and high.strip() else (None if dash else lo)
    except InvalidVersion:
        raise ConfigError(
            f"--releases {text}: not a range", hint="give MINOR[-MINOR] such as 2.10-2.15, 2.12 or 2.10-"
        ) from None
    return lo, hi


def _in(version: str, lo: Version, hi: Version | None) -> bool:
    v = Version(version)
    minor = Version(f"{v.major}.{v.minor}")
    return minor >= Version(f"{lo.major}.{lo.minor}") and (
        hi is None or minor <= Version(f"{hi.major}.{hi.minor}")
    )


def run(
    source: Source,
    releases: str | None = None,
    *,
    arch: bool = True,
    progress: Callable[[str], None] | None = None,
) -> Result:
    """Read PyPI for the selected releases and compare with the data."""
    known = {r.version: r for r in compat.torch_releases()}
    newest = max((Version(v) for v in known), default=Version("2.0"))
    lo, hi = parse_releases(releases, f"{newest.major}.{newest.minor}")
    on_pypi = _final(source.files("torch"))
    versions = sorted({v for v in [*known, *on_pypi] if _in(v, lo, hi)}, key=Version)
    if not versions:
        raise ConfigError(
            f"--releases {releases}: no torch release in that range",
            hint=f"the data holds {min(known, key=Version)} … {max(known, key=Version)}",
        )
    result = Result()
    for version in versions:
        wheels = on_pypi.get(version)
        if progress:
            progress(f"torch {version}: " + ("reading PyPI" if wheels else "not on PyPI"))
        d = draft(source, version, wheels, arch=arch, data=known.get(version)) if wheels else None
        if d is not None:
            result.drafts[version] = d
            if version not in known:
                result.new.append(version)
        result.rows += compare(known.get(version), d, version)
    return result
