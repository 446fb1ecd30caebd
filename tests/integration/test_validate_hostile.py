"""Issue 17: ``imagesmith validate IMAGE`` against a hostile image on the real dockerd.

The image (built here from the local debian:bookworm) carries an ``imagesmith-validate`` that does not run
the suite: it writes a forged "passed" report naming another digest, plants symbolic links to a file of the
host (as ``junit.xml``, which the host would copy, and ``report.md``, which the host would write through) and
drops a report for another digest in a sub-folder, where ``release --reports`` would find it. Before the fix
the report folder was mounted into the container and all of that reached it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith.engine import Engine

pytestmark = pytest.mark.docker

BASE = "127.0.0.1:5000/hub/library/debian:bookworm"
OTHER = "sha256:" + "d" * 64

FORGED = {
    "schema": 2,
    "verdict": "passed",
    "verdict_reason": "forged",
    "target": f"anything@{OTHER}",
    "image": {"digest": OTHER},
    "checks": [
        {"name": "test_cuda_kernel", "module": "m", "status": "passed", "figures": {}, "warnings": []},
    ],
}

SCRIPT = """#!/bin/sh
# a hostile "suite": forge the verdict, plant links to the host, drop a report for another digest
R=/imagesmith-report
cat > $R/report.json <<'EOF'
@FORGED@
EOF
ln -s @VICTIM@ $R/junit.xml
ln -s @VICTIM@ $R/report.md
mkdir -p $R/other
cp $R/report.json $R/other/report.json
echo planted
"""


@pytest.fixture
def hostile_image(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    engine = Engine()
    victim = tmp_path_factory.mktemp("host") / "victim.txt"
    victim.write_text("host secret\n")
    context = tmp_path_factory.mktemp("hostile")
    script = SCRIPT.replace("@FORGED@", json.dumps(FORGED)).replace("@VICTIM@", str(victim))
    (context / "imagesmith-validate").write_text(script)
    (context / "Dockerfile").write_text(
        "ARG BASE_IMAGE=debian:bookworm\nFROM ${BASE_IMAGE}\n"
        "COPY --chmod=755 imagesmith-validate /usr/local/bin/imagesmith-validate\n"
        'LABEL io.imagesmith.validate="imagesmith-validate local://"\n'
    )
    ref = f"imagesmith-test/hostile:{uuid.uuid4().hex[:8]}"
    engine.build(context=context, tags=[ref], build_args={"BASE_IMAGE": BASE})
    yield ref, victim
    engine.remove(ref, force=True)


def test_hostile_image_cannot_forge_its_verdict_or_reach_the_host(
    hostile_image: tuple[str, Path], run_cli: Any, tmp_path: Path
) -> None:
    image, victim = hostile_image
    report = tmp_path / "report"
    r = run_cli("validate", image, "--gpus", "none", "--report", str(report))
    assert r.exit_code == 7, r.stdout + r.stderr
    assert victim.read_text() == "host secret\n"
    data = json.loads((report / "report.json").read_text())
    assert data["verdict"] == "failed"
    assert "junit.xml: a symbolic link (not followed)" in data["verdict_reason"]
    assert "other: a folder" in data["verdict_reason"]
    assert data["target"] == image
    assert data["suite_claim"]["verdict"] == "passed"
    assert "image" not in data
    assert sorted(p.name for p in report.iterdir()) == ["report.json", "report.md"]
    assert not any(p.is_symlink() for p in report.iterdir())
    assert (report / "report.md").read_text().startswith("# Validation: FAILED")
