#!/usr/bin/env python3
"""The layer plan (issue 19), measured side by side in one run (figures → docs/benchmarks.md).

    PYTHONPATH=. .venv/bin/python scripts/bench_layers.py --extra-ca /etc/ssl/certs/ca-certificates.crt \\
        --baseline main --out bench-layers.json

1. Cold push of the smoke cell, layered vs one wheel layer: the cell's image is built twice with
   ``imagesmith build`` — by this checkout (the layer plan) and by a ``git worktree`` of ``--baseline`` (one
   ``pip install -r requirements.txt`` layer) — and each is pushed with plain ``docker push`` to a fresh,
   empty registry of its own (so nothing is "already there" and the engine has no blob to mount), the two
   alternating for ``--rounds`` rounds. Figures: push wall time (median), compressed bytes in the registry
   (manifest layers + config), layer counts; ratios layered / single.
2. Two cells of one CUDA variant and Python with different torch releases (``--pair``, default torch 2.12.0
   and 2.12.1 cu130, PyPI's default variant, py3.11 on the smoke matrix's base): a throw-away project (its own
   matrix, locks resolved with ``imagesmith lock``, sizes with ``lock --sizes``, dockerfiles rendered) builds
   and pushes the first cell, then the second, with ``imagesmith build --push`` to one fresh registry.
   Figures: what the second push uploaded (the engine's own count of layers pushed / already there, and the
   compressed bytes of the layers it pushed) over its image's compressed bytes; the registry's storage
   (``du`` of its data folder, and unique blobs of both manifests) for both over one; and a renter's pull:
   a content-addressed puller (a blob already held by digest is not downloaded, as containerd and dockerd
   do) reads the first image, then the second, and counts the bytes the second needed over its total.

Needs scripts/setup.sh to have run (dockerd, the base image behind the registry-mirror map, the nccl-tests
source cache). Builds download ~2.8 GB per torch release; each image takes ~5.4 GB and each registry ~3 GB.
Before every build and push it checks the free disk and stops rather than leave less than 15 GB free (the
disk is shared); it removes its images, registries and worktree at the end (also when killed), not the build
cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.localinfra import TempRegistry, temp_registry  # noqa: E402

DOCKER = "/usr/bin/docker"
BASE_MIRROR = "docker.io=127.0.0.1:5000/hub"
MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
    ]
)


#: never leave the shared disk with less than this free (the working rules' floor)
FLOOR_GB = 15.0


def need_disk(gb: float, what: str, path: Path = Path("/")) -> None:
    """Stop before a step that would take the disk of *path* below :data:`FLOOR_GB` free (the shared root
    disk; another file system, e.g. a tmpfs for the registries, only needs *gb*)."""
    free = shutil.disk_usage(path).free / 1e9
    floor = FLOOR_GB if path.stat().st_dev == Path("/").stat().st_dev else 0.0
    if free - gb < floor:
        sys.exit(
            f"{what} needs ~{gb:.0f} GB; {free:.1f} GB free would leave less than {FLOOR_GB:.0f} GB: stopped"
        )


def sh(*cmd: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def imagesmith(
    args: list[str], *, tree: Path, cwd: Path, extra_ca: str | None = None, summary: Path | None = None
) -> tuple[float, dict[str, Any] | None]:
    """``imagesmith ARGS`` with the package of *tree* (this checkout or the baseline worktree)."""
    cmd = [sys.executable, "-m", "imagesmith", *args]
    if summary is not None:
        cmd += ["--summary", str(summary)]
    if extra_ca and args[0] == "build":
        cmd += ["--extra-ca", extra_ca]
    env = dict(os.environ, PYTHONPATH=str(tree), IMAGESMITH_REGISTRY_MIRRORS=BASE_MIRROR)
    start = time.monotonic()
    sh(*cmd, cwd=cwd, env=env)
    wall = time.monotonic() - start
    cell = json.loads(summary.read_text())["cells"][0] if summary is not None else None
    return wall, cell


def manifest(addr: str, repo: str, ref: str) -> dict[str, Any]:
    r = requests.get(
        f"http://{addr}/v2/{repo}/manifests/{ref}", headers={"Accept": MANIFEST_TYPES}, timeout=30
    )
    r.raise_for_status()
    return dict(r.json())


def blobs(m: dict[str, Any]) -> dict[str, int]:
    out = {layer["digest"]: int(layer["size"]) for layer in m["layers"]}
    out[m["config"]["digest"]] = int(m["config"]["size"])
    return out


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


class Puller:
    """A renter's content store: blobs by digest; a blob held already is not downloaded again."""

    def __init__(self) -> None:
        self.held: set[str] = set()

    def pull(self, addr: str, repo: str, ref: str) -> dict[str, int]:
        m = manifest(addr, repo, ref)
        got = total = 0
        for digest, size in blobs(m).items():
            total += size
            if digest in self.held:
                continue
            h = hashlib.sha256()
            with requests.get(f"http://{addr}/v2/{repo}/blobs/{digest}", stream=True, timeout=120) as r:
                r.raise_for_status()
                for chunk in r.iter_content(1 << 20):
                    h.update(chunk)
                    got += len(chunk)
            if "sha256:" + h.hexdigest() != digest:
                sys.exit(f"blob {digest} of {repo}:{ref} does not match its digest")
            self.held.add(digest)
        return {"downloaded": got, "total": total, "blobs": len(m["layers"]) + 1}


