"""CLI commands ``pick`` and ``release`` (plus ``index show``).

Heavy modules are imported inside the commands: ``imagesmith pick`` with a cached index must start fast.
"""

from __future__ import annotations

import platform as _platform
from pathlib import Path
from typing import Any

import typer

from imagesmith import settings
from imagesmith.commands import current_project, epilog, flags, hold_project, project_option
from imagesmith.commands.output import pick_json, pick_text, release_json, release_text
from imagesmith.errors import ConfigError
from imagesmith.scrub import scrub

RELEASE_EPILOG = epilog(
    [
        "imagesmith release --matrix a100 --reports reports/ --dry-run",
        "imagesmith release --matrix a100 --reports reports/h100 --reports reports/a100 --json",
        "imagesmith release --matrix a100 --reports reports/ --scan-reports scans/",
    ],
    [
        "0 = every cell promoted or up to date (or would be, --dry-run)",
        "2 = bad matrix, project or flags (--reports is required)",
        "3 = --only matched no cell",
        "6 = a copy to a registry failed",
        "8 = a cell was refused (no passing attestation of its exact digest signed by a trusted key, or a "
        "vulnerability at or above [release.vulnerabilities] fail_on that no valid allowlist entry covers)",
        "9 = a registry refused (auth, denied, unreachable)",
        "13 = a file could not be written whole (disk full, out of inodes, a link or no regular file there): "
        "the old one is left as it was",
        "14 = another imagesmith command holds the project's lock (it waits IMAGESMITH_LOCK_WAIT s first)",
    ],
)
CANDIDATES_EPILOG = epilog(
    ["imagesmith candidates --matrix a100", "imagesmith candidates --matrix a100 --only '*cu130*' --pinned"],
    [
        "0 = listed",
        "2 = bad matrix, project or flags",
        "3 = --only matched no cell",
        "8 = (--pinned) a cell has no pushed candidate",
        "9 = a registry refused (auth, denied, unreachable)",
    ],
)
INDEX_EPILOG = epilog(
    ["imagesmith index release/index.json", "imagesmith index oci://ghcr.io/me/torch:release-index --json"],
    [
        "0 = the index is valid, signed by the trusted key, not older than one seen before and not expired",
        "2 = no index given, or it is not a valid release index, or not trusted (no key to check it with, a "
        "missing or bad signature, a key other than the pinned one, a replayed older or an expired index)",
        "9 = its registry refused (auth, denied, unreachable)",
    ],
)


def _warn(message: str) -> None:
    typer.echo(scrub(f"warning: {message}"), err=True)


def _index_trust(
    flag: Path | None, no_verify: bool, *, fingerprint: str | None = None, first_use: bool = False
) -> Any:
    """How pick, index and ``validate --baseline-from`` trust the release index
    (:func:`imagesmith.pick.indexrequest.index_trust`), with the project the renter named."""
    from imagesmith.pick.indexrequest import index_trust

    return index_trust(
        flag, no_verify, fingerprint=fingerprint, first_use=first_use, named_project=_project_named
    )


def _project_named() -> Any:
    """The project the renter named (``--project``, ``$IMAGESMITH_PROJECT``), else None: pick and index
    never take a key from an imagesmith.toml found by walking up from the working directory (issue 34: a file
    planted in a parent folder would choose the key that verifies the index)."""
    from imagesmith.project import PROJECT_ENV, discover

    if project_option() is not None or settings.get(PROJECT_ENV):
        return discover(project_option())
    return None


def _note(line: str) -> None:
    typer.echo(scrub(line), err=True)


