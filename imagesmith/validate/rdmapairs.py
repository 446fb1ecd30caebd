"""RDMA node-pair bandwidth of a cluster run: perftest's ``ib_write_bw`` between two nodes, per RDMA
device/port, over the run's ssh, with the pairing of the iperf3 step (:func:`imagesmith.validate.cluster.
ring_rounds`, a second pass re-pairing each node of a slow pair with a node known good,
:func:`~imagesmith.validate.cluster.blame`), judged against the port's negotiated rate.

- which nodes: those whose NIC inventory (:data:`imagesmith.validate.nics.SYSFS_COMMAND`) lists an ACTIVE
  port; no node with one (or only one such node): the promise is "not checked" with the reason, never passed;
- which ports: the ACTIVE ports of each end in (device, port) order, paired by position (rail i of one node
  with rail i of the other: how a rail-optimised fabric is cabled); a RoCE port runs with its last RoCE v2
  GID index (``-x``: the IPv4-mapped one on a standard GID table);
- one pair (a, b): the servers start on b (one ``ib_write_bw`` per port, each on its own TCP port for the
  out-of-band exchange, ``timeout``-bounded), then the clients on a write to them all at once; every node
  is a client once and a server once over the ring, so each node's send and receive side is measured;
- the verdict (:func:`judge_device`): BW average ≥ ``min_ratio`` × the lower negotiated rate of the two
  ports (``/sys/class/infiniband/<dev>/ports/<n>/rate``, the rate ``ibv_devinfo``/``ibstat`` print), the
  threshold and its basis from ``imagesmith/data/rdma.toml``; a client that fails (a QP that cannot connect)
  or outlives its bound (killed) fails the pair, naming the pair and the device;
- tools: a node with RDMA ports and no ``ib_write_bw`` is one error naming the node and the install line
  before anything runs; a node that stops answering is the run's error (no report,
  :func:`imagesmith.validate.clusterrun.lost`).

:func:`parse_ib_write_bw` reads perftest's report (the header and row formats of perftest_parameters.h:
``RESULT_FMT``/``RESULT_FMT_G``, ``REPORT_FMT``); tests/data/validate/cluster/ib_write_bw-*.txt are recorded
real outputs, each naming its source.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import subprocess
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING, Any

import tomllib

from imagesmith.errors import ConfigError, ParseError
from imagesmith.inputs import is_digits
from imagesmith.validate import cluster
from imagesmith.validate.clusterrun import stop_server
from imagesmith.validate.nics import Finding

if TYPE_CHECKING:
    from imagesmith.validate.clusterrun import ClusterOptions, Node, Promise, Ssh

PROMISE = "RDMA node-pair bandwidth"
DATA_FILE = "imagesmith/data/rdma.toml"
INSTALL_HINT = (
    "install perftest there (Debian/Ubuntu: apt-get install perftest; RHEL: dnf install perftest), or leave "
    "the RDMA check out (--no-rdma-bandwidth)"
)
_MISSING = "imagesmith-no-ib_write_bw"
_SEP = "===== imagesmith ib_write_bw"
#: seconds a client waits past its run for the exchange and the teardown before it is killed
SLACK_S = 30


@dataclass(frozen=True, kw_only=True)
class Settings:
    min_ratio: float
    message_bytes: int
    seconds: int
    base_port: int
    basis: str
    sources: tuple[str, ...]


@cache
def settings() -> Settings:
    """``imagesmith/data/rdma.toml``'s ``[ib_write_bw]`` and the sources of its threshold."""
    text = resources.files("imagesmith.data").joinpath("rdma.toml").read_text(encoding="utf-8")
    doc = tomllib.loads(text)
    t = doc["ib_write_bw"]
    return Settings(
        min_ratio=float(t["min_ratio"]),
        message_bytes=int(t["message_bytes"]),
        seconds=int(t["seconds"]),
        base_port=int(t["base_port"]),
        basis=str(t["basis"]),
        sources=tuple(str(r["source"]) for r in doc.get("reference", [])),
    )


# ------------------------------------------------------------------------------------------------------------
# perftest's report

