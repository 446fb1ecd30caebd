"""Issue 27 finding 3: a driver branch older than a GPU's architecture cannot drive it at all.

Every GPU has a first driver (``compat.gpu_min_driver``): its own ``min_driver`` in gpus.toml where NVIDIA
names one for the board, else its architecture's ``first_driver`` (``[[arch]]``, Kepler … Blackwell), derived
from the first CUDA toolkit targeting the architecture where no NVIDIA statement was read. compat, pick, init
--driver and plan all honour it, naming it and where it comes from.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagesmith import compat
from imagesmith.compat import DriverVersion, parse_driver
from imagesmith.compat.tables import TABLES
from imagesmith.nvsmi import SmiGpu
from imagesmith.pick import Host, assess
from tests.repo import REPO

NOV_30 = datetime.date(2026, 11, 30)
INDEX = REPO / "docs" / "examples" / "release-index.json"


def _just_below(d: DriverVersion) -> DriverVersion:
    if d.patch:
        return DriverVersion(d.major, d.minor, d.patch - 1)
    if d.minor:
        return DriverVersion(d.major, d.minor - 1, 99)
    return DriverVersion(d.major - 1, 999, 99)


# the issue's reproducers: each said "compatible, with limits" (or picked an image) on main


@pytest.mark.parametrize(
    ("driver", "gpu", "first"),
    [
        ("450.80.02", "h200", "550.90.07"),
        ("470.82.01", "h100", "525.85.12"),
        ("470.82.01", "h100-pcie", "520.61.05"),
        # RTX 4090 and L40S: the first drivers whose NVIDIA driver table holds them (data/driver_table.toml)
        ("470.82.01", "rtx4090", "520.56.06"),
        ("470.82.01", "l40s", "535.104.05"),
        ("515.43.04", "rtx4090", "520.56.06"),
    ],
)
def test_the_issue_examples_are_none_naming_the_first_driver(driver: str, gpu: str, first: str) -> None:
    v = compat.verdict(driver, gpu, "2.1.2", "11.8", today=NOV_30)
    assert (v.compatible, v.mode) == (False, "none")
    assert v.blockers[0].startswith(f"{compat.gpu(gpu).name} ({compat.gpu(gpu).sm}) needs driver ≥ {first}: ")
    assert f"driver {driver} cannot drive it at all" in v.blockers[0]
    assert v.needs_driver is not None
    assert v.needs_driver >= parse_driver(first)
    assert not any("cuda-compat" in r for r in v.reasons)  # forward compatibility cannot drive a newer GPU


def test_the_first_drivers_source_is_in_the_reason() -> None:
    table = compat.verdict("515.43.04", "rtx4090", "2.1.2", "11.8", today=NOV_30)
    assert "NVIDIA/open-gpu-kernel-modules tag 520.56.06" in table.blockers[0]
    derived = compat.verdict("450.80.02", "rtx3090", "2.1.2", "11.8", today=NOV_30)  # predates the table
    assert "derived: CUDA 11.1 is the first toolkit with sm_86" in derived.blockers[0]
    named = compat.verdict("450.80.02", "h200", "2.1.2", "11.8", today=NOV_30)
    assert "Multi-Instance GPU User Guide" in named.blockers[0]
    assert "550.90.07" in named.blockers[0]


def test_compat_cli_exits_1_and_json_names_the_driver(run_cli: Callable[..., Any]) -> None:
    args = ["compat", "--driver", "450.80.02", "--gpu", "h200", "--torch", "2.1.2", "--cuda", "11.8"]
    text = run_cli(*args)
    assert text.exit_code == 1
    assert "not compatible" in text.stdout
    assert "needs driver ≥ 550.90.07" in text.stdout
    data = json.loads(run_cli(*args, "--json").stdout)
    assert (data["compatible"], data["mode"], data["needs_driver"]) == (False, "none", "550.90.07")


def test_pick_on_a_driver_older_than_h100_picks_nothing(
    run_cli: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # the index's trust record: this test's own
    out = run_cli(
        "pick",
        "--index",
        str(INDEX),
        "--verify-key",
        f"{INDEX}.pub",
        "--driver",
        "470.82.01",
        "--gpu",
        "h100",
    )
    assert out.exit_code == 10  # was 0: a cu118 image
    assert "needs driver ≥ 525.85.12" in out.stderr
    assert "fix: a driver >= 525.85.12 would run at least one of them" in out.stderr


def test_pick_assess_names_the_floor_of_an_unknown_model_by_its_compute_capability() -> None:
    # a model not in gpus.toml, judged by nvidia-smi's compute_cap: its architecture's floor applies
    from imagesmith.index import load_index

    image = next(i for i in load_index(INDEX).images if i.cuda == "11.8")
    host = Host(
        driver="470.82.01",
        gpus=(SmiGpu(index=0, name="NVIDIA Hopper Prototype", compute_cap="9.0", memory_mib=100000),),
        source="test",
    )
    a = assess(image, host, today=NOV_30)
    assert a.level is None
    assert any("needs driver ≥ 520.61.05" in r for r in a.reasons)


# the sweep: every GPU row, just below its first driver and at it


@pytest.mark.parametrize("g", compat.gpus(), ids=lambda g: g.key)
def test_every_gpu_has_a_first_driver_with_a_source(g: compat.Gpu) -> None:
    floor = compat.gpu_min_driver(g)
    assert floor is not None
    assert floor[0] == g.min_driver
    assert floor[1].strip()
    arch = compat.gpu_arch(g)
    assert arch is not None, f"{g.key}: no [[arch]] row covers cc {g.cc}"
    assert g.min_driver is not None
    # below the architecture's first toolkit driver only where NVIDIA's driver table holds the board earlier
    from_table = g.min_driver_source.startswith("NVIDIA/open-gpu-kernel-modules")
    assert g.min_driver >= arch.first_driver or from_table


@pytest.mark.parametrize("g", compat.gpus(), ids=lambda g: g.key)
def test_every_gpu_below_its_first_driver_is_none_and_at_it_is_not_refused_for_that(g: compat.Gpu) -> None:
    floor = compat.gpu_min_driver(g)
    assert floor is not None
    first = floor[0]
    below = compat.verdict(_just_below(first), g, "2.11.0", "cu130", today=NOV_30)
    assert below.mode == "none"
    assert any(b.startswith(f"{g.name} ({g.sm}) needs driver ≥ {first}: ") for b in below.blockers)
    at = compat.verdict(first, g, "2.11.0", "cu130", today=NOV_30)
    assert not any("cannot drive it at all" in b for b in at.blockers)


@settings(max_examples=60, deadline=None)
@given(
    g=st.sampled_from(compat.gpus()),
    major=st.integers(min_value=300, max_value=700),
    minor=st.integers(min_value=0, max_value=200),
    patch=st.integers(min_value=0, max_value=99),
)
def test_no_driver_below_a_gpus_floor_is_ever_compatible(
    g: compat.Gpu, major: int, minor: int, patch: int
) -> None:
    drv = DriverVersion(major, minor, patch)
    v = compat.verdict(drv, g, "2.7.1", "cu128", today=NOV_30)
    floor = compat.gpu_min_driver(g)
    assert floor is not None
    if drv < floor[0]:
        assert v.mode == "none"
        assert v.needs_driver is None or v.needs_driver >= floor[0]
    else:
        assert not any("cannot drive it at all" in b for b in v.blockers)


# the architecture rows


def test_every_architecture_from_kepler_to_blackwell_has_a_row() -> None:
    names = [a.name for a in compat.arch_families()]
    for arch in ("Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere", "Ada", "Hopper", "Blackwell"):
        assert arch in names
    for cc, arch in (
        ("3.7", "Kepler"),
        ("7.5", "Turing"),
        ("8.6", "Ampere"),
        ("9.0", "Hopper"),
        ("12.1", "Blackwell"),
    ):
        found = next(a for a in compat.arch_families() if a.covers(cc))
        assert found.name == arch


@pytest.mark.parametrize("arch", compat.arch_families(), ids=lambda a: f"{a.name}-{a.cc_min}")
def test_a_derived_floor_is_its_first_toolkits_ga_driver(arch: compat.ArchFamily) -> None:
    """Where cuda.toml has the first toolkit (11.0 and newer), a derived floor is that toolkit's GA driver."""
    assert arch.first_driver_source.strip()
    assert "Architecture Matrix" in arch.source or "cuda-gpus" in arch.source
    known = {r.xy for r in compat.cuda_releases()}
    if arch.first_toolkit in known:
        assert arch.first_driver == compat.cuda_release(arch.first_toolkit).min_driver
        assert arch.first_driver_source.startswith("derived")