PICK_EPILOG = epilog(
    [
        "imagesmith pick --index docs/examples/release-index.json --verify-key "
        "docs/examples/release-index.json.pub --driver 535.104.05 --gpu a100",
        "nvidia-smi | imagesmith pick --nvidia-smi - --platform autodl --pull",
    ],
    [
        "0 = picked (warnings such as an end-of-life driver or a stale cached index do not change it)",
        "2 = bad input (flags, unknown GPU/platform/region, an --nvidia-smi FILE that cannot be read, an "
        "index file or https URL that cannot be read or is not a release index, a plain-HTTP index without "
        "--insecure; an index that is not trusted: no key to check it with, a missing or bad signature, a "
        "key other than the one pinned for the source, a replayed older or an expired index)",
        "3 = --torch/--cuda/--python match no image of the index",
        "5 = --pull: no Docker engine",
        "7 = the nvidia-smi output is unusable (not nvidia-smi output, nvidia-smi failed, -L output without "
        "--driver)",
        "9 = a registry failed: the oci:// index cannot be read, or --pull failed from every registry "
        "holding the image or got another digest, or (--verify-cluster) the image's cluster artifact is "
        "missing, altered or not the one the signed index records",
        "10 = no image of the index runs on this host (the error names the driver that would)",
    ],
)


def register(app: typer.Typer) -> None:
    """Add this module's commands to *app*."""
    app.command("pick", epilog=PICK_EPILOG)(pick)
    app.command("release", epilog=RELEASE_EPILOG)(release)
    app.command("candidates", epilog=CANDIDATES_EPILOG)(candidates)
    app.command("index", epilog=INDEX_EPILOG)(index_show)


def pick(
    index: flags.PickIndex = None,
    nvidia_smi: flags.NvidiaSmi = None,
    driver: flags.Driver = None,
    gpu: flags.Gpus = None,
    torch: flags.Torch = None,
    cuda: flags.Cuda = None,
    python: flags.Python = None,
    platform: flags.Platform = None,
    region: flags.Region = None,
    pull: flags.Pull = False,
    as_json: flags.PickJson = False,
    refresh: flags.PickRefresh = False,
    insecure: flags.PickInsecure = False,
    verify_key: flags.PickVerifyKey = None,
    key_fingerprint: flags.KeyFingerprint = None,
    trust_first_use: flags.TrustFirstUse = False,
    no_verify: flags.PickNoVerify = False,
    flavor: flags.Flavor = None,
    verify_cluster: flags.VerifyCluster = False,
) -> None:
    """Choose the released image for this GPU host and print how to pull and run it."""
    from imagesmith import pick as picking

    if verify_cluster and no_verify:
        raise ConfigError(
            "--verify-cluster checks the cluster evidence against the signed index, and --no-verify leaves "
            "the index unchecked",
            hint="drop --no-verify (name the publisher's key with --verify-key, or pin it on first use)",
            field="--verify-cluster",
        )

    source = index or settings.get("IMAGESMITH_INDEX")
    if not source:
        raise ConfigError(
            "no release index given",
            hint="pass --index FILE|URL|oci://HOST/REPO[:TAG] or set IMAGESMITH_INDEX",
        )
    host = picking.read_host(nvidia_smi_file=nvidia_smi, driver=driver, gpus=gpu or ())
    from imagesmith.pick.indexrequest import fetch_trusted

    trust = _index_trust(verify_key, no_verify, fingerprint=key_fingerprint, first_use=trust_first_use)
    idx = fetch_trusted(source, trust, refresh=refresh, insecure=insecure, warn=_warn, note=_note)
    request = picking.PickRequest(
        nvidia_smi=nvidia_smi,
        driver=driver,
        gpus=tuple(gpu or ()),
        torch=torch,
        cuda=cuda,
        python=python,
        platform=platform,
        region=region,
        flavor=flavor,
        pull=pull,
    )
    result = picking.pick_for(
        request,
        host,
        idx,
        detect=lambda: picking.detect_platform(),  # looked up when called: tests replace it on the package
        machine=_platform.machine,
        note=lambda line: typer.echo(line, err=True),
    )
    chosen, access = result.pick, result.access
    if as_json:
        typer.echo(pick_json(chosen))
    else:
        typer.echo(pick_text(chosen) + ("\n\n" + "\n".join(access.lines(chosen)) if access else ""))
    if verify_cluster:  # issue 32: the signed cluster report beside the image, checked against the index
        for line in picking.verify_cluster(chosen, insecure=insecure):
            typer.echo(line, err=as_json)
    if pull:
        picking.pull_image(chosen, echo=lambda line: typer.echo(line, err=True))


