#!/usr/bin/env python3
"""A renter's time to ready (issue 36): ``docker pull`` → container → ``import torch`` → CUDA libraries
loaded, our layered image against the same content as one fat layer, at emulated network rates.

    PYTHONPATH=. .venv/bin/python scripts/bench_time_to_ready.py --out bench-time-to-ready.json

1. Images (the machine's dockerd): ours is the smoke matrix's runtime image (``imagesmith build --matrix
   smoke``, found by its labels; built once here when absent). The fat image is the same file system as one
   layer (``docker export`` of a container of ours, ``docker import`` with our image's ENV and WORKDIR). Both
   are pushed (the engine's own gzip) to a registry of ours on loopback.
2. Network: a network namespace of ours, joined to the host by a veth pair; the registry serves the same
   blobs from inside it (read-only) and ``tc`` (tbf) limits what it sends to each ``--rates`` Mbit/s.
3. Engine: a dockerd of ours (own data root, exec root, containerd and socket; the machine's dockerd and its
   images are never touched): its image store is emptied before every pull. It pulls with its default 3
   concurrent downloads and extracts layers in order, as a renter's Docker Engine does.
4. Per rate and round (the two images alternating): seconds of the pull (the engine's progress events with
   their times: last "Download complete" = download, the rest of the pull = the extraction tail; per-layer
   extraction summed = extraction busy), bytes the veth carried, then ``docker run`` of the image's Python:
   container start (until Python's first line), ``import torch``, the CUDA libraries loaded (cudart, cuBLAS,
   cuBLASLt, cuDNN, NCCL, … with ctypes from the wheels, ``torch.cuda.is_available()``: no GPU here, so the
   first CUDA *operation* is a GPU host's to measure). Time to ready = pull start → that point.
5. What the first ``import torch`` reads (ours, once): the image's layer files are dropped from the page
   cache (``posix_fadvise`` DONTNEED, per file: nobody else's cache), ``import torch`` and the CUDA libraries
   run once more (cold cache: that time is reported too), then every layer file whose atime moved (relatime:
   extracted files have atime = mtime, so the first read moves it) and its resident bytes (``fincore``: what
   was read, readahead included).
6. Probes: can this engine pull a zstd layer (a one-file OCI image with an ``application/vnd.oci.image.layer.
   v1.tar+zstd`` layer, pushed through the registry API, pulled by the engine)? What gzip level and zstd would
   change on our largest layer: compressed bytes and single-thread decompression seconds (``--codec-probe``).

Prints the ratios ours / fat at each rate. Bounded: each pull stops after ``--pull-timeout`` seconds (the
row is kept, marked, with the bytes it got). Tears down what it made (namespace, veth, registries, engine,
the fat image and its tags) also when killed; keeps our smoke image for the next run.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import requests

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.localinfra import PrivateDockerd, private_dockerd, temp_registry  # noqa: E402

DOCKER = "docker"
NS = "isttr0"  # the network namespace and the stem of its veth pair
HOST_IP, NS_IP = "10.236.36.1", "10.236.36.2"
NS_REGISTRY = f"{NS_IP}:5000"
#: the private engine's own bridge (no route out: containers run with --network none)
BRIDGE = ("isttrbr0", "172.30.237.1/24")
REPO_OURS, REPO_FAT = "ttr/ours", "ttr/fat"
SMOKE_CELL = "2.11.0-cu130-py3.11-runtime-debian12"
FLOOR_GB = 15.0
METRICS = ("pull_s", "download_s", "extract_tail_s", "container_start_s", "ready_torch_s", "ready_cuda_s")

#: what runs in the container: times (the kernel's clock, shared with the host) and which libraries loaded
PROBE = r"""
import time; t0 = time.time()
import ctypes, glob, json, os
import torch; t1 = time.time()
maps = open("/proc/self/maps").read()
site = os.path.dirname(os.path.dirname(torch.__file__))
loaded, already = [], []
for stem in ("libcudart.so", "libcublas.so", "libcublasLt.so", "libcudnn.so", "libnccl.so", "libnvrtc.so",
             "libcusparse.so", "libcufft.so", "libnvJitLink.so"):
    hits = sorted(glob.glob(os.path.join(site, "nvidia", "**", stem + "*"), recursive=True))
    if not hits:
        continue
    (already if os.path.realpath(hits[0]) in maps else loaded).append(os.path.basename(hits[0]))
    ctypes.CDLL(hits[0], mode=ctypes.RTLD_GLOBAL)
