"""Driver ↔ CUDA ↔ PyTorch ↔ GPU compatibility: versions, packaged data, arch coverage and verdicts.

Pure: the only input/output is reading the packaged TOML tables in ``imagesmith/data`` (``cuda.toml``,
``torch.toml``, ``gpus.toml``) through :mod:`importlib.resources`; each table is loaded once and cached. Every
row names its ``source``; rows resting on secondary sources or assumptions say ``verified = false`` (see
docs/compat.md).

Rules applied (NVIDIA "CUDA Compatibility" documentation, PyTorch release matrix):

* A CUDA X.Y program runs with **full** features on a driver ≥ the toolkit driver of CUDA X.Y (release notes,
  Table 3). Newer drivers always run older CUDA (backward compatibility).
* Under **minor-version compatibility** it runs on any driver ≥ the floor of its major (11.x ≥ 450.80.02, 12.x
  ≥ 525.60.13, 13.x ≥ 580.65.06) with a limited feature set: PTX newer than the driver cannot be JIT-compiled
  and APIs newer than the driver fail. A wheel whose only kernel for the GPU is PTX therefore needs full
  compatibility.
* A wheel runs on a GPU of compute capability M.m when it carries SASS for M.m (**native**), SASS for M.n with
  n < m (**binary-compatible**: same major, lower minor), or PTX for any ≤ M.m (**ptx**: JIT-compiled by the
  driver at first start); otherwise torch reports "sm_Mm is not compatible with the current PyTorch
  installation".
"""

from __future__ import annotations

from imagesmith.compat.distros import (
    DistroToolkit,
    distro_toolkit,
    distro_toolkits,
)
from imagesmith.compat.distros import (
    OsBase as OsBase,
)
from imagesmith.compat.distros import (
    OsFamily as OsFamily,
)
from imagesmith.compat.distros import (
    default_source_pin as default_source_pin,
)
from imagesmith.compat.distros import (
    os_bases as os_bases,
)
from imagesmith.compat.distros import (
    os_families as os_families,
)
from imagesmith.compat.distros import (
    os_family as os_family,
)
from imagesmith.compat.drivers import (
    TODAY_ENV as TODAY_ENV,
)
from imagesmith.compat.drivers import (
    BranchLifecycle,
    CudaRelease,
    DriverVersion,
    MinDriver,
    WheelRuntime,
    branch_lifecycle,
    cuda_release,
    cuda_releases,
    driver_branch_cuda,
    driver_warnings,
    max_cuda_for_driver,
    min_driver,
    normalize_cuda,
    parse_driver,
    today,
    wheel_runtime,
)
from imagesmith.compat.drivers import (
    Designation as Designation,
)
from imagesmith.compat.drivers import (
    _lifecycles as _lifecycles,
)
from imagesmith.compat.hardware import (
    ArchCoverage,
    ArchFamily,
    BoardFloor,
    Gpu,
    arch_coverage,
    arch_families,
    board_floors,
    board_gap,
    gpu,
    gpu_arch,
    gpu_candidates,
    gpu_family,
    gpu_last_branch,
    gpu_min_driver,
    gpu_or_adhoc,
    gpu_warnings,
    gpus,
    nearest_gpu,
    vgpu,
)
from imagesmith.compat.hardware import (
    torch_arch_names as torch_arch_names,
)
from imagesmith.compat.tables import (
    DATA_HINT as DATA_HINT,
)
from imagesmith.compat.tables import (
    DataError as DataError,
)
from imagesmith.compat.tables import (
    _load as _load,
)
from imagesmith.compat.tables import (
    nearest,
)
from imagesmith.compat.torchwheels import (
    TorchRelease,
    TorchVariant,
    torch_release,
    torch_releases,
    torch_variant,
)
from imagesmith.compat.verdicts import (
    Verdict,
    verdict,
)

__all__ = [
    "ArchCoverage",
    "ArchFamily",
    "BoardFloor",
    "BranchLifecycle",
    "CudaRelease",
    "DistroToolkit",
    "DriverVersion",
    "Gpu",
    "MinDriver",
    "TorchRelease",
    "TorchVariant",
    "Verdict",
    "WheelRuntime",
    "arch_coverage",
    "arch_families",
    "board_floors",
    "board_gap",
    "branch_lifecycle",
    "cuda_release",
    "cuda_releases",
    "distro_toolkit",
    "distro_toolkits",
    "driver_branch_cuda",
    "driver_warnings",
    "gpu",
    "gpu_arch",
    "gpu_candidates",
    "gpu_family",
    "gpu_last_branch",
    "gpu_min_driver",
    "gpu_or_adhoc",
    "gpu_warnings",
    "gpus",
    "max_cuda_for_driver",
    "min_driver",
    "nearest",
    "nearest_gpu",
    "normalize_cuda",
    "parse_driver",
    "today",
    "torch_release",
    "torch_releases",
    "torch_variant",
    "verdict",
    "vgpu",
    "wheel_runtime",
]
