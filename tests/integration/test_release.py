"""``imagesmith release`` against the REAL local registries (scripts/services.sh: plain 127.0.0.1:5000,
htpasswd + TLS 127.0.0.1:5443) and throw-away registries for faults.

Images are made through the registry API (a real gzipped tar layer + image config + OCI manifest), so no
docker build is needed. Candidate A has a passing report for its exact digest, B a failing one (or none): A
must land in both registries with equal digests and the report attached, B must be refused with the reason;
a rerun is a no-op; a promotion interrupted by a registry that is down or read-only converges on the rerun.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import tarfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from imagesmith import compat, signing
from imagesmith.attestation import (
    ATTESTATION_FILE,
    DSSE_MEDIA_TYPE,
    VALIDATION_PREDICATE_TYPE,
    sign_validation,
    verify_validation,
)
from imagesmith.errors import ConfigError, ReleaseError
from imagesmith.index import load_index
from imagesmith.indextrust import IndexKey, Trust
from imagesmith.pick import fetch_index
from imagesmith.refs import Registry
from imagesmith.registry import OCI_MANIFEST, ManifestData, RegistryClient
from imagesmith.release import (
    ReleaseCell,
    collect_reports,
    release_cells,
)
from imagesmith.tags import attestation_tag, cosign_attestation_tag
from tests.localinfra import LocalRegistries, TempRegistry, local_registries, temp_registry

pytestmark = pytest.mark.registry

#: the validation runners' key of these tests, and what release trusts
KEY = signing.generate_key()
TRUSTED = [KEY.public]


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def image_labels(rc: ReleaseCell) -> dict[str, str]:
    """The labels imagesmith build gives the image of *rc* (templates/Dockerfile.j2): what release reads
    the index entry's fields from."""
    return {
        "io.imagesmith.cell": rc.id,
        "io.imagesmith.torch": rc.torch,
        "io.imagesmith.torchvision": rc.torchvision,
        "io.imagesmith.variant": "cu" + rc.cuda.replace(".", ""),
        "io.imagesmith.cuda": rc.cuda,
        "io.imagesmith.python": rc.python,
        "io.imagesmith.torch-arch": ",".join(rc.arch),
        "io.imagesmith.min-driver.full": str(rc.min_driver.full),
        "io.imagesmith.min-driver.minor-version": str(rc.min_driver.minor_version),
        "io.imagesmith.shm-min": rc.shm_size or "",
        "io.imagesmith.fingerprint": rc.fingerprint,
    }


def smoke_labels(matrix: Path, registries: Path) -> dict[str, str]:
    """:func:`image_labels` of the first cell of the smoke matrix copy *matrix*."""
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan

    return image_labels(
        ReleaseCell.from_plan(build_plan(load_matrix(matrix, registries_file=registries)).cells[0])
    )


