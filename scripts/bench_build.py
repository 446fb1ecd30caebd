#!/usr/bin/env python3
"""Build/push benchmarks of imagesmith, measured side by side in one run (figures → docs/benchmarks.md).

    .venv/bin/python scripts/bench_build.py --extra-ca /etc/ssl/certs/ca-certificates.crt --out bench.json

What it does, against fresh throw-away registries (Debian's docker-registry on free ports, data in a temp
dir), with the smoke matrix's committed Dockerfile and imagesmith's own CLI:

1. cold build: BuildKit cache pruned and the cell's images removed, then
   `imagesmith build --matrix <tmp>/smoke.toml --push` to two fresh registries;
2. no-op rebuild: the same command again (wall time as a fraction of 1., layers rebuilt, bytes pushed);
3. push to 1 vs 2 registries: `build --force --push` of the (now cached) image to one fresh registry, then to
   two fresh registries (push phase and whole command); plain `docker push` to two registries as reference;
4. compressed bytes to pull (manifest: config + layers) against the sum of the pinned wheels' download sizes
   (`pip download --no-deps -r requirements.txt` with pip's default index);
5. a second cell sharing torch with the first: right after the cold build of cell 1 (smoke, runtime), the
   devel cell of matrices/smoke-devel.toml (same base, apt layer, venv and requirements.txt; its own layers:
   g++/make + the pip nvcc wheels) with `build --push` to the same two registries. For each of the two
   commands: wall time, bytes downloaded during it (host network counters, /proc/net/dev: received on the
   external interfaces, i.e. not lo/docker*/veth*; and transmitted by docker0, i.e. delivered into the build
   containers), bytes the engine pushed and bytes copied registry → registry; cell 2's figures as fractions of
   cell 1's.
   `--second-cell-only` stops after this (no no-op / push 1 vs 2 / pull-bytes steps).

Needs scripts/setup.sh to have run (dockerd, the base image behind the registry-mirror map, the source cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKER = "/usr/bin/docker"
BASE_MIRROR = "docker.io=127.0.0.1:5000/hub"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    def __init__(self, root: Path) -> None:
        self.addr = f"127.0.0.1:{free_port()}"
        root.mkdir(parents=True)
        cfg = root / "config.yml"
        cfg.write_text(
            "version: 0.1\nlog:\n  level: error\nstorage:\n"
            f"  filesystem:\n    rootdirectory: {root / 'data'}\n  delete:\n    enabled: true\n"
            f"http:\n  addr: {self.addr}\n  secret: bench\n"
        )
        log = (root / "log").open("ab")
        self.proc = subprocess.Popen(["/usr/bin/docker-registry", "serve", str(cfg)], stdout=log, stderr=log)
        time.sleep(1.0)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)


def net_bytes() -> dict[str, int]:
    """Host network counters: bytes received on external interfaces, bytes sent into containers (docker0)."""
    ext = bridge = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, data = line.split(":", 1)
        name = name.strip()
        fields = [int(x) for x in data.split()]
        if name == "docker0":
            bridge += fields[8]  # transmit bytes: into the containers on the default bridge
        elif name != "lo" and not name.startswith(("docker", "veth", "br-", "ifb")):
            ext += fields[0]  # receive bytes
    return {"external_rx": ext, "docker0_tx": bridge}


def matrix_dir(tmp: Path, name: str, registries: list[Registry], matrix: str = "smoke") -> Path:
    """A copy of matrices/<matrix>.toml whose registries are *registries* (same cell, same Dockerfile)."""
    d = tmp / name
    d.mkdir(exist_ok=True)
    text = (REPO / "matrices" / f"{matrix}.toml").read_text()
    names = [f"bench{i}" for i in range(len(registries))]
    lines = []
    for line in text.splitlines():
        if line.startswith("registries ="):
            line = "registries = [" + ", ".join(f'"{n}"' for n in names) + "]"
        lines.append(line)
    (d / f"{matrix}.toml").write_text("\n".join(lines) + "\n")
    reg = ["schema = 1"]
    for n, r in zip(names, registries, strict=True):
        reg += [
            f"[registries.{n}]",
            f'host = "{r.addr}"',
            'namespace = "bench"',
            'repository = "torch"',
            "insecure = true",
        ]
    (d / "registries.toml").write_text("\n".join(reg) + "\n")
    return d / f"{matrix}.toml"


def imagesmith(
    args: list[str], summary: Path, extra_ca: str | None, net: dict | None = None
) -> tuple[float, dict]:
    cmd = [str(REPO / ".venv/bin/imagesmith"), "build", *args, "--summary", str(summary)]
    if extra_ca:
        cmd += ["--extra-ca", extra_ca]
    env = dict(os.environ, IMAGESMITH_REGISTRY_MIRRORS=BASE_MIRROR)
    before = net_bytes()
    start = time.monotonic()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    after = net_bytes()
    if net is not None:
        net.update({k: after[k] - before[k] for k in after})
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    return wall, json.loads(summary.read_text())["cells"][0]


def sh(*cmd: str) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extra-ca", default=None)
    ap.add_argument("--out", type=Path, default=Path("bench.json"))
    ap.add_argument(
        "--skip-cold", action="store_true", help="do not prune the build cache (warm 'cold' build)"
    )
    ap.add_argument(
        "--second-cell-only", action="store_true", help="only the cold cell 1 + cell 2 (shared torch) step"
    )
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="imagesmith-bench-"))
    regs: list[Registry] = []
    results: dict[str, object] = {"host": {"cpus": os.cpu_count()}}
    try:
        cold_regs = [Registry(tmp / "r1"), Registry(tmp / "r2")]
        regs += cold_regs
        m2 = matrix_dir(tmp, "two", cold_regs)
        cell_id = json.loads(sh(str(REPO / ".venv/bin/imagesmith"), "plan", "--matrix", "smoke", "--json"))[
            "cells"
        ][0]["id"]
        devel_id = json.loads(
            sh(str(REPO / ".venv/bin/imagesmith"), "plan", "--matrix", "smoke-devel", "--json")
        )["cells"][0]["id"]
        if not args.skip_cold:
            for ref in sh(DOCKER, "images", "--format", "{{.Repository}}:{{.Tag}}").split():
                if (
                    cell_id in ref
                    or devel_id in ref
                    or ":staging-" in ref
                    or ref.startswith("imagesmith/smoke")
                ):
                    subprocess.run([DOCKER, "rmi", "-f", ref], capture_output=True, check=False)
            subprocess.run([DOCKER, "builder", "prune", "-af"], capture_output=True, check=True)
        net1: dict[str, int] = {}
        wall_cold, cold = imagesmith(["--matrix", str(m2), "--push"], tmp / "cold.json", args.extra_ca, net1)
        # 5. the second cell (devel, sharing torch) right after, to the same two registries
        net2: dict[str, int] = {}
        m2d = matrix_dir(tmp, "two", cold_regs, "smoke-devel")
        wall_c2, c2 = imagesmith(["--matrix", str(m2d), "--push"], tmp / "cell2.json", args.extra_ca, net2)
        pushed1 = cold["bytes_pushed_engine"] + cold["bytes_copied_api"]
        pushed2 = c2["bytes_pushed_engine"] + c2["bytes_copied_api"]
        results["second_cell"] = {
            "cell1": {"wall_s": wall_cold, "net": net1, **cold},
            "cell2": {"wall_s": wall_c2, "net": net2, **c2},
            "wall_fraction": wall_c2 / wall_cold,
            "downloaded_fraction_external_rx": net2["external_rx"] / net1["external_rx"],
            "downloaded_fraction_docker0_tx": net2["docker0_tx"] / net1["docker0_tx"],
            "pushed_fraction": pushed2 / pushed1,
            "engine_pushed_fraction": c2["bytes_pushed_engine"] / cold["bytes_pushed_engine"],
        }
        if args.second_cell_only:
            return
        wall_noop, noop = imagesmith(["--matrix", str(m2), "--push"], tmp / "noop.json", args.extra_ca)
        results["cold"] = {"wall_s": wall_cold, **cold}
        results["noop"] = {"wall_s": wall_noop, **noop}
        results["noop_fraction"] = wall_noop / wall_cold

        one = [Registry(tmp / "r3")]
        two = [Registry(tmp / "r4"), Registry(tmp / "r5")]
        regs += one + two
        w1, p1 = imagesmith(
            ["--matrix", str(matrix_dir(tmp, "p1", one)), "--push", "--force"], tmp / "p1.json", args.extra_ca
        )
        w2, p2 = imagesmith(
            ["--matrix", str(matrix_dir(tmp, "p2", two)), "--push", "--force"], tmp / "p2.json", args.extra_ca
        )
        results["push1"] = {"wall_s": w1, **p1}
        results["push2"] = {"wall_s": w2, **p2}
        results["push2_over_push1"] = {"push_phase": p2["push_s"] / p1["push_s"], "command": w2 / w1}

        # reference: plain `docker push` of the same image to two fresh registries, one after the other
        plain = [Registry(tmp / "r6"), Registry(tmp / "r7")]
        regs += plain
        local = f"imagesmith/smoke:{cell_id}"
        t = time.monotonic()
        for r in plain:
            ref = f"{r.addr}/bench/torch:plain"
            sh(DOCKER, "tag", local, ref)
            sh(DOCKER, "push", ref)
            sh(DOCKER, "rmi", ref)
        results["plain_docker_push_2_s"] = time.monotonic() - t

        # compressed pull bytes vs the pinned wheels' download sizes
        wheels = tmp / "wheels"
        req = REPO / "dockerfiles" / "smoke" / cell_id / "requirements.txt"
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(wheels), "-r", str(req)],
            check=True,
        )
        wheel_bytes = sum(p.stat().st_size for p in wheels.iterdir())
        results["wheels_bytes"] = wheel_bytes
        results["pull_bytes"] = cold["size_compressed"]
        results["pull_over_wheels"] = cold["size_compressed"] / wheel_bytes
    finally:
        for r in regs:
            r.stop()
        shutil.rmtree(tmp, ignore_errors=True)
        finish(args.out, results)


def finish(out: Path, results: dict[str, object]) -> None:
    out.write_text(json.dumps(results, indent=2) + "\n")
    flat = {k: v for k, v in results.items() if not isinstance(v, dict)}
    second = results.get("second_cell")
    if isinstance(second, dict):
        flat.update({f"second_cell.{k}": v for k, v in second.items() if not isinstance(v, dict)})
    print(json.dumps(flat, indent=2))


if __name__ == "__main__":
    main()
