"""The validation report's data: what ``imagesmith validate`` writes (report.json) and ``imagesmith release``
reads, versioned.

Schema 2 (written now) carries the GPU inventory as a field (``gpus``: model, driver, memory, compute
capability and ids of every GPU the suite saw) next to the verdict, the target, the start time and the checks;
readers never look a check up by its name to learn what host ran. Schema 1 (earlier reports, e.g. the
committed H200 evidence) kept the inventory only in the figures of the ``test_gpu_inventory`` check:
:meth:`parse` reads it from there, and only for schema 1.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from imagesmith.errors import ConfigError
from imagesmith.nvsmi import SmiGpu

SCHEMA: Final[int] = 2
SUPPORTED: Final[tuple[int, ...]] = (1, 2)
_DIGEST_IN_REF = re.compile(r"@(sha256:[0-9a-f]{64})$")
_SCHEMA1_INVENTORY_CHECK: Final[str] = "test_gpu_inventory"


#: the fields of a GPU a report records (schema 2 ``gpus[]``), read back into :class:`SmiGpu`
GPU_FIELDS: Final[tuple[str, ...]] = (
    "index",
    "name",
    "driver",
    "memory_mib",
    "compute_cap",
    "bus_id",
    "uuid",
)


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
        """A report.json's bytes; *source* (file or registry artifact) is named in every error."""
        try:
            data = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ConfigError(
                f"{source}: not JSON ({exc})", hint="pass the report.json imagesmith validate wrote"
            ) from None
        if not isinstance(data, dict) or "verdict" not in data:
            raise ConfigError(
                f"{source}: no 'verdict' key", hint="pass the report.json imagesmith validate wrote"
            )
        schema = data.get("schema", 1)
        if schema not in SUPPORTED or isinstance(schema, bool):
            raise ConfigError(
                f"{source}: report schema {schema!r} is not one this imagesmith reads ({SUPPORTED})",
                hint="release with the imagesmith version that validated, or upgrade imagesmith",
            )
        target = str(data.get("target") or "")
        image = data.get("image")
        digest = (
            image.get("digest") if isinstance(image, dict) and isinstance(image.get("digest"), str) else None
        )
        if digest is None:
            m = _DIGEST_IN_REF.search(target)
            digest = m.group(1) if m else None
        checks = tuple(c for c in data.get("checks") or [] if isinstance(c, dict))
        if schema >= 2:
            raw = data.get("gpus") or []
        else:
            inventory = next((c for c in checks if c.get("name") == _SCHEMA1_INVENTORY_CHECK), None)
            raw = (inventory or {}).get("figures", {}).get("gpus") or []
        gpus = tuple(_gpu_from_json(i, g) for i, g in enumerate(raw) if isinstance(g, dict))
        return cls(
            schema=int(schema),
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
