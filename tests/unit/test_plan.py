"""The planner: drop reasons, pins, drivers, NVIDIA_REQUIRE_CUDA, gencode, fingerprints and the CLI
outputs.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from imagesmith import compat
from imagesmith.errors import NothingToDoError
from imagesmith.lock import reference_lock_keys, reference_locks
from imagesmith.matrix import Matrix, load_matrix
from imagesmith.plan import build_plan, fingerprint, nvcc_gencode, require_cuda, with_fingerprint
from imagesmith.render import render_cell_files
from tests.repo import PROJECT

NCCL = """
[nccl_tests]
version = "v2.19.6"
commit = "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"
sha256 = "3c3b847c3ee4396d94defab52fef91ccc28c0e3a496e8e841cadd1870d9eb1c8"
"""


def _matrix(tmp_path: Path, name: str, body: str) -> Matrix:
    shutil.copy(PROJECT.registries_file, tmp_path / "registries.toml")
    path = tmp_path / f"{name}.toml"
    path.write_text(f"schema = 1\n{body}\n{NCCL}")
    return load_matrix(path)


UBUNTU = """
[base]
os = "ubuntu22.04"
image = "ubuntu:22.04"
python = "3.10"
[base.devel_images]
"12.1" = "nvidia/cuda:12.1.1-devel-ubuntu22.04"
"11.8" = "nvidia/cuda:11.8.0-devel-ubuntu22.04"
"""


def _reasons(plan: object) -> dict[str, str]:
    return {d.combination: d.reason for d in plan.dropped}  # type: ignore[attr-defined]


def test_cross_product_minus_impossible(tmp_path: Path) -> None:
    m = _matrix(
        tmp_path,
        "mix",
        """
gpus = ["a100-80gb-sxm4"]
flavors = ["runtime", "devel"]
shm_min = "8g"
registries = ["local-plain"]
[torch]
versions = ["2.1.2", "2.11.0"]
variants = ["cu121", "cu130"]
[python]
versions = ["3.10", "3.12"]
uv = "0.9.5"
managed = { "3.12" = "3.12.12" }
"""
        + UBUNTU,
    )
    plan = build_plan(m)
    reasons = _reasons(plan)
    assert len(plan.cells) + len(plan.dropped) == 2 * 2 * 2 * 2
    # variant never published
    assert "never published for cu130" in reasons["2.1.2-cu130-py3.10-runtime-ubuntu22.04"]
    assert "never published for cu121" in reasons["2.11.0-cu121-py3.12-runtime-ubuntu22.04"]
    # python outside torch's range
    assert "supports Python" in reasons["2.1.2-cu121-py3.12-runtime-ubuntu22.04"]
    assert "not 3.12" in reasons["2.1.2-cu121-py3.12-runtime-ubuntu22.04"]
    assert (
        "no lock imagesmith/data/locks/2.11.0-cu130-py3.10.txt"
        in reasons["2.11.0-cu130-py3.10-runtime-ubuntu22.04"]
    )
    # CUDA 13 devel needs no nvidia/cuda devel image (pip nvcc): dropped only for its missing lock
    assert reasons["2.11.0-cu130-py3.12-devel-ubuntu22.04"].startswith(
        "no lock imagesmith/data/locks/2.11.0-cu130-py3.12.txt"
    )
    # the locked, possible cells
    ids = {c.id for c in plan.cells}
    assert "2.1.2-cu121-py3.10-runtime-ubuntu22.04" in ids
    assert "2.1.2-cu121-py3.10-devel-ubuntu22.04" in ids
    cell = plan.cell("2.1.2-cu121-py3.10-devel-ubuntu22.04")
    assert cell.bases.devel_image == "nvidia/cuda:12.1.1-devel-ubuntu22.04"
    # the devel flavor starts FROM the devel image; nccl-tests is built with jammy's own toolkit (auto)
    assert cell.bases.builder_image == "ubuntu:22.04"
    assert cell.toolkit.nccl_toolkit == "distro"


def test_missing_lock_is_dropped_never_floated(tmp_path: Path) -> None:
    m = _matrix(
        tmp_path,
        "nolock",
        """
