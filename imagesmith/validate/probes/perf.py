# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""What each GPU delivers, one GPU at a time: device-memory copy bandwidth (HBM/GDDR), host↔device copy
bandwidth from pinned memory, sustained dense bf16 (fp16 before sm_80) matmul throughput, and nvidia-smi's
clocks, clock-event reasons and PCIe link sampled while the load runs.

argv: [SECONDS_PER_MEASURE] (default 0.4; the matmul runs 3× that). Prints one IMAGESMITH_PROBE JSON line.
Bandwidths are GB/s (1e9 bytes/s); a device copy counts the bytes read plus the bytes written.
"""

import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback

SECONDS = float(sys.argv[1]) if len(sys.argv) > 1 else 0.4
COPY_BYTES = 1 << 30  # 1 GiB per device copy
HOST_BYTES = 256 << 20  # 256 MiB per host<->device copy
SMI_FIELDS = (
    "clocks.sm",
    "clocks.max.sm",
    "clocks_event_reasons.active",
    "temperature.gpu",
    "power.draw",
    "pcie.link.gen.current",
    "pcie.link.gen.max",
    "pcie.link.width.current",
    "pcie.link.width.max",
)
# drivers before R535 know the reasons under their old name
SMI_FIELDS_OLD = tuple(f.replace("clocks_event_reasons", "clocks_throttle_reasons") for f in SMI_FIELDS)

out = {"seconds": SECONDS, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}


class Sampler:
    """nvidia-smi --query-gpu for one GPU every 0.2 s in a thread, while a measure runs."""

    def __init__(self, gpu_id):
        self.gpu_id = gpu_id
        self.samples = []
        self.error = None
        self._stop = threading.Event()
        self._fields = SMI_FIELDS
        self._thread = None

    def _once(self):
        cmd = [
            "nvidia-smi",
            "-i",
            self.gpu_id,
            "--query-gpu=" + ",".join(self._fields),
            "--format=csv,noheader",
        ]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
        if r.returncode != 0 and self._fields is SMI_FIELDS:
            self._fields = SMI_FIELDS_OLD
            return self._once()
        if r.returncode != 0:
            self.error = (r.stdout + r.stderr).strip()[:300]
            return
        for line in r.stdout.strip().splitlines()[:1]:
            values = [v.strip() for v in line.split(",")]
            if len(values) == len(SMI_FIELDS):
                self.samples.append(dict(zip(SMI_FIELDS, values, strict=True)))

    def _loop(self):
        while not self._stop.is_set():
            try:
                self._once()
            except Exception as exc:  # a hung or missing nvidia-smi must not break the measure
                self.error = f"{type(exc).__name__}: {exc}"
                return
            if self.error:
                return
            self._stop.wait(0.2)

    def __enter__(self):
        if self.gpu_id and shutil.which("nvidia-smi"):
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()
        elif not self.gpu_id:
            self.error = "torch reports no UUID or PCI bus id for this device"
        else:
            self.error = "nvidia-smi is not on PATH"
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=15)
        return False


def timed(torch, fn, seconds, *, warmup=2):
    """Run *fn* until *seconds* of GPU time have passed; return (calls, elapsed seconds by CUDA events)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    calls, elapsed, batch = 0, 0.0, 1
    t0 = time.monotonic()
    while elapsed < seconds and time.monotonic() - t0 < seconds * 20 + 5:
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        elapsed += start.elapsed_time(end) / 1000.0
        calls += batch
        batch = min(batch * 2, 64)
    return calls, elapsed


def gpu_id(props):
    uuid = getattr(props, "uuid", None)
    if uuid:
        text = str(uuid)
        return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        domain = getattr(props, "pci_domain_id", 0)
        device = getattr(props, "pci_device_id", 0)
        return f"{domain:08x}:{bus:02x}:{device:02x}.0"
    return None


def measure(torch, i):
    d = {"index": i}
    props = torch.cuda.get_device_properties(i)
    d["name"] = props.name
    d["capability"] = f"{props.major}.{props.minor}"
    d["smi_id"] = gpu_id(props)
    dev = torch.device("cuda", i)
    torch.cuda.set_device(dev)
    d["hbm_copy_gbps"] = device_copy(torch, dev)
    with Sampler(d["smi_id"]) as link:  # the PCIe link is sampled while it is under load
        d["h2d_gbps"], d["d2h_gbps"] = host_copies(torch, dev)
    d["pcie_samples"] = link.samples
    dtype = torch.bfloat16 if props.major >= 8 else torch.float16
    d["matmul_dtype"] = str(dtype).replace("torch.", "")
    with Sampler(d["smi_id"]) as load:
        d["matmul_tflops"] = matmul(torch, dev, dtype)
    d["load_samples"] = load.samples
    d["smi_error"] = link.error or load.error
    torch.cuda.empty_cache()
    return d


def device_copy(torch, dev):
    """Copy 1 GiB into another 1 GiB buffer (read + write)."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    calls, secs = timed(torch, lambda: dst.copy_(src), SECONDS)
    return 2 * COPY_BYTES * calls / secs / 1e9


def host_copies(torch, dev):
    """Host→device and device→host from pinned memory."""
    host = torch.empty(HOST_BYTES, dtype=torch.uint8, pin_memory=True)
    buf = torch.empty(HOST_BYTES, dtype=torch.uint8, device=dev)
    calls, secs = timed(torch, lambda: buf.copy_(host, non_blocking=True), SECONDS)
    h2d = HOST_BYTES * calls / secs / 1e9
    calls, secs = timed(torch, lambda: host.copy_(buf, non_blocking=True), SECONDS)
    return h2d, HOST_BYTES * calls / secs / 1e9


def matmul(torch, dev, dtype, n=8192):
    """Dense n³ matmul, sustained long enough for clocks and power to settle."""
    a = torch.randn(n, n, device=dev, dtype=dtype)
    b = torch.randn(n, n, device=dev, dtype=dtype)
    c = torch.empty(n, n, device=dev, dtype=dtype)
    calls, secs = timed(torch, lambda: torch.matmul(a, b, out=c), SECONDS * 3, warmup=3)
    return 2 * n**3 * calls / secs / 1e12


try:
    import torch

    out["torch"] = torch.__version__
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    out["count"] = count
    devices = []
    t0 = time.monotonic()
    for i in range(count):
        try:
            devices.append(measure(torch, i))
        except Exception as exc:
            devices.append(
                {
                    "index": i,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=3),
                }
            )
    out["devices"] = devices
    out["wall_s"] = round(time.monotonic() - t0, 2)
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
