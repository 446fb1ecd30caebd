"""The flags of ``validate``, ``pick``, ``index``, ``release`` and ``candidates`` as ``Annotated`` aliases:
each flag's name, help and bounds written once, so a command's signature is one line a flag (``gpu: Gpus =
None``) and a flag two commands share (``--matrix``, ``--registries``, the index's trust root) is the same
flag in both. The default stays in the command's signature (``= None``), where Typer reads it.

Adding a flag: an alias here, in its command's section, one line in the command's signature, and the field it
fills in the command's request (``ValidateRequest``, ``PickRequest``, ``ReleaseRequest``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

#: ``--matrix``'s help (every command that takes a matrix)
MATRIX_HELP = (
    "Matrix name (<project>/matrices/NAME.toml) or path to a matrix file. "
    "Default: the project's default_matrix."
)

# -- shared --------------------------------------------------------------------------------------------------
Matrix = Annotated[str | None, typer.Option("--matrix", help=MATRIX_HELP)]
Registries = Annotated[
    Path | None, typer.Option("--registries", help="registries file (default: the project's)")
]
#: the index's trust root (pick, index)
KeyFingerprint = Annotated[
    str | None,
    typer.Option(
        "--key-fingerprint",
        metavar="sha256:HEX",
        help="the trust root: the fingerprint of the publisher's index key (its release prints it; "
        "also as --index SRC#sha256:HEX, $IMAGESMITH_INDEX_KEY or \\[release] index_key of the user "
        "config); the key published beside the index is taken only when it has it",
    ),
]
TrustFirstUse = Annotated[
    bool,
    typer.Option(
        "--trust-first-use",
        help="with no trust root and no key pinned for the source: trust and pin the key published "
        "beside the index (whoever can push there chooses it; never on a rental you care about)",
    ),
]

# -- validate ------------------------------------------------------------------------------------------------
Targets = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="TARGET",
        help="local://, docker://CONTAINER, ssh://user@host[:port], or an IMAGE (started with the GPUs); "
        'several ssh:// targets validate a cluster (docs/validation.md "Several nodes"). Default local://.',
    ),
]
ExpectGpu = Annotated[
    str | None, typer.Option("--expect-gpu", help='GPU model/memory/form, e.g. "A100 80GB".')
]
ExpectCount = Annotated[
    int | None,
    typer.Option("--expect-count", min=1, max=1024, help="Number of GPUs that must be there (1-1024)."),
]
ExpectNvlink = Annotated[
    bool, typer.Option("--expect-nvlink", help="Fail when a GPU pair is not NVLink (NV#).")
]
Listing = Annotated[
    str | None,
    typer.Option(
        "--listing",
        help="TOML file of what the rental promised (GPUs, interconnect, vCPU, RAM, NIC, storage, price): "
        "each promise judged, the verdict fails on a broken one (docs/validation.md).",
    ),
]
CheckpointSize = Annotated[
    str,
    typer.Option(
        "--checkpoint-size",
        help="What the storage check writes + fsyncs + reads back in each folder (your checkpoint's size; "
        "16m to 64g).",
    ),
]
DcgmLevel = Annotated[
    int | None,
    typer.Option(
        "--dcgm-level",
        min=0,
        max=4,
        help="Where dcgmi is installed: dcgmi diag -r LEVEL (default 1, 3 with --soak; 0: off).",
    ),
]
Report = Annotated[
    str | None,
    typer.Option("--report", help="Folder for the evidence bundle (default reports/validate-<time>)."),
]
ShmMin = Annotated[
    str | None,
    typer.Option(
        "--shm-min",
        help="Least /dev/shm (e.g. 8g). Default: the image's io.imagesmith.shm-min label, else 1g.",
    ),
]
ShmSize = Annotated[
    str | None, typer.Option("--shm-size", help="IMAGE only: start the container with this /dev/shm.")
]
GpuAccess = Annotated[str, typer.Option("--gpus", help="IMAGE only: auto | toolkit | devices | none.")]
TargetPython = Annotated[str, typer.Option("--python", help="The target's Python that has torch.")]
NcclTests = Annotated[
    str | None, typer.Option("--nccl-tests", help="nccl-tests build folder or all_reduce_perf path.")
]
NcclRounds = Annotated[
    int,
    typer.Option(
        "--nccl-rounds",
        min=1,
        max=100,
        help="Times all_reduce_perf runs: every round must reach the bus-bandwidth floor, the slowest is "
        "judged against the expected figure, and a hung round fails.",
    ),
]
NcclMaxBytes = Annotated[str, typer.Option("--nccl-max-bytes", help="all_reduce_perf -e.")]
NcclTimeout = Annotated[
    int,
    typer.Option(
        "--nccl-timeout",
        min=5,
        max=86400,
        help="Seconds before a round counts as hung (5 to 86400: a round is minutes, never a day).",
    ),
]
Baseline = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        help="report.json of a good run on the same kind of host: its figures are the expected ones.",
    ),
]
BaselineFrom = Annotated[
    str | None,
    typer.Option(
        "--baseline-from",
        help="Release index (file, URL, oci://): expect the median of its validated hosts with the same GPU "
        "model, count and link. Verified as pick verifies it ($IMAGESMITH_INDEX_KEY / [release] index_key, "
        "else the key pinned for the source or published beside it).",
    ),
]
PerfFailRatio = Annotated[
    float,
    typer.Option(
        "--perf-fail-ratio", min=0.01, max=1.5, help="Fail a figure below this × its expected value."
    ),
]
PerfWarnRatio = Annotated[
    float, typer.Option("--perf-warn-ratio", min=0.01, max=1.5, help="Warn below this × the expected value.")
]
PerfSeconds = Annotated[
    float,
    typer.Option("--perf-seconds", min=0.05, max=30, help="Seconds per bandwidth measure (matmul: 3×)."),
]
ForeignMemoryMax = Annotated[
    str,
    typer.Option(
        "--foreign-memory-max",
        help="Memory other processes may hold on a GPU before the free check fails: a % of the board or a "
        "size (4g); less than that, or any process seen, warns.",
    ),
]
Soak = Annotated[
    str | None,
    typer.Option(
        "--soak",
        help="Also load every GPU for this long (10m, 90s, 1h; at least 2m): bf16 matmul, memory copies and, "
        "with 2+ GPUs, NCCL all_reduce, sampled every few seconds; fails on a sustained drop against the "
        "first minute or the expected figures, and on hardware/thermal slowdown or a new Xid.",
    ),
]
SoakInterval = Annotated[
    float,
    typer.Option(
        "--soak-interval", min=1, max=20, help="Seconds per soak window (each a point of the series)."
    ),
]
SoakFailRatio = Annotated[
    float,
    typer.Option(
        "--soak-fail-ratio", min=0.01, max=1.0, help="Fail a soak minute below this × the first minute."
    ),
]
SoakWarnRatio = Annotated[
    float,
    typer.Option("--soak-warn-ratio", min=0.01, max=1.0, help="Warn below this × the first minute."),
]
Select = Annotated[
    str | None, typer.Option("-k", "--select", help="pytest -k expression: run only matching checks.")
]
SshConfig = Annotated[str | None, typer.Option("--ssh-config", help="ssh:// only: ssh_config file to use.")]
SshIdentity = Annotated[str | None, typer.Option("--ssh-identity", help="ssh:// only: private key file.")]
EvidenceSignKey = Annotated[
    str | None,
    typer.Option(
        "--sign-key",
        help="Private key (imagesmith keygen) that signs the evidence: an in-toto attestation of the image's "
        "digest beside report.json (several nodes: of --image, beside cluster.json); only validation "
        "runners hold it. Default: $IMAGESMITH_SIGNING_KEY (an image, or several nodes with --image).",
    ),
]
#: what ``validate IMAGE`` hands the suite inside the image (not for people)
ShmMinSource = Annotated[str | None, typer.Option("--shm-min-source", hidden=True)]
Label = Annotated[str | None, typer.Option("--label", hidden=True)]
ListingJson = Annotated[str | None, typer.Option("--listing-json", hidden=True)]
BaselineBusbw = Annotated[float | None, typer.Option("--baseline-busbw", hidden=True)]
BaselineSource = Annotated[str, typer.Option("--baseline-source", hidden=True)]
BaselineFigure = Annotated[list[str] | None, typer.Option("--baseline-figure", hidden=True)]
BaselineFleet = Annotated[str | None, typer.Option("--baseline-fleet", hidden=True)]
#: several nodes (imagesmith.commands.cluster)
Nodes = Annotated[
    str | None,
    typer.Option(
        "--nodes", help="Several nodes: a file of ssh:// targets, one a line (`ssh://… [ADDRESS]`)."
    ),
]
Fabric = Annotated[
    str,
    typer.Option(
        "--fabric",
        help="Several nodes: the fabric the rental declares: ib | roce | ethernet (efa is refused: the "
        "images lack libfabric and aws-ofi-nccl).",
    ),
]
LinkGbps = Annotated[
    float | None,
    typer.Option(
        "--link-gbps",
        min=0.001,
        max=100000,
        help="Several nodes: the declared per-node rate (Gb/s) pairs and RDMA ports are judged against "
        "(default: each link's negotiated speed).",
    ),
]
NicPorts = Annotated[
    int | None,
    typer.Option("--nic-ports", min=1, max=64, help="Several nodes: RDMA ports each node must have."),
]
ExpectGdr = Annotated[
    bool,
    typer.Option(
        "--expect-gdr",
        help="Several nodes: GPUDirect RDMA ready on every node (nvidia_peermem, or dma-buf: the open kernel "
        "module on Linux 5.12+) and used by NCCL's IB channels (GDRDMA).",
    ),
]
NcclLog = Annotated[
    list[str] | None,
    typer.Option(
        "--nccl-log",
        help="Several nodes: an NCCL_DEBUG=INFO log of a cross-node run whose transport is judged "
        "(repeatable).",
    ),
]
Bandwidth = Annotated[
    bool,
    typer.Option("--bandwidth/--no-bandwidth", help="Several nodes: iperf3 node pairs (ring + re-pairing)."),
]
RdmaBandwidth = Annotated[
    bool,
    typer.Option(
        "--rdma-bandwidth/--no-rdma-bandwidth",
        help="Several nodes: ib_write_bw node pairs per RDMA port where the nodes have RDMA ports.",
    ),
]
IperfSeconds = Annotated[
    int, typer.Option("--iperf-seconds", min=1, max=120, help="Several nodes: seconds per iperf3 direction.")
]
BandwidthMinRatio = Annotated[
    float,
    typer.Option(
        "--bandwidth-min-ratio",
        min=0.01,
        max=1.0,
        help="Several nodes: a pair fails below this × the rate.",
    ),
]
NodeSuite = Annotated[
    bool,
    typer.Option(
        "--node-suite/--no-node-suite", help="Several nodes: also run the per-node suite on every node."
    ),
]
Image = Annotated[
    str | None,
    typer.Option(
        "--image", help="Several nodes: the image they ran (REPO@sha256:…), attested by --sign-key."
    ),
]

# -- pick ----------------------------------------------------------------------------------------------------
PickIndex = Annotated[
    str | None,
    typer.Option(
        "--index",
        help="release index: a file, an https URL, or oci://HOST/REPO[:TAG] (the artifact "
        "`imagesmith release` publishes; http:// and oci+http:// only with --insecure). "
        "Default: $IMAGESMITH_INDEX.",
    ),
]
NvidiaSmi = Annotated[
    str | None,
    typer.Option(
        "--nvidia-smi",
        metavar="FILE",
        help="read the host from a saved output of `nvidia-smi`, `nvidia-smi --query-gpu=... "
        "--format=csv` or `nvidia-smi -L` (add --driver: -L shows none); '-' = stdin",
    ),
]
Driver = Annotated[
    str | None,
    typer.Option(
        "--driver", help="offline: the host's driver, e.g. 535.104.05 (with --gpu, or with an -L file)"
    ),
]
Gpus = Annotated[
    list[str] | None, typer.Option("--gpu", help="offline: a GPU name or key (repeat for several GPUs)")
]
Torch = Annotated[str | None, typer.Option("--torch", help="torch version prefix, e.g. 2.1")]
Cuda = Annotated[str | None, typer.Option("--cuda", help="CUDA version prefix, e.g. 12.1")]
Python = Annotated[str | None, typer.Option("--python", help="Python version, e.g. 3.10")]
Platform = Annotated[
    str | None,
    typer.Option(
        "--platform",
        help="where the host runs: autodl, aliyun, tencent, huawei, runpod, vast, lambda, "
        "aws, gcp, generic (imagesmith/data/platforms.toml; chooses the registry)",
    ),
]
Region = Annotated[
    str | None,
    typer.Option(
        "--region",
        help="the host's cloud region, e.g. cn-hangzhou, ap-shanghai, cn-north-4, us-east-1, "
        "europe-west4, or cn (chooses the registry; cn* and mainland ap-* cities: the mainland-China "
        "order); an unknown one is refused",
    ),
]
Pull = Annotated[bool, typer.Option("--pull", help="docker pull the picked image (with progress)")]
VerifyCluster = Annotated[
    bool,
    typer.Option(
        "--verify-cluster",
        help="fetch the picked image's signed cluster report from its registry (sha256-<hex>.cluster) and "
        "check it against the signed index: the artifact the index records, its DSSE signature, about the "
        "picked digest; exit 9 naming the registry, tag and field when it is missing or altered",
    ),
]
PickJson = Annotated[bool, typer.Option("--json", help="print the pick as JSON")]
PickRefresh = Annotated[
    bool,
    typer.Option(
        "--refresh",
        help="ignore the cached index and fail when the source cannot be reached (without it, an "
        "unreachable source falls back to the cached copy, with a warning on stderr)",
    ),
]
PickInsecure = Annotated[
    bool,
    typer.Option(
        "--insecure",
        help="allow an index over plain HTTP (http://, oci+http://): only for a server on a network "
        "you trust, such as a local test registry",
    ),
]
PickVerifyKey = Annotated[
    Path | None,
    typer.Option(
        "--verify-key",
        help="public key the release index must be signed with (the .pub of release --sign-key). "
        "Default: $IMAGESMITH_INDEX_KEY, else \\[release] index_key of the user config, then of the "
        "project, else the key pinned for this index source, else (first use) the key published beside "
        "it, pinned then; without any the index is refused. Its fingerprint is printed on stderr",
    ),
]
PickNoVerify = Annotated[
    bool,
    typer.Option(
        "--no-verify",
        help="use the index without checking its signature, serial or expiry (warned on every run): "
        "whoever can change the index then chooses what this host runs",
    ),
]
Flavor = Annotated[
    str | None,
    typer.Option(
        "--flavor",
        help="only images of this flavor (runtime, devel, interactive; default: runtime where the index "
        "has runtime images); interactive also prints the run line with its ports and variables",
    ),
]

# -- release -------------------------------------------------------------------------------------------------
ReportDirs = Annotated[
    list[Path],
    typer.Option(
        "--reports",
        help="folder(s) with validation reports (report.json, searched recursively); required, "
        "repeatable: only digests they show passing are promoted",
    ),
]
ReleaseOnly = Annotated[list[str] | None, typer.Option("--only", help="cell id glob(s) to release")]
DryRun = Annotated[bool, typer.Option("--dry-run", help="print what would be promoted or refused")]
IndexFile = Annotated[
    Path | None,
    typer.Option(
        "--index-file",
        help="release index file to extend and update (default: paths.release_index of imagesmith.toml, "
        "release/index.json)",
    ),
]
ExtendFrom = Annotated[
    str | None,
    typer.Option(
        "--extend-from",
        metavar="REGISTRY",
        help="when the index file does not exist: extend the index this registry (a registries-file "
        "name) publishes, each entry re-verified against its tags; never read from any other registry",
    ),
]
ReleaseJson = Annotated[bool, typer.Option("--json", help="print the outcome as JSON")]
Verify = Annotated[
    str | None,
    typer.Option(
        "--verify",
        help="how far copies trust blobs: head (default), read, full (also read back blobs already "
        "promoted; the nightly); default $IMAGESMITH_VERIFY. At every level, each promoted blob is read "
        "back and hashed once per registry (remembered in the cache: a rerun reads nothing again)",
    ),
]
TrustedKeys = Annotated[
    list[Path] | None,
    typer.Option(
        "--trusted-key",
        help="public key whose signed validation attestations count (repeatable; added to [release] "
        "trusted_keys of imagesmith.toml)",
    ),
]
IndexSignKey = Annotated[
    Path | None,
    typer.Option(
        "--sign-key",
        help="private key that signs the release index (index.json.sig and the index artifact); "
        "default $IMAGESMITH_SIGNING_KEY",
    ),
]
RotateTo = Annotated[
    Path | None,
    typer.Option(
        "--rotate-to",
        metavar="NEW.key",
        help="rotate the index key (issue 34): the index names NEW's fingerprint as its successor, is "
        "signed by --sign-key and NEW, and publishes NEW's .pub; renters that pinned the current key "
        "move to NEW by themselves. Sign with NEW alone from the next run on",
    ),
]
ScanReports = Annotated[
    list[Path] | None,
    typer.Option(
        "--scan-reports",
        metavar="DIR",
        help="folder(s) with vulnerability scans named by digest: sha256-<hex>.grype.json (grype -o "
        "json), .trivy.json (trivy -f json), or an SBOM .cdx.json/.spdx.json matched against the OSV "
        "file of [release.vulnerabilities]; a cell with an advisory at or above fail_on is refused",
    ),
]

# -- candidates, index ---------------------------------------------------------------------------------------
CellGlobs = Annotated[list[str] | None, typer.Option("--only", help="cell id glob(s)")]
Pinned = Annotated[
    bool, typer.Option("--pinned", help="print only the first pinned reference (IMAGE@DIGEST) per cell")
]
IndexSource = Annotated[
    str | None,
    typer.Argument(help="index file, https URL or oci://HOST/REPO[:TAG]; default $IMAGESMITH_INDEX"),
]
IndexRefresh = Annotated[bool, typer.Option("--refresh", help="ignore the cached copy of a remote index")]
IndexJson = Annotated[bool, typer.Option("--json", help="print the index as canonical JSON")]
IndexInsecure = Annotated[
    bool, typer.Option("--insecure", help="allow an index over plain HTTP (http://, oci+http://)")
]
IndexVerifyKey = Annotated[
    Path | None,
    typer.Option(
        "--verify-key",
        help="public key the index must be signed with (default: $IMAGESMITH_INDEX_KEY, else \\[release] "
        "index_key of the user config, then of the project, else the key pinned for the source, else "
        "the key published beside it, pinned on first use)",
    ),
]
IndexNoVerify = Annotated[
    bool,
    typer.Option("--no-verify", help="do not check the signature, serial or expiry (warned on every run)"),
]
Collective = Annotated[
    str,
    typer.Option(
        "--collective",
        help="Several nodes: all_reduce_perf + all_gather_perf across them (nccl-tests built with MPI=1): "
        "auto (where the nodes have GPUs; srun with --slurm, else mpirun over ssh) | mpirun | srun | off.",
    ),
]
Ddp = Annotated[
    str,
    typer.Option(
        "--ddp",
        help="Several nodes: a timed DDP training step on one node, then on all (torchrun's c10d "
        "rendezvous, the nodes' own torch): auto (where the nodes have GPUs; srun with --slurm, else "
        "torchrun over ssh) | torchrun | srun | off. Without GPUs it runs on the CPU with gloo.",
    ),
]
Slurm = Annotated[
    bool,
    typer.Option(
        "--slurm",
        help="The nodes of the Slurm allocation this runs in; their collective through srun (implied "
        "inside an allocation of 2+ nodes with no TARGET: name local:// for this node only).",
    ),
]


# -- keygen, sbom (issue 31: their command layers, keyrequest.py and sbomrequest.py) ------------------------
PrivateKey = Annotated[
    Path, typer.Argument(help="private key file to create (mode 0600; never overwritten, never printed)")
]
PublicKey = Annotated[
    Path | None,
    typer.Option("--public", help="public key file to create (PEM; default: PRIVATE with suffix .pub)"),
]
KeyType = Annotated[
    str, typer.Option("--type", help="ecdsa-p256 (default; cosign's own key type) or ed25519")
]
SbomImage = Annotated[str, typer.Argument(help="the image by digest: HOST/REPO@sha256:<hex>")]
SbomOut = Annotated[
    Path,
    typer.Option(
        "--out",
        help="folder for sha256-<hex>.spdx.json (and, signed, sha256-<hex>.sbom.dsse.json): what "
        "release --scan-reports reads",
    ),
]
SbomSignKey = Annotated[
    Path | None,
    typer.Option(
        "--sign-key",
        help="private key that signs the in-toto SBOM attestation (predicateType "
        "https://spdx.dev/Document); default $IMAGESMITH_SIGNING_KEY",
    ),
]
SbomLock = Annotated[
    Path | None,
    typer.Option("--lock", help="the cell's lock file: its --hash=sha256 lines go into the SBOM"),
]
SbomEngine = Annotated[
    bool, typer.Option("--engine", help="read the image from the local Docker engine, not the registry")
]
SbomInsecure = Annotated[
    bool, typer.Option("--insecure", help="the registry speaks plain HTTP (a local test registry)")
]


# -- plan, render, compat, refresh-compat, fetch-sources, schema (issue 31) ---------------------------------
#: ``--matrix`` of plan, lock and build (one matrix, default the project's)
OneMatrix = Annotated[str | None, typer.Option("--matrix", "-m", help=MATRIX_HELP)]
#: ``render``'s ``--matrix`` (one matrix, default every matrix of the project)
EveryMatrix = Annotated[
    str | None, typer.Option("--matrix", "-m", help=MATRIX_HELP + " Default: every matrix.")
]
PlanOnly = Annotated[
    list[str] | None, typer.Option("--only", help="Glob over cell ids ({a,b} allowed); repeatable.")
]
PlanJson = Annotated[bool, typer.Option("--json", help='Print {"cells": [...]} as JSON.')]
PlanGithub = Annotated[
    bool, typer.Option("--github", help="Print a GitHub Actions strategy matrix (include list).")
]
PlanExplain = Annotated[
    bool, typer.Option("--explain", help="Also list every dropped combination with its reason.")
]
RenderCheck = Annotated[bool, typer.Option("--check", help="Write nothing; fail listing files that differ.")]
CompatTorch = Annotated[
    str,
    typer.Option(
        "--torch", help="torch release, exact patch version (2.1.2), or with its variant (2.1.2+cu121)"
    ),
]
CompatCuda = Annotated[
    str | None,
    typer.Option(
        "--cuda",
        help="CUDA variant of the wheel: X.Y (12.1) or its tag (cu121); default: the +cuXYZ of "
        "--torch, else the variant `pip install torch==T` gets from PyPI",
    ),
]
CompatDriver = Annotated[str | None, typer.Option("--driver", help="NVIDIA driver version, e.g. 535.104.05")]
CompatGpus = Annotated[
    list[str] | None,
    typer.Option(
        "--gpu",
        help="GPU: key (h100-sxm, a100, rtx4090) or the name nvidia-smi prints; repeatable "
        "(one verdict each)",
    ),
]
CompatNvidiaSmi = Annotated[
    str | None,
    typer.Option(
        "--nvidia-smi",
        metavar="FILE",
        help="saved output of `nvidia-smi`, `nvidia-smi -L` or `nvidia-smi --query-gpu=... --format=csv` "
        "instead of --driver/--gpu ('-' = stdin); one verdict per GPU model in it",
    ),
]
CompatJson = Annotated[bool, typer.Option("--json", help="print JSON instead of text")]
Releases = Annotated[
    str | None,
    typer.Option(
        "--releases",
        help="Minor versions to check: 2.10-2.15, 2.12 or 2.10- "
        "(default: the data's newest minor and later).",
    ),
]
RefreshJson = Annotated[bool, typer.Option("--json", help="Print the diff as JSON.")]
RefreshWrite = Annotated[
    bool,
    typer.Option(
        "--write",
        help="Write new releases and differing fields into torch.toml as verified = false, the PyPI file "
        "in their source (rows are never removed).",
    ),
]
NoArch = Annotated[
    bool,
    typer.Option("--no-arch", help="Skip the arch lists (each one streams a few hundred MB of one wheel)."),
]
IndexUrl = Annotated[
    str | None,
    typer.Option(
        "--index-url",
        envvar="IMAGESMITH_INDEX_URL",
        help="A PEP 691 Simple API (default: $PIP_INDEX_URL, pip's configured index-url, else PyPI).",
    ),
]
Offline = Annotated[
    Path | None,
    typer.Option("--offline", help="Replay a folder written by --record instead of reading the index."),
]
Record = Annotated[
    Path | None, typer.Option("--record", help="Keep what was read (trimmed) in this folder, for --offline.")
]
DataFile = Annotated[
    Path, typer.Option("--data-file", help="The torch.toml --write edits.", show_default=False)
]
Boards = Annotated[
    Path | None,
    typer.Option(
        "--boards",
        help="Instead of PyPI: re-derive every board's first driver from this clone of "
        "NVIDIA/open-gpu-kernel-modules (its release tags, read with git) and diff it against "
        "driver_table.toml; with --write, rewrite that file.",
    ),
]
BoardsFile = Annotated[
    Path, typer.Option("--boards-file", help="The driver_table.toml --boards compares.", show_default=False)
]
#: ``fetch-sources``'s ``--matrix`` (repeatable, default every matrix)
SourceMatrices = Annotated[
    list[str] | None, typer.Option("--matrix", "-m", help=MATRIX_HELP + " Default: every matrix.")
]
FromGit = Annotated[
    Path | None,
    typer.Option("--from-git", help="Fill the cache from this local clone (git archive), not the network."),
]
FromPaths = Annotated[
    list[Path] | None,
    typer.Option(
        "--from",
        help="Fill the cache from this folder of archives or this archive file (.tar or .tar.gz), "
        "not the network (repeatable).",
    ),
]
SourceMirrors = Annotated[
    list[str] | None,
    typer.Option(
        "--mirror",
        help="URL template tried before the configured mirrors and the pinned URL, e.g. "
        "https://mirror.example/{url} (fields {url} {path} {host} {name} {version} {commit} {file}).",
    ),
]
SchemaOut = Annotated[
    Path | None,
    typer.Option(
        "--out",
        help="Folder for the *.schema.json files (default: docs/schemas of the project: -C DIR, "
        "$IMAGESMITH_PROJECT or the imagesmith.toml above; outside a project, of the working folder).",
        show_default=False,
    ),
]
SchemaCheck = Annotated[bool, typer.Option("--check", help="Write nothing; fail when a file differs.")]
