"""imagesmith.compat: data tables, driver versions, arch coverage and verdicts.

Expected values come from NVIDIA's tables (CUDA release notes Table 3, minor-version compatibility
Table 1) and PyTorch's (release matrix, per-wheel TORCH_CUDA_ARCH_LIST) as quoted in docs/compat.md.
Unhappy paths first.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from pathlib import Path

import pytest
import tomllib
from hypothesis import given
from hypothesis import strategies as st

from imagesmith import compat
from imagesmith.compat import DriverVersion, parse_driver, torchwheels
from imagesmith.compat.tables import TABLES
from imagesmith.errors import ConfigError

DATA = Path(compat.__file__).parent.parent / "data"

# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "text",
    ["", "latest", "535", "535.", "535.104.05.1", "v535.104.05", "12.1", "5350.1.2.3", "535.abc", None],
)
def test_parse_driver_rejects_junk_with_a_clear_message(text: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_driver(text)  # type: ignore[arg-type]
    assert "is not an NVIDIA driver version" in str(err.value)
    assert "535.104.05" in str(err.value)  # the hint shows the expected form


@pytest.mark.parametrize("text", ["12", "cu12", "cuda12.1", "12.x", "twelve", "cu1210", "12.10"])
def test_normalize_cuda_rejects_junk(text: str) -> None:
    with pytest.raises(ConfigError, match="is not a CUDA version"):
        compat.normalize_cuda(text)


def test_min_driver_of_a_cuda_that_never_existed_names_known_range() -> None:
    with pytest.raises(ConfigError) as err:
        compat.min_driver("12.7")
    assert "CUDA 12.7 is not a CUDA toolkit release" in str(err.value)
    assert "never was a CUDA 12.7" in str(err.value)


def test_unknown_cuda_update_suggests_the_nearest() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 12\.1\.1"):
        compat.min_driver("12.1.4")


def test_unknown_torch_names_the_nearest_known_version() -> None:
    with pytest.raises(ConfigError) as err:
        compat.torch_release("2.1.5")
    assert "did you mean 2.1.2?" in str(err.value)
    assert "imagesmith/data/torch.toml" in str(err.value)


def test_torch_2_16_is_not_tabulated_and_says_what_is() -> None:
    # was 2.15.0 until issue 13 tabulated torch 2.15.0 (PyPI, 2026-10-28)
    with pytest.raises(ConfigError) as err:
        compat.torch_release("2.16.0")
    assert "2.15.0" in str(err.value)


@pytest.mark.parametrize("name", ["h1000", "NVIDIA Z100", "quadro"])
def test_unknown_gpu_names_nearest_and_known_keys(name: str) -> None:
    with pytest.raises(ConfigError) as err:
        compat.gpu(name)
    assert f"unknown GPU {name!r}" in str(err.value)
    assert "h100-sxm" in str(err.value)  # the list of known keys


def test_unknown_gpu_did_you_mean() -> None:
    with pytest.raises(ConfigError, match="did you mean h100"):
        compat.gpu("h1000")


def test_ambiguous_truncated_name_across_families_is_an_error() -> None:
    with pytest.raises(ConfigError, match="ambiguous: it fits rtx3090, rtx4090, rtx5090, rtx4090d, rtx5090d"):
        compat.gpu("NVIDIA GeForce ...")
    with pytest.raises(ConfigError, match="ambiguous: it fits rtx4090, rtx4090d"):
        compat.gpu("NVIDIA GeForce RTX 4090...", memory_mib=24564)


def test_empty_gpu_name() -> None:
    with pytest.raises(ConfigError, match="empty GPU name"):
        compat.gpu("  ")


@pytest.mark.parametrize("entry", ["8", "sm_80", "8.0+ptx", "8.0 PTX", ""])
def test_arch_coverage_rejects_bad_arch_entries(entry: str) -> None:
    with pytest.raises(ConfigError, match="TORCH_CUDA_ARCH_LIST entry"):
        compat.arch_coverage([entry], "8.0")


def test_arch_coverage_rejects_bad_cc() -> None:
    with pytest.raises(ConfigError, match="is not a compute capability"):
        compat.arch_coverage(["8.0"], "ampere")


def test_variant_never_published_raises_from_release_variant() -> None:
    with pytest.raises(ConfigError) as err:
        compat.torch_variant("2.1.2", "cu124")
    assert "torch 2.1.2 was never published for cu124 (CUDA 12.4)" in str(err.value)
    assert "cu118, cu121" in str(err.value)


def test_max_cuda_for_a_driver_older_than_cuda_11() -> None:
    with pytest.raises(ConfigError, match=r"predates CUDA 11\.0"):
        compat.max_cuda_for_driver("418.87.01")


def test_verdict_with_junk_driver_raises() -> None:
    with pytest.raises(ConfigError, match="not an NVIDIA driver version"):
        compat.verdict("five-three-five", "a100", "2.1.2", "12.1")


# ------------------------------------------------------------------------------------ verdicts


def test_470_with_cu121_is_none_with_nvidias_numbers() -> None:
    v = compat.verdict("470.82.01", "a100", "2.1.2", "cu121")
    assert (v.compatible, v.mode) == (False, "none")
    assert v.reasons[0] == (
        "driver 470.82.01 supports CUDA ≤ 11.4; cu121 needs ≥ 525.60.13 under minor-version compatibility, "
        "≥ 530.30.02 for full"
    )
    # what to do instead: the variant this driver runs, and forward compatibility on a data-center GPU
    assert any("variants this driver runs on" in r and "cu118" in r for r in v.reasons)
    assert any("cuda-compat-12-1" in r for r in v.reasons)


def test_470_with_cu121_on_a_consumer_gpu_says_forward_compat_is_unavailable() -> None:
    v = compat.verdict("470.82.01", "rtx3090", "2.1.2", "cu121")
    assert v.mode == "none"
    assert any("not available for consumer GPUs" in r for r in v.reasons)


def test_525_60_13_with_cu121_is_minor_version_with_its_limits() -> None:
    v = compat.verdict("525.60.13", "a100", "2.1.2", "12.1")
    assert (v.compatible, v.mode) == (True, "minor-version")
    joined = " ".join(v.reasons)
    assert "525.60.13" in joined
    assert "530.30.02" in joined
    assert "cudaErrorUnsupportedPtxVersion" in joined  # no JIT of newer PTX
    assert "cudaErrorCallRequiresNewerDriver" in joined


def test_530_30_02_with_cu121_is_full() -> None:
    v = compat.verdict("530.30.02", "a100-80gb-sxm4", "2.1.2", "cu121")
    assert (v.compatible, v.mode) == (True, "full")
    assert v.min_driver is not None
    assert str(v.min_driver.full) == "530.30.02"
    assert str(v.min_driver.minor_version) == "525.60.13"


def test_535_with_cu118_is_full() -> None:
    v = compat.verdict("535.104.05", "a100", "2.1.2", "cu118")
    assert v.mode == "full"
    assert v.reasons[0].startswith("driver 535.104.05 supports CUDA ≤ 12.2; cu118 needs ≥ 520.61.05")


def test_one_patch_below_the_mvc_floor_is_none() -> None:
    assert compat.verdict("525.60.12", "a100", "2.1.2", "12.1").mode == "none"


def test_rtx5090_with_torch_2_1_2_cu121_is_not_compatible_in_torchs_words() -> None:
    v = compat.verdict("570.124.06", "rtx5090", "2.1.2", "cu121")
    assert (v.compatible, v.mode) == (False, "none")
    assert v.arch is not None
    assert v.arch.kind == "none"
    assert "sm_120 is not compatible with the current PyTorch installation" in v.arch.detail
    assert any(
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch "
        "installation" in r
        for r in v.reasons
    )
    assert any("the first torch release with kernels for sm_120 is 2.7.0+cu128" in r for r in v.reasons)


def test_rtx5090_with_torch_2_7_0_cu128_is_native() -> None:
    v = compat.verdict("570.124.06", "NVIDIA GeForce RTX 5090", "2.7.0", "cu128")
    assert (v.compatible, v.mode) == (True, "full")
    assert v.arch is not None
    assert (v.arch.kind, v.arch.kernel) == ("native", "sm_120")


def test_rtx5090_on_a_pre_blackwell_driver_is_none_even_under_mvc() -> None:
    v = compat.verdict("560.35.03", "rtx5090", "2.7.0", "cu128")
    assert v.mode == "none"
    assert any("needs driver ≥ 570.86.16" in r for r in v.reasons)


def test_rtx4090_with_cu118_torch_2_1_runs_sm86_sass() -> None:
    v = compat.verdict("535.104.05", "rtx4090", "2.1.2", "cu118")
    assert v.mode == "full"
    assert v.arch is not None
    assert (v.arch.kind, v.arch.kernel) == ("binary-compatible", "sm_86")
    assert "sm_89" in v.arch.detail


def test_h100_with_torch_2_0_0_cu117_is_none() -> None:
    v = compat.verdict("535.104.05", "h100-sxm", "2.0.0", "cu117")
    assert v.mode == "none"
    assert v.arch is not None
    assert v.arch.kind == "none"
    assert "sm_90 is not compatible" in v.arch.detail
    assert any("2.0.0+cu118" in r for r in v.reasons)  # cu118 of the same release has sm_90


def test_never_published_pair_is_none_with_that_reason() -> None:
    v = compat.verdict("550.54.15", "a100", "2.1.2", "cu124")
    assert (v.compatible, v.mode, v.arch) == (False, "none", None)
    assert v.reasons[0].startswith("torch 2.1.2 was never published for cu124 (CUDA 12.4)")
    assert "cu124 wheels exist for torch 2.4.0 … 2.6.0" in v.reasons[0]
    assert v.min_driver is not None
    assert str(v.min_driver.full) == "550.54.14"


def test_never_published_variant_of_an_unreleased_cuda() -> None:
    v = compat.verdict("550.54.15", "a100", "2.6.0", "cu127")
    assert v.mode == "none"
    assert v.min_driver is None
    assert "no torch release has cu127" in v.reasons[0]


def test_ptx_only_coverage_says_jit_and_driver_need() -> None:
    cov = compat.arch_coverage(["7.5", "8.0", "12.0+PTX"], "13.0")
    assert (cov.kind, cov.kernel) == ("ptx", "compute_120")
    assert "slow first start" in cov.detail
    assert "driver must be at least as new as the wheel's CUDA toolkit" in cov.detail


def test_ptx_only_kernel_needs_full_compatibility() -> None:
    # No tabulated GPU is PTX-only for a published wheel yet; a compute capability 13.0 device would be for
    # cu129 (arch 7.0 … 10.0;12.0+PTX).
    future = compat.Gpu(
        key="future", name="NVIDIA Future", cc="13.0", memory_gib=1.0, tdp_w=None, smi_names=(), source="test"
    )
    full = compat.verdict("575.57.08", future, "2.8.0", "cu129")
    assert (full.mode, full.arch.kind if full.arch else None) == ("full", "ptx")
    mvc = compat.verdict("570.26", future, "2.8.0", "cu129")  # < 575.51.03 (12.9 GA), ≥ 525.60.13
    assert mvc.mode == "none"
    assert str(mvc.needs_driver) == "575.51.03"  # PTX JIT needs the full driver
    assert any("not possible under minor-version compatibility" in r for r in mvc.reasons)


def test_h200_smoke_default_is_native_full_on_the_lent_hosts_driver() -> None:
    v = compat.verdict("580.159.04", "NVIDIA H200", "2.11.0", "cu130")
    assert (v.mode, v.arch.kind if v.arch else None) == ("full", "native")


def test_r610_driver_reports_cuda_13_3() -> None:
    assert compat.max_cuda_for_driver("610.43.02") == "13.3"


def test_v100_is_dropped_by_cuda_13_wheels() -> None:
    v = compat.verdict("580.65.06", "v100", "2.11.0", "cu130")
    assert v.mode == "none"
    assert v.arch is not None
    assert "sm_70 is not compatible" in v.arch.detail


def test_cu118_arch_list_of_2_6_has_sm37() -> None:
    var = compat.torch_variant("2.6.0", "cu118")
    assert "3.7" in var.arch_list
    assert compat.arch_coverage(var.arch_list, "3.7").kind == "native"


def test_cuda_given_as_xy_or_tag_is_the_same() -> None:
    a = compat.verdict("535.104.05", "a100", "2.3.1", "12.1")
    b = compat.verdict("535.104.05", "a100", "2.3.1", "cu121")
    assert a == b


def test_newer_driver_runs_older_cuda_fully() -> None:
    assert compat.verdict("595.71.05", "h100-sxm", "2.1.2", "cu118").mode == "full"


# ------------------------------------------------------------------------------------ pieces


def test_driver_version_ordering_and_str() -> None:
    assert parse_driver("535.104.05") < parse_driver("535.129.03") < parse_driver("550.54.14")
    assert parse_driver("570.26") < parse_driver("570.124.06")
    assert parse_driver("570.26") == parse_driver("570.26.00")
    assert str(parse_driver("535.104.05")) == "535.104.05"
    assert str(DriverVersion(570, 26)) == "570.26"
    assert parse_driver(" 525.60.13 ").branch == 525
    assert len({parse_driver("570.26"), parse_driver("570.26.0")}) == 1


@pytest.mark.parametrize(
    ("cuda", "full", "mvc"),
    [
        ("11.0", "450.51.05", "450.51.05"),
        ("11.4", "470.42.01", "450.80.02"),
        ("11.4.4", "470.82.01", "450.80.02"),
        ("11.8", "520.61.05", "450.80.02"),
        ("12.0", "525.60.13", "525.60.13"),
        ("12.1", "530.30.02", "525.60.13"),
        ("12.4", "550.54.14", "525.60.13"),
        ("12.4.1", "550.54.15", "525.60.13"),
        ("cu126", "560.28.03", "525.60.13"),
        ("12.8", "570.26", "525.60.13"),
        ("12.8.1", "570.124.06", "525.60.13"),
        ("12.9", "575.51.03", "525.60.13"),
        ("13.0", "580.65.06", "580.65.06"),
        ("13.2.2", "595.71.05", "580.65.06"),
        ("13.3", "610.43.02", "580.65.06"),
    ],
)
def test_min_driver_matches_nvidia_table(cuda: str, full: str, mvc: str) -> None:
    md = compat.min_driver(cuda)
    assert (str(md.full), str(md.minor_version)) == (full, mvc)


@pytest.mark.parametrize(
    ("driver", "cuda"),
    [
        ("450.80.02", "11.0"),
        ("470.82.01", "11.4"),
        ("470.57.02", "11.4"),
        ("525.60.13", "12.0"),
        ("525.85.12", "12.0"),
        ("535.104.05", "12.2"),
        ("550.54.15", "12.4"),
        ("570.26", "12.8"),
        ("575.57.08", "12.9"),
        ("580.159.04", "13.0"),
        ("595.71.05", "13.2"),
    ],
)
def test_max_cuda_for_driver(driver: str, cuda: str) -> None:
    assert compat.max_cuda_for_driver(driver) == cuda


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm4"),
        ("nvidia a100-sxm4-80gb", "a100-80gb-sxm4"),
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("GeForce RTX 3090", "rtx3090"),
        ("RTX 4090", "rtx4090"),
        ("NVIDIA H200", "h200"),
        ("h200", "h200"),
        ("a100", "a100-80gb-sxm4"),  # family key → its default SKU
        ("H100", "h100-sxm"),
        ("Tesla T4", "t4"),
        ("NVIDIA A800-SXM4-80GB", "a800-80gb-sxm4"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA B200", "b200"),
        ("NVIDIA GeForce RTX 5090", "rtx5090"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA L40", "l40"),
        ("NVIDIA RTX A6000", "rtx-a6000"),
        ("NVIDIA GeForce RTX 4090 D", "rtx4090d"),  # not the RTX 4090
        ("RTX 4090D", "rtx4090d"),
        ("NVIDIA A100-SXM...", "a100-80gb-sxm4"),  # truncated, same family → the family default
        ("Tesla V100-SXM2...", "v100-32gb-sxm2"),
        ("NVIDIA H100 80G...", "h100-sxm"),
    ],
)
def test_gpu_lookup(text: str, key: str) -> None:
    assert compat.gpu(text).key == key


def test_truncated_name_with_memory_picks_the_sku() -> None:
    assert compat.gpu("NVIDIA A100-SXM...", memory_mib=40536).key == "a100-40gb-sxm4"
    assert compat.gpu("NVIDIA A100-SXM...", memory_mib=81251).key == "a100-80gb-sxm4"


def test_gpu_memory_is_gib_of_nvidia_smi_mib() -> None:
    h200 = compat.gpu("h200")
    assert h200.memory_mib == 143771
    assert h200.memory_gib == pytest.approx(140.4)
    assert (h200.cc, h200.sm, h200.tdp_w) == ("9.0", "sm_90", 700)


@pytest.mark.parametrize(
    ("arch", "cc", "kind", "kernel"),
    [
        (["8.0", "8.6", "9.0"], "9.0", "native", "sm_90"),
        (["8.0", "8.6", "9.0"], "8.9", "binary-compatible", "sm_86"),
        (["7.5", "8.0", "9.0", "10.0", "12.0"], "10.3", "binary-compatible", "sm_100"),
        (["7.5", "8.0", "9.0", "10.0", "12.0"], "12.1", "binary-compatible", "sm_120"),
        (["8.0", "9.0+PTX"], "10.0", "ptx", "compute_90"),
        (["8.0", "8.6"], "9.0", "none", None),
        (["9.0a"], "9.0", "native", "sm_90"),
        (["8.0", "9.0a"], "9.1", "none", None),  # arch-specific SASS is not forward compatible
        (["8.6+PTX"], "8.0", "none", None),  # PTX newer than the GPU cannot be used
    ],
)
def test_arch_coverage(arch: list[str], cc: str, kind: str, kernel: str | None) -> None:
    cov = compat.arch_coverage(arch, cc)
    assert (cov.kind, cov.kernel) == (kind, kernel)


def test_arch_none_lists_capabilities_like_torch() -> None:
    cov = compat.arch_coverage(["5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "3.7", "9.0"], "12.0")
    assert cov.detail == (
        "sm_120 is not compatible with the current PyTorch installation. "
        "The current PyTorch install supports "
        "CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_37 sm_90."
    )


def test_nearest() -> None:
    assert compat.nearest("h1000", ["h100", "h200", "a100"]) == "h100"
    assert compat.nearest("H200", ["h100", "h200"]) == "h200"
    assert compat.nearest("zzzz", ["h100", "h200"]) is None
    assert compat.nearest("x", []) is None


# ------------------------------------------------------------------------------------ data


def _toml(name: str) -> dict:  # type: ignore[type-arg]
    with (DATA / name).open("rb") as fh:
        return tomllib.load(fh)


def test_every_data_row_names_its_source() -> None:
    for name, tables in {
        "cuda.toml": ["release", "minor_version_floor", "branch"],
        "torch.toml": ["release"],
        "gpus.toml": ["gpu", "family"],
    }.items():
        data = _toml(name)
        for table in tables:
            for row in data[table]:
                assert row.get("source", "").strip(), (name, table, row)
                for sub in row.get("variant", []):
                    assert sub.get("source", "").strip(), (name, row["version"], sub["name"])


def test_every_cuda_update_from_11_0_to_13_2_is_listed() -> None:
    versions = {r.version for r in compat.cuda_releases()}
    expected = {
        "11.0.2", "11.0.3", "11.1.0", "11.1.1", "11.2.0", "11.2.1", "11.2.2", "11.3.0", "11.3.1",
        "11.4.0", "11.4.1", "11.4.2", "11.4.3", "11.4.4", "11.5.0", "11.5.1", "11.5.2", "11.6.0", "11.6.1",
        "11.6.2", "11.7.0", "11.7.1", "11.8.0", "12.0.0", "12.0.1", "12.1.0", "12.1.1", "12.2.0", "12.2.1",
        "12.2.2", "12.3.0", "12.3.1", "12.3.2", "12.4.0", "12.4.1", "12.5.0", "12.5.1", "12.6.0", "12.6.1",
        "12.6.2", "12.6.3", "12.8.0", "12.8.1", "12.9.0", "12.9.1", "13.0.0", "13.0.1", "13.0.2", "13.1.0",
        "13.1.1", "13.2.0", "13.2.1", "13.2.2", "13.3.0", "13.3.1", "13.4.1", "13.4.2", "13.4.3", "13.5.0",
    }  # fmt: skip
    assert versions == expected
    # minimum drivers never go down as the toolkit goes up
    drivers = [r.min_driver for r in compat.cuda_releases()]
    assert drivers == sorted(drivers)


def test_every_torch_patch_release_from_2_0_to_2_14_is_listed() -> None:
    versions = [r.version for r in compat.torch_releases()]
    assert versions == [
        "2.0.0", "2.0.1", "2.1.0", "2.1.1", "2.1.2", "2.2.0", "2.2.1", "2.2.2", "2.3.0", "2.3.1", "2.4.0",
        "2.4.1", "2.5.0", "2.5.1", "2.6.0", "2.7.0", "2.7.1", "2.8.0", "2.9.0", "2.9.1", "2.10.0", "2.11.0",
        "2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0",
    ]  # fmt: skip


def test_torch_pairings_and_variants_follow_the_release_matrix() -> None:
    r = compat.torch_release("2.1.2")
    assert (r.torchvision, r.torchaudio, r.pypi_default) == ("0.16.2", "2.1.2", "cu121")
    assert list(r.variants) == ["cu118", "cu121"]
    assert r.python.contains("3.11")
    assert not r.python.contains("3.12")
    cu121 = r.variants["cu121"]
    assert (cu121.cuda, cu121.nccl, cu121.cudnn) == ("12.1", "2.18.1", "8.9.2.26")
    assert cu121.index_url == "https://download.pytorch.org/whl/cu121"
    assert compat.torch_release("2.0.0").torchvision == "0.15.1"
    assert compat.torch_release("2.11.0").torchaudio == "2.11.0"
    assert compat.torch_release("2.11.0").pypi_default == "cu130"
    # issue 13: torchaudio did not end with 2.11: the py3-none torchaudio 2.11.1 pairs with 2.12+
    assert compat.torch_release("2.12.0").torchaudio == "2.11.1"
    assert compat.torch_release("2.7.0").variants["cu128"].arch_list[-1] == "12.0+PTX"


def test_torchvision_follows_the_0_n_plus_15_rule() -> None:
    # the rule holds through 2.14; torch 2.15.0 shipped with the py3-none torchvision 0.29.2 (torch>=2.14.0)
    for r in compat.torch_releases():
        minor = int(r.version.split(".")[1])
        if r.version == "2.15.0":
            assert r.torchvision == "0.29.2"
        elif minor >= 1:
            assert r.torchvision.startswith(f"0.{minor + 15}."), r.version


def test_every_variant_cuda_is_a_known_toolkit_and_tag_matches() -> None:
    for r in compat.torch_releases():
        for name, v in r.variants.items():
            assert compat.normalize_cuda(name) == (name, v.cuda)
            compat.min_driver(v.cuda)  # raises if unknown


def test_unverified_rows_are_marked() -> None:
    by_version = {r.version: r for r in compat.torch_releases()}
    for v in ("2.12.1", "2.13.0", "2.14.0", "2.14.1"):
        assert by_version[v].verified is False
    assert by_version["2.1.2"].verified is True
    assert by_version["2.9.0"].variants["cu126"].verified is False  # arch list assumed
    branches = {row["branch"]: row for row in _toml("cuda.toml")["branch"]}
    assert branches[565]["verified"] is False
    assert "derived" in branches[470]["source"]


def test_required_gpus_are_present() -> None:
    families = {g.family for g in compat.gpus()}
    for fam in (
        "v100", "t4", "a10", "a30", "a40", "a100", "a800", "rtx-a6000", "rtx3090", "rtx4090", "l4", "l40",
        "l40s", "h100", "h800", "h20", "h200", "b200", "rtx5090",
    ):  # fmt: skip
        assert fam in families
    keys = {g.key for g in compat.gpus()}
    assert {
        "a100-40gb-pcie",
        "a100-80gb-pcie",
        "a100-40gb-sxm4",
        "a100-80gb-sxm4",
        "h100-pcie",
        "h100-sxm",
    } <= keys


def test_blockers_and_needs_driver() -> None:
    low = compat.verdict("470.82.01", "a100", "2.1.2", "cu121")
    assert low.blockers == (low.reasons[0],)
    assert str(low.needs_driver) == "525.60.13"  # the minor-version floor is enough here
    arch = compat.verdict("570.124.06", "rtx5090", "2.1.2", "cu121")
    assert len(arch.blockers) == 1
    assert "sm_120 is not compatible" in arch.blockers[0]
    assert arch.needs_driver is None  # no driver fixes a missing kernel
    gpu_too_new = compat.verdict("560.35.03", "rtx5090", "2.7.0", "cu128")
    assert str(gpu_too_new.needs_driver) == "570.86.16"  # the first driver table holding the RTX 5090
    ok = compat.verdict("530.30.02", "a100", "2.1.2", "cu121")
    assert (ok.blockers, ok.needs_driver) == ((), None)
    never = compat.verdict("550.54.15", "a100", "2.1.2", "cu124")
    assert never.blockers == never.reasons


# ------------------------------------------------------------------------------------ properties

_drivers = st.tuples(st.integers(100, 9999), st.integers(0, 999), st.none() | st.integers(0, 999))


@given(_drivers, _drivers)
def test_driver_versions_order_like_their_numbers(
    a: tuple[int, int, int | None], b: tuple[int, int, int | None]
) -> None:
    def text(v: tuple[int, int, int | None]) -> str:
        return f"{v[0]}.{v[1]:02d}" + ("" if v[2] is None else f".{v[2]:02d}")

    da, db = parse_driver(text(a)), parse_driver(text(b))
    assert str(da) == text(a)
    ka, kb = (a[0], a[1], a[2] or 0), (b[0], b[1], b[2] or 0)
    assert (da < db) == (ka < kb)
    assert (da == db) == (ka == kb)


_ccs = st.tuples(st.integers(3, 12), st.integers(0, 9))


@given(st.lists(st.tuples(_ccs, st.booleans()), min_size=1, max_size=8), _ccs)
def test_arch_coverage_follows_the_cuda_rules(
    entries: list[tuple[tuple[int, int], bool]], cc: tuple[int, int]
) -> None:
    arch = [f"{m}.{n}" + ("+PTX" if ptx else "") for (m, n), ptx in entries]
    cov = compat.arch_coverage(arch, f"{cc[0]}.{cc[1]}")
    sass = {mn for mn, _ in entries}
    if cc in sass:
        assert cov.kind == "native"
    elif any(m == cc[0] and n < cc[1] for m, n in sass):
        assert cov.kind == "binary-compatible"
    elif any(ptx and mn <= cc for mn, ptx in entries):
        assert cov.kind == "ptx"
    else:
        assert cov.kind == "none"
        assert f"sm_{cc[0]}{cc[1]} is not compatible with the current PyTorch installation" in cov.detail


# ------------------------------------------------------------------------------------ issue 13: facts

NOV_30 = datetime.date(2026, 11, 30)


def _rows_of(value: object, where: str) -> list[tuple[str, dict]]:  # type: ignore[type-arg]
    """Every row (a table in an array of tables, at any depth) of a parsed data file, with where it is."""
    out: list[tuple[str, dict]] = []  # type: ignore[type-arg]
    if isinstance(value, dict):
        for key, sub in value.items():
            out += _rows_of(sub, f"{where}.{key}")
    elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        for i, item in enumerate(value):
            out.append((f"{where}[{i}]", item))
            for key, sub in item.items():
                out += _rows_of(sub, f"{where}[{i}].{key}")
    return out


def test_every_row_of_every_data_table_is_traceable_to_a_source() -> None:
    """NVIDIA's and PyTorch's tables stay hand-kept: every row of every array of tables in every data file
    (cuda, torch, gpus -- lifecycle, wheel_runtime and arch included -- bases, os_families, platforms) and
    every top-level table (sources.toml) names a non-empty `source`."""
    names = sorted(p.name for p in DATA.glob("*.toml"))
    assert {"cuda.toml", "torch.toml", "gpus.toml"} <= set(names)
    tables = set()
    for name in names:
        data = _toml(name)
        rows = _rows_of(data, name)
        rows += [(f"{name}.{k}", v) for k, v in data.items() if isinstance(v, dict)]
        for where, row in rows:
            assert isinstance(row.get("source"), str), where
            assert row["source"].strip(), where
            tables.add(where.split("[")[0])
    assert {"cuda.toml.lifecycle", "cuda.toml.wheel_runtime", "gpus.toml.arch"} <= tables


def test_loading_rejects_a_lifecycle_row_without_a_valid_month(monkeypatch: pytest.MonkeyPatch) -> None:
    real = compat._load("cuda.toml")
    broken = {**real, "lifecycle": [{"branch": 535, "designation": "long-term", "end_of_life": "June 2026",
                                     "source": "x"}]}  # fmt: skip
    monkeypatch.setattr(TABLES, "load", lambda name: broken if name == "cuda.toml" else real)
    compat._lifecycles.cache_clear()
    try:
        with pytest.raises(compat.DataError, match=r"cuda\.toml: \[\[lifecycle\]\] 535: end_of_life"):
            compat.branch_lifecycle(535)
    finally:
        monkeypatch.undo()
        compat._lifecycles.cache_clear()


# wrong fact 1: torchaudio did not end at 2.11


@pytest.mark.parametrize("torch", ["2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1", "2.15.0"])
def test_torch_2_12_to_2_15_pair_with_the_py3_none_torchaudio_2_11_1(torch: str) -> None:
    r = compat.torch_release(torch)
    assert (r.torchaudio, r.torchaudio_local) == ("2.11.1", False)
    assert compat.torch_release("2.11.0").torchaudio_local is True  # same-numbered, per-variant wheels


def test_torchaudio_2_11_1_is_pinned_without_a_variant_suffix() -> None:
    from imagesmith.lock import LockKey, lock_inputs

    lines = lock_inputs(LockKey(torch="2.12.0", variant="cu126", python="3.12"))
    assert "torch==2.12.0+cu126" in lines
    assert "torchaudio==2.11.1" in lines  # one py3-none wheel for every variant
    assert "torchaudio==2.11.0" in lock_inputs(LockKey(torch="2.11.0", variant="cu130", python="3.12"))


# wrong fact 2: torch 2.12-2.14 cu130 carry no PTX


@pytest.mark.parametrize("torch", ["2.12.0", "2.12.1", "2.13.0", "2.14.0", "2.14.1"])
def test_cu130_wheels_of_2_12_to_2_14_carry_sm75_to_sm120_sass_and_no_ptx(torch: str) -> None:
    var = compat.torch_variant(torch, "cu130")
    assert var.arch_list == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
    assert not any(a.endswith("+PTX") for a in var.arch_list)
    assert compat.torch_variant("2.11.0", "cu130").arch_list == var.arch_list  # as 2.11 already was


def test_a_cc_13_gpu_has_no_kernel_in_a_2_14_cu130_wheel() -> None:
    future = compat.Gpu(
        key="future", name="NVIDIA Future", cc="13.0", memory_gib=1.0, tdp_w=None, smi_names=(), source="test"
    )
    v = compat.verdict("595.71.05", future, "2.14.0", "cu130", today=NOV_30)
    assert v.mode == "none"
    assert v.arch is not None
    assert v.arch.kind == "none"


# wrong fact 3: B200 minimum driver


def test_b200_needs_570_133_20_per_the_gpu_operator_docs() -> None:
    b200 = compat.gpu("b200")
    assert str(b200.min_driver) == "570.133.20"
    assert "GPU Operator" in b200.source
    v = compat.verdict("570.124.06", "b200", "2.9.0", "cu128", today=NOV_30)
    assert v.mode == "none"
    assert str(v.needs_driver) == "570.133.20"
    assert any("needs driver ≥ 570.133.20" in b for b in v.blockers)
    assert compat.verdict("570.133.20", "b200", "2.9.0", "cu128", today=NOV_30).mode == "full"
    # the driver table holds B200 from 570.86.15: the GPU Operator's later floor wins, and says so
    assert "holds it from 570.86.15" in b200.min_driver_source
    assert str(compat.gpu("rtx5090").min_driver) == "570.86.16"  # other Blackwell boards: the driver table's


# missing: CUDA 13.4 / 13.5 and branches R615 / R620


def test_cuda_13_4_and_13_5_are_known_on_r615_and_r620() -> None:
    assert compat.cuda_release("13.4").version == "13.4.1"  # 13.4 GA is versioned 13.4.1
    assert compat.cuda_release("13.4.2").xy == "13.4"
    assert str(compat.min_driver("13.4").full) == "615.00"
    assert str(compat.min_driver("cu135").full) == "620.70.06"  # the release shipping cuda-compat-13-5
    assert compat.cuda_release("13.4.3").xy == "13.4"  # cuda-toolkit 13.4.3 (cudart 13.4.92)
    assert str(compat.min_driver("13.4.3").full) == "615.00"
    assert str(compat.min_driver("13.5").minor_version) == "580.65.06"  # the 13.x floor
    for version in ("13.4.1", "13.4.2", "13.4.3", "13.5.0"):
        assert compat.cuda_release(version).verified is False  # branch read, not the exact driver
    assert compat.max_cuda_for_driver("615.20.01") == "13.4"
    assert compat.max_cuda_for_driver("620.30.02") == "13.5"
    assert compat.driver_branch_cuda(615)[0] == "13.4"  # type: ignore[index]
    assert compat.driver_branch_cuda(620)[0] == "13.5"  # type: ignore[index]


# missing: branch lifecycle


@pytest.mark.parametrize(
    ("branch", "designation", "end"),
    [
        (535, "long-term", "June 2026"),
        (570, "production", "February 2026"),
        (580, "long-term", "June 2028"),
        (595, "production", "March 2027"),
        (610, "new-feature", "August 2026"),  # R615 page, table 2: a New Feature Branch (main: production)
        (590, "new-feature", "no end-of-life date"),
        (620, "long-term", "September 2029"),
    ],
)
def test_branch_lifecycle_rows(branch: int, designation: str, end: str) -> None:
    row = compat.branch_lifecycle(branch)
    assert row is not None
    assert (row.designation, row.end_text) == (designation, end)
    assert (
        "supported drivers and cuda toolkit versions" in row.source.lower() or "branch release" in row.source
    )


@pytest.mark.parametrize(
    ("driver", "eol"),
    [
        ("535.104.05", True),  # R535 ended June 2026
        ("570.172.08", True),  # R570 ended February 2026
        ("610.43.02", True),  # R610 ended August 2026
        ("550.54.15", True),  # not listed, older than R580: the R580-era page called every such branch EOL
        (
            "615.20.01",
            False,
        ),  # not listed, newer than R580: NVIDIA's pages say nothing of its end (main: EOL)
        ("580.159.04", False),  # long-term to June 2028
        ("595.71.05", False),  # to March 2027
        ("620.30.02", False),  # long-term to September 2029
        ("625.10.01", False),  # newer than the table: nothing known
    ],
)
def test_driver_warnings_on_2026_11_30(driver: str, eol: bool) -> None:
    warnings = compat.driver_warnings(driver, today=NOV_30)
    assert bool(warnings) is eol
    if eol:
        assert "end of life" in warnings[0]
        assert "R580 (long-term support branch, supported to June 2028)" in warnings[0]


def test_r610_is_a_new_feature_branch_with_nvidias_end_of_life() -> None:
    (warning,) = compat.driver_warnings("610.43.02", today=NOV_30)
    assert warning.startswith(
        "driver 610.43.02 is on branch R610, a new feature branch that reached end of life in August 2026"
    )
    row = compat.branch_lifecycle(610)
    assert row is not None
    assert "New Feature Branch" in row.source


def test_r590_new_feature_branch_is_not_called_end_of_life() -> None:
    # main: "NVIDIA calls every earlier branch it does not list end of life" -- NVIDIA's R620 page says NFBs
    # "do not have an end-of-life date"
    (warning,) = compat.driver_warnings("590.48.01", today=NOV_30)
    assert "end of life" not in warning.replace("end-of-life date", "").replace("not end of life", "")
    assert "new feature branch" in warning
    assert "no end-of-life date" in warning
    assert "R580 (long-term support branch, supported to June 2028)" in warning
    assert "R610" not in warning.split("production on")[1]  # NFBs are not offered as the branch to move to


def test_lifecycle_rows_need_an_end_unless_new_feature(monkeypatch: pytest.MonkeyPatch) -> None:
    real = compat._load("cuda.toml")
    broken = {**real, "lifecycle": [{"branch": 600, "designation": "production", "source": "x"}]}
    monkeypatch.setattr(TABLES, "load", lambda name: broken if name == "cuda.toml" else real)
    compat._lifecycles.cache_clear()
    try:
        with pytest.raises(
            compat.DataError, match=r"\[\[lifecycle\]\] 600: a production branch needs an end_of_life"
        ):
            compat.branch_lifecycle(600)
    finally:
        monkeypatch.undo()
        compat._lifecycles.cache_clear()


def test_end_of_life_is_relative_to_today() -> None:
    assert compat.driver_warnings("535.104.05", today=datetime.date(2026, 6, 30)) == ()  # its last month
    assert compat.driver_warnings("535.104.05", today=datetime.date(2026, 7, 1))
    assert compat.driver_warnings("580.65.06", today=datetime.date(2028, 7, 1))


def test_today_comes_from_the_environment_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-05-01")
    assert compat.today() == datetime.date(2026, 5, 1)
    assert compat.verdict("535.104.05", "a100", "2.1.2", "cu121").warnings == ()
    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-11-30")
    assert compat.verdict("535.104.05", "a100", "2.1.2", "cu121").warnings
    monkeypatch.setenv("IMAGESMITH_TODAY", "yesterday")
    with pytest.raises(ConfigError, match="IMAGESMITH_TODAY"):
        compat.today()


@pytest.mark.skipif(not hasattr(time, "tzset"), reason="time zones are set through TZ + tzset")
def test_today_is_the_utc_date_whatever_the_machines_time_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: the local date. An allowlist entry expiring "2027-01-31" still held at 2027-02-01 03:00 UTC on
    a laptop at UTC-8 and not on the UTC nightly; EOL warnings moved by a day the same way. UTC-12 and UTC+14
    are 26 hours apart: at every moment at least one of them has another date than UTC."""
    monkeypatch.delenv("IMAGESMITH_TODAY", raising=False)
    try:
        for zone in ("Etc/GMT+12", "Etc/GMT-14"):  # POSIX signs: GMT+12 is UTC-12
            monkeypatch.setenv("TZ", zone)
            time.tzset()
            before = datetime.datetime.now(datetime.timezone.utc).date()
            got = compat.today()
            assert got in (before, datetime.datetime.now(datetime.timezone.utc).date()), zone
    finally:
        monkeypatch.undo()
        time.tzset()