def test_gpu_rows_with_their_own_floor_say_where_it_comes_from() -> None:
    by_key = {g.key: g for g in compat.gpus()}
    assert str(by_key["b300"].min_driver) == "580.82.07"  # main inferred 575.51.03 from CUDA 12.9
    assert "B300 CUDA 12.9 R580 (>= 580.82.07)" in by_key["b300"].min_driver_source
    assert str(by_key["h100-sxm"].min_driver) == "525.85.12"
    assert str(by_key["h100-pcie"].min_driver) == "520.61.05"
    assert str(by_key["h20"].min_driver) == "535.161.07"
    assert str(by_key["h200"].min_driver) == "550.90.07"
    assert str(by_key["gb200"].min_driver) == "570.133.20"


def test_init_driver_honours_the_floor(tmp_path: Path, run_cli: Callable[..., Any]) -> None:
    out = run_cli("init", str(tmp_path / "p"), "--gpu", "h200", "--driver", "535.104.05")
    assert out.exit_code == 2
    assert "needs driver >= 550.90.07" in out.stderr


def _with_gpus_toml(monkeypatch: pytest.MonkeyPatch, edit: Callable[[dict[str, Any]], None]) -> None:
    import copy

    real = compat._load("gpus.toml")
    broken = copy.deepcopy(real)
    edit(broken)
    load = compat._load
    monkeypatch.setattr(TABLES, "load", lambda name: broken if name == "gpus.toml" else load(name))
    for cached in (compat.gpus, compat.arch_families):
        cached.cache_clear()


