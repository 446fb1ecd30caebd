"""nccl-tests all_reduce_perf over all GPUs, three rounds, against torch's own NCCL.

Pass: exit 0, `# Out of bounds values : 0 OK`, every #wrong 0, no `NCCL WARN`, no hang, large-message busbw
above
the floor (recorded baseline × 0.9, else a conservative floor from the topology) in every round. The spread
between
rounds is reported (a warning above 10 %).
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from imagesmith.errors import ParseError
from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu, spread, topology_floor
from imagesmith.validate.parsers import P2PMatrix, TopoMatrix, parse_nccl_log

SEARCH = (
    "/usr/local/bin/all_reduce_perf",
    "/opt/nccl-tests/build/all_reduce_perf",
    "/opt/nccl-tests/all_reduce_perf",
)


@pytest.fixture(scope="module")
def nccl_binary(ctx: Context) -> str:
    given = ctx.options.nccl_tests
    candidates = []
    if given:
        candidates = [given if given.endswith("all_reduce_perf") else f"{given.rstrip('/')}/all_reduce_perf"]
    else:
        r = ctx.run("command -v all_reduce_perf")
        if r.rc == 0 and r.stdout.strip():
            candidates.append(r.stdout.strip())
        candidates.extend(SEARCH)
    for c in candidates:
        if ctx.run(f"test -x {shlex.quote(c)}").rc == 0:
            return c
    fail(
        "nccl-tests' all_reduce_perf was not found (looked at " + ", ".join(candidates) + ")",
        "use an imagesmith image (it carries nccl-tests built against torch's NCCL), or build nccl-tests "
        "and pass "
        "--nccl-tests DIR",
    )


@pytest.fixture(scope="module")
def nccl_env(versions: dict[str, Any]) -> dict[str, str]:
    lib = versions.get("loaded_libs", {}).get("libnccl.so")
    if not lib:
        fail(
            f"torch did not load a libnccl ({versions.get('nccl_error') or 'not in its process maps'})",
            "install a CUDA build of torch with its NCCL (nvidia-nccl-* wheel)",
        )
    libdir = lib.rsplit("/", 1)[0]
    return {"NCCL_DEBUG": "WARN", "IMAGESMITH_NCCL_LIBDIR": libdir}


def _ld(env: dict[str, str]) -> str:
    d = shlex.quote(env["IMAGESMITH_NCCL_LIBDIR"])
    return f'LD_LIBRARY_PATH={d}"${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}"'


def test_nccl_same_library(
    ctx: Context, check: CheckRecord, versions: dict[str, Any], nccl_binary: str, nccl_env: dict[str, str]
) -> None:
    torch_lib = versions["loaded_libs"]["libnccl.so"]
    r = ctx.run(f"{_ld(nccl_env)} ldd {shlex.quote(nccl_binary)}", env=nccl_env)
    line = next((ln for ln in r.stdout.splitlines() if "libnccl" in ln), "")
    check.figures.update(torch_nccl=torch_lib, torch_nccl_version=versions.get("nccl"), binary=nccl_binary)
    if "not found" in r.stdout:
        fail(
            f"{nccl_binary} has unresolved libraries:\n{r.stdout.strip()}",
            "rebuild nccl-tests for this image",
        )
    if not line:
        fail(
            f"{nccl_binary} does not link libnccl dynamically (ldd: {r.output.strip()[:300]})",
            "build nccl-tests against torch's libnccl.so.2 (NCCL_HOME=site-packages/nvidia/nccl)",
        )
    loaded = line.split("=>", 1)[-1].split("(")[0].strip()
    real = ctx.run(f"readlink -f {shlex.quote(loaded)} {shlex.quote(torch_lib)}").stdout.split()
    check.figures["tests_nccl"] = loaded
    if len(real) != 2 or real[0] != real[1]:
        fail(
            f"nccl-tests loads {loaded}, torch loads {torch_lib}: the bandwidth measured would not be "
            f"torch's NCCL",
            "point LD_LIBRARY_PATH (or the binary's rpath) at torch's nvidia/nccl/lib",
        )


def test_nccl_allreduce(
    ctx: Context,
    check: CheckRecord,
    multi_gpus: list[Gpu],
    versions: dict[str, Any],
    nccl_binary: str,
    nccl_env: dict[str, str],
    topology: tuple[TopoMatrix, P2PMatrix | None],
) -> None:
    o = ctx.options
    n = len(multi_gpus)
    cmd = (
        f"{_ld(nccl_env)} {shlex.quote(nccl_binary)} -b {o.nccl_min_bytes} -e {o.nccl_max_bytes} -f 2 -g {n} "
        f"-c 1 -n {o.nccl_iters} -w {o.nccl_warmup}"
    )
    check.figures["command"] = (
        f"NCCL_NVLS_ENABLE=0 NCCL_DEBUG=WARN LD_LIBRARY_PATH=<torch nccl lib> {cmd.split(' ', 1)[1]}"
    )
    if o.baseline_busbw_gbps:
        floor_gbps, basis = (
            0.9 * o.baseline_busbw_gbps,
            f"0.9 × baseline {o.baseline_busbw_gbps:g} GB/s ({o.baseline_source})",
        )
    else:
        f = topology_floor(topology[0])
        floor_gbps, basis = f.gbps, f.basis
    check.figures.update(floor_gbps=floor_gbps, floor_basis=basis, gpus=n)
    rounds: list[dict[str, Any]] = []
    check.figures["rounds"] = rounds
    problems: list[str] = []
    for i in range(1, o.nccl_rounds + 1):
        r = ctx.run(cmd, timeout=o.nccl_timeout_s, env=nccl_env)
        log = f"nccl-allreduce-{i}.log"
        ctx.save_log(log, f"$ {check.figures['command']}\n{r.output}")
        if r.timed_out:
            last = (r.output.strip().splitlines() or ["(no output)"])[-1]
            fail(
                f"round {i}: all_reduce_perf hung — killed after {o.nccl_timeout_s} s (last line: {last!r})",
                "a collective that never completes means broken P2P/NVLink or a stuck GPU: rerun with "
                "NCCL_DEBUG=INFO, "
                "check `nvidia-smi topo -m` and dmesg for Xid errors, and ask the provider",
            )
        try:
            res = parse_nccl_log(r.output, source=log)
        except ParseError as exc:
            bad: ParseError | None = exc
        else:
            bad = None
        if bad is not None:
            fail(f"round {i}: {bad.message} (exit code {r.rc})", bad.hint or f"see {log} in the report")
        if r.rc != 0:
            problems.append(f"round {i}: all_reduce_perf exited {r.rc}")
        if not res.oob_ok or res.oob_count:
            problems.append(f"round {i}: {res.oob_count} out-of-bounds values")
        wrong = res.wrong_rows()
        if wrong:
            problems.append(f"round {i}: wrong results at sizes {', '.join(str(w.size) for w in wrong[:5])}")
        if res.warnings:
            problems.append(f"round {i}: NCCL WARN: {res.warnings[0][:200]}")
        if res.n_gpus is not None and res.n_gpus != n:
            problems.append(f"round {i}: ran on {res.n_gpus} GPUs, expected {n}")
        if res.nccl_library and versions.get("nccl_code") and res.nccl_library != versions["nccl_code"]:
            problems.append(
                f"round {i}: nccl-tests ran NCCL {res.nccl_library}, torch has {versions['nccl_code']}"
            )
        rounds.append(
            {
                "round": i,
                "log": log,
                "avg_busbw": res.avg_busbw,
                "max_size": res.rows[-1].size,
                "max_size_busbw": res.max_size_busbw,
                "busbw": {str(row.size): row.busbw for row in res.rows},
                "nccl_library": res.nccl_library,
            }
        )
        if res.max_size_busbw < floor_gbps:
            problems.append(
                f"round {i}: busbw {res.max_size_busbw:g} GB/s at {res.rows[-1].size} B is below the floor "
                f"{floor_gbps:g} GB/s ({basis})"
            )
    peaks = [r["max_size_busbw"] for r in rounds]
    check.figures["max_size_busbw_mean"] = sum(peaks) / len(peaks)
    check.figures["spread"] = spread(peaks)
    if spread(peaks) > 0.10:
        check.warnings.append(
            f"busbw varies {spread(peaks):.0%} between rounds ({', '.join(f'{p:g}' for p in peaks)})"
        )
    if problems:
        fail(
            "; ".join(problems),
            "NCCL is not healthy on this host: rerun with NCCL_DEBUG=INFO to see the transport "
            "(P2P/NVLink expected, "
            "SHM or NET means P2P is off), check `nvidia-smi topo -m`, and show the logs to the provider",
        )
