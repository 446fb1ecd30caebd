"""The evidence bundle: report.json (every check, status, figures), report.md (verdict first), busbw plot.

junit.xml is written by pytest itself (``--junitxml``); raw logs are written by the checks as they run.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from imagesmith import atomicio
from imagesmith.validate.context import SKIP_NO_GPU, SuiteOptions
from imagesmith.validate.parsers import TopoMatrix, format_bytes
from imagesmith.validate.record import PERF_CHECKS, gpus_json, write_report
from imagesmith.validate.record import SCHEMA as REPORT_SCHEMA

PASSED, FAILED, NOT_VALIDATED = "passed", "failed", "not validated"

#: why a verdict is what it is (report.json's ``verdict_cause``): the fix is chosen by it, never by the text
CAUSE_SUITE_ERROR = "suite-error"  # the suite itself could not run
CAUSE_FAILED = "failed"  # a check failed
CAUSE_NO_GPU = "no-gpu"  # GPU checks skipped: the target showed no GPU
CAUSE_NO_CHECK = "no-check"  # no check ran, or none passed
CAUSE_LEFT_OUT = "left-out"  # -k left checks out
CAUSE_NO_GPUS_GIVEN = "no-gpus-given"  # the host gave the image's container no GPU
CAUSE_REFUSED = "refused"  # the host refused what the image left in its scratch folder
#: every cause a report may name
CAUSES = (
    CAUSE_SUITE_ERROR,
    CAUSE_FAILED,
    CAUSE_NO_GPU,
    CAUSE_NO_CHECK,
    CAUSE_LEFT_OUT,
    CAUSE_NO_GPUS_GIVEN,
    CAUSE_REFUSED,
)
CAUSE_PASSED = ""


class Verdict(NamedTuple):
    verdict: str
    why: str
    cause: str


@dataclass
class CheckOutcome:
    name: str
    module: str
    status: str = ""
    message: str = ""
    fix: str = ""
    duration_s: float = 0.0
    figures: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    #: a skipped check's cause as a value (:data:`imagesmith.validate.context.SKIP_NO_GPU`), "" for any other
    skip: str = ""


#: the skip message's fixed start in reports of schema 1 and 2, which had no ``skip`` field
_LEGACY_NO_GPU = "no GPU visible"


def outcomes_of(checks: Any, schema: int) -> list[CheckOutcome]:
    """The check outcomes of a report.json's (or a container suite's claim's) ``checks``: unknown keys are
    dropped (a newer imagesmith-validate may record more). A report of schema 1 or 2 has no ``skip`` field:
    its no-GPU skips are recognised by the fixed text those versions wrote first, so an old report that saw
    no GPU is still never read as passed."""
    out = []
    for c in checks if isinstance(checks, list | tuple) else ():
        if not isinstance(c, Mapping):
            continue

        def text(key: str, c: Mapping[str, Any] = c) -> str:
            value = c.get(key)
            return value if isinstance(value, str) else ""

        figures, warnings, duration = c.get("figures"), c.get("warnings"), c.get("duration_s")
        outcome = CheckOutcome(
            name=text("name"),
            module=text("module"),
            status=text("status"),  # anything but passed/skipped counts as failed
            message=text("message"),
            fix=text("fix"),
            duration_s=float(duration)
            if isinstance(duration, int | float) and not isinstance(duration, bool)
            else 0.0,
            figures=dict(figures) if isinstance(figures, Mapping) else {},
            warnings=[w for w in warnings if isinstance(w, str)] if isinstance(warnings, list) else [],
            skip=text("skip"),
        )
        legacy = outcome.message[: len(_LEGACY_NO_GPU)]
        if schema < 3 and outcome.status == "skipped" and legacy == _LEGACY_NO_GPU:
            outcome.skip = SKIP_NO_GPU
        out.append(outcome)
    return out


def verdict_of(
    checks: list[CheckOutcome], suite_error: str | None = None, all_checks: list[str] | None = None
) -> Verdict:
    """(verdict, why, cause). Any failure → failed; GPU checks skipped for lack of a GPU, checks left out
    (``-k``) or no check run → not validated. Only a full run without failures is "passed"."""
    if suite_error:
        return Verdict(FAILED, suite_error, CAUSE_SUITE_ERROR)
    failed = [c.name for c in checks if c.status in ("failed", "")]
    if failed:
        return Verdict(FAILED, f"{len(failed)} check(s) failed: {', '.join(failed)}", CAUSE_FAILED)
    no_gpu = [c for c in checks if c.status == "skipped" and c.skip == SKIP_NO_GPU]
    if no_gpu:
        return Verdict(
            NOT_VALIDATED, f"{len(no_gpu)} GPU check(s) skipped: {no_gpu[0].message}", CAUSE_NO_GPU
        )
    if not checks:
        return Verdict(NOT_VALIDATED, "no check ran", CAUSE_NO_CHECK)
    if not any(c.status == "passed" for c in checks):
        return Verdict(NOT_VALIDATED, "no check passed", CAUSE_NO_CHECK)
    left_out = [n for n in (all_checks or []) if n not in {c.name for c in checks}]
    if left_out:
        return Verdict(
            NOT_VALIDATED,
            f"only {len(checks)} of {len(all_checks or [])} checks ran (left out: {', '.join(left_out)})",
            CAUSE_LEFT_OUT,
        )
    why = f"{sum(c.status == 'passed' for c in checks)} check(s) passed"
    skipped = [c for c in checks if c.status == "skipped"]
    if skipped:
        why += f"; {len(skipped)} skipped: " + ", ".join(
            f"{c.name} ({c.message.splitlines()[0][:100] if c.message else 'no reason given'})"
            for c in skipped
        )
    return Verdict(PASSED, why, CAUSE_PASSED)


def verdict_fix(verdict: str, cause: str) -> str:
    """What to do about a verdict that is not "passed" (by its *cause*): a failure's fixes are in report.md;
    a run that proved nothing says how to get a run that can."""
    if verdict == NOT_VALIDATED and cause == CAUSE_LEFT_OUT:
        return "run it without -k: only a run of every check can pass"
    if verdict == NOT_VALIDATED:
        return (
            "run it where the GPUs are and can be seen: on the GPU host (local:// there, or "
            "ssh://USER@HOST), or `imagesmith validate IMAGE` there (it gives the container the GPUs); "
            "`nvidia-smi` must list them on the target"
        )
    return "every failure in report.md says what is wrong and what to do"


def _by_name(checks: list[CheckOutcome], name: str) -> CheckOutcome | None:
    return next((c for c in checks if c.name == name), None)


def write_bundle(
    options: SuiteOptions,
    checks: list[CheckOutcome],
    *,
    facts: dict[str, Any],
    logs: list[str],
    all_checks: list[str] | None = None,
    started: float,
    finished: float,
    suite_error: str | None = None,
) -> dict[str, Any]:
    out = Path(options.report_dir)
    out.mkdir(parents=True, exist_ok=True)
    verdict, why, cause = verdict_of(checks, suite_error, all_checks)
    nccl = _by_name(checks, "test_nccl_allreduce")
    plot_note = write_plot(nccl.figures.get("rounds", []) if nccl else [], out / "busbw.png")
    topo = facts.get("topology")
    gpu_facts = facts.get("gpus")
    report: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "verdict": verdict,
        "verdict_reason": why,
        "verdict_cause": cause,
        "target": options.target_label or options.target,
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "duration_s": round(finished - started, 1),
        "options": options.recorded(),
        # the GPU inventory as a field (schema 2): what release records as "validated on"
        "gpus": gpus_json(getattr(gpu_facts, "gpus", None) or []),
        "checks": [asdict(c) for c in checks],
        "warnings": [w for c in checks for w in c.warnings],
        "topology_matrix": (
            {f"{a}-{b}": link for (a, b), link in topo.links.items()}
            if isinstance(topo, TopoMatrix)
            else None
        ),
        "plot": plot_note,
        "logs": sorted(logs),
    }
    write_report(out / "report.json", report)
    atomicio.write_atomic(
        out / "report.md", render_markdown(report, checks, topo if isinstance(topo, TopoMatrix) else None)
    )
    return report


def write_plot(
    rounds: list[dict[str, Any]],
    path: Path,
    *,
    title: str = "nccl-tests all_reduce_perf busbw",
    empty: str = "skipped: no nccl-tests rounds ran",
) -> str:
    """busbw against message size, one line per round (``round``: a number, labelled "round N", or a name,
    labelled as it is). matplotlib is optional (extra ``plot``)."""
    if not rounds:
        return empty
    try:
        matplotlib = importlib.import_module("matplotlib")
        matplotlib.use("Agg")
        plt = importlib.import_module("matplotlib.pyplot")
    except ImportError:
        return "skipped: matplotlib is not installed (pip install 'imagesmith[plot]')"
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=110)
    for r in rounds:
        sizes = [int(s) for s in r["busbw"]]
        name = r["round"] if isinstance(r["round"], str) else f"round {r['round']}"
        ax.plot(sizes, [r["busbw"][str(s)] for s in sizes], marker="o", markersize=3, label=name)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path.name


def _status_icon(status: str) -> str:
    return {"passed": "PASS", "failed": "FAIL", "skipped": "SKIP"}.get(status, status.upper() or "ERROR")


def render_markdown(report: dict[str, Any], checks: list[CheckOutcome], topo: TopoMatrix | None) -> str:
    L: list[str] = []
    L.append(f"# Validation: {report['verdict'].upper()}")
    L.append("")
    L.append(f"**Verdict: {report['verdict']}** — {report['verdict_reason']}.")
    L.append("")
    if report["verdict"] == NOT_VALIDATED:
        L.append(f"**What to do:** {verdict_fix(report['verdict'], str(report.get('verdict_cause') or ''))}.")
        L.append("")
    L += _listing_section(_by_name(checks, "test_listing"), report)
    L.append(f"- target: `{report['target']}`")
    L.append(f"- started: {report['started']}, suite wall time {report['duration_s']} s")
    rec = _by_name(checks, "test_record_stack")
    if rec and rec.figures:
        f = rec.figures
        L.append(
            f"- stack: driver {f.get('driver')} (CUDA {f.get('driver_cuda')}), kernel {f.get('kernel')}, "
            f"Python {f.get('python')}, torch {f.get('torch')} (CUDA {f.get('torch_cuda')}, runtime "
            f"{f.get('cuda_runtime')}), cuDNN {f.get('cudnn')}, NCCL {f.get('nccl')}"
        )
    if report["warnings"]:
        L.append("")
        L.append("Warnings:")
        L.extend(f"- {w}" for w in report["warnings"])
    L += _failures_section(checks)
    L += _gpus_section(checks)
    L += _free_section(_by_name(checks, "test_gpus_free"))
    L += _topology_section(topo)
    perf_rows = _perf_rows(checks)
    nccl = _by_name(checks, "test_nccl_allreduce")
    scaling = _by_name(checks, "test_scaling_efficiency")
    soak = _by_name(checks, "test_soak")
    L += _perf_section(perf_rows)
    L += _nccl_section(nccl)
    L += _scaling_section(scaling)
    L += _soak_section(soak)
    L.append("")
    plot = report.get("plot", "")
    L.append(f"Plot: ![busbw]({plot})" if plot.endswith(".png") else f"Plot: {plot}")
    L.append("")
    L += _checks_section(checks)
    L.append("Raw logs: " + ", ".join([*(f"`{n}`" for n in report["logs"]), "`junit.xml`"]) + ".")
    L.append("")
    return "\n".join(L)


def _failures_section(checks: list[CheckOutcome]) -> list[str]:
    """Each failed check: its message and its fix."""
    L: list[str] = []
    failed = [c for c in checks if c.status not in ("passed", "skipped")]
    if failed:
        L.append("")
        L.append("## Failures and fixes")
        for c in failed:
            L.append("")
            L.append(f"### {c.name}")
            L.append("")
            L.append("```")
            L.append(c.message)
            L.append("```")
            L.append(f"**Fix:** {c.fix}")
    return L


def _gpus_section(checks: list[CheckOutcome]) -> list[str]:
    """The GPU inventory table."""
    L: list[str] = []
    inv = _by_name(checks, "test_gpu_inventory")
    if inv and inv.figures.get("gpus"):
        L.append("")
        L.append("## GPUs")
        L.append("")
        L.append("| index | name | memory | compute cap | bus id |")
        L.append("|---|---|---|---|---|")
        for g in inv.figures["gpus"]:
            mem = f"{g['memory_mib']} MiB" if g.get("memory_mib") else "?"
            L.append(f"| {g['index']} | {g['name']} | {mem} | {g.get('compute_cap')} | {g['bus_id']} |")
    return L


def _topology_section(topo: TopoMatrix | None) -> list[str]:
    """The ``nvidia-smi topo -m`` matrix with each GPU's CPU and NUMA affinity."""
    L: list[str] = []
    if topo is not None:
        L.append("")
        L.append("## Topology (`nvidia-smi topo -m`)")
        L.append("")
        L.append("| | " + " | ".join(topo.devices) + " | CPU affinity | NUMA affinity |")
        L.append("|---" * (len(topo.devices) + 3) + "|")
        for a in topo.devices:
            cells = [topo.links[(a, b)] for b in topo.devices]
            L.append(
                f"| {a} | "
                + " | ".join(cells)
                + f" | {topo.cpu_affinity.get(a, '')} | {topo.numa_affinity.get(a, '')} |"
            )
    return L


