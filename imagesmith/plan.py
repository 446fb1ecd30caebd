"""The planner (pure): a :class:`~imagesmith.matrix.Matrix` → :class:`BuildPlan` of cells.

The cross product torch × variant × python × flavor (plus ``[[include]]`` entries) minus the impossible
combinations, each dropped with a reason (``imagesmith plan --explain``):

- the torch release publishes no wheel for that variant; - the Python version is outside the release's
supported range; - a target GPU's architecture is not covered by the variant's compiled arch list (arch
coverage ``none``); - the devel flavor of a CUDA 11/12 variant has no ``nvidia/cuda:<X.Y.Z>-devel-<os>``
image in ``[base].devel_images`` (CUDA 13 devel cells are the runtime image plus the pip nvcc wheels), or the
torch comes from the base image; - the interactive flavor of a base-torch matrix, or one whose lock has no
interactive section (JupyterLab, TensorBoard pins: ``imagesmith lock`` adds it); - an ``[[exclude]]`` rule
matches; - there is no lock file for (torch, variant, python): the plan never floats a version, so such a
cell is dropped with the command that creates the lock (``imagesmith lock``, run where the variant's index is
reachable).

Each cell carries its exact pins, min drivers, ``NVIDIA_REQUIRE_CUDA``, nccl-tests gencode and a content
fingerprint (sha256 over the rendered files, pins, source checksums and base image names).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from imagesmith import __version__, compat
from imagesmith.bases import BASES_FILE, BasesLock, own_digest, read_bases
from imagesmith.errors import ConfigError, MatrixError
from imagesmith.layerplan import plan_layers, popularity
from imagesmith.lock import Lock, LockError, LockKey, lock_keys_in, read_lock
from imagesmith.matrix import BaseSpec, Matrix, Rule
from imagesmith.model import (
    NCCL_TESTS_BIN,
    VENV,
    Bases,
    BuildPlan,
    Cell,
    CellLock,
    Dropped,
    Hardware,
    NcclToolkit,
    Publish,
    PythonSource,
    Runtime,
    Toolkit,
    TorchStack,
)
from imagesmith.refs import DOCKER_HUB, ImageRef
from imagesmith.templating import render_cell_files
from imagesmith.wheelsizes import SizeTable, read_sizes

if TYPE_CHECKING:
    from imagesmith.project import Project

#: Brand names used by NVIDIA's own nvidia/cuda images in NVIDIA_REQUIRE_CUDA (container-images/cuda dist/*).
REQUIRE_CUDA_BRANDS: Final[tuple[str, ...]] = (
    "tesla",
    "unknown",
    "nvidia",
    "nvidiartx",
    "geforce",
    "geforcertx",
    "quadro",
    "quadrortx",
    "titan",
    "titanrtx",
)


def cell_id(torch: str, variant: str, python: str, flavor: str, os_tag: str) -> str:
    return f"{torch}-{variant}-py{python}-{flavor}-{os_tag}"


def _branch(driver: str) -> int:
    return int(driver.split(".")[0])


def require_cuda(cuda: str) -> str:
    """``NVIDIA_REQUIRE_CUDA`` for an image whose CUDA libraries come from pip wheels (no cuda-compat
    package).

    Same shape as NVIDIA's nvidia/cuda images (``cuda>=X.Y`` or'ed with ``brand=…,driver>=B,driver<B+1``
    clauses), but the brand clauses list only the driver branches that run CUDA X.Y through minor-version
    compatibility: from the family's MVC floor up to (not including) the branch of X.Y's own toolkit driver.
    nvidia/cuda images also list older branches served by their forward-compat package, which these images do
    not carry.
    """
    need = compat.min_driver(cuda)
    full_branch = _branch(str(need.full))
    floor_branch = _branch(str(need.minor_version))
    major, minor = (int(x) for x in cuda.split("."))
    branches: set[int] = set()
    for m in range(0, minor):
        try:
            branches.add(_branch(str(compat.min_driver(f"{major}.{m}").full)))
        except ConfigError:
            continue  # no such toolkit release (e.g. 12.7)
    branches.add(floor_branch)
    clauses = [f"cuda>={cuda}"]
    for b in sorted(x for x in branches if floor_branch <= x < full_branch):
        clauses += [f"brand={brand},driver>={b},driver<{b + 1}" for brand in REQUIRE_CUDA_BRANDS]
    return " ".join(clauses)


def _arch_digits(cc: str) -> str:
    return cc.replace(".", "")


def nvcc_gencode(ccs: Iterable[str], max_arch: int | None = None) -> str:
    """SASS for each target arch plus PTX of the highest (JIT for a newer GPU of the same line).

    *max_arch*: the newest sm the toolkit's nvcc compiles (a distribution's older nvcc). Targets above it
    get no SASS; the PTX is then of ``compute_<max_arch>``, which the driver JIT-compiles for them at first
    launch.
    """
    archs = sorted({int(_arch_digits(c)) for c in ccs})
    native = [a for a in archs if max_arch is None or a <= max_arch]
    parts = [f"-gencode=arch=compute_{a},code=sm_{a}" for a in native]
    ptx = archs[-1] if max_arch is None or archs[-1] <= max_arch else max_arch
    parts.append(f"-gencode=arch=compute_{ptx},code=compute_{ptx}")
    return " ".join(parts)


def _distro_note(tk: compat.DistroToolkit, cuda: str, ccs: Iterable[str]) -> str:
    """plan --explain's line for a cell built with a distribution's toolkit."""
    origin = "Debian" if tk.os.startswith("debian") else "Ubuntu"
    note = (
        f"nccl-tests built with {origin} {tk.release}'s {tk.toolkit_package} {tk.version} "
        f"({tk.component}; CUDA {tk.cuda} <= the cell's {cuda}, so its static cudart runs on the cell's "
        f"minimum driver; builder = the cell's own base image, so its glibc is the final stage's)"
    )
    if not tk.verified:
        note += (
            f"; the {tk.release} row of imagesmith/data/toolkits.toml was read from the distribution's "
            "package pages, not checked with apt (should its builder stage fail, set nccl_tests.toolkit = "
            f"'devel-image' with \"{cuda}\" in base.devel_images, and correct the row)"
        )
    above = sorted({int(_arch_digits(c)) for c in ccs if int(_arch_digits(c)) > tk.max_arch})
    if above:
        note += (
            f"; nvcc {tk.cuda} compiles up to sm_{tk.max_arch}, so "
            + ", ".join(f"sm_{a}" for a in above)
            + f" get{'s' if len(above) == 1 else ''} compute_{tk.max_arch} PTX only, JIT-compiled by the "
            "driver at first launch (nccl-tests' own kernels only fill and check buffers; the collectives "
            "run in libnccl's kernels)"
        )
    return note


def _toolkit_fixes(base: BaseSpec, cuda: str) -> str:
    """How to give a CUDA < 13 cell a toolkit: both fixes, for drop reasons. Only the releases whose
    toolkit a cell of *cuda* may use are named (one no newer than *cuda*)."""
    fits = [t for t in compat.distro_toolkits() if t.serves(cuda) and t.os != base.os]
    devel = f'add "{cuda}" to {base.key}.devel_images (an nvidia/cuda:{cuda}.x-devel image you can pull)'
    if not fits:
        return (
            f"{devel}: no other release in imagesmith/data/toolkits.toml carries an nvidia-cuda-toolkit "
            f"no newer than CUDA {cuda}"
        )
    return (
        f"{devel}, or use a base whose release carries an nvidia-cuda-toolkit no newer than CUDA {cuda}: "
        + ", ".join(f"{base.key}.os = {t.os!r} ({t.release}: CUDA {t.cuda})" for t in fits)
    )


def _plain_os_image(image: str) -> str | None:
    """The OS repository (``debian``) when *image* is a plain OS image imagesmith scaffolds on (any tag of
    a ``bases.toml`` image's repository, through any registry's docker.io path), else None."""
    try:
        ref = ImageRef.parse(image)
    except ConfigError:
        return None
    plain = {ImageRef.parse(b.image).path for b in compat.os_bases()}
    return ref.path.removeprefix("library/") if ref.path in plain and ref.registry == DOCKER_HUB else None


def _own_toolkit(base: BaseSpec, cuda: str) -> str:
    """What the matrix's base release carries, for drop reasons: why its toolkit was not used, or that it
    would be (``toolkit = 'distro'``)."""
    tk = compat.distro_toolkit(base.os)
    if tk is None:
        return f"imagesmith/data/toolkits.toml names no nvidia-cuda-toolkit for {base.os}"
    if tk.serves(cuda):
        return (
            f"{base.os} ({tk.release}) carries CUDA {tk.cuda}, which nccl_tests.toolkit = 'distro' "
            "(or 'auto') uses"
        )
    return (
        f"{base.os} ({tk.release}) carries CUDA {tk.cuda}, newer than the cell's {cuda} (a static "
        "cudart of it would need a newer driver than the cell's minimum)"
    )


def _python_in_range(release: compat.TorchRelease, python: str) -> bool:
    return release.python.contains(f"{python}.0", prereleases=True)


# ------------------------------------------------------------------------------------------------------------
# planning


def _combinations(matrix: Matrix) -> list[tuple[str, str, str, str, bool]]:
    """(torch, variant, python, flavor, included) in a stable order: cross product, then includes."""
    out: list[tuple[str, str, str, str, bool]] = []
    for torch in matrix.torch.versions:
        for variant in matrix.torch.variants:
            for python in matrix.python.versions:
                for flavor in matrix.flavors:
                    out.append((torch, variant, python, flavor, False))
    seen = {c[:4] for c in out}
    for inc in matrix.include:
        combo = (inc.torch, inc.variant, inc.python, inc.flavor)
        if combo not in seen:
            out.append((*combo, True))
            seen.add(combo)
    return out


class _ToolkitChoice(NamedTuple):
    """How a cell's nccl-tests stage gets make, nvcc and NCCL (``nccl_tests.toolkit``, docs/matrix.md)."""

    toolkit: NcclToolkit
    builder_image: str
    distro: compat.DistroToolkit | None
    note: str


