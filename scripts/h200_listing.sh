#!/usr/bin/env bash
# Issue 33 on a lent 1×H200 machine (run from the repository root there, as root, with .carry/ from
# `python scripts/gpu_host_bundle.py`): a listing judged against the host. Never changes a GPU setting.
#
#   bash scripts/h200_listing.sh OUTDIR
#
# 1. the whole suite with a listing that matches the host (--listing healthy.toml): must pass;
# 2. a listing promising 2 GPUs, NVLink, 256 GiB of RAM and a 5 GB/s data folder: must fail naming each;
# 3. a 2-minute soak with a co-tenant that arrives ~1 minute in holding 4.5 GiB (above the 3 % = 4.2 GiB of
#    --foreign-memory-max) and running a matmul at 20 % duty: must fail naming it (pid, GiB, when, cost).
set -uo pipefail
OUT="${1:?usage: $0 OUTDIR}"
mkdir -p "$OUT/raw"
N="$(nvidia-smi -L | grep -c '^GPU ')"
export PYTHONUNBUFFERED=1
# shellcheck source=scripts/h200_common.sh
source "$(dirname "$0")/h200_common.sh"
V=(python3 -m imagesmith validate local://)
run() { # run NAME TIMEOUT CMD...: console in OUT/NAME.txt, exit code and wall time in OUT/commands.txt
    local name=$1 limit=$2; shift 2
    local t0 rc
    t0=$(date +%s%N)
    timeout -k 10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
    rc=$?
    echo "$name: exit $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms: $*" | tee -a "$OUT/commands.txt"
    grep -E "^(verdict|error):" "$OUT/$name.txt" | cut -c1-1500
    return 0
}
t0=$(date +%s)
build_host_nccl_tests "$(nproc)" "$OUT/raw/nccl-tests-build.log" || { tail -30 "$OUT/raw/nccl-tests-build.log"; exit 1; }
echo "nccl-tests built in $(($(date +%s) - t0)) s" | tee -a "$OUT/commands.txt"
DATA=/var/tmp/imagesmith-data CKPT=/var/tmp/imagesmith-ckpt
mkdir -p "$DATA" "$CKPT"
# what the lent machine's listing says: 1× H200 141 GB, 16 CPU cores, 128 GiB memory, 64 GiB disk
cat >"$OUT/healthy.toml" <<TOML
[gpu]
model = "H200"
count = $N
memory = "141 GB"
mig = false
driver = "580"
cuda = "13.0"
[host]
vcpu = 16
ram = "128 GiB"
[storage.data]
path = "$DATA"
read = "0.5 GB/s"
write = "0.3 GB/s"
free = "20 GB"
[storage.checkpoint]
path = "$CKPT"
write = "0.3 GB/s"
[price]
per_hour = 3.5
currency = "USD"
TOML
cat >"$OUT/bigger.toml" <<TOML
[gpu]
model = "H200"
count = 2
interconnect = "nvlink"
[host]
ram = "256 GiB"
[storage.data]
path = "$DATA"
read = "5 GB/s"
TOML
run healthy 300 "${V[@]}" --listing "$OUT/healthy.toml" --nccl-tests "$HOST_NCCL_TESTS" --report "$OUT/healthy"
run bigger 120 "${V[@]}" --listing "$OUT/bigger.toml" \
    -k "test_gpu_inventory or test_topology or test_host_size or test_storage or test_listing" --report "$OUT/bigger"
python3 scripts/gpu_load.py matmul 0 200 --duty 0.2 --delay 80 --hold-gib 4.5 >"$OUT/raw/cotenant.txt" 2>&1 &
LOAD=$!
run cotenant 240 "${V[@]}" -k "test_gpus_free or test_soak or test_gpus_still_free" --soak 2m --report "$OUT/cotenant"
kill "$LOAD" 2>/dev/null; wait "$LOAD" 2>/dev/null
nvidia-smi >"$OUT/raw/nvidia-smi-after.txt" 2>&1
exit 0
