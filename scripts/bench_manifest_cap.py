"""A huge manifest against ``imagesmith index`` (issue 25; docs/benchmarks.md): the peak memory (max RSS) and
the time of one run, with the current tree and with another revision side by side.

The local plain registry (scripts/services.sh) holds a small image tagged ``release-index``; a fault proxy
(tests/faultproxy.py) in front of it answers every manifest GET with a JSON body of ``--mib`` MiB (a registry
stores no manifest past 4 MiB, so the proxy stands in for a hostile registry or a broken proxy). Each revision
runs ``python -m imagesmith index oci+http://PROXY/REPO:release-index --insecure`` in a child process under
``/usr/bin/time``; its exit status, the first line of its error and its max RSS are printed.

usage: .venv/bin/python scripts/bench_manifest_cap.py [--against REV] [--mib 200]
"""

from __future__ import annotations

import argparse
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

from tests.faultproxy import Action, Request, fault_proxy  # noqa: E402
from tests.integration.test_release import push_image  # noqa: E402
from tests.localinfra import local_registries  # noqa: E402


def tree_of(rev: str, tmp: Path) -> Path:
    """The imagesmith package of git revision *rev*, unpacked under *tmp* (for PYTHONPATH)."""
    out = tmp / rev
    out.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev, "imagesmith"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out


def run_index(source: str, pythonpath: Path) -> tuple[int, str, float, float]:
    """(exit status, first error line, max RSS in MB, seconds) of one ``imagesmith index`` run."""
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    started = time.monotonic()
    res = subprocess.run(
        [
            "/usr/bin/time",
            "-f",
            "maxrss_kb=%M",
            sys.executable,
            "-m",
            "imagesmith",
            "index",
            source,
            "--insecure",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=str(pythonpath),  # not the repository: `python -m` puts the working folder first on sys.path
    )
    took = time.monotonic() - started
    rss = next(int(x.split("=")[1]) for x in res.stderr.splitlines() if x.startswith("maxrss_kb="))
    error = next((x for x in res.stderr.splitlines() if x.startswith("error:")), "")
    return res.returncode, error, rss / 1024, took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", default="main", help="git revision to compare with")
    ap.add_argument("--mib", type=int, default=200, help="size of the manifest the proxy serves")
    args = ap.parse_args()
    regs = local_registries()
    repo = f"imagesmith-bench/manifest-cap-{uuid.uuid4().hex[:8]}"
    push_image(regs.plain_client(), repo, "release-index", "a small image")
    huge = json.dumps({"schemaVersion": 2, "annotations": {"x": "a" * (args.mib << 20)}}).encode()

    def swell(req: Request) -> Action | None:
        if req.kind == "manifest" and req.method == "GET":
            return Action("rewrite", rewrite=lambda _: huge, headers=(("Docker-Content-Digest", ""),))
        return None

    with (
        tempfile.TemporaryDirectory() as tmp_name,
        fault_proxy(regs.plain, rules=[swell], max_seconds=600) as proxy,
    ):
        source = f"oci+http://{proxy.addr}/{repo}:release-index"
        print(f"manifest: {len(huge)} bytes served by {proxy.addr} for {repo}:release-index")
        for name, path in ((args.against, tree_of(args.against, Path(tmp_name))), ("this tree", REPO)):
            code, error, rss, took = run_index(source, path)
            print(f"{name:<10} exit {code}  max RSS {rss:7.1f} MB  {took:5.2f} s  {error[:150]}")


if __name__ == "__main__":
    main()
