"""No input adds a line to a rendered Dockerfile: label injection is refused by the matrix loader, and the
renderer refuses any control character in any field of a cell (issue 12, item 1)."""

from __future__ import annotations

import copy
import functools
import json
import os
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from imagesmith import schema
from imagesmith.errors import MatrixError, RenderError
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import build_plan
from imagesmith.templating import render_cell_files
from tests.cellfields import leaf_fields, with_field
from tests.repo import PROJECT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SMOKE = (PROJECT.matrices_dir / "smoke.toml").read_text()


@functools.cache
def _cell() -> Cell:
    """The smoke matrix's one cell, planned once per session (a Cell is frozen; tests ``replace`` it)."""
    (cell,) = build_plan(load_matrix("smoke", project=PROJECT), project=PROJECT).cells
    return cell


@functools.cache
def _baseline_files() -> dict[str, str]:
    """The files of :func:`_cell`, rendered once (read only: every test compares against them)."""
    return render_cell_files(_cell())


@pytest.mark.parametrize("field", ["labels", "base_image", "lock_note", "python_install_mirror"])
def test_a_control_character_in_any_field_is_refused_by_the_renderer(field: str) -> None:
    cell = _cell()
    value = (("com.example.x", "a\nRUN evil"),) if field == "labels" else "a\nRUN evil"
    with pytest.raises(RenderError, match=rf"{field} holds a control character"):
        render_cell_files(with_field(cell, field, value))


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
    baseline = _baseline_files()["Dockerfile"]
    extra = 0 if key == "io.imagesmith.ulimits" else 1
    assert len(dockerfile.splitlines()) == len(baseline.splitlines()) + extra
    assert f'      {key}="{value}" \\' in dockerfile.splitlines()


# -- every string field of a matrix, hostile (issue 17) ----------------------------------------------------
#: a matrix that sets every optional string field the templates render: a uv-managed Python with a mirror, a
#: devel flavor on a devel image, the base's venv, the nccl-tests URL, an exclude, an include, an extra base
FULL = """\
schema = 1
name = "full"
description = "every field"
gpus = ["a100-80gb-sxm4"]
flavors = ["runtime", "devel"]
shm_min = "8g"
registries = ["local-plain"]

[labels]
"com.example.team" = "ml"

[torch]
versions = ["2.3.1"]
variants = ["cu121"]

[python]
versions = ["3.10", "3.11"]
uv = "0.9.5"
managed = { "3.11" = "3.11.14" }
install_mirror = "https://mirror.example/python-build-standalone/releases/download"

[base]
os = "ubuntu22.04"
image = "ubuntu:22.04"
python = "3.10"
venv = "/opt/venv"
devel_images = { "12.1" = "nvidia/cuda:12.1.1-devel-ubuntu22.04" }

[nccl_tests]
version = "v2.19.6"
commit = "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"
sha256 = "3c3b847c3ee4396d94defab52fef91ccc28c0e3a496e8e841cadd1870d9eb1c8"
url = "https://github.com/NVIDIA/nccl-tests/archive/a0b82b2260cf5152b9f8c061bbf7eaf0ba096432.tar.gz"

[mirror]
build = "none"
runtime = "none"

[[exclude]]
python = "3.11"
flavor = "devel"
reason = "distro Python only for devel"

[[include]]
torch = "2.3.1"
variant = "cu121"
python = "3.11"
flavor = "devel"

[[extra_bases]]
os = "debian12"
image = "debian:bookworm"
python = "3.11"
venv = "/opt/venv"
devel_images = { "12.1" = "example.com/own/cuda:12.1.1-devel-debian12" }
variants = ["cu121"]
flavors = ["runtime", "devel"]
"""

#: what an attacker appends to (or puts instead of) a value: a new line/instruction, a command after ; && |,
#: command substitution (also inside "…"), a quote that ends the string, a line continuation, an extra ARG
HOSTILE: tuple[str, ...] = (
    "\nRUN touch /pwned",
    "\r\nRUN touch /pwned",
    "\u2028RUN touch /pwned",
    " \\\nRUN touch /pwned",
    "; touch /pwned",
    " && touch /pwned",
    "|touch /pwned",
    "$(touch /pwned)",
    "`touch /pwned`",
    '"; touch /pwned; echo "',
    "'; touch /pwned; echo '",
    " EXTRA=1",
    "\\",
    " #",
    ">/tmp/pwned",
    "${IFS}touch${IFS}/pwned",
)


def _string_fields(spec: schema.Field, path: str) -> Iterator[tuple[str, str]]:
    """(dotted path, what) of every string the matrix schema allows: ``what`` is ``value``, ``item`` (of an
    array), ``map-value`` or ``map-key`` — generated from the schema, so a new field is tested by itself."""
    if spec.kind == "table":
        for name, sub in spec.fields.items():
            yield from _string_fields(sub, f"{path}.{name}" if path else name)
    elif spec.kind == "string":
        yield path, "value"
    elif spec.kind == "array" and spec.items is not None:
        if spec.items.kind == "string":
            yield path, "item"
        elif spec.items.kind == "table":
            yield from _string_fields(spec.items, f"{path}[0]")
    elif spec.kind == "map":
        if spec.items is not None and spec.items.kind == "string":
            yield path, "map-value"
        yield path, "map-key"


