"""DCGM as a tier (imagesmith.validate.dcgm): where ``dcgmi`` is on the target, ``dcgmi diag -r LEVEL -j`` —
level 1 in the gate, 3 with ``--soak``, or ``--dcgm-level`` — read into one result per test and GPU. A failed
DCGM test fails naming it; without dcgmi the check is skipped with that reason, named in the verdict (never a
silent skip)."""

from __future__ import annotations

import pytest

from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu
from imagesmith.validate.dcgm import LEVEL_TIMEOUT_S, dcgm_command, judge_dcgm, parse_dcgm

DCGM_FIX = (
    "DCGM's diagnostic found this GPU failing: dcgm-diag.txt has DCGM's own words; show it to the provider "
    "and ask for another machine"
)


def dcgm_level(soak_s: float, chosen: int) -> int:
    """``--dcgm-level`` where given (0: off), else 3 beside a soak and 1 in the gate."""
    if chosen >= 0:
        return chosen
    return 3 if soak_s > 0 else 1


def test_dcgm_diag(ctx: Context, check: CheckRecord, gpus: list[Gpu]) -> None:
    level = dcgm_level(ctx.options.soak_s, ctx.options.dcgm_level)
    check.figures["level"] = level
    if level == 0:
        pytest.skip("the DCGM tier is off (--dcgm-level 0)")
    if ctx.run("command -v dcgmi", timeout=30).rc != 0:
        pytest.skip(
            "dcgmi is not on this host: the DCGM tier (dcgmi diag -r "
            f"{level}) did not run — install DCGM (datacenter-gpu-manager) and start nv-hostengine to add it"
        )
    command = dcgm_command(level)
    r = ctx.run(command, timeout=LEVEL_TIMEOUT_S[level])
    ctx.save_log("dcgm-diag.txt", f"$ {command}\n{r.output}")
    check.figures["exit_code"] = r.rc
    if r.timed_out:
        fail(
            f"`{command}` did not finish within {LEVEL_TIMEOUT_S[level]} s (hung)",
            "run it by hand on the host; a diagnostic that hangs usually means a stuck GPU or driver",
        )
    try:
        run = parse_dcgm(r.stdout)
    except ValueError as exc:
        problem = str(exc)
    else:
        problem = ""
    if problem:
        fail(
            f"`{command}` (exit {r.rc}) gave no result: {problem}: {r.output.strip()[-300:]}",
            "see dcgm-diag.txt; where dcgmi cannot connect to the host engine, start `nv-hostengine` on the "
            "host",
        )
    verdict = judge_dcgm(run, level=level)
    check.figures.update(version=run.version, driver=run.driver, results=verdict.rows)
    check.warnings.extend(verdict.warnings)
    if verdict.failures:
        fail("; ".join(verdict.failures), DCGM_FIX)
