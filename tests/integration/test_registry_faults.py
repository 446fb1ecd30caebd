"""Issue 18: registry operations on a flaky network and damaged storage, against real registries (Debian's
docker-registry) behind the test fault proxy (tests/faultproxy.py: 127.0.0.1 only, seeded, bounded).

Each test names the failure of the issue it pins; every one of them failed before issue 18's changes.
"""

from __future__ import annotations

import email.utils
import functools
import hashlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from imagesmith.errors import CorruptBlobError, RegistryError, Side
from imagesmith.registry import (
    MANIFEST_V2,
    ManifestData,
    RegistryClient,
    copy_manifest,
    verify_blobs,
)
from tests.faultproxy import Action, Request, fault_proxy
from tests.localinfra import LocalRegistries, TempRegistry, local_registries, temp_registry


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def push_layers(client: RegistryClient, repo: str, tag: str, layers: list[bytes]) -> ManifestData:
    """A small multi-layer image (config + *layers*) pushed through the API."""
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {"t": tag}}}).encode()
    for blob in [*layers, config]:
        client.upload_blob(repo, _sha(blob), functools.partial(iter, [blob]))
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MANIFEST_V2,
            "config": {
                "mediaType": "application/vnd.docker.container.image.v1+json",
                "size": len(config),
                "digest": _sha(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip",
                    "size": len(layer),
                    "digest": _sha(layer),
                }
                for layer in layers
            ],
        }
    ).encode()
    manifest = ManifestData(body=body, media_type=MANIFEST_V2, digest=_sha(body))
    client.put_manifest(repo, tag, manifest)
    return manifest


def blob_file(reg: TempRegistry, digest: str) -> Path:
    hexd = digest.split(":", 1)[1]
    return reg.root / "data/docker/registry/v2/blobs/sha256" / hexd[:2] / hexd / "data"


def uploads_left(reg: TempRegistry) -> list[Path]:
    """Upload sessions still holding bytes (a cancelled one leaves empty folders behind)."""
    return [p for p in (reg.root / "data").rglob("_uploads/*/data") if p.stat().st_size]


@pytest.fixture(scope="module")
def regs() -> LocalRegistries:
    return local_registries()


@pytest.fixture
def repo() -> str:
    return f"imagesmith-test/faults-{uuid.uuid4().hex[:10]}"


def fast(addr: str, **kw: object) -> RegistryClient:
    """A client with short waits (the faults are many, the test must stay quick)."""
    opts: dict[str, object] = {"attempts": 10, "backoff": 0.02, "deadline": 30.0, "chunk_size": 64 << 10}
    opts.update(kw)
    return RegistryClient(addr, insecure=True, credentials=None, **opts)  # type: ignore[arg-type]


