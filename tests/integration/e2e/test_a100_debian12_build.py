"""End to end, for real: a cell of the a100 matrix — the one users name first — built and pushed (issue 39):
`imagesmith build --matrix a100 --only 2.1.2-cu121-py3.11-runtime-debian12 --push --registries FILE`, the
cu121 torch 2.1.2 wheels from the default index on debian:bookworm (the a100 matrix's `[[extra_bases]]`: no
ubuntu:22.04 and no Docker Hub here), nccl-tests compiled with Debian's own CUDA 11.8 against the lock's
nvidia-nccl-cu12 2.18.1, pushed under the matrix's own registry names (dockerhub, ghcr, acr-hangzhou) put on
the two local registries by matrices/local/registries.toml (hosts taken from the test environment).

What it proves: every target serves one digest; pulled back from the TLS registry, torch imports as 2.1.2 with
CUDA 12.1 and kernels for sm_80 and sm_90; `ldd all_reduce_perf` resolves libnccl.so.2 to the venv's
nvidia-nccl-cu12 (2.18.1, as the label says) with the CUDA runtime linked statically; the labels carry the
cell's CUDA, NCCL, driver floors and fingerprint; the binaries copied out need no newer glibc than bookworm's
and carry sm_80 SASS + compute_80 PTX (what an H200 runs through the driver's JIT:
docs/evidence/h200x1-a100-cu121/).

Reuses what the other e2e tests fill: the nccl-tests source cache, the bookworm base, the wheel cache mount
and the nccl-tests builder's apt step (the smoke-cu12 cell's, same base and packages). Never skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagesmith import fatbin
from imagesmith.engine import Engine
from imagesmith.matrix import load_matrix
from imagesmith.model import NCCL_TESTS_BIN
from imagesmith.plan import build_plan
from imagesmith.registry import RegistryClient
from imagesmith.tags import candidate_tag, staging_tag
from imagesmith.templating import render_cell_files, site_packages
from tests.glibc import glibc_needs, too_new
from tests.integration.e2e.test_smoke_cu12_build import BINARIES, _copy_out
from tests.localinfra import LocalRegistries, local_registries
from tests.repo import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.registry]

CELL = "2.1.2-cu121-py3.11-runtime-debian12"


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def _registries_file(regs: LocalRegistries, dest: Path) -> Path:
    """matrices/local/registries.toml with the test environment's registry hosts."""
    text = (REPO / "matrices" / "local" / "registries.toml").read_text()
    text = text.replace('"127.0.0.1:5443"', f'"{regs.auth}"').replace('"127.0.0.1:5000"', f'"{regs.plain}"')
    dest.write_text(text)
    return dest


