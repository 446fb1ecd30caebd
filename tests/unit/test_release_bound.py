"""Issue 25, the release side, without services: index fields from the image config, reports that prove
nothing, the size caps of buffered registry reads, the memory of blobs read back, hashed locks."""

from __future__ import annotations

import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from imagesmith import compat
from imagesmith.errors import ReleaseError
from imagesmith.index import ValidatedOn, parse_index
from imagesmith.registry import OCI_MANIFEST, ManifestData
from imagesmith.registry.faults import _error_codes, _TooLarge
from imagesmith.registry.transport import _read_within
from imagesmith.release import (
    LABEL_CUDA,
    LABEL_MIN_FULL,
    LABEL_MIN_MINOR,
    LABEL_PYTHON,
    LABEL_SHM,
    LABEL_TORCH,
    LABEL_TORCH_ARCH,
    LABEL_TORCHVISION,
    LABEL_VARIANT,
    VerifiedBlobs,
    bound_entry,
    image_facts,
    parse_report,
)
from tests.repo import PROJECT, REPO
from tests.unit.test_pick import image_doc

DIGEST = "sha256:" + "1" * 64


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


# -- the labels release reads are the labels build writes ----------------------------------------------------
RELEASE_LABELS = (
    LABEL_TORCH,
    LABEL_TORCHVISION,
    LABEL_VARIANT,
    LABEL_CUDA,
    LABEL_PYTHON,
    LABEL_MIN_FULL,
    LABEL_MIN_MINOR,
    LABEL_SHM,
    LABEL_TORCH_ARCH,
)


def test_every_committed_dockerfile_carries_every_label_release_reads() -> None:
    files = sorted(REPO.glob("dockerfiles/*/*/Dockerfile"))
    assert len(files) >= 40
    for f in files:
        labels = dict(re.findall(r'^\s+(io\.imagesmith\.[a-z.-]+)="([^"]*)"', f.read_text(), re.M))
        missing = [name for name in RELEASE_LABELS if not labels.get(name)]
        assert not missing, f"{f}: no {missing}"
        wheel = compat.torch_variant(labels[LABEL_TORCH], labels[LABEL_VARIANT])
        assert labels[LABEL_TORCH_ARCH].split(",") == list(wheel.arch_list), f
        assert labels[LABEL_CUDA] == wheel.cuda, f


# -- image_facts: from the config blob the manifest names ----------------------------------------------------
class _Blob:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def __enter__(self) -> _Blob:
        return self

    def __exit__(self, *a: object) -> None:
        pass

    def iter_content(self, n: int) -> Iterator[bytes]:
        yield self.data


class _Images:
    """A registry holding one image per digest (its manifest and config), and image indexes."""

    name, host = "fake", "fake.example"

    def __init__(self) -> None:
        self.manifests: dict[str, ManifestData] = {}
        self.blobs: dict[str, bytes] = {}

    def image(self, labels: dict[str, str]) -> str:
        config = json.dumps({"os": "linux", "architecture": "amd64", "config": {"Labels": labels}}).encode()
        self.blobs[_sha(config)] = config
        body = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "x", "digest": _sha(config), "size": len(config)},
                "layers": [],
            }
        ).encode()
        self.manifests[_sha(body)] = ManifestData(body=body, media_type=OCI_MANIFEST, digest=_sha(body))
        return _sha(body)

    def get_manifest(self, repo: str, reference: str) -> ManifestData:
        return self.manifests[reference]

    def get_blob(self, repo: str, digest: str, offset: int = 0) -> _Blob:
        return _Blob(self.blobs[digest])


def _labels(**over: str) -> dict[str, str]:
    base = {
        LABEL_TORCH: "2.5.1",
        LABEL_TORCHVISION: "0.20.1",
        LABEL_VARIANT: "cu124",
        LABEL_CUDA: "12.4",
        LABEL_PYTHON: "3.11",
        LABEL_MIN_FULL: "550.54.14",
        LABEL_MIN_MINOR: "525.60.13",
        LABEL_SHM: "16G",
        LABEL_TORCH_ARCH: "8.0,9.0",
    }
    return {k: v for k, v in (base | over).items() if v}


