"""The cross-node DDP step of a cluster run (``imagesmith validate ssh://a ssh://b … --ddp
auto|torchrun|srun|off``): a real DistributedDataParallel training step (probes/ddpnodes.py: a fixed MLP, a
few timed steps) on one node, then on every node at once, launched by torchrun's c10d rendezvous — one
``python -m torch.distributed.run`` per node, started over the run's own ssh (its config, key, BatchMode and
keep-alives), or by one ``srun`` inside the Slurm allocation — and judged as the promise ``cross-node DDP``
and the ``ddp`` field of the cluster report.

- ``auto`` (the default): when every node shows GPUs, torchrun over ssh (srun with ``--slurm``), backend
  nccl, one rank per GPU; no GPU on any node: not checked (as ``--collective``);
- ``torchrun`` / ``srun``: run it whatever the probe saw; nodes without a GPU run one rank each on the CPU
  with the gloo backend (what the network-namespace test runs here, with a real CPU torch);
- ``off``: not checked.

What is judged (:func:`judge_ddp`): every rank 0…W−1 of a world of W = nodes × ranks per node reported, none
with an error; the ranks on as many distinct machines (hostnames) as nodes; every replica's weights equal
after the steps (DDP's promise); and the scaling efficiency — samples/s on N nodes / (N × samples/s on one
node, measured in the same run) — against a floor derived from the one-node step time and the gradient
all-reduce at the busbw the declared fabric delivers (the table of :mod:`imagesmith.validate.collective`,
with its basis): ``floor = t1 / (t1 + 2(W−1)/W × gradient bytes / busbw)`` (no overlap of compute and
communication: DDP overlaps them, so a healthy cluster is above it), judged at ``--bandwidth-min-ratio`` ×
floor. No expected busbw (Ethernet without ``--link-gbps``): the figure is recorded and warned unjudged.

A launch that fails or outlives its bound (``--nccl-timeout``) is one error naming the node that no longer
answers over ssh (exit 7), and no cluster report is written.
"""

from __future__ import annotations

import base64
import functools
import math
import re
import shlex
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING, Any

from imagesmith import inputs
from imagesmith.errors import ConfigError
from imagesmith.validate.collective import FabricBusbw, expected_busbw
from imagesmith.validate.context import parse_probe_lines
from imagesmith.validate.nics import Finding

if TYPE_CHECKING:
    from imagesmith.validate.cluster import Identity
    from imagesmith.validate.clusterrun import ClusterOptions, Node, Promise, Ran, Ssh

MODES = ("auto", "torchrun", "srun", "off")
PROMISE = "cross-node DDP"
PROBE = "ddpnodes"
RDZV_PORT_COMMAND = "import socket; s = socket.socket(); s.bind(('', 0)); print(s.getsockname()[1])"


@dataclass(frozen=True, kw_only=True)
class Workload:
    """The step: LAYERS × Linear(WIDTH, WIDTH) + GELU on ROWS rows per rank, STEPS timed after WARMUP."""

    width: int
    layers: int
    rows: int
    steps: int
    warmup: int

    @property
    def grad_bytes(self) -> int:
        return 4 * self.layers * (self.width * self.width + self.width)

    def describe(self) -> str:
        return (
            f"{self.layers} × Linear({self.width}, {self.width}) + GELU, {self.rows} rows per rank, "
            f"{self.steps} steps after {self.warmup}, {self.grad_bytes / 1e6:.1f} MB of fp32 gradients"
        )


#: on GPUs: the per-node suite's scaling step (probes/scaling.py: 537 MB of gradients, ~22 ms on one H200)
GPU_WORKLOAD = Workload(width=4096, layers=8, rows=16384, steps=20, warmup=5)
#: on the CPU (gloo): 1 MB of gradients, a step of tens of ms on one core
CPU_WORKLOAD = Workload(width=256, layers=4, rows=512, steps=10, warmup=2)


def launcher_for(mode: str, slurm: bool) -> str | None:
    """The engine that starts torchrun for *mode*; None for ``off``."""
    if mode == "off":
        return None
    if mode == "auto":
        return "srun" if slurm else "torchrun"
    return mode


