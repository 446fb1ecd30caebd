"""How validation gets GPUs into a container: the engine's GPU runtime (the NVIDIA container toolkit) when it
has one, else the way the toolkit does it by hand — the /dev/nvidia* device nodes, the driver tree
/usr/local/nvidia bound read-only, LD_LIBRARY_PATH/PATH pointing into it (how the lent GPU hosts run Docker
without the toolkit). The engine only passes what this module decides through (:meth:`Engine.run_container`).
"""

from __future__ import annotations

import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from imagesmith.engine import BindMount, ContainerEngine, GpuRequest
from imagesmith.errors import EngineError

GpuMode = Literal["auto", "toolkit", "devices"]


@dataclass(frozen=True, kw_only=True)
class GpuAccess:
    """What a container needs to see the GPUs: a runtime request, or devices + mounts + environment."""

    request: GpuRequest | None = None
    devices: tuple[str, ...] = ()
    mounts: tuple[BindMount, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def gpu_request(gpus: str) -> GpuRequest:
    """``all`` / a count / ``device=0,1`` → the runtime request (``docker run --gpus``)."""
    if gpus == "all":
        return GpuRequest()
    if gpus.startswith("device="):
        return GpuRequest(device_ids=tuple(gpus.split("=", 1)[1].split(",")))
    return GpuRequest(count=int(gpus))


def nvidia_device_setup(
    gpus: str = "all", *, dev: Path = Path("/dev"), driver_root: Path = Path("/usr/local/nvidia")
) -> tuple[list[str], list[BindMount], dict[str, str]]:
    """Device nodes, read-only driver mounts and environment exposing GPUs without the container toolkit."""
    wanted: set[str] | None = None
    if gpus.startswith("device="):
        wanted = {f"nvidia{i}" for i in gpus.split("=", 1)[1].split(",")}
    devices: list[str] = []
    for path in sorted(dev.glob("nvidia*")):
        try:
            mode = path.stat().st_mode
        except OSError:
            continue
        if not stat.S_ISCHR(mode):  # /dev/nvidia-caps is a folder
            continue
        if wanted is not None and re.fullmatch(r"nvidia[0-9]+", path.name) and path.name not in wanted:
            continue
        devices.append(f"{path}:{path}:rwm")
    if not any(re.fullmatch(r".*/nvidia[0-9]+:.*", d) for d in devices):
        raise EngineError(
            "GPUs were asked for, but this host has no /dev/nvidia<N> device nodes and no NVIDIA "
            "container toolkit",
            hint="run on a GPU host (driver loaded), or leave the GPUs out",
        )
    mounts: list[BindMount] = []
    env: dict[str, str] = {}
    if driver_root.is_dir():
        mounts.append(BindMount(source=str(driver_root), target=str(driver_root)))
        env["LD_LIBRARY_PATH"] = f"{driver_root}/lib64:{driver_root}/lib"
        env["PATH"] = f"{driver_root}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    for lib in ("/lib/libcuda.so.1", "/usr/lib/x86_64-linux-gnu/libcuda.so.1"):
        if Path(lib).exists() and not driver_root.is_dir():
            mounts.append(BindMount(source=lib, target=lib))
    smi = shutil.which("nvidia-smi")
    if smi and not smi.startswith(str(driver_root)):
        mounts.append(BindMount(source=smi, target=smi))
    return devices, mounts, env


def gpu_access(engine: ContainerEngine, gpus: str | None, mode: GpuMode = "auto") -> GpuAccess:
    """What to pass to the engine for *gpus* (None: no GPU) in *mode* (auto: the toolkit when the engine
    has the ``nvidia`` runtime, else devices).
    """
    if not gpus:
        return GpuAccess()
    if mode == "auto":
        mode = "toolkit" if engine.has_nvidia_runtime() else "devices"
    if mode == "toolkit":
        return GpuAccess(request=gpu_request(gpus))
    devices, mounts, env = nvidia_device_setup(gpus)
    return GpuAccess(devices=tuple(devices), mounts=tuple(mounts), env=tuple(env.items()))
