"""End to end, for real: the CUDA 12 cell (matrices/smoke-cu12.toml: PyPI's default torch 2.5.1, cu124, on
debian:bookworm, A100 + H200) built with no nvidia/cuda image anywhere (issue 11): nccl-tests is compiled in a
builder stage that is debian:bookworm itself plus Debian's own nvidia-cuda-toolkit 11.8 (non-free), then
`imagesmith build --push` to both local registries.

What it proves: both registries serve the same digest; after removing it locally and pulling it back, torch
imports and reports CUDA 12.4; `ldd all_reduce_perf` resolves libnccl.so.2 to the image's torch NCCL (the
nvidia-nccl wheel in the venv) and no libcudart (linked statically); `all_reduce_perf --help` runs; the
entrypoint's shm guard warns at 64 MB; and the nccl-tests binaries copied out of the image need no GLIBC_
version newer than the image's glibc and carry sm_80 + sm_90 SASS and compute_90 PTX.

Needs the nccl-tests source cache (scripts/setup.sh fills it) and Debian's non-free archive (through the
build-time apt mirror, if one is set): never skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagesmith import fatbin
from imagesmith.matrix import load_matrix
from imagesmith.model import NCCL_TESTS_BIN
from imagesmith.plan import build_plan
from imagesmith.registry import RegistryClient
from imagesmith.tags import candidate_tag
from imagesmith.templating import render_cell_files, site_packages
from tests.glibc import glibc_needs, too_new
from tests.integration.e2e.test_smoke_build import pull_back_from_tls
from tests.localinfra import LocalRegistries, local_registries

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.registry]

BINARIES = ("all_reduce_perf", "all_gather_perf", "sendrecv_perf")


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def _build(env: dict[str, str], summary: Path) -> dict[str, object]:
    ca = os.environ.get("IMAGESMITH_TEST_EXTRA_CA")
    args = ["build", "--matrix", "smoke-cu12", "--push", "--force", "--summary", str(summary)]
    args += ["--extra-ca", ca] if ca else []
    proc = subprocess.run(
        [sys.executable, "-m", "imagesmith", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"imagesmith {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-6000:]}")
    row: dict[str, object] = json.loads(summary.read_text())["cells"][0]
    return row


def _copy_out(ref: str, names: tuple[str, ...], dest: Path) -> list[Path]:
    """`docker create` + `docker cp`: the binaries as files on this machine (what the H200 evidence runs)."""
    cid = subprocess.run(
        ["docker", "create", ref, "true"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        out = []
        for name in names:
            subprocess.run(["docker", "cp", f"{cid}:{NCCL_TESTS_BIN}/{name}", str(dest / name)], check=True)
            out.append(dest / name)
        return out
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False)


def test_cuda12_cell_built_without_nvidia_cuda_images(regs: LocalRegistries, tmp_path: Path) -> None:
    (cell,) = build_plan(load_matrix("smoke-cu12")).cells
    assert (cell.stack.cuda, cell.toolkit.nccl_toolkit, cell.bases.builder_image) == (
        "12.4",
        "distro",
        "debian:bookworm",
    )
    assert cell.toolkit.distro_toolkit is not None
    assert cell.toolkit.distro_toolkit.cuda == "11.8"
    dockerfile = render_cell_files(cell)["Dockerfile"]
    assert "nvidia/cuda:" not in dockerfile
    assert "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90" in dockerfile

    env = dict(os.environ)
    env["IMAGESMITH_CONFIG"] = str(tmp_path / "config.toml")  # no user config: flags/env only
    env["IMAGESMITH_REGISTRY_MIRRORS"] = f"docker.io={regs.plain}/hub"
    env.update(regs.auth_env())
    env.pop("IMAGESMITH_EXTRA_CA", None)

    # 1. build + push for real
    row = _build(env, tmp_path / "summary.json")
    assert row["status"] == "pushed", row
    digest = str(row["digest"])
    assert digest.startswith("sha256:")
    assert int(str(row["size_compressed"])) > 1_000_000_000  # real CUDA torch wheels inside

    # 2. digest parity through the registry API of both registries
    clients = {"local-plain": regs.plain_client(), "local-tls": regs.auth_client()}
    assert {t.name for t in cell.publish.registries} == set(clients)
    for target in cell.publish.registries:
        client: RegistryClient = clients[target.name]
        assert client.manifest_digest(target.repo, candidate_tag(cell)) == digest, target.name

    # 3. remove locally, pull back from the TLS registry
    engine, _, ref = pull_back_from_tls(cell, str(row["suite"]), regs)

    # 4. torch imports and reports CUDA 12.4
    out = engine.run_container(
        ref,
        ["python", "-c", "import torch; print(torch.__version__, torch.version.cuda)"],
        shm_size="1g",
        timeout_s=300,
    )
    assert out.exit_code == 0, out.output
    version, cuda = out.output.strip().splitlines()[-1].split()
    assert version.split("+")[0] == cell.stack.torch
    assert cuda == "12.4"
    assert "WARNING" not in out.output

    # 5. nccl-tests: torch's NCCL, static cudart, --help runs; the image's glibc
    nccl_lib = f"{site_packages(cell)}/nvidia/nccl/lib/libnccl.so.2"
    script = (
        f"set -e; ldd {NCCL_TESTS_BIN}/all_reduce_perf; echo ---; "
        f"{NCCL_TESTS_BIN}/all_reduce_perf --help; echo ---; getconf GNU_LIBC_VERSION"
    )
    out = engine.run_container(ref, ["bash", "-c", script], shm_size="1g", timeout_s=120)
    assert out.exit_code == 0, out.output
    ldd, usage, libc = out.output.split("---")
    assert f"libnccl.so.2 => {nccl_lib}" in ldd, ldd
    assert "not found" not in ldd, ldd
    assert "libcudart" not in ldd, ldd  # CUDA 11.8's cudart is linked statically
    assert "USAGE" in usage.upper(), usage
    name, glibc = libc.split()
    assert name == "glibc"

    # 6. the shm guard: 64 MB → loud warning with the fix, command still runs
    small = engine.run_container(ref, ["echo", "still-ran"], shm_size="64m", timeout_s=120)
    assert small.exit_code == 0
    assert "WARNING: /dev/shm is 64M" in small.output
    assert f"--shm-size={cell.hardware.shm_min}" in small.output
    assert "still-ran" in small.output

    # 7. the binaries, copied out: no GLIBC_ need newer than the image's glibc; SASS for both GPUs + PTX
    binaries = _copy_out(ref, BINARIES, tmp_path)
    for path in binaries:
        assert glibc_needs(path), path  # dynamically linked against glibc: the check has something to check
        assert too_new(path, glibc) == [], (path.name, glibc, glibc_needs(path))
        report = fatbin.scan(path.read_bytes())
        assert {80, 90} <= set(report.sass), (path.name, report.to_json())
        assert 90 in report.ptx, (path.name, report.to_json())
