"""The cross-node checks' parsers and judges (issue 32), on captures of real hosts
(tests/data/validate/cluster/,
each naming its source): NIC inventory, NCCL's transport, machine identity, the pairing plan and iperf3."""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings

from imagesmith.errors import ParseError
from imagesmith.validate import cluster
from imagesmith.validate.cluster import Identity
from imagesmith.validate.nccltransport import judge_transport, parse_nccl_transport
from imagesmith.validate.nics import judge_nics, parse_ibstat, parse_sysfs_dump
from tests.unit.test_fuzz_inputs import FUZZ, _mutated

DATA = Path(__file__).resolve().parents[1] / "data" / "validate" / "cluster"


def _text(name: str) -> str:
    return (DATA / name).read_text()


# -- NICs ----------------------------------------------------------------------------------------------------


def test_ibstat_ndr_port_is_active_at_400_and_passes_a_400g_listing() -> None:
    ports = parse_ibstat(_text("ibstat-cx7-ndr400.txt"))
    assert [(p.device, p.port, p.state, p.phys_state, p.rate_gbps, p.link_layer) for p in ports] == [
        ("mlx5_5", 1, "ACTIVE", "LinkUp", 400.0, "InfiniBand")
    ]
    v = judge_nics("n1", ports, fabric="ib", rate_gbps=400, expect_ports=1)
    assert v.failures == []
    assert v.warnings == []


def test_a_qdr_port_fails_a_200g_listing_naming_node_port_and_both_rates() -> None:
    ports = parse_ibstat(_text("ibstat-cx3-qdr40.txt"))
    v = judge_nics("n2", ports, fabric="ib", rate_gbps=200)
    assert [(f.kind, f.subject) for f in v.failures] == [("rate low", "n2 mlx4_0 port 1")]
    assert "40 Gb/s" in v.failures[0].message
    assert "200 Gb/s declared" in v.failures[0].message


def test_sysfs_init_port_fails_and_the_ethernet_port_is_only_a_warning_for_ib() -> None:
    ports = parse_sysfs_dump(_text("sysfs-mlx4-init-and-eth.txt"))
    assert [(p.port, p.state, p.link_layer) for p in ports] == [
        (1, "INIT", "InfiniBand"),
        (2, "ACTIVE", "Ethernet"),
    ]
    v = judge_nics("n3", ports, fabric="ib")
    assert [(f.kind, f.subject) for f in v.failures] == [("port down", "n3 mlx4_0 port 1")]
    assert [(f.kind, f.subject) for f in v.warnings] == [("other link layer", "n3 mlx4_0 port 2")]
    # declared RoCE: the Ethernet port is the fabric, but it has no RoCE v2 GID in this capture
    roce = judge_nics("n3", ports, fabric="roce")
    assert [f.kind for f in roce.failures] == ["no roce v2 gid"]


def test_sysfs_roce_v2_gids_are_found_and_the_null_gid_is_not_one() -> None:
    (port,) = parse_sysfs_dump(_text("sysfs-roce-v2.txt"))
    assert (port.rate_gbps, port.link_layer, port.phys_state) == (100.0, "Ethernet", "LinkUp")
    assert port.roce_v2_gids == (1, 3)  # index 4 is RoCE v2 but all zeros: no address behind it
    assert judge_nics("n4", [port], fabric="roce", rate_gbps=100).failures == []
    ib = judge_nics("n4", [port], fabric="ib")
    assert [(f.kind, f.subject) for f in ib.failures] == [("no rdma port", "n4")]


def test_no_rdma_device_fails_ib_and_is_fine_for_ethernet() -> None:
    ports = parse_sysfs_dump("# no /sys/class/infiniband\n")
    assert ports == ()
    assert [f.kind for f in judge_nics("n5", ports, fabric="ib").failures] == ["no rdma port"]
    assert judge_nics("n5", ports, fabric="ethernet").failures == []


