"""Exact transitive pins per (torch, variant, python): ``imagesmith lock`` and the packaged lock files.

A lock file ``imagesmith/data/locks/<torch>-<variant>-py<X.Y>.txt`` is a pip requirements file with every
package the image installs (torch, torchvision, torchaudio, their nvidia-*/triton/numpy closure, and
imagesmith's own runtime dependencies so the baked-in validation suite runs with nothing else installed), one
``name==version`` a line. A ``# --- builder ---`` section pins what the nccl-tests builder stage installs (the
NCCL wheel for its headers and, for CUDA 13, pip's nvcc matching torch's CUDA runtime). A
``# --- interactive ---`` section pins what the interactive flavor adds on top of the runtime pins
(JupyterLab, TensorBoard and whatever they need that the runtime pins do not already hold), resolved with
every runtime pin as a constraint: numpy, packaging, jinja2 … are the runtime image's versions.

Every pin carries the sha256 of each file the index publishes for it (``--hash=sha256:…`` continuation lines,
``uv pip compile --generate-hashes``); the rendered requirements files keep them and the image build installs
with ``pip --require-hashes``. A lock without them (``# unverified: …`` locks written by hand where the
variant's index cannot be reached) is refused by ``imagesmith build`` unless ``--allow-unhashed`` is given.
Constraints from ``imagesmith/data/lock_constraints.toml`` (e.g. sympy<1.13 for torch<2.4) bound what the
resolver may pick.

Header lines (``# key: value``) record the command, date and sources. ``# unverified: …`` marks a lock written
by hand from published metadata because the variant's index cannot be reached where it was made.

Reading locks is pure (packaged data). Only :func:`compile_lock` runs a subprocess (``uv pip compile``).
"""

from __future__ import annotations

import datetime as _dt
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Final

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from imagesmith import compat, inputs
from imagesmith.errors import ConfigError, ImagesmithError

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable

BUILDER_MARKER: Final[str] = "# --- builder ---"
INTERACTIVE_MARKER: Final[str] = "# --- interactive ---"
#: What the interactive flavor installs on top of the runtime pins (their closure is resolved per lock).
INTERACTIVE_PACKAGES: Final[tuple[str, ...]] = ("jupyterlab", "tensorboard")
PYTHON_PLATFORM: Final[str] = "x86_64-manylinux_2_28"

#: torch wheels before 2.4 were compiled against NumPy 1.x ("A module that was compiled using NumPy 1.x
#: cannot be run in NumPy 2.0"); PyTorch 2.4's release notes are the first to list NumPy 2 support. Pin
#: numpy<2 there.
NUMPY2_FROM: Final[Version] = Version("2.4")

#: Dependencies of the host CLI only, never imported by the suite baked into images: signing and verifying
#: attestations and the release index (imagesmith/signing.py, imported inside the commands that need it).
HOST_ONLY_DEPS: Final[tuple[str, ...]] = ("cryptography>=42",)

#: imagesmith's own runtime dependencies, installed into every image with the suite (kept in step with
#: pyproject.toml [project].dependencies less HOST_ONLY_DEPS; tests/unit/test_lock.py checks that).
IMAGESMITH_RUNTIME_DEPS: Final[tuple[str, ...]] = (
    "docker>=7.1",
    "jinja2>=3.1",
    "packaging>=23.2",
    "requests>=2.31",
    "typer>=0.29",
    "rich>=13.7",
    "tenacity>=8.2",
    "pytest>=8.0",
    "pytest-testinfra>=10.1",
    "tomli>=2.0; python_version < '3.11'",
)


class LockError(ImagesmithError):
    """A lock could not be resolved, or a lock file is malformed."""

    exit_code = 2


@dataclass(frozen=True, kw_only=True)
class LockKey:
    torch: str
    variant: str
    python: str

    @property
    def filename(self) -> str:
        return f"{self.torch}-{self.variant}-py{self.python}.txt"

    def __str__(self) -> str:
        return f"torch {self.torch} {self.variant} python {self.python}"


