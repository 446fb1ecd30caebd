"""End to end, for real (issue 26): the smoke cell on a copy of the local debian:bookworm under this test's
own repository; the base re-published under the same name with one changed file; `imagesmith lock --bases`,
`imagesmith render`, then `imagesmith build --push` of both matrices: the cell on the moved base is really
built (real torch wheels, nccl-tests compiled) FROM the new digest and says why; the cell on the other name
of the unmoved base is skipped.

Fixtures and the re-publishing are those of tests/integration/test_bases_lock.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from imagesmith.bases import read_bases
from imagesmith.project import load_project
from imagesmith.registry import copy_manifest
from imagesmith.tags import candidate_tag, fingerprint_tag, local_ref
from tests.integration.test_bases_lock import _cells, _republish, world  # noqa: F401

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.registry]


def _imagesmith(
    args: list[str], cwd: Any, timeout: int = 3600, *, python: bool = False
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [sys.executable, *([] if python else ["-m", "imagesmith"]), *args],
        cwd=cwd,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(
            f"imagesmith {' '.join(args)} exited {proc.returncode}:\n"
            f"{proc.stderr[-6000:]}\n{proc.stdout[-3000:]}"
        )
    return proc


def test_only_the_cell_on_the_moved_base_is_rebuilt(
    world: dict[str, Any],  # noqa: F811
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    root, prefix, client = world["root"], world["prefix"], world["client"]
    # the machine's own user config (its extra CA for pip in the build), with this test's mirror map on top
    monkeypatch.delenv("IMAGESMITH_CONFIG")
    _imagesmith(["lock", "--bases"], root)
    project = load_project(root / "imagesmith.toml")
    d1 = read_bases(project.locks_dir).entries["debian:bookworm"].digest  # type: ignore[union-attr]
    # the suite digest as the CLI computes it in the project (not this process's: with the checkout as working
    # directory, its imagesmith.egg-info is the metadata imagesmith's own wheel is made with)
    suite = _imagesmith(
        ["-c", "from imagesmith.build import suite_digest; print(suite_digest())"], root, python=True
    ).stdout.strip()
    for cell in _cells(project, world).values():  # both built on d1 (as the nightly left them)
        for tag in (fingerprint_tag(cell.publish.fingerprint, suite), candidate_tag(cell)):
            copy_manifest(client, f"{prefix}/library/debian", d1, client, f"{prefix}/torch", put_as=tag)  # type: ignore[arg-type]

    _republish(world)
    _imagesmith(["lock", "--bases"], root)
    _imagesmith(["render"], root)
    d2 = read_bases(project.locks_dir).entries["debian:bookworm"].digest  # type: ignore[union-attr]
    # what the CLI plans and bakes in is what this process seeded the registry with
    planned = json.loads(_imagesmith(["plan", "--matrix", world["other"], "--json"], root).stdout)
    assert planned["cells"][0]["fingerprint"] == _cells(project, world)["other"].publish.fingerprint
    extra_ca = os.environ.get("IMAGESMITH_TEST_EXTRA_CA") or os.environ.get("PIP_CERT")
    ca = ["--extra-ca", extra_ca] if extra_ca else []  # pip in the build behind a TLS-intercepting proxy
    _imagesmith(["build", "--matrix", world["other"], "--push", "--summary", "other.json", *ca], root)
    other = json.loads((root / "other.json").read_text())["cells"]
    assert [c["status"] for c in other] == ["skipped"]
    done = _imagesmith(["build", "--matrix", world["smoke"], "--push", "--summary", "smoke.json", *ca], root)
    (smoke,) = json.loads((root / "smoke.json").read_text())["cells"]
    world["made"].append(local_ref(_cells(project, world)["smoke"]))
    assert smoke["status"] == "pushed"
    assert smoke["reason"].startswith(f"rebuilt: base debian:bookworm moved {d1[:19]}…→{d2[:19]}…")  # type: ignore[index]
    assert smoke["reason"] in done.stdout
    assert smoke["base_moved"] is True
    assert smoke["bases"] == {"debian:bookworm": f"{world['plain']}/{prefix}/library/debian:bookworm@{d2}"}
    # the image is on the re-published base: its one changed file is there
    out = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--entrypoint",
            "cat",
            local_ref(_cells(project, world)["smoke"]),
            "/etc/imagesmith-i26b",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "republished"