def test_an_eol_branch_warns_but_does_not_change_the_verdict() -> None:
    v = compat.verdict("535.104.05", "a100", "2.1.2", "cu121", today=NOV_30)
    assert (v.compatible, v.mode, v.blockers) == (True, "full", ())
    assert len(v.warnings) == 1
    assert v.warnings[0].startswith("driver 535.104.05 is on branch R535, a long-term support branch that ")
    assert not any("end of life" in r for r in v.reasons)


# missing: R580 is the last branch for Maxwell / Pascal / Volta


@pytest.mark.parametrize(("name", "cc"), [("Maxwell", "5.2"), ("Pascal", "6.1"), ("Volta", "7.0")])
def test_r580_is_the_last_branch_of_maxwell_pascal_volta(name: str, cc: str) -> None:
    # NVIDIA's CUDA Toolkit, Driver, and Architecture Matrix: last toolkit CUDA 12.x, last driver R580 (R580
    # reports CUDA 13.0, but no CUDA 13 toolkit targets them: the data said "tops out at CUDA 13.0")
    family = next(a for a in compat.arch_families() if a.covers(cc))
    assert (family.name, family.last_branch, family.last_toolkit, family.last_cuda_major) == (
        name,
        580,
        "12.x",
        12,
    )
    assert "Architecture Matrix" in family.source
    turing = next(a for a in compat.arch_families() if a.covers("7.5"))
    assert (turing.last_branch, turing.last_toolkit) == (None, None)  # Turing goes on
    assert compat.gpu_last_branch("t4") is None