#: " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]" (or [MB/sec])
_HEADER = re.compile(
    r"^\s*#bytes\s+#iterations\s+BW peak\[(Gb|MB)/sec\]\s+BW average\[(?:Gb|MB)/sec\]", re.ASCII
)
#: " 65536      5000             92.39              92.38              0.176196"
_ROW = re.compile(
    r"^\s*([0-9]+)\s+([0-9]+)\s+([0-9]+(?:\.[0-9]+)?)\s+([0-9]+(?:\.[0-9]+)?)\s+([0-9.]+)", re.ASCII
)
_FIELD = re.compile(r"^\s*(Number of qps|Link type)\s*:\s*(\S+)", re.ASCII)
_DEVICE = re.compile(r"\bDevice\s*:\s*(\S+)", re.ASCII)


@dataclass(frozen=True, kw_only=True)
class Row:
    bytes: int
    iterations: int
    peak_gbps: float
    average_gbps: float


@dataclass(frozen=True, kw_only=True)
class WriteBw:
    """One ``ib_write_bw`` report: its rows in Gb/s (1e9 bit/s) whatever unit it printed."""

    device: str
    link_type: str
    qps: int
    rows: tuple[Row, ...]

    @property
    def last(self) -> Row:
        """The row of the largest message size (the one size of a plain run; the top of an ``-a`` sweep)."""
        return max(self.rows, key=lambda r: r.bytes)


