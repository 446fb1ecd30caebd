"""End to end, for real: the devel flavor of the smoke cell (matrices/smoke-devel.toml), built and pushed
after the smoke runtime cell (tests/integration/e2e/test_smoke_build.py runs first; if the runtime cell is
not in the registries yet, this test builds and pushes it).

What it proves: the CUDA 13 devel image is the runtime image plus g++/make and the pinned pip CUDA wheels —
`nvcc --version` inside it is release 13.0, nvcc compiles a kernel with the apt g++, and
torch.utils.cpp_extension finds CUDA_HOME; its manifest starts with the runtime cell's layers, torch's layer
included (same digest), and the engine push uploads only the devel layers (the registry already has the rest).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imagesmith.engine import Engine
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.tags import candidate_tag
from tests.localinfra import LocalRegistries, local_registries

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.registry]


def _build(matrix: str, env: dict[str, str], summary: Path, *extra: str) -> dict[str, object]:
    ca = os.environ.get("IMAGESMITH_TEST_EXTRA_CA")
    args = ["build", "--matrix", matrix, "--push", "--summary", str(summary), *extra]
    args += ["--extra-ca", ca] if ca else []
    proc = subprocess.run(
        [sys.executable, "-m", "imagesmith", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"imagesmith {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-6000:]}")
    row: dict[str, object] = json.loads(summary.read_text())["cells"][0]
    return row


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def test_cuda13_devel_cell_shares_the_torch_layer_and_has_nvcc(regs: LocalRegistries, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["IMAGESMITH_CONFIG"] = str(tmp_path / "config.toml")  # no user config: flags/env only
    env["IMAGESMITH_REGISTRY_MIRRORS"] = f"docker.io={regs.plain}/hub"
    env.update(regs.auth_env())
    env.pop("IMAGESMITH_EXTRA_CA", None)
    (runtime,) = build_plan(load_matrix("smoke")).cells
    (devel,) = build_plan(load_matrix("smoke-devel")).cells
    assert (devel.flavor, devel.bases.devel_image, devel.toolkit.nccl_toolkit) == ("devel", None, "pip")

    rt_row = _build("smoke", env, tmp_path / "runtime.json")  # skipped when test_smoke_build pushed it
    assert rt_row["status"] in ("skipped", "pushed"), rt_row
    row = _build("smoke-devel", env, tmp_path / "devel.json", "--force")
    assert row["status"] == "pushed", row

    client = regs.plain_client()
    plain = next(t for t in devel.publish.registries if t.name == "local-plain")
    repo = plain.repo
    rt_layers = client.get_manifest(repo, candidate_tag(runtime)).json()["layers"]
    dv_layers = client.get_manifest(repo, candidate_tag(devel)).json()["layers"]
    # the layer plan: torch and its CUDA wheels in layers of their own (docs/matrix.md "The layer plan")
    wheel_at = [i for i, x in enumerate(rt_layers) if int(x["size"]) > 100_000_000]
    wheel_bytes = sum(int(rt_layers[i]["size"]) for i in wheel_at)
    assert len(wheel_at) >= 5, wheel_at  # several wheel layers, not one fat one
    assert max(int(rt_layers[i]["size"]) for i in wheel_at) < 1_000_000_000
    assert wheel_bytes > 2_000_000_000
    # base, apt python, venv, the wheel layers, imagesmith, nccl-tests: the same blobs, in the same order
    # (then each cell's entrypoint, which names the cell, and the layer that removes the build context)
    shared = len(rt_layers) - 2
    assert max(wheel_at) < shared
    assert [x["digest"] for x in dv_layers[:shared]] == [x["digest"] for x in rt_layers[:shared]]
    new = [x for x in dv_layers if x["digest"] not in {y["digest"] for y in rt_layers}]
    assert new, "the devel cell has no layers of its own"
    new_bytes = sum(int(x["size"]) for x in new)
    # the engine uploaded the devel layers at most, never torch's again (0 when an earlier run on this machine
    # already left the devel layers in the registry: the engine then reports every layer as already there)
    assert 0 <= int(str(row["bytes_pushed_engine"])) <= new_bytes + 1_000_000, (row, new_bytes)
    # the devel cell adds g++/make and the CUDA 13 nvcc/headers/CCCL wheels (about 0.3 GB compressed), a small
    # part of the runtime image it shares (about 3 GB): far from a second copy of torch and its CUDA libraries
    runtime_bytes = sum(int(x["size"]) for x in rt_layers)
    assert new_bytes < runtime_bytes // 8, (new_bytes, runtime_bytes)
    assert max(int(x["size"]) for x in new) < 400_000_000  # no torch-sized layer again

    engine = Engine()
    ref = f"{plain.image}:{candidate_tag(devel)}"
    engine.pull(ref)
    script = (
        "set -e; nvcc --version; "
        "printf '__global__ void k(float *x) { x[threadIdx.x] *= 2; }\\n' > /tmp/k.cu; "
        "nvcc -gencode=arch=compute_90,code=sm_90 -c /tmp/k.cu -o /tmp/k.o; test -s /tmp/k.o; "
        'python -c "import torch.utils.cpp_extension as c; print(\\"CUDA_HOME=\\" + str(c.CUDA_HOME))"'
    )
    out = engine.run_container(ref, ["bash", "-c", script], shm_size="1g", timeout_s=300)
    assert out.exit_code == 0, out.output
    assert "release 13.0" in out.output, out.output
    assert "CUDA_HOME=/opt/venv/lib/python3.11/site-packages/nvidia/cu13" in out.output, out.output
