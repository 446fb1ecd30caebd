"""Issue 31: the fetch-sources command's layer — a typed request, the flag rules in one place (``prepare``),
the run (``fetch``), called without the CLI."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError, ImagesmithError
from imagesmith.project import PROJECT_FILE, Project, load_project
from imagesmith.sourcesrequest import SourcesRequest, fetch, prepare
from tests.repo import PROJECT, REPO
from tests.seams import Seams


def _project(root: Path, *matrices: str) -> Project:
    (root / "matrices").mkdir(parents=True)
    (root / PROJECT_FILE).write_text("schema = 1\n")
    shutil.copy(PROJECT.registries_file, root / "matrices" / "registries.toml")
    for name in matrices:
        shutil.copy(PROJECT.matrices_dir / f"{name}.toml", root / "matrices" / f"{name}.toml")
    return load_project(root / PROJECT_FILE)


@pytest.mark.parametrize(
    ("request_", "field", "says"),
    [
        (
            SourcesRequest(from_git=REPO, from_paths=(REPO,)),
            "--from-git",
            "--from-git and --from are exclusive",
        ),
        (SourcesRequest(from_paths=(Path("/nonexistent"),)), "--from", "--from /nonexistent: no such file"),
        (SourcesRequest(from_paths=(Path("/dev/null"),)), "--from", "--from /dev/null: neither a folder nor"),
        (SourcesRequest(from_git=REPO / "README.md"), "--from-git", "--from-git "),
        (
            SourcesRequest(from_git=Path("/nonexistent")),
            "--from-git",
            "--from-git /nonexistent: not a folder",
        ),
    ],
)
def test_a_bad_local_source_is_one_error_naming_the_flag_before_the_project(
    request_: SourcesRequest, field: str, says: str
) -> None:
    seams = Seams()
    with pytest.raises(ConfigError) as info:
        prepare(request_, project_of=seams.project_of)
    assert info.value.field == field
    assert info.value.message.startswith(says), info.value.message
    assert seams.asked == []


def test_a_project_of_no_matrix_names_the_flag(tmp_path: Path) -> None:
    seams = Seams(_project(tmp_path / "p"))
    with pytest.raises(ConfigError) as info:
        prepare(SourcesRequest(), project_of=seams.project_of)
    assert info.value.field == "--matrix"
    assert seams.asked == [None]


@pytest.mark.parametrize("template", ["bad", "https://m.example/{nope}"])
def test_a_bad_mirror_template_names_the_flag(template: str) -> None:
    with pytest.raises(ImagesmithError) as info:
        prepare(SourcesRequest(matrix=("smoke",), mirror=(template,)), project_of=Seams().project_of)
    assert info.value.field == "--mirror"
    assert info.value.exit_code == 2


def test_every_matrix_is_read_before_an_archive_is_fetched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = _project(tmp_path / "p", "smoke", "a100")
    (project.matrices_dir / "zz-broken.toml").write_text("schema = 1\n[torch\n")
    monkeypatch.setattr("imagesmith.sources.ensure_cached", lambda *a, **k: pytest.fail("fetched"))
    with pytest.raises(ImagesmithError) as info:
        prepare(SourcesRequest(), project_of=Seams(project).project_of)
    assert "zz-broken.toml" in info.value.message


def test_each_archive_once_with_the_mirrors_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seams = Seams()
    p = prepare(
        SourcesRequest(matrix=("smoke", "smoke-cu12", "smoke"), mirror=("https://m.example/{url}",)),
        project_of=seams.project_of,
    )
    assert seams.asked == ["smoke"]
    assert len({a.file_name for a in p.archives}) == len(p.archives) >= 1
    assert p.mirrors[0] == "https://m.example/{url}"
    calls: list[dict[str, Any]] = []

    def ensure_cached(archive: Any, **kwargs: Any) -> tuple[Path, str]:
        calls.append(kwargs)
        return tmp_path / archive.file_name, "cached"

    monkeypatch.setattr("imagesmith.sources.ensure_cached", ensure_cached)
    monkeypatch.setattr("imagesmith.sources.sources_dir", lambda: tmp_path)
    request = SourcesRequest(from_paths=(tmp_path,))
    lines: list[str] = []
    result = fetch(request, p, echo=lines.append)
    assert result.cache == tmp_path
    assert [c.label for c in result.cached] == [a.label for a in p.archives]
    assert calls[0] == {"from_git": None, "from_paths": (tmp_path,), "mirrors": list(p.mirrors)}
    archive = p.archives[0]
    assert (
        lines[0]
        == f"{archive.label}: {tmp_path / archive.file_name} (cached, sha256 {archive.sha256[:16]}… ok)"
    )
