# mypy: ignore-errors
# Standalone probe: runs with the target's Python and torch, never imports imagesmith.
"""Checkpoint round trip across processes: ``checkpoint.py MODE DIR`` with MODE in reference, first, resume.

reference: 10 uninterrupted steps, saves the final state (model, optimizer, scheduler, CPU+CUDA RNG) as
ref.pt.
first: 5 steps, saves ckpt.pt atomically, and the process ends.
resume: a new process loads ckpt.pt, runs steps 5..9 and compares every piece of state with ref.pt.
The data and dropout draw from the global RNGs, so a resumed run only matches if the RNG state was restored.
"""

import json
import os
import sys
from pathlib import Path

import torch
import torch.nn as nn

mode, d = sys.argv[1], sys.argv[2]
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
dev = "cuda"
out = {"mode": mode}


def make():
    torch.manual_seed(0)
    torch.cuda.manual_seed_all(0)
    m = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Dropout(0.1), nn.Linear(128, 1)).to(dev)
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    s = torch.optim.lr_scheduler.StepLR(o, 3, 0.5)
    return m, o, s


def train(m, o, s, a, b):
    for _ in range(a, b):
        x = torch.randn(32, 64, device=dev)
        y = torch.randn(32, 1, device=dev)
        o.zero_grad()
        nn.functional.mse_loss(m(x), y).backward()
        o.step()
        s.step()


def state(m, o, s):
    return {
        "model": m.state_dict(),
        "opt": o.state_dict(),
        "sched": s.state_dict(),
        "rng_cpu": torch.get_rng_state(),
        "rng_cuda": torch.cuda.get_rng_state_all(),
    }


def save(obj, path):
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    tmp.replace(path)


def diff(a, b, where=""):
    if isinstance(a, torch.Tensor):
        return (
            []
            if isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a.cpu(), b.cpu())
            else [where]
        )
    if isinstance(a, dict):
        if not isinstance(b, dict) or set(a) != set(b):
            return [where]
        return [x for k in a for x in diff(a[k], b[k], f"{where}.{k}")]
    if isinstance(a, (list, tuple)):
        if not isinstance(b, (list, tuple)) or len(a) != len(b):
            return [where]
        return [x for i, (p, q) in enumerate(zip(a, b, strict=True)) for x in diff(p, q, f"{where}[{i}]")]
    return [] if a == b else [where]


try:
    Path(d).mkdir(parents=True, exist_ok=True)
    if mode == "first":
        m, o, s = make()
        train(m, o, s, 0, 10)
        save(state(m, o, s), Path(d) / "ref.pt")
        m, o, s = make()
        train(m, o, s, 0, 5)
        save(state(m, o, s), Path(d) / "ckpt.pt")
        out["ok"] = True
    elif mode == "resume":
        m, o, s = make()
        torch.manual_seed(
            999
        )  # a fresh process's RNG differs: only the restored state can make the run match
        ck = torch.load(Path(d) / "ckpt.pt", map_location="cpu", weights_only=True)
        m.load_state_dict(ck["model"])
        o.load_state_dict(ck["opt"])
        s.load_state_dict(ck["sched"])
        torch.set_rng_state(ck["rng_cpu"])
        torch.cuda.set_rng_state_all(ck["rng_cuda"])
        train(m, o, s, 5, 10)
        ref = torch.load(Path(d) / "ref.pt", map_location="cpu", weights_only=True)
        now = state(m, o, s)
        out["mismatch"] = {k: diff(ref[k], now[k], k)[:5] for k in ref}
        out["ok"] = not any(out["mismatch"].values())
    else:
        out["error"] = f"unknown mode {mode}"
except Exception as exc:
    out["error"] = f"{type(exc).__name__}: {exc}"
print("IMAGESMITH_PROBE " + json.dumps(out), flush=True)
sys.exit(0 if out.get("ok") else 1)
