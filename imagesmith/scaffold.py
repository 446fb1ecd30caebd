"""``imagesmith init``: a new project that ``plan``, ``render``, ``render --check`` and ``build`` accept at
once.

The example matrix is chosen from data, not written by hand: the newest torch release among imagesmith's
reference locks (the pins its own CI builds) whose wheel variant has kernels for every GPU asked for, on the
OS base whose distro Python that lock is for (``imagesmith/data/bases.toml``). The lock is copied into the new
project's ``locks/``, so the plan never floats a version. Choosing is pure (:func:`choose`); writing is
:func:`write_project`.
"""

from __future__ import annotations

import datetime as _dt
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final, Literal

from packaging.version import Version

from imagesmith import __version__, compat, schema
from imagesmith.errors import ConfigError
from imagesmith.lock import LockKey, parse_lock, reference_lock_keys, reference_locks
from imagesmith.project import PROJECT_FILE, project_name
from imagesmith.wheelsizes import SIZES_FILE, for_lock, parse_sizes, sizes_toml

DEFAULT_GPU: Final[str] = "h200"
#: a plain-HTTP registry on this machine (scripts/setup.sh starts one): ``http://`` marks plain HTTP
DEFAULT_REGISTRY: Final[str] = "http://127.0.0.1:5000"
_COVERAGE_RANK: Final[dict[str, int]] = {"native": 0, "binary-compatible": 1, "ptx": 2}


@dataclass(frozen=True, kw_only=True)
class Choice:
    """What the example matrix builds, and why the newer reference locks were passed over."""

    gpus: tuple[compat.Gpu, ...]
    lock: LockKey
    base: compat.OsBase
    cuda: str
    min_driver: str
    coverage: tuple[tuple[str, str], ...]
    passed_over: tuple[str, ...]
    #: the host driver ``init --driver`` named (None: no driver given)
    driver: str | None = None


@dataclass(frozen=True)
class _Rejected:
    """A reference lock init passed over: its torch, why in words (``why``, for the user) and as data
    (``cause``, and for ``driver`` the driver it ``needs``): the fix is chosen from the data."""

    torch: Version
    why: str
    cause: Literal["python", "driver", "nvcc", "kernels"]
    needs: compat.DriverVersion | None = None


def resolve_gpus(names: list[str]) -> tuple[compat.Gpu, ...]:
    """``--gpu`` values: a family key (every SKU of it) or one model (key or nvidia-smi name)."""
    out: list[compat.Gpu] = []
    families = {g.family for g in compat.gpus()}
    for name in names:
        folded = name.strip().casefold()
        found = compat.gpu_family(folded) if folded in families else (compat.gpu(name),)
        # imagesmith builds linux/amd64 images: a family's aarch64-hosted SKUs (GB300 of b300) are left out,
        # a model asked for by name is refused
        usable = tuple(g for g in found if g.host_arch == "x86_64")
        if not usable:
            g = found[0]
            raise ConfigError(
                f"--gpu {name}: {g.name} hosts are {g.host_arch} (linux/arm64 images only), and imagesmith "
                "builds and locks linux/amd64 images (x86_64-manylinux_2_28)",
                hint="scaffold for an x86-hosted GPU (e.g. --gpu b200 for GB200, --gpu h200 for GH200)",
            )
        out.extend(g for g in usable if g.key not in {o.key for o in out})
    return tuple(out)


