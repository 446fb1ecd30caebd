"""Copy throughput and the 2-registry push ratio with blob verification off and on, side by side in one run
(issue 18; docs/benchmarks.md).

A synthetic multi-layer image (random layers, so nothing compresses or deduplicates) is pushed through the
registry API to a fresh registry r1 (what the engine's one push does), then copied r1 → r2 (a second fresh
registry), for every mode, the modes interleaved round after round:

- ``before``: the registry client of the commit before issue 18 (read from git: ``--baseline REF``);
- ``off``: today's client trusting a blob the destination holds on HEAD alone (the old trust);
- ``head``: the default (HEAD digest and size of blobs already there);
- ``read``: blobs already there are read back in full;
- ``full``: ``read`` plus every copied blob read back (the nightly's verify).

Per mode: the copy's throughput (MiB/s), the push ratio (push to r1 + copy to r2) / push to r1, and the rerun
(every blob already there) — the median of the rounds.

usage: .venv/bin/python scripts/bench_copy.py [--layer-mib 120,80,40,25,25,10] [--rounds 5]
                                             [--baseline bfc0f6a] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith import registry as current  # noqa: E402
from tests.localinfra import temp_registry  # noqa: E402


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def baseline_module(ref: str, tmp: Path) -> ModuleType:
    """imagesmith/registry.py as it was at *ref*, loaded beside today's package."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{ref}:imagesmith/registry.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = tmp / "registry_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("registry_before", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["registry_before"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def push(client: Any, repo: str, layers: list[bytes], module: ModuleType) -> str:
    config = json.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}}).encode()
    for blob in [*layers, config]:
        client.upload_blob(
            repo, sha(blob), lambda b=blob: iter([b[i : i + (8 << 20)] for i in range(0, len(b), 8 << 20)])
        )
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": current.OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha(config),
                "size": len(config),
            },
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha(x), "size": len(x)}
                for x in layers
            ],
        }
    ).encode()
    manifest = module.ManifestData(body=body, media_type=current.OCI_MANIFEST, digest=sha(body))
    return str(client.put_manifest(repo, "v1", manifest))


def one_round(mode: str, layers: list[bytes], tmp: Path, before: ModuleType) -> dict[str, float]:
    module = before if mode == "before" else current
    size = sum(len(x) for x in layers)
    with temp_registry(tmp / f"{mode}-r1") as r1, temp_registry(tmp / f"{mode}-r2") as r2:
        c1 = module.RegistryClient(r1.addr, insecure=True, credentials=None)
        c2 = module.RegistryClient(r2.addr, insecure=True, credentials=None)
        t = time.monotonic()
        digest = push(c1, "bench/img", layers, module)
        push_s = time.monotonic() - t
        kw = {} if mode == "before" else {"verify": mode}
        t = time.monotonic()
        got, sent = module.copy_manifest(c1, "bench/img", digest, c2, "bench/img", **kw)
        copy_s = time.monotonic() - t
        assert got == digest, (got, digest)
        assert sent >= size, (sent, size)
        t = time.monotonic()
        module.copy_manifest(c1, "bench/img", digest, c2, "bench/img", **kw)
        rerun_s = time.monotonic() - t
    return {
        "push_s": push_s,
        "copy_s": copy_s,
        "copy_mib_s": size / (1 << 20) / copy_s,
        "ratio": (push_s + copy_s) / push_s,
        "rerun_s": rerun_s,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer-mib", default="120,80,40,25,25,10", help="layer sizes in MiB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", default="bfc0f6a", help="git ref of the client before issue 18")
    ap.add_argument("--modes", default="before,off,head,read,full")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    modes = args.modes.split(",")
    sizes = [int(x) for x in args.layer_mib.split(",")]
    layers = [os.urandom(n << 20) for n in sizes]
    rows: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        before = baseline_module(args.baseline, tmp)
        for r in range(args.rounds):
            for mode in modes:
                rows[mode].append(one_round(mode, layers, tmp / f"round{r}", before))
    size_mib = sum(sizes)
    summary = {m: {k: statistics.median(x[k] for x in rows[m]) for k in rows[m][0]} for m in modes}
    print(f"image: layers of {args.layer_mib} MiB = {size_mib} MiB, {args.rounds} rounds (median)")
    print(f"{'mode':<7} {'push r1 s':>9} {'copy s':>7} {'MiB/s':>7} {'ratio':>6} {'rerun s':>8}")
    for m in modes:
        s = summary[m]
        print(
            f"{m:<7} {s['push_s']:9.2f} {s['copy_s']:7.2f} {s['copy_mib_s']:7.1f} {s['ratio']:6.3f} "
            f"{s['rerun_s']:8.2f}"
        )
    if args.out:
        args.out.write_text(json.dumps({"size_mib": size_mib, "rounds": rows, "median": summary}, indent=2))


if __name__ == "__main__":
    main()
