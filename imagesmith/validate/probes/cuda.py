# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""CUDA really works: every device runs a kernel checked against the CPU, a cuDNN convolution, bf16/tf32
matmuls.
"""

import json
import os
import traceback

out = {"cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


def rel_err(a, ref):
    import torch

    a = a.double().cpu()
    ref = ref.double().cpu()
    if not torch.isfinite(a).all():
        return float("inf")
    return float((a - ref).norm() / ref.norm())


try:
    import torch

    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["available"] = torch.cuda.is_available()
    out["count"] = torch.cuda.device_count()
    if out["count"]:
        torch.cuda.init()
    devices = []
    for i in range(out["count"]):
        d = {"index": i}
        devices.append(d)
        try:
            p = torch.cuda.get_device_properties(i)
            d["name"] = p.name
            d["capability"] = f"{p.major}.{p.minor}"
            d["total_memory"] = p.total_memory
            d["arch_in_wheel"] = f"sm_{p.major}{p.minor}" in torch.cuda.get_arch_list()
            dev = torch.device("cuda", i)
            g = torch.Generator().manual_seed(1234 + i)
            # element-wise kernel: fp32 a*b+c is exact IEEE on both sides
            a = torch.randn(1 << 20, generator=g)
            b = torch.randn(1 << 20, generator=g)
            c = torch.randn(1 << 20, generator=g)
            gpu = torch.full_like(a, float("nan"), device=dev)
            torch.addcmul(c.to(dev), a.to(dev), b.to(dev), out=gpu)
            torch.cuda.synchronize(dev)
            d["kernel_rel_err"] = rel_err(gpu, c.double() + a.double() * b.double())
            # fp32 matmul with TF32 off
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            x = torch.randn(1024, 1024, generator=g)
            y = torch.randn(1024, 1024, generator=g)
            ref = x.double() @ y.double()
            d["fp32_matmul_rel_err"] = rel_err(x.to(dev) @ y.to(dev), ref)
            # cuDNN convolution
            d["cudnn_available"] = torch.backends.cudnn.is_available()
            inp = torch.randn(8, 16, 32, 32, generator=g)
            w = torch.randn(32, 16, 3, 3, generator=g)
            cref = torch.nn.functional.conv2d(inp.double(), w.double(), padding=1)
            with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
                cg = torch.nn.functional.conv2d(inp.to(dev), w.to(dev), padding=1)
            d["cudnn_conv_rel_err"] = rel_err(cg, cref)
            if p.major >= 8:
                d["bf16_matmul_rel_err"] = rel_err(x.to(dev, torch.bfloat16) @ y.to(dev, torch.bfloat16), ref)
                torch.backends.cuda.matmul.allow_tf32 = True
                d["tf32_matmul_rel_err"] = rel_err(x.to(dev) @ y.to(dev), ref)
                torch.backends.cuda.matmul.allow_tf32 = False
            torch.cuda.synchronize(dev)
        except Exception as exc:
            d["error"] = f"{type(exc).__name__}: {exc}"
            d["traceback"] = traceback.format_exc(limit=3)
    out["devices"] = devices
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