@pytest.fixture
def restore_caches() -> Any:
    yield
    for cached in (compat.gpus, compat.arch_families):
        cached.cache_clear()


def test_a_gpu_of_no_known_architecture_without_its_own_floor_is_broken_data(
    monkeypatch: pytest.MonkeyPatch, restore_caches: None
) -> None:
    def edit(data: dict[str, Any]) -> None:
        row = dict(data["gpu"][0], key="future", cc="13.0")
        row.pop("min_driver", None)
        data["gpu"].append(row)

    _with_gpus_toml(monkeypatch, edit)
    with pytest.raises(
        compat.DataError, match=r"gpu future: no \[\[arch\]\] row covers compute capability 13.0"
    ):
        compat.gpus()


def test_a_min_driver_without_its_source_is_broken_data(
    monkeypatch: pytest.MonkeyPatch, restore_caches: None
) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["gpu"][0] = {k: v for k, v in data["gpu"][0].items() if k != "min_driver_source"}
        data["gpu"][0]["min_driver"] = "450.80.02"

    _with_gpus_toml(monkeypatch, edit)
    with pytest.raises(
        compat.DataError, match="`min_driver` needs a driver version and a `min_driver_source`"
    ):
        compat.gpus()


def test_overlapping_architecture_rows_are_broken_data(
    monkeypatch: pytest.MonkeyPatch, restore_caches: None
) -> None:
    def edit(data: dict[str, Any]) -> None:
        data["arch"].append(dict(data["arch"][-1], name="Again"))

    _with_gpus_toml(monkeypatch, edit)
    with pytest.raises(compat.DataError, match=r"\[\[arch\]\] Again: its compute capabilities overlap"):
        compat.arch_families()