def test_kepler_ends_with_r470_and_cuda_11_x() -> None:
    k80 = next(a for a in compat.arch_families() if a.covers("3.7"))
    assert (k80.name, k80.last_branch, k80.last_toolkit) == ("Kepler", 470, "11.x")
    assert next(a for a in compat.arch_families() if a.covers("3.0")).last_toolkit == "10.x"


def test_v100_cannot_run_a_cuda_13_wheel_even_on_r580(monkeypatch: pytest.MonkeyPatch) -> None:
    # cu130 of 2.11 has no sm_70 either; a cu130 wheel that did carry sm_70 is still refused: no CUDA 13
    # toolkit supports Volta (on main's data, "R580 supports CUDA ≤ 13.0" let it through)
    rel = compat.torch_release("2.11.0")
    with_sm70 = dataclasses.replace(rel.variants["cu130"], arch_list=("7.0", "9.0"))
    fake = dataclasses.replace(rel, variants={**rel.variants, "cu130": with_sm70})
    real = compat.torch_release
    monkeypatch.setattr(torchwheels, "torch_release", lambda v: fake if v == "2.11.0" else real(v))
    v = compat.verdict("580.159.04", "v100", "2.11.0", "cu130", today=NOV_30)
    assert v.mode == "none"
    assert v.arch is not None
    assert v.arch.kind == "native"  # the kernel is there; the toolkit is not
    assert any("CUDA 12.x is NVIDIA's last CUDA toolkit for Volta GPUs" in b for b in v.blockers)