def _perf_rows(checks: list[CheckOutcome]) -> list[dict[str, Any]]:
    """Every judged figure against a healthy host: the perf checks', then NCCL's, scaling's and the soak's."""
    perf_rows: list[dict[str, Any]] = [
        j
        for name in PERF_CHECKS
        for c in [_by_name(checks, name)]
        if c is not None
        for j in c.figures.get("judgements", [])
    ]
    nccl = _by_name(checks, "test_nccl_allreduce")
    if nccl and isinstance(nccl.figures.get("judgement"), dict):
        perf_rows.append(nccl.figures["judgement"])
    scaling = _by_name(checks, "test_scaling_efficiency")
    if scaling and isinstance(scaling.figures.get("judgement"), dict):
        perf_rows.append(scaling.figures["judgement"])
    soak = _by_name(checks, "test_soak")
    if soak:
        perf_rows += [j for j in soak.figures.get("judgements") or [] if isinstance(j, dict)]
    return perf_rows


def _perf_section(perf_rows: list[dict[str, Any]]) -> list[str]:
    """The table of judged figures."""
    L: list[str] = []
    if perf_rows:
        L.append("")
        L.append("## Performance against a healthy host")
        L.append("")
        L.append("| where | figure | measured | expected | ratio | verdict | expected from |")
        L.append("|---|---|---|---|---|---|---|")
        for j in perf_rows:
            exp = "none" if j.get("expected") is None else f"{j['expected']:.4g}"
            ratio = "" if j.get("ratio") is None else f"{j['ratio']:.2f}"
            measured = "not measured" if j.get("measured") is None else f"{j['measured']:.4g}"
            src = f"{j.get('kind') or 'no baseline'}: {j.get('source', '')}".replace("|", "/")
            L.append(
                f"| {j.get('where')} | {j.get('figure')} | {measured} | {exp} | {ratio} | "
                f"{j.get('verdict')} | {src} |"
            )
    return L