cuda = torch.cuda.is_available(); t2 = time.time()
print(json.dumps({"t0": t0, "t_torch": t1, "t_cuda": t2, "loaded_by_probe": loaded,
                  "loaded_by_import_torch": already, "cuda_available": cuda, "torch": torch.__version__}))
"""


# ---- pure parts (tests/unit/test_bench_time_to_ready.py) ---------------------------------------------------


def parse_rates(text: str) -> list[int]:
    """``"1000,200,50"`` → ``[1000, 200, 50]`` (Mbit/s, each 1–100000, no repeats)."""
    rates = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or not 1 <= int(part) <= 100_000:
            raise ValueError(
                f"--rates: {part!r} is not a rate in Mbit/s (1-100000), e.g. --rates 1000,200,50"
            )
        if int(part) in rates:
            raise ValueError(f"--rates: {part} is given twice")
        rates.append(int(part))
    return rates


def parse_rounds(text: str, rates: list[int]) -> dict[int, int]:
    """Rounds per rate: one number for every rate, or one per rate (``"2,2,1"``), each ≥ 1."""
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise ValueError(f"--rounds: {text!r} is not a count ≥ 1 (or one per rate, e.g. 2,2,1)")
    if len(parts) == 1:
        parts = parts * len(rates)
    if len(parts) != len(rates):
        raise ValueError(f"--rounds: {len(parts)} counts for {len(rates)} rates; give one, or one per rate")
    return {r: int(p) for r, p in zip(rates, parts, strict=True)}


def pull_phases(events: list[tuple[float, dict[str, Any]]], start: float, end: float) -> dict[str, Any]:
    """The engine's pull progress events (``(time, event)``) → seconds of download and extraction.

    download_s: start → the last layer's "Download complete" (or "Already exists"); extract_tail_s: the rest
    of the pull; extract_busy_s: each layer's first "Extracting" → its "Pull complete", summed (the engine
    extracts one layer at a time, so this is the extraction work the downloads did not hide)."""
    done: dict[str, float] = {}
    first_extract: dict[str, float] = {}
    complete: dict[str, float] = {}
    for t, ev in events:
        layer, status = str(ev.get("id", "")), str(ev.get("status", ""))
        if status in ("Download complete", "Already exists"):
            done[layer] = t
        elif status == "Extracting":
            first_extract.setdefault(layer, t)
        elif status == "Pull complete":
            complete[layer] = t
    last_download = max(done.values(), default=end)
    busy = sum(complete[k] - first_extract[k] for k in complete if k in first_extract)
    return {
        "pull_s": end - start,
        "download_s": last_download - start,
        "extract_tail_s": end - last_download,
        "extract_busy_s": busy,
        "layers": len(complete),
    }


def ratios(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per rate: the median of each metric over the rounds, per image, and each image / fat (``None`` where
    a figure is missing, e.g. a pull that timed out)."""
    out: dict[str, dict[str, Any]] = {}
    for rate in sorted({int(r["rate_mbit"]) for r in rows}, reverse=True):
        per: dict[str, dict[str, float | None]] = {}
        here = [r for r in rows if r["rate_mbit"] == rate]
        images = [i for i in ("ours", "sorted", "fat") if any(r["image"] == i for r in here)]
        for image in images:
            mine = [r for r in rows if r["rate_mbit"] == rate and r["image"] == image]
            per[image] = {}
            for m in (*METRICS, "bytes"):
                vals = [float(r[m]) for r in mine if r.get(m) is not None and not r.get("timed_out")]
                per[image][m] = statistics.median(vals) if vals else None
        out[str(rate)] = dict(per)
        for image in images:
            if image == "fat":
                continue
            ratio = {}
            for m in (*METRICS, "bytes"):
                a, b = per[image][m], per.get("fat", {}).get(m)
                ratio[m] = a / b if a is not None and b else None
            out[str(rate)][f"{image}_over_fat"] = ratio
    return out


