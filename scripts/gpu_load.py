#!/usr/bin/env python3
"""A competing load on one GPU, for the degraded-host evidence (scripts/gpu_host_faults.sh):

    python3 scripts/gpu_load.py matmul|copy GPU_INDEX [SECONDS]

``matmul`` keeps the GPU's tensor cores busy (bf16 8192³), ``copy`` its memory (1 GiB copies); another
process on the same GPU then gets about half of either, as on a rental whose GPU is shared or has a stray
job.
Runs until killed or for SECONDS.
"""

from __future__ import annotations

import sys
import time

import torch


def main() -> None:
    mode, index = sys.argv[1], int(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else float("inf")
    dev = torch.device("cuda", index)
    if mode == "matmul":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        out = torch.empty_like(a)

        def step() -> None:
            torch.matmul(a, a, out=out)

    elif mode == "copy":
        src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)

        def step() -> None:
            dst.copy_(src)

    else:
        raise SystemExit(f"mode {mode!r}: use matmul or copy")
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(50):
            step()
        torch.cuda.synchronize(dev)


if __name__ == "__main__":
    main()
