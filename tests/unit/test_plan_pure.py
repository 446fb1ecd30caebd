"""Issue 31: ``plan_from`` is a pure function of the matrix and one :class:`PlanInputs` record (the locks, the
base lock, the wheel sizes, the project's folders), which its caller reads (``read_plan_inputs``)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from imagesmith import plan as planner
from imagesmith.lock import Lock, LockError, LockKey
from imagesmith.matrix import Matrix, load_matrix
from imagesmith.plan import PlanInputs, build_plan, plan_from, read_plan_inputs
from imagesmith.wheelsizes import SizeTable
from tests.repo import PROJECT, REPO

KEY = LockKey(torch="2.11.0", variant="cu130", python="3.12")


@pytest.fixture
def smoke() -> Matrix:
    return load_matrix(REPO / "matrices" / "smoke.toml")


def _no_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every reader the planner module knows raises: a plan from a record must need none of them."""

    def refuse(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(f"the pure planner read from the project: {args}")

    for name in ("read_lock", "read_sizes", "read_bases", "lock_keys_in"):
        monkeypatch.setattr(planner, name, refuse)


def _lock(key: LockKey) -> Lock:
    pins = (
        ("numpy", "2.2.6"),
        ("torch", key.torch),
        ("nvidia-nccl-cu12", "2.28.7"),
        ("nvidia-nccl-cu13", "2.28.7"),
    )
    return Lock(key=key, path=Path("nowhere") / key.filename, pins=pins, builder_pins=(), header=())


def test_plan_from_an_in_memory_record(smoke: Matrix, monkeypatch: pytest.MonkeyPatch) -> None:
    wanted = {
        (c.stack.torch, c.stack.variant, c.runtime.python) for c in build_plan(smoke, project=PROJECT).cells
    }
    locks = {k: _lock(k) for k in (LockKey(torch=t, variant=v, python=p) for t, v, p in wanted)}
    _no_reads(monkeypatch)
    record = PlanInputs(locks_shown="my/locks", dockerfiles="out", locks=locks)
    plan = plan_from(smoke, record, with_fingerprints=False)
    assert plan.cells, plan.dropped
    for cell in plan.cells:
        key = LockKey(torch=cell.stack.torch, variant=cell.stack.variant, python=cell.runtime.python)
        assert cell.lock.pins == locks[key].pins
        assert cell.lock.lock_file == f"my/locks/{key.filename}"
        assert cell.stack.nccl_version == "2.28.7"
        assert cell.publish.context == f"out/{smoke.name}/{cell.id}"
        assert cell.bases.base_digests == ()  # no base lock in the record: bases go by name
    # with no locks at all, every cell is dropped naming the record's locks folder (never floated)
    empty = plan_from(smoke, PlanInputs(locks_shown="my/locks", dockerfiles="out"), with_fingerprints=False)
    assert not empty.cells
    assert all("no lock my/locks/" in d.reason for d in empty.dropped if "lock" in d.reason)


def test_an_unreadable_lock_raises_when_a_cell_needs_it(smoke: Matrix) -> None:
    plan = build_plan(smoke, project=PROJECT, with_fingerprints=False)
    cell = plan.cells[0]
    key = LockKey(torch=cell.stack.torch, variant=cell.stack.variant, python=cell.runtime.python)
    broken = LockError("locks/x.txt: cut short", file="x.txt", problem="cut short")
    record = PlanInputs(locks_shown="locks", dockerfiles="out", other_locks={key: broken})
    with pytest.raises(LockError) as caught:
        plan_from(smoke, record, with_fingerprints=False)
    assert caught.value is broken


def test_read_then_plan_is_build_plan(smoke: Matrix) -> None:
    record = read_plan_inputs(smoke, PROJECT)
    assert record.locks_shown == PROJECT.rel(PROJECT.locks_dir)
    assert isinstance(record.sizes, SizeTable)
    assert plan_from(smoke, record) == build_plan(smoke, project=PROJECT)
