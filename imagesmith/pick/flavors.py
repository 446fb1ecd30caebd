"""``--flavor``: the released images of one flavor; the interactive flavor's access (platforms.toml)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from imagesmith.errors import (
    ConfigError,
)
from imagesmith.index import (
    ReleasedImage,
)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    import tomli as tomllib
from imagesmith.pick.platforms import PLATFORMS_RESOURCE
from imagesmith.pick.ranking import Pick, run_flags

# ------------------------------------------------------------------------------------------------------------
# --flavor: the released images of one flavor; the interactive flavor's access (platforms.toml)


def image_flavor(image: ReleasedImage) -> str:
    """The flavor of a released image, from its cell id (``<torch>-<variant>-py<X.Y>-<flavor>-<os>``)."""
    rest = image.cell.rsplit("-py", 1)[-1].split("-")
    return rest[1] if len(rest) > 2 else ""


@dataclass(frozen=True, kw_only=True)
class Access:
    """How a rental reaches an interactive image on a platform: its persistent folder and the ports the
    image's start command listens on (SSH_PORT, JUPYTER_PORT, TENSORBOARD_PORT), with the source of those
    facts."""

    platform: str
    workspace: str
    ssh_port: int
    jupyter_port: int
    tensorboard_port: int
    source: str
    verified: bool
    note: str = ""

    def variables(self) -> list[tuple[str, str]]:
        """(variable, what to set it to) for `docker run -e`: the secrets come from the user's shell."""
        out = [
            ("PUBLIC_KEY", 'your SSH public key, e.g. export PUBLIC_KEY="$(cat ~/.ssh/id_ed25519.pub)"'),
            ("JUPYTER_PASSWORD", "JupyterLab's token, e.g. export JUPYTER_PASSWORD=$(openssl rand -hex 16)"),
        ]
        defaults: list[tuple[str, str | int, str | int]] = [
            ("IMAGESMITH_WORKSPACE", self.workspace, "/workspace"),
            ("SSH_PORT", self.ssh_port, 22),
            ("JUPYTER_PORT", self.jupyter_port, 8888),
            ("TENSORBOARD_PORT", self.tensorboard_port, 6006),
        ]
        out += [(name, str(value)) for name, value, default in defaults if value != default]
        return out

    def run_argv(self, pick: Pick) -> list[str]:
        """`docker run` on a plain Docker host: detached, the ports published (SSH on host port 2222: the
        host's own sshd holds 22), a named volume as the workspace, the secrets passed from the shell."""
        ports = [
            f"2222:{self.ssh_port}",
            f"{self.jupyter_port}:{self.jupyter_port}",
            f"{self.tensorboard_port}:{self.tensorboard_port}",
        ]
        argv = ["docker", "run", "-d", *run_flags(pick.image)]
        for p in ports:
            argv += ["-p", p]
        argv += ["-v", f"imagesmith-workspace:{self.workspace}"]
        for name, value in self.variables():
            argv += ["-e", name if name in ("PUBLIC_KEY", "JUPYTER_PASSWORD") else f"{name}={value}"]
        argv += ["-e", f"TENSORBOARD_LOGDIR={self.workspace}/runs", pick.reference]
        return argv

    def lines(self, pick: Pick) -> list[str]:
        where = f"{self.platform}: " if self.platform != "generic" else ""
        lines = [
            f"interactive ({where}workspace {self.workspace}; ports {self.ssh_port} SSH, {self.jupyter_port} "
            f"JupyterLab, {self.tensorboard_port} TensorBoard){'' if self.verified else ' [unverified]'}:",
        ]
        lines += [f"  set {name}: {what}" for name, what in self.variables()]
        lines += [
            "  TENSORBOARD_LOGDIR starts TensorBoard over that folder (no login: publish its port with care)"
        ]
        if self.note:
            lines.append(f"  note: {self.note}")
        lines += [
            f"  source: {self.source}",
            "",
            shlex.join(self.run_argv(pick)),
            "ssh -p 2222 root@HOST    # JupyterLab: http://HOST:"
            f"{self.jupyter_port}/lab?token=$JUPYTER_PASSWORD",
        ]
        return lines


def interactive_access(platform: str | None, path: Path | None = None) -> Access:
    """The interactive access of *platform* (its ``interactive`` table in platforms.toml), else generic's."""
    package, name = PLATFORMS_RESOURCE
    text = (
        path.read_text(encoding="utf-8")
        if path is not None
        else resources.files(package).joinpath(name).read_text(encoding="utf-8")
    )
    rows = {row["name"]: row for row in tomllib.loads(text).get("platform", [])}
    key = (platform or "generic").strip().lower()
    row = rows.get(key) if key in rows and "interactive" in rows[key] else rows["generic"]
    assert row is not None
    data = row["interactive"]
    try:
        return Access(
            platform=str(row["name"]),
            workspace=str(data["workspace"]),
            ssh_port=int(data["ssh_port"]),
            jupyter_port=int(data["jupyter_port"]),
            tensorboard_port=int(data["tensorboard_port"]),
            source=str(data["source"]),
            verified=bool(data["verified"]),
            note=str(data.get("note", "")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"platforms.toml: platform {row['name']}: interactive: missing or bad field {exc}",
            hint="fix the data row",
        ) from None
