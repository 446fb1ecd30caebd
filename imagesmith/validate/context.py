"""What the suite's checks share: the target host (testinfra), the options, raw logs and the figures for the
report.

The suite runs as pytest in a child process (``python -m pytest <suite> -p imagesmith.validate.plugin``); the
options travel as JSON in ``IMAGESMITH_VALIDATE_OPTIONS``. Every command on the target goes through
:meth:`Context.run`, which keeps NVLink multicast off (``NCCL_NVLS_ENABLE=0`` and friends) and wraps the
command in
``timeout`` so that a hang becomes a failure, never a stuck suite.
"""

from __future__ import annotations

import base64
import json
import shlex
import time
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import pytest

#: set in every command the suite runs on a target: NVLink multicast (NVLS) off in NCCL, PyTorch and NVSHMEM.
MULTICAST_OFF_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

OPTIONS_ENV = "IMAGESMITH_VALIDATE_OPTIONS"
#: the smallest message all_reduce_perf measures (its -b); --nccl-max-bytes may not be below it
NCCL_MIN_BYTES = 8
PROBE_MARK = "IMAGESMITH_PROBE "
TIMEOUT_RCS = (124, 137)


@dataclass(frozen=True, kw_only=True)
class SuiteOptions:
    """Everything a validation run needs. ``target`` is a testinfra host spec (``local://``, ``docker://ID``,
    …).
    """

    target: str = "local://"
    target_label: str = ""
    expect_gpu: str | None = None
    expect_count: int | None = None
    expect_nvlink: bool = False
    shm_min_bytes: int = 1024**3
    shm_min_source: str = "imagesmith default (1 GiB)"
    report_dir: str = "reports/validate"
    #: where the bundle is put when the run ends, when ``report_dir`` is its temp folder beside it (validate)
    bundle_dir: str = ""
    python: str = "python3"
    nccl_tests: str | None = None
    nccl_rounds: int = 3
    nccl_min_bytes: str = str(NCCL_MIN_BYTES)
    nccl_max_bytes: str = "1G"
    nccl_iters: int = 20
    nccl_warmup: int = 5
    nccl_timeout_s: int = 300
    baseline_busbw_gbps: float | None = None
    baseline_source: str = ""
    #: per-GPU figures of a healthy host of this kind (``--baseline`` report, ``--baseline-from`` index):
    #: hbm_copy_gbps, matmul_tflops, h2d_gbps, d2h_gbps → value; they win over imagesmith/data/perf.toml
    baseline_figures: dict[str, float] = field(default_factory=dict)
    #: ``--baseline-from INDEX``: validated hosts grouped by GPU model, count and link (expected.fleet_groups)
    fleet: list[dict[str, Any]] = field(default_factory=list)
    fleet_source: str = ""
    perf_fail_ratio: float = 0.80
    perf_warn_ratio: float = 0.90
    perf_seconds: float = 0.4
    command_timeout_s: int = 300
    #: ``--foreign-memory-max``: memory other processes may hold on a GPU before the free check fails
    foreign_memory_max: str = "3%"
    #: ``--soak DURATION`` in seconds (0: no soak), its window, and its bands against the first minute
    soak_s: float = 0.0
    soak_interval_s: float = 5.0
    soak_fail_ratio: float = 0.92
    soak_warn_ratio: float = 0.96
    #: ``--listing FILE`` and the ``--expect-*`` shorthands: what the rental promised
    #: (:meth:`imagesmith.validate.listing.Listing.to_json`)
    listing: dict[str, Any] = field(default_factory=dict)
    #: ``--checkpoint-size``: what test_storage writes, fsyncs and reads back in each folder (and fio's file)
    checkpoint_bytes: int = 1024**3
    #: ``--dcgm-level``: dcgmi diag's level (-1: 3 with --soak, else 1; 0: off)
    dcgm_level: int = -1
    ssh_config: str | None = None
    ssh_identity_file: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    def recorded(self) -> dict[str, Any]:
        """The options as the report records them: the folder the bundle ends up in, not its temp folder."""
        fields = asdict(self)
        fields["report_dir"] = fields.pop("bundle_dir") or self.report_dir
        return fields

    @classmethod
    def from_json(cls, text: str) -> SuiteOptions:
        return cls(**json.loads(text))


