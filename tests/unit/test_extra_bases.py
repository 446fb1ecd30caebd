"""Issue 39: a matrix's ``[[extra_bases]]`` (the a100 matrix's cu121 cells again on debian:bookworm, which
this project's CI can build), ``build --registries FILE`` (the matrix's registry names on registries one can
reach), and the one clear error for a base the registry mirror does not serve (before BuildKit runs)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import compat
from imagesmith.build import BaseSources
from imagesmith.config import UserConfig
from imagesmith.errors import BuildError, RegistryError
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import build_plan
from imagesmith.templating import render_cell_files
from tests.repo import PROJECT, REPO

DEBIAN_CU121 = [
    f"{torch}-cu121-py3.11-{flavor}-debian12"
    for torch in ("2.1.2", "2.2.2", "2.3.1")
    for flavor in ("runtime", "interactive")
]


def test_a100_plans_its_cu121_cells_on_debian12_beside_ubuntu() -> None:
    matrix = load_matrix("a100", project=PROJECT)
    assert [b.os for b in matrix.bases] == ["ubuntu22.04", "debian12"]
    plan = build_plan(matrix, project=PROJECT)
    debian = [c for c in plan.cells if c.bases.os == "debian12"]
    assert [c.id for c in debian] == DEBIAN_CU121
    assert len([c for c in plan.cells if c.bases.os == "ubuntu22.04"]) == 25  # the Ubuntu cells as they were
    ubuntu = {c.id: c for c in plan.cells}
    for cell in debian:
        twin = ubuntu[cell.id.replace("-debian12", "-ubuntu22.04")]
        # same wheels, same lock, same driver floors: only the OS (and so the builder toolkit) differs
        assert (cell.lock.pins, cell.lock.lock_file, cell.lock.builder_pins) == (
            twin.lock.pins,
            twin.lock.lock_file,
            twin.lock.builder_pins,
        )
        assert (cell.hardware.min_driver, cell.hardware.require_cuda) == (
            twin.hardware.min_driver,
            twin.hardware.require_cuda,
        )
        assert cell.publish.fingerprint != twin.publish.fingerprint
        assert (cell.bases.base_image, cell.bases.builder_image, cell.bases.devel_image) == (
            "debian:bookworm",
        ) * 2 + (None,)
        assert cell.runtime.python_source == "distro"  # Debian 12's own python3.11: no uv download
        assert cell.runtime.uv is None
        assert cell.toolkit.nccl_toolkit == "distro"
        assert cell.toolkit.distro_toolkit is not None
        assert (cell.toolkit.distro_toolkit.release, cell.toolkit.distro_toolkit.cuda) == ("bookworm", "11.8")
        assert (
            cell.hardware.nvcc_gencode
            == "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=compute_80"
        )
        # nccl-tests compiles against the headers of the very nvidia-nccl-cu12 wheel torch runs with
        nccl = dict(cell.lock.pins)["nvidia-nccl-cu12"]
        assert cell.stack.nccl_version == nccl
        assert ("nvidia-nccl-cu12", nccl) in cell.lock.builder_pins
        assert "nvidia/cuda:" not in render_cell_files(cell)["Dockerfile"]
    assert [c.stack.nccl_version for c in debian[::2]] == ["2.18.1", "2.19.3", "2.20.5"]


def test_the_cu121_driver_floors_are_nvidias() -> None:
    """cu121: CUDA 12.1's toolkit driver 530.30.02, minor-version compatibility from 525.60.13; 535 (the
    a100 rentals') runs it natively, 470 does not run it at all."""
    (cell,) = (
        build_plan(load_matrix("a100", project=PROJECT), project=PROJECT)
        .select(["2.1.2-cu121-py3.11-runtime-debian12"])
        .cells
    )
    assert (str(cell.hardware.min_driver.full), str(cell.hardware.min_driver.minor_version)) == (
        "530.30.02",
        "525.60.13",
    )
    assert cell.hardware.require_cuda.startswith("cuda>=12.1 brand=tesla,driver>=525,driver<526 ")
    assert {part.split(",", 1)[1] for part in cell.hardware.require_cuda.split()[1:]} == {
        "driver>=525,driver<526"
    }
    assert compat.verdict("470.82.01", "a100", "2.1.2", "cu121").mode == "none"
    assert compat.verdict("580.95.05", "h200", "2.1.2", "cu121").mode == "full"