def torchrun_argv(
    python: str,
    script: str,
    *,
    nnodes: int,
    nproc: int,
    endpoint: str,
    rdzv_id: str,
    backend: str,
    workload: Workload,
    timeout_s: int,
    local_addr: str | None = None,
    is_host: bool | None = None,
) -> list[str]:
    """One node's torchrun (``python -m torch.distributed.run``: torchrun from the node's own torch), c10d
    rendezvous at *endpoint* (HOST:PORT on the first node), no restarts (a failed rank fails the step);
    *local_addr*: the address the other nodes reach this one at (the node list's), instead of what its
    hostname resolves to (nothing, or Debian's 127.0.1.1, on many hosts); *is_host*: whether this node's agent
    serves the rendezvous store (said outright: else torchrun resolves its own hostname to decide, and fails
    where it resolves to nothing). The rendezvous waits at most *timeout_s* for every node to join."""
    if nnodes < 1 or nproc < 1:
        raise ConfigError("the DDP step needs at least one node and one rank per node", field="--ddp")
    if backend not in ("nccl", "gloo"):
        raise ConfigError(f"DDP backend {backend!r}: nccl or gloo", field="--ddp")
    w = workload
    return [
        python,
        "-m",
        "torch.distributed.run",
        f"--nnodes={nnodes}",
        f"--nproc_per_node={nproc}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint={endpoint}",
        f"--rdzv_id={rdzv_id}",
        "--max_restarts=0",
        "--rdzv_conf="
        + ",".join(
            [*([f"is_host={int(is_host)}"] if is_host is not None else []), f"join_timeout={timeout_s}"]
        ),
        *([f"--local_addr={local_addr}"] if local_addr else []),
        script,
        backend,
        *(str(v) for v in (w.steps, w.warmup, w.width, w.layers, w.rows, timeout_s)),
    ]


def probe_text() -> str:
    return resources.files("imagesmith.validate.probes").joinpath(f"{PROBE}.py").read_text()


def node_command(argv: Sequence[str], *, probe: str, timeout_s: int, peer: str | None = None) -> str:
    """The shell command a node runs: the probe written to a temporary folder (removed on the way out), then
    *argv* (its script argument ``$D/ddpnodes.py``) bounded by ``timeout`` on the node itself. *peer* (gloo,
    several nodes): another node's address; gloo's sockets go out of the interface the route to it leaves
    by (``GLOO_SOCKET_IFNAME``: else gloo binds what the hostname resolves to, often a loopback address)."""
    data = base64.b64encode(probe.encode()).decode()
    words = " ".join('"$D/ddpnodes.py"' if a == "$D/ddpnodes.py" else shlex.quote(a) for a in argv)
    iface = ""
    if peer is not None:
        iface = (
            f"GLOO_SOCKET_IFNAME=$(ip -o route get {shlex.quote(peer)} | "
            "sed -n 's/.* dev \\([^ ]*\\).*/\\1/p') && export GLOO_SOCKET_IFNAME && "
        )
    return (
        "D=$(mktemp -d) && trap 'rm -rf \"$D\"' EXIT && "
        f'echo {data} | base64 -d > "$D/ddpnodes.py" && {iface}'
        f"OMP_NUM_THREADS=1 NCCL_DEBUG=WARN timeout -k 10 {timeout_s} {words}"
    )


def srun_argv(hosts: Sequence[str], command: str) -> list[str]:
    """Inside the allocation: one task per node on exactly *hosts*, each running *command* (its torchrun)."""
    if not hosts:
        raise ConfigError("the DDP step needs at least one node", field="--ddp")
    return [
        "srun",
        f"--nodes={len(hosts)}",
        f"--nodelist={','.join(hosts)}",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "sh",
        "-c",
        command,
    ]


# ------------------------------------------------------------------------------------------------------------
# the verdict


@dataclass
class DdpVerdict:
    failures: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)


def _finding(kind: str, message: str, fix: str) -> Finding:
    return Finding(subject="cluster", kind=kind, message=message, fix=fix)


