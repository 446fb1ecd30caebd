"""Issue 32, the evidence end to end against the REAL local registry (scripts/services.sh): a signed cluster
report of the candidate's digest under --reports becomes the index entry's ``cluster`` (index schema v2),
published, read back by pick's fetch and printed as pick's line; the signed report itself is attached beside
the digest (``sha256-<hex>.cluster``), fetched and verified by ``pick --verify-cluster``, and one swapped in
the registry is refused (exit 9) until a rerun puts the released one back; a rerun without it, and a later
release that carries the entry, keep it; a failed cluster report refuses its cell before any tag moves."""

from __future__ import annotations

import base64
import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from imagesmith import signing
from imagesmith.commands.output import pick_text
from imagesmith.indextrust import IndexKey, Trust
from imagesmith.pick import Constraints, choose, fetch_index, load_platforms, platform_for, read_host
from imagesmith.registry import ensure_blob
from imagesmith.release import Outcome, collect_reports, release_cells
from imagesmith.release.clusterartifact import cluster_manifest
from imagesmith.release.evidence import collect_cluster_reports
from imagesmith.tags import cluster_tag
from imagesmith.validate import clusterrecord
from tests.clusterreports import cluster_document
from tests.integration.test_release import KEY, TRUSTED, cell, clients_for, push_image, targets, write_report
from tests.localinfra import LocalRegistries, local_registries

pytestmark = pytest.mark.registry


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


def _cluster(folder: Path, digest: str, repo: str, **kw: object) -> None:
    folder.mkdir(parents=True)
    data = cluster_document(digest, repo=repo, **kw)  # type: ignore[arg-type]
    clusterrecord.write_report(folder, data, "# md\n", sign=lambda d: clusterrecord.sign_report(d, key=KEY))


def test_a_signed_cluster_report_reaches_the_published_index_and_pick(
    regs: LocalRegistries, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_cli: Any
) -> None:
    repo = f"imagesmith-test/cluster-{uuid.uuid4().hex[:10]}"
    plain = regs.plain_client()
    a = push_image(plain, repo, "a-candidate", "cluster a")
    b = push_image(plain, repo, "b-candidate", "cluster b")
    write_report(tmp_path / "r" / "a", f"{regs.plain}/{repo}@{a}", "passed")
    write_report(tmp_path / "r" / "b", f"{regs.plain}/{repo}@{b}", "passed")
    _cluster(tmp_path / "r" / "cluster-a", a, repo, nodes=3, gpus=8, fabric="ib")
    index_file = tmp_path / "index.json"
    release_key = signing.generate_key("ed25519")
    regs_a = targets(regs, repo)[:1]

    def release(cells: list[str], dirs: list[Path]) -> Outcome:
        return release_cells(
            [cell(c, regs_a) for c in cells],
            matrix="t",
            reports=collect_reports(dirs, TRUSTED),
            cluster_reports=collect_cluster_reports(dirs, TRUSTED),
            index_file=index_file,
            client_for=clients_for(regs),
            trusted=TRUSTED,
            sign_key=release_key,
        )

    out = release(["a"], [tmp_path / "r"])
    out.raise_for_refusals()
    doc = json.loads(index_file.read_text())
    assert doc["schema"] == "imagesmith.release-index/v2"
    (entry,) = doc["images"]
    assert entry["cluster"]["nodes"] == 3
    assert entry["cluster"]["gpus_per_node"] == 8
    assert entry["cluster"]["fabric"] == "ib"

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    trust = Trust(key=IndexKey.of(release_key.public, "test"))
    fetched = fetch_index(f"oci+http://{regs.plain}/{repo}", insecure=True, trust=trust)
    host = read_host(driver="580.159.04", gpus=["h200"])
    pick = choose(fetched, host, Constraints(), platform=platform_for(load_platforms(), None, None))
    assert pick.image.digest == a
    assert "  validated on 3 nodes × 8 GPUs, fabric ib (InfiniBand) (2026-12-02;" in pick_text(pick)

    # the signed report itself is in the registry beside the digest, its digest bound by the signed index;
    # what it carries names no node (the local cluster.json keeps them)
    tag = cluster_tag(a)
    assert entry["cluster"]["artifact"] == plain.manifest_digest(repo, tag)
    layers = json.loads(plain.get_manifest(repo, tag).body)["layers"]
    with plain.get_blob(repo, layers[0]["digest"]) as resp:
        payload = base64.b64decode(json.loads(b"".join(resp.iter_content(1 << 16)))["payload"]).decode()
    assert "node-1" in payload
    assert "root@n1" not in payload
    assert "10.0.0.1" not in payload
    assert "root@n1" in (tmp_path / "r" / "cluster-a" / "cluster.json").read_text()

    # a renter fetches and verifies it as pick does: the artifact the signed index records, its DSSE
    # signature, about the picked digest
    pub = tmp_path / "release.pub"
    pub.write_bytes(release_key.public.pem)
    argv = ["pick", "--index", f"oci+http://{regs.plain}/{repo}", "--insecure", "--verify-key", str(pub)]
    argv += ["--driver", "580.159.04", "--gpu", "h200", "--verify-cluster"]
    ok = run_cli(*argv)
    assert ok.exit_code == 0, ok.stderr
    assert f"cluster evidence verified: {regs.plain}/{repo}:{tag}" in ok.stdout
    assert "validated on 3 nodes × 8 GPUs" in ok.stdout

    # another signed report of the same digest pushed in its place (2 nodes): refused, naming the registry,
    # the tag and the field; a rerun of the release with the cluster folder puts the released one back
    other_env = clusterrecord.sign_report(cluster_document(a, repo=repo, nodes=2), key=KEY)
    other = clusterrecord.verify_report(other_env, TRUSTED, source="other")
    swapped = cluster_manifest(plain.get_manifest(repo, a), other)
    for blob in (b"{}", other.envelope, KEY.public.pem):
        ensure_blob(plain, repo, blob)
    plain.put_manifest(repo, tag, swapped)
    bad = run_cli(*argv)
    assert bad.exit_code == 9, bad.stdout + bad.stderr
    assert tag in bad.stderr
    assert "cluster.artifact: the registry serves " + swapped.digest in bad.stderr
    release(["a"], [tmp_path / "r"]).raise_for_refusals()
    assert plain.manifest_digest(repo, tag) == entry["cluster"]["artifact"]
    assert run_cli(*argv).exit_code == 0

    # a rerun without the cluster folder, and the release of another cell that carries a's entry: kept
    release(["a"], [tmp_path / "r" / "a"]).raise_for_refusals()
    release(["b"], [tmp_path / "r" / "b"]).raise_for_refusals()
    by_tag = {e["tag"]: e for e in json.loads(index_file.read_text())["images"]}
    assert by_tag["a"]["cluster"] == entry["cluster"]
    assert "cluster" not in by_tag["b"]

    # a failed cluster report of b's digest refuses b: nothing is moved, the index keeps what it had
    before = index_file.read_bytes()
    c = push_image(plain, repo, "c-candidate", "cluster c")
    write_report(tmp_path / "r2" / "c", f"{regs.plain}/{repo}@{c}", "passed")
    _cluster(tmp_path / "r2" / "cluster-c", c, repo, failed=True)
    refused = release(["c"], [tmp_path / "r2"])
    (result,) = refused.cells
    assert result.status == "refused"
    assert any("the cluster validation of" in r and "failed" in r for r in result.reasons)
    assert plain.manifest_digest(repo, "c") is None
    assert json.loads(index_file.read_bytes()) == json.loads(before)