def test_an_extra_base_builds_only_its_variants_and_flavors(tmp_path: Path) -> None:
    (tmp_path / "registries.toml").write_text((PROJECT.registries_file).read_text())
    path = tmp_path / "two.toml"
    path.write_text(
        (REPO / "matrices" / "a100.toml")
        .read_text()
        .replace(
            'variants = ["cu121"]\n\n[nccl_tests]',
            'variants = ["cu121"]\nflavors = ["runtime"]\n\n[nccl_tests]',
        )
        .replace('name = "a100"', 'name = "two"')
        .replace('registries = ["dockerhub", "ghcr", "acr-hangzhou"]', 'registries = ["local-plain"]')
    )
    plan = build_plan(load_matrix(path), project=PROJECT)
    assert [c.id for c in plan.cells if c.bases.os == "debian12"] == [
        f"{t}-cu121-py3.11-runtime-debian12" for t in ("2.1.2", "2.2.2", "2.3.1")
    ]
    # what the base does not take is not even considered (no dropped line for each of them)
    assert not [d for d in plan.dropped if d.combination.endswith("-debian12") and "-cu118-" in d.combination]
    reasons = {d.combination: d.reason for d in plan.dropped}
    assert reasons["2.1.2-cu121-py3.10-runtime-debian12"] == (
        "Python 3.10 is neither debian12's (3.11) nor uv-managed"
    )


def test_build_takes_the_registries_from_registries_file(run_cli: Callable[..., Any], tmp_path: Path) -> None:
    from imagesmith.commands.plan import load_plan

    local = REPO / "matrices" / "local" / "registries.toml"
    _project, _m, plan = load_plan("a100", ["2.1.2-cu121-py3.11-runtime-debian12"], local)
    (cell,) = plan.cells
    assert [(t.name, t.host, t.repository) for t in cell.publish.registries] == [
        ("dockerhub", "127.0.0.1:5000", "a100/torch"),
        ("ghcr", "127.0.0.1:5443", "a100/torch"),
        ("acr-hangzhou", "127.0.0.1:5000", "a100-acr/torch"),
    ]
    _project, _m, plan = load_plan("a100", ["2.1.2-cu121-py3.11-runtime-debian12"])
    assert [t.host for t in plan.cells[0].publish.registries] == [
        "docker.io",
        "ghcr.io",
        "registry.cn-hangzhou.aliyuncs.com",
    ]
    missing = tmp_path / "nope.toml"
    result = run_cli("build", "--matrix", "a100", "--registries", str(missing), "--only", "*-debian12")
    assert result.exit_code == 2, result.stderr
    assert str(missing) in result.stderr
    assert "--registries" in result.stderr


# -- a base the registry mirror does not serve ---------------------------------------------------------------
class _Mirror:
    """The registry mirror's answers to a manifest HEAD: the digest of what it holds, None for the rest."""

    def __init__(self, held: set[tuple[str, str]], down: bool = False) -> None:
        self.held, self.down = held, down
        self.asked: list[tuple[str, str]] = []

    def manifest_digest(self, repo: str, reference: str) -> str | None:
        self.asked.append((repo, reference))
        if self.down:
            raise RegistryError("registry 127.0.0.1:5000: connection refused", hint="start it")
        return "sha256:" + "a" * 64 if (repo, reference) in self.held else None


CONFIG = UserConfig(registry_mirrors=(("docker.io", "127.0.0.1:5000/hub"),))


def _a100_cells(*ids: str) -> list[Cell]:
    return list(build_plan(load_matrix("a100", project=PROJECT), project=PROJECT).select(list(ids)).cells)