def _number(x: Mapping[str, Any], key: str) -> float | None:
    value = x.get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        return None
    return float(value)


def _rank_findings(records: Sequence[Mapping[str, Any]], world: int, label: str) -> list[Finding]:
    """Every rank 0…world−1 of one world reported once, none with an error, each with a usable timing."""
    out = []
    errors = [
        f"rank {x.get('rank', '?')} on {x.get('host', '?')}: {x['error']}" for x in records if "error" in x
    ]
    if errors:
        out.append(
            _finding(
                "rank failed",
                f"the DDP step on {label}: " + "; ".join(errors),
                "read the DDP log beside the report: the rank's own error",
            )
        )
        return out
    said = sorted((x.get("rank"), x.get("world")) for x in records)
    if said != [(i, world) for i in range(world)]:
        shown = ", ".join(f"({a}, {b})" for a, b in said) or "none"
        out.append(
            _finding(
                "ranks missing",
                f"the DDP step on {label}: the ranks reported (rank, world) {shown}, not ranks 0–{world - 1} "
                f"of {world}",
                "torchrun did not join every node into one world: check that each node reaches the first "
                "node's rendezvous port, and that every node runs the same torch",
            )
        )
    bad = [x for x in records if _number(x, "elapsed_s") is None or _number(x, "rows") is None]
    bad += [x for x in records if _number(x, "steps") is None and x not in bad]
    if bad:
        out.append(
            _finding(
                "bad timing",
                f"the DDP step on {label}: rank {bad[0].get('rank', '?')} reported no positive elapsed_s, "
                "rows and steps",
                "the probe's output is not what it prints (a broken torch or a modified probe)",
            )
        )
    return out


def throughput(records: Sequence[Mapping[str, Any]]) -> float:
    """Samples per second of all ranks together: every rank's rows × steps over the slowest rank's time."""
    slowest = max(float(x["elapsed_s"]) for x in records)
    return sum(float(x["rows"]) * float(x["steps"]) for x in records) / slowest


def efficiency_floor(
    step_s_one: float, grad_bytes: float, world: int, expected: FabricBusbw
) -> tuple[float, float]:
    """(floor, seconds the all-reduce takes): the efficiency of N nodes if the gradients' ring all-reduce at
    the expected busbw were added to the one-node step with no overlap."""
    comm_s = 2 * (world - 1) / world * grad_bytes / (expected.busbw_gbps * 1e9)
    return step_s_one / (step_s_one + comm_s), comm_s