@contextmanager
def registry(tmp: Path, name: str) -> Iterator[TempRegistry]:
    with temp_registry(tmp / name) as reg:
        yield reg
    shutil.rmtree(tmp / name, ignore_errors=True)


def dockerd_cpu_s() -> float:
    """CPU seconds dockerd has used (user + system): the work a push costs, whatever else runs."""
    pid = sh("pidof", "dockerd").split()[0]
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cold_push(image: str, tmp: Path, name: str) -> dict[str, Any]:  # tmp: where the registry keeps its data
    """``docker push`` of *image* to a fresh registry: wall time, dockerd CPU seconds (the push's work; the
    machine is shared, so wall time also shows what else ran), compressed bytes, layers."""
    need_disk(3.5, f"cold push {name} (a registry holding one image)", tmp)
    with registry(tmp, name) as reg:
        ref = f"{reg.addr}/bench/torch:{name}"
        sh(DOCKER, "tag", image, ref)
        cpu = dockerd_cpu_s()
        start = time.monotonic()
        sh(DOCKER, "push", ref)
        wall = time.monotonic() - start
        cpu = dockerd_cpu_s() - cpu
        load = os.getloadavg()[0]
        m = manifest(reg.addr, "bench/torch", name)
        sh(DOCKER, "rmi", ref)
        sizes = blobs(m)
        return {
            "push_s": wall,
            "dockerd_cpu_s": cpu,
            "dockerd_cores": cpu / wall,
            "loadavg_1m_after": load,
            "bytes": sum(sizes.values()),
            "layers": len(m["layers"]),
            "largest_layer": max(int(x["size"]) for x in m["layers"]),
        }