def test_image_facts_come_from_the_labels_of_the_config_the_manifest_names() -> None:
    reg = _Images()
    facts = image_facts(reg, "team/torch", reg.image(_labels()))  # type: ignore[arg-type]
    assert (facts.torch, facts.cuda, facts.python, facts.arch) == ("2.5.1", "12.4", "3.11", ("8.0", "9.0"))
    assert (str(facts.min_driver.full), facts.shm.size, facts.platform) == ("550.54.14", "16g", "linux/amd64")
    # an image built before the torch-arch label: the wheel's list from imagesmith/data/torch.toml
    old = image_facts(reg, "team/torch", reg.image(_labels(**{LABEL_TORCH_ARCH: ""})))  # type: ignore[arg-type]
    assert old.arch == tuple(compat.torch_variant("2.5.1", "cu124").arch_list)


@pytest.mark.parametrize(
    ("labels", "expect"),
    [
        (_labels(**{LABEL_TORCH: ""}), f"has no label {LABEL_TORCH}"),
        (_labels(**{LABEL_MIN_FULL: "latest"}), "a min-driver label"),
        (_labels(**{LABEL_TORCH_ARCH: "", LABEL_TORCH: "9.9.9"}), "is not in imagesmith/data/torch.toml"),
    ],
)
def test_an_image_config_without_imagesmith_labels_is_refused_naming_it(
    labels: dict[str, str], expect: str
) -> None:
    reg = _Images()
    digest = reg.image(labels)
    with pytest.raises(ReleaseError) as info:
        image_facts(reg, "team/torch", digest)  # type: ignore[arg-type]
    assert f"registry fake (fake.example) team/torch@{digest}" in info.value.message
    assert expect in info.value.message
    assert (info.value.registry, info.value.repository, info.value.digest) == ("fake", "team/torch", digest)
    assert info.value.fault == "not an imagesmith image"
    assert "imagesmith build --push" in (info.value.hint or "")


def test_an_image_config_nested_past_the_parser_is_refused_naming_it_not_a_traceback() -> None:
    """Before: a config blob of arrays nested 100000 deep (200 KB, well under MAX_CONFIG_BYTES) raised
    RecursionError out of release."""
    reg = _Images()
    digest = reg.image(_labels())
    manifest = json.loads(reg.manifests[digest].body)
    config = b"[" * 100000 + b"]" * 100000
    reg.blobs[_sha(config)] = config
    manifest["config"] = {"mediaType": "x", "digest": _sha(config), "size": len(config)}
    body = json.dumps(manifest).encode()
    reg.manifests[_sha(body)] = ManifestData(body=body, media_type=OCI_MANIFEST, digest=_sha(body))
    with pytest.raises(ReleaseError, match="nested deeper than a parser follows") as info:
        image_facts(reg, "team/torch", _sha(body))  # type: ignore[arg-type]
    assert f"team/torch@{_sha(body)}" in info.value.message


def test_bound_entry_names_every_field_it_corrects() -> None:
    doc = {"schema": "imagesmith.release-index/v1", "generated": "2026-11-28T00:00:00Z"}
    forged_doc = image_doc("2.4.1", "12.1", "3.11") | {"torch": "2.99.0"}
    forged_doc["min_driver"] = {"full": "450.80.02", "minor": "450.80.02"}
    forged_doc["arch"] = ["5.0"]
    (forged,) = parse_index(json.dumps(doc | {"images": [forged_doc]}), source="t").images
    reg = _Images()
    facts = image_facts(reg, "r", reg.image(_labels()))  # type: ignore[arg-type]
    honest = ValidatedOn(
        gpu="NVIDIA H100", count=8, driver="570.1.2", date="2026-11-29T10:00:00Z", report_digest=DIGEST
    )
    new, changes = bound_entry(forged, facts, [honest])
    assert (new.torch, new.cuda, new.arch, new.validated_on) == ("2.5.1", "12.4", ("8.0", "9.0"), (honest,))
    text = "\n".join(changes)
    for line in (
        "torch: 2.99.0 → 2.5.1",
        "cuda: 12.1 → 12.4",
        "min_driver.full: 450.80.02 → 550.54.14",
        "min_driver.minor: 450.80.02 → 525.60.13",
        "arch: 5.0 → 8.0,9.0",
        "→ 8x NVIDIA H100",
    ):
        assert line in text, text
    assert bound_entry(new, facts, [honest])[1] == []  # a bound entry stays as it is


