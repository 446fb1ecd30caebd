"""Negative controls of the validation suite against real containers on the local dockerd.

- /dev/shm of 64 MB fails the shm check with the fix in the message (and 2 GB passes it);
- expecting 8 GPUs where nvidia-smi shows 2 fails (nvidia-smi replays the real 2×H200 capture: this machine
  has no GPU);
- expecting NVLink where nvidia-smi shows one GPU fails (the real 1×H200 capture);
- a hung all_reduce_perf is killed and fails, a truncated or corrupted log fails parsing loudly, and the real
  H200 log passes — all through the real runner (imagesmith.validate.nccl) over testinfra's docker backend,
  with a fake all_reduce_perf in the container;
- ``imagesmith validate IMAGE`` on the smoke image built by ``imagesmith build`` runs end to end: GPU checks
  "skipped: no GPU visible", verdict "not validated", exit code 7.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith.engine import Engine
from imagesmith.validate.context import CheckRecord, Context, SuiteOptions
from imagesmith.validate.nccl import run_allreduce_rounds
from tests.repo import REPO

BASE = "127.0.0.1:5000/hub/library/debian:bookworm"
H200 = REPO / "tests" / "data" / "validate" / "h200x2"

FAKE_SMI = """#!/bin/sh
# replays nvidia-smi output captured on a lent H200 machine (2xH200 or 1xH200)
D=/fake/@CAPTURE@
case "$*" in
  "") cat $D/nvidia-smi.txt ;;
  "-L") cat $D/nvidia-smi-L.txt ;;
  "--version") echo "NVIDIA-SMI version  : 580.159.04" ;;
  "--query-gpu=index,name,uuid,pci.bus_id,driver_version,memory.total --format=csv,noheader,nounits")
    tail -n +2 $D/nvidia-smi-query.csv | cut -d, -f1-6 | sed 's/ MiB//' ;;
  "topo -m") cat $D/topo-m.txt ;;
  "topo -p2p n") cat $D/topo-p2p-n.txt ;;
  *) echo "Field is not a valid field to query." >&2; exit 2 ;;
