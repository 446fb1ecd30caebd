# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""A sustained, realistic load on every GPU at once, sampled every few seconds (``validate --soak``).

    python3 soak.py DURATION_S [INTERVAL_S] [SAMPLE_S]

One worker process per GPU (spawned) runs, until DURATION_S has passed, iterations of: dense bf16 (fp16 before
sm_80) 8192³ matmuls, 1 GiB device-memory copies and, with two GPUs or more, an NCCL all_reduce of 256 MiB
across all of them; each part is timed with CUDA events. Every INTERVAL_S (default 5) each worker prints one
``window`` record: what its GPU delivered in that interval (TFLOP/s, GB/s, busbw). The parent samples
nvidia-smi every SAMPLE_S (default 1) for every GPU (SM clock, temperature, power, clock-event reasons,
utilization, memory) and every 5 samples the compute processes on the GPUs and their SM use (``nvidia-smi
pmon``); its own and the workers' PIDs are in the ``start`` record, so a process that is not ours is someone
else's.

Every record is one ``IMAGESMITH_PROBE {json}`` line (``kind``: start, window, smi, apps, pmon, error, end);
times are seconds since the common start. imagesmith.validate.soak turns them into a time series and
judges it.

Test hooks: IMAGESMITH_SOAK_RANKS (number of workers; default one per GPU, several may share a GPU) and
IMAGESMITH_SOAK_BACKEND (nccl; gloo lets two workers share one GPU).
"""

import datetime
import json
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback

MARK = "IMAGESMITH_PROBE "
MATMUL_N = 8192
COPY_BYTES = 1 << 30
ALLREDUCE_BYTES = 256 << 20
#: seconds of matmuls and of copies per iteration (the counts are calibrated once per GPU)
MATMUL_SECONDS = 0.03
COPY_SECONDS = 0.01
SMI_FIELDS = (
    "index",
    "uuid",
    "clocks.sm",
    "clocks.max.sm",
    "temperature.gpu",
    "power.draw",
    "clocks_event_reasons.active",
    "utilization.gpu",
    "memory.used",
)
SMI_FIELDS_OLD = tuple(f.replace("clocks_event_reasons", "clocks_throttle_reasons") for f in SMI_FIELDS)
APPS = "--query-compute-apps=gpu_uuid,pid,process_name,used_memory"


def emit(record):
    # one write of one line: records of several processes never interleave inside a line
    sys.stdout.write(MARK + json.dumps(record) + "\n")
    sys.stdout.flush()


def gpu_id(props):
    uuid = getattr(props, "uuid", None)
    if uuid:
        text = str(uuid)
        return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text
    return None


def worker(rank, world, port, backend, duration, interval, start_barrier):
    try:
        import torch

        count = torch.cuda.device_count()
        device_index = rank % count
        dev = torch.device("cuda", device_index)
        torch.cuda.set_device(dev)
        props = torch.cuda.get_device_properties(device_index)
        dtype = torch.bfloat16 if props.major >= 8 else torch.float16
        dist = None
        if world > 1:
            import torch.distributed as dist

            dist.init_process_group(
                backend,
                init_method=f"tcp://127.0.0.1:{port}",
                rank=rank,
                world_size=world,
                timeout=datetime.timedelta(seconds=120),
            )
        a = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=dtype)
        b = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=dtype)
        c = torch.empty_like(a)
        src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev)
        dst = torch.empty_like(src)
        # zeros: a sum that never overflows, however many rounds (bandwidth does not depend on the values)
        buf = torch.zeros(ALLREDUCE_BYTES // 4, dtype=torch.float32, device=dev) if dist else None
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]

        def timed(fn, reps):
            events[0].record()
            for _ in range(reps):
                fn()
            events[1].record()
            events[1].synchronize()
            return events[0].elapsed_time(events[1]) / 1000.0

        def mm():
            torch.matmul(a, b, out=c)

        def cp():
            dst.copy_(src)

        for _ in range(3):
            mm()
            cp()
        if dist:
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        mm_reps = max(1, round(MATMUL_SECONDS / max(timed(mm, 5) / 5, 1e-6)))
        cp_reps = max(1, round(COPY_SECONDS / max(timed(cp, 5) / 5, 1e-6)))
        if dist:  # every rank runs the same counts (the slowest GPU's), so the all_reduces line up
            counts = torch.tensor([mm_reps, cp_reps], device=dev, dtype=torch.int64)
            dist.all_reduce(counts, op=dist.ReduceOp.MIN)
            mm_reps, cp_reps = (int(x) for x in counts.tolist())
        flops = 2 * MATMUL_N**3 * mm_reps
        copied = 2 * COPY_BYTES * cp_reps  # bytes read + written
        bus_factor = 2 * (world - 1) / world if world > 1 else 0.0
        start_barrier.wait(timeout=600)
        t0 = time.time()
        window, win_start, win_end = 0, 0.0, interval
        acc = {"mm_s": 0.0, "cp_s": 0.0, "ar_s": 0.0, "iters": 0}
        flag = torch.zeros(1, dtype=torch.int32, device=dev) if dist else None
        while True:
            events[0].record()
            for _ in range(mm_reps):
                mm()
            events[1].record()
            for _ in range(cp_reps):
                cp()
            events[2].record()
            if dist:
                dist.all_reduce(buf)
            events[3].record()
            events[3].synchronize()
            acc["mm_s"] += events[0].elapsed_time(events[1]) / 1000.0
            acc["cp_s"] += events[1].elapsed_time(events[2]) / 1000.0
            if dist:
                acc["ar_s"] += events[2].elapsed_time(events[3]) / 1000.0
            acc["iters"] += 1
            now = time.time() - t0
            stop = now >= duration
            if dist:  # rank 0's clock decides for everyone: the collectives stay matched
                flag.fill_(1 if stop else 0)
                dist.broadcast(flag, 0)
                stop = bool(flag.item())
            if now >= win_end or stop:
                it = acc["iters"]
                emit(
                    {
                        "kind": "window",
                        "rank": rank,
                        "cuda_index": device_index,
                        "uuid": gpu_id(props),
                        "name": props.name,
                        "window": window,
                        "t0": round(win_start, 3),
                        "t1": round(now, 3),
                        "iterations": it,
                        "dtype": str(dtype).replace("torch.", ""),
                        "matmul_tflops": flops * it / acc["mm_s"] / 1e12 if acc["mm_s"] > 0 else None,
                        "copy_gbps": copied * it / acc["cp_s"] / 1e9 if acc["cp_s"] > 0 else None,
                        "allreduce_busbw_gbps": (
                            ALLREDUCE_BYTES * it / acc["ar_s"] / 1e9 * bus_factor
                            if dist and acc["ar_s"] > 0
                            else None
                        ),
                    }
                )
                window += 1
                win_start = now
                while win_end <= now:
                    win_end += interval
                acc = {"mm_s": 0.0, "cp_s": 0.0, "ar_s": 0.0, "iters": 0}
            if stop:
                break
        if dist:
            dist.barrier()
            dist.destroy_process_group()
    except Exception as exc:
        emit(
            {
                "kind": "error",
                "rank": rank,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=4),
            }
        )
        try:
            start_barrier.abort()
        except Exception:
            return


class Sampler:
    """nvidia-smi for every GPU every *period* seconds, the compute processes every 5th sample."""

    def __init__(self, period, t0):
        self.period = period
        self.t0 = t0
        self.fields = SMI_FIELDS
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def query(self, args):
        r = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=20, check=False)
        return r.returncode, r.stdout, r.stderr

    def sample(self, n):
        t = round(time.time() - self.t0, 3)
        rc, out, err = self.query([f"--query-gpu={','.join(self.fields)}", "--format=csv,noheader,nounits"])
        if rc != 0 and self.fields is SMI_FIELDS:
            self.fields = SMI_FIELDS_OLD
            rc, out, err = self.query(
                [f"--query-gpu={','.join(self.fields)}", "--format=csv,noheader,nounits"]
            )
        if rc != 0:
            emit({"kind": "smi_error", "t": t, "error": (out + err).strip()[:300]})
        else:
            for line in out.strip().splitlines():
                cells = [c.strip() for c in line.split(",")]
                if len(cells) == len(SMI_FIELDS):
                    emit({"kind": "smi", "t": t, **dict(zip(SMI_FIELDS, cells, strict=True))})
        if n % 5 == 0:
            rc, out, err = self.query([APPS, "--format=csv,noheader,nounits"])
            if rc == 0:
                apps = []
                for line in out.strip().splitlines():
                    # nvidia-smi does not quote: a process name with commas spans several cells
                    if line.count(",") >= 3:
                        uuid, pid, rest = line.split(",", 2)
                        name, mib = rest.rsplit(",", 1)
                        app = {"uuid": uuid, "pid": pid, "name": name, "mib": mib}
                        apps.append({k: v.strip() for k, v in app.items()})
                emit({"kind": "apps", "t": t, "apps": apps})
            # the SM use of every process on the GPUs (issue 33: whose kernels run beside the soak's); the
            # text goes as it is, imagesmith.validate.alone reads it
            rc, out, err = self.query(["pmon", "-c", "1", "-s", "u"])
            if rc == 0:
                emit({"kind": "pmon", "t": t, "text": out[-8000:]})
            else:
                emit({"kind": "smi_error", "t": t, "error": ("pmon: " + (out + err).strip())[:300]})

    def loop(self):
        n = 0
        while not self.stop.is_set():
            try:
                self.sample(n)
            except Exception as exc:  # a hung nvidia-smi must not stop the load
                emit({"kind": "smi_error", "t": round(time.time() - self.t0, 3), "error": repr(exc)[:300]})
            n += 1
            self.stop.wait(self.period)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    duration = float(sys.argv[1])
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    sample_s = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        emit({"kind": "error", "rank": None, "error": "torch sees no CUDA device"})
        return 0
    world = int(os.environ.get("IMAGESMITH_SOAK_RANKS") or count)
    backend = os.environ.get("IMAGESMITH_SOAK_BACKEND") or "nccl"
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(world + 1)
    port = free_port()
    procs = [
        ctx.Process(target=worker, args=(r, world, port, backend, duration, interval, barrier), daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()
    try:
        barrier.wait(timeout=600)
    except Exception as exc:
        emit({"kind": "error", "rank": None, "error": f"the workers did not start: {type(exc).__name__}"})
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
        emit({"kind": "end", "exitcodes": [p.exitcode for p in procs]})
        return 0
    t0 = time.time()
    emit(
        {
            "kind": "start",
            "duration_s": duration,
            "interval_s": interval,
            "sample_s": sample_s,
            "world": world,
            "backend": backend if world > 1 else None,
            "cuda_devices": count,
            "torch": torch.__version__,
            "pids": [os.getpid(), *(p.pid for p in procs)],
        }
    )
    sampler = Sampler(sample_s, t0) if shutil.which("nvidia-smi") else None
    if sampler:
        sampler.thread.start()
    else:
        emit({"kind": "smi_error", "t": 0.0, "error": "nvidia-smi is not on PATH"})
    for p in procs:
        p.join(timeout=max(0.0, t0 + duration + 300 - time.time()))
    if sampler:
        sampler.stop.set()
        sampler.thread.join(timeout=30)
    for p in procs:
        if p.is_alive():
            p.terminate()
            emit({"kind": "error", "rank": procs.index(p), "error": "the worker hung and was stopped"})
    emit({"kind": "end", "t": round(time.time() - t0, 3), "exitcodes": [p.exitcode for p in procs]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