def push_image(
    client: RegistryClient, repo: str, tag: str, content: str, *, labels: dict[str, str] | None = None
) -> str:
    """Upload a one-layer image (real tar.gz layer, image config, OCI manifest); returns its digest. Its
    config carries *labels* (default: those of :func:`cell`'s image, as imagesmith build writes them)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = content.encode()
        info = tarfile.TarInfo("etc/imagesmith-test")
        info.size = len(data)
        info.mtime = 0
        tar.addfile(info, io.BytesIO(data))
    layer = gzip.compress(raw.getvalue(), mtime=0)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "Labels": {
                    "io.imagesmith.test": content,
                    **(image_labels(cell("x", ())) if labels is None else labels),
                }
            },
            "rootfs": {"type": "layers", "diff_ids": [_sha(raw.getvalue())]},
        }
    ).encode()
    for blob in (layer, config):
        client.upload_blob(repo, _sha(blob), functools.partial(iter, [blob]))
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": _sha(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": _sha(layer),
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    return client.put_manifest(repo, tag, ManifestData(body=body, media_type=OCI_MANIFEST, digest=_sha(body)))


def write_report(
    folder: Path,
    target: str,
    verdict: str,
    *,
    failed: str | None = None,
    key: signing.SigningKey | None = KEY,
    digest: str | None = None,
    gpus: int = 2,
    stack: dict[str, Any] | None = None,
) -> Path:
    """report.json as imagesmith validate writes it and, signed by *key* (None: unsigned), the attestation
    of *digest* (default: the digest at the end of *target*, as the engine would report it). Its GPU
    inventory lists *gpus* H200s (0: a report that records no GPU host); *stack*: the figures of its
    test_record_stack (the torch and CUDA the suite found inside the image), none by default."""
    folder.mkdir(parents=True, exist_ok=True)
    checks: list[dict[str, Any]] = [
        {
            "name": "test_gpu_inventory",
            "module": "test_02_gpus",
            "status": "passed",
            "message": "",
            "figures": {
                "count": gpus,
                "gpus": [
                    {"index": i, "name": "NVIDIA H200", "memory_mib": 143771, "driver": "580.159.04"}
                    for i in range(gpus)
                ],
            },
        }
    ]
    if stack is not None:  # what the suite recorded inside the image (test_record_stack: torch, torch_cuda)
        checks.append(
            {"name": "test_record_stack", "module": "test_01_record", "status": "passed", "message": "",
             "figures": stack}
        )  # fmt: skip
    if failed:
        checks.append(
            {
                "name": failed,
                "module": "test_07_nccl",
                "status": "failed",
                "message": "busbw 12.0 GB/s < 0.9 x baseline 300 GB/s",
                "figures": {},
            }
        )
    report = {
        "schema": 1,
        "verdict": verdict,
        "verdict_reason": f"1 check(s) failed: {failed}" if failed else "9 check(s) passed",
        "target": target,
        "started": "2026-11-29T10:00:00Z",
        "checks": checks,
    }
    path = folder / "report.json"
    path.write_text(json.dumps(report, indent=2))
    if key is not None:
        repo, _, at = target.rpartition("@")
        envelope = sign_validation(report, repository=repo, digest=digest or at, key=key)
        (folder / ATTESTATION_FILE).write_bytes(envelope)
    return path


def cell(cid: str, targets: tuple[Registry, ...]) -> ReleaseCell:
    return ReleaseCell(
        matrix="t",
        id=cid,
        tag=cid,
        candidate=f"{cid}-candidate",
        targets=targets,
        torch="2.11.0",
        torchvision="0.26.0",
        cuda="13.0",
        python="3.11",
        min_driver=compat.min_driver("13.0"),
        arch=("7.5", "8.0", "8.6", "9.0", "10.0", "12.0"),
        shm_size="1g",
        fingerprint=f"fp-{cid}",
    )


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture
def repo() -> str:
    return f"imagesmith-test/release-{uuid.uuid4().hex[:10]}"


def clients_for(
    regs: LocalRegistries, extra: dict[str, TempRegistry] | None = None
) -> Callable[[Registry], Any]:
    def make(t: Registry) -> RegistryClient:
        if t.host == regs.plain:
            return regs.plain_client(attempts=2, backoff=0.05)
        if t.host == regs.auth:
            return regs.auth_client(attempts=2, backoff=0.05)
        for reg in (extra or {}).values():
            if t.host == reg.addr:
                return reg.client(attempts=2, backoff=0.05, timeout=5.0)
        raise AssertionError(t.host)

    return make


def targets(regs: LocalRegistries, repo: str) -> tuple[Registry, ...]:
    return (
        Registry(name="plain", kind="generic", host=regs.plain, repository=repo, insecure=True),
        Registry(name="tls", kind="generic", host=regs.auth, repository=repo),
    )


def test_release_promotes_only_the_validated_digest(regs: LocalRegistries, repo: str, tmp_path: Path) -> None:
    plain, tls = regs.plain_client(), regs.auth_client()
    # A: candidate only in the plain registry (release must copy its blobs to the TLS one);
    # B: candidate in both, as imagesmith build --push leaves it
    digest_a = push_image(plain, repo, "a-candidate", "image A")
    digest_b = push_image(plain, repo, "b-candidate", "image B")
    assert push_image(tls, repo, "b-candidate", "image B") == digest_b
    write_report(tmp_path / "reports" / "a", f"{regs.plain}/{repo}@{digest_a}", "passed")
    # B passed on one GPU family and failed on another: held back
    write_report(tmp_path / "reports" / "b-h100", f"{regs.plain}/{repo}@{digest_b}", "passed")
    write_report(
        tmp_path / "reports" / "b-a100",
        f"{regs.plain}/{repo}@{digest_b}",
        "failed",
        failed="test_nccl_allreduce",
    )
    cells = [cell("a", targets(regs, repo)), cell("b", targets(regs, repo))]
    index_file = tmp_path / "release" / "index.json"
    reports = collect_reports([tmp_path / "reports"], TRUSTED)

    # dry run: the plan, nothing written
    dry = release_cells(
        cells,
        matrix="t",
        reports=reports,
        index_file=index_file,
        dry_run=True,
        client_for=clients_for(regs),
        trusted=TRUSTED,
    )
    by = {c.cell: c for c in dry.cells}
    assert by["a"].status == "would-promote"
    assert any("copy manifest" in s and "to tls" in s for s in by["a"].steps)
    assert by["b"].status == "refused"
    assert plain.manifest_digest(repo, "a") is None
    assert tls.manifest_digest(repo, digest_a) is None
    assert not index_file.exists()

    out = release_cells(
        cells,
        matrix="t",
        reports=reports,
        index_file=index_file,
        client_for=clients_for(regs),
        trusted=TRUSTED,
    )
    by = {c.cell: c for c in out.cells}
    assert by["a"].status == "promoted", by["a"].reasons
    assert by["a"].registries == {"plain": digest_a, "tls": digest_a}
    # equal digests in both registries, read back through fresh clients
    assert regs.plain_client().manifest_digest(repo, "a") == digest_a
    assert regs.auth_client().manifest_digest(repo, "a") == digest_a
    for blob, _ in regs.plain_client().get_manifest(repo, digest_a).blobs():
        assert regs.auth_client().blob_size(repo, blob) is not None
    # the report is attached to the digest in both registries
    for client in (regs.plain_client(), regs.auth_client()):
        art = client.get_manifest(repo, attestation_tag(digest_a)).json()
        assert art["subject"]["digest"] == digest_a
        assert art["annotations"]["io.imagesmith.verdict"] == "passed"
        layer = art["layers"][0]
        with client.get_blob(repo, layer["digest"]) as resp:
            assert json.loads(resp.content)["target"].endswith(digest_a)
        # and the signed attestation, in cosign's layout, verifies with the trusted key
        assert_cosign_layout(client, repo, digest_a)
    # B refused with the failing check, and not tagged anywhere
    assert by["b"].status == "refused"
    assert "test_nccl_allreduce" in by["b"].reasons[0]
    assert "failed" in by["b"].reasons[0]
    assert plain.manifest_digest(repo, "b") is None
    assert tls.manifest_digest(repo, "b") is None
    with pytest.raises(ReleaseError, match=r"b: refused: validation of sha256:\w+ failed"):
        out.raise_for_refusals()
    # the index: A only, both registries, published as an artifact in both registries
    index = load_index(index_file)
    assert [i.tag for i in index.images] == ["a"]
    assert {r.name: r.digest for r in index.images[0].registries} == {"plain": digest_a, "tls": digest_a}
    assert index.images[0].validated_on[0].gpu == "NVIDIA H200"
    assert index.images[0].validated_on[0].count == 2
    assert sorted(out.index_published) == sorted(f"{t.image}:release-index" for t in targets(regs, repo))

    # rerun: a no-op, byte for byte
    before = index_file.read_bytes()
    again = release_cells(
        cells,
        matrix="t",
        reports=reports,
        index_file=index_file,
        client_for=clients_for(regs),
        trusted=TRUSTED,
    )
    by = {c.cell: c for c in again.cells}
    assert by["a"].status == "up-to-date"
    assert by["a"].steps == []
    assert not again.index_changed
    assert index_file.read_bytes() == before


def test_pick_reads_the_published_index_artifact(
    regs: LocalRegistries, repo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plain = regs.plain_client()
    digest = push_image(plain, repo, "a-candidate", "pick me")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed")
    index_file = tmp_path / "index.json"
    release_key = signing.generate_key("ed25519")  # the release host's own key, not the runners'
    out = release_cells(
        [cell("a", targets(regs, repo)[:1])],
        matrix="t",
        reports=collect_reports([tmp_path / "r"], TRUSTED),
        index_file=index_file,
        client_for=clients_for(regs),
        trusted=TRUSTED,
        sign_key=release_key,
    )
    out.raise_for_refusals()
    assert out.index_signature == str(tmp_path / "index.json.sig")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    source = f"oci+http://{regs.plain}/{repo}"
    trust = Trust(key=IndexKey.of(release_key.public, "test"))
    with pytest.raises(ConfigError, match="plain HTTP"):  # a local registry: only with insecure
        fetch_index(source, trust=trust)
    fetched = fetch_index(source, insecure=True, trust=trust)
    assert fetched == load_index(index_file)
    # the file and its signature verify too, and a cached copy is checked again
    assert fetch_index(str(index_file), trust=trust) == fetched
    assert fetch_index(source, insecure=True, trust=trust) == fetched
    with pytest.raises(ConfigError, match="bad index signature"):
        fetch_index(source, insecure=True, trust=Trust(key=IndexKey.of(KEY.public, "test")), refresh=True)
    # a rerun signs nothing anew: same file, same artifact
    sig = (tmp_path / "index.json.sig").read_bytes()
    before = plain.manifest_digest(repo, "release-index")
    release_cells(
        [cell("a", targets(regs, repo)[:1])],
        matrix="t",
        reports=collect_reports([tmp_path / "r"], TRUSTED),
        index_file=index_file,
        client_for=clients_for(regs),
        trusted=TRUSTED,
        sign_key=release_key,
    ).raise_for_refusals()
    assert (tmp_path / "index.json.sig").read_bytes() == sig
    assert plain.manifest_digest(repo, "release-index") == before
    # an index published without a signature is refused by a pick that has a key
    from imagesmith.release import publish_index

    publish_index(plain, repo, index_file.read_bytes())
    with pytest.raises(ConfigError, match="the index is not signed"):
        fetch_index(source, insecure=True, trust=trust, refresh=True)


def test_missing_and_stale_reports_refuse(regs: LocalRegistries, repo: str, tmp_path: Path) -> None:
    plain = regs.plain_client()
    old = push_image(plain, repo, "a-candidate", "old build")
    write_report(tmp_path / "r", f"{regs.plain}/a-candidate@{old}", "passed")  # validated the OLD digest
    new = push_image(plain, repo, "a-candidate", "new build")
    push_image(plain, repo, "b-candidate", "never validated")
    out = release_cells(
        [cell("a", targets(regs, repo)[:1]), cell("b", targets(regs, repo)[:1])],
        matrix="t",
        reports=collect_reports([tmp_path / "r"], TRUSTED),
        index_file=tmp_path / "i.json",
        client_for=clients_for(regs),
        trusted=TRUSTED,
    )
    by = {c.cell: c for c in out.cells}
    assert by["a"].status == "refused"
    reasons = "\n".join(by["a"].reasons)
    assert f"is signed for {old}, not the candidate digest {new}" in reasons
    assert f"no signed validation attestation for the candidate digest {new}" in reasons
    assert by["b"].status == "refused"
    assert "imagesmith validate" in by["b"].reasons[0]
    assert plain.manifest_digest(repo, "a") is None


def test_no_candidate_and_diverging_candidates(regs: LocalRegistries, repo: str, tmp_path: Path) -> None:
    plain, tls = regs.plain_client(), regs.auth_client()
    push_image(plain, repo, "b-candidate", "one")
    push_image(tls, repo, "b-candidate", "two")
    out = release_cells(
        [cell("a", targets(regs, repo)), cell("b", targets(regs, repo))],
        matrix="t",
        reports=[],
        index_file=tmp_path / "i.json",
        client_for=clients_for(regs),
        trusted=TRUSTED,
    )
    by = {c.cell: c for c in out.cells}
    assert "no candidate a-candidate in any registry" in by["a"].reasons[0]
    assert "imagesmith build --matrix t --only a --push" in by["a"].reasons[0]
    assert "the candidate tag points at different digests" in by["b"].reasons[0]
    # nothing released, now or before: no index written or published
    assert not (tmp_path / "i.json").exists()
    assert out.index_published == []
    assert plain.manifest_digest(repo, "release-index") is None


@pytest.fixture
def second(tmp_path: Path) -> Iterator[TempRegistry]:
    root = tmp_path / "second"
    root.mkdir()
    with temp_registry(root) as reg:
        yield reg


def test_interrupted_promotion_converges(
    regs: LocalRegistries, repo: str, tmp_path: Path, second: TempRegistry
) -> None:
    plain = regs.plain_client()
    digest = push_image(plain, repo, "a-candidate", "converge")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed")
    tgts = (
        targets(regs, repo)[0],
        Registry(name="second", kind="generic", host=second.addr, repository=repo, insecure=True),
    )
    reports = collect_reports([tmp_path / "r"], TRUSTED)
    index_file = tmp_path / "index.json"
    make = clients_for(regs, {"second": second})

    second.stop()  # the second registry is down half-way through the release
    out = release_cells(
        [cell("a", tgts)],
        matrix="t",
        reports=reports,
        index_file=index_file,
        client_for=make,
        trusted=TRUSTED,
    )
    res = out.cells[0]
    assert res.status == "failed"
    assert "promotion to second failed" in res.reasons[0] or "second:" in res.reasons[0]
    # nothing half-published: the release tag is put only once every registry holds the image and its
    # evidence, so the healthy registry is not tagged either, and no index lists the cell
    assert res.registries == {}
    assert plain.manifest_digest(repo, "a") is None
    assert plain.manifest_digest(repo, digest) == digest  # phase 1 did its part there: kept, untagged
    assert "no release tag was moved" in res.reasons[-1]
    with pytest.raises(ReleaseError, match="a: failed"):
        out.raise_for_refusals()
    assert not index_file.exists()

    second.start(readonly=True)  # back, but refusing writes
    out = release_cells(
        [cell("a", tgts)],
        matrix="t",
        reports=reports,
        index_file=index_file,
        client_for=make,
        trusted=TRUSTED,
    )
    assert out.cells[0].status == "failed"
    assert second.client().manifest_digest(repo, "a") is None

    second.start()  # healthy: the rerun converges, even from a fresh runner without the reports folder:
    # the evidence is the report the first run attached to the digest in the plain registry
    out = release_cells(
        [cell("a", tgts)], matrix="t", reports=[], index_file=index_file, client_for=make, trusted=TRUSTED
    )
    assert out.cells[0].status == "promoted", out.cells[0].reasons
    out.raise_for_refusals()
    assert second.client().manifest_digest(repo, "a") == digest == plain.manifest_digest(repo, "a")
    assert second.client().manifest_digest(repo, attestation_tag(digest)) is not None
    assert_cosign_layout(second.client(), repo, digest)
    assert sorted(r.name for r in load_index(index_file).images[0].registries) == ["plain", "second"]
    # and once more: nothing left to do
    out = release_cells(
        [cell("a", tgts)],
        matrix="t",
        reports=reports,
        index_file=index_file,
        client_for=make,
        trusted=TRUSTED,
    )
    assert out.cells[0].status == "up-to-date"


def assert_cosign_layout(client: RegistryClient, repo: str, digest: str) -> None:
    """``sha256-<hex>.att`` as cosign writes it: an OCI image manifest, image config listing the layers as
    diff_ids, DSSE layers annotated with cosign's empty signature and the predicateType; each verifies."""
    tag = cosign_attestation_tag(digest)
    assert tag == digest.replace("sha256:", "sha256-") + ".att"
    m = client.get_manifest(repo, tag)
    assert m.media_type == OCI_MANIFEST
    doc = m.json()
    assert doc["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    with client.get_blob(repo, doc["config"]["digest"]) as resp:
        config = json.loads(resp.content)
    assert config["rootfs"]["diff_ids"] == [x["digest"] for x in doc["layers"]]
    assert doc["layers"]
    for layer in doc["layers"]:
        assert layer["mediaType"] == DSSE_MEDIA_TYPE == "application/vnd.dsse.envelope.v1+json"
        assert layer["annotations"] == {
            "dev.cosignproject.cosign/signature": "",
            "predicateType": VALIDATION_PREDICATE_TYPE,
        }
        with client.get_blob(repo, layer["digest"]) as resp:
            att = verify_validation(resp.content, TRUSTED, digest=digest)
        assert json.loads(att.report)["verdict"] == "passed"


def smoke_setup(
    regs: LocalRegistries, repo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, Path, str]:
    """(matrix, registries file, first cell id): a copy of the smoke matrix on the local registries."""
    from tests.repo import PROJECT

    ns, name = repo.split("/")
    matrix = tmp_path / "smoke.toml"
    matrix.write_text(
        (PROJECT.matrices_dir / "smoke.toml")
        .read_text()
        .replace('registries = ["local-plain", "local-tls"]', 'registries = ["t-plain", "t-tls"]')
    )
    registries = tmp_path / "registries.toml"
    registries.write_text(
        "schema = 1\n"
        f'[registries.t-plain]\nhost = "{regs.plain}"\nnamespace = "{ns}"\nrepository = "{name}"\n'
        "insecure = true\n"
        f'[registries.t-tls]\nhost = "{regs.auth}"\nnamespace = "{ns}"\nrepository = "{name}"\n'
    )
    for k, v in regs.auth_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("IMAGESMITH_SIGNING_KEY", raising=False)
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan

    cid = build_plan(load_matrix(matrix, registries_file=registries)).cells[0].id
    return matrix, registries, cid


def test_cli_release_smoke_matrix(
    regs: LocalRegistries,
    repo: str,
    tmp_path: Path,
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real command on a copy of the smoke matrix whose registries are the local ones (own repository)."""
    matrix, registries, cid = smoke_setup(regs, repo, tmp_path, monkeypatch)
    res = run_cli("candidates", "--matrix", str(matrix), "--registries", str(registries), "--pinned")
    assert res.exit_code == ReleaseError.exit_code
    assert f"no candidate pushed for {cid}" in res.stderr
    digest = push_image(
        regs.plain_client(),
        repo,
        f"{cid}-candidate",
        "smoke candidate",
        labels=smoke_labels(matrix, registries),
    )
    args = [
        "--matrix",
        str(matrix),
        "--registries",
        str(registries),
        "--index-file",
        str(tmp_path / "index.json"),
    ]

    res = run_cli("release", *args)  # --reports is required: a usage error, nothing done
    assert res.exit_code == 2
    assert "--reports" in res.stderr
    pub = tmp_path / "validation.pub"
    pub.write_bytes(KEY.public.pem)
    args += ["--trusted-key", str(pub)]
    (tmp_path / "no-reports").mkdir()
    res = run_cli("release", *args, "--reports", str(tmp_path / "no-reports"))  # no report for the digest
    assert res.exit_code == ReleaseError.exit_code
    assert f"{cid}: refused: no signed validation attestation for the candidate digest {digest}" in res.stderr
    assert "Traceback" not in res.stderr

    res = run_cli("candidates", "--matrix", str(matrix), "--registries", str(registries), "--pinned")
    assert res.exit_code == 0, res.stderr
    pinned = res.stdout.strip()
    assert pinned == f"{regs.plain}/{repo}@{digest}"
    write_report(tmp_path / "reports" / cid, pinned, "passed")

    res = run_cli("release", *args, "--reports", str(tmp_path / "reports"), "--dry-run")
    assert res.exit_code == 0, res.stderr
    assert f"{cid}: would-promote {digest}" in res.stdout
    res = run_cli("release", *args, "--reports", str(tmp_path / "reports"), "--dry-run", "--json")
    assert res.exit_code == 0, res.stderr
    plan = json.loads(res.stdout)
    assert plan["cells"][0]["status"] == "would-promote"
    assert plan["cells"][0]["digest"] == digest
    res = run_cli("release", *args, "--reports", str(tmp_path / "reports"))
    assert res.exit_code == 0, res.stderr
    assert f"{cid}: promoted {digest}" in res.stdout
    assert regs.auth_client().manifest_digest(repo, cid) == digest
    entry = load_index(tmp_path / "index.json").images[0]
    assert (entry.torch, entry.cuda, entry.python, entry.shm.size) == ("2.11.0", "13.0", "3.11", "256m")


def test_cli_release_refuses_forged_and_tampered_evidence(
    regs: LocalRegistries,
    repo: str,
    tmp_path: Path,
    run_cli: Callable[..., Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """End to end on the real registries: each kind of bad evidence is refused (exit 8, naming why), nothing
    is tagged; the correctly signed attestation then promotes and is stored in cosign's layout everywhere."""
    import base64

    matrix, registries, cid = smoke_setup(regs, repo, tmp_path, monkeypatch)
    plain, tls = regs.plain_client(), regs.auth_client()
    labels = smoke_labels(matrix, registries)
    digest = push_image(plain, repo, f"{cid}-candidate", "attested candidate", labels=labels)
    assert push_image(tls, repo, f"{cid}-candidate", "attested candidate", labels=labels) == digest
    other = push_image(plain, repo, "other", "another image")
    pinned = f"{regs.plain}/{repo}@{digest}"
    pub = tmp_path / "keys" / "validation.pub"
    pub.parent.mkdir()
    pub.write_bytes(KEY.public.pem)
    args = [
        "--matrix",
        str(matrix),
        "--registries",
        str(registries),
        "--index-file",
        str(tmp_path / "i.json"),
    ]
    args += ["--trusted-key", str(pub)]

    def refused(folder: Path, *why: str) -> None:
        res = run_cli("release", *args, "--reports", str(folder))
        assert res.exit_code == ReleaseError.exit_code == 8, res.stderr + res.stdout
        assert f"{cid}: refused:" in res.stderr
        for w in why:
            assert w in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
        assert plain.manifest_digest(repo, cid) is None
        assert tls.manifest_digest(repo, cid) is None
        assert plain.manifest_digest(repo, cosign_attestation_tag(digest)) is None

    # 1. a forged report: a passing report.json naming the digest, no attestation
    write_report(tmp_path / "forged", pinned, "passed", key=None)
    refused(tmp_path / "forged", f"claims {digest}", "not signed", "a report file alone is never enough")

    # 2. a report for another digest: correctly signed, but the attestation's subject is another image
    write_report(tmp_path / "elsewhere", pinned, "passed", digest=other)
    refused(tmp_path / "elsewhere", f"is signed for {other}, not the candidate digest {digest}")

    # 3. a tampered attestation: a failing run signed, then its verdict rewritten to passed
    write_report(tmp_path / "tampered", pinned, "failed", failed="test_nccl_allreduce")
    att = tmp_path / "tampered" / ATTESTATION_FILE
    env = json.loads(att.read_bytes())
    payload = base64.b64decode(env["payload"]).replace(b'"verdict":"failed"', b'"verdict":"passed"')
    assert b'"verdict":"passed"' in payload
    env["payload"] = base64.b64encode(payload).decode()
    att.write_text(json.dumps(env))
    refused(tmp_path / "tampered", "no signature verifies with a trusted key")

    # 4. an attestation signed by a key release does not trust
    write_report(tmp_path / "unknown", pinned, "passed", key=signing.generate_key("ed25519"))
    refused(tmp_path / "unknown", "no signature verifies with a trusted key", "unknown key")

    # without any trusted key, even a good attestation is not accepted
    write_report(tmp_path / "good", pinned, "passed")
    res = run_cli("release", *args[:-2], "--reports", str(tmp_path / "good"))
    assert res.exit_code == 8
    assert "no trusted public key is configured" in res.stderr

    # the correctly signed one promotes, to both registries, with its attestation stored beside the image
    res = run_cli("release", *args, "--reports", str(tmp_path / "good"))
    assert res.exit_code == 0, res.stderr
    assert f"{cid}: promoted {digest}" in res.stdout
    for client in (regs.plain_client(), regs.auth_client()):
        assert client.manifest_digest(repo, cid) == digest
        assert_cosign_layout(client, repo, digest)
    # a rerun finds everything in place
    res = run_cli("release", *args, "--reports", str(tmp_path / "good"))
    assert res.exit_code == 0, res.stderr
    assert f"{cid}: up-to-date {digest}" in res.stdout


def test_a_tampered_stored_attestation_is_not_evidence(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    """A rerun without local reports reads the attestation stored in the registry: verified again, so one
    rewritten in the registry (here: by anyone who can push there) is refused."""
    plain = regs.plain_client()
    digest = push_image(plain, repo, "a-candidate", "stored evidence")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "failed", failed="test_ddp_smoke")
    env = json.loads((tmp_path / "r" / ATTESTATION_FILE).read_bytes())
    import base64

    payload = base64.b64decode(env["payload"]).replace(b'"verdict":"failed"', b'"verdict":"passed"')
    env["payload"] = base64.b64encode(payload).decode()
    from imagesmith.attestation import attach_attestations

    attach_attestations(plain, repo, digest, [json.dumps(env).encode()])
    out = release_cells(
        [cell("a", targets(regs, repo)[:1])],
        matrix="t",
        reports=[],
        index_file=tmp_path / "i.json",
        client_for=clients_for(regs),
        trusted=TRUSTED,
    )
    res = out.cells[0]
    assert res.status == "refused"
    assert any("stored attestation" in r and "no signature verifies" in r for r in res.reasons), res.reasons
    assert plain.manifest_digest(repo, "a") is None


def _cosign() -> str | None:
    import os
    import shutil

    return os.environ.get("IMAGESMITH_TEST_COSIGN") or shutil.which("cosign")


@pytest.mark.skipif(_cosign() is None, reason="no cosign binary (PATH or $IMAGESMITH_TEST_COSIGN)")
@pytest.mark.parametrize("key_type", signing.KEY_TYPES)
def test_cosign_verifies_what_release_stored(
    regs: LocalRegistries, repo: str, tmp_path: Path, key_type: signing.KeyType
) -> None:
    """`cosign verify-attestation --key` accepts the attestation release stored (both key types), and
    refuses it with another key or another predicate type."""
    import subprocess

    key = signing.generate_key(key_type)
    plain = regs.plain_client()
    digest = push_image(plain, repo, "a-candidate", f"cosign {key_type}")
    write_report(tmp_path / "r", f"{regs.plain}/{repo}@{digest}", "passed", key=key)
    out = release_cells(
        [cell("a", targets(regs, repo)[:1])],
        matrix="t",
        reports=collect_reports([tmp_path / "r"], [key.public]),
        index_file=tmp_path / "i.json",
        client_for=clients_for(regs),
        trusted=[key.public],
    )
    out.raise_for_refusals()
    pub, stranger = tmp_path / "release.pub", tmp_path / "stranger.pub"
    pub.write_bytes(key.public.pem)
    stranger.write_bytes(signing.generate_key(key_type).public.pem)

    def cosign(
        key_file: Path, predicate: str = VALIDATION_PREDICATE_TYPE
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(_cosign()), "verify-attestation", "--key", str(key_file), "--type", predicate]
        argv += ["--insecure-ignore-tlog=true", "--allow-http-registry", f"{regs.plain}/{repo}@{digest}"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)

    ok = cosign(pub)
    assert ok.returncode == 0, ok.stderr
    assert "The signatures were verified against the specified public key" in ok.stderr
    envelope = json.loads(ok.stdout.splitlines()[0])
    assert verify_validation(json.dumps(envelope).encode(), [key.public], digest=digest).digest == digest
    bad = cosign(stranger)
    assert bad.returncode != 0
    assert "no matching attestations" in bad.stderr
    other = cosign(pub, "https://example.com/other/v1")
    assert other.returncode != 0
    assert "none of the attestations matched the predicate type" in other.stderr
