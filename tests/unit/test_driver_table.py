"""Issue 35: every board's first driver from NVIDIA's own driver table (imagesmith/data/driver_table.toml).

Generated from the committed data: for every board the table gives a first driver, `imagesmith compat` at that
driver does not refuse the board (full where a wheel of a CUDA that old runs it) and at the in-order release
before it says "none", naming the first driver; every later release whose table lacks the board is refused
too. The spot checks are facts read from NVIDIA's tags themselves (the issue's examples), so a regeneration
that drifts from them fails here, not only in the diff of `refresh-compat --boards`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomllib

from imagesmith import compat, drivertable
from imagesmith.compat import DriverVersion, parse_driver
from imagesmith.errors import ConfigError
from tests.repo import REPO

DATA = tomllib.loads((REPO / "imagesmith" / "data" / "driver_table.toml").read_text(encoding="utf-8"))
BOARDS = [b for b in DATA["board"] if not b.get("predates_table")]
KEPT = sorted(parse_driver(t) for t in DATA["tags_read"] if t not in set(DATA["tags_skipped"]))
Run = Callable[..., Any]


def _row(name: str) -> compat.Gpu | None:
    found = [g for g in compat.gpus() if name.casefold() in (s.casefold() for s in (g.name, *g.smi_names))]
    return found[0] if found else None


def _capture(tmp_path: Path, name: str, driver: DriverVersion) -> Path:
    """nvidia-smi --query-gpu CSV for one board. A board not in gpus.toml is judged ad hoc from its reported
    compute capability; its floor does not depend on it (9.0: an architecture with no last driver branch)."""
    row = _row(name)
    cc = row.cc if row is not None else "9.0"
    mib = row.memory_mib if row is not None and row.memory_mib else 16384
    path = tmp_path / "smi.csv"
    path.write_text(
        "index, name, memory.total [MiB], driver_version, compute_cap\n"
        f"0, {name}, {mib} MiB, {driver}, {cc}\n",
        encoding="utf-8",
    )
    return path


def _floor(name: str) -> DriverVersion:
    """The floor compat applies: the table's first driver, or the gpus.toml row's later documented one."""
    row = _row(name)
    table = min(parse_driver(b["first_driver"]) for b in BOARDS if b["name"].casefold() == name.casefold())
    if row is None or row.min_driver is None:
        return table
    return max(table, row.min_driver)


def _wheel_for(name: str, driver: DriverVersion) -> tuple[str, str] | None:
    """The newest torch variant whose CUDA's full-compatibility driver is at most *driver* and that has a
    kernel for the board (None if no wheel that old runs it)."""
    row = _row(name)
    cc = row.cc if row is not None else "9.0"
    best = None
    for rel in compat.torch_releases():
        for var in rel.variants.values():
            try:
                need = compat.min_driver(var.cuda)
            except ConfigError:
                continue
            if need.full <= driver and compat.arch_coverage(var.arch_list, cc).kind != "none":
                best = (rel.version, var.name)
    return best


def test_the_data_file_is_what_the_derivation_writes() -> None:
    """The committed file re-renders byte for byte from its own rows (it is generated, never hand-edited)."""
    table = drivertable.boards_from_data(DATA)
    text = (REPO / "imagesmith" / "data" / "driver_table.toml").read_text(encoding="utf-8")
    assert drivertable.render_toml(table) == text


def test_rows_name_read_in_order_tags() -> None:
    kept = [str(t) for t in KEPT]
    assert DATA["tags_read"][0] == drivertable.BASE_TAG
    for b in DATA["board"]:
        assert b["first_driver"] in kept, b["name"]
        i = kept.index(b["first_driver"])
        assert (kept[i - 1] if i else "") == b["previous_driver"], b["name"]
        assert all(
            t in kept and parse_driver(t) > parse_driver(b["first_driver"]) for t in b.get("absent_from", ())
        )
        assert b["source"].startswith(
            f"{drivertable.REPOSITORY} tag {b['first_driver']}, {drivertable.HEADER_PATH}"
        )


@pytest.mark.parametrize("board", BOARDS, ids=lambda b: b["name"])
def test_compat_at_the_first_driver_and_one_release_before(
    board: dict[str, Any], run_cli: Run, tmp_path: Path
) -> None:
    name = board["name"]
    floor = _floor(name)
    wheel = _wheel_for(name, floor)
    torch, cuda = wheel if wheel is not None else ("2.0.1", "cu117")

    at = run_cli(
        "compat",
        "--nvidia-smi",
        str(_capture(tmp_path, name, floor)),
        "--torch",
        torch,
        "--cuda",
        cuda,
        "--json",
    )
    verdict = json.loads(at.stdout)
    assert not any("cannot drive it at all" in b or "does not hold" in b for b in verdict["blockers"]), (
        verdict
    )
    if wheel is not None:
        assert (at.exit_code, verdict["mode"]) == (0, "full"), verdict

    before = max(t for t in KEPT if t < floor)  # the in-order release before the floor
    below = run_cli(
        "compat",
        "--nvidia-smi",
        str(_capture(tmp_path, name, before)),
        "--torch",
        torch,
        "--cuda",
        cuda,
        "--json",
    )
    refused = json.loads(below.stdout)
    assert (below.exit_code, refused["mode"]) == (1, "none")
    assert any(
        f"needs driver ≥ {floor}: driver {before} cannot drive it at all" in b for b in refused["blockers"]
    )


@pytest.mark.parametrize("board", [b for b in BOARDS if b.get("absent_from")], ids=lambda b: b["name"])
def test_a_later_release_whose_table_lacks_the_board_is_refused(board: dict[str, Any]) -> None:
    g = _row(board["name"]) or compat.gpu_or_adhoc(board["name"], compute_cap="9.0")
    for tag in board["absent_from"]:
        drv = parse_driver(tag)
        if g.min_driver is not None and drv <= g.min_driver:
            continue  # at or below a later documented floor: that floor decides
        gap = compat.board_gap(g, drv)
        assert gap is not None
        assert f"{tag}'s table of released products does not hold" in gap


# spot checks: facts read from NVIDIA/open-gpu-kernel-modules' tags (g_nv_name_released.h)


@pytest.mark.parametrize(
    ("gpu", "first", "before"),
    [
        ("rtx4090", "520.56.06", "515.105.01"),  # the arch floor 520.61.05 was too strict
        ("l4", "525.105.17", "525.89.02"),
        ("h100-nvl", "535.104.05", "535.98"),  # the MIG guide's "H100 ... 525.85.12" line is too low for it
        ("rtx-pro-6000-server", "575.57.08", "575.51.03"),
        ("gb10", "580.119.02", "580.105.08"),
        ("l40s", "535.104.05", "535.98"),
        ("h200-nvl", "565.57.01", "560.35.03"),
        ("rtx5090", "570.86.16", "570.86.15"),
    ],
)
def test_issue_examples(gpu: str, first: str, before: str) -> None:
    g = compat.gpu(gpu)
    assert str(g.min_driver) == first
    assert f"tag {first}" in g.min_driver_source
    assert compat.verdict(before, g, "2.0.1", "cu117").mode == "none"
    assert compat.verdict(first, g, "2.0.1", "cu117").blockers == () or not any(
        "cannot drive" in b for b in compat.verdict(first, g, "2.0.1", "cu117").blockers
    )


def test_a_documented_later_floor_wins_and_both_are_recorded() -> None:
    b200 = compat.gpu("b200")
    assert str(b200.min_driver) == "570.133.20"  # NVIDIA GPU Operator; the table holds it from 570.86.15
    assert "GPU Operator" in b200.min_driver_source
    assert "holds it from 570.86.15" in b200.min_driver_source
    h100 = compat.gpu("h100-sxm")
    assert str(h100.min_driver) == "525.85.12"
    assert "holds it from 525.85.05" in h100.min_driver_source


def test_boards_older_than_the_table_keep_their_documented_floors() -> None:
    t4 = compat.gpu("t4")  # named in the table only from 565.57.01, its device id is in 515.43.04's
    assert t4.board is None
    assert t4.min_driver is not None
    assert t4.min_driver < parse_driver("515.43.04")
    assert compat.verdict("535.104.05", t4, "2.1.2", "cu121").mode == "full"


def test_rtx4090_on_the_one_r520_release_whose_table_lacks_it() -> None:
    v = compat.verdict("520.61.05", "rtx4090", "2.0.1", "cu117")
    assert v.mode == "none"
    assert "use ≥ 520.61.07" in v.blockers[0]
    assert str(v.needs_driver) == "520.61.07"
    assert compat.verdict("520.61.07", "rtx4090", "2.0.1", "cu117").mode == "full"
    # R530 never held the RTX 4060: a release of it that was not read is refused too
    g = compat.gpu_or_adhoc("NVIDIA GeForce RTX 4060", compute_cap="8.9")
    gap = compat.board_gap(g, parse_driver("530.50.01"))
    assert gap is not None
    assert "no R530 driver" in gap
    assert compat.board_gap(g, parse_driver("535.104.05")) is None


def test_pick_refuses_a_driver_below_the_boards_first_driver_and_picks_at_it(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    index = str(REPO / "docs" / "examples" / "release-index.json")
    below = run_cli(
        "pick", "--index", index, "--verify-key", f"{index}.pub", "--driver", "525.89.02", "--gpu", "l4"
    )
    assert below.exit_code == 10  # was a cu118 image: the arch floor 520.61.05 let it through
    assert "needs driver ≥ 525.105.17" in below.stderr
    assert "fix: a driver >= 525.105.17 would run at least one of them" in below.stderr
    at = run_cli(
        "pick", "--index", index, "--verify-key", f"{index}.pub", "--driver", "525.105.17", "--gpu", "l4"
    )
    assert at.exit_code == 0, at.stderr
    assert "cu118" in at.stdout
    # the table proves 520.56.06 drives an RTX 4090: not refused for the board (the arch floor was 520.61.05)
    early = run_cli(
        "pick", "--index", index, "--verify-key", f"{index}.pub", "--driver", "520.56.06", "--gpu", "rtx4090"
    )
    assert "cannot drive it at all" not in early.stdout + early.stderr


def test_pick_with_a_mig_device_name_judges_the_parent(
    run_cli: Run, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    index = str(REPO / "docs" / "examples" / "release-index.json")
    res = run_cli(
        "pick",
        "--index",
        index,
        "--verify-key",
        f"{index}.pub",
        "--driver",
        "580.105.08",
        "--gpu",
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
    )
    assert res.exit_code == 0, res.stderr
    assert (
        "MIG is enabled on GPU 0 (NVIDIA A100-SXM4-80GB), 1 MIG slice(s): 3g.40gb" in res.stdout + res.stderr
    )