def _said(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    return lines[-1] if lines else "no output"


def parse_ib_write_bw(text: str, *, source: str = "ib_write_bw") -> WriteBw:
    """The report of one ``ib_write_bw`` client. No result table (a refused connection, a QP that did not
    come up) is a :class:`ParseError` carrying perftest's last words (``said``). MB/sec is perftest's 2^20
    bytes/s (``format_factor`` 0x100000), converted to Gb/s."""
    fields: dict[str, str] = {}
    rows: list[Row] = []
    unit: str | None = None
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m and m.group(1) not in fields:
            fields[m.group(1)] = m.group(2)
        dev = _DEVICE.search(line)  # "Dual-port : OFF  Device : mlx5_0": the second field of its line
        if dev and "Device" not in fields:
            fields["Device"] = dev.group(1)
        h = _HEADER.match(line)
        if h:
            unit = h.group(1)
            continue
        r = _ROW.match(line) if unit else None
        if r:
            factor = 1.0 if unit == "Gb" else 1048576 * 8 / 1e9
            rows.append(
                Row(
                    bytes=int(r.group(1)),
                    iterations=int(r.group(2)),
                    peak_gbps=round(float(r.group(3)) * factor, 3),
                    average_gbps=round(float(r.group(4)) * factor, 3),
                )
            )
    if not rows:
        said = _said(text)
        raise ParseError(
            f"{source}: no result row ({'no #bytes header' if unit is None else 'a header, no row'})",
            said=said,
            hint="run ib_write_bw by hand between the two nodes to see why",
        )
    qps = fields.get("Number of qps", "1")
    return WriteBw(
        device=fields.get("Device", "?"),
        link_type=fields.get("Link type", "?"),
        qps=int(qps) if is_digits(qps) else 1,
        rows=tuple(rows),
    )


# ------------------------------------------------------------------------------------------------------------
# what runs where


@dataclass(frozen=True, kw_only=True)
class RdmaPort:
    device: str
    port: int
    rate_gbps: float | None
    link_layer: str
    gid_index: int | None  # RoCE: the -x GID index; InfiniBand: None

    @property
    def name(self) -> str:
        return f"{self.device}:{self.port}"


def active_ports(inventory: Sequence[Mapping[str, Any]]) -> list[RdmaPort]:
    """The ACTIVE ports of one node's NIC inventory (clusterrun's ``rdma_ports`` entries), (device, port)
    order."""
    out = []
    for p in inventory:
        if p.get("state") != "ACTIVE" or str(p.get("phys_state") or "LinkUp").lower() != "linkup":
            continue
        gids = list(p.get("roce_v2_gids") or [])
        roce = str(p.get("link_layer")) == "Ethernet"
        out.append(
            RdmaPort(
                device=str(p["device"]),
                port=int(p["port"]),
                rate_gbps=p.get("rate_gbps"),
                link_layer=str(p.get("link_layer")),
                gid_index=gids[-1] if roce and gids else None,
            )
        )
    return sorted(out, key=lambda p: (p.device, p.port))


def _args(port: RdmaPort, tcp_port: int, s: Settings, seconds: int) -> str:
    words = ["ib_write_bw", "-d", port.device, "-i", str(port.port), "-p", str(tcp_port)]
    words += ["-s", str(s.message_bytes), "-D", str(seconds), "-F", "--report_gbits"]
    if port.gid_index is not None:
        words += ["-x", str(port.gid_index)]
    return " ".join(shlex.quote(w) for w in words)


def server_command(ports: Sequence[RdmaPort], s: Settings, seconds: int, limit: int) -> str:
    """One-shot servers on the pair's second node, one per port, each ended by ``timeout`` at *limit* s."""
    runs = [
        f"timeout {limit} {_args(p, s.base_port + i, s, seconds)} >/dev/null 2>&1 &"
        for i, p in enumerate(ports)
    ]
    return " ".join(runs) + " wait"


def client_command(ports: Sequence[RdmaPort], address: str, s: Settings, seconds: int, limit: int) -> str:
    """Every client at once on the pair's first node, each ``timeout``-bounded, retrying a connection the
    server does not take yet (perftest: ``Couldn't connect to HOST:PORT``); each report followed by a
    separator line with the client's exit code."""
    a = shlex.quote(address)
    runs = []
    for i, p in enumerate(ports):
        one = (
            f"for t in 1 2 3 4 5 6 7 8 9 10; do timeout {limit} {_args(p, s.base_port + i, s, seconds)} {a} "
            f'>"$d/{i}" 2>&1; rc=$?; grep -q "Couldn.t connect to" "$d/{i}" || break; sleep 0.5; done; '
            f'echo "$rc" >"$d/{i}.rc"'
        )
        runs.append(f"( {one} ) &")
    show = " ".join(f'cat "$d/{i}"; echo "{_SEP} {i} rc=$(cat "$d/{i}.rc")";' for i in range(len(ports)))
    return f'd=$(mktemp -d) || exit 1; {" ".join(runs)} wait; {show} rm -rf "$d"'


def split_client_output(text: str, n: int) -> list[tuple[str, int]]:
    """(report, exit code) of each of the *n* clients; a client with no separator: ("", -1)."""
    out: list[tuple[str, int]] = [("", -1)] * n
    chunk: list[str] = []
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(_SEP)} ([0-9]+) rc=(-?[0-9]*)$", line)
        if m:
            i = int(m.group(1))
            if i < n:
                out[i] = ("\n".join(chunk), int(m.group(2)) if m.group(2) else -1)
            chunk = []
        else:
            chunk.append(line)
    return out


# ------------------------------------------------------------------------------------------------------------
# the verdict


@dataclass
class DeviceResult:
    client: RdmaPort
    server: RdmaPort
    gbps: float | None
    rate_gbps: float
    basis: str
    finding: Finding | None
    link_type: str = "?"
    qps: int = 0

    def json(self, min_ratio: float) -> dict[str, Any]:
        return {
            "client": self.client.name,
            "server": self.server.name,
            "gbps": self.gbps,
            "rate_gbps": self.rate_gbps,
            "floor_gbps": round(min_ratio * self.rate_gbps, 3),
            "basis": self.basis,
            "link_type": self.link_type,
            "qps": self.qps,
            "ok": self.finding is None,
        }


def rate_of(a: RdmaPort, b: RdmaPort, declared: float | None) -> tuple[float, str] | None:
    """The rate a device pair is judged against: the lower negotiated rate of the two ports, else the
    declared --link-gbps, else None."""
    known = [(p.rate_gbps, p) for p in (a, b) if p.rate_gbps]
    if known:
        rate, p = min(known, key=lambda x: x[0] or 0.0)
        return float(rate or 0.0), f"negotiated {rate:g} Gb/s ({p.name}, sysfs rate)"
    if declared:
        return declared, f"declared {declared:g} Gb/s"
    return None


