"""Access to the local services scripts/services.sh starts (dockerd, registries on :5000 and :5443), and
throw-away registries for fault tests (Debian's docker-registry binary on a free port, stopped afterwards).

The variables come from the environment (scripts/test.sh exports them) or from ``$IMAGESMITH_STATE/test-env``.
A missing service is a test failure with the command that starts it, never a skip.
"""

from __future__ import annotations

import os
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
