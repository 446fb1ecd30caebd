"""Start-up time of ``imagesmith --help`` and of a ``pick`` (the sample index, a given driver and GPU), before
and after, side by side in one run (issue 31: the command layer must not make start-up slower).

Two trees: BASE (``git archive``) and HEAD (committed); each command runs ``--runs`` times per tree,
interleaved (so that a change of the machine's load hits both alike), as ``python -m imagesmith`` with the
tree first on ``sys.path``. Printed: the median and the fastest wall time of each, and HEAD / BASE; the load
average before and after.

usage: .venv/bin/python scripts/bench_startup.py [--base main] [--head HEAD] [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = "docs/examples/release-index.json"
COMMANDS = {
    "--help": ["--help"],
    "pick": [
        "pick",
        "--index",
        SAMPLE,
        "--verify-key",
        f"{SAMPLE}.pub",
        "--driver",
        "550.54.15",
        "--gpu",
        "h100",
    ],
}


def export(ref: str, dest: Path) -> Path:
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def once(tree: Path, args: list[str], cache: Path) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree), XDG_CACHE_HOME=str(cache))
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "imagesmith", *args], cwd=tree, env=env, capture_output=True, timeout=120
    )
    took = time.perf_counter() - start
    if done.returncode not in (0, 10):
        said = done.stderr[-500:].decode(errors="replace")
        raise SystemExit(f"{tree}: imagesmith {' '.join(args)} exited {done.returncode}: {said}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--head", default="HEAD")
    ap.add_argument("--runs", type=int, default=15)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"base": export(a.base, Path(tmp) / "base"), "head": export(a.head, Path(tmp) / "head")}
        times: dict[tuple[str, str], list[float]] = {}
        load = os.getloadavg()[0]
        for name, args in COMMANDS.items():
            for tree in trees.values():  # warm the page cache and the bytecode
                once(tree, args, Path(tmp) / "cache")
            for _ in range(a.runs):
                for which, tree in trees.items():
                    times.setdefault((name, which), []).append(once(tree, args, Path(tmp) / "cache"))
        print(f"load average {load:.1f} → {os.getloadavg()[0]:.1f}; {a.runs} runs each, interleaved")
        print(f"{'command':10} {'base median':>12} {'head median':>12} {'base min':>9} {'head min':>9} ratio")
        for name in COMMANDS:
            b, h = times[name, "base"], times[name, "head"]
            ratio = statistics.median(h) / statistics.median(b)
            print(
                f"{name:10} {statistics.median(b):11.3f}s {statistics.median(h):11.3f}s "
                f"{min(b):8.3f}s {min(h):8.3f}s {ratio:5.2f}"
            )


if __name__ == "__main__":
    main()