def judge_device(
    pair: cluster.Pair, client: RdmaPort, gbps: float, *, rate_gbps: float, basis: str, min_ratio: float
) -> Finding | None:
    """None when *gbps* reaches *min_ratio* × *rate_gbps*; else a finding naming the pair and the device."""
    if gbps >= min_ratio * rate_gbps:
        return None
    a, b = pair
    return Finding(
        subject=f"{a}→{b} {client.name}",
        kind="rdma pair slow",
        message=f"pair {a}→{b} {client.name}: ib_write_bw {gbps:.2f} Gb/s, below {min_ratio:.0%} of "
        f"{rate_gbps:g} Gb/s ({basis})",
        fix="a port measuring a fraction of its rate is a bad cable/transceiver, a port stuck at a lower "
        "width, PCIe or a NIC far from its memory: compare `ibstat`/`mlxlink` of both ends, run the pair "
        "again, then show it to the provider",
    )


def _failed(pair: cluster.Pair, client: RdmaPort, kind: str, message: str) -> Finding:
    a, b = pair
    return Finding(
        subject=f"{a}→{b} {client.name}",
        kind=kind,
        message=f"pair {a}→{b} {client.name}: {message}",
        fix="ib_write_bw between the two ends did not complete: check that the ports are on one fabric "
        "(same subnet/partition, or a routable RoCE GID), the firewall between the nodes (TCP port of the "
        "exchange), then `ib_write_bw -d DEV` by hand",
    )


@dataclass
class PairResult:
    pair: cluster.Pair
    devices: list[DeviceResult] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        return [d.finding for d in self.devices if d.finding is not None]

    @property
    def ok(self) -> bool:
        return not self.findings


def judge_reports(
    pair: cluster.Pair,
    ports: Sequence[tuple[RdmaPort, RdmaPort]],
    reports: Sequence[tuple[str, int]],
    *,
    declared_gbps: float | None,
    min_ratio: float,
    limit: int,
) -> PairResult:
    """The verdict per device pair from the clients' reports (text, exit code: 124/137 killed by timeout)."""
    out = PairResult(pair)
    for (cp, sp), (text, rc) in zip(ports, reports, strict=True):
        rated = rate_of(cp, sp, declared_gbps)
        if rated is None:
            raise ConfigError(
                f"pair {pair[0]}↔{pair[1]} {cp.name}: neither port reports its rate "
                "(/sys/class/infiniband/*/ports/*/rate)",
                hint="give the rate the rental declares: --link-gbps N",
                host=pair[0],
            )
        rate, basis = rated
        res = DeviceResult(client=cp, server=sp, gbps=None, rate_gbps=rate, basis=basis, finding=None)
        if rc in (124, 137):
            res.finding = _failed(
                pair, cp, "rdma pair hung", f"ib_write_bw did not end within {limit} s (killed)"
            )
        else:
            try:
                bw = parse_ib_write_bw(text, source=f"ib_write_bw {pair[0]}→{pair[1]} {cp.name}")
            except ParseError as exc:
                said = exc.said or "no output"
                res.finding = _failed(
                    pair, cp, "rdma pair failed", f"ib_write_bw gave no result (exit {rc}): {said}"
                )
            else:
                res.gbps, res.link_type, res.qps = bw.last.average_gbps, bw.link_type, bw.qps
                res.finding = judge_device(
                    pair, cp, bw.last.average_gbps, rate_gbps=rate, basis=basis, min_ratio=min_ratio
                )
        out.devices.append(res)
    return out


# ------------------------------------------------------------------------------------------------------------
# the run