def test_v100_tops_out_at_cuda_12_x_and_cu130_has_no_sm70() -> None:
    assert compat.gpu_last_branch("v100") is not None
    v = compat.verdict("580.159.04", "v100", "2.11.0", "cu130", today=NOV_30)
    assert v.mode == "none"
    assert any("cu130 wheels of torch 2.11.0 carry no sm_70 kernels" in b for b in v.blockers)
    assert any("the newest torch release with kernels for sm_70 is" in b for b in v.blockers)
    assert v.needs_driver is None  # no driver brings sm_70 back
    assert v.warnings == (
        "Tesla V100-SXM2-32GB (Volta, sm_70): R580 is NVIDIA's last driver branch for Volta GPUs and CUDA "
        "12.x their last CUDA toolkit: no newer driver or CUDA toolkit will run on it",
    )
    # cu126 still has sm_70: it runs, and still warns about the cap
    ok = compat.verdict("580.159.04", "v100", "2.14.0", "cu126", today=NOV_30)
    assert ok.mode == "full"
    assert ok.warnings == v.warnings


def test_v100_cannot_run_cuda_13_2_or_a_newer_branch() -> None:
    v = compat.verdict("580.159.04", "v100", "2.14.0", "cu132", today=NOV_30)
    cap = (
        "cannot run CUDA 13.2: CUDA 12.x is NVIDIA's last CUDA toolkit for Volta GPUs (R580 their last driver"
    )
    assert any(cap in b for b in v.blockers)
    newer = compat.verdict("595.71.05", "v100", "2.14.0", "cu126", today=NOV_30)
    assert newer.mode == "none"
    assert any("does not support Volta GPUs" in b for b in newer.blockers)
    assert newer.needs_driver is None


