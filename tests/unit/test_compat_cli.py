"""`imagesmith compat` via the real CLI entry point: exit codes, --json shape, errors without tracebacks."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.repo import REPO

NVSMI = REPO / "tests" / "data" / "nvsmi"

Run = Callable[..., Any]


def _no_traceback(result: Any) -> None:
    assert "Traceback" not in result.stdout + result.stderr


# ------------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--driver", "latest", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1"],
            2,
            "not an NVIDIA driver",
        ),
        (
            ["--driver", "535.104.05", "--gpu", "h1000", "--torch", "2.1.2", "--cuda", "12.1"],
            2,
            "did you mean h100",
        ),
        (
            ["--driver", "535.104.05", "--gpu", "a100", "--torch", "2.1.5", "--cuda", "12.1"],
            2,
            "did you mean 2.1.2",
        ),
        (
            ["--driver", "535.104.05", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.x"],
            2,
            "not a CUDA version",
        ),
        (["--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1"], 2, "missing --driver"),
        (["--torch", "2.1.2", "--cuda", "12.1"], 2, "missing --driver and --gpu"),
        (
            ["--nvidia-smi", str(NVSMI / "garbage_html.txt"), "--torch", "2.1.2", "--cuda", "12.1"],
            7,
            "garbage_html.txt: not nvidia-smi output",
        ),
        (
            ["--nvidia-smi", str(NVSMI / "garbage_driver_failed.txt"), "--torch", "2.1.2", "--cuda", "12.1"],
            7,
            "could not talk to the driver",
        ),
        (
            ["--nvidia-smi", str(NVSMI / "no_such_file.txt"), "--torch", "2.1.2", "--cuda", "12.1"],
            2,
            "no_such_file.txt: no such file",
        ),
        (
            [
                "--nvidia-smi",
                str(NVSMI / "real_580.159.04_h200_L.txt"),
                "--torch",
                "2.11.0",
                "--cuda",
                "13.0",
            ],
            2,
            "shows no driver version",
        ),
        (
            [
                "--nvidia-smi",
                str(NVSMI / "real_580.159.04_h200_default.txt"),
                "--gpu",
                "h200",
                "--torch",
                "2.11.0",
                "--cuda",
                "13.0",
            ],
            2,
            "--gpu and --nvidia-smi both name the GPU",
        ),
        (
            [
                "--nvidia-smi",
                str(NVSMI / "real_580.159.04_h200_default.txt"),
                "--driver",
                "570.26",
                "--torch",
                "2.11.0",
                "--cuda",
                "13.0",
            ],
            2,
            "contradicts",
        ),
        (
            ["--nvidia-smi", str(NVSMI), "--torch", "2.11.0", "--cuda", "13.0"],
            2,
            "is a folder",
        ),
    ],
)
def test_bad_input_is_one_clear_error(run_cli: Run, args: list[str], code: int, message: str) -> None:
    result = run_cli("compat", *args)
    assert result.exit_code == code, result.stderr
    assert message in result.stderr
    assert result.stderr.count("error:") == 1
    assert result.stdout == ""
    _no_traceback(result)


def test_missing_required_option_is_a_usage_error(run_cli: Run) -> None:
    result = run_cli("compat", "--driver", "535.104.05", "--gpu", "a100", "--cuda", "12.1")
    assert result.exit_code == 2
    assert "--torch" in result.stderr
    _no_traceback(result)


def test_ambiguous_truncated_name_in_a_file_names_the_gpu(run_cli: Run, tmp_path: Path) -> None:
    text = (
        (NVSMI / "r550_rtx4090_x2_rtx3090.txt")
        .read_text()
        .replace("NVIDIA GeForce RTX 3090", "NVIDIA Ge...    ")
    )
    smi = tmp_path / "smi.txt"
    smi.write_text(text)
    result = run_cli("compat", "--nvidia-smi", str(smi), "--torch", "2.1.2", "--cuda", "cu118")
    assert result.exit_code == 2
    assert "smi.txt: GPU 2: GPU name 'NVIDIA Ge...' is ambiguous" in result.stderr
    _no_traceback(result)


# ------------------------------------------------------------------------------------ verdicts


def test_not_compatible_exits_1_with_nvidias_numbers(run_cli: Run) -> None:
    result = run_cli("compat", "--driver", "470.82.01", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1")
    assert result.exit_code == 1
    assert "not compatible" in result.stdout
    assert (
        "driver 470.82.01 supports CUDA ≤ 11.4; cu121 needs ≥ 525.60.13 under minor-version" in result.stdout
    )
    assert result.stderr == ""


def test_json_shape_for_a_minor_version_verdict(run_cli: Run) -> None:
    result = run_cli(
        "compat",
        "--driver",
        "525.60.13",
        "--gpu",
        "A100-SXM4-80GB",
        "--torch",
        "2.1.2",
        "--cuda",
        "cu121",
        "--json",
    )
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["compatible"] is True
    assert data["mode"] == "minor-version"
    assert isinstance(data["reasons"], list)
    assert all(isinstance(r, str) for r in data["reasons"])
    assert data["min_driver"] == {"full": "530.30.02", "minor_version": "525.60.13", "toolkit": "12.1.0"}
    assert data["arch"]["kind"] == "native"
    assert (data["blockers"], data["needs_driver"]) == ([], None)
    assert (data["driver"], data["gpu"], data["torch"], data["cuda"]) == (
        "525.60.13",
        "a100-80gb-sxm4",
        "2.1.2",
        "12.1",
    )


def test_json_full_and_none(run_cli: Run) -> None:
    ok = run_cli(
        "compat", "--driver", "530.30.02", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1", "--json"
    )
    assert (ok.exit_code, json.loads(ok.stdout)["mode"]) == (0, "full")
    bad = run_cli(
        "compat", "--driver", "570.124.06", "--gpu", "rtx5090", "--torch", "2.1.2", "--cuda", "12.1", "--json"
    )
    data = json.loads(bad.stdout)
    assert (bad.exit_code, data["compatible"], data["mode"], data["arch"]["kind"]) == (
        1,
        False,
        "none",
        "none",
    )
    assert any("sm_120 is not compatible with the current PyTorch installation" in r for r in data["reasons"])
    assert len(data["blockers"]) == 1
    assert data["needs_driver"] is None


def test_never_published_pair_json(run_cli: Run) -> None:
    result = run_cli(
        "compat", "--driver", "550.54.15", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.4", "--json"
    )
    data = json.loads(result.stdout)
    assert result.exit_code == 1
    assert data["arch"] is None
    assert data["reasons"][0].startswith("torch 2.1.2 was never published for cu124")


def test_nvidia_smi_file_real_h200(run_cli: Run) -> None:
    path = NVSMI / "real_580.159.04_h200_default.txt"
    result = run_cli("compat", "--nvidia-smi", str(path), "--torch", "2.11.0", "--cuda", "13.0", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert (data["driver"], data["gpu"], data["mode"], data["gpu_indices"]) == (
        "580.159.04",
        "h200",
        "full",
        [0],
    )
    assert data["source"] == str(path)


def test_nvidia_smi_r470_file_with_truncated_names(run_cli: Run) -> None:
    path = NVSMI / "r470_a100_sxm4_80gb_x8.txt"
    result = run_cli("compat", "--nvidia-smi", str(path), "--torch", "2.1.2", "--cuda", "cu121", "--json")
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert (data["gpu"], data["gpu_indices"], data["mode"]) == ("a100-80gb-sxm4", list(range(8)), "none")


def test_nvidia_smi_list_output_with_driver_flag(run_cli: Run) -> None:
    path = NVSMI / "real_580.159.04_h200_L.txt"
    result = run_cli(
        "compat", "--nvidia-smi", str(path), "--driver", "580.159.04", "--torch", "2.11.0", "--cuda", "13.0"
    )
    assert result.exit_code == 0
    assert "compatible" in result.stdout
    assert "NVIDIA H200" in result.stdout


def test_a_verdict_per_gpu_model(run_cli: Run) -> None:
    path = NVSMI / "r550_rtx4090_x2_rtx3090.txt"
    result = run_cli("compat", "--nvidia-smi", str(path), "--torch", "2.1.2", "--cuda", "cu118", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["gpu"] == ["rtx4090", "rtx3090"]
    assert [(v["gpu"], v["gpu_indices"], v["arch"]["kind"]) for v in data["verdicts"]] == [
        ("rtx4090", [0, 1], "binary-compatible"),
        ("rtx3090", [2], "native"),
    ]
    human = run_cli("compat", "--nvidia-smi", str(path), "--torch", "2.1.2", "--cuda", "cu118")
    assert "2 GPU model(s)" in human.stdout
    assert "(GPU 0, 1)" in human.stdout
    assert "(GPU 2)" in human.stdout


def test_r610_file(run_cli: Run) -> None:
    path = NVSMI / "r610_rtx5090_x2.txt"
    ok = run_cli("compat", "--nvidia-smi", str(path), "--torch", "2.7.0", "--cuda", "cu128", "--json")
    assert (ok.exit_code, json.loads(ok.stdout)["driver"]) == (0, "610.43.02")
    old = run_cli("compat", "--nvidia-smi", str(path), "--torch", "2.1.2", "--cuda", "cu121")
    assert old.exit_code == 1
    assert "sm_120 is not compatible with the current PyTorch installation" in old.stdout


def test_help_documents_exit_codes(run_cli: Run) -> None:
    result = run_cli("compat", "--help")
    assert result.exit_code == 0
    text = " ".join(result.stdout.split())
    assert "0 = compatible" in text
    assert "1 = not compatible" in text


def test_cuda_defaults_to_the_torch_suffix_or_pypis_default(run_cli: Run) -> None:
    suffix = run_cli("compat", "--driver", "530.30.02", "--gpu", "a100", "--torch", "2.1.2+cu121", "--json")
    data = json.loads(suffix.stdout)
    assert (suffix.exit_code, data["variant"], data["cuda_from"]) == (0, "cu121", "flag")
    default = run_cli("compat", "--driver", "580.65.06", "--gpu", "h200", "--torch", "2.11.0")
    assert default.exit_code == 0
    assert "using cu130, the variant `pip install torch==2.11.0` gets from PyPI" in default.stdout
    as_json = run_cli("compat", "--driver", "580.65.06", "--gpu", "h200", "--torch", "2.11.0", "--json")
    assert (json.loads(as_json.stdout)["variant"], json.loads(as_json.stdout)["cuda_from"]) == (
        "cu130",
        "pypi-default",
    )


@pytest.mark.parametrize(
    ("torch", "cuda", "message"),
    [
        ("2.1.2+cu121", "11.8", "name different CUDA variants"),
        ("2.1.2+rocm6.0", None, "'rocm6.0' is not a CUDA variant"),
        ("2.1.2+cu12x", None, "is not a CUDA version"),
    ],
)
def test_torch_suffix_errors(run_cli: Run, torch: str, cuda: str | None, message: str) -> None:
    args = ["compat", "--driver", "580.65.06", "--gpu", "h200", "--torch", torch]
    if cuda:
        args += ["--cuda", cuda]
    result = run_cli(*args)
    assert result.exit_code == 2
    assert message in result.stderr
    _no_traceback(result)


def test_truncated_wide_name_file_resolves_and_judges(run_cli: Run) -> None:
    path = NVSMI / "r580_rtx_pro_6000_truncated.txt"
    result = run_cli("compat", "--nvidia-smi", str(path), "--torch", "2.7.1", "--cuda", "cu126", "--json")
    data = json.loads(result.stdout)
    assert (result.exit_code, data["gpu"], data["mode"]) == (1, "rtx-pro-6000-server", "none")
    assert "sm_120 is not compatible" in data["blockers"][0]
    ok = run_cli("compat", "--nvidia-smi", str(path), "--torch", "2.7.1", "--cuda", "cu128")
    assert ok.exit_code == 0


def test_every_gpu_flag_is_judged(run_cli: Callable[..., Any]) -> None:
    """Issue 12, item 5: `compat --gpu a100 --gpu h100` judged only the last GPU."""
    args = ["compat", "--driver", "535.104.05", "--torch", "2.1.2", "--cuda", "12.1", "--json"]
    out = run_cli(*args, "--gpu", "a100", "--gpu", "rtx5090")
    assert out.exit_code == 1  # the RTX 5090 cannot run cu121 kernels: the whole answer is "no"
    data = json.loads(out.stdout)
    assert [v["gpu"] for v in data["verdicts"]] == ["a100-80gb-sxm4", "rtx5090"]
    assert data["compatible"] is False
    same = json.loads(run_cli(*args, "--gpu", "a100", "--gpu", "A100-SXM4-80GB").stdout)
    assert same["gpu"] == "a100-80gb-sxm4"  # one model named twice: one verdict


# ------------------------------------------------------------------------------------ issue 13: warnings


def test_eol_branch_warns_in_text_and_json_and_keeps_exit_0(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-11-30")
    args = ["compat", "--driver", "535.104.05", "--gpu", "a100", "--torch", "2.1.2", "--cuda", "12.1"]
    text = run_cli(*args)
    assert text.exit_code == 0
    eol = "warning: driver 535.104.05 is on branch R535, a long-term support branch that reached end of life"
    assert f"{eol} in June 2026" in text.stdout
    data = json.loads(run_cli(*args, "--json").stdout)
    assert data["mode"] == "full"
    assert len(data["warnings"]) == 1
    assert "R620 (long-term support branch, supported to September 2029)" in data["warnings"][0]
    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-06-15")
    assert json.loads(run_cli(*args, "--json").stdout)["warnings"] == []


def test_v100_cu130_says_no_sm70_and_the_cuda_cap(run_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-11-30")
    args = ["compat", "--driver", "580.159.04", "--gpu", "v100", "--torch", "2.11.0", "--cuda", "cu130"]
    result = run_cli(*args)
    assert result.exit_code == 1
    assert "cu130 wheels of torch 2.11.0 carry no sm_70 kernels" in result.stdout
    assert "warning: Tesla V100-SXM2-32GB (Volta, sm_70): R580 is NVIDIA's last driver branch for Volta" in (
        result.stdout
    )
    data = json.loads(run_cli(*args, "--json").stdout)
    assert data["warnings"] == [
        "Tesla V100-SXM2-32GB (Volta, sm_70): R580 is NVIDIA's last driver branch for Volta GPUs and CUDA "
        "12.x their last CUDA toolkit: no newer driver or CUDA toolkit will run on it"
    ]
    cu126 = run_cli(
        "compat", "--driver", "580.159.04", "--gpu", "v100", "--torch", "2.14.0", "--cuda", "cu126"
    )
    assert cu126.exit_code == 0  # a warning never changes the exit status


def test_several_models_share_one_warning_list(run_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-11-30")
    result = run_cli(
        "compat", "--driver", "570.172.08", "--gpu", "h100-sxm", "--gpu", "a100", "--torch", "2.9.0", "--json"
    )
    data = json.loads(result.stdout)
    assert len(data["verdicts"]) == 2
    assert len(data["warnings"]) == 1
    assert data["warnings"][0].startswith("driver 570.172.08 is on branch R570")


def test_b200_on_570_124_06_needs_570_133_20(run_cli: Run) -> None:
    result = run_cli(
        "compat", "--driver", "570.124.06", "--gpu", "b200", "--torch", "2.9.0", "--cuda", "cu128", "--json"
    )
    assert result.exit_code == 1
    data = json.loads(result.stdout)
    assert data["needs_driver"] == "570.133.20"


# -- issue 12, item 12: exit codes as documented -------------------------------------------------------------


@pytest.mark.parametrize(
    ("cuda", "message"),
    [
        ("99.9", "--cuda 99.9: CUDA 99.9 is not a CUDA toolkit release imagesmith knows"),
        ("cu999", "--cuda cu999: CUDA 99.9 is not a CUDA toolkit release imagesmith knows"),
        ("12.4.9", "--cuda 12.4.9: CUDA 12.4.9 is not a CUDA toolkit release imagesmith knows"),
    ],
)
def test_unknown_cuda_is_bad_input_not_a_verdict(run_cli: Run, cuda: str, message: str) -> None:
    # was exit 1 ("never published for cu999") for 99.9 and exit 0 for 12.4.9, read as 12.4
    result = run_cli("compat", "--driver", "550.54.14", "--gpu", "a100", "--torch", "2.5.1", "--cuda", cuda)
    assert result.exit_code == 2, result.stdout
    first, fix = result.stderr.strip().splitlines()
    assert first.startswith(f"error: {message}")
    assert fix.startswith("  fix: known: ")
    _no_traceback(result)
    ok = run_cli("compat", "--driver", "550.54.14", "--gpu", "a100", "--torch", "2.5.1", "--cuda", "12.4.1")
    assert ok.exit_code == 0, ok.stderr  # an update that exists is the 12.4 wheel's CUDA


def test_unreadable_nvidia_smi_file_exit_code_is_the_documented_one(run_cli: Run) -> None:
    result = run_cli("compat", "--nvidia-smi", str(NVSMI), "--torch", "2.11.0", "--cuda", "13.0")
    assert result.exit_code == 2
    assert "  fix: give the file the output was saved to" in result.stderr
    help_text = " ".join(run_cli("compat", "--help").stdout.split())
    assert "an --nvidia-smi FILE that cannot be read)" in help_text
    doc = " ".join((REPO / "docs" / "compat.md").read_text().split())
    assert "2 bad input (also an `--nvidia-smi` file that cannot be read" in doc
    assert "7 the file is not nvidia-smi output" in doc


# -- issue 12, item 16: MIG is said, in text and JSON ------------------------------------------------------


@pytest.mark.parametrize(
    ("smi", "extra", "where"),
    [
        ("r570_a100_mig_enabled.txt", [], "MIG is enabled on GPU 0 (NVIDIA A100-SXM4-80GB): "),
        (
            "list_a100_mig.txt",
            ["--driver", "570.124.06"],
            "MIG is enabled on GPU 0 (NVIDIA A100-SXM4-80GB), 2 MIG slice(s): 3g.40gb, 3g.40gb: ",
        ),
    ],
)
def test_mig_enabled_host_is_warned_in_text_and_json(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch, smi: str, extra: list[str], where: str
) -> None:
    monkeypatch.setenv("IMAGESMITH_TODAY", "2026-01-01")
    args = ["compat", "--nvidia-smi", str(NVSMI / smi), *extra, "--torch", "2.5.1", "--cuda", "12.4"]
    text = run_cli(*args)
    assert text.exit_code == 0, text.stderr  # still compatible: a warning, not a verdict
    line = next(ln for ln in text.stdout.splitlines() if ln.startswith("warning: MIG"))
    assert line.startswith("warning: " + where)
    assert "no NVLink/P2P" in line
    assert "fraction of the GPU's memory" in line
    assert "test_mig" in line
    assert "disable MIG (nvidia-smi -i N -mig 0, then a GPU reset)" in line
    out = json.loads(run_cli(*args, "--json").stdout)
    assert out["warnings"][0].startswith(where)
    plain = run_cli(
        "compat", "--nvidia-smi", str(NVSMI / "real_580.159.04_h200_default.txt"), "--torch", "2.11.0"
    )
    assert "MIG" not in plain.stdout