def target_host(options: SuiteOptions) -> Any:
    """The testinfra host of ``options.target`` (``ssh://`` with ``--ssh-config``/``--ssh-identity``)."""
    import testinfra

    kwargs: dict[str, str] = {}
    if options.target.startswith("ssh://"):
        if options.ssh_config:
            kwargs["ssh_config"] = options.ssh_config
        if options.ssh_identity_file:
            kwargs["ssh_identity_file"] = options.ssh_identity_file
    return testinfra.get_host(options.target, **kwargs)


@dataclass
class CheckRecord:
    figures: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str
    #: seconds the command ran and the limit ``timeout`` had (None where it was not run under one)
    elapsed_s: float | None = None
    limit_s: float | None = None

    @property
    def output(self) -> str:
        return self.stdout + (("\n" + self.stderr) if self.stderr else "")

    @property
    def timed_out(self) -> bool:
        """Killed by ``timeout``: exit 124 (TERM), or 137 (the KILL ``-k`` sends later) once the limit has
        passed. A 137 before the limit is another SIGKILL — the kernel's OOM killer: :attr:`killed`."""
        if self.rc == 124:
            return True
        if self.rc == 137:
            return self.elapsed_s is None or self.limit_s is None or self.elapsed_s >= self.limit_s
        return False

    @property
    def killed(self) -> str | None:
        """Why the command died of a signal it did not choose (not the timeout), in words; else None."""
        if self.timed_out or self.rc <= 128 or self.rc > 128 + 64:
            return None
        sig = self.rc - 128
        words = {
            9: "SIGKILL — usually the kernel's out-of-memory killer (dmesg: 'Out of memory: Killed')",
            6: "SIGABRT — the process aborted (a failed assertion in a library)",
            7: "SIGBUS — a bus error (usually /dev/shm too small)",
            11: "SIGSEGV — it crashed (a segmentation fault, often in the CUDA driver)",
        }
        return f"killed by signal {sig}: {words.get(sig, 'see dmesg')}"


def decoded(result: Any) -> Result:
    """A testinfra CommandResult as text, whatever bytes the target printed: UTF-8, anything else replaced
    (U+FFFD). testinfra's own ``.stdout`` decodes with the target's locale and raises on a byte it cannot
    decode — a GPU host printing garbage must fail the check that reads it, never the suite."""
    return Result(
        rc=result.rc,
        stdout=bytes(result.stdout_bytes).decode("utf-8", errors="replace"),
        stderr=bytes(result.stderr_bytes).decode("utf-8", errors="replace"),
    )


_Failed = pytest.fail.Exception


class CheckFailed(_Failed):  # type: ignore[valid-type,misc]  # pytest's public name for its Failed
    """A check failed: what is wrong and the fix, as fields. pytest reports it as any ``pytest.fail`` (no
    traceback; the text is ``what`` and ``fix: …``); the plugin (:mod:`imagesmith.validate.plugin`) takes the
    fields from the call's excinfo, as pytest's own skipping plugin does."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(f"{what}\nfix: {fix}", pytrace=False)
        self.what = what
        self.fix = fix


def fail(what: str, fix: str) -> NoReturn:
    """Fail the current check with what is wrong and what to do (no traceback in the report)."""
    raise CheckFailed(what, fix)


_Skipped = pytest.skip.Exception

#: a check outcome's ``skip`` field: why it was skipped, as a value the verdict reads (never the message)
SKIP_NO_GPU = "no-gpu"


class NoGpuVisible(_Skipped):  # type: ignore[valid-type,misc]  # pytest's public name for its Skipped
    """A GPU check skipped because the target shows no GPU: the run proves nothing, so its verdict is "not
    validated", never "passed". The plugin records it as the check's ``skip`` field (:data:`SKIP_NO_GPU`)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)


def skip_no_gpu(reason: str) -> NoReturn:
    """Skip the current check because the target shows no GPU (*reason* says how that was seen)."""
    raise NoGpuVisible(reason)


