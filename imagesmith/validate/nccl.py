"""nccl-tests rounds against a target: the runner behind the suite's all_reduce check.

Kept out of the test module so that the negative controls (a hung collective, a truncated or corrupted log) go
through exactly this code on a real container with a fake ``all_reduce_perf``.
"""

from __future__ import annotations

import shlex
from typing import Any

from imagesmith.errors import ParseError
from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import spread
from imagesmith.validate.expected import Bands, Expected, judge
from imagesmith.validate.parsers import format_bytes, parse_nccl_log

HANG_FIX = (
    "a collective that never completes means broken P2P/NVLink or a stuck GPU: rerun with NCCL_DEBUG=INFO, "
    "check `nvidia-smi topo -m` and dmesg for Xid errors, and ask the provider"
)
UNHEALTHY_FIX = (
    "NCCL is not healthy on this host: rerun with NCCL_DEBUG=INFO to see the transport (P2P/NVLink "
    "expected; SHM or NET means P2P is off), check `nvidia-smi topo -m`, and show the logs to the provider"
)


def ld_prefix(libdir: str) -> str:
    return f'LD_LIBRARY_PATH={shlex.quote(libdir)}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"'


def allreduce_command(ctx: Context, *, binary: str, n_gpus: int, nccl_libdir: str) -> str:
    o = ctx.options
    return (
        f"{ld_prefix(nccl_libdir)} {shlex.quote(binary)} -b {o.nccl_min_bytes} -e {o.nccl_max_bytes} -f 2 "
        f"-g {n_gpus} -c 1 -n {o.nccl_iters} -w {o.nccl_warmup}"
    )


def run_allreduce_rounds(
    ctx: Context,
    check: CheckRecord,
    *,
    binary: str,
    n_gpus: int,
    nccl_libdir: str,
    floor_gbps: float,
    floor_basis: str,
    torch_nccl_code: int | None,
    expected: Expected | None = None,
    bands: Bands | None = None,
    link: str | None = None,
) -> None:
    """Run ``options.nccl_rounds`` rounds; record figures in *check*; fail (pytest) with what and fix."""
    o = ctx.options
    n = n_gpus
    cmd = allreduce_command(ctx, binary=binary, n_gpus=n, nccl_libdir=nccl_libdir)
    shown = f"NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN LD_LIBRARY_PATH={nccl_libdir} {cmd.split(' ', 1)[1]}"
    check.figures.update(command=shown, floor_gbps=floor_gbps, floor_basis=floor_basis, gpus=n)
    env = {"NCCL_DEBUG": "WARN"}
    rounds: list[dict[str, Any]] = []
    check.figures["rounds"] = rounds
    problems: list[str] = []
    low: list[tuple[int, float]] = []
    for i in range(1, o.nccl_rounds + 1):
        r = ctx.run(cmd, timeout=o.nccl_timeout_s, env=env)
        log = f"nccl-allreduce-{i}.log"
        ctx.save_log(log, f"$ {shown}\n{r.output}")
        if r.timed_out:
            last = (r.output.strip().splitlines() or ["(no output)"])[-1]
            fail(
                f"round {i}: all_reduce_perf hung — killed after {o.nccl_timeout_s} s (last line: {last!r})",
                HANG_FIX,
            )
        bad: ParseError | None = None
        try:
            res = parse_nccl_log(r.output, source=log)
        except ParseError as exc:
            bad = exc
        if bad is not None:
            fail(
                f"round {i}: {bad.message} (exit code {r.rc}" + (f", {r.killed}" if r.killed else "") + ")",
                bad.hint or f"see {log} in the report",
            )
        if r.rc != 0:
            problems.append(f"round {i}: all_reduce_perf exited {r.rc}")
        if not res.oob_ok or res.oob_count:
            problems.append(f"round {i}: {res.oob_count} out-of-bounds values")
        wrong = res.wrong_rows()
        if wrong:
            problems.append(f"round {i}: wrong results at sizes {', '.join(str(w.size) for w in wrong[:5])}")
        if res.warnings:
            problems.append(f"round {i}: NCCL WARN: {res.warnings[0][:200]}")
        if res.n_gpus is not None and res.n_gpus != n:
            problems.append(f"round {i}: ran on {res.n_gpus} GPUs, expected {n}")
        if res.nccl_library and torch_nccl_code and res.nccl_library != torch_nccl_code:
            problems.append(f"round {i}: nccl-tests ran NCCL {res.nccl_library}, torch has {torch_nccl_code}")
        rounds.append(
            {
                "round": i,
                "log": log,
                "avg_busbw": res.avg_busbw,
                "max_size": res.rows[-1].size,
                "max_size_busbw": res.max_size_busbw,
                "busbw": {str(row.size): row.busbw for row in res.rows},
                "nccl_library": res.nccl_library,
            }
        )
        if res.max_size_busbw < floor_gbps:
            low.append((i, res.max_size_busbw))
    if low:
        worst = min(v for _, v in low)
        problems.append(
            f"busbw at {format_bytes(rounds[-1]['max_size'])} below the floor {floor_gbps:g} GB/s in round "
            + ", ".join(f"{i} ({v:g} GB/s)" for i, v in low)
            + (
                f"; the weakest is {worst / expected.value:.2f} × the expected {expected.value:g} GB/s"
                if expected
                else ""
            )
            + f" — floor: {floor_basis}"
        )
    peaks = [r["max_size_busbw"] for r in rounds]
    check.figures["max_size_busbw_mean"] = sum(peaks) / len(peaks)
    check.figures["link"] = link
    verdict = judge(
        "allreduce_busbw_gbps", f"{n} GPUs over {link or '?'}", min(peaks), expected, bands or Bands()
    )
    check.figures["judgement"] = verdict.to_json()
    if verdict.verdict == "warn":
        check.warnings.append(verdict.sentence() + " (weakest round)")
    check.figures["spread"] = spread(peaks)
    if spread(peaks) > 0.10:
        check.warnings.append(
            f"busbw varies {spread(peaks):.0%} between rounds ({', '.join(f'{p:g}' for p in peaks)})"
        )
    if problems:
        fail("; ".join(problems), UNHEALTHY_FIX)
