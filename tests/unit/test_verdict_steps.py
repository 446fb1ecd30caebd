"""Issue 31: the named steps of :func:`imagesmith.compat.verdicts.verdict`, each with a rule of its own,
tested directly (verdict's own tests in test_compat*.py cover how they add up)."""

from __future__ import annotations

from imagesmith.compat import hardware, torchwheels
from imagesmith.compat.drivers import min_driver, parse_driver
from imagesmith.compat.verdicts import (
    _Case,
    _covering_release,
    _Findings,
    _gpu_floor,
    _needs_driver,
    _python_fit,
)

D = parse_driver


def _case(driver: str, gpu: str, torch: str = "2.11.0", variant: str = "cu130") -> _Case:
    rel = torchwheels.torch_release(torch)
    var = rel.variants[variant]
    return _Case(
        drv=D(driver),
        g=hardware._lookup_gpu(gpu),
        rel=rel,
        var=var,
        vname=variant,
        xy=var.cuda,
        md=min_driver(var.cuda),
    )


def test_needs_driver_is_the_highest_needed_only_when_a_driver_is_all_that_is_in_the_way() -> None:
    def found(*needs: str, blocked: bool = False, blockers: tuple[str, ...] = ("x",)) -> _Findings:
        return _Findings(blockers=list(blockers), needs=[D(n) for n in needs], arch_blocked=blocked)

    assert _needs_driver(found("525.60.13", "580.65.06", "550.54.14"), D("470.00.01")) == D("580.65.06")
    assert _needs_driver(found("580.65.06", blocked=True), D("470.00.01")) is None  # no driver lifts it
    assert _needs_driver(found("580.65.06", blockers=()), D("470.00.01")) is None  # nothing in the way
    assert _needs_driver(found("525.60.13"), D("580.65.06")) is None  # the driver already is that new
    assert _needs_driver(found(), D("470.00.01")) is None


def test_the_release_named_for_a_gpu_without_kernels() -> None:
    """A wheel that dropped the GPU names the newest release with kernels; otherwise the first from the asked
    release on, and the first ever only when that is newer than the asked one."""
    assert _covering_release("7.0", "2.11.0", dropped=True) == ("2.14.1+cu126", "newest torch release")
    assert _covering_release("12.0", "2.0.0", dropped=False) == ("2.7.0+cu128", "first torch release")
    other, which = _covering_release("12.0", "2.9.0", dropped=False)
    assert which == "first torch release from 2.9.0 on"
    assert other is not None
    assert other.startswith("2.9.0+"), other


def test_gpu_floor_blocks_a_driver_older_than_the_gpu_and_names_its_floor() -> None:
    floor = hardware.gpu_min_driver(hardware._lookup_gpu("rtx5090"))
    assert floor is not None
    below = _Findings()
    assert _gpu_floor(_case("560.35.03", "rtx5090"), below) is True
    assert below.needs == [floor[0]]
    assert below.blockers[0].startswith(f"NVIDIA GeForce RTX 5090 (sm_120) needs driver ≥ {floor[0]}: ")
    at = _Findings()
    assert _gpu_floor(_case(str(floor[0]), "rtx5090"), at) is False
    assert at == _Findings()


def test_python_fit_blocks_a_refused_python_and_notes_a_minor_with_refused_versions() -> None:
    c = _case("580.65.06", "h100-sxm")
    refused = _Findings()
    _python_fit(c, "3.14.1", refused)
    assert refused.arch_blocked
    assert refused.blockers[0].endswith(": use another Python 3.14.x")
    assert refused.notes == []
    minor = _Findings()
    _python_fit(c, "3.14", minor)
    assert not minor.arch_blocked
    assert minor.blockers == []
    assert minor.notes == [
        f"note: torchvision {c.rel.torchvision} (paired with torch 2.11.0) requires Python !=3.14.1,>=3.10: "
        "an image on Python 3.14.1 cannot install it"
    ]
    other_minor = _Findings()
    _python_fit(c, "3.12", other_minor)
    assert other_minor == _Findings()
    left_out = _Findings()
    _python_fit(c, None, left_out)
    assert left_out.notes == minor.notes
