"""Run the packaged suite in a child pytest and return the report it wrote."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from imagesmith import inputs
from imagesmith.errors import ConfigError, ValidationFailed
from imagesmith.validate.context import OPTIONS_ENV, SuiteOptions, target_host
from imagesmith.validate.record import report_figures


def suite_dir() -> Path:
    """The packaged suite folder (pytest needs it on disk: importlib.resources gives its path)."""
    found = resources.files("imagesmith.validate") / "suite"
    if not isinstance(found, Path):  # pragma: no cover - imagesmith installed as a zip
        raise ConfigError(
            f"the validation suite {found} is not a folder on disk",
            hint="install imagesmith as a normal (unzipped) wheel: pip install imagesmith",
        )
    return found


SUITE_DIR = suite_dir()


def pytest_argv(options: SuiteOptions, *, select: str | None, ini: Path) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        str(SUITE_DIR),
        "-p",
        "imagesmith.validate.plugin",
        "-p",
        "no:cacheprovider",
        "-c",
        str(ini),
        "--rootdir",
        str(SUITE_DIR),
        "--import-mode=importlib",
        "--junitxml",
        str(Path(options.report_dir) / "junit.xml"),
        "-o",
        "junit_family=xunit2",
        "-o",
        "junit_suite_name=imagesmith-validate",
        "-v",
        "-rfEs",
        "--tb=line",
        "--color=no",
    ]
    if select:
        argv += ["-k", select]
    return argv


def _ssh_by_hand(options: SuiteOptions) -> str:
    """The plain ssh command line that does what the suite's connection does (for the error's fix)."""
    from testinfra.backend.base import BaseBackend

    spec = BaseBackend.parse_hostspec(options.target.removeprefix("ssh://"))
    argv = ["ssh"]
    if options.ssh_config:
        argv += ["-F", options.ssh_config]
    if options.ssh_identity_file:
        argv += ["-i", options.ssh_identity_file]
    if spec.port:
        argv += ["-p", spec.port]
    argv += [f"{spec.user}@{spec.name}" if spec.user else spec.name, "true"]
    return " ".join(shlex.quote(a) for a in argv)


def _ssh_fix(said: str, options: SuiteOptions) -> str:
    """The fix for ssh's own last line *said* (a third party's words, read as they are)."""
    by_hand = _ssh_by_hand(options)
    low = said.lower()
    if "permission denied" in low:
        return (
            "the host refused the login: use the right user in the target (ssh://USER@host) and a key it "
            "accepts (--ssh-identity KEY, whose .pub is in that user's ~/.ssh/authorized_keys there, or a "
            f"key in your ssh agent); try `{by_hand}`"
        )
    if "connection refused" in low:
        return (
            "nothing accepts ssh connections there: check the host and port of the target "
            f"(ssh://user@host:PORT) and that sshd runs on it; try `{by_hand}`"
        )
    if "host key verification failed" in low or "host identification has changed" in low:
        return (
            "the host's key is not in your known_hosts (or it changed): connect once by hand to check and "
            f"accept it (`{by_hand}`), or give --ssh-config with the right UserKnownHostsFile"
        )
    if "not found" in low and "ssh" in low:
        return "install the OpenSSH client here (Debian/Ubuntu: apt-get install openssh-client)"
    if "timed out" in low or "resolve" in low or "no route" in low or "unreachable" in low:
        return f"check the host name/address and that its ssh port is reachable from here; try `{by_hand}`"
    return f"run `{by_hand}` to see why"


def check_ssh_target(options: SuiteOptions) -> None:
    """One ``true`` over the same ssh connection the suite uses, before the suite starts: a target that cannot
    be reached (closed port, refused key, unknown host key, no ssh client) is one ConfigError that names the
    host and the fix, not eighteen failed checks.
    """
    host = target_host(options)
    label = options.target_label or options.target
    try:
        result = host.run("true")
    except RuntimeError as exc:  # testinfra's ssh backend raises on ssh's own exit code 255
        result = exc.args[0] if exc.args else None
    if result is not None and result.rc == 0:
        return
    stderr = getattr(result, "stderr", "") or ""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = lines[-1] if lines else f"ssh exited with code {getattr(result, 'rc', '?')} and said nothing"
    raise ConfigError(f"cannot reach {label} over ssh: {said}", hint=_ssh_fix(said, options))


def check_docker_target(options: SuiteOptions) -> None:
    """A ``docker://CONTAINER`` target must be a running container of this engine before the suite starts:
    otherwise every check would fail on ``docker exec``. One ConfigError naming the container and the fix.
    """
    from imagesmith.engine import Engine

    name = options.target.split("://", 1)[1].split("?", 1)[0]
    state = Engine().container_state(name)
    if state == "running":
        return
    if state is None:
        raise ConfigError(
            f"docker://{name}: no such container in this Docker engine",
            hint="start it (docker run -d --name NAME IMAGE sleep infinity) or name a running one "
            "(docker ps); to validate an image, pass the image itself as TARGET",
        )
    raise ConfigError(
        f"docker://{name}: the container is {state}, not running",
        hint=f"start it (docker start {name}), or pass the image as TARGET",
    )


#: seconds the suite's process group gets between SIGTERM and SIGKILL when imagesmith stops it
STOP_GRACE_S = 5.0
_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None]:
    def die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
        """In the suite's process, before pytest starts: SIGKILL when imagesmith dies (even by SIGKILL)."""
        if sys.platform.startswith("linux"):
            import ctypes

            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # imagesmith died before the line above ran
            os._exit(1)

    return die_with_parent


