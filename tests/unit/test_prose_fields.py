"""Decisions that read imagesmith's own prose back (found by the re-check of issue 24) read a field now:
a verdict's notes, why init passed a lock over, what the index reader found wrong. Each test sets the field
and words that would fool a reader of the words."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from packaging.version import Version

from imagesmith import compat
from imagesmith.errors import ConfigError
from imagesmith.index import parse_index
from imagesmith.pick import read_host
from imagesmith.pick.ranking import assess
from tests.unit.test_pick import image_doc


def _image() -> Any:
    doc = {
        "schema": "imagesmith.release-index/v1",
        "generated": "2026-11-28T00:00:00Z",
        "images": [image_doc("2.5.1", "12.4", "3.11")],
    }
    return parse_index(json.dumps(doc), source="t").images[0]


def test_a_verdict_says_its_notes_as_a_field() -> None:
    # 2.9.0+cu126: its arch list is assumed (verified = false in data/torch.toml): a note
    v = compat.verdict("570.133.20", "h100-sxm", "2.9.0", "12.6")
    assert v.notes
    assert all(n in v.reasons for n in v.notes)
    assert any("partly unverified" in n for n in v.notes)
    full = compat.verdict("570.133.20", "h100-sxm", "2.5.1", "12.4")
    assert [r for r in full.reasons if r in full.notes] == list(full.notes)


@pytest.mark.parametrize("mode", ["full", "minor-version"])
def test_pick_passes_on_the_verdict_s_notes_whatever_their_words(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    real = compat.verdict

    def worded(*args: Any, **kwargs: Any) -> compat.Verdict:
        v = real(*args, **kwargs)
        # a note worded without the "note:" prefix, and a reason that starts with it but is not a note
        return replace(
            v,
            mode=mode,  # type: ignore[arg-type]
            compatible=True,
            blockers=(),
            reasons=("note: a reason, not a note", "the data of this torch is partly unverified"),
            notes=("the data of this torch is partly unverified",),
        )

    monkeypatch.setattr(compat, "verdict", worded)
    host = read_host(driver="570.133.20", gpus=["h100-sxm"])
    out = assess(_image(), host)
    assert out.warnings == ("the data of this torch is partly unverified",)


def test_init_chooses_its_fix_from_the_cause_not_the_words() -> None:
    from imagesmith.scaffold import _no_fit_hint, _Rejected

    need = compat.parse_driver("550.54.14")
    driver_only = [
        _Rejected(Version("2.5.1"), "torch 2.5.1 cu124: the host's driver is too old", "driver", need),
        _Rejected(
            Version("2.7.1"),
            "torch 2.7.1 cu128: no kernels for (the words of another cause)",
            "driver",
            compat.parse_driver("570.26"),
        ),
    ]
    hint = _no_fit_hint(driver_only, "535.104.05")
    assert "which needs >= 550.54.14" in hint
    assert "upgrade the host driver" in hint
    kernels = [
        _Rejected(Version("2.9.0"), "torch 2.9.0 cu129: CUDA 12.9 needs driver >= 575.51.03", "kernels")
    ]
    assert _no_fit_hint(kernels, None).startswith("scaffold for another GPU")
    python = [_Rejected(Version("2.9.0"), "torch 2.9.0 cu129 py3.13: words", "python")]
    assert _no_fit_hint(python, None).startswith("give another --base")


def test_an_index_reader_error_carries_its_file_field_and_problem() -> None:
    doc = {
        "schema": "imagesmith.release-index/v1",
        "generated": "2026-11-28T00:00:00Z",
        "images": [{**image_doc("2.5.1", "12.4", "3.11"), "torch": 7}],
    }
    with pytest.raises(ConfigError) as info:
        parse_index(json.dumps(doc), source="idx.json")
    assert info.value.file == "idx.json"
    assert info.value.field == "images[0].torch"
    assert info.value.problem is not None
    assert info.value.problem in info.value.message
    assert "idx.json" not in info.value.problem


def test_index_problem_returns_the_typed_error() -> None:
    from imagesmith.release import index_problem

    image = _image()
    assert index_problem(image) is None
    problem = index_problem(replace(image, torch="not a version"))
    assert isinstance(problem, ConfigError)
    assert problem.field is not None
    assert problem.field.startswith("images[0]")
    assert problem.problem is not None
    assert problem.field not in problem.problem
