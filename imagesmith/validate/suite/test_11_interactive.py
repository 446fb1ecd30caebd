"""The interactive flavor (SSH by key, JupyterLab, TensorBoard; imagesmith-start): sshd refuses passwords,
the image holds no SSH host key, and JupyterLab, TensorBoard and their closure are at the lock's versions.
Every check skips, saying why, on an image of another flavor (no /usr/local/bin/imagesmith-start).
"""

from __future__ import annotations

import json
import shlex

import pytest

from imagesmith.validate.context import CheckRecord, Context, fail

START = "/usr/local/bin/imagesmith-start"
#: the interactive section of the lock, kept in the image by the flavor's pip layer
PINS = "/usr/local/share/imagesmith/interactive-requirements.txt"
#: what sshd must answer (`sshd -T`, lower-case keys; prohibit-password reads back as without-password)
SSHD_WANT = {
    "passwordauthentication": "no",
    "kbdinteractiveauthentication": "no",
    "permitemptypasswords": "no",
    "pubkeyauthentication": "yes",
    "permitrootlogin": "without-password",
}


@pytest.fixture(scope="module")
def interactive(ctx: Context) -> None:
    if ctx.run(f"test -x {START}", timeout=30).rc != 0:
        pytest.skip(f"not the interactive flavor: no {START} in this image")


def test_interactive_sshd_allows_keys_only(ctx: Context, check: CheckRecord, interactive: None) -> None:
    key = f"{ctx.workdir}/check-host-key"
    r = ctx.run(
        f"ssh-keygen -q -t ed25519 -N '' -f {key} && mkdir -p /run/sshd && /usr/sbin/sshd -T -h {key}",
        timeout=60,
    )
    if r.rc != 0:
        fail(
            f"`sshd -T` failed (exit {r.rc}): {r.output.strip()[:500]}",
            "rebuild the image (imagesmith build)",
        )
    seen = dict(ln.split(" ", 1) for ln in r.stdout.splitlines() if " " in ln)
    check.figures.update({k: seen.get(k) for k in SSHD_WANT})
    wrong = [f"{k} {seen.get(k)!r} (want {v!r})" for k, v in SSHD_WANT.items() if seen.get(k) != v]
    if wrong:
        fail(
            "sshd would accept more than a key: " + "; ".join(wrong),
            "/etc/ssh/sshd_config.d/00-imagesmith.conf must come first: rebuild the image; never edit it",
        )


def test_interactive_image_has_no_ssh_host_key(ctx: Context, check: CheckRecord, interactive: None) -> None:
    if not (ctx.options.target == "local://" and ctx.options.target_label):
        pytest.skip(
            "only a fresh container of the image shows the image's own files (a running one made its host "
            "keys at its first start): run `imagesmith validate IMAGE`"
        )
    r = ctx.run("ls /etc/ssh/ | grep '^ssh_host_' || true", timeout=30)
    found = r.stdout.split()
    check.figures["host_keys"] = found
    if found:
        fail(
            f"the image holds SSH host keys ({', '.join(found)}): every container would share them",
            "rebuild the image with imagesmith (its openssh layer deletes them; imagesmith-start makes each "
            "container's own)",
        )


def test_interactive_packages_at_their_pinned_versions(
    ctx: Context, check: CheckRecord, interactive: None
) -> None:
    script = (
        "import json, re, sys\n"
        "from importlib import metadata\n"
        "out = {}\n"
        f"for line in open({PINS!r}):\n"
        "    m = re.match(r'^([A-Za-z0-9][A-Za-z0-9._-]*)==(\\S+)', line)\n"
        "    if m:\n"
        "        try:\n"
        "            out[m.group(1)] = [m.group(2), metadata.version(m.group(1))]\n"
        "        except metadata.PackageNotFoundError:\n"
        "            out[m.group(1)] = [m.group(2), None]\n"
        "print(json.dumps(out))\n"
    )
    r = ctx.run(f"{ctx.options.python} -c {shlex.quote(script)}", timeout=120)
    if r.rc != 0:
        fail(f"cannot read {PINS}: {r.output.strip()[:400]}", "rebuild the image (imagesmith build)")
    pins: dict[str, list[str | None]] = json.loads(r.stdout.strip().splitlines()[-1])
    check.figures.update(
        pinned=len(pins),
        jupyterlab=pins.get("jupyterlab", [None, None])[1],
        tensorboard=pins.get("tensorboard", [None, None])[1],
    )
    for name in ("jupyterlab", "tensorboard"):
        if name not in pins:
            fail(f"{PINS} pins no {name}", "re-lock: imagesmith lock --matrix NAME, then rebuild")
    wrong = [f"{n} {have or 'missing'} (lock: {want})" for n, (want, have) in pins.items() if want != have]
    if wrong:
        fail(
            "packages differ from the lock's interactive section: " + "; ".join(wrong[:10]),
            "rebuild the image from its lock (imagesmith build); never pip install over it",
        )
