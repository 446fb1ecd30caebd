"""CLI commands ``pick`` and ``release`` (plus ``index show``).

Heavy modules are imported inside the commands: ``imagesmith pick`` with a cached index must start fast.
"""

from __future__ import annotations

import platform as _platform
from pathlib import Path
from typing import Any

import typer

from imagesmith import settings
from imagesmith.commands import current_project, epilog, flags, hold_project
from imagesmith.commands.output import pick_json, pick_text, release_json, release_text
from imagesmith.errors import ConfigError

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
    from imagesmith.scrub import scrub

    typer.echo(scrub(f"warning: {message}"), err=True)


def _index_trust(
    flag: Path | None, no_verify: bool, *, fingerprint: str | None = None, first_use: bool = False
) -> Any:
    """How pick and index trust the release index (:class:`imagesmith.indextrust.Trust`): the key of
    --verify-key, else the fingerprint of --key-fingerprint (issue 34: the trust root), else
    $IMAGESMITH_INDEX_KEY, else ``[release] index_key`` of the user config (or its older ``[pick]
    verify_key``), else of the project's imagesmith.toml **only when named** (``--project``,
    $IMAGESMITH_PROJECT: a walked-up file in a parent folder never chooses the key); each a key or its
    fingerprint. None → the key pinned for the source; with ``--trust-first-use`` the key published beside it
    (first use). ``--no-verify``: nothing is checked (the caller warns)."""
    from dataclasses import replace

    from imagesmith.indextrust import IndexKey, Trust, is_fingerprint, parse_fingerprint

    if no_verify:
        if flag is not None or fingerprint is not None:
            raise ConfigError(
                f"{'--verify-key' if flag is not None else '--key-fingerprint'} and --no-verify contradict "
                "each other",
                hint="drop --no-verify: the index is then checked with the key given",
            )
        return Trust(verify=False)
    root = parse_fingerprint(fingerprint, origin="--key-fingerprint") if fingerprint is not None else None
    base = Trust(
        first_use=first_use, fingerprint=root, fingerprint_origin="--key-fingerprint" if root else ""
    )
    if flag is not None:
        return replace(base, key=IndexKey(_read_key(flag, "--verify-key"), f"--verify-key {flag}"))
    if root is not None:
        return base
    from imagesmith.config import load_config

    config = load_config()
    named: tuple[Path | str, str] | None = None
    if config.index_key is not None:
        named = (config.index_key, config.index_key_origin or config.source)
    else:
        project = _project_named()
        if project is not None and project.index_key is not None:
            named = (project.index_key, f"{project.file}: release.index_key")
    if named is None:
        return Trust(first_use=first_use)
    value, origin = named
    if isinstance(value, Path):
        return Trust(key=IndexKey(_read_key(value, origin), f"{origin} ({value})"), first_use=first_use)
    if is_fingerprint(value):
        return Trust(
            fingerprint=parse_fingerprint(value, origin=origin),
            fingerprint_origin=origin,
            first_use=first_use,
        )
    return Trust(key=IndexKey(value.encode(), origin), first_use=first_use)


def _read_key(path: Path, origin: str) -> bytes:
    """The PEM text of the key file *path* named by *origin*; parsed only when a signature is checked (a
    pick from a cached index verified before loads no crypto), so an unusable file is said here already."""
    from imagesmith import inputs
    from imagesmith.indextrust import pem_fingerprint

    try:  # a FIFO, a device, a folder or a huge file is one error, never a read that blocks
        data = inputs.read_user_file(
            path,
            origin,
            hint=f"point {origin} at the PEM public key file (a `.pub` that `imagesmith keygen` wrote)",
            max_bytes=1 << 20,
        )
    except ConfigError:
        if path.exists():
            raise
        data = b""  # missing: load_public_key below says so, naming where the path came from
    if pem_fingerprint(data) is None:
        from imagesmith import signing

        signing.load_public_key(path, origin)  # says why: unreadable, not PEM, not a key imagesmith takes
    return data


