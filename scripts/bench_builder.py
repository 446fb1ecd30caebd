#!/usr/bin/env python3
"""The nccl-tests builder stage's wall time, CUDA 12 (Debian's own toolkit) beside CUDA 13 (pip nvcc wheels),
measured side by side in one run (figures → docs/benchmarks.md, "nccl-tests builder stage").

    .venv/bin/python scripts/bench_builder.py --extra-ca /etc/ssl/certs/ca-certificates.crt --rounds 2

For each round, in turn (A B A B …, so both see the same machine load): `docker build --target nccl-tests
--no-cache` of the committed context of

  A. smoke       torch 2.11.0 cu130: debian:bookworm + apt g++/make + nvcc/CCCL/NCCL pip wheels (toolkit pip)
  B. smoke-cu12  torch 2.5.1 cu124:  debian:bookworm + apt g++-11/make + Debian's nvidia-cuda-toolkit 11.8
                 unpacked from non-free (toolkit distro) + the NCCL wheel

both compiling nccl-tests for their matrix's GPUs (A: sm_90; B: sm_80 + sm_90), staged exactly as `imagesmith
build` stages them (imagesmith.build.stage_context, build args with the registry-mirror map). `--no-cache`
applies to these builds only: the shared BuildKit cache is never pruned.

`--mode replay` runs the same stage without `docker build`, for a machine short of disk: the stage's
instructions (ARG, ENV, COPY, RUN) replayed in order in one `docker run --rm` container of the builder image,
with /tmp and /opt on tmpfs, so nothing stays behind (no build cache, no image). Each RUN is timed too.
`--mode tmpfs` replays it with no disk at all: in a chroot of the debian:bookworm rootfs that scripts/setup.sh
debootstraps (the same tree the local registry serves as debian:bookworm), unpacked into a fresh tmpfs per
build (both cells alike; the host's network, as a build container's).

Per build: wall time, and bytes downloaded (host network counters, /proc/net/dev: received on the external
interfaces). Prints B / A ratios of the medians; --out writes the JSON.

Needs scripts/setup.sh to have run (dockerd, debian:bookworm behind the registry-mirror map, the nccl-tests
source cache).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith.build import build_args, stage_context  # noqa: E402
from imagesmith.config import load_config  # noqa: E402
from imagesmith.matrix import load_matrix  # noqa: E402
from imagesmith.plan import build_plan  # noqa: E402
from imagesmith.project import discover  # noqa: E402

DOCKER = "/usr/bin/docker"
BASE_MIRROR = "docker.io=127.0.0.1:5000/hub"
CELLS = {"pip (CUDA 13 wheels)": "smoke", "distro (Debian CUDA 11.8)": "smoke-cu12"}


def net_rx() -> int:
    """Bytes received on the external interfaces (not lo, docker*, veth*, br-*)."""
    total = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, data = line.split(":", 1)
        name = name.strip()
        if name != "lo" and not name.startswith(("docker", "veth", "br-", "ifb")):
            total += int(data.split()[0])
    return total


def replay_script(dockerfile: str, build_args: dict[str, str]) -> tuple[str, str]:
    """(builder image, bash script) replaying the first stage of *dockerfile* (FROM … AS nccl-tests)."""
    lines: list[str] = []
    buf = ""
    for raw in dockerfile.splitlines():
        if raw.lstrip().startswith("#") and not buf:
            continue
        buf += raw.rstrip("\\") + (" " if raw.endswith("\\") else "")
        if not raw.endswith("\\"):
            lines.append(buf)
            buf = ""
    image, out, n, stage = "", ["set -euo pipefail", "cd /"], 0, 0
    args: dict[str, str] = {}
    for line in lines:
        word, _, rest = line.strip().partition(" ")
        if word == "ARG":
            name, _, default = rest.partition("=")
            args[name] = build_args.get(name, default)
            if stage:
                out.append(f"export {name}={json.dumps(args[name])}")
        elif word == "FROM":
            stage += 1
            if stage > 1:
                break
            ref = rest.split()[0]
            image = args.get(ref.strip("${}"), ref)
        elif word == "ENV":
            name, _, value = rest.partition("=")
            out.append(f"export {name}={json.dumps(value)}")
        elif word == "COPY":
            *srcs, dest = rest.split()
            out.append(f"mkdir -p {dest}")
            out += [f"cp -r /ctx/{s.rstrip('/')}{'/.' if s.endswith('/') else ''} {dest}" for s in srcs]
        elif word == "RUN":
            n += 1
            out.append(f"t=$(date +%s%N); bash -o pipefail -c {shlex.quote(rest)}")
            out.append(f'echo "RUN {n}: $(( ($(date +%s%N) - t) / 1000000 )) ms" >&2')
    return image, "\n".join(out) + "\n"


def chroot_on_tmpfs(ctx: Path, build_args: dict[str, str], rootfs: Path) -> tuple[Path, list[str]]:
    """A fresh tmpfs holding *rootfs*, the staged context at /ctx and the replay script; the chroot
    command."""
    _, script = replay_script((ctx / "Dockerfile").read_text(), build_args)
    root = Path(tempfile.mkdtemp(prefix="imagesmith-bench-root-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8g", "imagesmith-bench", str(root)], check=True)
    subprocess.run(["tar", "-xf", str(rootfs), "-C", str(root)], check=True)
    shutil.copyfile("/etc/resolv.conf", root / "etc" / "resolv.conf")
    shutil.copytree(ctx, root / "ctx")
    (root / "ctx" / "replay.sh").write_text(script)
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    env = "env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root"
    return root, ["chroot", str(root), *env.split(), "bash", "/ctx/replay.sh"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--extra-ca", default=None)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--mode", choices=("build", "replay", "tmpfs"), default="build")
    ap.add_argument(
        "--rootfs",
        type=Path,
        default=Path("/var/cache/imagesmith-ci/debian-bookworm-minbase.tar"),
        help="--mode tmpfs: the debian:bookworm rootfs tarball (scripts/setup.sh's)",
    )
    ap.add_argument(
        "--min-free-gb",
        type=float,
        default=20.0,
        help="refuse to start (and stop between builds) below this much free disk: each --no-cache build "
        "leaves 1-2 GB of build cache",
    )
    args = ap.parse_args()

    def check_disk() -> None:
        free = shutil.disk_usage("/").free / 1e9
        if args.mode != "tmpfs" and free < args.min_free_gb:
            sys.exit(f"only {free:.1f} GB free on / (< --min-free-gb {args.min_free_gb}): not building")

    check_disk()

    env = dict(os.environ)
    env["IMAGESMITH_REGISTRY_MIRRORS"] = BASE_MIRROR
    env["IMAGESMITH_CONFIG"] = "/nonexistent/imagesmith-bench-config.toml"
    if args.extra_ca:
        env["IMAGESMITH_EXTRA_CA"] = args.extra_ca
    config = load_config(env)
    project = discover(near=REPO / "matrices")
    staged: dict[str, tuple[Path, dict[str, str], str]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="imagesmith-bench-builder-"))
    for label, name in CELLS.items():
        matrix = load_matrix(name, project=project)
        (cell, *_) = build_plan(matrix, project=project).cells
        ctx = stage_context(cell, matrix, config, tmp, project=project)
        staged[label] = (ctx, build_args(cell, config), cell.hardware.nvcc_gencode)

    results: dict[str, list[dict[str, float | str]]] = {label: [] for label in CELLS}
    tags: list[str] = []
    for r in range(args.rounds):
        for label, (ctx, bargs, _) in staged.items():
            check_disk()
            tag = f"imagesmith-bench-builder:{CELLS[label]}-{r}"
            if args.mode == "build":
                cmd = [DOCKER, "build", "--progress=plain", "--no-cache", "--target", "nccl-tests", "-t", tag]
                for k, v in bargs.items():
                    cmd += ["--build-arg", f"{k}={v}"]
                cmd.append(str(ctx))
            else:
                image, script = replay_script((ctx / "Dockerfile").read_text(), bargs)
                (ctx / "replay.sh").write_text(script)
                cmd = [DOCKER, "run", "--rm", "--tmpfs", "/tmp:exec,size=6g", "--tmpfs", "/opt:exec,size=4g"]
                cmd += ["-v", f"{ctx}:/ctx:ro", image, "bash", "/ctx/replay.sh"]
            root = None
            if args.mode == "tmpfs":
                root, cmd = chroot_on_tmpfs(ctx, bargs, args.rootfs)
            rx0, t0 = net_rx(), time.monotonic()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            finally:
                if root is not None:
                    for mnt in (root / "proc", root):
                        subprocess.run(["umount", str(mnt)], check=False)
                    root.rmdir()
            wall, rx = time.monotonic() - t0, net_rx() - rx0
            if proc.returncode != 0:
                sys.exit(f"{label}: docker build failed:\n{proc.stderr[-4000:]}")
            if args.mode == "build":
                tags.append(tag)
            steps = " ".join(x.split(": ", 1)[1] for x in proc.stderr.splitlines() if x.startswith("RUN "))
            results[label].append(
                {"wall_s": round(wall, 1), "downloaded_mb": round(rx / 1e6, 1), "run_steps": steps}
            )
            print(
                f"round {r + 1} {label:28} {wall:7.1f} s  {rx / 1e6:8.1f} MB downloaded"
                + (f"  (RUN steps: {steps})" if steps else ""),
                flush=True,
            )
    if tags:
        subprocess.run([DOCKER, "rmi", *tags], capture_output=True, check=False)
    shutil.rmtree(tmp, ignore_errors=True)

    med = {k: statistics.median(float(x["wall_s"]) for x in v) for k, v in results.items()}
    dl = {k: statistics.median(float(x["downloaded_mb"]) for x in v) for k, v in results.items()}
    a, b = CELLS
    summary = {
        "mode": args.mode,
        "rounds": args.rounds,
        "cores": os.cpu_count(),
        "gencode": {k: v[2] for k, v in staged.items()},
        "runs": results,
        "median_wall_s": med,
        "median_downloaded_mb": dl,
        "ratio_wall_distro_over_pip": round(med[b] / med[a], 2),
        "ratio_downloaded_distro_over_pip": round(dl[b] / dl[a], 2) if dl[a] else None,
    }
    print(json.dumps(summary, indent=2))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
