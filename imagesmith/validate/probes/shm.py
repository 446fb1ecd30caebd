# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""A multi-worker DataLoader whose batches (68 MiB each) cannot fit in Docker's default 64 MB /dev/shm.

Two workers, one batch prefetched each, every batch freed before the next: at most about three batches
(~204 MiB) live in /dev/shm at once, so 256 MiB is enough, and 64 MB never is. With 64 MB the workers die:
"unable to allocate shared memory(shm) for file </torch_…>" (torch 2.11, seen on the H200 host) or
"Bus error" (older torch).
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
            return torch.full((17, 1024, 1024), i % 251, dtype=torch.uint8)  # 17 MiB, x4 per batch = 68 MiB

    n = 0
    for batch in DataLoader(Big(), batch_size=4, num_workers=2, prefetch_factor=1):
        assert int(batch[0, 0, 0, 0]) == (n * 4) % 251
        n += 1
        del batch
    out["batches"] = n
    out["ok"] = n == 4
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
sys.exit(0 if out.get("ok") else 1)