def _nccl_toolkit(
    requested: str, base: BaseSpec, cuda: str, devel_image: str | None, ccs: Sequence[str]
) -> _ToolkitChoice | str:
    """The toolkit source a cell of CUDA *cuda* on *base* builds nccl-tests with, for the matrix's
    ``nccl_tests.toolkit`` *requested*; or why there is none (the cell's drop reason)."""
    major = int(cuda.split(".")[0])
    distro = compat.distro_toolkit(base.os)
    distro_fits = distro is not None and distro.serves(cuda)
    toolkit: NcclToolkit
    distro_used: compat.DistroToolkit | None = None
    if requested == "base":
        plain = _plain_os_image(base.image)
        if plain is not None:
            return (
                f"nccl_tests.toolkit = 'base': {base.key}.image {base.image} is the plain {plain} OS "
                "image (imagesmith/data/bases.toml), which carries no CUDA toolkit (/usr/local/cuda) and "
                "no NCCL; toolkit 'base' is for a base image that brings its own (e.g. with torch.source "
                "= 'base'). Use toolkit "
                f"'auto'; {_own_toolkit(base, cuda)}"
                + ("" if major >= 13 else "; " + _toolkit_fixes(base, cuda))
            )
        toolkit, builder_image = "base", base.image
        note = "nccl-tests built with the base image's own CUDA toolkit (/usr/local/cuda)"
    elif requested == "pip" or (requested == "auto" and major >= 13):
        if major < 13:
            return (
                f"nccl_tests.toolkit = 'pip': CUDA {cuda} pip wheels carry no nvcc (only CUDA 13 "
                f"and later ones do); {_own_toolkit(base, cuda)}; " + _toolkit_fixes(base, cuda)
            )
        toolkit, builder_image = "pip", base.image
        note = f"nccl-tests built with nvcc from the CUDA {cuda} pip wheels on the plain base"
    elif requested == "distro" or (requested == "auto" and distro_fits):
        if distro is None or not distro_fits:
            return f"nccl_tests.toolkit = 'distro': {_own_toolkit(base, cuda)}; " + _toolkit_fixes(base, cuda)
        toolkit, builder_image, distro_used = "distro", base.image, distro
        note = _distro_note(distro, cuda, ccs)
    else:  # devel-image, or auto with no other source
        if devel_image is None:
            why = "asks for an nvidia/cuda devel image" if requested == "devel-image" else "is auto"
            return (
                f"CUDA {cuda} wheels carry no nvcc and nccl_tests.toolkit {why}: nccl-tests "
                f"needs a toolkit; {_own_toolkit(base, cuda)}; " + _toolkit_fixes(base, cuda)
            )
        toolkit, builder_image = "devel-image", devel_image
        note = f"nccl-tests built in {devel_image} ({base.key}.devel_images)"
    return _ToolkitChoice(toolkit, builder_image, distro_used, note)


