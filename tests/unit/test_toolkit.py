"""The nccl-tests builder's CUDA toolkit, chosen per cell (issue 11): nccl_tests.toolkit = auto | base | pip |
distro | devel-image, the distributions' own nvidia-cuda-toolkit as data (imagesmith/data/toolkits.toml), PTX
for GPUs newer than an old nvcc compiles, and the apt mirror script's `components` mode."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith import compat
from imagesmith import plan as plan_module
from imagesmith.compat.tables import TABLES
from imagesmith.errors import MatrixError
from imagesmith.matrix import Matrix, load_matrix
from imagesmith.model import BuildPlan
from imagesmith.plan import build_plan, nvcc_gencode
from imagesmith.templating import render_cell_files
from tests.repo import PROJECT

NCCL = """
[nccl_tests]
version = "v2.19.6"
commit = "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"
sha256 = "3c3b847c3ee4396d94defab52fef91ccc28c0e3a496e8e841cadd1870d9eb1c8"
"""


@pytest.fixture(autouse=True)
def _bases_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    """These matrices name made-up base images to test toolkit selection: plan them as a project without a
    base lock (bases by name), not against this repository's bases.toml (tests/unit/test_bases.py)."""
    monkeypatch.setattr(plan_module, "read_bases", lambda *_a, **_k: None)


def _matrix(
    tmp_path: Path,
    *,
    torch: str,
    variant: str,
    os: str = "debian12",
    image: str = "debian:bookworm",
    python: str = "3.11",
    gpus: str = '["a100-80gb-sxm4", "h200"]',
    flavors: str = '["runtime"]',
    toolkit: str | None = None,
    devel_images: str = "",
) -> Matrix:
    shutil.copy(PROJECT.registries_file, tmp_path / "registries.toml")
    path = tmp_path / "tk.toml"
    body = f"""schema = 1
gpus = {gpus}
flavors = {flavors}
shm_min = "8g"
registries = ["local-plain"]
[torch]
versions = ["{torch}"]
variants = ["{variant}"]
[python]
versions = ["{python}"]
[base]
os = "{os}"
image = "{image}"
python = "{python}"
{f"devel_images = {{ {devel_images} }}" if devel_images else ""}
{NCCL}"""
    if toolkit is not None:
        body += f'toolkit = "{toolkit}"\n'
    path.write_text(body)
    return load_matrix(path)


def _reason(plan: BuildPlan) -> str:
    assert not plan.cells, [c.id for c in plan.cells]
    (dropped,) = plan.dropped
    return dropped.reason


def test_the_data_table_is_complete_and_sourced() -> None:
    rows = compat.distro_toolkits()
    assert {t.os for t in rows} >= {"debian12", "debian13", "ubuntu22.04", "ubuntu24.04"}
    bookworm = compat.distro_toolkit("debian12")
    assert bookworm is not None
    assert (bookworm.release, bookworm.component, bookworm.cuda, bookworm.max_arch) == (
        "bookworm",
        "non-free",
        "11.8",
        90,
    )
    assert bookworm.verified  # read with apt-cache policy
    assert bookworm.host_cxx == "g++-11"  # bookworm's gcc 12 is too new for nvcc 11.8
    assert compat.distro_toolkit("rhel9") is None
    for t in rows:
        assert t.source.strip()
        assert t.version.startswith(t.cuda + ".") or t.version.startswith(t.cuda.replace(".", ".0") + ".")
    # a cell may use a toolkit only when it is no newer than the cell's CUDA
    assert bookworm.serves("11.8")
    assert bookworm.serves("12.4")
    assert not bookworm.serves("11.7")


def test_auto_picks_pip_for_cuda13(tmp_path: Path) -> None:
    (cell,) = build_plan(_matrix(tmp_path, torch="2.11.0", variant="cu130")).cells
    assert (cell.toolkit.nccl_toolkit, cell.bases.builder_image, cell.toolkit.distro_toolkit) == (
        "pip",
        "debian:bookworm",
        None,
    )


