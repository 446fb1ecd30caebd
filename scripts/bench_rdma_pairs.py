"""What the RDMA node-pair step of `imagesmith validate ssh://… ssh://…` costs (ib_write_bw per device pair,
the ring + re-pairing of imagesmith/validate/rdmapairs.py): 2 and 8 nodes measured on this machine (network
namespaces with an sshd each, tests/netnscluster.py; as root), 64 estimated with the assumptions printed.

Each node gets the stand-in /sys/class (one RoCE v2 port, 400 Gb/s) and the stand-in ib_write_bw of
tests/netnscluster.py: the TCP exchange between server and client is real, the report a replay of a recorded
real one, so the transfer itself takes no time here. For each size the real CLI runs twice over the same nodes
(`--fabric roce --no-bandwidth --collective off --no-node-suite`): with `--no-rdma-bandwidth` (preflight,
identity, NIC inventory) and without it; the difference is the step's launch, pairing and gathering overhead.
On real hosts each round adds ib_write_bw's `-D` seconds (imagesmith/data/rdma.toml: 5) on top.

usage: sudo .venv/bin/python scripts/bench_rdma_pairs.py [--sizes 2,8] [--json FILE]
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

from imagesmith.validate import cluster, rdmapairs  # noqa: E402
from tests.netnscluster import (  # noqa: E402
    STANDIN_PATH,
    Cluster,
    ib_write_bw_standin,
    netns_cluster,
    sys_class_tree,
)

ARGS = ("--fabric", "roce", "--no-bandwidth", "--collective", "off")


def _run(c: Cluster, report: Path, *extra: str) -> tuple[float, dict[str, object]]:
    t0 = time.monotonic()
    r = c.validate(report, *ARGS, *extra, timeout=1800)
    wall = time.monotonic() - t0
    if r.returncode != 0:
        raise SystemExit(f"imagesmith validate exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    data: dict[str, object] = json.loads((report / "cluster.json").read_text())
    return wall, data


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2,8")
    ap.add_argument("--json")
    args = ap.parse_args()
    seconds = rdmapairs.settings().seconds
    rows: list[dict[str, object]] = []
    for n in [int(s) for s in args.sizes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="bench-rdma-") as tmp:
            standin = ib_write_bw_standin(Path(tmp) / "standin")
            sys_class = sys_class_tree(Path(tmp) / "sysclass")
            (Path(tmp) / "netns").mkdir()
            with netns_cluster(n, Path(tmp) / "netns", subnet="10.233.10") as c:
                for node in c.nodes:
                    c.start(node, sshd_extra=f"SetEnv {STANDIN_PATH.format(standin)}\n", sys_class=sys_class)
                base, _ = _run(c, Path(tmp) / "base", "--no-rdma-bandwidth")
                full, data = _run(c, Path(tmp) / "rdma")
        rdma = data["rdma_bandwidth"]
        assert isinstance(rdma, dict)
        rounds = len(cluster.ring_rounds([f"n{i}" for i in range(n)]))
        rows.append(
            {
                "nodes": n,
                "probes_s": round(base, 2),
                "with_rdma_s": round(full, 2),
                "rdma_step_s": round(full - base, 2),
                "pair_runs": rdma["runs"],
                "rounds": rounds,
                "overhead_per_round_s": round((full - base) / rounds, 2),
                "on_hosts_s": round(full - base + rounds * seconds, 1),
            }
        )
    big = max(rows, key=lambda r: int(str(r["nodes"])))
    per_round = float(str(big["overhead_per_round_s"]))
    rows.append(
        {
            "nodes": 64,
            "estimated": True,
            "pair_runs": 64,
            "rounds": 2,
            "rdma_step_s": round(2 * per_round, 1),
            "on_hosts_s": round(2 * (per_round + seconds), 1),
        }
    )
    print(
        f"{'nodes':>5} {'probes s':>9} {'+rdma s':>8} {'step s':>7} {'runs':>5} {'rounds':>6} "
        f"{'on hosts s':>10}"
    )
    for r in rows:
        print(
            f"{r['nodes']:>5} {r.get('probes_s', '—')!s:>9} {r.get('with_rdma_s', '—')!s:>8} "
            f"{r['rdma_step_s']!s:>7} {r['pair_runs']!s:>5} {r['rounds']!s:>6} {r['on_hosts_s']!s:>10}"
        )
    print(
        f"assumptions: a round's overhead is what it was for {big['nodes']} nodes here ({per_round} s: every "
        f"pair of a round runs at once); on hosts each round adds ib_write_bw -D {seconds} s (all of a "
        "node's ports at once); no slow pair (each slow pair adds at most 2 runs in pass 2)"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
