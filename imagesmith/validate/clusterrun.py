"""``imagesmith validate ssh://a ssh://b ssh://c``: several nodes, over the ``ssh`` client only (no agent,
no scheduler of imagesmith's own): every node tried first, the per-node suite on all nodes at once (the
existing single-node path, one pytest per node), then the cross-node checks of
:mod:`imagesmith.validate.cluster`, :mod:`imagesmith.validate.nics` and
:mod:`imagesmith.validate.nccltransport`, and one cluster report.

Bounded everywhere: every ssh has ``ConnectTimeout`` and keep-alives (a node that dies mid-command is noticed
within ~15 s) and a wall-clock limit; a node that cannot be reached, lacks iperf3 or stops answering is one
error naming the node and the fix, and then no cluster report is written (``cluster.dsse.json`` when signed,
``cluster.md``, then ``cluster.json``, each renamed into place, only at the end of a complete run:
:func:`imagesmith.validate.clusterrecord.write_report`).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagesmith import inputs
from imagesmith.errors import ConfigError, ParseError, ValidationFailed
from imagesmith.validate import cluster, clusterrecord, fabrics
from imagesmith.validate.nccltransport import judge_transport, parse_nccl_transport
from imagesmith.validate.nics import (
    FABRICS,
    GDR_COMMAND,
    SYSFS_COMMAND,
    TOPO_COMMAND,
    Fabric,
    Finding,
    judge_affinity,
    judge_gdr,
    judge_nics,
    parse_gdr,
    parse_sysfs_dump,
    parse_topo,
    topo_skip_reason,
)
from imagesmith.validate.target import parse_target

#: seconds ssh waits for a node to answer, and keep-alive probes (a node gone mid-command: ~15 s)
CONNECT_TIMEOUT_S = 10
ALIVE_INTERVAL_S = 5
ALIVE_COUNT = 2
#: wall-clock limit of a plain probe command (identity, sysfs, tool check)
PROBE_TIMEOUT_S = 30
IPERF_PORT = 5201
CLUSTER_JSON = clusterrecord.CLUSTER_JSON
CLUSTER_MD = clusterrecord.CLUSTER_MD


@dataclass(frozen=True, kw_only=True)
class Node:
    name: str  # what reports and errors call it: the target without ssh:// (user@host:port)
    target: str  # ssh://…
    user: str | None
    host: str
    port: int | None
    address: str  # where the other nodes reach it for iperf3 (default: host)


def _node(text: str, address: str | None, where: str) -> Node:
    t = parse_target(text)
    if t.kind != "ssh":
        raise ConfigError(
            f"{where}: {text!r} is not an ssh:// target",
            hint="several nodes are validated over ssh: ssh://user@host[:port] for each",
        )
    rest = t.spec.removeprefix("ssh://")
    user, _, hostport = rest.rpartition("@")
    host, port = hostport, None
    if hostport.startswith("["):
        host, _, tail = hostport[1:].partition("]")
        port = int(tail[1:]) if tail.startswith(":") else None
    elif ":" in hostport:
        host, p = hostport.rsplit(":", 1)
        port = int(p)
    return Node(name=rest, target=t.spec, user=user or None, host=host, port=port, address=address or host)


def parse_nodes(targets: Sequence[str], nodes_file: str | None) -> list[Node]:
    """The nodes of a cluster run: TARGETs, then the lines of ``--nodes FILE`` (``ssh://… [ADDRESS]``; ``#``
    comments). At least two, all distinct."""
    nodes = [_node(t, None, "TARGET") for t in targets]
    if nodes_file is not None:
        hint = "one node per line: ssh://user@host[:port] [ADDRESS the other nodes reach it at]"
        text = inputs.read_user_text(nodes_file, "--nodes", hint=hint)
        for n, line in enumerate(text.splitlines(), 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) > 2:
                raise ConfigError(f"--nodes {nodes_file} line {n}: {len(words)} words", hint=hint)
            nodes.append(
                _node(words[0], words[1] if len(words) == 2 else None, f"--nodes {nodes_file} line {n}")
            )
    if len(nodes) < 2:
        raise ConfigError(
            f"a cluster run needs at least two nodes ({len(nodes)} given)",
            hint="name each node: imagesmith validate ssh://n1 ssh://n2 …, or --nodes FILE",
        )
    seen: dict[str, int] = {}
    for node in nodes:
        seen[node.name] = seen.get(node.name, 0) + 1
    twice = [k for k, v in seen.items() if v > 1]
    if twice:
        raise ConfigError(f"node {twice[0]} is named twice", hint="name each node once")
    return nodes


@dataclass(frozen=True, kw_only=True)
class ClusterOptions:
    fabric: Fabric = "ethernet"
    link_gbps: float | None = None  # declared per-node rate; None: each link's negotiated speed
    nic_ports: int | None = None
    expect_gdr: bool = False
    nccl_logs: tuple[str, ...] = ()
    bandwidth: bool = True
    iperf_seconds: int = 5
    iperf_streams: int = 4
    min_ratio: float = cluster.DEFAULT_MIN_RATIO
    report_dir: str = "reports/cluster"
    ssh_config: str | None = None
    ssh_identity: str | None = None
    #: ``--image IMAGE@DIGEST``: the image the run is evidence for (the report's ``image``; signed with it)
    image: str | None = None
    #: the cross-node collective (imagesmith.validate.clustercollective): auto | mpirun | srun | off
    collective: str = "auto"
    slurm: bool = False  # the nodes are the Slurm allocation's: auto launches with srun
    collective_timeout: float = 300.0
    collective_max_bytes: str = "8G"
    #: RDMA node pairs (imagesmith.validate.rdmapairs): ib_write_bw where the nodes have RDMA ports
    rdma_bandwidth: bool = True
    rdma_seconds: int | None = None  # ib_write_bw -D; None: imagesmith/data/rdma.toml's
    rdma_min_ratio: float | None = None  # None: imagesmith/data/rdma.toml's
    #: the cross-node DDP step (imagesmith.validate.clusterddp): auto | torchrun | srun | off
    ddp: str = "auto"
    python: str = "python3"  # the nodes' Python with torch (--python): torchrun is its torch.distributed.run


@dataclass(frozen=True)
class Ran:
    rc: int
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def said(self) -> str:
        """The last line of stderr that says something (a rule of ``=`` or ``-`` under a summary does not)."""
        lines = [ln.strip() for ln in self.stderr.splitlines() if any(c.isalnum() for c in ln)]
        return lines[-1] if lines else f"ssh exited with code {self.rc} and said nothing"


class Ssh:
    """The ``ssh`` command lines of one run (BatchMode: a refused key fails at once instead of prompting)."""

    def __init__(self, options: ClusterOptions) -> None:
        self.options = options

    def argv(self, node: Node, command: str, *, connect_timeout: int = CONNECT_TIMEOUT_S) -> list[str]:
        argv = [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ConnectTimeout={connect_timeout}",
            "-o",
            f"ServerAliveInterval={ALIVE_INTERVAL_S}",
            "-o",
            f"ServerAliveCountMax={ALIVE_COUNT}",
        ]
        if self.options.ssh_config:
            argv += ["-F", self.options.ssh_config]
        if self.options.ssh_identity:
            argv += ["-i", self.options.ssh_identity]
        if node.port:
            argv += ["-p", str(node.port)]
        argv += [f"{node.user}@{node.host}" if node.user else node.host, command]
        return argv

    def run(
        self, node: Node, command: str, *, timeout: float, connect_timeout: int = CONNECT_TIMEOUT_S
    ) -> Ran:
        try:
            proc = subprocess.run(
                self.argv(node, command, connect_timeout=connect_timeout),
                capture_output=True,
                text=True,
                errors="replace",
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return Ran(rc=124, stdout=out, stderr=f"no answer within {timeout:g} s", timed_out=True)
        except FileNotFoundError:
            raise ConfigError(
                "the ssh client is not installed here",
                hint="install the OpenSSH client (Debian/Ubuntu: apt-get install openssh-client)",
            ) from None
        return Ran(rc=proc.returncode, stdout=proc.stdout, stderr=proc.stderr, timed_out=False)


def stop_server(server: subprocess.Popen[str]) -> None:
    """End a server started over ssh (iperf3 -s, ib_write_bw): SIGTERM to the local ssh, SIGKILL when it
    has not gone within 10 s; always waited for, so no zombie and no open pipe is left."""
    if server.poll() is None:
        server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _unreachable_fix(ssh: Ssh, node: Node, said: str) -> str:
    from imagesmith.validate.context import SuiteOptions
    from imagesmith.validate.runner import _ssh_fix

    return _ssh_fix(
        said,
        SuiteOptions(
            target=node.target, ssh_config=ssh.options.ssh_config, ssh_identity_file=ssh.options.ssh_identity
        ),
    )


def _each(nodes: Sequence[Node], work: Callable[[Node], Any]) -> list[Any]:
    """*work* on every node at once (threads: each waits on its own ssh), results in node order."""
    with ThreadPoolExecutor(max_workers=min(32, len(nodes))) as pool:
        return list(pool.map(work, nodes))


def preflight(ssh: Ssh, nodes: Sequence[Node], *, need_iperf: bool) -> None:
    """Every node answers ``true`` (and has iperf3 when the bandwidth check runs), or one error naming every
    node that does not, with the fix for the first."""
    probe = "command -v iperf3 >/dev/null 2>&1 || echo imagesmith-no-iperf3" if need_iperf else "true"
    results = _each(nodes, lambda n: ssh.run(n, probe, timeout=CONNECT_TIMEOUT_S + 20))
    down = [(n, r) for n, r in zip(nodes, results, strict=True) if r.rc != 0]
    if down:
        first, r = down[0]
        names = ", ".join(n.name for n, _ in down)
        raise ConfigError(
            f"cannot reach node {names} over ssh: {r.said}",
            hint=_unreachable_fix(ssh, first, r.said),
            host=first.name,
            said=r.said,
        )
    lacking = [n for n, r in zip(nodes, results, strict=True) if "imagesmith-no-iperf3" in r.stdout]
    if lacking:
        raise ConfigError(
            f"node {', '.join(n.name for n in lacking)}: iperf3 is not installed",
            hint="install it there (Debian/Ubuntu: apt-get install iperf3; RHEL: dnf install "
            "iperf3), or leave "
            "the bandwidth check out (--no-bandwidth)",
            host=lacking[0].name,
        )


def lost(ssh: Ssh, nodes: Sequence[Node], step: str, said: str) -> ValidationFailed:
    """The error for a command that failed mid-run: the node (of *nodes*) that no longer answers, named."""
    gone = [n for n in nodes if ssh.run(n, "true", timeout=CONNECT_TIMEOUT_S + 5, connect_timeout=5).rc != 0]
    who = gone[0] if gone else None
    return ValidationFailed(
        f"node {who.name if who else ' or '.join(n.name for n in nodes)} "
        f"{'stopped answering' if who else 'failed'} during {step} ({said}); no cluster report was written",
        hint="check the node (power, network, out-of-memory kills; `journalctl -k` there) and run again; "
        "to go on without it, leave it out of the node list",
        host=who.name if who else nodes[0].name,
        said=said,
    )


def _probe_all(ssh: Ssh, nodes: Sequence[Node], command: str, step: str) -> list[str]:
    results = _each(nodes, lambda n: ssh.run(n, command, timeout=PROBE_TIMEOUT_S))
    for n, r in zip(nodes, results, strict=True):
        if r.rc != 0:
            raise lost(ssh, [n], step, r.said)
    return [r.stdout for r in results]


# ------------------------------------------------------------------------------------------------------------
# node-to-node bandwidth


@dataclass
class PairResult:
    pair: cluster.Pair
    forward_gbps: float
    reverse_gbps: float
    rate_gbps: float
    basis: str
    finding: Finding | None


def _speed_command(address: str) -> str:
    """The negotiated speed (Mb/s) of the interface a node reaches *address* through (``-1``: unknown)."""
    a = shlex.quote(address)
    return (
        f"dev=$(ip -o route get {a} 2>/dev/null | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'); "
        'cat "/sys/class/net/$dev/speed" 2>/dev/null || echo -1'
    )


def measure_pair(ssh: Ssh, a: Node, b: Node, options: ClusterOptions) -> PairResult:
    """iperf3 from *a* to *b* and back (``-R``), parallel streams, each on a one-off server on *b*."""
    t, streams = options.iperf_seconds, options.iperf_streams
    limit = 2 * t + CONNECT_TIMEOUT_S + 30
    server_cmd = (
        f"timeout {limit} sh -c 'iperf3 -s -1 -p {IPERF_PORT} >/dev/null 2>&1 & "
        f"iperf3 -s -1 -p {IPERF_PORT + 1} >/dev/null 2>&1 & wait'"
    )
    server = subprocess.Popen(
        ssh.argv(b, server_cmd),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        addr = shlex.quote(b.address)
        # the servers need a moment to listen: the client retries a refused connection a few times
        client_cmd = " ; ".join(
            "for i in 1 2 3 4 5 6; do "
            f"out=$(iperf3 -c {addr} -p {port} -P {streams} -t {t} -J {rev}); "
            "case \"$out\" in *'Connection refused'*) sleep 0.5;; *) break;; esac; "
            "done; "
            'printf "%s\\n=====\\n" "$out"'
            for port, rev in ((IPERF_PORT, ""), (IPERF_PORT + 1, "-R"))
        )
        ran = ssh.run(a, client_cmd, timeout=limit + 10)
        step = f"the bandwidth run {a.name}↔{b.name}"
        if ran.rc != 0:
            raise lost(ssh, [a, b], step, ran.said)
        parts = [p.strip() for p in ran.stdout.split("=====") if p.strip()]
        try:
            if len(parts) != 2:
                raise ParseError(f"{step}: {len(parts)} iperf3 result(s), 2 expected")
            fwd = cluster.parse_iperf3_json(parts[0], source=f"iperf3 {a.name}→{b.name}")
            rev = cluster.parse_iperf3_json(parts[1], source=f"iperf3 {b.name}→{a.name}")
        except ParseError as exc:
            raise lost(ssh, [b, a], step, exc.said or "iperf3 gave no result") from None
        if options.link_gbps is not None:
            rate, basis = options.link_gbps, f"declared {options.link_gbps:g} Gb/s"
        else:
            speeds = [
                ssh.run(n, _speed_command(peer.address), timeout=PROBE_TIMEOUT_S).stdout.strip()
                for n, peer in ((a, b), (b, a))
            ]
            mbps = [int(s) for s in speeds if inputs.is_digits(s) and int(s) > 0]
            if not mbps:
                raise ConfigError(
                    f"pair {a.name}↔{b.name}: neither node reports its link speed (/sys/class/net/*/speed)",
                    hint="give the rate the rental declares: --link-gbps N",
                    host=a.name,
                )
            rate, basis = min(mbps) / 1000, f"negotiated {min(mbps)} Mb/s"
        finding = cluster.judge_pair(
            (a.name, b.name), fwd.gbps, rev.gbps, rate_gbps=rate, basis=basis, min_ratio=options.min_ratio
        )
        return PairResult((a.name, b.name), fwd.gbps, rev.gbps, rate, basis, finding)
    finally:
        stop_server(server)


def bandwidth(ssh: Ssh, nodes: Sequence[Node], options: ClusterOptions) -> dict[str, Any]:
    """Pass 1 over the ring, pass 2 for the nodes of slow pairs; the findings name slow nodes and slow
    links."""
    by_name = {n.name: n for n in nodes}
    names = [n.name for n in nodes]

    def run_rounds(rounds: list[list[cluster.Pair]]) -> list[PairResult]:
        out: list[PairResult] = []
        for r in rounds:
            with ThreadPoolExecutor(max_workers=max(1, len(r))) as pool:
                out += list(pool.map(lambda p: measure_pair(ssh, by_name[p[0]], by_name[p[1]], options), r))
        return out

    pass1 = run_rounds(cluster.ring_rounds(names))
    slow = [p.pair for p in pass1 if p.finding is not None]
    good = [p.pair for p in pass1 if p.finding is None]
    pass2 = run_rounds(cluster.second_pass(names, slow, good)) if slow else []
    slow_nodes, slow_links = cluster.blame(slow, {p.pair: p.finding is None for p in pass2})
    findings: list[Finding] = []
    for node in slow_nodes:
        seen = [p for p in pass1 + pass2 if node in p.pair and p.finding is not None]
        findings.append(
            Finding(
                subject=node,
                kind="node slow",
                message=f"node {node} is slow with every partner: "
                + "; ".join(f.finding.message for f in seen if f.finding is not None),
                fix="the node's NIC, its driver or a rate limit on it: compare `ethtool`/`ibstat` there with "
                "the listing and show this to the provider",
            )
        )
    for link in slow_links:
        row = next(p for p in pass1 if p.pair == link)
        if row.finding is not None:
            findings.append(row.finding)
    return {
        "pairs": [
            {
                "pair": list(p.pair),
                "pass": 1 if i < len(pass1) else 2,
                "forward_gbps": round(p.forward_gbps, 3),
                "reverse_gbps": round(p.reverse_gbps, 3),
                "rate_gbps": p.rate_gbps,
                "basis": p.basis,
                "ok": p.finding is None,
            }
            for i, p in enumerate(pass1 + pass2)
        ],
        "runs": len(pass1) + len(pass2),
        "findings": findings,
    }


# ------------------------------------------------------------------------------------------------------------
# the run and its report


@dataclass
class Promise:
    name: str
    verdict: str  # passed | failed | not checked
    failures: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    why: str = ""


def _promise(name: str, failures: list[Finding], warnings: list[Finding]) -> Promise:
    return Promise(name, "failed" if failures else "passed", list(failures), list(warnings))


def _finding_json(f: Finding) -> dict[str, str]:
    return {"subject": f.subject, "kind": f.kind, "message": f.message, "fix": f.fix}


def _read_logs(options: ClusterOptions) -> list[tuple[str, str]]:
    """The --nccl-log files, read before any node is touched: a bad path is a flag error."""
    return [
        (path, inputs.read_user_text(path, "--nccl-log", hint="give an NCCL_DEBUG=INFO log file"))
        for path in options.nccl_logs
    ]


def _fresh_report_dir(options: ClusterOptions) -> Path:
    report_dir = Path(options.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    # an earlier run's verdict (or signature) never stands beside this run
    for stale in (CLUSTER_JSON, CLUSTER_MD, clusterrecord.CLUSTER_ATTESTATION, "busbw.png"):
        (report_dir / stale).unlink(missing_ok=True)
    for test in ("all_reduce_perf", "all_gather_perf"):
        (report_dir / "collective" / f"{test}.log").unlink(missing_ok=True)
    for old in (report_dir / "ddp").glob("ddp-*node.log"):
        old.unlink(missing_ok=True)
    return report_dir


def _port_json(p: Any) -> dict[str, Any]:
    return {
        "device": p.device,
        "port": p.port,
        "state": p.state,
        "phys_state": p.phys_state,
        "rate_gbps": p.rate_gbps,
        "link_layer": p.link_layer,
        "roce_v2_gids": list(p.roce_v2_gids),
    }


def _nic_promise(
    ssh: Ssh, nodes: Sequence[Node], options: ClusterOptions
) -> tuple[Promise, dict[str, list[dict[str, Any]]]]:
    failures: list[Finding] = []
    warnings: list[Finding] = []
    inventory: dict[str, list[dict[str, Any]]] = {}
    for n, out in zip(nodes, _probe_all(ssh, nodes, SYSFS_COMMAND, "the NIC inventory"), strict=True):
        try:
            ports = parse_sysfs_dump(out, source=f"{n.name} /sys/class/infiniband")
        except ParseError as exc:
            raise exc.replace(host=n.name) from None
        v = judge_nics(
            n.name, ports, fabric=options.fabric, rate_gbps=options.link_gbps, expect_ports=options.nic_ports
        )
        failures += v.failures
        warnings += v.warnings
        inventory[n.name] = [_port_json(p) for p in ports]
    return _promise(f"NICs ({options.fabric})", failures, warnings), inventory


def _gdr_promise(ssh: Ssh, nodes: Sequence[Node]) -> tuple[Promise, dict[str, dict[str, Any]]]:
    failures: list[Finding] = []
    gdr: dict[str, dict[str, Any]] = {}
    for n, out in zip(nodes, _probe_all(ssh, nodes, GDR_COMMAND, "the GPUDirect RDMA probe"), strict=True):
        g = parse_gdr(out)
        gdr[n.name] = {
            "peermem": g.peermem,
            "dmabuf": g.dmabuf,
            "open_module": g.open_module,
            "kernel": g.kernel,
        }
        failures += judge_gdr(n.name, g)
    return _promise("GPUDirect RDMA", failures, []), gdr


def _affinity_promise(ssh: Ssh, nodes: Sequence[Node]) -> Promise:
    """Each GPU's nearest NIC (``nvidia-smi topo -m``), judged where GPUDirect RDMA is declared. A node
    without nvidia-smi is not checked, with the reason, never passed."""
    failures: list[Finding] = []
    skipped: list[str] = []
    for n, out in zip(nodes, _probe_all(ssh, nodes, TOPO_COMMAND, "the NIC-GPU affinity probe"), strict=True):
        try:
            topo = parse_topo(out, source=f"{n.name} nvidia-smi topo -m")
        except ParseError as exc:
            raise exc.replace(host=n.name) from None
        if topo is None:
            skipped.append(f"{n.name}: {topo_skip_reason(out)}")
        else:
            failures += judge_affinity(n.name, topo)
    if failures or not skipped:
        return Promise(
            "NIC-GPU affinity", "failed" if failures else "passed", failures, why="; ".join(skipped)
        )
    return Promise("NIC-GPU affinity", "not checked", why="; ".join(skipped))


def _transport_promise(logs: list[tuple[str, str]], options: ClusterOptions) -> Promise:
    if not logs:
        return Promise("NCCL transport", "not checked", why="no --nccl-log given")
    failures: list[Finding] = []
    warnings: list[Finding] = []
    for _path, text in logs:
        tv = judge_transport(parse_nccl_transport(text), fabric=options.fabric, expect_gdr=options.expect_gdr)
        failures += tv.failures
        warnings += tv.warnings
    return _promise("NCCL transport", failures, warnings)


def _verdict(promises: list[Promise], n_nodes: int) -> tuple[str, str]:
    checked = [p for p in promises if p.verdict != "not checked"]
    failed = [p for p in checked if p.verdict != "passed"]
    if not failed:
        return "passed", f"{len(checked)} promise(s) kept on {n_nodes} nodes"
    return "failed", "; ".join(
        f"{p.name}: " + ("; ".join(f.message for f in p.failures) or p.why or p.verdict) for p in failed
    )


def _promise_json(p: Promise) -> dict[str, Any]:
    return {
        "name": p.name,
        "verdict": p.verdict,
        "why": p.why,
        "failures": [_finding_json(f) for f in p.failures],
        "warnings": [_finding_json(f) for f in p.warnings],
    }


def run_cluster(
    nodes: Sequence[Node],
    options: ClusterOptions,
    *,
    node_suite: Callable[[Node, Path], dict[str, Any]] | None = None,
    echo: Callable[[str], None] = print,
    sign: Callable[[Mapping[str, Any]], bytes] | None = None,
) -> dict[str, Any]:
    """Every check over *nodes*; the cluster report (dict) written to ``options.report_dir`` at the end,
    with its signed envelope when *sign* is given (:func:`imagesmith.validate.clusterrecord.write_report`)."""
    fabrics.refuse_unsupported(options.fabric)
    if options.fabric not in FABRICS:
        raise ConfigError(f"--fabric {options.fabric!r}: use one of {', '.join(FABRICS)}")
    logs = _read_logs(options)
    ssh = Ssh(options)
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.monotonic()
    preflight(ssh, nodes, need_iperf=options.bandwidth)
    echo(f"cluster: {len(nodes)} nodes answer over ssh")
    report_dir = _fresh_report_dir(options)
    node_reports: dict[str, dict[str, Any]] = {}
    if node_suite is not None:
        results = _each(nodes, lambda n: node_suite(n, report_dir / "nodes" / _safe(n.name)))
        node_reports = {n.name: r for n, r in zip(nodes, results, strict=True)}
    probed = _probe_all(ssh, nodes, cluster.IDENTITY_COMMAND, "the identity probe")
    ids = [cluster.parse_identity(n.name, out) for n, out in zip(nodes, probed, strict=True)]
    identity = cluster.judge_identities(ids)
    echo(f"cluster: identity of {len(ids)} nodes read")
    nic_promise, inventory = _nic_promise(ssh, nodes, options)
    promises = [_promise("distinct machines", identity.failures, identity.warnings), nic_promise]
    gdr: dict[str, dict[str, Any]] = {}
    if options.expect_gdr:
        gdr_promise, gdr = _gdr_promise(ssh, nodes)
        promises += [gdr_promise, _affinity_promise(ssh, nodes)]
    bw: dict[str, Any] = {"pairs": [], "runs": 0}
    if options.bandwidth:
        echo(f"cluster: node-to-node bandwidth, {cluster.planned_runs(len(nodes))} pair run(s) in pass 1")
        bw = bandwidth(ssh, nodes, options)
        promises.append(_promise("node-to-node bandwidth", bw.pop("findings"), []))
    else:
        promises.append(Promise("node-to-node bandwidth", "not checked", why="--no-bandwidth"))
    from imagesmith.validate import clustercollective, rdmapairs

    rdma_promise, rdma = rdmapairs.rdma_promise(ssh, nodes, inventory, options, echo=echo)
    promises.append(rdma_promise)

    coll_promises, coll, coll_logs = clustercollective.collective_promises(
        ssh, nodes, ids, options, echo=echo
    )
    promises += coll_promises
    from imagesmith.validate import clusterddp

    ddp_promise, ddp, ddp_logs = clusterddp.ddp_promise(ssh, nodes, ids, options, echo=echo)
    promises.append(ddp_promise)
    promises.append(_transport_promise(logs, options))
    promises += [
        Promise(f"node suite {name}", str(r.get("verdict", "failed")), why=str(r.get("verdict_reason", "")))
        for name, r in node_reports.items()
    ]
    verdict, reason = _verdict(promises, len(nodes))
    data: dict[str, Any] = {
        "schema": clusterrecord.SCHEMA,
        "kind": clusterrecord.KIND,
        "started": started,
        "seconds": round(time.monotonic() - t0, 1),
        "image": clusterrecord.image_json(options.image),
        "nodes": [
            {
                "name": n.name,
                "address": n.address,
                "boot_id": i.boot_id,
                "machine_id": i.machine_id,
                "gpus": [list(g) for g in i.gpus],
                "rdma_ports": inventory.get(n.name, []),
                "node_report": (f"nodes/{_safe(n.name)}/report.json" if n.name in node_reports else None),
                "gpudirect_rdma": gdr.get(n.name),
            }
            for n, i in zip(nodes, ids, strict=True)
        ],
        "declared": {
            "fabric": options.fabric,
            "link_gbps": options.link_gbps,
            "nic_ports": options.nic_ports,
            "expect_gdr": options.expect_gdr,
            "min_ratio": options.min_ratio,
        },
        "bandwidth": bw,
        "rdma_bandwidth": rdma,
        "collective": coll,
        "ddp": ddp,
        "promises": [_promise_json(p) for p in promises],
        "verdict": verdict,
        "verdict_reason": reason,
    }
    data["summary"] = clusterrecord.summary_json(data)
    _write_logs(report_dir / "collective", coll_logs)
    _write_logs(report_dir / "ddp", ddp_logs)
    if coll is not None:  # the figure, like the logs, before the report (cluster.json says the run completed)
        coll["plot"] = clustercollective.write_plot(coll, report_dir)
    clusterrecord.write_report(report_dir, data, render_markdown(data), sign=sign)
    return data


def _write_logs(folder: Path, logs: dict[str, str]) -> None:
    """The collective's (or the DDP step's) logs, before the report (``clusterrecord.write_report`` writes
    cluster.json last: the file that says the run completed)."""
    from imagesmith.validate.container import write_report_file

    if logs:
        folder.mkdir(exist_ok=True)
    for name, text in logs.items():
        write_report_file(folder, name, text.encode())


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)


def render_markdown(data: dict[str, Any]) -> str:
    lines = [f"# Cluster validation: {data['verdict'].upper()}", "", data["verdict_reason"], ""]
    if data.get("image"):
        lines += [f"Image: `{data['image']['reference']}`", ""]
    lines += ["## Promises", "", "| promise | verdict |", "|---|---|"]
    lines += [f"| {p['name']} | {p['verdict']} |" for p in data["promises"]]
    problems = [(p["name"], f) for p in data["promises"] for f in p["failures"]]
    if problems:
        lines += ["", "## Failures and fixes", ""]
        lines += [f"- **{name}**: {f['message']}. Fix: {f['fix']}" for name, f in problems]
    names = [n["name"] for n in data["nodes"]]
    pairs = data["bandwidth"]["pairs"]
    if pairs:
        cell: dict[tuple[str, str], str] = {}
        for p in pairs:
            a, b = p["pair"]
            cell[(a, b)] = f"{p['forward_gbps']:.2f}"
            cell[(b, a)] = f"{p['reverse_gbps']:.2f}"
        lines += ["", "## Node-to-node bandwidth (Gb/s received, row → column; last run of each pair)", ""]
        lines += ["| from \\ to | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        for a in names:
            lines.append(f"| {a} | " + " | ".join(cell.get((a, b), "—") for b in names) + " |")
    from imagesmith.validate.rdmapairs import render_markdown as rdma_md

    lines += rdma_md(data.get("rdma_bandwidth"))
    if data.get("collective"):
        from imagesmith.validate.clustercollective import render_markdown as collective_md

        lines += collective_md(data["collective"])
    if data.get("ddp"):
        from imagesmith.validate.clusterddp import render_markdown as ddp_md

        lines += ddp_md(data["ddp"])
    lines += ["", "## Nodes", "", "| node | boot_id | RDMA ports |", "|---|---|---|"]
    for n in data["nodes"]:
        ports = ", ".join(
            f"{p['device']}:{p['port']} {p['state']} {p['rate_gbps'] or '?'}G {p['link_layer']}"
            for p in n["rdma_ports"]
        )
        lines.append(f"| {n['name']} | {n['boot_id']} | {ports or 'none'} |")
    return "\n".join(lines) + "\n"