def test_auto_picks_the_distros_toolkit_and_explains(tmp_path: Path) -> None:
    (cell,) = build_plan(_matrix(tmp_path, torch="2.5.1", variant="cu124")).cells
    assert cell.toolkit.nccl_toolkit == "distro"
    assert (
        cell.bases.builder_image == cell.bases.base_image == "debian:bookworm"
    )  # same glibc as the final stage
    assert cell.toolkit.distro_toolkit == compat.distro_toolkit("debian12")
    assert "bookworm's nvidia-cuda-toolkit 11.8.89" in cell.toolkit.toolkit_note
    assert "CUDA 11.8 <= the cell's 12.4" in cell.toolkit.toolkit_note
    assert "PTX" not in cell.toolkit.toolkit_note  # sm_80 and sm_90 are native to nvcc 11.8
    assert (
        "not checked with apt" not in cell.toolkit.toolkit_note
    )  # bookworm's row was read with apt-cache policy
    assert cell.hardware.nvcc_gencode == (
        "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90 "
        "-gencode=arch=compute_90,code=compute_90"
    )
    text = render_cell_files(cell)["Dockerfile"]
    assert "nvidia/cuda:" not in text
    assert "ARG BUILDER_IMAGE=debian:bookworm" in text
    assert "sh /tmp/ctx/apt-mirror.sh components non-free" in text
    assert "apt-get download nvidia-cuda-toolkit libnvvm4 nvidia-cuda-dev" in text
    assert "'./usr/include/*' './usr/lib/*/libcudart_static.a' './usr/lib/*/libcudadevrt.a'" in text
    assert "ENV CXX=g++-11" in text
    assert 'grep -F "release 11.8,"' in text
    assert "ENV CUDA_HOME=/usr\nENV CUDA_LIB=/opt/cuda-distro/lib64" in text
    assert "ENV NCCL_HOME=/opt/builder/nvidia/nccl" in text
    assert "nvidia-nccl-cu12==" in render_cell_files(cell)["builder-requirements.txt"]


def test_trixie_builder_installs_the_cccl_headers_cuda_12_4_includes(tmp_path: Path) -> None:
    """trixie's nvidia-cuda-dev 12.4 cuda_fp16.h includes <nv/target>, which Debian packages apart (CCCL's
    libcu++-dev, main): without it the real build failed at `nv/target: No such file or directory`."""
    trixie = compat.distro_toolkit("debian13")
    assert trixie is not None
    assert (trixie.release, trixie.cuda, trixie.host_cxx, trixie.max_arch) == ("trixie", "12.4", "g++-13", 90)
    assert trixie.header_packages == ("libcu++-dev",)
    assert "Built for real" in trixie.source
    args = {"torch": "2.6.0", "variant": "cu124", "os": "debian13", "image": "debian:trixie"}
    locks = tmp_path / "locks"
    locks.mkdir()  # trixie's python3 is 3.13: the py3.12 pins stand in (the builder stage uses only NCCL's)
    shutil.copy(PROJECT.locks_dir / "2.6.0-cu124-py3.12.txt", locks / "2.6.0-cu124-py3.13.txt")
    (cell,) = build_plan(_matrix(tmp_path, python="3.13", **args), lock_dir=locks).cells
    assert (cell.toolkit.nccl_toolkit, cell.bases.builder_image) == ("distro", "debian:trixie")
    text = render_cell_files(cell)["Dockerfile"]
    assert "apt-get install -y --no-install-recommends make python3 python3-venv python3-pip " in text
    assert "ca-certificates g++-13 libcu++-dev \\\n" in text
    assert 'grep -F "release 12.4,"' in text
    assert "ENV CXX=g++-13" in text
    # bookworm's CUDA 11.8 headers include no CCCL header: its builder stays as built
    bookworm = compat.distro_toolkit("debian12")
    assert bookworm is not None
    assert bookworm.header_packages == ()


