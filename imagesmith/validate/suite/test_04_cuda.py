"""CUDA really works: torch sees every GPU, a kernel matches the CPU, cuDNN convolves, bf16/tf32 matmuls are
right.
"""

from __future__ import annotations

from typing import Any

import pytest

from imagesmith.validate.context import CheckRecord, Context, fail, skip_no_gpu
from imagesmith.validate.criteria import Gpu, explain_cuda_init_error, visible_count
from imagesmith.validate.facts import GpuFacts

# ‖gpu − cpu_fp64‖ / ‖cpu_fp64‖ limits. fp32 element-wise is exact IEEE (limit: rounding of the fp64
# reference);
# fp32 GEMM of 1024² lands near 1e-7; tf32 near 3e-4; bf16 operands 1e-3…1e-2.
LIMITS = {
    "kernel_rel_err": 1e-6,
    "fp32_matmul_rel_err": 1e-5,
    "cudnn_conv_rel_err": 1e-5,
    "tf32_matmul_rel_err": 5e-3,
    "bf16_matmul_rel_err": 2e-2,
}


@pytest.fixture(scope="module")
def cuda(ctx: Context, gpu_facts: GpuFacts) -> dict[str, Any]:
    if not gpu_facts.visible:
        skip_no_gpu(gpu_facts.reason)
    return ctx.probe_one("cuda", timeout=300)


def _init_error(cuda: dict[str, Any], gpu_facts: GpuFacts) -> None:
    err = cuda.get("error")
    if err:
        g = gpu_facts.gpus[0] if gpu_facts.gpus else None
        fail(
            "CUDA does not work from torch: "
            + explain_cuda_init_error(
                err,
                driver=g.driver if g else None,
                driver_cuda=gpu_facts.driver_cuda,
                torch_cuda=cuda.get("torch_cuda"),
            ),
            "use an image whose CUDA is not newer than the driver's 'CUDA Version' (imagesmith pick "
            "chooses one), "
            "or ask the provider for a newer driver",
        )


def test_torch_sees_all_gpus(
    ctx: Context, check: CheckRecord, gpus: list[Gpu], gpu_facts: GpuFacts, cuda: dict[str, Any]
) -> None:
    _init_error(cuda, gpu_facts)
    cvd = cuda.get("cuda_visible_devices")
    expected = visible_count(cvd, gpus)
    check.figures.update(torch_count=cuda.get("count"), nvidia_smi_count=len(gpus), cuda_visible_devices=cvd)
    if not cuda.get("available") or cuda.get("count") != expected:
        fail(
            f"torch sees {cuda.get('count')} GPUs (is_available={cuda.get('available')}), nvidia-smi shows "
            f"{len(gpus)}"
            + (f" and CUDA_VISIBLE_DEVICES={cvd!r} selects {expected}" if cvd is not None else ""),
            "unset or correct CUDA_VISIBLE_DEVICES; in a container, pass every /dev/nvidiaN device "
            "(--gpus all)",
        )
    want = ctx.options.expect_count
    seen = cuda.get("count") or 0
    if cvd is not None and (seen < len(gpus) or (want is not None and seen < want)):
        # the host is validated as a whole: the multi-GPU checks (all_reduce_perf -g N, DDP on N ranks)
        # use every GPU nvidia-smi lists, which CUDA cannot reach through this CUDA_VISIBLE_DEVICES
        of = f"the {want} GPUs expected (--expect-count)" if want is not None else f"the {len(gpus)} GPUs"
        fail(
            f"torch sees {seen} of {of if want is not None else of + ' nvidia-smi shows'}: "
            f"CUDA_VISIBLE_DEVICES={cvd!r} hides the others "
            "from every CUDA program",
            "unset CUDA_VISIBLE_DEVICES (or list every GPU in it) where the machine or container sets it; "
            "to validate some GPUs of a host, give a container only those (docker run --gpus "
            "'\"device=0,1\"' …) and validate it as docker://NAME",
        )
    missing_arch = [d for d in cuda.get("devices", []) if d.get("arch_in_wheel") is False]
    if missing_arch:
        fail(
            "this torch has no kernels for sm_" + missing_arch[0].get("capability", "?").replace(".", ""),
            "use a torch build whose arch list includes this GPU (imagesmith's matrix for this GPU does)",
        )


def _per_device(cuda: dict[str, Any], gpu_facts: GpuFacts, keys: tuple[str, ...]) -> dict[str, Any]:
    _init_error(cuda, gpu_facts)
    figures: dict[str, Any] = {}
    bad = []
    for d in cuda.get("devices", []):
        if "error" in d:
            bad.append(f"cuda:{d['index']}: {d['error']}")
            continue
        for k in keys:
            if k not in d:
                continue
            figures[f"cuda:{d['index']}.{k}"] = d[k]
            if not d[k] <= LIMITS[k]:
                bad.append(
                    f"cuda:{d['index']} {k.replace('_rel_err', '')} relative error {d[k]:.3g} > {LIMITS[k]:g}"
                )
    if bad:
        fail(
            "wrong results on the GPU: " + "; ".join(bad),
            "a GPU that computes wrong numbers must not be used: ask the provider to replace it (run "
            "dcgmi diag -r 2)",
        )
    return figures


def test_cuda_kernel(check: CheckRecord, gpus: list[Gpu], gpu_facts: GpuFacts, cuda: dict[str, Any]) -> None:
    check.figures.update(_per_device(cuda, gpu_facts, ("kernel_rel_err", "fp32_matmul_rel_err")))


def test_cudnn_conv(check: CheckRecord, gpus: list[Gpu], gpu_facts: GpuFacts, cuda: dict[str, Any]) -> None:
    devices = cuda.get("devices", [])
    if devices and not all(d.get("cudnn_available", False) for d in devices if "error" not in d):
        fail(
            "cuDNN is not available to torch", "install the cuDNN that this torch build pins (nvidia-cudnn-*)"
        )
    check.figures.update(_per_device(cuda, gpu_facts, ("cudnn_conv_rel_err",)))


def test_bf16_tf32_matmul(
    check: CheckRecord, gpus: list[Gpu], gpu_facts: GpuFacts, cuda: dict[str, Any]
) -> None:
    _init_error(cuda, gpu_facts)
    devices = [d for d in cuda.get("devices", []) if "error" not in d]
    if devices and not any("bf16_matmul_rel_err" in d for d in devices):
        pytest.skip(f"sm_{devices[0].get('capability', '?').replace('.', '')} has no bf16/tf32 tensor cores")
    check.figures.update(_per_device(cuda, gpu_facts, ("bf16_matmul_rel_err", "tf32_matmul_rel_err")))
