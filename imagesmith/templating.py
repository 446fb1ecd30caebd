"""Pure templating: one cell of a plan → the files of its build context (Jinja2, StrictUndefined).

Per cell: ``Dockerfile``, ``requirements.txt`` (every runtime pin), ``builder-requirements.txt`` (the
nccl-tests builder's pins), ``entrypoint.sh`` (the /dev/shm guard), ``<OS family>-mirror.sh`` (the OS
family's mirror script, ``apt-mirror.sh``), ``mirror/*`` when the run-time mirror profile is not ``none``, and
a README in each of ``sources/`` and ``wheels/`` — the folders the build step fills from its caches. A cell
with a layer plan adds ``layers/NN-<name>.txt`` (one pin file per wheel layer), ``wheel-layer.sh`` (what every
wheel layer's RUN runs, bind-mounted with the layer's pin file) and the two ``layers/etc`` placeholders.
An interactive cell adds :data:`INTERACTIVE_FILES` (its pins, the start command, the sshd settings, the login
shells' environment).

The Dockerfile is a skeleton (``templates/Dockerfile.j2``) plus one fragment per fragment folder
(:data:`FRAGMENT_FOLDERS`: OS family, nccl-tests toolkit, Python source, torch source, flavor), picked by the
cell's value; a value with no fragment is a :class:`~imagesmith.errors.RenderError` naming the ones there are.

:func:`render_cell_files` returns ``{relative path: text}`` and touches nothing. The planner fingerprints a
cell over this output; :mod:`imagesmith.render` writes and checks it on disk.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any, Final

import jinja2

from imagesmith import compat
from imagesmith.compat import OsFamily
from imagesmith.errors import RenderError
from imagesmith.layerplan import LAYER_EPOCH, WheelLayer
from imagesmith.matrix import MIRROR_PROFILES
from imagesmith.model import NCCL_TESTS_BIN, Cell
from imagesmith.schema import BIDI_CONTROLS

TEMPLATES_PACKAGE: Final[tuple[str, str]] = ("imagesmith", "templates")
HEADER: Final[str] = "GENERATED — do not edit; run `imagesmith render`"
#: Folders of a build context that the build step fills; only their rendered README belongs to the rendering.
FILLED_AT_BUILD: Final[tuple[str, ...]] = ("sources", "wheels")
#: The fragment folders of templates/ and what picks one: the Dockerfile skeleton (Dockerfile.j2) imports
#: ``<folder>/<value>.j2``, *value* being the cell's field (for ``os``, the OS family of its base). A new
#: value is one new fragment there; :func:`fragment_values` says which value each folder takes.
FRAGMENT_FOLDERS: Final[dict[str, str]] = {
    "os": "OS family",
    "toolkit": "nccl_toolkit",
    "python": "python_source",
    "torch": "torch_source",
    "flavor": "flavor",
}


#: The flavor whose image a flavor is built on, layer for layer: its entrypoint.sh names that flavor's cell,
#: so the file — and the layer that COPYs it — is byte for byte the runtime cell's.
BUILT_ON: Final[dict[str, str]] = {"interactive": "runtime"}
#: The interactive flavor's extra build-context files: ``{file: template}`` (its pins come from the lock).
INTERACTIVE_FILES: Final[dict[str, str]] = {
    "imagesmith-start.sh": "imagesmith-start.sh.j2",
    "sshd-imagesmith.conf": "sshd-imagesmith.conf.j2",
    "profile-imagesmith.sh": "profile-imagesmith.sh.j2",
}
#: What imagesmith-start does when no variable says otherwise, and the ports the image EXPOSEs: the RunPod
#: convention (the ``generic`` row of imagesmith/data/platforms.toml; the other rows say what differs per
#: platform, and ``imagesmith pick --flavor interactive`` prints it).
INTERACTIVE_DEFAULTS: Final[dict[str, str]] = {
    "workspace": "/workspace",
    "ssh_port": "22",
    "jupyter_port": "8888",
    "tensorboard_port": "6006",
}


#: the build-context file every wheel layer's RUN runs (templates/wheel-layer.sh.j2; parts.wheel_layer)
WHEEL_LAYER_SCRIPT: Final[str] = "wheel-layer.sh"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(*TEMPLATES_PACKAGE),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )
    env.globals["wheel_layer_script"] = WHEEL_LAYER_SCRIPT
    return env


_ENV: jinja2.Environment | None = None


def _env() -> jinja2.Environment:
    global _ENV
    if _ENV is None:
        _ENV = _environment()
    return _ENV


def _render(template: str, **context: object) -> str:
    try:
        return _env().get_template(template).render(**context)
    except jinja2.TemplateError as exc:
        where = f"imagesmith/templates/{template}"
        line = getattr(exc, "lineno", None)
        raise RenderError(
            f"{where}{':' + str(line) if line else ''}: {exc}",
            hint="a template of this imagesmith installation is broken: reinstall imagesmith "
            "or fix the template",
        ) from None


def fragments(folder: str) -> tuple[str, ...]:
    """The values that have a fragment in ``templates/<folder>/`` (its ``*.j2`` names, sorted)."""
    prefix = f"{folder}/"
    return tuple(
        sorted(
            name.removeprefix(prefix).removesuffix(".j2")
            for name in _env().list_templates(extensions=["j2"])
            if name.startswith(prefix) and "/" not in name.removeprefix(prefix)
        )
    )


def fragment_values(cell: Cell, family: OsFamily) -> dict[str, str]:
    """The value that picks each fragment folder's fragment for *cell* (keys: :data:`FRAGMENT_FOLDERS`)."""
    return {
        "os": family.name,
        "toolkit": cell.toolkit.nccl_toolkit,
        "python": cell.runtime.python_source,
        "torch": cell.stack.torch_source,
        "flavor": cell.flavor,
    }