def test_every_cuda_12_row_installs_libcuxx_for_nv_target() -> None:
    """CUDA 12.x's cuda_fp16.hpp / cuda_bf16.hpp include <nv/target> (CUDA 11.8's do not), which Debian and
    Ubuntu package apart from nvidia-cuda-dev: every CUDA >= 12 row must install libcu++-dev, else nccl-tests
    fails at its first .cu file (as trixie's did, built for real)."""
    for tk in compat.distro_toolkits():
        if int(tk.cuda.split(".")[0]) >= 12:
            assert "libcu++-dev" in tk.header_packages, tk.os
    (cell, *_) = build_plan(load_matrix("rtx4090", project=PROJECT)).cells  # noble's CUDA 12.0
    assert cell.toolkit.distro_toolkit is not None
    assert cell.toolkit.distro_toolkit.release == "noble"
    assert " g++-12 libcu++-dev \\\n" in render_cell_files(cell)["Dockerfile"]


@pytest.mark.parametrize("value", ["libcu++-dev", [""], [1]])
def test_toolkits_header_packages_must_be_a_list_of_names(
    value: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = compat._load("toolkits.toml")
    data = {**real, "distro": [{**real["distro"][0], "header_packages": value}]}
    monkeypatch.setattr(TABLES, "load", lambda name: data if name == "toolkits.toml" else real)
    compat.distro_toolkits.cache_clear()
    try:
        with pytest.raises(compat.DataError, match="debian12: `header_packages` must be a list of package"):
            compat.distro_toolkits()
    finally:
        monkeypatch.undo()
        compat.distro_toolkits.cache_clear()


def test_gpus_newer_than_the_distros_nvcc_get_ptx(tmp_path: Path) -> None:
    assert nvcc_gencode(["8.0", "10.0", "12.0"], max_arch=90) == (
        "-gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=compute_90"
    )
    assert nvcc_gencode(["10.0"], max_arch=90) == "-gencode=arch=compute_90,code=compute_90"
    assert nvcc_gencode(["8.0", "9.0"], max_arch=90) == nvcc_gencode(["8.0", "9.0"])
    # a Debian 12 image of one's own whose python3 is 3.12 (debian:bookworm's is 3.11: refused as its base)
    m = _matrix(
        tmp_path,
        torch="2.8.0",
        variant="cu128",
        python="3.12",
        image="registry.example/debian-py312:bookworm",
        gpus='["h200", "b200"]',
    )
    plan = build_plan(m, lock_dir=PROJECT.locks_dir)
    if not plan.cells:  # no 2.8.0 cu128 py3.12 lock for debian12 in this project: plan the lock-free way
        pytest.fail(f"expected a cell: {plan.dropped}")
    (cell,) = plan.cells
    assert cell.toolkit.nccl_toolkit == "distro"
    assert (
        cell.hardware.nvcc_gencode
        == "-gencode=arch=compute_90,code=sm_90 -gencode=arch=compute_90,code=compute_90"
    )
    assert "nvcc 11.8 compiles up to sm_90, so sm_100 gets compute_90 PTX only" in cell.toolkit.toolkit_note
    assert "JIT" in cell.toolkit.toolkit_note


def test_a_toolkit_newer_than_the_cell_is_never_used(tmp_path: Path) -> None:
    # trixie carries CUDA 12.4: a cu118 cell may not use it (its static cudart needs a newer driver)
    args = {"torch": "2.3.1", "variant": "cu118", "os": "debian13", "image": "debian:trixie"}
    reason = _reason(build_plan(_matrix(tmp_path, **args)))
    assert "wheels carry no nvcc" in reason
    assert "debian13 (trixie) carries CUDA 12.4, newer than the cell's 11.8" in reason  # why not trixie's
    assert 'add "11.8" to base.devel_images' in reason  # both fixes named
    # only the releases whose toolkit a CUDA 11.8 cell may use (not trixie's 12.4 nor noble's 12.0)
    assert reason.endswith(
        "no newer than CUDA 11.8: base.os = 'debian12' (bookworm: CUDA 11.8), base.os = 'ubuntu22.04' "
        "(jammy: CUDA 11.5)"
    )
    reason = _reason(build_plan(_matrix(tmp_path, toolkit="distro", **args)))
    assert "debian13 (trixie) carries CUDA 12.4, newer than the cell's 11.8" in reason
    assert "'debian13'" not in reason
    assert "'ubuntu24.04'" not in reason
    # a CUDA older than every release's toolkit: no base to name, the devel image is the fix
    fixes = plan_module._toolkit_fixes(_matrix(tmp_path, **args).base, "11.4")
    assert fixes == (
        'add "11.4" to base.devel_images (an nvidia/cuda:11.4.x-devel image you can pull): no other release '
        "in imagesmith/data/toolkits.toml carries an nvidia-cuda-toolkit no newer than CUDA 11.4"
    )
    # auto falls back to the devel image where the matrix names one
    dev = '"11.8" = "nvidia/cuda:11.8.0-devel-ubuntu22.04"'
    (cell,) = build_plan(_matrix(tmp_path, devel_images=dev, **args)).cells
    assert (cell.toolkit.nccl_toolkit, cell.bases.builder_image) == (
        "devel-image",
        "nvidia/cuda:11.8.0-devel-ubuntu22.04",
    )
    assert "nvidia/cuda:11.8.0-devel-ubuntu22.04" in cell.toolkit.toolkit_note


def test_explicit_toolkits(tmp_path: Path) -> None:
    reason = _reason(build_plan(_matrix(tmp_path, torch="2.5.1", variant="cu124", toolkit="pip")))
    assert "CUDA 12.4 pip wheels carry no nvcc" in reason
    # the base's own release fits: the reason says so (the shortest fix), then the other two
    assert (
        "debian12 (bookworm) carries CUDA 11.8, which nccl_tests.toolkit = 'distro' (or 'auto') uses"
        in reason
    )
    assert 'add "12.4" to base.devel_images' in reason
    reason = _reason(build_plan(_matrix(tmp_path, torch="2.5.1", variant="cu124", toolkit="devel-image")))
    assert "asks for an nvidia/cuda devel image" in reason
    assert 'add "12.4" to base.devel_images' in reason
    dev = '"12.4" = "nvidia/cuda:12.4.1-devel-ubuntu22.04"'
    m = _matrix(tmp_path, torch="2.5.1", variant="cu124", toolkit="devel-image", devel_images=dev)
    (cell,) = build_plan(m).cells
    assert cell.toolkit.nccl_toolkit == "devel-image"
    text = render_cell_files(cell)["Dockerfile"]  # the devel-image fragment, which no project matrix uses now
    assert "ARG BUILDER_IMAGE=nvidia/cuda:12.4.1-devel-ubuntu22.04" in text
    assert "ENV CUDA_HOME=/usr/local/cuda" in text
    assert "apt-mirror.sh components" not in text


@pytest.mark.parametrize("image", ["debian:trixie", "docker.io/library/debian:bookworm", "ubuntu"])
def test_toolkit_base_on_a_plain_os_image_is_dropped_with_the_fix(tmp_path: Path, image: str) -> None:
    """toolkit 'base' means the base image brings nvcc and NCCL; the plain OS images imagesmith scaffolds on
    bring neither, so the build could only fail (at the builder's first RUN): dropped at plan time."""
    args = {"torch": "2.5.1", "variant": "cu124", "image": image}
    reason = _reason(build_plan(_matrix(tmp_path, toolkit="base", **args)))
    assert f"nccl_tests.toolkit = 'base': base.image {image} is the plain " in reason
    assert "carries no CUDA toolkit (/usr/local/cuda) and no NCCL" in reason
    assert "Use toolkit 'auto'; debian12 (bookworm) carries CUDA 11.8" in reason
    # an image of another repository (a vendor's CUDA + torch image) keeps toolkit 'base'
    (cell,) = build_plan(
        _matrix(
            tmp_path, toolkit="base", torch="2.5.1", variant="cu124", image="nvcr.io/nvidia/pytorch:24.05-py3"
        )
    ).cells
    assert (cell.toolkit.nccl_toolkit, cell.bases.builder_image) == (
        "base",
        "nvcr.io/nvidia/pytorch:24.05-py3",
    )


def test_build_refuses_a_matrix_that_plans_no_cell(tmp_path: Path, run_cli: Any) -> None:
    """Every combination dropped: `build` exits 2 naming the reason and the fix, and builds nothing (it
    used to print an empty table and exit 0)."""
    _matrix(tmp_path, torch="2.3.1", variant="cu118", os="debian13", image="debian:trixie")
    out = run_cli("-C", str(PROJECT.root), "build", "--matrix", str(tmp_path / "tk.toml"))
    assert out.exit_code == 2, out.stderr
    text = " ".join(out.stderr.split())
    assert "no cell to build, every combination is dropped: 2.3.1-cu118-py3.11-runtime-debian13:" in text
    assert "debian13 (trixie) carries CUDA 12.4, newer than the cell's 11.8" in text
    assert "imagesmith plan --matrix" in text
    assert "--explain` lists every dropped combination" in text
    assert "Traceback" not in out.stderr


def test_unknown_toolkit_value_lists_every_value(tmp_path: Path) -> None:
    with pytest.raises(MatrixError) as exc:
        _matrix(tmp_path, torch="2.5.1", variant="cu124", toolkit="nvhpc")
    assert "nccl_tests.toolkit: unknown value 'nvhpc'" in exc.value.message
    hint = exc.value.hint or ""
    assert hint.startswith("one of: auto (picks per cell")
    assert "base, pip, distro, devel-image" in hint


def test_devel_flavor_with_the_distro_toolkit(tmp_path: Path) -> None:
    """A devel image must give extensions torch's CUDA: the distro's toolkit (another CUDA, unpacked in the
    builder only) is not that, so such a cell needs base.devel_images and is dropped without it."""
    args = {"torch": "2.5.1", "variant": "cu124", "flavors": '["devel"]'}
    reason = _reason(build_plan(_matrix(tmp_path, **args)))
    assert "devel flavor" in reason
    assert "bookworm's CUDA 11.8 packages" in reason
    assert 'add "12.4" to base.devel_images' in reason
    dev = '"12.4" = "nvidia/cuda:12.4.1-devel-ubuntu22.04"'
    (cell,) = build_plan(_matrix(tmp_path, devel_images=dev, **args)).cells
    assert cell.toolkit.nccl_toolkit == "distro"
    assert cell.bases.devel_image == "nvidia/cuda:12.4.1-devel-ubuntu22.04"
    text = render_cell_files(cell)["Dockerfile"]
    assert "FROM ${DEVEL_IMAGE}" in text
    assert "ARG BUILDER_IMAGE=debian:bookworm" in text


@pytest.mark.parametrize("name", ["a100", "h100", "rtx4090", "smoke-cu12"])
def test_project_matrices_build_nccl_tests_without_nvidia_cuda_images(name: str) -> None:
    plan = build_plan(load_matrix(name, project=PROJECT))
    assert plan.cells
    for cell in plan.cells:
        assert cell.toolkit.nccl_toolkit == "distro", cell.id
        assert cell.bases.builder_image == cell.bases.base_image, cell.id
        if cell.flavor != "devel":
            assert "nvidia/cuda:" not in render_cell_files(cell)["Dockerfile"], cell.id


def test_h100_on_jammy_gets_ptx_and_says_so() -> None:
    cell = build_plan(load_matrix("h100", project=PROJECT)).cells[0]
    assert "sm_90 gets compute_86 PTX only" in cell.toolkit.toolkit_note
    assert "jammy row of imagesmith/data/toolkits.toml was read from the distribution's package pages" in (
        cell.toolkit.toolkit_note
    )
    # an unverified row says what to do should it not build
    assert (
        "should its builder stage fail, set nccl_tests.toolkit = 'devel-image'" in cell.toolkit.toolkit_note
    )
    assert f'with "{cell.stack.cuda}" in base.devel_images, and correct the row' in cell.toolkit.toolkit_note
    assert cell.hardware.nvcc_gencode == "-gencode=arch=compute_86,code=compute_86"


def test_plan_explain_prints_the_builder_toolkit(run_cli: object) -> None:
    out = run_cli("plan", "--matrix", "smoke-cu12", "--explain")  # type: ignore[operator]
    assert out.exit_code == 0, out.stderr
    assert "nccl-tests builder per cell:" in out.stdout
    assert "bookworm's nvidia-cuda-toolkit 11.8.89" in out.stdout.replace("\n", " ")


@pytest.fixture
def plain_dir() -> Iterator[Path]:
    """A scratch folder whose path has no "_" (the script names its saved copies by the path with / → _)."""
    path = Path(tempfile.gettempdir()) / f"imagesmith-apt-{uuid.uuid4().hex}"
    path.mkdir()
    yield path
    shutil.rmtree(path)


def test_mirror_script_components_mode(plain_dir: Path) -> None:
    """`apt-mirror.sh components non-free` adds the component to one-line and DEB822 entries (once), after a
    build-time mirror rewrite, and `restore` puts the original sources back."""
    tmp_path = plain_dir
    sh = shutil.which("sh")
    assert sh is not None
    (cell,) = build_plan(load_matrix("smoke-cu12", project=PROJECT)).cells
    script = render_cell_files(cell)["apt-mirror.sh"]
    etc = tmp_path / "etc" / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    script = script.replace("/etc/apt", str(etc)).replace("/tmp/imagesmith-apt-sources", str(tmp_path / "s"))
    (tmp_path / "m.sh").write_text(script)
    one = (
        "deb http://deb.example.org/debian bookworm main\n"
        "deb http://deb.example.org/debian bookworm-updates main non-free\n"
    )
    deb822 = "Types: deb\nURIs: http://deb.example.org/debian\nSuites: bookworm\nComponents: main\n"
    (etc / "sources.list").write_text(one)
    (etc / "sources.list.d" / "debian.sources").write_text(deb822)

    def run(*args: str) -> None:
        subprocess.run([sh, str(tmp_path / "m.sh"), *args], check=True)

    run("build", "http://mirror.example.net/")
    run("components", "non-free", "contrib")
    lines = (etc / "sources.list").read_text().splitlines()
    assert lines == [
        "deb http://mirror.example.net/debian bookworm main non-free contrib",
        "deb http://mirror.example.net/debian bookworm-updates main non-free contrib",
    ]
    assert "Components: main non-free contrib\n" in (etc / "sources.list.d" / "debian.sources").read_text()
    run("restore")
    assert (etc / "sources.list").read_text() == one
    assert (etc / "sources.list.d" / "debian.sources").read_text() == deb822
    # without a build-time mirror, `components` saves the originals itself
    run("build", "")
    run("components", "non-free")
    assert "main non-free" in (etc / "sources.list").read_text()
    run("restore")
    assert (etc / "sources.list").read_text() == one


def test_builder_os_layers_come_before_the_pip_pins() -> None:
    """In every committed Dockerfile's nccl-tests stage, the OS packages (and the distro toolkit's ~1 GB
    unpack) come before anything that differs with the cell's pip pins or torch index
    (builder-requirements.txt, TORCH_INDEX_URL, IMAGESMITH_PIP_INDEX_URL): cells that differ only there share
    those layers in the build cache (docs/benchmarks.md, "Builder stage: OS layers shared across NCCL
    pins")."""
    seen = 0
    for dockerfile in sorted(PROJECT.dockerfiles_dir.glob("*/*/Dockerfile")):
        stage = dockerfile.read_text().split(" AS nccl-tests\n", 1)[1].split("\nFROM ", 1)[0]
        lines = stage.splitlines()
        apt = [i for i, line in enumerate(lines) if "apt-get install" in line]
        pins = [
            i
            for i, line in enumerate(lines)
            if line.startswith("COPY builder-requirements.txt")
            or line.startswith(("ARG TORCH_INDEX_URL", "ARG IMAGESMITH_PIP_INDEX_URL"))
        ]
        if apt:
            seen += 1
            assert pins, dockerfile
            assert max(apt) < min(pins), (dockerfile, lines[min(pins)])
    assert seen >= 10
