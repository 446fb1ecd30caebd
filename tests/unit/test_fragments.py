"""The Dockerfile is a skeleton plus fragments (imagesmith/templates/<folder>/<value>.j2): every value the
planner can give a cell has its fragment, no fragment is an orphan, the fragments of a folder are
interchangeable (same macros), the skeleton asks no cell value, and a value without a fragment is one clear
error."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

import jinja2
import pytest

from imagesmith import compat, templating
from imagesmith.errors import RenderError
from imagesmith.matrix import FLAVORS, TORCH_SOURCES, load_matrix
from imagesmith.model import Cell, NcclToolkit, PythonSource
from imagesmith.plan import build_plan
from imagesmith.templating import FRAGMENT_FOLDERS, fragments, render_cell_files
from tests.cellfields import with_field
from tests.repo import PROJECT

TEMPLATES_DIR = PROJECT.root / "imagesmith" / "templates"

#: Where each folder's values are defined: the planner can give a cell exactly these.
ALLOWED: dict[str, tuple[str, ...]] = {
    "os": tuple(f.name for f in compat.os_families()),
    "toolkit": get_args(NcclToolkit),
    "python": get_args(PythonSource),
    "torch": TORCH_SOURCES,
    "flavor": FLAVORS,
}


#: The macros every fragment of a folder defines (what the skeleton and the other fragments call).
INTERFACES: dict[str, set[str]] = {
    "os": {"install", "install_unpacked", "mirror_runtime", "mirror_script"},
    "toolkit": {"about", "builder", "cuda_env", "devel_note", "devel_layers", "devel_cuda_home"},
    "python": {"args", "system_packages", "venv"},
    "torch": {"context_note", "image", "install"},
    "flavor": {"about", "image", "layers", "cuda_home", "top_layers", "command"},
}


def _cells() -> list[Cell]:
    return [
        c for name in PROJECT.matrix_names() for c in build_plan(load_matrix(name, project=PROJECT)).cells
    ]


def test_fragment_folders_are_the_templates_subfolders() -> None:
    assert set(FRAGMENT_FOLDERS) == set(ALLOWED) == set(INTERFACES)
    assert {p.name for p in TEMPLATES_DIR.iterdir() if p.is_dir() and p.name != "__pycache__"} == set(
        FRAGMENT_FOLDERS
    )


@pytest.mark.parametrize("folder", sorted(FRAGMENT_FOLDERS))
def test_every_value_has_a_fragment_and_no_fragment_is_an_orphan(folder: str) -> None:
    assert sorted(fragments(folder)) == sorted(ALLOWED[folder])
    assert {p.stem for p in (TEMPLATES_DIR / folder).glob("*.j2")} == set(ALLOWED[folder])


def test_the_planner_gives_only_allowed_values() -> None:
    """The Literal types hold at run time too: every cell of every matrix of this project."""
    cells = _cells()
    assert cells
    seen: dict[str, set[str]] = {folder: set() for folder in FRAGMENT_FOLDERS}
    for cell in cells:
        family = compat.os_family(cell.bases.os)
        assert family is not None
        for folder, value in templating.fragment_values(cell, family).items():
            assert value in ALLOWED[folder], (cell.id, folder, value)
            seen[folder].add(value)
    # the committed dockerfiles/ exercise every fragment but the OS families this project does not use, and
    # the devel-image toolkit: no matrix of this project needs an nvidia/cuda image any more (issue 11);
    # tests/unit/test_toolkit.py renders a devel-image cell from a matrix of its own
    for folder in ("toolkit", "python", "torch", "flavor"):
        unused = {"devel-image"} if folder == "toolkit" else set()
        assert seen[folder] | unused == set(ALLOWED[folder]), folder
        assert not seen[folder] & unused, folder


def _macros(template: str) -> set[str]:
    env = templating._environment()
    assert env.loader is not None
    source, _, _ = env.loader.get_source(env, template)
    return {m.name for m in env.parse(source).find_all(jinja2.nodes.Macro)}


@pytest.mark.parametrize("folder", sorted(FRAGMENT_FOLDERS))
def test_fragments_of_a_folder_define_the_same_macros(folder: str) -> None:
    """A fragment is one class of an interface: a new value defines its siblings' macros."""
    for name in fragments(folder):
        assert _macros(f"{folder}/{name}.j2") == INTERFACES[folder], name


def test_the_skeleton_asks_no_fragment_value() -> None:
    """Dockerfile.j2 branches on none of the values a fragment is picked by: those branches live in the
    fragments (so a new value edits no skeleton)."""
    skeleton = (TEMPLATES_DIR / "Dockerfile.j2").read_text()
    for field in (
        "cell.toolkit.nccl_toolkit",
        "cell.runtime.python_source",
        "cell.stack.torch_source",
        "cell.flavor ==",
        "os_family.",
    ):
        assert field not in skeleton, field


def _smoke() -> Cell:
    (cell,) = build_plan(load_matrix("smoke", project=PROJECT)).cells
    return cell


@pytest.mark.parametrize(
    ("field", "value", "folder", "known"),
    [
        ("nccl_toolkit", "conda", "toolkit", "base, devel-image, distro, pip"),
        ("python_source", "conda", "python", "base, distro, uv"),
        ("torch_source", "conda", "torch", "base, wheels"),
        ("flavor", "slim", "flavor", "devel, interactive, runtime"),
    ],
)
def test_a_value_without_a_fragment_is_one_clear_error(
    field: str, value: str, folder: str, known: str
) -> None:
    cell = with_field(_smoke(), field, value)
    with pytest.raises(RenderError) as info:
        render_cell_files(cell)
    text = str(info.value)
    assert f"{field} {value!r} has no Dockerfile fragment (imagesmith/templates/{folder}/{value}.j2)" in text
    assert f"the {folder} fragments are: {known}" in text
    assert f"\n  fix: use one of {known}, or add imagesmith/templates/{folder}/{value}.j2" in text
    assert "TemplateNotFound" not in text
    assert info.value.exit_code == 4


def test_an_os_family_without_a_fragment_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    dnf = compat.OsFamily(name="dnf", os_prefixes=("rockylinux",), packages={"make": "make"}, source="test")
    monkeypatch.setattr(compat, "os_family", lambda os_tag: dnf)
    with pytest.raises(RenderError, match=r"OS family 'dnf' has no Dockerfile fragment .*are: apt\n  fix: "):
        render_cell_files(_smoke())


def test_a_new_toolkit_is_one_fragment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The recipe "A nccl-tests toolkit source": a fragment toolkit/<value>.j2 with its siblings' macros is
    all the templates need; the skeleton and the other fragments render around it."""
    pip = TEMPLATES_DIR / "toolkit" / "pip.j2"
    distro = pip.read_text().replace(
        "the builder is the plain base plus nvcc", "the builder is the plain base plus the distro's nvcc"
    )
    env = templating._environment()
    env.loader = jinja2.ChoiceLoader(
        [
            jinja2.DictLoader({"toolkit/distro.j2": distro}),
            jinja2.PackageLoader(*templating.TEMPLATES_PACKAGE),
        ]
    )
    monkeypatch.setattr(templating, "_ENV", env)
    assert "distro" in fragments("toolkit")
    cell = _smoke()
    text = render_cell_files(replace(cell, toolkit=replace(cell.toolkit, nccl_toolkit="distro")))[
        "Dockerfile"
    ]
    assert "the builder is the plain base plus the distro's nvcc" in text
    assert text.replace("the distro's nvcc", "nvcc") == render_cell_files(cell)["Dockerfile"]
