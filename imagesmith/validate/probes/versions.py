# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""Record the software stack: Python, torch, CUDA runtime, cuDNN, NCCL (and the libnccl torch loaded)."""

import ctypes
import json
import platform
import sys

out = {"python": sys.version.split()[0], "python_executable": sys.executable, "platform": platform.platform()}
try:
    import numpy

    out["numpy"] = numpy.__version__
except Exception as exc:
    out["numpy_error"] = f"{type(exc).__name__}: {exc}"
try:
    import torch

    out["torch"] = torch.__version__
    out["torch_cuda"] = torch.version.cuda
    out["torch_file"] = torch.__file__
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception as exc:
        out["cudnn_error"] = f"{type(exc).__name__}: {exc}"
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(str(x) for x in v) if isinstance(v, tuple) else str(v)
        out["nccl_code"] = v[0] * 10000 + v[1] * 100 + v[2] if isinstance(v, tuple) else int(v)
    except Exception as exc:
        out["nccl_error"] = f"{type(exc).__name__}: {exc}"
    try:
        out["arch_list"] = torch.cuda.get_arch_list()
    except Exception as exc:
        out["arch_list_error"] = str(exc)
except Exception as exc:
    out["torch_error"] = f"{type(exc).__name__}: {exc}"

libs = {}
try:
    with open("/proc/self/maps") as fh:
        for line in fh:
            parts = line.split()
            if len(parts) >= 6:
                path = parts[5]
                name = path.rsplit("/", 1)[-1]
                for key in ("libnccl.so", "libcudart.so", "libcudnn.so", "libcuda.so"):
                    if name.startswith(key):
                        libs.setdefault(key, path)
except OSError:
    pass
out["loaded_libs"] = libs
if "libcudart.so" in libs:
    try:
        rt = ctypes.CDLL(libs["libcudart.so"])
        ver = ctypes.c_int()
        if rt.cudaRuntimeGetVersion(ctypes.byref(ver)) == 0:
            out["cuda_runtime"] = f"{ver.value // 1000}.{(ver.value % 1000) // 10}"
    except OSError as exc:
        out["cuda_runtime_error"] = str(exc)
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