# -- reports that prove nothing ------------------------------------------------------------------------------
def _report(checks: list[dict[str, Any]], verdict: str = "passed") -> bytes:
    return json.dumps({"schema": 1, "verdict": verdict, "target": f"r@{DIGEST}", "checks": checks}).encode()


INVENTORY = {
    "name": "test_gpu_inventory",
    "status": "passed",
    "figures": {
        "count": 2,
        "gpus": [{"index": i, "name": "NVIDIA H200", "driver": "580.1.2"} for i in range(2)],
    },
}


def test_a_passing_report_without_a_gpu_host_or_with_a_failing_check_cannot_stand_behind_a_release() -> None:
    good = parse_report(_report([INVENTORY]), source="good.json")
    assert good.checks_verdict == "passed"
    assert good.unusable_pass() is None
    no_host = parse_report(_report([{"name": "test_matmul", "status": "passed"}]), source="nohost.json")
    assert "nohost.json: a passing report that records no GPU host" in (no_host.unusable_pass() or "")
    lying = parse_report(
        _report([INVENTORY, {"name": "test_nccl", "status": "failed", "message": "busbw 1 GB/s"}]),
        source="lying.json",
    )
    assert lying.checks_verdict == "failed"
    why = lying.unusable_pass() or ""
    assert "lying.json: its verdict says passed, its checks say failed" in why
    assert "test_nccl" in why
    empty = parse_report(_report([]), source="empty.json")
    assert "its checks say not validated" in (empty.unusable_pass() or "")


# -- size caps on buffered reads -----------------------------------------------------------------------------
class _Raw:
    """A urllib3-like body of *total* bytes in 64 KiB pieces; counts what was read."""

    def __init__(self, total: int) -> None:
        self.left = total
        self.read_bytes = 0

    def read1(self, n: int, decode_content: bool = True) -> bytes:
        take = min(n, self.left)
        self.left -= take
        self.read_bytes += take
        return b"x" * take

    def read(self, n: int, decode_content: bool = True) -> bytes:
        return self.read1(n)

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass


def _resp(total: int, headers: dict[str, str] | None = None) -> tuple[requests.Response, _Raw]:
    resp = requests.Response()
    raw = _Raw(total)
    resp.raw = raw
    resp.status_code = 200
    resp.headers.update(headers or {})
    return resp, raw


def test_an_answer_past_its_cap_is_not_read_on() -> None:
    resp, raw = _resp(200 << 20)  # no Content-Length (chunked): stopped at the cap
    with pytest.raises(_TooLarge) as info:
        _read_within(resp, 1e12, "GET x", 4 << 20)
    assert info.value.size is None
    assert raw.read_bytes <= (4 << 20) + (1 << 16)
    resp, raw = _resp(200 << 20, {"Content-Length": str(200 << 20)})  # said at once: nothing read
    with pytest.raises(_TooLarge) as info:
        _read_within(resp, 1e12, "GET x", 4 << 20)
    assert info.value.size == 200 << 20
    assert raw.read_bytes == 0
    assert "the manifest is 209715200 bytes (Content-Length), past the 4 MiB cap" in info.value.describe(
        "the manifest"
    )
    resp, _ = _resp(0, {"Content-Length": str(200 << 20)})  # a HEAD names the manifest's size, has no body
    _read_within(resp, 1e12, "HEAD x", 4 << 20, head=True)
    resp, _ = _resp(1000)
    _read_within(resp, 1e12, "GET x", 4 << 20)
    assert resp.content == b"x" * 1000


def test_a_streamed_error_body_is_read_up_to_a_cap_once() -> None:
    resp, raw = _resp(500 << 20)
    resp.status_code = 500
    resp._content_consumed = False  # type: ignore[attr-defined]
    assert _error_codes(resp) == ([], "x" * 300)
    assert raw.read_bytes == 1 << 20
    assert _error_codes(resp)[1] == "x" * 300  # kept, not read again
    assert raw.read_bytes == 1 << 20