def _check_driver_runs(
    gpus: tuple[compat.Gpu, ...], host: compat.DriverVersion | None, driver: str | None
) -> None:
    """Refuse a host driver (``--driver``) older than a GPU's own minimum, one whose table of released products
    lacks a GPU's board, or one past a GPU's last driver branch."""
    if host is None:
        return
    for g in gpus:
        last = compat.gpu_last_branch(g)
        if g.min_driver is not None and host < g.min_driver:
            raise ConfigError(
                f"--driver {driver}: {g.name} ({g.sm}) needs driver >= {g.min_driver}: older drivers do not "
                f"support this GPU at all ({g.min_driver_source})",
                hint=f"give the oldest driver the hosts really run (>= {g.min_driver}), or another --gpu",
            )
        gap = compat.board_gap(g, host)
        if gap is not None:
            raise ConfigError(
                f"--driver {driver}: {g.name} ({g.sm}): {gap}",
                hint="give a driver whose table of released products holds the board (NVIDIA's driver table, "
                "imagesmith/data/driver_table.toml), or another --gpu",
            )
        if last is not None and last.last_branch is not None and host.branch > last.last_branch:
            raise ConfigError(
                f"--driver {driver}: R{host.branch} does not support {last.name} GPUs such as {g.name}: "
                f"R{last.last_branch} is their last driver branch",
                hint=f"give the driver the hosts run (R{last.last_branch} or older), or another --gpu",
            )


def _check_base(base_image: str | None, bases: Sequence[compat.OsBase]) -> None:
    """Refuse a ``--base`` that is not one of the bases imagesmith can scaffold."""
    if base_image is not None and not any(b.image == base_image for b in bases):
        raise ConfigError(
            f"--base {base_image!r} is not a base imagesmith can scaffold",
            hint="one of: "
            + ", ".join(b.image for b in bases)
            + "; for another base, scaffold on the nearest one, then set [base] os, image and python in the "
            "matrix and run `imagesmith lock` (docs/project.md; which OS releases carry a CUDA toolkit for "
            "nccl-tests: imagesmith/data/toolkits.toml)",
        )


def _fit(
    key: LockKey,
    *,
    gpus: tuple[compat.Gpu, ...],
    bases: Sequence[compat.OsBase],
    base_image: str | None,
    host: compat.DriverVersion | None,
    gpu_floor: compat.DriverVersion | None,
) -> _Rejected | tuple[tuple[Version, int, Version], Choice] | None:
    """One reference lock judged for *gpus*: why it is passed over, or its choice with its rank (newest torch
    first; then the best kernels); None for a variant the torch release does not list."""
    release = compat.torch_release(key.torch)
    variant = release.variants.get(key.variant)
    if variant is None:
        return None
    base = next(
        (b for b in bases if b.python == key.python and (base_image is None or b.image == base_image)),
        None,
    )
    if base is None:
        where = f" {base_image}" if base_image else " a scaffoldable base"
        return _Rejected(
            Version(key.torch),
            f"torch {key.torch} {key.variant} py{key.python}: python3 of{where} is not {key.python}",
            "python",
        )
    need = compat.min_driver(variant.cuda).full
    if host is not None and host < need:
        return _Rejected(
            Version(key.torch),
            f"torch {key.torch} {key.variant}: CUDA {variant.cuda} needs driver >= {need}",
            "driver",
            need,
        )
    distro = compat.distro_toolkit(base.os)
    if (
        int(variant.cuda.split(".")[0]) < 13
        and base.devel_image(variant.cuda) is None
        and not (distro is not None and distro.serves(variant.cuda))
    ):
        own = (
            f"{distro.release}'s nvidia-cuda-toolkit is CUDA {distro.cuda}, newer"
            if distro is not None
            else "no distribution toolkit"
        )
        return _Rejected(
            Version(key.torch),
            f"torch {key.torch} {key.variant}: no nvcc for CUDA {variant.cuda} on {base.image} "
            f"({own}; no known nvidia/cuda devel image; nccl-tests needs nvcc)",
            "nvcc",
        )
    coverage = [(g, compat.arch_coverage(variant.arch_list, g.cc)) for g in gpus]
    missing = [f"{g.name} ({g.sm})" for g, c in coverage if c.kind == "none"]
    if missing:
        return _Rejected(
            Version(key.torch),
            f"torch {key.torch} {key.variant}: no kernels for {', '.join(missing)}",
            "kernels",
        )
    rank = max(_COVERAGE_RANK.get(c.kind, 3) for _, c in coverage)
    choice = Choice(
        gpus=gpus,
        lock=key,
        base=base,
        cuda=variant.cuda,
        min_driver=str(max(need, gpu_floor) if gpu_floor is not None else need),
        coverage=tuple((g.key, f"{c.kind}: {c.detail}") for g, c in coverage),
        passed_over=(),
    )
    # newest torch first; then the best kernels (native SASS over binary-compatible over PTX JIT)
    return (Version(key.torch), -rank, Version(key.python)), choice