def smoke_pair(args: argparse.Namespace, tmp: Path, stack: ExitStack) -> dict[str, Any]:
    """Step 1: the smoke cell, single layer (baseline worktree) vs layered (this checkout)."""
    base_tree = tmp / "baseline"
    sh("git", "-C", str(REPO), "worktree", "add", "--detach", str(base_tree), args.baseline)
    stack.callback(
        lambda: subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base_tree)])
    )
    layered_tree = REPO
    if args.layered:
        layered_tree = tmp / "layered-tree"
        sh("git", "-C", str(REPO), "worktree", "add", "--detach", str(layered_tree), args.layered)
        stack.callback(
            lambda: subprocess.run(
                ["git", "-C", str(REPO), "worktree", "remove", "--force", str(layered_tree)]
            )
        )
    images: dict[str, str] = {}
    builds: dict[str, Any] = {}
    for label, tree in (("single", base_tree), ("layered", layered_tree)):
        need_disk(args.build_gb, f"the {label} smoke image")
        wall, cell = imagesmith(
            ["build", "--matrix", "smoke"],
            tree=tree,
            cwd=tree,
            extra_ca=args.extra_ca,
            summary=tmp / f"{label}.json",
        )
        assert cell is not None
        images[label] = f"bench-layers/{label}:smoke"
        sh(DOCKER, "tag", cell["image_id"], images[label])
        stack.callback(lambda ref=images[label]: subprocess.run([DOCKER, "rmi", ref], capture_output=True))
        builds[label] = {
            "build_wall_s": wall,
            "image_id": cell["image_id"],
            "size": cell["size_uncompressed"],
        }
    rounds: dict[str, list[dict[str, Any]]] = {"single": [], "layered": []}
    for i in range(args.rounds):
        order = ("single", "layered") if i % 2 == 0 else ("layered", "single")
        for label in order:
            rounds[label].append(cold_push(images[label], args.registry_dir or tmp, f"{label}{i}"))
            print(f"round {i} {label}: {rounds[label][-1]}", file=sys.stderr, flush=True)
    med = {k: statistics.median(r["push_s"] for r in v) for k, v in rounds.items()}
    per_round = [
        lay["push_s"] / one["push_s"] for lay, one in zip(rounds["layered"], rounds["single"], strict=True)
    ]
    return {
        "push_time_ratio_per_round": per_round,
        "dockerd_cores_median": {
            k: statistics.median(r["dockerd_cores"] for r in v) for k, v in rounds.items()
        },
        "baseline": args.baseline,
        "builds": builds,
        "rounds": rounds,
        "push_s_median": med,
        "push_time_ratio": med["layered"] / med["single"],
        "bytes_ratio": rounds["layered"][0]["bytes"] / rounds["single"][0]["bytes"],
        "layers": {k: v[0]["layers"] for k, v in rounds.items()},
    }


def pair_project(tmp: Path, reg: TempRegistry, torches: list[str]) -> Path:
    """A throw-away project: the smoke matrix with *torches*, one registry, locks resolved here."""
    root = tmp / "pair-project"
    (root / "matrices").mkdir(parents=True)
    (root / "imagesmith.toml").write_text(
        'schema = 1\nname = "bench-layers"\ndefault_matrix = "pair"\n[paths]\nmatrices = "matrices"\n'
        'dockerfiles = "dockerfiles"\nlocks = "locks"\nregistries = "matrices/registries.toml"\n'
        "[sources]\nmirrors = []\n"
    )
    lines = []
    for line in (REPO / "matrices" / "smoke.toml").read_text().splitlines():
        if line.startswith("name ="):
            line = 'name = "pair"'
        elif line.startswith("registries ="):
            line = 'registries = ["bench"]'
        elif line.startswith("versions =") and "2." in line:
            line = "versions = [" + ", ".join(f'"{t}"' for t in torches) + "]"
        lines.append(line)
    (root / "matrices" / "pair.toml").write_text("\n".join(lines) + "\n")
    (root / "matrices" / "registries.toml").write_text(
        f'schema = 1\n[registries.bench]\nhost = "{reg.addr}"\nnamespace = "bench"\nrepository = "torch"\n'
        "insecure = true\n"
    )
    return root


