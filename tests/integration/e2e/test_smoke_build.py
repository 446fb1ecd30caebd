"""End to end, for real: `imagesmith build --matrix smoke --push` with real CUDA torch wheels from the package
index (PyPI's default variant), nccl-tests compiled in the builder stage, pushed to both local registries.

What it proves: the image is built through imagesmith's registry-mirror map (debian:bookworm from the plain
registry's `hub/` prefix); both registries serve the same manifest digest under the candidate and
fingerprint tags, and its labels match the plan; after removing it locally and pulling it back, torch
imports and reports the planned version and CUDA; the entrypoint warns (with the fix) at 64 MB of /dev/shm
and is silent with enough; `ldconfig -p` lists libibverbs, the mlx5 provider and librdmacm (issue 32); and a
second `build --push` builds and pushes nothing.

Needs the nccl-tests source cache (scripts/setup.sh fills it from a local clone): without it the build fails
with the SourceCacheError message, and so does this test — it is never skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from imagesmith import sbom
from imagesmith.engine import Engine
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import build_plan
from imagesmith.refs import Registry
from imagesmith.registry import RegistryClient
from imagesmith.tags import candidate_tag, fingerprint_tag, staging_tag
from tests.localinfra import LocalRegistries, local_registries
from tests.repo import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.registry]


def _imagesmith(args: list[str], env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, "-m", "imagesmith", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"imagesmith {' '.join(args)} exited {proc.returncode}:\n"
            f"{proc.stderr[-6000:]}\n{proc.stdout[-3000:]}"
        )
    return proc


def pull_back_from_tls(cell: Cell, suite: str, regs: LocalRegistries) -> tuple[Engine, Registry, str]:
    """Remove the built image's local tags, then pull its candidate back from the TLS registry: (engine, that
    registry, the pulled reference)."""
    engine = Engine()
    tls = next(t for t in cell.publish.registries if t.name == "local-tls")
    ref = f"{tls.image}:{candidate_tag(cell)}"
    for name in (
        f"imagesmith/{cell.matrix}:{cell.id}",
        f"{cell.publish.registries[0].image}:{staging_tag(cell.publish.fingerprint, suite)}",
        ref,
    ):
        engine.remove(name, force=True)
    assert engine.inspect(ref) is None
    engine.pull(ref, credentials=regs.credentials)
    return engine, tls, ref


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture(scope="module")
def cli_env(regs: LocalRegistries, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    env = dict(os.environ)
    env["IMAGESMITH_CONFIG"] = str(
        tmp_path_factory.mktemp("cfg") / "config.toml"
    )  # no user config: flags/env only
    env["IMAGESMITH_REGISTRY_MIRRORS"] = f"docker.io={regs.plain}/hub"
    env.update(regs.auth_env())
    env.pop("IMAGESMITH_EXTRA_CA", None)
    return env


def test_smoke_build_push_pull_run_and_noop_rebuild(
    regs: LocalRegistries, cli_env: dict[str, str], tmp_path: Path
) -> None:
    plan = build_plan(load_matrix("smoke"))
    assert len(plan.cells) == 1
    cell = plan.cells[0]
    extra_ca = os.environ.get("IMAGESMITH_TEST_EXTRA_CA")
    ca_args = ["--extra-ca", extra_ca] if extra_ca else []

    # 1. build + push for real (--force: the registries of this machine may hold it from an earlier run)
    first = tmp_path / "first.json"
    _imagesmith(
        ["build", "--matrix", "smoke", "--push", "--force", "--summary", str(first), *ca_args], cli_env, 2400
    )
    row = json.loads(first.read_text())["cells"][0]
    assert row["status"] == "pushed", row
    digest = row["digest"]
    assert digest.startswith("sha256:")
    assert row["size_compressed"] > 1_000_000_000  # real CUDA torch wheels inside
    assert row["bytes_copied_api"] > 0 or row["bytes_pushed_engine"] >= 0

    # 2. digest parity + labels, through the registry API of both registries
    clients = {"local-plain": regs.plain_client(), "local-tls": regs.auth_client()}
    assert {t.name for t in cell.publish.registries} == set(clients)
    for target in cell.publish.registries:
        client: RegistryClient = clients[target.name]
        repo = target.repo
        assert client.manifest_digest(repo, candidate_tag(cell)) == digest, target.name
        assert (
            client.manifest_digest(repo, fingerprint_tag(cell.publish.fingerprint, row["suite"])) == digest
        ), target.name
        manifest = client.get_manifest(repo, digest)
        config_digest = manifest.json()["config"]["digest"]
        with client.get_blob(repo, config_digest) as resp:
            labels = json.loads(resp.content)["config"]["Labels"]
        assert labels["io.imagesmith.fingerprint"] == cell.publish.fingerprint
        assert labels["io.imagesmith.suite"] == row["suite"]
        assert labels["io.imagesmith.torch"] == cell.stack.torch
        assert labels["io.imagesmith.cuda"] == cell.stack.cuda
        # what release reads an index entry's fields from (issue 25): the plan's values, from the image itself
        from imagesmith.release import ReleaseCell, image_facts

        facts, planned = image_facts(client, repo, digest), ReleaseCell.from_plan(cell)
        assert (facts.torch, facts.torchvision, facts.cuda, facts.python) == (
            planned.torch,
            planned.torchvision,
            planned.cuda,
            planned.python,
        )
        assert (facts.arch, facts.min_driver, facts.shm.size) == (
            planned.arch,
            planned.min_driver,
            planned.shm_size,
        )

    # 3. remove locally, pull back from the TLS registry, run torch
    engine, tls, ref = pull_back_from_tls(cell, str(row["suite"]), regs)
    pulled = engine.inspect(ref)
    assert pulled is not None
    assert f"{tls.image}@{digest}" in pulled["RepoDigests"]
    out = engine.run_container(
        ref,
        ["python", "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
        shm_size="1g",
        timeout_s=300,
    )
    assert out.exit_code == 0, out.output
    version, cuda = out.output.strip().splitlines()[-1].split()
    assert version.split("+")[0] == cell.stack.torch
    assert cuda == cell.stack.cuda
    assert "WARNING" not in out.output  # enough /dev/shm: the entrypoint is silent

    # 4. the entrypoint's shm guard: 64 MB → loud warning with the fix, command still runs
    small = engine.run_container(ref, ["echo", "still-ran"], shm_size="64m", timeout_s=120)
    assert small.exit_code == 0
    assert "WARNING: /dev/shm is 64M" in small.output
    assert f"--shm-size={cell.hardware.shm_min}" in small.output
    assert "--ipc=host" in small.output
    assert "still-ran" in small.output

    # 5b. ready for a fabric (issue 32): rdma-core's userspace is in the image, so NCCL can dlopen libibverbs
    # for InfiniBand/RoCE instead of falling back to TCP sockets: the library, the mlx5 provider (its direct
    # library and the plugin libibverbs loads) and librdmacm, as the dynamic linker's cache lists them
    fabric = engine.run_container(
        ref,
        ["bash", "-c", "ldconfig -p; ls /usr/lib/*-linux-gnu/libibverbs/"],
        shm_size="1g",
        timeout_s=120,
    )
    assert fabric.exit_code == 0, fabric.output
    for lib in ("libibverbs.so.1", "libmlx5.so.1", "librdmacm.so.1"):
        assert f"\t{lib} (" in fabric.output, (lib, fabric.output[-3000:])
    assert "libmlx5-rdmav" in fabric.output, fabric.output[-3000:]

    # 6. the SBOM of the pushed image (issue 26), made from the image itself by syft: torch at its exact
    # version and every nvidia-* wheel of the lock with its locked sha256, every OS package dpkg lists and
    # every Python distribution the image's Python sees
    sbom_dir = tmp_path / "sbom"
    plain = next(t for t in cell.publish.registries if t.name == "local-plain")
    _imagesmith(
        [
            "sbom",
            f"{plain.image}@{digest}",
            "--out",
            str(sbom_dir),
            "--insecure",
            "--lock",
            str(REPO / cell.lock.lock_file),
        ],
        cli_env,
        1800,
    )
    doc = json.loads((sbom_dir / f"{sbom.stem(digest)}.spdx.json").read_text())
    summary = sbom.summarize(doc)
    listed = {(canonicalize_name(n), v) for n, v in summary.python_packages}
    pins = {(canonicalize_name(n), v.split("+")[0]) for n, v in cell.lock.pins}
    assert ("torch", cell.stack.torch) in listed
    nvidia = {p for p in pins if p[0].startswith("nvidia-")}
    assert nvidia
    assert nvidia <= listed, sorted(nvidia - listed)
    assert pins <= listed, sorted(pins - listed)
    assert summary.hashed >= len(pins)
    # installed packages only: one removed with its config files kept is in dpkg's database but not installed
    dpkg = engine.run_container(
        ref, ["dpkg-query", "-W", "-f", "${db:Status-Status}=${Package}\\n"], shm_size="1g", timeout_s=300
    )
    assert dpkg.exit_code == 0, dpkg.output
    in_image = {
        ln.strip().split("=", 1)[1] for ln in dpkg.output.splitlines() if ln.strip().startswith("installed=")
    }
    assert len(in_image) > 50, dpkg.output[-2000:]
    os_listed = {n for n, _ in summary.os_packages}
    assert os_listed == in_image, sorted(in_image ^ os_listed)
    seen = engine.run_container(
        ref,
        [
            "python",
            "-c",
            "import importlib.metadata as m, json; "
            "print(json.dumps(sorted({(d.metadata['Name'], d.version) for d in m.distributions()})))",
        ],
        shm_size="1g",
        timeout_s=300,
    )
    assert seen.exit_code == 0, seen.output
    dists = {(canonicalize_name(n), v) for n, v in json.loads(seen.output.strip().splitlines()[-1])}
    assert dists <= listed, sorted(dists - listed)

    # 5. second run: nothing built, nothing pushed
    second = tmp_path / "second.json"
    _imagesmith(["build", "--matrix", "smoke", "--push", "--summary", str(second), *ca_args], cli_env, 600)
    row2 = json.loads(second.read_text())["cells"][0]
    assert row2["status"] == "skipped", row2
    assert (row2["bytes_pushed_engine"], row2["bytes_copied_api"], row2["steps"]) == (0, 0, 0)
    assert row2["digest"] == digest