@dataclass(frozen=True, kw_only=True)
class Lock:
    key: LockKey
    path: Path
    pins: tuple[tuple[str, str], ...]
    builder_pins: tuple[tuple[str, str], ...]
    header: tuple[tuple[str, str], ...]
    #: the interactive flavor's pins on top of ``pins`` (empty: the lock has no interactive section yet)
    interactive_pins: tuple[tuple[str, str], ...] = ()
    #: (name, version, sha256 hashes) of every pin that carries ``--hash`` lines, in file order
    hashes: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def hashed(self) -> bool:
        """Every pin (runtime, builder, interactive) carries at least one sha256."""
        have = {(n, v) for n, v, h in self.hashes if h}
        return all(p in have for p in self.pins + self.builder_pins + self.interactive_pins)

    @property
    def verified(self) -> bool:
        return not any(k == "unverified" for k, _ in self.header)

    @property
    def unverified_reason(self) -> str | None:
        return next((v for k, v in self.header if k == "unverified"), None)

    def version(self, name: str) -> str | None:
        want = canonicalize_name(name)
        return next((v for n, v in self.pins if n == want), None)

    def builder_version(self, name: str) -> str | None:
        want = canonicalize_name(name)
        return next((v for n, v in self.builder_pins + self.pins if n == want), None)

    def requirements(self) -> str:
        """The runtime pins as a requirements file body."""
        return "".join(f"{n}=={v}\n" for n, v in self.pins)

    def builder_requirements(self) -> str:
        return "".join(f"{n}=={v}\n" for n, v in self.builder_pins)

    def interactive_version(self, name: str) -> str | None:
        want = canonicalize_name(name)
        return next((v for n, v in self.interactive_pins + self.pins if n == want), None)


def reference_locks() -> Traversable:
    """The lock files shipped with imagesmith (``imagesmith/data/locks``): the ones its own CI builds.
    ``imagesmith init`` seeds a new project's ``locks/`` from them; plans read only the project's locks.
    """
    return resources.files("imagesmith") / "data" / "locks"


def reference_lock_keys() -> list[LockKey]:
    """Every (torch, variant, python) the packaged reference locks cover."""
    out = []
    for entry in reference_locks().iterdir():
        m = _LOCK_NAME.match(entry.name)
        if m:
            out.append(LockKey(torch=m.group(1), variant=m.group(2), python=m.group(3)))
    return sorted(out, key=lambda k: (k.torch, k.variant, k.python))


def lock_keys_in(lock_dir: Path) -> list[LockKey]:
    """Every (torch, variant, python) with a lock file in *lock_dir* (a project's locks folder)."""
    if not lock_dir.is_dir():
        return []
    out = []
    for entry in lock_dir.iterdir():
        m = _LOCK_NAME.match(entry.name)
        if m and entry.is_file():
            out.append(LockKey(torch=m.group(1), variant=m.group(2), python=m.group(3)))
    return sorted(out, key=lambda k: (k.torch, k.variant, k.python))


_LOCK_NAME = re.compile(r"^(.+)-([a-z0-9]+)-py(3\.[0-9]+)\.txt$")


def lock_path(key: LockKey, lock_dir: Path) -> Path:
    return lock_dir / key.filename


_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")
_HASH = re.compile(r"^--hash=sha256:([0-9a-f]{64})\s*(\\)?\s*(#.*)?$")
_HEADER = re.compile(r"^#\s*([a-z][a-z -]*):\s?(.*)$")


@functools.lru_cache(maxsize=64)
def parse_lock(text: str, path: Path, key: LockKey) -> Lock:
    """Parse a lock file. Every non-comment line must be ``name==version`` (uv's ``# via`` lines are
    comments). Memoised (a plan reads every lock of the project for the layer plan's popularity; a Lock is
    frozen): the same text, path and key give the same Lock; an error is raised again each time.
    """
    pins: list[tuple[str, str]] = []
    builder: list[tuple[str, str]] = []
    interactive: list[tuple[str, str]] = []
    header: list[tuple[str, str]] = []
    hashes: dict[tuple[str, str], list[str]] = {}
    last: tuple[str, str] | None = None
    target = pins
    in_header = True
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if line.startswith("--hash="):
            h = _HASH.match(line)
            if h is None or last is None:
                raise LockError(
                    f"{path}:{lineno}: {line[:80]!r} is not a `--hash=sha256:<64 hex>` line of a pin",
                    hint=f"regenerate it: imagesmith lock --force (lock {key})",
                )
            hashes.setdefault(last, []).append(h.group(1))
            continue
        if line == BUILDER_MARKER:
            target = builder
            continue
        if line == INTERACTIVE_MARKER:
            target = interactive
            continue
        if not line or line.startswith("#"):
            m = _HEADER.match(line)
            if in_header and m:
                header.append((m.group(1).strip(), m.group(2).strip()))
            continue
        in_header = False
        m = _PIN.match(line)
        if m is None:
            raise LockError(
                f"{path}:{lineno}: {line!r} is not an exact `name==version` pin",
                hint=f"regenerate it: imagesmith lock (lock {key})",
            )
        last = (canonicalize_name(m.group(1)), m.group(3))
        target.append(last)
    if not pins:
        raise LockError(f"{path}: no pins", hint="regenerate it with `imagesmith lock`")
    _check_lock_names_its_key(path, key, header, pins)
    overlap = {n for n, _ in interactive} & {n for n, _ in pins}
    if overlap:
        raise LockError(
            f"{path}: the interactive section pins {', '.join(sorted(overlap))} again "
            "(the runtime pins hold it)",
            hint=f"regenerate it: imagesmith lock --force (lock {key})",
        )
    return Lock(
        key=key,
        path=path,
        pins=tuple(pins),
        builder_pins=tuple(builder),
        header=tuple(header),
        interactive_pins=tuple(interactive),
        hashes=tuple((n, v, tuple(h)) for (n, v), h in hashes.items()),
    )


