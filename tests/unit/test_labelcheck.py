"""Release's label checks and writes (issue 34; imagesmith/labelcheck.py). The registry-side runs are in
tests/integration/test_release_index_trust.py."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from imagesmith.compat import MinDriver, parse_driver
from imagesmith.errors import ConfigError
from imagesmith.index import Shm
from imagesmith.labelcheck import check_targets, label_differences, recorded_stack, write_file


def test_write_file_replaces_a_regular_file_and_refuses_links_and_special_files(tmp_path: Path) -> None:
    target = tmp_path / "index.json.sig"
    write_file(target, b"one")
    write_file(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["index.json.sig"]  # no temporary file left
    outside = tmp_path / "outside"
    outside.write_text("keep")
    for kind in ("link", "dangling", "fifo", "folder"):
        path = tmp_path / f"{kind}.pub"
        if kind == "link":
            path.symlink_to(outside)
        elif kind == "dangling":
            path.symlink_to(tmp_path / "nowhere")
        elif kind == "fifo":
            os.mkfifo(path)
        else:
            path.mkdir()
        with pytest.raises(ConfigError, match="symbolic link" if kind in ("link", "dangling") else "regular"):
            write_file(path, b"x")
        with pytest.raises(ConfigError, match=str(path)):
            check_targets([target, path])
    assert outside.read_text() == "keep"
    assert not (tmp_path / "nowhere").exists()


def _facts(**kw: object) -> SimpleNamespace:
    base = {
        "torch": "2.11.0",
        "cuda": "13.0",
        "min_driver": MinDriver(full=parse_driver("580.65.06"), minor_version=parse_driver("580.65.06")),
        "arch": ("8.0", "9.0"),
        "shm": Shm(size="1g", ipc_host=False),
    }
    return SimpleNamespace(**{**base, **kw})


def test_label_differences_name_each_lie_and_agreeing_labels_pass() -> None:
    cell = _facts(shm_size="1g")
    report = SimpleNamespace(
        path="r/report.json",
        body=json.dumps(
            {
                "checks": [
                    {"name": "test_record_stack", "figures": {"torch": "2.11.0+cu130", "torch_cuda": "13.0"}}
                ]
            }
        ).encode(),
    )
    assert label_differences(cell, _facts(), [report]) == []
    low = MinDriver(full=parse_driver("450.80.02"), minor_version=parse_driver("450.80.02"))
    said = label_differences(cell, _facts(min_driver=low, arch=("8.0",), shm=Shm(size="64m")), [report])
    assert [s.split(" ", 1)[0] for s in said] == ["min-driver", "arch", "shm-min"]
    assert label_differences(cell, _facts(torch="2.9.0"), [report]) == [
        "torch 2.9.0 (the validation report r/report.json recorded inside the image: torch 2.11.0+cu130)"
    ]
    assert "CUDA 13.0" in label_differences(cell, _facts(cuda="12.8"), [report])[0]
    # a report that recorded nothing (an older suite) binds nothing; junk bodies read as nothing
    assert label_differences(cell, _facts(), [SimpleNamespace(path="p", body=b"{}")]) == []
    assert recorded_stack(b"not json") == {}
    assert recorded_stack(b'{"checks": [{"name": "test_record_stack", "figures": []}]}') == {}
