"""The cross-node collective, launched through an existing engine (Open MPI's ``mpirun`` over ssh, or ``srun``
inside a Slurm allocation), and its verdict: busbw at the largest message size against what the declared
fabric delivers, the transport NCCL used (:mod:`imagesmith.validate.nccltransport`),
and every rank in one job.

- :func:`slurm_nodes`: the allocation's node names (``scontrol show hostnames $SLURM_JOB_NODELIST``);
- :func:`mpirun_argv` / :func:`srun_argv`: the command lines, nccl-tests' ``all_reduce_perf`` /
  ``all_gather_perf`` built with ``MPI=1`` (a build without MPI runs every node alone: nccl-tests #27, #121,
  #213, so the rank count is checked, not trusted);
- :func:`launch`: runs one, bounded; a rank that dies or a node that stops answering ends it with one error
  naming the node (Open MPI: ``… on node n2 exited …``; srun: ``srun: error: n2: task 3: …``);
- :func:`judge_collective`: the verdict on one run's output.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from imagesmith import settings
from imagesmith.errors import ConfigError, Fault, ParseError
from imagesmith.validate.nccltransport import judge_transport, parse_nccl_transport
from imagesmith.validate.nics import Fabric, Finding
from imagesmith.validate.parsers import NcclResult, parse_nccl_log

COLLECTIVES = ("all_reduce_perf", "all_gather_perf")

#: NCCL's INFO lines the transport verdict needs, and nothing else (INIT: the ranks; NET: the network)
NCCL_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


@dataclass(frozen=True, kw_only=True)
class FabricBusbw:
    """What nccl-tests' busbw at the largest size (≥ 1 GiB) is on a healthy cluster of this fabric."""

    fabric: Fabric
    nic_gbps: float  # one NIC's rate, Gb/s
    nics_per_node: int
    busbw_gbps: float  # GB/s
    basis: str  # "measured" (a published run) | "derived" (from the link rate; no run behind it)
    source: str


#: from the cluster-validation anchors (the project's notes on fleets' health checks), each with its source
FABRIC_BUSBW: tuple[FabricBusbw, ...] = (
    FabricBusbw(
        fabric="ib",
        nic_gbps=400,
        nics_per_node=8,
        busbw_gbps=455,
        basis="measured",
        source="SkyPilot docs, examples/performance/coreweave_infiniband: 2×8 H200 over 8×400G NDR, "
        "all_reduce_perf busbw about 455 GB/s at 1 GiB",
    ),
    FabricBusbw(
        fabric="roce",
        nic_gbps=400,
        nics_per_node=8,
        busbw_gbps=387,
        basis="measured",
        source="NVIDIA/aicr#1413: a RoCE GB300 run (NET/IB … /RoCE), peak busbw about 387 GB/s over the "
        "1K–8G sweep (the average, 134 GB/s, is the pitfall of judging the mean)",
    ),
    FabricBusbw(
        fabric="roce",
        nic_gbps=100,
        nics_per_node=1,
        busbw_gbps=10.0,
        basis="derived",
        source="derived, not measured: 100 Gb/s = 12.5 GB/s per direction, × 0.8 for RoCE v2 headers, "
        "NCCL's proxy and a ring that crosses the one NIC twice per step",
    ),
    FabricBusbw(
        fabric="ethernet",
        nic_gbps=25,
        nics_per_node=1,
        busbw_gbps=2.3,
        basis="derived",
        source="derived, not measured: 25 Gb/s = 3.1 GB/s, × 0.75 for NET/Socket (TCP, a bounce through host "
        "memory, NCCL_NSOCKS_PERTHREAD defaults)",
    ),
)

#: the fraction of the link's bytes a healthy run reaches where no row above fits (the rows' own ratios)
_DERIVED_EFFICIENCY: Mapping[str, float] = {"ib": 0.9, "roce": 0.8, "ethernet": 0.75}