# missing: torch 2.15.0 + torchvision 0.29.2


def test_torch_2_15_0_facts() -> None:
    r = compat.torch_release("2.15.0")
    assert (r.torchvision, r.torchaudio, r.pypi_default) == ("0.29.2", "2.11.1", "cu132")
    assert not r.python.contains("3.10")
    assert r.python.contains("3.11")
    assert r.python.contains("3.15")
    var = r.variants["cu132"]
    assert (var.cuda, var.cudnn, var.nccl) == ("13.2", "9.26.0.51", "2.30.7")
    runtime = compat.wheel_runtime("2.15.0", "cu132")
    assert runtime is not None
    assert runtime.runtime == "13.2.2"
    assert r.verified is False  # variants other than PyPI's default not read


def test_torch_2_15_0_needs_595_45_04_for_full_compatibility() -> None:
    assert str(compat.min_driver("cu132").full) == "595.45.04"
    full = compat.verdict("595.45.04", "h100-sxm", "2.15.0", "cu132", today=NOV_30)
    assert full.mode == "full"
    mvc = compat.verdict("580.159.04", "h100-sxm", "2.15.0", "cu132", today=NOV_30)
    assert mvc.mode == "minor-version"
    assert any("≥ 595.45.04 for full" in r for r in mvc.reasons)


