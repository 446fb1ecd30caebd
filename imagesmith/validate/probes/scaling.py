# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""A fixed small DDP training step, timed: ``torchrun --nproc_per_node=N scaling.py [STEPS] [WARMUP]``.

Every rank trains the same model (8 × Linear(4096, 4096) + GELU, fp32 weights, bf16 autocast — fp16 before
sm_80 — SGD) on its own batch of 16384 rows: weak scaling, so N GPUs should do N times the work of one in the
same time. The fp32 gradients (537 MB) are all-reduced by DDP, overlapped with the backward pass: the
interconnect decides how close to N× it gets. Each rank prints one IMAGESMITH_PROBE line with the seconds its
STEPS steps took between two barriers (after WARMUP steps) and the samples per second it trained.
"""

import datetime
import json
import os
import sys
import time

WIDTH = 4096
LAYERS = 8
ROWS = 16384

out = {}
try:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    warmup = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    props = torch.cuda.get_device_properties(local_rank)
    dtype = torch.bfloat16 if props.major >= 8 else torch.float16
    out.update(rank=rank, world=world, name=props.name, dtype=str(dtype).replace("torch.", ""))
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [nn.Linear(WIDTH, WIDTH), nn.GELU()]
    model = DDP(nn.Sequential(*layers).cuda(), device_ids=[local_rank])
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator(device="cuda").manual_seed(1000 + rank)
    x = torch.randn(ROWS, WIDTH, device="cuda", generator=g)
    y = torch.randn(ROWS, WIDTH, device="cuda", generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype):
            loss = nn.functional.mse_loss(model(x).float(), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    torch.cuda.synchronize()
    dist.barrier()
    elapsed = time.perf_counter() - t0
    out.update(
        steps=steps,
        rows=ROWS,
        params=params,
        grad_bytes=4 * params,
        elapsed_s=elapsed,
        samples_per_s=ROWS * steps / elapsed,
        step_ms=1000 * elapsed / steps,
        loss=float(loss.item()),
    )
    dist.destroy_process_group()
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
