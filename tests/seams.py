"""What a command hands its request layer, recorded for tests that call ``prepare`` directly: the project
looked for (``project_of``) and its lock held (``hold``)."""

from __future__ import annotations

from imagesmith.project import Project
from tests.repo import PROJECT


class Seams:
    """The command's part, recorded: the matrix each project lookup was for, the command each lock was for."""

    def __init__(self, project: Project = PROJECT) -> None:
        self.project = project
        self.asked: list[str | None] = []
        self.held: list[str] = []

    def project_of(self, matrix: str | None) -> Project:
        self.asked.append(matrix)
        return self.project

    def hold(self, project: Project, command: str) -> None:
        assert project is self.project
        self.held.append(command)
