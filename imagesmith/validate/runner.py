"""Run the packaged suite in a child pytest and return the report it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from imagesmith.errors import ConfigError, ValidationFailed
from imagesmith.validate.context import OPTIONS_ENV, SuiteOptions

SUITE_DIR = Path(__file__).resolve().parent / "suite"


def pytest_argv(options: SuiteOptions, *, select: str | None, ini: Path) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        str(SUITE_DIR),
        "-p",
        "imagesmith.validate.plugin",
        "-p",
        "no:cacheprovider",
        "-c",
        str(ini),
        "--rootdir",
        str(SUITE_DIR),
        "--import-mode=importlib",
        "--junitxml",
        str(Path(options.report_dir) / "junit.xml"),
        "-o",
        "junit_family=xunit2",
        "-o",
        "junit_suite_name=imagesmith-validate",
        "-v",
        "-rfEs",
        "--tb=line",
        "--color=no",
    ]
    if select:
        argv += ["-k", select]
    return argv


def run_suite(options: SuiteOptions, *, select: str | None = None) -> dict[str, Any]:
    """Run every check against ``options.target``; write the bundle to ``options.report_dir``; return
    report.json.
    """
    report_dir = Path(options.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    report_json = report_dir / "report.json"
    if report_json.exists():
        report_json.unlink()
    with tempfile.TemporaryDirectory(prefix="imagesmith-validate-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        env = dict(os.environ)
        env[OPTIONS_ENV] = options.to_json()
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        # only our plugin: the suite must behave the same on hosts with many pytest plugins installed
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        proc = subprocess.run(pytest_argv(options, select=select, ini=ini), env=env, check=False)
    if not report_json.exists():
        raise ValidationFailed(
            f"the validation suite did not finish (pytest exit code {proc.returncode}); no report was "
            f"written to "
            f"{report_dir}",
            hint="read the pytest output above; a target that cannot be reached is the usual cause",
        )
    data: dict[str, Any] = json.loads(report_json.read_text())
    return data


def load_baseline(path: Path) -> tuple[float, str]:
    """The mean largest-size busbw of an earlier report.json (a recorded good run of the same host type)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--baseline {path}: cannot read it as a report.json ({exc})") from None
    for c in data.get("checks", []):
        if c.get("name") == "test_nccl_allreduce":
            value = c.get("figures", {}).get("max_size_busbw_mean")
            if isinstance(value, (int, float)) and value > 0:
                return float(value), f"{path} ({data.get('started', '?')})"
    raise ConfigError(
        f"--baseline {path}: it has no nccl all_reduce figures (test_nccl_allreduce.max_size_busbw_mean)",
        hint="pass the report.json of a passing run on the same kind of host",
    )
