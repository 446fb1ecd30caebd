"""Kill it anywhere (issue 37): the writing commands run as real processes, stopped by SIGKILL or SIGTERM
at seeded random points; after every kill each file is the old one or the new one, whole and parseable; a
plain rerun converges and leaves no temp file.

Bounded: ``IMAGESMITH_KILLS`` kills per command (default 100) and ``IMAGESMITH_KILL_BUDGET_S`` seconds per
command (default 100), whichever comes first; ``IMAGESMITH_KILL_SEED`` picks the points (default 37: the same
points every run). The commands: ``render`` (a matrix change rewrites dockerfiles/), ``lock --force`` (the
resolver is tests/fakeuv.py: no network), ``keygen`` and ``release`` (one cell into a docker-registry on
127.0.0.1 of its own, tests/localinfra.py). No engine, no network beyond loopback.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imagesmith import atomicio, signing
from imagesmith.lock import read_lock
from tests import fakeuv
from tests.unit.test_lock_whole import KEY, REF, _project

IMAGESMITH = Path(sys.executable).with_name("imagesmith")
KILLS = int(os.environ.get("IMAGESMITH_KILLS", "100"))
BUDGET_S = float(os.environ.get("IMAGESMITH_KILL_BUDGET_S", "100"))
SEED = int(os.environ.get("IMAGESMITH_KILL_SEED", "37"))


@dataclass
class Tally:
    kills: int = 0
    by_signal: dict[str, int] = field(default_factory=dict)
    finished_first: int = 0


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(IMAGESMITH), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )


def _timed(args: list[str], env: dict[str, str]) -> float:
    started = time.monotonic()
    done = _run(args, env)
    assert done.returncode == 0, done.stderr
    return time.monotonic() - started


def _kill_at(
    args: list[str], env: dict[str, str], delay: float, signum: int, tally: Tally, done: tuple[int, ...]
) -> None:
    proc = subprocess.Popen(
        [str(IMAGESMITH), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    time.sleep(delay)
    finished = proc.poll() is not None
    if not finished:
        proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    tally.kills += 1
    name = signal.Signals(signum).name
    tally.by_signal[name] = tally.by_signal.get(name, 0) + 1
    if finished or proc.returncode in done:
        tally.finished_first += 1
        assert proc.returncode in done, err
        return
    if signum == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL, err
        return
    # SIGTERM: the one aborted line (or, before Python ran imagesmith's first line, the default action)
    assert proc.returncode in (143, -signal.SIGTERM), err
    if proc.returncode == 143:
        assert "error: aborted (SIGTERM)" in err, err
        assert "Traceback" not in err, err


def _temps(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(atomicio.TMP_SUFFIX)]


def _harness(
    rng: random.Random,
    args: list[str],
    env: dict[str, str],
    reset: Callable[[], None],
    check: Callable[[], None],
    converge: Callable[[], None],
    done: tuple[int, ...] = (0,),
) -> Tally:
    """Kill *args* at random points of its run; *check* after every kill, a plain rerun and *converge* after
    every few (then *reset* to the old state)."""
    reset()
    full = _timed(args, env)
    reset()
    tally = Tally()
    started = time.monotonic()
    while tally.kills < KILLS and time.monotonic() - started < BUDGET_S:
        signum = rng.choice([signal.SIGKILL, signal.SIGKILL, signal.SIGTERM])
        before = tally.finished_first
        _kill_at(args, env, rng.uniform(0.15, 1.1) * full, signum, tally, done)
        # a run that finished before its kill: the machine is faster now, aim earlier (and later after a kill)
        full *= 0.85 if tally.finished_first > before else 1.03
        check()
        if rng.random() < 0.25:  # a plain rerun converges, whatever the kills before it left
            converge()
            reset()
    converge()
    assert tally.kills - tally.finished_first >= min(KILLS, 3), tally  # it did kill runs mid-way
    return tally


def _env(tmp_path: Path) -> dict[str, str]:
    env = {**os.environ, **fakeuv.install(tmp_path / "bin", REF)}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    env.pop("IMAGESMITH_CACHE", None)
    return env


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith(atomicio.TMP_SUFFIX)
    }


def test_render_killed_anywhere_leaves_every_dockerfile_old_or_new(tmp_path: Path) -> None:
    env = _env(tmp_path)
    root = _project(tmp_path / "p")
    matrix = root / "matrices" / "smoke.toml"
    old_matrix = matrix.read_text()
    new_matrix = old_matrix.replace('shm_min = "256m"', 'shm_min = "512m"').replace(
        '"io.imagesmith.ulimits" = "memlock=-1,stack=67108864"',
        '"io.imagesmith.ulimits" = "memlock=-1,stack=67108864"\n"org.example.kill" = "anywhere"',
    )
    assert new_matrix != old_matrix
    out = root / "dockerfiles"
    _run(["-C", str(root), "render"], env)
    old = _snapshot(out)
    matrix.write_text(new_matrix)
    _run(["-C", str(root), "render"], env)
    new = _snapshot(out)
    assert old != new
    assert old.keys() == new.keys()

    def reset() -> None:  # the old tree, as the old matrix rendered it
        for name, data in old.items():
            (out / name).write_bytes(data)
        matrix.write_text(new_matrix)

    def check() -> None:
        now = _snapshot(out)
        assert now.keys() == old.keys()
        for name, data in now.items():
            assert data in (old[name], new[name]), f"{name} is neither the old nor the new file"

    def converge() -> None:
        done = _run(["-C", str(root), "render"], env)
        assert done.returncode == 0, done.stderr
        assert _snapshot(out) == new
        assert _temps(out) == []

    tally = _harness(random.Random(SEED), ["-C", str(root), "render"], env, reset, check, converge)
    print(f"render: {tally}")


def test_lock_killed_anywhere_leaves_the_lock_old_or_new_and_a_plain_rerun_keeps_it(tmp_path: Path) -> None:
    env = _env(tmp_path)
    root = _project(tmp_path / "p")
    locks = root / "locks"
    path = locks / KEY.filename
    old = REF.read_text()
    reference = read_lock(KEY, REF.parent)
    assert reference is not None

    def reset() -> None:
        path.write_text(old)

    def check() -> None:
        text = path.read_text()
        if text == old:
            return
        # the new lock: whole, sealed, the fake resolver's pins; `lock --force` of a matrix without the
        # interactive flavor writes no interactive section
        lock = read_lock(KEY, locks)
        assert lock is not None
        assert lock.sealed
        assert (lock.pins, lock.builder_pins, lock.interactive_pins) == (
            reference.pins,
            reference.builder_pins,
            (),
        )

    def converge() -> None:
        before = path.read_text()
        done = _run(["-C", str(root), "lock", "--matrix", "smoke", "--no-sizes"], env)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("kept"), done.stdout
        assert path.read_text() == before
        assert _temps(root) == []
        assert _run(["-C", str(root), "plan", "--matrix", "smoke"], env).returncode == 0

    args = ["-C", str(root), "lock", "--matrix", "smoke", "--force", "--no-sizes"]
    tally = _harness(random.Random(SEED + 1), args, env, reset, check, converge)
    print(f"lock: {tally}")


def test_keygen_killed_anywhere_leaves_no_empty_key_and_a_rerun_finishes_the_pair(tmp_path: Path) -> None:
    env = _env(tmp_path)
    keys = tmp_path / "keys"
    priv, pub = keys / "release.key", keys / "release.pub"

    def reset() -> None:
        for p in (priv, pub):
            p.unlink(missing_ok=True)

    def check() -> None:
        for p in (priv, pub):
            assert not p.exists() or p.stat().st_size > 0, f"{p.name} is empty"
        assert not (pub.exists() and not priv.exists()), "a public key without its private key"
        if priv.exists():
            key = signing.load_signing_key(priv)
            if pub.exists():
                assert signing.load_public_key(pub).key_id == key.key_id

    def converge() -> None:
        existed = priv.exists() and pub.exists()
        done = _run(["keygen", str(priv)], env)
        assert done.returncode == (2 if existed else 0), done.stderr
        check()
        assert priv.exists()
        assert pub.exists()
        assert _temps(keys) == []

    # a keygen that finished before its kill leaves both files: the next one refuses them (2), as it must
    args = ["keygen", str(priv)]
    tally = _harness(random.Random(SEED + 2), args, env, reset, check, converge, done=(0, 2))
    print(f"keygen: {tally}")


def test_a_temp_file_a_killed_run_left_is_cleaned_by_the_next(tmp_path: Path) -> None:
    """What SIGKILL leaves (a temp beside its target) is removed by the next write into that folder."""
    env = _env(tmp_path)
    root = _project(tmp_path / "p")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = root / "locks" / f".{KEY.filename}.{dead.pid}{atomicio.TMP_SUFFIX}"
    stale.write_text(REF.read_text()[:100])
    done = _run(["-C", str(root), "lock", "--matrix", "smoke", "--force", "--no-sizes"], env)
    assert done.returncode == 0, done.stderr
    assert not stale.exists()


def test_release_killed_anywhere_leaves_no_tag_on_a_missing_manifest_and_a_plain_rerun_records_the_tag(
    tmp_path: Path,
) -> None:
    """`release` of one cell into a registry of its own (tests/localinfra.py's docker-registry): each round
    pushes a new validated candidate; after every kill the index file is absent or whole, the release tag
    (when set) names a manifest the registry serves; a plain rerun converges — exit 0 and the index records
    the tag's digest, or, with a newer candidate not validated yet pushed first (issue 37's interrupted
    release), exit 8 and still the index records the digest the tag points at."""
    import json

    from imagesmith.index import load_index
    from imagesmith.matrix import load_matrix
    from imagesmith.plan import build_plan
    from tests.integration.test_release import KEY as VALIDATION_KEY
    from tests.integration.test_release import push_image, smoke_labels, write_report
    from tests.localinfra import temp_registry
    from tests.repo import PROJECT

    repo = f"imagesmith-test/kill-{random.Random(SEED).getrandbits(32):08x}"
    ns, name = repo.split("/")
    rng = random.Random(SEED + 3)
    with temp_registry(tmp_path / "reg") as reg:
        client = reg.client()
        matrix = tmp_path / "smoke.toml"
        matrix.write_text(
            (PROJECT.matrices_dir / "smoke.toml")
            .read_text()
            .replace('registries = ["local-plain", "local-tls"]', 'registries = ["r1"]')
        )
        registries = tmp_path / "registries.toml"
        registries.write_text(
            f'schema = 1\n[registries.r1]\nhost = "{reg.addr}"\nnamespace = "{ns}"\n'
            f'repository = "{name}"\ninsecure = true\n'
        )
        cid = build_plan(load_matrix(matrix, registries_file=registries)).cells[0].id
        labels = smoke_labels(matrix, registries)
        pub = tmp_path / "validation.pub"
        pub.write_bytes(VALIDATION_KEY.public.pem)
        index = tmp_path / "release" / "index.json"
        index.parent.mkdir()
        env = {**_env(tmp_path), "IMAGESMITH_REGISTRY_ATTEMPTS": "2", "IMAGESMITH_REGISTRY_DEADLINE": "20"}
        env.pop("IMAGESMITH_SIGNING_KEY", None)
        rounds = iter(range(10**6))
        args = [
            "release",
            "--matrix",
            str(matrix),
            "--registries",
            str(registries),
            "--index-file",
            str(index),
            "--trusted-key",
            str(pub),
            "--reports",
            str(tmp_path / "reports"),
        ]

        def reset() -> None:  # a new build, validated
            n = next(rounds)
            digest = push_image(client, repo, f"{cid}-candidate", f"build {n}", labels=labels)
            write_report(tmp_path / "reports" / str(n), f"{reg.addr}/{repo}@{digest}", "passed")

        def check() -> None:
            if index.exists():
                for image in load_index(index).images:
                    assert client.get_manifest(repo, image.digest).digest == image.digest
            tagged = client.manifest_digest(repo, cid)
            if tagged is not None:
                assert client.get_manifest(repo, tagged).digest == tagged

        def converge() -> None:
            unvalidated = rng.random() < 0.5
            if unvalidated:
                push_image(client, repo, f"{cid}-candidate", f"newer {rng.random()}", labels=labels)
            done = _run(args, env)
            assert done.returncode == (8 if unvalidated else 0), done.stderr
            assert "Traceback" not in done.stderr
            check()
            tagged = client.manifest_digest(repo, cid)
            recorded = {i.tag: i.digest for i in load_index(index).images} if index.exists() else {}
            assert recorded.get(cid) == tagged, (recorded, tagged, done.stderr)
            assert _temps(index.parent) == []
            if unvalidated:
                assert "is not validated" in done.stderr or "no signed validation attestation" in done.stderr

        tally = _harness(rng, args, env, reset, check, converge, done=(0,))
        print(f"release: {tally}")
        assert json.loads(index.read_text())["images"][0]["tag"] == cid


# -- pick: a renter's trust store and index copy under kills and a concurrent pick ---------------------------
PICK_HOST = ("--insecure", "--driver", "580.95.05", "--gpu", "h100")


def _big_index(images: int) -> Any:
    """An index of *images* released images (a large index makes each pick's read-check-record longer)."""
    import hashlib
    import json

    from imagesmith.index import SCHEMA, parse_index
    from tests.unit.test_pick import RELEASED, image_doc

    docs = []
    for i in range(images):
        doc = image_doc(*RELEASED[i % len(RELEASED)], n=i)
        doc["tag"], doc["cell"] = f"{doc['tag']}-b{i}", f"{doc['cell']}-b{i}"
        doc["digest"] = "sha256:" + hashlib.sha256(f"image {i}".encode()).hexdigest()
        for copy in doc["registries"]:
            copy["digest"] = doc["digest"]
            copy["reference"] = copy["reference"].rsplit(":", 1)[0] + ":" + doc["tag"]
        docs.append(doc)
    whole = {"schema": SCHEMA, "generated": "2026-11-28T00:00:00Z", "images": docs}
    return parse_index(json.dumps(whole), source="test index")


class _Replica:
    """An index server on 127.0.0.1 (tests/localhttp.py's server) serving signed versions of one index, one
    pick at a time: the n-th pick to ask for INDEX gets ``versions[n]`` (the last one once they run out) and
    its INDEX.sig; the next pick's INDEX waits until that .sig was served. Like a mirror whose replicas lag
    behind each other: two picks at once can get a newer and then an older serial."""

    def __init__(self) -> None:
        import threading

        self.cond = threading.Condition()
        self.versions: list[tuple[bytes, bytes]] = []
        self.served = 0
        self.current: tuple[bytes, bytes] | None = None

    def serve(self, *versions: tuple[bytes, bytes]) -> None:
        with self.cond:
            self.versions, self.served, self.current = list(versions), 0, None
            self.cond.notify_all()

    def answer(self, path: str) -> bytes | None:
        from tests.indexkey import KEY

        if path == "/index.json.pub":
            return KEY.public.pem
        with self.cond:
            if path == "/index.json":
                self.cond.wait_for(lambda: self.current is None, timeout=20)
                self.current = self.versions[min(self.served, len(self.versions) - 1)]
                self.served += 1
                return self.current[0]
            if path == "/index.json.sig":
                sig = (self.current or self.versions[-1])[1]
                self.current = None
                self.cond.notify_all()
                return sig
        return None


@contextlib.contextmanager
def _replica_server() -> Iterator[tuple[str, _Replica]]:
    import http.server
    import threading

    from tests.localhttp import QuietHTTPServer

    replica = _Replica()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = replica.answer(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = QuietHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/index.json", replica
    finally:
        server.shutdown()
        server.server_close()
        assert server.unexpected() == []


def _renter_env(tmp_path: Path) -> dict[str, str]:
    """A renter: a cache of its own, no user config, no project, the publisher's key by its fingerprint."""
    from tests.indexkey import KEY

    env = _env(tmp_path)
    env["IMAGESMITH_CONFIG"] = str(tmp_path / "config.toml")
    env["IMAGESMITH_INDEX_KEY"] = KEY.public.fingerprint
    env.pop("IMAGESMITH_PROJECT", None)
    return env


def _trust_records(cache: Path) -> dict[str, dict[str, Any]]:
    """Every trust record and index copy under *cache*, each whole: JSON that imagesmith reads back."""
    import json

    from imagesmith.index import parse_index

    records: dict[str, dict[str, Any]] = {}
    for path in sorted((cache / "imagesmith" / "index").glob("*.json")):
        text = path.read_text()
        if path.name.endswith(".trust.json"):
            records[path.name] = json.loads(text)  # whole JSON, never cut
        else:
            parse_index(text, source=str(path))  # the index copy: whole and valid
    return records


def _newest_serial(records: dict[str, dict[str, Any]]) -> int | None:
    (record,) = records.values()
    newest = record.get("newest")
    return None if newest is None else int(newest["serial"])


def test_pick_refresh_killed_anywhere_leaves_the_trust_record_whole_and_a_plain_pick_works(
    tmp_path: Path,
) -> None:
    """`pick --refresh` of an index served on 127.0.0.1, a new serial each round; SIGKILL/SIGTERM at random
    points. After every kill the trust record and the index copy are whole (JSON imagesmith reads back) and
    the record's newest serial never goes back; a plain `pick` works and leaves no temp file."""
    from tests.indexkey import signed_bytes

    index = _big_index(40)
    env = _renter_env(tmp_path)
    cache = Path(env["XDG_CACHE_HOME"])
    serials = iter(range(1, 10**6))
    floor = [0]
    with _replica_server() as (url, replica):
        args = ["pick", "--index", url, *PICK_HOST, "--refresh"]

        def reset() -> None:  # the publisher released again
            replica.serve(signed_bytes(index, serial=next(serials)))

        def check() -> None:
            records = _trust_records(cache)
            if records:
                serial = _newest_serial(records)
                assert serial is not None
                assert serial >= floor[0], "the trust record went back to an older serial"
                floor[0] = serial

        def converge() -> None:
            done = _run(["pick", "--index", url, *PICK_HOST], env)
            assert done.returncode == 0, done.stderr
            assert "docker pull" in done.stdout, done.stdout
            check()
            assert _temps(cache) == []

        reset()
        tally = _harness(random.Random(SEED + 5), args, env, reset, check, converge)
    print(f"pick --refresh: {tally}")


def test_two_picks_refreshing_at_once_keep_the_newest_serial_in_one_whole_trust_record(
    tmp_path: Path,
) -> None:
    """Two renters' `pick --refresh` at once on one cache, the index served by lagging replicas: the first
    pick gets serial N+2, the second N+1 right after (both newer than the record's N). Both exit 0 (or the
    second is refused as older than the N+2 the first recorded, exit 2, or waits for the cache's lock and
    says who holds it, exit 14), and afterwards the one trust record is whole and names N+2, the newest serial
    either pick saw. Without the trust store's lock (and its read again under it), the second pick, which read
    the record before the first wrote it, writes N+1 over N+2: the replay floor goes back."""
    from tests.indexkey import signed_bytes

    index = _big_index(300)
    env = _renter_env(tmp_path)
    cache = Path(env["XDG_CACHE_HOME"])
    rounds = int(os.environ.get("IMAGESMITH_PICK_PAIRS", "4"))
    outcomes: dict[int, int] = {}
    with _replica_server() as (url, replica):
        args = [str(IMAGESMITH), "pick", "--index", url, *PICK_HOST, "--refresh"]
        replica.serve(signed_bytes(index, serial=1))
        assert _run(args[1:], env).returncode == 0
        newest = 1
        for _ in range(rounds):
            replica.serve(signed_bytes(index, serial=newest + 2), signed_bytes(index, serial=newest + 1))
            procs = [
                subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                for _ in range(2)
            ]
            for proc in procs:
                out, err = proc.communicate(timeout=120)
                outcomes[proc.returncode] = outcomes.get(proc.returncode, 0) + 1
                assert "Traceback" not in err, err
                if proc.returncode == 0:
                    assert "docker pull" in out, out
                elif proc.returncode == 14:
                    assert "error: another imagesmith pick (pid " in err, err
                else:
                    assert proc.returncode == 2, err
                    assert "older than" in err or "replay" in err, err
            newest += 2
            assert _newest_serial(_trust_records(cache)) == newest, "the trust record went back"
            assert _temps(cache) == []
    print(f"two picks at once: {rounds} rounds, exits {outcomes}")
