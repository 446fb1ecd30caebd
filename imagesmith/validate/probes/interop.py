# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""numpy <-> torch interop: shared memory both ways, dtypes kept, and a round trip through the GPU when
present.
"""

import json

out = {}
try:
    import numpy as np
    import torch

    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = torch.from_numpy(a)
    a[0, 0] = 42.0
    out["from_numpy_shares_memory"] = bool(t[0, 0].item() == 42.0)
    back = t.numpy()
    back[1, 1] = -1.0
    out["numpy_shares_memory"] = bool(a[1, 1] == -1.0)
    dtypes = {}
    for name in ("float16", "float32", "float64", "int32", "int64", "uint8", "bool"):
        arr = np.ones(4, dtype=getattr(np, name))
        dtypes[name] = str(torch.from_numpy(arr).numpy().dtype) == name
    out["dtypes_round_trip"] = dtypes
    if torch.cuda.is_available():
        r = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
        out["gpu_round_trip_equal"] = bool(np.array_equal(torch.from_numpy(r).cuda().cpu().numpy(), r))
    out["ok"] = True
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
