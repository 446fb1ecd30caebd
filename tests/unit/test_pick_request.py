"""Issue 31: the pick command's layer — a typed request and the rules it picks by (the detected platform, the
flavors), called without the CLI; the platform detection is handed in."""

from __future__ import annotations

from dataclasses import replace

import pytest

from imagesmith.errors import NothingToDoError
from imagesmith.pick import Detected, PickRequest, of_flavor, pick_for, platform_of, read_host
from tests.unit.test_pick import make_index


def test_a_live_host_takes_the_platform_it_detects_and_says_so() -> None:
    notes: list[str] = []
    found = Detected(platform="autodl", signal="/root/autodl-tmp exists")
    assert platform_of(PickRequest(), lambda: found, notes.append) == "autodl"
    assert notes == ["note: platform autodl detected (/root/autodl-tmp exists); --platform overrides"]
    asked: list[int] = []

    def detect() -> Detected | None:
        asked.append(1)
        return found

    # --platform, --region, or a host read offline (no --pull): nothing is detected
    assert platform_of(PickRequest(platform="vast"), detect, notes.append) == "vast"
    assert platform_of(PickRequest(region="us-east-1"), detect, notes.append) is None
    assert platform_of(PickRequest(driver="580.95.05", gpus=("h100",)), detect, notes.append) is None
    assert asked == []
    assert platform_of(PickRequest(driver="580.95.05", pull=True), detect, notes.append) == "autodl"


def test_the_flavor_rules() -> None:
    index = make_index()
    runtime = {i.tag for i in index.images}
    assert {i.tag for i in of_flavor(index, None).images} == runtime
    assert {i.tag for i in of_flavor(index, "runtime").images} == runtime
    with pytest.raises(NothingToDoError, match="--flavor devel matches no image of the release index: its "):
        of_flavor(index, "devel")
    dev = replace(index.images[0], cell=index.images[0].cell.replace("-runtime-", "-devel-"), tag="d")
    both = replace(index, images=(*index.images, dev))
    assert [i.tag for i in of_flavor(both, "devel").images] == ["d"]
    assert "d" not in {i.tag for i in of_flavor(both, None).images}  # the plain image unless asked


def test_pick_for_chooses_with_the_detected_platform_and_this_machine() -> None:
    host = read_host(driver="580.95.05", gpus=["h100-sxm"])
    request = PickRequest(driver="580.95.05", gpus=("h100-sxm",), pull=True)
    found = Detected(platform="autodl", signal="s")
    result = pick_for(request, host, make_index(), detect=lambda: found, machine=lambda: "aarch64")
    assert result.pick.registry.kind == "aliyun-acr"  # detected in China: Aliyun's copy
    assert result.access is None
    result = pick_for(
        replace(request, platform="vast"), host, make_index(), detect=lambda: found, machine=lambda: "x"
    )
    assert result.pick.registry.kind == "dockerhub"
