#!/usr/bin/env python3
"""Wheels downloaded once per builder (issue 11) and the extra CA in no layer (issue 17), side by side.

    .venv/bin/python scripts/bench_wheel_cache.py --extra-ca /etc/ssl/certs/ca-certificates.crt --out wc.json

Builds 3 cells of the same torch (the smoke matrix's cell: torch 2.11.0 cu130, Python 3.11, debian:bookworm)
one after the other through imagesmith's engine (BuildKit backend), each context rendered by imagesmith's
templates; the cells differ in the venv path (/opt/venv, /opt/venv-b, /opt/venv-c), so from the venv on no
layer is shared and every pip RUN runs again: only the wheel cache can spare the downloads. debian:bookworm
has one Python (3.11) and python-build-standalone (python.source "uv") needs GitHub, which is unreachable
here: a second cell with another Python cannot be built on this machine, and its torch wheel (cp3XY) would
be another file anyway (see docs/benchmarks.md).

For a fresh, cold wheel cache the cache mount id of every pip RUN is suffixed with this run's id
(imagesmith-wheelhouse-bench-<id>): cell 1 starts with an empty wheelhouse, cells 2 and 3 reuse it. Per cell:
wall time, host network counters (/proc/net/dev: received on the external interfaces; sent by docker0 into
the build containers), and pip's own lines: wheels saved (downloaded) vs "File was already downloaded".

The extra CA given is the host's bundle plus a unique comment line (a probe, ignored by TLS); after the
builds, `docker save` of cell 1's image is scanned layer by layer for the probe (it must be in none).

Other builds on this dockerd add to the network counters: run it on a quiet machine (the script prints the
counters of a 20 s idle window first, for scale).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith.build import CA_SECRET, build_args, imagesmith_wheel  # noqa: E402
from imagesmith.config import load_config  # noqa: E402
from imagesmith.engine import Engine  # noqa: E402
from imagesmith.matrix import load_matrix  # noqa: E402
from imagesmith.plan import build_plan, with_fingerprint  # noqa: E402
from imagesmith.sources import cached_archive, nccl_tests_archive  # noqa: E402
from imagesmith.templating import render_cell_files  # noqa: E402

DOCKER = "/usr/bin/docker"
BASE_MIRROR = "docker.io=127.0.0.1:5000/hub"
VENVS = ("/opt/venv", "/opt/venv-b", "/opt/venv-c")
_SAVED = re.compile(r"Saved \S*/([^/\s]+\.whl)")
_REUSED = re.compile(r"File was already downloaded \S*/([^/\s]+\.whl)")


def net_bytes() -> dict[str, int]:
    """Host network counters: bytes received on external interfaces, bytes sent into containers (docker0)."""
    ext = bridge = 0
    for line in Path("/proc/net/dev").read_text().splitlines()[2:]:
        name, data = line.split(":", 1)
        name = name.strip()
        fields = [int(x) for x in data.split()]
        if name == "docker0":
            bridge += fields[8]
        elif name != "lo" and not name.startswith(("docker", "veth", "br-", "ifb")):
            ext += fields[0]
    return {"external_rx": ext, "docker0_tx": bridge}


def stage(files: dict[str, str], dest: Path, run_id: str, archive: Path) -> Path:
    for name, text in files.items():
        if name == "Dockerfile":
            text = text.replace("id=imagesmith-wheelhouse,", f"id=imagesmith-wheelhouse-bench-{run_id},")
        path = dest / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (dest / "sources").mkdir(exist_ok=True)
    (dest / "sources" / archive.name).write_bytes(archive.read_bytes())
    (dest / "wheels").mkdir(exist_ok=True)
    wheel = imagesmith_wheel()
    (dest / "wheels" / wheel.name).write_bytes(wheel.read_bytes())
    return dest


def scan_layers(image: str, probe: bytes, workdir: Path) -> dict[str, int]:
    """`docker save` *image* and look for *probe* in every file of every layer."""
    tar_path = workdir / "image.tar"
    subprocess.run([DOCKER, "save", "-o", str(tar_path), image], check=True)
    layers = hits = files = 0
    with tarfile.open(tar_path) as outer:
        for member in outer.getmembers():
            if not member.name.endswith("layer.tar") and not member.name.startswith("blobs/"):
                continue
            data = outer.extractfile(member)
            if data is None:
                continue
            try:
                with tarfile.open(fileobj=data, mode="r|*") as inner:
                    layers += 1
                    for entry in inner:
                        if not entry.isfile():
                            continue
                        files += 1
                        f = inner.extractfile(entry)
                        if f is not None and probe in f.read():
                            hits += 1
                            print(f"  probe found in {member.name}: {entry.name}", file=sys.stderr)
            except tarfile.TarError:
                continue
    tar_path.unlink()
    return {"layers": layers, "files": files, "hits": hits}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--extra-ca", type=Path, required=True, help="the host's CA bundle (TLS interception)")
    ap.add_argument("--cells", type=int, default=3, choices=(2, 3))
    ap.add_argument("--out", type=Path, help="write the figures as JSON")
    ap.add_argument("--keep", action="store_true", help="keep the built images")
    ap.add_argument("--idle-s", type=float, default=20.0, help="idle window measured first, for scale")
    args = ap.parse_args()

    run_id = uuid.uuid4().hex[:10]
    probe = f"imagesmith-ca-probe-{run_id}".encode()
    matrix = load_matrix("smoke")
    (cell,) = build_plan(matrix).cells
    config = load_config().with_overrides(mirrors=[BASE_MIRROR])
    archive = cached_archive(nccl_tests_archive(matrix.nccl_tests), matrix=matrix.name)
    engine = Engine(backend="buildkit")
    rows: list[dict[str, object]] = []
    idle0 = net_bytes()
    time.sleep(args.idle_s)
    idle1 = net_bytes()
    idle = {k: idle1[k] - idle0[k] for k in idle0}
    print(f"idle {args.idle_s:.0f} s: {idle}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="imagesmith-wc-") as tmp_s:
        tmp = Path(tmp_s)
        ca = tmp / "extra-ca.pem"
        ca.write_bytes(args.extra_ca.read_bytes() + b"\n# " + probe + b"\n")
        tags = []
        for i, venv in enumerate(VENVS[: args.cells], 1):
            c = with_fingerprint(replace(cell, runtime=replace(cell.runtime, venv=venv)))
            ctx = stage(render_cell_files(c), tmp / f"cell{i}", run_id, archive)
            tag = f"imagesmith-bench/wheel-cache:{run_id}-cell{i}"
            before, start = net_bytes(), time.monotonic()
            engine.build(
                context=ctx,
                tags=[tag],
                build_args=build_args(c, config),
                secrets={CA_SECRET: ca},
                what=f"bench cell {i} ({venv})",
            )
            wall, after = time.monotonic() - start, net_bytes()
            log = (ctx / ".imagesmith-build.log").read_text(errors="replace")
            saved, reused = _SAVED.findall(log), _REUSED.findall(log)
            row: dict[str, object] = {
                "cell": i,
                "venv": venv,
                "wall_s": round(wall, 1),
                **{k: after[k] - before[k] for k in before},
                "wheels_downloaded": len(saved),
                "wheels_reused": len(reused),
                "torch_downloaded": sum(1 for w in saved if w.startswith("torch-")),
                "torch_reused": sum(1 for w in reused if w.startswith("torch-")),
            }
            rows.append(row)
            tags.append(tag)
            print(json.dumps(row), file=sys.stderr)
        scan = scan_layers(tags[0], probe, tmp)
        if not args.keep:
            for tag in tags:
                subprocess.run([DOCKER, "rmi", tag], check=False, capture_output=True)
    first = rows[0]
    ratios = {
        f"cell{r['cell']}/cell1": {
            k: round(int(str(r[k])) / max(1, int(str(first[k]))), 4) for k in ("external_rx", "docker0_tx")
        }
        for r in rows[1:]
    }
    result = {
        "run": run_id,
        "torch": cell.stack.torch,
        "variant": cell.stack.variant,
        "python": cell.runtime.python,
        "idle": idle,
        "cells": rows,
        "ratios": ratios,
        "torch_downloads_in_all_cells": sum(int(str(r["torch_downloaded"])) for r in rows),
        "ca_probe_scan_of_cell1": scan,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if scan["hits"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