def _check_lock_names_its_key(
    path: Path, key: LockKey, header: list[tuple[str, str]], pins: list[tuple[str, str]]
) -> None:
    """A lock file whose name says one torch and whose pins (or header) another would build a cell that
    claims torch X and installs torch Y: refused, naming both (a lock copied or renamed by hand)."""
    fix = f"regenerate it: imagesmith lock --force (lock {key}), or name the file after what it pins"
    said = next((v for k, v in header if k == "imagesmith lock"), None)
    # torch and variant: what the image installs (a lock of another Python may stand in, as its pins allow)
    if said is not None and key.torch != SUITE and said.split()[:3] != ["torch", key.torch, key.variant]:
        raise LockError(f"{path}: its header says `imagesmith lock: {said}`, its name {key}", hint=fix)
    torch = next((v for n, v in pins if n == "torch"), None)
    if torch is None or key.torch == SUITE:
        return
    public, _, local = torch.partition("+")
    if public != key.torch or (local and local != key.variant):
        raise LockError(
            f"{path}: pins torch=={torch}, but its name says torch {key.torch} {key.variant}",
            hint=fix,
        )


def read_lock(key: LockKey, lock_dir: Path) -> Lock | None:
    """The lock for *key* in *lock_dir* (a project's locks folder), or None when there is none."""
    path = lock_path(key, lock_dir)
    if not os.path.lexists(path):
        return None
    # a lock that is there but not a readable UTF-8 regular file (a folder, a FIFO, a dangling link, UTF-16)
    # is an error naming what it is: never "no lock" (the cell would be dropped, its dockerfiles removed)
    fix = f"make it a readable UTF-8 text file, or regenerate it: imagesmith lock --force (lock {key})"
    text = inputs.read_user_text(path, "", error=LockError, hint=fix)
    if text.startswith("\ufeff"):
        raise LockError(
            f"{path}: starts with a byte-order mark (U+FEFF)",
            hint="save it as UTF-8 without BOM, or regenerate it: imagesmith lock --force",
        )
    return _parsed(text, path, key)


@functools.lru_cache(maxsize=512)
def _parsed(text: str, path: Path, key: LockKey) -> Lock:
    """:func:`parse_lock`, once per (content, path, key): a plan reads every lock of the folder for the layer
    order, once per matrix (the cached plan of every matrix parsed the same files 200 times). Keyed by the
    text itself, so an edited file is parsed again; a Lock is immutable."""
    return parse_lock(text, path, key)


# ------------------------------------------------------------------------------------------------------------
# resolving


def needs_numpy1(torch: str) -> bool:
    return Version(torch).release[:2] < NUMPY2_FROM.release[:2]


SUITE: Final[str] = "suite"
CONSTRAINTS_FILE: Final[str] = "lock_constraints.toml"


@dataclass(frozen=True, kw_only=True)
class LockConstraint:
    """A bound the resolver gets for the torch releases *torch* matches
    (imagesmith/data/lock_constraints.toml)."""

    torch: SpecifierSet
    requirement: Requirement
    why: str

    def applies(self, torch: str) -> bool:
        return torch != SUITE and self.torch.contains(Version(torch), prereleases=True)


