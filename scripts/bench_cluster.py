"""What the cross-node checks of `imagesmith validate ssh://… ssh://…` cost (issue 32), side by side: 2 and 8
nodes measured on this machine (network namespaces with an sshd each, tests/netnscluster.py; as root), 64
estimated from those figures with the assumptions printed beside them.

For each size the real CLI runs twice over the same nodes, in the switch namespace, `--no-node-suite` (the
per-node suite is the one-host suite, whose cost docs/benchmarks.md has): once without the bandwidth step
(preflight, identity, RDMA port inventory: one ssh round trip each, every node at once) and once with it
(iperf3 both directions per pair, `--iperf-seconds` each). Printed per size: wall time of each run, the pair
runs made, the ring's rounds, and what all pairs (N·(N-1)/2 runs, N-1 rounds of a round-robin) would take.

The cross-node collective (`--collective mpirun`): a third run per size, `--no-bandwidth`, where the nodes'
`all_reduce_perf`/`all_gather_perf` are the stand-in of tests/netnscluster.py (it replays recorded nccl-tests
output: no GPU here). What it measures is real: mpirun over ssh to every node, orted there, one rank per node,
the output gathered and judged; the benchmark's own time on GPUs is estimated beside it from the fabric's
busbw (assumptions printed).

The cross-node DDP step (``--ddp-only``: only it, beside the probes-only run): ``--ddp torchrun`` with the
nodes' Python a venv holding PyTorch's CPU build (tests/netnscluster.py ``torch_venv``), so the step is real
(torchrun's c10d rendezvous on every node over ssh, DDP over gloo through the veth pairs, judged) but on the
CPU: backend gloo, one rank per node, all "nodes" sharing this machine's cores.

usage: sudo .venv/bin/python scripts/bench_cluster.py [--sizes 2,8] [--iperf-seconds 2] [--ddp-only]
                                                      [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith.validate import cluster  # noqa: E402
from tests.netnscluster import (  # noqa: E402
    STANDIN_PATH,
    Cluster,
    nccl_tests_standin,
    netns_cluster,
    torch_venv,
)


def _run(c: Cluster, report: Path, *extra: str, failed_ok: bool = False) -> tuple[float, dict[str, object]]:
    """The CLI over *c*'s nodes; its wall time and cluster.json (a failed verdict, exit 7, too if
    *failed_ok*: the DDP step's efficiency on namespaces sharing 2 cores may fall below its floor)."""
    t0 = time.monotonic()
    r = c.validate(report, "--link-gbps", "0.2", *extra, timeout=1800)
    wall = time.monotonic() - t0
    if r.returncode != 0 and not (failed_ok and r.returncode == 7 and (report / "cluster.json").exists()):
        raise SystemExit(f"imagesmith validate exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    data: dict[str, object] = json.loads((report / "cluster.json").read_text())
    return wall, data


def plan_cost(n: int) -> float:
    """Seconds to plan pass 1 and a pass 2 with one slow node, in-process (the pure part)."""
    nodes = [f"n{i}" for i in range(n)]
    t0 = time.perf_counter()
    for _ in range(20):
        ring = [p for r in cluster.ring_rounds(nodes) for p in r]
        slow = [p for p in ring if "n1" in p]
        cluster.second_pass(nodes, slow, [p for p in ring if p not in slow])
    return (time.perf_counter() - t0) / 20


#: the benchmark's own time on GPUs, estimated: -b 8M -e 8G -f 2 is 11 sizes; per size 5 warm-up, 20 timed
#: out-of-place, 20 in-place and 1 checked iteration; a size S takes S × 2(n-1)/n / busbw (all_reduce) or
#: S × (n-1)/n / busbw (all_gather); the sizes below 8G add about as much as 8G itself (a geometric series)
GPU_BUSBW_GBPS = (
    455.0  # FABRIC_BUSBW: 8 × 400G NDR InfiniBand, all_reduce at 1 GiB (SkyPilot CoreWeave 2×8 H200)
)
GPUS_PER_NODE = 8


def gpu_benchmark_s(nodes: int) -> float:
    ranks = nodes * GPUS_PER_NODE
    size = 8 * 2**30
    per_op = size * 2 * (ranks - 1) / ranks / (GPU_BUSBW_GBPS * 1e9) + size * (ranks - 1) / ranks / (
        GPU_BUSBW_GBPS * 1e9
    )
    return 2 * 46 * per_op


def _floats(v: object) -> list[float]:
    assert isinstance(v, list)
    return [float(x) for x in v]


def _collective_rows(rows: list[dict[str, object]], measured: list[dict[str, object]]) -> None:
    """The collective's cost: measured launches for the sizes run here, a straight line through them past
    that, plus the estimated benchmark time on GPUs."""
    print()
    print(f"{'nodes':>5} {'+collective s':>13} {'launches s':>12} {'GPU benchmark s (est.)':>23}")
    pts = [(int(str(r["nodes"])), sum(_floats(r["launch_s"]))) for r in measured]
    (n0, t0), (n1, t1) = min(pts), max(pts)
    slope = (t1 - t0) / (n1 - n0) if n1 != n0 else 0.0
    for r in rows:
        n = int(str(r["nodes"]))
        if r.get("estimated"):
            r["launch_s"] = est = round(t1 + slope * (n - n1), 1)
            r["gpu_benchmark_s"] = round(gpu_benchmark_s(n), 1)
            print(f"{n:>5} {'—':>13} {est:>12} {r['gpu_benchmark_s']:>23}   (estimated)")
        else:
            r["gpu_benchmark_s"] = round(gpu_benchmark_s(n), 1)
            launches = "+".join(f"{x:g}" for x in _floats(r["launch_s"]))
            print(f"{n:>5} {r['collective_s']:>13} {launches:>12} {r['gpu_benchmark_s']:>23}")
    print(
        "assumptions for the collective: launches (mpirun over ssh, orted on every node, both collectives) "
        f"grow linearly as between {n0} and {n1} nodes here ({slope:.3f} s a node); GPU benchmark time: "
        f"{GPUS_PER_NODE} GPUs a node at {GPU_BUSBW_GBPS:g} GB/s busbw, -b 8M -e 8G -f 2, 46 iterations a "
        "size, NCCL's own start-up (seconds at 64 nodes) not included"
    )


def ddp_bench(sizes: list[int], out: str | None) -> None:
    """Per size: the probes-only run, then the same with the DDP step (one node, then all)."""
    venv = torch_venv()
    rows = []
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp, netns_cluster(n, Path(tmp)) as c:
            off = ("--no-bandwidth", "--collective", "off")
            base_wall, _base = _run(c, Path(tmp) / "probe", *off, "--ddp", "off")
            py = str(venv / "bin" / "python3")
            ddp_wall, data = _run(
                c, Path(tmp) / "ddp", *off, "--ddp", "torchrun", "--python", py, failed_ok=True
            )
        ddp = data["ddp"]
        assert isinstance(ddp, dict)
        one, every = ddp["runs"]
        rows.append(
            {
                "nodes": n,
                "probe_only_s": round(base_wall, 2),
                "ddp_s": round(ddp_wall - base_wall, 2),
                "one_node_run_s": one["seconds"],
                "all_nodes_run_s": every["seconds"],
                "step_ms_one_node": ddp["step_ms_one_node"],
                "step_ms_all": ddp["step_ms_all"],
                "efficiency": ddp["efficiency"],
                "threshold": ddp["threshold"]["efficiency"] if ddp["threshold"] else None,
                "verdict": ddp["verdict"],
            }
        )
    print(
        f"{'nodes':>5} {'probes s':>9} {'+ddp s':>7} {'1-node run s':>13} {'N-node run s':>13} "
        f"{'step ms 1':>10} {'step ms N':>10} {'efficiency':>10} {'threshold':>10}"
    )
    for r in rows:
        print(
            f"{r['nodes']:>5} {r['probe_only_s']:>9} {r['ddp_s']:>7} {r['one_node_run_s']:>13} "
            f"{r['all_nodes_run_s']:>13} {r['step_ms_one_node']:>10} {r['step_ms_all']:>10} "
            f"{r['efficiency']:>10} {r['threshold']!s:>10}"
        )
    if out:
        Path(out).write_text(json.dumps(rows, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2,8")
    ap.add_argument("--iperf-seconds", type=int, default=2)
    ap.add_argument("--ddp-only", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.ddp_only:
        ddp_bench([int(s) for s in args.sizes.split(",")], args.json)
        return
    rows = []
    for n in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp, netns_cluster(n, Path(tmp)) as c:
            base_wall, _base = _run(c, Path(tmp) / "probe", "--no-bandwidth")
            full_wall, full = _run(c, Path(tmp) / "full", "--iperf-seconds", str(args.iperf_seconds))
            standin = Path(tmp) / "standin-bin"
            standin.mkdir()
            nccl_tests_standin(standin)
            for node in c.nodes:
                c.start(node, sshd_extra=f"SetEnv {STANDIN_PATH.format(standin)}\n")
            coll_wall, coll = _run(c, Path(tmp) / "coll", "--no-bandwidth", "--collective", "mpirun")
        launches = [float(r["seconds"]) for r in coll["collective"]["runs"]]  # type: ignore[index]
        bw = full["bandwidth"]
        assert isinstance(bw, dict)
        rounds = len(cluster.ring_rounds([f"n{i}" for i in range(n)]))
        rows.append(
            {
                "nodes": n,
                "probe_only_s": round(base_wall, 2),
                "with_bandwidth_s": round(full_wall, 2),
                "pair_runs": bw["runs"],
                "ring_rounds": rounds,
                "per_round_s": round((full_wall - base_wall) / rounds, 2),
                "all_pairs_runs": n * (n - 1) // 2,
                "all_pairs_rounds": n - 1 if n % 2 == 0 else n,
                "plan_s": plan_cost(n),
                "collective_s": round(coll_wall - base_wall, 2),
                "launch_s": [round(x, 2) for x in launches],
            }
        )
    for n in (64, 1024):
        rows.append({"nodes": n, "plan_s": plan_cost(n), "estimated": True})
    print(
        f"{'nodes':>5} {'probes s':>9} {'+bandwidth s':>13} {'pair runs':>9} {'rounds':>6} {'s/round':>8}"
        f" {'all pairs: runs':>15} {'rounds':>6} {'plan µs':>8}"
    )
    measured = [r for r in rows if not r.get("estimated")]
    for r in measured:
        print(
            f"{r['nodes']:>5} {r['probe_only_s']:>9} {r['with_bandwidth_s']:>13} {r['pair_runs']:>9} "
            f"{r['ring_rounds']:>6} {r['per_round_s']:>8} {r['all_pairs_runs']:>15} "
            f"{r['all_pairs_rounds']:>6} {r['plan_s'] * 1e6:>8.0f}"
        )
    big = max(measured, key=lambda r: int(r["nodes"]))
    per_round = float(big["per_round_s"])
    probes = float(big["probe_only_s"])
    for r in rows:
        if r.get("estimated"):
            n = int(r["nodes"])
            # probes: every node at once, 32 ssh at a time -> ceil(n/32) waves of the measured probe time
            waves = -(-n // 32)
            r.update(
                probe_only_s=round(probes * waves, 1),
                ring_rounds=2,
                with_bandwidth_s=round(probes * waves + 2 * per_round, 1),
                pair_runs=n,
                all_pairs_runs=n * (n - 1) // 2,
                all_pairs_rounds=n - 1,
                all_pairs_s=round(probes * waves + (n - 1) * per_round, 1),
            )
            print(
                f"{n:>5} {r['probe_only_s']:>9} {r['with_bandwidth_s']:>13} {n:>9} {2:>6} {per_round:>8} "
                f"{r['all_pairs_runs']:>15} {n - 1:>6} {r['plan_s'] * 1e6:>8.0f}   (estimated: all pairs "
                f"{r['all_pairs_s']} s)"
            )
    print(
        f"assumptions for the estimates: a round costs what it cost for {big['nodes']} nodes here "
        f"({per_round} s: every pair of a round runs at once, so a round does not grow with N on a "
        "non-blocking fabric); probes run 32 nodes at a time; no slow pair (each slow pair adds at most 2 "
        "runs in pass 2, one round per suspect beyond the number of good nodes)"
    )
    _collective_rows(rows, measured)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
