"""CLI command ``validate``: run the GPU-host acceptance suite against a host, a container or an image.

``imagesmith-validate`` (baked into every image) is the same command with TARGET defaulting to ``local://``.
Exit codes: 0 when the verdict is "passed"; 7 (ValidationFailed) when it is "failed" or "not validated" (no
GPU
visible: a run that could not prove the GPUs is never a pass); 2 for bad flags or targets.
"""

from __future__ import annotations

import json
from typing import Any

import typer

from imagesmith.commands import cluster as cluster_cli
from imagesmith.commands import epilog, flags
from imagesmith.errors import ConfigError, ValidationFailed
from imagesmith.validate.request import ValidateRequest, prepare, validate
from imagesmith.validate.request import parse_duration as parse_duration  # its old home (tests, scripts)

EPILOG = epilog(
    [
        "imagesmith validate --expect-gpu 'H100 80GB' --expect-count 8 --report reports/h100",
        "imagesmith validate ssh://me@gpu-host --nccl-tests /opt/nccl-tests/build",
        "imagesmith validate ghcr.io/me/torch@sha256:<digest> --shm-size 16g",
        "imagesmith validate local:// --soak 10m --report reports/soak",
        "imagesmith-validate (inside an image: TARGET defaults to local://)",
    ],
    [
        "0 = passed",
        "2 = bad flags or TARGET",
        "5 = (IMAGE) no Docker engine, or the image could not start",
        "7 = failed or not validated (no GPU visible: never a pass)",
    ],
)


def validate_command(
    targets: flags.Targets = None,
    expect_gpu: flags.ExpectGpu = None,
    expect_count: flags.ExpectCount = None,
    expect_nvlink: flags.ExpectNvlink = False,
    listing: flags.Listing = None,
    checkpoint_size: flags.CheckpointSize = "1g",
    dcgm_level: flags.DcgmLevel = None,
    report: flags.Report = None,
    shm_min: flags.ShmMin = None,
    shm_size: flags.ShmSize = None,
    gpus: flags.GpuAccess = "auto",
    python: flags.TargetPython = "python3",
    nccl_tests: flags.NcclTests = None,
    nccl_rounds: flags.NcclRounds = 3,
    nccl_max_bytes: flags.NcclMaxBytes = "1G",
    nccl_timeout: flags.NcclTimeout = 300,
    baseline: flags.Baseline = None,
    baseline_from: flags.BaselineFrom = None,
    perf_fail_ratio: flags.PerfFailRatio = 0.80,
    perf_warn_ratio: flags.PerfWarnRatio = 0.90,
    perf_seconds: flags.PerfSeconds = 0.4,
    foreign_memory_max: flags.ForeignMemoryMax = "3%",
    soak: flags.Soak = None,
    soak_interval: flags.SoakInterval = 5.0,
    soak_fail_ratio: flags.SoakFailRatio = 0.92,
    soak_warn_ratio: flags.SoakWarnRatio = 0.96,
    select: flags.Select = None,
    ssh_config: flags.SshConfig = None,
    ssh_identity: flags.SshIdentity = None,
    shm_min_source: flags.ShmMinSource = None,
    label: flags.Label = None,
    listing_json: flags.ListingJson = None,
    sign_key: flags.EvidenceSignKey = None,
    baseline_busbw: flags.BaselineBusbw = None,
    baseline_source: flags.BaselineSource = "",
    baseline_figure: flags.BaselineFigure = None,
    baseline_fleet: flags.BaselineFleet = None,
    nodes: flags.Nodes = None,
    fabric: flags.Fabric = "ethernet",
    link_gbps: flags.LinkGbps = None,
    nic_ports: flags.NicPorts = None,
    expect_gdr: flags.ExpectGdr = False,
    nccl_log: flags.NcclLog = None,
    bandwidth: flags.Bandwidth = True,
    rdma_bandwidth: flags.RdmaBandwidth = True,
    iperf_seconds: flags.IperfSeconds = 5,
    bandwidth_min_ratio: flags.BandwidthMinRatio = 0.7,
    node_suite: flags.NodeSuite = True,
    image: flags.Image = None,
    collective: flags.Collective = "auto",
    ddp: flags.Ddp = "auto",
    slurm: flags.Slurm = False,
) -> None:
    """Validate a GPU host or image: GPUs, topology, CUDA, shm, NCCL, DDP, checkpoints; write the evidence."""
    # the request, the rules of its flags and the run: imagesmith.validate.request (pytest and the suite cost
    # ~200 ms that other commands must not pay: imported when the run starts)
    request = ValidateRequest(
        target=(targets or ["local://"])[0],
        expect_gpu=expect_gpu,
        expect_count=expect_count,
        expect_nvlink=expect_nvlink,
        listing=listing,
        listing_json=listing_json,
        checkpoint_size=checkpoint_size,
        dcgm_level=dcgm_level,
        report=report,
        shm_min=shm_min,
        shm_size=shm_size,
        gpus=gpus,
        python=python,
        nccl_tests=nccl_tests,
        nccl_rounds=nccl_rounds,
        nccl_max_bytes=nccl_max_bytes,
        nccl_timeout=nccl_timeout,
        baseline=baseline,
        perf_fail_ratio=perf_fail_ratio,
        perf_warn_ratio=perf_warn_ratio,
        perf_seconds=perf_seconds,
        foreign_memory_max=foreign_memory_max,
        soak=soak,
        soak_interval=soak_interval,
        soak_fail_ratio=soak_fail_ratio,
        soak_warn_ratio=soak_warn_ratio,
        select=select,
        ssh_config=ssh_config,
        ssh_identity=ssh_identity,
        shm_min_source=shm_min_source,
        label=label,
        sign_key=sign_key,
        baseline_busbw=baseline_busbw,
        baseline_source=baseline_source,
        baseline_from=baseline_from,
        baseline_fleet=baseline_fleet,
        baseline_figure=tuple(baseline_figure or ()),
    )
    cluster_flags = cluster_cli.ClusterFlags(
        nodes=nodes,
        fabric=fabric,
        link_gbps=link_gbps,
        nic_ports=nic_ports,
        expect_gdr=expect_gdr,
        nccl_logs=tuple(nccl_log or ()),
        bandwidth=bandwidth,
        rdma_bandwidth=rdma_bandwidth,
        iperf_seconds=iperf_seconds,
        min_ratio=bandwidth_min_ratio,
        node_suite=node_suite,
        image=image,
        collective=collective,
        ddp=ddp,
        slurm=slurm,
    )
    _run(targets or [], request, cluster_flags)