def tbf_args(mbit: int) -> list[str]:
    """``tc qdisc … tbf`` arguments for *mbit* Mbit/s: a burst of at least 4 ms of the rate (≥ 32 KiB)."""
    burst = max(32 * 1024, mbit * 1_000_000 // 8 // 250)
    return ["tbf", "rate", f"{mbit}mbit", "burst", str(burst), "latency", "100ms"]


# ---- the machinery -----------------------------------------------------------------------------------------


def sh(*cmd: str, env: dict[str, str] | None = None, timeout: float | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, timeout=timeout)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return proc.stdout


def quiet(*cmd: str, env: dict[str, str] | None = None) -> None:
    subprocess.run(cmd, capture_output=True, check=False, env=env, timeout=300)


def find_ours() -> str:
    """The newest image of the smoke matrix's runtime cell on the machine's dockerd ("" when none)."""
    out = sh(
        DOCKER, "images", "-q", "--no-trunc", "--filter", "label=io.imagesmith.matrix=smoke",
        "--filter", f"label=io.imagesmith.cell={SMOKE_CELL}",
    )  # fmt: skip
    ids = [i for i in out.split() if i]
    return ids[0] if ids else ""


def ensure_ours(tmp: Path) -> tuple[str, bool]:
    image = find_ours()
    if image:
        return image, False
    print("building the smoke image (imagesmith build --matrix smoke) ...", file=sys.stderr, flush=True)
    summary = tmp / "smoke-build.json"
    sh(sys.executable, "-m", "imagesmith", "build", "--matrix", "smoke", "--summary", str(summary),
       env=dict(os.environ, PYTHONPATH=str(REPO)))  # fmt: skip
    return str(json.loads(summary.read_text())["cells"][0]["image_id"]), True


def make_fat(image: str, tag: str) -> dict[str, Any]:
    """*image*'s file system as one layer (export | import), with its ENV and WORKDIR."""
    config = json.loads(sh(DOCKER, "image", "inspect", image))[0]["Config"]
    changes = [f"ENV {e.split('=', 1)[0]}={e.split('=', 1)[1]}" for e in config.get("Env") or []]
    if config.get("WorkingDir"):
        changes.append(f"WORKDIR {config['WorkingDir']}")
    cid = sh(DOCKER, "create", image).strip()
    start = time.monotonic()
    try:
        export = subprocess.Popen([DOCKER, "export", cid], stdout=subprocess.PIPE)
        args = [DOCKER, "import", *(x for c in changes for x in ("--change", c)), "-", tag]
        imported = subprocess.run(args, stdin=export.stdout, capture_output=True, text=True, check=False)
        if export.stdout is not None:
            export.stdout.close()
        export.wait()
        if imported.returncode != 0 or export.returncode != 0:
            sys.exit(f"docker export | docker import failed: {imported.stderr[-2000:]}")
    finally:
        quiet(DOCKER, "rm", "-f", cid)
    return {"export_import_s": time.monotonic() - start, "image_id": imported.stdout.strip()}


def push(image: str, ref: str) -> float:
    sh(DOCKER, "tag", image, ref)
    start = time.monotonic()
    sh(DOCKER, "push", ref)
    wall = time.monotonic() - start
    quiet(DOCKER, "rmi", ref)
    return wall


def manifest(addr: str, repo: str, ref: str) -> dict[str, Any]:
    accept = (
        "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json"
    )
    r = requests.get(f"http://{addr}/v2/{repo}/manifests/{ref}", headers={"Accept": accept}, timeout=30)
    r.raise_for_status()
    return dict(r.json())


def sorted_variant(addr: str, repo: str) -> dict[str, Any]:
    """Our image as ``:sorted``: the same blobs, the base layer first and every other layer largest first
    (the engine downloads 3 at a time in manifest order and extracts in order: the small layers come last,
    so what is left to extract after the last byte arrives is small). Layers hold disjoint files (each wheel
    its own), so the file system is the same; the config's diff_ids follow, its history is dropped."""
    m = manifest(addr, repo, "smoke")
    r = requests.get(f"http://{addr}/v2/{repo}/blobs/{m['config']['digest']}", timeout=30)
    r.raise_for_status()
    config = r.json()
    pairs = list(zip(m["layers"], config["rootfs"]["diff_ids"], strict=True))
    pairs = pairs[:1] + sorted(pairs[1:], key=lambda p: -int(p[0]["size"]))
    m["layers"] = [p[0] for p in pairs]
    config["rootfs"]["diff_ids"] = [p[1] for p in pairs]
    config.pop("history", None)
    data = json.dumps(config).encode()
    m["config"] = {**m["config"], "digest": upload_blob(addr, repo, data), "size": len(data)}
    requests.put(
        f"http://{addr}/v2/{repo}/manifests/sorted",
        data=json.dumps(m),
        headers={"Content-Type": m["mediaType"]},
        timeout=30,
    ).raise_for_status()
    return {"order_bytes": [int(x["size"]) for x in m["layers"]]}


def upload_blob(addr: str, repo: str, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    r = requests.post(f"http://{addr}/v2/{repo}/blobs/uploads/", timeout=30)
    r.raise_for_status()
    loc = r.headers["Location"]
    loc = loc if loc.startswith("http") else f"http://{addr}{loc}"
    sep = "&" if "?" in loc else "?"
    requests.put(f"{loc}{sep}digest={digest}", data=data, timeout=60).raise_for_status()
    return digest


def layer_probe(addr: str, engine: PrivateDockerd, codec: str) -> dict[str, Any]:
    """Can this engine pull an image whose one layer is *codec* (``gzip`` or ``zstd``) compressed? A one-file
    OCI image pushed through the registry API, pulled by the engine, its file read back."""
    buf = io.BytesIO()
    body = b"layer probe\n"
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("probe.txt")
        info.size, info.mtime = len(body), 0
        tar.addfile(info, io.BytesIO(body))
    raw = buf.getvalue()
    packed = gzip.compress(raw) if codec == "gzip" else sh_bytes(["zstd", "-q", "-c"], raw)
    repo = f"ttr/{codec}-probe"
    layer = upload_blob(addr, repo, packed)
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]},
        }
    ).encode()
    cfg = upload_blob(addr, repo, config)
    man = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": cfg,
            "size": len(config),
        },
        "layers": [
            {
                "mediaType": f"application/vnd.oci.image.layer.v1.tar+{codec}",
                "digest": layer,
                "size": len(packed),
            }
        ],
    }
    requests.put(
        f"http://{addr}/v2/{repo}/manifests/probe",
        data=json.dumps(man),
        headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"},
        timeout=30,
    ).raise_for_status()
    ref = f"{addr}/{repo}:probe"
    pulled = subprocess.run(
        [DOCKER, "pull", ref], env=engine.env, capture_output=True, text=True, timeout=120, check=False
    )
    read = ""
    if pulled.returncode == 0:
        cid = sh(DOCKER, "create", ref, "probe", env=engine.env).strip()
        read = sh(DOCKER, "cp", f"{cid}:/probe.txt", "-", env=engine.env)
        quiet(DOCKER, "rm", cid, env=engine.env)
        quiet(DOCKER, "rmi", ref, env=engine.env)
    return {
        "pulled": pulled.returncode == 0,
        "file_read_back": "layer probe" in read,
        "output": (pulled.stdout + pulled.stderr).strip()[-400:],
    }