def lock_constraints(text: str | None = None) -> tuple[LockConstraint, ...]:
    """The rows of imagesmith/data/lock_constraints.toml (or of *text*), checked."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    where = f"imagesmith/data/{CONSTRAINTS_FILE}"
    if text is None:
        text = (resources.files("imagesmith") / "data" / CONSTRAINTS_FILE).read_text(encoding="utf-8")
    try:
        rows = tomllib.loads(text).get("constraint", [])
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{where}: invalid TOML: {exc}", hint="fix the file's syntax") from None
    out = []
    for i, row in enumerate(rows if isinstance(rows, list) else [rows], 1):
        try:
            spec = SpecifierSet(str(row["torch"]))
            req = Requirement(str(row["requirement"]))
            why = str(row["why"])
        except (KeyError, TypeError):
            raise LockError(
                f"{where}: constraint {i} lacks torch, requirement or why",
                hint='each [[constraint]] needs torch = "<2.4", requirement = "sympy<1.13", why = "…"',
            ) from None
        except (InvalidSpecifier, InvalidRequirement) as exc:
            raise LockError(
                f"{where}: constraint {i}: {exc}",
                hint='torch is a version specifier ("<2.4"), requirement a PEP 508 line ("sympy<1.13")',
            ) from None
        if not req.specifier or req.marker is not None or req.extras or req.url:
            raise LockError(
                f"{where}: constraint {i}: {row['requirement']!r} must be `name` plus a version bound only",
                hint='e.g. requirement = "sympy<1.13"',
            )
        out.append(LockConstraint(torch=spec, requirement=req, why=why))
    return tuple(out)


def constraints_for(torch: str) -> list[LockConstraint]:
    """The data constraints that bound the lock of torch release *torch*."""
    return [c for c in lock_constraints() if c.applies(torch)]


def lock_inputs(key: LockKey) -> list[str]:
    """Top-level requirements handed to the resolver for *key* (``suite``: imagesmith's own dependencies only,
    for cells whose base image already carries torch).
    """
    if key.torch == SUITE:
        return list(IMAGESMITH_RUNTIME_DEPS)
    release = compat.torch_release(key.torch)
    local = "" if key.variant == release.pypi_default else f"+{key.variant}"
    lines = [f"torch=={release.version}{local}", f"torchvision=={release.torchvision}{local}"]
    if release.torchaudio:  # 2.11.1 (torch 2.12+) is one py3-none wheel for every variant: no +cuXYZ
        lines.append(f"torchaudio=={release.torchaudio}{local if release.torchaudio_local else ''}")
    lines.append("numpy<2" if needs_numpy1(key.torch) else "numpy")
    lines.extend(IMAGESMITH_RUNTIME_DEPS)
    return lines


def builder_inputs(key: LockKey, lock: Lock) -> list[str]:
    """What the nccl-tests builder stage installs: the NCCL wheel (+ pip nvcc and CCCL for CUDA 13)."""
    release = compat.torch_release(key.torch)
    cuda = release.variants[key.variant].cuda
    major = cuda.split(".")[0]
    nccl_name = f"nvidia-nccl-cu{major}"
    nccl = lock.version(nccl_name)
    if nccl is None:
        raise LockError(
            f"{lock.path}: no {nccl_name} pin; torch {key.torch} {key.variant} should pull it in",
            hint=f"re-resolve it: imagesmith lock --force (lock {key})",
        )
    lines = [f"{nccl_name}=={nccl}"]
    if int(major) >= 13:
        toolkit = lock.version("cuda-toolkit")
        runtime = lock.version("nvidia-cuda-runtime")
        if toolkit is None or runtime is None:
            raise LockError(
                f"{lock.path}: CUDA 13 lock without cuda-toolkit / nvidia-cuda-runtime pins",
                hint=f"re-resolve it: imagesmith lock --force (lock {key})",
            )
        series = ".".join(runtime.split(".")[:2])
        lines += [
            f"cuda-toolkit[nvcc,cudart]=={toolkit}",
            f"nvidia-cuda-runtime=={runtime}",
            f"nvidia-cuda-nvcc=={series}.*",
            f"nvidia-cuda-crt=={series}.*",
            f"nvidia-nvvm=={series}.*",
            # CUDA 13's cuda_fp16.h includes <nv/target> (libcu++), shipped in the CCCL wheel
            f"nvidia-cuda-cccl=={series}.*",
        ]
    return lines


def _uv() -> str:
    found = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    if not Path(found).exists():
        raise LockError(
            "uv not found (imagesmith lock resolves pins with it)",
            hint="pip install 'imagesmith[lock]' (or, in a checkout, pip install -e '.[dev]')",
        )
    return found


def _compile(
    inputs: Sequence[str],
    key: LockKey,
    extra_index: str | None,
    constraints: Sequence[str] = (),
) -> tuple[str, list[str]]:
    with tempfile.TemporaryDirectory(prefix="imagesmith-lock-") as tmp:
        req = Path(tmp) / "requirements.in"
        req.write_text("\n".join(inputs) + "\n", encoding="utf-8")
        if constraints:
            (Path(tmp) / "constraints.txt").write_text("\n".join(constraints) + "\n", encoding="utf-8")
        cmd = [
            _uv(),
            "pip",
            "compile",
            "--quiet",
            "--no-header",
            "--python-version",
            key.python,
            "--python-platform",
            PYTHON_PLATFORM,
            "--no-config",
            "--annotation-style",
            "line",
            "--generate-hashes",
        ]
        shown = [
            "uv",
            "pip",
            "compile",
            "--generate-hashes",
            "--python-version",
            key.python,
            "--python-platform",
            PYTHON_PLATFORM,
        ]
        if extra_index:
            # uv searches --extra-index-url before the default index: the variant's index wins for every
            # package it carries (its +cuXXX wheels), the default index serves the rest. No index host is
            # written here.
            cmd += ["--extra-index-url", extra_index]
            shown += ["--extra-index-url", extra_index]
        if constraints:
            # a constraint only bounds a package the inputs pull in: torch's own pins are never fetched
            cmd += ["--constraint", "constraints.txt"]
            shown += ["--constraint", "constraints.txt"]
        cmd.append(req.name)
        shown.append("requirements.in")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=tmp)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-8:])
            raise LockError(
                f"cannot resolve {key}: uv pip compile failed:\n{tail}",
                hint="run `imagesmith lock` where the variant's wheel index is reachable",
            )
        return proc.stdout, shown


def _kept(pins: Sequence[tuple[str, str]], bounded: Sequence[LockConstraint]) -> list[str]:
    """*pins* as ``name==version`` constraints, leaving out a pin that a data constraint forbids (the
    resolver then picks an allowed version of it)."""
    out = []
    for name, version in pins:
        bad = [
            c
            for c in bounded
            if canonicalize_name(c.requirement.name) == name
            and not c.requirement.specifier.contains(version, prereleases=True)
        ]
        if not bad:
            out.append(f"{name}=={version}")
    return out


def compile_lock(
    key: LockKey, *, lock_dir: Path, today: _dt.date | None = None, keep: Lock | None = None
) -> Path:
    """Resolve *key* with ``uv pip compile --generate-hashes`` and write its lock file. Returns the path.

    *keep*: the lock's current version; its pins become constraints, so only what a data constraint forbids
    changes (``imagesmith lock --keep-versions``: hashes and new constraints without moving other versions).
    """
    path = lock_path(key, lock_dir)
    bounded = [] if key.torch == SUITE else constraints_for(key.torch)
    data = [str(c.requirement) for c in bounded]
    kept_runtime = _kept(keep.pins, bounded) if keep is not None else []
    kept_builder = _kept(keep.builder_pins, bounded) if keep is not None else []
    if key.torch == SUITE:
        extra, index = None, "default package index"
        inputs = lock_inputs(key)
        body, shown = _compile(inputs, key, None, constraints=data + kept_runtime)
        b_body, b_shown = "", ["(none: the base image carries the toolkit and NCCL)"]
    else:
        try:
            release = compat.torch_release(key.torch)
            variant = release.variants[key.variant]
        except (ConfigError, KeyError):
            raise LockError(
                f"torch {key.torch} has no variant {key.variant}",
                hint="see `imagesmith plan --explain` for the variants each torch release publishes",
            ) from None
        extra = None if key.variant == release.pypi_default else variant.index_url
        index = variant.index_url if extra else "default package index (PyPI's default variant)"
        inputs = lock_inputs(key)
        body, shown = _compile(inputs, key, extra, constraints=data + kept_runtime)
        b_body, b_shown = _compile(
            builder_inputs(key, parse_lock(body, path, key)), key, extra, constraints=data + kept_builder
        )
    date = (today or _dt.datetime.now(_dt.timezone.utc).date()).isoformat()
    header = [
        f"# imagesmith lock: {key}",
        f"# command: {' '.join(shown)}",
        f"# builder-command: {' '.join(b_shown)}",
        f"# date: {date}",
        f"# index: {index}",
        f"# sources: resolved by uv from the package index; inputs: {'; '.join(inputs)}",
    ]
    for c in bounded:
        header.append(f"# constraint: {c.requirement} for torch {c.torch} ({c.why})")
    if keep is not None:
        header.append(
            "# kept-versions: the previous lock's pins were constraints (imagesmith lock --keep-versions)"
        )
    header += ["# Generated by `imagesmith lock`; do not edit by hand.", ""]
    text = "\n".join(header) + body.rstrip("\n") + "\n\n" + BUILDER_MARKER + "\n" + b_body.rstrip("\n") + "\n"
    parse_lock(text, path, key)  # never write what we cannot read back
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _entries(body: str) -> list[tuple[str, str, list[str]]]:
    """uv's output as (name, version, lines): a pin line with its ``--hash`` and ``# via`` lines."""
    out: list[tuple[str, str, list[str]]] = []
    for raw in body.splitlines():
        m = _PIN.match(raw.strip())
        if m is not None and not raw.startswith((" ", "\t")):
            out.append((canonicalize_name(m.group(1)), m.group(3), [raw.rstrip()]))
        elif out and raw.strip():
            out[-1][2].append(raw.rstrip())
    return out


