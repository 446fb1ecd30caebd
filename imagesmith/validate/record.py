"""The validation report: the one type (:class:`ValidationReport`) of the record the suite writes
(report.json, :func:`write_report`), the host reads back out of an image (``validate/container.py``), release
checks (``release/evidence.py`` wraps it with where it came from and its signature) and a release index
carries a summary of (:meth:`ValidationReport.validated_on`); read and written here, versioned.

Schema 2 (written now) carries the GPU inventory as a field (``gpus``: model, driver, memory, compute
capability and ids of every GPU the suite saw) next to the verdict, the target, the start time and the checks;
readers never look a check up by its name to learn what host ran. Schema 1 (earlier reports, e.g. the
committed H200 evidence) kept the inventory only in the figures of the ``test_gpu_inventory`` check:
:meth:`parse` reads it from there, and only for schema 1.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from imagesmith import atomicio, inputs, schema
from imagesmith.errors import ConfigError
from imagesmith.index import ValidatedOn
from imagesmith.nvsmi import SmiGpu

SCHEMA: Final[int] = schema.REPORT_SCHEMA
SUPPORTED: Final[tuple[int, ...]] = schema.REPORT_SCHEMAS
_DIGEST_IN_REF = re.compile(r"@(sha256:[0-9a-f]{64})$")
_SCHEMA1_INVENTORY_CHECK: Final[str] = "test_gpu_inventory"


#: the fields of a GPU a report records (schema 2 ``gpus[]``), read back into :class:`SmiGpu`
GPU_FIELDS: Final[tuple[str, ...]] = tuple(schema.REPORT_GPU.fields)


class _Reader(schema.Checker):
    """Words the problems :data:`imagesmith.schema.VALIDATION_REPORT` finds: "``source: key: problem``"."""

    def __init__(self, source: str) -> None:
        super().__init__(source, ConfigError, docs="docs/validation.md")

    def keys(
        self, table: Mapping[str, Any], prefix: str, allowed: Sequence[str], required: Sequence[str]
    ) -> None:
        for key in required:
            if key not in table:
                where = f"{prefix}: " if prefix else ""
                raise self.fail(
                    "", f"{where}no {key!r} key", hint="pass the report.json imagesmith validate wrote"
                )

    def wrong_type(self, spec: schema.Field, value: Any, key: str) -> ConfigError:
        if spec.message:  # the message names the field itself ("no 'verdict' key", "report schema 3 is …")
            return self.fail("", spec.message.format(value=value), hint=spec.hint)
        return super().wrong_type(spec, value, key)

    def invalid(
        self, spec: schema.Field, value: Any, key: str, problem: str, nearest: str | None
    ) -> ConfigError:
        if spec.message:
            return self.fail("", problem, hint=spec.hint)
        return self.fail(key, problem, nearest=nearest, hint=spec.hint or None)


#: the checks whose per-GPU figures are judged against a healthy host, and the figures each records
PERF_CHECKS: dict[str, tuple[str, ...]] = {
    "test_gpu_memory_bandwidth": ("hbm_copy_gbps",),
    "test_matmul_throughput": ("matmul_tflops",),
    "test_host_device_bandwidth": ("h2d_gbps", "d2h_gbps"),
}


def _positive(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def report_figures(checks: Sequence[Any]) -> dict[str, float]:
    """What a report measured, one number per figure: the median over the GPUs of each per-GPU figure
    (hbm_copy_gbps, matmul_tflops, h2d_gbps, d2h_gbps) and the mean all_reduce busbw at the largest size
    (allreduce_busbw_gbps). Checks that did not record a figure add nothing."""
    per: dict[str, list[float]] = {}
    for c in checks:
        if not isinstance(c, dict) or not isinstance(c.get("figures"), dict):
            continue
        f = c["figures"]
        if c.get("name") == "test_nccl_allreduce":
            busbw = _positive(f.get("max_size_busbw_mean"))
            if busbw is not None:
                per.setdefault("allreduce_busbw_gbps", []).append(busbw)
        wanted = PERF_CHECKS.get(str(c.get("name")), ())
        judgements = f.get("judgements") if isinstance(f.get("judgements"), list) else []
        for j in judgements:
            if isinstance(j, dict) and j.get("figure") in wanted:
                value = _positive(j.get("measured"))
                if value is not None:
                    per.setdefault(str(j["figure"]), []).append(value)
    return {k: round(statistics.median(v), 3) for k, v in per.items()} | _summary_figures(checks)


#: figures other checks record as they are (issue 28): the soak's summary and the DDP scaling efficiency
SUMMARY_FIGURES: dict[str, tuple[str, ...]] = {
    "test_soak": ("soak_matmul_tflops", "soak_copy_gbps", "soak_worst_minute_ratio", "soak_minutes"),
    "test_scaling_efficiency": ("scaling_efficiency",),
    # issue 33
    "test_listing": ("listing_promises_kept",),
    "test_host_size": ("host_vcpu_per_gpu", "host_ram_per_gpu_memory"),
    "test_storage": ("storage_data_read_gbps", "storage_checkpoint_write_gbps"),
}


def _summary_figures(checks: Sequence[Any]) -> dict[str, float]:
    found: dict[str, float] = {}
    for c in checks:
        if not isinstance(c, dict):
            continue
        f = c.get("figures")
        if not isinstance(f, dict):
            continue
        for key in SUMMARY_FIGURES.get(str(c.get("name")), ()):
            value = _positive(
                (f.get("summary") or {}).get(key) if isinstance(f.get("summary"), dict) else None
            )
            if value is not None:
                found[key] = round(value, 4)
    return found


def soak_sentence_of(checks: Sequence[Any]) -> str:
    """The one sentence the soak check recorded (empty without a soak)."""
    for c in checks:
        if isinstance(c, dict) and c.get("name") == "test_soak" and isinstance(c.get("figures"), dict):
            return str(c["figures"].get("sentence") or "")
    return ""


def report_link(checks: Sequence[Any]) -> str:
    """The weakest GPU-to-GPU link the NCCL check saw (``NV18``, ``SYS``…); empty with one GPU."""
    for c in checks:
        if (
            isinstance(c, dict)
            and c.get("name") == "test_nccl_allreduce"
            and isinstance(c.get("figures"), dict)
        ):
            return str(c["figures"].get("link") or "")
    return ""


def _gpu_from_json(position: int, data: dict[str, Any]) -> SmiGpu:
    def opt_int(v: Any) -> int | None:
        return v if isinstance(v, int) and not isinstance(v, bool) else None

    index = opt_int(data.get("index"))
    return SmiGpu(
        index=position if index is None else index,
        name=str(data.get("name") or ""),
        driver=str(data.get("driver") or ""),
        memory_mib=opt_int(data.get("memory_mib")),
        compute_cap=str(data["compute_cap"]) if data.get("compute_cap") else None,
        bus_id=str(data["bus_id"]) if data.get("bus_id") else None,
        uuid=str(data["uuid"]) if data.get("uuid") else None,
    )


@dataclass(frozen=True, kw_only=True)
class ValidationReport:
    schema: int
    verdict: str
    verdict_reason: str
    target: str
    started: str
    image_digest: str | None
    gpus: tuple[SmiGpu, ...]
    checks: tuple[dict[str, Any], ...]

    @property
    def gpu_model(self) -> str:
        """``NVIDIA H200`` (or ``A + B`` on a mixed host)."""
        return " + ".join(sorted({g.name for g in self.gpus if g.name}))

    @property
    def driver(self) -> str:
        drivers = sorted({g.driver for g in self.gpus if g.driver})
        return drivers[0] if drivers else ""

    @property
    def figures(self) -> dict[str, float]:
        """:func:`report_figures` of this report."""
        return report_figures(self.checks)

    @property
    def link(self) -> str:
        return report_link(self.checks)

    @property
    def checks_verdict(self) -> str:
        """The verdict the checks give by validate's own rule (any failure → failed; no check passed, or GPU
        checks skipped for lack of a GPU → not validated; else passed): the ``verdict`` field is never taken
        at its word."""
        from imagesmith.validate.report import outcomes_of, verdict_of

        return verdict_of(outcomes_of(list(self.checks), self.schema)).verdict

    def validated_on(self, *, report_digest: str, date: str | None = None) -> ValidatedOn:
        """What a release index records of this report (its ``validated_on`` row): the GPU host, the date
        (*date*, else the start time), the published report's digest, the weakest link and the figures."""
        return ValidatedOn(
            gpu=self.gpu_model,
            count=len(self.gpus),
            driver=self.driver,
            date=self.started if date is None else date,
            report_digest=report_digest,
            link=self.link,
            figures=self.figures,
        )

    def failed(self) -> tuple[str, ...]:
        """``name: first line of its message`` of every failed check."""

        def first_line(c: dict[str, Any]) -> str:
            message = str(c.get("message") or "")
            return message.splitlines()[0] if message else "failed"

        return tuple(
            f"{c.get('name')}: {first_line(c)}" for c in self.checks if c.get("status") in ("failed", "")
        )

    @classmethod
    def parse(cls, body: bytes, *, source: str) -> ValidationReport:
        """A report.json's bytes; *source* (file or registry artifact) is named in every error. The shape is
        :data:`imagesmith.schema.VALIDATION_REPORT` (docs/schemas/validation-report.schema.json)."""
        try:
            data = inputs.loads_json(body, source, hint="pass the report.json imagesmith validate wrote")
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise ConfigError(
                f"{source}: not JSON ({exc})", hint="pass the report.json imagesmith validate wrote"
            ) from None
        schema.VALIDATION_REPORT.check(data, checker=_Reader(source))
        schema_version = data.get("schema", 1)
        target = str(data.get("target") or "")
        digest = (data.get("image") or {}).get("digest")
        if digest is None:
            m = _DIGEST_IN_REF.search(target)
            digest = m.group(1) if m else None
        checks = tuple(data.get("checks", []))
        if schema_version >= 2:
            raw = data.get("gpus") or []
        else:
            inventory = next((c for c in checks if c.get("name") == _SCHEMA1_INVENTORY_CHECK), None)
            raw = (inventory or {}).get("figures", {}).get("gpus") or []
        gpus = tuple(_gpu_from_json(i, g) for i, g in enumerate(raw) if isinstance(g, dict))
        return cls(
            schema=schema_version,
            verdict=str(data["verdict"]),
            verdict_reason=str(data.get("verdict_reason") or ""),
            target=target,
            started=str(data.get("started") or ""),
            image_digest=digest,
            gpus=gpus,
            checks=checks,
        )


def gpus_json(gpus: Sequence[SmiGpu]) -> list[dict[str, Any]]:
    """The ``gpus`` field of a schema-2 report from the suite's GPU facts."""
    return [{f: getattr(g, f) for f in GPU_FIELDS} for g in gpus]


def write_report(path: Path, document: Mapping[str, Any]) -> None:
    """Write *document* (schema :data:`SCHEMA`, the shape of :data:`imagesmith.schema.VALIDATION_REPORT`) as
    the report.json :meth:`ValidationReport.parse` reads back."""
    atomicio.write_atomic(path, json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")
