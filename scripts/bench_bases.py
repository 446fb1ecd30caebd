"""What base images by digest cost (issue 26): resolving one base (`imagesmith lock --bases`: requests and
time per base, unchanged and new/moved) and planning every matrix of the project with the base lock (cold,
then cached in-process).

Reads only: the local debian:bookworm behind the registry-mirror map (127.0.0.1:5000/hub, scripts/setup.sh),
resolved with a fresh client each round (as `lock --bases` does per base).

usage: .venv/bin/python scripts/bench_bases.py [--n 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith import bases  # noqa: E402
from imagesmith.config import UserConfig  # noqa: E402
from imagesmith.matrix import load_matrix  # noqa: E402
from imagesmith.plan import build_plan  # noqa: E402
from imagesmith.project import load_project  # noqa: E402
from imagesmith.registry import RegistryClient  # noqa: E402


def count_requests() -> list[str]:
    seen: list[str] = []
    original = RegistryClient._send  # every request goes through it (_call adds the retries around it)

    def counted(self: RegistryClient, method: str, url: str, **kw: Any) -> Any:
        seen.append(f"{method} {url}")
        return original(self, method, url, **kw)

    RegistryClient._send = counted  # type: ignore[method-assign]
    return seen


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--mirror", default="127.0.0.1:5000/hub")
    args = ap.parse_args()
    config = UserConfig(registry_mirrors=(("docker.io", args.mirror),))
    seen = count_requests()
    # a new or moved digest: the HEAD, then the manifest read by that digest and hashed (once per move)
    t = time.perf_counter()
    first = bases.resolve("debian:bookworm", config)
    first_ms = (time.perf_counter() - t) * 1000
    per_move = list(seen)
    times = []
    for _ in range(args.n):  # the steady state: the lock already says this digest
        seen.clear()
        t = time.perf_counter()
        got = bases.resolve("debian:bookworm", config, pinned=first.digest)
        times.append((time.perf_counter() - t) * 1000)
    per_base = list(seen)
    project = load_project(REPO / "imagesmith.toml")
    names = project.matrix_names()

    def plan_all() -> tuple[float, int]:
        t = time.perf_counter()
        cells = sum(len(build_plan(load_matrix(n, project=project), project=project).cells) for n in names)
        return time.perf_counter() - t, cells

    cold, cells = plan_all()
    warm = min(plan_all()[0] for _ in range(3))
    out = {
        "base": "debian:bookworm",
        "digest": got.digest,
        "read_from": got.where,
        "requests_per_base": len(per_base),
        "requests": per_base,
        "requests_new_or_moved": per_move,
        "resolve_new_or_moved_ms": round(first_ms, 2),
        "resolve_ms_median": round(statistics.median(times), 2),
        "resolve_ms_p90": round(sorted(times)[int(0.9 * len(times)) - 1], 2),
        "matrices": len(names),
        "cells": cells,
        "plan_all_cold_s": round(cold, 3),
        "plan_all_cached_s": round(warm, 3),
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
