"""What the SBOM and the vulnerability gate of issue 26 cost (docs/benchmarks.md):

- ``imagesmith.sbom.make_sbom`` (syft over ``registry:IMAGE@DIGEST``, file list dropped, locked hashes
  added) per image, median of --rounds runs, for each --image given;
- the release gate per digest (``imagesmith.vulngate.gate``): a grype report with --matches matches (the
  recorded tests/data/vuln/grype.json, its matches repeated with distinct ids), judged against a policy with
  an allowlist; and an SBOM of --packages packages matched against an OSV file of --records records.

usage: .venv/bin/python scripts/bench_sbom_gate.py [--image HOST/REPO@sha256:…] [--insecure] [--rounds 3]
       [--matches 5000] [--packages 600] [--records 20000]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith import sbom, vulngate  # noqa: E402

DATA = REPO / "tests" / "data" / "vuln"
RECORDED = "sha256:" + "ab" * 32
TODAY = datetime.date(2026, 12, 1)


def bench_sbom(image: str, *, insecure: bool, rounds: int) -> dict[str, object]:
    times, count = [], 0
    for _ in range(rounds):
        doc, _, seconds = sbom.timed_sbom(image, insecure=insecure)
        times.append(seconds)
        count = sbom.summarize(doc).count
    return {"image": image, "median_s": round(statistics.median(times), 2), "packages": count, "runs": times}


def _time(fn: Callable[[], object], rounds: int) -> float:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return statistics.median(out)


def bench_gate(matches: int, packages: int, records: int, rounds: int) -> dict[str, object]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-gate-"))
    grype = json.loads((DATA / "grype.json").read_text())
    base = grype["matches"]
    grype["matches"] = [
        {**m, "vulnerability": {**m["vulnerability"], "id": f"CVE-2099-{i:05d}"}}
        for i, m in enumerate(base[j % len(base)] for j in range(matches))
    ]
    scans = tmp / "grype"
    scans.mkdir()
    report = scans / f"{vulngate.digest_stem(RECORDED)}.grype.json"
    report.write_text(json.dumps(grype))
    allow = tuple(
        vulngate.AllowEntry(id=f"CVE-2099-{i:05d}", reason="bench", expires=datetime.date(2027, 1, 1))
        for i in range(0, matches, 2)
    )
    policy = vulngate.Policy(fail_on="high", allowlist=allow)
    grype_s = _time(lambda: vulngate.gate([scans], RECORDED, policy, today=TODAY), rounds)

    cdx = json.loads((DATA / "sbom.cdx.json").read_text())
    cdx["components"] = [
        {"name": f"p{i}", "version": f"1.{i}-1", "purl": f"pkg:deb/debian/p{i}@1.{i}-1?distro=debian-12"}
        if i % 2
        else {"name": f"py{i}", "version": f"2.{i}.0", "purl": f"pkg:pypi/py{i}@2.{i}.0"}
        for i in range(packages)
    ]
    osv = [
        {
            "id": f"OSV-{i}",
            "affected": [
                {
                    "package": {
                        "ecosystem": "Debian:12" if i % 2 else "PyPI",
                        "name": f"{'p' if i % 2 else 'py'}{i % (packages * 2)}",
                    },
                    "ranges": [{"type": "ECOSYSTEM", "events": [{"introduced": "0"}, {"fixed": f"9.{i}"}]}],
                }
            ],
            "database_specific": {"severity": "HIGH"},
        }
        for i in range(records)
    ]
    (tmp / "osv.json").write_text(json.dumps(osv))
    sb = tmp / "sbom"
    sb.mkdir()
    (sb / f"{vulngate.digest_stem(RECORDED)}.cdx.json").write_text(json.dumps(cdx))
    osv_policy = vulngate.Policy(fail_on="critical", osv=tmp / "osv.json")
    osv_s = _time(lambda: vulngate.gate([sb], RECORDED, osv_policy, today=TODAY), rounds)
    return {
        "grype_matches": matches,
        "grype_report_bytes": report.stat().st_size,
        "grype_gate_median_s": round(grype_s, 4),
        "sbom_packages": packages,
        "osv_records": records,
        "osv_gate_median_s": round(osv_s, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--image", action="append", default=[])
    ap.add_argument("--insecure", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--matches", type=int, default=5000)
    ap.add_argument("--packages", type=int, default=600)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--no-sbom", action="store_true", help="only the gate (no syft, no registry)")
    args = ap.parse_args()
    out: dict[str, object] = {"gate": bench_gate(args.matches, args.packages, args.records, args.rounds)}
    if not args.no_sbom:
        out["sbom"] = [bench_sbom(i, insecure=args.insecure, rounds=args.rounds) for i in args.image]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
