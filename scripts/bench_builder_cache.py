#!/usr/bin/env python3
"""The nccl-tests builder stage's build cache across cells that differ only in their pip pins (NCCL, torch
index), this checkout beside a baseline commit, side by side in one run (figures → docs/benchmarks.md,
"Builder stage: the OS layers shared across NCCL pins").

    .venv/bin/python scripts/bench_builder_cache.py --baseline c3fe223 --extra-ca CA.pem

Two debian:trixie cells (toolkit distro: trixie's nvidia-cuda-toolkit 12.4, a ~1 GB apt download): A = torch
2.6.0 cu124 (nvidia-nccl-cu12 2.21.5), B = torch 2.8.0 cu128 (2.27.3), Python 3.13, locked once with
`imagesmith lock`. For each checkout (the baseline's templates, then this one's): the project rendered and
staged by that checkout's imagesmith, `docker build --target nccl-tests` of A with --no-cache, then of B with
the cache (B's builder-requirements.txt gets a fresh comment line per run, so its own steps never come from an
earlier run: only what it can share with A can be cached). Prints per build the wall time, the bytes
downloaded (/proc/net/dev, external interfaces) and the cached steps, and B's this/baseline ratios.

Needs scripts/setup.sh --debian trixie (dockerd, debian:trixie behind the registry-mirror map, the nccl-tests
source cache), network to the Python package index and Debian's archive, and ~4 GB of free disk; the images
are removed, the build cache is kept (never pruned: others share it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOCKER = "/usr/bin/docker"
MIRROR = "docker.io=127.0.0.1:5000/hub"
NCCL_PIN = (
    'version = "v2.19.6"\ncommit = "a0b82b2260cf5152b9f8c061bbf7eaf0ba096432"\n'
    'sha256 = "3c3b847c3ee4396d94defab52fef91ccc28c0e3a496e8e841cadd1870d9eb1c8"\ntoolkit = "distro"\n'
)
CELLS = {"A": ("2.6.0", "cu124", '["a100-80gb-sxm4", "h200"]'), "B": ("2.8.0", "cu128", '["h200", "b200"]')}
STAGE = """
import json, sys
from pathlib import Path
from imagesmith.build import build_args, build_secrets, stage_context
from imagesmith.config import load_config
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.project import discover
project = discover(Path(sys.argv[1]))
config = load_config()
out = {}
for name in ("A", "B"):
    matrix = load_matrix(name, project=project)
    (cell,) = build_plan(matrix, project=project).cells
    ctx = stage_context(cell, matrix, config, Path(sys.argv[2]), project=project)
    out[name] = {"context": str(ctx), "args": build_args(cell, config),
                 "secrets": {k: str(v) for k, v in build_secrets(config).items()}}
