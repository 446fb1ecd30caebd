#!/usr/bin/env bash
# issue 32, second run: in a private mount namespace the host's own libibverbs is hidden (/dev/null bound over
# it), so NCCL sees (1) no verbs library at all — an image without rdma-core — and (2) only the image's: Debian
# bookworm's libibverbs1 44.0-2 as the runtime image installs it, found through LD_LIBRARY_PATH; the probe prints
# which libibverbs file the process mapped.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
D="$PWD/.carry-32/rdma/usr/lib/x86_64-linux-gnu"
cat > /tmp/nccl1.py <<'PY'
import os, torch, torch.distributed as dist
os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29533")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
t = torch.ones(1, device="cuda"); dist.all_reduce(t); torch.cuda.synchronize()
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "ibverbs" in l})
print("all_reduce ok", t.item(), "nccl", torch.cuda.nccl.version(), "libibverbs mapped:", maps or "none")
dist.destroy_process_group()
PY
cat > /tmp/inner.sh <<EOF2
set -u
for f in /lib/x86_64-linux-gnu/libibverbs.so /lib/x86_64-linux-gnu/libibverbs.so.1 /usr/lib/x86_64-linux-gnu/libibverbs.so /usr/lib/x86_64-linux-gnu/libibverbs.so.1; do
  [ -e "\$f" ] && mount --bind /dev/null "\$f"
done
echo "== 1: no libibverbs (host's hidden)"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 120 python3 /tmp/nccl1.py 2>&1 | grep -E "ibverbs|NET/IB|Using network|all_reduce ok|Failed"
echo "== 2: only the image's libibverbs1 44.0-2 (bookworm), on LD_LIBRARY_PATH"
LD_LIBRARY_PATH="$D" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 120 python3 /tmp/nccl1.py 2>&1 | grep -E "ibverbs|NET/IB|Using network|all_reduce ok|Failed"
EOF2
unshare -m --propagation private bash /tmp/inner.sh > $OUT/nccl-verbs-image-lib.log 2>&1
cat $OUT/nccl-verbs-image-lib.log