def _fragment_templates(cell: Cell, family: OsFamily) -> dict[str, str]:
    """``{folder: "<folder>/<value>.j2"}`` for *cell*; a value with no fragment is one error naming those that
    exist (never jinja's TemplateNotFound halfway through a render)."""
    chosen: dict[str, str] = {}
    for folder, value in fragment_values(cell, family).items():
        known = fragments(folder)
        if value not in known:
            field, path = FRAGMENT_FOLDERS[folder], f"imagesmith/templates/{folder}/{value}.j2"
            listed = ", ".join(known) or "none"
            raise RenderError(
                f"cell {cell.id}: {field} {value!r} has no Dockerfile fragment ({path}); "
                f"the {folder} fragments are: {listed}",
                hint=f"use one of {listed}, or add {path} defining the macros its sibling fragments define "
                "(docs/architecture.md, Recipes)",
            )
        chosen[folder] = f"{folder}/{value}.j2"
    return chosen


def site_packages(cell: Cell) -> str:
    return f"{cell.runtime.venv}/lib/python{cell.runtime.python}/site-packages"


#: What a rendered cell value may hold, by where the templates put it (issue 17, defence in depth behind the
#: matrix loader's patterns): most values are words in shell commands, ARG/ENV values or paths, so they hold
#: only characters no shell or Dockerfile parser treats specially; a few are text inside double quotes (no
#: quote, backslash, $ or `), and a few only reach comments (one line is enough there).
SHELL_WORD: Final[re.Pattern[str]] = re.compile(r"[A-Za-z0-9._:/@+=,%~-]*")
QUOTED_TEXT: Final[re.Pattern[str]] = re.compile(r'[^"\\$`]*')
#: a label name: rendered bare before ``="…"`` in the LABEL instruction
LABEL_NAME: Final[re.Pattern[str]] = re.compile(r"[a-z0-9]([a-z0-9._-]*[a-z0-9])?")
_RENDERED_AS: Final[dict[str, re.Pattern[str] | tuple[re.Pattern[str], ...] | None]] = {
    # inside "…": NVIDIA_REQUIRE_CUDA="…", NVCC_GENCODE="…", LABEL …="…"
    "require_cuda": QUOTED_TEXT,
    "nvcc_gencode": QUOTED_TEXT,
    "gpu_names": QUOTED_TEXT,
    "labels": (LABEL_NAME, QUOTED_TEXT),  # (name, value) pairs: name="value"
    # comments only (Dockerfile.j2's header), or not rendered at all
    "lock_note": None,
    "arch_coverage": None,
    "toolkit_note": None,  # plan --explain only
}


def wheel_layer_script(venv: str, python: str, *, hashed: bool) -> str:
    """The body every wheel layer of a venv *venv* of CPython *python* runs (``wheel-layer.sh``): no cell
    id, no lock name, so cells with the same venv, Python and hash mode share its bytes and their layers'
    cache."""
    return _render(
        "wheel-layer.sh.j2",
        venv=venv,
        hashed=hashed,
        fixed_dirs=_ancestors(f"{venv}/lib/python{python}/site-packages"),
        layer_epoch=LAYER_EPOCH,
    )


