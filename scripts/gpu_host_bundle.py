#!/usr/bin/env python3
"""Assemble the offline bundle that takes imagesmith to a GPU host without network.

    python scripts/gpu_host_bundle.py [--out .carry] [--python-version 3.12] [--engine]

Writes into OUT (default ``.carry/``, ignored by git):
  whl/               imagesmith (the reproducible wheel of this checkout, as images carry it) and every
                     dependency as a binary wheel for the host's Python (``pip download --only-binary``)
  nccl-tests.tar     the pinned nccl-tests archive from imagesmith's source cache, sha256 checked
  docker-bin.tar.xz  with --engine: Debian's dockerd, containerd, containerd-shim-runc-v2, runc and the
                     libdevmapper they need (Debian's packages), for image-level runs on a host with no engine
  SHA256SUMS         of every file above; the host scripts check it before they use anything

On the host (scripts/h200_common.sh): ``sha256sum -c SHA256SUMS``, then ``pip install --no-index --no-deps
--target DIR whl/*.whl`` and PYTHONPATH=DIR. The bundle must stay under the device tool's 64 MiB carry limit;
the script says when it does not. Needs the source cache filled (``imagesmith fetch-sources``; setup.sh does
it) and, for --engine, apt-get on a Debian machine.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from packaging.requirements import Requirement

from imagesmith import compat
from imagesmith.distribution import suite_wheel
from imagesmith.sources import SourceArchive, cached_archive

CARRY_LIMIT = 64 << 20
ENGINE_PACKAGES = ("docker.io", "containerd", "runc", "libdevmapper1.02.1")
ENGINE_FILES = (
    "usr/sbin/dockerd",
    "usr/bin/containerd",
    "usr/bin/containerd-shim-runc-v2",
    "usr/sbin/runc",
)


def die(message: str, fix: str) -> None:
    print(f"error: {message}\n  fix: {fix}", file=sys.stderr)
    raise SystemExit(2)


def wheels(out: Path, python_version: str, platform: str) -> None:
    wheel = suite_wheel().write(out)
    print(f"whl/{wheel.name} (sha256 {suite_wheel().sha256[:12]})")
    requirements = []
    for text in importlib.metadata.requires("imagesmith") or []:
        req = Requirement(text)
        if req.marker and "extra" in str(req.marker):
            continue
        requirements.append(str(req))
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--quiet",
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
        "--platform",
        platform,
        "--dest",
        str(out),
        *requirements,
    ]
    r = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if r.returncode != 0:
        die(
            f"pip download of imagesmith's dependencies for Python {python_version} failed:\n"
            + r.stderr[-2000:],
            "check the package index settings (pip config list) or pass another --python-version",
        )


def nccl_tests(out: Path) -> None:
    pin = compat.default_source_pin("nccl_tests")
    archive = SourceArchive(
        name="nccl-tests", version=pin["version"], commit=pin["commit"], sha256=pin["sha256"], url=""
    )
    path = cached_archive(archive)  # sha256 checked; a clear error names the fix when it is missing
    shutil.copyfile(path, out / "nccl-tests.tar")
    print(f"nccl-tests.tar = {archive.label}, prefix {archive.prefix}/")


def engine(out: Path) -> None:
    if not shutil.which("apt-get") or not shutil.which("dpkg-deb"):
        die(
            "--engine needs apt-get and dpkg-deb (a Debian machine)",
            "run it on Debian, or leave --engine out",
        )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        r = subprocess.run(
            ["apt-get", "download", *ENGINE_PACKAGES], cwd=work, check=False, capture_output=True, text=True
        )
        if r.returncode != 0:
            die(
                f"apt-get download {' '.join(ENGINE_PACKAGES)} failed: {r.stderr.strip()[-800:]}",
                "apt-get update",
            )
        root = work / "root"
        for deb in sorted(work.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
        members = [root / f for f in ENGINE_FILES]
        members += sorted((root / "lib/x86_64-linux-gnu").glob("libdevmapper.so.*"))
        missing = [str(m.relative_to(root)) for m in members if not m.exists()]
        if missing:
            die(
                f"Debian's packages lack {', '.join(missing)}",
                "check ENGINE_PACKAGES against this Debian release",
            )
        with tarfile.open(out / "docker-bin.tar.xz", "w:xz") as tar:
            for m in members:
                tar.add(m, arcname=f"docker-bin/{m.name}")
    print("docker-bin.tar.xz = " + ", ".join(Path(f).name for f in ENGINE_FILES) + " + libdevmapper")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".carry", type=Path)
    ap.add_argument("--python-version", default="3.12", help="the GPU host's Python (default 3.12)")
    ap.add_argument("--platform", default="manylinux2014_x86_64")
    ap.add_argument("--engine", action="store_true", help="also carry Debian's Docker engine binaries")
    args = ap.parse_args()
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    (out / "whl").mkdir(parents=True)
    wheels(out / "whl", args.python_version, args.platform)
    nccl_tests(out)
    if args.engine:
        engine(out)
    files = sorted(p for p in out.rglob("*") if p.is_file() and p.name != "SHA256SUMS")
    lines = [f"{hashlib.sha256(p.read_bytes()).hexdigest()}  {p.relative_to(out)}" for p in files]
    (out / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    total = sum(p.stat().st_size for p in files)
    n_wheels = len(list((out / "whl").glob("*.whl")))
    print(f"{out}: {len(files)} files, {total / 2**20:.1f} MiB ({n_wheels} wheels)")
    if total > CARRY_LIMIT:
        die(
            f"the bundle is {total / 2**20:.1f} MiB, over the 64 MiB a device call carries",
            "leave --engine out",
        )


if __name__ == "__main__":
    main()
