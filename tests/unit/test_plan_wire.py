"""The plan's JSON wire format (``imagesmith plan --json``, read by CI fan-out) is flat and did not change
when ``Cell`` was grouped into records (issue 31): same keys, same order, same values."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from imagesmith.matrix import load_matrix
from imagesmith.model import Cell
from imagesmith.plan import build_plan
from tests.repo import PROJECT, REPO

#: the keys of a cell in ``plan --json``, in order, as the flat ``Cell`` wrote them before the grouping
WIRE: tuple[str, ...] = (
    "matrix", "id", "tag", "flavor", "torch", "torchvision", "torchaudio", "torch_source", "variant", "cuda",
    "python", "python_full", "python_source", "uv", "python_install_mirror", "os", "base_image",
    "builder_image", "devel_image", "nccl_toolkit", "distro_toolkit", "toolkit_note", "index_url",
    "pypi_default", "pins", "builder_pins", "interactive_pins", "lock_file", "lock_verified", "lock_note",
    "nccl_version", "min_driver", "require_cuda", "gpus", "gpu_families", "gpu_names", "archs",
    "nvcc_gencode", "arch_coverage", "shm_min", "shm_min_bytes", "nccl_tests_version", "nccl_tests_commit",
    "nccl_tests_sha256", "nccl_tests_url", "nccl_tests_archive", "mirror_build", "mirror_runtime",
    "registries", "labels", "venv", "dockerfile", "context", "fingerprint", "layers", "base_digests",
    "base_local", "base_moves", "base_read", "hashed", "image_refs",
)  # fmt: skip
#: dict-shaped on the wire (pairs in the type), or reshaped by to_json
RESHAPED = {"pins", "builder_pins", "interactive_pins", "arch_coverage", "labels", "base_digests"}
RESHAPED |= {"base_moves", "base_read", "layers", "min_driver", "registries", "distro_toolkit"}
#: the golden plan: ``imagesmith plan -m smoke --json`` of the flat Cell (fingerprints blanked: they follow
#: imagesmith's version). A change to the smoke matrix or its lock changes it on purpose: regenerate with
#: ``imagesmith plan -m smoke --json`` and blank the fingerprints.
GOLDEN = REPO / "tests" / "data" / "plan-smoke.json"
MATRICES = sorted(p.stem for p in (REPO / "matrices").glob("*.toml") if p.stem != "registries")


def _json(name: str) -> dict[str, Any]:
    plan = build_plan(load_matrix(name, project=PROJECT), project=PROJECT)
    printed: dict[str, Any] = json.loads(json.dumps(plan.to_json()))  # as printed: tuples become lists
    return printed


@pytest.mark.parametrize("name", MATRICES)
def test_every_cell_of_every_reference_matrix_has_the_flat_keys_in_their_order(name: str) -> None:
    cells = _json(name)["cells"]
    assert cells
    for cell in cells:
        assert tuple(cell) == WIRE, cell["id"]


@pytest.mark.parametrize("name", MATRICES)
def test_each_wire_value_is_its_fields_value_in_the_record_that_holds_it(name: str) -> None:
    """A value under another key (two fields swapped in to_json) is caught, not only a renamed key."""
    plan = build_plan(load_matrix(name, project=PROJECT), project=PROJECT)
    for cell in plan.cells:
        wire = cell.to_json()
        leaves = dict(cell.leaves())
        assert set(leaves) - {"pin_hashes"} <= set(wire)
        for key, value in leaves.items():
            if key in RESHAPED or key == "pin_hashes":
                continue
            assert wire[key] == value, (cell.id, key)
        for key in ("pins", "builder_pins", "interactive_pins", "labels", "base_digests", "base_read"):
            assert wire[key] == dict(leaves[key]), (cell.id, key)
        assert wire["hashed"] is cell.lock.hashed
        assert wire["image_refs"] == [r.ref(cell.tag) for r in cell.publish.registries]


def test_the_smoke_plan_is_the_one_the_flat_cell_printed() -> None:
    got = _json("smoke")
    for cell in got["cells"]:
        assert len(cell["fingerprint"]) == 64
        cell["fingerprint"] = ""
    want = json.loads(Path(GOLDEN).read_text())
    assert [c["id"] for c in got["cells"]] == [c["id"] for c in want["cells"]]
    for have, had in zip(got["cells"], want["cells"], strict=True):
        assert list(have) == list(had)
        assert {k: v for k, v in have.items() if v != had[k]} == {}, have["id"]
    assert got == want


def test_a_cell_is_its_identity_and_seven_records() -> None:
    (cell,) = build_plan(load_matrix("smoke", project=PROJECT), project=PROJECT).cells[:1]
    assert [type(r).__name__ for r in cell.records()] == [
        "TorchStack", "Runtime", "Bases", "Toolkit", "CellLock", "Hardware", "Publish",
    ]  # fmt: skip
    names = [n for n, _ in cell.leaves()]
    assert len(names) == len(set(names)) == len(WIRE) - 2 + 1  # less hashed/image_refs, plus pin_hashes
    assert isinstance(cell, Cell)