def preflight(ssh: Ssh, nodes: Sequence[Node]) -> None:
    """Every node with RDMA ports has ``ib_write_bw``, or one error naming those that do not."""
    from imagesmith.validate.clusterrun import PROBE_TIMEOUT_S, _each, lost

    probe = f"command -v ib_write_bw >/dev/null 2>&1 || echo {_MISSING}"
    results = _each(nodes, lambda n: ssh.run(n, probe, timeout=PROBE_TIMEOUT_S))
    for n, r in zip(nodes, results, strict=True):
        if r.rc != 0:
            raise lost(ssh, [n], "the ib_write_bw check", r.said)
    lacking = [n for n, r in zip(nodes, results, strict=True) if _MISSING in r.stdout]
    if lacking:
        raise ConfigError(
            f"node {', '.join(n.name for n in lacking)}: RDMA ports and no ib_write_bw (perftest)",
            hint=INSTALL_HINT,
            host=lacking[0].name,
        )


def measure_pair(
    ssh: Ssh, a: Node, b: Node, ports: Sequence[tuple[RdmaPort, RdmaPort]], options: ClusterOptions
) -> PairResult:
    """ib_write_bw from *a* (clients) to *b* (servers) on every device pair at once."""
    from imagesmith.validate.clusterrun import CONNECT_TIMEOUT_S, lost

    s = settings()
    seconds = options.rdma_seconds or s.seconds
    limit = seconds + SLACK_S
    server = subprocess.Popen(
        ssh.argv(b, server_command([sp for _cp, sp in ports], s, seconds, limit + 10)),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        command = client_command([cp for cp, _sp in ports], b.address, s, seconds, limit)
        # the clients' own bound, their connection retries (10 × ~0.5 s), the ssh connect
        ran = ssh.run(a, command, timeout=limit + 10 + CONNECT_TIMEOUT_S + 20)
        step = f"the RDMA bandwidth run {a.name}→{b.name}"
        if ran.rc != 0 or ran.timed_out:
            raise lost(ssh, [a, b], step, ran.said)
        with contextlib.suppress(subprocess.TimeoutExpired):  # one-shot servers end once their client has
            server.wait(timeout=5)
        if server.returncode == 255:  # ssh to the servers' node failed: the clients had nothing to connect to
            said = (server.stderr.read() if server.stderr else "").strip().splitlines()
            raise lost(ssh, [b, a], step, said[-1] if said else "ssh exited with code 255")
        reports = split_client_output(ran.stdout, len(ports))
        return judge_reports(
            (a.name, b.name),
            ports,
            reports,
            declared_gbps=options.link_gbps,
            min_ratio=options.rdma_min_ratio if options.rdma_min_ratio is not None else s.min_ratio,
            limit=limit,
        )
    finally:
        stop_server(server)


def _device_pairs(a: Sequence[RdmaPort], b: Sequence[RdmaPort]) -> list[tuple[RdmaPort, RdmaPort]]:
    return list(zip(a, b, strict=False))


def run_pairs(
    ssh: Ssh,
    nodes: Sequence[Node],
    ports: Mapping[str, Sequence[RdmaPort]],
    options: ClusterOptions,
    *,
    measure: Callable[..., PairResult] = measure_pair,
) -> tuple[list[PairResult], list[PairResult], list[Finding]]:
    """(pass 1, pass 2, findings): the ring over *nodes*, then each node of a slow pair against a node known
    good; a node slow with every partner is named as the node, a pair slow while both ends pass elsewhere
    as the link."""
    by_name = {n.name: n for n in nodes}
    names = [n.name for n in nodes]

    def run_rounds(rounds: list[list[cluster.Pair]]) -> list[PairResult]:
        out: list[PairResult] = []
        for r in rounds:
            with ThreadPoolExecutor(max_workers=max(1, len(r))) as pool:
                out += list(
                    pool.map(
                        lambda p: measure(
                            ssh,
                            by_name[p[0]],
                            by_name[p[1]],
                            _device_pairs(ports[p[0]], ports[p[1]]),
                            options,
                        ),
                        r,
                    )
                )
        return out

    pass1 = run_rounds(cluster.ring_rounds(names))
    slow = [p.pair for p in pass1 if not p.ok]
    good = [p.pair for p in pass1 if p.ok]
    pass2 = run_rounds(cluster.second_pass(names, slow, good)) if slow else []
    slow_nodes, slow_links = cluster.blame(slow, {p.pair: p.ok for p in pass2})
    findings: list[Finding] = []
    for node in slow_nodes:
        seen = [f for p in pass1 + pass2 if node in p.pair for f in p.findings]
        findings.append(
            Finding(
                subject=node,
                kind="rdma node slow",
                message=f"node {node} is slow over RDMA with every partner: "
                + "; ".join(f.message for f in seen),
                fix="the node's HCA, its firmware, its PCIe link or its cable: compare `ibstat`/`mlxlink` "
                "there with the listing and show this to the provider",
            )
        )
    for link in slow_links:
        row = next(p for p in pass1 if p.pair == link)
        findings += row.findings
    return pass1, pass2, findings


def rdma_promise(
    ssh: Ssh,
    nodes: Sequence[Node],
    inventory: Mapping[str, Sequence[Mapping[str, Any]]],
    options: ClusterOptions,
    *,
    echo: Callable[[str], None],
) -> tuple[Promise, dict[str, Any] | None]:
    """The promise and the report's ``rdma_bandwidth`` field (None when nothing ran)."""
    from imagesmith.validate.clusterrun import Promise, _promise

    if not options.rdma_bandwidth:
        return Promise(PROMISE, "not checked", why="--no-rdma-bandwidth"), None
    ports = {n.name: active_ports(inventory.get(n.name, [])) for n in nodes}
    without = [n.name for n in nodes if not ports[n.name]]
    with_ports = [n for n in nodes if ports[n.name]]
    if len(with_ports) < 2:
        why = (
            "no RDMA device on any node (/sys/class/infiniband lists no ACTIVE port)"
            if not with_ports
            else f"only {with_ports[0].name} has an ACTIVE RDMA port: no pair to measure"
        )
        return Promise(PROMISE, "not checked", why=why), None
    preflight(ssh, with_ports)
    s = settings()
    min_ratio = options.rdma_min_ratio if options.rdma_min_ratio is not None else s.min_ratio
    echo(
        f"cluster: RDMA node-pair bandwidth (ib_write_bw), {cluster.planned_runs(len(with_ports))} pair "
        f"run(s) in pass 1 over {len(with_ports)} node(s)"
    )
    pass1, pass2, findings = run_pairs(ssh, with_ports, ports, options)
    why = f"not measured (no ACTIVE RDMA port): {', '.join(without)}" if without else ""
    promise = _promise(PROMISE, findings, [])
    promise.why = why
    data = {
        "tool": "ib_write_bw",
        "message_bytes": s.message_bytes,
        "seconds": options.rdma_seconds or s.seconds,
        "min_ratio": min_ratio,
        "basis": s.basis,
        "sources": list(s.sources),
        "not_measured": without,
        "pairs": [
            {
                "pair": list(p.pair),
                "pass": 1 if i < len(pass1) else 2,
                "ok": p.ok,
                "devices": [d.json(min_ratio) for d in p.devices],
            }
            for i, p in enumerate(pass1 + pass2)
        ],
        "runs": len(pass1) + len(pass2),
    }
    return promise, data


def render_markdown(data: Mapping[str, Any] | None) -> list[str]:
    """The report's section: one row per device pair run."""
    if not data:
        return []
    lines = [
        "",
        f"## RDMA node-pair bandwidth (ib_write_bw, {data['message_bytes']} B writes, {data['seconds']} s; "
        f"floor {data['min_ratio']:g} × the port's rate)",
        "",
        "| pass | client → server | device | Gb/s | rate (Gb/s) | floor | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for p in data["pairs"]:
        a, b = p["pair"]
        for d in p["devices"]:
            gbps = "—" if d["gbps"] is None else f"{d['gbps']:.2f}"
            lines.append(
                f"| {p['pass']} | {a} → {b} | {d['client']} → {d['server']} | {gbps} | {d['rate_gbps']:g} | "
                f"{d['floor_gbps']:g} | {'ok' if d['ok'] else 'FAIL'} |"
            )
    if data.get("not_measured"):
        lines += ["", f"Not measured (no ACTIVE RDMA port): {', '.join(data['not_measured'])}"]
    return lines
