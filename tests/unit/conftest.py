"""tests/unit: fakes and local files only — no Docker engine, no registry, no sshd, no network
(tests/integration has the rest); nothing shared between tests, so scripts/test.sh runs them on every core
(pytest -n auto). A unit test that asks for a service is a collection error here."""

from __future__ import annotations

from pathlib import Path

import pytest

SERVICE_MARKERS = ("docker", "registry", "e2e", "gpu", "netns")
UNIT = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # the hook sees the whole session's items: judge only those collected from this folder
    for item in items:
        if not item.path.resolve().is_relative_to(UNIT):
            continue
        marked = [m for m in SERVICE_MARKERS if item.get_closest_marker(m) is not None]
        if marked:
            raise pytest.UsageError(
                f"{item.nodeid} is marked {', '.join(marked)}: it needs a service; "
                "it belongs in tests/integration"
            )
