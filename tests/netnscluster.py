"""Network namespaces of this machine as the nodes of a cluster (issue 32), for
tests/integration/test_validate_cluster_netns.py and scripts/bench_cluster.py: N namespaces, each with an sshd
of its own (host key, config, authorized key in a folder of the caller's), joined by veth pairs to a bridge in
one more namespace where the CLI runs. Nothing touches the root namespace's network; :func:`netns_cluster`
deletes every namespace it made on the way out (also after a failure), killing what still runs inside.

Each node's sshd starts in the private mount namespace ``ip netns exec`` gives it, with a boot_id (and a
machine-id) of its own bind-mounted over the kernel's, and in a UTS namespace of its own whose hostname is the
namespace's name: N kernels as far as anything started over ssh can see.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = ("/usr/sbin/sshd", "ssh", "ssh-keygen", "ip", "tc", "iperf3")


class NetnsError(RuntimeError):
    """The namespaces could not be made (not root, a tool missing, an sshd that would not start)."""


SSHD = "/usr/sbin/sshd"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
SUBNET = "10.233.7"


def _sh(*argv: str, check: bool = True, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=check)


@dataclass
class Node:
    name: str  # namespace
    address: str
    folder: Path
    boot_file: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def target(self) -> str:
        return f"ssh://root@{self.address}"

    @property
    def label(self) -> str:
        return f"root@{self.address}"


@dataclass
class Cluster:
    switch: str
    nodes: list[Node]
    ssh_config: Path
    folder: Path
    extra: list[str] = field(default_factory=list)

    def start(
        self, node: Node, *, boot_id: str | None = None, sshd_extra: str = "", sys_class: Path | None = None
    ) -> None:
        """(Re)start *node*'s sshd with *boot_id* (default its own) bind-mounted over the kernel's; with
        *sys_class*, that folder bind-mounted over ``/sys/class`` too (a stand-in RDMA inventory: what
        anything started over ssh reads as /sys/class/infiniband)."""
        self.stop(node)
        if boot_id is not None:
            node.boot_file.write_text(boot_id + "\n")
        cfg = node.folder / "sshd_config"
        cfg.write_text(
            f"ListenAddress {node.address}\nPort 22\nHostKey {node.folder / 'host_key'}\n"
            "PermitRootLogin prohibit-password\n"
            f"AuthorizedKeysFile {self.folder / 'authorized_keys'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nStrictModes no\nUsePAM no\n"
            f"PidFile {node.folder / 'sshd.pid'}\nLogLevel INFO\n" + sshd_extra
        )
        mid = node.folder / "machine-id"
        binds = f"mount --bind {node.boot_file} {BOOT_ID}"
        if Path("/etc/machine-id").is_file():
            binds += f" && mount --bind {mid} /etc/machine-id"
        if sys_class is not None:
            binds += f" && mount --bind {sys_class} /sys/class"
        log = node.folder / "sshd.log"
        log.write_text("")
        with log.open("ab") as out:
            node.proc = subprocess.Popen(
                # a UTS namespace too: the node's own hostname (what mpirun's ranks report where they ran)
                [
                    "ip",
                    "netns",
                    "exec",
                    node.name,
                    "unshare",
                    "--uts",
                    "sh",
                    "-c",
                    f"hostname {node.name} && {binds} && exec {SSHD} -D -e -f {cfg}",
                ],
                stdout=out,
                stderr=out,
            )
        deadline = time.monotonic() + 20
        while f"Server listening on {node.address}" not in log.read_text():
            if node.proc.poll() is not None or time.monotonic() > deadline:
                raise NetnsError(
                    f"sshd of {node.name} did not start (exit {node.proc.poll()}):\n{log.read_text()}"
                )
            time.sleep(0.05)

    def stop(self, node: Node) -> None:
        if node.proc is None:
            return
        node.proc.terminate()
        try:
            node.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            node.proc.wait(timeout=10)
        node.proc = None

    def validate(
        self, report: Path, *extra: str, timeout: float = 240, node_suite: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """The CLI over every node, in the switch namespace (no per-node suite unless *node_suite*)."""
        argv = [
            "ip",
            "netns",
            "exec",
            self.switch,
            sys.executable,
            "-m",
            "imagesmith",
            "validate",
            *(n.target for n in self.nodes),
            "--ssh-config",
            str(self.ssh_config),
            *([] if node_suite else ["--no-node-suite"]),
            "--report",
            str(report),
            *extra,
        ]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO)

    def popen(self, report: Path, *extra: str) -> subprocess.Popen[str]:
        argv = ["ip", "netns", "exec", self.switch, sys.executable, "-m", "imagesmith", "validate"]
        argv += [n.target for n in self.nodes]
        argv += ["--ssh-config", str(self.ssh_config), "--no-node-suite", "--report", str(report), *extra]
        return subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, bufsize=1
        )


def _keygen(path: Path) -> None:
    _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "imagesmith-netns-test", "-f", str(path))


@contextmanager
def netns_cluster(n: int, folder: Path, *, subnet: str = SUBNET) -> Iterator[Cluster]:
    """*n* nodes (``{subnet}.11`` …) with their sshd running; all of it removed on the way out."""
    if os.geteuid() != 0:
        raise NetnsError("network namespaces need root (ip netns, tc, mount): CI runs as root")
    for tool in TOOLS:
        if shutil.which(tool) is None:
            raise NetnsError(
                f"{tool} is missing: run `bash scripts/setup.sh` (installs openssh-server, iperf3)"
            )
    tag = uuid.uuid4().hex[:6]
    switch = f"isw-{tag}"
    nodes = []
    for i in range(1, n + 1):
        d = folder / f"n{i}"
        d.mkdir()
        _keygen(d / "host_key")
        (d / "machine-id").write_text(uuid.uuid4().hex + "\n")
        boot = d / "boot_id"
        boot.write_text(str(uuid.uuid4()) + "\n")
        nodes.append(Node(name=f"isn{i}-{tag}", address=f"{subnet}.{10 + i}", folder=d, boot_file=boot))
    _keygen(folder / "client_key")
    shutil.copy(folder / "client_key.pub", folder / "authorized_keys")
    ssh_config = folder / "ssh_config"
    ssh_config.write_text(
        "Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  IdentitiesOnly yes\n"
        f"  IdentityFile {folder / 'client_key'}\n  IdentityAgent none\n  BatchMode yes\n  LogLevel ERROR\n"
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    made: list[str] = []
    c = Cluster(switch=switch, nodes=nodes, ssh_config=ssh_config, folder=folder)
    try:
        _sh("ip", "netns", "add", switch)
        made.append(switch)
        _sh("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", switch, "addr", "add", f"{subnet}.1/24", "dev", "br0")
        _sh("ip", "-n", switch, "link", "set", "br0", "up")
        _sh("ip", "-n", switch, "link", "set", "lo", "up")
        for i, node in enumerate(nodes, 1):
            _sh("ip", "netns", "add", node.name)
            made.append(node.name)
            _sh(
                "ip",
                "-n",
                switch,
                "link",
                "add",
                f"p{i}",
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                node.name,
            )
            _sh("ip", "-n", switch, "link", "set", f"p{i}", "master", "br0", "up")
            _sh("ip", "-n", node.name, "addr", "add", f"{node.address}/24", "dev", "eth0")
            _sh("ip", "-n", node.name, "link", "set", "eth0", "up")
            _sh("ip", "-n", node.name, "link", "set", "lo", "up")
        for node in nodes:
            c.start(node)
        yield c
    finally:
        for node in nodes:
            c.stop(node)
        for name in reversed(made):
            for pid in _sh("ip", "netns", "pids", name, check=False).stdout.split():
                _sh("kill", "-9", pid, check=False)  # what a killed run left inside (an iperf3 under timeout)
            _sh("ip", "netns", "del", name, check=False)


# ------------------------------------------------------------------------------------------------------------
# a stand-in for nccl-tests on the nodes (no GPU here): test_validate_collective_netns.py and
# scripts/bench_cluster.py

DATA = REPO / "tests" / "data" / "validate"
#: the real runs it replays: 2×H200 all_reduce_perf (nccl-tests 2.19.6, a lent H200 host), and a two-node
#: all_gather_perf (2 × GB10 over one 200 Gb/s RoCE link, all_gather_perf-gb10x2.log names its source): a
#: one-GPU all_gather has busbw 0 (factor (n-1)/n), which the all_gather expectation rightly fails
RECORDED = {
    "all_reduce_perf": DATA / "h200x2" / "all_reduce_perf-1.log",
    "all_gather_perf": DATA / "cluster" / "all_gather_perf-gb10x2.log",
}
#: the nodes' sshd ``SetEnv``: the stand-in's folder first on PATH
STANDIN_PATH = "PATH={}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"

#: prints the recorded log (every rank waits as long as rank 0 does); its own rank line from what Open MPI
#: gave this process (its rank, the hostname of the node it landed on)
STAND_IN = r"""#!/bin/sh
# stand-in for nccl-tests (no GPU on these test nodes): replays a recorded nccl-tests log
dir=$(dirname "$0")
log="$dir/recorded/$(basename "$0").log"
rank=${OMPI_COMM_WORLD_RANK:?not started by mpirun}
printf '#  Rank %2d Group  0 Pid %6d on %10s device  0 [0000:00:06] NVIDIA H200\n' "$rank" $$ "$(hostname)"
[ "$rank" = 0 ] || exec sleep "$(cat "$dir/delay")"
sed -n '/^# nccl-tests version/,/^# Using devices/p' "$log"
sleep "$(cat "$dir/delay")"
cat "$dir/transport"
sed -n '/^NCCL version\|out-of-place/,$p' "$log"
"""


def nccl_tests_standin(
    folder: Path, *, delay: float = 0.2, transport: str = "nccl-socket-fallback.log"
) -> Path:
    """*folder* with ``all_reduce_perf`` and ``all_gather_perf`` stand-ins (rank 0 pauses *delay* s, then
    prints the NCCL INFO lines of tests/data/validate/cluster/*transport* and the recorded table)."""
    (folder / "recorded").mkdir(exist_ok=True)
    for name, log in RECORDED.items():
        shutil.copy(log, folder / "recorded" / f"{name}.log")
        (folder / name).write_text(STAND_IN)
        (folder / name).chmod(0o755)
    (folder / "transport").write_text((DATA / "cluster" / transport).read_text())
    (folder / "delay").write_text(f"{delay}\n")
    return folder


def assert_node_lost(
    proc: subprocess.Popen[str], out: str, err: str, report: Path, said: str, *also_absent: str
) -> None:
    """A run that lost a node ended as it must: exit 7, *said* ("node n2 stopped answering …") with a fix
    and no traceback, and nothing of the cluster report written (cluster.json, cluster.md, nor
    *also_absent*). (No assertion rewriting in this module: each assert carries what it saw.)"""
    assert proc.returncode == 7, out + err
    assert said in err, err
    assert "fix:" in err, err
    assert "Traceback" not in err, err
    for name in ("cluster.json", "cluster.md", *also_absent):
        assert not (report / name).exists(), f"{name} was written by a run that lost a node"


def cluster_report(path: Path) -> dict[str, object]:
    """The cluster.json a run wrote into *path*."""
    data: dict[str, object] = json.loads((path / "cluster.json").read_text())
    return data


def promise(data: dict[str, object], name: str) -> dict[str, object]:
    """The promise *name* of a cluster report (an assertion error listing the names it has otherwise)."""
    promises = data["promises"]
    assert isinstance(promises, list)
    found = [p for p in promises if p["name"] == name]
    assert found, [p["name"] for p in promises]
    p: dict[str, object] = found[0]
    return p


# ------------------------------------------------------------------------------------------------------------
# a stand-in for perftest's ib_write_bw and the RDMA inventory (no RDMA device here):
# test_validate_rdma_netns.py

#: the real reports it replays (tests/data/validate/cluster/SOURCES.md and each file's first lines)
IB_WRITE_BW_RECORDED = {
    "healthy": DATA / "cluster" / "ib_write_bw-roce-D10-scc24.txt",
    "slow": DATA / "cluster" / "ib_write_bw-roce-sweep-gpu-operator.txt",
}

#: server (no host argument): listens on -p like perftest's server, sends its hostname over the exchange,
#: waits for the client's end; client: connects to HOST:-p (perftest's own words when refused), prints the
#: recorded report "slow" when either end's hostname is in the folder's ``slow`` file, else "healthy"; a
#: server whose hostname is in ``hang`` accepts the connection and never answers (a QP that never comes up)
IB_WRITE_BW_STAND_IN = r"""#!{python}
# stand-in for perftest's ib_write_bw (no RDMA device on these test nodes): replays a recorded real report
import pathlib, socket, sys, time

here = pathlib.Path(__file__).resolve().parent
args = sys.argv[1:]
takes = {{"-d", "-i", "-p", "-s", "-D", "-x", "-q", "-n"}}
port, host, i = 18515, None, 0
while i < len(args):
    if args[i] in takes:
        if args[i] == "-p":
            port = int(args[i + 1])
        i += 2
        continue
    if not args[i].startswith("-"):
        host = args[i]
    i += 1
me = socket.gethostname()
names = lambda f: set((here / f).read_text().split())
if host is None:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port))
    s.listen(1)
    print("************************************\n* Waiting for client to connect... *\n"
          "************************************", flush=True)
    c, _ = s.accept()
    if me in names("hang"):
        time.sleep(3600)
    c.sendall(me.encode() + b"\n")
    c.recv(16)
    sys.exit(0)
try:
    c = socket.create_connection((host, port), timeout=5)
except OSError:
    print(f" Couldn't connect to {{host}}:{{port}}", file=sys.stderr)
    print(" Unable to open file descriptor for socket connection Unable to init the socket connection",
          file=sys.stderr)
    sys.exit(1)
c.settimeout(None)  # perftest's client waits on the exchange as long as the server takes
peer = c.makefile().readline().strip()
kind = "slow" if names("slow") & {{me, peer}} else "healthy"
text = (here / "recorded" / f"{{kind}}.txt").read_text()
print("".join(ln for ln in text.splitlines(True) if not ln.startswith("#")), end="")
c.sendall(b"done\n")
"""

#: the stand-in /sys/class: one RoCE v2 port at 400 Gb/s (the layout of sysfs-roce-v2.txt, the kernel's ABI)
SYS_CLASS_PORT = {
    "state": "4: ACTIVE",
    "phys_state": "5: LinkUp",
    "rate": "400 Gb/sec (4X NDR)",
    "link_layer": "Ethernet",
    "gids/0": "fe80:0000:0000:0000:0e42:a1ff:fe52:3b10",
    "gids/1": "fe80:0000:0000:0000:0e42:a1ff:fe52:3b10",
    "gids/3": "0000:0000:0000:0000:0000:ffff:c0a8:010a",
    "gid_attrs/types/0": "IB/RoCE v1",
    "gid_attrs/types/1": "RoCE v2",
    "gid_attrs/types/3": "RoCE v2",
}


def ib_write_bw_standin(folder: Path) -> Path:
    """*folder* with an ``ib_write_bw`` stand-in, its recorded reports and empty ``slow``/``hang`` lists."""
    (folder / "recorded").mkdir(parents=True, exist_ok=True)
    for kind, path in IB_WRITE_BW_RECORDED.items():
        shutil.copy(path, folder / "recorded" / f"{kind}.txt")
    tool = folder / "ib_write_bw"
    tool.write_text(IB_WRITE_BW_STAND_IN.format(python=sys.executable))
    tool.chmod(0o755)
    for name in ("slow", "hang"):
        (folder / name).write_text("")
    return folder


def sys_class_tree(folder: Path, device: str = "mlx5_0") -> Path:
    """A /sys/class stand-in with *device* port 1 (:data:`SYS_CLASS_PORT`) under infiniband/."""
    port = folder / "infiniband" / device / "ports" / "1"
    for name, value in SYS_CLASS_PORT.items():
        (port / name).parent.mkdir(parents=True, exist_ok=True)
        (port / name).write_text(value + "\n")
    return folder


# a real torch for the nodes (no GPU here: PyTorch's CPU build): test_validate_ddp_netns.py and
# scripts/bench_cluster.py --ddp

TORCH = "torch==2.13.0"  # the CPU build this machine kind's pip finds (no CUDA wheels: ~0.9 GB in the venv)


def torch_cache() -> Path:
    """Where the torch venv is kept between runs: $IMAGESMITH_TEST_CACHE, else ~/.cache/imagesmith-tests."""
    root = os.environ.get("IMAGESMITH_TEST_CACHE") or str(Path.home() / ".cache" / "imagesmith-tests")
    return Path(root) / "torch-cpu-venv"


def torch_venv() -> Path:
    """A venv with a CPU torch (made once; remade when it no longer imports torch.distributed.run)."""
    venv = torch_cache()
    ok = ["-c", "import torch, torch.distributed.run; assert torch.distributed.is_gloo_available()"]
    if (venv / "bin" / "python3").exists():
        if subprocess.run([venv / "bin" / "python3", *ok], capture_output=True, timeout=120).returncode == 0:
            return venv
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    r = subprocess.run(
        [venv / "bin" / "pip", "install", "-q", TORCH],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if r.returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        raise NetnsError(f"pip install {TORCH} failed:\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return venv
