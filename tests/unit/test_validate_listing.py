"""The listing file (issue 33): units read strictly, hostile files refused with one error naming the file and
the key, the --expect-* shorthands folded into the same promises, and each promise judged against what a
1×H200 host measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from imagesmith.errors import ConfigError
from imagesmith.validate.listing import (
    BROKEN,
    KEPT,
    UNMEASURED,
    FolderMeasure,
    Listing,
    Measured,
    judge_listing,
    load_listing,
    parse_rate,
    parse_size_unit,
    with_flags,
)
from tests.repo import REPO

EXAMPLE = REPO / "docs" / "examples" / "listing.toml"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("141 GB", 141 * 10**9),
        ("256 GiB", 256 * 2**30),
        ("2TiB", 2 * 2**40),
        ("512 MiB", 512 * 2**20),
        ("1.5 TB", 1_500_000_000_000),
    ],
)
def test_sizes(text: str, value: int) -> None:
    assert parse_size_unit(text, source="l.toml", key="host.ram") == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("5 GB/s", 5e9),
        ("100 Gb/s", 12.5e9),
        ("100 Gbps", 12.5e9),
        ("400Gb/s", 50e9),
        ("2500 MB/s", 2.5e9),
        ("3 GiB/s", 3 * 2**30),
        ("25 GBps", 25e9),
    ],
)
def test_rates_bits_and_bytes(text: str, value: float) -> None:
    assert parse_rate(text, source="l.toml", key="network.nic_rate") == pytest.approx(value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("256", "bare number"),
        ("256 Gb", "bits"),
        ("256 gb", "neither clearly bits nor bytes"),
        ("256 GX", "unknown unit"),
        ("lots", "not a size"),
    ],
)
def test_sizes_refused(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_size_unit(text, source="l.toml", key="host.ram")
    assert words in exc.value.message
    assert exc.value.file == "l.toml"
    assert exc.value.field == "host.ram"
    assert exc.value.hint


@pytest.mark.parametrize("text", ["100", "100G", "100 gb/s", "100 Gb", "5 GB", "fast", "3 iB/s"])
def test_rates_refused(text: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_rate(text, source="l.toml", key="storage.data.read")
    assert exc.value.field == "storage.data.read"
    assert "l.toml: storage.data.read:" in exc.value.message


HOSTILE = [
    ("unknown-key", "[gpu]\ncount = 1\ncolour = 'green'\n", "gpu.colour"),
    ("unknown-table", "[gpus]\ncount = 1\n", "gpus"),
    ("wrong-type", '[gpu]\ncount = "eight"\n', "gpu.count"),
    ("count-zero", "[gpu]\ncount = 0\n", "gpu.count"),
    ("count-absurd", "[gpu]\ncount = 100000\n", "gpu.count"),
    ("bool-count", "[gpu]\ncount = true\n", "gpu.count"),
    ("interconnect-enum", '[gpu]\ninterconnect = "infinityfabric"\n', "gpu.interconnect"),
    ("driver-junk", '[gpu]\ndriver = "latest"\n', "gpu.driver"),
    ("ram-bare", "[host]\nram = '256'\n", "host.ram"),
    ("ram-bits", "[host]\nram = '256 Gb'\n", "host.ram"),
    ("ram-absurd", "[host]\nram = '900 TiB'\n", "host.ram"),
    ("vcpu-negative", "[host]\nvcpu = -4\n", "host.vcpu"),
    ("nic-no-unit", "[network]\nnic_rate = '100G'\n", "network.nic_rate"),
    ("nic-ambiguous", "[network]\nnic_rate = '100 gb/s'\n", "network.nic_rate"),
    ("nic-absurd", "[network]\nnic_rate = '100 Tb/s'\n", "network.nic_rate"),
    ("fabric-enum", "[network]\nfabric = 'omnipath'\n", "network.fabric"),
    ("folder-no-path", "[storage.data]\nread = '5 GB/s'\n", "storage.data.path"),
    ("folder-relative", "[storage.data]\npath = 'data'\n", "storage.data.path"),
    ("folder-rate-size", "[storage.data]\npath = '/data'\nread = '5 GB'\n", "storage.data.read"),
    ("folder-rate-zero", "[storage.data]\npath = '/data'\nwrite = '0 GB/s'\n", "storage.data.write"),
    ("folder-unknown", "[storage.scratch]\npath = '/scratch'\n", "storage.scratch"),
    ("price-negative", "[price]\nper_hour = -3.0\n", "price.per_hour"),
    ("price-text", "[price]\nper_hour = 'cheap'\n", "price.per_hour"),
]


@pytest.mark.parametrize(("name", "text", "key"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_listing_is_one_clear_error(tmp_path: Path, name: str, text: str, key: str) -> None:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_listing(path)
    assert str(path) in exc.value.message
    assert key in exc.value.message, exc.value.message
    assert exc.value.hint


@pytest.mark.parametrize(
    ("name", "body"),
    [("bom", b"\xef\xbb\xbf[gpu]\ncount = 1\n"), ("utf16", "[gpu]".encode("utf-16")), ("syntax", b"[gpu\n")],
)
def test_unreadable_listing_files(tmp_path: Path, name: str, body: bytes) -> None:
    path = tmp_path / f"{name}.toml"
    path.write_bytes(body)
    with pytest.raises(ConfigError) as exc:
        load_listing(path)
    assert str(path) in exc.value.message
    assert exc.value.hint


def test_missing_listing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load_listing(tmp_path / "nope.toml")
    assert "--listing" in exc.value.message


def test_the_example_listing_reads_and_round_trips() -> None:
    listing = load_listing(EXAMPLE)
    assert listing.gpu_count == 8
    assert listing.interconnect == "nvlink"
    assert listing.nic_rate == pytest.approx(50e9)  # 400 Gb/s
    assert listing.data is not None
    assert listing.data.read == pytest.approx(5e9)
    assert Listing.from_json(listing.to_json()) == listing


def test_expect_flags_are_shorthands_of_the_same_promises(tmp_path: Path) -> None:
    path = tmp_path / "l.toml"
    path.write_text("[gpu]\ncount = 1\n[host]\nram = '256 GiB'\n")
    listing = with_flags(load_listing(path), expect_gpu="H200", expect_count=1, expect_nvlink=True)
    assert (listing.gpu_model, listing.gpu_count, listing.interconnect) == ("H200", 1, "nvlink")
    assert listing.origin["gpu.model"] == "--expect-gpu"
    assert listing.origin["gpu.count"] == str(path)  # the file said it first
    flags_only = with_flags(Listing(), expect_gpu=None, expect_count=2, expect_nvlink=False)
    assert flags_only.gpu_count == 2
    assert flags_only.origin == {"gpu.count": "--expect-count"}
    with pytest.raises(ConfigError) as exc:
        with_flags(load_listing(path), expect_gpu=None, expect_count=8, expect_nvlink=False)
    assert "contradicts gpu.count" in exc.value.message
    assert exc.value.field == "gpu.count"


#: what the suite measured on the lent 1×H200 host (docs/evidence/h200x1-soak: 143771 MiB, driver 580.159.04,
#: CUDA 13.0; 16 vCPU, 125 GiB RAM, no cgroup limit)
H200 = Measured(
    gpu_names=["NVIDIA H200"],
    gpu_memory_mib=[143771.0],
    weakest_link=None,
    topology_seen=True,
    mig_modes=["Disabled"],
    driver="580.159.04",
    driver_cuda="13.0",
    vcpu=16,
    vcpu_basis="nproc",
    ram=134_000_000_000,
    ram_basis="MemTotal",
    folders={"data": FolderMeasure(path="/tmp", read=1.8e9, write=1.1e9, tool="dd")},
)


def _listing(tmp_path: Path, text: str) -> Listing:
    path = tmp_path / "l.toml"
    path.write_text(text)
    return load_listing(path)


def test_a_matching_listing_keeps_every_promise(tmp_path: Path) -> None:
    listing = _listing(
        tmp_path,
        "[gpu]\nmodel = 'H200'\ncount = 1\nmemory = '141 GB'\nmig = false\ndriver = '580'\ncuda = '13.0'\n"
        "[host]\nvcpu = 16\nram = '125 GiB'\n[storage.data]\npath = '/tmp'\nread = '1.7 GB/s'\n",
    )
    rows = judge_listing(listing, H200)
    assert [r.verdict for r in rows] == [KEPT] * len(rows), rows
    assert {r.promise for r in rows} >= {"gpu.count", "host.ram", "storage.data.read", "gpu.memory"}


def test_a_listing_of_a_bigger_host_breaks_each_promise_by_name(tmp_path: Path) -> None:
    listing = _listing(
        tmp_path,
        "[gpu]\ncount = 2\ninterconnect = 'nvlink'\n[host]\nram = '256 GiB'\n"
        "[storage.data]\npath = '/tmp'\nread = '5 GB/s'\n[network]\nnic_rate = '400 Gb/s'\n",
    )
    rows = {r.promise: r for r in judge_listing(listing, H200)}
    assert {k for k, r in rows.items() if r.verdict == BROKEN} == {
        "gpu.count",
        "gpu.interconnect",
        "host.ram",
        "storage.data.read",
    }
    assert rows["network.nic_rate"].verdict == UNMEASURED
    assert "1 GPU(s)" in rows["gpu.count"].measured
    assert "no NVLink" in rows["gpu.interconnect"].measured
    assert "1.8 GB/s" in rows["storage.data.read"].measured


def test_an_old_driver_a_smaller_gpu_and_mig_are_broken(tmp_path: Path) -> None:
    listing = _listing(tmp_path, "[gpu]\nmemory = '192 GB'\nmig = false\ndriver = '590.10'\ncuda = '12.4'\n")
    m = Measured(
        gpu_names=["NVIDIA H200"],
        gpu_memory_mib=[143771.0],
        mig_modes=["Enabled"],
        driver="580.159.04",
        driver_cuda="13.0",
    )
    verdicts = {r.promise: r.verdict for r in judge_listing(listing, m)}
    assert verdicts == {"gpu.memory": BROKEN, "gpu.mig": BROKEN, "gpu.driver": BROKEN, "gpu.cuda": KEPT}


def test_an_image_gets_the_listing_only_where_a_file_gave_one(tmp_path: Path) -> None:
    from imagesmith.validate.container import inner_argv
    from imagesmith.validate.context import SuiteOptions

    flags = with_flags(Listing(), expect_gpu=None, expect_count=2, expect_nvlink=False)
    argv = inner_argv(SuiteOptions(expect_count=2, listing=flags.to_json()), select=None)
    assert "--listing-json" not in argv
    assert argv[argv.index("--expect-count") + 1] == "2"
    path = tmp_path / "l.toml"
    path.write_text("[host]\nram = '256 GiB'\n")
    listing = load_listing(path)
    argv = inner_argv(SuiteOptions(listing=listing.to_json()), select=None)
    assert Listing.from_json(json.loads(argv[argv.index("--listing-json") + 1])) == listing


def test_what_a_listing_validated_host_proved_reaches_the_index_and_pick() -> None:
    """release copies report_figures into validated_on[].figures: the lent H200's passing listing run
    (docs/evidence/h200x1-listing/healthy) as the checks record it now, then the index and pick's text."""
    from imagesmith.commands.output import endurance
    from imagesmith.index import dump_index, parse_index
    from imagesmith.validate.record import report_figures
    from tests.unit.test_index import image, index_doc

    checks = [
        {"name": "test_listing", "figures": {"summary": {"listing_promises_kept": 12}}},
        {
            "name": "test_host_size",
            "figures": {"summary": {"host_vcpu_per_gpu": 16.0, "host_ram_per_gpu_memory": 0.896}},
        },
        {
            "name": "test_storage",
            "figures": {
                "summary": {"storage_data_read_gbps": 1.1506, "storage_checkpoint_write_gbps": 1.5103}
            },
        },
        {"name": "test_storage_none", "figures": {"summary": {"storage_data_read_gbps": None}}},
    ]
    figures = report_figures(checks)
    assert figures == {
        "listing_promises_kept": 12.0,
        "host_vcpu_per_gpu": 16.0,
        "host_ram_per_gpu_memory": 0.896,
        "storage_data_read_gbps": 1.1506,
        "storage_checkpoint_write_gbps": 1.5103,
    }
    doc = index_doc(image())
    doc["images"][0]["validated_on"][0]["figures"] = figures
    parsed = parse_index(json.dumps(doc), source="index.json")
    assert parse_index(dump_index(parsed), source="again") == parsed
    assert endurance(parsed.images[0].validated_on[0].figures) == (
        " [listing: 12 promises kept; 16 vCPU/GPU; RAM 0.90× GPU memory; data read 1.2 GB/s; "
        "checkpoint write 1.5 GB/s]"
    )