def expected_busbw(fabric: Fabric, nic_gbps: float | None, nics_per_node: int) -> FabricBusbw | None:
    """The table's row for the declared fabric, else a figure derived from the link rate, else None."""
    for row in FABRIC_BUSBW:
        if row.fabric == fabric and row.nic_gbps == nic_gbps and row.nics_per_node == nics_per_node:
            return row
    if not nic_gbps:
        return None
    eff = _DERIVED_EFFICIENCY[fabric]
    return FabricBusbw(
        fabric=fabric,
        nic_gbps=nic_gbps,
        nics_per_node=nics_per_node,
        busbw_gbps=round(nic_gbps / 8 * nics_per_node * eff, 2),
        basis="derived",
        source=f"derived, not measured: {nics_per_node} × {nic_gbps:g} Gb/s / 8 × {eff} (the table's ratio "
        f"for {fabric})",
    )


#: all_gather_perf's busbw across nodes, per NIC and as a fraction of its rate. nccl-tests doc/PERFORMANCE.md:
#: all_gather's busbw is algbw × (n-1)/n, the factor that makes it "the speed of the hardware bottleneck",
#: independent of the rank count; across nodes that bottleneck is the node's NICs (each ring's inter-node hop
#: on its own NIC), so a healthy run's busbw is the node's NIC bandwidth × this fraction. all_reduce's table
#: above does not carry over: its busbw (factor 2(n-1)/n) exceeds the NICs' rate when NVLS/tree reduce inside
#: the node first (455 GB/s on 8 × 400G = 400 GB/s), all_gather's cannot.
ALLGATHER_EFFICIENCY: Mapping[str, tuple[float, str]] = {
    "ib": (
        0.92,
        'NVIDIA/nccl-tests#290 (an NCCL maintainer): on NDR 400 Gb/s "you should see 46-48GB/s per NIC" '
        "(NCCL_ALGO=RING across two nodes): 46 of 50 GB/s = 0.92",
    ),
    "roce": (
        0.92,
        "TrevorSquillario/gb10-training: 2 × GB10 over one 200 Gb/s RoCE link, all_gather_perf busbw 22.94 "
        "GB/s at 16 GiB of 25 GB/s = 0.92 (tests/data/validate/cluster/all_gather_perf-gb10x2.log)",
    ),
    "ethernet": (0.75, "derived, not measured: the NET/Socket ratio of FABRIC_BUSBW's derived row (TCP)"),
}


def expected_allgather_busbw(
    fabric: Fabric, nic_gbps: float | None, nics_per_node: int
) -> FabricBusbw | None:
    """all_gather_perf's busbw at the largest size on a healthy cluster of the declared fabric: the node's
    NICs (*nics_per_node* × *nic_gbps*) × :data:`ALLGATHER_EFFICIENCY`; None without a declared rate."""
    if not nic_gbps:
        return None
    eff, source = ALLGATHER_EFFICIENCY[fabric]
    return FabricBusbw(
        fabric=fabric,
        nic_gbps=nic_gbps,
        nics_per_node=nics_per_node,
        busbw_gbps=round(nic_gbps / 8 * nics_per_node * eff, 2),
        basis="derived" if fabric == "ethernet" else "measured",
        source=f"all_gather busbw = algbw × (n-1)/n (nccl-tests doc/PERFORMANCE.md) = the node's NICs: "
        f"{nics_per_node} × {nic_gbps:g} Gb/s / 8 × {eff} ({source})",
    )


def expected_for(
    collective: str, fabric: Fabric, nic_gbps: float | None, nics_per_node: int
) -> FabricBusbw | None:
    """The expected busbw of *collective* (``all_reduce_perf``, ``all_gather_perf``) on the declared
    fabric."""
    if collective == "all_gather_perf":
        return expected_allgather_busbw(fabric, nic_gbps, nics_per_node)
    return expected_busbw(fabric, nic_gbps, nics_per_node)


# ------------------------------------------------------------------------------------------------------------
# where and how it runs