def judge_ddp(
    one: Sequence[Mapping[str, Any]],
    many: Sequence[Mapping[str, Any]],
    *,
    n_nodes: int,
    per_node: int,
    expected: FabricBusbw | None,
    min_ratio: float,
) -> DdpVerdict:
    """The runs on one node (*one*: per_node ranks) and on all (*many*: n_nodes × per_node ranks)."""
    v = DdpVerdict()
    world = n_nodes * per_node
    v.failures += _rank_findings(one, per_node, f"one node ({per_node} rank(s))")
    v.failures += _rank_findings(many, world, f"{n_nodes} nodes ({world} ranks)")
    if v.failures:
        return v
    hosts = sorted({str(x.get("host")) for x in many})
    if len(hosts) < n_nodes:
        v.failures.append(
            _finding(
                "ranks on fewer machines",
                f"the DDP step's {world} ranks ran on {len(hosts)} machine(s) ({', '.join(hosts)}), "
                f"{n_nodes} nodes given",
                "two node names lead to one machine (an alias, a container of the same host): check the "
                "node list against `hostname` on each",
            )
        )
    unequal = [x for x in (*one, *many) if x.get("replicas_equal") is not True]
    if unequal:
        v.failures.append(
            _finding(
                "replicas diverged",
                f"after the DDP step the replicas' weights differ (rank {unequal[0].get('rank')} on "
                f"{unequal[0].get('host')}): the gradients were not averaged over every rank",
                "a rank's all-reduce was lost or corrupted: run the cross-node collective (--collective) and "
                "the per-node suite on that node",
            )
        )
    thr_1, thr_n = throughput(one), throughput(many)
    eff = thr_n / (n_nodes * thr_1)
    step_1 = max(float(x["elapsed_s"]) / float(x["steps"]) for x in one)
    grad = max(float(x.get("grad_bytes") or 0) for x in many)
    v.figures = {
        "samples_per_s_one_node": round(thr_1, 2),
        "samples_per_s_all": round(thr_n, 2),
        "step_ms_one_node": round(1000 * step_1, 3),
        "step_ms_all": round(1000 * max(float(x["elapsed_s"]) / float(x["steps"]) for x in many), 3),
        "efficiency": round(eff, 4),
        "grad_bytes": int(grad),
        "threshold": None,
    }
    if expected is None:
        v.warnings.append(
            _finding(
                "no expectation",
                f"DDP scaling efficiency {eff:.3f} on {n_nodes} nodes not judged: no expected busbw for the "
                "declared fabric without a link rate",
                "declare the rate (--link-gbps)",
            )
        )
        return v
    floor, comm_s = efficiency_floor(step_1, grad, world, expected)
    v.figures["threshold"] = {
        "efficiency": round(min_ratio * floor, 4),
        "floor": round(floor, 4),
        "min_ratio": min_ratio,
        "allreduce_ms": round(1000 * comm_s, 3),
        "busbw_gbps": expected.busbw_gbps,
        "basis": f"{min_ratio:g} × t1 / (t1 + 2(W−1)/W × {grad / 1e6:.1f} MB / "
        f"{expected.busbw_gbps:g} GB/s): "
        f"the one-node step t1 = {1000 * step_1:.2f} ms plus the gradient all-reduce at the busbw a healthy "
        f"{expected.fabric} cluster delivers ({expected.basis}: {expected.source}), no overlap",
    }
    if eff < min_ratio * floor:
        v.failures.append(
            _finding(
                "scaling low",
                f"DDP scaling efficiency {eff:.3f} on {n_nodes} nodes ({thr_n:.1f} samples/s vs {n_nodes} × "
                f"{thr_1:.1f} on one node), below {min_ratio:g} × the floor {floor:.3f} "
                f"({v.figures['threshold']['basis']})",
                "the network between the nodes carries the gradients slower than the declared fabric: read "
                "the node-pair bandwidth and the cross-node collective's transport",
            )
        )
    return v


# ------------------------------------------------------------------------------------------------------------
# the run


def _per_node(ids: Sequence[Identity], mode: str) -> tuple[int, str, str]:
    """(ranks per node, backend, why not run): 0 ranks when the step is not run."""
    counts = [len(i.gpus) for i in ids]
    if not any(counts):
        if mode == "auto":
            return (
                0,
                "",
                "no GPU on the nodes (nvidia-smi lists none); --ddp torchrun|srun runs it on the CPU",
            )
        return 1, "gloo", ""
    if min(counts) != max(counts):
        few = [i.node for i in ids if len(i.gpus) < max(counts)]
        raise ConfigError(
            f"node {', '.join(few)}: {min(counts)} GPU(s) where the other nodes show {max(counts)}; the DDP "
            "step runs one rank per GPU, the same on every node",
            hint="check nvidia-smi on that node; leave it out of the node list, or --ddp off",
            host=few[0],
            field="--ddp",
        )
    return counts[0], "nccl", ""


def _check_torch(ssh: Ssh, nodes: Sequence[Node], python: str) -> None:
    from imagesmith.validate.clusterrun import PROBE_TIMEOUT_S, _each

    cmd = f"{shlex.quote(python)} -c 'import torch.distributed.run, torch; print(torch.__version__)'"
    results = _each(nodes, lambda n: ssh.run(n, cmd, timeout=PROBE_TIMEOUT_S))
    lacking = [(n, r) for n, r in zip(nodes, results, strict=True) if r.rc != 0]
    if lacking:
        n, r = lacking[0]
        raise ConfigError(
            f"node {', '.join(x.name for x, _ in lacking)}: {python} cannot import torch ({r.said})",
            hint="the DDP step runs the nodes' own torch: give the Python that has it (--python PATH), or "
            "leave the step out (--ddp off)",
            host=n.name,
            field="--python",
            said=r.said,
        )