def choose(gpus: tuple[compat.Gpu, ...], base_image: str | None = None, driver: str | None = None) -> Choice:
    """The newest reference lock whose variant runs on every GPU of *gpus*, with an OS base for its Python,
    and (with *driver*) whose CUDA runtime runs on that host driver without the compat package (the full
    minimum driver of its CUDA release, ``imagesmith/data/cuda.toml``).
    """
    host = compat.parse_driver(driver) if driver is not None else None
    # a GPU newer than CUDA alone implies (B200: 570.133.20) raises every cell's minimum driver; a driver
    # older than that, or past the GPU's last branch (V100: R580), runs nothing of this project on it
    gpu_floor = max((g.min_driver for g in gpus if g.min_driver is not None), default=None)
    _check_driver_runs(gpus, host, driver)
    bases = compat.os_bases()
    _check_base(base_image, bases)
    keys = [k for k in reference_lock_keys() if k.torch != "suite"]
    rejected: list[_Rejected] = []
    fits: list[tuple[tuple[Version, int, Version], Choice]] = []
    for key in keys:
        judged = _fit(key, gpus=gpus, bases=bases, base_image=base_image, host=host, gpu_floor=gpu_floor)
        if isinstance(judged, _Rejected):
            rejected.append(judged)
        elif judged is not None:
            fits.append(judged)
    if not fits:
        raise ConfigError(
            "no reference lock of this imagesmith fits "
            + ", ".join(g.key for g in gpus)
            + (f" on {base_image}" if base_image else "")
            + (f" with driver {driver}" if driver else "")
            + ": "
            + "; ".join(sorted({r.why for r in rejected})[:6]),
            hint=_no_fit_hint(rejected, driver),
        )
    order, best = max(fits, key=lambda f: f[0])
    newer = tuple(
        dict.fromkeys(
            r.why
            for r in sorted(rejected, key=lambda r: (r.torch, r.why), reverse=True)
            if r.torch > order[0]
        )
    )
    return replace(best, passed_over=newer, driver=driver)


def _no_fit_hint(rejected: Sequence[_Rejected], driver: str | None) -> str:
    """The fix when no reference lock fits, for the cause that stopped them: the driver, the GPU's kernels,
    or the base's Python — "scaffold for another GPU" only where the GPU is what stopped them."""
    edit = "edit matrices/*.toml, then `imagesmith lock` the combination you need (docs/project.md)"
    needs = [r.needs for r in rejected if r.cause == "driver" and r.needs is not None]
    if rejected and len(needs) == len(rejected):
        lowest = min(needs)
        return (
            f"init writes only what driver {driver} runs with full compatibility, which needs >= {lowest}; "
            f"older CUDA runtimes may still run on it through minor-version compatibility, with limits "
            f"(`imagesmith compat --driver {driver} …` says which): upgrade the host driver, or drop --driver "
            f"and {edit}"
        )
    if any(r.cause == "kernels" for r in rejected):
        return f"scaffold for another GPU and {edit}"
    if any(r.cause == "python" for r in rejected):
        return f"give another --base (its python3 decides the lock), or leave --base out; or {edit}"
    return edit


