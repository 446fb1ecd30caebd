"""``imagesmith validate`` over several nodes (``ssh://a ssh://b …`` or ``--nodes FILE``): the flags of a
cluster run, and the run itself (:mod:`imagesmith.validate.clusterrun`). Exit 0 when every promise checked
was kept, 7 when one failed, 2 for bad flags, an unreachable node, a node without iperf3; 7 for a node lost
mid-run."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer

from imagesmith.errors import ConfigError, ImagesmithError, ValidationFailed


@dataclass(frozen=True, kw_only=True)
class ClusterFlags:
    nodes: str | None
    fabric: str
    link_gbps: float | None
    nic_ports: int | None
    expect_gdr: bool
    nccl_logs: tuple[str, ...]
    bandwidth: bool
    iperf_seconds: int
    min_ratio: float
    node_suite: bool
    image: str | None = None
    collective: str = "auto"
    slurm: bool = False
    rdma_bandwidth: bool = True
    ddp: str = "auto"

    def given(self) -> list[str]:
        """The cluster-only flags set away from their defaults (for the error of a one-target run)."""
        out = []
        for flag, value, default in (
            ("--nodes", self.nodes, None),
            ("--fabric", self.fabric, "ethernet"),
            ("--link-gbps", self.link_gbps, None),
            ("--nic-ports", self.nic_ports, None),
            ("--expect-gdr", self.expect_gdr, False),
            ("--nccl-log", self.nccl_logs, ()),
            ("--no-bandwidth", self.bandwidth, True),
            ("--no-rdma-bandwidth", self.rdma_bandwidth, True),
            ("--iperf-seconds", self.iperf_seconds, 5),
            ("--bandwidth-min-ratio", self.min_ratio, 0.7),
            ("--no-node-suite", self.node_suite, True),
            ("--image", self.image, None),
            ("--collective", self.collective, "auto"),
            ("--ddp", self.ddp, "auto"),
        ):
            if value != default:
                out.append(flag)
        return out


def several(targets: list[str], flags: ClusterFlags) -> bool:
    """Is this a cluster run? Several TARGETs, ``--nodes`` or ``--slurm`` (the allocation's nodes: then
    neither of the others); cluster flags on one target are refused."""
    from imagesmith.validate.fabrics import refuse_unsupported
    from imagesmith.validate.request import cluster_rules, slurm_wanted

    refuse_unsupported(flags.fabric)  # --fabric efa: the gap and the fix, on one node or several
    if slurm_wanted(flags.slurm, [*targets, *([flags.nodes] if flags.nodes else [])]):
        cluster_rules(flags.collective, slurm=True, ddp=flags.ddp)
        if targets or flags.nodes is not None:
            raise ConfigError(
                "--slurm takes the nodes from the Slurm allocation: TARGET and --nodes name them otherwise",
                hint="leave out TARGET and --nodes, or leave out --slurm (inside an allocation: name "
                "local:// to validate only this node)",
                field="--slurm",
            )
        return True
    if len(targets) > 1 or flags.nodes is not None:
        cluster_rules(flags.collective, slurm=False, ddp=flags.ddp)
        return True
    given = flags.given()
    if given:
        raise ConfigError(
            f"{', '.join(given)}: apply only to several nodes",
            hint="name two or more ssh:// targets (or --nodes FILE), or leave these flags out",
        )
    return False


def route(request: Any, targets: list[str], flags: ClusterFlags) -> tuple[Any, bool]:
    """(the request, is it a cluster run): -k is checked before the cluster's flags (as the rules check them);
    a cluster run signs its cluster report itself (:func:`run`), so its request signs nothing."""
    from imagesmith.validate.request import check_select

    if request.select is not None:
        check_select(request.select)
    if several(targets, flags):
        return dataclasses.replace(request, cluster=True), True
    return request, False


def run(
    targets: list[str],
    flags: ClusterFlags,
    base: Any,
    *,
    select: str | None,
    sign_key: str | None = None,
) -> None:
    """The cluster run; *base* is the one-node SuiteOptions the other flags made (each node's suite runs
    with it, its target and report folder replaced). ``--sign-key`` (or $IMAGESMITH_SIGNING_KEY) signs the
    cluster report as an attestation of ``--image``'s digest (cluster.dsse.json beside cluster.json)."""
    from imagesmith.validate import clusterrecord, clusterrun
    from imagesmith.validate.nics import FABRICS

    if flags.fabric not in FABRICS:
        raise ConfigError(
            f"--fabric {flags.fabric!r}: use one of {', '.join(FABRICS)}", hint="e.g. --fabric ib"
        )
    image = _image(flags.image)
    key = _signing_key(sign_key, image)
    from imagesmith.validate.request import slurm_wanted

    slurm = slurm_wanted(flags.slurm, [*targets, *([flags.nodes] if flags.nodes else [])])
    if slurm:
        from imagesmith.validate.collective import slurm_nodes

        if not flags.slurm:
            typer.echo("cluster: inside a Slurm allocation with no TARGET: validating its nodes (--slurm)")
        targets = [f"ssh://{name}" for name in slurm_nodes()]
        typer.echo(f"cluster: the Slurm allocation's {len(targets)} node(s): {', '.join(targets)}")
    nodes = clusterrun.parse_nodes(targets, flags.nodes)
    options = clusterrun.ClusterOptions(
        fabric=flags.fabric,
        link_gbps=flags.link_gbps,
        nic_ports=flags.nic_ports,
        expect_gdr=flags.expect_gdr,
        nccl_logs=flags.nccl_logs,
        bandwidth=flags.bandwidth,
        rdma_bandwidth=flags.rdma_bandwidth,
        iperf_seconds=flags.iperf_seconds,
        min_ratio=flags.min_ratio,
        report_dir=base.report_dir,
        ssh_config=base.ssh_config,
        ssh_identity=base.ssh_identity_file,
        image=image,
        collective=flags.collective,
        slurm=slurm,
        collective_timeout=float(base.nccl_timeout_s),
        ddp=flags.ddp,
        python=base.python,
    )

    def node_suite(node: clusterrun.Node, folder: Path) -> dict[str, Any]:
        from imagesmith.validate.runner import run_suite

        one = dataclasses.replace(base, target=node.target, target_label=node.target, report_dir=str(folder))
        try:
            return run_suite(one, select=select)
        except ImagesmithError as exc:
            return {"verdict": "failed", "verdict_reason": exc.message}

    def sign(document: Any) -> bytes:
        return clusterrecord.sign_report(document, key=key)

    data = clusterrun.run_cluster(
        nodes,
        options,
        node_suite=node_suite if flags.node_suite else None,
        echo=typer.echo,
        sign=sign if key is not None else None,
    )
    where = Path(options.report_dir) / clusterrun.CLUSTER_MD
    if key is not None:
        typer.echo(
            f"signed: {Path(options.report_dir) / clusterrecord.CLUSTER_ATTESTATION} (attests {image}; key "
            f"{key.key_id[:16]})"
        )
    for p in data["promises"]:
        typer.echo(f"  {p['verdict']:>11}  {p['name']}")
    typer.echo(f"cluster verdict: {data['verdict']} — {data['verdict_reason']} (report: {where})")
    if data["verdict"] != "passed":
        raise ValidationFailed(
            f"cluster validation of {len(nodes)} nodes failed: {data['verdict_reason']}",
            hint=f"read the failures and fixes in {where}",
        )


