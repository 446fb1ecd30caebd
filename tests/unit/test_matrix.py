"""Matrix loading: every shipped matrix loads; every malformed file is one clear error, never a traceback."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import MatrixError
from imagesmith.matrix import load_matrix, parse_shm, select
from imagesmith.refs import expand_braces, matches
from tests.repo import PROJECT, REPO

MALFORMED_DIR = REPO / "tests" / "data" / "matrices"
MALFORMED = sorted(p for p in MALFORMED_DIR.glob("*.toml") if p.name != "registries.toml")


def _expectations(path: Path) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^# expect: (.+)$", path.read_text(), re.MULTILINE)]


def test_enough_malformed_cases() -> None:
    assert len(MALFORMED) >= 20
    for path in MALFORMED:
        assert _expectations(path), f"{path.name} has no '# expect:' line"


@pytest.mark.parametrize("path", MALFORMED, ids=lambda p: p.stem)
def test_malformed_matrix_is_one_clear_error(path: Path, run_cli: Callable[..., Any]) -> None:
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2
    err: str = result.stderr
    assert "Traceback" not in err
    assert "Traceback" not in result.stdout
    assert [line for line in err.splitlines() if line.startswith("error:")] == [err.splitlines()[0]], err
    assert str(path) in err, err  # names the file
    for expected in _expectations(path):
        assert expected in err, f"{expected!r} not in {err!r}"


@pytest.mark.parametrize("path", MALFORMED, ids=lambda p: p.stem)
def test_malformed_matrix_raises_matrix_error(path: Path) -> None:
    with pytest.raises(MatrixError) as info:
        load_matrix(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("name", PROJECT.matrix_names())
def test_shipped_matrices_load(name: str) -> None:
    m = load_matrix(name)
    assert m.name == name
    assert m.gpus
    assert m.torch.versions
    assert m.python.versions
    assert m.nccl_tests.archive_name == f"nccl-tests-{m.nccl_tests.commit}.tar"


def test_required_matrices_exist() -> None:
    assert {"a100", "h100", "rtx4090", "smoke"} <= set(PROJECT.matrix_names())
    a100 = load_matrix("a100")
    assert set(a100.torch.variants) == {"cu118", "cu121"}
    assert {g.cc for g in a100.gpus} == {"8.0"}
    assert a100.base.image == "ubuntu:22.04"
    assert a100.base.python == "3.10"
    assert a100.base.devel_image("12.1") == "nvidia/cuda:12.1.1-devel-ubuntu22.04"


def test_smoke_is_the_documented_default() -> None:
    m = load_matrix("smoke")
    assert m.base.image == "debian:bookworm"
    assert m.python.versions == ("3.11",)
    assert m.base.python == "3.11"
    assert m.torch.versions == ("2.11.0",)
    assert m.torch.variants == ("cu130",)
    assert [g.key for g in m.gpus] == ["h200"]
    assert m.flavors == ("runtime",)
    assert m.nccl_tests.version == "v2.19.6"
    assert m.nccl_tests.commit == "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"
    assert {r.host for r in m.registries} == {"127.0.0.1:5000", "127.0.0.1:5443"}


def test_name_or_path(tmp_path: Path) -> None:
    matrices = PROJECT.matrices_dir
    assert PROJECT.matrix_path("a100") == matrices / "a100.toml"
    assert PROJECT.matrix_path(str(matrices / "a100.toml")) == matrices / "a100.toml"
    with pytest.raises(MatrixError, match=r"no such matrix file") as info:
        PROJECT.matrix_path("a10O")
    assert "nearest matrix: 'a100'" in str(info.value)
    with pytest.raises(MatrixError, match="no such matrix file"):
        PROJECT.matrix_path(str(tmp_path / "missing.toml"))


def test_unknown_matrix_name_via_cli(run_cli: Callable[..., object]) -> None:
    result = run_cli("plan", "--matrix", "h10O")
    assert result.exit_code == 2  # type: ignore[attr-defined]
    assert "nearest matrix: 'h100'" in result.stderr  # type: ignore[attr-defined]


def test_braces_and_globs() -> None:
    assert expand_braces("2.{1,2}.*-cu{118,121}") == [
        "2.1.*-cu118",
        "2.1.*-cu121",
        "2.2.*-cu118",
        "2.2.*-cu121",
    ]
    assert expand_braces("plain") == ["plain"]
    assert matches("2.1.2-cu121-py3.10-runtime-ubuntu22.04", "*-cu{118,121}-*runtime*")
    assert not matches("2.1.2-cu121-py3.10-devel-ubuntu22.04", "*-{runtime}-*")
    ids = ["a-runtime", "b-devel", "c-runtime"]
    assert select(ids, []) == ids
    assert select(ids, ["*-runtime"]) == ["a-runtime", "c-runtime"]
    assert select(ids, ["{a,b}-*"]) == ["a-runtime", "b-devel"]
    assert select(ids, ["zzz"]) == []


def test_parse_shm() -> None:
    assert parse_shm("64m") == 64 * 1024**2
    assert parse_shm("8g") == 8 * 1024**3
    assert parse_shm("1024") == 1024
    for bad in ("", "8 gb", "-1g", "1.5g"):
        with pytest.raises(ValueError, match="not a size"):
            parse_shm(bad)


def test_malformed_registries_file_is_named(tmp_path: Path, run_cli: Callable[..., object]) -> None:
    smoke = (PROJECT.matrices_dir / "smoke.toml").read_text().replace('name = "smoke"\n', "")
    (tmp_path / "m.toml").write_text(smoke)
    (tmp_path / "registries.toml").write_text(
        'schema = 1\n[registries.local-plain]\nhost = "127.0.0.1:5000"\nnamespace = "x"\nrepo = "torch"\n'
    )
    result = run_cli("plan", "--matrix", str(tmp_path / "m.toml"))
    assert result.exit_code == 2  # type: ignore[attr-defined]
    err: str = result.stderr  # type: ignore[attr-defined]
    assert f"{tmp_path / 'registries.toml'}: registries.local-plain.repo: unknown key" in err
    assert "'repository'" in err
    assert "Traceback" not in err


def test_registry_routing(tmp_path: Path) -> None:
    a100 = load_matrix("a100")
    assert {r.name for r in a100.registries} == {"dockerhub", "ghcr", "acr-hangzhou"}
    assert {r.name: r.image for r in a100.registries}["ghcr"] == "ghcr.io/imagesmith/torch"
    smoke = load_matrix("smoke")
    regs = {r.name: r for r in smoke.registries}
    assert set(regs) == {"local-plain", "local-tls"}
    assert regs["local-plain"].image == "127.0.0.1:5000/imagesmith/torch"
    assert regs["local-plain"].insecure
    assert not regs["local-tls"].insecure
    from imagesmith.matrix import load_registries

    acr = load_registries(PROJECT.registries_file)["acr-hangzhou"]
    assert acr.wants("2.1.2-cu121-py3.10-runtime-ubuntu22.04")
    assert not acr.wants("2.1.2-cu121-py3.10-devel-ubuntu22.04")


def test_unknown_registry_kind_names_the_known_ones(tmp_path: Path) -> None:
    from imagesmith.matrix import REGISTRY_KINDS, load_registries

    path = tmp_path / "registries.toml"
    path.write_text('schema = 1\n[registries.x]\nhost = "r.example"\nnamespace = "t"\nkind = "ecs"\n')
    with pytest.raises(MatrixError) as info:
        load_registries(path)
    text = str(info.value)
    assert "registries.x.kind" in text
    assert "'ecs'" in text
    assert "ecr" in text  # the nearest known kind
    assert set(REGISTRY_KINDS) >= {"generic", "dockerhub", "ghcr", "aliyun-acr", "azure-acr", "ecr"}
