"""The Python environment: numpy/torch interop and `pip check`."""

from __future__ import annotations

from imagesmith.validate.context import CheckRecord, Context, fail


def test_numpy_torch_interop(ctx: Context, check: CheckRecord) -> None:
    r = ctx.probe_one("interop", timeout=180)
    check.figures.update({k: v for k, v in r.items() if k != "error"})
    if "error" in r:
        fail(
            f"numpy/torch interop failed: {r['error']}",
            "install a numpy that this torch supports (pip check)",
        )
    bad_dtypes = [k for k, ok in r.get("dtypes_round_trip", {}).items() if not ok]
    problems = []
    if not r.get("from_numpy_shares_memory") or not r.get("numpy_shares_memory"):
        problems.append("torch.from_numpy/.numpy() do not share memory")
    if bad_dtypes:
        problems.append("dtypes change in a round trip: " + ", ".join(bad_dtypes))
    if r.get("gpu_round_trip_equal") is False:
        problems.append("numpy → GPU → numpy changed the data")
    if problems:
        fail("; ".join(problems), "reinstall numpy/torch from the image's lock file")


def test_pip_check(ctx: Context, check: CheckRecord) -> None:
    r = ctx.run(f"{ctx.options.python} -m pip check", timeout=120)
    check.figures["output"] = r.output.strip()[:2000]
    if r.rc != 0:
        fail(
            f"`pip check` found broken requirements:\n{r.output.strip()[:1500]}",
            "rebuild the image from its lock file (imagesmith lock + build); never pip install over it",
        )
