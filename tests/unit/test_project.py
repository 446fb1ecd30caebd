"""The project workspace: found by walking up, --project / IMAGESMITH_PROJECT, checked imagesmith.toml."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError, MatrixError
from imagesmith.project import PROJECT_FILE, ProjectError, discover, load_project, project_name
from tests.repo import PROJECT, REPO


def _project(root: Path, text: str = "schema = 1\n", *, smoke: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / PROJECT_FILE).write_text(text)
    if smoke:
        (root / "matrices").mkdir(exist_ok=True)
        shutil.copy(PROJECT.matrices_dir / "smoke.toml", root / "matrices" / "smoke.toml")
        shutil.copy(PROJECT.registries_file, root / "matrices" / "registries.toml")
        (root / "locks").mkdir(exist_ok=True)
        shutil.copy(PROJECT.locks_dir / "2.11.0-cu130-py3.11.txt", root / "locks")
    return root


def test_this_repository_is_a_project() -> None:
    assert PROJECT.root == REPO
    assert PROJECT.name == "imagesmith"
    assert PROJECT.default_matrix == "smoke"
    assert PROJECT.matrices_dir == REPO / "matrices"
    assert PROJECT.dockerfiles_dir == REPO / "dockerfiles"
    assert PROJECT.locks_dir == REPO / "imagesmith" / "data" / "locks"
    assert {"a100", "h100", "rtx4090", "smoke"} <= set(PROJECT.matrix_names())
    assert "registries" not in PROJECT.matrix_names()


def test_found_by_walking_up_from_a_subfolder(tmp_path: Path) -> None:
    root = _project(tmp_path / "team")
    deep = root / "a" / "b"
    deep.mkdir(parents=True)
    found = discover(env={}, cwd=deep)
    assert found.root == root.resolve()
    assert found.name == "team"  # default: the folder's name
    assert found.locks_dir == root.resolve() / "locks"  # defaults of [paths]


def test_explicit_and_environment_win_over_the_working_directory(tmp_path: Path) -> None:
    here = _project(tmp_path / "here")
    there = _project(tmp_path / "there")
    assert discover(there, env={}, cwd=here).root == there.resolve()
    assert discover(None, env={"IMAGESMITH_PROJECT": str(there)}, cwd=here).root == there.resolve()
    assert discover(there / PROJECT_FILE, env={}, cwd=here).root == there.resolve()
    with pytest.raises(ProjectError) as info:
        discover(tmp_path / "nowhere", env={}, cwd=here)
    assert "--project" in str(info.value)
    assert "imagesmith init" in str(info.value)


def test_no_project_is_one_error_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ProjectError) as info:
        discover(env={}, cwd=tmp_path)
    text = str(info.value)
    assert f"no {PROJECT_FILE} in {tmp_path}" in text
    assert "fix: run `imagesmith init`" in text


def test_a_matrix_file_named_by_path_finds_its_project(tmp_path: Path) -> None:
    root = _project(tmp_path / "p")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = discover(env={}, cwd=elsewhere, near=root / "matrices" / "smoke.toml")
    assert found.root == root.resolve()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("schema = 1\nmatrix = 'x'\n", "unknown key 'matrix'"),
        ("schema = 2\n", "schema: 2 is not supported"),
        ("schema = true\n", "schema: True is not supported"),
        ("name = 'Bad Name'\n", "is not a project name"),
        ("[paths]\nmatrixes = 'm'\n", "[paths] knows only matrices, dockerfiles, locks, registries"),
        ("[paths]\nmatrices = '/abs/matrices'\n", "is absolute"),
        ("[paths]\nlocks = '~/locks'\n", "is absolute"),
        ("[paths]\nlocks = ''\n", "must be a non-empty path string"),
        ("default_matrix = 'nope'\n", "default_matrix = 'nope' but"),
        ("[sources]\nmirrors = 'https://m/{url}'\n", "sources.mirrors must be a list"),
        ("[sources]\nmirrors = ['ftp://m/{url}']\n", "is not an http(s) URL template"),
        ("[sources]\nmirrors = ['https://m/{uri}']\n", "uses {uri}"),
        ("[sources]\nmirror = []\n", "sources.mirror: unknown key 'mirror' ([sources] knows only mirrors)"),
        ("schema = 1\n[paths\n", "not valid TOML"),
        ("[paths]\ndockerfiles = '.'\n", "must be a folder inside the project, not its root"),
        ("[paths]\ndockerfiles = '../elsewhere'\n", "dockerfiles = '../elsewhere' leads outside"),
        # re-check (hostile inputs): a path that leaves the clone, control characters, a file for a folder
        ("[paths]\nmatrices = '../../etc'\n", "paths.matrices = '../../etc' leads outside the project"),
        ("[paths]\nlocks = 'x/../../shared'\n", "paths.locks = 'x/../../shared' leads outside the project"),
        ("[release]\ntrusted_keys = ['../k.pub']\n", "release.trusted_keys[0] = '../k.pub' leads outside"),
        ('[paths]\nrelease_index = "\\u0000"\n', "paths.release_index = '\\x00' holds control characters"),
        ('[paths]\nlocks = "lo\\ncks"\n', "holds control characters"),
        ("[paths]\nlocks = 'imagesmith.toml'\n", "paths.locks = "),
        ("[paths]\nregistries = 'matrices'\n", "is a folder, not a file"),
        ("default_matrix = '../matrices/m'\n", "default_matrix: '../matrices/m' is not a matrix name"),
        ("default_matrix = 'registries'\n", "names the registries file, not a matrix"),
        ("[paths]\ndockerfiles = 'matrices'\n", "overlaps paths.matrices"),
        ("[paths]\ndockerfiles = 'gen'\nlocks = 'gen/locks'\n", "overlaps paths.locks"),
    ],
)
def test_bad_project_file_is_one_clear_error(tmp_path: Path, text: str, expected: str) -> None:
    root = _project(tmp_path / "p", text)
    with pytest.raises(ProjectError) as info:
        load_project(root / PROJECT_FILE)
    message = str(info.value)
    assert expected in message
    assert str(root.resolve() / PROJECT_FILE) in message
    fix = message.split("fix:", 1)[1].strip()
    assert fix, message


def test_nearest_key_is_suggested(tmp_path: Path) -> None:
    root = _project(tmp_path / "p", "[paths]\nlock = 'l'\n")
    with pytest.raises(
        ProjectError, match=r"paths\.lock: unknown key 'lock' .*; nearest valid value: 'locks'"
    ):
        load_project(root / PROJECT_FILE)


def test_empty_project_matrix_errors_name_the_fix(tmp_path: Path) -> None:
    root = _project(tmp_path / "empty", smoke=False)
    project = load_project(root / PROJECT_FILE)
    with pytest.raises(MatrixError) as info:
        project.matrix_path("a100")
    assert "holds no matrix" in str(info.value)
    assert "imagesmith init" in str(info.value)
    with pytest.raises(ConfigError, match="no --matrix given and no default_matrix") as err:
        project.resolve_matrix_name(None)
    assert "fix: add a matrix file" in str(err.value)


def test_single_matrix_is_the_default(tmp_path: Path) -> None:
    project = load_project(_project(tmp_path / "p") / PROJECT_FILE)
    assert project.resolve_matrix_name(None) == "smoke"
    assert project.resolve_matrix_name("other") == "other"


def test_project_name_from_folder() -> None:
    assert project_name("My GPU Images!") == "my-gpu-images"
    assert project_name("___") == "imagesmith-project"


def test_cli_commands_use_the_project_flag(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    root = _project(tmp_path / "p")
    out = run_cli("--project", str(root), "plan", "--json")
    assert out.exit_code == 0, out.stderr
    assert '"context": "dockerfiles/smoke/2.11.0-cu130-py3.11-runtime-debian12"' in out.stdout
    out = run_cli("--project", str(root), "render", "--check")
    assert out.exit_code == 4  # nothing rendered yet: every file is missing
    assert "missing:" in out.stderr
    out = run_cli("--project", str(root), "render")
    assert out.exit_code == 0, out.stderr
    assert (root / "dockerfiles" / "smoke" / "2.11.0-cu130-py3.11-runtime-debian12" / "Dockerfile").is_file()
    assert run_cli("--project", str(root), "render", "--check").exit_code == 0
    # the next invocation without --project is back in this repository's project
    out = run_cli("plan", "--json")
    assert '"context": "dockerfiles/smoke/' in out.stdout


def test_cli_without_a_project_says_how_to_get_one(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("IMAGESMITH_PROJECT", raising=False)
    out = run_cli("plan")
    assert out.exit_code == 2
    assert "no imagesmith.toml" in out.stderr
    assert "fix: run `imagesmith init`" in out.stderr
    # commands that need no project keep working anywhere (compat, pick, validate)
    out = run_cli("compat", "--driver", "535.104.05", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1")
    assert out.exit_code == 0, out.stderr


def test_render_refuses_a_matrix_from_outside_the_project(
    tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    outside = tmp_path / "x"
    outside.mkdir()
    shutil.copy(PROJECT.matrices_dir / "smoke.toml", outside / "smoke.toml")
    shutil.copy(PROJECT.registries_file, outside / "registries.toml")
    out = run_cli("--project", str(REPO), "render", "--matrix", str(outside / "smoke.toml"))
    assert out.exit_code == 4
    assert "only matrices in matrices/ of project" in out.stderr


def test_render_prunes_only_folders_it_rendered(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    root = _project(tmp_path / "p")
    assert run_cli("--project", str(root), "render").exit_code == 0
    out = root / "dockerfiles"
    mine = out / "notes" / "readme.txt"  # a user's folder under dockerfiles/: not rendered, never deleted
    mine.parent.mkdir()
    mine.write_text("keep me")
    stale = out / "gone"  # a matrix that no longer exists: its rendered folder goes
    shutil.copytree(out / "smoke", stale)
    result = run_cli("--project", str(root), "render")
    assert result.exit_code == 0, result.stderr
    assert "left    dockerfiles/notes" in result.stdout
    assert mine.read_text() == "keep me"
    assert not stale.exists()


def test_a_linked_locks_folder_plans_and_renders_as_a_plain_one(tmp_path: Path) -> None:
    """Re-check finding: with ``locks`` a link to a folder outside the project, the plan showed (and the
    Dockerfile carried) that folder's absolute path, so fingerprints and ``render --check`` depended on the
    machine. Paths of the project are now taken lexically: the link is the project's ``locks/``."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from imagesmith.render import render_plan

    plain = _project(tmp_path / "plain")
    linked = _project(tmp_path / "linked")
    shared = tmp_path / "shared-locks"
    (linked / "locks").rename(shared)
    (linked / "locks").symlink_to(shared, target_is_directory=True)

    def planned(root: Path) -> tuple[list[str], list[str], list[str]]:
        project = load_project(root / PROJECT_FILE)
        plan = build_plan(load_matrix("smoke", project=project), project=project)
        texts = [t for p, t in sorted(render_plan(plan, project).items()) if p.name == "Dockerfile"]
        return [c.publish.fingerprint for c in plan.cells], [c.lock.lock_file for c in plan.cells], texts

    fingerprints, lock_files, dockerfiles = planned(linked)
    assert lock_files
    assert all(f.startswith("locks/") for f in lock_files), lock_files
    assert (fingerprints, lock_files, dockerfiles) == planned(plain)
    assert all(str(shared) not in text for text in dockerfiles)