gpus = ["a100-80gb-sxm4"]
flavors = ["runtime"]
shm_min = "8g"
[torch]
versions = ["2.1.2"]
variants = ["cu121"]
[python]
versions = ["3.10"]
"""
        + UBUNTU,
    )
    plan = build_plan(m, lock_dir=tmp_path / "no-locks")
    assert plan.cells == ()
    (reason,) = _reasons(plan).values()
    # the project's locks folder is where it looked (shown relative to the project root when inside it)
    assert f"no lock {tmp_path / 'no-locks'}/2.1.2-cu121-py3.10.txt" in reason
    inside = replace(PROJECT, locks_dir=PROJECT.root / "locks-not-here")
    (reason,) = _reasons(build_plan(m, project=inside)).values()
    assert "no lock locks-not-here/2.1.2-cu121-py3.10.txt" in reason
    assert "never floats" in reason
    assert "imagesmith lock --matrix nolock" in reason


def test_arch_not_covered_is_dropped(tmp_path: Path) -> None:
    m = _matrix(
        tmp_path,
        "blackwell",
        """
gpus = ["rtx5090"]
flavors = ["runtime"]
shm_min = "8g"
[torch]
versions = ["2.1.2"]
variants = ["cu121"]
[python]
versions = ["3.10"]
"""
        + UBUNTU,
    )
    plan = build_plan(m)
    (reason,) = _reasons(plan).values()
    assert "have no kernels for" in reason
    assert "sm_120" in reason


def test_exclude_and_include(tmp_path: Path) -> None:
    m = _matrix(
        tmp_path,
        "rules",
        """
