#!/usr/bin/env bash
# On a lent H200 machine (`nvidia-h200`, 1 GPU; no docker, no network), as root (docs/evidence/h200x1-a100-cu121/,
# "Second try: sm_90 SASS"): two sets of nccl-tests binaries, both from the a100 matrix's
# 2.1.2-cu121-py3.11-runtime-debian12 builder stage (Debian bookworm's CUDA 11.8 nvcc, cudart static, headers of
# nvidia-nccl-cu12 2.18.1), run with `-g 1` against the host torch's NCCL:
#   sm80  the gencode as rendered for A100/A800: sm_80 SASS + compute_80 PTX
#   sm90  the same plus sm_90 SASS
# plus two discriminating runs: sm80 with CUDA_MODULE_LOADING=LAZY (modules load at first kernel use, not at
# context creation) and sm90 with CUDA_FORCE_PTX_JIT=1 (the driver ignores SASS and JITs PTX only); and a
# one-kernel program (toy/t.cu, same toolkit and gencode as sm80) linked twice: by nvcc (which always
# device-links: an extra `_dlink` fatbin with sm_80 SASS and no PTX) and by g++ (no such fatbin).
#
#   bash scripts/h200_a100_cu121_sass.sh CARRY OUT
#     CARRY  a folder with sm80.tar.xz and sm90.tar.xz (all_reduce_perf, all_gather_perf each), toy.tar.xz
#            (t-nvcclink, t-gxxlink, t.cu) and SHA256SUMS
#     OUT    where the logs go (one results.tar.gz: a call brings back at most 8 files)
set -euo pipefail
CARRY=$(cd "$1" && pwd) OUT=$2
WORK=/tmp/imagesmith-39b
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
ARGS=(-b 8 -e 1G -f 2 -g 1 -c 1 -n 20 -w 5)
LOGS=$WORK/logs
rm -rf "$WORK" && mkdir -p "$LOGS" "$WORK/sm80" "$WORK/sm90" "$WORK/toy" "$OUT"
(cd "$CARRY" && sha256sum -c SHA256SUMS) >"$LOGS/carry-sha256.txt" 2>&1
tar -xJf "$CARRY/sm80.tar.xz" -C "$WORK/sm80"
tar -xJf "$CARRY/sm90.tar.xz" -C "$WORK/sm90"
tar -xJf "$CARRY/toy.tar.xz" -C "$WORK/toy"
HOST_NCCL="$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])')/lib"
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader
    python3 -c 'import torch; print("host torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    echo "host NCCL: $HOST_NCCL"
    uname -r
    (cd "$WORK" && sha256sum sm80/* sm90/* toy/*)
} >"$LOGS/host.txt" 2>&1

# one LABEL SET BINARY [ENV=VALUE...]: the binary of SET against the host's NCCL, with the extra environment
one() {
    local label=$1 set=$2 bin=$3
    shift 3
    env "$@" LD_LIBRARY_PATH="$HOST_NCCL" NCCL_DEBUG=VERSION timeout 120 "$WORK/$set/$bin" "${ARGS[@]}" \
        >"$LOGS/$label.log" 2>&1 || echo "exit $?" >>"$LOGS/$label.log"
}
for t in t-nvcclink t-gxxlink; do
    timeout 60 "$WORK/toy/$t" >"$LOGS/toy-$t.log" 2>&1 || echo "exit $?" >>"$LOGS/toy-$t.log"
done
CUDA_MODULE_LOADING=LAZY timeout 60 "$WORK/toy/t-nvcclink" >"$LOGS/toy-t-nvcclink-lazy.log" 2>&1 ||
    echo "exit $?" >>"$LOGS/toy-t-nvcclink-lazy.log"
LD_LIBRARY_PATH="$HOST_NCCL" ldd "$WORK/sm80/all_reduce_perf" >"$LOGS/sm80-ldd.txt" 2>&1
one sm80-all_reduce sm80 all_reduce_perf
one sm80-all_reduce-lazy sm80 all_reduce_perf CUDA_MODULE_LOADING=LAZY
one sm80-all_gather-lazy sm80 all_gather_perf CUDA_MODULE_LOADING=LAZY
for i in 1 2 3; do one "sm90-all_reduce-$i" sm90 all_reduce_perf; done
one sm90-all_gather sm90 all_gather_perf
one sm90-all_reduce-forceptx sm90 all_reduce_perf CUDA_FORCE_PTX_JIT=1
for f in "$LOGS"/*.log; do
    echo "== $(basename "$f")"
    [[ $f == */toy-* ]] && { cat "$f"; continue; }
    grep -E "NCCL version|nccl-(headers|library)|^ +1073741824|wrong|Avg bus|failure|^exit" "$f" || true
done | tee "$LOGS/summary.txt"
tar -czf "$OUT/results.tar.gz" -C "$WORK" logs
cp "$LOGS/summary.txt" "$OUT/"
