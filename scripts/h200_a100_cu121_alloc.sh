#!/usr/bin/env bash
# On a lent H200 machine (`nvidia-h200`, 1 GPU; no docker, no network), as root (docs/evidence/h200x1-a100-cu121/,
# "The cause: no buffers"): nccl-tests from the a100 matrix's 2.1.2-cu121-py3.11-runtime-debian12 builder stage
# (Debian bookworm's CUDA 11.8 nvcc, cudart static, nvidia-nccl-cu12 2.18.1's headers, sm_80 SASS + compute_80
# PTX as rendered for A100/A800), `-g 1` against the host torch's NCCL:
#   sm80 + `-p 1`  the binaries as built before the fix, with nccl-tests' parallel init (whose path allocates)
#   fixed          the binaries of the fixed builder stage (the sed that adds the allocation for NCCL < 2.19),
#                  plain arguments: all_reduce_perf 3 rounds, all_gather_perf once
#
#   bash scripts/h200_a100_cu121_alloc.sh CARRY OUT
#     CARRY  a folder with sm80.tar.xz and fixed.tar.xz (all_reduce_perf, all_gather_perf each) and SHA256SUMS
#     OUT    where the logs go (one results.tar.gz and summary.txt: a call brings back at most 8 files)
set -euo pipefail
CARRY=$(cd "$1" && pwd) OUT=$2
WORK=/tmp/imagesmith-39b-alloc
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ARGS=(-b 8 -e 1G -f 2 -g 1 -c 1 -n 20 -w 5)
LOGS=$WORK/logs
rm -rf "$WORK" && mkdir -p "$LOGS" "$WORK/sm80" "$WORK/fixed" "$OUT"
(cd "$CARRY" && sha256sum -c SHA256SUMS) >"$LOGS/carry-sha256.txt" 2>&1
tar -xJf "$CARRY/sm80.tar.xz" -C "$WORK/sm80"
tar -xJf "$CARRY/fixed.tar.xz" -C "$WORK/fixed"
HOST_NCCL="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')/lib"
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
    python3 -c 'import torch; print("host torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    echo "host NCCL: $HOST_NCCL"
    (cd "$WORK" && sha256sum sm80/* fixed/*)
} >"$LOGS/host.txt" 2>&1

# one LABEL SET BINARY [ARG...]: the binary of SET against the host's NCCL, the suite's arguments plus ARGs
one() {
    local label=$1 set=$2 bin=$3
    shift 3
    LD_LIBRARY_PATH="$HOST_NCCL" NCCL_DEBUG=VERSION timeout 120 "$WORK/$set/$bin" "${ARGS[@]}" "$@" \
        >"$LOGS/$label.log" 2>&1 || echo "exit $?" >>"$LOGS/$label.log"
}
one sm80-p1-all_reduce sm80 all_reduce_perf -p 1
one sm80-p1-all_gather sm80 all_gather_perf -p 1
for i in 1 2 3; do one "fixed-all_reduce-$i" fixed all_reduce_perf; done
one fixed-all_gather fixed all_gather_perf
for f in "$LOGS"/*.log; do
    echo "== $(basename "$f")"
    grep -E "NCCL version|nccl-(headers|library)|^ +1073741824|wrong|Avg bus|failure|^exit" "$f" || true
done | tee "$LOGS/summary.txt"
tar -czf "$OUT/results.tar.gz" -C "$WORK" logs
cp "$LOGS/summary.txt" "$OUT/"
