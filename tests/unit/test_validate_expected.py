"""Expected performance (imagesmith/data/perf.toml) and the verdict bands, fed with probe output recorded on a
2×H200 host: healthy, and with a competing load on one GPU (docs/evidence/h200x2-perf)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.nvsmi import SmiGpu
from imagesmith.validate.criteria import weakest_link
from imagesmith.validate.expected import (
    Bands,
    Expected,
    PerfDataError,
    allreduce_expected,
    clock_events,
    fleet_expected,
    fleet_groups,
    gpu_expected,
    judge,
    link_expected,
    match_device,
    parse_perf,
    pcie_link,
    perf_data,
)
from imagesmith.validate.parsers import parse_topo_matrix
from imagesmith.validate.runner import load_baseline
from tests.repo import REPO

PERF = REPO / "tests/data/validate/perf"
H200 = [
    SmiGpu(index=i, name="NVIDIA H200", memory_mib=143771, uuid=u)
    for i, u in enumerate(("GPU-a7bfb6c6-5250-9628-4387-ad875a55706c", "GPU-other"))
]


def probe(name: str) -> dict[str, Any]:
    line = (PERF / f"h200x2-{name}.probe").read_text()
    data: dict[str, Any] = json.loads(line.split(" ", 1)[1])
    return data


def verdicts(name: str, figure: str) -> list[tuple[int, str, float]]:
    out: list[tuple[int, str, float]] = []
    for i, d in enumerate(probe(name)["devices"]):
        g = match_device(d, H200, i)
        assert g is not None
        j = judge(figure, f"GPU {g.index}", d[figure], gpu_expected(g, figure), Bands())
        assert j.ratio is not None
        out.append((g.index, j.verdict, round(j.ratio, 2)))
    return out


def test_every_row_loads_and_names_known_gpus() -> None:
    data = perf_data()
    assert data.gpus["h200"].hbm_copy_gbps == 4258
    assert sorted(data.pcie_gbps_per_lane) == [1, 2, 3, 4, 5, 6]
    assert all(row.datasheet for row in data.gpus.values())


def test_healthy_h200_passes_every_figure() -> None:
    for figure in ("hbm_copy_gbps", "matmul_tflops"):
        assert [v for _, v, _ in verdicts("healthy", figure)] == ["pass", "pass"]
    for d in probe("healthy")["devices"]:
        link = pcie_link(d["pcie_samples"])
        assert link == {"gen": 5, "gen_max": 5, "width": 16, "width_max": 16}
        expect = link_expected(link["gen_max"], link["width_max"])
        assert expect is not None
        assert judge("h2d_gbps", "x", d["h2d_gbps"], expect, Bands()).verdict == "pass"
        # the software power cap every busy H200 runs at is normal; nothing fails or warns
        assert clock_events(d["load_samples"]) == ([], [])


def test_a_competing_load_on_one_gpu_fails_that_gpu_only() -> None:
    hbm = verdicts("hog-matmul-gpu1", "hbm_copy_gbps")
    mm = verdicts("hog-matmul-gpu1", "matmul_tflops")
    assert [v for _, v, _ in hbm] == ["pass", "fail"]
    assert [v for _, v, _ in mm] == ["pass", "fail"]
    assert mm[1][2] <= 0.5  # half the throughput or less
    assert [v for _, v, _ in verdicts("hog-copy-gpu0", "hbm_copy_gbps")] == ["fail", "pass"]
    assert [v for _, v, _ in verdicts("hog-copy2-gpu0", "matmul_tflops")] == ["fail", "pass"]


def test_the_failure_sentence_names_figure_gpu_expected_ratio_and_source() -> None:
    g = H200[1]
    j = judge("matmul_tflops", "GPU 1 (NVIDIA H200)", 310.7, gpu_expected(g, "matmul_tflops"), Bands())
    text = j.sentence()
    assert j.verdict == "fail"
    for part in ("GPU 1 (NVIDIA H200)", "dense matmul throughput 310.7 TFLOP/s", "0.47 ×", "668", "baseline"):
        assert part in text


@pytest.mark.parametrize(
    ("ratio", "bands", "kind", "verdict"),
    [
        (0.95, Bands(), "baseline", "pass"),
        (0.85, Bands(), "baseline", "warn"),
        (0.79, Bands(), "baseline", "fail"),
        (0.85, Bands(fail_ratio=0.9, warn_ratio=0.95), "baseline", "fail"),
        (0.6, Bands(), "estimate", "warn"),
        (0.49, Bands(), "estimate", "fail"),
        (0.85, Bands(), "estimate", "pass"),
    ],
)
def test_bands(ratio: float, bands: Bands, kind: Any, verdict: str) -> None:
    assert (
        judge(
            "hbm_copy_gbps", "GPU 0", ratio * 100, Expected(value=100, kind=kind, source="s"), bands
        ).verdict
        == verdict
    )


def test_no_row_is_said_not_guessed() -> None:
    unknown = SmiGpu(index=0, name="NVIDIA Imaginary X1", memory_mib=1000)
    j = judge("hbm_copy_gbps", "GPU 0", 100.0, gpu_expected(unknown, "hbm_copy_gbps"), Bands())
    assert j.verdict == "no-baseline"
    assert "no baseline" in j.sentence()
    with pytest.raises(ValueError, match="fail ratio"):
        Bands(fail_ratio=0.9, warn_ratio=0.8)


def test_estimates_come_from_the_datasheet_times_the_measured_efficiency() -> None:
    a100 = SmiGpu(index=0, name="NVIDIA A100-SXM4-80GB", memory_mib=81920)
    e = gpu_expected(a100, "matmul_tflops")
    assert e is not None
    assert e.kind == "estimate"
    assert e.value == pytest.approx(312 * 0.675)
    assert "datasheet" in e.source


def test_a_link_trained_at_gen3_fails_against_its_gen5_slot() -> None:
    samples = [
        {
            "pcie.link.gen.current": "3",
            "pcie.link.gen.max": "5",
            "pcie.link.width.current": "16",
            "pcie.link.width.max": "16",
        }
    ]
    link = pcie_link(samples)
    expect = link_expected(link["gen_max"], link["width_max"])
    assert judge("h2d_gbps", "GPU 0", 13.1, expect, Bands()).verdict == "fail"
    assert link_expected(4, 8) is not None
    assert link_expected(None, 16) is None


def test_hardware_slowdown_fails_software_thermal_warns() -> None:
    assert clock_events([{"clocks_event_reasons.active": "0x0000000000000044"}])[
        0
    ]  # sw power cap + hw thermal
    fails, warns = clock_events(
        [{"clocks_event_reasons.active": "0x20"}, {"clocks_event_reasons.active": "junk"}]
    )
    assert fails == []
    assert warns == ["software thermal slowdown (SW_THERMAL_SLOWDOWN)"]


def test_allreduce_row_by_model_count_and_link() -> None:
    topo = parse_topo_matrix((REPO / "tests/data/validate/h200x2/topo-m.txt").read_text())
    link = weakest_link(topo)
    assert link == "NV18"
    e = allreduce_expected(H200[0], 2, link)
    assert e is not None
    assert e.value == 325
    assert allreduce_expected(H200[0], 8, link) is None
    # a narrower NVLink bond on the same model is a degraded host: judged against the NV18 baseline, and said
    narrow = allreduce_expected(H200[0], 2, "NV12")
    assert narrow is not None
    assert narrow.value == 325
    assert "this host's weakest link is NV12" in narrow.source
    assert judge("allreduce_busbw_gbps", "2 GPUs", 217.0, narrow, Bands()).verdict == "fail"


def test_broken_data_names_the_row() -> None:
    good = {
        "probe": {"hbm_copy_efficiency": 0.9, "matmul_efficiency": 0.7, "pcie_efficiency": 0.9, "source": "s"}
    }
    parse_perf(good, known_gpus=["h200"])
    with pytest.raises(PerfDataError, match=r"gpu\[0\].gpu 'nope'"):
        parse_perf({**good, "gpu": [{"gpu": "nope", "source": "d"}]}, known_gpus=["h200"])
    with pytest.raises(PerfDataError, match="no `measured` source"):
        parse_perf({**good, "gpu": [{"gpu": "h200", "source": "d", "hbm_copy_gbps": 1}]}, known_gpus=["h200"])
    with pytest.raises(PerfDataError, match="source"):
        parse_perf({**good, "pcie": [{"gen": 3, "gbps_per_lane": 1}]}, known_gpus=[])


def test_baseline_report_gives_per_gpu_figures(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    report.write_text(
        json.dumps(
            {
                "started": "t",
                "checks": [
                    {
                        "name": "test_gpu_memory_bandwidth",
                        "figures": {
                            "judgements": [
                                {"figure": "hbm_copy_gbps", "measured": 4000},
                                {"figure": "hbm_copy_gbps", "measured": 4200},
                                {"figure": "hbm_copy_gbps", "measured": 4100},
                            ]
                        },
                    }
                ],
            }
        )
    )
    busbw, source, figures = load_baseline(report)
    assert busbw is None
    assert figures == {"hbm_copy_gbps": 4100}
    assert str(report) in source


def test_a_report_records_the_figures_the_index_keeps() -> None:
    from imagesmith.validate.record import ValidationReport

    path = REPO / "docs/evidence/h200x2-perf/host/report.json"
    report = ValidationReport.parse(path.read_bytes(), source=str(path))
    assert report.link == "NV18"
    assert report.figures["allreduce_busbw_gbps"] == pytest.approx(324.87, abs=0.01)
    assert report.figures["hbm_copy_gbps"] == pytest.approx(4235.5, abs=1)  # median of the two GPUs
    assert set(report.figures) == {
        "hbm_copy_gbps",
        "matmul_tflops",
        "h2d_gbps",
        "d2h_gbps",
        "allreduce_busbw_gbps",
    }


def test_fleet_median_by_model_count_and_link() -> None:
    from imagesmith.index import dump_index, parse_index
    from tests.unit.test_index import image, index_doc

    def host(digest: str, hbm: float, count: int = 2, link: str = "NV18") -> dict[str, Any]:
        return {
            "gpu": "NVIDIA H200",
            "count": count,
            "driver": "580.65.06",
            "date": "2026-11-30",
            "report_digest": "sha256:" + digest * 64,
            "link": link,
            "figures": {"hbm_copy_gbps": hbm, "allreduce_busbw_gbps": 320.0},
        }

    doc = index_doc(
        image(validated_on=[host("1", 4200), host("2", 4260), host("3", 4000)]),
        image(tag="other", validated_on=[host("2", 4260), host("4", 2000, count=8, link="NV18")]),
    )
    index = parse_index(json.dumps(doc), source="t")
    # a round trip keeps the figures
    assert parse_index(dump_index(index), source="t2") == index
    groups = fleet_groups(index)
    pair = next(g for g in groups if g["count"] == 2)
    assert pair["hosts"] == 3  # report 2 counted once
    assert pair["figures"]["hbm_copy_gbps"] == 4200
    e = fleet_expected(groups, gpu="NVIDIA H200", count=2, link="NV18", figure="hbm_copy_gbps", source="idx")
    assert e is not None
    assert e.value == 4200
    assert "fleet median of 3" in e.source
    assert (
        fleet_expected(groups, gpu="NVIDIA H200", count=4, link="NV18", figure="hbm_copy_gbps", source="")
        is None
    )
    assert judge("hbm_copy_gbps", "GPU 0", 2000, e, Bands()).verdict == "fail"


def test_index_refuses_an_unknown_figure() -> None:
    from imagesmith.errors import ConfigError
    from imagesmith.index import parse_index
    from tests.unit.test_index import image, index_doc

    bad = image()
    bad["validated_on"][0]["figures"] = {"hbm_gbps": 1.0}
    with pytest.raises(ConfigError, match="hbm_gbps"):
        parse_index(json.dumps(index_doc(bad)), source="t")