def _project_named() -> Any:
    """The project the renter named (``--project``, ``$IMAGESMITH_PROJECT``), else None: pick and index
    never take a key from an imagesmith.toml found by walking up from the working directory (issue 34: a file
    planted in a parent folder would choose the key that verifies the index)."""
    from imagesmith.commands import project_option
    from imagesmith.project import PROJECT_ENV, discover

    if project_option() is not None or settings.get(PROJECT_ENV):
        return discover(project_option())
    return None


def _no_verify_warning(source: str) -> None:
    _warn(
        f"--no-verify: the release index {source} is used without checking its signature, serial or expiry: "
        "whoever can change it chooses the image this host runs"
    )


def _note(line: str) -> None:
    from imagesmith.scrub import scrub

    typer.echo(scrub(line), err=True)


def _fetch_trusted(
    source: str,
    *,
    refresh: bool,
    insecure: bool,
    verify_key: Path | None,
    no_verify: bool,
    key_fingerprint: str | None = None,
    trust_first_use: bool = False,
) -> Any:
    """The release index of *source* for pick and index: verified as :func:`_index_trust` says (the key's
    fingerprint noted on stderr), or with ``--no-verify`` unchecked and a warning on every run."""
    from imagesmith import pick as picking

    idx = picking.fetch_index(
        source,
        refresh=refresh,
        warn=_warn,
        insecure=insecure,
        trust=_index_trust(verify_key, no_verify, fingerprint=key_fingerprint, first_use=trust_first_use),
        note=_note,
    )
    if no_verify:
        from imagesmith.indextrust import split_root

        _no_verify_warning(split_root(source)[0])
    return idx


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
    idx = _fetch_trusted(
        source,
        refresh=refresh,
        insecure=insecure,
        verify_key=verify_key,
        no_verify=no_verify,
        key_fingerprint=key_fingerprint,
        trust_first_use=trust_first_use,
    )
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
    from imagesmith.scrub import scrub

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
    import json

    from imagesmith import release as releasing
    from imagesmith.errors import RegistryError, ReleaseError

    project = current_project(matrix)
    rows = releasing.candidates(
        project.resolve_matrix_name(matrix), only=only or [], registries_file=registries, project=project
    )
    if pinned:
        missing = [r["cell"] for r in rows if not r["pinned"]]
        unasked = [e for r in rows if not r["pinned"] for e in r["errors"]]
        if unasked:  # the registries could not be asked: a fault to rerun, not a missing build
            raise RegistryError(
                f"no candidate found for {', '.join(missing)}: " + "; ".join(dict.fromkeys(unasked)),
                hint="rerun when the registries answer (the errors above name them and their fix)",
            )
        if missing:
            raise ReleaseError(
                f"no candidate pushed for {', '.join(missing)}",
                hint="run imagesmith build --matrix MATRIX --only CELL --push first",
            )
        for r in rows:
            typer.echo(r["pinned"][0])
        return
    typer.echo(json.dumps(rows, indent=2))


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
    from imagesmith.index import dump_index

    src = source or settings.get("IMAGESMITH_INDEX")
    if not src:
        raise ConfigError(
            "no release index given", hint="pass FILE|URL|oci://HOST/REPO[:TAG] or set IMAGESMITH_INDEX"
        )
    idx = _fetch_trusted(
        src,
        refresh=refresh,
        insecure=insecure,
        verify_key=verify_key,
        no_verify=no_verify,
        key_fingerprint=key_fingerprint,
        trust_first_use=trust_first_use,
    )
    if as_json:
        typer.echo(dump_index(idx), nl=False)
        return
    typer.echo(
        f"{src}: {len(idx.images)} image(s), generated {idx.generated}"
        + (f", serial {idx.serial}, expires {idx.expires}" if idx.serial else "")
    )
    typer.echo(
        "  registries (the publisher's hosts): "
        + (", ".join(idx.registries) or "not listed (an index written before issue 17)")
    )
    for img in idx.images:
        hosts = ", ".join(f"{r.name}" for r in img.registries)
        typer.echo(
            f"  {img.tag}  torch {img.torch} CUDA {img.cuda} py{img.python}  driver >= {img.min_driver.full} "
            f"(minor {img.min_driver.minor_version})  {img.digest[:19]}…  [{hosts}]"
        )