def wheel_layer_files(
    layers: Sequence[WheelLayer], *, venv: str, python: str, hashed: bool, cell: Cell | None = None
) -> dict[str, str]:
    """The build-context files of a layer plan: one requirements file per layer (the lock's pin lines, with
    their hashes when *cell* is given), the script every layer's RUN runs (:data:`WHEEL_LAYER_SCRIPT`), and
    the two /etc placeholders its Dockerfile block COPYs. A layer file names no lock and no cell: cells that
    share a wheel layer mount the same bytes, so BuildKit's cache serves the layer to all of them."""
    files: dict[str, str] = {}
    for layer in layers:
        files[layer.file] = f"# {HEADER}\n# one layer of the layer plan (`imagesmith plan --explain`)\n" + (
            _pin_lines(cell, layer.pins)
            if cell is not None
            else "".join(f"{n}=={v}\n" for n, v in layer.pins)
        )
    if layers:
        files[WHEEL_LAYER_SCRIPT] = wheel_layer_script(venv, python, hashed=hashed)
        for stub in ("hosts", "resolv.conf"):
            files[f"layers/etc/{stub}"] = (
                f"# {HEADER}\n# a placeholder: docker mounts its own /etc/{stub} at run time "
                "(see the Dockerfile)\n"
            )
    return files


def wheel_layers_block(layers: Sequence[WheelLayer]) -> str:
    """The Dockerfile lines that install *layers* (the block a cell's Dockerfile has; ``parts.wheel_layers``):
    each layer one RUN of :data:`WHEEL_LAYER_SCRIPT` (:func:`wheel_layer_files` writes it) on its pin file."""
    template = '{% import "parts.j2" as parts with context %}{{ parts.wheel_layers(layers) }}'
    try:
        return _env().from_string(template).render(layers=layers, layer_epoch=LAYER_EPOCH)
    except jinja2.TemplateError as exc:
        raise RenderError(f"imagesmith/templates/parts.j2: {exc}", hint="fix the template") from exc


def _ancestors(path: str) -> list[str]:
    """The folders above *path* (``/opt``, ``/opt/venv``, …), *path* itself excluded."""
    parts = PurePosixPath(path).parts[1:-1]
    return ["/" + "/".join(parts[: i + 1]) for i in range(len(parts))]


def _single_line_text(cell: Cell) -> None:
    """Every text of the cell that a template may render is one line without control characters: no input can
    add a line (an instruction) to a Dockerfile or a script; and each holds only what its place in the
    templates can take (:data:`_RENDERED_AS`, else :data:`SHELL_WORD`): no value can add a shell command or
    end a quoted string. The loaders say what is wrong first; this is the last guard, for any field.
    """

    def texts(value: Any, rule: Any) -> list[tuple[str, re.Pattern[str] | None]]:
        if isinstance(value, str):
            return [(value, rule)]
        if isinstance(value, tuple) and isinstance(rule, tuple):  # pairs: one pattern per position
            return [t for pair in value for v, r in zip(pair, rule, strict=False) for t in texts(v, r)]
        if isinstance(value, tuple):
            return [t for v in value for t in texts(v, rule)]
        return []

    for name, value in cell.leaves():
        for text, allowed in texts(value, _RENDERED_AS.get(name, SHELL_WORD)):
            # printable ASCII holds none of them (C0/DEL are Cc; Zl, Zp and the bidi controls are not ASCII):
            # the per-character look-up only for the rest (it was most of a cached plan's time)
            bad = (
                []
                if text.isascii() and text.isprintable()
                else [c for c in text if unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in BIDI_CONTROLS]
            )
            if bad:
                raise RenderError(
                    f"cell {cell.id}: {name} holds a control character ({bad[0]!r}) in {text[:60]!r}",
                    hint="the matrix (or lock) value it comes from must be one line of text",
                )
            if allowed is not None and not allowed.fullmatch(text):
                odd = next(c for c in text if not allowed.fullmatch(c))
                raise RenderError(
                    f"cell {cell.id}: {name} holds {odd!r} in {text[:60]!r}, which its place in the "
                    "Dockerfile or a script cannot take safely",
                    hint="the matrix (or lock) value it comes from must match its field's pattern "
                    "(docs/matrix.md, Field rules)",
                )


def _entrypoint_cell(cell: Cell) -> str:
    """The cell id entrypoint.sh names: the cell's own, or, for a flavor built on another (:data:`BUILT_ON`),
    that flavor's cell of the same torch, variant, Python and OS (ids are ``…-py<X.Y>-<flavor>-<os>``)."""
    on = BUILT_ON.get(cell.flavor)
    if on is None:
        return cell.id
    mark = f"-py{cell.runtime.python}-{cell.flavor}-"
    return cell.id.replace(mark, f"-py{cell.runtime.python}-{on}-", 1) if mark in cell.id else cell.id


