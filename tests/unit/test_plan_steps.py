"""Issue 31: the drop checks of :func:`imagesmith.plan.plan_from` in named steps, each tested directly (the
whole plan's tests are test_plan*.py; the order of the checks is plan --explain's)."""

from __future__ import annotations

import dataclasses

import pytest

from imagesmith import compat
from imagesmith.errors import MatrixError
from imagesmith.matrix import load_matrix
from imagesmith.plan import _check_registries, _flavor_reason, _python_reason, _ToolkitChoice
from tests.repo import REPO


def test_python_reason_names_the_first_python_check_that_fails() -> None:
    smoke = load_matrix(REPO / "matrices" / "smoke.toml")
    base, release = smoke.bases[0], compat.torch_release("2.11.0")
    assert _python_reason(smoke, base, release, base.python) is None
    assert _python_reason(smoke, base, release, "3.8") == (
        f"torch 2.11.0 supports Python {release.python}, not 3.8"  # the range is checked first
    )
    assert _python_reason(smoke, base, release, "3.12") == (
        f"Python 3.12 is neither {base.os}'s ({base.python}) nor uv-managed"
    )


def test_flavor_reason_drops_a_devel_cell_without_a_toolkit_for_extensions() -> None:
    smoke = load_matrix(REPO / "matrices" / "smoke.toml")
    base = smoke.bases[0]
    pip = _ToolkitChoice("pip", base.image, None, "")
    devel_image = _ToolkitChoice("devel-image", "nvidia/cuda:12.8.1-devel", None, "")
    assert _flavor_reason(smoke, base, "13.0", "devel", None, pip) is None  # CUDA 13 wheels carry nvcc
    assert _flavor_reason(smoke, base, "12.8", "devel", None, devel_image) == (
        f'devel flavor needs an nvidia/cuda:12.8.x-devel image: add "12.8" to {base.key}.devel_images'
    )
    assert _flavor_reason(smoke, base, "12.8", "runtime", None, devel_image) is None
    base_torch = dataclasses.replace(smoke, torch=dataclasses.replace(smoke.torch, source="base"))
    assert _flavor_reason(base_torch, base, "13.0", "devel", None, pip) == (
        "devel flavor: torch comes from the base image, which already is the whole environment"
    )
    assert _flavor_reason(base_torch, base, "13.0", "interactive", None, pip) == (
        "interactive flavor: torch comes from the base image (the flavor builds on a runtime cell)"
    )


def test_a_registry_that_gets_no_cell_is_an_error() -> None:
    smoke = load_matrix(REPO / "matrices" / "smoke.toml")
    cid = "2.11.0-cu130-py3.11-runtime-debian12"
    _check_registries(smoke, [cid])  # "*": every cell
    narrow = dataclasses.replace(smoke.registries[0], cells=("1.*",))
    only_narrow = dataclasses.replace(smoke, registries=(narrow,))
    _check_registries(only_narrow, [])  # nothing considered: nothing to judge
    with pytest.raises(MatrixError, match=f"cells 1.\\* match none of the matrix's cells \\({cid}\\)"):
        _check_registries(only_narrow, [cid])
