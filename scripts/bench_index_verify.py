"""What verifying the release index costs `imagesmith pick` (issue 25), side by side in one run.

A signed index (serial, expiry, DSSE envelope, the key published beside it) of N images is published to
the local plain registry (127.0.0.1:5000, scripts/services.sh) and picked from as a renter would, the real
CLI in a subprocess each time (start-up included), with the index cached (what the < 0.5 s goal is about),
the rows interleaved run by run:

- verified: the key pinned on first use (the default), and with --verify-key;
- --no-verify: the same cached bytes, no signature / serial / expiry check;
- the same three for the index as a local file;
- in-process, the verification alone (fetch_index from the cache, verified vs not), per call.

usage: .venv/bin/python scripts/bench_index_verify.py [--images 200] [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from imagesmith import signing  # noqa: E402
from imagesmith.index import ReleaseIndex, dump_index  # noqa: E402
from imagesmith.indextrust import IndexKey, Trust  # noqa: E402
from imagesmith.pick import fetch_index  # noqa: E402
from imagesmith.release import publish_index  # noqa: E402
from tests.unit.test_pick import make_index  # noqa: E402

PICK = ["--driver", "580.95.05", "--gpu", "h100"]


def big_index(n: int) -> ReleaseIndex:
    """*n* images: the tests' released rows repeated under distinct tags (what pick ranks is the same)."""
    base = make_index()
    images = []
    for i in range(n):
        img = base.images[i % len(base.images)]
        tag = f"{img.tag}-b{i}"
        images.append(replace(img, tag=tag, registries=tuple(replace(c, tag=tag) for c in img.registries)))
    return replace(base, images=tuple(images), serial=int(time.time()), expires="2099-12-31T23:59:59Z")


def cli(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one `imagesmith ARGS` (it must exit 0). On a machine
    other work keeps busy the wall time mostly measures the wait for a core; the CPU time is what pick
    costs, and what its wall time is on an idle machine (it runs on one core)."""
    exe = str(Path(sys.executable).with_name("imagesmith"))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    done = subprocess.run(
        [exe, *args], env=env, capture_output=True, text=True, check=False, cwd=env["XDG_CACHE_HOME"]
    )
    took = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)}: exit {done.returncode}\n{done.stderr}")
    return took, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def per_call(fn: object, runs: int) -> float:
    t = time.perf_counter()
    for _ in range(runs):
        fn()  # type: ignore[operator]
    return (time.perf_counter() - t) / runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args()
    key = signing.generate_key()
    index = big_index(args.images)
    body = dump_index(index).encode()
    envelope = signing.sign_envelope(body, signing.INDEX_PAYLOAD_TYPE, key)
    repo = f"imagesmith-bench/index-verify-{uuid.uuid4().hex[:8]}"
    from tests.localinfra import local_registries

    regs = local_registries()
    publish_index(regs.plain_client(), repo, body, envelope, key.public.pem)
    source = f"oci+http://{regs.plain}/{repo}"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pub = folder / "release.pub"
        pub.write_bytes(key.public.pem)
        file = folder / "index.json"
        file.write_bytes(body)
        file.with_name("index.json.sig").write_bytes(envelope)
        file.with_name("index.json.pub").write_bytes(key.public.pem)
        (folder / "cache").mkdir()
        env = {
            **os.environ,
            "XDG_CACHE_HOME": str(folder / "cache"),
            "IMAGESMITH_CONFIG": str(folder / "none.toml"),
        }
        env.pop("IMAGESMITH_INDEX_KEY", None)
        os.environ.update(
            {"XDG_CACHE_HOME": env["XDG_CACHE_HOME"], "IMAGESMITH_CONFIG": env["IMAGESMITH_CONFIG"]}
        )
        # the first pick, the key named by its fingerprint (issue 34): pins it, fills the cache (not timed as
        # "cached")
        cold = cli(["pick", "--index", f"{source}#{key.public.fingerprint}", "--insecure", *PICK], env)[0]
        rows = [
            (
                "registry index, cached, verified (key pinned on first use)",
                ["pick", "--index", source, "--insecure"],
            ),
            (
                "registry index, cached, verified (--verify-key)",
                ["pick", "--index", source, "--insecure", "--verify-key", str(pub)],
            ),
            ("registry index, cached, --no-verify", ["pick", "--index", source, "--insecure", "--no-verify"]),
            ("index file, verified (pinned)", ["pick", "--index", str(file)]),
            ("index file, --no-verify", ["pick", "--index", str(file), "--no-verify"]),
        ]
        print(
            f"index: {args.images} images, {len(body):,} bytes, ECDSA P-256 signature; {args.runs} runs per "
            f"row; first pick (pins the key, fills the cache): {cold:.3f} s"
        )
        cli(["pick", "--index", f"{file}#{key.public.fingerprint}", *PICK], env)  # pins the file's key too
        times: dict[str, list[tuple[float, float]]] = {label: [] for label, _ in rows}
        for _ in range(args.runs):  # interleaved: a busy moment of the machine hits every row alike
            for label, argv in rows:
                times[label].append(cli([*argv, *PICK], env))
        print(f"load average (1 min) after the runs: {os.getloadavg()[0]:.1f}")
        head = f"{'wall med':>9} {'wall min':>9} {'CPU med':>8} {'CPU min':>8}"
        print(f"{'imagesmith pick … (seconds)':60} {head}")
        for label, _ in rows:
            wall = [w for w, _ in times[label]]
            cpu = [c for _, c in times[label]]
            print(
                f"{label:60} {statistics.median(wall):9.3f} {min(wall):9.3f} {statistics.median(cpu):8.3f} "
                f"{min(cpu):8.3f}"
            )
        trust = Trust(key=IndexKey.of(key.public, "bench"))
        n = max(50, args.runs * 10)
        verified = per_call(lambda: fetch_index(source, insecure=True, trust=trust), n)
        plain = per_call(lambda: fetch_index(source, insecure=True, trust=Trust(verify=False)), n)
        print(
            f"in-process fetch_index from the cache: verified {verified * 1e3:.2f} ms, unverified "
            f"{plain * 1e3:.2f} ms: verification adds {(verified - plain) * 1e3:.2f} ms per pick"
        )
        from imagesmith.indextrust import check_signature

        sig = per_call(lambda: check_signature(body, envelope, [key.public], source="b", where="b"), n)

        def crypto_import_ms() -> float:
            """Cumulative import time of imagesmith.signing (cryptography) after what pick imports anyway."""
            done = subprocess.run(
                [
                    sys.executable,
                    "-X",
                    "importtime",
                    "-c",
                    "import imagesmith.pick; import imagesmith.signing",
                ],
                capture_output=True,
                text=True,
                check=True,
            )
            line = next(ln for ln in done.stderr.splitlines() if ln.rstrip().endswith("| imagesmith.signing"))
            return int(line.split("|")[1]) / 1000

        crypto = statistics.median(crypto_import_ms() for _ in range(args.runs))
        print(
            f"a full check (first use, new bytes): the DSSE signature {sig * 1e3:.2f} ms (strict envelope "
            f"parse + ECDSA verify + byte compare), plus importing cryptography once per process: "
            f"{crypto:.0f} ms (median, python -X importtime, after what pick imports anyway)"
        )


if __name__ == "__main__":
    main()
