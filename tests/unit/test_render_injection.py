"""No input adds a line to a rendered Dockerfile: label injection is refused by the matrix loader, and the
renderer refuses any control character in any field of a cell (issue 12, item 1)."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from imagesmith.errors import MatrixError, RenderError
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.templating import render_cell_files
from tests.repo import PROJECT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SMOKE = (PROJECT.matrices_dir / "smoke.toml").read_text()


def _cell() -> object:
    (cell,) = build_plan(load_matrix("smoke", project=PROJECT), project=PROJECT).cells
    return cell


@pytest.mark.parametrize("field", ["labels", "base_image", "lock_note", "python_install_mirror"])
def test_a_control_character_in_any_field_is_refused_by_the_renderer(field: str) -> None:
    cell = _cell()
    value = (("com.example.x", "a\nRUN evil"),) if field == "labels" else "a\nRUN evil"
    with pytest.raises(RenderError, match=rf"{field} holds a control character"):
        render_cell_files(replace(cell, **{field: value}))  # type: ignore[type-var]


def _toml_string(text: str) -> str:
    def esc(c: str) -> str:
        if c.isascii() and (c.isalnum() or c in " .-_:/=,+"):
            return c
        return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"

    return '"' + "".join(esc(c) for c in text) + '"'


@settings(
    max_examples=int(os.environ.get("IMAGESMITH_FUZZ_EXAMPLES", "80")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    # label names that pass (so values get rendered) and any text at all
    key=st.one_of(
        st.from_regex(r"com\.example\.[a-z0-9]([a-z0-9._-]{0,10}[a-z0-9])?", fullmatch=True),
        st.text(min_size=1, max_size=20),
    ),
    value=st.text(max_size=30),
)
def test_any_label_renders_as_exactly_one_line_or_is_refused(tmp_path: Path, key: str, value: str) -> None:
    path = tmp_path / "smoke.toml"
    path.write_text(
        SMOKE.replace("[labels]\n", f"[labels]\n{_toml_string(key)} = {_toml_string(value)}\n", 1)
    )
    tomllib.loads(path.read_text())  # the test writes valid TOML; the loader judges the content
    (tmp_path / "registries.toml").write_text(PROJECT.registries_file.read_text())
    refused: MatrixError | None = None
    try:
        matrix = load_matrix(path, project=PROJECT)
    except MatrixError as exc:
        refused = exc
    event("refused by the loader" if refused is not None else "rendered")
    if refused is not None:
        assert str(refused).startswith(f"{path}: labels")
        assert "fix:" in str(refused)
        return
    (cell,) = build_plan(matrix, project=PROJECT).cells
    dockerfile = render_cell_files(cell)["Dockerfile"]
    (base,) = build_plan(load_matrix("smoke", project=PROJECT), project=PROJECT).cells
    baseline = render_cell_files(base)["Dockerfile"]
    extra = 0 if key == "io.imagesmith.ulimits" else 1
    assert len(dockerfile.splitlines()) == len(baseline.splitlines()) + extra
    assert f'      {key}="{value}" \\' in dockerfile.splitlines()