esac
"""

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def engine() -> Engine:
    return Engine()


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("fake")
    for capture in ("h200x2", "h200x1"):
        shutil.copytree(H200.parent / capture, d / capture)
        smi = d / f"nvidia-smi-{capture}"
        smi.write_text(FAKE_SMI.replace("@CAPTURE@", capture))
        smi.chmod(0o755)
    log = (H200 / "all_reduce_perf-1.log").read_text()
    scripts = {
        "hang": "#!/bin/sh\necho '# nccl-tests version 2.19.6'\nexec sleep 600\n",
        "truncated": f"#!/bin/sh\ncat <<'EOF'\n{log[: log.index('     1048576')]}EOF\n",
        "corrupted": "#!/bin/sh\ncat <<'EOF'\n"
        + log.replace("       65536         16384     float", "       65536     flo@t")
        + "EOF\n",
        "good": f"#!/bin/sh\ncat <<'EOF'\n{log}EOF\n",
    }
    for name, text in scripts.items():
        p = d / name / "all_reduce_perf"
        p.parent.mkdir()
        p.write_text(text)
        p.chmod(0o755)
    return d


@pytest.fixture
def container(engine: Engine, fake_dir: Path) -> Iterator[Callable[..., str]]:
    started: list[Any] = []

    def start(shm_size: str = "64m", fake_smi: str | None = None) -> str:
        """fake_smi: "h200x2" or "h200x1", the capture an nvidia-smi on the PATH replays."""
        volumes = {str(fake_dir): {"bind": "/fake", "mode": "ro"}}
        if fake_smi:
            volumes[str(fake_dir / f"nvidia-smi-{fake_smi}")] = {
                "bind": "/usr/local/bin/nvidia-smi",
                "mode": "ro",
            }
        c = engine.client.containers.run(
            BASE,
            ["sleep", "infinity"],
            detach=True,
            shm_size=shm_size,
            volumes=volumes,
            name=f"imagesmith-validate-{uuid.uuid4().hex[:8]}",
        )
        started.append(c)
        return str(c.name)

    yield start
    for c in started:
        c.remove(force=True)


def _report(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "report.json").read_text())
    return data


def _check(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in report["checks"] if c["name"] == name)


def test_shm_64m_fails_with_the_fix_and_2g_passes(
    container: Callable[..., str], run_cli: Any, tmp_path: Path
) -> None:
    small = container(shm_size="64m")
    r = run_cli(
        "validate",
        f"docker://{small}",
        "-k",
        "test_shm_size",
        "--shm-min",
        "1g",
        "--report",
        str(tmp_path / "a"),
    )
    assert r.exit_code == 7
    c = _check(_report(tmp_path / "a"), "test_shm_size")
    assert c["status"] == "failed"
    assert "/dev/shm is 64 MiB, less than the 1 GiB" in c["message"]
    assert "--shm-size=1g" in c["fix"]
    assert "--ipc=host" in c["fix"]
    assert c["figures"]["size_bytes"] == 64 * 1024**2
    md = (tmp_path / "a" / "report.md").read_text()
    assert md.startswith("# Validation: FAILED")
    assert "--shm-size=1g" in md
    assert (tmp_path / "a" / "junit.xml").read_text().count("<failure") == 1

    big = container(shm_size="2g")
    r = run_cli(
        "validate",
        f"docker://{big}",
        "-k",
        "test_shm_size",
        "--shm-min",
        "1g",
        "--report",
        str(tmp_path / "b"),
    )
    rep = _report(tmp_path / "b")
    assert _check(rep, "test_shm_size")["status"] == "passed"
    assert rep["verdict"] == "not validated"
    assert r.exit_code == 7


def test_expecting_8_gpus_where_there_are_2_fails(
    container: Callable[..., str], run_cli: Any, tmp_path: Path
) -> None:
    name = container(fake_smi="h200x2")
    r = run_cli(
        "validate",
        f"docker://{name}",
        "-k",
        "test_gpu_inventory",
        "--expect-count",
        "8",
        "--expect-gpu",
        "H200 141GB",
        "--report",
        str(tmp_path / "eight"),
    )
    assert r.exit_code == 7
    c = _check(_report(tmp_path / "eight"), "test_gpu_inventory")
    assert c["status"] == "failed"
    assert c["message"].startswith("expected 8 GPUs, nvidia-smi shows 2: 0: NVIDIA H200, 1: NVIDIA H200")
    assert "provider" in c["fix"]
    run_cli(
        "validate",
        f"docker://{name}",
        "-k",
        "test_gpu_inventory or test_topology",
        "--expect-count",
        "2",
        "--expect-nvlink",
        "--report",
        str(tmp_path / "two"),
    )
    rep = _report(tmp_path / "two")
    assert _check(rep, "test_gpu_inventory")["status"] == "passed"
    topo = _check(rep, "test_topology")
    assert topo["status"] == "passed"
    assert topo["figures"]["pairs"] == [{"a": "GPU0", "b": "GPU1", "link": "NV18"}]


def test_expecting_nvlink_on_one_gpu_fails(
    container: Callable[..., str], run_cli: Any, tmp_path: Path
) -> None:
    """A single visible GPU cannot prove the NVLink that was paid for (1xH200 capture replayed)."""
    name = container(fake_smi="h200x1")
    args = ["validate", f"docker://{name}", "-k", "test_gpu_inventory or test_topology"]
    r = run_cli(*args, "--expect-nvlink", "--report", str(tmp_path / "nv"))
    assert r.exit_code == 7
    rep = _report(tmp_path / "nv")
    assert _check(rep, "test_gpu_inventory")["status"] == "passed"
    topo = _check(rep, "test_topology")
    assert topo["status"] == "failed"
    assert topo["message"].startswith("NVLink was expected (--expect-nvlink), but this target shows 1 GPU")
    assert "--gpus all" in topo["fix"]
    # without the expectation one GPU is a plain topology pass (no pair to judge)
    run_cli(*args, "--report", str(tmp_path / "plain"))
    topo = _check(_report(tmp_path / "plain"), "test_topology")
    assert topo["status"] == "passed"
    assert topo["figures"]["pairs"] == []
    assert topo["figures"]["cpu_affinity"] == {"GPU0": "0-15"}


def _rounds(name: str, binary: str, tmp_path: Path, timeout: int = 30) -> CheckRecord:
    import testinfra

    opts = SuiteOptions(target=f"docker://{name}", report_dir=str(tmp_path), nccl_timeout_s=timeout)
    ctx = Context(opts, testinfra.get_host(opts.target))
    check = CheckRecord()
    run_allreduce_rounds(
        ctx,
        check,
        binary=binary,
        n_gpus=2,
        nccl_libdir="/nonexistent",
        floor_gbps=90.0,
        floor_basis="test",
        torch_nccl_code=22809,
    )
    return check


def test_hung_collective_is_killed_and_fails(container: Callable[..., str], tmp_path: Path) -> None:
    name = container()
    with pytest.raises(pytest.fail.Exception, match=r"round 1: all_reduce_perf hung — killed after 3 s"):
        _rounds(name, "/fake/hang/all_reduce_perf", tmp_path, timeout=3)
    assert "nccl-tests version" in (tmp_path / "nccl-allreduce-1.log").read_text()


def test_truncated_log_fails_loudly(container: Callable[..., str], tmp_path: Path) -> None:
    name = container()
    with pytest.raises(pytest.fail.Exception, match=r"round 1: .*footer .* is missing after 17 rows"):
        _rounds(name, "/fake/truncated/all_reduce_perf", tmp_path)


def test_corrupted_log_fails_loudly(container: Callable[..., str], tmp_path: Path) -> None:
    name = container()
    with pytest.raises(
        pytest.fail.Exception, match=r"round 1: .*line \d+: a data row has 12 columns, expected 13"
    ):
        _rounds(name, "/fake/corrupted/all_reduce_perf", tmp_path)


def test_real_h200_log_passes_the_same_runner(container: Callable[..., str], tmp_path: Path) -> None:
    name = container()
    check = _rounds(name, "/fake/good/all_reduce_perf", tmp_path)
    rounds = check.figures["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert rounds[0]["max_size_busbw"] == pytest.approx(329.38)
    assert check.figures["spread"] == 0.0
    assert check.figures["floor_gbps"] == 90.0
    assert "NCCL_NVLS_ENABLE=0" in check.figures["command"]


def test_run_with_plan_applies_the_image_flags(engine: Engine) -> None:
    """The container flags `imagesmith validate IMAGE` uses, on the real engine: shm from the plan, the plan's
    environment, and the ulimits — or, where the engine may not raise them (as on this machine's dockerd for
    memlock), a second run without them and a note saying so."""
    from imagesmith.validate.container import plan_image_run, run_with_plan

    config = engine.inspect(BASE)
    assert config is not None
    config = {**config, "Config": {**config["Config"], "Labels": {"io.imagesmith.shm-min": "512m"}}}
    plan = plan_image_run(config, shm_override=None, shm_min_override=None)
    assert plan.ulimits == {"memlock": -1, "stack": 67108864}
    result, note = run_with_plan(
        engine,
        BASE,
        ["sh", "-c", 'df -Pk /dev/shm | awk "NR==2 {print \\$2}"; ulimit -s; echo "$NCCL_NVLS_ENABLE"'],
        plan,
        gpus=None,
        timeout_s=60,
    )
    assert result.exit_code == 0, result.output
    shm_kib, stack, nvls = result.output.split()
    assert int(shm_kib) == 512 * 1024
    assert nvls == "0"  # multicast off, from the plan's environment
    if note:
        assert note.startswith("the engine refused the ulimits (")
        assert note.endswith("ran without them")
    else:
        assert stack == str(67108864 // 1024)


def test_a_missing_or_stopped_container_is_one_error_before_the_suite(
    engine: Engine, container: Callable[..., str], tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    """Issue 12, item 7: docker://no-such-container ran the whole suite (seven failed checks, exit 7)."""
    out = run_cli("validate", "docker://imagesmith-no-such-container", "--report", str(tmp_path / "a"))
    assert out.exit_code == 2
    assert "docker://imagesmith-no-such-container: no such container" in out.stderr
    assert "fix:" in out.stderr
    assert not (tmp_path / "a" / "report.json").exists()
    name = container()
    engine.client.containers.get(name).stop(timeout=1)
    out = run_cli("validate", f"docker://{name}", "--report", str(tmp_path / "b"))
    assert out.exit_code == 2
    assert "the container is exited, not running" in out.stderr
    assert f"docker start {name}" in out.stderr