class Context:
    """One per suite run. Holds the testinfra host and the figures every check records."""

    def __init__(self, options: SuiteOptions, host: Any) -> None:
        self.options = options
        self.host = host
        self.report_dir = Path(options.report_dir)
        self.report_dir.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, CheckRecord] = {}
        self.facts: dict[str, Any] = {}
        self.logs: list[str] = []
        self._workdir: str | None = None

    # ----------------------------------------------------------------------------------------------- records
    def record(self, check: str) -> CheckRecord:
        return self.records.setdefault(check, CheckRecord())

    def save_log(self, name: str, text: str) -> Path:
        path = self.report_dir / name
        path.write_text(text)
        if name not in self.logs:
            self.logs.append(name)
        return path

    # ------------------------------------------------------------------------------------------- commands
    def env_prefix(self, extra: dict[str, str] | None = None) -> str:
        env = dict(MULTICAST_OFF_ENV)
        env.update(extra or {})
        return "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())

    def run(self, command: str, *, timeout: int | None = None, env: dict[str, str] | None = None) -> Result:
        """Run a shell command on the target with the multicast-off env, killed after *timeout* seconds."""
        t = timeout or self.options.command_timeout_s
        wrapped = f"{self.env_prefix(env)} timeout -k 10 {int(t)} sh -c {shlex.quote(command)}"
        started = time.monotonic()
        r = decoded(self.host.run(wrapped))
        return replace(r, elapsed_s=time.monotonic() - started, limit_s=float(t))

    @property
    def workdir(self) -> str:
        if self._workdir is None:
            r = decoded(self.host.run("mktemp -d /tmp/imagesmith-validate.XXXXXX"))
            if r.rc != 0:
                fail(
                    f"cannot create a work folder on the target: {r.stderr.strip()}",
                    "the target needs a writable /tmp",
                )
            self._workdir = r.stdout.strip()
        return self._workdir

    def cleanup(self) -> None:
        if self._workdir:
            self.host.run(f"rm -rf {shlex.quote(self._workdir)}")

    def put_probe(self, name: str) -> str:
        """Copy a probe script from the package to the target; return its path there."""
        text = resources.files("imagesmith.validate.probes").joinpath(f"{name}.py").read_text()
        path = f"{self.workdir}/{name}.py"
        data = base64.b64encode(text.encode()).decode()
        r = decoded(self.host.run(f"echo {data} | base64 -d > {shlex.quote(path)}"))
        if r.rc != 0:
            fail(
                f"cannot copy the {name} probe to the target: {r.stderr.strip()}",
                "the target needs base64 and /tmp",
            )
        return path

    def probe(
        self, name: str, *args: str, timeout: int | None = None, env: dict[str, str] | None = None
    ) -> tuple[Result, list[dict[str, Any]]]:
        """Run a probe with the target's Python; return the raw result and every JSON line it printed."""
        path = self.put_probe(name)
        argv = " ".join(shlex.quote(a) for a in (self.options.python, path, *args))
        r = self.run(argv, timeout=timeout, env=env)
        return r, parse_probe_lines(r.stdout)

    def probe_one(self, name: str, *args: str, timeout: int | None = None) -> dict[str, Any]:
        r, found = self.probe(name, *args, timeout=timeout)
        if r.timed_out:
            fail(
                f"the {name} probe did not finish within {timeout or self.options.command_timeout_s} s "
                f"(hung)",
                "run it by hand on the host to see where it stops; a hung CUDA call usually means a "
                "broken driver",
            )
        if not found:
            tail = "\n".join(r.output.strip().splitlines()[-8:])
            py = self.options.python
            if r.killed:
                fix = (
                    f"the probe died mid-run ({r.killed}): read dmesg on the target (Xid errors, the OOM "
                    "killer); if it repeats, the GPU or its driver is failing: ask the provider"
                )
            elif r.rc == 127 or "No module named" in r.output:
                fix = f"check that `{py}` exists on the target and imports torch (--python PATH)"
            else:
                fix = (
                    f"run `{py} {name}.py` on the target (imagesmith/validate/probes/) to see where it stops"
                )
            fail(
                f"the {name} probe printed no result (exit code {r.rc}"
                + (f", {r.killed}" if r.killed else "")
                + f") with {py}:\n{tail}",
                fix,
            )
        return found[-1]


def parse_probe_lines(stdout: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for line in stdout.splitlines():
        idx = line.find(PROBE_MARK)
        if idx >= 0:
            try:
                value = json.loads(line[idx + len(PROBE_MARK) :])
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found