# missing: GPUs


@pytest.mark.parametrize(
    ("key", "cc", "family", "smi_name"),
    [
        ("gh200", "9.0", "gh200", "NVIDIA GH200 480GB"),
        ("gb200", "10.0", "gb200", "NVIDIA GB200"),
        ("b300", "10.3", "b300", "NVIDIA B300 SXM6 AC"),
        ("gb300", "10.3", "b300", "NVIDIA GB300"),
        ("gb10", "12.1", "gb10", "NVIDIA GB10"),
        ("a16", "8.6", "a16", "NVIDIA A16"),
        ("a2", "8.6", "a2", "NVIDIA A2"),
        ("rtx-pro-4500-server", "12.0", "rtx-pro-4500", "NVIDIA RTX PRO 4500 Blackwell Server Edition"),
    ],
)
def test_new_gpus(key: str, cc: str, family: str, smi_name: str) -> None:
    g = compat.gpu(key)
    assert (g.cc, g.family) == (cc, family)
    assert compat.gpu(smi_name).key == key  # as nvidia-smi prints it
    assert g.memory_mib > 0
    assert g.tdp_w
    assert g.form_factor
    assert g.source
    assert compat.gpu_last_branch(g) is None


def test_new_gpus_run_the_wheels_their_arch_allows() -> None:
    # sm_103 runs sm_100 SASS, sm_121 runs sm_120 SASS (same major); GH200 is Hopper
    for key, kernel in (("b300", "sm_100"), ("gb300", "sm_100"), ("gb10", "sm_120"), ("gh200", "sm_90")):
        v = compat.verdict("580.159.04", key, "2.14.0", "cu130", today=NOV_30)
        assert v.mode == "full", key
        assert v.arch is not None
        assert v.arch.kernel == kernel
    assert compat.verdict("580.159.04", "a16", "2.1.2", "cu121", today=NOV_30).mode == "full"


