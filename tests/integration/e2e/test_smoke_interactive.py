"""End to end, for real: the interactive flavor of the smoke cell (matrices/smoke-interactive.toml), built
and pushed after the smoke runtime cell (rebuilt here with --force: both from one build cache), then run the
way a rental runs it: ports published on loopback, PUBLIC_KEY / JUPYTER_PASSWORD / TENSORBOARD_LOGDIR set.

What it proves (issue 16's "done when"): every layer of the runtime image is a layer of the interactive image
(same digests, same order) and the interactive layers add at most 150 MB compressed; none of those layers
holds an SSH host key and neither does the image's filesystem; a real `ssh` client logs in with the injected
key and imports torch, and a password login is refused even when root has a password; JupyterLab answers 403
without the token and 200 with it, never starts without a token, and the token is in no log, process list or
image setting; TensorBoard answers when asked for; two containers have different host keys; `docker stop`
takes < 3 s.

Every container is removed, whatever happens.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import secrets
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from imagesmith.engine import Engine
from imagesmith.matrix import load_matrix
from imagesmith.plan import build_plan
from imagesmith.tags import candidate_tag
from tests.localinfra import LocalRegistries, local_registries

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.registry]

#: issue 16: the flavor's layers add at most this much (compressed) over the runtime flavor
MAX_ADDED_BYTES = 150 * 1000 * 1000
SSH_OPTIONS = [
    "-o",
    "StrictHostKeyChecking=no",
    "-o",
    "UserKnownHostsFile=/dev/null",
    "-o",
    "LogLevel=ERROR",
    "-o",
    "ConnectTimeout=10",
]


def _build(matrix: str, env: dict[str, str], summary: Path) -> dict[str, object]:
    ca = os.environ.get("IMAGESMITH_TEST_EXTRA_CA")
    # --force, both flavors: the registries of this machine keep images of earlier runs, the engine's build
    # cache may have been pruned since — a skipped interactive image would sit on an earlier build of the
    # runtime layers (same inputs, other timestamps). Built in one run from one cache, the runtime stage's
    # layers are the runtime image's (with a warm cache both builds are all CACHED: seconds).
    args = ["build", "--matrix", matrix, "--push", "--force", "--summary", str(summary)]
    args += ["--extra-ca", ca] if ca else []
    proc = subprocess.run(
        [sys.executable, "-m", "imagesmith", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=2400,
        check=False,
    )
    if proc.returncode != 0:
        pytest.fail(f"imagesmith {' '.join(args)} exited {proc.returncode}:\n{proc.stderr[-6000:]}")
    row: dict[str, object] = json.loads(summary.read_text())["cells"][0]
    assert row["status"] == "pushed", row
    return row


@dataclass(frozen=True)
class Built:
    regs: LocalRegistries
    repo: str
    runtime_digest: str
    digest: str
    ref: str


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    regs = local_registries()
    tmp = tmp_path_factory.mktemp("interactive")
    env = dict(os.environ)
    env["IMAGESMITH_CONFIG"] = str(tmp / "config.toml")  # no user config: flags/env only
    env["IMAGESMITH_REGISTRY_MIRRORS"] = f"docker.io={regs.plain}/hub"
    env.update(regs.auth_env())
    env.pop("IMAGESMITH_EXTRA_CA", None)
    (cell,) = build_plan(load_matrix("smoke-interactive")).cells
    assert cell.flavor == "interactive"
    rt_row = _build("smoke", env, tmp / "runtime.json")
    row = _build("smoke-interactive", env, tmp / "interactive.json")
    plain = next(t for t in cell.publish.registries if t.name == "local-plain")
    ref = f"{plain.image}:{candidate_tag(cell)}"
    Engine().pull(ref)
    return Built(
        regs=regs, repo=plain.repo, runtime_digest=str(rt_row["digest"]), digest=str(row["digest"]), ref=ref
    )


def _docker(*args: str, timeout: int = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        pytest.fail(f"docker {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


@dataclass(frozen=True)
class Running:
    name: str
    ports: dict[int, int]

    def logs(self) -> str:
        proc = _docker("logs", self.name)
        return proc.stdout + proc.stderr

    def exec(self, script: str) -> str:
        return _docker("exec", self.name, "sh", "-c", script).stdout


@contextlib.contextmanager
def container(ref: str, env: dict[str, str]) -> Iterator[Running]:
    """The image run as a rental runs it: default command, ports 22/8888/6006 published on loopback."""
    name = f"imagesmith-test-interactive-{uuid.uuid4().hex[:10]}"
    args = ["run", "-d", "--name", name, "--shm-size=1g"]
    for port in (22, 8888, 6006):
        args += ["-p", f"127.0.0.1::{port}"]
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    try:
        _docker(*args, ref)
        ports = {}
        for port in (22, 8888, 6006):
            out = _docker("port", name, f"{port}/tcp").stdout.split()[0]
            ports[port] = int(out.rsplit(":", 1)[1])
        yield Running(name=name, ports=ports)
    finally:
        _docker("rm", "-f", name, check=False)


def _wait(what: str, probe: object, c: Running, timeout_s: float = 90) -> None:
    """Until *probe* holds; else fail with what container *c* printed and runs (a CI run on a fresh machine
    once timed out with neither sshd nor JupyterLab answering, and nothing to say why)."""
    assert callable(probe)
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            if probe():
                return
        except (requests.RequestException, OSError) as exc:
            last = exc
        time.sleep(0.5)
    top = _docker("top", c.name, "-eo", "pid,etime,pcpu,args", check=False)
    state = _docker("inspect", "-f", "{{json .State}}", c.name, check=False)
    pytest.fail(
        f"{what} did not come up within {timeout_s:.0f} s ({last})\n--- docker logs {c.name}\n"
        f"{c.logs()[-4000:]}\n--- docker top\n{top.stdout}{top.stderr}\n--- state\n{state.stdout}"
        f"\n--- load {os.getloadavg()}"
    )


def _http(port: int, path: str, **kw: object) -> requests.Response:
    return requests.get(f"http://127.0.0.1:{port}{path}", timeout=5, allow_redirects=False, **kw)  # type: ignore[arg-type]


def _ssh(
    port: int, key: Path | None, command: str, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """A real ssh client; *key* None: no key at all (the password attempt)."""
    argv = ["ssh", "-p", str(port), *SSH_OPTIONS, *extra]
    if key is not None:
        argv += ["-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes"]
    return subprocess.run(
        [*argv, "root@127.0.0.1", command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def ssh_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    key = tmp_path_factory.mktemp("ssh") / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True, timeout=30)
    return key


def _host_key(port: int) -> str:
    proc = subprocess.run(
        ["ssh-keyscan", "-T", "5", "-t", "ed25519", "-p", str(port), "127.0.0.1"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    lines = [ln for ln in proc.stdout.splitlines() if "ssh-ed25519" in ln]
    return lines[0].split()[-1] if lines else ""


def test_the_interactive_image_is_the_runtime_image_plus_its_own_layers(built: Built) -> None:
    client = built.regs.plain_client()
    rt = client.get_manifest(built.repo, built.runtime_digest).json()["layers"]
    it = client.get_manifest(built.repo, built.digest).json()["layers"]
    assert [x["digest"] for x in it[: len(rt)]] == [x["digest"] for x in rt]  # every runtime layer, in order
    added = it[len(rt) :]
    assert added, "the interactive image has no layers of its own"
    added_bytes = sum(int(x["size"]) for x in added)
    print(
        f"runtime layers shared: {len(rt)}/{len(rt)}; added: {len(added)} layers, {added_bytes} B compressed"
    )
    assert added_bytes <= MAX_ADDED_BYTES, added_bytes
    # no layer of the flavor ever held an SSH host key (a deleted file would still be in its layer's tarball)
    for layer in added:
        with client.get_blob(built.repo, layer["digest"]) as resp:
            blob = resp.content
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
            held = [n for n in tar.getnames() if "ssh_host_" in n and "key" in n]
        assert not held, (layer["digest"], held)
    out = _docker(
        "run", "--rm", "--entrypoint", "sh", built.ref, "-c", "ls /etc/ssh; ls -a /root/.ssh"
    ).stdout
    assert "ssh_host_" not in out
    assert "authorized_keys" not in out


def test_ssh_by_key_runs_torch_and_refuses_passwords(built: Built, ssh_key: Path, tmp_path: Path) -> None:
    public = ssh_key.with_suffix(".pub").read_text().strip()
    with container(built.ref, {"PUBLIC_KEY": public}) as c:
        port = c.ports[22]
        _wait("sshd", lambda: _ssh(port, ssh_key, "true").returncode == 0, c)
        out = _ssh(port, ssh_key, 'python -c "import torch; print(torch.__version__)"')
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().startswith("2.11.0"), out.stdout
        # a login shell (VS Code Remote-SSH, a terminal) keeps the image's PATH
        login = _ssh(port, ssh_key, "bash -lc 'command -v python'")
        assert login.stdout.strip() == "/opt/venv/bin/python", login
        listing = _ssh(port, ssh_key, "stat -c '%a %n' /root/.ssh/authorized_keys; env")
        assert "600 /root/.ssh/authorized_keys" in listing.stdout
        assert "PUBLIC_KEY" not in listing.stdout  # the session environment holds no secret
        # a password login, tried for real: root gets a password, the client offers it; the server refuses
        password = secrets.token_hex(8)
        c.exec(f"echo 'root:{password}' | chpasswd")
        askpass = tmp_path / "askpass.sh"
        askpass.write_text(f"#!/bin/sh\necho {password}\n")
        askpass.chmod(0o700)
        env = dict(os.environ, SSH_ASKPASS=str(askpass), SSH_ASKPASS_REQUIRE="force", DISPLAY=":0")
        refused = _ssh(
            port,
            None,
            "true",
            "-o",
            "PubkeyAuthentication=no",
            "-o",
            "PreferredAuthentications=password,keyboard-interactive",
            "-o",
            "NumberOfPasswordPrompts=1",
            env=env,
        )
        assert refused.returncode == 255, refused
        assert "Permission denied (publickey)" in refused.stderr, refused.stderr
        assert password not in c.logs()


def test_jupyterlab_needs_its_token_and_tensorboard_answers(built: Built) -> None:
    token = secrets.token_hex(16)
    env = {"JUPYTER_PASSWORD": token, "TENSORBOARD_LOGDIR": "/workspace/runs"}
    with container(built.ref, env) as c:
        jupyter, board = c.ports[8888], c.ports[6006]
        _wait("JupyterLab", lambda: _http(jupyter, "/api/status").status_code in (200, 403), c)
        assert _http(jupyter, "/api/status").status_code == 403
        assert _http(jupyter, "/api/status", headers={"Authorization": "token wrong"}).status_code == 403
        assert _http(jupyter, "/api/status", headers={"Authorization": f"token {token}"}).status_code == 200
        assert _http(jupyter, f"/lab?token={token}").status_code == 200
        contents = _http(jupyter, "/api/contents/runs", headers={"Authorization": f"token {token}"})
        assert contents.status_code == 200  # its root is the workspace (TensorBoard's folder is in it)
        _wait("TensorBoard", lambda: _http(board, "/").status_code == 200, c)
        assert "TensorBoard" in _http(board, "/").text or _http(board, "/data/logdir").ok
        # nothing secret in the logs, the process list, or the image's settings
        assert token not in c.logs()
        assert token not in _docker("top", c.name, "-eo", "pid,args").stdout
        image = json.loads(_docker("image", "inspect", built.ref).stdout)[0]["Config"]
        assert not any(e.split("=", 1)[0] in ("JUPYTER_PASSWORD", "PUBLIC_KEY") for e in image["Env"])
        assert not any("token" in k.lower() or "password" in k.lower() for k in image.get("Labels") or {})


def test_no_token_no_jupyterlab_and_no_tensorboard_unasked(built: Built) -> None:
    with container(built.ref, {}) as c:
        _wait("the start command", lambda: "JupyterLab not started" in c.logs(), c, timeout_s=60)
        time.sleep(3)
        for port in (c.ports[8888], c.ports[6006], c.ports[22]):
            with pytest.raises(requests.RequestException):
                _http(port, "/")


def test_two_containers_have_their_own_host_keys_and_stop_at_once(built: Built, ssh_key: Path) -> None:
    public = ssh_key.with_suffix(".pub").read_text().strip()
    with container(built.ref, {"PUBLIC_KEY": public}) as a, container(built.ref, {"PUBLIC_KEY": public}) as b:
        for c in (a, b):
            _wait("sshd", lambda c=c: bool(_host_key(c.ports[22])), c)
        key_a, key_b = _host_key(a.ports[22]), _host_key(b.ports[22])
        assert key_a
        assert key_b
        assert key_a != key_b
        assert a.exec("cat /etc/ssh/ssh_host_ed25519_key.pub").split()[1] == key_a
        started = time.monotonic()
        _docker("stop", a.name)  # the default 10 s grace: a quick stop means SIGTERM was handled
        took = time.monotonic() - started
        print(f"docker stop took {took:.2f} s")
        assert took < 3, took
        state = json.loads(_docker("inspect", a.name).stdout)[0]["State"]
        assert state["ExitCode"] == 0, state


def test_a_service_that_cannot_start_is_named_and_bad_keys_are_skipped(built: Built, ssh_key: Path) -> None:
    """A taken port (sshd holds JupyterLab's here, as a host's own server does under --network host) is one
    error naming the service and the variable to set, never a silent move to another port; a PUBLIC_KEY line
    that is no key is skipped with its line number (CRLF pasted keys still work); a private key is refused
    and never printed."""
    public = ssh_key.with_suffix(".pub").read_text().strip()
    env = {"PUBLIC_KEY": f"not a key\r\n{public}\r\n", "SSH_PORT": "8888", "JUPYTER_PASSWORD": "t" * 32}
    with container(built.ref, env) as c:
        _wait("the JupyterLab error", lambda: "JupyterLab (port 8888) exited" in c.logs(), c)
        logs = c.logs()
        assert "set JUPYTER_PORT to a free one" in logs
        assert "PUBLIC_KEY line 1 is not an SSH public key" in logs
        assert ":8889" not in logs  # JupyterLab did not move to the next port behind the platform's back
        _wait("sshd", lambda: bool(_host_key(c.ports[8888])), c)
        login = _ssh(c.ports[8888], ssh_key, "cat /root/.ssh/authorized_keys")
        assert login.returncode == 0, login.stderr
        assert login.stdout.split() == public.split()  # the key line, its CR gone
    private = ssh_key.read_text()
    with container(built.ref, {"PUBLIC_KEY": private}) as c:
        _wait("the refusal", lambda: "PUBLIC_KEY holds a PRIVATE key" in c.logs(), c, timeout_s=60)
        assert "sshd not started" in c.logs()
        assert private.splitlines()[1] not in c.logs()
        assert c.exec("pgrep -x sshd || echo none").strip() == "none"