def _nccl_section(nccl: CheckOutcome | None) -> list[str]:
    """NCCL all_reduce bus bandwidth per size and round."""
    L: list[str] = []
    rounds = nccl.figures.get("rounds", []) if nccl else []
    if rounds:
        f = nccl.figures if nccl else {}
        L.append("")
        L.append("## NCCL all_reduce bus bandwidth (GB/s)")
        L.append("")
        L.append(f"Command: `{f.get('command')}`")
        L.append("")
        L.append(
            f"Floor {f.get('floor_gbps'):g} GB/s ({f.get('floor_basis')}); mean busbw at the largest size "
            f"{f.get('max_size_busbw_mean', 0):.2f} GB/s; spread between rounds {f.get('spread', 0):.1%}."
        )
        L.append("")
        L.append("| size | " + " | ".join(f"round {r['round']}" for r in rounds) + " |")
        L.append("|---" * (len(rounds) + 1) + "|")
        for s in rounds[0]["busbw"]:
            L.append(
                f"| {format_bytes(int(s))} | "
                + " | ".join(f"{r['busbw'].get(s, float('nan')):.2f}" for r in rounds)
                + " |"
            )
    return L


def _checks_section(checks: list[CheckOutcome]) -> list[str]:
    """One row per check: status, time, first line of its message."""
    L: list[str] = []
    L.append("## Checks")
    L.append("")
    L.append("| check | status | time (s) | note |")
    L.append("|---|---|---|---|")
    for c in checks:
        note = c.message.splitlines()[0][:160] if c.message else ""
        L.append(f"| {c.name} | {_status_icon(c.status)} | {c.duration_s:.1f} | {note.replace('|', '/')} |")
    L.append("")
    return L


