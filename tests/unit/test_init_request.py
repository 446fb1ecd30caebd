"""Issue 31: the init command's layer — a typed request, the flag rules in one place (``prepare``), the run
(``init``), called without the CLI."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError
from imagesmith.initrequest import InitRequest, init, prepare


@pytest.mark.parametrize(
    ("request_", "field", "says"),
    [
        (InitRequest(name=""), "--name", "--name '': empty, or holds control characters"),
        (InitRequest(name="a\tb"), "--name", "--name 'a\\tb': empty, or holds control characters"),
        (InitRequest(name="My Project"), "--name", "--name 'My Project' is not a project name"),
        (
            InitRequest(registry=("ghcr.io/me", "ghcr.io/me/")),
            "--registry",
            "--registry ghcr.io/me is given 2 times",
        ),
        # the order of the rules: --name before --registry
        (InitRequest(name="", registry=("r", "r")), "--name", "--name '': empty"),
    ],
)
def test_a_bad_flag_is_one_error_naming_it_and_nothing_is_written(
    tmp_path: Path, request_: InitRequest, field: str, says: str
) -> None:
    root = tmp_path / "p"
    with pytest.raises(ConfigError) as info:
        prepare(InitRequest(**{**request_.__dict__, "directory": root}))
    assert info.value.field == field
    assert info.value.message.startswith(says), info.value.message
    assert not root.exists()


def test_a_directory_that_is_a_file_is_refused_first(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError) as info:
        prepare(InitRequest(directory=tmp_path / "f", name=""))  # before the bad --name
    assert info.value.field == "DIRECTORY"
    assert "exists and is not a folder" in info.value.message


def test_an_example_that_plans_no_cell_is_refused_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import imagesmith.scaffold as scaffold

    real = scaffold.project_files

    def excluded(**kwargs: Any) -> dict[str, str]:
        files = real(**kwargs)
        key = next(k for k in files if k.startswith("matrices/") and k != "matrices/registries.toml")
        files[key] += '\n[[exclude]]\nflavor = "runtime"\nreason = "t"\n'  # every cell excluded
        return files

    monkeypatch.setattr(scaffold, "project_files", excluded)
    with pytest.raises(ConfigError) as info:
        prepare(InitRequest(directory=tmp_path / "p"))
    assert info.value.field == "--gpu"
    assert "plans no cell" in info.value.message
    assert not (tmp_path / "p").exists()


def test_a_project_inside_another_projects_matrices_is_refused(tmp_path: Path) -> None:
    outer = tmp_path / "outer"
    init(InitRequest(directory=outer), prepare(InitRequest(directory=outer, render=False)))
    with pytest.raises(ConfigError) as info:
        prepare(InitRequest(directory=outer / "matrices" / "inner"))
    assert info.value.field == "DIRECTORY"
    assert "inside paths.matrices" in info.value.message


def test_a_request_becomes_a_written_project(tmp_path: Path) -> None:
    root = tmp_path / "p"
    request = InitRequest(directory=root, gpu=("a100",), name="demo", registry=("ghcr.io/me",))
    p = prepare(request)
    assert (p.root, p.name, p.matrix_name, list(p.gpu_args)) == (root, "demo", "a100", ["a100"])
    assert not root.exists()  # the rules write nothing
    result = init(request, p)
    assert result.matrix_name == "a100"
    assert result.cells >= 1
    written = {path.relative_to(root).as_posix() for path in result.written}
    assert {"imagesmith.toml", "matrices/a100.toml", f"locks/{p.choice.lock.filename}"} <= written
    assert '\nhost = "ghcr.io"\n' in (root / "matrices" / "registries.toml").read_text()  # --registry
    rendered = list((root / "dockerfiles" / "a100").rglob("*"))
    assert result.rendered is not None
    assert result.rendered == len([f for f in rendered if f.is_file()])


def test_no_render_writes_no_dockerfiles(tmp_path: Path) -> None:
    request = InitRequest(directory=tmp_path / "p", render=False)
    result = init(request, prepare(request))
    assert result.rendered is None
    assert not (tmp_path / "p" / "dockerfiles").exists()
