"""Still yours alone at the end: the free rule of test_gpus_free (imagesmith.validate.free) once more after
every other check, the soak included — nothing of the suite runs then, so all memory in use and any
utilization is someone else's. A process that came while the suite ran and holds more than
``--foreign-memory-max``, or keeps the GPU busy, fails, named with its pid and memory (the soak's own
sampling, imagesmith.validate.alone, says when it came during a soak)."""

from __future__ import annotations

from typing import Any

from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu
from imagesmith.validate.free import FREE_COMMAND, SAMPLE_GAP_S, SAMPLES, judge_free, parse_free

STILL_FREE_FIX = (
    "another process came while the suite ran (another tenant, a job of yours, a process of another "
    "container or VM on the same GPU): the figures measured after it came are not this host's alone — stop "
    "it if it is yours, otherwise show this report to the provider and ask for GPUs that are yours alone"
)


def test_gpus_still_free(ctx: Context, check: CheckRecord, gpus: list[Gpu]) -> None:
    r = ctx.run(FREE_COMMAND, timeout=int(60 + SAMPLES * SAMPLE_GAP_S * 4))
    ctx.save_log("gpu-free-end.txt", f"$ {FREE_COMMAND}\n{r.output}")
    capture = parse_free(r.stdout)
    if r.timed_out or not capture.samples:
        fail(
            "nvidia-smi gave no memory/utilization rows at the end of the suite"
            + (" (it did not answer)" if r.timed_out else ""),
            "see gpu-free-end.txt: a driver that stops answering during a run is failing",
        )
    verdict = judge_free(capture, gpus, limit=ctx.options.foreign_memory_max)
    first = ctx.records.get("test_gpus_free")
    start: dict[int, Any] = {row.get("gpu"): row for row in (first.figures.get("gpus", []) if first else [])}
    for row in verdict.rows:
        before = start.get(row["gpu"])
        row["at_start"] = before.get("verdict") if isinstance(before, dict) else "not checked"
    check.figures["gpus"] = verdict.rows
    check.figures["limit"] = ctx.options.foreign_memory_max
    check.warnings.extend(verdict.warnings)
    if verdict.failures:
        fail("GPUs not yours alone at the end of the suite: " + "; ".join(verdict.failures), STILL_FREE_FIX)