gpus = ["a100-80gb-sxm4"]
flavors = ["runtime", "devel"]
shm_min = "8g"
[torch]
versions = ["2.1.2", "2.2.2"]
variants = ["cu121"]
[python]
versions = ["3.10"]
[[exclude]]
torch = "2.{1,2}.*"
flavor = "devel"
reason = "no devel images this month"
[[include]]
torch = "2.3.1"
variant = "cu121"
python = "3.10"
flavor = "runtime"
"""
        + UBUNTU,
    )
    plan = build_plan(m)
    reasons = _reasons(plan)
    assert (
        reasons["2.1.2-cu121-py3.10-devel-ubuntu22.04"]
        == "excluded by the matrix: no devel images this month"
    )
    assert "2.2.2-cu121-py3.10-devel-ubuntu22.04" in reasons
    assert [c.id for c in plan.cells] == [
        "2.1.2-cu121-py3.10-runtime-ubuntu22.04",
        "2.2.2-cu121-py3.10-runtime-ubuntu22.04",
        "2.3.1-cu121-py3.10-runtime-ubuntu22.04",
    ]


def test_a100_cells_have_exact_paired_pins() -> None:
    plan = build_plan(load_matrix("a100"))
    variants = {c.stack.variant for c in plan.cells}
    assert variants == {"cu118", "cu121"}
    for cell in plan.cells:
        pins = dict(cell.lock.pins)
        release = compat.torch_release(cell.stack.torch)
        suffix = "" if cell.stack.variant == release.pypi_default else f"+{cell.stack.variant}"
        assert pins["torch"] == cell.stack.torch + suffix
        assert pins["torchvision"] == release.torchvision + suffix
        assert pins["torchaudio"] == (release.torchaudio or "") + suffix
        assert pins["numpy"].startswith("1."), "torch < 2.4 needs numpy 1.x"
        major = cell.stack.cuda.split(".")[0]
        assert pins[f"nvidia-nccl-cu{major}"] == release.variants[cell.stack.variant].nccl
        assert "triton" in pins
        assert all(not n.startswith("nvidia-") or n.endswith(f"-cu{major}") for n in pins)
        assert cell.stack.index_url == (
            None
            if cell.stack.variant == release.pypi_default
            else release.variants[cell.stack.variant].index_url
        )
        assert cell.lock.lock_verified == (cell.stack.variant == "cu121")
    cu118 = [c for c in plan.cells if c.stack.variant == "cu118"]
    assert cu118
    assert all(c.stack.cuda == "11.8" and str(c.hardware.min_driver.full) == "520.61.05" for c in cu118)
    cu121 = plan.cell("2.1.2-cu121-py3.10-runtime-ubuntu22.04")
    assert str(cu121.hardware.min_driver.full) == "530.30.02"
    assert str(cu121.hardware.min_driver.minor_version) == "525.60.13"
    assert cu121.hardware.archs == ("80",)
    assert (
        cu121.hardware.nvcc_gencode
        == "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=compute_80"
    )
    # 2.1.2 cu118: no published dependency metadata could be read here, so no lock and no cell
    assert (
        "no lock imagesmith/data/locks/2.1.2-cu118-py3.10.txt"
        in _reasons(plan)["2.1.2-cu118-py3.10-runtime-ubuntu22.04"]
    )


def test_require_cuda() -> None:
    v121 = require_cuda("12.1")
    assert v121.startswith("cuda>=12.1 brand=tesla,driver>=525,driver<526 ")
    assert "driver>=470" not in v121
    assert "driver>=530" not in v121
    assert "brand=geforce,driver>=525,driver<526" in v121
    assert require_cuda("13.0") == "cuda>=13.0"
    v118 = require_cuda("11.8")
    assert "brand=tesla,driver>=450,driver<451" in v118
    assert "brand=tesla,driver>=515,driver<516" in v118
    assert "driver>=520" not in v118
    v124 = require_cuda("12.4")
    assert all(f"driver>={b},driver<{b + 1}" in v124 for b in (525, 530, 535, 545))
    assert "driver>=550" not in v124


def test_nvcc_gencode() -> None:
    assert (
        nvcc_gencode(["9.0"])
        == "-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"
    )
    assert nvcc_gencode(["8.9", "8.0", "8.0"]) == (
        "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_89,code=sm_89 "
        "-gencode=arch=compute_89,code=compute_89"
    )


def test_fingerprint_stable_and_sensitive() -> None:
    m = load_matrix("smoke")
    (a,) = build_plan(m).cells
    (b,) = build_plan(load_matrix("smoke")).cells
    assert a.publish.fingerprint == b.publish.fingerprint
    assert len(a.publish.fingerprint) == 64
    unset = replace(a, publish=replace(a.publish, fingerprint=""))
    changes = {
        "base image": replace(unset, bases=replace(a.bases, base_image="debian:trixie")),
        "pin": replace(unset, lock=replace(a.lock, pins=(*a.lock.pins[:-1], (a.lock.pins[-1][0], "0.0.0")))),
        "builder pin": replace(unset, lock=replace(a.lock, builder_pins=a.lock.builder_pins[1:])),
        "source checksum": replace(unset, toolkit=replace(a.toolkit, nccl_tests_sha256="0" * 64)),
        "shm": replace(unset, hardware=replace(a.hardware, shm_min="1g", shm_min_bytes=1024**3)),
        "gencode": replace(
            unset, hardware=replace(a.hardware, nvcc_gencode="-gencode=arch=compute_80,code=sm_80")
        ),
        "mirror": replace(unset, publish=replace(unset.publish, mirror_runtime="tuna")),
    }
    seen = {a.publish.fingerprint}
    for what, changed in changes.items():
        fp = with_fingerprint(changed).publish.fingerprint
        assert fp not in seen, f"fingerprint blind to a change of {what}"
        seen.add(fp)
    # the label carrying the fingerprint does not feed into it
    files = render_cell_files(a)
    assert a.publish.fingerprint in files["Dockerfile"]
    assert fingerprint(a, {"Dockerfile": "x"}) != fingerprint(a, {"Dockerfile": "y"})


def test_plan_is_pure_and_deterministic() -> None:
    m = load_matrix("h100")
    assert build_plan(m) == build_plan(m)


def test_select_only() -> None:
    plan = build_plan(load_matrix("a100"))
    sub = plan.select(["2.{2,3}.*-cu118-*-runtime-*"])
    assert {c.stack.torch for c in sub.cells} == {"2.2.2", "2.3.1"}
    assert all(c.stack.variant == "cu118" and c.flavor == "runtime" for c in sub.cells)
    with pytest.raises(NothingToDoError, match="matched no cell"):
        plan.select(["9.9.9-*"])


def test_plan_json(run_cli: Callable[..., object]) -> None:
    result = run_cli("plan", "--matrix", "a100", "--json")
    assert result.exit_code == 0  # type: ignore[attr-defined]
    data = json.loads(result.stdout)  # type: ignore[attr-defined]
    cells = data["cells"]
    assert {c["cuda"] for c in cells} == {"11.8", "12.1"}
    for c in cells:
        for key in (
            "tag",
            "torch",
            "torchvision",
            "torchaudio",
            "python",
            "fingerprint",
            "dockerfile",
            "pins",
        ):
            assert c[key], key
        assert set(c["min_driver"]) == {"full", "minor_version"}
        assert c["require_cuda"].startswith(f"cuda>={c['cuda']}")
        assert Path(c["dockerfile"]).parts[:2] == ("dockerfiles", "a100")
        # matrices/registries.toml: Docker Hub and GHCR get every cell, Aliyun ACR only the runtime cells
        expected = [f"docker.io/imagesmith/torch:{c['tag']}", f"ghcr.io/imagesmith/torch:{c['tag']}"]
        if c["flavor"] == "runtime":
            expected.append(f"registry.cn-hangzhou.aliyuncs.com/imagesmith/torch:{c['tag']}")
        assert c["image_refs"] == expected


def test_plan_github(run_cli: Callable[..., object]) -> None:
    result = run_cli("plan", "--matrix", "a100", "--github", "--only", "*-runtime-*")
    assert result.exit_code == 0  # type: ignore[attr-defined]
    data = json.loads(result.stdout)  # type: ignore[attr-defined]
    assert list(data) == ["include"]
    assert data["include"]
    assert all(e["flavor"] == "runtime" for e in data["include"])
    cells = {e["cell"] for e in data["include"]}
    assert {(e["cell"], e["gpu"]) for e in data["include"]} == {
        (c, g) for c in cells for g in ("a100", "a800")
    }
    for entry in data["include"]:
        assert set(entry) >= {
            "cell",
            "gpu",
            "matrix",
            "tag",
            "torch",
            "cuda",
            "python",
            "dockerfile",
            "fingerprint",
        }
        assert all(isinstance(v, str) for v in entry.values())


def test_plan_explain(run_cli: Callable[..., object]) -> None:
    result = run_cli("plan", "--matrix", "a100", "--explain")
    assert result.exit_code == 0  # type: ignore[attr-defined]
    out: str = result.stdout  # type: ignore[attr-defined]
    assert "2.1.2-cu118-py3.10-runtime-ubuntu22.04: no lock" in out
    assert "2.1.2-cu121-py3.11-devel-ubuntu22.04: excluded by the matrix" in out
    assert "dropped" in out


def test_only_matching_nothing_exits_3(run_cli: Callable[..., object]) -> None:
    result = run_cli("plan", "--matrix", "smoke", "--only", "nothing-*")
    assert result.exit_code == 3  # type: ignore[attr-defined]
    assert "matched no cell" in result.stderr  # type: ignore[attr-defined]


def test_reference_locks_are_packaged_and_are_this_projects_locks() -> None:
    packaged = sorted(e.name for e in reference_locks().iterdir() if e.name.endswith(".txt"))
    assert packaged == sorted(p.name for p in PROJECT.locks_dir.glob("*.txt"))
    assert {k.filename for k in reference_lock_keys()} == set(packaged)


def test_cli_default_matrix_is_the_projects(run_cli: Callable[..., object]) -> None:
    assert PROJECT.default_matrix == "smoke"
    result = run_cli("plan", "--json")
    assert result.exit_code == 0  # type: ignore[attr-defined]
    assert json.loads(result.stdout)["cells"][0]["matrix"] == "smoke"  # type: ignore[attr-defined]


def test_min_driver_is_the_cuda_runtimes_not_the_newest_gpus_floor() -> None:
    """A cell's min driver (its label, the index entry `pick` filters by) is what its CUDA runtime needs: an
    A100 on 535 runs the smoke-cu12 cu124 image although the same matrix lists the H200, whose first driver
    (550.90.07) is applied per GPU by compat/pick, never folded into the image for every GPU."""
    plan = build_plan(load_matrix("smoke-cu12"))
    assert plan.cells
    h200_floor = compat.gpu_min_driver(compat.gpu("h200"))
    assert h200_floor is not None
    for cell in plan.cells:
        need = compat.min_driver(cell.stack.cuda)
        assert cell.hardware.min_driver == need, cell.id
        assert need.minor_version < h200_floor[0]
    a100 = compat.verdict("535.104.05", "a100-80gb-sxm4", "2.5.1", "12.4")
    h200 = compat.verdict("535.104.05", "h200", "2.5.1", "12.4")
    assert a100.compatible
    assert not h200.compatible
    assert h200.needs_driver is not None
