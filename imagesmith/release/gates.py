"""The gates a release run is given: the vulnerability gate of ``[release.vulnerabilities]`` over scanner
reports, and the signed SBOMs found beside them (imagesmith.vulngate, imagesmith.sbom)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from imagesmith import inputs
from imagesmith.errors import ConfigError
from imagesmith.index import (
    VulnRecord,
)

if TYPE_CHECKING:
    from imagesmith.signing import PublicKey

from imagesmith.release.outcome import Gate, SbomFinder


def sbom_finder(dirs: Sequence[Path], trusted: Sequence[PublicKey]) -> SbomFinder:
    """The signed SBOMs (``sha256-<hex>.sbom.dsse.json``, imagesmith.sbom) in *dirs*, verified with
    *trusted*."""
    from imagesmith.sbom import find_signed_sbom

    return lambda digest: find_signed_sbom(dirs, digest, trusted)


def vulnerability_gate(scan_dirs: Sequence[Path], project_file: Path | None) -> Gate | None:
    """The gate of ``[release.vulnerabilities]`` (imagesmith.toml) over the reports in *scan_dirs*; None when
    neither is given (the gate is off)."""
    from imagesmith import vulngate
    from imagesmith.compat import today

    policy = vulngate.load_policy(project_file)
    if policy is None and not scan_dirs:
        return None
    for d in scan_dirs:
        if problem := inputs.folder_problem(d):
            raise ConfigError(
                f"--scan-reports {d}: {problem}",
                hint="pass the folder the scanner reports were saved in",
            )
    day = today()

    def check(digest: str) -> tuple[VulnRecord | None, list[str]]:
        verdict, reasons = vulngate.gate(scan_dirs, digest, policy, today=day)
        if verdict is None or reasons:
            return None, reasons
        return (
            VulnRecord(
                scanner=verdict.scan.scanner,
                report=", ".join(Path(p).name for p in verdict.scan.source.split(", ")),
                report_digest=verdict.scan.sha,
                fail_on=(policy.fail_on if policy else "critical"),
                allowlisted=verdict.allowlisted_ids(),
            ),
            [],
        )

    return check
