"""The layer plan on the real engine and a registry (issues 19 and 24).

Tiny fake wheels from a local find-links folder, installed by the same Dockerfile block a cell renders
(``parts.wheel_layers``: one RUN per layer running the context's wheel-layer.sh on the layer's pin file, both
bind-mounted). Two images whose "torch" differs: the "CUDA library" layer rebuilt from scratch (no cache) has
the same digest, the second push finds it already there, and the layer count is the plan's; built with the
cache, only the changed layer and those above it run again (BuildKit caches each layer on its own)."""

from __future__ import annotations

import base64
import hashlib
import random
import re
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imagesmith.engine import Engine
from imagesmith.layerplan import plan_layers
from imagesmith.templating import wheel_layer_files, wheel_layers_block
from imagesmith.wheelsizes import SizeTable, WheelSize
from tests.localinfra import TempRegistry, temp_registry

pytestmark = [pytest.mark.docker, pytest.mark.registry]

BASE = "127.0.0.1:5000/hub/library/debian:bookworm"
PYTHON = "3.11"  # Debian 12's python3
VENV = "/opt/venv"


def fake_wheel(folder: Path, name: str, version: str, payload: int, seed: int) -> Path:
    """A pure-Python wheel of *name* with a .py module and *payload* random bytes under nvidia/<name>/lib."""
    dist = name.replace("-", "_")
    rng = random.Random(seed)
    files = {
        f"{dist}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"nvidia/{dist}/lib/lib{dist}.so": rng.randbytes(payload),
        f"{dist}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{dist}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: imagesmith-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}-{version}.dist-info/RECORD,,")
    files[f"{dist}-{version}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    out = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            z.writestr(path, data)
    return out


def context(root: Path, wheels: Path, pins: list[tuple[str, str]], sizes: SizeTable) -> tuple[Path, int]:
    """A build context: venv, the find-links folder, the layer block; returns (context, planned layers)."""
    layers = plan_layers(pins, PYTHON, sizes, min_bytes=100_000)
    root.mkdir()
    (root / "wheels").mkdir()
    for w in wheels.iterdir():
        (root / "wheels" / w.name).write_bytes(w.read_bytes())
    (root / "certs").mkdir()
    (root / "certs" / "README").write_text("no extra CA\n")
    for name, text in wheel_layer_files(layers, venv=VENV, python=PYTHON, hashed=False).items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    (root / "Dockerfile").write_text(
        "ARG BASE_IMAGE=debian:bookworm\nFROM ${BASE_IMAGE}\n"
        'SHELL ["/bin/bash", "-o", "pipefail", "-c"]\n'
        "RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv "
        "&& rm -rf /var/lib/apt/lists/*\n"
        f"RUN python3 -m venv {VENV}\n"
        "COPY certs/ /tmp/ctx/certs/\n"
        "COPY wheels/ /wheels/\n"
        "ENV PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels\n"
        + wheel_layers_block(layers)
        + f"RUN {VENV}/bin/python -m pip check && {VENV}/bin/python -c 'import fakecuda, faketorch'\n"
    )
    return root, len(layers)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[TempRegistry]:
    with temp_registry(tmp_path / "registry") as reg:
        yield reg


PINS_A = [("fakecuda", "1.0"), ("faketorch", "1.0"), ("tinyrest", "1.0")]
PINS_B = [("fakecuda", "1.0"), ("faketorch", "2.0"), ("tinyrest", "1.0")]  # the middle layer's pin changed


def two_contexts(tmp_path: Path) -> tuple[Path, Path, int]:
    """Contexts A and B (:data:`PINS_A`, :data:`PINS_B`) over one find-links folder; the planned layers."""
    wheels = tmp_path / "find-links"
    wheels.mkdir()
    made = [
        fake_wheel(wheels, "fakecuda", "1.0", 400_000, seed=1),
        fake_wheel(wheels, "faketorch", "1.0", 200_000, seed=2),
        fake_wheel(wheels, "faketorch", "2.0", 200_000, seed=3),
        fake_wheel(wheels, "tinyrest", "1.0", 1_000, seed=4),
    ]
    sizes = SizeTable(
        rows=tuple(
            WheelSize(name=n, version=v, python=PYTHON, file=w.name, size=w.stat().st_size)
            for w, (n, v) in zip(
                made,
                [("fakecuda", "1.0"), ("faketorch", "1.0"), ("faketorch", "2.0"), ("tinyrest", "1.0")],
                strict=True,
            )
        )
    )
    ctx_a, planned = context(tmp_path / "a", wheels, PINS_A, sizes)
    ctx_b, _ = context(tmp_path / "b", wheels, PINS_B, sizes)
    assert planned == 3  # fakecuda, faketorch, the rest
    return ctx_a, ctx_b, planned


def test_shared_wheel_layer_is_the_same_blob_across_builds(tmp_path: Path, registry: TempRegistry) -> None:
    ctx_a, ctx_b, planned = two_contexts(tmp_path)
    engine = Engine(backend="buildkit")
    name = f"imagesmith-test/layers-{uuid.uuid4().hex[:8]}"
    try:
        engine.build(context=ctx_a, tags=[f"{name}:a"], build_args={"BASE_IMAGE": BASE})
        # B from scratch: the same wheel must make the same bytes without BuildKit's cache
        engine.build(context=ctx_b, tags=[f"{name}:b"], build_args={"BASE_IMAGE": BASE}, no_cache=True)
        la = (engine.inspect(f"{name}:a") or {})["RootFS"]["Layers"]
        lb = (engine.inspect(f"{name}:b") or {})["RootFS"]["Layers"]
        assert len(la) == len(lb)
        # the block: /etc placeholders, the mount targets, one RUN per layer (no COPY), then the final RUN
        block = la[-(3 + planned) : -1]
        block_b = lb[-(3 + planned) : -1]
        cuda_run, torch_run, rest_run = block[2], block[3], block[4]
        assert cuda_run == block_b[2], "fakecuda's layer differs between two builds"
        assert rest_run == block_b[4], "the rest layer differs between two builds"
        assert torch_run != block_b[3]
        ref_a, ref_b = f"{registry.addr}/{name}:a", f"{registry.addr}/{name}:b"
        engine.tag(f"{name}:a", ref_a)
        engine.tag(f"{name}:b", ref_b)
        first = engine.push(ref_a)
        second = engine.push(ref_b)
        assert first.layers_existing == 0
        assert cuda_run[7:19] in first.pushed_ids
        assert cuda_run[7:19] not in second.pushed_ids  # already there: not uploaded again
        assert rest_run[7:19] not in second.pushed_ids
        assert torch_run[7:19] in first.pushed_ids
        assert block_b[3][7:19] in second.pushed_ids
        assert second.layers_existing >= 2
        client = registry.client()
        ma = {x["digest"] for x in client.get_manifest(name, first.digest).json()["layers"]}
        mb = {x["digest"] for x in client.get_manifest(name, second.digest).json()["layers"]}
        assert len(ma & mb) >= 2  # the CUDA layer and the rest layer are one blob each
    finally:
        for tag in ("a", "b"):
            engine.remove(f"{name}:{tag}", force=True)
            engine.remove(f"{registry.addr}/{name}:{tag}", force=True)


def wheel_steps(lines: list[str]) -> dict[str, bool]:
    """``{pin file: CACHED?}`` of the wheel-layer RUNs in BuildKit's plain progress lines."""
    names: dict[str, str] = {}
    cached: set[str] = set()
    for line in lines:
        m = re.match(r"^#(\d+) \[[^\]]*\] RUN .*wheel-layer\.sh (layers/\S+\.txt)$", line)
        if m and m.group(1) not in names:
            names[m.group(1)] = m.group(2)
        m = re.match(r"^#(\d+) CACHED$", line)
        if m:
            cached.add(m.group(1))
    return {pin_file: sid in cached for sid, pin_file in names.items()}


def test_a_changed_pin_rebuilds_its_layer_and_those_above_only(tmp_path: Path) -> None:
    """BuildKit keys each wheel layer's RUN on its line and the two bind-mounted files: with the cache, B
    (the middle layer's pin changed) takes the layer below from A's build and runs the changed one and the one
    above again — and that one, rebuilt on another parent, is still the same bytes."""
    ctx_a, ctx_b, planned = two_contexts(tmp_path)
    assert "COPY layers/0" not in (ctx_b / "Dockerfile").read_text()
    engine = Engine(backend="buildkit")
    name = f"imagesmith-test/layer-cache-{uuid.uuid4().hex[:8]}"
    try:
        engine.build(context=ctx_a, tags=[f"{name}:a"], build_args={"BASE_IMAGE": BASE})
        lines: list[str] = []
        engine.build(
            context=ctx_b,
            tags=[f"{name}:b"],
            build_args={"BASE_IMAGE": BASE},
            on_event=lambda event: lines.append(event.line),
        )
        steps = wheel_steps(lines)
        assert list(steps) == ["layers/01-fakecuda.txt", "layers/02-faketorch.txt", "layers/03-rest.txt"]
        assert steps == {
            "layers/01-fakecuda.txt": True,  # below the change: CACHED
            "layers/02-faketorch.txt": False,  # the changed pin
            "layers/03-rest.txt": False,  # above it: runs again
        }, "\n".join(lines[-80:])
        la = (engine.inspect(f"{name}:a") or {})["RootFS"]["Layers"]
        lb = (engine.inspect(f"{name}:b") or {})["RootFS"]["Layers"]
        block_a, block_b = la[-(3 + planned) : -1], lb[-(3 + planned) : -1]
        assert block_a[:3] == block_b[:3]  # placeholders, mount targets, fakecuda
        assert block_a[3] != block_b[3]  # faketorch 1.0 vs 2.0
        assert block_a[4] == block_b[4], "the rest layer, rebuilt above the changed one, differs"
    finally:
        for tag in ("a", "b"):
            engine.remove(f"{name}:{tag}", force=True)
