"""OS families: a base's os tag picks how system packages are installed; unknown families are refused."""

from __future__ import annotations

import pytest

from imagesmith import compat
from imagesmith.errors import ConfigError


def test_known_bases_are_apt() -> None:
    for os_tag in ("debian12", "ubuntu22.04", "ubuntu24.04"):
        family = compat.os_family(os_tag)
        assert family is not None
        assert family.name == "apt"
    assert compat.os_family("rockylinux9") is None


def test_logical_packages_map_to_the_familys_names() -> None:
    apt = compat.os_family("debian12")
    assert apt is not None
    assert apt.package_names(["make", "cxx", "python3_venv"]) == ["make", "g++", "python3-venv"]
    with pytest.raises(ConfigError, match="has no package for"):
        apt.package_names(["rust"])


def test_every_family_has_its_template_fragment() -> None:
    from importlib import resources

    for family in compat.os_families():
        assert (resources.files("imagesmith") / "templates" / "os" / f"{family.name}.j2").is_file(), (
            family.name
        )
