"""/dev/shm: at least the image's requirement, and a multi-worker DataLoader that dies with "Bus error" at 64
MB.
"""

from __future__ import annotations

from imagesmith.inputs import is_digits
from imagesmith.validate.context import CheckRecord, Context, fail
from imagesmith.validate.parsers import format_bytes


def _fix(ctx: Context) -> str:
    want = ctx.options.shm_min_bytes
    gib = max(1, -(-want // 1024**3))
    return (
        f"start the container with --shm-size={gib}g (or --ipc=host); Docker's default is 64 MB. "
        f"`imagesmith validate IMAGE` does this from the image's io.imagesmith.shm-min label"
    )


def test_shm_size(ctx: Context, check: CheckRecord) -> None:
    r = ctx.run("df -B1 --output=size,fstype /dev/shm 2>/dev/null | tail -n 1 || df -k /dev/shm")
    parts = r.stdout.split()
    if r.rc != 0 or not parts or not is_digits(parts[0]):
        fail(f"/dev/shm is missing or unreadable: {r.output.strip()[:200]}", _fix(ctx))
    size = int(parts[0])
    check.figures.update(
        size_bytes=size,
        size=format_bytes(size),
        fstype=parts[1] if len(parts) > 1 else None,
        required_bytes=ctx.options.shm_min_bytes,
        required=format_bytes(ctx.options.shm_min_bytes),
        required_source=ctx.options.shm_min_source,
    )
    if size < ctx.options.shm_min_bytes:
        fail(
            f"/dev/shm is {format_bytes(size)}, less than the {format_bytes(ctx.options.shm_min_bytes)} "
            f"this image "
            f"needs ({ctx.options.shm_min_source}): DataLoader workers and NCCL will die with 'Bus error' or "
            f"'No space left on device'",
            _fix(ctx),
        )


def test_dataloader_shm(ctx: Context, check: CheckRecord) -> None:
    r, found = ctx.probe("shm", timeout=240)
    out = found[-1] if found else {}
    check.figures.update(out)
    text = r.output
    if r.rc == 0 and out.get("ok"):
        return
    if r.timed_out:
        fail("the DataLoader run hung for 240 s", _fix(ctx))
    err = str(out.get("error") or "")
    last = next((ln.strip() for ln in reversed(err.splitlines()) if ln.strip()), "") or "Bus error"
    if any(k in text.lower() for k in ("bus error", "shared memory", "shm")):
        # torch 2.11 reports "unable to allocate shared memory(shm) for file </torch_…>" (seen at 64 MB on
        # the H200 host); older releases let the worker die with "Bus error"
        fail(
            f"DataLoader workers died: {last[:300]} — /dev/shm is too small for the batches workers pass",
            _fix(ctx),
        )
    fail(
        f"the DataLoader run failed (exit {r.rc}): {out.get('error') or text.strip()[-400:]}",
        "run the probe by hand; torch must be importable with the target's Python",
    )
