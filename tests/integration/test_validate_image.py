"""End to end on this GPU-less machine, with the smoke image that `imagesmith build --matrix smoke` made
(tests/integration/e2e/test_smoke_build.py builds and pushes it first; pytest runs tests/integration/e2e
before this file):

- ``imagesmith validate IMAGE`` starts the image (its io.imagesmith.shm-min label → --shm-size), runs the
  baked-in ``imagesmith-validate`` inside, collects the bundle: every GPU check "skipped: no GPU visible",
  verdict "not validated", exit code 7 — never "passed";
- the multi-worker DataLoader check, with the image's torch, fails at Docker's default 64 MB of /dev/shm with
  the fix in the message, and passes at the image's requirement (256 MiB).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith.engine import Engine
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.tags import candidate_tag, local_ref

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

NO_GPU_CHECKS = {
    "test_gpu_inventory",
    "test_ecc_errors",
    "test_mig",
    "test_power_limit",
    "test_topology",
    "test_torch_sees_all_gpus",
    "test_cuda_kernel",
    "test_cudnn_conv",
    "test_bf16_tf32_matmul",
    "test_nccl_allreduce",
    "test_ddp_smoke",
    "test_checkpoint_round_trip",
}


INTERACTIVE_CHECKS = (
    "test_interactive_sshd_allows_keys_only",
    "test_interactive_image_has_no_ssh_host_key",
    "test_interactive_packages_at_their_pinned_versions",
)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


@pytest.fixture(scope="module")
def smoke_image(engine: Engine) -> str:
    cell = build_plan(load_matrix("smoke")).cells[0]
    candidates = [local_ref(cell), *(f"{t.image}:{candidate_tag(cell)}" for t in cell.publish.registries)]
    for ref in candidates:
        if engine.inspect(ref) is not None:
            return ref
    plain = f"{cell.publish.registries[0].image}:{candidate_tag(cell)}"
    try:
        engine.pull(plain)
    except Exception as exc:  # the engine's own error says why; this test must not be skipped
        pytest.fail(
            f"no smoke image here ({', '.join(candidates)}) and pulling {plain} failed ({exc}): run "
            "`imagesmith build --matrix smoke --push` (tests/integration/e2e/test_smoke_build.py does) first"
        )
    return plain


def test_validate_image_without_gpu_is_not_validated(smoke_image: str, run_cli: Any, tmp_path: Path) -> None:
    r = run_cli("validate", smoke_image, "--report", str(tmp_path))
    assert r.exit_code == 7, r.stdout + r.stderr
    assert "not validated" in r.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["verdict"] == "not validated"
    assert report["target"] == smoke_image
    checks = {c["name"]: c for c in report["checks"]}
    for name in NO_GPU_CHECKS:
        assert checks[name]["status"] == "skipped", name
        assert checks[name]["message"].startswith("no GPU visible"), checks[name]["message"]
    for name in (
        "test_record_stack",
        "test_numpy_torch_interop",
        "test_pip_check",
        "test_shm_size",
        "test_dataloader_shm",
        "test_nccl_same_library",
    ):
        assert checks[name]["status"] == "passed", (name, checks[name]["message"])
    record = checks["test_record_stack"]["figures"]
    assert record["torch"].startswith("2.11.0")
    assert record["nccl"]
    same = checks["test_nccl_same_library"]["figures"]
    assert same["torch_nccl"].endswith("libnccl.so.2")
    assert report["container"]["shm_size"] == "256m"
    md = (tmp_path / "report.md").read_text()
    assert md.startswith("# Validation: NOT VALIDATED")
    for name in ("junit.xml", "versions.txt", "pip-freeze.txt", "nvidia-smi.txt"):
        assert (tmp_path / name).is_file(), name
    for name in INTERACTIVE_CHECKS:  # the runtime flavor: skipped, saying why
        assert checks[name]["status"] == "skipped", name
        assert checks[name]["message"].startswith("not the interactive flavor"), checks[name]["message"]


@pytest.fixture(scope="module")
def interactive_image(engine: Engine) -> str:
    (cell,) = build_plan(load_matrix("smoke-interactive")).cells
    candidates = [local_ref(cell), *(f"{t.image}:{candidate_tag(cell)}" for t in cell.publish.registries)]
    for ref in candidates:
        if engine.inspect(ref) is not None:
            return ref
    plain = f"{cell.publish.registries[0].image}:{candidate_tag(cell)}"
    try:
        engine.pull(plain)
    except Exception as exc:  # the engine's own error says why; this test must not be skipped
        pytest.fail(
            f"no smoke interactive image here ({', '.join(candidates)}) and pulling {plain} failed ({exc}): "
            "tests/integration/e2e/test_smoke_interactive.py builds and pushes it first"
        )
    return plain


def test_validate_interactive_image_checks_its_flavor(
    interactive_image: str, run_cli: Any, tmp_path: Path
) -> None:
    r = run_cli("validate", interactive_image, "--report", str(tmp_path))
    assert r.exit_code == 7, r.stdout + r.stderr  # no GPU here: never "passed"
    checks = {c["name"]: c for c in json.loads((tmp_path / "report.json").read_text())["checks"]}
    for name in (*INTERACTIVE_CHECKS, "test_pip_check", "test_shm_size", "test_dataloader_shm"):
        assert checks[name]["status"] == "passed", (name, checks[name]["message"])
    sshd = checks["test_interactive_sshd_allows_keys_only"]["figures"]
    assert sshd["passwordauthentication"] == "no"
    assert sshd["permitrootlogin"] == "without-password"
    assert checks["test_interactive_image_has_no_ssh_host_key"]["figures"]["host_keys"] == []
    pins = checks["test_interactive_packages_at_their_pinned_versions"]["figures"]
    assert pins["jupyterlab"] == cell_pin("jupyterlab")
    assert pins["tensorboard"] == cell_pin("tensorboard")


def cell_pin(name: str) -> str:
    (cell,) = build_plan(load_matrix("smoke-interactive")).cells
    return dict(cell.lock.interactive_pins)[name]


@pytest.fixture
def smoke_container(engine: Engine, smoke_image: str) -> Iterator[Any]:
    started: list[Any] = []

    def start(shm: str) -> str:
        c = engine.client.containers.run(
            smoke_image,
            ["sleep", "infinity"],
            entrypoint=[],
            detach=True,
            shm_size=shm,
            name=f"imagesmith-validate-{uuid.uuid4().hex[:8]}",
        )
        started.append(c)
        return str(c.name)

    yield start
    for c in started:
        c.remove(force=True)


def test_dataloader_dies_at_64m_and_runs_at_the_image_requirement(
    smoke_container: Any, run_cli: Any, tmp_path: Path
) -> None:
    small = smoke_container("64m")
    run_cli("validate", f"docker://{small}", "-k", "dataloader", "--report", str(tmp_path / "small"))
    c = next(c for c in json.loads((tmp_path / "small" / "report.json").read_text())["checks"])
    assert c["status"] == "failed"
    assert c["message"].startswith("DataLoader workers died: ")
    assert "shared memory" in c["message"] or "Bus error" in c["message"]
    assert "--shm-size=" in c["fix"]
    ok = smoke_container("256m")
    run_cli("validate", f"docker://{ok}", "-k", "dataloader", "--report", str(tmp_path / "ok"))
    c = next(c for c in json.loads((tmp_path / "ok" / "report.json").read_text())["checks"])
    assert c["status"] == "passed", c["message"]
    assert c["figures"]["batches"] == 4