def slurm_nodes(env: Mapping[str, str] | None = None, *, timeout: float = 20.0) -> list[str]:
    """The node names of the Slurm allocation this runs in, through ``scontrol show hostnames``."""
    nodelist = settings.get("SLURM_JOB_NODELIST", env=env) or settings.get("SLURM_NODELIST", env=env)
    if not nodelist:
        raise ConfigError(
            "--slurm: SLURM_JOB_NODELIST is not set: this is not inside a Slurm allocation",
            hint="run it inside one (salloc -N 2 … imagesmith validate --slurm, or in an sbatch script), or "
            "name the nodes (ssh://a ssh://b or --nodes FILE)",
            field="--slurm",
        )
    try:
        proc = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise ConfigError(
            "--slurm: scontrol is not installed here",
            hint="run imagesmith on a node of the allocation, where Slurm's client tools are (inside a "
            "container of the allocation: name local:// to validate only it)",
            field="--slurm",
        ) from None
    except subprocess.TimeoutExpired:
        raise ConfigError(
            f"--slurm: scontrol show hostnames gave no answer within {timeout:g} s",
            hint="is slurmctld reachable from here? (scontrol ping)",
            fault=Fault.UNREACHABLE,
            field="--slurm",
        ) from None
    names = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
    if proc.returncode != 0 or not names:
        said = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit code {proc.returncode}"
        raise ConfigError(
            f"--slurm: scontrol show hostnames {nodelist!r} failed: {said}",
            hint="check SLURM_JOB_NODELIST; scontrol show hostnames must print one node a line",
            field="--slurm",
            said=said,
        )
    return names


def _test_args(collective: str, min_bytes: str, max_bytes: str) -> list[str]:
    if collective not in COLLECTIVES:
        raise ConfigError(f"collective {collective!r}: use one of {', '.join(COLLECTIVES)}")
    # -g 1: one GPU per process, one process per GPU; -c 1: check the data once; -w 5 warmup iterations
    return [collective, "-b", min_bytes, "-e", max_bytes, "-f", "2", "-g", "1", "-c", "1", "-w", "5"]


def mpirun_argv(
    hosts: Sequence[str],
    gpus_per_node: int,
    *,
    collective: str = "all_reduce_perf",
    min_bytes: str = "8M",
    max_bytes: str = "8G",
    ssh_agent: str = "ssh -o BatchMode=yes -o ConnectTimeout=10",
    env: Mapping[str, str] = NCCL_ENV,
    as_root: bool = False,
) -> list[str]:
    """Open MPI (Debian's openmpi-bin) over ssh: one rank per GPU, ``--host a:8,b:8``. Only this host
    starts the nodes' daemons (no tree spawn: the nodes need no ssh to each other); *as_root*: Open MPI's
    ``--allow-run-as-root`` (it refuses root otherwise)."""
    if gpus_per_node < 1 or not hosts:
        raise ConfigError("the collective needs at least one node and one GPU per node")
    argv = [
        "mpirun",
        *(["--allow-run-as-root"] if as_root else []),
        "--host",
        ",".join(f"{h}:{gpus_per_node}" for h in hosts),
        "-np",
        str(len(hosts) * gpus_per_node),
        "--map-by",
        f"ppr:{gpus_per_node}:node",
        "--bind-to",
        "none",
        "--mca",
        "plm_rsh_agent",
        ssh_agent,
        "--mca",
        "plm_rsh_no_tree_spawn",
        "1",
        # a node gone silent (power, link) is noticed in ~20 s, not Open MPI's 300 + 9 × 20 s
        *("--mca", "oob_tcp_keepalive_time", "10", "--mca", "oob_tcp_keepalive_intvl", "5"),
        *("--mca", "oob_tcp_keepalive_probes", "2"),
        "--mca",
        "btl",
        "self,tcp",  # MPI only carries the NCCL id and the timings; NCCL itself picks the fabric
    ]
    for key, value in env.items():
        argv += ["-x", f"{key}={value}"]
    return argv + _test_args(collective, min_bytes, max_bytes)


def srun_argv(
    n_nodes: int,
    gpus_per_node: int,
    *,
    collective: str = "all_reduce_perf",
    min_bytes: str = "8M",
    max_bytes: str = "8G",
    mpi: str = "pmix",
    env: Mapping[str, str] = NCCL_ENV,
    nodelist: Sequence[str] = (),
) -> list[str]:
    """Inside the allocation: ``srun --mpi=pmix`` (pmi2 on older sites), one task per GPU; *nodelist*: on
    exactly those nodes of the allocation."""
    if gpus_per_node < 1 or n_nodes < 1:
        raise ConfigError("the collective needs at least one node and one GPU per node")
    exports = ",".join(["ALL"] + [f"{k}={v}" for k, v in env.items()])
    return [
        "srun",
        f"--mpi={mpi}",
        f"--nodes={n_nodes}",
        *([f"--nodelist={','.join(nodelist)}"] if nodelist else []),
        f"--ntasks-per-node={gpus_per_node}",
        f"--export={exports}",
        "--kill-on-bad-exit=1",  # one dead rank ends the step instead of leaving the others waiting
        *_test_args(collective, min_bytes, max_bytes),
    ]


