"""What re-verifying carried index entries costs `imagesmith release` (issue 17), on the local registries
(scripts/services.sh): the release of one cell with an index that carries N entries (each tagged in both
registries with a signed passing attestation of its digest, so every copy is checked with a manifest HEAD and
its attestation read and verified with the trusted key) against the same release with an empty index, side by
side, alternating, the median of --rounds.

usage: .venv/bin/python scripts/bench_carried.py [--entries 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith.attestation import ATTESTATION_FILE, attach_attestations  # noqa: E402
from imagesmith.index import (  # noqa: E402
    RegistryCopy,
    ReleasedImage,
    ReleaseIndex,
    Shm,
    ValidatedOn,
    save_index,
)
from imagesmith.release import collect_reports, release_cells  # noqa: E402
from tests.integration.test_release import (  # noqa: E402
    TRUSTED,
    cell,
    clients_for,
    push_image,
    targets,
    write_report,
)
from tests.localinfra import local_registries  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--entries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    regs = local_registries()
    repo = f"imagesmith-bench/carried-{uuid.uuid4().hex[:8]}"
    regs_t = targets(regs, repo)
    content = f"carried {repo}"
    digest = ""
    for i in range(args.entries):  # the same image under N tags, in both registries
        for client in (regs.plain_client(), regs.auth_client()):
            digest = push_image(client, repo, f"e{i}", content)
    with tempfile.TemporaryDirectory() as tmp:  # its signed attestation, stored as release stores it
        write_report(Path(tmp), f"{regs.plain}/{repo}@{digest}", "passed")
        envelope = (Path(tmp) / ATTESTATION_FILE).read_bytes()
    for client in (regs.plain_client(), regs.auth_client()):
        attach_attestations(client, repo, digest, [envelope])
    template = cell("t", regs_t)
    entries = tuple(
        ReleasedImage(
            tag=f"e{i}",
            matrix="bench",
            cell=f"e{i}",
            digest=digest,
            registries=tuple(
                RegistryCopy.parse(name=t.name, kind=t.kind, reference=t.ref(f"e{i}"), digest=digest)
                for t in regs_t
            ),
            torch=template.torch,
            torchvision=template.torchvision,
            cuda=template.cuda,
            python=template.python,
            min_driver=template.min_driver,
            arch=template.arch,
            shm=Shm(size="1g"),
            validated_on=(
                ValidatedOn(
                    gpu="NVIDIA H200",
                    count=2,
                    driver="580.159.04",
                    date="2026-12-01T00:00:00Z",
                    report_digest="sha256:" + "c" * 64,
                ),
            ),
            fingerprint=f"fp{i}",
            released="2026-12-01T00:00:00Z",
        )
        for i in range(args.entries)
    )
    times: dict[str, list[float]] = {"empty": [], "carried": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for n in range(args.rounds):
            for case in ("empty", "carried"):
                cid = f"c{n}{case[0]}"
                cand = push_image(regs.plain_client(), repo, f"{cid}-candidate", f"{cid} {repo}")
                write_report(root / cid, f"{regs.plain}/{repo}@{cand}", "passed")
                index_file = root / f"{cid}.json"
                base = ReleaseIndex(generated="2026-12-01T00:00:00Z")
                save_index(replace(base, images=entries if case == "carried" else ()), index_file)
                reports = collect_reports([root / cid], TRUSTED)
                started = time.perf_counter()
                out = release_cells(
                    [cell(cid, regs_t)],
                    matrix="bench",
                    reports=reports,
                    index_file=index_file,
                    client_for=clients_for(regs),
                    trusted=TRUSTED,
                )
                times[case].append(time.perf_counter() - started)
                out.raise_for_refusals()
    empty, carried = statistics.median(times["empty"]), statistics.median(times["carried"])
    copies = 2 * args.entries
    print(f"release of one cell, 2 registries, median of {args.rounds} (alternating):")
    print(f"  empty index:               {empty:.3f} s")
    print(f"  {args.entries} carried entries ({copies} copies re-verified): {carried:.3f} s")
    per_copy_ms = (carried - empty) / copies * 1e3
    print(f"  ratio carried/empty: {carried / empty:.2f}x; per carried copy: {per_copy_ms:.2f} ms")


if __name__ == "__main__":
    main()