# -- the memory of blobs read back ---------------------------------------------------------------------------
def test_verified_blobs_are_remembered_per_registry_and_digest(tmp_path: Path) -> None:
    path = tmp_path / "release" / "verified-blobs.json"
    memory = VerifiedBlobs(path)
    assert not memory.has("r1:5000", DIGEST)
    memory.add("R1:5000", DIGEST)
    memory.save()
    again = VerifiedBlobs(path)
    assert again.has("r1:5000", DIGEST)
    assert not again.has("r2:5000", DIGEST)  # another registry reads it once more
    path.write_text("{not json")
    assert not VerifiedBlobs(path).has("r1:5000", DIGEST)  # a damaged memory: read everything again
    path.write_text(json.dumps({"schema": 1, "verified": {"r1:5000@" + DIGEST: "yesterday"}}))
    assert not VerifiedBlobs(path).has("r1:5000", DIGEST)
    VerifiedBlobs(tmp_path / "file" / "x.json").save()  # nothing new: nothing written
    blocked = VerifiedBlobs(tmp_path / "no-dir-here.json" / "sub" / "x.json")
    (tmp_path / "no-dir-here.json").write_text("a file where a folder would go")
    blocked.add("r", DIGEST)
    blocked.save()  # an unwritable cache is not an error: the next run reads the blobs again


