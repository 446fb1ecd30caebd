"""Small registry answers read whole within the read timeout and checked against their digest (the
flaky-network re-check) against the registry client of another revision, side by side in one run, on the local
plain registry (scripts/services.sh).

Each round runs N x (GET manifest by tag + HEAD manifest + GET tag list) with the client of ``--against`` (the
file imagesmith/registry.py at that git revision, loaded beside the current one) and with the current client,
alternating; the best round of each is compared.

usage: .venv/bin/python scripts/bench_registry_reads.py [--against REV] [--n 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith import registry as current  # noqa: E402
from tests.integration.test_release import push_image  # noqa: E402
from tests.localinfra import local_registries  # noqa: E402


def load_revision(rev: str) -> object:
    """imagesmith/registry.py as it is at *rev*, imported under another module name."""
    source = subprocess.run(
        ["git", "-C", str(REPO), "show", f"{rev}:imagesmith/registry.py"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "registry_at_rev.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("registry_at_rev", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["registry_at_rev"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="main", help="git revision of the client to compare with")
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    regs = local_registries()
    old = load_revision(args.against)
    repo = f"imagesmith-test/bench-reads-{uuid.uuid4().hex[:8]}"
    push_image(current.RegistryClient(regs.plain, insecure=True), repo, "t", "bench")
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, mod in (("against", old), ("current", current)):
            client = mod.RegistryClient(regs.plain, insecure=True)  # type: ignore[attr-defined]
            t = time.perf_counter()
            for _ in range(args.n):
                client.get_manifest(repo, "t")
                client.manifest_digest(repo, "t")
                client.list_tags(repo)
            best[name] = min(best.get(name, float("inf")), time.perf_counter() - t)
    print(
        f"{args.n} x (GET manifest + HEAD manifest + tag list), best of {args.rounds}: "
        f"{args.against} {best['against']:.3f} s, current {best['current']:.3f} s, "
        f"ratio current/{args.against} {best['current'] / best['against']:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
