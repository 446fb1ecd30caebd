"""For real, the nccl-tests builder stage ONLY (`--target nccl-tests`) of a Debian 13 cell: the trixie row
of imagesmith/data/toolkits.toml (nvidia-cuda-toolkit 12.4 from non-free, g++-13, libcu++-dev) on a
debootstrapped debian:trixie, the way a new user gets there: a project with a trixie matrix (torch 2.8.0,
PyPI's cu128, Python 3.13 = trixie's python3; A100 + H200 + B200), `imagesmith lock`, `imagesmith render`,
then the stage built from the context `imagesmith build` stages, with its build args and CA secret.

What it proves: the stage builds (it did not before libcu++-dev: CUDA 12.4's cuda_fp16.hpp includes
<nv/target>); the binaries need no GLIBC_ version newer than debian:trixie's glibc (the final stage's base),
carry sm_80 + sm_90 SASS and compute_90 PTX (B200's sm_100 is above nvcc 12.4's sm_90: no SASS, the PTX is
JIT-compiled there), and link libnccl.so.2 but no libcudart (static).

Cost: about 2 minutes cold on the CI machine (a ~1 GB apt download, nvidia-cuda-dev being 934 MB, and the
compile), seconds warm (BuildKit cache), plus ~25 s for the lock; the image (~1.4 GB, the unpacked
toolkit) is removed at the end. Needs the debian:trixie base in the plain local registry: scripts/test.sh runs
`scripts/setup.sh --debian trixie` (scripts/debian-base.sh trixie, ~1 min once). LEAD: a candidate for CI
(never skipped: a missing base fails with the command to run).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from imagesmith import fatbin
from imagesmith.build import build_args, build_secrets, stage_context
from imagesmith.config import load_config
from imagesmith.engine import Engine
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.project import discover
from tests.glibc import glibc_needs, too_new
from tests.integration.e2e.test_smoke_cu12_build import _copy_out
from tests.localinfra import LocalRegistries, local_registries
from tests.repo import PROJECT

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.registry]

BINARIES = ("all_reduce_perf", "all_gather_perf", "sendrecv_perf")
SMOKE_CU12 = load_matrix("smoke-cu12", project=PROJECT)
MATRIX = f"""schema = 1
name = "trixie"
description = "the trixie toolkit row, builder stage only"
gpus = ["a100-80gb-sxm4", "h200", "b200"]
flavors = ["runtime"]
shm_min = "1g"
registries = ["local-plain"]

[torch]
versions = ["2.8.0"]
variants = ["cu128"]

[python]
versions = ["3.13"]

[base]
os = "debian13"
image = "debian:trixie"
python = "3.13"

[nccl_tests]
version = "{SMOKE_CU12.nccl_tests.version}"
commit = "{SMOKE_CU12.nccl_tests.commit}"
sha256 = "{SMOKE_CU12.nccl_tests.sha256}"
toolkit = "distro"

