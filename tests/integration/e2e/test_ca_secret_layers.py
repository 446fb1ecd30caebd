"""The pip_install macro and the wheel-layer script for real (issues 11, 17, 24): the extra CA reaches pip as
a BuildKit secret and lands in no layer; pip runs in hash-checking mode; the wheelhouse cache is shared.

The image is the smoke cell's final stage up to its venv (the same instructions, so those layers come from the
build cache), then one RUN of ``parts.j2``'s ``pip_install`` — or one wheel layer of the layer plan (the
context's wheel-layer.sh on a bind-mounted pin file) — for a small pinned wheel of the smoke lock, with
its sha256 from the lock. The extra CA handed to the build is this machine's CA bundle
(``IMAGESMITH_TEST_EXTRA_CA``, or the system bundle) plus a unique comment line — a probe TLS ignores. The
requirements file carries the probe's id in a comment, so the pip RUN is no cache hit: it runs with the
secret.
Then ``docker save`` of the image is read layer by layer: the probe is in no file of any layer (and the same
scan finds it in a control tar). A second image with the same pin downloads nothing (the wheelhouse). A wrong
sha256 fails the build with pip's hash error.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from imagesmith import compat
from imagesmith.build import CA_SECRET, build_args
from imagesmith.config import UserConfig
from imagesmith.engine import Engine
from imagesmith.errors import BuildError
from imagesmith.layerplan import WheelLayer
from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import build_plan
from imagesmith.templating import _environment, render_cell_files, wheel_layer_files, wheel_layers_block
from tests.repo import PROJECT

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

DOCKER = "/usr/bin/docker"
PIN = "iniconfig"


def _scan(tar_path: Path, probe: bytes) -> tuple[int, list[str]]:
    layers, hits = 0, []
    with tarfile.open(tar_path) as outer:
        for member in outer.getmembers():
            if not (member.name.endswith("layer.tar") or member.name.startswith("blobs/")):
                continue
            data = outer.extractfile(member)
            if data is None:
                continue
            try:
                with tarfile.open(fileobj=data, mode="r|*") as inner:
                    layers += 1
                    for entry in inner:
                        f = inner.extractfile(entry) if entry.isfile() else None
                        if f is not None and probe in f.read():
                            hits.append(f"{member.name}:{entry.name}")
            except tarfile.TarError:
                continue
    return layers, hits


#: how the probe's pin is installed: the pip_install macro, or one wheel layer (wheel-layer.sh, issue 24)
VIA = ("pip_install", "wheel-layer.sh")
PROBE_LAYER = WheelLayer(index=1, kind="rest", pins=(), size=0)  # its pin file: layers/01-rest.txt


def _context(tmp_path: Path, cell: Cell, requirement: str, via: str = "pip_install") -> Path:
    """The smoke cell's final stage up to its venv, then one pip_install RUN of *requirement* — or, *via*
    ``wheel-layer.sh``, the layer-plan block with one layer whose pin file is *requirement*."""
    files = render_cell_files(cell)
    lines = files["Dockerfile"].splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("FROM ${BASE_IMAGE}"))
    end = next(i for i, ln in enumerate(lines) if ln.startswith(f"RUN python3 -m venv {cell.runtime.venv}"))
    family = compat.os_family(cell.bases.os)
    assert family is not None
    ctx = tmp_path / "ctx"
    ctx.mkdir(parents=True)
    head = [f"ARG BASE_IMAGE={cell.bases.base_image}", *lines[start : end + 1]]
    if via == "wheel-layer.sh":
        extra = wheel_layer_files(
            [PROBE_LAYER], venv=cell.runtime.venv, python=cell.runtime.python, hashed=True
        )
        extra[PROBE_LAYER.file] = requirement
        for name, text in extra.items():
            (ctx / name).parent.mkdir(parents=True, exist_ok=True)
            (ctx / name).write_text(text)
        run = wheel_layers_block([PROBE_LAYER])
    else:
        run = (
            _environment()
            .from_string(
                '{% import "parts.j2" as parts with context %}'
                '{{ parts.pip_install(cell.runtime.venv ~ "/bin/python", '
                '"-r /tmp/ctx/probe-requirements.txt") }}'
            )
            .render(cell=cell, os_family=family)
        )
        head.append("COPY probe-requirements.txt /tmp/ctx/")
        (ctx / "probe-requirements.txt").write_text(requirement)
    (ctx / "Dockerfile").write_text("\n".join(head) + "\n" + run)
    script = f"{family.name}-mirror.sh"
    (ctx / script).write_text(files[script])
    return ctx


@pytest.fixture(scope="module")
def cell() -> Cell:
    (c,) = build_plan(load_matrix("smoke", project=PROJECT), project=PROJECT).cells
    return c


@pytest.fixture
def config(tmp_path: Path) -> UserConfig:
    return UserConfig().with_overrides(
        mirrors=[os.environ.get("IMAGESMITH_REGISTRY_MIRRORS", "docker.io=127.0.0.1:5000/hub")]
    )


@pytest.mark.parametrize("via", VIA)
def test_the_extra_ca_is_in_no_layer_and_pip_checks_hashes(
    tmp_path: Path, cell: Cell, config: UserConfig, via: str
) -> None:
    host_ca = Path(os.environ.get("IMAGESMITH_TEST_EXTRA_CA", "/etc/ssl/certs/ca-certificates.crt"))
    token = uuid.uuid4().hex
    probe = f"imagesmith-ca-probe-{token}".encode()
    ca = tmp_path / "extra-ca.pem"
    ca.write_bytes(host_ca.read_bytes() + b"\n# " + probe + b"\n")
    version = cell.lock.pins[[n for n, _ in cell.lock.pins].index(PIN)][1]
    hashes = cell.lock.hashes_of(PIN, version)
    assert hashes
    req = f"# run {token}\n{PIN}=={version}" + "".join(f" \\\n    --hash=sha256:{h}" for h in hashes) + "\n"
    ctx = _context(tmp_path, cell, req, via)
    engine = Engine(backend="buildkit")
    tag = f"imagesmith-test/ca-secret:{token[:12]}"
    try:
        engine.build(
            context=ctx,
            tags=[tag],
            build_args=build_args(cell, config),
            secrets={CA_SECRET: ca},
            what="pip_install probe",
        )
        log = (ctx / ".imagesmith-build.log").read_text(errors="replace")
        if via == "pip_install":
            assert "--require-hashes" in log
        else:  # the flags are in the script; the RUN line names the layer's pin file
            assert "--require-hashes" in (ctx / "wheel-layer.sh").read_text()
            assert f"imagesmith: wheel layer {PROBE_LAYER.file}" in log
        assert f"Successfully installed {PIN}-{version}" in log  # the pip RUN ran, with the secret mounted
        # no CA bundle left; no secret mount target (pip_install) or only the empty one the layer-plan block
        # makes with a fixed mtime before its first layer
        probe_cmd = (
            "ls /run/secrets /tmp/ca.pem 2>&1; cat /run/secrets/imagesmith-ca 2>/dev/null | wc -c; true"
        )
        out = engine.run_container(tag, ["sh", "-c", probe_cmd], timeout_s=60)
        assert "/tmp/ca.pem': No such file" in out.output, out.output
        assert ("imagesmith-ca" in out.output) == (via == "wheel-layer.sh"), out.output
        assert out.output.strip().endswith("\n0"), out.output
        saved = tmp_path / "image.tar"
        subprocess.run([DOCKER, "save", "-o", str(saved), tag], check=True)
        layers, hits = _scan(saved, probe)
        assert layers >= 3
        assert hits == [], f"the CA probe is in a layer: {hits}"
        saved.unlink()
        # the scan is not blind: the same probe in a layer-shaped tar is found
        folder = tmp_path / "control"
        folder.mkdir()
        (folder / "ca.pem").write_bytes(b"x\n" + probe + b"\n")
        inner, outer = tmp_path / "layer.tar", tmp_path / "outer.tar"
        with tarfile.open(inner, "w") as t:
            t.add(folder, arcname="etc")
        with tarfile.open(outer, "w") as t:
            t.add(inner, arcname="abc/layer.tar")
        assert _scan(outer, probe)[1]
        # the wheelhouse is shared: another image's pip RUN (not a layer cache hit) downloads nothing
        again = _context(tmp_path / "again", cell, req.replace(token, token[::-1]), via)
        engine.build(
            context=again,
            tags=[tag + "-again"],
            build_args=build_args(cell, config),
            secrets={CA_SECRET: ca},
            what="pip_install probe, again",
        )
        log = (again / ".imagesmith-build.log").read_text(errors="replace")
        assert f"File was already downloaded /var/cache/imagesmith/wheels/{PIN}-{version}" in log
        assert f"Successfully installed {PIN}-{version}" in log
    finally:
        subprocess.run([DOCKER, "rmi", "-f", tag, tag + "-again"], check=False, capture_output=True)


@pytest.mark.parametrize("via", VIA)
def test_a_wheel_whose_sha256_differs_from_the_lock_fails_the_build(
    tmp_path: Path, cell: Cell, config: UserConfig, via: str
) -> None:
    version = cell.lock.pins[[n for n, _ in cell.lock.pins].index(PIN)][1]
    token = uuid.uuid4().hex
    req = f"# run {token}\n{PIN}=={version} \\\n    --hash=sha256:{'0' * 64}\n"
    ctx = _context(tmp_path, cell, req, via)
    tag = f"imagesmith-test/ca-secret:bad-{token[:12]}"
    ca = Path(os.environ.get("IMAGESMITH_TEST_EXTRA_CA", "/etc/ssl/certs/ca-certificates.crt"))
    try:
        with pytest.raises(BuildError, match="DO NOT MATCH THE HASHES"):
            Engine(backend="buildkit").build(
                context=ctx,
                tags=[tag],
                build_args=build_args(cell, config),
                secrets={CA_SECRET: ca},
                what="pip_install wrong hash",
            )
    finally:
        subprocess.run([DOCKER, "rmi", "-f", tag], check=False, capture_output=True)