def sh_bytes(cmd: list[str], data: bytes) -> bytes:
    return subprocess.run(cmd, input=data, capture_output=True, check=True, timeout=60).stdout


def codec_support(addr: str, engine: PrivateDockerd) -> dict[str, Any]:
    return {
        "engine": sh(DOCKER, "version", "--format", "{{.Server.Version}}", env=engine.env).strip(),
        "containerd": sh("containerd", "--version").strip(),
        "gzip": layer_probe(addr, engine, "gzip"),
        "zstd": layer_probe(addr, engine, "zstd"),
    }


def codec_probe(addr: str, repo: str, tmp: Path) -> dict[str, Any]:
    """Our largest layer: compressed bytes and single-thread decompression seconds, gzip 1/9 and zstd 3/9
    beside the engine's own gzip blob (Go's compress/gzip, read back by Python's zlib)."""
    m = manifest(addr, repo, "smoke")
    big = max(m["layers"], key=lambda x: int(x["size"]))
    blob = tmp / "largest.gz"
    with requests.get(f"http://{addr}/v2/{repo}/blobs/{big['digest']}", stream=True, timeout=300) as r:
        r.raise_for_status()
        with blob.open("wb") as f:
            shutil.copyfileobj(r.raw, f, 1 << 20)
    raw = tmp / "largest.tar"
    start = time.monotonic()
    with gzip.open(blob) as src, raw.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    out: dict[str, Any] = {
        "layer_bytes": raw.stat().st_size,
        "engine_gzip": {"bytes": blob.stat().st_size, "decompress_s": time.monotonic() - start},
    }
    for name, comp, decomp in (
        ("gzip-1", ["gzip", "-1", "-c"], ["gzip", "-d", "-c"]),
        ("gzip-9", ["gzip", "-9", "-c"], ["gzip", "-d", "-c"]),
        ("zstd-3", ["zstd", "-3", "-q", "-c", "-T1"], ["zstd", "-d", "-q", "-c"]),
        ("zstd-9", ["zstd", "-9", "-q", "-c", "-T1"], ["zstd", "-d", "-q", "-c"]),
    ):
        packed = tmp / f"largest.{name}"
        start = time.monotonic()
        with raw.open("rb") as src, packed.open("wb") as dst:
            subprocess.run(comp, stdin=src, stdout=dst, check=True)
        comp_s = time.monotonic() - start
        start = time.monotonic()
        with packed.open("rb") as src:
            subprocess.run(decomp, stdin=src, stdout=subprocess.DEVNULL, check=True)
        out[name] = {
            "bytes": packed.stat().st_size,
            "compress_s": comp_s,
            "decompress_s": time.monotonic() - start,
        }
        packed.unlink()
    blob.unlink()
    raw.unlink()
    return out