def torch_pair(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Step 2: two torch releases of one variant and Python, one after the other, to one registry."""
    torches = args.pair.split(",")
    with registry(args.registry_dir or tmp, "pair-registry") as reg:
        root = pair_project(tmp, reg, torches)
        imagesmith(["lock", "--matrix", "pair"], tree=REPO, cwd=root)
        imagesmith(["lock", "--sizes"], tree=REPO, cwd=root)
        imagesmith(["render"], tree=REPO, cwd=root)
        plan = json.loads(
            sh(
                sys.executable,
                "-m",
                "imagesmith",
                "plan",
                "--json",
                "--explain",
                cwd=root,
                env=dict(os.environ, PYTHONPATH=str(REPO)),
            )
        )
        cells = [c["id"] for c in plan["cells"]]
        out: dict[str, Any] = {
            "torch": torches,
            "cells": cells,
            "plan_estimate": plan["layer_plan"]["estimate"],
        }
        data = reg.root / "data"
        storage: list[int] = []
        puller = Puller()
        pulls: list[dict[str, int]] = []
        manifests: list[dict[str, int]] = []
        built: list[dict[str, Any]] = []
        for i, cid in enumerate(cells):
            need_disk(args.build_gb if i == 0 else args.second_gb, f"cell {cid} (its image)")
            wall, cell = imagesmith(
                ["build", "--matrix", "pair", "--only", cid, "--push"],
                tree=REPO,
                cwd=root,
                extra_ca=args.extra_ca,
                summary=tmp / f"pair-{cid}.json",
            )
            assert cell is not None
            built.append(
                {
                    "wall_s": wall,
                    **{
                        k: cell[k]
                        for k in (
                            "image_id",
                            "digest",
                            "size_compressed",
                            "bytes_pushed_engine",
                            "push_s",
                            "build_s",
                            "layers_pushed",
                            "layers_existing",
                        )
                    },
                }
            )
            storage.append(du(data))
            manifests.append(blobs(manifest(reg.addr, "bench/torch", cell["digest"])))
            pulls.append(puller.pull(reg.addr, "bench/torch", cell["digest"]))
            subprocess.run([DOCKER, "rmi", cell["image_id"]], capture_output=True, check=False)
        union = {**manifests[0], **manifests[1]}
        second = built[1]
        out.update(
            {
                "builds": built,
                "registry_du": storage,
                "storage_ratio_du": storage[1] / storage[0],
                "storage_ratio_blobs": sum(union.values()) / sum(manifests[0].values()),
                "pulls": pulls,
                "second_pull_fraction": pulls[1]["downloaded"] / pulls[1]["total"],
                "second_push_fraction": second["bytes_pushed_engine"] / second["size_compressed"],
                "second_push_layers": (
                    f"{second['layers_pushed']} pushed, {second['layers_existing']} already there"
                ),
            }
        )
        return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extra-ca", default=None)
    ap.add_argument("--baseline", default="main", help="git revision with today's single wheel layer")
    ap.add_argument("--rounds", type=int, default=2, help="cold pushes of each image, alternating")
    ap.add_argument("--pair", default="2.12.0,2.12.1", help="two torch releases of the smoke variant/Python")
    ap.add_argument(
        "--layered", default="", help="git revision for the layered image (default: this checkout)"
    )
    ap.add_argument(
        "--registry-dir",
        type=Path,
        default=None,
        help="where the cold-push registries keep their data (e.g. a tmpfs: no disk used)",
    )
    ap.add_argument(
        "--build-gb", type=float, default=6.0, help="disk one smoke build may take (less when cached)"
    )
    ap.add_argument(
        "--second-gb", type=float, default=3.0, help="disk the pair's second build may take (shared layers)"
    )
    ap.add_argument("--skip-smoke", action="store_true")
    ap.add_argument("--skip-pair", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench-layers.json"))
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # clean up (finally) on kill
    tmp = Path(tempfile.mkdtemp(prefix="imagesmith-bench-layers-"))
    results: dict[str, Any] = {"host": {"cpus": os.cpu_count()}, "command": " ".join(sys.argv)}
    try:
        with ExitStack() as stack:
            if not args.skip_smoke:
                results["smoke"] = smoke_pair(args, tmp, stack)
            if not args.skip_pair:
                results["pair"] = torch_pair(args, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    flat: dict[str, Any] = {}
    smoke = results.get("smoke", {})
    for k in (
        "push_time_ratio",
        "push_time_ratio_per_round",
        "dockerd_cores_median",
        "bytes_ratio",
        "push_s_median",
        "layers",
    ):
        if k in smoke:
            flat[f"smoke.{k}"] = smoke[k]
    pair = results.get("pair", {})
    for k in (
        "second_pull_fraction",
        "second_push_fraction",
        "second_push_layers",
        "storage_ratio_du",
        "storage_ratio_blobs",
    ):
        if k in pair:
            flat[f"pair.{k}"] = pair[k]
    print(json.dumps(flat, indent=2))


if __name__ == "__main__":
    main()