print(json.dumps(out))
"""


def net_rx() -> int:
    total = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, data = line.split(":", 1)
        if name.strip() != "lo" and not name.strip().startswith(("docker", "veth", "br-", "ifb")):
            total += int(data.split()[0])
    return total


def matrix(name: str) -> str:
    torch, variant, gpus = CELLS[name]
    return (
        f'schema = 1\nname = "{name}"\ngpus = {gpus}\nflavors = ["runtime"]\nshm_min = "1g"\n'
        'registries = ["local-plain"]\n'
        f'[torch]\nversions = ["{torch}"]\nvariants = ["{variant}"]\n[python]\nversions = ["3.13"]\n'
        '[base]\nos = "debian13"\nimage = "debian:trixie"\npython = "3.13"\n'
        f'[nccl_tests]\n{NCCL_PIN}[mirror]\nbuild = "none"\nruntime = "none"\n'
    )


def imagesmith(checkout: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "imagesmith", *args],
        env={**env, "PYTHONPATH": str(checkout)},
        cwd=checkout,  # `python -m` puts the working directory first on sys.path: it must be the checkout
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        sys.exit(f"imagesmith {' '.join(args)} ({checkout}) exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return proc.stdout


def build(staged: dict[str, object], tag: str, *, no_cache: bool) -> dict[str, object]:
    cmd = [DOCKER, "build", "--progress=plain", "--target", "nccl-tests", "-t", tag]
    cmd += ["--no-cache"] if no_cache else []
    for k, v in dict(staged["args"]).items():  # type: ignore[call-overload]
        cmd += ["--build-arg", f"{k}={v}"]
    for k, v in dict(staged["secrets"]).items():  # type: ignore[call-overload]
        cmd += ["--secret", f"id={k},src={v}"]
    cmd.append(str(staged["context"]))
    rx0, t0 = net_rx(), time.monotonic()
    proc = subprocess.run(cmd, env={**os.environ, "DOCKER_BUILDKIT": "1"}, capture_output=True, text=True)
    wall, rx = time.monotonic() - t0, net_rx() - rx0
    if proc.returncode != 0:
        sys.exit(f"docker build {tag} failed:\n{proc.stderr[-4000:]}")
    cached = sum(1 for line in proc.stderr.splitlines() if line.endswith(" CACHED"))
    return {"wall_s": round(wall, 1), "downloaded_mb": round(rx / 1e6, 1), "cached_steps": cached}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--baseline", required=True, help="commit whose templates are compared with this checkout"
    )
    ap.add_argument("--extra-ca", default=None)
    ap.add_argument("--min-free-gb", type=float, default=20.0)
    args = ap.parse_args()
    if shutil.disk_usage("/").free / 1e9 < args.min_free_gb:
        sys.exit(f"less than {args.min_free_gb} GB free on /: not building")
    tmp = Path(tempfile.mkdtemp(prefix="imagesmith-bench-cache-"))
    env = dict(os.environ, IMAGESMITH_REGISTRY_MIRRORS=MIRROR, IMAGESMITH_CONFIG=str(tmp / "none.toml"))
    env.pop("IMAGESMITH_PROJECT", None)
    if args.extra_ca:
        env["IMAGESMITH_EXTRA_CA"] = args.extra_ca
    base = tmp / "baseline"
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(base), args.baseline], check=True
    )
    results: dict[str, dict[str, object]] = {}
    tags: list[str] = []
    try:
        project = tmp / "project"
        (project / "matrices").mkdir(parents=True)
        (project / "imagesmith.toml").write_text(
            'schema = 1\nname = "bench"\ndefault_matrix = "A"\n[paths]\nmatrices = "matrices"\n'
            'dockerfiles = "dockerfiles"\nlocks = "locks"\nregistries = "matrices/registries.toml"\n'
        )
        shutil.copy(REPO / "matrices" / "registries.toml", project / "matrices" / "registries.toml")
        for name in CELLS:
            (project / "matrices" / f"{name}.toml").write_text(matrix(name))
            imagesmith(REPO, env, "-C", str(project), "lock", "--matrix", name)
        for label, checkout in (("baseline", base), ("this", REPO)):
            copy = tmp / f"project-{label}"
            shutil.copytree(project, copy)
            imagesmith(checkout, env, "-C", str(copy), "render")
            staged = json.loads(
                subprocess.run(
                    [sys.executable, "-c", STAGE, str(copy), str(tmp / f"stage-{label}")],
                    env={**env, "PYTHONPATH": str(checkout)},
                    cwd=checkout,
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
            first_copy = next(
                line
                for line in (Path(staged["B"]["context"]) / "Dockerfile").read_text().splitlines()
                if line.startswith("COPY")
            )
            print(f"{label:8} templates: builder stage's first {first_copy!r}", flush=True)
            req = Path(staged["B"]["context"]) / "builder-requirements.txt"
            req.write_text(req.read_text() + f"# bench run {uuid.uuid4().hex}\n")
            for name, no_cache in (("A", True), ("B", False)):
                tag = f"imagesmith-bench-cache:{label}-{name}"
                results[f"{label} {name}"] = build(staged[name], tag, no_cache=no_cache)
                tags.append(tag)
                print(f"{label:8} {name}: {json.dumps(results[f'{label} {name}'])}", flush=True)
    finally:
        if tags:
            subprocess.run([DOCKER, "rmi", *tags], capture_output=True, check=False)
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(base)], check=False)
        shutil.rmtree(tmp, ignore_errors=True)
    old, new = results["baseline B"], results["this B"]
    summary = {
        "runs": results,
        "ratio_B_wall_this_over_baseline": round(float(new["wall_s"]) / float(old["wall_s"]), 2),  # type: ignore[arg-type]
        "ratio_B_downloaded_this_over_baseline": round(
            float(new["downloaded_mb"]) / max(float(old["downloaded_mb"]), 0.1),  # type: ignore[arg-type]
            3,
        ),
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