STRING_FIELDS: tuple[tuple[str, str], ...] = tuple(_string_fields(schema.MATRIX.root, ""))


def _toml(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string (ASCII, \\uXXXX escapes) is a TOML basic string
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml(v)}" for k, v in value.items()) + "}"


def _dump(data: dict[str, Any]) -> str:
    lines = [f"{k} = {_toml(v)}" for k, v in data.items() if not isinstance(v, dict | list) or k == "gpus"]
    lines += [
        f"{k} = {_toml(v)}" for k, v in data.items() if isinstance(v, list) and not isinstance(v[0], dict)
    ]
    lines = list(dict.fromkeys(lines))
    for k, v in data.items():
        if isinstance(v, dict):
            lines.append(f"[{k}]")
            lines += [f"{json.dumps(kk)} = {_toml(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and isinstance(v[0], dict):
            for row in v:
                lines.append(f"[[{k}]]")
                lines += [f"{json.dumps(kk)} = {_toml(vv)}" for kk, vv in row.items()]
    return "\n".join(lines) + "\n"


def _with(data: dict[str, Any], path: str, what: str, hostile: str) -> tuple[dict[str, Any], str]:
    """*data* with *hostile* in the field at *path*; the key the loader's error must name (its prefix)."""
    out = copy.deepcopy(data)
    parts = path.replace("[0]", "").split(".")
    holder: Any = out
    for part in parts[:-1]:
        holder = holder[part][0] if isinstance(holder[part], list) else holder[part]
    last = parts[-1]
    benign = holder.get(last)
    if what == "value":
        holder[last] = (benign or "") + hostile if not hostile.startswith("=") else hostile
    elif what == "item":
        holder[last] = [*benign[:-1], benign[-1] + hostile]
    elif what == "map-value":
        key = next(iter(benign))
        holder[last] = {**benign, key: benign[key] + hostile}
    else:  # map-key
        value = next(iter(benign.values()))
        holder[last] = {**benign, next(iter(benign)) + hostile: value}
    return out, path.split("[0]")[0]


def _instructions(dockerfile: str) -> list[tuple[str, tuple[str, ...]]]:
    """The Dockerfile as (instruction, shape) pairs: continuation lines joined, comments dropped; a RUN's
    shape is its shell operators and substitutions, another instruction's its number of words."""
    out: list[tuple[str, tuple[str, ...]]] = []
    logical = ""
    for line in dockerfile.splitlines():
        if not logical and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            logical += line.rstrip()[:-1] + " "
            continue
        logical += line
        keyword, _, rest = logical.strip().partition(" ")
        out.append((keyword.upper(), _shell_shape(rest) if keyword.upper() == "RUN" else _words(rest)))
        logical = ""
    return out


def _words(text: str) -> tuple[str, ...]:
    """How many words an instruction's arguments are (quotes kept together, as Docker reads them)."""
    try:
        return (str(len(shlex.split(text, comments=False))),)
    except ValueError as exc:
        return ("unparsable", str(exc))


def _shell_shape(script: str) -> tuple[str, ...]:
    """The operators of a shell text (; && || | ( ) < > and substitutions), outside and inside quotes."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        ops = [tok for tok in lexer if tok and set(tok) <= set("();<>|&")]
    except ValueError as exc:  # an unclosed quote: a value ended a string
        return ("unparsable", str(exc))
    return (*ops, f"$(={script.count('$(')}", f"`={script.count('`')}", f"${{={script.count('${')}")


def _shapes(files: dict[str, str]) -> dict[str, Any]:
    return {
        name: _instructions(text) if name.endswith("Dockerfile") else _shell_shape(text)
        for name, text in files.items()
        if name.endswith(("Dockerfile", ".sh"))
    }


def _render_all(path: Path) -> dict[str, dict[str, Any]]:
    plan = build_plan(load_matrix(path, project=PROJECT), project=PROJECT)
    return {cell.id.replace(path.stem, "M"): _shapes(render_cell_files(cell)) for cell in plan.cells}


@pytest.fixture(scope="module")
def full_matrix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], dict[str, Any]]:
    folder = tmp_path_factory.mktemp("full")
    (folder / "registries.toml").write_text(PROJECT.registries_file.read_text())
    path = folder / "full.toml"
    path.write_text(FULL)
    data = tomllib.loads(FULL)
    path.write_text(_dump(data))  # the dumper writes what the loader reads
    baseline = _render_all(path)
    assert any("-devel-" in cell for cell in baseline)  # devel_images is rendered
    assert any("py3.11" in cell for cell in baseline)  # python.managed and install_mirror are
    return path, data, baseline


def test_every_string_field_of_the_schema_is_in_the_full_matrix() -> None:
    data = tomllib.loads(FULL)
    for path, what in STRING_FIELDS:
        if path in ("name", "mirror.build", "mirror.runtime", "torch.source", "nccl_tests.toolkit"):
            continue
        _with(data, path, what, "x")  # raises KeyError / TypeError when FULL lacks the field


@pytest.mark.parametrize(("path", "what"), STRING_FIELDS, ids=[f"{p}:{w}" for p, w in STRING_FIELDS])
def test_a_hostile_value_in_any_field_is_refused_or_adds_nothing(
    full_matrix: tuple[Path, dict[str, Any], dict[str, Any]], path: str, what: str
) -> None:
    matrix_path, data, baseline = full_matrix
    if path == "name":
        return  # the name must equal the file's name: test_a_hostile_matrix_file_name_is_refused
    for hostile in HOSTILE:
        changed, key = _with(data, path, what, hostile)
        matrix_path.write_text(_dump(changed))
        refused: MatrixError | None = None
        try:
            shapes = _render_all(matrix_path)
        except MatrixError as exc:
            refused = exc
        if refused is not None:
            assert str(refused).startswith(f"{matrix_path}: {key}"), (hostile, str(refused))
            assert "fix:" in str(refused)
            continue
        assert shapes == baseline, (path, hostile)
    matrix_path.write_text(_dump(data))


def test_the_shape_check_sees_an_injected_command() -> None:
    """The comparison above can fail: a command appended to a RUN, or a new instruction, changes the shape."""
    benign = 'FROM x\nRUN a "/opt/venv" \\\n    && b\nARG A=1\n'
    assert _instructions(benign) != _instructions(benign.replace("/opt/venv", '/opt/venv"; touch "/x'))
    assert _instructions(benign) != _instructions(benign.replace("/opt/venv", "$(touch /x)"))
    assert _instructions(benign) != _instructions(benign.replace("A=1", "A=1 B=2"))
    assert _instructions(benign) != _instructions(benign.replace("&& b", "&& b\nRUN c"))


def test_a_hostile_matrix_file_name_is_refused(tmp_path: Path) -> None:
    (tmp_path / "registries.toml").write_text(PROJECT.registries_file.read_text())
    path = tmp_path / "x;touch.toml"
    path.write_text(SMOKE.replace('name = "smoke"\n', ""))
    with pytest.raises(MatrixError) as info:
        load_matrix(path, project=PROJECT)
    assert str(info.value).startswith(f"{path}: name")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("venv", "/opt/venv; touch /pwned"),
        ("python_full", "3.11.14$(touch /pwned)"),
        ("python_install_mirror", "https://m.example/x y"),
        ("nccl_tests_version", "v2.19.6 && touch /pwned"),
        ("devel_image", "nvidia/cuda:12.1.1 AS x"),
        ("base_image", "ubuntu:22.04\tAS"),
        ("gpu_names", ('NVIDIA "H100"',)),
        ("require_cuda", "cuda>=12 $(touch /pwned)"),
    ],
)
def test_the_renderer_refuses_a_value_its_place_cannot_take(field: str, value: object) -> None:
    """Defence in depth: a value that got past the loader (a cell made in code) is refused when rendered."""
    cell = _cell()
    with pytest.raises(RenderError, match=rf"{field} holds"):
        render_cell_files(with_field(cell, field, value))


def _hostile_cell_values(value: object, hostile: str) -> object | None:
    """*value* (a cell field's) with *hostile* appended to its first text, or None when it holds no text."""
    if isinstance(value, str):
        return value + hostile
    if isinstance(value, tuple) and value:
        first = _hostile_cell_values(value[0], hostile)
        return None if first is None else (first, *value[1:])
    return None


CELL_TEXT_FIELDS: tuple[str, ...] = tuple(
    f.name
    for f in leaf_fields()
    if f.name not in ("fingerprint",) and ("str" in str(f.type) or "tuple[str" in str(f.type))
)


@pytest.mark.parametrize("name", CELL_TEXT_FIELDS)
def test_a_hostile_value_in_any_cell_field_is_refused_by_the_renderer_or_adds_nothing(name: str) -> None:
    """The renderer's own guard, generated from the model's fields (a lock's note or pins, a value a loader
    let through, a cell made in code): refused, or the Dockerfiles and scripts keep their shape."""
    cell = _cell()
    baseline = _shapes(_baseline_files())
    for hostile in HOSTILE:
        value = _hostile_cell_values(dict(cell.leaves())[name], hostile)
        if value is None:
            continue
        refused: RenderError | None = None
        try:
            files = render_cell_files(with_field(cell, name, value))
        except RenderError as exc:
            refused = exc
        if refused is not None:
            assert f"{name} holds" in refused.message, (hostile, refused.message)
            continue
        assert _shapes(files) == baseline, (name, hostile)


def test_every_rendered_text_field_of_the_cell_is_tested() -> None:
    assert {"venv", "python_full", "python_install_mirror", "base_image", "devel_image", "lock_note"} <= set(
        CELL_TEXT_FIELDS
    )
