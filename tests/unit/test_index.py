"""Release index: schema validation with errors that name file, field and fix; canonical round trip."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.errors import ConfigError
from imagesmith.index import SCHEMA, dump_index, load_index, parse_index, save_index

D1 = "sha256:" + "a" * 64
D2 = "sha256:" + "b" * 64


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
    ],
)
def test_bad_index_names_source_and_field(mutate: Any, expect: str) -> None:
    msg = _bad(mutate)
    assert msg.startswith("release index /srv/index.json: ")
    assert expect in msg
    assert "fix:" in msg


def test_not_json() -> None:
    with pytest.raises(ConfigError, match=r"idx.json: not valid JSON"):
        parse_index("{nope", source="idx.json")


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_index(tmp_path / "absent.json")


def test_save_then_load_and_merge(tmp_path: Path) -> None:
    idx = parse_index(json.dumps(index_doc(image(tag="old"), image(tag="keep"))), source="i")
    new = parse_index(json.dumps(index_doc(image(tag="old", torch="2.5.0"), image(tag="new"))), source="n")
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
    path.write_text(json.dumps(index_doc(image(tag="t1"), image(tag="t2", torch="2.5.0"))))
    res = run_cli("index", str(path))
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[0].endswith("2 image(s), generated 2026-11-28T03:00:00Z")
    assert (
        res.stdout.splitlines()[1]
        == "  registries (the publisher's hosts): not listed (an index written before issue 17)"
    )
    assert "  t2  torch 2.5.0 CUDA 12.4 py3.11  driver >= 550.54.14 (minor 525.60.13)" in res.stdout
    res = run_cli("index", str(path), "--json")
    assert json.loads(res.stdout)["images"][1]["tag"] == "t2"
    path.write_text(json.dumps(index_doc(image(tag="t1", cuda="twelve"))))
    res = run_cli("index", str(path))
    assert res.exit_code == ConfigError.exit_code
    assert "images[0].cuda: 'twelve' is not a CUDA version" in res.stderr