# Open MPI: "mpirun noticed that process rank 3 with PID 0 on node n2 exited on signal 9 (Killed)."
# Open MPI: "ORTE was unable to reliably start one or more daemons … on node n2"; PRRTE: "on node n2"
_MPI_NODE = re.compile(r"\bon node ([A-Za-z0-9_.:-]+)", re.ASCII)
# srun: "srun: error: n2: task 3: Killed"; "srun: error: Node failure on n2"
_SRUN_NODE = re.compile(
    r"srun: error: (?:Node failure on )?([A-Za-z0-9_.-]+)(?::| |$)(?!.*Unable to)", re.ASCII
)
# ssh, as mpirun's launch agent: "ssh: connect to host n2 port 22: Connection refused"
_SSH_NODE = re.compile(r"ssh: connect to host ([A-Za-z0-9_.:-]+) port", re.ASCII)


def failed_node(text: str, hosts: Sequence[str]) -> str | None:
    """The node the launcher's own words blame, or the first named host found in them; None if neither."""
    for pattern in (_MPI_NODE, _SRUN_NODE, _SSH_NODE):
        for m in pattern.finditer(text):
            name = m.group(1).rstrip(".:")
            if name in hosts or not hosts:
                return name
    for h in hosts:
        if re.search(rf"(?<![A-Za-z0-9_.-]){re.escape(h)}(?![A-Za-z0-9_-])", text, re.ASCII):
            return h
    return None


@dataclass(frozen=True)
class Launched:
    argv: tuple[str, ...]
    output: str
    seconds: float


def launch(argv: Sequence[str], hosts: Sequence[str], *, timeout: float) -> Launched:
    """Run the launcher, bounded by *timeout*; its stdout and stderr as one text (ranks interleave them)."""
    import time

    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=timeout,
            check=False,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # the ranks mpirun started here end with it
        )
    except FileNotFoundError:
        raise ConfigError(
            f"{argv[0]} is not installed here",
            hint="install Open MPI (Debian/Ubuntu: apt-get install openmpi-bin) on this host and the "
            "nodes, or run inside a Slurm allocation (--slurm)",
        ) from None
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        node = failed_node(out, hosts)
        raise ConfigError(
            f"the cross-node collective did not end within {timeout:g} s"
            + (f"; node {node} last named in its output" if node else ""),
            hint="a node stopped answering or a port between nodes is blocked: run it again with "
            "NCCL_DEBUG=INFO and read which rank waits; check the firewall between the nodes",
            host=node,
            fault=Fault.UNREACHABLE,
        ) from None
    seconds = time.monotonic() - t0
    if proc.returncode != 0:
        node = failed_node(proc.stdout, hosts)
        last = [ln.strip() for ln in proc.stdout.splitlines() if ln.strip()]
        said = last[-1] if last else f"exit code {proc.returncode}"
        raise ConfigError(
            "the cross-node collective failed"
            + (f" on node {node}" if node else "")
            + f" (exit code {proc.returncode}): {said}",
            hint="read that node's dmesg and NCCL log; a rank killed by a signal is often out of memory or a "
            "dead GPU",
            host=node,
            said=said,
        )
    return Launched(tuple(argv), proc.stdout, seconds)


# ------------------------------------------------------------------------------------------------------------
# the verdict

# nccl-tests: "#  Rank  3 Group  0 Pid  1830 on     node-2 device  1 [0000:00:07] NVIDIA H200"
_RANK_HOST = re.compile(
    r"^#\s+Rank\s+([0-9]+)\s+Group\s+[0-9]+\s+Pid\s+[0-9]+\s+on\s+(\S+)\s+device\s+[0-9]+\s+\[([^\]]*)\]",
    re.ASCII | re.MULTILINE,
)


