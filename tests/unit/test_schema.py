"""The schema layer: one description checks imagesmith.toml and the user config and writes the JSON Schema
editors use; the two agree on what they accept."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

import jsonschema
import pytest

from imagesmith.errors import ConfigError
from imagesmith.schema import CONFIG, PROJECT, REGISTRIES, SCHEMAS
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
