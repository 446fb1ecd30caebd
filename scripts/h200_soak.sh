#!/usr/bin/env bash
# Issue 28 on a lent H200 machine (run from the repository root there, as root, with .carry/ from
# `python scripts/gpu_host_bundle.py`): the GPU-free check, the soak and the scaling probe, healthy and with injected
# faults. Never changes a GPU setting (clocks, MIG, ECC, persistence); NVLink multicast stays off.
#
#   bash scripts/h200_soak.sh faults OUTDIR    # the suite (timed), the scaling step on one GPU, the soak probe with
#                                              # 2 ranks on one GPU (gloo), memory held by another process, a busy
#                                              # GPU, and a 4-minute soak with a 30 %-duty matmul co-tenant from ~2:00
#   bash scripts/h200_soak.sh healthy OUTDIR SOAK   # the free check + a soak of SOAK (e.g. 9m) alone
set -uo pipefail
MODE="${1:?usage: $0 faults|healthy OUTDIR [SOAK]}"
OUT="${2:?usage: $0 faults|healthy OUTDIR [SOAK]}"
SOAK="${3:-9m}"
mkdir -p "$OUT/raw"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
(cd .carry && sha256sum -c --quiet SHA256SUMS) || { echo "the carried bundle (.carry/) is missing or damaged" >&2; exit 1; }
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .carry/whl/*.whl
export PYTHONPATH=/tmp/site
N="$(nvidia-smi -L | grep -c '^GPU ')"
V=(python3 -m imagesmith validate local://)
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
run() { # run NAME TIMEOUT CMD...: console in OUT/NAME.txt, exit code and wall time in OUT/commands.txt
    local name=$1 limit=$2; shift 2
    local t0 rc
    t0=$(date +%s%N)
    timeout -k 10 "$limit" "$@" >"$OUT/$name.txt" 2>&1
    rc=$?
    echo "$name: exit $rc, $(( ($(date +%s%N) - t0) / 1000000 )) ms: $*" | tee -a "$OUT/commands.txt"
    grep -E "^(soak|verdict|error|fix):" "$OUT/$name.txt" | cut -c1-600
    return 0
}
nvidia-smi >"$OUT/raw/nvidia-smi-before.txt" 2>&1
python3 -c 'from imagesmith.validate.free import FREE_COMMAND; print(FREE_COMMAND)' >"$OUT/raw/free-command.txt"
bash -c "$(cat "$OUT/raw/free-command.txt")" >"$OUT/raw/free-healthy.txt" 2>&1

if [[ $MODE == healthy ]]; then
    step "healthy soak $SOAK (free check + soak only)"
    run healthy-soak 580 "${V[@]}" --expect-count "$N" -k "test_gpus_free or test_soak" --soak "$SOAK" --report "$OUT/healthy-soak"
    nvidia-smi >"$OUT/raw/nvidia-smi-after.txt" 2>&1
    exit 0
fi

step "the suite without --soak"
run suite 240 "${V[@]}" --expect-count "$N" --expect-gpu H200 --report "$OUT/suite"

step "scaling probe on one GPU (the check itself needs 2+)"
PROBES=/tmp/site/imagesmith/validate/probes
run scaling-1gpu 120 python3 -m torch.distributed.run --nnodes=1 --node_rank=0 --nproc_per_node=1 \
    --master_addr=127.0.0.1 --master_port=29533 "$PROBES/scaling.py" 20 5

step "soak probe, 2 ranks sharing GPU 0 through gloo, 25 s (the multi-rank code path)"
IMAGESMITH_SOAK_RANKS=2 IMAGESMITH_SOAK_BACKEND=gloo run soak-gloo-2ranks 120 python3 "$PROBES/soak.py" 25 5 1

step "fault: another process holds 100 GiB of GPU 0 and idles"
python3 scripts/gpu_load.py hold 0 300 --gib 100 >"$OUT/raw/holder.txt" 2>&1 &
HOLDER=$!
for _ in $(seq 60); do grep -q holding "$OUT/raw/holder.txt" && break; sleep 1; done
bash -c "$(cat "$OUT/raw/free-command.txt")" >"$OUT/raw/free-memory-held.txt" 2>&1
run fault-memory-held 120 "${V[@]}" -k test_gpus_free --report "$OUT/fault-memory-held"
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null

step "fault: a busy GPU (a matmul loop of another process)"
python3 scripts/gpu_load.py matmul 0 60 >"$OUT/raw/busy.txt" 2>&1 &
BUSY=$!
sleep 6
bash -c "$(cat "$OUT/raw/free-command.txt")" >"$OUT/raw/free-busy.txt" 2>&1
run fault-busy 120 "${V[@]}" -k test_gpus_free --report "$OUT/fault-busy"
kill "$BUSY"; wait "$BUSY" 2>/dev/null

step "fault: soak 4m, a matmul co-tenant at 30 % duty arriving ~2 minutes in"
python3 scripts/gpu_load.py matmul 0 400 --duty 0.3 --delay 135 >"$OUT/raw/cotenant.txt" 2>&1 &
LOAD=$!
run fault-soak-cotenant 330 "${V[@]}" -k "test_gpus_free or test_soak" --soak 4m --report "$OUT/fault-soak-cotenant"
kill "$LOAD"; wait "$LOAD" 2>/dev/null
nvidia-smi >"$OUT/raw/nvidia-smi-after.txt" 2>&1
exit 0