def _image(text: str | None) -> str | None:
    """``--image REPO@sha256:<64 hex>``: a digest, which cannot move (a tag could name another image by the
    time the report is read)."""
    if text is None:
        return None
    from imagesmith.refs import split_reference

    repo, _tag, digest = split_reference(text)
    if digest is None or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ConfigError(
            f"--image {text!r}: not an image by digest",
            hint="name the image the cluster ran by its digest: --image REPO@sha256:<64 hex> (docker "
            "inspect --format '{{index .RepoDigests 0}}' IMAGE prints it)",
            field="--image",
        )
    return f"{repo}@{digest}"


def _signing_key(sign_key: str | None, image: str | None) -> Any:
    """The key that signs the cluster report (--sign-key, else $IMAGESMITH_SIGNING_KEY), loaded before any
    node is touched; None when the report is not to be signed. Signing needs --image: an attestation is
    about a digest."""
    from imagesmith import settings

    env_key = (settings.get("IMAGESMITH_SIGNING_KEY") or "").strip()
    if sign_key is None and not env_key:
        return None
    if image is None:
        if sign_key is not None:
            raise ConfigError(
                "--sign-key: a cluster report attests the image the cluster ran, and no --image is given",
                hint="add --image REPO@sha256:… (the image of the NCCL runs), or drop --sign-key",
                field="--sign-key",
            )
        typer.echo("note: no --image: the cluster report is not signed ($IMAGESMITH_SIGNING_KEY unused)")
        return None
    from imagesmith import signing

    return signing.load_signing_key(Path(sign_key or env_key))
