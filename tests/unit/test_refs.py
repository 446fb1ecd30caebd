"""Image references are taken apart in one place (imagesmith.refs): ports are not tags, digests stay whole."""

from __future__ import annotations

import pytest

from imagesmith.errors import ConfigError
from imagesmith.refs import ImageRef, Registry, split_reference


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("debian:bookworm", ("debian", "bookworm", None)),
        ("127.0.0.1:5000/a/b:t", ("127.0.0.1:5000/a/b", "t", None)),
        ("127.0.0.1:5000/a/b", ("127.0.0.1:5000/a/b", None, None)),
        ("ghcr.io/x/y@sha256:" + "0" * 64, ("ghcr.io/x/y", None, "sha256:" + "0" * 64)),
        ("ghcr.io/x/y:1@sha256:" + "1" * 64, ("ghcr.io/x/y", "1", "sha256:" + "1" * 64)),
        ("localhost:5000", ("localhost", "5000", None)),
    ],
)
def test_split_reference(text: str, expected: tuple[str, str | None, str | None]) -> None:
    assert split_reference(text) == expected


def test_image_ref_fills_docker_defaults() -> None:
    assert str(ImageRef.parse("debian:bookworm")) == "docker.io/library/debian:bookworm"
    assert str(ImageRef.parse("index.docker.io/nvidia/cuda")) == "docker.io/nvidia/cuda:latest"
    ref = ImageRef.parse("127.0.0.1:5000/imagesmith/torch:x")
    assert (ref.registry, ref.path, ref.tag) == ("127.0.0.1:5000", "imagesmith/torch", "x")
    with pytest.raises(ConfigError, match="not an image reference"):
        ImageRef.parse("a b")


def test_every_parser_goes_through_refs() -> None:
    """engine tagging, the index's pinned references, pick's oci:// sources and a target's repository path."""
    from imagesmith.engine import split_tag
    from imagesmith.index import RegistryCopy
    from imagesmith.pick import parse_oci_source

    assert split_tag("127.0.0.1:5000/a/b") == ("127.0.0.1:5000/a/b", "latest")
    copy = RegistryCopy.parse(name="r", reference="127.0.0.1:5000/t/torch:c", digest="sha256:" + "2" * 64)
    assert copy.pinned == "127.0.0.1:5000/t/torch@sha256:" + "2" * 64
    assert parse_oci_source("oci+http://127.0.0.1:5000/t/idx:v1") == ("127.0.0.1:5000", "t/idx", "v1", True)
    assert parse_oci_source("oci://ghcr.io/acme/torch")[2] == "release-index"
    target = Registry(name="hub", host="docker.io", repository="torch", kind="dockerhub")
    # Docker Hub's official-image namespace, as the registry API wants
    assert target.repo == "library/torch"
