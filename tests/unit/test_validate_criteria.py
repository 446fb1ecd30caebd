"""Pass criteria, verdicts, targets and image run plans of the validation suite (pure; no GPU, no engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError
from imagesmith.validate.container import inner_argv, parse_ulimits, plan_image_run
from imagesmith.validate.context import SuiteOptions
from imagesmith.validate.criteria import (
    Gpu,
    explain_cuda_init_error,
    gpu_mismatches,
    reference_power_w,
    spread,
    topology_floor,
    visible_count,
)
from imagesmith.validate.parsers import parse_topo_matrix
from imagesmith.validate.report import (
    CAUSE_LEFT_OUT,
    CAUSE_NO_GPU,
    FAILED,
    NOT_VALIDATED,
    PASSED,
    CheckOutcome,
    outcomes_of,
    verdict_fix,
    verdict_of,
)
from imagesmith.validate.runner import load_baseline
from imagesmith.validate.target import parse_target
from tests.repo import REPO

H200_TOPO = REPO / "tests" / "data" / "validate" / "h200x2" / "topo-m.txt"


def gpu(name: str, mib: int, index: int = 0, **kw: Any) -> Gpu:
    return Gpu(
        index=index,
        name=name,
        uuid=f"GPU-{index:08x}-aaaa",
        bus_id="0",
        driver="580.159.04",
        memory_mib=mib,
        **kw,
    )


def test_expected_gpu_model_memory_form() -> None:
    h200 = gpu("NVIDIA H200", 143771)
    assert gpu_mismatches("H200", h200) == []
    assert gpu_mismatches("H200 141GB SXM", h200) == []
    a100_40 = gpu("NVIDIA A100-SXM4-40GB", 40960)
    assert gpu_mismatches("A100 80GB", a100_40) == ["40.0 GiB (42.9 GB) of memory, expected 80GB"]
    pcie = gpu("NVIDIA A100-PCIE-80GB", 81920)
    assert gpu_mismatches("A100 80GB", pcie) == []
    assert gpu_mismatches("A100 80GB SXM", pcie) == ["a PCIe card ('NVIDIA A100-PCIE-80GB'), expected SXM"]
    assert gpu_mismatches("H100", h200) == ["model 'NVIDIA H200' does not contain 'H100'"]
    assert gpu_mismatches("RTX 4090", gpu("NVIDIA GeForce RTX 4090", 24564)) == []


def test_cuda_visible_devices_counting() -> None:
    gpus = [gpu("NVIDIA H200", 143771, i) for i in range(4)]
    assert visible_count(None, gpus) == 4
    assert visible_count("0,2", gpus) == 2
    assert visible_count("", gpus) == 0
    assert visible_count("1,7,2", gpus) == 1  # CUDA stops at the first invalid entry
    assert visible_count("GPU-00000003", gpus) == 1
    assert visible_count("0,0", gpus) == 1


def test_floors_from_topology() -> None:
    f = topology_floor(parse_topo_matrix(H200_TOPO.read_text()))
    assert f.gbps == 90.0
    assert "NV18" in f.basis
    pcie = parse_topo_matrix("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tSYS\t0-7\nGPU1\tSYS\t X \t0-7\n")
    assert topology_floor(pcie).gbps == 3.0
    mixed = parse_topo_matrix(
        "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV4\tPHB\nGPU1\tNV4\t X \tPHB\nGPU2\tPHB\tPHB\t X \n"
    )
    assert topology_floor(mixed).gbps == 5.0  # one PCIe pair: the PCIe floor, not NVLink's


def test_spread_and_power() -> None:
    assert spread([329.38, 328.6, 328.35]) == pytest.approx((329.38 - 328.35) / 329.38)
    assert spread([1.0]) == 0.0
    assert reference_power_w(gpu("NVIDIA H200", 1, power_default_w=700.0)) == (
        700.0,
        "nvidia-smi power.default_limit",
    )
    # the TDP comes from imagesmith/data/gpus.toml (the table used to be copied here, with 300 W for the 40 GB
    # PCIe board, which is the 80 GB board's figure)
    assert reference_power_w(gpu("NVIDIA A100-PCIE-40GB", 1)) == (
        250.0,
        "TDP of a100-40gb-pcie (imagesmith/data/gpus.toml)",
    )
    assert reference_power_w(gpu("NVIDIA A100 80GB PCIe", 1))[0] == 300.0
    assert reference_power_w(gpu("NVIDIA H200", 1))[0] == 700.0
    assert reference_power_w(gpu("Some Future GPU", 1)) == (None, "unknown")


def test_too_old_driver_gets_the_compat_explanation() -> None:
    msg = explain_cuda_init_error(
        "RuntimeError: The NVIDIA driver on your system is too old (found version 12020).",
        driver="535.104.05",
        driver_cuda="12.2",
        torch_cuda="13.0",
    )
    assert "driver 535.104.05 supports CUDA up to 12.2" in msg
    assert "CUDA 13.0 needs driver ≥ 580" in msg
    assert "found version 12020" in msg


def _c(name: str, status: str, message: str = "", skip: str = "") -> CheckOutcome:
    return CheckOutcome(name=name, module="m", status=status, message=message, skip=skip)


def test_verdicts() -> None:
    ok = [_c("a", "passed"), _c("b", "passed")]
    assert verdict_of(ok, all_checks=["a", "b"])[0] == PASSED
    assert verdict_of([*ok, _c("c", "failed")])[0] == FAILED
    no_gpu = [
        _c("a", "passed"),
        _c("g", "skipped", "no GPU visible: nvidia-smi is not on the target's PATH", "no-gpu"),
    ]
    v, why, cause = verdict_of(no_gpu, all_checks=["a", "g"])
    assert (v, cause) == (NOT_VALIDATED, CAUSE_NO_GPU)
    assert "no GPU visible" in why
    assert "where the GPUs are" in verdict_fix(v, cause)
    # the verdict reads the skip's field, not its words: other words, same verdict; the words alone, no effect
    reworded = [_c("a", "passed"), _c("g", "skipped", "nvidia-smi: command not found", "no-gpu")]
    assert verdict_of(reworded, all_checks=["a", "g"]).cause == CAUSE_NO_GPU
    words_only = [_c("a", "passed"), _c("g", "skipped", "no GPU visible (a check's own words)")]
    assert verdict_of(words_only, all_checks=["a", "g"]).verdict == PASSED
    assert verdict_of([_c("g", "failed"), *no_gpu])[0] == FAILED
    left = verdict_of(ok, all_checks=["a", "b", "c"])  # -k left a check out
    assert (left.verdict, left.cause) == (NOT_VALIDATED, CAUSE_LEFT_OUT)
    assert verdict_fix(left.verdict, left.cause) == "run it without -k: only a run of every check can pass"
    assert verdict_of([])[0] == NOT_VALIDATED
    assert verdict_of(ok, suite_error="boom")[0] == FAILED
    multi_skip = [_c("a", "passed"), _c("n", "skipped", "needs at least 2 GPUs; this target has 1")]
    v, why, _ = verdict_of(multi_skip, all_checks=["a", "n"])
    assert v == PASSED
    # a pass with skipped checks says which and why, so "passed" on one GPU is not read as a multi-GPU proof
    assert why == "1 check(s) passed; 1 skipped: n (needs at least 2 GPUs; this target has 1)"
    assert verdict_of(ok, all_checks=["a", "b"])[1] == "2 check(s) passed"


def test_old_reports_no_gpu_skips_are_still_not_validated() -> None:
    """Schema 1 and 2 reports have no ``skip`` field: their no-GPU skips are known by the words those
    versions wrote first, so an old attestation that saw no GPU never reads as passed; schema 3 reads the
    field."""
    old = [
        {"name": "a", "module": "m", "status": "passed"},
        {
            "name": "g",
            "module": "m",
            "status": "skipped",
            "message": "no GPU visible: nvidia-smi lists no GPU",
        },
    ]
    assert verdict_of(outcomes_of(old, 2)).verdict == NOT_VALIDATED
    assert verdict_of(outcomes_of(old, 3)).verdict == PASSED  # schema 3: the field, absent here, decides
    new = [old[0], {**old[1], "message": "whatever", "skip": "no-gpu"}]
    assert verdict_of(outcomes_of(new, 3)).verdict == NOT_VALIDATED
    # hostile shapes: a nameless failed check still fails; wrong types are dropped, never raise
    hostile = [
        old[0],
        {"status": "failed"},
        {"name": 3, "status": "passed", "figures": [1], "warnings": "x"},
        "junk",
    ]
    got = outcomes_of(hostile, 3)
    assert [c.status for c in got] == ["passed", "failed", "passed"]
    assert verdict_of(got).verdict == FAILED
    assert (got[2].name, got[2].figures, got[2].warnings) == ("", {}, [])


def test_targets() -> None:
    assert parse_target("local://").kind == "local"
    assert parse_target("docker://abc123").spec == "docker://abc123"
    t = parse_target("ssh://root@10.0.0.5:2222")
    assert (t.kind, t.spec) == ("ssh", "ssh://root@10.0.0.5:2222")
    assert parse_target("127.0.0.1:5000/imagesmith/smoke:2.11.0-cu130").kind == "image"
    for bad in ("ftp://x", "docker://", "ssh://root@:22", "Not An Image!"):
        with pytest.raises(ConfigError):
            parse_target(bad)


def test_image_run_plan_from_labels() -> None:
    cfg = {
        "Config": {
            "Labels": {
                "io.imagesmith.shm-min": "8g",
                "io.imagesmith.shm-min-bytes": str(8 * 1024**3),
                "io.imagesmith.ulimits": "nofile=1024:4096",
            },
            "Env": ["PATH=/opt/venv/bin:/usr/bin:/bin", "LD_LIBRARY_PATH=/opt/venv/nccl/lib"],
        }
    }
    p = plan_image_run(cfg, shm_override=None, shm_min_override=None)
    assert (p.shm_size, p.shm_min_bytes) == ("8g", 8 * 1024**3)
    assert p.ulimits == {"memlock": -1, "stack": 67108864, "nofile": (1024, 4096)}
    assert p.env["PATH"] == "/usr/local/nvidia/bin:/opt/venv/bin:/usr/bin:/bin"
    assert p.env["LD_LIBRARY_PATH"].endswith(":/opt/venv/nccl/lib")
    assert p.env["NCCL_NVLS_ENABLE"] == "0"
    small = plan_image_run(cfg, shm_override="64m", shm_min_override=None)
    assert small.shm_size == "64m"
    assert small.shm_min_bytes == 8 * 1024**3
    bare = plan_image_run({"Config": {}}, shm_override=None, shm_min_override=None)
    assert bare.shm_size == "1g"
    assert "default" in bare.shm_source
    with pytest.raises(ConfigError, match=r"io\.imagesmith\.ulimits"):
        parse_ulimits("memlock", where="image label io.imagesmith.ulimits")


def test_inner_command_carries_the_expectations() -> None:
    opts = SuiteOptions(expect_gpu="H200", expect_count=2, expect_nvlink=True, target_label="img:tag")
    argv = inner_argv(opts, select="shm")
    assert argv[:2] == ["imagesmith-validate", "local://"]
    for flag in ("--expect-gpu", "--expect-count", "--expect-nvlink", "-k", "--report"):
        assert flag in argv


def test_inner_command_carries_baselines_and_only_changed_perf_bands() -> None:
    """An image built by an older imagesmith knows no perf flags: they are passed only when set."""
    plain = inner_argv(SuiteOptions(), select=None)
    assert not any(a.startswith("--perf-") or a.startswith("--baseline") for a in plain)
    opts = SuiteOptions(
        perf_fail_ratio=0.7,
        baseline_figures={"hbm_copy_gbps": 4258.0},
        fleet=[
            {"gpu": "NVIDIA H200", "count": 2, "link": "NV18", "hosts": 3, "figures": {"matmul_tflops": 668}}
        ],
        fleet_source="oci://r/idx",
    )
    argv = inner_argv(opts, select=None)
    assert argv[argv.index("--perf-fail-ratio") + 1] == "0.7"
    assert "--perf-warn-ratio" not in argv
    assert argv[argv.index("--baseline-figure") + 1] == "hbm_copy_gbps=4258"
    assert '"link":"NV18"' in argv[argv.index("--baseline-fleet") + 1]
    assert argv[argv.index("--baseline-source") + 1] == "oci://r/idx"


def test_baseline_file(tmp_path: Path) -> None:
    good = tmp_path / "report.json"
    good.write_text(
        '{"started": "x", "checks": [{"name": "test_nccl_allreduce", "figures": '
        '{"max_size_busbw_mean": 329.0}}]}'
    )
    assert load_baseline(good)[0] == 329.0
    bad = tmp_path / "other.json"
    bad.write_text('{"checks": []}')
    with pytest.raises(ConfigError, match="no nccl all_reduce figures"):
        load_baseline(bad)
    with pytest.raises(ConfigError, match="no such file"):
        load_baseline(tmp_path / "missing.json")


def test_cli_bad_input_is_one_clear_error(run_cli: Any) -> None:
    r = run_cli("validate", "ftp://gpu-box")
    assert r.exit_code == 2
    assert "unknown scheme" in r.stderr
    assert "Traceback" not in r.stderr
    r = run_cli("validate", "local://", "--shm-size", "64m")
    assert r.exit_code == 2
    assert "--shm-size and --gpus apply only when TARGET is an image" in r.stderr
    r = run_cli("validate", "local://", "--shm-min", "lots")
    assert r.exit_code == 2
    assert "'lots' is not a size" in r.stderr


def test_local_run_without_gpu_is_never_passed(run_cli: Any, tmp_path: Path) -> None:
    """This machine has no GPU: the GPU checks skip with 'no GPU visible' and nothing is 'passed'."""
    r = run_cli(
        "validate",
        "local://",
        "-k",
        "gpu_inventory or topology or shm_size",
        "--shm-min",
        "1m",
        "--report",
        str(tmp_path),
    )
    assert r.exit_code == 7
    import json

    rep = json.loads((tmp_path / "report.json").read_text())
    checks = {c["name"]: c for c in rep["checks"]}
    assert checks["test_gpu_inventory"]["status"] == "skipped"
    assert checks["test_gpu_inventory"]["message"].startswith("no GPU visible")
    assert checks["test_shm_size"]["status"] == "passed"
    assert rep["verdict"] == "not validated"


def test_ssh_flags_only_for_ssh_targets(run_cli: Any, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host *\n")
    r = run_cli("validate", "local://", "--ssh-config", str(cfg))
    assert r.exit_code == 2
    assert "apply only to ssh:// targets" in r.stderr
    r = run_cli("validate", "ssh://root@10.0.0.5", "--ssh-identity", str(tmp_path / "missing_key"))
    assert r.exit_code == 2
    assert "missing_key: no such file" in r.stderr