@contextlib.contextmanager
def netns() -> Iterator[None]:
    """The namespace, the veth pair (host ``<NS>h`` / namespace ``<NS>n``) and addresses; removed after."""
    quiet("ip", "netns", "del", NS)
    try:
        sh("ip", "netns", "add", NS)
        sh("ip", "link", "add", f"{NS}h", "type", "veth", "peer", "name", f"{NS}n")
        sh("ip", "link", "set", f"{NS}n", "netns", NS)
        sh("ip", "addr", "add", f"{HOST_IP}/30", "dev", f"{NS}h")
        sh("ip", "link", "set", f"{NS}h", "up")
        for cmd in (["addr", "add", f"{NS_IP}/30", "dev", f"{NS}n"], ["link", "set", f"{NS}n", "up"],
                    ["link", "set", "lo", "up"]):  # fmt: skip
            sh("ip", "netns", "exec", NS, "ip", *cmd)
        yield
    finally:
        quiet("ip", "link", "del", f"{NS}h")
        quiet("ip", "netns", "del", NS)


def set_rate(mbit: int) -> None:
    sh("ip", "netns", "exec", NS, "tc", "qdisc", "replace", "dev", f"{NS}n", "root", *tbf_args(mbit))


@contextlib.contextmanager
def ns_registry(data: Path, tmp: Path) -> Iterator[None]:
    """docker-registry inside the namespace, serving *data* read-only on NS_REGISTRY."""
    config = tmp / "ns-registry.yml"
    config.write_text(
        "version: 0.1\nlog:\n  level: error\nstorage:\n"
        f"  filesystem:\n    rootdirectory: {data}\n  maintenance:\n    readonly:\n      enabled: true\n"
        f"http:\n  addr: {NS_REGISTRY}\n  secret: imagesmith-bench\n"
    )
    binary = os.environ.get("IMAGESMITH_TEST_REGISTRY_BIN", "/usr/bin/docker-registry")
    log = (tmp / "ns-registry.log").open("ab")
    proc = subprocess.Popen(["ip", "netns", "exec", NS, binary, "serve", str(config)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if requests.get(f"http://{NS_REGISTRY}/v2/", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                sys.exit(f"the registry in namespace {NS} did not start: {tmp / 'ns-registry.log'}")
            time.sleep(0.2)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def rx_bytes() -> int:
    return int(Path(f"/sys/class/net/{NS}h/statistics/rx_bytes").read_text())


def empty_store(engine: PrivateDockerd) -> None:
    quiet(DOCKER, "container", "prune", "-f", env=engine.env)
    ids = sh(DOCKER, "images", "-q", "--no-trunc", env=engine.env).split()
    if ids:
        quiet(DOCKER, "rmi", "-f", *sorted(set(ids)), env=engine.env)
    quiet(DOCKER, "image", "prune", "-af", env=engine.env)


def pull(engine: PrivateDockerd, ref: str, timeout: float) -> dict[str, Any]:
    """One pull through the engine's API, each progress event timed."""
    import docker  # the SDK imagesmith depends on

    api = docker.APIClient(base_url=engine.host, timeout=int(timeout) + 60)
    repo, tag = ref.rsplit(":", 1)
    events: list[tuple[float, dict[str, Any]]] = []
    rx0, start = rx_bytes(), time.time()
    timed_out = False
    for ev in api.pull(repo, tag=tag, stream=True, decode=True):
        now = time.time()
        events.append((now, ev))
        if "error" in ev:
            sys.exit(f"pull of {ref} failed: {ev['error']}")
        if now - start > timeout:
            timed_out = True
            break
    end = time.time()
    api.close()
    row = pull_phases(events, start, end)
    row.update({"bytes": rx_bytes() - rx0, "start": start, "end": end, "timed_out": timed_out})
    return row


class Engine(Protocol):
    """What the probe and the page-cache count need of an engine: the environment that reaches it."""

    @property
    def env(self) -> dict[str, str]: ...


class MachineEngine:
    """The machine's own dockerd (``--bytes-read-only``: only reads its image, changes nothing in it)."""

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ)


def run_probe(engine: Engine, ref: str, python: str) -> dict[str, Any]:
    t_run = time.time()
    out = sh(
        DOCKER, "run", "--rm", "--network", "none", "--entrypoint", python, ref, "-c", PROBE,
        env=engine.env, timeout=600,
    )  # fmt: skip
    probe: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    probe["t_run"] = t_run
    return probe


def layer_dirs(engine: Engine, ref: str) -> list[Path]:
    data = json.loads(sh(DOCKER, "image", "inspect", ref, env=engine.env))[0]["GraphDriver"]["Data"]
    dirs = [data["UpperDir"], *(data.get("LowerDir") or "").split(":")]
    return [Path(d) for d in dirs if d]


def files(dirs: list[Path]) -> Iterator[Path]:
    for d in dirs:
        for root, _, names in os.walk(d):
            for n in names:
                p = Path(root, n)
                if p.is_file() and not p.is_symlink():
                    yield p


def resident_pages(paths: list[Path]) -> dict[Path, int]:
    """Bytes of each file in the page cache (``fincore``), files with none left out."""
    out: dict[Path, int] = {}
    for i in range(0, len(paths), 500):
        text = sh("fincore", "--bytes", "--json", "--output", "RES,FILE", *map(str, paths[i : i + 500]))
        for entry in json.loads(text)["fincore"]:
            if int(entry["res"]) > 0:
                out[Path(entry["file"])] = int(entry["res"])
    return out


def bytes_read(engine: Engine, ref: str, python: str) -> dict[str, Any]:
    """Drop the image's files from the page cache, run the probe once, count what it read: the pages of the
    image's files resident afterwards (``fincore``; readahead included)."""
    dirs = layer_dirs(engine, ref)
    sh("sync", "-f", str(dirs[0]))
    total = nfiles = 0
    for p in files(dirs):
        total += p.stat().st_size
        nfiles += 1
        with contextlib.suppress(OSError):
            fd = os.open(p, os.O_RDONLY | os.O_NOATIME)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
    paths = list(files(dirs))
    before = resident_pages(paths)  # what the drop could not drop (dirty, or mapped elsewhere)
    probe = run_probe(engine, ref, python)
    after = resident_pages(paths)
    resident = {p: n - before.get(p, 0) for p, n in after.items() if n > before.get(p, 0)}
    touched = list(resident)
    biggest = sorted(touched, key=lambda p: p.stat().st_size, reverse=True)[:12]
    return {
        "image_files": nfiles,
        "image_bytes": total,
        "touched_files": len(touched),
        "touched_file_bytes": sum(p.stat().st_size for p in touched),
        "read_bytes_resident": sum(resident.values()),
        "resident_before_probe": sum(before.values()),
        "read_fraction": sum(resident.values()) / total if total else None,
        "largest_touched": [
            {"file": p.name, "bytes": p.stat().st_size, "read": resident[p]} for p in biggest
        ],
        "cold_cache_import_torch_s": probe["t_torch"] - probe["t0"],
        "cold_cache_cuda_libs_s": probe["t_cuda"] - probe["t_torch"],
        "cold_cache_container_start_s": probe["t0"] - probe["t_run"],
        "loaded_by_import_torch": probe["loaded_by_import_torch"],
        "loaded_by_probe": probe["loaded_by_probe"],
    }


def ref_of(image: str) -> str:
    return {
        "ours": f"{NS_REGISTRY}/{REPO_OURS}:smoke",
        "sorted": f"{NS_REGISTRY}/{REPO_OURS}:sorted",
        "fat": f"{NS_REGISTRY}/{REPO_FAT}:smoke",
    }[image]


def measure(engine: PrivateDockerd, image: str, rate: int, python: str, timeout: float) -> dict[str, Any]:
    ref = ref_of(image)
    empty_store(engine)
    row: dict[str, Any] = {"image": image, "rate_mbit": rate, **pull(engine, ref, timeout)}
    if row["timed_out"]:
        return row
    probe = run_probe(engine, ref, python)
    row.update(
        {
            "container_start_s": probe["t0"] - probe["t_run"],
            "import_torch_s": probe["t_torch"] - probe["t0"],
            "cuda_libs_s": probe["t_cuda"] - probe["t_torch"],
            "ready_torch_s": probe["t_torch"] - row["start"],
            "ready_cuda_s": probe["t_cuda"] - row["start"],
            "torch": probe["torch"],
        }
    )
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="1000,200,50", help="emulated rates, Mbit/s (comma-separated)")
    ap.add_argument("--rounds", default="1", help="rounds per rate: one count, or one per rate (2,2,1)")
    ap.add_argument("--pull-timeout", type=float, default=900.0, help="seconds one pull may take")
    ap.add_argument(
        "--sorted-rates",
        default="",
        help="rates at which our image with its layers largest first is measured too",
    )
    ap.add_argument("--codec-probe", action="store_true", help="gzip levels / zstd on our largest layer")
    ap.add_argument(
        "--bytes-read-only",
        action="store_true",
        help="only step 5, on the machine's dockerd and its copy of our image (no pulls)",
    )
    ap.add_argument("--keep-fat", action="store_true", help="keep the fat image on the machine's dockerd")
    ap.add_argument("--out", type=Path, default=Path("bench-time-to-ready.json"))
    args = ap.parse_args()
    try:
        rates = parse_rates(args.rates)
        rounds = parse_rounds(args.rounds, rates)
        sorted_at = parse_rates(args.sorted_rates) if args.sorted_rates else []
        if set(sorted_at) - set(rates):
            raise ValueError(f"--sorted-rates: {sorted(set(sorted_at) - set(rates))} not in --rates")
    except ValueError as e:
        ap.error(str(e))
    if os.geteuid() != 0:
        sys.exit("needs root: a network namespace, a veth pair, tc and a dockerd of its own")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("terminated"))
    if args.bytes_read_only:
        ours = find_ours()
        if not ours:
            sys.exit(
                "no smoke runtime image on this machine's dockerd: run `imagesmith build --matrix smoke`"
            )
        labels = json.loads(sh(DOCKER, "image", "inspect", ours))[0]["Config"]["Labels"]
        got = bytes_read(MachineEngine(), ours, f"{labels['io.imagesmith.venv']}/bin/python")
        args.out.write_text(json.dumps({"command": " ".join(sys.argv), "bytes_read": got}, indent=2) + "\n")
        print(json.dumps(got, indent=2))
        return
    free = shutil.disk_usage(tempfile.gettempdir()).free / 1e9
    if free - 25 < FLOOR_GB:
        sys.exit(f"needs ~25 GB; {free:.1f} GB free would leave less than {FLOOR_GB:.0f} GB: stopped")
    tmp = Path(tempfile.mkdtemp(prefix="imagesmith-bench-ttr-"))
    results: dict[str, Any] = {"host": {"cpus": os.cpu_count()}, "command": " ".join(sys.argv), "rows": []}
    fat_tag = "imagesmith-bench-ttr/fat:smoke"
    try:
        ours, built = ensure_ours(tmp)
        labels = json.loads(sh(DOCKER, "image", "inspect", ours))[0]["Config"]["Labels"]
        python = f"{labels['io.imagesmith.venv']}/bin/python"
        results["ours"] = {"image_id": ours, "built_here": built}
        results["fat"] = make_fat(ours, fat_tag)
        with private_dockerd(tmp / "engine", bridge=BRIDGE, insecure=(NS_REGISTRY,)) as engine:
            with temp_registry(tmp / "registry") as reg:
                results["ours"]["push_s"] = push(ours, f"{reg.addr}/{REPO_OURS}:smoke")
                results["fat"]["push_s"] = push(fat_tag, f"{reg.addr}/{REPO_FAT}:smoke")
                for key, repo in (("ours", REPO_OURS), ("fat", REPO_FAT)):
                    m = manifest(reg.addr, repo, "smoke")
                    sizes = [int(x["size"]) for x in m["layers"]]
                    results[key].update(
                        {"layers": len(sizes), "bytes": sum(sizes), "largest_layer": max(sizes)}
                    )
                if sorted_at:
                    results["sorted"] = sorted_variant(reg.addr, REPO_OURS)
                results["layer_codecs"] = codec_support(reg.addr, engine)
                print(f"layer codecs: {results['layer_codecs']}", file=sys.stderr, flush=True)
            with netns(), ns_registry(tmp / "registry" / "data", tmp):
                for rate in rates:
                    set_rate(rate)
                    for i in range(rounds[rate]):
                        order = ["ours", "fat"] if i % 2 == 0 else ["fat", "ours"]
                        if rate in sorted_at:
                            order.insert(1, "sorted")
                        for image in order:
                            row = measure(engine, image, rate, python, args.pull_timeout)
                            results["rows"].append(row)
                            print(json.dumps(row), file=sys.stderr, flush=True)
                set_rate(max(rates))
                empty_store(engine)
                pull(engine, f"{NS_REGISTRY}/{REPO_OURS}:smoke", args.pull_timeout)
                results["bytes_read"] = bytes_read(engine, f"{NS_REGISTRY}/{REPO_OURS}:smoke", python)
                empty_store(engine)
                if args.codec_probe:  # last: CPU-bound, it would slow the pulls beside it
                    results["codec_probe"] = codec_probe(NS_REGISTRY, REPO_OURS, tmp)
    finally:
        results["ratios"] = ratios(results["rows"])  # also of a run stopped part way (the rows it has)
        if not args.keep_fat:
            quiet(DOCKER, "rmi", fat_tag)
        shutil.rmtree(tmp, ignore_errors=True)
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    for rate, r in results["ratios"].items():
        for image in ("ours", "sorted"):
            if f"{image}_over_fat" not in r:
                continue
            line = ", ".join(
                f"{m} {r[image][m]:.1f}/{r['fat'][m]:.1f} = {r[f'{image}_over_fat'][m]:.2f}x"
                for m in ("download_s", "pull_s", "ready_torch_s", "ready_cuda_s")
                if r[f"{image}_over_fat"][m] is not None
            )
            print(f"{rate} Mbit/s: {image}/fat {line}")
    br = results.get("bytes_read", {})
    if br:
        print(
            f"first import torch + CUDA libraries read {br['read_bytes_resident']:,} B"
            f" of {br['image_bytes']:,} B ({100 * br['read_fraction']:.1f} %),"
            f" {br['touched_files']} files touched"
        )


if __name__ == "__main__":
    main()
