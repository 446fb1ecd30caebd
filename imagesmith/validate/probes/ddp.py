# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""DDP smoke test, run as ``torchrun --standalone --nproc_per_node=N ddp.py``.

Checks: an all_reduce sum is exact; after backward, every rank holds identical gradients although each rank
saw
different data; the loss falls over the steps. Every rank prints one IMAGESMITH_PROBE line.
"""

import datetime
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

out = {}
try:
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    out.update(rank=rank, world=world)
    t = torch.full((1 << 22,), float(rank + 1), device="cuda")
    dist.all_reduce(t)
    expected = world * (world + 1) / 2
    out["allreduce_ok"] = bool(torch.all(t == expected).item())
    out["allreduce_value"] = float(t[0].item())
    out["allreduce_expected"] = expected
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)).cuda(), device_ids=[local_rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator(device="cuda").manual_seed(100 + rank)
    x = torch.randn(256, 64, device="cuda", generator=g) * (rank + 1)
    y = torch.randn(256, 1, device="cuda", generator=g)
    losses = []
    max_grad_diff = 0.0
    for step in range(30):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        if step == 0:
            for p in model.parameters():
                gs = [torch.empty_like(p.grad) for _ in range(world)]
                dist.all_gather(gs, p.grad)
                max_grad_diff = max(max_grad_diff, max(float((gs[0] - z).abs().max()) for z in gs))
        opt.step()
        losses.append(float(loss.item()))
    out["grad_max_abs_diff"] = max_grad_diff
    out["loss_first"] = losses[0]
    out["loss_last"] = losses[-1]
    dist.barrier()
    dist.destroy_process_group()
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
