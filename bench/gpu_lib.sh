# bench/gpu_lib.sh — sourced by the bench/gpu_*.sh scripts: the two things they all do.

# single_step_ms LOG: the step time that `mlp_gpu --single` printed into LOG (empty if none)
single_step_ms() { sed -n 's/^single-gpu *step *\([0-9.]*\) ms.*/\1/p' "$1"; }

# ranks_run N BASE CMD ARGS...: N processes of CMD, one per GPU, with torchrun's variables and a
# fresh NCCL id file; rank r's output in BASE.rankR.log; each under `timeout ${RANK_TIMEOUT:-120}`.
# Returns the exit of the last rank that failed (0 if none).
ranks_run() {
    local n=$1 base=$2 id=/tmp/pipepar_bench_$$_$RANDOM.id pids=() rc=0 r p
    shift 2
    for ((r = 0; r < n; r++)); do
        env RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r PIPEPAR_NCCL_ID_FILE=$id timeout "${RANK_TIMEOUT:-120}" "$@" \
            >"$base.rank$r.log" 2>&1 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    rm -f "$id"
    return $rc
}
