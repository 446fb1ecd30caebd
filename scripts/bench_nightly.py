#!/usr/bin/env python3
"""The whole-matrix nightly (issue 36), measured: N cells sharing torch built cold, then with one pin changed.

    PYTHONPATH=. .venv/bin/python scripts/bench_nightly.py --out bench-nightly.json

A throw-away project holds a Debian matrix of ``--torch`` releases (default torch 2.12.0 and 2.12.1 cu130,
PyPI's default variant: patch releases that share every nvidia-* pin) × ``--flavors`` (runtime, devel,
interactive) × py3.11 on the smoke matrix's base (debian:bookworm): six cells. Its locks come from
``imagesmith lock``, its dockerfiles from ``imagesmith render``.

1. Cold: a dockerd of its own (empty data root, so an empty BuildKit cache and wheel cache) builds and pushes
   the whole matrix with one ``imagesmith build --push`` to a fresh registry of its own on loopback. Figures:
   the run's wall time, each cell's (the summary's duration, build and push seconds, steps and cached steps,
   layers and bytes the engine pushed), the registry's storage.
2. One pin changed: one pure-Python pin of every lock (``--pin``, default ``tenacity``: imagesmith's own
   dependency, in the wheel layer plan's small-wheels layer) moved to the release before it (hash from the
   index), dockerfiles rendered again, the same command again on the same engine and registry.

The reference is one cold cell: the first cell of step 1 (empty engine, empty registry). Ratios: the whole
cold matrix over it (the issue's goal for N cells sharing torch: ≤ 1 + 0.1·(N−1)), step 2 over it.
Needs scripts/setup.sh to have run (dockerd's binary, the base image behind the registry-mirror map, the
nccl-tests source cache). Downloads ~2.8 GB per torch release; takes ~30 GB of disk while it runs (it checks
first and stops rather than leave less than 15 GB free); removes its engine, registry and project at the end
(also when killed).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.localinfra import private_dockerd, temp_registry  # noqa: E402

BASE_MIRROR = "docker.io=127.0.0.1:5000/hub"
FLOOR_GB = 15.0
#: the private engine's bridge (its builds' RUN steps need a network): a name and subnet of its own
BRIDGE = ("isnightly0", "172.30.236.1/24")


def sh(*cmd: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=cwd, env=env)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout


def imagesmith(args: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    full = dict(env or os.environ, PYTHONPATH=str(REPO), IMAGESMITH_REGISTRY_MIRRORS=BASE_MIRROR)
    return sh(sys.executable, "-m", "imagesmith", *args, cwd=cwd, env=full)


def project(root: Path, registry: str, torches: list[str], flavors: list[str]) -> Path:
    """The throw-away project: the smoke matrix with *torches* × *flavors*, one registry."""
    (root / "matrices").mkdir(parents=True)
    (root / "imagesmith.toml").write_text(
        'schema = 1\nname = "bench-nightly"\ndefault_matrix = "nightly"\n[paths]\nmatrices = "matrices"\n'
        'dockerfiles = "dockerfiles"\nlocks = "locks"\nregistries = "matrices/registries.toml"\n'
        "[sources]\nmirrors = []\n"
    )
    lines = []
    for line in (REPO / "matrices" / "smoke.toml").read_text().splitlines():
        if line.startswith("name ="):
            line = 'name = "nightly"'
        elif line.startswith("registries ="):
            line = 'registries = ["bench"]'
        elif line.startswith("flavors ="):
            line = "flavors = [" + ", ".join(f'"{f}"' for f in flavors) + "]"
        elif line.startswith("versions =") and "2." in line:
            line = "versions = [" + ", ".join(f'"{t}"' for t in torches) + "]"
        lines.append(line)
    (root / "matrices" / "nightly.toml").write_text("\n".join(lines) + "\n")
    (root / "matrices" / "registries.toml").write_text(
        f'schema = 1\n[registries.bench]\nhost = "{registry}"\nnamespace = "bench"\nrepository = "torch"\n'
        "insecure = true\n"
    )
    return root


_PIN = re.compile(r"^(?P<name>[A-Za-z0-9_.-]+)==(?P<version>\S+) \\$")


def replace_pin(lock: str, name: str, version: str, sha256: str) -> str:
    """*lock* (a hashed requirements file) with *name*'s pin and hashes replaced by *version* / *sha256*;
    every other line unchanged. Raises ValueError when the lock does not pin *name*."""
    out: list[str] = []
    lines = lock.splitlines()
    i, found = 0, False
    while i < len(lines):
        m = _PIN.match(lines[i])
        if m and m["name"].lower() == name.lower():
            found = True
            out += [f"{m['name']}=={version} \\", f"    --hash=sha256:{sha256}"]
            i += 1
            while i < len(lines) and lines[i].lstrip().startswith("--hash="):
                i += 1
            continue
        out.append(lines[i])
        i += 1
    if not found:
        raise ValueError(f"the lock pins no {name}")
    return "\n".join(out) + ("\n" if lock.endswith("\n") else "")


def pinned(lock: str, name: str) -> str:
    for line in lock.splitlines():
        m = _PIN.match(line)
        if m and m["name"].lower() == name.lower():
            return m["version"]
    raise ValueError(f"the lock pins no {name}")


def previous_release(name: str, below: str, tmp: Path) -> tuple[str, str]:
    """The newest wheel of *name* below *below* from the package index: (version, sha256)."""
    dest = tmp / f"pin-{name}"
    sh(
        sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
        "--python-version", "3.11", "-d", str(dest), f"{name}<{below}",
    )  # fmt: skip
    (wheel,) = dest.glob("*.whl")
    version = wheel.name.split("-")[1]
    return version, hashlib.sha256(wheel.read_bytes()).hexdigest()


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def build_all(root: Path, env: dict[str, str], summary: Path, extra_ca: str | None) -> dict[str, Any]:
    cmd = ["build", "--matrix", "nightly", "--push", "--summary", str(summary)]
    if extra_ca:
        cmd += ["--extra-ca", extra_ca]
    start = time.monotonic()
    imagesmith(cmd, cwd=root, env=env)
    wall = time.monotonic() - start
    keep = (
        "cell", "status", "duration_s", "build_s", "push_s", "steps", "cached_steps",
        "bytes_pushed_engine", "bytes_copied_api", "layers_pushed", "layers_existing",
        "size_compressed", "size_uncompressed", "digest",
    )  # fmt: skip
    cells = [{k: c.get(k) for k in keep} for c in json.loads(summary.read_text())["cells"]]
    return {
        "wall_s": wall,
        "cells": cells,
        "bytes_pushed": sum(int(c["bytes_pushed_engine"] or 0) for c in cells),
        "loadavg_1m_after": os.getloadavg()[0],
    }


def ratios(cold: dict[str, Any], changed: dict[str, Any] | None) -> dict[str, Any]:
    """The figures against one cold cell (the first cell of the cold run)."""
    n = len(cold["cells"])
    one = float(cold["cells"][0]["duration_s"])
    out: dict[str, Any] = {
        "cells": n,
        "one_cold_cell_s": one,
        "cold_total_s": cold["wall_s"],
        "cold_total_over_one_cell": cold["wall_s"] / one,
        "goal_1_plus_0.1_n_minus_1": 1 + 0.1 * (n - 1),
        "cold_bytes_pushed_over_one_cell": cold["bytes_pushed"]
        / int(cold["cells"][0]["bytes_pushed_engine"]),
    }
    if changed is not None:
        out["changed_total_s"] = changed["wall_s"]
        out["changed_total_over_one_cell"] = changed["wall_s"] / one
        out["changed_bytes_pushed"] = changed["bytes_pushed"]
        out["changed_bytes_over_one_cell"] = changed["bytes_pushed"] / int(
            cold["cells"][0]["bytes_pushed_engine"]
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--torch", default="2.12.0,2.12.1", help="torch releases (comma-separated)")
    ap.add_argument("--flavors", default="runtime,devel,interactive")
    ap.add_argument("--pin", default="tenacity", help="the pure-Python pin step 2 moves back one release")
    ap.add_argument("--extra-ca", default=None)
    ap.add_argument("--need-gb", type=float, default=30.0, help="disk the run may take")
    ap.add_argument("--skip-changed", action="store_true")
    ap.add_argument("--out", type=Path, default=Path("bench-nightly.json"))
    args = ap.parse_args()
    free = shutil.disk_usage(tempfile.gettempdir()).free / 1e9
    if free - args.need_gb < FLOOR_GB:
        sys.exit(f"needs ~{args.need_gb:.0f} GB; {free:.1f} GB free would leave less than {FLOOR_GB:.0f} GB")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))  # clean up (finally) on kill
    tmp = Path(tempfile.mkdtemp(prefix="imagesmith-bench-nightly-"))
    results: dict[str, Any] = {"host": {"cpus": os.cpu_count()}, "command": " ".join(sys.argv)}
    try:
        with (
            temp_registry(tmp / "registry") as reg,
            private_dockerd(tmp / "engine", bridge=BRIDGE, nat=True) as engine,
        ):
            root = project(tmp / "project", reg.addr, args.torch.split(","), args.flavors.split(","))
            imagesmith(["lock", "--matrix", "nightly"], cwd=root)
            imagesmith(["lock", "--sizes"], cwd=root)
            imagesmith(["render"], cwd=root)
            # the changed pin, prepared (and checked by plan) before the long cold run
            locks = sorted((root / "locks").glob("*.txt"))
            old = {p: p.read_text() for p in locks if "suite" not in p.name}
            first = next(iter(old.values()))
            version, sha = previous_release(args.pin, pinned(first, args.pin), tmp)
            results["pin"] = {"name": args.pin, "from": pinned(first, args.pin), "to": version}
            check = tmp / "project-check"
            shutil.copytree(root, check)
            for p, text in old.items():
                (check / "locks" / p.name).write_text(replace_pin(text, args.pin, version, sha))
            imagesmith(["render"], cwd=check)
            imagesmith(["plan", "--json"], cwd=check)
            plan = json.loads(imagesmith(["plan", "--json"], cwd=root))
            results["cell_ids"] = [c["id"] for c in plan["cells"]]
            print(f"cells: {results['cell_ids']}", file=sys.stderr, flush=True)
            results["cold"] = build_all(root, engine.env, tmp / "cold.json", args.extra_ca)
            results["cold"]["registry_du"] = du(reg.root / "data")
            print(json.dumps(ratios(results["cold"], None)), file=sys.stderr, flush=True)
            if not args.skip_changed:
                for p, text in old.items():
                    p.write_text(replace_pin(text, args.pin, version, sha))
                imagesmith(["render"], cwd=root)
                results["changed"] = build_all(root, engine.env, tmp / "changed.json", args.extra_ca)
                results["changed"]["registry_du"] = du(reg.root / "data")
            results["ratios"] = ratios(results["cold"], results.get("changed"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results.get("ratios", {}), indent=2))


if __name__ == "__main__":
    main()
