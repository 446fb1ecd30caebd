"""The index publish is a compare-and-swap against the registry's current index (issue 37): two releases of
one project index at once (two machines) both exited 0, one matrix's image was missing from the index, and
one serial was published twice with different bodies."""

from __future__ import annotations

from dataclasses import replace

import pytest

from imagesmith.index import dump_index, read_signed_index_artifact
from imagesmith.refs import Registry
from imagesmith.release import IndexPublicationError, publish_index_everywhere
from tests.fakeregistry import FakeRegistry
from tests.unit.test_pick import make_index

REPO = Registry(name="r1", host="127.0.0.1:5000", repository="acme/index")


def _body(serial: int, drop: int = 0) -> bytes:
    index = make_index()
    return dump_index(replace(index, serial=serial, images=index.images[drop:])).encode()


def _publish(reg: FakeRegistry, body: bytes) -> None:
    publish_index_everywhere([REPO], {REPO.name: reg}, body, None)


def test_a_second_release_of_the_same_serial_with_other_bytes_is_refused_and_moves_nothing() -> None:
    reg = FakeRegistry()
    _publish(reg, _body(5))
    first, second = _body(6), _body(6, drop=1)  # two releases that both extended serial 5
    _publish(reg, first)
    with pytest.raises(IndexPublicationError) as err:
        _publish(reg, second)
    assert "moved under this release" in err.value.message
    assert "serial 6" in err.value.message
    assert err.value.registry == "r1"
    assert read_signed_index_artifact(reg, REPO.repo)[0] == first  # the first release's index stands


def test_an_older_serial_never_replaces_a_newer_index() -> None:
    reg = FakeRegistry()
    _publish(reg, _body(9))
    with pytest.raises(IndexPublicationError, match="holds serial 9"):
        _publish(reg, _body(7))
    assert read_signed_index_artifact(reg, REPO.repo)[0] == _body(9)


def test_a_newer_serial_and_a_rerun_of_the_same_index_publish() -> None:
    reg = FakeRegistry()
    _publish(reg, _body(5))
    _publish(reg, _body(6, drop=1))
    _publish(reg, _body(6, drop=1))  # the rerun of an interrupted release converges
    assert read_signed_index_artifact(reg, REPO.repo)[0] == _body(6, drop=1)
