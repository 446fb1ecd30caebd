"""CLI command ``validate``: run the GPU-host acceptance suite against a host, a container or an image.

``imagesmith-validate`` (baked into every image) is the same command with TARGET defaulting to ``local://``.
Exit codes: 0 when the verdict is "passed"; 7 (ValidationFailed) when it is "failed" or "not validated" (no
GPU
visible: a run that could not prove the GPUs is never a pass); 2 for bad flags or targets.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from imagesmith.commands import cluster as cluster_cli
from imagesmith.commands import epilog
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
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="TARGET",
            help="local://, docker://CONTAINER, ssh://user@host[:port], or an IMAGE (started with the GPUs); "
            'several ssh:// targets validate a cluster (docs/validation.md "Several nodes"). Default local://.',
        ),
    ] = None,
    expect_gpu: str | None = typer.Option(
        None, "--expect-gpu", help='GPU model/memory/form, e.g. "A100 80GB".'
    ),
    expect_count: int | None = typer.Option(
        None, "--expect-count", min=1, max=1024, help="Number of GPUs that must be there (1-1024)."
    ),
    expect_nvlink: bool = typer.Option(
        False, "--expect-nvlink", help="Fail when a GPU pair is not NVLink (NV#)."
    ),
    listing: str | None = typer.Option(
        None,
        "--listing",
        help="TOML file of what the rental promised (GPUs, interconnect, vCPU, RAM, NIC, storage, price): "
        "each promise judged, the verdict fails on a broken one (docs/validation.md).",
    ),
    checkpoint_size: str = typer.Option(
        "1g",
        "--checkpoint-size",
        help="What the storage check writes + fsyncs + reads back in each folder (your checkpoint's size; "
        "16m to 64g).",
    ),
    dcgm_level: int | None = typer.Option(
        None,
        "--dcgm-level",
        min=0,
        max=4,
        help="Where dcgmi is installed: dcgmi diag -r LEVEL (default 1, 3 with --soak; 0: off).",
    ),
    report: str | None = typer.Option(
        None, "--report", help="Folder for the evidence bundle (default reports/validate-<time>)."
    ),
    shm_min: str | None = typer.Option(
        None,
        "--shm-min",
        help="Least /dev/shm (e.g. 8g). Default: the image's io.imagesmith.shm-min label, else 1g.",
    ),
    shm_size: str | None = typer.Option(
        None, "--shm-size", help="IMAGE only: start the container with this /dev/shm."
    ),
    gpus: str = typer.Option("auto", "--gpus", help="IMAGE only: auto | toolkit | devices | none."),
    python: str = typer.Option("python3", "--python", help="The target's Python that has torch."),
    nccl_tests: str | None = typer.Option(
        None, "--nccl-tests", help="nccl-tests build folder or all_reduce_perf path."
    ),
    nccl_rounds: int = typer.Option(
        3,
        "--nccl-rounds",
        min=1,
        max=100,
        help="Times all_reduce_perf runs: every round must reach the bus-bandwidth floor, the slowest is "
        "judged against the expected figure, and a hung round fails.",
    ),
    nccl_max_bytes: str = typer.Option("1G", "--nccl-max-bytes", help="all_reduce_perf -e."),
    nccl_timeout: int = typer.Option(
        300,
        "--nccl-timeout",
        min=5,
        max=86400,
        help="Seconds before a round counts as hung (5 to 86400: a round is minutes, never a day).",
    ),
    baseline: str | None = typer.Option(
        None,
        "--baseline",
        help="report.json of a good run on the same kind of host: its figures are the expected ones.",
    ),
    baseline_from: str | None = typer.Option(
        None,
        "--baseline-from",
        help="Release index (file, URL, oci://): expect the median of its validated hosts with the same GPU "
        "model, count and link. Verified as pick verifies it ($IMAGESMITH_INDEX_KEY / [release] index_key, "
        "else the key pinned for the source or published beside it).",
    ),
    perf_fail_ratio: float = typer.Option(
        0.80, "--perf-fail-ratio", min=0.01, max=1.5, help="Fail a figure below this × its expected value."
    ),
    perf_warn_ratio: float = typer.Option(
        0.90, "--perf-warn-ratio", min=0.01, max=1.5, help="Warn below this × the expected value."
    ),
    perf_seconds: float = typer.Option(
        0.4, "--perf-seconds", min=0.05, max=30, help="Seconds per bandwidth measure (matmul: 3×)."
    ),
    foreign_memory_max: str = typer.Option(
        "3%",
        "--foreign-memory-max",
        help="Memory other processes may hold on a GPU before the free check fails: a % of the board or a "
        "size (4g); less than that, or any process seen, warns.",
    ),
    soak: str | None = typer.Option(
        None,
        "--soak",
        help="Also load every GPU for this long (10m, 90s, 1h; at least 2m): bf16 matmul, memory copies and, "
        "with 2+ GPUs, NCCL all_reduce, sampled every few seconds; fails on a sustained drop against the "
        "first minute or the expected figures, and on hardware/thermal slowdown or a new Xid.",
    ),
    soak_interval: float = typer.Option(
        5.0, "--soak-interval", min=1, max=20, help="Seconds per soak window (each a point of the series)."
    ),
    soak_fail_ratio: float = typer.Option(
        0.92, "--soak-fail-ratio", min=0.01, max=1.0, help="Fail a soak minute below this × the first minute."
    ),
    soak_warn_ratio: float = typer.Option(
        0.96, "--soak-warn-ratio", min=0.01, max=1.0, help="Warn below this × the first minute."
    ),
    select: str | None = typer.Option(
        None, "-k", "--select", help="pytest -k expression: run only matching checks."
    ),
    ssh_config: str | None = typer.Option(None, "--ssh-config", help="ssh:// only: ssh_config file to use."),
    ssh_identity: str | None = typer.Option(None, "--ssh-identity", help="ssh:// only: private key file."),
    shm_min_source: str | None = typer.Option(None, "--shm-min-source", hidden=True),
    label: str | None = typer.Option(None, "--label", hidden=True),
    listing_json: str | None = typer.Option(None, "--listing-json", hidden=True),
    sign_key: str | None = typer.Option(
        None,
        "--sign-key",
        help="Private key (imagesmith keygen) that signs the evidence: an in-toto attestation of the image's "
        "digest beside report.json (several nodes: of --image, beside cluster.json); only validation "
        "runners hold it. Default: $IMAGESMITH_SIGNING_KEY (an image, or several nodes with --image).",
    ),
    baseline_busbw: float | None = typer.Option(None, "--baseline-busbw", hidden=True),
    baseline_source: str = typer.Option("", "--baseline-source", hidden=True),
    baseline_figure: Annotated[list[str] | None, typer.Option("--baseline-figure", hidden=True)] = None,
    baseline_fleet: str | None = typer.Option(None, "--baseline-fleet", hidden=True),
    nodes: str | None = typer.Option(
        None, "--nodes", help="Several nodes: a file of ssh:// targets, one a line (`ssh://… [ADDRESS]`)."
    ),
    fabric: str = typer.Option(
        "ethernet", "--fabric", help="Several nodes: the fabric the rental declares: ib | roce | ethernet."
    ),
    link_gbps: float | None = typer.Option(
        None,
        "--link-gbps",
        min=0.001,
        max=100000,
        help="Several nodes: the declared per-node rate (Gb/s) pairs and RDMA ports are judged against "
        "(default: each link's negotiated speed).",
    ),
    nic_ports: int | None = typer.Option(
        None, "--nic-ports", min=1, max=64, help="Several nodes: RDMA ports each node must have."
    ),
    expect_gdr: bool = typer.Option(
        False,
        "--expect-gdr",
        help="Several nodes: GPUDirect RDMA ready on every node (nvidia_peermem, or dma-buf: the open kernel "
        "module on Linux 5.12+) and used by NCCL's IB channels (GDRDMA).",
    ),
    nccl_log: Annotated[
        list[str] | None,
        typer.Option(
            "--nccl-log",
            help="Several nodes: an NCCL_DEBUG=INFO log of a cross-node run whose transport is judged "
            "(repeatable).",
        ),
    ] = None,
    bandwidth: bool = typer.Option(
        True, "--bandwidth/--no-bandwidth", help="Several nodes: iperf3 node pairs (ring + re-pairing)."
    ),
    iperf_seconds: int = typer.Option(
        5, "--iperf-seconds", min=1, max=120, help="Several nodes: seconds per iperf3 direction."
    ),
    bandwidth_min_ratio: float = typer.Option(
        0.7,
        "--bandwidth-min-ratio",
        min=0.01,
        max=1.0,
        help="Several nodes: a pair fails below this × the rate.",
    ),
    node_suite: bool = typer.Option(
        True, "--node-suite/--no-node-suite", help="Several nodes: also run the per-node suite on every node."
    ),
    image: str | None = typer.Option(
        None, "--image", help="Several nodes: the image they ran (REPO@sha256:…), attested by --sign-key."
    ),
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
        iperf_seconds=iperf_seconds,
        min_ratio=bandwidth_min_ratio,
        node_suite=node_suite,
        image=image,
    )
    request, several = cluster_cli.route(request, targets or [], cluster_flags)
    prepared = prepare(request, read_fleet=_fleet, echo=typer.echo)
    if several:  # several ssh:// nodes: the cluster run (imagesmith.commands.cluster) with the same options
        cluster_cli.run(targets or [], cluster_flags, prepared.options, select=select, sign_key=sign_key)
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
