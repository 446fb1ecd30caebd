"""``imagesmith refresh-compat`` without the network: recorded PyPI answers (tests/data/refresh, written by
``--record`` against PyPI for torch 2.10–2.15), a real fatbin from torch 2.15.0's libtorch_cuda.so, and wheels
built here served by a fake range-capable HTTP client."""

from __future__ import annotations

import dataclasses
import http.server
import io
import json
import struct
import sys
import threading
import zipfile
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import ClassVar

import pytest
import requests
from packaging.specifiers import SpecifierSet

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from imagesmith import compat, refresh
from imagesmith.errors import ConfigError, UpstreamError
from imagesmith.fatbin import MAGIC, FatbinReport, FatbinScanner, scan
from imagesmith.refresh import drafts, pypi
from tests.localhttp import QuietHTTPServer
from tests.repo import REPO

DATA = REPO / "tests" / "data" / "refresh"
REAL_FATBIN = (DATA / "fatbin-torch-2.15.0-smallest.bin").read_bytes()
TORCH_TOML = REPO / "imagesmith" / "data" / "torch.toml"


# ------------------------------------------------------------------------------------------------------------
# fatbin headers


def entry(kind: int, arch: int, payload: bytes = b"\x11" * 24) -> bytes:
    """An entry header: kind, version, header size, payload size; arch at 28, flags at 40."""
    header = bytearray(64)
    struct.pack_into("<HHIQ", header, 0, kind, 0x101, 64, len(payload))
    struct.pack_into("<I", header, 28, arch)
    struct.pack_into("<Q", header, 40, 0x8011)
    return bytes(header) + payload


def fatbin(*entries: bytes) -> bytes:
    body = b"".join(entries)
    return struct.pack("<IHHQ", MAGIC, 1, 16, len(body)) + body


def test_the_real_fatbin_lists_sass_for_six_archs() -> None:
    """The smallest fatbin of torch 2.15.0's libtorch_cuda.so (PyPI cp312 wheel): SASS, no PTX."""
    report = scan(REAL_FATBIN)
    assert report.fatbins == 1
    assert sorted(report.sass) == [75, 80, 86, 90, 100, 120]
    assert not report.ptx
    assert report.arch_list() == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]
    assert report.span == (0, len(REAL_FATBIN))


def test_the_scanner_finds_the_run_and_stops_after_it() -> None:
    """Host bytes with stray magics, then two fatbins (8 bytes of padding between), then host bytes and a
    fatbin past the run that must not count; fed in 7-byte chunks so headers split across chunks."""
    stray = struct.pack("<I", MAGIC)
    head = b"\x90" * 5 + stray + b"\x90" * 7 + stray + struct.pack("<HHQ", 2, 16, 8) + b"\x90" * 4
    head += b"\0" * (-len(head) % 8)
    second = fatbin(entry(2, 75), entry(2, 90), entry(1, 90))
    body = REAL_FATBIN + b"\0" * 8 + second
    tail = b"\x48\x89\xe5" * 40 + fatbin(entry(2, 61))
    data = head + body + tail
    scanner = FatbinScanner()
    for i in range(0, len(data), 7):
        scanner.feed(data[i : i + 7])
        if scanner.done:
            break
    assert scanner.done
    assert i < len(data) - 7  # stopped before the end
    report = scanner.finish()
    assert report.span == (len(head), len(head) + len(body))
    assert report.fatbins == 2
    assert report.sass[75] == 2
    assert report.sass[61] == 0
    assert report.arch_list() == ["7.5", "8.0", "8.6", "9.0+PTX", "10.0", "12.0"]  # 1 of 2 = half
    assert report.arch_list(share=0.75) == ["7.5", "9.0"]
    assert report.extras(share=0.75)[0] == "sm_80 (1 of 2 fatbins)"


def test_ptx_of_the_newest_arch_becomes_plus_ptx() -> None:
    blobs = fatbin(entry(2, 80), entry(2, 120), entry(1, 120)) * 3
    assert scan(blobs).arch_list() == ["8.0", "12.0+PTX"]
    only_ptx = fatbin(entry(2, 80), entry(1, 90)) * 2
    assert scan(only_ptx).arch_list() == ["8.0", "9.0+PTX"]


def test_a_report_round_trips_through_json() -> None:
    report = scan(REAL_FATBIN)
    assert FatbinReport.from_json(json.loads(json.dumps(report.to_json()))) == report


# ------------------------------------------------------------------------------------------------------------
# a wheel over HTTP ranges


