"""Issue 35: a MIG device as CUDA names it (``NVIDIA A100-SXM4-40GB MIG 1g.5gb``) and as ``nvidia-smi -L``
lists it (``MIG 3g.40gb Device 0: (UUID: MIG-…)`` under its parent) resolves to the parent board, with the MIG
warning, instead of being refused as an unknown GPU."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from imagesmith import compat
from imagesmith.errors import ConfigError

Run = Callable[..., Any]


@pytest.mark.parametrize(
    ("name", "key", "profile"),
    [
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", "a100-40gb-sxm4", "MIG 1g.5gb"),
        ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", "a100-80gb-sxm4", "MIG 3g.40gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "h100-sxm", "MIG 1g.10gb+me"),
        ("NVIDIA H200 MIG 1c.3g.71gb", "h200", "MIG 1c.3g.71gb"),
        ("nvidia a30  mig 2g.12gb", "a30", "MIG 2g.12gb"),
    ],
)
def test_a_mig_device_name_resolves_to_its_parent(name: str, key: str, profile: str) -> None:
    g = compat.gpu(name)
    assert (g.key, g.mig) == (key, profile)
    assert any(
        w.startswith(f"{g.name} {profile} is a MIG device: one slice of a {g.name}")
        for w in compat.gpu_warnings(g)
    )


def test_a_mig_device_of_an_unknown_board_is_still_unknown() -> None:
    with pytest.raises(ConfigError) as exc:
        compat.gpu("NVIDIA Foo 9000 MIG 1g.5gb")
    assert exc.value.fault == "unknown GPU"


def test_compat_gpu_with_a_mig_name_judges_the_parent_and_warns(run_cli: Run) -> None:
    res = run_cli(
        "compat",
        "--gpu",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",
        "--driver",
        "535.104.05",
        "--torch",
        "2.1.2",
        "--cuda",
        "12.1",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    v = json.loads(res.stdout)
    assert (v["gpu"], v["mode"]) == ("a100-40gb-sxm4", "full")
    assert any("is a MIG device" in w for w in v["warnings"])
    # the parent's floor still applies: a MIG slice of a board the driver cannot drive is refused
    old = run_cli(
        "compat",
        "--gpu",
        "NVIDIA H200 NVL MIG 1g.18gb",
        "--driver",
        "560.35.03",
        "--torch",
        "2.5.1",
        "--cuda",
        "12.4",
    )
    assert old.exit_code == 1
    assert "needs driver ≥ 565.57.01" in old.stdout


def test_nvidia_smi_L_mig_lines_resolve_under_their_parent(run_cli: Run, tmp_path: Path) -> None:
    listing = tmp_path / "L.txt"
    listing.write_text(
        "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5d6a1c2e-1111-2222-3333-444455556666)\n"
        "  MIG 3g.40gb Device 0: (UUID: MIG-0a1b2c3d-1111-2222-3333-444455556666)\n"
        "  MIG 3g.40gb Device 1: (UUID: MIG-0a1b2c3d-1111-2222-3333-444455556667)\n",
        encoding="utf-8",
    )
    res = run_cli(
        "compat",
        "--nvidia-smi",
        str(listing),
        "--driver",
        "580.105.08",
        "--torch",
        "2.9.0",
        "--cuda",
        "12.8",
        "--json",
    )
    assert res.exit_code == 0, res.stderr
    v = json.loads(res.stdout)
    assert (v["gpu"], v["mode"]) == ("a100-80gb-sxm4", "full")
    assert any(
        "MIG is enabled on GPU 0 (NVIDIA A100-SXM4-80GB), 2 MIG slice(s): 3g.40gb, 3g.40gb" in w
        for w in v["warnings"]
    )
