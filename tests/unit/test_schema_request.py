"""Issue 31: the schema command's layer — a typed request, the flag rule (``prepare``), the run
(``write_schemas``), called without the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagesmith.errors import ConfigError, RenderError
from imagesmith.schema import SCHEMAS
from imagesmith.schemarequest import SchemaRequest, prepare, write_schemas
from tests.repo import REPO


def _no_default() -> Path:
    raise AssertionError("--out was given: the project's folder is not asked for")


@pytest.mark.parametrize("out", [REPO / "README.md", Path("/dev/null/x")])
def test_an_out_that_is_no_folder_is_one_error_naming_the_flag(out: Path) -> None:
    with pytest.raises(ConfigError) as info:
        prepare(SchemaRequest(out=out), default_out=_no_default)
    assert info.value.field == "--out"
    assert info.value.message.startswith(f"--out {out}: ")


def test_without_out_the_commands_folder(tmp_path: Path) -> None:
    assert prepare(SchemaRequest(), default_out=lambda: tmp_path).out == tmp_path
    assert prepare(SchemaRequest(out=tmp_path / "new"), default_out=_no_default).out == tmp_path / "new"


def test_written_then_current_then_check_passes(tmp_path: Path) -> None:
    out = tmp_path / "schemas"
    request = SchemaRequest(out=out)
    lines: list[str] = []
    first = write_schemas(request, prepare(request, default_out=_no_default), echo=lines.append)
    assert first.count == len(SCHEMAS) == len(first.written)
    assert lines == [f"wrote   {p}" for p in first.written]
    assert write_schemas(request, prepare(request, default_out=_no_default)).written == ()
    check = SchemaRequest(out=out, check=True)
    assert write_schemas(check, prepare(check, default_out=_no_default)).check


def test_check_writes_nothing_and_names_what_differs(tmp_path: Path) -> None:
    request = SchemaRequest(out=tmp_path, check=True)
    with pytest.raises(RenderError) as info:
        write_schemas(request, prepare(request, default_out=_no_default))
    assert f"{tmp_path / SCHEMAS[0].file_name}.schema.json" in info.value.message
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_cannot_be_written_names_the_flag(tmp_path: Path) -> None:
    (tmp_path / f"{SCHEMAS[0].file_name}.schema.json").mkdir()  # a folder where the file goes
    request = SchemaRequest(out=tmp_path)
    with pytest.raises(ConfigError) as info:
        write_schemas(request, prepare(request, default_out=_no_default))
    assert info.value.field == "--out"
    assert "cannot write" in info.value.message
