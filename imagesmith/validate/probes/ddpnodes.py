# mypy: ignore-errors
# Standalone probe: runs with the node's Python and torch, never imports imagesmith.
"""The cross-node DDP step of a cluster run (imagesmith.validate.clusterddp), one process per rank under
torchrun's c10d rendezvous, started on every node at once:
``python -m torch.distributed.run --nnodes=N --nproc_per_node=G --rdzv_backend=c10d --rdzv_endpoint=H:P
ddpnodes.py BACKEND STEPS WARMUP WIDTH LAYERS ROWS TIMEOUT``.

Every rank trains the same model (LAYERS × Linear(WIDTH, WIDTH) + GELU, SGD) on its own batch of ROWS rows
(weak scaling: N nodes should do N times the work of one in the same time); DDP all-reduces the gradients
over the backend (nccl on GPUs, with bf16 autocast — fp16 before sm_80 —; gloo on the CPU where a node has no
GPU). After the timed steps a checksum of the weights is reduced (min and max): DDP keeps every replica
identical, so the two agree unless a rank's gradients were lost or wrong. Each rank prints one
IMAGESMITH_PROBE line: its rank, world, hostname, the seconds its STEPS steps took between two barriers,
the rows it trained.
"""

import datetime
import json
import os
import socket
import sys
import time

out = {"host": socket.gethostname()}
try:
    backend = sys.argv[1]
    steps, warmup, width, layers, rows, timeout = (int(a) for a in sys.argv[2:8])
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    local_rank = int(os.environ["LOCAL_RANK"])
    out.update(local_rank=local_rank, backend=backend, torch=torch.__version__)
    cuda = backend == "nccl"
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        props = torch.cuda.get_device_properties(local_rank)
        dtype = torch.bfloat16 if props.major >= 8 else torch.float16
        out.update(device=props.name, dtype=str(dtype).replace("torch.", ""))
    else:
        device = torch.device("cpu")
        dtype = None
        out.update(device="cpu", dtype="float32")
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    out.update(rank=rank, world=world)
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [nn.Linear(width, width), nn.GELU()]
    model = DDP(nn.Sequential(*blocks).to(device), device_ids=[local_rank] if cuda else None)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator(device=device).manual_seed(1000 + rank)
    x = torch.randn(rows, width, device=device, generator=g)
    y = torch.randn(rows, width, device=device, generator=g)

    def step():
        opt.zero_grad(set_to_none=True)
        if cuda:
            with torch.autocast("cuda", dtype=dtype):
                loss = nn.functional.mse_loss(model(x).float(), y)
        else:
            loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    def sync():
        if cuda:
            torch.cuda.synchronize()
        dist.barrier()

    for _ in range(warmup):
        step()
    sync()
    t0 = time.perf_counter()
    for _ in range(steps):
        loss = step()
    sync()
    elapsed = time.perf_counter() - t0
    with torch.no_grad():
        checksum = sum(p.double().sum() for p in model.parameters()).reshape(1)
        lo, hi = checksum.clone(), checksum.clone()
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    out.update(
        steps=steps,
        rows=rows,
        params=params,
        grad_bytes=4 * params,
        elapsed_s=elapsed,
        samples_per_s=rows * steps / elapsed,
        step_ms=1000 * elapsed / steps,
        loss=float(loss.item()),
        replicas_equal=bool(float(lo[0]) == float(hi[0])),
    )
    dist.destroy_process_group()
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
sys.stderr.flush()
# the record is the result: leave without the interpreter's teardown, where a process group's background
# threads (gloo's, NCCL's) can still abort or hang after every collective is done. A rank that failed exits 1:
# torchrun ends the job (and says so)
os._exit(1 if "error" in out else 0)
