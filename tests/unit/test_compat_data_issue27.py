"""Issue 27, compatibility data: rows corrected with their sources (each test fails on main's data)."""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Callable
from typing import Any

import pytest

from imagesmith import compat
from tests.repo import REPO

NOV_30 = datetime.date(2026, 11, 30)
NVSMI = REPO / "tests" / "data" / "nvsmi"


@pytest.mark.parametrize(
    ("key", "cc", "family", "smi_name", "mib"),
    [
        ("rtx6000d", "12.0", "rtx6000d", "NVIDIA RTX 6000D", 85651),
        ("h20-141gb", "9.0", "h20", "NVIDIA H20", 143771),
        ("rtx5090d-v2", "12.0", "rtx5090d", "NVIDIA GeForce RTX 5090 D v2", None),
        ("rtx-pro-5000", "12.0", "rtx-pro-5000", "NVIDIA RTX PRO 5000 Blackwell", None),
        ("rtx5080", "12.0", "rtx5080", "NVIDIA GeForce RTX 5080", None),
        ("rtx5070ti", "12.0", "rtx5070ti", "NVIDIA GeForce RTX 5070 Ti", None),
        ("rtx4080", "8.9", "rtx4080", "NVIDIA GeForce RTX 4080", None),
        ("rtx-a5000", "8.6", "rtx-a5000", "NVIDIA RTX A5000", None),
        ("rtx-a4000", "8.6", "rtx-a4000", "NVIDIA RTX A4000", None),
    ],
)
def test_gpus_renters_meet(key: str, cc: str, family: str, smi_name: str, mib: int | None) -> None:
    g = compat.gpu(key)
    assert (g.cc, g.family) == (cc, family)
    assert compat.gpu(smi_name, memory_mib=mib or g.memory_mib).key == key
    assert g.memory_mib > 0
    assert g.source.strip()
    assert g.min_driver is not None
    assert g.min_driver_source.strip()
    if mib is not None:
        assert g.memory_mib == mib


def test_an_h20_with_141_gb_is_the_141_gb_row_and_96_gb_the_other() -> None:
    assert compat.gpu("NVIDIA H20", memory_mib=143771).key == "h20-141gb"  # main: the 96 GB row
    assert compat.gpu("NVIDIA H20", memory_mib=97871).key == "h20"
    assert compat.gpu("NVIDIA H20").key == "h20"  # no memory: the family default