def release(
    reports: flags.ReportDirs,
    matrix: flags.Matrix = None,
    only: flags.ReleaseOnly = None,
    dry_run: flags.DryRun = False,
    index_file: flags.IndexFile = None,
    registries: flags.Registries = None,
    extend_from: flags.ExtendFrom = None,
    as_json: flags.ReleaseJson = False,
    verify: flags.Verify = None,
    trusted_key: flags.TrustedKeys = None,
    sign_key: flags.IndexSignKey = None,
    rotate_to: flags.RotateTo = None,
    scan_reports: flags.ScanReports = None,
) -> None:
    """Promote candidates whose exact digest has a passing validation attestation, signed by a trusted key,
    to every registry of their cell."""
    from imagesmith import release as releasing

    request = releasing.ReleaseRequest(
        reports=tuple(reports),
        matrix=matrix,
        only=tuple(only or ()),
        dry_run=dry_run,
        index_file=index_file,
        registries=registries,
        extend_from=extend_from,
        verify=verify,
        trusted_keys=tuple(trusted_key or ()),
        sign_key=sign_key,
        rotate_to=rotate_to,
        scan_reports=tuple(scan_reports or ()),
    )
    prepared = releasing.prepare_release(request)  # every flag's rule, before the project is locked
    project = current_project(matrix)
    hold_project(project, "release")
    outcome = releasing.release_for(
        request, prepared, project=project, echo=lambda line: typer.echo(scrub(line), err=True)
    )
    # issue 34: a registry's error quoted in a cell's reasons never shows a credential
    typer.echo(scrub(release_json(outcome) if as_json else release_text(outcome)))
    outcome.raise_for_refusals()


def candidates(
    matrix: flags.Matrix = None,
    only: flags.CellGlobs = None,
    registries: flags.Registries = None,
    pinned: flags.Pinned = False,
) -> None:
    """Each cell's candidate digest per registry (what `imagesmith validate IMAGE@DIGEST` tests)."""
    from imagesmith import release as releasing

    request = releasing.CandidatesRequest(
        matrix=matrix, only=tuple(only or ()), registries=registries, pinned=pinned
    )
    prepared = releasing.prepare_candidates(request, project_of=current_project)
    result = releasing.candidates_for(request, prepared)
    result.raise_for_missing()  # --pinned: nothing printed when a cell has no candidate
    for line in result.lines():
        typer.echo(line)


def index_show(
    source: flags.IndexSource = None,
    refresh: flags.IndexRefresh = False,
    as_json: flags.IndexJson = False,
    insecure: flags.IndexInsecure = False,
    verify_key: flags.IndexVerifyKey = None,
    no_verify: flags.IndexNoVerify = False,
    key_fingerprint: flags.KeyFingerprint = None,
    trust_first_use: flags.TrustFirstUse = False,
) -> None:
    """Load, verify (signature by the trusted or pinned key, serial, expiry; as pick does) and list a release
    index."""
    from imagesmith.pick import indexrequest

    request = indexrequest.IndexRequest(
        source=source,
        refresh=refresh,
        insecure=insecure,
        verify_key=verify_key,
        no_verify=no_verify,
        key_fingerprint=key_fingerprint,
        trust_first_use=trust_first_use,
    )
    prepared = indexrequest.prepare(request, named_project=_project_named)
    result = indexrequest.show(request, prepared, warn=_warn, note=_note)
    if as_json:
        typer.echo(result.json(), nl=False)
        return
    for line in result.lines():
        typer.echo(line)
