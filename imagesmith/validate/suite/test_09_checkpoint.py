"""Checkpoint round trip across processes: train, save, end the process, restore in a new one, continue; the
model, optimizer, scheduler and RNG state must equal those of an uninterrupted run."""

from __future__ import annotations

import shlex

from imagesmith.validate.context import CheckRecord, Context, fail, parse_probe_lines
from imagesmith.validate.criteria import Gpu


def test_checkpoint_round_trip(ctx: Context, check: CheckRecord, gpus: list[Gpu]) -> None:
    script = ctx.put_probe("checkpoint")
    d = f"{ctx.workdir}/ckpt"
    log = []
    for mode in ("first", "resume"):
        cmd = f"{shlex.quote(ctx.options.python)} {shlex.quote(script)} {mode} {shlex.quote(d)}"
        r = ctx.run(cmd, timeout=240, env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})
        log.append(f"$ {cmd}\n{r.output}")
        found = parse_probe_lines(r.stdout)
        out = found[-1] if found else {}
        check.figures[mode] = out
        if r.timed_out or "error" in out or not found:
            ctx.save_log("checkpoint.log", "\n".join(log))
            fail(
                f"checkpoint step '{mode}' failed (exit {r.rc}): "
                f"{out.get('error') or r.output.strip()[-300:]}",
                "a full disk, a read-only /tmp or a torch.load incompatibility: see checkpoint.log",
            )
        if mode == "resume" and not out.get("ok"):
            ctx.save_log("checkpoint.log", "\n".join(log))
            mismatched = {k: v for k, v in out.get("mismatch", {}).items() if v}
            fail(
                f"the resumed run differs from the uninterrupted one: {mismatched}",
                "save and restore the optimizer, scheduler and RNG states (CPU and CUDA) with the model; "
                "non-deterministic kernels also break exact resumption",
            )
    ctx.save_log("checkpoint.log", "\n".join(log))