def _launch_all(ssh: Ssh, nodes: Sequence[Node], commands: Sequence[str], bound: float) -> list[Ran | None]:
    """Each node's command, on every node at once over ssh; as soon as one fails (or the bound passes) the
    others' ssh are ended (None: stopped so; their torchrun ends with its own ``timeout`` on the node)."""
    import subprocess
    import time
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    from imagesmith.validate.clusterrun import Ran

    procs = [
        subprocess.Popen(
            ssh.argv(n, command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
        )
        for n, command in zip(nodes, commands, strict=True)
    ]
    deadline = time.monotonic() + bound
    with ThreadPoolExecutor(max_workers=len(procs)) as pool:
        futures = [pool.submit(p.communicate) for p in procs]
        pending = set(futures)
        while pending:
            done, pending = wait(
                pending, timeout=max(0.0, deadline - time.monotonic()), return_when=FIRST_COMPLETED
            )
            if not done or any(procs[futures.index(f)].returncode != 0 for f in done):
                break
        late = {i for i, p in enumerate(procs) if p.poll() is None}
        for i in late:
            procs[i].kill()
        outs = [f.result() for f in futures]
    timed_out = not any(p.returncode not in (0, None) for i, p in enumerate(procs) if i not in late)
    ran: list[Ran | None] = []
    for i, (p, (out, err)) in enumerate(zip(procs, outs, strict=True)):
        if i not in late:
            ran.append(Ran(p.returncode, out, err, False))
        elif timed_out:
            ran.append(Ran(124, out, f"no end within {bound:g} s", True))
        else:
            ran.append(None)
    return ran


def _run_once(
    ssh: Ssh,
    nodes: Sequence[Node],
    launcher: str,
    argvs: Sequence[list[str]],
    options: ClusterOptions,
    label: str,
    backend: str,
) -> tuple[list[dict[str, Any]], str]:
    """torchrun on every node of *nodes* at once (ssh: *argvs* one per node; srun: its one argv on each);
    (every rank's record, the log)."""
    import subprocess

    from imagesmith.validate.clusterrun import Ran, lost

    bound = int(options.collective_timeout)
    probe = probe_text()
    peers = [nodes[(i + 1) % len(nodes)].address for i in range(len(nodes))]
    commands = [
        node_command(
            argv, probe=probe, timeout_s=bound, peer=peer if backend == "gloo" and len(nodes) > 1 else None
        )
        for argv, peer in zip(argvs, peers, strict=False)
    ]
    step = f"the cross-node DDP step on {label} ({launcher})"
    ran: list[Ran | None]
    if launcher == "srun":
        try:
            proc = subprocess.run(
                srun_argv([n.host for n in nodes], commands[0]),
                capture_output=True,
                text=True,
                errors="replace",
                timeout=bound + 30,
                check=False,
                stdin=subprocess.DEVNULL,
            )
            ran = [Ran(proc.returncode, proc.stdout, proc.stderr, False)]
        except subprocess.TimeoutExpired:
            ran = [Ran(124, "", f"no end within {bound + 30} s", True)]
    else:
        ran = _launch_all(ssh, nodes, commands, bound + 30)
    names = [n.name for n in nodes] if launcher != "srun" else ["srun"]
    log = "".join(
        f"===== {name} "
        + (f"(exit {r.rc})\n{r.stdout}{r.stderr}" if r else "(stopped: another node failed)\n")
        for name, r in zip(names, ran, strict=False)
    )
    bad = [(n, r) for n, r in zip(nodes, ran, strict=False) if r is not None and r.rc != 0]
    if bad:
        errors = [
            f"rank {x.get('rank', '?')}: {x['error']}"
            for _n, r in bad
            for x in parse_probe_lines(r.stdout)
            if "error" in x
        ]
        said = errors[0] if errors else torchrun_said(bad[0][1])
        raise lost(ssh, [n for n, _r in bad] if launcher != "srun" else list(nodes), step, said)
    return [x for r in ran if r is not None for x in parse_probe_lines(r.stdout)], log


_ROOT_CAUSE = re.compile(
    r"Root Cause \(first observed failure\):\n(?P<block>.*?)(?:\n\s*=+\s*(?:\n|$)|\Z)", re.S
)
_FIELD = re.compile(r"^\s*(?P<key>host|rank|exitcode|traceback)\s*:\s*(?P<value>\S.*?)\s*$", re.M)
#: what a rank says of itself when it dies past the probe's own ``except`` (a C++ abort, Python's last line)
_OWN = re.compile(
    r"^\s*(?:terminate called .*|what\(\): .*|(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::.*)?)$"
)


def torchrun_said(ran: Ran) -> str:
    """What a failed node's torchrun said, in one line: its summary's root cause (rank, host, exit code or
    signal) and the last line the rank itself printed (a C++ abort's ``what()``, a Python error) — not the
    rule of ``=`` that ends the summary. Output of another shape: :attr:`Ran.said`."""
    text = ran.stderr
    m = _ROOT_CAUSE.search(text)
    head = text[: m.start()] if m else text
    own = [
        ln.strip()
        for ln in head.splitlines()
        if _OWN.match(ln) and "ChildFailedError" not in ln and "torch.distributed.elastic" not in ln
    ]
    parts: list[str] = []
    if m:
        f = {x.group("key"): x.group("value") for x in _FIELD.finditer(m.group("block"))}
        who = f"rank {f['rank'].split()[0]}" if "rank" in f else ""
        if "host" in f:
            who = f"{who} on {f['host']}".strip()
        code = re.sub(r"\s*\(pid: [^)]*\)$", "", f.get("exitcode", ""))
        # torchrun's own line when the rank left no error file ("To enable traceback see: …") says nothing
        trace = f.get("traceback", "")
        if trace.startswith("To enable traceback"):
            trace = ""
        what = "; ".join(x for x in (f"exit code {code}" if code else "", trace) if x)
        parts.append(": ".join(x for x in (who, what) if x) or "a rank failed")
    if own:
        parts.append(f"it said: {own[-1]}")
    said = "; ".join(parts) if parts else ran.said
    return said if len(said) <= 400 else said[:399] + "…"


def ddp_promise(
    ssh: Ssh,
    nodes: Sequence[Node],
    ids: Sequence[Identity],
    options: ClusterOptions,
    *,
    echo: Callable[[str], None],
) -> tuple[Promise, dict[str, Any] | None, dict[str, str]]:
    """(the promise, the report's ``ddp`` field or None, the logs by file name)."""
    from imagesmith.validate.clusterrun import Promise, _promise

    launcher = launcher_for(options.ddp, options.slurm)
    if launcher is None:
        return Promise(PROMISE, "not checked", why="--ddp off"), None, {}
    per_node, backend, why = _per_node(ids, options.ddp)
    if not per_node:
        return Promise(PROMISE, "not checked", why=why), None, {}
    import shutil

    if launcher == "srun" and shutil.which("srun") is None:
        raise ConfigError(
            "--ddp srun: srun is not installed here",
            hint="run imagesmith on a node of the allocation, where Slurm's srun is",
            field="--ddp",
        )
    _check_torch(ssh, nodes, options.python)
    workload = GPU_WORKLOAD if backend == "nccl" else CPU_WORKLOAD
    runs: list[dict[str, Any]] = []
    logs: dict[str, str] = {}
    records: list[list[dict[str, Any]]] = []
    for group in (nodes[:1], nodes):
        port = _free_port(ssh, group[0], options.python)
        argv = functools.partial(
            torchrun_argv,
            options.python,
            "$D/ddpnodes.py",
            nnodes=len(group),
            nproc=per_node,
            endpoint=f"{group[0].address}:{port}",
            rdzv_id=uuid.uuid4().hex[:12],
            backend=backend,
            workload=workload,
            timeout_s=min(120, int(options.collective_timeout)),
        )
        # over ssh each node's torchrun names its own address; srun starts one command line on every node
        argvs = (
            [argv()]
            if launcher == "srun"
            else [argv(local_addr=n.address, is_host=i == 0) for i, n in enumerate(group)]
        )
        label = f"{len(group)} node(s) × {per_node} rank(s)"
        echo(f"cluster: DDP step on {label} ({launcher}, backend {backend})")
        t0 = time.monotonic()
        got, log = _run_once(ssh, group, launcher, argvs, options, label, backend)
        seconds = time.monotonic() - t0
        records.append(got)
        logs[f"ddp-{len(group)}node.log"] = log
        runs.append(
            {
                "nodes": len(group),
                "ranks": len(group) * per_node,
                "seconds": round(seconds, 2),
                "argv": {
                    ("srun" if launcher == "srun" else n.name): a for n, a in zip(group, argvs, strict=False)
                },
                "per_rank": [_rank_json(x) for x in sorted(got, key=lambda x: int(x.get("rank", -1)))],
            }
        )
    expected = expected_busbw(options.fabric, options.link_gbps, options.nic_ports or 1)
    v = judge_ddp(
        records[0],
        records[1],
        n_nodes=len(nodes),
        per_node=per_node,
        expected=expected,
        min_ratio=options.min_ratio,
    )
    data = {
        "launcher": launcher,
        "backend": backend,
        "nodes": len(nodes),
        "ranks_per_node": per_node,
        "ranks": len(nodes) * per_node,
        "workload": workload.describe(),
        "runs": runs,
        **v.figures,
        "verdict": "failed" if v.failures else "passed",
    }
    return _promise(PROMISE, v.failures, v.warnings), data, logs


def _free_port(ssh: Ssh, node: Node, python: str) -> int:
    from imagesmith.validate.clusterrun import PROBE_TIMEOUT_S, lost

    r = ssh.run(node, f"{shlex.quote(python)} -c {shlex.quote(RDZV_PORT_COMMAND)}", timeout=PROBE_TIMEOUT_S)
    text = r.stdout.strip()
    if r.rc != 0 or not inputs.is_digits(text):
        raise lost(ssh, [node], "the DDP step's rendezvous port", r.said)
    return int(text)


def _rank_json(x: Mapping[str, Any]) -> dict[str, Any]:
    keys = ("rank", "world", "host", "local_rank", "device", "samples_per_s", "step_ms", "replicas_equal")
    return {k: x.get(k) for k in keys} | ({"error": x["error"]} if "error" in x else {})


def render_markdown(data: Mapping[str, Any]) -> list[str]:
    """The report's section: the two runs, the efficiency against its threshold, each rank's machine."""
    lines = [
        "",
        f"## Cross-node DDP ({data['launcher']}: {data['nodes']} nodes × {data['ranks_per_node']} rank(s), "
        f"backend {data['backend']})",
        "",
        f"Step: {data['workload']}.",
        "",
        "| run | ranks | machines | samples/s | step (ms, slowest rank) |",
        "|---|---|---|---|---|",
    ]
    for r, thr, ms in zip(
        data["runs"],
        (data.get("samples_per_s_one_node"), data.get("samples_per_s_all")),
        (data.get("step_ms_one_node"), data.get("step_ms_all")),
        strict=False,
    ):
        machines = len({x["host"] for x in r["per_rank"]})
        lines.append(f"| {r['nodes']} node(s) | {r['ranks']} | {machines} | {thr} | {ms} |")
    t = data.get("threshold")
    lines += [
        "",
        f"- scaling efficiency {data.get('efficiency')}: {data['verdict']}"
        + (f" (threshold {t['efficiency']:g} = {t['basis']})" if t else " (not judged: no expected busbw)"),
        "",
        "| rank | host | samples/s |",
        "|---|---|---|",
    ]
    lines += [f"| {x['rank']} | {x['host']} | {x['samples_per_s']} |" for x in data["runs"][-1]["per_rank"]]
    return lines
