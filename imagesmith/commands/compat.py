"""CLI commands of this area. Registered on the root app by imagesmith.cli."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
