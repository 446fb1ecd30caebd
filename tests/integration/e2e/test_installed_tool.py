"""imagesmith as an installed tool, for real: its wheel in a fresh venv, a project made by `imagesmith init`
outside this checkout, and there `plan --json`, `render`, `render --check`, `fetch-sources` and a real
`build --push` into the local registries; then the commands a rental needs (compat, pick, validate) from the
wheel alone, in a folder with no project.

The engine's build cache may be warm (the scaffolded h200 cell pins what the smoke cell pins, so its torch
layer is shared); the push goes to a repository of its own, with --force so an earlier run's tags do not
turn the build into a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from imagesmith.registry import RegistryClient
from tests.localinfra import LocalRegistries, local_registries
from tests.repo import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.registry]


def _run(
    argv: list[str], *, cwd: Path, env: dict[str, str], timeout: int = 600
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    if proc.returncode != 0:
        pytest.fail(
            f"{' '.join(argv)} exited {proc.returncode}:\n{proc.stderr[-6000:]}\n{proc.stdout[-3000:]}"
        )
    return proc


@pytest.fixture(scope="module")
def venv_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """imagesmith's wheel (built from a copy of the sources, so the checkout stays clean), installed
    non-editable with its dependencies into a fresh venv.
    """
    tmp = tmp_path_factory.mktemp("installed")
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    shutil.copytree(REPO / "imagesmith", src / "imagesmith", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")
    _run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp / "dist"), str(src)],
        cwd=tmp,
        env=env,
    )
    (wheel,) = (tmp / "dist").glob("imagesmith-*.whl")
    python = shutil.which("python3") or sys.executable
    _run([python, "-m", "venv", str(tmp / "venv")], cwd=tmp, env=env)
    _run([str(tmp / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], cwd=tmp, env=env)
    return tmp / "venv" / "bin"


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def _env(regs: LocalRegistries, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IMAGESMITH_PROJECT", "PYTHONPATH"))}
    config = tmp / "config.toml"
    config.write_text(f'[registry_mirrors]\n"docker.io" = "{regs.plain}/hub"\n')
    env["IMAGESMITH_CONFIG"] = str(config)
    env.update(regs.auth_env())
    return env


def walkthrough() -> list[str]:
    """The `$` lines of docs/project.md's step-by-step block, in order."""
    text = (REPO / "docs" / "project.md").read_text(encoding="utf-8")
    block = text.split("```console", 1)[1].split("```", 1)[0]
    return [line[2:].strip() for line in block.splitlines() if line.startswith("$ ")]


def test_docs_walkthrough_is_what_this_test_runs() -> None:
    steps = walkthrough()
    assert steps[0].startswith("python3 -m venv")
    assert steps[1] == "pip install imagesmith"
    assert [s.split()[1] for s in steps[2:] if s.startswith("imagesmith ")] == [
        "init",
        "plan",
        "plan",
        "render",
        "render",
        "fetch-sources",
        "build",
    ]


