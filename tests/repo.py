"""This repository as an imagesmith project (its imagesmith.toml): matrices/, dockerfiles/, the locks."""

from __future__ import annotations

from pathlib import Path

from imagesmith.project import Project, load_project

REPO = Path(__file__).resolve().parents[1]
PROJECT: Project = load_project(REPO / "imagesmith.toml")