def test_a_verified_blobs_memory_that_is_a_fifo_or_a_device_is_an_empty_memory_not_a_hang(
    tmp_path: Path,
) -> None:
    """main: a FIFO where release keeps the blobs it read back (its size reads 0, under the cap) made every
    release wait forever before the first cell."""
    import os
    import subprocess
    import sys

    fifo = tmp_path / "verified-blobs.json"
    os.mkfifo(fifo)
    device = tmp_path / "zero.json"
    device.symlink_to("/dev/zero")
    code = (
        "import sys; from pathlib import Path; from imagesmith.release import VerifiedBlobs; "
        "print(all(not VerifiedBlobs(Path(p)).has('r', 'sha256:' + '0' * 64) for p in sys.argv[1:]))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, str(fifo), str(device)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("VerifiedBlobs blocks on a FIFO")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


# -- hashed locks --------------------------------------------------------------------------------------------
def _pin_lines(text: str) -> Iterator[tuple[str, bool]]:
    """(requirement, whether --hash lines follow it) of a rendered requirements file."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line and not line.startswith(("#", " ")):
            follows = i + 1 < len(lines) and lines[i + 1].lstrip().startswith("--hash=sha256:")
            yield line.rstrip(" \\"), follows


def test_every_committed_cell_is_fully_hashed_except_the_hand_written_locks_that_say_why() -> None:
    unhashed: set[str] = set()
    for req in sorted(REPO.glob("dockerfiles/*/*/requirements.txt")):
        cell = req.parent
        files = [
            req,
            *sorted((cell / "layers").glob("*.txt")),
            *sorted(cell.glob("builder-requirements.txt")),
        ]
        bare = [
            f"{f.relative_to(REPO)}: {pin}" for f in files for pin, ok in _pin_lines(f.read_text()) if not ok
        ]
        if "# UNHASHED: " in req.read_text():
            unhashed.add(cell.name)
            lock = re.search(r"# pins from lock (\S+)", req.read_text())
            assert lock is not None
            header = (PROJECT.locks_dir / lock.group(1)).read_text()
            assert re.search(r"^# hashes: none \(.+\)", header, re.M), f"{lock.group(1)} does not say why"
            assert re.search(r"^# unverified: ", header, re.M)
        else:
            assert not bare, "pins without --hash:\n" + "\n".join(bare[:5])
    assert unhashed == {c.name for c in REPO.glob("dockerfiles/*/*-cu118-*")}, unhashed
    assert len(unhashed) == 10


def test_plan_explain_names_the_cells_whose_lock_has_no_hashes(run_cli: Callable[..., Any]) -> None:
    res = run_cli("plan", "--matrix", "a100", "--explain")
    assert res.exit_code == 0, res.stderr
    out = io.StringIO(res.stdout).read()
    assert (
        "10 cell(s) whose lock has no sha256 for every pin (build refuses them unless --allow-unhashed)"
        in out
    )
    assert re.search(
        r"2\.2\.2-cu118-py3\.10-runtime-ubuntu22\.04: lock 2\.2\.2-cu118-py3\.10\.txt: written by hand; .*"
        r"fix: imagesmith lock --matrix a100 --force where its index is reachable",
        out,
    ), out


# -- carried entries: rebuilt from their content, or dropped ---------------------------------------------
def test_a_carried_entry_is_rebuilt_from_its_image_or_dropped_when_its_config_is_not_imagesmiths() -> None:
    import dataclasses

    from imagesmith.refs import Registry
    from imagesmith.release import Carried, rebind_carried

    reg = _Images()
    good, foreign = reg.image(_labels()), reg.image({"maintainer": "someone"})
    doc = {"schema": "imagesmith.release-index/v1", "generated": "2026-11-28T00:00:00Z"}
    base = parse_index(json.dumps(doc | {"images": [image_doc("2.4.1", "12.1", "3.11")]}), source="t").images[
        0
    ]

    def entry(tag: str, digest: str) -> Any:
        copies = tuple(dataclasses.replace(c, tag=tag, digest=digest) for c in base.registries)
        return dataclasses.replace(base, tag=tag, cell=tag, digest=digest, registries=copies)

    honest = ValidatedOn(
        gpu="NVIDIA H100", count=8, driver="570.1.2", date="2026-11-29T10:00:00Z", report_digest=DIGEST
    )
    carried = Carried(
        images=(entry("a", good), entry("b", foreign)),
        refusals=(),
        unverified=(),
        evidence={"a": (honest,), "b": (honest,)},
    )
    known = {
        c.name: Registry(name=c.name, host=c.host, repository=c.registry.repository) for c in base.registries
    }
    out = rebind_carried(carried, known, lambda r: reg, {})  # type: ignore[arg-type,return-value]
    assert [i.tag for i in out.images] == ["a"], out.refusals
    assert (out.images[0].torch, out.images[0].validated_on) == ("2.5.1", (honest,))
    assert "entry a: torch: 2.4.1 → 2.5.1 (from its image config and signed evidence)" in out.corrections
    (refused,) = out.refusals
    assert refused.tag == "b"
    assert (
        f"carried index entry b: registry fake (fake.example) imagesmith/torch@{foreign}"
        in refused.reasons[0]
    )
    assert f"its image config has no label {LABEL_TORCH}" in refused.reasons[0]
    assert refused.reasons[0].endswith("; the entry is dropped")


def test_every_passing_report_of_a_real_gpu_host_in_docs_evidence_can_stand_behind_a_release() -> None:
    passing = []
    for f in sorted(REPO.glob("docs/evidence/**/report.json")):
        r = parse_report(f.read_bytes(), source=str(f))
        if r.passed:
            passing.append(f)
            assert r.unusable_pass() is None, r.unusable_pass()
        else:
            assert r.checks_verdict != "passed" or r.verdict == "not validated", f
    assert len(passing) >= 3


def test_a_carried_entrys_image_is_read_from_the_next_registry_when_one_fails() -> None:
    import dataclasses

    from imagesmith.errors import RegistryError
    from imagesmith.refs import Registry
    from imagesmith.release import Carried, rebind_carried

    class _Down(_Images):
        def get_manifest(self, repo: str, reference: str) -> ManifestData:
            raise RegistryError("registry down (127.0.0.1:1): unreachable", hint="rerun")

    reg = _Images()
    digest = reg.image(_labels())
    doc = {"schema": "imagesmith.release-index/v1", "generated": "2026-11-28T00:00:00Z"}
    base = parse_index(json.dumps(doc | {"images": [image_doc("2.4.1", "12.1", "3.11")]}), source="t").images[
        0
    ]
    assert len(base.registries) >= 2
    copies = tuple(dataclasses.replace(c, digest=digest) for c in base.registries)
    image = dataclasses.replace(base, digest=digest, registries=copies)
    honest = ValidatedOn(
        gpu="NVIDIA H100", count=8, driver="570.1.2", date="2026-11-29T10:00:00Z", report_digest=DIGEST
    )
    carried = Carried(images=(image,), refusals=(), unverified=(), evidence={image.tag: (honest,)})
    known = {c.name: Registry(name=c.name, host=c.host, repository=c.registry.repository) for c in copies}
    first, second = copies[0].name, copies[1].name
    clients: dict[str, Any] = {first: _Down(), second: reg}
    out = rebind_carried(carried, known, lambda r: pytest.fail(r.name), clients)
    assert out.unverified == ()
    assert out.images[0].torch == "2.5.1"
    down: Any = _Down()
    every_down = rebind_carried(carried, known, lambda r: pytest.fail(r.name), dict.fromkeys(known, down))
    assert every_down.images == (image,)  # kept as it was; the index is not written (release_cells)
    assert [u.split(":")[0] for u in every_down.unverified] == [f"{image.tag} in {c.name}" for c in copies]