def test_fewer_ports_than_declared_fails() -> None:
    ports = parse_ibstat(_text("ibstat-cx7-ndr400.txt"))
    assert [f.kind for f in judge_nics("n1", ports, fabric="ib", expect_ports=8).failures] == [
        "ports missing"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "/sys/class/infiniband/mlx5_0/ports/1/state:4: ACTIVE\n",  # no link_layer: a cut capture
        "/etc/passwd:root:x:0:0\n",
        "/sys/class/infiniband/mlx5_0/ports/1/state:4: "
        "ACTIVE\n/sys/class/infiniband/mlx5_0/ports/1/link_layer:"
        "InfiniBand\n/sys/class/infiniband/mlx5_0/ports/1/rate:fast\n",
    ],
)
def test_broken_sysfs_captures_are_parse_errors(text: str) -> None:
    with pytest.raises(ParseError):
        parse_sysfs_dump(text)


def test_ibstat_without_a_port_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_ibstat("CA 'mlx5_0'\n\tCA type: MT4123\n")
    with pytest.raises(ParseError):
        parse_ibstat("CA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n")  # no link layer
    assert parse_ibstat("") == ()


# -- NCCL transport -----------------------------------------------------------------------------------------


def test_ib_with_gdr_passes_ib_declared_and_gdr_expected() -> None:
    log = parse_nccl_transport(_text("nccl-ib-gdr.log"))
    assert log.verbs == "loaded"
    assert [(d.name, d.port, d.layer) for d in log.ib_devices] == [("mlx5_0", 1, "IB")]
    assert log.nets_used == ("IB",)
    assert log.channels[("IB", True)] == 5
    v = judge_transport(log, fabric="ib", expect_gdr=True)
    assert v.failures == []
    assert v.warnings == []


def test_socket_fallback_fails_where_ib_is_declared_naming_the_transport_and_why() -> None:
    log = parse_nccl_transport(_text("nccl-socket-fallback.log"))
    assert log.verbs == "no device"
    assert log.channels[("Socket", False)] == 4  # the fixture's "#" source line is not counted
    v = judge_transport(log, fabric="ib")
    assert [(f.kind, f.subject) for f in v.failures] == [("socket transport", "NET/Socket")]
    assert "NET/Socket" in v.failures[0].message
    assert "No device found" in v.failures[0].message
    assert "/dev/infiniband" in v.failures[0].fix
    # the same log is what was sold where plain Ethernet is declared
    assert judge_transport(log, fabric="ethernet").failures == []


