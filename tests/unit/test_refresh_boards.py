"""Issue 35: `imagesmith refresh-compat --boards CLONE` re-derives every board's first driver from a clone of
NVIDIA/open-gpu-kernel-modules and diffs it against driver_table.toml (exit 11 on a difference).

The clone here is a tiny git repository made in tmp: a few release tags, each holding a synthetic
g_nv_name_released.h in the driver's format (written here, invented boards; nothing of NVIDIA's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import drivertable

Run = Callable[..., Any]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _header(entries: list[tuple[int, int, str]]) -> str:
    rows = "".join(f'    {{ 0x{d:04X}, 0x{s:04x}, 0x10de, "{n}" }},\n' for d, s, n in entries)
    return (
        "/* synthetic test table in the layout of g_nv_name_released.h */\n"
        "typedef struct _CHIPS_RELEASED { unsigned short devID; unsigned short subSystemID;\n"
        "    unsigned short subSystemVendorID; const char *name; } CHIPS_RELEASED;\n\n"
        f"static const CHIPS_RELEASED sChipsReleased[] = {{\n{rows}}};\n"
    )


OLD = (0x1000, 0x0000, "Test Old Board")
ALPHA = (0x2000, 0x0000, "NVIDIA Test Alpha")
BETA = (0x2100, 0x1234, "NVIDIA Test Beta Server")
PROFILE = (0x2100, 0x9999, "NVIDIA Test Beta-8C")  # a vGPU profile: never a board row
# (tag, day of release, entries): 525.47.04 comes out after 525.60.11, so it is out of order (skipped) and
# its Beta is never a first driver; Alpha is missing from 525.60.13 (a release whose table lacks it)
TAGS = [
    ("515.43.04", 1, [OLD]),
    ("520.56.06", 10, [OLD, ALPHA]),
    ("525.47.04", 40, [OLD, ALPHA, BETA]),
    ("525.47.06", 45, [OLD, ALPHA, BETA]),
    ("525.60.11", 20, [OLD, ALPHA]),
    ("525.60.13", 25, [OLD]),
    ("530.30.02", 50, [OLD, ALPHA, BETA, PROFILE]),
]


def _git(repo: Path, *args: str, day: int = 1) -> None:
    date = f"2022-0{1 + day // 28}-{1 + day % 28:02d}T12:00:00Z"
    env = {
        **os.environ,
        "GIT_AUTHOR_DATE": date,
        "GIT_COMMITTER_DATE": date,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
    }
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env, timeout=60)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    repo = tmp_path / "open-gpu-kernel-modules"
    (repo / "src/nvidia/generated").mkdir(parents=True)
    _git(repo, "init", "-q")
    for tag, day, entries in TAGS:
        (repo / drivertable.HEADER_PATH).write_text(_header(entries), encoding="utf-8")
        _git(repo, "add", "-A", day=day)
        _git(repo, "commit", "-q", "--allow-empty", "-m", tag, day=day)
        _git(repo, "tag", tag, day=day)
    return repo


def _derived(clone: Path) -> drivertable.Table:
    return drivertable.derive(drivertable.read_clone(clone))


def test_the_derivation_skips_out_of_order_tags_and_profiles(clone: Path) -> None:
    table = _derived(clone)
    assert table.tags_skipped == ("525.47.04", "525.47.06")
    rows = {b.name: b for b in table.boards}
    assert set(rows) == {"NVIDIA Test Alpha", "NVIDIA Test Beta Server"}
    alpha, beta = rows["NVIDIA Test Alpha"], rows["NVIDIA Test Beta Server"]
    assert (alpha.first_driver, alpha.previous_driver, alpha.absent_from) == (
        "520.56.06",
        "515.43.04",
        ("525.60.13",),
    )
    assert (beta.first_driver, beta.previous_driver, beta.pci_ids) == (
        "530.30.02",
        "525.60.13",
        ("2100:1234",),
    )
    assert beta.segment == "datacenter"


def test_the_committed_table_agrees_exits_0_and_a_planted_wrong_floor_exits_11(
    clone: Path, tmp_path: Path, run_cli: Run
) -> None:
    data = tmp_path / "driver_table.toml"
    names = {"NVIDIA Test Alpha"}  # the real gpus.toml names are not in the synthetic table: no rows for them
    data.write_text(drivertable.render_toml(drivertable.derive(drivertable.read_clone(clone), names)))
    ok = run_cli("refresh-compat", "--boards", str(clone), "--boards-file", str(data))
    assert ok.exit_code == 0, ok.stdout + ok.stderr
    assert (
        "2 boards from 7 release tags (2 out of order, skipped): the data agrees with the clone" in ok.stdout
    )

    planted = data.read_text().replace('first_driver = "530.30.02"', 'first_driver = "525.47.04"')
    assert planted != data.read_text()
    data.write_text(planted)
    bad = run_cli("refresh-compat", "--boards", str(clone), "--boards-file", str(data), "--json")
    assert bad.exit_code == 11
    payload = json.loads(bad.stdout)
    assert payload["differs"] is True
    assert payload["differences"] == [
        {
            "board": "NVIDIA Test Beta Server",
            "field": "first_driver",
            "data": "525.47.04",
            "clone": "530.30.02",
        }
    ]
    assert data.read_text() == planted  # no --write: the file is left alone

    fixed = run_cli("refresh-compat", "--boards", str(clone), "--boards-file", str(data), "--write")
    assert fixed.exit_code == 11
    assert f"wrote: {data}" in fixed.stdout
    assert run_cli("refresh-compat", "--boards", str(clone), "--boards-file", str(data)).exit_code == 0


def test_a_new_release_tag_in_the_clone_is_a_difference(clone: Path, tmp_path: Path, run_cli: Run) -> None:
    data = tmp_path / "driver_table.toml"
    data.write_text(drivertable.render_toml(_derived(clone)))
    (clone / drivertable.HEADER_PATH).write_text(
        _header([OLD, ALPHA, BETA, (0x2200, 0, "NVIDIA Test Gamma")])
    )
    _git(clone, "commit", "-q", "-am", "535.54.03", day=60)
    _git(clone, "tag", "535.54.03", day=60)
    res = run_cli("refresh-compat", "--boards", str(clone), "--boards-file", str(data), "--json")
    assert res.exit_code == 11
    diffs = json.loads(res.stdout)["differences"]
    assert {
        "board": "",
        "field": "tags_read",
        "data": "only here: -",
        "clone": "only there: 535.54.03",
    } in diffs
    assert {"board": "NVIDIA Test Gamma", "field": "row", "data": "-", "clone": "present"} in diffs


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.mkdir(), "not a git clone"),
        (
            lambda p: subprocess.run(["git", "init", "-q", str(p)], check=True, capture_output=True),
            "no release tags",
        ),
    ],
)
def test_not_a_clone_is_one_clear_error(
    tmp_path: Path, run_cli: Run, make: Callable[[Path], Any], message: str
) -> None:
    path = tmp_path / "nv"
    make(path)
    res = run_cli("refresh-compat", "--boards", str(path))
    assert res.exit_code == 2
    assert message in res.stderr
    assert "git clone https://github.com/NVIDIA/open-gpu-kernel-modules" in res.stderr
    assert "Traceback" not in res.stderr


def test_a_tag_without_the_table_is_one_clear_error(clone: Path, run_cli: Run) -> None:
    (clone / drivertable.HEADER_PATH).write_text("/* no table */\n")
    _git(clone, "commit", "-q", "-am", "540.1", day=70)
    _git(clone, "tag", "540.1.1", day=70)
    res = run_cli("refresh-compat", "--boards", str(clone))
    assert res.exit_code == 2
    assert f"540.1.1:{drivertable.HEADER_PATH}: no sChipsReleased[] table in it" in res.stderr
