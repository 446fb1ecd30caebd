"""Issue 39, against the real local registry and engine: `imagesmith build` of a cell whose base the registry
mirror does not serve stops before BuildKit runs, with one error naming the base, the mirror and the fix —
not BuildKit's `…/library/ubuntu:22.04: not found` after the other stages started. The mirror is a prefix of
the plain local registry that holds nothing (as 127.0.0.1:5000/hub holds no ubuntu:22.04 on a machine that
reaches no Docker Hub); the bookworm base, which the mirror does serve, passes the same check."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from imagesmith.build import BaseSources
from imagesmith.config import UserConfig
from imagesmith.engine import Engine
from imagesmith.errors import BuildError
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.registry import client_for
from tests.localinfra import LocalRegistries, local_registries
from tests.repo import REPO

pytestmark = [pytest.mark.registry, pytest.mark.docker]

UBUNTU_CELL = "2.1.2-cu121-py3.10-runtime-ubuntu22.04"


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def test_build_of_a_base_the_mirror_lacks_stops_before_buildkit(
    regs: LocalRegistries, tmp_path: Path
) -> None:
    empty = f"{regs.plain}/imagesmith-test-empty-mirror-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ)
    env["IMAGESMITH_CONFIG"] = str(tmp_path / "config.toml")  # no user config
    env["IMAGESMITH_REGISTRY_MIRRORS"] = f"docker.io={empty}"
    args = ["build", "--matrix", "a100", "--only", UBUNTU_CELL, "--push"]
    args += ["--registries", str(REPO / "matrices" / "local" / "registries.toml")]
    proc = subprocess.run(
        [sys.executable, "-m", "imagesmith", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=REPO,
    )
    err = proc.stderr
    assert proc.returncode == 5, err
    assert f"error: base image ubuntu:22.04 (cell {UBUNTU_CELL}) is not in the registry mirror" in err, err
    assert f"sends docker.io to {empty}, which does not serve {empty}/library/ubuntu:22.04" in err, err
    assert "fix: seed the mirror" in err
    assert "scripts/debian-base.sh" in err
    assert "'*-debian12'" in err
    assert "docker build exit" not in err  # BuildKit never ran
    assert "#1 " not in err


def test_a_base_the_mirror_serves_or_the_engine_holds_passes(regs: LocalRegistries) -> None:
    """debian:bookworm through the mirror setup.sh seeds (127.0.0.1:5000/hub): asked of the registry itself.
    Through an empty mirror it is refused, unless the engine holds the mapped name (BuildKit takes it from
    there): tagged into the engine for the test, removed after."""
    cells = build_plan(load_matrix("a100")).select(["2.1.2-cu121-py3.11-runtime-debian12"]).cells
    assert cells
    seeded = UserConfig(registry_mirrors=(("docker.io", f"{regs.plain}/hub"),))
    BaseSources(seeded, client_for=client_for).check_mirrored(cells, held=lambda ref: False)

    empty = f"{regs.plain}/imagesmith-test-empty-mirror-{uuid.uuid4().hex[:8]}"
    config = UserConfig(registry_mirrors=(("docker.io", empty),))
    engine = Engine()
    with pytest.raises(BuildError, match=f"which does not serve {empty}/library/debian:bookworm"):
        BaseSources(config, client_for=client_for).check_mirrored(
            cells, held=lambda ref: engine.inspect(ref) is not None
        )
    mapped = f"{empty}/library/debian:bookworm"
    engine.tag(f"{regs.plain}/hub/library/debian:bookworm", mapped)
    try:
        BaseSources(config, client_for=client_for).check_mirrored(
            cells, held=lambda ref: engine.inspect(ref) is not None
        )
    finally:
        engine.remove(mapped)