def _listing_section(listing: CheckOutcome | None, report: Mapping[str, Any]) -> list[str]:
    """The promised-vs-measured table (``--listing``), one row per promise: first in report.md."""
    if listing is None or not listing.figures.get("promises"):
        return []
    L = ["## Promised vs measured (the listing)", "", "| promise | promised | measured | verdict | from |"]
    L.append("|---|---|---|---|---|")
    icon = {"kept": "✅ kept", "broken": "❌ broken"}
    for r in listing.figures["promises"]:
        cells = [str(r.get(k, "")).replace("|", "\\|") for k in ("promise", "promised", "measured")]
        verdict = icon.get(r.get("verdict"), "⚠️ " + str(r.get("verdict")))
        L.append(f"| {' | '.join(cells)} | {verdict} | {r.get('source', '')} |")
    price = listing.figures.get("price_per_hour")
    if isinstance(price, int | float) and isinstance(report.get("duration_s"), int | float):
        cost = price * float(report["duration_s"]) / 3600
        cur = listing.figures.get("currency", "")
        L += [
            "",
            f"This run took {report['duration_s']} s of a rental at {price:g} {cur} per hour: "
            f"{cost:.2f} {cur}.",
        ]
    L.append("")
    return L


def _free_section(free: CheckOutcome | None) -> list[str]:
    """Is each GPU free (test_gpus_free): what others held and did before the suite loaded anything."""
    rows = free.figures.get("gpus") if free else None
    if not free or not isinstance(rows, list) or not rows:
        return []
    L = ["", "## Is each GPU free (before the suite loaded anything)", ""]
    L.append(
        "| GPU | memory in use by others | --foreign-memory-max | utilization at idle (mean; samples) | "
        "compute mode | MIG | processes seen | verdict |"
    )
    L.append("|---|---|---|---|---|---|---|---|")
    for r in rows:
        procs = "; ".join(
            f"pid {p.get('pid')} {p.get('name')} ({p.get('mib')} MiB)" for p in r.get("processes") or []
        )
        samples = ", ".join(f"{u:g}" for u in r.get("utilization_samples") or [])
        mean = r.get("utilization_mean")
        util = f"{mean} % ({samples})" if mean is not None else "not reported by nvidia-smi"
        L.append(
            f"| {r.get('gpu')} ({r.get('name')}) | {r.get('memory_used_mib', 0):.0f} of "
            f"{r.get('memory_total_mib', 0):.0f} MiB | {free.figures.get('limit')} "
            f"({r.get('limit_mib', 0):.0f} MiB) | {util} | "
            f"{r.get('compute_mode')} | {r.get('mig')} | {(procs or 'none').replace('|', '/')} | "
            f"{r.get('verdict')} |"
        )
    return L


