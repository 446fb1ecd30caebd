"""The extra CA reaches pip as a BuildKit secret and lands in no layer (issue 17), for real.

The smoke cell's nccl-tests stage (its pip RUN downloads the builder wheels from the index through the
shared wheelhouse) is built with ``--no-cache`` so every RUN runs, with an extra CA that is this machine's CA
bundle (``IMAGESMITH_TEST_EXTRA_CA``, or the system bundle) plus a unique comment line — a probe TLS ignores.
Then ``docker save`` of the built image is read layer by layer: the probe is in no file of any layer, and the
log shows that the pip RUN ran (it was not a cache hit, so the secret was mounted for it).
"""

from __future__ import annotations

import os
import subprocess
import tarfile
import uuid
from pathlib import Path

import pytest

from imagesmith.build import CA_SECRET, build_args, stage_context
from imagesmith.config import UserConfig
from imagesmith.engine import Engine
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from tests.repo import PROJECT

pytestmark = [pytest.mark.e2e, pytest.mark.docker]

DOCKER = "/usr/bin/docker"


def _files_with(tar_path: Path, probe: bytes) -> tuple[int, list[str]]:
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


def test_the_extra_ca_is_in_no_layer_of_the_built_stage(tmp_path: Path) -> None:
    matrix = load_matrix("smoke", project=PROJECT)
    (cell,) = build_plan(matrix, project=PROJECT).cells
    host_ca = Path(os.environ.get("IMAGESMITH_TEST_EXTRA_CA", "/etc/ssl/certs/ca-certificates.crt"))
    probe = f"imagesmith-ca-probe-{uuid.uuid4().hex}".encode()
    ca = tmp_path / "extra-ca.pem"
    ca.write_bytes(host_ca.read_bytes() + b"\n# " + probe + b"\n")
    config = UserConfig().with_overrides(
        mirrors=[os.environ.get("IMAGESMITH_REGISTRY_MIRRORS", "docker.io=127.0.0.1:5000/hub")], extra_ca=ca
    )
    context = stage_context(cell, matrix, config, tmp_path / "staging", project=PROJECT)
    assert not any(p.is_file() and probe in p.read_bytes() for p in context.rglob("*"))
    engine = Engine(backend="buildkit")
    tag = f"imagesmith-test/ca-secret:{probe[-12:].decode()}"
    try:
        engine.build(
            context=context,
            tags=[tag],
            target="nccl-tests",
            build_args=build_args(cell, config),
            secrets={CA_SECRET: ca},
            no_cache=True,
            what="smoke nccl-tests stage",
        )
        log = (context / ".imagesmith-build.log").read_text(errors="replace")
        assert "--mount=type=secret,id=imagesmith-ca" in log
        assert "pip download" in log
        assert "Successfully installed" in log  # the pip RUN ran with the secret mounted
        saved = tmp_path / "image.tar"
        subprocess.run([DOCKER, "save", "-o", str(saved), tag], check=True)
        layers, hits = _files_with(saved, probe)
        assert layers >= 3
        assert hits == [], f"the CA probe is in a layer: {hits}"
        # the probe is findable when it is in a layer (the scan is not blind): a file of the context is
        assert _files_with_bytes(tmp_path, probe)
    finally:
        subprocess.run([DOCKER, "rmi", "-f", tag], check=False, capture_output=True)


def _files_with_bytes(root: Path, probe: bytes) -> bool:
    """A tar of a folder holding the probe, scanned the same way: the scan finds it."""
    folder = root / "control"
    folder.mkdir()
    (folder / "ca.pem").write_bytes(b"x\n" + probe + b"\n")
    inner = root / "layer.tar"
    with tarfile.open(inner, "w") as t:
        t.add(folder, arcname="etc")
    outer = root / "outer.tar"
    with tarfile.open(outer, "w") as t:
        t.add(inner, arcname="abc/layer.tar")
    return bool(_files_with(outer, probe)[1])