[mirror]
build = "none"
runtime = "none"
"""


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def _trixie_base(regs: LocalRegistries) -> None:
    req = urllib.request.Request(
        f"http://{regs.plain}/v2/hub/library/debian/manifests/trixie",
        method="HEAD",
        headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=10):
            return
    except OSError as exc:
        pytest.fail(
            f"no debian:trixie base in the plain local registry ({exc}): run `scripts/debian-base.sh trixie` "
            "as root (scripts/setup.sh --debian trixie; scripts/test.sh passes it)"
        )


def _cli(project: Path, env: dict[str, str], *args: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "imagesmith", "-C", str(project), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"imagesmith {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-4000:]}")


def _needed(path: Path) -> list[str]:
    with path.open("rb") as fh:
        elf = ELFFile(fh)
        return [
            str(tag.needed)  # type: ignore[attr-defined]  # set for DT_NEEDED tags; pyelftools types no such field
            for section in elf.iter_sections()
            if isinstance(section, DynamicSection)
            for tag in section.iter_tags()
            if tag.entry.d_tag == "DT_NEEDED"
        ]


def test_trixie_toolkit_builder_stage_for_real(regs: LocalRegistries, tmp_path: Path) -> None:
    _trixie_base(regs)
    project_dir = tmp_path / "proj"
    (project_dir / "matrices").mkdir(parents=True)
    (project_dir / "imagesmith.toml").write_text(
        'schema = 1\nname = "trixie-check"\ndefault_matrix = "trixie"\n\n[paths]\nmatrices = "matrices"\n'
        'dockerfiles = "dockerfiles"\nlocks = "locks"\nregistries = "matrices/registries.toml"\n'
    )
    shutil.copy(PROJECT.registries_file, project_dir / "matrices" / "registries.toml")
    (project_dir / "matrices" / "trixie.toml").write_text(MATRIX)

    env = dict(os.environ)
    env["IMAGESMITH_CONFIG"] = str(tmp_path / "config.toml")  # no user config: flags/env only
    env["IMAGESMITH_REGISTRY_MIRRORS"] = f"docker.io={regs.plain}/hub"
    ca = os.environ.get("IMAGESMITH_TEST_EXTRA_CA")
    if ca:
        env["IMAGESMITH_EXTRA_CA"] = ca
    _cli(project_dir, env, "lock", "--matrix", "trixie")
    _cli(project_dir, env, "render", "--matrix", "trixie")

    project = discover(project_dir)
    matrix = load_matrix("trixie", project=project)
    plan = build_plan(matrix, project=project)
    assert len(plan.cells) == 1, plan.dropped
    (cell,) = plan.cells
    assert (cell.stack.cuda, cell.toolkit.nccl_toolkit, cell.bases.builder_image) == (
        "12.8",
        "distro",
        "debian:trixie",
    )
    assert cell.toolkit.distro_toolkit is not None
    assert (cell.toolkit.distro_toolkit.release, cell.toolkit.distro_toolkit.cuda) == ("trixie", "12.4")
    assert "sm_100 gets compute_90 PTX only" in cell.toolkit.toolkit_note
    assert cell.hardware.nvcc_gencode == (
        "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 "
        "-gencode=arch=compute_90,code=compute_90"
    )

    config = load_config(env)
    context = stage_context(cell, matrix, config, tmp_path / "stage", project=project)
    engine = Engine()
    tag = f"imagesmith-test/trixie-builder:{cell.publish.fingerprint[:12]}"
    try:
        engine.build(
            context=context,
            tags=[tag],
            target="nccl-tests",
            build_args=build_args(cell, config),
            secrets=build_secrets(config),
            what=f"cell {cell.id} (nccl-tests stage)",
        )
        base = config.apply_mirror("debian:trixie")
        # BuildKit's pull of the base does not put it in the engine's image store, and setup.sh leaves it only
        # in the registry once the engine's images were pruned: pull it, as a renter's engine would.
        engine.pull(base)
        out = engine.run_container(base, ["getconf", "GNU_LIBC_VERSION"], timeout_s=120)
        assert out.exit_code == 0, out.output
        name, glibc = out.output.split()[-2:]
        assert name == "glibc"
        binaries = _copy_out(tag, BINARIES, tmp_path)
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)

    for path in binaries:
        assert glibc_needs(path), path  # dynamically linked against glibc: the check has something to check
        assert too_new(path, glibc) == [], (path.name, glibc, glibc_needs(path))
        needed = _needed(path)
        assert "libnccl.so.2" in needed, needed
        assert not [n for n in needed if n.startswith("libcudart")], needed  # cudart 12.4 linked statically
        report = fatbin.scan(path.read_bytes())
        assert set(report.sass) == {80, 90}, (path.name, report.to_json())  # no sm_100 SASS from nvcc 12.4
        assert 90 in report.ptx, (path.name, report.to_json())
