#!/usr/bin/env bash
# On a lent H200 machine (`nvidia-h200`, 1 GPU; no docker, no network), as root (docs/evidence/h200x1-a100-cu121/):
# the nccl-tests binaries copied out of the a100 matrix's 2.1.2-cu121-py3.11-runtime-debian12 image (Debian's
# CUDA 11.8 nvcc, cudart static, sm_80 SASS + compute_80 PTX, compiled against nvidia-nccl-cu12 2.18.1's
# headers) run with `-g 1` against (a) the host's NCCL (the host torch's nvidia-nccl wheel) and (b) the image's
# own libnccl.so.2 of nvidia-nccl-cu12 2.18.1 — 279 MB, 95 MB xz-compressed: more than one call carries, so it
# comes in two parts over two calls to the same warm machine (stage1 keeps part 1 under /tmp/imagesmith-39).
#
#   bash scripts/h200_a100_cu121.sh stage1 CARRY OUT    # binaries vs the host's NCCL; keeps libnccl part 1
#   bash scripts/h200_a100_cu121.sh stage2 CARRY OUT    # joins part 2, checks its sha256, binaries vs 2.18.1
#     CARRY  a folder with nccl-tests.tar.xz (the *_perf binaries), libnccl.so.2.xz.part* and libnccl.sha256
#     OUT    where the logs go
set -euo pipefail
STAGE=$1 CARRY=$(cd "$2" && pwd) OUT=$3
KEEP=/tmp/imagesmith-39
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ARGS=(-b 8 -e 1G -f 2 -g 1 -c 1 -n 20 -w 5)
mkdir -p "$OUT" "$KEEP/bin"
[[ -x $KEEP/bin/all_reduce_perf ]] || tar -xJf "$CARRY/nccl-tests.tar.xz" -C "$KEEP/bin"
for part in "$CARRY"/libnccl.so.2.xz.part*; do cp "$part" "$KEEP/"; done
cp "$CARRY/libnccl.sha256" "$KEEP/"

# run_set LABEL LIBDIR: ldd, all_reduce_perf (3 rounds) and all_gather_perf against the libnccl.so.2 in LIBDIR
run_set() {
    local label=$1 lib=$2 i
    LD_LIBRARY_PATH="$lib" ldd "$KEEP/bin/all_reduce_perf" >"$OUT/$label-ldd.txt" 2>&1
    for i in 1 2 3; do
        LD_LIBRARY_PATH="$lib" NCCL_DEBUG=VERSION "$KEEP/bin/all_reduce_perf" "${ARGS[@]}" \
            >"$OUT/$label-all_reduce-$i.log" 2>&1 || echo "exit $?" >>"$OUT/$label-all_reduce-$i.log"
    done
    LD_LIBRARY_PATH="$lib" NCCL_DEBUG=VERSION "$KEEP/bin/all_gather_perf" "${ARGS[@]}" \
        >"$OUT/$label-all_gather.log" 2>&1 || echo "exit $?" >>"$OUT/$label-all_gather.log"
}

if [[ $STAGE == stage1 ]]; then
    {
        date -u +%FT%TZ
        nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
        python3 -c 'import torch; print("host torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
        uname -r
        ldd --version | sed -n 1p
        ls -la "$KEEP" "$KEEP/bin"
    } >"$OUT/host.txt" 2>&1
    cat "$OUT/host.txt"
    HOST_NCCL="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')/lib"
    echo "host NCCL: $HOST_NCCL" >>"$OUT/host.txt"
    run_set host-nccl "$HOST_NCCL"
else
    cat "$KEEP"/libnccl.so.2.xz.part* | xz -dc >"$KEEP/libnccl.so.2"
    (cd "$KEEP" && sha256sum -c libnccl.sha256) | tee "$OUT/wheel-nccl-sha256.txt"
    run_set wheel-nccl-2.18.1 "$KEEP"
fi
for f in "$OUT"/*all_reduce-1.log "$OUT"/*all_gather.log; do
    echo "== $f"
    grep -E "NCCL version|nccl-(headers|library)|^ +1073741824|wrong|Avg bus" "$f" || true
done