def _stop_group(pgid: int) -> None:
    """SIGTERM to every process of the group, SIGKILL to what is left after :data:`STOP_GRACE_S`."""
    for signum in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, signum)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + (STOP_GRACE_S if signum == signal.SIGTERM else 0)
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except (ProcessLookupError, PermissionError):
                return
            time.sleep(0.05)


def run_in_own_group(argv: list[str], *, env: dict[str, str]) -> int:
    """Run the suite (*argv*) in a process group of its own and return its exit status. However imagesmith
    leaves this (the suite ends, an error, Ctrl-C, SIGTERM), the whole group is stopped: no check goes on
    loading the GPU or writing a report after imagesmith is gone. SIGKILL of imagesmith itself kills the
    suite's process too (PR_SET_PDEATHSIG). The suite's own children are stopped with the group."""
    proc = subprocess.Popen(argv, env=env, start_new_session=True, preexec_fn=_die_with(os.getpid()))
    # the suite's own children have no death signal: a watchdog stops the whole group when imagesmith dies
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), str(proc.pid)],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        return proc.wait()
    finally:
        _stop_group(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=STOP_GRACE_S)
        watchdog.kill()
        watchdog.wait()


#: the watchdog: when imagesmith is gone, SIGKILL to the suite's process group; it ends with the group
_WATCHDOG = """
import os, signal, sys, time
parent, group = int(sys.argv[1]), int(sys.argv[2])
while True:
    try:
        os.killpg(group, 0)
    except OSError:
        sys.exit(0)
    if os.getppid() != parent:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
        sys.exit(0)
    time.sleep(0.2)
"""


def run_suite(options: SuiteOptions, *, select: str | None = None) -> dict[str, Any]:
    """Run every check against ``options.target``; write the bundle to ``options.report_dir``; return
    report.json. An ``ssh://`` target is tried first (:func:`check_ssh_target`).
    """
    if options.target.startswith("ssh://"):
        check_ssh_target(options)
    elif options.target.startswith("docker://"):
        check_docker_target(options)
    report_dir = Path(options.report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    report_json = report_dir / "report.json"
    # an earlier run's verdict never stands beside this one: a suite that dies (OOM-killed, a crash) writes
    # no report, and a "PASSED" report.md left from before would contradict the exit code
    for stale in (report_json, report_dir / "report.md"):
        stale.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="imagesmith-validate-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        ini.write_text("[pytest]\n")
        env = dict(os.environ)
        env[OPTIONS_ENV] = options.to_json()
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        # only our plugin: the suite must behave the same on hosts with many pytest plugins installed
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
        returncode = run_in_own_group(pytest_argv(options, select=select, ini=ini), env=env)
    if not report_json.exists():
        raise ValidationFailed(
            f"the validation suite did not finish (pytest exit code {returncode}); no report was "
            f"written to "
            f"{options.bundle_dir or report_dir}",
            hint="read the pytest output above; a target that cannot be reached is the usual cause",
        )
    data: dict[str, Any] = json.loads(report_json.read_text())
    return data


def load_baseline(path: Path) -> tuple[float | None, str, dict[str, float]]:
    """An earlier report.json of a good run on the same kind of host: its mean largest-size all_reduce busbw
    (None with one GPU) and the median of each per-GPU performance figure (hbm_copy_gbps, matmul_tflops,
    h2d_gbps, d2h_gbps)."""
    hint = "give the report.json of an earlier `imagesmith validate --report DIR` run"
    text = inputs.read_user_text(path, "--baseline", hint=hint)
    try:
        data = inputs.loads_json(text, f"--baseline {path}", hint=hint)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(
            f"--baseline {path}: cannot read it as a report.json ({exc})",
            hint="give the report.json of an earlier `imagesmith validate --report DIR` run",
        ) from None
    checks = data.get("checks") if isinstance(data, dict) else None
    found = report_figures(checks if isinstance(checks, list) else [])
    busbw = found.pop("allreduce_busbw_gbps", None)
    figures = found
    if busbw is None and not figures:
        raise ConfigError(
            f"--baseline {path}: it has no nccl all_reduce figures (test_nccl_allreduce.max_size_busbw_mean) "
            "and no performance figures",
            hint="pass the report.json of a passing run on the same kind of host",
        )
    source = f"{path} ({data.get('started', '?')})"
    return busbw, source, figures
