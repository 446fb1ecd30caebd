"""Fixtures of the validation suite. The run's Context comes from the imagesmith.validate.plugin plugin."""

from __future__ import annotations

from typing import Any

import pytest

from imagesmith.errors import ParseError
from imagesmith.validate.context import CheckRecord, Context, fail, skip_no_gpu
from imagesmith.validate.criteria import Gpu, weakest_link
from imagesmith.validate.facts import GpuFacts, gather_gpus
from imagesmith.validate.parsers import P2PMatrix, TopoMatrix, parse_topo_matrix, parse_topo_p2p


@pytest.fixture(scope="session")
def ctx(request: pytest.FixtureRequest) -> Context:
    plugin = request.config.pluginmanager.get_plugin("imagesmith-validate")
    assert plugin is not None, "run the suite through imagesmith validate / imagesmith-validate"
    context: Context = plugin.context
    return context


@pytest.fixture
def check(ctx: Context, request: pytest.FixtureRequest) -> CheckRecord:
    return ctx.record(request.node.name)


@pytest.fixture(scope="session")
def gpu_facts(ctx: Context) -> GpuFacts:
    facts = gather_gpus(ctx)
    ctx.facts["gpus"] = facts
    return facts


@pytest.fixture
def gpus(gpu_facts: GpuFacts) -> list[Gpu]:
    """The GPUs nvidia-smi shows; skips the check with "no GPU visible" when there are none."""
    if not gpu_facts.visible:
        skip_no_gpu(gpu_facts.reason)
    return gpu_facts.gpus


@pytest.fixture
def multi_gpus(gpus: list[Gpu]) -> list[Gpu]:
    if len(gpus) < 2:
        pytest.skip(f"needs at least 2 GPUs; this target has {len(gpus)}")
    return gpus


@pytest.fixture(scope="session")
def versions(ctx: Context) -> dict[str, Any]:
    v = ctx.probe_one("versions", timeout=180)
    ctx.facts["versions"] = v
    return v


@pytest.fixture(scope="session")
def topology(ctx: Context, gpu_facts: GpuFacts) -> tuple[TopoMatrix, P2PMatrix | None]:
    if not gpu_facts.visible:
        skip_no_gpu(gpu_facts.reason)
    r = ctx.run("nvidia-smi topo -m", timeout=60)
    ctx.save_log("topo.txt", r.output)
    if r.rc != 0:
        fail(
            f"`nvidia-smi topo -m` failed (exit {r.rc}): {r.output.strip()[:300]}",
            "check the driver on the host",
        )
    try:
        topo = parse_topo_matrix(r.stdout)
    except ParseError as exc:
        problem: ParseError | None = exc
    else:
        problem = None
    if problem is not None:
        fail(
            f"cannot parse `nvidia-smi topo -m`: {problem.message}",
            problem.hint or "see topo.txt in the report",
        )
    p2p: P2PMatrix | None = None
    if len(topo.gpus) > 1:
        r2 = ctx.run("nvidia-smi topo -p2p n", timeout=60)
        ctx.save_log("topo-p2p-nvlink.txt", r2.output)
        if r2.rc == 0:
            try:
                p2p = parse_topo_p2p(r2.stdout)
            except ParseError as exc:
                problem = exc
            if problem is not None:
                fail(f"cannot parse `nvidia-smi topo -p2p n`: {problem.message}", "see topo-p2p-nvlink.txt")
    ctx.facts["topology"] = topo
    return topo, p2p


@pytest.fixture(scope="session")
def host_kind(gpu_facts: GpuFacts, topology: tuple[TopoMatrix, P2PMatrix | None]) -> tuple[str, int, str]:
    """GPU model (as a release index's validated_on names it), count and weakest link: the fleet's key."""
    model = " + ".join(sorted({g.name for g in gpu_facts.gpus if g.name}))
    return model, len(gpu_facts.gpus), weakest_link(topology[0]) or ""