def _toml_list(items: tuple[str, ...] | list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_DNS_NAME = re.compile(rf"(?!.{{254}}){_LABEL}(\.{_LABEL})*")


def _split_registry(registry: str) -> tuple[str, str | None, bool]:
    """``[http://|https://]HOST[/NAMESPACE]`` → (host, namespace, insecure): ``http://`` is plain HTTP."""
    scheme, sep, rest = registry.strip().partition("://")
    text = rest if sep else scheme
    host, _, namespace = text.strip("/").partition("/")
    hostname = host.rpartition(":")[0] if ":" in host else host
    if (
        (sep and scheme not in ("http", "https"))
        or not host
        or any(c.isspace() for c in text)
        # a DNS name: at most 253 characters, labels of at most 63 (RFC 1035); no control characters
        or not _DNS_NAME.fullmatch(hostname)
        or not re.fullmatch(schema.HOST_PORT, host)  # a port 1–65535
        or not namespace.isprintable()
    ):
        raise ConfigError(
            f"--registry {registry!r} is not [http://]HOST[/NAMESPACE]",
            hint="e.g. --registry ghcr.io/my-team, or --registry http://127.0.0.1:5000 for a plain-HTTP one "
            "(a port is 1–65535)",
        )
    if namespace and not re.fullmatch(schema.REPO_PATH, namespace):
        raise ConfigError(
            f"--registry {registry!r}: namespace {namespace!r} is not a repository path",
            hint="lowercase letters and digits joined by '/', '.', '_' or '-' "
            f"(e.g. --registry {host}/{project_name(namespace).replace('.', '-') or 'team'})",
        )
    return host, namespace or None, bool(sep) and scheme == "http"


def registry_kind(host: str) -> str:
    """What imagesmith knows a registry as, from its host (login hints and token flows): the ``hosts`` of
    the kinds in imagesmith/data/registry_kinds.toml."""
    from imagesmith.kinds import kind_of_host

    return kind_of_host(host)


def _registry_tables(registries: Sequence[str], project: str) -> tuple[list[str], str]:
    """(names, TOML tables) for ``--registry`` values: the first is ``main``, the others ``copy-2`` …; build
    pushes once to the first and copies to the others.
    """
    names: list[str] = []
    tables: list[str] = []
    for i, registry in enumerate(registries or [DEFAULT_REGISTRY], 1):
        host, namespace, insecure = _split_registry(registry)
        name = "main" if i == 1 else f"copy-{i}"
        names.append(name)
        kind = registry_kind(host)
        tables.append(
            f"[registries.{name}]\n"
            f'host = "{host}"\n'
            + (f'kind = "{kind}"\n' if kind != "generic" else "")
            + f'namespace = "{namespace or project}"\n'
            'repository = "torch"\n'
            + (
                "insecure = true                  # plain HTTP: a registry on this machine\n"
                if insecure
                else ""
            )
        )
    return names, "\n".join(tables)


def _driver_line(choice: Choice) -> str:
    """The matrix header's driver line: the --driver given, or how to pick for an older host."""
    if choice.driver is not None:
        return (
            f"# Host driver needed: >= {choice.min_driver} (CUDA {choice.cuda}); picked for driver "
            f"{choice.driver} (`imagesmith init --driver {choice.driver}`)."
        )
    return (
        f"# Host driver needed: >= {choice.min_driver} (CUDA {choice.cuda}); `imagesmith init --driver "
        "535.104.05` picks for older hosts."
    )


def _project_toml(name: str, matrix_name: str) -> str:
    """The new project's imagesmith.toml."""
    return f'''# imagesmith project (written by `imagesmith init`, imagesmith {__version__}). Paths are relative to this file.
schema = 1
name = "{name}"
default_matrix = "{matrix_name}"

[paths]
matrices = "matrices"
dockerfiles = "dockerfiles"                # generated: `imagesmith render`, committed, checked in CI
locks = "locks"                            # exact pins: `imagesmith lock`
registries = "matrices/registries.toml"

[sources]
# URL templates tried before a source archive's pinned URL, e.g. GitHub through a mirror:
#   mirrors = ["https://mirror.example/{{url}}"]   fields: {{url}} {{path}} {{host}} {{name}} {{version}} {{commit}} {{file}}
mirrors = []

[release]
# public keys whose signed validation attestations `imagesmith release` accepts (a report file alone never
# is): `imagesmith keygen keys/validation.key`, keep the .key on validation runners only, commit the .pub
trusted_keys = []
# renters trust the release index by its key's fingerprint, named out of band (issue 34): `imagesmith release
# --sign-key` prints the line they paste (`renters: imagesmith pick --index oci://HOST/REPO#sha256:<fp> --pull`);
# put that fingerprint in this project's README, and renters set it once in ~/.config/imagesmith/config.toml:
#   [release]
#   index_key = "sha256:<fp>"
'''


def _matrix_toml(*, matrix_name: str, gpu_args: list[str], choice: Choice, registry_names: list[str]) -> str:
    """The new project's one matrix: the chosen lock on the chosen base, for the GPUs asked for."""
    lock = choice.lock
    pin = compat.default_source_pin("nccl_tests")
    gpus = tuple(g.key for g in choice.gpus)
    shm = "8g" if all(g.segment != "consumer" for g in choice.gpus) else "4g"
    coverage = "".join(f"#   {key}: {text}\n" for key, text in choice.coverage)
    passed = "".join(f"#   passed over: {p}\n" for p in choice.passed_over[:8])
    devel_image = choice.base.devel_image(choice.cuda) if int(choice.cuda.split(".")[0]) < 13 else None
    distro = compat.distro_toolkit(choice.base.os)
    what = (
        f"devel cells start FROM it; nccl-tests builds with {distro.release}'s own CUDA {distro.cuda} toolkit"
        if distro is not None and distro.serves(choice.cuda)
        else f"builds nccl-tests (CUDA {choice.cuda} wheels carry no nvcc)"
    )
    devel = f'devel_images = {{ "{choice.cuda}" = "{devel_image}" }}   # {what}\n' if devel_image else ""
    return f'''# {", ".join(gpu_args)} rentals. Chosen by `imagesmith init` from the reference locks of imagesmith {__version__}:
# the newest torch whose wheels have kernels for every GPU below, on the base whose python3 is that lock's.
{_driver_line(choice)}
{coverage}{passed}# Add torch versions, variants or Python versions, then `imagesmith lock` (pins) and `imagesmith render`.
schema = 1
name = "{matrix_name}"
description = "{", ".join(gpu_args)}: torch {lock.torch} {lock.variant} on {choice.base.image}"
gpus = {_toml_list(gpus)}
flavors = ["runtime"]
shm_min = "{shm}"
registries = {_toml_list(registry_names)}

[labels]
# the ulimits the entrypoint recommends; `imagesmith validate IMAGE` starts the image with them
"io.imagesmith.ulimits" = "memlock=-1,stack=67108864"

[torch]
versions = ["{lock.torch}"]
variants = ["{lock.variant}"]

[python]
versions = ["{lock.python}"]

[base]
os = "{choice.base.os}"
image = "{choice.base.image}"
python = "{choice.base.python}"                  # {choice.base.source}
{devel}
[nccl_tests]
version = "{pin["version"]}"
commit = "{pin["commit"]}"
sha256 = "{pin["sha256"]}"

[mirror]
build = "none"                   # tuna | aliyun | ustc: pip/apt mirrors while building (users in China)
runtime = "none"                 # the same, written into the image for its users
'''


def _registries_toml(ns: str, registry_tables: str) -> str:
    """matrices/registries.toml: the registries asked for, and commented examples under namespace *ns*."""
    return f'''# Registries the matrices push to, by name. Credentials never live here: `docker login`, the docker config or
# IMAGESMITH_REGISTRY_<HOST>_USERNAME/_PASSWORD in the environment (docs: imagesmith.registry).
schema = 1

{registry_tables}
# More registries: add a table and list its name in a matrix's `registries`.
# [registries.ghcr]
# host = "ghcr.io"
# kind = "ghcr"
# namespace = "{ns}"
# repository = "torch"
#
# [registries.acr-hangzhou]      # Aliyun ACR for users in China
# host = "registry.cn-hangzhou.aliyuncs.com"
# kind = "aliyun-acr"
# namespace = "{ns}"
# repository = "torch"
# cells = ["*-runtime-*"]
'''


def _workflow_yml() -> str:
    """The CI workflow: render check and plan on every push; build and push on main."""
    return f"""# Written by `imagesmith init`: render check and plan on every push; build + push on main.
# Secrets: REGISTRY_AUTH_JSON = a docker config.json ({{"auths": {{...}}}}) with push credentials for the
# registries in matrices/registries.toml.
name: imagesmith

on:
  push:
  pull_request:
  workflow_dispatch:

permissions:
  contents: read

jobs:
  check:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: python -m pip install "imagesmith=={__version__}"
      - name: the committed Dockerfiles match the matrices
        run: imagesmith render --check
      - name: the plan
        run: imagesmith plan --explain

  build:
    needs: check
    if: github.ref == 'refs/heads/main'
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: python -m pip install "imagesmith=={__version__}"
      - name: registry credentials
        env:
          REGISTRY_AUTH_JSON: ${{{{ secrets.REGISTRY_AUTH_JSON }}}}
        run: |
          mkdir -p ~/.docker
          printf '%s' "$REGISTRY_AUTH_JSON" > ~/.docker/config.json
      - name: source archives (nccl-tests), checksummed
        run: imagesmith fetch-sources
      - name: build and push changed cells
        run: imagesmith build --push --summary build-summary.json
"""


def _readme(name: str, matrix_name: str) -> str:
    """The new project's README."""
    return f"""# {name}

GPU training images built with imagesmith {__version__} (`pip install imagesmith`).

    pip install imagesmith=={__version__}
    imagesmith plan --explain          # what {matrix_name}.toml builds, and what it drops and why
    imagesmith render --check          # dockerfiles/ is what the matrices render (CI runs this)
    imagesmith fetch-sources           # nccl-tests source, checksummed (--from DIR or a mirror where GitHub is blocked)
    imagesmith build --push            # build and push what changed

- `imagesmith.toml`: the project (paths, default matrix, source mirrors)
- `matrices/`: what to build; `matrices/registries.toml`: where to push
- `locks/`: exact pins per (torch, variant, python): `imagesmith lock`
- `dockerfiles/`: generated by `imagesmith render`: do not edit, commit them
"""


def project_files(
    *,
    name: str,
    gpu_args: list[str],
    choice: Choice,
    matrix_name: str,
    registries: Sequence[str] = (DEFAULT_REGISTRY,),
) -> dict[str, str]:
    """Every file of the new project, keyed by path relative to its root (locks are added by the writer)."""
    registry_names, registry_tables = _registry_tables(registries, name)
    return {
        PROJECT_FILE: _project_toml(name, matrix_name),
        f"matrices/{matrix_name}.toml": _matrix_toml(
            matrix_name=matrix_name, gpu_args=gpu_args, choice=choice, registry_names=registry_names
        ),
        "matrices/registries.toml": _registries_toml(name, registry_tables),
        ".github/workflows/imagesmith.yml": _workflow_yml(),
        "README.md": _readme(name, matrix_name),
    }


def _sizes_for(lock_text: str, lock_file: Path, key: LockKey) -> str | None:
    """The reference ``wheel-sizes.toml`` rows of the copied lock, as the new project's own table (so its layer
    plan sizes the layers at once); None when imagesmith ships no sizes for it."""
    reference = reference_locks() / SIZES_FILE
    if not reference.is_file():
        return None
    table = parse_sizes(reference.read_text(encoding="utf-8"), Path(SIZES_FILE))
    rows, missing = for_lock(table, parse_lock(lock_text, lock_file, key))
    if not rows:
        return None
    try:
        day = _dt.date.fromisoformat(table.date)
    except ValueError:
        day = None
    return sizes_toml(rows, missing, today=day)


#: folders of a new project that must be absent or empty: what is in them already would join the project
#: (a matrix `render` renders, a lock that orders the layer plan, files `render` prunes as stale)
OWNED_FOLDERS: Final[tuple[str, ...]] = ("matrices", "locks", "dockerfiles")


def _refuse_existing(root: Path, files: dict[str, str], lock: LockKey) -> None:
    """ConfigError naming what *root* holds already that a new project would overwrite or take in."""
    targets = [*files, f"locks/{lock.filename}", f"locks/{SIZES_FILE}", PROJECT_FILE]
    clash = sorted({rel for rel in targets if (root / rel).exists() or (root / rel).is_symlink()})
    for folder in OWNED_FOLDERS:
        path = root / folder
        if path.is_symlink() or (path.exists() and not path.is_dir()):
            clash.append(f"{folder} (not a folder)")
        elif path.is_dir() and any(path.iterdir()) and not any(c.startswith(f"{folder}/") for c in clash):
            inside = sorted(p.name for p in path.iterdir())
            clash.append(f"{folder}/ ({', '.join(inside[:3])}{', …' if len(inside) > 3 else ''})")
    if clash:
        raise ConfigError(
            f"{root}: {', '.join(dict.fromkeys(clash))} exists already; init writes only new projects "
            f"({', '.join(f'{f}/' for f in OWNED_FOLDERS)} must be new or empty: what is in them would "
            "become part of the project)",
            hint="run `imagesmith init` in an empty folder (or one without these files), or move them away "
            "first",
        )


def new_folders(root: Path, rels: Sequence[str]) -> list[Path]:
    """The folders writing *rels* under *root* would create (deepest first): what a rollback removes."""
    out: set[Path] = set()
    for rel in rels:
        for parent in (root / rel).parents:
            if parent == root or not parent.is_relative_to(root):
                break
            if not parent.exists():
                out.add(parent)
    if not root.exists():
        out.add(root)
    return sorted(out, key=lambda p: len(p.parts), reverse=True)


def remove_written(written: Sequence[Path], folders: Sequence[Path]) -> None:
    """Undo a half-written project: the files this run wrote, then the folders it created (deepest first; a
    created folder goes with whatever this run put in it, e.g. rendered dockerfiles/)."""
    for path in written:
        path.unlink(missing_ok=True)
    for folder in sorted(folders, key=lambda p: len(p.parts), reverse=True):
        shutil.rmtree(folder, ignore_errors=True)


def write_project(root: Path, files: dict[str, str], lock: LockKey) -> list[Path]:
    """Write *files* and the reference lock for *lock* under *root*. Refuses to overwrite any file or to
    write into a non-empty matrices/, locks/ or dockerfiles/; on a write error removes what it wrote."""
    _refuse_existing(root, files, lock)
    source = reference_locks() / lock.filename
    written: list[Path] = []
    created = new_folders(root, [*files, f"locks/{lock.filename}"])
    try:
        for rel, text in sorted(files.items()):
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            written.append(path)
        lock_file = root / "locks" / lock.filename
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        lock_text = source.read_text(encoding="utf-8")
        lock_file.write_text(lock_text, encoding="utf-8")
        written.append(lock_file)
        sizes = _sizes_for(lock_text, lock_file, lock)
        if sizes is not None:
            sizes_file = lock_file.parent / SIZES_FILE
            sizes_file.write_text(sizes, encoding="utf-8")
            written.append(sizes_file)
    except OSError as exc:
        remove_written(written, [f for f in created if f != root])  # nothing half-done
        raise ConfigError(
            f"{root}: cannot write the project: {exc}", hint="choose a folder you can write to"
        ) from None
    return written


def default_matrix_name(gpu_args: list[str]) -> str:
    """The first ``--gpu``: its family key, or the key of the one model it names."""
    if not gpu_args:
        return DEFAULT_GPU
    first = gpu_args[0].strip().casefold()
    if first in {g.family for g in compat.gpus()}:
        return project_name(first)
    return project_name(compat.gpu(gpu_args[0]).key)