@pytest.mark.parametrize("text", ["9" * 400 + " GB", "1" + "0" * 330 + ".5 GiB"])
def test_a_size_or_rate_past_any_real_value_is_one_error_not_an_overflow(text: str) -> None:
    from imagesmith.errors import ImagesmithError
    from imagesmith.validate.listing import parse_rate, parse_size_unit

    for parse, value in ((parse_size_unit, text), (parse_rate, text + "/s")):
        with pytest.raises(ImagesmithError) as info:
            parse(value, source="listing.toml", key="gpu.memory")
        assert "listing.toml" in info.value.message


def test_host_rows_alone_driver_is_compared_as_a_version_and_an_unmeasured_one_says_why() -> None:
    """listing._host_rows, one step of judge_listing: "or later" compares versions (570.10 < 570.9 as text),
    and a promise the suite did not measure is UNMEASURED with the suite's reason."""
    from imagesmith.validate.listing import _host_rows

    seen: list[tuple[str, str | None, bool | None]] = []
    promised = Listing(driver="570.9", cuda="12.8", vcpu=8)
    _host_rows(
        promised,
        Measured(driver="570.10", driver_cuda="12.4"),
        lambda k, p, got, ok: seen.append((k, got, ok)),
    )
    assert seen == [("gpu.driver", "570.10", True), ("gpu.cuda", "12.4", False), ("host.vcpu", None, None)]
    rows = judge_listing(
        promised, Measured(driver="570.10", driver_cuda="12.4", why_not={"host.vcpu": "no nproc"})
    )
    assert [(r.verdict, r.measured) for r in rows][1:] == [(BROKEN, "12.4"), (UNMEASURED, "no nproc")]
    assert rows[0].verdict == KEPT
