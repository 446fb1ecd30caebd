"""The layer plan (issue 19): sizes table, planner, sharing, matrix totals, rendering and the CLI."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from imagesmith.cli import app
from imagesmith.errors import ConfigError
from imagesmith.layerplan import (
    MIN_LAYER_BYTES,
    PlannedCell,
    estimate,
    kind_of,
    likely_large,
    plan_layers,
    popularity,
    shared_layers,
)
from imagesmith.lock import LockKey, parse_lock
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.render import render_cell_files
from imagesmith.wheelsizes import (
    SizeTable,
    WheelSize,
    collect_sizes,
    pick_file,
    read_sizes,
    sizes_toml,
)
from tests.localhttp import QuietHTTPServer
from tests.repo import PROJECT

MB = 1_000_000


def _table(python: str, sizes: dict[str, int]) -> SizeTable:
    rows = []
    for pin, size in sizes.items():
        name, version = pin.split("==")
        rows.append(WheelSize(name=name, version=version, python=python, file=f"{name}.whl", size=size))
    return SizeTable(rows=tuple(rows))


LOCK_A = """\
# imagesmith lock: torch 2.12.0 cu130 python 3.11
numpy==2.4.6
nvidia-cublas==13.1.1.3
nvidia-cufft==12.0.0.61
nvidia-cuda-runtime==13.0.96
nvidia-nccl-cu13==2.29.7
torch==2.12.0
triton==3.7.0
"""
LOCK_B = (
    LOCK_A.replace("torch==2.12.0", "torch==2.12.1")
    .replace("triton==3.7.0", "triton==3.7.1")
    .replace("lock: torch 2.12.0", "lock: torch 2.12.1")
)
SIZES = {
    "numpy==2.4.6": 16 * MB,
    "nvidia-cublas==13.1.1.3": 420 * MB,
    "nvidia-cufft==12.0.0.61": 214 * MB,
    "nvidia-cuda-runtime==13.0.96": 3 * MB,
    "nvidia-nccl-cu13==2.29.7": 200 * MB,
    "torch==2.12.0": 530 * MB,
    "torch==2.12.1": 531 * MB,
    "triton==3.7.0": 190 * MB,
    "triton==3.7.1": 191 * MB,
}


def _pins(text: str, torch: str = "2.12.0") -> tuple[tuple[str, str], ...]:
    return parse_lock(text, Path("x.txt"), LockKey(torch=torch, variant="cu130", python="3.11")).pins


def test_big_wheels_get_their_own_layers_in_group_order() -> None:
    layers = plan_layers(_pins(LOCK_A), "3.11", _table("3.11", SIZES))
    assert [layer.label for layer in layers] == [
        "nvidia-cublas==13.1.1.3",
        "nvidia-cufft==12.0.0.61",
        "nvidia-nccl-cu13==2.29.7",
        "torch==2.12.0",
        "triton==3.7.0",
        "rest (2 wheels)",
    ]
    assert [layer.kind for layer in layers] == ["cuda", "cuda", "nccl", "torch", "torch", "rest"]
    rest = layers[-1]
    assert rest.pins == (("numpy", "2.4.6"), ("nvidia-cuda-runtime", "13.0.96"))
    assert rest.size == 19 * MB
    assert [layer.file for layer in layers][:2] == [
        "layers/01-nvidia-cublas.txt",
        "layers/02-nvidia-cufft.txt",
    ]
    # every pin in exactly one layer: the lock stays the whole truth
    assert sorted(p for layer in layers for p in layer.pins) == sorted(_pins(LOCK_A))


def test_threshold_and_unknown_sizes() -> None:
    sizes = {k: v for k, v in SIZES.items() if k != "torch==2.12.0"}
    layers = plan_layers(_pins(LOCK_A), "3.11", _table("3.11", sizes), min_bytes=250 * MB)
    labels = [layer.label for layer in layers]
    # cufft (214 MB) and nccl (200 MB) fall under 250 MB; torch has no size: its own layer, named unsized
    assert labels == ["nvidia-cublas==13.1.1.3", "torch==2.12.0", "rest (5 wheels)"]
    assert layers[1].unsized == ("torch==2.12.0",)
    assert layers[1].size == 0
    # sizes of another Python do not count: every wheel unsized; the CUDA, NCCL, torch and triton wheels keep
    # their own layers, numpy (not of a large family) joins the rest, named unsized there
    other = plan_layers(_pins(LOCK_A), "3.11", _table("3.12", SIZES))
    assert [layer.label for layer in other] == [
        "nvidia-cublas==13.1.1.3",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cufft==12.0.0.61",
        "nvidia-nccl-cu13==2.29.7",
        "torch==2.12.0",
        "triton==3.7.0",
        "rest (1 wheels)",
    ]
    assert all(layer.unsized for layer in other)
    assert other[-1].unsized == ("numpy==2.4.6",)
    assert MIN_LAYER_BYTES == 32 * 2**20


def test_an_unsized_lock_gets_a_handful_of_layers_not_one_per_wheel() -> None:
    """A project whose sizes were never recorded: only the large families stand apart (a +variant build
    too, whatever its name); the many small wheels share one layer."""
    small = "".join(f"pkg{i}==1.0\n" for i in range(40))
    text = LOCK_A + small + "torchvision==0.27.0+cu118\nmy-big-model==1.0\n"
    layers = plan_layers(_pins(text), "3.11", SizeTable())
    assert len(layers) == 8
    assert "torchvision==0.27.0+cu118" in [layer.label for layer in layers]
    rest = layers[-1]
    assert rest.kind == "rest"
    assert len(rest.pins) == len(rest.unsized) == 42  # numpy, 40 pkgN, my-big-model
    assert likely_large("nvidia-nvtx-cu12", "12.8.90")
    assert likely_large("torch", "2.8.0")
    assert likely_large("torchaudio", "2.2.2+cu118")
    assert not likely_large("torchaudio", "2.2.2")
    assert not likely_large("numpy", "2.4.6")


def test_wheels_more_locks_pin_come_first_in_their_group() -> None:
    other = "nvidia-cufft==12.0.0.61\n"
    shared = popularity([("3.11", _pins(LOCK_A)), ("3.11", _pins(other))])
    layers = plan_layers(_pins(LOCK_A), "3.11", _table("3.11", SIZES), shared=shared)
    assert [layer.name for layer in layers][:2] == ["nvidia-cufft", "nvidia-cublas"]
    assert kind_of("nvidia-nccl-cu12") == "nccl"
    assert kind_of("cuda-bindings") == "cuda"
    assert kind_of("triton") == "torch"


def _cell(cid: str, lock: str, torch: str, python: str = "3.11") -> PlannedCell:
    table = _table(python, SIZES)
    return PlannedCell(
        id=cid,
        python=python,
        base="debian:bookworm",
        venv="/opt/venv",
        layers=plan_layers(_pins(lock, torch), python, table),
        group=f"cu130 py{python}",
    )


def test_sharing_and_estimate_of_two_releases() -> None:
    a, b = _cell("a", LOCK_A, "2.12.0"), _cell("b", LOCK_B, "2.12.1")
    a_devel = _cell("a-devel", LOCK_A, "2.12.0")
    sharing = shared_layers([a, b, a_devel])
    assert sharing["a"][1] == ["b", "a-devel"]  # cublas
    assert sharing["a"][4] == ["a-devel"]  # torch 2.12.0
    assert sharing["b"][5] == []  # triton 3.7.1
    est = estimate([a, b, a_devel])
    whole_a = sum(SIZES[k] for k in SIZES if not k.endswith(("2.12.1", "3.7.1")))
    whole_b = whole_a - 530 * MB - 190 * MB + 531 * MB + 191 * MB
    assert est.single == whole_a + whole_b  # a and a-devel share their one wheel layer
    assert est.registry == whole_a + 531 * MB + 191 * MB
    # pairs of different locks: (a,b), (b,a), (a-devel,b), (b,a-devel)
    assert est.second_pull.pairs == 4
    assert est.second_pull.layered_max == 531 * MB + 191 * MB
    assert est.second_pull.single_mean == pytest.approx((whole_a + whole_b) / 2)
    assert est.second_pull_group.pairs == 4
    other_python = _cell("c", LOCK_A, "2.12.0", python="3.12")
    est2 = estimate([a, other_python])
    assert est2.second_pull_group.pairs == 0
    assert est2.registry == est2.single  # another Python shares no layer


SIZES_TOML = """\
schema = 1
date = "2026-12-01"
wheels = [
  { name = "torch", version = "2.12.0", python = "3.11", size = 530000000, file = "torch.whl" },
]
"""


def test_sizes_file_round_trip_and_errors(tmp_path: Path) -> None:
    (tmp_path / "wheel-sizes.toml").write_text(SIZES_TOML)
    table = read_sizes(tmp_path)
    assert table.size("torch", "2.12.0", "3.11") == 530_000_000
    assert table.size("Torch", "2.12.0", "3.12") is None
    assert read_sizes(tmp_path / "none").rows == ()
    text = sizes_toml(table.rows, ["torch==2.2.2+cu118 (py3.11)"])
    (tmp_path / "wheel-sizes.toml").write_text(text)
    assert read_sizes(tmp_path).rows == table.rows
    for bad, message in (
        (SIZES_TOML.replace("530000000", "-1"), "size must be a positive number"),
        (SIZES_TOML.replace('name = "torch"', 'name = "Torch"'), "not a normalized project name"),
        (SIZES_TOML.replace('python = "3.11", ', ""), "missing key 'python'"),
        ("wheels = [", "not valid TOML"),
    ):
        (tmp_path / "wheel-sizes.toml").write_text(bad)
        with pytest.raises(ConfigError) as exc:
            read_sizes(tmp_path)
        assert message in exc.value.message
        assert "wheel-sizes.toml" in exc.value.message
        assert "imagesmith lock --sizes" in (exc.value.hint or "")


def test_pick_file_is_the_wheel_pip_installs() -> None:
    files = [
        "torch-2.12.0-cp311-cp311-manylinux_2_28_x86_64.whl",
        "torch-2.12.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.12.0-cp311-cp311-manylinux_2_28_aarch64.whl",
        "torch-2.12.0-cp311-none-macosx_11_0_arm64.whl",
        "torch-2.12.1-cp311-cp311-manylinux_2_28_x86_64.whl",
    ]
    assert pick_file(files, "2.12.0", "3.11") == files[0]
    assert pick_file(files, "2.12.0", "3.12") == files[1]
    assert pick_file(files, "2.12.0", "3.13") is None
    assert pick_file(files, "not a version", "3.11") is None
    # newer manylinux first; glibc above the locks' 2.28 never
    nv = [
        "nvidia_x-1.0-py3-none-manylinux2014_x86_64.whl",
        "nvidia_x-1.0-py3-none-manylinux_2_27_x86_64.whl",
        "nvidia_x-1.0-py3-none-manylinux_2_34_x86_64.whl",
    ]
    assert pick_file(nv, "1.0", "3.11") == nv[1]


def test_collect_sizes_from_an_index_listing() -> None:
    class Lister:
        def __init__(self) -> None:
            self.asked: list[str] = []

        def files(self, project: str) -> list[tuple[str, int]]:
            self.asked.append(project)
            if project == "torch":
                return [("torch-2.12.0-cp311-cp311-manylinux_2_28_x86_64.whl", 530)]
            return []

    lock = parse_lock(
        "torch==2.12.0\nmystery==1.0\n",
        Path("l.txt"),
        LockKey(torch="2.12.0", variant="cu130", python="3.11"),
    )
    lister = Lister()
    rows, missing = collect_sizes([lock, lock], lister)
    assert [(r.name, r.size) for r in rows] == [("torch", 530)]
    assert missing == ["mystery==1.0 (py3.11)"]
    assert sorted(lister.asked) == ["mystery", "torch"]  # each project listed once


def test_smoke_cell_renders_one_run_per_layer_on_its_pin_file() -> None:
    plan = build_plan(load_matrix(PROJECT.matrix_path("smoke")), project=PROJECT)
    cell = plan.cells[0]
    assert len(cell.publish.layers) >= 10
    assert [layer.kind for layer in cell.publish.layers][-1] == "rest"
    kinds = [layer.kind for layer in cell.publish.layers]
    assert kinds == sorted(kinds, key=["cuda", "nccl", "torch", "rest"].index)
    files = render_cell_files(cell)
    dockerfile = files["Dockerfile"]
    pins_in_layers: list[str] = []
    for layer in cell.publish.layers:
        # one RUN: the context's wheel-layer.sh on the layer's pin file, both bind-mounted (no COPY)
        assert (
            f"RUN --mount=type=bind,source={layer.file},target=/tmp/ctx/layer.txt \\\n"
            "    --mount=type=bind,source=wheel-layer.sh,target=/tmp/ctx/wheel-layer.sh \\\n"
        ) in dockerfile
        assert f"    bash /tmp/ctx/wheel-layer.sh {layer.file}\n" in dockerfile
        assert f"COPY {layer.file}" not in dockerfile
        # the lock's pin lines, each with its sha256 lines (pip's hash-checking mode), as in requirements.txt
        lines = [ln for ln in files[layer.file].splitlines() if not ln.startswith("#")]
        pins = [ln.removesuffix(" \\") for ln in lines if not ln.lstrip().startswith("--hash=")]
        assert pins == [f"{n}=={v}" for n, v in layer.pins]
        extra = [ln for ln in lines if ln.removesuffix(" \\") not in pins]
        assert all(ln.lstrip().startswith("--hash=sha256:") for ln in extra)
        pins_in_layers += lines
    requirements = [ln for ln in files["requirements.txt"].splitlines() if not ln.startswith("#")]
    assert sorted(pins_in_layers) == sorted(requirements)
    assert dockerfile.count("bash /tmp/ctx/wheel-layer.sh layers/") == len(cell.publish.layers)
    assert "pip check" in dockerfile
    assert "SOURCE_DATE_EPOCH=315532800" in files["wheel-layer.sh"]
    assert "--no-deps --require-hashes" in files["wheel-layer.sh"]
    assert "COPY layers/etc/hosts layers/etc/resolv.conf /etc/" in dockerfile
    # the layers come before anything cell-specific (requirements.txt, the suite wheel)
    assert dockerfile.index(cell.publish.layers[-1].file) < dockerfile.index("COPY requirements.txt")


def test_base_torch_cells_have_no_layer_plan() -> None:
    plan = build_plan(load_matrix(PROJECT.matrix_path("h200-host")), project=PROJECT)
    assert plan.cells
    assert all(c.publish.layers == () for c in plan.cells)
    assert not any(name.startswith("layers/") for name in render_cell_files(plan.cells[0]))


def test_plan_explain_prints_layers_sharing_and_totals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(PROJECT.root)
    runner = CliRunner()
    out = runner.invoke(app, ["plan", "--matrix", "a100", "--explain"])
    assert out.exit_code == 0, out.output
    assert "layer plan" in out.output
    assert "nvidia-cudnn-cu12==8.9.2.26" in out.output
    assert "registry:" in out.output
    assert "second pull" in out.output
    data = json.loads(runner.invoke(app, ["plan", "--matrix", "a100", "--json", "--explain"]).output)
    est = data["layer_plan"]["estimate"]
    assert est["registry_bytes"] < est["single_layer_registry_bytes"]
    assert est["second_pull_same_variant_python"]["fraction"] < 0.5
    cell = data["cells"][0]
    assert cell["layers"][0]["file"].startswith("layers/01-")
    assert set(data["layer_plan"]["sharing"][cell["id"]]) == {str(x["index"]) for x in cell["layers"]}


def test_build_summary_names_wheel_layers_and_counts_pushed_ones() -> None:
    from imagesmith.build import layer_report
    from imagesmith.engine import PushResult
    from imagesmith.registry import ManifestData

    diff = [f"sha256:{c * 64}" for c in "abcd"]
    body = json.dumps(
        {"layers": [{"digest": f"sha256:{c * 64}", "size": 10 * (i + 1)} for i, c in enumerate("1234")]}
    ).encode()
    manifest = ManifestData(body=body, media_type="application/vnd.oci.image.manifest.v1+json", digest="d")

    class Engine:
        def inspect(self, ref: str) -> dict[str, object]:
            return {"RootFS": {"Layers": diff}}

    pushed = PushResult(
        reference="r",
        digest="d",
        bytes_pushed=0,
        layers_pushed=1,
        layers_existing=3,
        duration_s=1.0,
        pushed_ids=(diff[3][7:19],),
    )
    steps = [
        "/bin/sh -c #(nop) ADD file:base in /",
        "RUN /bin/bash -o pipefail -c install -d /var/cache/imagesmith/wheels # buildkit",
        # as dockerd 20.10's BuildKit writes it (the stage's ARGs first)
        "RUN |3 IMAGESMITH_PIP_INDEX_URL= IMAGESMITH_APT_MIRROR= TORCH_INDEX_URL= /bin/bash -o pipefail -c "
        "bash /tmp/ctx/wheel-layer.sh layers/01-nvidia-cublas.txt # buildkit",
        "RUN /bin/bash -o pipefail -c pip install imagesmith # buildkit",
    ]
    report = layer_report(Engine(), "r", manifest, pushed, steps)  # type: ignore[arg-type]
    assert [r["pushed"] for r in report] == [False, False, False, True]
    assert report[2]["step"] == "wheel layer layers/01-nvidia-cublas.txt"
    assert report[1]["step"].startswith("RUN /bin/bash -o pipefail -c install")  # not a wheel layer
    assert report[3]["step"].startswith("RUN /bin/bash")  # not a wheel layer: no wheel-layer.sh
    assert [r["size"] for r in report] == [10, 20, 30, 40]
    # a history that does not match the manifest names nothing rather than the wrong step
    assert all(r["step"] == "" for r in layer_report(Engine(), "r", manifest, pushed, steps[:2]))  # type: ignore[arg-type]


def test_cells_of_two_torch_releases_share_the_chain_of_cuda_layers() -> None:
    """BuildKit serves a layer from its cache only when every step before it is the same: the Dockerfile text
    and the files its RUNs bind-mount (wheel-layer.sh, the layer files) up to the first differing wheel must
    be byte-identical."""
    plan = build_plan(load_matrix(PROJECT.matrix_path("a100")), project=PROJECT)
    a = plan.cell("2.2.2-cu121-py3.10-runtime-ubuntu22.04")
    b = plan.cell("2.3.1-cu121-py3.10-runtime-ubuntu22.04")
    same = 0
    while a.publish.layers[same].pins == b.publish.layers[same].pins:
        same += 1
    assert same >= 6  # cuBLAS, cuDNN, cuFFT, cuRAND, cuSOLVER, cuSPARSE …
    assert {a.publish.layers[i].kind for i in range(same)} == {"cuda"}
    fa, fb = render_cell_files(a), render_cell_files(b)
    for layer in a.publish.layers[:same]:
        assert fa[layer.file] == fb[layer.file]
    assert fa["wheel-layer.sh"] == fb["wheel-layer.sh"]
    stage = "# Stage 2"
    cut = f"# layer {same + 1}: "  # the comment above the first differing layer
    da = fa["Dockerfile"][fa["Dockerfile"].index(stage) : fa["Dockerfile"].index(cut)]
    db = fb["Dockerfile"][fb["Dockerfile"].index(stage) : fb["Dockerfile"].index(cut)]
    assert da.replace(a.stack.torch, "T") == db.replace(
        b.stack.torch, "T"
    )  # only the comments name the release
    assert "RUN" in da


def test_collect_sizes_refuses_an_index_that_answers_nothing() -> None:
    from imagesmith.errors import UpstreamError

    class Down:
        def files(self, project: str) -> list[tuple[str, int]]:
            raise UpstreamError(
                f"https://index.invalid/{project}/: connection refused", hint="check the index"
            )

    lock = parse_lock(
        "torch==2.12.0\n", Path("l.txt"), LockKey(torch="2.12.0", variant="cu130", python="3.11")
    )
    with pytest.raises(UpstreamError):
        collect_sizes([lock], Down())


class _Index(http.server.BaseHTTPRequestHandler):
    """A PEP 691 JSON Simple API index on loopback: every project has one wheel of 40 MiB, except ``numpy``
    (404: the index does not carry it)."""

    def do_GET(self) -> None:
        name = self.path.strip("/").split("/")[-1]
        if name == "numpy":
            self.send_error(404)
            return
        files = [
            {
                "filename": f"{name.replace('-', '_')}-{v}-py3-none-any.whl",
                "url": f"{name}-{v}.whl",
                "hashes": {},
                "size": 40 * 2**20,
            }
            for v in ("2.4.6", "13.1.1.3", "12.0.0.61", "13.0.96", "2.29.7", "2.12.0", "3.7.0")
        ]
        body = json.dumps({"meta": {"api-version": "1.1"}, "name": name, "files": files}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _sized_project(tmp_path: Path, run_cli: Callable[..., Any]) -> Path:
    root = tmp_path / "p"
    assert run_cli("init", str(root), "--gpu", "h200").exit_code == 0
    for f in (root / "locks").iterdir():
        f.unlink()
    (root / "locks" / "2.12.0-cu130-py3.11.txt").write_text(LOCK_A)
    return root


def test_lock_sizes_reads_the_index_pip_uses(
    tmp_path: Path, run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _sized_project(tmp_path, run_cli)
    server = QuietHTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{server.server_address[1]}/simple")
        out = run_cli("--project", str(root), "lock", "--sizes")
    finally:
        server.shutdown()
    assert out.exit_code == 0, out.stderr
    assert "unsized numpy==2.4.6 (py3.11)" in out.stdout
    table = read_sizes(root / "locks")
    assert len(table.rows) == 6
    assert table.size("torch", "2.12.0", "3.11") == 40 * 2**20
    assert run_cli("--project", str(root), "lock", "--sizes", "--no-sizes").exit_code == 2


def test_lock_sizes_of_an_index_that_does_not_answer(
    tmp_path: Path,
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``lock --sizes`` fails naming the index and pip's own setting; after ``lock`` wrote locks the same
    failure is a warning (the locks stay written, the plan keeps the large families apart)."""
    import typer

    from imagesmith.lock import lock_keys_in
    from imagesmith.lockrequest import record_sizes
    from imagesmith.project import load_project

    root = _sized_project(tmp_path, run_cli)
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("PIP_INDEX_URL", f"http://127.0.0.1:{port}/simple")
    out = run_cli("--project", str(root), "lock", "--sizes")
    assert out.exit_code == 12
    assert f"127.0.0.1:{port}" in out.stderr
    assert "PIP_INDEX_URL" in out.stderr
    assert "--offline" not in out.stderr
    assert not (root / "locks" / "wheel-sizes.toml").exists()
    project = load_project(root / "imagesmith.toml")
    capsys.readouterr()
    record_sizes(project, keys=lock_keys_in(project.locks_dir), soft=True, echo=typer.echo)
    err = capsys.readouterr().err
    assert "warning: wheel sizes not recorded" in err
    assert "imagesmith lock --sizes" in err
    assert not (root / "locks" / "wheel-sizes.toml").exists()


def test_explain_of_a_matrix_that_plans_no_cell_says_so(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    root = tmp_path / "p"
    assert run_cli("init", str(root), "--gpu", "b200").exit_code == 0
    matrix = root / "matrices" / "b200.toml"
    text = matrix.read_text()
    text = text.replace('versions = ["2.11.0"]', 'versions = ["2.7.1"]').replace('["cu130"]', '["cu118"]')
    matrix.write_text(text)
    out = run_cli("--project", str(root), "plan", "--explain")
    assert "0 cell(s)" in out.stdout
    assert "layer plan: none (no cell is planned)" in out.stdout