def test_missing_libibverbs_is_named_as_the_reason() -> None:
    log = parse_nccl_transport(
        "n1:7:7 [0] NCCL INFO Failed to open libibverbs.so[.1]\n"
        "n1:7:7 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>\n"
        "n1:7:7 [0] NCCL INFO Using network Socket\n"
        "n1:7:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    )
    assert log.verbs == "missing"
    assert log.networks == ("Socket",)
    (f,) = judge_transport(log, fabric="roce").failures
    assert f.kind == "socket transport"
    assert "libibverbs" in f.message
    assert "libibverbs1" in f.fix


def test_roce_ports_and_the_ibext_plugin_count_as_rdma() -> None:
    log = parse_nccl_transport(_text("nccl-roce-ibext.log"))
    assert [(d.name, d.layer) for d in log.ib_devices] == [("mlx5_9", "RoCE")]
    assert log.nets_used == ("IBext_v8",)
    assert judge_transport(log, fabric="roce").failures == []
    ib = judge_transport(log, fabric="ib")
    assert ib.failures == []
    assert [w.kind for w in ib.warnings] == ["other link layer"]
    # no GDRDMA on these channels: GPUDirect RDMA expected fails
    assert [f.kind for f in judge_transport(log, fabric="roce", expect_gdr=True).failures] == ["no gdr"]


def test_a_log_without_cross_node_channels_names_nothing_and_fails() -> None:
    log = parse_nccl_transport("n1:7:7 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n")
    assert not log.channels
    for fabric in ("ib", "ethernet"):
        assert [f.kind for f in judge_transport(log, fabric=fabric).failures] == ["no net channel"]


def test_a_plugin_network_where_ib_is_declared_is_named() -> None:
    log = parse_nccl_transport(
        "h:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA\n"
    )
    assert log.nets_used == ("AWS Libfabric",)
    assert [(f.kind, f.subject) for f in judge_transport(log, fabric="ib").failures] == [
        ("other transport", "NET/AWS Libfabric")
    ]


# -- identity -----------------------------------------------------------------------------------------------


def _ident(node: str, boot: str, mid: str = "", gpus: tuple[tuple[str, str], ...] = ()) -> Identity:
    return Identity(node=node, boot_id=boot, machine_id=mid, gpus=gpus)


def test_identity_probe_output_parses() -> None:
    ident = cluster.parse_identity(
        "n1",
        "boot_id=0f0e\nmachine_id=abc\ngpu=GPU-1111, 00000000:18:00.0\ngpu=GPU-2222, 00000000:2A:00.0\n",
    )
    assert ident == _ident(
        "n1", "0f0e", "abc", (("GPU-1111", "00000000:18:00.0"), ("GPU-2222", "00000000:2A:00.0"))
    )
    with pytest.raises(ParseError) as err:
        cluster.parse_identity("n9", "boot_id=\nmachine_id=abc\n")
    assert err.value.host == "n9"


def test_distinct_machines_pass_and_bus_ids_repeating_across_nodes_are_normal() -> None:
    bus = "00000000:18:00.0"
    v = cluster.judge_identities(
        [_ident("a", "b1", "m1", (("GPU-1", bus),)), _ident("b", "b2", "m2", (("GPU-2", bus),))]
    )
    assert v.failures == []
    assert v.warnings == []


def test_one_kernel_under_two_node_names_fails_naming_both() -> None:
    v = cluster.judge_identities([_ident("a", "b1", "m1"), _ident("b", "b2", "m2"), _ident("c", "b1", "m3")])
    assert [(f.kind, f.subject) for f in v.failures] == [("same machine", "a and c")]


def test_a_shared_machine_id_on_different_kernels_only_warns() -> None:
    v = cluster.judge_identities([_ident("a", "b1", "m1"), _ident("b", "b2", "m1")])
    assert v.failures == []
    assert [(w.kind, w.subject) for w in v.warnings] == [("same machine-id", "a and b")]


def test_one_gpu_on_two_nodes_or_twice_on_one_fails() -> None:
    v = cluster.judge_identities(
        [_ident("a", "b1", gpus=(("GPU-1", "x"),)), _ident("b", "b2", gpus=(("GPU-1", "y"), ("GPU-3", "y")))]
    )
    assert sorted((f.kind, f.subject) for f in v.failures) == [("same gpu", "GPU-1"), ("same gpu", "b y")]


# -- pairing ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 9, 64])
def test_ring_rounds_cover_every_ring_edge_once_with_no_node_twice_in_a_round(n: int) -> None:
    nodes = [f"n{i}" for i in range(n)]
    rounds = cluster.ring_rounds(nodes)
    edges = [frozenset(p) for r in rounds for p in r]
    want = {frozenset((nodes[i], nodes[(i + 1) % n])) for i in range(n)}
    assert set(edges) == want
    assert len(edges) == len(want)
    for r in rounds:
        busy = [x for p in r for x in p]
        assert len(busy) == len(set(busy))
    assert len(rounds) == (1 if n == 2 else 2 if n % 2 == 0 else 3)
    assert len(edges) == cluster.planned_runs(n)


def test_ring_rounds_of_one_node_and_duplicate_names() -> None:
    assert cluster.ring_rounds(["a"]) == []
    with pytest.raises(ValueError, match="distinct"):
        cluster.ring_rounds(["a", "a"])


def test_second_pass_tells_a_slow_node_from_a_slow_link() -> None:
    nodes = [f"n{i}" for i in range(8)]
    ring = [p for r in cluster.ring_rounds(nodes) for p in r]
    # n3 is slow with everyone: both its ring edges are slow; the n5-n6 link alone is slow too
    slow = [p for p in ring if "n3" in p or set(p) == {"n5", "n6"}]
    good = [p for p in ring if p not in slow]
    rounds = cluster.second_pass(nodes, slow, good)
    pairs = [p for r in rounds for p in r]
    assert sorted(s for s, _g in pairs) == ["n2", "n3", "n4", "n5", "n6"]
    for r in rounds:
        partners = [g for _s, g in r]
        assert len(partners) == len(set(partners))
        assert not set(partners) & {"n2", "n3", "n4", "n5", "n6"}
    results = {p: p[0] != "n3" for p in pairs}  # only n3 is slow with a good partner
    slow_nodes, links = cluster.blame(slow, results)
    assert slow_nodes == ["n3"]
    assert links == [("n5", "n6")]
    assert len(ring) + len(pairs) <= cluster.planned_runs(8, slow_pairs=len(slow))


def test_second_pass_without_any_good_node_has_nothing_to_pair() -> None:
    nodes = ["a", "b", "c", "d"]
    ring = [p for r in cluster.ring_rounds(nodes) for p in r]
    assert cluster.second_pass(nodes, ring, []) == []
    assert cluster.blame(ring, {}) == ([], ring)


def test_planned_runs_grow_linearly() -> None:
    assert [cluster.planned_runs(n) for n in (1, 2, 8, 64)] == [0, 1, 8, 64]
    assert cluster.planned_runs(64, slow_pairs=2) == 68
    assert all(cluster.planned_runs(n) < n * (n - 1) // 2 for n in range(4, 65))


# -- iperf3 -------------------------------------------------------------------------------------------------


def test_iperf3_captures_parse() -> None:
    fast = cluster.parse_iperf3_json(_text("iperf3-veth-4streams.json"))
    slow = cluster.parse_iperf3_json(_text("iperf3-veth-tbf200mbit.json"))
    assert (fast.streams, fast.reverse) == (4, False)
    assert fast.gbps == pytest.approx(2.4499, rel=1e-3)
    assert slow.gbps == pytest.approx(0.1905, rel=1e-3)
    with pytest.raises(ParseError) as err:
        cluster.parse_iperf3_json(_text("iperf3-refused.json"))
    assert err.value.said == "unable to connect to server: Connection refused"


@pytest.mark.parametrize(
    "text", ["", "[]", '{"start": {}}', "not json", '{"end": {"sum_received": {"bits_per_second": -1}}}']
)
def test_broken_iperf3_output_is_a_parse_error(text: str) -> None:
    with pytest.raises(ParseError):
        cluster.parse_iperf3_json(text)


def test_a_rate_limited_pair_fails_naming_the_pair_direction_and_basis() -> None:
    slow = cluster.parse_iperf3_json(_text("iperf3-veth-tbf200mbit.json"))
    f = cluster.judge_pair(("n1", "n2"), slow.gbps, 1.9, rate_gbps=1.0, basis="declared 1 Gb/s")
    assert f is not None
    assert (f.kind, f.subject) == ("pair slow", "n1↔n2")
    assert "n1→n2 0.19 Gb/s" in f.message
    assert "n2→n1" not in f.message
    assert "declared 1 Gb/s" in f.message
    assert cluster.judge_pair(("n1", "n2"), 0.8, 0.75, rate_gbps=1.0, basis="declared 1 Gb/s") is None


def test_every_pairing_of_a_small_ring_is_consistent() -> None:
    """Exhaustive over 6 nodes: whichever single node is slow, pass 2 names exactly it."""
    nodes = [f"n{i}" for i in range(6)]
    ring = [p for r in cluster.ring_rounds(nodes) for p in r]
    for bad in nodes:
        slow = [p for p in ring if bad in p]
        pairs = [p for r in cluster.second_pass(nodes, slow, [p for p in ring if p not in slow]) for p in r]
        assert cluster.blame(slow, {p: bad not in p for p in pairs}) == ([bad], [])
    for a, b in itertools.combinations(nodes, 2):
        if (a, b) in ring or (b, a) in ring:
            slow = [p for p in ring if set(p) == {a, b}]
            pairs = [
                p for r in cluster.second_pass(nodes, slow, [p for p in ring if p not in slow]) for p in r
            ]
            assert cluster.blame(slow, {p: True for p in pairs}) == ([], slow)


# -- the probes' command lines, on this machine --------------------------------------------------------------


def test_the_probes_run_here_and_parse() -> None:
    import subprocess

    from imagesmith.validate.nics import SYSFS_COMMAND

    ident = subprocess.run(
        ["bash", "-c", cluster.IDENTITY_COMMAND], capture_output=True, text=True, check=True
    )
    me = cluster.parse_identity("here", ident.stdout)
    assert me.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    sysfs = subprocess.run(["bash", "-c", SYSFS_COMMAND], capture_output=True, text=True, check=False)
    assert sysfs.returncode == 0
    ports = parse_sysfs_dump(sysfs.stdout)
    assert len(ports) == len(list(Path("/sys/class/infiniband").glob("*/ports/*")))


def test_nccl_2_28_on_a_host_without_rdma_devices_says_no_device() -> None:
    """A real capture (the lent H200): NCCL 2.28 follows "No device found" with an empty "Using [RO]" line."""
    log = parse_nccl_transport(_text("nccl-2.28-h200-no-rdma-device.log"))
    assert log.verbs == "no device"
    assert log.ib_devices == ()
    assert log.networks == ("Socket",)


# -- hostile captures: a result or a ParseError, never another exception (issue 12's rule) -------------------

_CAPTURES = [
    p.read_text(encoding="utf-8", errors="replace")
    for p in sorted(DATA.iterdir())
    if p.suffix in (".txt", ".log", ".json")
]


@settings(FUZZ)
@given(_mutated(_CAPTURES))
def test_every_cluster_parser_returns_or_raises_parse_error(text: str) -> None:
    for parse in (
        parse_sysfs_dump,
        parse_ibstat,
        lambda t: cluster.parse_identity("n", t),
        cluster.parse_iperf3_json,
    ):
        with contextlib.suppress(ParseError):
            parse(text)
    log = parse_nccl_transport(text)  # a log is read line by line: nothing in it is an error
    for fabric in ("ib", "roce", "ethernet"):
        judge_transport(log, fabric=fabric, expect_gdr=True)


# -- GPUDirect RDMA readiness -------------------------------------------------------------------------------


def test_gdr_ready_through_dmabuf_on_the_lent_h200() -> None:
    """That host as docs/evidence/issue32-h200/host.txt shows it: the open kernel module 580.159.04 on Linux
    6.18 (nvidia_peermem left out: that capture could not list modules, lsmod is not there)."""
    from imagesmith.validate.nics import judge_gdr, parse_gdr

    g = parse_gdr("open_module=1\ndriver=1\nkernel=6.18.44-fc-v973-gpu\n")
    assert (g.peermem, g.open_module, g.dmabuf) == (False, True, True)
    assert judge_gdr("h200", g) == []


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("kernel=6.8.0-45-generic\n", "no nvidia driver"),
        ("driver=1\nkernel=6.8.0-45-generic\n", "no gdr path"),  # proprietary module, no peermem
        ("driver=1\nopen_module=1\nkernel=5.10.0-28-amd64\n", "no gdr path"),  # open module, kernel too old
        ("driver=1\nopen_module=1\nkernel=junk\n", "no gdr path"),
    ],
)
def test_gdr_not_ready_is_named(text: str, kind: str) -> None:
    from imagesmith.validate.nics import judge_gdr, parse_gdr

    (f,) = judge_gdr("n1", parse_gdr(text))
    assert (f.kind, f.subject) == (kind, "n1")


def test_gdr_ready_through_peermem_on_any_kernel() -> None:
    from imagesmith.validate.nics import judge_gdr, parse_gdr

    assert judge_gdr("n1", parse_gdr("peermem=1\ndriver=1\nkernel=5.4.0-150-generic\n")) == []
