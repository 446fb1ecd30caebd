"""pytest plugin that runs the suite for imagesmith: builds the Context, records every check, writes the
bundle.

Loaded with ``-p imagesmith.validate.plugin`` in the child pytest that :mod:`imagesmith.validate.runner`
starts.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any

import pytest

from imagesmith import settings
from imagesmith.validate.context import (
    OPTIONS_ENV,
    SKIP_NO_GPU,
    CheckFailed,
    Context,
    NoGpuVisible,
    SuiteOptions,
    target_host,
)
from imagesmith.validate.report import CheckOutcome, write_bundle

#: checks that run only with ``--soak``
SOAK_CHECKS = ("test_soak",)


class ValidatePlugin:
    def __init__(self, options: SuiteOptions) -> None:
        self.options = options
        self.context = Context(options, target_host(options))
        self.outcomes: dict[str, CheckOutcome] = {}
        self.started = time.time()
        self.all_checks: list[str] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        # the soak runs only when asked for (--soak DURATION): without it, it is not a check of this run
        if not self.options.soak_s:
            items[:] = [item for item in items if item.name not in SOAK_CHECKS]
        # before -k deselects: a run that leaves checks out is never a full "passed"
        self.all_checks = [item.name for item in items]

    def _outcome(self, report: pytest.TestReport) -> CheckOutcome:
        name = report.nodeid.split("::")[-1]
        module = report.nodeid.split("::")[0].rsplit("/", 1)[-1]
        return self.outcomes.setdefault(name, CheckOutcome(name=name, module=module))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """What a failed or skipped check says, from the call's excinfo (as pytest's skipping plugin reads
        it): a :class:`~imagesmith.validate.context.CheckFailed`'s fields, a skip's reason (a ``skip`` call,
        a skip marker: both raise pytest's Skipped in the call)."""
        report = yield
        raised = call.excinfo.value if call.excinfo is not None else None
        if isinstance(raised, CheckFailed):
            report.imagesmith_failure = (raised.what.strip(), raised.fix.strip())  # type: ignore[attr-defined]
        elif isinstance(raised, pytest.skip.Exception):
            report.imagesmith_skip = (  # type: ignore[attr-defined]
                str(raised.msg or ""),
                SKIP_NO_GPU if isinstance(raised, NoGpuVisible) else "",
            )
        return report

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        out = self._outcome(report)
        out.duration_s += report.duration
        if report.skipped and out.status in ("", "passed"):
            out.status = "skipped"
            out.message, out.skip = getattr(report, "imagesmith_skip", ("", ""))
        elif report.failed:
            out.status = "failed"
            failure = getattr(report, "imagesmith_failure", None)
            if failure is not None:
                out.message, out.fix = failure
            else:
                out.message = report.longreprtext.strip()[-1500:]
                out.fix = "this is a failure of the check itself: report it with the log above"
        elif report.passed and report.when == "call" and out.status == "":
            out.status = "passed"

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        for name, rec in self.context.records.items():
            if name in self.outcomes:
                self.outcomes[name].figures = rec.figures
                self.outcomes[name].warnings = list(rec.warnings)
        collection_error = exitstatus in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR) or (
            session.testsfailed and not self.outcomes
        )
        facts: dict[str, Any] = dict(self.context.facts)
        self.context.cleanup()
        write_bundle(
            self.options,
            list(self.outcomes.values()),
            facts=facts,
            logs=self.context.logs,
            all_checks=self.all_checks,
            started=self.started,
            finished=time.time(),
            suite_error="pytest could not run the suite (see its output)" if collection_error else None,
        )


def pytest_configure(config: pytest.Config) -> None:
    raw = settings.get(OPTIONS_ENV)
    if raw is None:
        raise pytest.UsageError(f"{OPTIONS_ENV} is not set: run the suite through imagesmith validate")
    config.pluginmanager.register(ValidatePlugin(SuiteOptions.from_json(raw)), "imagesmith-validate")
