#!/usr/bin/env bash
# Injected faults on a GPU host: each must make `imagesmith validate local://` fail, naming the figure, the GPU,
# the expected value and the ratio (issue "Validation that catches degraded GPU hosts"). Run on a lent GPU machine
# from the repository root, as root, after scripts/h200_validate_host.sh (which builds nccl-tests there):
#
#   bash scripts/gpu_host_faults.sh OUTDIR
#
# Faults: a competing matmul on the last GPU, a competing memory copy on GPU 0 (two copies: a third of the
# bandwidth), CUDA_VISIBLE_DEVICES hiding a GPU; with 2+ GPUs also NCCL_P2P_DISABLE=1 and NCCL_MAX_NCHANNELS=2/4
# (the interconnect cut). OUTDIR/faults.txt: one block per fault with the command, the exit code and the failure.
set -uo pipefail
OUT="${1:?usage: $0 OUTDIR}"
N="$(nvidia-smi -L | grep -c '^GPU ')"
mkdir -p "$OUT"
# shellcheck source=scripts/h200_common.sh
source "$(dirname "$0")/h200_common.sh"
[[ -x $HOST_NCCL_TESTS/all_reduce_perf ]] || build_host_nccl_tests "$(nproc)" "$OUT/nccl-tests-build.log"
LAST=$((N - 1))
PERF_K="test_gpu_memory_bandwidth or test_matmul_throughput or test_host_device_bandwidth or test_clocks_under_load"

fault() { # fault NAME ENV-ASSIGNMENTS LOAD -- validate args...: LOAD = "MODE:GPU[,MODE:GPU]" or "-"
    local name=$1 envs=$2 load=$3; shift 4
    local pids=() spec
    if [[ $load != - ]]; then
        IFS=, read -ra specs <<<"$load"
        for spec in "${specs[@]}"; do
            python3 "$(dirname "$0")/gpu_load.py" "${spec%%:*}" "${spec##*:}" 300 &
            pids+=($!)
        done
        sleep 4
    fi
    local cmd="env $envs python3 -m imagesmith validate local:// --nccl-tests $HOST_NCCL_TESTS --report $OUT/$name $*"
    {
        echo "## $name"
        echo "load: $load"
        echo "\$ $cmd"
    } >>"$OUT/faults.txt"
    # shellcheck disable=SC2086
    env $envs python3 -m imagesmith validate local:// --nccl-tests "$HOST_NCCL_TESTS" --report "$OUT/$name" "$@" \
        >"$OUT/$name.txt" 2>&1
    local rc=$?
    [[ ${#pids[@]} -gt 0 ]] && kill "${pids[@]}" 2>/dev/null && wait "${pids[@]}" 2>/dev/null
    {
        echo "exit code: $rc"
        grep -E "^(verdict|FAIL|  what|  fix)|failed|×" "$OUT/$name.txt" | head -12
        echo
    } >>"$OUT/faults.txt"
    echo "$name: exit $rc"
}

: >"$OUT/faults.txt"
fault matmul-load-gpu$LAST "IMAGESMITH_FAULT=1" "matmul:$LAST" -- -k "$PERF_K"
fault copy-load-gpu0 "IMAGESMITH_FAULT=1" "copy:0,copy:0" -- -k "$PERF_K"
fault hidden-gpu "CUDA_VISIBLE_DEVICES=0" - -- --expect-count "$N" -k "test_gpu_inventory or test_torch_sees_all_gpus or $PERF_K"
if [[ $N -ge 2 ]]; then
    fault nccl-p2p-disabled "NCCL_P2P_DISABLE=1" - -- -k test_nccl_allreduce
    fault nccl-2-channels "NCCL_MAX_NCHANNELS=2" - -- -k test_nccl_allreduce
    fault nccl-4-channels "NCCL_MAX_NCHANNELS=4" - -- -k test_nccl_allreduce
    fault matmul-load-gpu$LAST-nccl "IMAGESMITH_FAULT=1" "matmul:$LAST" -- -k test_nccl_allreduce
fi
cat "$OUT/faults.txt"
