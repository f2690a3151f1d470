#!/usr/bin/env bash
# bench/gpu_vshape.sh — V-shaped zero-bubble schedules on 2 GPUs, with even and uneven stages.
#
#     bash bench/gpu_vshape.sh [OUTDIR]        (OUTDIR defaults to $OUT, else bench/out)
#
# The model of bench/gpu_pipeline.sh (H=4096, L=16, 8192 tokens, 8 microbatches, bf16). ZB-V's
# bubble is rank 1's wait for rank 0's first chunk at the start and the matching tail at the end
# (`pipepar simulate --kind zbv --pp 2 --mb 8` gives its bound). Stages of unequal size shrink that wait when the
# first (and last) chunk is small; `--schedule search` lets pp_search pick the order for such a
# layout (a greedy V schedule). Runs, each against the single-GPU step of the same run:
# ZB-V, ZB-V with its ranks' GPUs swapped (does a slow rank follow the GPU or the rank?), the
# search on even and uneven layouts (one with the gradient check; first chunks of 1, 2 and 3 blocks), with and without a memory cap.
# The GPUs' SM clocks and power are logged once a second to OUTDIR/clocks.csv.
# Env: SKIP_BUILD=1 uses binaries already in build/.
set -u
cd "$(dirname "$0")/.."
. bench/gpu_lib.sh
OUTDIR=${1:-${OUT:-bench/out}}
mkdir -p "$OUTDIR"
export NCCL_NVLS_ENABLE=0
MODEL="--hidden 4096 --layers 16 --tokens 8192 --mb 8"
LOG=$OUTDIR/vshape.log
: > "$LOG"
say() { echo "$@" | tee -a "$LOG"; }
say "== $(date -u +%Y-%m-%dT%H:%MZ)  $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -n 1) x $(nvidia-smi -L | wc -l)"
if [ "${SKIP_BUILD:-0}" != 1 ]; then make -s -j16 build/mlp_gpu >"$OUTDIR/build.log" 2>&1 || { cat "$OUTDIR/build.log"; exit 1; }; fi

clocks_start "$OUTDIR"

say "== single GPU"
build/mlp_gpu --single $MODEL 2>&1 | tee "$OUTDIR/single.log" >>"$LOG"
SINGLE_MS=$(single_step_ms "$OUTDIR/single.log")
say "single-GPU step: ${SINGLE_MS:-?} ms"
[ -n "$SINGLE_MS" ] || SINGLE_MS=0

run() {   # run NAME ARGS...
    local name=$1; shift
    say "-- $name"
    launch2 "$name" build/mlp_gpu $MODEL --single-ms "$SINGLE_MS" --timeout 30 "$@" || say "$name: exit $?"
}
run zbv                  --schedule zbv
CUDA_VISIBLE_DEVICES=1,0 run zbv-gpus-swapped --schedule zbv
run search-even          --schedule search --vpp 2
run search-2-6-2-6       --schedule search --layout 'Et*2|t*6|t*2|t*6L' --check
run search-2-6-2-6-cap3  --schedule search --layout 'Et*2|t*6|t*2|t*6L' --max-memory 3
run search-3-5-3-5       --schedule search --layout 'Et*3|t*5|t*3|t*5L'
run search-1-7-1-7       --schedule search --layout 'Et*1|t*7|t*1|t*7L'
run search-1-4-4-7       --schedule search --layout 'Et*1|t*4|t*4|t*7L'
run zbv-2-6-2-6          --schedule zbv --layout 'Et*2|t*6|t*2|t*6L'
run zbv-again            --schedule zbv

say "== summary (step ms, efficiency = single / 2 / step)"
grep -E "^(-- |single-gpu|search:|schedule |pipeline|  efficiency|  simulator|  exposed on|  bound:|  compute busy|  peak|gradient check)" "$LOG" | tee "$OUTDIR/summary.txt"
say "== SM clock (MHz) and power (W) over the run, per GPU: min / median / max"
clocks_summary "$OUTDIR/clocks.csv" | tee -a "$LOG"
