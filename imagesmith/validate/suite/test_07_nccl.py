"""nccl-tests all_reduce_perf over all GPUs, three rounds, against torch's own NCCL.

Pass: exit 0, `# Out of bounds values : 0 OK`, every #wrong 0, no `NCCL WARN`, no hang, large-message busbw
above the floor (recorded baseline × 0.9, else a conservative floor from the topology) in every round. The
spread between rounds is reported (a warning above 10 %). The rounds run in imagesmith.validate.nccl.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.criteria import Gpu, topology_floor, weakest_link
from imagesmith.validate.expected import Bands, Expected, allreduce_expected, fleet_expected
from imagesmith.validate.nccl import ld_prefix, run_allreduce_rounds
from imagesmith.validate.parsers import P2PMatrix, TopoMatrix

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
    return ld_prefix(env["IMAGESMITH_NCCL_LIBDIR"])


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
    topology: tuple[TopoMatrix, P2PMatrix | None],
    request: pytest.FixtureRequest,
) -> None:
    # looked up only now: pytest sets session/module-scoped fixtures up before function-scoped ones, so
    # asking for them in the signature failed a one-GPU host on a missing all_reduce_perf (or torch) before
    # `multi_gpus` could skip the check ("needs at least 2 GPUs")
    versions: dict[str, Any] = request.getfixturevalue("versions")
    nccl_binary: str = request.getfixturevalue("nccl_binary")
    nccl_env: dict[str, str] = request.getfixturevalue("nccl_env")
    o = ctx.options
    link = weakest_link(topology[0])
    model = " + ".join(sorted({g.name for g in multi_gpus if g.name}))
    expected = (
        Expected(value=o.baseline_busbw_gbps, kind="baseline", source=o.baseline_source or "--baseline")
        if o.baseline_busbw_gbps
        else fleet_expected(
            o.fleet,
            gpu=model,
            count=len(multi_gpus),
            link=link or "",
            figure="allreduce_busbw_gbps",
            source=o.fleet_source,
        )
        or allreduce_expected(multi_gpus[0], len(multi_gpus), link)
    )
    if expected is not None:
        floor_gbps = o.perf_fail_ratio * expected.value
        basis = f"{o.perf_fail_ratio:g} × expected {expected.value:g} GB/s ({expected.source})"
    else:
        f = topology_floor(topology[0])
        floor_gbps = f.gbps
        basis = (
            f"{f.basis}; no baseline for {len(multi_gpus)}× {multi_gpus[0].name} over {link} in "
            "imagesmith/data/perf.toml (pass --baseline or --baseline-from for a precise gate)"
        )
        check.figures["no_baseline"] = basis
    run_allreduce_rounds(
        ctx,
        check,
        binary=nccl_binary,
        n_gpus=len(multi_gpus),
        nccl_libdir=nccl_env["IMAGESMITH_NCCL_LIBDIR"],
        floor_gbps=floor_gbps,
        floor_basis=basis,
        torch_nccl_code=versions.get("nccl_code"),
        expected=expected,
        bands=Bands(fail_ratio=o.perf_fail_ratio, warn_ratio=o.perf_warn_ratio),
        link=link,
    )
