"""Is each GPU free? Before the suite loads anything: memory in use, the compute processes on it, utilization
over a few seconds, compute mode and MIG (imagesmith.validate.free). Memory held by others above
``--foreign-memory-max`` (default 3 % of the board) or a busy idle GPU fails, naming the GPU, the amount and
the processes seen; less than that warns."""

from __future__ import annotations

from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu
from imagesmith.validate.free import FREE_COMMAND, SAMPLE_GAP_S, SAMPLES, judge_free, parse_free

FREE_FIX = (
    "someone else uses this GPU (another tenant, a stray job of yours, a process another container or VM "
    "on the same GPU runs): stop it if it is yours (kill PID), otherwise show this report to the provider "
    "and ask for GPUs that are yours alone — the memory and time you pay for are not all there"
)


def test_gpus_free(ctx: Context, check: CheckRecord, gpus: list[Gpu]) -> None:
    r = ctx.run(FREE_COMMAND, timeout=int(60 + SAMPLES * SAMPLE_GAP_S * 4))
    ctx.save_log("gpu-free.txt", f"$ {FREE_COMMAND}\n{r.output}")
    if r.timed_out:
        fail("nvidia-smi did not answer while the GPUs were sampled", "see gpu-free.txt; the driver is stuck")
    capture = parse_free(r.stdout)
    if not capture.samples:
        fail(
            "nvidia-smi gave no memory/utilization/compute-mode rows: "
            + ("; ".join(capture.problems[:3]) or "no output"),
            "run the command in gpu-free.txt by hand: an older driver may not know one of its fields",
        )
    verdict = judge_free(capture, gpus, limit=ctx.options.foreign_memory_max)
    check.figures["gpus"] = verdict.rows
    check.figures["limit"] = ctx.options.foreign_memory_max
    if capture.problems:
        check.figures["nvidia_smi_said"] = capture.problems[:5]
    check.warnings.extend(verdict.warnings)
    if verdict.failures:
        fail("GPUs not free: " + "; ".join(verdict.failures), FREE_FIX)
