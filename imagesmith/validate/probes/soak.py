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

import collections
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


def join_group(rank, world, port, backend):
    """The workers' process group (torch.distributed), or None for a worker alone."""
    if world <= 1:
        return None
    import torch.distributed as dist

    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    return dist


class Load:
    """One worker's load on its GPU: matmuls, device-memory copies and (in a group) an all_reduce, each
    part timed with CUDA events."""

    def __init__(self, torch, dev, dtype, dist):
        self.torch = torch
        self.dist = dist
        self.a = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=dtype)
        self.b = torch.randn(MATMUL_N, MATMUL_N, device=dev, dtype=dtype)
        self.c = torch.empty_like(self.a)
        self.src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev)
        self.dst = torch.empty_like(self.src)
        # zeros: a sum that never overflows, however many rounds (bandwidth does not depend on the values)
        self.buf = torch.zeros(ALLREDUCE_BYTES // 4, dtype=torch.float32, device=dev) if dist else None
        self.events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        self.dev = dev
        self.flag = None

    def mm(self):
        self.torch.matmul(self.a, self.b, out=self.c)

    def cp(self):
        self.dst.copy_(self.src)

    def timed(self, fn, reps):
        events = self.events
        events[0].record()
        for _ in range(reps):
            fn()
        events[1].record()
        events[1].synchronize()
        return events[0].elapsed_time(events[1]) / 1000.0

    def calibrate(self):
        """(matmuls, copies) per iteration: about MATMUL_SECONDS and COPY_SECONDS of each, after a warm-up;
        in a group every rank takes the slowest GPU's counts, so the all_reduces line up."""
        torch, dist = self.torch, self.dist
        for _ in range(3):
            self.mm()
            self.cp()
        if dist:
            dist.all_reduce(self.buf)
        torch.cuda.synchronize()
        mm_reps = max(1, round(MATMUL_SECONDS / max(self.timed(self.mm, 5) / 5, 1e-6)))
        cp_reps = max(1, round(COPY_SECONDS / max(self.timed(self.cp, 5) / 5, 1e-6)))
        if dist:
            counts = torch.tensor([mm_reps, cp_reps], device=self.dev, dtype=torch.int64)
            dist.all_reduce(counts, op=dist.ReduceOp.MIN)
            mm_reps, cp_reps = (int(x) for x in counts.tolist())
        return mm_reps, cp_reps

    def iteration(self, mm_reps, cp_reps):
        """One iteration: (seconds of matmuls, of copies, of the all_reduce or None alone)."""
        events, dist = self.events, self.dist
        events[0].record()
        for _ in range(mm_reps):
            self.mm()
        events[1].record()
        for _ in range(cp_reps):
            self.cp()
        events[2].record()
        if dist:
            dist.all_reduce(self.buf)
        events[3].record()
        events[3].synchronize()
        mm_s = events[0].elapsed_time(events[1]) / 1000.0
        cp_s = events[1].elapsed_time(events[2]) / 1000.0
        return mm_s, cp_s, events[2].elapsed_time(events[3]) / 1000.0 if dist else None

    def start(self):
        """Make the group's stop flag (the load starts)."""
        if self.dist:
            self.flag = self.torch.zeros(1, dtype=self.torch.int32, device=self.dev)

    def agree_to_stop(self, stop):
        """Whether to stop: this worker's *stop*, or in a group rank 0's (the collectives stay matched)."""
        if not self.dist:
            return stop
        self.flag.fill_(1 if stop else 0)
        self.dist.broadcast(self.flag, 0)
        return bool(self.flag.item())


class Window:
    """The timings of one interval of one worker, summed over its iterations."""

    def __init__(self, index, start):
        self.index = index
        self.start = start
        self.mm_s = 0.0
        self.cp_s = 0.0
        self.ar_s = 0.0
        self.iters = 0

    def add(self, mm_s, cp_s, ar_s):
        self.mm_s += mm_s
        self.cp_s += cp_s
        if ar_s is not None:
            self.ar_s += ar_s
        self.iters += 1

    def record(self, meter, now):
        """The ``window`` record: whose it is, then what the GPU delivered (a part that took no time has no
        figure)."""
        it = self.iters
        return {
            "kind": "window",
            **meter.ids,
            "window": self.index,
            "t0": round(self.start, 3),
            "t1": round(now, 3),
            "iterations": it,
            "dtype": meter.dtype,
            "matmul_tflops": meter.flops * it / self.mm_s / 1e12 if self.mm_s > 0 else None,
            "copy_gbps": meter.copied * it / self.cp_s / 1e9 if self.cp_s > 0 else None,
            "allreduce_busbw_gbps": (
                ALLREDUCE_BYTES * it / self.ar_s / 1e9 * meter.bus_factor
                if meter.bus_factor is not None and self.ar_s > 0
                else None
            ),
        }


#: what turns a window's timings into its record: the worker (rank, cuda_index, uuid, name), the matmuls'
#: dtype, one iteration's flops and bytes copied (read + written), the all_reduce's bus factor (None alone)
Meter = collections.namedtuple("Meter", "ids dtype flops copied bus_factor")


def next_window_end(win_end, now, interval):
    """The end of the next window after one closed at *now*: whole intervals on from the first, skipping
    those an iteration overran."""
    while win_end <= now:
        win_end += interval
    return win_end


def run_load(load, reps, duration, interval, meter):
    """Iterations of *load* until *duration* has passed, one ``window`` record every *interval* seconds and
    one for the last, partial, window."""
    t0 = time.time()
    load.start()
    win, win_end = Window(0, 0.0), interval
    while True:
        win.add(*load.iteration(*reps))
        now = time.time() - t0
        stop = load.agree_to_stop(now >= duration)
        if now >= win_end or stop:
            emit(win.record(meter, now))
            win_end = next_window_end(win_end, now, interval)
            win = Window(win.index + 1, now)
        if stop:
            return


def worker(rank, world, port, backend, duration, interval, start_barrier):
    try:
        import torch

        device_index = rank % torch.cuda.device_count()
        dev = torch.device("cuda", device_index)
        torch.cuda.set_device(dev)
        props = torch.cuda.get_device_properties(device_index)
        dtype = torch.bfloat16 if props.major >= 8 else torch.float16
        dist = join_group(rank, world, port, backend)
        load = Load(torch, dev, dtype, dist)
        mm_reps, cp_reps = load.calibrate()
        meter = Meter(
            ids={"rank": rank, "cuda_index": device_index, "uuid": gpu_id(props), "name": props.name},
            dtype=str(dtype).replace("torch.", ""),
            flops=2 * MATMUL_N**3 * mm_reps,
            copied=2 * COPY_BYTES * cp_reps,
            bus_factor=2 * (world - 1) / world if dist else None,
        )
        start_barrier.wait(timeout=600)
        run_load(load, (mm_reps, cp_reps), duration, interval, meter)
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
