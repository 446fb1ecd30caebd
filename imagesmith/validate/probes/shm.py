# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""A multi-worker DataLoader whose batches (96 MiB each) cannot fit in Docker's default 64 MB /dev/shm.

With enough shared memory it prints ok; with 64 MB the workers die: "unable to allocate shared memory(shm)
for file </torch_…>" (torch 2.11, seen on the H200 host) or "Bus error" (older torch). Workers pass batches
through /dev/shm, so this is the real failure mode, not a model.
"""

import json
import sys

out = {}
try:
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Big(Dataset):
        def __len__(self):
            return 16

        def __getitem__(self, i):
            return torch.full((24, 1024, 1024), i % 251, dtype=torch.uint8)  # 24 MiB, x4 per batch = 96 MiB

    n = 0
    for batch in DataLoader(Big(), batch_size=4, num_workers=2, prefetch_factor=2):
        assert int(batch[0, 0, 0, 0]) == (n * 4) % 251
        n += 1
    out["batches"] = n
    out["ok"] = n == 4
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
sys.exit(0 if out.get("ok") else 1)
