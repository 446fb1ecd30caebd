"""DDP smoke test via torchrun on all GPUs: all_reduce sum right, identical gradients on every rank, loss
falls.
"""

from __future__ import annotations

import shlex

from imagesmith.validate.context import CheckRecord, Context, fail, parse_probe_lines
from imagesmith.validate.criteria import Gpu


def test_ddp_smoke(ctx: Context, check: CheckRecord, multi_gpus: list[Gpu]) -> None:
    n = len(multi_gpus)
    script = ctx.put_probe("ddp")
    # A static rendezvous on 127.0.0.1 and a free port: `--standalone` advertises the hostname, which does not
    # resolve in a container without a network (seen in the image-level run on the H200 host: a hang).
    py = shlex.quote(ctx.options.python)
    free_port = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"
    cmd = (
        f"{py} -m torch.distributed.run --nnodes=1 --node_rank=0 --nproc_per_node={n} "
        f"--master_addr=127.0.0.1 --master_port=$({py} -c {shlex.quote(free_port)}) {shlex.quote(script)}"
    )
    r = ctx.run(cmd, timeout=180, env={"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "1"})
    ctx.save_log("ddp.log", f"$ {cmd}\n{r.output}")
    if r.rc != 0 and ("name resolution" in r.output or "Name or service not known" in r.output):
        fail(
            "torchrun could not rendezvous: a hostname does not resolve on this target",
            "give the container a resolvable hostname (/etc/hosts) or a network; see ddp.log",
        )
    if r.timed_out:
        fail(
            "torchrun DDP hung for 180 s",
            "rerun with NCCL_DEBUG=INFO; a hang at init means the ranks cannot reach each other",
        )
    ranks = parse_probe_lines(r.stdout)
    check.figures["ranks"] = ranks
    errors = [f"rank {x.get('rank', '?')}: {x['error']}" for x in ranks if "error" in x]
    if errors or len(ranks) != n:
        fail(
            f"DDP on {n} GPUs failed (exit {r.rc}, {len(ranks)} of {n} ranks reported): "
            + ("; ".join(errors) if errors else r.output.strip()[-400:]),
            "see ddp.log; NCCL errors at init usually mean /dev/shm is too small or P2P is broken",
        )
    problems = []
    for x in ranks:
        if not x.get("allreduce_ok"):
            problems.append(
                f"rank {x['rank']}: all_reduce gave {x.get('allreduce_value')}, expected "
                f"{x.get('allreduce_expected')}"
            )
        if x.get("grad_max_abs_diff", 1.0) > 1e-6:
            problems.append(
                f"rank {x['rank']}: gradients differ between ranks by {x['grad_max_abs_diff']:.3g}"
            )
        if not x.get("loss_last", 1e9) < 0.97 * x.get("loss_first", 0.0):
            problems.append(
                f"rank {x['rank']}: loss did not fall ({x.get('loss_first')} → {x.get('loss_last')})"
            )
    if problems:
        fail(
            "; ".join(problems),
            "distributed training is broken on this host: rerun with NCCL_DEBUG=INFO and report it",
        )