def test_a100_cu121_debian12_cell_built_pushed_and_linked(regs: LocalRegistries, tmp_path: Path) -> None:
    registries = _registries_file(regs, tmp_path / "registries.toml")
    (cell,) = build_plan(load_matrix("a100", registries_file=registries)).select([CELL]).cells
    assert (cell.stack.cuda, cell.stack.nccl_version, cell.runtime.python_source) == (
        "12.1",
        "2.18.1",
        "distro",
    )
    assert (cell.toolkit.nccl_toolkit, cell.bases.builder_image) == ("distro", "debian:bookworm")
    assert cell.toolkit.distro_toolkit is not None
    assert cell.toolkit.distro_toolkit.cuda == "11.8"
    assert [t.name for t in cell.publish.registries] == ["dockerhub", "ghcr", "acr-hangzhou"]
    assert "nvidia/cuda:" not in render_cell_files(cell)["Dockerfile"]

    env = dict(os.environ)
    env["IMAGESMITH_CONFIG"] = str(tmp_path / "config.toml")  # no user config: flags/env only
    env["IMAGESMITH_REGISTRY_MIRRORS"] = f"docker.io={regs.plain}/hub"
    env.update(regs.auth_env())
    env.pop("IMAGESMITH_EXTRA_CA", None)
    summary = tmp_path / "summary.json"
    args = ["build", "--matrix", "a100", "--only", CELL, "--push", "--force", "--registries", str(registries)]
    args += ["--summary", str(summary)]
    ca = os.environ.get("IMAGESMITH_TEST_EXTRA_CA")
    args += ["--extra-ca", ca] if ca else []
    proc = subprocess.run(
        [sys.executable, "-m", "imagesmith", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"imagesmith {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-6000:]}")
    (row,) = json.loads(summary.read_text())["cells"]
    assert (row["cell"], row["status"]) == (CELL, "pushed"), row
    digest = str(row["digest"])
    assert int(str(row["size_compressed"])) > 1_000_000_000  # the cu121 CUDA wheels are inside

    # one digest in every target (the engine pushed once; the rest were copied through the registry API)
    clients = {regs.plain: regs.plain_client(), regs.auth: regs.auth_client()}
    for target in cell.publish.registries:
        client: RegistryClient = clients[target.host]
        assert client.manifest_digest(target.repo, candidate_tag(cell)) == digest, target.name

    # pulled back from the TLS registry (ghcr's name here)
    engine = Engine()
    tls = next(t for t in cell.publish.registries if t.host == regs.auth)
    ref = f"{tls.image}:{candidate_tag(cell)}"
    for name in (
        f"imagesmith/{cell.matrix}:{cell.id}",
        f"{cell.publish.registries[0].image}:{staging_tag(cell.publish.fingerprint, str(row['suite']))}",
        ref,
    ):
        engine.remove(name, force=True)
    assert engine.inspect(ref) is None
    engine.pull(ref, credentials=regs.credentials)

    labels = engine.labels(ref)
    assert labels["io.imagesmith.cell"] == CELL
    assert labels["io.imagesmith.fingerprint"] == cell.publish.fingerprint
    assert (labels["io.imagesmith.cuda"], labels["io.imagesmith.nccl"]) == ("12.1", "2.18.1")
    assert labels["io.imagesmith.min-driver.full"] == "530.30.02"
    assert labels["io.imagesmith.min-driver.minor-version"] == "525.60.13"
    assert labels["org.opencontainers.image.base.name"] == "debian:bookworm"

    script = (
        "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.nccl.version()); "
        "print(torch._C._cuda_getArchFlags())"
    )
    out = engine.run_container(ref, ["python", "-c", script], shm_size="1g", timeout_s=300)
    assert out.exit_code == 0, out.output
    first, archs = out.output.strip().splitlines()[-2:]
    version, cuda, nccl = first.split(" ", 2)
    assert version == "2.1.2+cu121"
    assert cuda == "12.1"
    assert nccl == "(2, 18, 1)"
    assert {"sm_80", "sm_90"} <= set(archs.split()), archs

    nccl_lib = f"{site_packages(cell)}/nvidia/nccl/lib/libnccl.so.2"
    check = (
        f"set -e; ldd {NCCL_TESTS_BIN}/all_reduce_perf; echo ---; {NCCL_TESTS_BIN}/all_reduce_perf --help; "
        f"echo ---; ls {NCCL_TESTS_BIN}; echo ---; getconf GNU_LIBC_VERSION"
    )
    out = engine.run_container(ref, ["bash", "-c", check], shm_size="1g", timeout_s=120)
    assert out.exit_code == 0, out.output
    ldd, usage, listing, libc = out.output.split("---")
    assert f"libnccl.so.2 => {nccl_lib}" in ldd, ldd
    assert "not found" not in ldd, ldd
    assert "libcudart" not in ldd, ldd  # CUDA 11.8's cudart, linked statically
    assert "USAGE" in usage.upper(), usage
    assert set(BINARIES) <= set(listing.split()), listing
    _name, glibc = libc.split()

    for path in _copy_out(ref, BINARIES, tmp_path):
        assert glibc_needs(path), path
        assert too_new(path, glibc) == [], (path.name, glibc, glibc_needs(path))
        report = fatbin.scan(path.read_bytes())
        assert set(report.sass) == {80}, (path.name, report.to_json())
        assert set(report.ptx) == {80}, (path.name, report.to_json())
