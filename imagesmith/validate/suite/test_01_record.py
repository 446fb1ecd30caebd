"""Record the stack the verdict is about: date, kernel, driver, nvidia-smi, CUDA, torch, cuDNN, NCCL, pip."""

from __future__ import annotations

import json
from typing import Any

from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.facts import GpuFacts


def test_record_stack(
    ctx: Context, check: CheckRecord, gpu_facts: GpuFacts, versions: dict[str, Any]
) -> None:
    date = ctx.run("date -u +%Y-%m-%dT%H:%M:%SZ").stdout.strip()
    kernel = ctx.run("uname -r").stdout.strip()
    hostname = ctx.run("hostname").stdout.strip()
    os_release = ctx.run('. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"').stdout.strip()
    smi_version = ctx.run("nvidia-smi --version", timeout=60)
    freeze = ctx.run(f"{ctx.options.python} -m pip freeze --all", timeout=120)
    ctx.save_log("pip-freeze.txt", freeze.output)
    driver = gpu_facts.gpus[0].driver if gpu_facts.gpus else None
    figures = {
        "date": date,
        "hostname": hostname,
        "os": os_release,
        "kernel": kernel,
        "driver": driver,
        "driver_cuda": gpu_facts.driver_cuda,
        "nvidia_smi": smi_version.stdout.strip().splitlines()[0]
        if smi_version.rc == 0 and smi_version.stdout
        else None,
        "python": versions.get("python"),
        "python_executable": versions.get("python_executable"),
        "torch": versions.get("torch"),
        "torch_cuda": versions.get("torch_cuda"),
        "cuda_runtime": versions.get("cuda_runtime"),
        "cudnn": versions.get("cudnn"),
        "nccl": versions.get("nccl"),
        "nccl_library": versions.get("loaded_libs", {}).get("libnccl.so"),
        "numpy": versions.get("numpy"),
        "target": ctx.options.target_label or ctx.options.target,
    }
    check.figures.update(figures)
    lines = [f"{k}: {v}" for k, v in figures.items()]
    lines.append("loaded libraries: " + json.dumps(versions.get("loaded_libs", {})))
    lines.append(f"pip freeze: {len(freeze.stdout.splitlines())} packages (pip-freeze.txt)")
    ctx.save_log("versions.txt", "\n".join(lines) + "\n")
    if "torch_error" in versions:
        fail(
            f"torch cannot be imported with {versions.get('python_executable')}: {versions['torch_error']}",
            "install torch in the image, or pass --python pointing at the interpreter that has it",
        )
    if freeze.rc != 0:
        fail(f"`pip freeze` failed: {freeze.output.strip()[:300]}", "install pip for the target's Python")