def test_a_base_missing_from_the_mirror_is_one_error_naming_base_mirror_and_fix() -> None:
    cells = _a100_cells("2.1.2-cu121-py3.10-*-ubuntu22.04", "2.1.2-cu121-py3.11-runtime-debian12")
    mirror = _Mirror({("hub/library/debian", "bookworm")})
    sources = BaseSources(CONFIG, client_for=lambda r: mirror)  # type: ignore[arg-type,return-value]
    with pytest.raises(BuildError) as info:
        sources.check_mirrored(cells, held=lambda ref: False)
    err = info.value
    assert err.message.startswith(
        "base image ubuntu:22.04 (cells 2.1.2-cu121-py3.10-runtime-ubuntu22.04, "
        "2.1.2-cu121-py3.10-devel-ubuntu22.04, 2.1.2-cu121-py3.10-interactive-ubuntu22.04) is not in the "
        "registry mirror: the registry-mirror map sends docker.io to 127.0.0.1:5000/hub, which does not "
        "serve 127.0.0.1:5000/hub/library/ubuntu:22.04"
    ), err.message
    assert "not found" in err.message
    hint = err.hint or ""
    assert "push it as 127.0.0.1:5000/hub/library/ubuntu:22.04" in hint
    assert "scripts/debian-base.sh" in hint
    assert "--registry-mirror docker.io=HOST/PREFIX" in hint
    assert "'*-debian12'" in hint
    assert (err.host, err.repository, err.fault, err.cell) == (
        "127.0.0.1:5000",
        "hub/library/ubuntu",
        "not found",
        "2.1.2-cu121-py3.10-runtime-ubuntu22.04",
    )
    assert err.exit_code == BuildError("x").exit_code


def test_a_base_served_by_the_mirror_or_held_by_the_engine_passes() -> None:
    cells = _a100_cells("2.1.2-cu121-py3.11-runtime-debian12", "2.1.2-cu121-py3.10-runtime-ubuntu22.04")
    mirror = _Mirror({("hub/library/debian", "bookworm"), ("hub/library/ubuntu", "22.04")})
    BaseSources(CONFIG, client_for=lambda r: mirror).check_mirrored(cells, held=lambda ref: False)  # type: ignore[arg-type,return-value]
    assert sorted(mirror.asked) == [("hub/library/debian", "bookworm"), ("hub/library/ubuntu", "22.04")]
    # the engine holds it (an image made here, never pushed): BuildKit takes it from the engine, no request
    empty = _Mirror(set())
    held = {"127.0.0.1:5000/hub/library/ubuntu:22.04", "127.0.0.1:5000/hub/library/debian:bookworm"}
    BaseSources(CONFIG, client_for=lambda r: empty).check_mirrored(cells, held=held.__contains__)  # type: ignore[arg-type,return-value]
    assert empty.asked == []


def test_no_mirror_pinned_bases_and_a_mirror_that_does_not_answer_are_left_to_the_build() -> None:
    (cell,) = _a100_cells("2.1.2-cu121-py3.10-runtime-ubuntu22.04")
    never = _Mirror(set())
    BaseSources(UserConfig(), client_for=lambda r: never).check_mirrored([cell], held=lambda ref: False)  # type: ignore[arg-type,return-value]
    assert never.asked == []  # no mirror for docker.io: pulled from Docker Hub itself, as before
    pinned = dataclasses.replace(
        cell, bases=dataclasses.replace(cell.bases, base_digests=(("ubuntu:22.04", "sha256:" + "b" * 64),))
    )
    BaseSources(CONFIG, client_for=lambda r: never).check_mirrored([pinned], held=lambda ref: False)  # type: ignore[arg-type,return-value]
    assert never.asked == []  # by digest: BaseSources.ref falls back to the escrow copy, or says why not
    down = _Mirror(set(), down=True)
    BaseSources(CONFIG, client_for=lambda r: down).check_mirrored([cell], held=lambda ref: False)  # type: ignore[arg-type,return-value]
    assert down.asked == [
        ("hub/library/ubuntu", "22.04")
    ]  # unreachable: the build's own error names the host