def interactive_section(body: str, lock: Lock) -> str:
    """The entries of uv's output (*body*, resolved with *lock*'s runtime pins as constraints) that the
    interactive flavor adds: every package the runtime pins do not hold. A runtime package at another version
    is an error (the constraints forbid it; this is the check that they held)."""
    runtime = dict(lock.pins)
    kept: list[str] = []
    for name, version, lines in _entries(body):
        if name in runtime:
            if runtime[name] != version:
                raise LockError(
                    f"{lock.path}: the interactive packages resolved {name}=={version}, "
                    f"the runtime pins {name}=={runtime[name]}",
                    hint="the runtime pins are constraints of that resolution: report this as a bug",
                )
            continue
        kept.extend(lines)
    return "\n".join(kept) + "\n"


def add_interactive(
    key: LockKey, *, lock_dir: Path, today: _dt.date | None = None, keep: Lock | None = None
) -> Path:
    """Resolve the interactive flavor's packages (:data:`INTERACTIVE_PACKAGES`) against *key*'s existing lock
    (every runtime pin a constraint) and write them as its interactive section, replacing an older one. The
    runtime and builder pins are left exactly as they are: the runtime and devel images do not change.
    *keep*: an earlier lock whose interactive pins are constraints too (their versions stay)."""
    path = lock_path(key, lock_dir)
    lock = read_lock(key, lock_dir)
    if lock is None:
        raise LockError(f"no lock {path} to add the interactive pins to", hint="run `imagesmith lock` first")
    inputs = list(INTERACTIVE_PACKAGES)
    runtime = {n for n, _ in lock.pins}
    earlier = [f"{n}=={v}" for n, v in keep.interactive_pins if n not in runtime] if keep is not None else []
    body, shown = _compile(inputs, key, None, constraints=[f"{n}=={v}" for n, v in lock.pins] + earlier)
    section = interactive_section(body, lock)
    old = path.read_text(encoding="utf-8")
    old = old.split("\n" + INTERACTIVE_MARKER + "\n", 1)[0].rstrip("\n") + "\n"
    lines = [ln for ln in old.splitlines() if not ln.startswith("# interactive-")]
    date = (today or _dt.datetime.now(_dt.timezone.utc).date()).isoformat()
    note = [
        f"# interactive-command: {' '.join(shown)} (constraints.txt: this lock's runtime pins)",
        f"# interactive-date: {date}",
        f"# interactive-inputs: {'; '.join(inputs)}",
    ]
    at = next((i for i, ln in enumerate(lines) if ln.startswith("# Generated by")), None)
    if at is None:
        at = next(i for i, ln in enumerate(lines) if not ln.startswith("#"))
    lines[at:at] = note
    text = "\n".join(lines) + "\n\n" + INTERACTIVE_MARKER + "\n" + section
    parse_lock(text, path, key)  # never write what we cannot read back
    path.write_text(text, encoding="utf-8")
    return path
