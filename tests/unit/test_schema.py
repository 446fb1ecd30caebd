"""The schema layer: one description checks each file (imagesmith.toml, the user config, registries.toml,
matrices, the release index, the validation report) and writes the JSON Schema editors use; the two agree on
what they accept."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from imagesmith.errors import ConfigError
from imagesmith.matrix import _Loader
from imagesmith.schema import (
    CONFIG,
    MATRIX,
    MIRROR_PROFILE_NAMES,
    PROJECT,
    REGISTRIES,
    RELEASE_INDEX,
    SCHEMAS,
    VALIDATION_REPORT,
    Field,
    Schema,
)
from imagesmith.schema.core import _json
from tests.repo import REPO

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROJECT_DOCS: list[tuple[str, bool]] = [
    ((REPO / "imagesmith.toml").read_text(), True),
    ('schema = 1\nname = "gpu-images"\ndefault_matrix = "h200"\n[paths]\nlocks = "locks"\n', True),
    ('[sources]\nmirrors = ["https://m.example/{url}"]\n', True),
    ("schema = 2\n", False),
    ("schema = true\n", False),
    ('name = "Bad Name"\n', False),
    ('[paths]\nmatrixes = "m"\n', False),
    ('[sources]\nmirrors = "https://m/{url}"\n', False),
    ('[sources]\nmirrors = ["ftp://m/{url}"]\n', False),
    ("unknown = 1\n", False),
]
CONFIG_DOCS: list[tuple[str, bool]] = [
    ('[registry_mirrors]\n"docker.io" = "127.0.0.1:5000/hub"\n[build]\nextra_ca = "/ca.crt"\n', True),
    ('[registry_mirrors]\n"docker.io" = 5\n', False),
    ('[build]\nextra_cert = "x"\n', False),
    ("[mirrors]\n", False),
]


REGISTRIES_DOCS: list[tuple[str, bool]] = [
    ((REPO / "matrices" / "registries.toml").read_text(), True),
    ('schema = 1\n[registries.x]\nhost = "r.example"\nnamespace = "t"\nkind = "ecs"\n', False),
    ('schema = 1\n[registries.x]\nnamespace = "t"\n', False),
    ('schema = 1\n[registries.x]\nhost = "r.example/path"\nnamespace = "t"\n', False),
    ('schema = 1\n[registries.x]\nhost = "r.example"\nnamespace = "t"\ninsecure = "yes"\n', False),
    ("schema = 1\n", False),
]


@pytest.mark.parametrize(("text", "ok"), REGISTRIES_DOCS)
def test_registries_check_and_json_schema_agree(text: str, ok: bool) -> None:
    _agree(REGISTRIES.check, REGISTRIES.json_schema(), text, ok)


@pytest.mark.parametrize(("text", "ok"), PROJECT_DOCS)
def test_project_check_and_json_schema_agree(text: str, ok: bool) -> None:
    _agree(PROJECT.check, PROJECT.json_schema(), text, ok)


@pytest.mark.parametrize(("text", "ok"), CONFIG_DOCS)
def test_config_check_and_json_schema_agree(text: str, ok: bool) -> None:
    _agree(CONFIG.check, CONFIG.json_schema(), text, ok)


def _agree(check: Callable[..., None], schema: dict[str, Any], text: str, ok: bool) -> None:
    data = tomllib.loads(text)
    jsonschema.Draft202012Validator.check_schema(schema)
    valid = jsonschema.Draft202012Validator(schema).is_valid(data)
    assert valid == ok, text
    if ok:
        check(data, source="f.toml")
    else:
        with pytest.raises(ConfigError) as info:
            check(data, source="f.toml")
        assert str(info.value).startswith("f.toml: ")
        assert "fix:" in str(info.value)


def test_messages_name_the_key_the_nearest_and_the_fix() -> None:
    with pytest.raises(ConfigError) as info:
        PROJECT.check({"paths": {"lock": "l"}}, source="p/imagesmith.toml")
    text = str(info.value)
    assert (
        "p/imagesmith.toml: paths.lock: unknown key 'lock' ([paths] knows only matrices, dockerfiles, locks"
        in text
    )
    assert "nearest valid value: 'locks'" in text
    with pytest.raises(
        ConfigError, match=r"f: schema: 2 is not supported by this imagesmith; nearest valid value"
    ):
        PROJECT.check({"schema": 2}, source="f")
    with pytest.raises(ConfigError, match=r"f: sources\.mirrors\[0\]: 5 is not an http\(s\) URL template"):
        PROJECT.check({"sources": {"mirrors": [5]}}, source="f")


def test_committed_json_schemas_are_current(run_cli: Callable[..., Any]) -> None:
    out = run_cli("schema", "--out", str(REPO / "docs" / "schemas"), "--check")
    assert out.exit_code == 0, out.stderr
    for s in SCHEMAS:
        committed = json.loads((REPO / "docs" / "schemas" / f"{s.file_name}.schema.json").read_text())
        assert committed == s.json_schema()
    written = {f"{s.file_name}.schema.json" for s in SCHEMAS}
    assert {p.name for p in (REPO / "docs" / "schemas").glob("*.json")} == written
    assert {"matrix.schema.json", "release-index.schema.json", "validation-report.schema.json"} <= written


# -- matrix files: the loader's shape checks are MATRIX's; its JSON Schema accepts what the shape check does

MATRIX_FILES = sorted((REPO / "matrices").glob("*.toml"))
BAD_MATRICES = sorted((REPO / "tests" / "data" / "matrices").glob("*.toml"))


@pytest.mark.parametrize(
    "path", [p for p in MATRIX_FILES if p.name != "registries.toml"], ids=lambda p: p.name
)
def test_shipped_matrices_fit_the_json_schema(path: Path) -> None:
    _agree(MATRIX.check, MATRIX.json_schema(), path.read_text(), True)


@pytest.mark.parametrize(
    "path",
    [p for p in BAD_MATRICES if p.name not in ("toml_syntax.toml", "registries.toml")],
    ids=lambda p: p.name,
)
def test_malformed_matrices_check_and_json_schema_agree(path: Path) -> None:
    """A malformed matrix fails the JSON Schema exactly when its problem is one of shape (the others need
    imagesmith's data tables: unknown GPUs, torch releases, OS families, one key against another)."""
    data = tomllib.loads(path.read_text())
    valid = jsonschema.Draft202012Validator(MATRIX.json_schema()).is_valid(data)
    try:
        MATRIX.check(data, source="f.toml")
    except ConfigError:
        assert not valid, path.name
    else:
        assert valid, path.name


def test_matrix_shape_errors_come_from_the_schema() -> None:
    """The matrix loader words a shape problem as before the schema layer took it over."""
    cases: list[tuple[dict[str, Any], str]] = [
        (
            {"schema": 2},
            "f.toml: schema: unsupported schema 2; nearest valid value: '1'\n  fix: see docs/matrix",
        ),
        (
            {"flavors": ["runtme"]},
            "f.toml: flavors[0]: unknown value 'runtme'; nearest valid value: 'runtime'",
        ),
        ({"gpus": ["a", "b", "b", "a"]}, "f.toml: gpus: 'a' is listed twice"),
        (
            {"shm_min": "lots"},
            "f.toml: shm_min: 'lots' is not a size; nearest valid value: '8g'\n  fix: write",
        ),
        (
            {"labels": {"x y": "v"}},
            "f.toml: labels.'x y': 'x y' is not a label name\n  fix: lowercase letters",
        ),
        (
            {"python": {"versions": ["3.11"], "managed": {"3.11.4": "3.11.4"}}},
            "f.toml: python.managed.3.11.4: '3.11.4' is not a Python minor version (X.Y); "
            "nearest valid value: '3.11'",
        ),
    ]
    base = tomllib.loads((REPO / "matrices" / "smoke.toml").read_text())
    for change, expected in cases:
        with pytest.raises(ConfigError) as info:
            MATRIX.check({**base, **change}, checker=_Loader(Path("f.toml"), Path("registries.toml")))
        assert str(info.value).startswith(expected), (change, str(info.value))


def test_mirror_profiles_are_the_schema_enum() -> None:
    from imagesmith.matrix import MIRROR_PROFILES

    assert tuple(MIRROR_PROFILES) == MIRROR_PROFILE_NAMES


def _fields(spec: Field) -> list[Field]:
    subs = [*spec.fields.values(), *(s for s in (spec.items, spec.keys) if s is not None)]
    return [spec, *(f for s in subs for f in _fields(s))]


@pytest.mark.parametrize("schema", SCHEMAS, ids=lambda s: s.file_name)
def test_examples_fit_their_field(schema: Schema) -> None:
    for spec in _fields(schema.root):
        doc = _json(spec)
        for example in doc.get("examples", []):
            assert jsonschema.Draft202012Validator(doc).is_valid(example), (schema.file_name, example)


# -- the release index and the validation report: what imagesmith's writers produce fits the JSON Schemas


def _index_doc() -> dict[str, Any]:
    from tests.unit.test_index import image, index_doc

    return index_doc(
        image(tag="b"), image(tag="a", shm={"size": None, "ipc_host": True}, digest="sha256:" + "c" * 64)
    )


def test_written_index_fits_the_json_schema() -> None:
    from imagesmith.index import dump_index, parse_index

    text = dump_index(parse_index(json.dumps(_index_doc()), source="i.json"))
    jsonschema.validate(json.loads(text), RELEASE_INDEX.json_schema(), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    ("where", "value"),
    [
        (("schema",), "v0"),
        (("generated",), "yesterday"),
        (("images", 0, "digest"), "sha256:xyz"),
        (("images", 0, "arch"), []),
        (("images", 0, "validated_on", 0, "count"), 0),
        (("images", 0, "registries", 0, "kind"), ""),
        (("images", 0, "shm", "size"), "lots"),
        (("images", 0, "colour"), "red"),
    ],
)
def test_index_check_and_json_schema_agree(where: tuple[Any, ...], value: Any) -> None:
    from imagesmith.index import _Reader

    doc = _index_doc()
    jsonschema.validate(doc, RELEASE_INDEX.json_schema(), cls=jsonschema.Draft202012Validator)
    node = doc
    for step in where[:-1]:
        node = node[step]
    node[where[-1]] = value
    assert not jsonschema.Draft202012Validator(RELEASE_INDEX.json_schema()).is_valid(doc)
    with pytest.raises(ConfigError, match=r"^release index i\.json: "):
        RELEASE_INDEX.check(doc, checker=_Reader("i.json"))


REPORTS = sorted((REPO / "docs" / "evidence").rglob("report.json"))


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: str(p.relative_to(REPO / "docs" / "evidence")))
def test_committed_reports_fit_the_json_schema(path: Path) -> None:
    jsonschema.validate(
        json.loads(path.read_text()), VALIDATION_REPORT.json_schema(), cls=jsonschema.Draft202012Validator
    )


