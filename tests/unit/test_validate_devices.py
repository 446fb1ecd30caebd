"""GPUs into a container, decided by validation: the toolkit's request, or device nodes + driver tree."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

from imagesmith.engine import GpuRequest
from imagesmith.errors import EngineError
from imagesmith.validate.devices import gpu_access, gpu_request, nvidia_device_setup


class _Engine:
    def __init__(self, toolkit: bool) -> None:
        self.toolkit = toolkit

    def has_nvidia_runtime(self) -> bool:
        return self.toolkit


def test_requests() -> None:
    assert gpu_request("all") == GpuRequest()
    assert gpu_request("2") == GpuRequest(count=2)
    assert gpu_request("device=0,3") == GpuRequest(device_ids=("0", "3"))


def test_no_gpu_devices_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="no /dev/nvidia<N> device nodes"):
        nvidia_device_setup("all", dev=tmp_path, driver_root=tmp_path / "none")


def test_toolkit_when_the_engine_has_it_and_nothing_without_gpus() -> None:
    engine: Any = _Engine(toolkit=True)
    assert gpu_access(engine, "all").request == GpuRequest()
    assert gpu_access(engine, None).request is None
    assert gpu_access(engine, None).devices == ()


def test_device_nodes_and_driver_tree(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    try:
        for name, minor in (("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)):
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(195, minor))
    except PermissionError:
        pytest.skip("creating character devices needs root")
    (dev / "nvidia-caps").mkdir()  # a folder: not a device
    driver = tmp_path / "nvidia"
    driver.mkdir()
    devices, mounts, env = nvidia_device_setup("device=1", dev=dev, driver_root=driver)
    assert devices == [f"{dev}/nvidia1:{dev}/nvidia1:rwm", f"{dev}/nvidiactl:{dev}/nvidiactl:rwm"]
    assert mounts[0].source == str(driver)
    assert mounts[0].read_only
    assert env["LD_LIBRARY_PATH"] == f"{driver}/lib64:{driver}/lib"