def _run(targets: list[str], request: ValidateRequest, cluster_flags: cluster_cli.ClusterFlags) -> None:
    """The run of a request: its rules (:func:`prepare`), then the suite on the one target, or the cluster run
    over several nodes (imagesmith.commands.cluster) with the same options; the verdict printed."""
    request, several = cluster_cli.route(request, targets, cluster_flags)
    prepared = prepare(request, read_fleet=_fleet, echo=typer.echo)
    if several:  # several ssh:// nodes: the cluster run (imagesmith.commands.cluster) with the same options
        cluster_cli.run(
            targets, cluster_flags, prepared.options, select=request.select, sign_key=request.sign_key
        )
        return
    result = validate(request, prepared, echo=typer.echo)
    if result.soak_sentence:
        typer.echo(f"soak: {result.soak_sentence}")
    typer.echo(f"verdict: {result.verdict} — {result.reason} (report: {result.report})")
    if not result.passed:
        from imagesmith.validate.report import verdict_fix

        raise ValidationFailed(
            f"validation of {result.target_label} {result.verdict}: {result.reason}",
            hint=f"{verdict_fix(result.verdict, result.cause)} (report: {result.report})",
        )


def _fleet(index: str | None, passed: str | None, source: str) -> tuple[list[dict[str, Any]], str]:
    """``--baseline-from INDEX`` → the fleet groups; ``--baseline-fleet JSON`` is how ``validate IMAGE`` hands
    them to the suite inside the image."""
    if passed:
        try:
            groups = json.loads(passed)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--baseline-fleet: not JSON ({exc})", hint="use --baseline-from INDEX"
            ) from None
        if not isinstance(groups, list) or not all(isinstance(g, dict) for g in groups):
            raise ConfigError(
                "--baseline-fleet: expected a JSON list of groups", hint="use --baseline-from INDEX"
            )
        return groups, source
    if not index:
        return [], ""
    from imagesmith.pick import fetch_index
    from imagesmith.validate.expected import fleet_groups

    if index.startswith(("http://", "oci+http://")):
        raise ConfigError(
            f"--baseline-from {index}: plain HTTP (anyone on the path can change the expected figures)",
            hint="use an https:// or oci:// source, or download the index (imagesmith index SRC --insecure "
            "--json > index.json) and pass the file",
        )
    from imagesmith.commands.release import _index_trust
    from imagesmith.errors import IndexTrustError

    # the figures of validated hosts are the expected values this run's performance checks pass or fail
    # against (before imagesmith/data/perf.toml): an index someone who can push to the registry rewrote would
    # let a throttled host pass (figures lowered) or fail every run (raised). Verified as pick verifies it:
    # the key (or fingerprint, issue 34) of $IMAGESMITH_INDEX_KEY / [release] index_key or INDEX#sha256:…,
    # else the key pinned for the source; never a first use (no --trust-first-use here)
    from imagesmith.indextrust import reading_as

    try:
        with reading_as("--baseline-from"):  # its errors name the flag the user gave
            read = fetch_index(
                index, trust=_index_trust(None, False), note=lambda line: typer.echo(line, err=True)
            )
    except IndexTrustError as exc:
        raise exc.replace(
            hint="name the publisher's index key by its fingerprint (--baseline-from SRC#sha256:<fp>, or "
            'once: [release] index_key = "sha256:<fp>" in ~/.config/imagesmith/config.toml or '
            "$IMAGESMITH_INDEX_KEY; its release prints it), or give the expected figures as --baseline "
            "REPORT.json",
        ) from None
    groups = fleet_groups(read)
    if not groups:
        raise ConfigError(
            f"--baseline-from {index}: no validated host in it recorded performance figures",
            hint="release images with reports of this imagesmith version (it records the figures), or use "
            "--baseline REPORT.json",
        )
    return groups, index


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("validate", epilog=EPILOG)(validate_command)