@pytest.mark.parametrize(
    ("capture", "key"),
    [("r580_h20_141gb.txt", "h20-141gb"), ("r580_h20_96gb.txt", "h20"), ("r580_rtx6000d.txt", "rtx6000d")],
)
def test_nvidia_smi_captures_resolve_by_name_and_memory(
    capture: str, key: str, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-11-30")
    out = run_cli(
        "compat", "--nvidia-smi", str(NVSMI / capture), "--torch", "2.11.0", "--cuda", "13.0", "--json"
    )
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["gpu"] == key


def test_h20_compute_capability_is_nvidias() -> None:
    h20 = compat.gpu("h20")
    assert h20.cc == "9.0"
    assert h20.verified is True
    assert "Multi-Instance GPU User Guide" in h20.source  # main: "CC inferred"


@pytest.mark.parametrize("torch", ["2.11.0", "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"])
def test_torchvision_0_26_and_later_exclude_python_3_14_1(torch: str) -> None:
    rel = compat.torch_release(torch)
    why = rel.torchvision_refuses("3.14.1")
    assert why is not None
    assert f"torchvision {rel.torchvision}" in why
    assert rel.torchvision_refuses("3.14.2") is None
    assert rel.torchvision_refuses("3.14.0") is None
    v = compat.verdict("580.159.04", "h200", torch, rel.pypi_default, today=NOV_30)
    assert any("cannot install it" in r and "3.14.1" in r for r in v.reasons)


def test_torchvision_before_0_26_has_no_such_exclusion() -> None:
    assert compat.torch_release("2.10.0").torchvision_refuses("3.14.1") is None


def test_plan_drops_a_cell_on_uv_managed_python_3_14_1(tmp_path: Any) -> None:
    import shutil

    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from tests.repo import PROJECT

    shutil.copy(PROJECT.registries_file, tmp_path / "registries.toml")
    path = tmp_path / "tv.toml"
    path.write_text(
        """schema = 1
name = "tv"
gpus = ["h200"]
flavors = ["runtime"]
shm_min = "8g"
registries = ["local-plain"]
[torch]
versions = ["2.11.0"]
variants = ["cu130"]
[python]
versions = ["3.14"]
uv = "0.9.5"
managed = { "3.14" = "3.14.1" }
[base]
os = "ubuntu22.04"
image = "ubuntu:22.04"
python = "3.10"
[nccl_tests]
version = "v2.19.6"
commit = "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"
sha256 = "3c3b847c3ee4396d94defab52fef91ccc28c0e3a496e8e841cadd1870d9eb1c8"
""",
        encoding="utf-8",
    )
    plan = build_plan(load_matrix(path))
    reasons = [d.reason for d in plan.dropped]
    assert any("torchvision 0.26.0" in r and "3.14.1" in r for r in reasons), reasons


@pytest.mark.parametrize(
    ("torch", "nccl", "cudnn"), [("2.12.1", "2.29.7", "9.20.0.48"), ("2.14.1", "2.30.7", "9.24.0.43")]
)
def test_cu130_nccl_and_cudnn_are_read_from_pypi(torch: str, nccl: str, cudnn: str) -> None:
    var = compat.torch_variant(torch, "cu130")
    assert (var.nccl, var.cudnn, var.verified) == (nccl, cudnn, True)  # main: unverified
    metadata = (
        REPO / "tests/data/refresh/metadata" / f"torch-{torch}-cp312-cp312-manylinux_2_28_x86_64.whl.METADATA"
    )
    text = metadata.read_text(encoding="utf-8")
    assert f"nvidia-nccl-cu13=={nccl}" in text
    assert f"nvidia-cudnn-cu13=={cudnn}" in text


def test_torch_2_15_0_cu132_arch_list_is_read() -> None:
    var = compat.torch_variant("2.15.0", "cu132")
    assert var.arch_list == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
    assert var.verified is True  # main: assumed
    assert "fatbin" in var.source


def test_r590_reports_cuda_13_1() -> None:
    cuda, source, verified = compat.driver_branch_cuda(590)  # type: ignore[misc]
    assert (cuda, verified) == ("13.1", True)
    assert "590.44.01" in source


def test_b300_first_driver_is_r580_per_the_mig_guide() -> None:
    b300 = compat.gpu("b300")
    assert str(b300.min_driver) == "580.82.07"  # main: 575.51.03, inferred from CUDA 12.9
    v = compat.verdict("575.64.05", "b300", "2.9.0", "cu128", today=NOV_30)
    assert v.mode == "none"
    assert str(v.needs_driver) == "580.82.07"


def test_a_verdict_for_python_3_14_1_is_none_and_other_pythons_are_not_bothered() -> None:
    exact = compat.verdict("580.159.04", "h200", "2.14.0", "cu130", today=NOV_30, python="3.14.1")
    assert exact.mode == "none"
    assert any("torchvision 0.29.0" in b and "Python 3.14.1" in b for b in exact.blockers)
    assert exact.needs_driver is None  # no driver fixes it
    minor = compat.verdict("580.159.04", "h200", "2.14.0", "cu130", today=NOV_30, python="3.14")
    assert minor.mode == "full"
    assert any("3.14.1 cannot install it" in r for r in minor.reasons)
    other = compat.verdict("580.159.04", "h200", "2.14.0", "cu130", today=NOV_30, python="3.12")
    assert not any("torchvision" in r for r in other.reasons)


def test_pick_warns_about_3_14_1_only_for_a_python_3_14_image() -> None:
    from imagesmith.index import load_index
    from imagesmith.pick import Host, assess

    index = load_index(REPO / "docs" / "examples" / "release-index.json")
    image = next(i for i in index.images if i.torch == "2.11.0")
    from imagesmith.nvsmi import SmiGpu

    host = Host(
        driver="580.159.04", gpus=(SmiGpu(index=0, name="NVIDIA H200", memory_mib=143771),), source="t"
    )
    assert image.python != "3.14"
    assert not any("torchvision" in w for w in assess(image, host, today=NOV_30).warnings)
    on_314 = dataclasses.replace(image, python="3.14")
    assert any("3.14.1 cannot install it" in w for w in assess(on_314, host, today=NOV_30).warnings)