def test_written_report_fits_the_json_schema(tmp_path: Path) -> None:
    import time

    from imagesmith.validate.context import SuiteOptions
    from imagesmith.validate.criteria import Gpu
    from imagesmith.validate.facts import GpuFacts
    from imagesmith.validate.record import ValidationReport
    from imagesmith.validate.report import CheckOutcome, write_bundle

    gpu = Gpu(index=0, name="NVIDIA H200", uuid="GPU-1", bus_id="0:1", driver="580.159.04", memory_mib=143771)
    check = CheckOutcome(name="test_x", module="m", status="passed", figures={"busbw": 1.5})
    now = time.time()
    report = write_bundle(
        SuiteOptions(target="local://", report_dir=str(tmp_path)),
        [check],
        facts={"gpus": GpuFacts(visible=True, gpus=[gpu])},
        logs=["a.log"],
        started=now,
        finished=now,
    )
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["schema"] == report["schema"] == 3
    jsonschema.validate(written, VALIDATION_REPORT.json_schema(), cls=jsonschema.Draft202012Validator)
    assert (
        ValidationReport.parse((tmp_path / "report.json").read_bytes(), source="r").gpus[0].name == gpu.name
    )
    bad = {**written, "checks": 5}
    assert not jsonschema.Draft202012Validator(VALIDATION_REPORT.json_schema()).is_valid(bad)
    with pytest.raises(ConfigError, match=r"^r: checks: expected a list, got an integer 5"):
        ValidationReport.parse(json.dumps(bad).encode(), source="r")
