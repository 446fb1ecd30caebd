#!/usr/bin/env python3
"""A competing load on one GPU, for the degraded-host evidence (scripts/gpu_host_faults.sh,
scripts/h200_soak.sh):

    python3 scripts/gpu_load.py matmul|copy|hold GPU [SECONDS] [--duty F] [--delay S] [--period S] [--gib N]
                                                   [--hold-gib N]

``matmul`` keeps the GPU's tensor cores busy (bf16 8192³), ``copy`` its memory (1 GiB copies); another
process on the same GPU then gets about half of either, as on a rental whose GPU is shared or has a stray
job. ``--duty 0.3`` loads only 30 % of every ``--period`` (1 s): a co-tenant's bursts. ``--delay 120`` starts
the load two minutes late (a neighbour who arrives after the first minute). ``hold`` allocates ``--gib`` GiB
of the GPU's memory and idles: a neighbour who holds memory. ``--hold-gib 4.5`` makes a matmul or copy load
also hold that much memory (a co-tenant above ``--foreign-memory-max`` that also costs throughput).
Runs until killed or for SECONDS (after the delay).
"""

from __future__ import annotations

import argparse
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=("matmul", "copy", "hold"))
    p.add_argument("index", type=int)
    p.add_argument("seconds", type=float, nargs="?", default=float("inf"))
    p.add_argument("--duty", type=float, default=1.0)
    p.add_argument("--delay", type=float, default=0.0)
    p.add_argument("--period", type=float, default=1.0)
    p.add_argument("--gib", type=float, default=100.0)
    p.add_argument("--hold-gib", type=float, default=0.0)
    args = p.parse_args()
    time.sleep(args.delay)  # before CUDA starts: nothing of this process is on the GPU until then
    dev = torch.device("cuda", args.index)
    if args.mode == "hold":
        held = torch.empty(int(args.gib * (1 << 30)), dtype=torch.uint8, device=dev)
        held.fill_(1)
        torch.cuda.synchronize(dev)
        print(f"holding {args.gib:g} GiB on cuda:{args.index}", flush=True)
        time.sleep(args.seconds if args.seconds != float("inf") else 1e9)
        return
    extra = (
        torch.ones(int(args.hold_gib * (1 << 30)), dtype=torch.uint8, device=dev) if args.hold_gib else None
    )
    if args.mode == "matmul":
        a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
        out = torch.empty_like(a)

        def step() -> None:
            torch.matmul(a, a, out=out)

    else:
        src = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)

        def step() -> None:
            dst.copy_(src)

    print(
        f"load {args.mode} on cuda:{args.index}, duty {args.duty:g}, from now ({time.time():.1f})"
        + (f", holding {extra.numel() / (1 << 30):g} GiB more" if extra is not None else ""),
        flush=True,
    )
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        start = time.monotonic()
        busy_until = start + args.duty * args.period
        while time.monotonic() < busy_until:
            for _ in range(5 if args.duty < 1 else 50):
                step()
            torch.cuda.synchronize(dev)
        rest = start + args.period - time.monotonic()
        if args.duty < 1 and rest > 0:
            time.sleep(rest)


if __name__ == "__main__":
    main()
