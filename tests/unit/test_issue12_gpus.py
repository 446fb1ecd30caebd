"""Issue 12 (hostile-input audit), items 2, 3 and 6: GPUs of rentals, vGPU profiles, sane "did you mean",
compute_cap from a --query-gpu CSV for an unknown model, architecture blockers naming the variants that run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import compat
from imagesmith.errors import ConfigError

Run = Callable[..., Any]

# ------------------------------------------------------------------------------------------ item 2: GPUs


@pytest.mark.parametrize(
    ("smi_name", "key", "cc", "family"),
    [
        ("NVIDIA L20", "l20", "8.9", "l20"),
        ("NVIDIA GeForce RTX 3080 Ti", "rtx3080ti", "8.6", "rtx3080ti"),
        ("GeForce RTX 3080 Ti", "rtx3080ti", "8.6", "rtx3080ti"),
        ("NVIDIA GeForce RTX 2080 Ti", "rtx2080ti", "7.5", "rtx2080ti"),
        ("GeForce RTX 2080 Ti", "rtx2080ti", "7.5", "rtx2080ti"),
    ],
)
def test_rental_gpus_are_known(smi_name: str, key: str, cc: str, family: str) -> None:
    g = compat.gpu(smi_name)
    assert (g.key, g.cc, g.family) == (key, cc, family)
    assert compat.gpu(key) == g
    assert g.memory_mib > 0
    assert g.tdp_w
    assert g.form_factor
    assert g.source
    assert g.verified is False  # names, memory and power from prior knowledge
    assert not g.vgpu


@pytest.mark.parametrize(
    ("profile", "physical_family", "cc"),
    [
        ("GRID A100-40C", "a100", "8.0"),
        ("GRID A100D-80C", "a100", "8.0"),
        ("GRID A100-4-20C", "a100", "8.0"),  # MIG-backed profile
        ("GRID T4-16Q", "t4", "7.5"),
        ("GRID V100-32Q", "v100", "7.0"),
        ("NVIDIA H100XM-80C", "h100", "9.0"),
        ("NVIDIA L40S-48C", "l40s", "8.9"),
        ("NVIDIA A10-24Q", "a10", "8.6"),
    ],
)
def test_vgpu_profiles_resolve_to_the_physical_gpu(profile: str, physical_family: str, cc: str) -> None:
    g = compat.gpu(profile)
    assert (g.family, g.cc, g.vgpu) == (physical_family, cc, profile)
    warning = compat.gpu_warnings(g)[0]
    assert f"{profile} is a vGPU profile: a slice of a physical {g.name}" in warning


def test_an_unknown_vgpu_board_says_it_is_a_vgpu_profile() -> None:
    with pytest.raises(ConfigError, match=r"a vGPU profile of M60, not a known board"):
        compat.gpu("GRID M60-8Q")


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [
        ("h1000", "h100"),  # a doubled digit: a typo of h100
        ("NVIDIA GeForce RTX 4009", "NVIDIA GeForce RTX 4090"),  # two digits swapped
        ("GeForce RTX 2080", "GeForce RTX 2080 Ti"),  # same model number
        ("NVIDIA Foo", None),  # no model number: nothing rather than T4
        ("NVIDIA GeForce RTX 3070", None),  # another model, not a typo of 3090
        ("NVIDIA L30", None),  # not L40 or L20
        ("NVIDIA B100", None),  # not A100 or H100
        ("Quadro P5000", None),
    ],
)
def test_did_you_mean_matches_the_model_number(name: str, suggestion: str | None) -> None:
    assert compat.nearest_gpu(name) == suggestion
    with pytest.raises(ConfigError) as info:
        compat.gpu(name)
    if suggestion is None:
        assert "did you mean" not in info.value.message
    else:
        assert f"did you mean {suggestion}?" in info.value.message


def test_the_audits_wrong_suggestions_are_gone() -> None:
    # before: 2080 Ti → "RTX 5090 D", "NVIDIA Foo" → "T4" (both from spelling alone)
    assert compat.nearest_gpu("NVIDIA GeForce RTX 2090 Ti") is None
    assert compat.nearest_gpu("NVIDIA Foo") is None


def test_unknown_family_suggests_only_a_family_of_that_model() -> None:
    with pytest.raises(ConfigError) as info:
        compat.gpu_family("a1000")
    assert "did you mean a100?" in info.value.message
    with pytest.raises(ConfigError) as info:
        compat.gpu_family("foo")
    assert "did you mean" not in info.value.message


def test_compat_cli_judges_a_vgpu_and_says_so(run_cli: Run) -> None:
    result = run_cli(
        "compat", "--driver", "535.104.05", "--gpu", "GRID A100-40C", "--torch", "2.1.2", "--cuda", "12.1"
    )
    assert result.exit_code == 0, result.stderr
    assert "on GRID A100-40C (vGPU slice of NVIDIA A100-SXM4-80GB)" in result.stdout
    assert "warning: GRID A100-40C is a vGPU profile" in result.stdout
    data = json.loads(
        run_cli(
            "compat",
            "--driver",
            "535.104.05",
            "--gpu",
            "GRID T4-16Q",
            "--torch",
            "2.1.2",
            "--cuda",
            "12.1",
            "--json",
        ).stdout
    )
    assert (data["vgpu"], data["gpu"], data["cc"]) == ("GRID T4-16Q", "t4", "7.5")


# ---------------------------------------------------------------- item 3: compute_cap of an unknown model


def _csv(tmp_path: Path, *, cap: bool) -> Path:
    header = "index, name, memory.total [MiB]" + (", compute_cap" if cap else "") + ", driver_version"
    row = "0, NVIDIA Foo 9000, 40960 MiB" + (", 8.9" if cap else "") + ", 570.86.15"
    path = tmp_path / "smi.csv"
    path.write_text(f"{header}\n{row}\n", encoding="utf-8")
    return path


def test_compat_uses_the_csv_compute_cap_for_an_unknown_gpu(run_cli: Run, tmp_path: Path) -> None:
    smi = _csv(tmp_path, cap=True)
    result = run_cli("compat", "--nvidia-smi", str(smi), "--torch", "2.6.0", "--cuda", "12.4")
    assert result.exit_code == 0, result.stderr
    assert "NVIDIA Foo 9000 is not in imagesmith's GPU table" in result.stdout
    assert "compute capability nvidia-smi reported (8.9, sm_89)" in result.stdout
    data = json.loads(
        run_cli("compat", "--nvidia-smi", str(smi), "--torch", "2.6.0", "--cuda", "12.4", "--json").stdout
    )
    assert (data["cc"], data["in_gpu_table"], data["compatible"]) == ("8.9", False, True)
    # the capability decides: as sm_120 (Blackwell) the same GPU gets no kernel from 2.6.0+cu124
    smi.write_text(smi.read_text(encoding="utf-8").replace(", 8.9,", ", 12.0,"), encoding="utf-8")
    none = run_cli("compat", "--nvidia-smi", str(smi), "--torch", "2.6.0", "--cuda", "12.4")
    assert none.exit_code == 1
    assert "sm_120 is not compatible" in none.stdout


def test_without_compute_cap_an_unknown_gpu_is_refused_saying_how_to_fix(
    run_cli: Run, tmp_path: Path
) -> None:
    result = run_cli(
        "compat", "--nvidia-smi", str(_csv(tmp_path, cap=False)), "--torch", "2.6.0", "--cuda", "12.4"
    )
    assert result.exit_code == 2
    assert "unknown GPU 'NVIDIA Foo 9000'" in result.stderr
    assert "compute_cap" in result.stderr.split("fix:")[1]


def test_gpu_or_adhoc_prefers_the_table() -> None:
    assert compat.gpu_or_adhoc("NVIDIA H200", compute_cap="1.0").key == "h200"
    adhoc = compat.gpu_or_adhoc("NVIDIA Foo", compute_cap="12.0", memory_mib=1024)
    assert (adhoc.cc, adhoc.adhoc, adhoc.segment) == ("12.0", True, "consumer")
    with pytest.raises(ConfigError):
        compat.gpu_or_adhoc("NVIDIA Foo", compute_cap="junk")


# ------------------------------------------------------------ item 6: arch blockers name what does run


def test_v100_torch_2_11_arch_blocker_lists_the_variants_that_run() -> None:
    v = compat.verdict("580.65.06", "v100", "2.11.0", "cu128")
    assert v.mode == "none"
    assert not any("first torch release with kernels for sm_70 is 2.0.0" in r for r in v.reasons)
    assert any("the newest torch release with kernels for sm_70 is" in b for b in v.blockers)
    assert "torch 2.11.0 variants this driver runs on Tesla V100-SXM2-32GB: cu126" in v.reasons


def test_a_gpu_too_new_for_a_variant_names_the_first_release_from_the_asked_one() -> None:
    # B200 (sm_100) with 2.11.0+cu126: sm_100 kernels exist since 2.7.0, but 2.11.0 has them in cu128
    v = compat.verdict("580.65.06", "b200", "2.11.0", "cu126")
    assert any(
        "the first torch release from 2.11.0 on with kernels for sm_100 is 2.11.0+cu128" in b
        for b in v.blockers
    )
    assert "torch 2.11.0 variants this driver runs on NVIDIA B200: cu128, cu129, cu130" in v.reasons


def test_an_arch_blocker_with_no_runnable_variant_says_so() -> None:
    v = compat.verdict("535.104.05", "rtx5090", "2.6.0", "cu124")
    assert "no variant of torch 2.6.0 runs on NVIDIA GeForce RTX 5090 with driver 535.104.05" in v.reasons


def test_runnable_variants_respect_the_last_driver_branch() -> None:
    # V100 on R580 tops out at CUDA 13.0: cu132 never counts as runnable
    v = compat.verdict("580.65.06", "v100", "2.14.1", "cu132")
    assert v.mode == "none"
    runs = [r for r in v.reasons if r.startswith("torch 2.14.1 variants this driver runs on")]
    assert runs
    assert "cu132" not in runs[0]