# -- 1. a blob corrupted in the destination is never published -----------------------------------------------
@pytest.mark.registry
def test_a_destination_blob_flipped_in_place_is_caught_and_nothing_is_tagged(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    src = regs.plain_client()
    image = push_layers(src, repo, "src", [os.urandom(300_000), os.urandom(200_000)])
    layer = image.blobs()[1][0]
    with temp_registry(tmp_path) as reg:
        dst = fast(reg.addr)
        copy_manifest(src, repo, "src", dst, repo)
        dst.delete_manifest(repo, image.digest)  # the manifest goes, the (soon damaged) blob stays
        path = blob_file(reg, layer)
        data = bytearray(path.read_bytes())
        data[4096:5120] = bytes(b ^ 0xFF for b in data[4096:5120])  # flip 1 KiB, same size
        path.write_bytes(bytes(data))
        with pytest.raises(CorruptBlobError) as info:  # a registry that is not trusted: re-read
            copy_manifest(src, repo, "src", dst, repo, put_as="final", verify="read")
        text = str(info.value)
        for part in (reg.addr, repo, layer, "destination registry", "fix:"):
            assert part in text
        assert dst.manifest_digest(repo, "final") is None  # never tagged
        assert dst.list_tags(repo) == []


@pytest.mark.registry
def test_a_destination_blob_of_the_wrong_size_is_caught_at_the_default_level(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    src = regs.plain_client()
    image = push_layers(src, repo, "src", [os.urandom(300_000)])
    layer = image.blobs()[1][0]
    with temp_registry(tmp_path) as reg:
        dst = fast(reg.addr)
        copy_manifest(src, repo, "src", dst, repo)
        dst.delete_manifest(repo, image.digest)
        path = blob_file(reg, layer)
        path.write_bytes(path.read_bytes()[:-1000])  # truncated on disk
        with pytest.raises(CorruptBlobError) as info:  # default verify=head: HEAD's size ≠ the manifest's
            copy_manifest(src, repo, "src", dst, repo, put_as="final")
        assert "the registry keeps the damaged file" in str(info.value)
        assert dst.manifest_digest(repo, "final") is None


@pytest.mark.registry
def test_full_verify_reads_back_the_first_registry(repo: str, tmp_path: Path) -> None:
    with temp_registry(tmp_path) as reg:
        client = fast(reg.addr)
        image = push_layers(client, repo, "t", [os.urandom(100_000)])
        path = blob_file(reg, image.blobs()[1][0])
        data = bytearray(path.read_bytes())
        data[0] ^= 0xFF
        path.write_bytes(bytes(data))
        with pytest.raises(CorruptBlobError, match="is corrupt"):
            verify_blobs(client, repo, image, side=Side.SOURCE)


# -- 2. retries that match a flaky network -------------------------------------------------------------------
@pytest.mark.registry
def test_copy_through_errors_and_drops_converges_and_verifies(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    src = regs.plain_client()
    image = push_layers(src, repo, "src", [os.urandom(400_000) for _ in range(4)])
    with (
        temp_registry(tmp_path) as reg,
        fault_proxy(reg.addr, error_rate=0.25, drop_rate=0.05, seed=18) as px,
    ):
        dst = fast(px.addr, chunk_size=256 << 10)
        digest, _ = copy_manifest(src, repo, "src", dst, repo, put_as="final", verify="full")
        assert digest == image.digest
        assert reg.client().manifest_digest(repo, "final") == image.digest
        verify_blobs(reg.client(), repo, image, side=Side.DESTINATION)
        faults = [a for _, _, a in px.log if a != "forward"]
        assert len(faults) >= 5  # the proxy really was flaky


@pytest.mark.registry
def test_an_outage_longer_than_the_old_retry_budget_is_ridden_out(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    src = regs.plain_client()
    image = push_layers(src, repo, "src", [os.urandom(300_000)])
    with temp_registry(tmp_path) as reg, fault_proxy(reg.addr) as px:
        started: list[float] = []

        def outage_on_first_patch(req: Request) -> Action | None:
            if req.method == "PATCH" and not started:
                started.append(time.monotonic())
                px.outage(6.0)  # the old budget: 4 tries in 3.5 s
                return Action("drop_before")
            return None

        px.rules.append(outage_on_first_patch)
        dst = RegistryClient(px.addr, insecure=True, credentials=None)  # default policy
        t = time.monotonic()
        digest, _ = copy_manifest(src, repo, "src", dst, repo, put_as="final")
        assert digest == image.digest
        assert time.monotonic() - t >= 6.0


@pytest.mark.registry
def test_a_chunk_refused_before_it_reached_the_registry_resumes_without_restarting_the_blob(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    src = regs.plain_client()
    image = push_layers(src, repo, "src", [os.urandom(1_000_000)])
    with temp_registry(tmp_path) as reg, fault_proxy(reg.addr) as px:
        px.rules.append(lambda r: Action("error_before") if r.method == "PATCH" and r.n in (3, 4) else None)
        dst = fast(px.addr)
        copy_manifest(src, repo, "src", dst, repo, put_as="final")
        assert px.count("POST", "upload") == len(image.blobs())  # one session per blob: resumed, no restart
        assert px.count("GET", "upload") >= 1  # the session's offset was asked
        verify_blobs(reg.client(), repo, image, side=Side.DESTINATION)


@pytest.mark.registry
def test_a_chunk_lost_after_the_registry_took_it_restarts_that_blob_only(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    src = regs.plain_client()
    image = push_layers(src, repo, "src", [os.urandom(1_000_000)])
    with temp_registry(tmp_path) as reg, fault_proxy(reg.addr) as px:
        px.rules.append(lambda r: Action("drop_after") if r.method == "PATCH" and r.n == 3 else None)
        dst = fast(px.addr)
        copy_manifest(src, repo, "src", dst, repo, put_as="final")
        verify_blobs(reg.client(), repo, image, side=Side.DESTINATION)
        assert px.count("POST", "upload") == len(image.blobs()) + 1  # that blob alone started again


@pytest.mark.registry
def test_a_stalled_registry_is_given_up_on_within_the_deadline(repo: str, tmp_path: Path) -> None:
    with temp_registry(tmp_path) as reg, fault_proxy(reg.addr, max_seconds=60) as px:
        px.rules.append(lambda r: Action("stall", seconds=20) if r.kind == "manifest" else None)
        client = fast(px.addr, timeout=1.0, deadline=4.0)
        t = time.monotonic()
        with pytest.raises(RegistryError, match="manifest HEAD: no bytes for 1 s from registry") as info:
            client.manifest_digest(repo, "t")
        assert time.monotonic() - t < 10  # before: 4 × 60 s
    assert (info.value.phase, info.value.stalled) == ("manifest HEAD", 1.0)  # issue 37: the stall named


# -- 4. a cut in the source's download is the source's fault -------------------------------------------------
@pytest.mark.registry
def test_a_source_download_cut_once_is_resumed(regs: LocalRegistries, repo: str, tmp_path: Path) -> None:
    src_real = regs.plain_client()
    image = push_layers(src_real, repo, "src", [os.urandom(2_000_000)])
    with fault_proxy(regs.plain) as px, temp_registry(tmp_path) as reg:
        px.rules.append(
            lambda r: Action("cut") if r.method == "GET" and r.kind == "blob" and r.n == 0 else None
        )
        digest, _ = copy_manifest(fast(px.addr), repo, "src", fast(reg.addr), repo, put_as="final")
        assert digest == image.digest
        assert px.count("GET", "blob") >= 2  # resumed with a Range request
        verify_blobs(reg.client(), repo, image, side=Side.DESTINATION)


@pytest.mark.registry
def test_a_source_that_keeps_cutting_is_named_as_the_source_and_the_upload_is_cancelled(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    push_layers(regs.plain_client(), repo, "src", [os.urandom(2_000_000)])
    with fault_proxy(regs.plain) as px, temp_registry(tmp_path) as reg:
        px.rules.append(lambda r: Action("cut") if r.method == "GET" and r.kind == "blob" else None)
        src = fast(px.addr, attempts=3)
        with pytest.raises(RegistryError) as info:
            copy_manifest(src, repo, "src", fast(reg.addr), repo, put_as="final")
        text = str(info.value)
        assert text.startswith(f"source registry {px.addr}")
        assert reg.addr not in text.splitlines()[0]
        assert uploads_left(reg) == []  # the destination's upload session was deleted
        assert reg.client().list_tags(repo) == []


# -- 5. a full disk is said so, not retried, and uploads are cleaned up --------------------------------------
@contextmanager
def tiny_disk(path: Path, size: str = "6m") -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.registry
def test_a_full_registry_disk_is_named_with_its_fix_and_not_retried(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    src = regs.plain_client()
    push_layers(src, repo, "src", [os.urandom(8_000_000)])
    with tiny_disk(tmp_path / "disk") as disk, temp_registry(disk / "reg") as reg:
        dst = RegistryClient(reg.addr, insecure=True, credentials=None)  # default (long) retry policy
        t = time.monotonic()
        with pytest.raises(RegistryError) as info:
            copy_manifest(src, repo, "src", dst, repo, put_as="final")
        assert time.monotonic() - t < 15  # not retried as if it were transient
        text = str(info.value)
        for part in ("storage full", "no space left on device", "fix: free space on the registry's storage"):
            assert part in text
        assert "is up and reachable" not in text


# -- 6. a non-conforming manifest is an error, not a traceback -----------------------------------------------
@pytest.mark.registry
def test_a_manifest_without_config_size_is_a_clear_error(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    push_layers(regs.plain_client(), repo, "src", [b"layer"])

    def strip_size(body: bytes) -> bytes:
        doc = json.loads(body)
        doc["config"].pop("size", None)
        return json.dumps(doc).encode()

    with fault_proxy(regs.plain) as px, temp_registry(tmp_path) as reg:
        # a registry serving such a manifest names it by its own digest: the upstream's header goes
        rewrite = Action("rewrite", rewrite=strip_size, headers=(("Docker-Content-Digest", ""),))
        px.rules.append(lambda r: rewrite if r.kind == "manifest" else None)
        with pytest.raises(RegistryError) as info:
            copy_manifest(fast(px.addr), repo, "src", fast(reg.addr), repo)
        text = str(info.value)
        for part in ("config.size is missing", px.addr, "fix:"):
            assert part in text


# -- 7. fix lines survive; a refused HEAD says what it got ---------------------------------------------------
@pytest.mark.registry
def test_a_refused_head_says_what_the_registry_answered(regs: LocalRegistries, repo: str) -> None:
    with fault_proxy(regs.plain) as px:
        px.rules.append(lambda r: Action("status", status=401, body=b"") if r.method == "HEAD" else None)
        client = RegistryClient(px.addr, insecure=True, credentials=regs.credentials, attempts=1)
        with pytest.raises(RegistryError) as info:
            client.manifest_digest(repo, "t")
        text = str(info.value)
        assert "were refused ()" not in text
        assert "HTTP 401" in text
        assert "fix:" in text


# -- 8. Retry-After, manifests that do not match their digest, answers that are no registry's ----------------
TOO_MANY = b'{"errors":[{"code":"TOOMANYREQUESTS","message":"pull rate limit"}]}'


@pytest.mark.registry
@pytest.mark.parametrize(("status", "form"), [(429, "seconds"), (429, "http-date"), (503, "seconds")])
def test_retry_after_is_waited_for_in_seconds_and_as_an_http_date(
    regs: LocalRegistries, repo: str, status: int, form: str
) -> None:
    push_layers(regs.plain_client(), repo, "t", [b"layer"])
    when = datetime.now(UTC) + timedelta(seconds=3)
    value = "2" if form == "seconds" else email.utils.format_datetime(when, usegmt=True)
    limited = Action("status", status=status, body=TOO_MANY, headers=(("Retry-After", value),))
    with fault_proxy(regs.plain) as px:
        px.rules.append(lambda r: limited if r.kind == "manifest" and r.n == 0 else None)
        t = time.monotonic()
        assert fast(px.addr).manifest_digest(repo, "t") is not None
        assert time.monotonic() - t >= 1.5  # before: the 0.02 s backoff alone, and the limit hit again
        assert px.count("HEAD", "manifest") == 2


@pytest.mark.registry
def test_a_retry_after_past_the_deadline_gives_up_at_once_naming_it(regs: LocalRegistries, repo: str) -> None:
    limited = Action("status", status=429, body=TOO_MANY, headers=(("Retry-After", "3600"),))
    with fault_proxy(regs.plain) as px:
        px.rules.append(lambda r: limited)
        t = time.monotonic()
        with pytest.raises(RegistryError) as info:
            fast(px.addr, deadline=10.0).manifest_digest(repo, "t")
        assert time.monotonic() - t < 3
        assert px.count("HEAD", "manifest") == 1
        text = str(info.value)
        for part in ("Retry-After", "3600 s", px.addr, "rate limit", "fix:"):
            assert part in text


@pytest.mark.registry
def test_a_manifest_whose_bytes_do_not_match_its_digest_is_never_copied(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    image = push_layers(regs.plain_client(), repo, "src", [b"layer"])

    def altered(body: bytes) -> bytes:  # same JSON, other bytes: another digest
        return json.dumps(json.loads(body), indent=1).encode()

    rewrite = Action("rewrite", rewrite=altered, headers=(("Docker-Content-Digest", ""),))
    with fault_proxy(regs.plain) as px, temp_registry(tmp_path) as reg:
        px.rules.append(lambda r: rewrite if r.kind == "manifest" and r.method == "GET" else None)
        with pytest.raises(CorruptBlobError) as info:
            copy_manifest(fast(px.addr), repo, image.digest, fast(reg.addr), repo)
        text = str(info.value)
        for part in (px.addr, image.digest, "not the digest asked for", "fix:"):
            assert part in text
        assert reg.client().list_tags(repo) == []
        assert reg.client().manifest_digest(repo, image.digest) is None
        assert reg.client().manifest_digest(repo, _sha(altered(image.body))) is None  # before: put there


@pytest.mark.registry
def test_a_wrong_docker_content_digest_is_refused_by_tag_and_by_digest(
    regs: LocalRegistries, repo: str
) -> None:
    image = push_layers(regs.plain_client(), repo, "t", [b"layer"])
    liar = Action("rewrite", rewrite=lambda b: b, headers=(("Docker-Content-Digest", "sha256:" + "0" * 64),))
    with fault_proxy(regs.plain) as px:
        px.rules.append(lambda r: liar if r.kind == "manifest" else None)
        client = fast(px.addr)
        for ref in ("t", image.digest):
            with pytest.raises(CorruptBlobError, match="Docker-Content-Digest"):
                client.get_manifest(repo, ref)
        # HEAD by digest naming another digest is not believed: the manifest is read (and refused)
        with pytest.raises(CorruptBlobError):
            client.manifest_digest(repo, image.digest)
        # a PUT answered with another digest than the one sent: the registry rewrote it; named with a fix
        with pytest.raises(RegistryError, match=r"stored digest sha256:0+ ≠ sent") as info:
            client.put_manifest(repo, "again", image)
        assert "rewrites manifests" in str(info.value.hint)


@pytest.mark.registry
def test_answers_that_are_no_registrys_are_errors_not_tracebacks(regs: LocalRegistries, repo: str) -> None:
    page = Action("status", status=200, body=b"<html>captive portal</html>")
    no_location = Action("status", status=202, body=b"")
    with fault_proxy(regs.plain) as px:
        px.rules.append(lambda r: page if r.kind == "tags" else None)
        px.rules.append(lambda r: no_location if r.kind == "upload" and r.method == "POST" else None)
        client = fast(px.addr)
        with pytest.raises(RegistryError, match="not a tag list") as info:
            client.list_tags(repo)
        assert "fix:" in str(info.value)
        with pytest.raises(RegistryError, match="without a Location header") as info:
            client.upload_blob(repo, _sha(b"x"), lambda: iter([b"x"]))
        assert px.addr in str(info.value)


@pytest.mark.registry
def test_a_redirect_to_storage_that_is_down_names_the_storage_and_a_loop_is_an_error(
    regs: LocalRegistries, repo: str
) -> None:
    from tests.localinfra import free_port

    image = push_layers(regs.plain_client(), repo, "t", [b"layer"])
    layer = image.blobs()[1][0]
    storage = f"127.0.0.2:{free_port()}"  # the registry's blob storage (a CDN), not answering

    def away(r: Request) -> Action | None:
        if r.kind == "blob" and r.method == "GET" and "loop" not in r.path:
            return Action(
                "status", status=307, body=b"", headers=(("Location", f"http://{storage}{r.path}"),)
            )
        return None

    with fault_proxy(regs.plain) as px:
        px.rules.append(away)
        with pytest.raises(RegistryError) as info:
            b"".join(fast(px.addr, attempts=2).get_blob(repo, layer).iter_content(1 << 16))
        text = str(info.value)
        assert f"registry {px.addr}'s storage {storage}, where the registry redirected the request" in text
    with fault_proxy(regs.plain) as px:
        px.rules.append(
            lambda r: (
                Action("status", status=302, body=b"", headers=(("Location", r.path),))
                if r.kind == "blob"
                else None
            )
        )
        with pytest.raises(RegistryError, match=r"redirect .* not followed") as info:
            fast(px.addr).get_blob(repo, layer)
        assert "loop" in str(info.value.hint)
        assert px.count("GET", "blob") == 11  # the first request and 10 hops, not retried


@pytest.mark.registry
def test_an_answer_sent_a_byte_at_a_time_is_given_up_on_within_the_deadline(
    regs: LocalRegistries, repo: str
) -> None:
    push_layers(regs.plain_client(), repo, "t", [b"layer"])
    with fault_proxy(regs.plain, max_seconds=60) as px:
        px.rules.append(
            lambda r: Action("trickle", seconds=0.5) if r.kind == "manifest" and r.method == "GET" else None
        )
        t = time.monotonic()
        with pytest.raises(RegistryError, match="arrived too slowly") as info:
            fast(px.addr, attempts=2, timeout=2.0, deadline=5.0).get_manifest(repo, "t")
        assert time.monotonic() - t < 10  # before: one byte per 0.5 s never trips a read timeout: minutes
        assert "fix:" in str(info.value)


# -- issue 37: one deadline per blob upload, restarted by progress only -------------------------------------
@pytest.mark.registry
def test_an_upload_the_registry_takes_no_byte_of_is_given_up_naming_the_stall(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    """Every PATCH after the first stalls (the registry never takes its bytes): the copy gives up once no byte
    was taken for the deadline, saying so, and cancels the session — not a retry budget per request."""
    src = regs.plain_client()
    push_layers(src, repo, "src", [os.urandom(300_000)])
    with temp_registry(tmp_path) as reg, fault_proxy(reg.addr, max_seconds=60) as px:
        px.rules.append(lambda r: Action("stall", seconds=0.5) if r.method == "PATCH" and r.n > 1 else None)
        dst = fast(px.addr, timeout=1.0, deadline=3.0)
        with pytest.raises(RegistryError, match=r"no bytes for [0-9]+ s from registry ") as caught:
            copy_manifest(src, repo, "src", dst, repo, put_as="final")
        assert "restarts on progress only" in caught.value.message
        assert str(caught.value.fields().get("digest", "")).startswith("sha256:")
        assert uploads_left(reg) == []


@pytest.mark.registry
def test_an_upload_that_keeps_progressing_is_not_given_up_however_long_it_takes(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    """Each chunk's first PATCH stalls a while, its retry goes through: the whole blob takes longer than the
    deadline, but the registry takes bytes well within it every time, so the upload finishes."""
    src = regs.plain_client()
    image = push_layers(src, repo, "src", [os.urandom(8 * (64 << 10))])
    with temp_registry(tmp_path) as reg, fault_proxy(reg.addr, max_seconds=90) as px:
        px.rules.append(
            lambda r: Action("stall", seconds=0.6) if r.method == "PATCH" and r.n % 2 == 1 else None
        )
        dst = fast(px.addr, timeout=2.0, deadline=3.0)
        copy_manifest(src, repo, "src", dst, repo, put_as="final")
        verify_blobs(reg.client(), repo, image, side=Side.DESTINATION)
        assert px.count("PATCH", "upload") >= 16


@pytest.mark.registry
def test_a_source_that_stops_sending_a_blob_is_given_up_naming_the_stall(
    regs: LocalRegistries, repo: str, tmp_path: Path
) -> None:
    """The source cuts its first blob answer half-way, then every resumed request stalls: the copy gives up
    once no byte came for the deadline, naming the stall and the source."""
    real = regs.plain_client()
    push_layers(real, repo, "src", [os.urandom(300_000)])
    with temp_registry(tmp_path) as reg, fault_proxy(regs.plain, max_seconds=60) as px:
        px.rules.append(
            lambda r: (
                (Action("cut") if r.n == 0 else Action("stall", seconds=0.5))
                if r.kind == "blob" and r.method == "GET"
                else None
            )
        )
        src = fast(px.addr, timeout=1.0, deadline=3.0)
        with pytest.raises(RegistryError, match=r"no bytes for [0-9]+ s from registry ") as caught:
            copy_manifest(src, repo, "src", reg.client(), repo, put_as="final")
        assert caught.value.side is Side.SOURCE
        assert "restarts on progress only" in caught.value.message