def _pin_lines(cell: Cell, pins: tuple[tuple[str, str], ...]) -> str:
    """``name==version`` lines, each with its lock's ``--hash=sha256:`` lines (pip's hash-checking mode)."""
    out = []
    for n, v in pins:
        hashes = cell.lock.hashes_of(n, v)
        out.append(f"{n}=={v}" + "".join(f" \\\n    --hash=sha256:{h}" for h in hashes) + "\n")
    return "".join(out)


def _unhashed_note(cell: Cell) -> str:
    if cell.lock.hashed:
        return ""
    return (
        f"# UNHASHED: lock {PurePosixPath(cell.lock.lock_file).name} has no sha256 for every pin; "
        "`imagesmith build` refuses this cell unless --allow-unhashed (fix: `imagesmith lock --force` where "
        "the index is reachable)\n"
    )


def render_cell_files(cell: Cell) -> dict[str, str]:
    """All files of *cell*'s build context, keyed by path relative to the context folder."""
    _single_line_text(cell)
    family = compat.os_family(cell.bases.os)
    if family is None:
        raise RenderError(
            f"cell {cell.id}: no OS family for base os {cell.bases.os!r}",
            hint="known: "
            + "; ".join(f"{f.name} ({', '.join(f.os_prefixes)})" for f in compat.os_families()),
        )
    runtime_mirror = MIRROR_PROFILES[cell.publish.mirror_runtime]
    build_mirror = MIRROR_PROFILES[cell.publish.mirror_build]
    context = {
        "cell": cell,
        "os_family": family,
        "fragments": _fragment_templates(cell, family),
        "mirror_script": f"{family.name}-mirror.sh",
        "build_mirror": build_mirror,
        "runtime_mirror": runtime_mirror,
        "build_apt_mirror": build_mirror.apt_root,
        "runtime_apt_mirror": runtime_mirror.apt_root,
        "site_packages": site_packages(cell),
        "nccl_tests_bin": NCCL_TESTS_BIN,
        "cuda_major": cell.stack.cuda.split(".")[0],
        "cuda_home": f"{site_packages(cell)}/nvidia/cu{cell.stack.cuda.split('.')[0]}",
        "entrypoint_cell": _entrypoint_cell(cell),
        "interactive": INTERACTIVE_DEFAULTS,
        "layer_epoch": LAYER_EPOCH,
        # the torch wheel's TORCH_CUDA_ARCH_LIST: release reads the index entry's `arch` from this label
        "torch_arch": ",".join(compat.torch_variant(cell.stack.torch, cell.stack.variant).arch_list),
    }
    # No cell id in the pin files: the runtime and devel cells of one (torch, variant, python) COPY the same
    # requirements.txt and mount the same layer files (and wheel-layer.sh), so each wheel layer is built once
    # and pushed once.
    # The lock's name, not its path: the same pins render the same file (and share the wheel layers) in any
    # project.
    header = f"# {HEADER}\n# pins from lock {PurePosixPath(cell.lock.lock_file).name}\n" + _unhashed_note(
        cell
    )
    files = {
        "Dockerfile": _render("Dockerfile.j2", **context),
        "entrypoint.sh": _render("entrypoint.sh.j2", **context),
        f"{family.name}-mirror.sh": _render("mirror.sh.j2", **context),
        "requirements.txt": header + _pin_lines(cell, cell.lock.pins),
        "builder-requirements.txt": header + _pin_lines(cell, cell.lock.builder_pins),
    }
    files.update(
        wheel_layer_files(
            cell.publish.layers,
            venv=cell.runtime.venv,
            python=cell.runtime.python,
            hashed=cell.lock.hashed,
            cell=cell,
        )
    )
    if cell.flavor == "interactive":
        files["interactive-requirements.txt"] = (
            f"# {HEADER}\n# pins from lock {PurePosixPath(cell.lock.lock_file).name}, interactive section "
            "(on top of requirements.txt)\n"
            + _unhashed_note(cell)
            + _pin_lines(cell, cell.lock.interactive_pins)
        )
        for name, template in INTERACTIVE_FILES.items():
            files[name] = _render(template, **context)
    for folder in FILLED_AT_BUILD:
        files[f"{folder}/README.md"] = _render("context-README.md.j2", folder=folder, **context)
    if runtime_mirror.name != "none":
        files["mirror/pip.conf"] = _render("pip.conf.j2", **context)
        files["mirror/uv.toml"] = _render("uv.toml.j2", **context)
        files["mirror/condarc"] = _render("condarc.j2", **context)
    for name, text in files.items():
        if HEADER not in text.split("\n", 3)[1] + text.split("\n", 3)[0]:
            raise RenderError(
                f"template output {name} of {cell.id} lacks the '{HEADER}' header",
                hint="every template must start with the GENERATED header (see imagesmith/templates/)",
            )
    return files
