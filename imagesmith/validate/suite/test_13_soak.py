"""The soak (``--soak DURATION``): every GPU under a sustained, realistic load at once (probes/soak.py: bf16
matmul, device-memory copies, NCCL all_reduce across the GPUs where there are 2+), sampled every few seconds,
judged by imagesmith.validate.soak: a sustained or recurring drop against the run's own first minute or the
expected figures, hardware/thermal slowdown (not the software power cap), new Xid/SXid. Writes soak.csv (the
time series), soak-gpu<N>.png (a timeline per GPU, with matplotlib) and soak-samples.jsonl (the raw records).
Runs only with --soak; last, after every other check."""

from __future__ import annotations

import json

from imagesmith.validate.alone import intruder_sentence, sm_user_sentence, soak_intruders, soak_sm_users
from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu
from imagesmith.validate.expected import Bands, Expected, gpu_expected, options_expected
from imagesmith.validate.facts import KERNEL_LOG_COMMANDS
from imagesmith.validate.soak import (
    EXPECTED_FIGURE,
    SoakSettings,
    judge_soak,
    new_kernel_events,
    soak_series,
    write_csv,
    write_plots,
)

SOAK_FIX = (
    "this host does not keep up its throughput under sustained load: a neighbour's load (other processes "
    "on the GPU), throttling from heat or power, or a failing GPU — soak.csv and soak-gpu*.png show when; "
    "show the report to the provider and ask for another machine"
)


def _kernel_log(ctx: Context) -> str | None:
    for command in KERNEL_LOG_COMMANDS:
        r = ctx.run(command, timeout=60)
        if r.rc == 0 and r.stdout.strip():
            return r.stdout
    return None


def test_soak(ctx: Context, check: CheckRecord, gpus: list[Gpu], host_kind: tuple[str, int, str]) -> None:
    o = ctx.options
    before = _kernel_log(ctx)
    up = ctx.run("cat /proc/uptime", timeout=30)
    try:
        uptime = float(up.stdout.split()[0])
    except (ValueError, IndexError):
        uptime = None
    r, records = ctx.probe(
        "soak", f"{o.soak_s:g}", f"{o.soak_interval_s:g}", "1", timeout=int(o.soak_s + 600)
    )
    ctx.save_log("soak-samples.jsonl", "".join(json.dumps(x) + "\n" for x in records))
    if r.rc != 0 or not records:
        ctx.save_log("soak.log", r.output[-20000:])
    after = _kernel_log(ctx) if before is not None else None
    by_uuid = {g.uuid: g.index for g in gpus if g.uuid}
    series = soak_series(records, smi_names=by_uuid)
    if r.timed_out:
        series.errors.append(f"the soak probe did not finish within {int(o.soak_s + 600)} s (hung)")
    elif r.killed:
        series.errors.append(f"the soak probe died: {r.killed}")
    expected: dict[str, dict[str, Expected | None]] = {}
    for label in series.rows:
        g = next((g for g in gpus if g.index == series.gpu_index.get(label)), None)
        expected[label] = {
            figure: options_expected(o, exp, gpu_expected(g, exp), host_kind)
            for figure, exp in EXPECTED_FIGURE.items()
        }
    xids = []
    if before is not None and after is not None:
        for event, minute in new_kernel_events(before, after, uptime_at_start=uptime):
            g = next((g for g in gpus if event.matches(g.bus_id or "")), None)
            where = f"GPU {g.index} ({event.bus})" if g else f"PCI {event.bus}"
            xids.append((event, where, minute))
    intruders = soak_intruders(records, series, gpus, limit=o.foreign_memory_max)
    sm_users = soak_sm_users(records, series, gpus)
    result = judge_soak(
        series,
        expected=expected,
        new_xids=xids,
        listed={g.index: g.name for g in gpus},
        not_alone=[intruder_sentence(i, limit=o.foreign_memory_max) for i in intruders]
        + [sm_user_sentence(u) for u in sm_users],
        settings=SoakSettings(
            fail_ratio=o.soak_fail_ratio,
            warn_ratio=o.soak_warn_ratio,
            bands=Bands(fail_ratio=o.perf_fail_ratio, warn_ratio=o.perf_warn_ratio),
        ),
    )
    write_csv(series, ctx.report_dir / "soak.csv")
    ctx.logs.append("soak.csv")
    plots, note = write_plots(series, result, ctx.report_dir, fail_ratio=o.soak_fail_ratio)
    ctx.logs.extend(plots)
    check.figures.update(
        sentence=result.sentence,
        duration_s=series.duration_s,
        interval_s=series.interval_s,
        gpus=len(series.rows),
        windows=len(series.all_rows()),
        summary=result.summary,
        minutes=result.minutes,
        judgements=[j.to_json() for j in result.judgements],
        plots=plots,
        plot=note,
        kernel_log="read before and after" if after is not None else "not readable here: Xids not checked",
        new_xid=[{"where": w, "minute": m, "text": e.label} for e, w, m in xids],
        failures=result.failures,
        intruders=[i.to_json() for i in intruders],
        sm_users=[u.to_json() for u in sm_users],
    )
    check.warnings.extend(result.warnings)
    if after is None:
        check.warnings.append(
            "the kernel log cannot be read here: Xid errors during the soak were not checked"
        )
    if result.failures:
        fail(result.sentence + " Problems: " + "; ".join(result.failures), SOAK_FIX)
