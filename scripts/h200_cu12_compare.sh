#!/usr/bin/env bash
# On a lent 2×H200 machine (`nvidia-h200-x2`), from the repository root, as root (docs/evidence/h200x2-cu12/):
# the nccl-tests binaries copied out of the smoke-cu12 image (built with Debian's CUDA 11.8 toolkit, cudart
# static, sm_80 + sm_90) against nccl-tests built on the host from the same pinned source for sm_90 with the
# host's nvcc, both run with `-g 2` against the host torch's NCCL, side by side in one run (alternating, three
# rounds each). Prints busbw at 1 GiB and the ratio image / host.
#
#   bash scripts/h200_cu12_compare.sh BIN_DIR OUT_DIR [N]
#     BIN_DIR  the image's binaries (docker create + docker cp of /opt/nccl-tests/bin/*_perf)
#     OUT_DIR  logs and comparison.txt
#     N        GPUs (-g N; default 2). With 1 GPU all_reduce moves nothing between GPUs (busbw is 0 by
#              definition), so the comparison is of algbw: the binaries run, and their kernels keep pace.
set -euo pipefail
BIN=$(cd "$1" && pwd)
OUT_DIR=$2
N=${3:-2}
mkdir -p "$OUT_DIR"
# shellcheck source=scripts/h200_common.sh
source scripts/h200_common.sh
{
    date -u +%FT%TZ
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
    nvidia-smi topo -m | head -4
    python3 -c 'import torch; print("host torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
    /usr/local/cuda/bin/nvcc --version | grep release
    echo "NCCL_PKG=$NCCL_PKG"
} >"$OUT_DIR/host.txt" 2>&1
cat "$OUT_DIR/host.txt"

build_host_nccl_tests "$(nproc)" "$OUT_DIR/host-build.log"
chmod +x "$BIN"/*_perf
LD_LIBRARY_PATH="$NCCL_PKG/lib" ldd "$BIN/all_reduce_perf" >"$OUT_DIR/ldd-image-binary.txt"
cat "$OUT_DIR/ldd-image-binary.txt"

run() { # run LABEL BINARY ROUND
    LD_LIBRARY_PATH="$NCCL_PKG/lib" NCCL_DEBUG=WARN "$2" "${PLAIN_ARGS[@]}" >"$OUT_DIR/$1-allreduce-$3.log" 2>&1
}
for i in 1 2 3; do
    run host "$HOST_NCCL_TESTS/all_reduce_perf" "$i"
    run image "$BIN/all_reduce_perf" "$i"
done
# a short run of the other collectives of the image, for the record (2 GPUs, up to 256 MiB)
for t in all_gather sendrecv; do
    LD_LIBRARY_PATH="$NCCL_PKG/lib" "$BIN/${t}_perf" -b 8 -e 256M -f 4 -g "$N" -c 1 -n 5 -w 2 \
        >"$OUT_DIR/image-$t.log" 2>&1 || echo "image $t exited $?" >>"$OUT_DIR/image-$t.log"
done

python3 - "$OUT_DIR" "$N" <<'PY' | tee "$OUT_DIR/comparison.txt"
import pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
n = int(sys.argv[2])
col, what = (7, "busbw") if n > 1 else (6, "algbw (1 GPU: busbw is 0 by definition)")
def bw(path):
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) >= 12 and f[0] == "1073741824":
            return float(f[col])
    raise SystemExit(f"{path}: no 1 GiB row")
def wrong(path):
    n = 0
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) >= 13 and f[0].isdigit():
            n += sum(int(x) for x in (f[8], f[12]) if x.isdigit())
    return n
host = [bw(out / f"host-allreduce-{i}.log") for i in (1, 2, 3)]
image = [bw(out / f"image-allreduce-{i}.log") for i in (1, 2, 3)]
bad = sum(wrong(out / f"{k}-allreduce-{i}.log") for k in ("host", "image") for i in (1, 2, 3))
ratio = statistics.mean(image) / statistics.mean(host)
print(f"all_reduce_perf {what} at 1 GiB (out-of-place, GB/s), -g {n}, rounds alternating host/image")
print(f"host-built (nvcc of the host, sm_90):  {' / '.join(f'{x:.2f}' for x in host)}  mean {statistics.mean(host):.2f}")
print(f"image's (Debian CUDA 11.8, sm_80+90):  {' / '.join(f'{x:.2f}' for x in image)}  mean {statistics.mean(image):.2f}")
print(f"ratio image / host: {ratio:.4f} (goal >= 0.97): {'PASS' if ratio >= 0.97 else 'FAIL'}")
print(f"#wrong (all rounds, both binaries): {bad}")
PY