# the verdict names the runtime a wheel ships when it quotes the GA driver row


def test_cu128_verdict_says_the_wheel_ships_the_12_8_update_1_runtime() -> None:
    v = compat.verdict("570.124.06", "h100-sxm", "2.9.0", "cu128", today=NOV_30)
    assert v.reasons[0].endswith("cu128 needs ≥ 570.26 for full compatibility: met")
    assert v.reasons[1] == (
        "570.26 is NVIDIA's CUDA 12.8 GA driver row; torch 2.9.0+cu128 wheels ship the CUDA 12.8 Update "
        "1 runtime (cudart 12.8.90), which checks the driver against CUDA 12.8 only, so the CUDA 12.8 GA "
        "driver runs it"
    )


def test_cu130_verdict_says_the_wheel_ships_the_13_0_update_2_runtime() -> None:
    v = compat.verdict("580.65.06", "h200", "2.11.0", "cu130", today=NOV_30)
    assert any(
        "580.65.06 is NVIDIA's CUDA 13.0 GA driver row; torch 2.11.0+cu130 wheels ship the CUDA 13.0 "
        "Update 2 runtime (cudart 13.0.96)" in r
        for r in v.reasons
    )
    assert compat.wheel_runtime("2.8.0", "cu128") is None  # not read for 2.8: no claim


def test_a_gpu_whose_family_has_no_family_row_is_one_data_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 31's recipe redo: a [[gpu]] row naming a family with no [[family]] row passed every guard
    from imagesmith.compat import hardware

    real = compat._load("gpus.toml")
    gpus = [dict(g) for g in real["gpu"]]
    gpus[0]["family"] = gpus[0]["family"] + "x"
    broken = {**real, "gpu": gpus}
    real_load = TABLES.load
    monkeypatch.setattr(TABLES, "load", lambda name: broken if name == "gpus.toml" else real_load(name))
    hardware.gpus.cache_clear()
    hardware._families.cache_clear()
    try:
        with pytest.raises(
            compat.DataError, match=rf"gpu {gpus[0]['key']}: family '{gpus[0]['family']}' has no"
        ):
            hardware._families()
    finally:
        monkeypatch.undo()
        hardware.gpus.cache_clear()
        hardware._families.cache_clear()
