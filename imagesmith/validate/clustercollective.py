"""The cross-node collective of a cluster run (``imagesmith validate ssh://a ssh://b … --collective
auto|mpirun|srun|off``; ``--slurm``): nccl-tests' ``all_reduce_perf`` and ``all_gather_perf`` over every
node at once, launched by an existing engine (:mod:`imagesmith.validate.collective`: Open MPI's ``mpirun``
over the same ssh the other checks use, or ``srun`` inside the Slurm allocation), one rank per GPU, judged
against the declared fabric; a promise per collective and the ``collective`` field of the cluster report.

- ``auto`` (the default): when every node shows GPUs (the identity probe's ``nvidia-smi``) the collective
  runs, through ``srun`` inside an allocation (``--slurm``) and ``mpirun`` otherwise; no GPU on any node: not
  checked;
- ``mpirun`` / ``srun``: run it whatever the probe saw (a node that shows no GPU gets one rank);
- ``off``: not checked.

A launch that fails or outlives its bound (``--nccl-timeout``) is one error naming the node the launcher
blames (or that no longer answers over ssh), and no cluster report is written.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from imagesmith.errors import ConfigError, ImagesmithError
from imagesmith.validate import collective
from imagesmith.validate.nccltransport import parse_nccl_transport
from imagesmith.validate.nics import Finding

if TYPE_CHECKING:
    from imagesmith.validate.cluster import Identity
    from imagesmith.validate.clusterrun import ClusterOptions, Node, Promise, Ssh

MODES = ("auto", "mpirun", "srun", "off")
PROMISE = "cross-node NCCL"


def launcher_for(mode: str, slurm: bool) -> str | None:
    """The engine that launches the collective for *mode*; None for ``off``."""
    if mode == "off":
        return None
    if mode == "auto":
        return "srun" if slurm else "mpirun"
    return mode


def ssh_agent(nodes: Sequence[Node], options: ClusterOptions) -> str:
    """mpirun's launch agent: the ssh of the other checks (config, key, BatchMode, keep-alives), one user and
    port for every node (``--host`` carries neither)."""
    from imagesmith.validate.clusterrun import ALIVE_COUNT, ALIVE_INTERVAL_S, CONNECT_TIMEOUT_S

    users = sorted({n.user or "" for n in nodes})
    ports = sorted({n.port or 0 for n in nodes})
    if len(users) > 1 or len(ports) > 1:
        raise ConfigError(
            "--collective mpirun: the nodes have different ssh users or ports "
            f"({', '.join(n.name for n in nodes)}), and mpirun's --host names a host only",
            hint="give each node its User and Port in an ssh_config (Host n1 / User … / Port …) and pass "
            "--ssh-config FILE with plain ssh://HOST targets, or --collective off",
            field="--collective",
        )
    words = [
        "ssh",
        "-o",
        "BatchMode=yes",
        "-o",
        f"ConnectTimeout={CONNECT_TIMEOUT_S}",
        "-o",
        f"ServerAliveInterval={ALIVE_INTERVAL_S}",
        "-o",
        f"ServerAliveCountMax={ALIVE_COUNT}",
    ]
    for flag, path in (("-F", options.ssh_config), ("-i", options.ssh_identity)):
        if path:
            if any(c.isspace() for c in path):
                raise ConfigError(
                    f"--collective mpirun: {path!r} has a space, and Open MPI splits its launch agent at "
                    "spaces",
                    hint="move the file to a path without spaces",
                    field="--ssh-config" if flag == "-F" else "--ssh-identity",
                )
            words += [flag, path]
    if users[0]:
        words += ["-l", users[0]]
    if ports[0]:
        words += ["-p", str(ports[0])]
    return " ".join(words)


def _ranks_per_node(
    nodes: Sequence[Node], ids: Sequence[Identity], mode: str
) -> tuple[int, list[Finding], str]:
    """(ranks per node, warnings, why not run): 0 ranks when the collective is not run (*why* says why)."""
    counts = [len(i.gpus) for i in ids]
    if not any(counts):
        if mode == "auto":
            return (
                0,
                [],
                "no GPU on the nodes (nvidia-smi lists none); --collective mpirun|srun runs it anyway",
            )
        return (
            1,
            [
                Finding(
                    subject="cluster",
                    kind="no gpu seen",
                    message="nvidia-smi lists no GPU on any node: one rank per node",
                    fix="put nvidia-smi on the nodes' PATH over ssh, or check the driver there",
                )
            ],
            "",
        )
    if min(counts) != max(counts):
        few = [n.name for n, c in zip(nodes, counts, strict=True) if c < max(counts)]
        raise ConfigError(
            f"node {', '.join(few)}: {min(counts)} GPU(s) where the other nodes show {max(counts)}; the "
            "collective runs one rank per GPU, the same on every node",
            hint="check nvidia-smi on that node (a GPU fallen off the bus: dmesg | grep -i xid); leave it "
            "out of the node list, or --collective off",
            host=few[0],
            field="--collective",
        )
    return counts[0], [], ""


def _argv(
    launcher: str, test: str, nodes: Sequence[Node], per_node: int, options: ClusterOptions
) -> list[str]:
    if launcher == "srun":
        return collective.srun_argv(
            len(nodes),
            per_node,
            collective=test,
            max_bytes=options.collective_max_bytes,
            nodelist=[n.host for n in nodes],
        )
    return collective.mpirun_argv(
        [n.host for n in nodes],
        per_node,
        collective=test,
        max_bytes=options.collective_max_bytes,
        ssh_agent=ssh_agent(nodes, options),
        as_root=os.geteuid() == 0,
    )


def _launch(
    ssh: Ssh, nodes: Sequence[Node], argv: list[str], test: str, options: ClusterOptions
) -> collective.Launched:
    from imagesmith.validate.clusterrun import lost

    by_host = {n.host: n for n in nodes}
    step = f"the cross-node {test} ({argv[0]})"
    try:
        return collective.launch(argv, list(by_host), timeout=options.collective_timeout)
    except ImagesmithError as exc:
        blamed = by_host.get(exc.host or "")
        raise lost(ssh, [blamed] if blamed else list(nodes), step, exc.message) from None


def _run_json(test: str, argv: list[str], output: str, v: collective.CollectiveVerdict) -> dict[str, Any]:
    transport = parse_nccl_transport(output)
    top = v.result.rows[-1]
    return {
        "collective": test,
        "argv": argv,
        "ranks_seen": len(v.result.devices),
        "ranks": [{"rank": r, "host": h, "pci_bus_id": b} for r, h, b in collective.rank_hosts(output)],
        "sizes": v.sizes(),
        "largest": {"bytes": top.size, "busbw_gbps": top.busbw},
        "expected": None
        if v.expected is None
        else {"busbw_gbps": v.expected.busbw_gbps, "basis": v.expected.basis, "source": v.expected.source},
        "transport": {
            "nets": list(transport.nets_used),
            "gdr_channels": sum(c for (_net, gdr), c in transport.channels.items() if gdr),
            "channels": sum(transport.channels.values()),
            "verbs": transport.verbs,
        },
        "verdict": "failed" if v.failures else "passed",
    }


def collective_promises(
    ssh: Ssh,
    nodes: Sequence[Node],
    ids: Sequence[Identity],
    options: ClusterOptions,
    *,
    echo: Callable[[str], None],
) -> tuple[list[Promise], dict[str, Any] | None, dict[str, str]]:
    """(a promise per collective, the report's ``collective`` field or None, each run's output by file
    name)."""
    from imagesmith.validate.clusterrun import Promise, _promise

    launcher = launcher_for(options.collective, options.slurm)
    if launcher is None:
        return [Promise(PROMISE, "not checked", why="--collective off")], None, {}
    per_node, warnings, why = _ranks_per_node(nodes, ids, options.collective)
    if not per_node:
        return [Promise(PROMISE, "not checked", why=why)], None, {}
    if shutil.which(launcher) is None:
        raise ConfigError(
            f"--collective {options.collective}: {launcher} is not installed here",
            hint="install Open MPI (Debian/Ubuntu: apt-get install openmpi-bin) here and on the nodes"
            if launcher == "mpirun"
            else "run imagesmith on a node of the allocation, where Slurm's srun is",
            field="--collective",
        )
    promises: list[Promise] = []
    runs: list[dict[str, Any]] = []
    logs: dict[str, str] = {}
    for test in collective.COLLECTIVES:
        argv = _argv(launcher, test, nodes, per_node, options)
        echo(f"cluster: {test} across {len(nodes)} nodes × {per_node} rank(s) ({launcher})")
        launched = _launch(ssh, nodes, argv, test, options)
        output = launched.output
        v = collective.judge_collective(
            output,
            n_nodes=len(nodes),
            gpus_per_node=per_node,
            fabric=options.fabric,
            nic_gbps=options.link_gbps,
            nics_per_node=options.nic_ports or 1,
            min_ratio=options.min_ratio,
            expect_gdr=options.expect_gdr,
            source=f"{test} across the nodes",
            collective=test,
        )
        promises.append(_promise(f"{PROMISE} {test}", v.failures, warnings + v.warnings))
        runs.append(_run_json(test, argv, output, v) | {"seconds": round(launched.seconds, 2)})
        logs[f"{test}.log"] = output
    data = {
        "launcher": launcher,
        "nodes": len(nodes),
        "ranks_per_node": per_node,
        "ranks": len(nodes) * per_node,
        "runs": runs,
    }
    return promises, data, logs


def render_markdown(data: dict[str, Any]) -> list[str]:
    """The report's section: busbw per message size of each collective, the transport, the ranks."""
    runs = data["runs"]
    lines = [
        "",
        f"## Cross-node NCCL ({data['launcher']}: {data['nodes']} nodes × {data['ranks_per_node']} rank(s))",
        "",
    ]
    for r in runs:
        t = r["transport"]
        exp = r["expected"]
        lines.append(
            f"- {r['collective']}: {r['verdict']}; {r['ranks_seen']} rank(s) on "
            f"{len({x['host'] for x in r['ranks']})} machine(s); transport {', '.join(t['nets']) or 'none'} "
            f"({t['gdr_channels']}/{t['channels']} channels GDRDMA); "
            f"busbw {r['largest']['busbw_gbps']:g} GB/s at {r['largest']['bytes']} B"
            + (f" (expected {exp['busbw_gbps']:g} GB/s, {exp['basis']})" if exp else "")
        )
    plot = str(data.get("plot") or "")
    if plot == PLOT:
        lines += ["", f"![busbw per message size]({PLOT})"]
    elif plot:
        lines += ["", f"No {PLOT}: {plot.removeprefix('skipped: ')}"]
    sizes = sorted({s["bytes"] for r in runs for s in r["sizes"]})
    cells = {(r["collective"], s["bytes"]): s["busbw_gbps"] for r in runs for s in r["sizes"]}
    lines += ["", "| bytes | " + " | ".join(f"{r['collective']} busbw (GB/s)" for r in runs) + " |"]
    lines.append("|---" * (len(runs) + 1) + "|")
    for size in sizes:
        row = [
            f"{cells[(r['collective'], size)]:g}" if (r["collective"], size) in cells else "—" for r in runs
        ]
        lines.append(f"| {size} | " + " | ".join(row) + " |")
    return lines


#: the cluster report's figure: busbw per message size of each collective (beside cluster.json)
PLOT = "busbw.png"


def write_plot(data: dict[str, Any] | None, folder: Path) -> str:
    """``busbw.png`` in *folder*: one line per collective, busbw against message size (the approach of the
    one-node report, :func:`imagesmith.validate.report.write_plot`: matplotlib is the optional extra
    ``plot``); its file name, or why there is none."""
    from imagesmith.validate.report import write_plot as plot

    runs = data["runs"] if data else []
    series = [
        {"round": r["collective"], "busbw": {str(s["bytes"]): s["busbw_gbps"] for s in r["sizes"]}}
        for r in runs
    ]
    return plot(
        series,
        folder / PLOT,
        title=f"cross-node nccl-tests busbw ({data['nodes']} nodes × {data['ranks_per_node']} rank(s))"
        if data
        else "",
        empty="skipped: the cross-node collective did not run",
    )