def test_installed_wheel_follows_the_docs_init_plan_render_build_push(
    venv_bin: Path, regs: LocalRegistries, tmp_path: Path
) -> None:
    env = _env(regs, tmp_path)
    env["PATH"] = f"{venv_bin}:{env.get('PATH', '/usr/bin:/bin')}"
    if os.environ.get("IMAGESMITH_TEST_EXTRA_CA"):  # this machine's TLS interception, a run-time setting
        env["IMAGESMITH_EXTRA_CA"] = os.environ["IMAGESMITH_TEST_EXTRA_CA"]
    installed = _run(
        ["python", "-c", "import imagesmith; print(imagesmith.__file__)"], cwd=tmp_path, env=env
    ).stdout
    assert "site-packages" in installed
    assert not installed.startswith(str(REPO))

    work = tmp_path / "work"
    work.mkdir()
    cwd = work
    outputs: dict[str, str] = {}
    summary = tmp_path / "summary.json"
    for step in walkthrough():
        if step.startswith(("python3 -m venv", "pip install")):
            continue  # done by the venv_bin fixture, with the wheel of this checkout
        if step.startswith("cd "):
            cwd = cwd / step[3:].strip()
            continue
        command = step
        if step == "imagesmith build --push":
            command += f" --force --summary {summary}"
        timeout = 2400 if " build " in f" {step} " else 300
        outputs[step] = _run(["bash", "-c", command], cwd=cwd, env=env, timeout=timeout).stdout

    project = work / "gpu-images"
    assert cwd == project
    assert (project / "imagesmith.toml").is_file()
    plan = json.loads(outputs["imagesmith plan --json"])
    (cell,) = plan["cells"]
    assert cell["context"] == f"dockerfiles/h200/{cell['id']}"
    assert cell["image_refs"] == [f"{regs.plain}/gpu-images/torch:{cell['id']}"]
    assert "0 written" in outputs["imagesmith render"]  # init rendered already
    assert "is current" in outputs["imagesmith render --check"]
    assert str(REPO) not in (project / cell["dockerfile"]).read_text()
    assert "sha256" in outputs["imagesmith fetch-sources"]
    # from a subfolder, the project is found by walking up
    again = json.loads(_run(["imagesmith", "plan", "--json"], cwd=project / "matrices", env=env).stdout)
    assert again["cells"][0]["fingerprint"] == cell["fingerprint"]

    (outcome,) = json.loads(summary.read_text())["cells"]
    assert outcome["status"] == "pushed"
    client = RegistryClient(regs.plain, insecure=True)
    assert client.manifest_digest("gpu-images/torch", f"{cell['id']}-candidate") == outcome["digest"]

    # the image carries the imagesmith of this venv: the wheel made from its installed files
    suite = _run(
        ["python", "-c", "from imagesmith.build import suite_digest; print(suite_digest())"],
        cwd=tmp_path,
        env=env,
    ).stdout.strip()
    assert outcome["suite"] == suite
    ref = f"imagesmith/h200:{cell['id']}"
    labels = json.loads(
        _run(
            ["/usr/bin/docker", "image", "inspect", "--format", "{{json .Config.Labels}}", ref],
            cwd=tmp_path,
            env=env,
        ).stdout
    )
    assert labels["io.imagesmith.suite"] == suite
    assert labels["io.imagesmith.fingerprint"] == cell["fingerprint"]
    inside = _run(
        [
            "/usr/bin/docker",
            "run",
            "--rm",
            "--entrypoint",
            "/opt/venv/bin/imagesmith-validate",
            ref,
            "--help",
        ],
        cwd=tmp_path,
        env=env,
    )
    assert "--expect-gpu" in inside.stdout + inside.stderr

    # and into both local registries: the engine pushes once (plain HTTP), the registry API copies to the
    # other (TLS, credentials from the environment); both serve the same candidate digest
    init = ["imagesmith", "init", "two", "--gpu", "h200", "--registry", f"http://{regs.plain}/two-regs"]
    _run([*init, "--registry", f"{regs.auth}/two-regs"], cwd=work, env=env)
    summary2 = tmp_path / "two.json"
    _run(
        ["imagesmith", "build", "--push", "--force", "--summary", str(summary2)],
        cwd=work / "two",
        env=env,
        timeout=2400,
    )
    (two,) = json.loads(summary2.read_text())["cells"]
    assert two["status"] == "pushed"
    assert set(two["registries"]) == {"main", "copy-2"}
    for c in (regs.plain_client(), regs.auth_client()):
        assert c.manifest_digest("two-regs/torch", f"{cell['id']}-candidate") == two["digest"]


def test_the_wheel_alone_serves_a_rental(venv_bin: Path, tmp_path: Path) -> None:
    """compat, pick and validate need no project, no checkout and no Docker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMAGESMITH_PROJECT")}
    imagesmith = str(venv_bin / "imagesmith")
    smi = tmp_path / "nvidia-smi.txt"
    shutil.copy(REPO / "tests" / "data" / "nvsmi" / "r535_h100_sxm_x4.txt", smi)
    out = _run(
        [imagesmith, "compat", "--nvidia-smi", str(smi), "--torch", "2.1.2", "--cuda", "12.1", "--json"],
        cwd=tmp_path,
        env=env,
    )
    assert json.loads(out.stdout)["mode"] == "full"
    out = subprocess.run(
        [imagesmith, "pick", "--nvidia-smi", str(smi), "--index", str(tmp_path / "none.json")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    assert "fix:" in out.stderr
    assert "--expect-gpu" in _run([imagesmith, "validate", "--help"], cwd=tmp_path, env=env).stdout
    # a project command says how to get a project
    out = subprocess.run(
        [imagesmith, "plan"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False
    )
    assert out.returncode == 2
    assert "imagesmith init" in out.stderr