class FakeHttp(refresh.Http):
    """Serves in-memory files by URL, ranges included, counting bytes as the real one does."""

    def __init__(self, files: Mapping[str, bytes], fail: bool = False) -> None:
        super().__init__()
        self.files = files
        self.fail = fail

    def _get(self, url: str, headers: Mapping[str, str], *, stream: bool = False) -> requests.Response:
        self.requests += 1
        if self.fail:
            raise UpstreamError(f"cannot read {url}: refused", hint="check the network")
        data = self.files[url]
        resp = requests.Response()
        resp.url = url
        spec = headers.get("Range", "").removeprefix("bytes=")
        if spec.startswith("-"):
            data = data[int(spec) :]
        elif spec:
            a, _, b = spec.partition("-")
            data = data[int(a) : int(b) + 1]
        resp.status_code = 206 if spec else 200
        resp.raw = io.BytesIO(data)
        return resp


def make_wheel(library: bytes, *, zip64: bool = False) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("torch/__init__.py", "")
        with zf.open("torch/lib/libtorch_cuda.so", "w", force_zip64=zip64) as f:
            f.write(library)
        zf.writestr(
            "torch-9.9.0.dist-info/METADATA",
            "Metadata-Version: 2.4\nName: torch\nVersion: 9.9.0\nRequires-Dist: nvidia-nccl-cu13==2.99.1; "
            'platform_system == "Linux"\n\nlong description\n',
        )
    return buf.getvalue()


@pytest.mark.parametrize("zip64", [False, True])
def test_a_remote_wheel_gives_its_metadata_and_arch_without_reading_it_all(zip64: bool) -> None:
    elf = b"\x7fELF" + b"\x01" * 60 + bytes(range(256)) * 4000  # host code that compresses badly enough
    tail = bytes(reversed(range(256))) * 8000
    library = elf + b"\0" * (-len(elf) % 8) + REAL_FATBIN * 3 + b"\x2e" * 64 + tail
    wheel = make_wheel(library, zip64=zip64)
    http = FakeHttp({"https://files.test/torch.whl": wheel})
    remote = refresh.RemoteWheel(http, "https://files.test/torch.whl", len(wheel))
    member = remote.members()["torch/lib/libtorch_cuda.so"]
    assert member.size == len(library)
    assert b"nvidia-nccl-cu13==2.99.1" in remote.read("torch-9.9.0.dist-info/METADATA")
    http.bytes = 0
    report = refresh.read_fatbins(remote.stream("torch/lib/libtorch_cuda.so"))
    assert report.fatbins == 3
    assert report.arch_list() == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"]
    assert http.bytes < member.compressed + 100


def test_a_wheel_without_the_cuda_library_is_one_clear_error() -> None:
    wheel = make_wheel(b"")
    zf = io.BytesIO()
    with zipfile.ZipFile(zf, "w") as z:
        z.writestr("torch/__init__.py", "")
    http = FakeHttp({"u": zf.getvalue()})
    with pytest.raises(UpstreamError, match=r"no member torch/lib/libtorch_cuda\.so") as err:
        refresh.RemoteWheel(http, "u", len(zf.getvalue())).read(refresh.CUDA_LIBRARY)
    assert err.value.hint
    assert wheel


def test_a_network_failure_names_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise requests.ConnectionError("connection refused")

    http = refresh.Http()
    monkeypatch.setattr(http.session, "get", refuse)
    source = refresh.LiveSource("https://index.test/simple/", http)
    with pytest.raises(UpstreamError) as err:
        source.files("torch")
    assert "https://index.test/simple/torch/" in err.value.message
    assert "--offline" in (err.value.hint or "")


class _Endless(http.server.BaseHTTPRequestHandler):
    """Answers every GET with HTTP 200 and 64 MiB, Range or not, counting what it could send."""

    sent: ClassVar[list[int]] = []

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(64 << 20))
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.end_headers()
        chunk = b" " * (1 << 16)
        try:
            for _ in range(1024):
                self.wfile.write(chunk)
                self.sent.append(len(chunk))
        except OSError:  # the client hung up
            return

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def endless() -> Iterator[str]:
    _Endless.sent = []
    server = QuietHTTPServer(("127.0.0.1", 0), _Endless)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_range_answered_with_the_whole_file_is_refused_unread(endless: str) -> None:
    """A file host that ignores Range answers with the whole wheel (gigabytes): refused on its status,
    before its body is read (requests reads a body that is not streamed in full)."""
    with pytest.raises(UpstreamError, match="ignored the Range header"):
        refresh.Http().range(f"{endless}/torch.whl", 0, 99)
    assert sum(_Endless.sent) < 32 << 20, sum(_Endless.sent)


