"""What signed evidence costs release, measured side by side in one run (no registry, no network):

- sign and verify one validation attestation (a schema-2 report with 80 checks and 8 GPUs, ~17 KB),
  ECDSA P-256 and Ed25519, against parsing the same report unsigned;
- ``release.collect_reports`` over N validation folders: signed (verify every attestation) vs. the same
  folders without attestations (parse only, which release no longer accepts).

usage: .venv/bin/python scripts/bench_signing.py [--rounds 300] [--folders 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith import signing  # noqa: E402
from imagesmith.attestation import ATTESTATION_FILE, sign_validation, verify_validation  # noqa: E402
from imagesmith.release import collect_reports, parse_report  # noqa: E402

D = "sha256:" + "d" * 64


def report() -> dict[str, object]:
    checks = [
        {"name": f"test_check_{i}", "status": "passed", "message": "ok " * 40, "figures": {"x": i * 1.5}}
        for i in range(80)
    ]
    gpus = [
        {"index": i, "name": "NVIDIA H200", "driver": "580.159.04", "memory_mib": 143771} for i in range(8)
    ]
    return {"schema": 2, "verdict": "passed", "target": f"r.example/t@{D}", "gpus": gpus, "checks": checks}


def per_op(fn: object, rounds: int) -> float:
    t = time.perf_counter()
    for _ in range(rounds):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - t) / rounds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--folders", type=int, default=200)
    args = ap.parse_args()
    doc = report()
    body = json.dumps(doc).encode()
    print(f"report: {len(body)} bytes; {args.rounds} rounds per figure")
    base = per_op(lambda: parse_report(body, source="bench"), args.rounds)
    print(f"  parse unsigned report:            {base * 1e3:7.3f} ms  (1.00x)")
    for kt in signing.KEY_TYPES:
        key = signing.generate_key(kt)
        env = sign_validation(doc, repository="r.example/t", digest=D, key=key)
        s = per_op(
            lambda key=key: sign_validation(doc, repository="r.example/t", digest=D, key=key), args.rounds
        )
        v = per_op(
            lambda env=env, key=key: parse_report(
                verify_validation(env, [key.public], digest=D).report, source="bench"
            ),
            args.rounds,
        )
        print(f"  {kt:10s} sign:                 {s * 1e3:7.3f} ms  ({s / base:5.2f}x)")
        print(f"  {kt:10s} verify + parse:       {v * 1e3:7.3f} ms  ({v / base:5.2f}x)")
    key = signing.generate_key()
    with tempfile.TemporaryDirectory() as tmp:
        signed, plain = Path(tmp) / "signed", Path(tmp) / "plain"
        for i in range(args.folders):
            for root in (signed, plain):
                (root / f"c{i}").mkdir(parents=True)
                (root / f"c{i}" / "report.json").write_bytes(body)
            (signed / f"c{i}" / ATTESTATION_FILE).write_bytes(
                sign_validation(doc, repository="r.example/t", digest=D, key=key)
            )
        t = time.perf_counter()
        unsigned = collect_reports([plain], [key.public])
        t_plain = time.perf_counter() - t
        t = time.perf_counter()
        found = collect_reports([signed], [key.public])
        t_signed = time.perf_counter() - t
        assert all(r.evidence for r in found)
        assert not any(r.evidence for r in unsigned)
    print(
        f"collect_reports, {args.folders} folders: unsigned {t_plain:.3f} s, signed (ECDSA P-256, verified) "
        f"{t_signed:.3f} s ({t_signed / t_plain:.2f}x)"
    )


if __name__ == "__main__":
    main()