def rank_hosts(output: str) -> list[tuple[int, str, str]]:
    """(rank, host, PCI bus id) of every rank line of nccl-tests' "Using devices", by rank."""
    return sorted({(int(m.group(1)), m.group(2), m.group(3)) for m in _RANK_HOST.finditer(output)})


@dataclass
class CollectiveVerdict:
    result: NcclResult
    expected: FabricBusbw | None
    failures: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)

    def sizes(self) -> list[dict[str, float]]:
        """busbw (GB/s) per message size (bytes), for the report and its figure."""
        return [{"bytes": r.size, "busbw_gbps": r.busbw} for r in self.result.rows]


def judge_collective(
    output: str,
    *,
    n_nodes: int,
    gpus_per_node: int,
    fabric: Fabric,
    nic_gbps: float | None,
    nics_per_node: int,
    min_ratio: float,
    expect_gdr: bool = False,
    source: str = "the cross-node collective",
    judge_busbw: bool = True,
    collective: str = "all_reduce_perf",
) -> CollectiveVerdict:
    """One run's output: every rank in one job and on *n_nodes* machines, busbw at the largest size against
    *collective*'s expectation (:func:`expected_for`; not when not *judge_busbw*), the transport NCCL used."""
    try:
        result = parse_nccl_log(output, source=source)
    except ParseError as exc:
        raise exc.replace(
            hint=exc.hint or "the collective printed no nccl-tests table: read its output"
        ) from None
    expected = expected_for(collective, fabric, nic_gbps, nics_per_node)
    v = CollectiveVerdict(result=result, expected=expected)
    ranks = n_nodes * gpus_per_node
    seen = len(result.devices)
    if seen and seen != ranks:
        v.failures.append(
            Finding(
                subject="cluster",
                kind="ranks alone",
                message=f"the collective ran {seen} rank(s) in one job, {ranks} expected "
                f"({n_nodes} nodes × {gpus_per_node} GPUs)",
                fix="nccl-tests was built without MPI (each node ran alone: nccl-tests #27, #213): rebuild "
                "with make MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi after make clean",
            )
        )
    machines = sorted({host for _rank, host, _bus in rank_hosts(output)})
    if machines and len(machines) < n_nodes and seen == ranks:  # (else: "ranks alone" says it)
        v.failures.append(
            Finding(
                subject="cluster",
                kind="ranks on fewer machines",
                message=f"the collective's {seen} rank(s) ran on {len(machines)} machine(s) "
                f"({', '.join(machines)}), {n_nodes} nodes given",
                fix="two node names lead to one machine (an alias, a container of the same host): check the "
                "node list against `hostname` on each",
            )
        )
    for line in result.failures:
        v.failures.append(
            Finding(subject="cluster", kind="collective failed", message=line, fix="read the log")
        )
    if result.wrong_rows():
        v.failures.append(
            Finding(
                subject="cluster",
                kind="wrong results",
                message=f"{len(result.wrong_rows())} message size(s) gave wrong results (#wrong > 0)",
                fix="a GPU or NIC corrupts data: run the per-node suite and ib_write_bw node pairs",
            )
        )
    top = result.rows[-1]
    if judge_busbw and expected is not None and top.busbw < min_ratio * expected.busbw_gbps:
        v.failures.append(
            Finding(
                subject="cluster",
                kind="busbw low",
                message=f"{collective.removesuffix('_perf')} busbw {top.busbw:.2f} GB/s at {top.size} bytes, "
                f"below {min_ratio:g} × the {expected.busbw_gbps:g} GB/s a healthy {fabric} cluster of "
                f"{nics_per_node} × {expected.nic_gbps:g} Gb/s NIC(s) per node delivers ({expected.basis})",
                fix="read the transport below and the node-pair bandwidth matrix: a slow pair or a Socket "
                "fallback is the usual cause",
            )
        )
    elif judge_busbw and expected is None:
        v.warnings.append(
            Finding(
                subject="cluster",
                kind="no expectation",
                message=f"no expected busbw for {fabric} without a declared link rate",
                fix="declare the rate (--link-gbps)",
            )
        )
    tv = judge_transport(parse_nccl_transport(output), fabric=fabric, expect_gdr=expect_gdr)
    v.failures += tv.failures
    v.warnings += tv.warnings
    return v