def _excluded_by(rules: Sequence[Rule], torch: str, variant: str, python: str, flavor: str) -> Rule | None:
    for rule in rules:
        if rule.matches(torch=torch, variant=variant, python=python, flavor=flavor):
            return rule
    return None


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan reads from the project (its caller reads it: :func:`read_plan_inputs`), so that
    :func:`plan_from` is a pure function of the matrix and this record."""

    #: the project-relative locks folder and dockerfiles folder, as cells and messages show them
    locks_shown: str
    dockerfiles: str
    #: every lock file of the locks folder, in file-name order (the layer order's popularity, the cells' pins)
    locks: Mapping[LockKey, Lock] = field(default_factory=dict)
    #: a cell's lock that is no lock file of the folder listing: read, or the error reading it (raised only
    #: when a cell gets as far as its lock, as a dropped cell's lock is never read)
    other_locks: Mapping[LockKey, Lock | LockError] = field(default_factory=dict)
    #: the project's base lock (None: bases go by name) and wheel-size table
    bases: BasesLock | None = None
    sizes: SizeTable = field(default_factory=SizeTable)

    def lock(self, key: LockKey) -> Lock | None:
        """The lock of *key* (None: there is none); an unreadable one raises its error."""
        found = self.locks[key] if key in self.locks else self.other_locks.get(key)
        if isinstance(found, LockError):
            raise found
        return found


def _lock_key(matrix: Matrix, torch: str, variant: str, python: str) -> LockKey:
    """The key of the lock a cell of (*torch*, *variant*, *python*) of *matrix* is pinned by."""
    if matrix.torch.source == "base":
        return LockKey(torch="suite", variant="any", python=python)
    return LockKey(torch=torch, variant=variant, python=python)


def read_plan_inputs(matrix: Matrix, project: Project, lock_dir: Path | None = None) -> PlanInputs:
    """Read what :func:`plan_from` plans *matrix* of *project* from: its lock files (*lock_dir* overrides
    where), base lock and wheel sizes."""
    locks = lock_dir or project.locks_dir
    locks_shown = project.rel(locks)
    sizes = read_sizes(locks)
    base_lock = read_bases(locks, f"{locks_shown}/{BASES_FILE}")
    mine = {(t, v, p) for t, v, p, _, _ in _combinations(matrix)}
    folder = {
        k: lk
        for k in lock_keys_in(locks)
        if (lk := _read_lock(k, locks, matrix.name if (k.torch, k.variant, k.python) in mine else None))
        is not None
    }
    others: dict[LockKey, Lock | LockError] = {}
    for torch, variant, python in sorted(mine):
        key = _lock_key(matrix, torch, variant, python)
        if key in folder or key in others:
            continue
        try:
            if (lock := _read_lock(key, locks, matrix.name)) is not None:
                others[key] = lock
        except LockError as exc:
            others[key] = exc
    return PlanInputs(
        locks_shown=locks_shown,
        dockerfiles=project.dockerfiles_rel,
        locks=folder,
        other_locks=others,
        bases=base_lock,
        sizes=sizes,
    )


def build_plan(
    matrix: Matrix,
    *,
    project: Project | None = None,
    lock_dir: Path | None = None,
    with_fingerprints: bool = True,
) -> BuildPlan:
    """Plan *matrix* of *project* (default: the project found from the working directory or the matrix
    file): :func:`read_plan_inputs` (*lock_dir* overrides where the locks are read from), then the pure
    :func:`plan_from`. Cell contexts are project-relative paths.
    """
    if project is None:
        from imagesmith.project import discover

        project = discover(near=matrix.path)
    inputs = read_plan_inputs(matrix, project, lock_dir)
    return plan_from(matrix, inputs, with_fingerprints=with_fingerprints)


class _Combo(NamedTuple):
    """One combination the matrix asks for: a base, torch, variant, Python and flavor (``included``: from an
    ``[[include]]`` entry, which no ``[[exclude]]`` rule drops)."""

    base: BaseSpec
    torch: str
    variant: str
    python: str
    flavor: str
    included: bool


def _python_reason(matrix: Matrix, base: BaseSpec, release: compat.TorchRelease, python: str) -> str | None:
    """Why a cell of *release* cannot run on Python *python* (outside the release's range, a uv-managed
    version its torchvision refuses, neither the base's nor uv-managed), or None."""
    if not _python_in_range(release, python):
        return f"torch {release.version} supports Python {release.python}, not {python}"
    managed_full = matrix.python.managed_version(python)
    refused = release.torchvision_refuses(managed_full) if managed_full else None
    if refused is not None:
        return f"{refused} (the matrix's uv-managed {python}); pin another {python}.x in python.managed"
    if python != base.python and managed_full is None:
        return f"Python {python} is neither {base.os}'s ({base.python}) nor uv-managed"
    return None


def _coverage(matrix: Matrix, variant: compat.TorchVariant) -> tuple[list[tuple[str, str]], list[str]]:
    """The variant's kernels for each GPU of the matrix ((key, "kind: detail")), and the GPUs it has none
    for, as the drop reason names them."""
    coverage: list[tuple[str, str]] = []
    uncovered: list[str] = []
    for gpu in matrix.gpus:
        cov = compat.arch_coverage(variant.arch_list, gpu.cc)
        coverage.append((gpu.key, f"{cov.kind}: {cov.detail}"))
        if cov.kind == "none":
            uncovered.append(f"{gpu.name} (sm_{_arch_digits(gpu.cc)}): {cov.detail}")
    return coverage, uncovered


def _flavor_reason(
    matrix: Matrix, base: BaseSpec, cuda: str, flavor: str, devel_image: str | None, chosen: _ToolkitChoice
) -> str | None:
    """Why the flavor cannot be built on this cell (a devel cell with no toolkit to give extensions, a
    devel or interactive cell of a base-torch matrix), or None."""
    # CUDA 13 pip wheels carry nvcc: a devel cell is the runtime image plus those wheels (and g++/make),
    # so it needs no nvidia/cuda devel image and shares every layer up to torch with the runtime cell.
    if flavor == "devel":
        if matrix.torch.source == "base":
            return "devel flavor: torch comes from the base image, which already is the whole environment"
        distro_used = chosen.distro
        if devel_image is None and chosen.toolkit == "distro" and distro_used is not None:
            return (
                f"devel flavor: the nccl-tests builder uses {distro_used.release}'s CUDA "
                f"{distro_used.cuda} packages, which the image does not carry (a devel image must give "
                f'extensions torch\'s CUDA {cuda}): add "{cuda}" to {base.key}.devel_images'
            )
        if devel_image is None and chosen.toolkit != "pip":
            return (
                f"devel flavor needs an nvidia/cuda:{cuda}.x-devel image: add "
                f'"{cuda}" to {base.key}.devel_images'
            )
    if flavor == "interactive" and matrix.torch.source == "base":
        return "interactive flavor: torch comes from the base image (the flavor builds on a runtime cell)"
    return None


def _lock_reason(
    matrix: Matrix, inputs: PlanInputs, c: _Combo, release: compat.TorchRelease, lock: Lock | None, name: str
) -> str | None:
    """Why the cell's lock *lock* (file *name*) cannot pin it (there is none, or an interactive cell's has no
    interactive section): the command that makes it; or None."""
    if lock is None:
        where = "here" if c.variant == release.pypi_default else "where the variant's index is reachable"
        return (
            f"no lock {inputs.locks_shown}/{name}; the plan never floats a version: run "
            f"`imagesmith lock --matrix {matrix.name}` {where}"
        )
    if c.flavor == "interactive" and not lock.interactive_pins:
        return (
            f"lock {inputs.locks_shown}/{name} has no interactive section (JupyterLab, TensorBoard pins): "
            f"run `imagesmith lock --matrix {matrix.name}` (it adds them, keeping the runtime pins)"
        )
    return None


def _unpinned_reason(matrix: Matrix, inputs: PlanInputs, unpinned: list[str]) -> str:
    """The drop reason of a cell whose base images the project's base lock does not pin."""
    return (
        f"base image {', '.join(unpinned)} has no entry in {inputs.locks_shown}/{BASES_FILE}: run "
        f"`imagesmith lock --bases --matrix {matrix.name}` where its registry (or mirror) is "
        f'reachable, or for a base made on each machine add "{unpinned[0]}" = {{ origin = "local" }} '
        "under [bases] there"
    )


def _runtime(matrix: Matrix, base: BaseSpec, python: str) -> Runtime:
    """Where a cell's Python comes from: the base image (base-torch), the distribution's, or uv's."""
    own: PythonSource = "distro" if python == base.python else "uv"
    python_source: PythonSource = "base" if matrix.torch.source == "base" else own
    return Runtime(
        python=python,
        python_full=matrix.python.managed_version(python) if python_source == "uv" else None,
        python_source=python_source,
        uv=matrix.python.uv if python_source == "uv" else None,
        python_install_mirror=matrix.python.install_mirror,
        venv=base.venv or VENV,
    )


def _hardware(
    matrix: Matrix, cuda: str, coverage: list[tuple[str, str]], distro: compat.DistroToolkit | None
) -> Hardware:
    """The drivers and GPUs a cell of CUDA *cuda* is for, and how nccl-tests is compiled for them."""
    return Hardware(
        min_driver=compat.min_driver(cuda),
        require_cuda=require_cuda(cuda),
        gpus=tuple(g.key for g in matrix.gpus),
        gpu_families=tuple(dict.fromkeys(g.family or g.key for g in matrix.gpus)),
        gpu_names=tuple(g.name for g in matrix.gpus),
        archs=tuple(sorted({_arch_digits(g.cc) for g in matrix.gpus}, key=int)),
        nvcc_gencode=nvcc_gencode([g.cc for g in matrix.gpus], distro.max_arch if distro else None),
        arch_coverage=tuple(coverage),
        shm_min=matrix.shm_min,
        shm_min_bytes=matrix.shm_min_bytes,
    )


def _cell(
    matrix: Matrix,
    inputs: PlanInputs,
    c: _Combo,
    *,
    cid: str,
    release: compat.TorchRelease,
    variant: compat.TorchVariant,
    chosen: _ToolkitChoice,
    devel: str | None,
    lock: Lock,
    coverage: list[tuple[str, str]],
    shared: Mapping[tuple[str, str, str], int],
) -> Cell:
    """The cell of combination *c*, every check passed: its stack, runtime, bases, toolkit, pins, hardware
    and where it is published."""
    pypi_default = c.variant == release.pypi_default
    base_torch = matrix.torch.source == "base"
    return Cell(
        matrix=matrix.name,
        id=cid,
        tag=cid,
        flavor=c.flavor,
        stack=TorchStack(
            torch=c.torch,
            torchvision=release.torchvision,
            torchaudio=release.torchaudio,
            torch_source=matrix.torch.source,
            variant=c.variant,
            cuda=variant.cuda,
            index_url=None if pypi_default else variant.index_url,
            pypi_default=pypi_default,
            nccl_version=lock.version(f"nvidia-nccl-cu{int(variant.cuda.split('.')[0])}") or variant.nccl,
        ),
        runtime=_runtime(matrix, c.base, c.python),
        bases=_bases(inputs.bases, c.base.os, c.base.image, chosen.builder_image, devel),
        toolkit=_toolkit(matrix, chosen.toolkit, chosen.distro, chosen.note),
        lock=CellLock(
            pins=lock.pins,
            builder_pins=lock.builder_pins,
            interactive_pins=lock.interactive_pins if c.flavor == "interactive" else (),
            pin_hashes=lock.hashes,
            lock_file=f"{inputs.locks_shown}/{lock.path.name}",
            lock_verified=lock.verified,
            lock_note=lock.unverified_reason,
        ),
        hardware=_hardware(matrix, variant.cuda, coverage, chosen.distro),
        publish=Publish(
            mirror_build=matrix.mirror.build,
            mirror_runtime=matrix.mirror.runtime,
            registries=tuple(r for r in matrix.registries if r.wants(cid)),
            labels=matrix.labels,
            dockerfile=f"{inputs.dockerfiles}/{matrix.name}/{cid}/Dockerfile",
            context=f"{inputs.dockerfiles}/{matrix.name}/{cid}",
            layers=() if base_torch else plan_layers(lock.pins, c.python, inputs.sizes, shared=shared),
        ),
    )


def _plan_cell(
    matrix: Matrix, inputs: PlanInputs, c: _Combo, cid: str, shared: Mapping[tuple[str, str, str], int]
) -> Cell | str:
    """The cell of combination *c*, or the reason it is dropped: the first check it fails, in the order
    ``plan --explain`` documents."""
    release = compat.torch_release(c.torch)
    if not c.included:
        rule = _excluded_by(matrix.exclude, c.torch, c.variant, c.python, c.flavor)
        if rule is not None:
            return f"excluded by the matrix: {rule.reason}"
    variant = release.variants.get(c.variant)
    if variant is None:
        return (
            f"torch {c.torch} was never published for {c.variant} "
            f"(its variants: {', '.join(sorted(release.variants))})"
        )
    why = _python_reason(matrix, c.base, release, c.python)
    if why is not None:
        return why
    coverage, uncovered = _coverage(matrix, variant)
    if uncovered:
        return f"{c.variant} wheels of torch {c.torch} have no kernels for " + "; ".join(uncovered)
    devel_image = c.base.devel_image(variant.cuda)
    ccs = [g.cc for g in matrix.gpus]
    chosen = _nccl_toolkit(matrix.nccl_tests.toolkit, c.base, variant.cuda, devel_image, ccs)
    if isinstance(chosen, str):
        return chosen
    why = _flavor_reason(matrix, c.base, variant.cuda, c.flavor, devel_image, chosen)
    if why is not None:
        return why
    lock_key = _lock_key(matrix, c.torch, c.variant, c.python)
    lock = inputs.lock(lock_key)
    why = _lock_reason(matrix, inputs, c, release, lock, lock_key.filename)
    if why is not None or lock is None:
        return why or ""
    devel = devel_image if c.flavor == "devel" and chosen.toolkit != "pip" else None
    unpinned = _unpinned(inputs.bases, c.base.image, chosen.builder_image, devel)
    if unpinned:  # a project that pins its bases builds none by a moving name (as no wheel floats)
        return _unpinned_reason(matrix, inputs, unpinned)
    return _cell(
        matrix,
        inputs,
        c,
        cid=cid,
        release=release,
        variant=variant,
        chosen=chosen,
        devel=devel,
        lock=lock,
        coverage=coverage,
        shared=shared,
    )


def _check_registries(matrix: Matrix, considered: Sequence[str]) -> None:
    """Every registry the matrix lists must get an image: one whose cell globs match none of the cells
    considered is an error (the matrix's or the registries file's)."""
    for reg in matrix.registries:
        if considered and not any(reg.wants(c) for c in considered):
            shown = ", ".join(considered[:6]) + (" …" if len(considered) > 6 else "")
            raise MatrixError(
                f"matrix {matrix.name}: registry {reg.name} ({reg.host}) is listed, but its cells "
                f"{', '.join(reg.cells)} match none of the matrix's cells ({shown}): it would get no image",
                hint=f"fix [registries.{reg.name}] cells in the registries file, or remove {reg.name!r} from "
                "the matrix's registries",
            )


def plan_from(matrix: Matrix, inputs: PlanInputs, *, with_fingerprints: bool = True) -> BuildPlan:
    """Plan *matrix* from *inputs* (pure: it reads nothing but the packaged compat tables and templates)."""
    cells: list[Cell] = []
    dropped: list[Dropped] = []
    # the layer order: a wheel more locks of the project pin comes earlier in its group
    shared = popularity((k.python, lk.pins) for k, lk in inputs.locks.items())
    considered: list[str] = []
    combos = [
        _Combo(base, *c) for base in matrix.bases for c in _combinations(matrix) if base.wants(c[1], c[3])
    ]
    for combo in combos:
        cid = cell_id(combo.torch, combo.variant, combo.python, combo.flavor, combo.base.os)
        considered.append(cid)
        planned = _plan_cell(matrix, inputs, combo, cid, shared)
        if isinstance(planned, str):
            dropped.append(Dropped(combination=cid, reason=planned))
        else:
            cells.append(planned)
    _check_registries(matrix, considered)
    plan = BuildPlan(matrix=matrix.name, cells=tuple(cells), dropped=tuple(dropped))
    if with_fingerprints:
        plan = replace(plan, cells=tuple(with_fingerprint(c) for c in plan.cells))
    return plan


def matrix_bases(matrix: Matrix) -> list[tuple[str, str]]:
    """(field, image) of every base a cell of *matrix* may be built from, for the base lock's check."""
    out = []
    for base in matrix.bases:
        out.append((f"{base.key}.image", base.image))
        out += [(f"{base.key}.devel_images.{cuda}", image) for cuda, image in base.devel_images]
    return out


def _unpinned(lock: BasesLock | None, *images: str | None) -> list[str]:
    """The images of a cell that the project's base lock (when it has one) has no entry for."""
    if lock is None:
        return []
    return [i for i in dict.fromkeys(i for i in images if i) if lock.get(i) is None and not own_digest(i)]


def _toolkit(matrix: Matrix, toolkit: NcclToolkit, distro: compat.DistroToolkit | None, note: str) -> Toolkit:
    """The cell's nccl-tests toolkit record: how its builder compiles the matrix's nccl-tests source."""
    return Toolkit(
        nccl_toolkit=toolkit,
        distro_toolkit=distro,
        toolkit_note=note,
        nccl_tests_version=matrix.nccl_tests.version,
        nccl_tests_commit=matrix.nccl_tests.commit,
        nccl_tests_sha256=matrix.nccl_tests.sha256,
        nccl_tests_url=matrix.nccl_tests.url,
        nccl_tests_archive=matrix.nccl_tests.archive_name,
    )


def _bases(lock: BasesLock | None, os: str, base: str, builder: str, devel: str | None) -> Bases:
    """The cell's bases record, with what the project's base lock says of each image."""
    return Bases(
        os=os,
        base_image=base,
        builder_image=builder,
        devel_image=devel,
        **_base_fields(lock, base, builder, devel),
    )


def _base_fields(lock: BasesLock | None, *images: str | None) -> dict[str, Any]:
    """The cell's base_digests / base_local / base_moves / base_read from the project's base lock."""
    if lock is None:
        return {}
    digests: dict[str, str] = {}
    local: list[str] = []
    moves: dict[str, str] = {}
    read: dict[str, str] = {}
    for image in dict.fromkeys(i for i in images if i):
        own = own_digest(image)
        if own is not None:  # the matrix names it by digest: pinned there, no lock line
            digests[image] = own
            continue
        entry = lock.get(image)
        if entry is None:  # pragma: no cover - _unpinned() dropped the cell before
            continue
        if entry.pinned and entry.digest:
            digests[image] = entry.digest
            read[image] = entry.read or ""
            if entry.previous:
                moves[image] = entry.previous
        else:
            local.append(image)
    return {
        "base_digests": tuple(digests.items()),
        "base_local": tuple(local),
        "base_moves": tuple(moves.items()),
        "base_read": tuple(read.items()),
    }


# ------------------------------------------------------------------------------------------------------------
# fingerprints

FINGERPRINT_PLACEHOLDER: Final[str] = "@@IMAGESMITH_FINGERPRINT@@"


def fingerprint(cell: Cell, files: dict[str, str]) -> str:
    """sha256 over everything that changes the image.

    *files* are the cell's rendered context files with the fingerprint placeholder in place of the
    fingerprint. The pins, the nccl-tests checksum and the base images are inside the rendered files already;
    they are hashed again explicitly so the fingerprint cannot miss them if a template stops mentioning one.
    imagesmith's version stands for the suite baked into the image.
    """
    h = hashlib.sha256()
    payload = {
        "v": 1,
        "imagesmith": __version__,
        "pins": list(cell.lock.pins),
        "builder_pins": list(cell.lock.builder_pins),
        "sources": [[cell.toolkit.nccl_tests_archive, cell.toolkit.nccl_tests_sha256]],
        "base_image": cell.bases.base_image,
        "builder_image": cell.bases.builder_image,
        "devel_image": cell.bases.devel_image,
        "files": sorted((name, hashlib.sha256(text.encode()).hexdigest()) for name, text in files.items()),
    }
    if cell.lock.interactive_pins:  # only then: the other flavors' fingerprints stay what they were
        payload["interactive_pins"] = list(cell.lock.interactive_pins)
    if cell.bases.base_digests:  # a base lock pins them: a re-published tag moves the fingerprint
        payload["base_digests"] = [list(p) for p in cell.bases.base_digests]
    h.update(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


def with_fingerprint(cell: Cell) -> Cell:
    files = render_cell_files(
        replace(cell, publish=replace(cell.publish, fingerprint=FINGERPRINT_PLACEHOLDER))
    )
    return replace(cell, publish=replace(cell.publish, fingerprint=fingerprint(cell, files)))


__all__ = [
    "NCCL_TESTS_BIN",
    "VENV",
    "BuildPlan",
    "Cell",
    "Dropped",
    "PlanInputs",
    "build_plan",
    "cell_id",
    "fingerprint",
    "nvcc_gencode",
    "plan_from",
    "read_plan_inputs",
    "require_cuda",
    "with_fingerprint",
]


def _read_lock(key: LockKey, locks: Path, matrix: str | None) -> Lock | None:
    """:func:`read_lock`; a lock cut short names the command that restores it for *matrix* (a plain
    ``imagesmith lock --matrix``, never --force)."""
    try:
        return read_lock(key, locks)
    except LockError as exc:
        if exc.problem != "cut short" or matrix is None:
            raise
        raise exc.replace(
            hint=f"restore it: imagesmith lock --matrix {matrix} (no --force: it keeps every pin the file "
            "still holds and resolves only the rest)"
        ) from None