def _scaling_section(scaling: CheckOutcome | None) -> list[str]:
    if not scaling:
        return []
    L = ["", "## DDP scaling efficiency", ""]
    f = scaling.figures
    if not f.get("efficiency"):
        L.append(
            f"{_status_icon(scaling.status)}: {scaling.message.splitlines()[0] if scaling.message else ''}"
        )
        return L
    j = f.get("judgement") or {}
    L.append(
        f"Step: {f.get('step')}. One GPU: {f.get('samples_per_s_1gpu')} samples/s "
        f"({f.get('step_ms_1gpu')} ms a step); all {f.get('gpus')} GPUs: {f.get('samples_per_s_all')} "
        f"samples/s ({f.get('step_ms_all')} ms a step); efficiency **{f.get('efficiency'):.3f}** over "
        f"{f.get('link') or '?'} — expected "
        f"{j.get('expected')} ({j.get('source')}), verdict {j.get('verdict')}."
    )
    return L


def _soak_section(soak: CheckOutcome | None) -> list[str]:
    if not soak or not soak.figures.get("sentence"):
        return []
    f = soak.figures
    L = ["", "## Soak", "", str(f["sentence"]), ""]
    minutes = [m for m in f.get("minutes") or [] if isinstance(m, dict)]
    if minutes:
        count = max(len(m.get("minutes") or []) for m in minutes)
        L.append("Mean of each minute ÷ the first minute:")
        L.append("")
        L.append("| GPU | figure | first minute | " + " | ".join(f"min {i + 1}" for i in range(count)) + " |")
        L.append("|---" * (count + 3) + "|")
        for m in minutes:
            cells = [f"{x.get('ratio', 0):.3f}" for x in m.get("minutes") or []]
            cells += [""] * (count - len(cells))
            L.append(
                f"| {m.get('gpu')} | {m.get('figure')} | {m.get('first_minute'):.4g} {m.get('unit')} | "
                + " | ".join(cells)
                + " |"
            )
        L.append("")
    plots = f.get("plots") or []
    L.append(
        "Time series: `soak.csv` (one row per GPU and window), raw records `soak-samples.jsonl`; timeline: "
        + (", ".join(f"![{p}]({p})" for p in plots) if plots else str(f.get("plot") or "none"))
        + f"; kernel log: {f.get('kernel_log')}."
    )
    return L
