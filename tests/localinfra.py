"""Access to the local services scripts/services.sh starts (dockerd, registries on :5000 and :5443), and
throw-away registries for fault tests (Debian's docker-registry binary on a free port, stopped afterwards).

The variables come from the environment (scripts/test.sh exports them) or from ``$IMAGESMITH_STATE/test-env``.
A missing service is a test failure with the command that starts it, never a skip.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from imagesmith.credentials import credential_env_names
from imagesmith.registry import Credentials, RegistryClient

STATE = Path(os.environ.get("IMAGESMITH_STATE", "/var/lib/imagesmith-ci"))


def test_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.startswith("IMAGESMITH_TEST_")}
    if "IMAGESMITH_TEST_AUTH_PASSWORD" in env:
        return env
    path = STATE / "test-env"
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `bash scripts/setup.sh` (or scripts/services.sh start) first")
    for line in path.read_text().splitlines():
        k, _, v = line.partition("=")
        if k.startswith("IMAGESMITH_TEST_"):
            env.setdefault(k, v)
    return env


@dataclass(frozen=True)
class LocalRegistries:
    plain: str
    auth: str
    credentials: Credentials
    ca: Path

    def plain_client(self, **kw: object) -> RegistryClient:
        return RegistryClient(self.plain, insecure=True, credentials=None, **kw)  # type: ignore[arg-type]

    def auth_client(self, password: str | None = None, **kw: object) -> RegistryClient:
        creds = self.credentials if password is None else Credentials(self.credentials.username, password)
        return RegistryClient(self.auth, credentials=creds, ca_file=self.ca, **kw)  # type: ignore[arg-type]

    def auth_env(self) -> dict[str, str]:
        user_var, pass_var = credential_env_names(self.auth)
        return {user_var: self.credentials.username, pass_var: self.credentials.password}


def local_registries() -> LocalRegistries:
    env = test_env()
    regs = LocalRegistries(
        plain=env["IMAGESMITH_TEST_PLAIN_REGISTRY"],
        auth=env["IMAGESMITH_TEST_AUTH_REGISTRY"],
        credentials=Credentials(env["IMAGESMITH_TEST_AUTH_USER"], env["IMAGESMITH_TEST_AUTH_PASSWORD"]),
        ca=Path(env["IMAGESMITH_TEST_CA"]),
    )
    try:
        requests.get(f"http://{regs.plain}/v2/", timeout=5)
        requests.get(f"https://{regs.auth}/v2/", timeout=5, verify=str(regs.ca))
    except requests.RequestException as exc:
        pytest.fail(f"local registries are not answering ({exc}): run `bash scripts/services.sh start`")
    return regs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class TempRegistry:
    """A docker-registry process of our own (plain HTTP) on a free port."""

    addr: str
    root: Path
    proc: subprocess.Popen[bytes] | None = None

    def client(self, **kw: object) -> RegistryClient:
        return RegistryClient(self.addr, insecure=True, credentials=None, **kw)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)
        self.proc = None

    def start(self, *, readonly: bool = False) -> None:
        self.stop()
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "config.yml"
        ro = "  maintenance:\n    readonly:\n      enabled: true\n" if readonly else ""
        config.write_text(
            "version: 0.1\nlog:\n  level: error\nstorage:\n"
            f"  filesystem:\n    rootdirectory: {self.root / 'data'}\n  delete:\n    enabled: true\n{ro}"
            f"http:\n  addr: {self.addr}\n  secret: imagesmith-test\n"
        )
        binary = os.environ.get("IMAGESMITH_TEST_REGISTRY_BIN", "/usr/bin/docker-registry")
        log = (self.root / "registry.log").open("ab")
        self.proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if requests.get(f"http://{self.addr}/v2/", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                time.sleep(0.1)
        pytest.fail(f"temporary registry on {self.addr} did not start; see {self.root / 'registry.log'}")


@contextmanager
def temp_registry(root: Path, *, readonly: bool = False) -> Iterator[TempRegistry]:
    reg = TempRegistry(addr=f"127.0.0.1:{free_port()}", root=root)
    reg.start(readonly=readonly)
    try:
        yield reg
    finally:
        reg.stop()


@dataclass
class PrivateDockerd:
    """A second dockerd of our own: its own data root, exec root (and so its own containerd), socket and
    bridge (``(name, gateway CIDR)``, created here), no iptables rules of the engine's own, so that nothing
    it does touches the machine's main engine, its images or its rules.

    Never ``--bridge=none``: a dockerd started so deletes the interface ``docker0`` — the machine's main
    engine's bridge — at start (moby's ``removeDefaultBridgeInterface``). With *nat* its containers and builds
    reach the network through that bridge (one MASQUERADE and two FORWARD rules of ours: a build's RUN steps
    need one); without, the bridge has no route out. :meth:`stop` removes bridge and rules."""

    root: Path
    insecure: tuple[str, ...] = ()
    bridge: tuple[str, str] = ("isbench0", "172.30.238.1/24")
    nat: bool = False
    proc: subprocess.Popen[bytes] | None = None

    def _rules(self) -> list[list[str]]:
        if not self.nat:
            return []
        name, cidr = self.bridge
        net = str(ipaddress.ip_interface(cidr).network)
        return [
            ["nat", "POSTROUTING", "-s", net, "!", "-o", name, "-j", "MASQUERADE"],
            ["filter", "FORWARD", "-i", name, "!", "-o", name, "-j", "ACCEPT"],
            ["filter", "FORWARD", "-o", name, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
             "-j", "ACCEPT"],
        ]  # fmt: skip

    def _network_up(self) -> None:
        name, cidr = self.bridge
        if name == "docker0":
            raise ValueError("a private dockerd needs a bridge of its own, not the main engine's docker0")
        subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True, capture_output=True)
        subprocess.run(["ip", "addr", "add", cidr, "dev", name], check=True, capture_output=True)
        subprocess.run(["ip", "link", "set", name, "up"], check=True, capture_output=True)
        for table, chain, *rule in self._rules():
            subprocess.run(["iptables", "-t", table, "-I", chain, *rule], check=True, capture_output=True)

    def _network_down(self) -> None:
        for table, chain, *rule in self._rules():
            subprocess.run(["iptables", "-t", table, "-D", chain, *rule], capture_output=True, check=False)
        if self.bridge[0] != "docker0":
            subprocess.run(["ip", "link", "del", self.bridge[0]], capture_output=True, check=False)

    @property
    def exec_root(self) -> Path:
        """Short (a unix socket's path holds 107 bytes): /run/imagesmith-bench/<hash of the root>."""
        return Path("/run/imagesmith-bench") / hashlib.sha256(str(self.root).encode()).hexdigest()[:12]

    @property
    def host(self) -> str:
        return f"unix://{self.exec_root / 'docker.sock'}"

    @property
    def env(self) -> dict[str, str]:
        """The environment a docker CLI (or imagesmith, through the SDK or the CLI) uses to reach it."""
        return dict(os.environ, DOCKER_HOST=self.host)

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._network_up()
        except subprocess.CalledProcessError:
            self._network_down()
            raise
        cmd = [
            "dockerd",
            f"--data-root={self.root / 'data'}",
            f"--exec-root={self.exec_root / 'exec'}",
            f"--pidfile={self.root / 'docker.pid'}",
            f"--host={self.host}",
            "--storage-driver=overlay2",
            f"--bridge={self.bridge[0]}",
            "--iptables=false",
            "--ip-masq=false",
            *(f"--insecure-registry={r}" for r in self.insecure),
        ]
        log = (self.root / "dockerd.log").open("ab")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ok = subprocess.run(
                ["docker", "version", "--format", "{{.Server.Version}}"],
                env=self.env,
                capture_output=True,
                check=False,
                timeout=30,
            )
            if ok.returncode == 0:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"private dockerd did not start; see {self.root / 'dockerd.log'}")

    def stop(self) -> None:
        """Stop it (its containerd with it) and unmount whatever it left mounted under its root."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        roots = (str(self.root) + "/", str(self.exec_root) + "/")
        under = [m.split()[1] for m in mounts if m.split()[1].startswith(roots)]
        for point in sorted(under, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
        self._network_down()
        shutil.rmtree(self.exec_root, ignore_errors=True)


@contextmanager
def private_dockerd(
    root: Path, *, bridge: tuple[str, str], insecure: tuple[str, ...] = (), nat: bool = False
) -> Iterator[PrivateDockerd]:
    """A :class:`PrivateDockerd` under *root* on *bridge*, stopped and its data removed afterwards."""
    engine = PrivateDockerd(root=root, insecure=insecure, bridge=bridge, nat=nat)
    engine.start()
    try:
        yield engine
    finally:
        engine.stop()
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)], capture_output=True, check=False)
