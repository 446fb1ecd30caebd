#!/usr/bin/env bash
# issue 32 on a lent H200 host: what NCCL (torch's bundled NCCL) says about the verbs library with and without
# rdma-core's userspace (Debian bookworm's libibverbs1 44.0 + ibverbs-providers, unpacked, on LD_LIBRARY_PATH),
# and the per-node probes of `imagesmith validate` over several nodes (identity, RDMA ports, GPUDirect readiness).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
C=.carry-32
PY=python3
cat > /tmp/nccl1.py <<'PY'
import os, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
t = torch.ones(1, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize()
print("all_reduce ok", t.item(), "nccl", torch.cuda.nccl.version()); dist.destroy_process_group()
PY
{
echo "## host"; date -u; uname -r; cat /etc/os-release | head -2; nvidia-smi -L
echo "## host ldconfig -p | grep -E 'ibverbs|mlx5|rdmacm'"; ldconfig -p | grep -E 'ibverbs|mlx5|rdmacm' || echo "(none)"
echo "## ls /sys/class/infiniband"; ls /sys/class/infiniband 2>&1
echo "## lsmod | grep -E 'nvidia_peermem|ib_core|mlx5'"; lsmod | grep -E 'nvidia_peermem|ib_core|mlx5' || echo "(none)"
echo "## /proc/driver/nvidia/version"; cat /proc/driver/nvidia/version
} > $OUT/host.txt 2>&1
echo "== A: host as it is" > $OUT/nccl-verbs.log
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 120 $PY /tmp/nccl1.py >> $OUT/nccl-verbs.log 2>&1
echo "== B: with rdma-core userspace (bookworm) on LD_LIBRARY_PATH" >> $OUT/nccl-verbs.log
LD_LIBRARY_PATH="$PWD/$C/rdma/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 120 $PY /tmp/nccl1.py >> $OUT/nccl-verbs.log 2>&1
echo "== C: B with NCCL_IB_DISABLE=1 (what a Socket fallback logs)" >> $OUT/nccl-verbs.log
LD_LIBRARY_PATH="$PWD/$C/rdma/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 120 $PY /tmp/nccl1.py >> $OUT/nccl-verbs.log 2>&1
cd $C/src && $PY - > $OUT/probes.txt 2>&1 <<'PY'
import subprocess
from imagesmith.validate import cluster, nics
def sh(c): return subprocess.run(["bash", "-c", c], capture_output=True, text=True, timeout=60).stdout
idt = sh(cluster.IDENTITY_COMMAND); print("## identity probe\n" + idt)
print(cluster.parse_identity("h200", idt))
sy = sh(nics.SYSFS_COMMAND); print("## sysfs probe\n" + sy)
ports = nics.parse_sysfs_dump(sy); print("ports:", ports)
for fab in ("ib", "ethernet"):
    v = nics.judge_nics("h200", ports, fabric=fab); print(fab, [(f.kind, f.message) for f in v.failures])
PY
cd - >/dev/null
$PY - >> $OUT/probes.txt 2>&1 <<PY
import sys; sys.path.insert(0, "$C/src")
from imagesmith.validate.nccltransport import parse_nccl_transport
text = open("$OUT/nccl-verbs.log", errors="replace").read()
for part in text.split("== ")[1:]:
    t = parse_nccl_transport(part)
    print(part.splitlines()[0], "-> verbs:", t.verbs, "networks:", t.networks)
PY
tail -5 $OUT/nccl-verbs.log
cat $OUT/probes.txt | tail -20
