"""DCGM as a tier of the suite (issue 33): where ``dcgmi`` is on the target, ``dcgmi diag -r LEVEL -j`` and
its JSON read into one result per test and GPU. Level 1 (deployment: software, PCIe, …) in the gate; level 3
(adds targeted stress and power, memory bandwidth, GEMM throughput) with ``--soak``; ``--dcgm-level``
chooses (0: off).

Two document shapes are read (both described by NVIDIA DCGM's nvvs ``JsonOutput`` format): DCGM 3.x puts
everything under ``"DCGM GPU Diagnostic"`` (``test_categories[].tests[].results[]`` with ``gpu_ids`` /
``gpu_id``, ``status`` Pass/Fail/Warn/Skip, ``warnings`` as strings, ``version`` and
``driver_version_detected`` beside them); DCGM 4.x under ``"DCGM Diagnostic"`` with results per entity
(``entity_group``, ``entity_id``), ``warnings`` as objects with a ``warning`` text and error ids, a
``test_summary`` per test and the versions under ``metadata`` (``"Driver Version Detected"``, ``version``).
A status this reader does not know is never a pass.

Pure: :func:`parse_dcgm` and :func:`judge_dcgm`; unit tests replay documents of both shapes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: seconds ``dcgmi diag`` may take per level before it counts as hung (NVIDIA's guide: level 1 about a minute,
#: 2 a few minutes, 3 about half an hour, 4 one to two hours)
LEVEL_TIMEOUT_S = {1: 300, 2: 900, 3: 3600, 4: 4 * 3600}
PASS, FAIL, WARN, SKIP, NOT_RUN, UNKNOWN = "pass", "fail", "warn", "skip", "not run", "unknown"
_STATUS = {
    "pass": PASS,
    "fail": FAIL,
    "warn": WARN,
    "warning": WARN,
    "skip": SKIP,
    "skipped": SKIP,
    "not run": NOT_RUN,
    "notrun": NOT_RUN,
}


def dcgm_command(level: int) -> str:
    return f"dcgmi diag -r {int(level)} -j"


@dataclass(frozen=True)
class DcgmResult:
    category: str
    test: str
    gpu: str
    status: str
    said: str
    warnings: tuple[str, ...] = ()


@dataclass
class DcgmRun:
    version: str = ""
    driver: str = ""
    results: list[DcgmResult] = field(default_factory=list)


def _texts(items: Any) -> tuple[str, ...]:
    out: list[str] = []
    for w in items if isinstance(items, list) else []:
        if isinstance(w, str):
            out.append(w)
        elif isinstance(w, Mapping) and isinstance(w.get("warning"), str):
            out.append(w["warning"])
    return tuple(t.strip()[:400] for t in out if t.strip())


def parse_dcgm(text: str) -> DcgmRun:
    """``dcgmi diag -j`` output (a banner such as "Successfully ran diagnostic for group." may come first) →
    one :class:`DcgmResult` per test and GPU. Raises ValueError where it holds no DCGM document."""
    start = text.find("{")
    if start < 0:
        raise ValueError("dcgmi printed no JSON")
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise ValueError(f"dcgmi's JSON is not readable ({exc.msg} at character {exc.pos})") from None
    if not isinstance(doc, Mapping):
        raise ValueError("dcgmi's JSON is not an object")
    body = doc.get("DCGM GPU Diagnostic") or doc.get("DCGM Diagnostic")
    if not isinstance(body, Mapping):
        raise ValueError("no 'DCGM GPU Diagnostic' / 'DCGM Diagnostic' in dcgmi's JSON")
    found = doc.get("metadata")
    meta: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    run = DcgmRun(
        version=str(body.get("version") or meta.get("version") or ""),
        driver=str(body.get("driver_version_detected") or meta.get("Driver Version Detected") or ""),
    )
    for cat in body.get("test_categories") or []:
        if not isinstance(cat, Mapping):
            continue
        for test in cat.get("tests") or []:
            if not isinstance(test, Mapping):
                continue
            name = str(test.get("name") or "?")
            for r in test.get("results") or []:
                if not isinstance(r, Mapping):
                    continue
                said = str(r.get("status") or "")
                gpu = r.get("entity_id", r.get("gpu_id", r.get("gpu_ids", "?")))
                run.results.append(
                    DcgmResult(
                        category=str(cat.get("category") or ""),
                        test=name,
                        gpu=str(gpu),
                        status=_STATUS.get(said.strip().lower(), UNKNOWN),
                        said=said,
                        warnings=_texts(r.get("warnings")),
                    )
                )
    return run


@dataclass
class DcgmVerdict:
    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def judge_dcgm(run: DcgmRun, *, level: int) -> DcgmVerdict:
    """A failed test fails, naming the test, the GPU and DCGM's words; a warning or a status this reader does
    not know warns (never a pass); a run with no result at all fails."""
    out = DcgmVerdict()
    for r in run.results:
        out.rows.append(
            {
                "category": r.category,
                "test": r.test,
                "gpu": r.gpu,
                "status": r.status,
                "warnings": list(r.warnings),
            }
        )
        words = f": {'; '.join(r.warnings)}" if r.warnings else ""
        where = f"DCGM level {level} {r.test} on GPU {r.gpu}"
        if r.status == FAIL:
            out.failures.append(f"{where} failed{words}")
        elif r.status == WARN:
            out.warnings.append(f"{where} warned{words}")
        elif r.status == UNKNOWN:
            out.warnings.append(
                f"{where}: status {r.said!r} is not one imagesmith knows (not read as a pass)"
            )
    if not run.results:
        out.failures.append(f"dcgmi diag -r {level} reported no test result")
    return out
