"""Measure the release path on the local registries (scripts/services.sh): blob copy between registries,
promotion of N cells, the no-op rerun, and `imagesmith pick` with a cached index (for docs/scaling.md).

usage: .venv/bin/python scripts/bench_release.py [--layer-mib 256] [--cells 20]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith.compat import min_driver  # noqa: E402
from imagesmith.refs import Registry  # noqa: E402
from imagesmith.registry import OCI_MANIFEST, ManifestData, copy_manifest  # noqa: E402
from imagesmith.release import ReleaseCell, collect_reports, release_cells  # noqa: E402
from tests.localinfra import local_registries  # noqa: E402


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def push(client, repo: str, tag: str, layer: bytes) -> str:  # type: ignore[no-untyped-def]
    config = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "rootfs": {"type": "layers", "diff_ids": []},
            "config": {"Labels": {"t": tag}},
        }
    ).encode()
    for blob in (layer, config):
        if client.blob_size(repo, sha(blob)) is None:
            client.upload_blob(
                repo,
                sha(blob),
                lambda blob=blob: iter([blob[i : i + (8 << 20)] for i in range(0, len(blob), 8 << 20)]),
            )
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {
                "mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": sha(config),
                "size": len(config),
            },
            "layers": [
                {
                    "mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": sha(layer),
                    "size": len(layer),
                }
            ],
        }
    ).encode()
    return client.put_manifest(repo, tag, ManifestData(body=body, media_type=OCI_MANIFEST, digest=sha(body)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layer-mib", type=int, default=256)
    ap.add_argument("--cells", type=int, default=20)
    args = ap.parse_args()
    regs = local_registries()
    plain, tls = regs.plain_client(), regs.auth_client()
    repo = f"imagesmith-bench/r{uuid.uuid4().hex[:8]}"

    layer = os.urandom(args.layer_mib << 20)
    t = time.monotonic()
    digest = push(plain, repo, "big", layer)
    up = time.monotonic() - t
    t = time.monotonic()
    _, sent = copy_manifest(plain, repo, digest, tls, repo)
    copy = time.monotonic() - t
    t = time.monotonic()
    _, sent_again = copy_manifest(plain, repo, digest, tls, repo)
    copy_again = time.monotonic() - t
    t = time.monotonic()
    _, mounted = copy_manifest(tls, repo, digest, tls, repo + "-other")
    mount = time.monotonic() - t
    print(
        f"upload {args.layer_mib} MiB layer to plain registry: {up:.2f} s ({args.layer_mib / up:.0f} MiB/s)"
    )
    print(
        f"copy image plain -> tls (streamed, {sent >> 20} MiB): {copy:.2f} s "
        f"({(sent >> 20) / copy:.0f} MiB/s)"
    )
    print(f"copy again (blobs present, {sent_again} bytes): {copy_again * 1000:.0f} ms")
    print(f"same-registry cross-repo mount ({mounted} bytes moved): {mount * 1000:.0f} ms")

    with tempfile.TemporaryDirectory() as tmp:
        from imagesmith.attestation import ATTESTATION_FILE, sign_validation
        from imagesmith.signing import generate_key

        key = (
            generate_key()
        )  # the validation runners' key: every report is signed, as validate --sign-key does
        cells, reports = [], Path(tmp) / "reports"
        for i in range(args.cells):
            cid = f"c{i}"
            d = push(plain, repo, f"{cid}-candidate", os.urandom(64 << 10))
            (reports / cid).mkdir(parents=True)
            report = {
                "schema": 1,
                "verdict": "passed",
                "target": f"{regs.plain}/{repo}@{d}",
                "started": "2026-11-29",
                "checks": [
                    {
                        "name": "test_gpu_inventory",
                        "status": "passed",
                        "figures": {"gpus": [{"name": "NVIDIA H200", "driver": "580.159.04"}]},
                    }
                ],
            }
            (reports / cid / "report.json").write_text(json.dumps(report))
            (reports / cid / ATTESTATION_FILE).write_bytes(
                sign_validation(report, repository=f"{regs.plain}/{repo}", digest=d, key=key)
            )
            cells.append(
                ReleaseCell(
                    matrix="bench",
                    id=cid,
                    tag=cid,
                    candidate=f"{cid}-candidate",
                    targets=(
                        Registry.from_image("plain", f"{regs.plain}/{repo}", insecure=True),
                        Registry.from_image("tls", f"{regs.auth}/{repo}"),
                    ),
                    torch="2.11.0",
                    torchvision="0.26.0",
                    cuda="13.0",
                    python="3.11",
                    min_driver=min_driver("13.0"),
                    arch=("9.0",),
                    shm_size="1g",
                    fingerprint=cid,
                )
            )

        def make(tg: Registry):  # type: ignore[no-untyped-def]
            return regs.plain_client() if tg.host == regs.plain else regs.auth_client()

        rep = collect_reports([reports], [key.public])
        index = Path(tmp) / "index.json"
        t = time.monotonic()
        out = release_cells(
            cells, matrix="bench", reports=rep, index_file=index, client_for=make, trusted=[key.public]
        )
        first = time.monotonic() - t
        assert all(c.status == "promoted" for c in out.cells), [c.reasons for c in out.cells]
        t = time.monotonic()
        out = release_cells(
            cells, matrix="bench", reports=rep, index_file=index, client_for=make, trusted=[key.public]
        )
        noop = time.monotonic() - t
        assert all(c.status == "up-to-date" for c in out.cells)
        print(
            f"release {args.cells} cells x 2 registries (64 KiB images): {first:.2f} s "
            f"({first / args.cells * 1000:.0f} ms/cell); no-op rerun {noop:.2f} s "
            f"({noop / args.cells * 1000:.0f} ms/cell)"
        )

        env = dict(os.environ, XDG_CACHE_HOME=str(Path(tmp) / "cache"))
        cmd = [
            sys.executable,
            "-m",
            "imagesmith",
            "pick",
            "--index",
            f"oci+http://{regs.plain}/{repo}",
            "--insecure",  # the local plain-HTTP registry
            "--driver",
            "580.95.05",
            "--gpu",
            "h200",
        ]
        t = time.monotonic()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        cold = time.monotonic() - t
        t = time.monotonic()
        subprocess.run(cmd, env=env, check=True, capture_output=True)
        warm = time.monotonic() - t
        print(f"imagesmith pick, index from the registry: first {cold:.2f} s, cached {warm:.2f} s")


if __name__ == "__main__":
    main()
