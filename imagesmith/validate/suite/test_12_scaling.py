"""Scaling efficiency: a fixed small DDP bf16 training step (probes/scaling.py) timed on one GPU and on all N
GPUs of the host; efficiency = throughput on N / (N × throughput on one), judged against what a healthy host
with the same weakest link reaches (perf.toml ``[[scaling]]``, or a --baseline / --baseline-from figure).
Skipped with its reason on one GPU."""

from __future__ import annotations

import math
import shlex
from typing import Any

from imagesmith.validate.context import CheckRecord, Context, fail, parse_probe_lines
from imagesmith.validate.criteria import Gpu
from imagesmith.validate.expected import Bands, judge, options_expected, scaling_expected

STEPS, WARMUP = 20, 5
#: weak scaling cannot beat N × one GPU; above this (noise allowed) the one-GPU timing was off
SUPERLINEAR = 1.05
FREE_PORT = "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])"


def _run(ctx: Context, script: str, n: int) -> tuple[list[dict[str, Any]], str]:
    py = shlex.quote(ctx.options.python)
    cmd = (
        f"{py} -m torch.distributed.run --nnodes=1 --node_rank=0 --nproc_per_node={n} "
        f"--master_addr=127.0.0.1 --master_port=$({py} -c {shlex.quote(FREE_PORT)}) {shlex.quote(script)} "
        f"{STEPS} {WARMUP}"
    )
    r = ctx.run(cmd, timeout=300, env={"NCCL_DEBUG": "WARN", "OMP_NUM_THREADS": "1"})
    log = f"$ {cmd}\n{r.output}\n"
    ranks = parse_probe_lines(r.stdout)
    errors = [f"rank {x.get('rank', '?')}: {x['error']}" for x in ranks if "error" in x]
    said = sorted((x.get("rank"), x.get("world")) for x in ranks if "error" not in x)
    if not errors and len(ranks) == n and said != [(i, n) for i in range(n)]:
        # one record per rank 0..n-1 of a world of n: a rank counted twice or from another world is not a
        # timing of this step on n GPUs
        ctx.save_log("scaling.log", log)
        fail(
            f"the DDP step on {n} GPU(s): the ranks reported (rank, world) "
            f"{', '.join(f'({a}, {b})' for a, b in said)}, not ranks 0–{n - 1} of {n}",
            "see scaling.log: torchrun did not start the ranks it was asked for (a wrapper or an old torch)",
        )
    if r.timed_out or errors or len(ranks) != n:
        ctx.save_log("scaling.log", log)
        fail(
            f"the DDP step on {n} GPU(s) failed (exit {r.rc}, {len(ranks)} of {n} ranks reported"
            + (", hung for 300 s" if r.timed_out else "")
            + "): "
            + ("; ".join(errors) if errors else r.output.strip()[-400:]),
            "see scaling.log; test_ddp_smoke says whether DDP works on this host at all",
        )
    return ranks, log


def _throughput(ranks: list[dict[str, Any]]) -> float:
    """Samples per second of all ranks together: every rank's rows over the slowest rank's time. A rank record
    without a usable timing (missing, not a number, zero, negative, not finite: what a broken or hostile
    target may print) fails the check naming it, never the check itself."""

    def number(x: dict[str, Any], key: str) -> float:
        value = x.get(key)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value <= 0
        ):
            fail(
                f"the DDP step on {len(ranks)} GPU(s): rank {x.get('rank', '?')} reported {key} = {value!r}, "
                "not a positive number",
                "see scaling.log: the probe's output on this host is not what it prints (a broken torch or "
                "a modified probe)",
            )
        return float(value)

    slowest = max(number(x, "elapsed_s") for x in ranks)
    return sum(number(x, "rows") * number(x, "steps") for x in ranks) / slowest


def test_scaling_efficiency(
    ctx: Context, check: CheckRecord, multi_gpus: list[Gpu], host_kind: tuple[str, int, str]
) -> None:
    n = len(multi_gpus)
    script = ctx.put_probe("scaling")
    one, log1 = _run(ctx, script, 1)
    many, log_n = _run(ctx, script, n)
    ctx.save_log("scaling.log", log1 + log_n)
    thr_1, thr_n = _throughput(one), _throughput(many)
    efficiency = thr_n / (n * thr_1)
    link = host_kind[2]
    superlinear = efficiency > SUPERLINEAR
    expected = options_expected(ctx.options, "scaling_efficiency", scaling_expected(link), host_kind)
    j = judge(
        "scaling_efficiency",
        f"{n}× {host_kind[0]} over {link or '?'}",
        efficiency,
        expected,
        Bands(fail_ratio=ctx.options.perf_fail_ratio, warn_ratio=ctx.options.perf_warn_ratio),
    )
    check.figures.update(
        gpus=n,
        link=link,
        step=f"8 × Linear(4096, 4096) + GELU, {one[0].get('rows')} rows per GPU, "
        f"{one[0].get('dtype')} autocast, "
        f"{one[0].get('grad_bytes', 0) / 1e6:.0f} MB of fp32 gradients",
        samples_per_s_1gpu=round(thr_1, 1),
        samples_per_s_all=round(thr_n, 1),
        step_ms_1gpu=round(float(one[0]["step_ms"]), 2),
        step_ms_all=round(max(float(x["step_ms"]) for x in many), 2),
        efficiency=round(efficiency, 4),
        judgement=j.to_json(),
        # a figure above 1 says the one-GPU timing was off: never a host kind's recorded figure (a fleet
        # median learnt from it would expect more than any host gives)
        summary={} if superlinear else {"scaling_efficiency": round(efficiency, 4)},
    )
    if superlinear:
        check.warnings.append(
            f"DDP scaling efficiency {efficiency:.2f} × is above 1: each of the {n} GPUs trained faster "
            f"(step {check.figures['step_ms_all']} ms) than one alone ({check.figures['step_ms_1gpu']} ms) — "
            "the one-GPU timing was slowed (a load on GPU 0 meanwhile, clocks not yet up); the figure says "
            "nothing about the link and is not recorded"
        )
    if j.verdict == "warn":
        check.warnings.append(j.sentence())
    if j.verdict == "fail":
        fail(
            f"{j.sentence()}: {n} GPUs train {thr_n:.0f} samples/s, one alone {thr_1:.0f} "
            f"(step {check.figures['step_ms_all']} ms on {n} vs {check.figures['step_ms_1gpu']} ms on one)",
            "the GPUs do not exchange gradients as fast as their link should: the interconnect is slower "
            "than the topology says (virtual, shared or P2P off — test_nccl_allreduce's busbw tells), or a "
            "GPU is shared; show the report to the provider and ask for another machine",
        )
    if j.verdict == "no-baseline":
        check.figures["no_baseline"] = j.sentence()