def test_an_index_answer_past_the_package_index_cap_is_refused(
    endless: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An answer read whole is capped by the package-index policy (imagesmith/http.py), not read to its
    end."""
    from imagesmith import http as http_policy

    monkeypatch.setattr(
        http_policy, "PACKAGE_INDEX", dataclasses.replace(http_policy.PACKAGE_INDEX, max_bytes=1 << 20)
    )
    with pytest.raises(UpstreamError, match="more than 1 MiB") as err:
        refresh.Http().get(f"{endless}/simple/torch/")
    assert err.value.hint
    assert sum(_Endless.sent) < 32 << 20, sum(_Endless.sent)


def test_an_html_only_index_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    http = FakeHttp({"https://index.test/simple/torch/": b"<html>not json</html>"})
    with pytest.raises(UpstreamError, match="JSON Simple API"):
        refresh.LiveSource("https://index.test/simple", http).files("torch")


# ------------------------------------------------------------------------------------------------------------
# metadata, tags, configuration


def _metadata(name: str) -> str:
    return (DATA / "metadata" / f"{name}.METADATA").read_text()


def test_cu12_pins_come_from_the_runtime_package() -> None:
    pins = refresh.parse_metadata(_metadata("torch-2.10.0-3-cp312-cp312-manylinux_2_28_x86_64.whl"))
    assert (pins.cuda, pins.nccl, pins.cudnn) == ("12.8", "2.27.5", "9.10.2.21")
    assert pins.cuda_pin == "nvidia-cuda-runtime-cu12==12.8.90"


def test_cu13_pins_come_from_the_cuda_toolkit_metapackage() -> None:
    pins = refresh.parse_metadata(_metadata("torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl"))
    assert (pins.cuda, pins.nccl, pins.cudnn) == ("13.2", "2.30.7", "9.26.0.51")
    assert pins.cuda_pin == "cuda-toolkit==13.2.2"
    assert pins.requires_python == ">=3.11"


def test_companions_pin_or_admit_torch() -> None:
    tv = refresh.parse_metadata(_metadata("torchvision-0.27.0-cp312-cp312-manylinux_2_28_x86_64.whl"))
    assert str(tv.torch) == "==2.12.0"
    ta = refresh.parse_metadata(_metadata("torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl"))
    assert ta.torch is not None
    assert ta.torch.contains("2.15.0")


def test_the_python_range_comes_from_the_cp_tags() -> None:
    source = refresh.RecordedSource(DATA)
    wheels = drafts._final(source.files("torch"))["2.15.0"]
    assert refresh.python_range(wheels) == ">=3.11,<3.16"
    # the rebuilt 2.10.0 wheels (build tag 3) win over the first upload
    assert drafts._pick_wheel(drafts._final(source.files("torch"))["2.10.0"]).build == 3


def test_the_index_defaults_to_pips(monkeypatch: pytest.MonkeyPatch) -> None:
    assert refresh.default_index_url({"PIP_INDEX_URL": "https://mirror.test/simple extra"}) == (
        "https://mirror.test/simple"
    )
    monkeypatch.setattr(pypi, "_pip_config", lambda: {"global.index-url": "https://corp.test/simple"})
    assert refresh.default_index_url({}) == "https://corp.test/simple"
    monkeypatch.setattr(pypi, "_pip_config", lambda: {"global.cert": "/ca.pem"})
    assert refresh.ca_bundle({}) == "/ca.pem"
    assert refresh.ca_bundle({"REQUESTS_CA_BUNDLE": "/other.pem"}) == "/other.pem"


@pytest.mark.parametrize(
    ("text", "low", "high"),
    [("2.10-2.15", "2.10", "2.15"), ("2.12", "2.12", "2.12"), ("2.10-", "2.10", None), (None, "2.15", None)],
)
def test_release_ranges(text: str | None, low: str, high: str | None) -> None:
    lo, hi = refresh.parse_releases(text, "2.15")
    assert str(lo) == low
    assert (str(hi) if hi else None) == high


def test_a_junk_range_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="not a range"):
        refresh.parse_releases("two-ten", "2.15")


# ------------------------------------------------------------------------------------------------------------
# the recorded run: the data's 2.10–2.15 rows, field for field


def test_the_recording_reproduces_every_row_from_2_10_to_2_15() -> None:
    result = refresh.run(refresh.RecordedSource(DATA), "2.10-2.15")
    assert result.exit_code == 0
    assert not result.new
    checked = [r for r in result.rows if r.status == "match"]
    assert {r.release for r in checked} == {
        "2.10.0",
        "2.11.0",
        "2.12.0",
        "2.12.1",
        "2.13.0",
        "2.14.0",
        "2.14.1",
        "2.15.0",
    }
    for version in {r.release for r in checked}:
        fields = {r.field for r in checked if r.release == version}
        assert fields >= {"python", "pypi_default", "cuda", "nccl", "cudnn", "arch_list", "torchvision"}, (
            version
        )
    others = [r for r in result.rows if r.status == "not-checked"]
    assert all(r.note == "not on PyPI, not checked" for r in others)
    assert ("2.10.0", "cu130") in {(r.release, r.variant) for r in others}


def _patched(
    monkeypatch: pytest.MonkeyPatch, edit: Callable[[compat.TorchRelease], compat.TorchRelease | None]
) -> None:
    releases = tuple(r for r in (edit(r) for r in compat.torch_releases()) if r is not None)
    monkeypatch.setattr(compat, "torch_releases", lambda: releases)


def _with_variant(rel: compat.TorchRelease, name: str, **changes: object) -> compat.TorchRelease:
    variants = dict(rel.variants)
    variants[name] = dataclasses.replace(variants[name], **changes)  # type: ignore[arg-type]
    return dataclasses.replace(rel, variants=variants)


def test_a_wrong_field_is_reported_with_both_values_and_the_file(monkeypatch: pytest.MonkeyPatch) -> None:
    def edit(rel: compat.TorchRelease) -> compat.TorchRelease:
        if rel.version == "2.15.0":
            rel = _with_variant(
                rel, "cu132", nccl="2.30.6", arch_list=("7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX")
            )
            rel = dataclasses.replace(rel, python=SpecifierSet(">=3.11,<3.15"))
        return rel

    _patched(monkeypatch, edit)
    result = refresh.run(refresh.RecordedSource(DATA), "2.15")
    differs = {r.field: r for r in result.rows if r.status == "differs"}
    assert set(differs) == {"nccl", "arch_list", "python"}
    assert (differs["nccl"].data, differs["nccl"].pypi) == ("2.30.6", "2.30.7")
    assert differs["arch_list"].pypi == "7.5, 8.0, 8.6, 9.0, 10.0, 12.0"
    assert differs["python"].pypi == ">=3.11,<3.16"
    assert differs["nccl"].source.endswith("torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert result.exit_code == refresh.EXIT_DIFFERENCES


def test_torchvision_python_is_checked_against_torchvisions_requires_python(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # issue 27: torchvision 0.26 … Requires-Python >=3.10,!=3.14.1: the data records it, the sweep checks it
    rows = {
        r.release: r
        for r in refresh.run(refresh.RecordedSource(DATA), "2.10-2.15").rows
        if r.field == "torchvision_python"
    }
    assert rows["2.11.0"].status == "match"
    assert rows["2.11.0"].pypi == ">=3.10,!=3.14.1"
    assert rows["2.10.0"].status == "match"  # torchvision 0.25.0 excludes nothing, nor does the data

    def edit(rel: compat.TorchRelease) -> compat.TorchRelease:
        return dataclasses.replace(rel, torchvision_python=None) if rel.version == "2.13.0" else rel

    _patched(monkeypatch, edit)
    dropped = [
        r for r in refresh.run(refresh.RecordedSource(DATA), "2.13").rows if r.field == "torchvision_python"
    ]
    assert [(r.status, r.data, r.pypi) for r in dropped] == [("differs", None, ">=3.10,!=3.14.1")]


def test_a_default_variant_the_data_lacks_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def edit(rel: compat.TorchRelease) -> compat.TorchRelease:
        if rel.version == "2.10.0":
            variants = {k: v for k, v in rel.variants.items() if k != "cu128"}
            return dataclasses.replace(rel, variants=variants, pypi_default="cu126")
        return rel

    _patched(monkeypatch, edit)
    rows = refresh.run(refresh.RecordedSource(DATA), "2.10").rows
    got = {(r.field, r.status, r.pypi) for r in rows}
    assert ("pypi_default", "differs", "cu128") in got
    assert ("variant", "differs", "cu128") in got


def test_write_appends_a_new_release_and_edits_a_field(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def edit(rel: compat.TorchRelease) -> compat.TorchRelease | None:
        if rel.version == "2.15.0":
            return None
        if rel.version == "2.14.1":
            return _with_variant(rel, "cu130", cudnn="9.24.0.42")
        return rel

    _patched(monkeypatch, edit)
    result = refresh.run(refresh.RecordedSource(DATA), "2.14-")
    assert result.new == ["2.15.0"]
    target = tmp_path / "torch.toml"
    original = TORCH_TOML.read_text()
    target.write_text(
        original.replace(
            'cudnn = "9.24.0.43"\nverified = false\nsource = "assumed = 2.14.0; arch',
            'cudnn = "9.24.0.42"\nverified = false\nsource = "assumed = 2.14.0; arch',
        )
    )
    done = refresh.write(result, target, today="2026-12-01")
    assert done == [
        "torch 2.14.1 cu130 cudnn: 9.24.0.42 → 9.24.0.43",
        "torch 2.15.0: new release row (verified = false)",
    ]
    text = target.read_text()
    assert text.startswith(original[: original.index('version = "2.14.1"')])  # nothing above it moved
    data = tomllib.loads(text)
    rel = {r["version"]: r for r in data["release"]}
    fixed = next(v for v in rel["2.14.1"]["variant"] if v["name"] == "cu130")
    assert fixed["cudnn"] == "9.24.0.43"
    assert fixed["verified"] is False
    assert fixed["source"].endswith(
        "cudnn 9.24.0.42 → 9.24.0.43 per PyPI file torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl"
    )
    new = rel["2.15.0"]
    assert {k: new[k] for k in ("torchvision", "torchaudio", "python", "pypi_default", "verified")} == {
        "torchvision": "0.29.2",
        "torchaudio": "2.11.1",
        "python": ">=3.11,<3.16",
        "pypi_default": "cu132",
        "verified": False,
    }
    assert new["torchaudio_local"] is False
    assert "PyPI file torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl" in new["source"]
    (variant,) = new["variant"]
    assert variant == variant | {
        "name": "cu132",
        "cuda": "13.2",
        "arch_list": ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"],
        "nccl": "2.30.7",
        "cudnn": "9.26.0.51",
        "verified": False,
    }
    assert "cuda-toolkit==13.2.2" in variant["source"]


# ------------------------------------------------------------------------------------------------------------
# the command


def test_the_command_replays_a_recording(run_cli: Callable[..., object]) -> None:
    res = run_cli("refresh-compat", "--offline", str(DATA), "--releases", "2.10-2.15")
    assert res.exit_code == 0, res.stderr  # type: ignore[attr-defined]
    assert "72 match, 0 differ, 0 new" in res.stdout  # type: ignore[attr-defined]
    assert "torch 2.10.0 (PyPI file torch-2.10.0-3-cp312-cp312-manylinux_2_28_x86_64.whl)" in res.stdout  # type: ignore[attr-defined]


def test_the_command_exits_11_with_json_on_a_difference(
    run_cli: Callable[..., object], monkeypatch: pytest.MonkeyPatch
) -> None:
    _patched(monkeypatch, lambda r: _with_variant(r, "cu130", nccl="1.0.0") if r.version == "2.13.0" else r)
    res = run_cli("refresh-compat", "--offline", str(DATA), "--releases", "2.13", "--json")
    assert res.exit_code == refresh.EXIT_DIFFERENCES  # type: ignore[attr-defined]
    payload = json.loads(res.stdout)  # type: ignore[attr-defined]
    assert payload["differs"] is True
    (row,) = [r for r in payload["rows"] if r["status"] == "differs"]
    assert (row["variant"], row["field"], row["data"], row["pypi"]) == ("cu130", "nccl", "1.0.0", "2.29.7")


def test_an_incomplete_recording_says_how_to_record(run_cli: Callable[..., object], tmp_path: Path) -> None:
    (tmp_path / "simple").mkdir()
    (tmp_path / "simple" / "torch.json").write_text((DATA / "simple" / "torch.json").read_text())
    res = run_cli("refresh-compat", "--offline", str(tmp_path), "--releases", "2.15")
    assert res.exit_code == 2  # type: ignore[attr-defined]
    assert "--record DIR" in res.stderr  # type: ignore[attr-defined]


def test_the_weekly_workflow_writes_drafts_and_takes_11_as_a_difference() -> None:
    text = (REPO / ".github" / "workflows" / "refresh-compat.yml").read_text()
    assert "imagesmith refresh-compat --write" in text
    assert f"-ne {refresh.EXIT_DIFFERENCES} ]" in text
    assert "gh pr create" in text
