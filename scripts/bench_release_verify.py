"""What release's blob verification costs (issue 25; docs/benchmarks.md): every blob it promotes is read back
and hashed once per (registry, digest), remembered in ``<cache>/release/verified-blobs.json``.

A synthetic image (random, incompressible layers, the imagesmith labels release reads) is pushed through the
registry API to a fresh registry r1 as the candidate, with a signed passing validation report; then one cell
with the registries r1 and r2 (a second fresh registry) is released, per mode, a fresh pair each round, the
modes interleaved:

- ``remembered``: the memory already holds every blob (what release did before issue 25: copy at
  ``--verify head``, nothing read back);
- ``first``: an empty memory: the copy r1 → r2, then every blob read back in r1 and r2;

and, on the same pair after ``first``: ``rerun`` (the memory has them: no blob read) and ``forgotten`` (a
rerun with an empty memory, e.g. another machine: every blob read again, nothing copied).

usage: .venv/bin/python scripts/bench_release_verify.py [--layer-mib 120,80,40,25,25,10] [--rounds 3]
                                                         [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith.refs import Registry  # noqa: E402
from imagesmith.registry import OCI_MANIFEST, ManifestData, RegistryClient  # noqa: E402
from imagesmith.release import VerifiedBlobs, collect_reports, release_cells  # noqa: E402
from tests.integration.test_release import TRUSTED, cell, image_labels, write_report  # noqa: E402
from tests.localinfra import temp_registry  # noqa: E402

REPO_NAME = "bench/release"


def sha(data: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(data).hexdigest()


def pieces(blob: bytes) -> Callable[[], Iterator[bytes]]:
    """The chunks of *blob* (8 MiB), as upload_blob takes them (callable again after a fault)."""
    return lambda: iter([blob[i : i + (8 << 20)] for i in range(0, len(blob), 8 << 20)])


def push_candidate(client: RegistryClient, layers: list[bytes]) -> tuple[str, list[tuple[str, int]]]:
    labels = image_labels(cell("a", ()))
    config = json.dumps(
        {"architecture": "amd64", "os": "linux", "config": {"Labels": labels}, "rootfs": {"type": "layers"}}
    ).encode()
    for blob in [*layers, config]:
        client.upload_blob(REPO_NAME, sha(blob), pieces(blob))
    descs = [
        {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": sha(x), "size": len(x)}
        for x in layers
    ]
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha(config),
                "size": len(config),
            },
            "layers": descs,
        }
    ).encode()
    digest = client.put_manifest(
        REPO_NAME, "a-candidate", ManifestData(body=body, media_type=OCI_MANIFEST, digest=sha(body))
    )
    return digest, [(sha(config), len(config))] + [(sha(x), len(x)) for x in layers]


def release(targets: tuple[Registry, ...], reports: Path, tmp: Path, memory: VerifiedBlobs) -> float:
    def make(t: Registry) -> RegistryClient:
        return RegistryClient(t.host, name=t.name, insecure=True, credentials=None)

    started = time.monotonic()
    out = release_cells(
        [cell("a", targets)],
        matrix="t",
        reports=collect_reports([reports], TRUSTED),
        index_file=tmp / "index.json",
        client_for=make,
        trusted=TRUSTED,
        verified=memory,
    )
    took = time.monotonic() - started
    out.raise_for_refusals()
    return took


def one_round(layers: list[bytes], tmp: Path) -> dict[str, float]:
    row: dict[str, float] = {}
    for mode in ("remembered", "first"):
        with temp_registry(tmp / f"{mode}-r1") as r1, temp_registry(tmp / f"{mode}-r2") as r2:
            c1 = RegistryClient(r1.addr, name="r1", insecure=True, credentials=None)
            digest, blobs = push_candidate(c1, layers)
            write_report(tmp / f"{mode}-reports", f"{r1.addr}/{REPO_NAME}@{digest}", "passed")
            targets = tuple(
                Registry(name=n, kind="generic", host=r.addr, repository=REPO_NAME, insecure=True)
                for n, r in (("r1", r1), ("r2", r2))
            )
            memory = VerifiedBlobs(tmp / f"{mode}-verified.json")
            if mode == "remembered":
                for host in (r1.addr, r2.addr):
                    for d, _ in blobs:
                        memory.add(host, d)
            row[mode] = release(targets, tmp / f"{mode}-reports", tmp / mode, memory)
            if mode == "first":
                row["rerun"] = release(targets, tmp / f"{mode}-reports", tmp / mode, memory)
                row["forgotten"] = release(
                    targets, tmp / f"{mode}-reports", tmp / mode, VerifiedBlobs(tmp / "empty.json")
                )
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer-mib", default="120,80,40,25,25,10", help="layer sizes in MiB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sizes = [int(x) for x in args.layer_mib.split(",")]
    layers = [os.urandom(n << 20) for n in sizes]
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp_name:
        one_round(
            [os.urandom(1 << 20)], Path(tmp_name) / "warm-up"
        )  # imports, first connections: not counted
        for r in range(args.rounds):
            rows.append(one_round(layers, Path(tmp_name) / f"round{r}"))
    median = {k: statistics.median(row[k] for row in rows) for k in rows[0]}
    median["first_minus_remembered"] = statistics.median(row["first"] - row["remembered"] for row in rows)
    size = sum(sizes)
    print(f"image: layers of {args.layer_mib} MiB = {size} MiB, 2 registries, {args.rounds} rounds (median)")
    for k, v in median.items():
        print(f"{k:<11} {v:7.2f} s")
    paired = statistics.median(row["first"] - row["remembered"] for row in rows)  # same round, same load
    print(
        f"read-back cost of a first release: {paired:+.2f} s (median of the rounds' first - remembered), "
        f"{paired / median['remembered'] * 100:+.0f} %; a read-back of both registries "
        f"{2 * size / (median['forgotten'] - median['rerun']):.0f} MiB/s"
    )
    if args.out:
        args.out.write_text(json.dumps({"size_mib": size, "rounds": rows, "median": median}, indent=2))


if __name__ == "__main__":
    main()
